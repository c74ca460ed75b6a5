"""The weighers: virtcap's weighing against Nova's own, on generated host states.

Each case is a small fleet of generated hypervisors (CPUs, memory, storage, domains, Nova's or
other ratios and reserved amounts; now and then two of the same shape, a host whose domains
exceed its memory or disk, one whose storage was not found) and multipliers for the RAM, CPU and
disk weighers (Nova's 1.0, 0, negative ones that stack, fractions). virtcap derives each host's
legacy values (free_ram_mb, vcpus_total, vcpus_used, cpu_allocation_ratio, free_disk_mb) from its
capacity and weighs the hosts (`scheduler.weigh`); the oracle gives the same values to Nova's
scheduler HostState objects and weighs them with Nova's RAM, CPU and disk weighers through
`HostWeightHandler.get_weighed_objects`, the multipliers set as nova.conf options. Compared: each
host's weight (exactly: both sum the same products in the same order) and the order (the hosts
are given to Nova by name, so that its stable sort breaks ties by name, as virtcap does).

`nova.weights.normalize` itself is compared on generated lists (minval 0, as the weighers set
it, and None), with equal values, zeros and negative values among them.

What this does not compare: how the legacy values are derived from the capacity (the resource
tracker's bookkeeping, see `HostState`), nor the filters.
"""

from __future__ import annotations

import random
from typing import Any

from tests.conformance.upstream import GIB, MIB, Oracle, agree, generator
from tests.support.factories import domain, host, local_disk
from virtcap.model.facts import DomainFacts
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import HostState, Multipliers, host_state, normalize, weigh

FLEETS = 300
LISTS = 300
MULTIPLIER_VALUES = (1.0, 1.0, 0.0, -1.0, 2.5, -0.5, 0.3)


def random_policy(rng: random.Random) -> HostPolicy:
    if rng.random() < 0.4:
        return HostPolicy()  # Nova's defaults
    return HostPolicy(
        allocation_ratios={
            Resource.VCPU: rng.choice((1.0, 2.0, 4.0, 16.0, 1.5)),
            Resource.MEMORY: rng.choice((1.0, 1.5, 0.9)),
            Resource.DISK: rng.choice((1.0, 2.0)),
        },
        reserved={
            Resource.VCPU: rng.choice((0, 0, 2)),
            Resource.MEMORY: rng.choice((0, 512, 4096, 1000)) * MIB,
            Resource.DISK: rng.choice((0, 1536, 10240, 700)) * MIB,
        },
    )


def random_domains(rng: random.Random, cpus: int, memory_gib: int, disk_gib: int) -> tuple[DomainFacts, ...]:
    found = []
    for index in range(rng.randint(0, 6)):
        disk = rng.choice((0, 10, 20, 40, disk_gib // 2 + 1))
        found.append(
            domain(
                f"d{index}",
                vcpus=rng.randint(1, max(cpus, 1)),
                memory=rng.choice((1, 2, 4, 8, memory_gib // 2 + 1)) * GIB + rng.choice((0, 0, 300 * MIB)),
                disks=(local_disk(disk * GIB),) if disk else (),
            )
        )
    return tuple(found)


def random_fleet(rng: random.Random) -> list[HostState]:
    hosts: list[HostState] = []
    for index in range(rng.randint(1, 8)):
        if hosts and rng.random() < 0.2:  # a twin of an earlier host
            hosts.append(HostState(f"h{index}", rng.choice(hosts).capacity))
            continue
        cpus = rng.choice((2, 4, 8, 16, 48, 64))
        memory_gib = rng.choice((4, 16, 32, 64, 256))
        disk_gib = rng.choice((20, 100, 500, 2000))
        policy = random_policy(rng)
        facts = host(
            cpus=cpus,
            memory=memory_gib * GIB,
            disk=None if rng.random() < 0.1 else disk_gib * GIB,
            domains=random_domains(rng, cpus, memory_gib, disk_gib),
        )
        hosts.append(host_state(f"h{index}", facts, policy))
    return hosts


def described(state: HostState) -> dict[str, Any]:
    """The attributes Nova's weighers read, as virtcap derives them."""
    return {
        "name": state.name,
        "free_ram_mb": state.free_ram_mb,
        "vcpus_total": state.vcpus_total,
        "vcpus_used": state.vcpus_used,
        "cpu_allocation_ratio": state.cpu_allocation_ratio,
        "free_disk_mb": state.free_disk_mb or 0.0,
    }


def test_weighed_hosts_are_novas(oracle: Oracle) -> None:
    rng = generator("weights")
    cases = []
    for _ in range(FLEETS):
        fleet = random_fleet(rng)
        multipliers = Multipliers(*(rng.choice(MULTIPLIER_VALUES) for _ in range(3)))
        cases.append((fleet, multipliers))
    questions = [
        {
            "op": "weights",
            "hosts": [described(state) for state in sorted(fleet, key=lambda s: s.name)],
            "multipliers": {"ram": m.ram, "cpu": m.cpu, "disk": m.disk},
        }
        for fleet, m in cases
    ]
    answers = oracle.ask(questions)
    mismatches = []
    compared = 0
    for (fleet, multipliers), answer in zip(cases, answers, strict=True):
        ours = [(w.host, w.weight) for w in weigh(fleet, multipliers)]
        theirs = [(item["host"], item["weight"]) for item in answer["weighed"]]
        compared += 1
        if ours != theirs:
            mismatches.append(
                f"{multipliers}: virtcap {ours}, Nova {theirs} for {questions[compared - 1]['hosts']}"
            )
    agree("weighed fleets", mismatches, compared)
    # the generated fleets must reach the cases that matter: ties, clipping, stacking
    assert any(
        len({w for _, w in ours}) < len(ours)
        for ours in ([(w.host, w.weight) for w in weigh(f, m)] for f, m in cases)
    )
    assert any(s.free_ram_mb < 0 or (s.free_disk_mb or 0) < 0 for fleet, _ in cases for s in fleet)
    assert any(m.ram < 0 for _, m in cases)


def test_normalize_is_novas(oracle: Oracle) -> None:
    rng = generator("normalize")
    lists: list[tuple[list[float], float | None]] = []
    for _ in range(LISTS):
        size = rng.randint(0, 6)
        pool = [0.0, 1.0, 3.0, 1024.0, 0.5, -2.0, 7.25]
        if rng.random() < 0.3:
            values = [rng.choice(pool)] * size  # all equal
        else:
            values = [
                rng.choice(pool) if rng.random() < 0.5 else rng.uniform(-100, 10000) for _ in range(size)
            ]
        minval = 0.0 if rng.random() < 0.7 else None
        if minval is not None:
            values = [max(value, minval) for value in values]  # the weighers clip before normalizing
        lists.append((values, minval))
    asked = [{"values": values, "minval": minval} for values, minval in lists]
    (answer,) = oracle.ask([{"op": "weights", "lists": asked}])
    mismatches = [
        f"{values} (minval {minval}): virtcap {ours}, Nova {theirs}"
        for (values, minval), theirs in zip(lists, answer["normalized"], strict=True)
        if (ours := normalize(values, minval)) != theirs
    ]
    agree("normalized lists", mismatches, len(lists))
