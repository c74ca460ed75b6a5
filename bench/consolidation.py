"""A consolidation plan computed in process (`--only consolidation`): the 1,000 x 50 fleet of the
failure tolerance's benchmark (bench/tolerance.py), Nova's spreading weighers and stacking ones."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness import Table, cell, print_table
from tolerance import tolerance_fleet
from virtcap.model.packing.consolidation import ConsolidationPlan, consolidation_plan
from virtcap.model.scheduler import SPREAD, Multipliers

STACK = Multipliers(ram=-1.0, cpu=-1.0, disk=-1.0)
TIME_LIMIT_SECONDS = 120.0
"""Above the target (60 s): a search the limit cuts short says so in the table."""


def _status_mib(field: str) -> float | None:
    """A `/proc/self/status` figure (VmRSS, VmHWM) in MiB; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux 4.0 and later)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def consolidation(runs: int, hypervisors: int, domains: int) -> None:
    started = time.perf_counter()
    hosts = tolerance_fleet(hypervisors, domains)
    built = time.perf_counter() - started
    rows: Table = []
    weighers = (("spreading weighers (Nova's defaults)", SPREAD), ("stacking weighers", STACK))
    for label, multipliers in weighers:
        seconds: list[float] = []
        peaks: list[float] = []
        plan: ConsolidationPlan | None = None
        for _ in range(runs):
            peak_known = _reset_peak()
            began = time.perf_counter()
            plan = consolidation_plan(hosts, multipliers, time_limit_seconds=TIME_LIMIT_SECONDS)
            seconds.append(time.perf_counter() - began)
            peak = _status_mib("VmHWM")
            if peak_known and peak is not None:
                peaks.append(peak)
        assert plan is not None
        rows.append(
            (
                label,
                f"{len(plan.emptied):,} of {plan.hypervisors_before:,}",
                f"{len(plan.moves):,}",
                f"{len(plan.unmovable):,}",
                "yes" if plan.complete else "no (time limit)",
                cell(seconds, " s", 1),
                cell(peaks, " MiB", 0) if peaks else "n/a",
                "< 60 s",
            )
        )
    rss = _status_mib("VmRSS")
    print_table(
        f"Consolidation plan of {hypervisors:,} hypervisors x {domains} domains, {os.cpu_count()} CPUs, "
        f"one process (states built in {built:.1f} s; RSS with them {rss or 0:.0f} MiB)",
        (
            "weighers",
            "hypervisors emptied",
            "moves",
            "unmovable domains",
            "search complete",
            "time",
            "peak RSS",
            "target",
        ),
        rows,
    )
