"""`virtcap plan runway` against a real Prometheus fed with synthetic history (promtool's backfill):
three days of per-hypervisor schedulable instances in two fleets, falling, rising, flat and noisy,
in availability zones and racks. Its answers are checked against an independent least-squares fit
(numpy.polyfit) of the sums the test computes itself, Prometheus's lookback applied; read from the
raw series, then from recorded sums as the mixin's rules leave them; and its bad inputs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.history import RETENTION_FLAGS, Series, backfill
from tests.support.prometheus import running_prometheus
from tests.support.serving import free_port

STEP = 60.0
"""The sample spacing."""
COMMAND_STEP = 130.0
"""The command's step for a 3-day window: 2,000 samples per series at most, in whole seconds."""
RAW_COMMAND_STEP = 1296.0
"""The same from the raw series: 200 samples at most (Prometheus sums them again at each step)."""
DAYS = 3
LOOKBACK = 300.0
"""Prometheus's default lookback: a step instant reads the latest sample at most this old."""
BAND_SIGMAS = 2.0
HYPERVISORS = {
    # fleet, hypervisor: availability zone, rack
    ("dc1", "compute-01"): ("az-1", "r1"),
    ("dc1", "compute-02"): ("az-1", "r2"),
    ("dc1", "compute-03"): ("az-2", "r2"),
    ("dc2", "compute-01"): ("az-1", "r1"),
}


def pattern(flavor: str, hypervisor: tuple[str, str], index: int, rng: np.random.Generator) -> float:
    """Instances of `flavor` that fit on `hypervisor` at the index-th minute."""
    number = int(hypervisor[1][-1])
    if flavor == "m1.small":  # falling everywhere, each at its own pace
        return max(0.0, 3000.0 - index * 0.2 * number)
    if flavor == "m1.large":  # rising
        return 10.0 + index // (100 * number)
    if flavor == "m1.tiny":  # flat
        return 40.0
    # m1.xlarge: noisy around a slow fall (whole instances, as they are)
    return float(max(0, round(5000 - index * 0.05 + rng.normal(0, 6))))


FLAVORS = ("m1.small", "m1.large", "m1.tiny", "m1.xlarge")


def history(now: float) -> tuple[list[float], dict[tuple[str, str, str], list[float]]]:
    """Sample times (a minute apart, up to `now`, an hour more than the window) and per (fleet,
    hypervisor, flavor) the values."""
    last = math.floor(now / STEP) * STEP
    count = int(DAYS * 86400 / STEP) + 60
    times = [last - (count - 1 - i) * STEP for i in range(count)]
    rng = np.random.default_rng(28)
    values = {
        (fleet, name, flavor): [pattern(flavor, (fleet, name), i, rng) for i in range(count)]
        for (fleet, name) in HYPERVISORS
        for flavor in FLAVORS
    }
    return times, values


def raw_series(times: list[float], values: dict[tuple[str, str, str], list[float]]) -> list[Series]:
    series: list[Series] = []
    for (fleet, name, flavor), numbers in values.items():
        labels = {"fleet": fleet, "job": "virtcap", "instance": "i", "hypervisor": name, "flavor": flavor}
        series.append(("hypervisor_schedulable_instances", labels, list(zip(times, numbers, strict=True))))
    for (fleet, name), (zone, rack) in HYPERVISORS.items():
        for kind, group in (("availability_zone", zone), ("rack", rack)):
            labels = {
                "fleet": fleet,
                "job": "virtcap",
                "instance": "i",
                "hypervisor": name,
                "kind": kind,
                "group": group,
            }
            series.append(("hypervisor_group_info", labels, [(t, 1.0) for t in times]))
    return series


Key = tuple[str, str | None, str | None, str]
"""fleet, kind (None fleet-wide), group, flavor: a row of the answer."""


def sums(values: dict[tuple[str, str, str], list[float]]) -> dict[Key, list[float]]:
    """What the mixin's rules record, per sample time: fleet-wide and per zone and rack."""
    found: dict[Key, list[float]] = {}
    for (fleet, name, flavor), numbers in values.items():
        zone, rack = HYPERVISORS[fleet, name]
        for key in (
            (fleet, None, None, flavor),
            (fleet, "availability_zone", zone, flavor),
            (fleet, "rack", rack, flavor),
        ):
            found[key] = [a + b for a, b in zip(found.get(key, [0.0] * len(numbers)), numbers, strict=True)]
    return found


def expected_fit(
    times: list[float], numbers: list[float], start: float, end: float, step: float
) -> dict[str, float | None]:
    """The independent answer: at each step instant of the command's range the latest sample at
    most LOOKBACK old (as Prometheus reads it), fitted by numpy.polyfit."""
    instants, read = [], []
    step_time = start
    while step_time <= end + 1e-6:
        index = int(np.searchsorted(times, step_time, side="right")) - 1
        if index >= 0 and step_time - times[index] <= LOOKBACK:
            instants.append(step_time)
            read.append(numbers[index])
        step_time += step
    x = np.array(instants) - instants[-1]
    y = np.array(read)
    slope, level = np.polyfit(x, y, 1)
    residuals = y - (level + slope * x)
    deviation = math.sqrt(float((residuals**2).sum()) / (len(x) - 2))
    error = deviation / math.sqrt(float(((x - x.mean()) ** 2).sum()))
    runway = earliest = latest = None
    if slope < 0:
        runway = max(level, 0) / -slope
        earliest = max(level - BAND_SIGMAS * deviation, 0) / (-slope + BAND_SIGMAS * error)
        slower = -slope - BAND_SIGMAS * error
        latest = (max(level, 0) + BAND_SIGMAS * deviation) / slower if slower > 0 else None
    return {
        "points": len(x),
        "instances": float(level),
        "slope_per_day": float(slope) * 86400,
        "runway_seconds": runway,
        "earliest_seconds": earliest,
        "latest_seconds": latest,
    }


def plan_runway(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "virtcap", "plan", "runway", *arguments]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def check_answer(
    answer: dict[str, Any], expected_sums: dict[Key, list[float]], times: list[float], step: float
) -> None:
    rows = {(r["fleet"], r["kind"], r["group"], r["flavor"]): r for r in answer["runways"]}
    assert set(rows) == set(expected_sums)
    assert answer["step_seconds"] == step and answer["window_seconds"] == DAYS * 86400
    start, end = (_epoch(answer[key]) for key in ("start", "end"))
    assert end - start == DAYS * 86400
    for key, numbers in expected_sums.items():
        expected = expected_fit(times, numbers, start, end, step)
        row = rows[key]
        assert row["points"] == expected["points"], key
        for field, value in expected.items():
            if value is None:
                assert row[field] is None, (key, field)
            else:
                assert row[field] == pytest.approx(value, rel=1e-6, abs=1e-6), (key, field)
    # falling: a runway fleet-wide and in every group; rising and flat: none
    for key, row in rows.items():
        falls = key[3] in {"m1.small", "m1.xlarge"}
        assert (row["runway_seconds"] is not None) == falls, key
    # the fleets are never summed together: dc2's compute-01 is not dc1's
    # (within 1%: read at the command's steps, the samples lag by up to a minute, whose pattern
    # depends on where the steps fall; the fit above is checked exactly against the same reads)
    assert rows["dc2", None, None, "m1.small"]["slope_per_day"] == pytest.approx(-0.2 * 1440, rel=0.01)


def _epoch(text: str) -> float:
    from datetime import datetime  # noqa: PLC0415  (the answer's ISO times, read back)

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def synthetic() -> tuple[list[float], dict[tuple[str, str, str], list[float]]]:
    return history(time.time())


def test_the_runway_from_the_raw_series(tmp_path: Path, synthetic: Any) -> None:
    times, values = synthetic
    backfill(tmp_path, raw_series(times, values))
    with running_prometheus("{}", tmp_path, flags=RETENTION_FLAGS) as prometheus:
        result = plan_runway("--prometheus", prometheus.url, "--window", f"{DAYS}d", "--format", "json")
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        assert answer["source"] == "raw_series"
        check_answer(answer, sums(values), times, RAW_COMMAND_STEP)
        table = plan_runway("--prometheus", prometheus.url, "--window", f"{DAYS}d")
        assert table.returncode == 0, table.stderr
        assert "not falling" in table.stdout and "m1.xlarge" in table.stdout


def test_the_runway_from_the_recorded_sums(tmp_path: Path, synthetic: Any) -> None:
    """With the mixin's recorded sums in Prometheus the command reads them (and says so), not the
    raw series: here only the sums are there, with a fleet label of another name."""
    times, values = synthetic
    recorded: list[Series] = []
    for (fleet, kind, group, flavor), numbers in sums(values).items():
        samples = list(zip(times, numbers, strict=True))
        if kind is None:
            recorded.append(
                ("flavor:hypervisor_schedulable_instances:sum", {"cluster": fleet, "flavor": flavor}, samples)
            )
        else:
            labels = {"cluster": fleet, "kind": kind, "group": group or "", "flavor": flavor}
            recorded.append(("group_flavor:hypervisor_schedulable_instances:sum", labels, samples))
    backfill(tmp_path, recorded)
    with running_prometheus("{}", tmp_path, flags=RETENTION_FLAGS) as prometheus:
        arguments = ("--prometheus", prometheus.url, "--window", f"{DAYS}d", "--fleet-label", "cluster")
        result = plan_runway(*arguments, "--format", "json")
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        assert answer["source"] == "recording_rules" and answer["fleet_label"] == "cluster"
        check_answer(answer, sums(values), times, COMMAND_STEP)
        assert "recorded sums" in plan_runway(*arguments).stdout


class _NotPrometheus(BaseHTTPRequestHandler):
    """Another web service: a 200 HTML page at the API's path, a 404 elsewhere."""

    def do_GET(self) -> None:
        status = 200 if self.path.startswith("/page/api/v1/") else 404
        body = b"<html><body>Grafana</body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def not_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotPrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _one_clear_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("virtcap: plan runway: "), result.stderr
    return lines[0]


def test_bad_prometheus_urls_and_windows(not_prometheus: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    assert closed in _one_clear_line(plan_runway("--prometheus", closed), 1)
    assert "not a Prometheus API answer" in _one_clear_line(
        plan_runway("--prometheus", not_prometheus + "/page"), 1
    )
    assert "404" in _one_clear_line(plan_runway("--prometheus", not_prometheus), 1)
    assert "not-a-host.invalid" in _one_clear_line(
        plan_runway("--prometheus", "http://not-a-host.invalid"), 1
    )
    for window in ("3x", "30", "5m", "11y", ""):
        assert "--window" in _one_clear_line(plan_runway("--prometheus", closed, "--window", window), 2)
    assert "--fleet-label" in _one_clear_line(plan_runway("--prometheus", closed, "--fleet-label", "a b"), 2)
