"""The packing answers as the failure-tolerance worker computes them (`--only packing`).

1. In process, the worker's side (fleet/packing.py's FleetPacking) on the 1,000 x 50 fleet of
   bench/tolerance.py with the demo's flavor mix, in 2 availability zones and 20 racks: the first
   computation (every hypervisor's stranded capacity, the compaction of the fleet and of each
   group, the sellable instances per flavor and zone), then one hypervisor changed (its stranded
   problem solved alone; the compaction and sellable instances computed again).
2. Served: `virtcap serve` on the test-driver fleet of bench/serving.py, /metrics latency while the
   worker computes the tolerance and then the packing (first computation, then after a claim),
   and the worker's peak RSS (VmHWM of the child process).
"""

from __future__ import annotations

import resource
import time
from dataclasses import replace
from pathlib import Path

from harness import Table, cell, make_hosts, metric_value, percentile, print_table, virtcap
from serving import FITTING, ROOMY, latencies_while, post_claim, tolerance_config
from stranded import demo_flavors
from tolerance import tolerance_fleet, tolerance_fleet_changed
from virtcap.fleet.packing import FleetPacking, PackingReport, PackingSettings
from virtcap.model.scheduler import SPREAD, HostState

ZONES = 2
RACKS = 20
PACKED = "virtcap_packing_timestamp_seconds"
PACKING_DURATION = "virtcap_packing_duration_seconds"


def zoned(states: list[HostState]) -> tuple[list[HostState], dict[str, tuple[tuple[str, str], ...]]]:
    """The fleet split in ZONES availability zones and RACKS racks, in order."""
    groups: dict[str, tuple[tuple[str, str], ...]] = {}
    placed = []
    for index, state in enumerate(states):
        zone = f"az-{index * ZONES // len(states) + 1}"
        rack = f"r{index * RACKS // len(states) + 1:02d}"
        groups[state.name] = (("availability_zone", zone), ("rack", rack))
        placed.append(replace(state, availability_zone=zone))
    return placed, groups


def _summary(report: PackingReport) -> str:
    stranded = sum(1 for found in report.stranded.values() if any(found.amounts.values()))
    compaction = report.compaction
    return (
        f"{stranded:,} hypervisors with stranded capacity; compaction {compaction.hypervisors:,} "
        f"(bound {compaction.lower_bound:,}) of {compaction.eligible:,}; "
        f"{len(report.groups)} groups; m1.small sellable {report.sellable.get('m1.small', 0):,}"
    )


def packing_in_process(runs: int, hypervisors: int, domains: int) -> None:
    states, groups = zoned(tolerance_fleet(hypervisors, domains))
    settings = PackingSettings(demo_flavors(), groups, reserve_host_failures=1)
    first: list[float] = []
    changed: list[float] = []
    report = again = None
    for run in range(runs):
        packing = FleetPacking()
        began = time.perf_counter()
        report = packing.apply(states, settings, SPREAD)
        first.append(time.perf_counter() - began)
        index = run * 37 % len(states)
        one = [tolerance_fleet_changed(state) if i == index else state for i, state in enumerate(states)]
        began = time.perf_counter()
        again = packing.apply(one, settings, SPREAD)
        changed.append(time.perf_counter() - began)
    assert report is not None and again is not None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows: Table = [
        ("first computation", cell(first, " s", 1), f"{len(report.solved):,}", _summary(report)),
        (
            "one hypervisor changed",
            cell(changed, " s", 1),
            f"{len(again.solved):,}",
            "compaction and sellable computed again" if again.recomputed else "kept",
        ),
        ("peak RSS (this process, the fleet and the answers)", f"{peak:,.0f} MiB", "", ""),
    ]
    print_table(
        f"Packing answers in process (the worker's side), {hypervisors:,} hypervisors x {domains} "
        f"domains, {ZONES} zones, {RACKS} racks, the demo's flavors, reserve 1",
        ("computation", "time", "stranded problems solved", "answers"),
        rows,
    )


def _worker_peak_mib(exporter_pid: int) -> float | None:
    """VmHWM of the exporter's child (the failure-tolerance worker), in MiB."""
    for task in Path(f"/proc/{exporter_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    return None


def packing_while_scraped(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    paths = make_hosts(
        scratch / f"tolerance-{hypervisors}x{domains}", hypervisors, domains, size=ROOMY, flavors=FITTING
    )
    uris = {n: f"test://{p}" for n, p in paths.items()}
    figures: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):
        config = tolerance_config(scratch, uris, True)  # the flavors: discovered in the domains' metadata
        with virtcap(config) as (port, child, _ready):
            measured = latencies_while(port, lambda: metric_value(port, PACKED) is None, 900)
            first = figures.setdefault("first computation (tolerance, then packing)", {})
            first.setdefault("took", []).append(metric_value(port, PACKING_DURATION) or 0.0)
            _latencies(first, measured)
            before = metric_value(port, PACKED)
            post_claim(port, next(iter(uris)))
            unchanged = lambda port=port, before=before: metric_value(port, PACKED) == before  # noqa: E731
            measured = latencies_while(port, unchanged, 900)
            again = figures.setdefault("after a claim on one hypervisor", {})
            again.setdefault("took", []).append(metric_value(port, PACKING_DURATION) or 0.0)
            _latencies(again, measured)
            peak = _worker_peak_mib(child.pid)
            if peak is not None:
                again.setdefault("rss", []).append(peak)
    rows: Table = [
        (
            label,
            cell(found["took"], " s", 1),
            cell(found["p50"], " ms"),
            cell(found["p99"], " ms"),
            cell(found["max"], " ms"),
            cell(found["rss"], " MiB", 0) if "rss" in found else "",
        )
        for label, found in figures.items()
    ]
    print_table(
        f"virtcap serve, {hypervisors:,} hypervisors x {domains} domains: /metrics while the worker "
        "computes the packing answers",
        ("packing", "computation", "p50", "p99", "max", "worker peak RSS"),
        rows,
    )


def _latencies(figures: dict[str, list[float]], measured: list[float]) -> None:
    figures.setdefault("p50", []).append(percentile(measured, 0.5) * 1000)
    figures.setdefault("p99", []).append(percentile(measured, 0.99) * 1000)
    figures.setdefault("max", []).append(max(measured) * 1000)


def packing(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    packing_in_process(runs, hypervisors, domains)
    packing_while_scraped(scratch, runs, hypervisors, domains)
