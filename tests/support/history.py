"""Synthetic history for a real Prometheus: series written as OpenMetrics and backfilled into a
TSDB by `promtool tsdb create-blocks-from openmetrics`, before the Prometheus reading it starts
(tests.support.prometheus.running_prometheus on the same directory)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

RETENTION_FLAGS = ("--storage.tsdb.retention.time=3650d",)
"""A backfilled history is older than Prometheus's default retention (15 days) lets it keep."""

Series = tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]
"""A metric's name, its labels and its samples (seconds since the epoch, value)."""


def backfill(directory: Path, series: Iterable[Series]) -> Path:
    """The series backfilled into `directory / 'data'`, running_prometheus's TSDB; returns it."""
    families: dict[str, list[str]] = {}
    for name, labels, samples in series:
        selector = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
        lines = families.setdefault(name, [])
        lines.extend(f"{name}{{{selector}}} {value:g} {time:.3f}" for time, value in samples)
    source = directory / "history.om"
    with source.open("w") as output:
        for name, lines in families.items():  # OpenMetrics: one block per family
            output.write(f"# TYPE {name} gauge\n")
            output.write("\n".join(lines) + "\n")
        output.write("# EOF\n")
    data = directory / "data"
    command = ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    source.unlink()
    return data
