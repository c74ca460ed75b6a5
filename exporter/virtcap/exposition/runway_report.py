"""`virtcap plan runway`'s answer: per fleet, flavor and group, the trend of the instances that fit
and the runway with its band, as JSON (docs/cli.md lists the keys) or as a table for a person."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from virtcap.model.runway import BAND_SIGMAS, SECONDS_PER_DAY, RunwayFit

SECONDS_PER_HOUR = 3600.0

RECORDING_RULES = "recording_rules"
RAW_SERIES = "raw_series"
_SOURCES = {
    RECORDING_RULES: "the mixin's recorded sums ([group_]flavor:hypervisor_schedulable_instances:sum)",
    RAW_SERIES: "hypervisor_schedulable_instances summed as the mixin's rules do (no recorded sums found)",
}


@dataclass(frozen=True)
class RunwayRow:
    """One history: a flavor fleet-wide (kind and group None) or in one group, and its fit (None
    with too few samples)."""

    fleet: str
    kind: str | None
    group: str | None
    flavor: str
    points: int
    fit: RunwayFit | None


@dataclass(frozen=True)
class RunwayReport:
    prometheus: str
    source: str
    """RECORDING_RULES or RAW_SERIES: which history was read."""
    fleet_label: str
    window_seconds: float
    step_seconds: float
    start: float
    end: float
    rows: list[RunwayRow]


def runway_json(report: RunwayReport) -> str:
    document = {
        "prometheus": report.prometheus,
        "source": report.source,
        "fleet_label": report.fleet_label,
        "window_seconds": report.window_seconds,
        "step_seconds": report.step_seconds,
        "start": _timestamp(report.start),
        "end": _timestamp(report.end),
        "band_sigmas": BAND_SIGMAS,
        "runways": [_row_document(row) for row in report.rows],
    }
    return json.dumps(document, indent=2) + "\n"


def _row_document(row: RunwayRow) -> dict[str, Any]:
    document: dict[str, Any] = {
        "fleet": row.fleet,
        "kind": row.kind,
        "group": row.group,
        "flavor": row.flavor,
        "points": row.points,
    }
    fit = row.fit
    if fit is None:
        keys = ("last_sample", "instances", "slope_per_day", "slope_standard_error_per_day")
        more = ("residual_standard_deviation", "runway_seconds", "earliest_seconds", "latest_seconds")
        extra = ("exhaustion", "earliest_exhaustion", "latest_exhaustion")
        return document | dict.fromkeys(keys + more + extra)
    return document | {
        "last_sample": _timestamp(fit.last_time),
        "instances": fit.level,
        "slope_per_day": fit.slope_per_day,
        "slope_standard_error_per_day": fit.slope_standard_error_per_day,
        "residual_standard_deviation": fit.residual_standard_deviation,
        "runway_seconds": fit.runway_seconds,
        "earliest_seconds": fit.earliest_seconds,
        "latest_seconds": fit.latest_seconds,
        "exhaustion": _after(fit.last_time, fit.runway_seconds),
        "earliest_exhaustion": _after(fit.last_time, fit.earliest_seconds),
        "latest_exhaustion": _after(fit.last_time, fit.latest_seconds),
    }


def render_runway_table(report: RunwayReport) -> str:
    window = _duration(report.window_seconds)
    lines = [
        f"Runway at the trend of the last {window}: when no more instance of each flavor fits",
        f"  read from {report.prometheus}: {_SOURCES[report.source]}",
        f"  one sample every {report.step_seconds:g} s; band: the earliest and latest plausible "
        f"exhaustion ({BAND_SIGMAS:g} standard errors of the level and the slope)",
    ]
    if not report.rows:
        lines.append("  no history of schedulable instances in the window")
        return "\n".join(lines) + "\n"
    headers = ("fleet", "where", "flavor", "fit now", "per day", "runway", "earliest", "latest")
    rows = [_row_cells(row) for row in report.rows]
    widths = [max(len(row[column]) for row in [headers, *rows]) for column in range(len(headers))]
    right = {3, 4, 5, 6, 7}

    def line(cells: tuple[str, ...]) -> str:
        aligned = [
            f"{cell:>{width}}" if column in right else f"{cell:<{width}}"
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(aligned).rstrip()

    lines.extend([line(headers), *(line(row) for row in rows)])
    return "\n".join(lines) + "\n"


def _row_cells(row: RunwayRow) -> tuple[str, ...]:
    where = "fleet" if row.kind is None else f"{row.kind} {row.group}"
    fit = row.fit
    if fit is None:
        return (row.fleet, where, row.flavor, "-", "-", f"{row.points} sample(s): too few", "", "")
    if fit.runway_seconds is None:
        runway, earliest, latest = "not falling", "", ""
    elif fit.runway_seconds == 0.0:
        runway, earliest, latest = "exhausted", "", ""
    else:
        runway = _duration(fit.runway_seconds)
        earliest = _duration(fit.earliest_seconds or 0.0)
        latest = "unbounded" if fit.latest_seconds is None else _duration(fit.latest_seconds)
    return (
        row.fleet,
        where,
        row.flavor,
        f"{fit.level:.0f}",
        f"{fit.slope_per_day:+.2f}",
        runway,
        earliest,
        latest,
    )


def _duration(seconds: float) -> str:
    """`12.5d`, `7.2h` or `35m`: days from a day up, hours from an hour."""
    if seconds >= SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:.1f}d"
    if seconds >= SECONDS_PER_HOUR:
        return f"{seconds / SECONDS_PER_HOUR:.1f}h"
    return f"{seconds / 60:.0f}m"


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _after(start: float, seconds: float | None) -> str | None:
    if seconds is None:
        return None
    # a runway of centuries (a fall of one instance a year) is past any date worth printing
    return _timestamp(start + seconds) if seconds < 1000 * 365 * SECONDS_PER_DAY else None
