"""Compaction computed in process (`--only compaction`): the fewest hypervisors holding every
domain of the 1,000 x 50 fleet (bench/tolerance.py's, fleetgen's flavor mix), its proven lower
bound and gap, the solver's and the validation's seconds, and the process's peak RSS."""

from __future__ import annotations

import os
import resource
import time

from harness import Table, cell, print_table
from tolerance import tolerance_fleet
from virtcap.model.packing.compaction import Compaction, compaction


def fleet_compaction(runs: int, hypervisors: int, domains: int, time_limit_seconds: float = 30.0) -> None:
    started = time.perf_counter()
    hosts = tolerance_fleet(hypervisors, domains)
    built = time.perf_counter() - started
    totals: list[float] = []
    solver: list[float] = []
    validation: list[float] = []
    result: Compaction | None = None
    for _ in range(runs):
        began = time.perf_counter()
        result = compaction(hosts, time_limit_seconds=time_limit_seconds)
        totals.append(time.perf_counter() - began)
        solver.append(result.solver_seconds)
        validation.append(result.validation_seconds)
    assert result is not None
    proven = "optimal" if result.optimal else "not proven"
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows: Table = [
        ("domains / shapes", f"{len(result.assignment):,} / {result.shapes}", ""),
        ("eligible hypervisors", f"{result.eligible:,}", ""),
        ("compaction (hypervisors)", f"{result.hypervisors:,}", ""),
        ("lower bound", f"{result.lower_bound:,}", ""),
        ("gap", f"{result.hypervisors - result.lower_bound} ({proven})", ""),
        ("stopped by", "the time limit" if result.time_limited else "the optimum or the node limit", ""),
        ("repaired / unplaced domains", f"{len(result.repaired)} / {len(result.unplaced)}", ""),
        ("solver (shapes, types, programs)", cell(solver, " s"), ""),
        ("validation (domain by domain)", cell(validation, " s"), ""),
        ("total", cell(totals, " s"), "< 60 s"),
        ("peak RSS of the process (fleet included)", f"{peak_mib:,.0f} MiB", ""),
    ]
    print_table(
        f"Compaction of {hypervisors:,} hypervisors x {domains} domains, {os.cpu_count()} CPUs, one "
        f"process, time limit {time_limit_seconds:.0f} s (states built in {built:.1f} s)",
        ("measure", "value", "target"),
        rows,
    )
