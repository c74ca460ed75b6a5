"""Stranded capacity (model/packing/stranded.py): hand-worked hypervisors, and an independent brute
force that enumerates every packing of small random hosts and flavors.

The brute force shares no code with the module: it has its own reading of Placement's unit rules
(no inventory, min_unit, max_unit, step_size) and of the causes' definition (docs/packing.md), and
enumerates every multiset of flavor counts.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace

import pytest

from tests.support.factories import GIB, MIB, domain, host, local_disk
from tests.support.hosts import configured, numa_cell, with_cells
from virtcap.model.capacity import HostCapacity, ResourceCapacity, host_capacity
from virtcap.model.facts import DomainState
from virtcap.model.host_fit import Demand
from virtcap.model.packing.stranded import (
    StrandedCache,
    fleet_stranded_capacity,
    stranded_capacity,
)
from virtcap.model.policy import HostPolicy, Inventory
from virtcap.model.resources import Resource
from virtcap.model.scheduler import host_state

VCPU, MEMORY, DISK = Resource.VCPU, Resource.MEMORY, Resource.DISK
FPGA = Resource.custom_class("CUSTOM_FPGA")
PLAIN = HostPolicy(
    allocation_ratios={VCPU: 1.0, MEMORY: 1.0, DISK: 1.0},
    reserved={},
)


def flavor(vcpus: int, memory_gib: int, disk_gib: int, **more: int) -> Demand:
    request = {VCPU: vcpus, MEMORY: memory_gib * GIB, DISK: disk_gib * GIB}
    request.update({Resource.custom_class(name): amount for name, amount in more.items()})
    return Demand(request)


SMALL = flavor(1, 2, 20)


# --- hand-worked hypervisors ---------------------------------------------------------------------


def test_two_tib_free_but_nothing_fits_the_vcpus_strand_the_memory() -> None:
    # 16 CPUs all taken by one guest of 256 GiB: 2 TiB of memory and 10,000 GiB of disk free,
    # and not one instance of a 1-vCPU flavor fits
    guest = domain("big", vcpus=16, memory=256 * GIB)
    facts = host(cpus=16, memory=2304 * GIB, disk=10_000 * GIB, domains=(guest,))
    capacity = host_capacity(facts, PLAIN)
    stranded = stranded_capacity(capacity, {"m1.small": SMALL})
    assert stranded.amounts == {VCPU: 0, MEMORY: 2048 * GIB, DISK: 10_000 * GIB}
    assert stranded.causes == {MEMORY: frozenset({VCPU}), DISK: frozenset({VCPU})}


def test_the_memory_strands_the_disk() -> None:
    # 4 GiB of memory free: two m1.small (2 GiB, 20 GiB of disk each) take 40 of 1,000 GiB of disk
    # and 2 of the 63 free vCPUs
    guest = domain("g", vcpus=1, memory=60 * GIB)
    facts = host(cpus=64, memory=64 * GIB, disk=1000 * GIB, domains=(guest,))
    stranded = stranded_capacity(host_capacity(facts, PLAIN), {"m1.small": SMALL})
    assert stranded.amounts == {VCPU: 61, MEMORY: 0, DISK: 960 * GIB}
    assert stranded.causes == {VCPU: frozenset({MEMORY}), DISK: frozenset({MEMORY})}


def test_nothing_is_stranded_where_a_small_flavor_fills_everything() -> None:
    facts = host(cpus=8, memory=8 * GIB, disk=8 * GIB)
    stranded = stranded_capacity(host_capacity(facts, PLAIN), {"tiny": flavor(1, 1, 1), "m1.small": SMALL})
    assert stranded.amounts == {VCPU: 0, MEMORY: 0, DISK: 0}
    assert stranded.causes == {}


def test_a_remainder_below_every_flavors_share_is_stranded_by_its_own_class() -> None:
    # 5 GiB free for flavors of 2 and 4 GiB: 4 GiB at most, 1 GiB left that no flavor takes
    facts = host(cpus=64, memory=5 * GIB, disk=1000 * GIB)
    flavors = {"two": flavor(1, 2, 0), "four": flavor(1, 4, 0)}
    stranded = stranded_capacity(host_capacity(facts, PLAIN), flavors)
    assert stranded.amounts[MEMORY] == 1 * GIB
    assert stranded.causes[MEMORY] == {MEMORY}
    assert stranded.amounts[DISK] == 0  # no flavor asks for disk: nothing strands it


def test_the_best_packing_mixes_flavors() -> None:
    # 10 vCPUs and 24 GiB: "cpu" (4 vCPUs, 2 GiB) and "mem" (1 vCPU, 8 GiB). Memory taken at most:
    # 2 mem + 2 cpu = 10 vCPUs, 20 GiB, or 3 mem (3 vCPUs, 24 GiB): 24 GiB, nothing stranded.
    # vCPUs taken at most: 2 cpu + 2 mem = 10; or 1 mem + 2 cpu = 9... 10, nothing stranded.
    facts = host(cpus=10, memory=24 * GIB, disk=1000 * GIB)
    flavors = {"cpu": flavor(4, 2, 0), "mem": flavor(1, 8, 0)}
    stranded = stranded_capacity(host_capacity(facts, PLAIN), flavors)
    assert stranded.amounts == {VCPU: 0, MEMORY: 0, DISK: 0}


def fpga_capacity(**inventory: int) -> HostCapacity:
    policy = replace(PLAIN, inventories={FPGA: Inventory(**inventory)})
    return host_capacity(host(cpus=64, memory=256 * GIB, disk=1000 * GIB), policy)


def test_step_size_leaves_a_flavor_out_and_its_class_stranded() -> None:
    # 10 FPGAs in steps of 4: a flavor asking for 2 is refused whatever is free
    capacity = fpga_capacity(total=10, step_size=4)
    stranded = stranded_capacity(capacity, {"f2": flavor(1, 1, 0, CUSTOM_FPGA=2)})
    assert stranded.amounts[FPGA] == 10
    assert stranded.causes[FPGA] == {FPGA}
    # one asking for 4 takes 8 of them: the 2 left are below its share
    stranded = stranded_capacity(capacity, {"f4": flavor(1, 1, 0, CUSTOM_FPGA=4)})
    assert stranded.amounts[FPGA] == 2
    assert stranded.causes[FPGA] == {FPGA}


def test_max_unit_leaves_a_flavor_out_and_the_others_decide() -> None:
    # max_unit 4: "f8" never fits; "f3" takes 9 of 10, the one left below its share
    capacity = fpga_capacity(total=10, max_unit=4)
    flavors = {"f8": flavor(1, 1, 0, CUSTOM_FPGA=8), "f3": flavor(1, 1, 0, CUSTOM_FPGA=3)}
    stranded = stranded_capacity(capacity, flavors)
    assert stranded.amounts[FPGA] == 1
    assert stranded.causes[FPGA] == {FPGA}
    # without "f3", f8 alone: every FPGA stranded, by the class's max_unit
    stranded = stranded_capacity(capacity, {"f8": flavors["f8"]})
    assert stranded.amounts[FPGA] == 10
    assert stranded.causes[FPGA] == {FPGA}


# Two cells of 4 CPUs and 8 GiB in small pages, nothing reserved (tests/model/test_capacity_within.py)
NUMA_CONFIG = """
hypervisors:
  - {name: small, uri: "test:///default", reserved: {memory: 0}, allocation_ratios: {vcpu: 1.0}}
flavors:
  - {name: m3, vcpu: 1, memory: 3GiB}
  - {name: m3.small, vcpu: 1, memory: 3GiB, extra_specs: {"hw:mem_page_size": small}}
"""


def test_a_numa_bound_flavor_takes_only_what_fits_in_its_cells() -> None:
    policy, flavors = configured(NUMA_CONFIG)
    facts = with_cells(host(), (numa_cell(0, range(0, 4), 8), numa_cell(1, range(4, 8), 8)))
    capacity = host_capacity(facts, policy)
    # m3.small: 2 per cell of 8 GiB, 4 in all (12 GiB) where the host's 16 GiB would take 5
    alone = stranded_capacity(capacity, {"m3.small": flavors["m3.small"]})
    assert alone.amounts[MEMORY] == 4 * GIB
    assert alone.amounts[VCPU] == 4
    assert alone.causes == {MEMORY: frozenset(), VCPU: frozenset()}  # its cells, not a class
    # with m3 (no topology) beside it: 5 of 3 GiB, 1 GiB left below its share
    both = stranded_capacity(capacity, flavors)
    assert both.amounts[MEMORY] == 1 * GIB
    assert both.causes[MEMORY] == {MEMORY}
    assert both.amounts[VCPU] == 3
    assert both.causes[VCPU] == {MEMORY}


def test_hypervisors_down_stale_or_in_maintenance_are_left_out() -> None:
    facts = host(cpus=8, memory=8 * GIB, disk=8 * GIB, domains=(domain("g", disks=(local_disk(GIB),)),))
    states = [
        host_state("ok", facts, PLAIN),
        replace(host_state("down", facts, PLAIN), up=False),
        replace(host_state("stale", facts, PLAIN), stale=True),
        host_state("resting", facts, PLAIN, maintenance="disabled"),
    ]
    assert set(fleet_stranded_capacity(states, {"m1.small": SMALL})) == {"ok"}
    with pytest.raises(ValueError, match="maintenance"):
        stranded_capacity(states[3].capacity, {"m1.small": SMALL})


def test_the_cache_solves_identical_hypervisors_once() -> None:
    facts = host(cpus=64, memory=64 * GIB, disk=1000 * GIB, domains=(domain("g", memory=60 * GIB),))
    states = [host_state(f"h{index}", facts, PLAIN) for index in range(5)]
    cache = StrandedCache()
    answers = fleet_stranded_capacity(states, {"m1.small": SMALL}, cache=cache)
    assert len({answer.amounts[DISK] for answer in answers.values()}) == 1
    assert cache.hits >= 4 * cache.misses


# --- brute force ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inventory4:
    """One class of a random host, in Placement's units: its free amount and unit rules."""

    resource: Resource
    limit: int
    used: int
    min_unit: int = 1
    max_unit: int | None = None
    step_size: int = 1


def random_case(rng: random.Random) -> tuple[list[Inventory4], dict[str, dict[Resource, int]]]:
    """A host of up to four classes with little free, and up to four flavors (some whole
    multiples of another), each amount in Placement's units."""
    inventories = [
        Inventory4(VCPU, rng.randint(0, 10), rng.randint(0, 4)),
        Inventory4(MEMORY, rng.randint(0, 12), rng.randint(0, 3)),
        Inventory4(DISK, rng.choice((0, rng.randint(0, 40))), rng.randint(0, 10)),
    ]
    if rng.random() < 0.5:
        inventories.append(
            Inventory4(
                FPGA,
                rng.randint(0, 8),
                rng.randint(0, 2),
                min_unit=rng.choice((1, 1, 2)),
                max_unit=rng.choice((None, 2, 3)),
                step_size=rng.choice((1, 1, 2)),
            )
        )
    flavors: dict[str, dict[Resource, int]] = {}
    for index in range(rng.randint(1, 4)):
        if flavors and rng.random() < 0.4:
            base = rng.choice(list(flavors.values()))
            k = rng.randint(1, 3)
            flavors[f"f{index}"] = {resource: k * amount for resource, amount in base.items()}
            continue
        request = {VCPU: rng.randint(0, 3), MEMORY: rng.randint(0, 4)}
        if rng.random() < 0.7:
            request[DISK] = rng.randint(0, 12)
        if rng.random() < 0.4:
            request[FPGA] = rng.randint(1, 4)
        flavors[f"f{index}"] = request
    return inventories, flavors


def unit_of(inventory: Inventory4) -> int:
    return inventory.resource.placement_unit


def as_capacity(inventories: list[Inventory4]) -> HostCapacity:
    """The classes as ResourceCapacity in the class's own unit (bytes for memory and disk)."""
    running = DomainState.RUNNING
    return HostCapacity(
        resources={
            inv.resource: ResourceCapacity(
                resource=inv.resource,
                total=inv.limit * inv.resource.placement_unit,
                reserved=0,
                allocation_ratio=1.0,
                allocated_by_state={running: inv.used * inv.resource.placement_unit},
                counted_states=frozenset({running}),
                min_unit=inv.min_unit,
                step_size=inv.step_size,
                declared_max_unit=None if inv.max_unit is None else inv.max_unit * unit_of(inv),
            )
            for inv in inventories
        },
        domains_by_state={},
        schedulable={},
    )


def admissible(request: dict[Resource, int], inventories: dict[Resource, Inventory4]) -> set[Resource]:
    """The classes whose rules refuse one instance: none of it, or the amount outside the rules."""
    refusing = set()
    for resource, amount in request.items():
        if amount <= 0:
            continue
        inv = inventories.get(resource)
        if inv is None or inv.limit == 0:
            refusing.add(resource)
            continue
        largest = inv.limit if inv.max_unit is None else inv.max_unit
        if amount > largest or amount < inv.min_unit or amount % inv.step_size:
            refusing.add(resource)
    return refusing


def brute_force(
    inventories: list[Inventory4], flavors: dict[str, dict[Resource, int]]
) -> tuple[dict[Resource, int], dict[Resource, frozenset[Resource]]]:
    """Stranded amounts (in Placement's units) and causes, by enumerating every packing."""
    by_class = {inv.resource: inv for inv in inventories}
    free = {inv.resource: max(inv.limit - inv.used, 0) for inv in inventories}
    refusing = {name: admissible(request, by_class) for name, request in flavors.items()}
    usable = [name for name in sorted(flavors) if not refusing[name]]
    ranges = []
    for name in usable:
        request = flavors[name]
        most = min((free[r] // a for r, a in request.items() if a > 0), default=0)
        ranges.append(range(most + 1))
    packings = []
    for counts in itertools.product(*ranges):
        taken = dict.fromkeys(free, 0)
        for name, count in zip(usable, counts, strict=True):
            for resource, amount in flavors[name].items():
                taken[resource] += count * amount
        if all(taken[r] <= free[r] for r in free):
            packings.append(taken)
    amounts: dict[Resource, int] = {}
    causes: dict[Resource, frozenset[Resource]] = {}
    for inv in inventories:
        r = inv.resource
        askers = [name for name in flavors if flavors[name].get(r, 0) > 0]
        if inv.limit == 0:
            continue  # no inventory: not reported
        if inv.limit - inv.used <= 0 or not askers:
            amounts[r] = 0
            continue
        best = max(p[r] for p in packings)
        amounts[r] = free[r] - best
        if amounts[r] == 0:
            continue
        counted = [flavors[name] for name in askers if not refusing[name]]
        if not counted:
            causes[r] = frozenset().union(*(refusing[name] for name in askers))
            continue
        maximal = [p for p in packings if p[r] == best]
        causes[r] = frozenset(
            s
            for s in free
            if all(all(free[s] - p[s] < request.get(s, 0) for request in counted) for p in maximal)
        )
    return amounts, causes


def in_units(amounts: dict[Resource, int]) -> dict[Resource, int]:
    return {resource: amount // resource.placement_unit for resource, amount in amounts.items()}


def with_units(request: dict[Resource, int]) -> Demand:
    return Demand({resource: amount * resource.placement_unit for resource, amount in request.items()})


@pytest.mark.parametrize("solver", ["search", "milp"])
@pytest.mark.parametrize("seed", range(200))
def test_agrees_with_a_brute_force_on_random_hosts(seed: int, solver: str) -> None:
    inventories, flavors = random_case(random.Random(seed))
    capacity = as_capacity(inventories)
    # node limit 0: every problem goes to HiGHS
    limit = 0 if solver == "milp" else 1_000_000
    found = stranded_capacity(
        capacity, {name: with_units(r) for name, r in flavors.items()}, search_node_limit=limit
    )
    amounts, causes = brute_force(inventories, flavors)
    assert in_units(dict(found.amounts)) == amounts
    assert found.causes == causes


def test_the_brute_force_itself_on_a_case_worked_by_hand() -> None:
    # 10 vCPUs, 12 MiB: a (3 vCPUs, 4 MiB) and b (1 vCPU, 5 MiB). Memory: 3a = 12, all of it.
    # vCPUs: 3a = 9 (12 MiB), 2a + 1b needs 13 MiB: 9 at most, 1 left, which b would take but
    # for memory (0 left, below a's 4 and b's 5); 1 vCPU is not below b's 1: memory alone
    inventories = [Inventory4(VCPU, 10, 0), Inventory4(MEMORY, 12, 0)]
    flavors = {"a": {VCPU: 3, MEMORY: 4}, "b": {VCPU: 1, MEMORY: 5}}
    amounts, causes = brute_force(inventories, flavors)
    assert amounts == {VCPU: 1, MEMORY: 0}
    assert causes == {VCPU: frozenset({MEMORY})}
    found = stranded_capacity(as_capacity(inventories), {n: with_units(r) for n, r in flavors.items()})
    assert in_units(dict(found.amounts)) == amounts
    assert found.causes == causes


def test_memory_in_mib_not_whole_gib() -> None:
    # free 3,000 MiB, a flavor of 1,000 MiB: all of it taken
    facts = host(cpus=8, memory=3000 * MIB, disk=None)
    stranded = stranded_capacity(host_capacity(facts, PLAIN), {"m": Demand({VCPU: 1, MEMORY: 1000 * MIB})})
    assert stranded.amounts[MEMORY] == 0
    assert stranded.amounts[VCPU] == 5
    assert stranded.causes[VCPU] == {MEMORY}
