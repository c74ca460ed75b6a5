"""Fleets for the scheduling engine's tests: host states made by hand, random fleets (hypothesis),
and a straightforward reference of the failure tolerance."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from tests.support.factories import GIB, domain, host, local_disk
from virtcap.model.facts import DomainFacts, HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    HostState,
    Multipliers,
    evacuation_order,
    host_state,
    schedule,
)

FLAT = HostPolicy(
    allocation_ratios={Resource.VCPU: 1.0, Resource.MEMORY: 1.0, Resource.DISK: 1.0},
    reserved={},
)


STACK = Multipliers(ram=-1.0, cpu=-1.0, disk=-1.0)


def guest(name: str, memory_gib: int, vcpus: int = 1, disk_gib: int = 0) -> DomainFacts:
    disks = (local_disk(disk_gib * GIB),) if disk_gib else ()
    return domain(name, vcpus=vcpus, memory=memory_gib * GIB, disks=disks)


def state(
    name: str,
    cpus: int = 4,
    memory_gib: int = 16,
    disk_gib: int = 100,
    domains: tuple[DomainFacts, ...] = (),
    policy: HostPolicy = FLAT,
    claimed: dict[Resource, int] | None = None,
    up: bool = True,
) -> HostState:
    facts = host(cpus=cpus, memory=memory_gib * GIB, disk=disk_gib * GIB, domains=domains)
    pending = (Demand(claimed),) if claimed else ()
    return host_state(name, facts, policy, claimed=claimed, pending=pending, up=up)


MULTIPLIERS = st.builds(
    Multipliers,
    st.sampled_from([-1.0, 0.0, 1.0, 2.5]),
    st.sampled_from([-1.0, 0.0, 1.0]),
    st.sampled_from([-2.0, 0.0, 1.0]),
)


Shapes = list[tuple[int, int, int, list[tuple[int, int, int]], bool]]
"""Per host: CPUs, GiB of memory and of disk, its domains (vCPUs, memory GiB, disk GiB), up."""


DEFAULTS = HostPolicy()
"""Nova's defaults: 4.0 CPU ratio, 512 MiB of memory reserved."""


def fleet_facts(shapes: Shapes) -> dict[str, HostFacts]:
    return {
        f"h{index}": host(
            cpus=cpus,
            memory=memory * GIB,
            disk=disk * GIB,
            domains=tuple(guest(f"d{n}", m, v, d) for n, (v, m, d) in enumerate(domains)),
        )
        for index, (cpus, memory, disk, domains, _up) in enumerate(shapes)
    }


def fleet(shapes: Shapes) -> list[HostState]:
    facts = fleet_facts(shapes)
    return [
        host_state(name, facts[name], DEFAULTS, up=shape[4])
        for name, shape in zip(facts, shapes, strict=True)
    ]


SHAPES = st.sampled_from(
    [(8, 32, 200), (8, 32, 200), (16, 64, 400), (4, 16, 100), (16, 32, 100), (32, 128, 80)]
)
"""Few host shapes, repeated: hosts of equal weights, whose ties only names break."""


DOMAINS = st.sampled_from([(1, 2, 20), (2, 4, 40), (4, 8, 80), (1, 2, 0), (8, 16, 160), (2, 8, 10)])


LARGER = st.lists(
    st.tuples(
        SHAPES,
        st.lists(DOMAINS, max_size=6),
        st.sampled_from([True, True, True, True, False]),  # up
    ),
    min_size=1,
    max_size=12,
)


def larger_fleet(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
) -> list[HostState]:
    return fleet([(*shape, domains, up) for shape, domains, up in hosts])


def reference_tolerated(hosts: Sequence[HostState], bound: int, multipliers: Multipliers) -> int:
    """How many of the hosts with the most allocated memory the fleet can lose together, every
    domain of theirs through `schedule` on the others, largest first."""

    def memory(state: HostState) -> int:
        return state.capacity.resources[Resource.MEMORY].used

    largest = sorted(hosts, key=lambda state: (-memory(state), state.name))
    tolerated = 0
    for lost in range(1, min(bound, len(hosts)) + 1):
        gone = {state.name for state in largest[:lost]}
        remaining = tuple(state for state in hosts if state.name not in gone)
        guests = [g for state in largest[:lost] for g in state.guests]
        placed_all = True
        for g in evacuation_order(guests):
            result = schedule(remaining, g.demand, 1, multipliers=multipliers)
            if result.placed:
                remaining = result.states
            else:
                placed_all = False
        if not placed_all:
            break
        tolerated = lost
    return tolerated


CRAMPED = st.sampled_from([(4, 16, 100), (8, 32, 200), (16, 32, 100), (8, 16, 60), (32, 128, 400)])
"""Mostly small hosts, and a large one now and then: the few domains that find a host consume it,
so that its refusals change during the evacuation."""


CROWDS = st.lists(
    st.sampled_from([(4, 8, 80), (8, 16, 160), (2, 8, 10), (1, 2, 20), (8, 32, 40), (2, 12, 0)]),
    min_size=1,
    max_size=8,
)


FULL = st.lists(
    st.tuples(CRAMPED, CROWDS, st.sampled_from([True, True, True, False])), min_size=1, max_size=10
)
"""Fleets whose hosts hold more than they can (the domains are counted whatever the limits), some
of them down: most domains of an evacuation find no host."""
