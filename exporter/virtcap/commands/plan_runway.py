"""`virtcap plan runway`: how long until no more instance of each flavor fits, per fleet and per
group, from the history Prometheus keeps, with a least-squares fit and its band
(virtcap.model.runway). The history is the mixin's recorded sums where its rules are loaded, else
the raw `hypervisor_schedulable_instances` summed the same way; the answer says which.

Exit 0 with an answer (one with no history too), 2 when a flag is wrong (a bad window), 1 when
Prometheus cannot be reached or answers something else than its API's success.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from typing import Any

from virtcap.commands.arguments import EXIT_USAGE
from virtcap.commands.client import EXIT_REFUSED
from virtcap.commands.prometheus_api import (
    Prometheus,
    PrometheusAnswerError,
    PrometheusUnreachableError,
    RangeSeries,
)
from virtcap.exposition.runway_report import (
    RAW_SERIES,
    RECORDING_RULES,
    RunwayReport,
    RunwayRow,
    render_runway_table,
    runway_json,
)
from virtcap.model.runway import fit_runway

DEFAULT_WINDOW = "30d"
MINIMUM_WINDOW_SECONDS = 3600.0
MAXIMUM_WINDOW_SECONDS = 10 * 365 * 86400.0
TARGET_POINTS = 2_000
"""Samples per series asked for, at most: well under Prometheus's 11,000 and plenty for a trend
(its standard error is the residuals' over the spread of the times, which a finer step barely
narrows, the samples of a burst being correlated), while Prometheus's cost is per step: the raw
series' sums and joins are evaluated again at each."""
RAW_TARGET_POINTS = 200
"""The same for the raw series: Prometheus sums and joins them again at each step (thousands of
series), and a trend's fit needs far fewer points than that cost buys."""
MINIMUM_STEP_SECONDS = 60.0
"""No finer than a typical rule evaluation: a finer step repeats the same samples."""
GROUP_KINDS = ("availability_zone", "rack")
"""The kinds the raw history is summed per group for: the mixin's default exclusiveGroupKinds
(kinds whose groups never overlap: a hypervisor counts in one group of each)."""
FLEET_SUM = "flavor:hypervisor_schedulable_instances:sum"
GROUP_SUM = "group_flavor:hypervisor_schedulable_instances:sum"
_DURATION = re.compile(r"(?:\d+[ywdhms])+")
_DURATION_PART = re.compile(r"(\d+)([ywdhms])")
_UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def add_parser(plans: Any) -> None:
    runway = plans.add_parser(
        "runway",
        help="how long until no more instance of each flavor fits, from Prometheus's history",
        description="Per fleet, flavor and group (availability zones, racks), the least-squares "
        "trend of the instances that fit over the window, read from Prometheus, and the runway: "
        "how long until none fits at that trend, with a band (the earliest and latest plausible "
        "exhaustion). No runway where the trend is flat or rising. Exit 0 with an answer, 2 when "
        "a flag is wrong, 1 when Prometheus cannot be reached or answers otherwise.",
    )
    runway.add_argument(
        "--prometheus", metavar="URL", required=True, help="the Prometheus to read (its HTTP API)"
    )
    runway.add_argument(
        "--window",
        default=DEFAULT_WINDOW,
        metavar="DURATION",
        help="the history to fit, a Prometheus duration such as 30d or 2w (default: %(default)s)",
    )
    runway.add_argument(
        "--fleet-label",
        default="fleet",
        metavar="LABEL",
        help="the label that tells fleets apart, as the mixin's fleetLabel (default: %(default)s)",
    )
    runway.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )


class WindowError(ValueError):
    """--window is not a Prometheus duration within the bounds."""


def window_seconds(text: str) -> float:
    if _DURATION.fullmatch(text) is None:
        raise WindowError(f"--window: expected a Prometheus duration such as 30d, 2w or 12h, got {text!r}")
    seconds = float(sum(int(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text)))
    if not MINIMUM_WINDOW_SECONDS <= seconds <= MAXIMUM_WINDOW_SECONDS:
        raise WindowError(f"--window: expected from 1h to 3650d, got {text!r}")
    return seconds


def step_seconds(window: float, points: int = TARGET_POINTS) -> float:
    """A whole number of seconds that keeps a window's samples at `points` at most."""
    return max(MINIMUM_STEP_SECONDS, float(math.ceil(window / points)))


def run(args: argparse.Namespace) -> int:
    try:
        window = window_seconds(args.window)
    except WindowError as error:
        print(f"virtcap: plan runway: {error}", file=sys.stderr)
        return EXIT_USAGE
    if re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", args.fleet_label) is None:
        print(
            f"virtcap: plan runway: --fleet-label: expected a label name, got {args.fleet_label!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        report = read_runways(Prometheus(args.prometheus), window, args.fleet_label, time.time())
    except (PrometheusUnreachableError, PrometheusAnswerError) as error:
        print(f"virtcap: plan runway: {error}", file=sys.stderr)
        return EXIT_REFUSED
    sys.stdout.write(runway_json(report) if args.format == "json" else render_runway_table(report))
    return 0


def read_runways(prometheus: Prometheus, window: float, fleet_label: str, now: float) -> RunwayReport:
    """The runways of the window up to `now`, from the recorded sums if there are any, else from
    the raw series summed as the rules do."""
    step = step_seconds(window)
    end = math.floor(now / step) * step  # aligned: the same window asked twice reads the same samples
    start = end - window
    fleet = prometheus.query_range(FLEET_SUM, start, end, step)
    if fleet:
        source = RECORDING_RULES
        groups = prometheus.query_range(GROUP_SUM, start, end, step)
    else:
        source = RAW_SERIES
        step = step_seconds(window, RAW_TARGET_POINTS)
        end = math.floor(now / step) * step
        start = end - window
        fleet = prometheus.query_range(raw_fleet_sum(fleet_label), start, end, step)
        groups = [
            series
            for kind in GROUP_KINDS
            for series in prometheus.query_range(raw_group_sum(fleet_label, kind), start, end, step)
        ]
    rows = [_row(series, fleet_label, grouped=False) for series in fleet]
    rows += [_row(series, fleet_label, grouped=True) for series in groups]
    rows.sort(key=lambda row: (row.fleet, row.kind is not None, row.kind or "", row.group or "", row.flavor))
    return RunwayReport(prometheus.url, source, fleet_label, window, step, start, end, rows)


def _in_service(fleet_label: str) -> str:
    """Each hypervisor once (the smaller of what its exporters report free), those in maintenance
    left out: the mixin's joins.onceFree and joins.inService."""
    return (
        f"min by ({fleet_label}, hypervisor, flavor) (hypervisor_schedulable_instances)"
        f" unless on ({fleet_label}, hypervisor) hypervisor_maintenance == 1"
    )


def raw_fleet_sum(fleet_label: str) -> str:
    return f"sum by ({fleet_label}, flavor) ({_in_service(fleet_label)})"


def raw_group_sum(fleet_label: str, kind: str) -> str:
    memberships = f'max by ({fleet_label}, hypervisor, kind, group) (hypervisor_group_info{{kind="{kind}"}})'
    return (
        f"sum by ({fleet_label}, kind, group, flavor) (({_in_service(fleet_label)})"
        f" * on ({fleet_label}, hypervisor) group_left (kind, group) {memberships})"
    )


def _row(series: RangeSeries, fleet_label: str, grouped: bool) -> RunwayRow:
    labels = series.labels
    return RunwayRow(
        fleet=labels.get(fleet_label, ""),
        kind=labels.get("kind", "") if grouped else None,
        group=labels.get("group", "") if grouped else None,
        flavor=labels.get("flavor", ""),
        points=len(series.times),
        fit=fit_runway(series.times, series.values),
    )
