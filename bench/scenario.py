"""What-if scenarios (`--only scenario`): docs/scenarios.md's `virtcap plan scenario` on the
1,000 x 50 fleet of the failure tolerance's benchmark (bench/tolerance.py's facts, each hypervisor
with Nova's default policy), in one availability zone and in the two zones and 20 racks of the
packing benchmark (bench/packing.py), the demo's five flavors, a reserve of one hypervisor.

1. A scenario adding 100 hypervisors of one SKU (in two zones: 50 in each) and placing 5,000
   instances (1,000 of each flavor): service/scenarios.py's `compute_scenario` end to end, then
   its parts one by one (the scenario's fleet: policies, hypervisors added, demand placed; the
   answers before; the answers after).
2. `--solve-for add_hypervisors` on a demand the fleet cannot hold without buying: the same
   fleet with half its memory (384, 512 or 768 GiB for about 620 GiB allocated: two thirds of
   the hypervisors beyond their limit) and the same 5,000 instances; the count found and the
   counts tried.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace

from harness import cell, print_table
from packing import RACKS, ZONES
from stranded import demo_flavors
from tolerance import tolerance_facts
from virtcap.fleet.scenario import ScenarioSettings, fleet_answers, scenario_fleet
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import GIB
from virtcap.model.scenario.hosts import PlannedHost
from virtcap.model.scenario.sku import Sku, sku_facts
from virtcap.model.scenario.spec import AddedHypervisors, DemandItem, GroupKey, Scenario
from virtcap.model.scheduler import SPREAD
from virtcap.service.scenarios import compute_scenario

ADDED = 100
PER_FLAVOR = 1_000
RESERVE = 1
FAILURE_BOUND = 3
"""The configuration's default `scheduler.failure_tolerance.max_host_failures`."""
SKU = Sku(cpus=128, memory_bytes=1536 * GIB, disk_bytes=8192 * GIB, numa_cells=2)
"""The fleet's largest hypervisor, as bought: 128 threads, 1.5 TiB, 8 TiB of instance disk."""
PARTS = (
    "compute_scenario (end to end)",
    "the scenario's fleet (demand placed)",
    "answers before",
    "answers after",
)


def scenario_hosts(
    hypervisors: int, domains: int, *, zoned: bool, memory_share: float = 1.0, seed: int = 5
) -> list[PlannedHost]:
    """bench/tolerance.py's fleet (same seed, same facts) as a scenario starts from it; `zoned`:
    in bench/packing.py's zones and racks; `memory_share`: each hypervisor's memory scaled."""
    rng = random.Random(seed)
    hosts = []
    for index in range(hypervisors):
        name = f"compute-{index:04d}"
        facts = tolerance_facts(rng, name, domains)
        if memory_share != 1.0:
            facts = replace(facts, memory_bytes=int(facts.memory_bytes * memory_share))
        groups: tuple[GroupKey, ...] = ()
        if zoned:
            groups = (
                ("availability_zone", f"az-{index * ZONES // hypervisors + 1}"),
                ("rack", f"r{index * RACKS // hypervisors + 1:02d}"),
            )
        hosts.append(PlannedHost(name, facts, HostPolicy(), groups))
    return hosts


def added(count: int, *, zoned: bool) -> tuple[AddedHypervisors, ...]:
    """`count` hypervisors of the SKU; `zoned`: half in each of the first two zones, a rack of their own."""
    if not zoned:
        return (AddedHypervisors(count, "new", sku_facts("new", SKU), HostPolicy()),)
    return tuple(
        AddedHypervisors(
            count // ZONES,
            f"new-az{zone}",
            sku_facts(f"new-az{zone}", SKU),
            HostPolicy(),
            (("availability_zone", f"az-{zone}"), ("rack", f"new-{zone}")),
        )
        for zone in range(1, ZONES + 1)
    )


def bench_scenario(*, zoned: bool, count: int = ADDED) -> tuple[Scenario, ScenarioSettings]:
    flavors = demo_flavors()
    demand = tuple(DemandItem(name, flavor, PER_FLAVOR) for name, flavor in flavors.items())
    settings = ScenarioSettings(flavors, SPREAD, RESERVE, FAILURE_BOUND)
    return Scenario(add=added(count, zoned=zoned), demand=demand), settings


def _timed_scenario(runs: int, hypervisors: int, domains: int, *, zoned: bool) -> tuple[str, ...]:
    """compute_scenario end to end as the command runs it (the answers before in a process of their
    own beside the rest), then its parts one by one, each alone: the scenario's fleet, the answers
    before, the answers after."""
    hosts = scenario_hosts(hypervisors, domains, zoned=zoned)
    scenario, settings = bench_scenario(zoned=zoned)
    spent: dict[str, list[float]] = {part: [] for part in PARTS}
    placed = unplaced = 0
    for _ in range(runs):
        began = time.perf_counter()
        answer = compute_scenario(hosts, scenario, settings, None)
        spent[PARTS[0]].append(time.perf_counter() - began)
        placed = sum(entry.count for entry in answer.placed)
        unplaced = sum(entry.count for entry in answer.unplaced)
        began = time.perf_counter()
        _, fleet = scenario_fleet(hosts, scenario, settings.multipliers)
        spent[PARTS[1]].append(time.perf_counter() - began)
        for part, states in ((PARTS[2], [host.state() for host in hosts]), (PARTS[3], fleet.states)):
            began = time.perf_counter()
            fleet_answers(states, settings, RESERVE)
            spent[part].append(time.perf_counter() - began)
    where = f"{ZONES} zones, {RACKS} racks" if zoned else "one zone"
    return (
        where,
        f"{placed:,} placed, {unplaced:,} unplaced",
        *(cell(spent[part], " s", 1) for part in PARTS),
        "< 60 s",
    )


def _timed_solve(runs: int, hypervisors: int, domains: int) -> tuple[str, ...]:
    hosts = scenario_hosts(hypervisors, domains, zoned=False, memory_share=0.5)
    scenario, settings = bench_scenario(zoned=False, count=1)
    seconds: list[float] = []
    found: int | None = None
    tries: dict[str, bool] = {}
    for _ in range(runs):
        began = time.perf_counter()
        answer = compute_scenario(hosts, scenario, settings, "add_hypervisors")
        seconds.append(time.perf_counter() - began)
        found, tries = answer.solved_add_hypervisors, answer.tries
    tried = ", ".join(f"{count} {'fits' if fitted else 'no'}" for count, fitted in tries.items())
    return (str(found), f"{len(tries)}: {tried}", cell(seconds, " s", 1), "< 5 min")


def scenario(runs: int, hypervisors: int, domains: int) -> None:
    for zoned in (False, True):  # a table each: the zoned one takes longest
        print_table(
            f"plan scenario on {hypervisors:,} hypervisors x {domains} domains, {os.cpu_count()} CPUs "
            f"(end to end: the answers before in a second process; the parts each alone): {ADDED} "
            f"hypervisors added (128 threads, 1.5 TiB, 8 TiB), {PER_FLAVOR:,} "
            f"instances of each of the demo's five flavors placed, reserve {RESERVE}",
            ("fleet", "demand", *PARTS, "target"),
            [_timed_scenario(runs, hypervisors, domains, zoned=zoned)],
        )
    print_table(
        f"plan scenario --solve-for add_hypervisors: the same {hypervisors:,} hypervisors with half "
        f"their memory, the same demand, the same SKU, reserve {RESERVE}",
        ("hypervisors to add", "counts tried", "compute_scenario (the search and its answers)", "target"),
        [_timed_solve(runs, hypervisors, domains)],
    )
