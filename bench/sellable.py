"""Sellable headroom under a failover reserve (`--only sellable`): on the 1,000 x 50 fleet of the
failure tolerance's benchmark (bench/tolerance.py), the demo's five flavors, a reserve of one
hypervisor: per flavor, the request's placements (every instance that fits), the search over the
count with the tolerance as its test, and the answer."""

from __future__ import annotations

import os
import time

from harness import Table, cell, print_table
from tolerance import tolerance_fleet
from virtcap.demo.fleetgen import FLAVORS
from virtcap.model.facts import NovaFlavor, NovaInstance
from virtcap.model.host_fit import Demand
from virtcap.model.nova import nova_request
from virtcap.model.packing.sellable import sellable_count
from virtcap.model.scheduler import SPREAD, CandidateMemo, request_hosts

RESERVE = 1


def flavor_demands() -> dict[str, Demand]:
    """The demo's flavors, each asking for what Nova's request for it asks."""
    return {
        flavor.name: Demand(
            nova_request(
                NovaInstance(
                    NovaFlavor(
                        flavor.name,
                        flavor.vcpus,
                        flavor.memory_mib,
                        flavor.root_gib,
                        flavor.ephemeral_gib,
                        flavor.swap_mib,
                    )
                )
            )
        )
        for flavor in FLAVORS
    }


def sellable(runs: int, hypervisors: int, domains: int) -> None:
    hosts = tolerance_fleet(hypervisors, domains)
    rows: Table = []
    totals: list[float] = [0.0] * runs
    for name, demand in flavor_demands().items():
        placing: list[float] = []
        whole: list[float] = []
        fits = sold = 0
        for run in range(runs):
            began = time.perf_counter()
            fits = len(request_hosts(hosts, demand, SPREAD))
            placing.append(time.perf_counter() - began)
            began = time.perf_counter()
            sold = sellable_count(hosts, demand, SPREAD, RESERVE, memo=CandidateMemo())
            whole.append(time.perf_counter() - began)
            totals[run] += whole[-1]
        rows.append((name, f"{fits:,}", f"{sold:,}", cell(placing, " s"), cell(whole, " s"), ""))
    rows.append(("all five", "", "", "", cell(totals, " s"), "< 60 s"))
    print_table(
        f"Sellable headroom of {hypervisors:,} hypervisors x {domains} domains, reserve {RESERVE}, "
        f"{os.cpu_count()} CPUs, one process",
        ("flavor", "instances that fit", "sellable", "request placed", "sellable (all of it)", "target"),
        rows,
    )
