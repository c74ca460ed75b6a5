"""Sellable headroom under a failover reserve (`--only sellable`): on the 1,000 x 50 fleet of the
failure tolerance's benchmark (bench/tolerance.py), the demo's five flavors, a reserve of one
hypervisor: per flavor, the request's placements (every instance that fits), the search over the
count with the tolerance as its test, and the answer; then, as the worker counts after a change
(its placements and decisions kept), after a claim of an m1.large on one hypervisor and after a
claim of an m1.xlarge on another."""

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
from virtcap.model.packing.sellable_update import KeptDecisions
from virtcap.model.scheduler import SPREAD, CandidateMemo, HostState, request_hosts
from virtcap.model.scheduler.claims_replay import Placements
from virtcap.model.scheduler.host_states import consume_in_turn

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


def claimed(hosts: list[HostState], flavors: dict[str, Demand]) -> tuple[list[HostState], list[HostState]]:
    """The fleet after a claim of an m1.large on one hypervisor, then of an m1.xlarge on another."""
    once = list(hosts)
    once[len(hosts) // 2] = consume_in_turn(once[len(hosts) // 2], (flavors["m1.large"],))
    twice = list(once)
    twice[len(hosts) // 8] = consume_in_turn(twice[len(hosts) // 8], (flavors["m1.xlarge"],))
    return once, twice


def sellable(runs: int, hypervisors: int, domains: int) -> None:
    hosts = tolerance_fleet(hypervisors, domains)
    flavors = flavor_demands()
    once, twice = claimed(hosts, flavors)
    rows: Table = []
    totals: list[list[float]] = [[0.0] * runs for _ in range(3)]
    for name, demand in flavors.items():
        placing: list[float] = []
        spent: list[list[float]] = [[], [], []]
        fits = sold = 0
        for run in range(runs):
            began = time.perf_counter()
            fits = len(request_hosts(hosts, demand, SPREAD))
            placing.append(time.perf_counter() - began)
            placements, kept = Placements(), KeptDecisions()
            for part, fleet in enumerate((hosts, once, twice)):
                began = time.perf_counter()
                found = sellable_count(
                    fleet, demand, SPREAD, RESERVE, memo=CandidateMemo(), placements=placements, kept=kept
                )
                spent[part].append(time.perf_counter() - began)
                totals[part][run] += spent[part][-1]
                if part == 0:
                    sold = found
        rows.append(
            (name, f"{fits:,}", f"{sold:,}", cell(placing, " s"), *(cell(found, " s") for found in spent), "")
        )
    rows.append(("all five", "", "", "", *(cell(found, " s") for found in totals), "< 60 s; < 5 s a change"))
    print_table(
        f"Sellable headroom of {hypervisors:,} hypervisors x {domains} domains, reserve {RESERVE}, "
        f"{os.cpu_count()} CPUs, one process",
        (
            "flavor",
            "instances that fit",
            "sellable",
            "request placed",
            "sellable (all of it)",
            "after a claim",
            "after a second claim",
            "target",
        ),
        rows,
    )
