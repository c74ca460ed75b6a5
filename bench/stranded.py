"""Stranded capacity of every hypervisor, computed in process (`--only stranded`): the 1,000 x 50
fleet of bench/tolerance.py with the demo's flavor mix (fleetgen's flavors), from a cold cache,
then again with the cache of the first run (what a recomputation after one change finds)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from harness import Table, cell, print_table
from tolerance import tolerance_fleet
from virtcap.demo.fleetgen import FLAVORS
from virtcap.model.discovery import flavor_demand
from virtcap.model.facts import NovaFlavor
from virtcap.model.host_fit import Demand
from virtcap.model.packing.stranded import StrandedCache, StrandedCapacity, fleet_stranded_capacity
from virtcap.model.resources import Resource


def demo_flavors() -> dict[str, Demand]:
    return {
        spec.name: flavor_demand(
            NovaFlavor(
                spec.name,
                spec.vcpus,
                spec.memory_mib,
                spec.root_gib,
                spec.ephemeral_gib,
                spec.swap_mib,
                dict(spec.extra_specs),
            )
        )
        for spec in FLAVORS
    }


def row(
    label: str,
    result: Mapping[str, StrandedCapacity],
    classes: int,
    seconds: list[float],
    *,
    hits: int,
    misses: int,
    solver: int,
    target: str = "< 5 s",
) -> tuple[str, ...]:
    stranded = {
        resource: sum(1 for answer in result.values() if answer.amounts.get(resource, 0) > 0)
        for resource in (Resource.VCPU, Resource.MEMORY, Resource.DISK)
    }
    return (
        label,
        f"{len(result):,}",
        f"{classes:,}",
        cell(seconds, " s", 3),
        f"{hits:,} of {hits + misses:,}",
        f"{solver:,}",
        ", ".join(f"{resource} {count:,}" for resource, count in stranded.items()),
        target,
    )


def stranded_capacity_at_scale(runs: int, hypervisors: int, domains: int) -> None:
    hosts = tolerance_fleet(hypervisors, domains)
    flavors = demo_flavors()
    classes = sum(
        1
        for state in hosts
        for rc in state.capacity.resources.values()
        if rc.total is not None and rc.total > 0
    )
    cold: list[float] = []
    cache = StrandedCache()
    result: dict[str, StrandedCapacity] = {}
    for _ in range(runs):
        cache = StrandedCache()
        began = time.perf_counter()
        result = fleet_stranded_capacity(hosts, flavors, cache=cache)
        cold.append(time.perf_counter() - began)
    rows: Table = [
        row(
            "cold cache",
            result,
            classes,
            cold,
            hits=cache.hits,
            misses=cache.misses,
            solver=cache.solver_calls,
        )
    ]
    hits, misses, solver = cache.hits, cache.misses, cache.solver_calls
    began = time.perf_counter()
    result = fleet_stranded_capacity(hosts, flavors, cache=cache)
    warm = [time.perf_counter() - began]
    rows.append(
        row(
            "again, the cache kept",
            result,
            classes,
            warm,
            hits=cache.hits - hits,
            misses=cache.misses - misses,
            solver=cache.solver_calls - solver,
        )
    )
    # the alternative measured: every problem to HiGHS's MIP (no search), on a fifth of the fleet
    some = hosts[: max(len(hosts) // 5, 1)]
    cache = StrandedCache()
    began = time.perf_counter()
    result = fleet_stranded_capacity(some, flavors, cache=cache, search_node_limit=0)
    milp = [time.perf_counter() - began]
    label = f"HiGHS for every problem, {len(some):,} hypervisors (the alternative)"
    rows.append(
        row(
            label,
            result,
            classes * len(some) // len(hosts),
            milp,
            hits=cache.hits,
            misses=cache.misses,
            solver=cache.solver_calls,
            target="",
        )
    )
    print_table(
        f"Stranded capacity of {hypervisors:,} hypervisors x {domains} domains, {len(flavors)} flavors "
        "(fleetgen's), one process",
        (
            "run",
            "hosts",
            "classes",
            "seconds",
            "cache hits",
            "HiGHS solves",
            "hosts with some stranded",
            "target",
        ),
        rows,
    )
