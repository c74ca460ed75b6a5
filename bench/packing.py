"""The packing answers as the failure-tolerance worker computes them (`--only packing`).

1. In process, the worker's side (fleet/packing.py's FleetPacking) on the 1,000 x 50 fleet of
   bench/tolerance.py with the demo's flavor mix, in 2 availability zones and 20 racks: the first
   computation, then one hypervisor changed, by a claim (no compaction reads it), by a domain
   started on it (the compactions brought up to date) and by that domain stopped again (the
   compactions solved: on this fleet the bound without the per-hypervisor program, which an update
   after domains stopped needs, is one below the optimum). Each is timed as the worker publishes
   it: the update (every changed hypervisor's stranded capacity, published with the tolerance),
   then each queued answer (the fleet's compaction, each group's, each flavor's sellable
   instances in the fleet and in each zone), one step at a time.
2. Served: `virtcap serve` on the test-driver fleet of bench/serving.py, /metrics latency while the
   worker computes the tolerance and then the packing (first computation, then after a claim:
   when the stranded capacity was published, when every answer had caught up), scraped back to
   back and ten times a second, plain and gzipped (harness.SCRAPERS), and the worker's peak RSS
   (VmHWM of the child process).
"""

from __future__ import annotations

import resource
import time
from dataclasses import replace
from pathlib import Path

from harness import (
    SCRAPERS,
    Scraper,
    Table,
    cell,
    descendants,
    latency_figures,
    make_hosts,
    metric_value,
    print_table,
    sample,
    virtcap,
)
from serving import FITTING, ROOMY, post_claim, tolerance_config
from stranded import demo_flavors
from tolerance import tolerance_fleet, tolerance_fleet_changed
from virtcap.fleet.packing import FleetPacking, PackingSettings, Step
from virtcap.model.host_fit import Demand
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import SPREAD, Guest, HostState

ZONES = 2
RACKS = 20
PACKED = "virtcap_packing_timestamp_seconds"
PACKING_DURATION = "virtcap_packing_duration_seconds"
PENDING = "virtcap_packing_pending_answers"
STOPPED = "that domain stopped again"
"""The hypervisor back as it was: a compaction reads one domain fewer, and is solved again."""
IDLE_SECONDS = 60.0
"""How long /metrics is measured with nothing computing, for comparison."""
CLAIMS = 5
"""Claims made one after the other, each on a hypervisor of its own once every answer caught up
with the last: their windows' scrapes are pooled, so that the p99 is not the slowest of sixty."""
LARGE = Demand({Resource.VCPU: 4, Resource.MEMORY: 8 * GIB, Resource.DISK: 80 * GIB})
"""What `tolerance_fleet_changed` claims."""
PARTS = (
    "stranded (the update)",
    "fleet compaction",
    "group compactions",
    "fleet sellable",
    "zone sellable",
    "all caught up",
)


def zoned(states: list[HostState]) -> tuple[list[HostState], dict[str, tuple[tuple[str, str], ...]]]:
    """The fleet split in ZONES availability zones and RACKS racks, in order; each domain held to
    its hypervisor's zone, as the exporter's states hold them (fleet/tolerance.py's scheduler_host)."""
    groups: dict[str, tuple[tuple[str, str], ...]] = {}
    placed = []
    for index, state in enumerate(states):
        zone = f"az-{index * ZONES // len(states) + 1}"
        rack = f"r{index * RACKS // len(states) + 1:02d}"
        groups[state.name] = (("availability_zone", zone), ("rack", rack))
        guests = tuple(
            replace(guest, demand=replace(guest.demand, availability_zone=zone)) for guest in state.guests
        )
        placed.append(replace(state, availability_zone=zone, guests=guests))
    return placed, groups


def _part(step: Step) -> str:
    if step.answer == "compaction":
        return PARTS[1] if step.group is None else PARTS[2]
    return PARTS[3] if step.zone is None else PARTS[4]


def catch_up(packing: FleetPacking, states: list[HostState], settings: PackingSettings) -> dict[str, float]:
    """The update, then every queued step: the seconds each part took, the update's alone (what
    is published at once) and the time until no answer is pending."""
    spent = dict.fromkeys(PARTS, 0.0)
    began = time.perf_counter()
    packing.update(states, settings, SPREAD)
    spent[PARTS[0]] = time.perf_counter() - began
    for step in packing.queued:
        started = time.perf_counter()
        packing.step()
        spent[_part(step)] += time.perf_counter() - started
    spent[PARTS[5]] = time.perf_counter() - began
    return spent


def with_domain_started(state: HostState) -> HostState:
    """The hypervisor with one domain more, running (an m1.large held to its zone, as the
    exporter's states hold every domain): the compaction reads it."""
    claimed = tolerance_fleet_changed(state)
    started = Guest("bench-started", replace(LARGE, availability_zone=state.availability_zone))
    return replace(claimed, guests=(*claimed.guests, started))


def packing_in_process(runs: int, hypervisors: int, domains: int) -> None:
    states, groups = zoned(tolerance_fleet(hypervisors, domains))
    settings = PackingSettings(demo_flavors(), groups, reserve_host_failures=1)
    changes = (
        ("first computation", None),
        ("a claim on one hypervisor", tolerance_fleet_changed),
        ("a domain started on one hypervisor", with_domain_started),
        (STOPPED, None),
    )
    figures: dict[str, dict[str, list[float]]] = {label: {part: [] for part in PARTS} for label, _ in changes}
    steps: dict[str, int] = {}
    updated = 0
    for run in range(runs):
        packing, fleet = FleetPacking(), states
        started: tuple[int, HostState] | None = None
        for label, change in changes:
            if label == STOPPED and started is not None:
                index, before = started  # the hypervisor as it was before the domain started
                fleet = [before if i == index else state for i, state in enumerate(fleet)]
            elif change is not None:
                index = (run * 37 + len(steps)) % len(fleet)
                if change is with_domain_started:
                    started = (index, fleet[index])
                fleet = [change(state) if i == index else state for i, state in enumerate(fleet)]
            for part, seconds in catch_up(packing, fleet, settings).items():
                figures[label][part].append(seconds)
            report = packing.report()
            steps[label] = len(report.solved)
        updated += packing.compactions_updated
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows: Table = [
        (label, f"{steps[label]:,}", *(cell(found[part], " s", 2) for part in PARTS))
        for label, found in figures.items()
    ]
    rows.append(
        ("compactions brought up to date (not solved) per run", f"{updated / runs:g}", *[""] * len(PARTS))
    )
    blank = [""] * len(PARTS)
    rows.append(("peak RSS (this process, the fleet and the answers)", f"{peak:,.0f} MiB", *blank))
    print_table(
        f"Packing answers in process (the worker's side), {hypervisors:,} hypervisors x {domains} "
        f"domains, {ZONES} zones, {RACKS} racks, the demo's flavors, reserve 1: the seconds each "
        "part took, in the order the worker publishes them",
        ("change", "stranded problems solved", *PARTS),
        rows,
    )


def _worker_peak_mib(exporter_pid: int) -> float | None:
    """VmHWM of the exporter's child (the failure-tolerance worker), in MiB."""
    for child in descendants(exporter_pid):
        for line in Path(f"/proc/{child}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


class AfterClaim:
    """When the packing answers first changed after the claim (the stranded capacity, published
    with the tolerance), and when none was pending any more: read in the measured scrapes'
    bodies (`scrapes_while`'s `busy`), so that no scrape of its own runs beside them."""

    def __init__(self, before: float | None) -> None:
        self.before = before
        self.started = time.monotonic()
        self.found: dict[str, float] = {}

    def busy(self, body: bytes) -> bool:
        now = time.monotonic() - self.started
        if "published" not in self.found and sample(body, PACKED) != self.before:
            self.found["published"] = now
        if "published" in self.found and sample(body, PENDING) == 0:
            self.found["caught up"] = now
        return "caught up" not in self.found


def reading_the_answers(body: bytes) -> bool:
    """What `AfterClaim.busy` reads in each body, for a window that ends on time: windows compared
    do the same work with every body."""
    sample(body, PACKED)
    sample(body, PENDING)
    return True


def packing_while_scraped(
    scratch: Path, runs: int, hypervisors: int, domains: int, *, workers_apart: bool
) -> None:
    """`virtcap serve` scraped while its worker computes the packing answers, then with nothing to
    compute. `workers_apart`: the worker on a CPU other than the event loop's (the scraper's,
    `harness.WorkersApart`); otherwise beside the loop on the exporter's one CPU."""
    paths = make_hosts(
        scratch / f"tolerance-{hypervisors}x{domains}", hypervisors, domains, size=ROOMY, flavors=FITTING
    )
    uris = {n: f"test://{p}" for n, p in paths.items()}
    figures: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):
        for scraped, period, gzipped in SCRAPERS:  # each in an exporter of its own
            config = tolerance_config(scratch, uris, True)  # the flavors: discovered in the domains' metadata
            exporter = virtcap(config, scraper_apart=True, workers_apart=workers_apart)
            with exporter as (port, child, _ready), Scraper(port) as scraper:
                first = figures.setdefault(f"{scraped}: first computation (tolerance, then every answer)", {})
                measured = scraper.scrapes_while(
                    lambda body: sample(body, PENDING) != 0, 3600, period, gzipped=gzipped
                )
                first.setdefault("caught up", []).append(metric_value(port, PACKING_DURATION) or 0.0)
                latency_figures(first, measured)
                idle = figures.setdefault(f"{scraped}: nothing to compute (for comparison)", {})
                latency_figures(
                    idle, scraper.scrapes_while(reading_the_answers, IDLE_SECONDS, period, gzipped=gzipped)
                )
                claims_row = f"{scraped}: after a claim on one hypervisor ({CLAIMS} claims)"
                again = figures.setdefault(claims_row, {})
                measured, windows = [], 0.0
                for hypervisor in list(uris)[:CLAIMS]:
                    claimed = AfterClaim(metric_value(port, PACKED))
                    post_claim(port, hypervisor)
                    measured += scraper.scrapes_while(claimed.busy, 3600, period, gzipped=gzipped)
                    again.setdefault("published", []).append(claimed.found["published"])
                    again.setdefault("caught up", []).append(claimed.found["caught up"])
                    windows += claimed.found["caught up"]
                latency_figures(again, measured)
                # as many scrapes once every answer caught up: a p99 of a few hundred scrapes
                # against one of six hundred (the idle window above) is uneven
                as_long = f"{scraped}: nothing to compute, as long as the claims' windows"
                after = figures.setdefault(as_long, {})
                latency_figures(
                    after, scraper.scrapes_while(reading_the_answers, windows, period, gzipped=gzipped)
                )
                peak = _worker_peak_mib(child.pid)
                if peak is not None:
                    again.setdefault("rss", []).append(peak)
    rows: Table = [
        (
            label,
            cell(found["published"], " s", 1) if "published" in found else "",
            cell(found["caught up"], " s", 1) if "caught up" in found else "",
            cell(found["p50"], " ms"),
            cell(found["p99"], " ms"),
            cell(found["max"], " ms"),
            cell(found["rss"], " MiB", 0) if "rss" in found else "",
        )
        for label, found in figures.items()
    ]
    print_table(
        f"virtcap serve, {hypervisors:,} hypervisors x {domains} domains: /metrics while the worker "
        "computes the packing answers, scraped back to back and ten times a second, plain and "
        "gzipped, by a scraper on a CPU of its own, "
        + (
            "the worker on the scraper's CPU, apart from the event loop's"
            if workers_apart
            else "the worker beside the event loop on the exporter's one CPU"
        )
        + " (after the claim: when its hypervisor's stranded capacity was published, when every "
        "answer had caught up)",
        ("scrapes: packing", "stranded published", "caught up", "p50", "p99", "max", "worker peak RSS"),
        rows,
    )


def packing(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    packing_in_process(runs, hypervisors, domains)
    packing_while_scraped(scratch, runs, hypervisors, domains, workers_apart=True)
    packing_while_scraped(scratch, runs, hypervisors, domains, workers_apart=False)
