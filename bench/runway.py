"""`virtcap plan runway` over 30 days of history in a real Prometheus (`--only runway`): 1,000
hypervisors x the demo's 5 flavors in 2 availability zones and 20 racks, backfilled by `promtool
tsdb create-blocks-from openmetrics`; the command timed end to end (a process of its own, as a
person runs it), once reading the mixin's recorded sums and once the raw series summed as the rules
do (a Prometheus without the rules).

To keep the backfill to a minute or so, the raw series have a sample an hour and the recorded sums
one every 5 minutes, and the Prometheus reading them looks back an hour (`--query.lookback-delta`)
so that each of the command's ~2,000 steps still finds its sample: Prometheus evaluates the same
sums at the same steps as over a history scraped every 15 s, only from fewer chunks.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from harness import Table, cell, free_port, print_table, process, wait
from virtcap.demo.fleetgen import FLAVORS

DAYS = 30
ZONES = 2
RACKS = 20
RAW_SPACING = 3600
RECORDED_SPACING = 300
TARGET_SECONDS = 10.0


def _hypervisors(count: int) -> list[tuple[str, str, str]]:
    """Name, availability zone and rack of each hypervisor."""
    return [(f"compute-{i:04d}", f"az-{i % ZONES + 1}", f"r{i % RACKS + 1:02d}") for i in range(count)]


def _write_history(path: Path, hypervisors: list[tuple[str, str, str]], recorded: bool, now: float) -> None:
    """Each hypervisor's schedulable instances falling at its own pace with noise (or, `recorded`,
    the sums the mixin's rules record of them: fleet-wide, per zone and per rack), as OpenMetrics."""
    rng = np.random.default_rng(28)
    flavors = [flavor.name for flavor in FLAVORS]
    spacing = RECORDED_SPACING if recorded else RAW_SPACING
    last = math.floor(now / spacing) * spacing
    times = last - spacing * np.arange(int(DAYS * 86400 / spacing) + 12, -1, -1)
    elapsed = times - times[0]
    stamps = [str(int(t)) for t in times]

    def fit() -> npt.NDArray[np.float64]:
        pace = rng.uniform(0.0, 2.0) / 86400
        noise = rng.integers(-1, 2, len(times)).astype(np.float64)
        values: npt.NDArray[np.float64] = np.maximum(0.0, 200.0 - pace * elapsed + noise)
        return values

    def write(name: str, labels: str, values: npt.NDArray[np.float64]) -> None:
        output.writelines(
            f"{name}{{{labels}}} {v:g} {t}\n" for t, v in zip(stamps, values.tolist(), strict=True)
        )

    with path.open("w") as output:
        if recorded:
            totals: dict[tuple[str, ...], npt.NDArray[np.float64]] = {}
            for _, zone, rack in hypervisors:
                for flavor in flavors:
                    values = fit()
                    keys: list[tuple[str, ...]] = [
                        (flavor,),
                        ("availability_zone", zone, flavor),
                        ("rack", rack, flavor),
                    ]
                    for key in keys:
                        totals[key] = totals[key] + values if key in totals else values
            output.write("# TYPE flavor:hypervisor_schedulable_instances:sum gauge\n")
            for key, values in totals.items():
                if len(key) == 1:
                    write(
                        "flavor:hypervisor_schedulable_instances:sum",
                        f'fleet="bench",flavor="{key[0]}"',
                        values,
                    )
            output.write("# TYPE group_flavor:hypervisor_schedulable_instances:sum gauge\n")
            for key, values in totals.items():
                if len(key) == 3:
                    labels = f'fleet="bench",kind="{key[0]}",group="{key[1]}",flavor="{key[2]}"'
                    write("group_flavor:hypervisor_schedulable_instances:sum", labels, values)
        else:
            output.write("# TYPE hypervisor_schedulable_instances gauge\n")
            for name, _, _ in hypervisors:
                for flavor in flavors:
                    labels = f'fleet="bench",job="virtcap",hypervisor="{name}",flavor="{flavor}"'
                    write("hypervisor_schedulable_instances", labels, fit())
            output.write("# TYPE hypervisor_group_info gauge\n")
            for name, zone, rack in hypervisors:
                for kind, group in (("availability_zone", zone), ("rack", rack)):
                    labels = f'fleet="bench",job="virtcap",hypervisor="{name}",kind="{kind}",group="{group}"'
                    write("hypervisor_group_info", labels, np.ones(len(times)))
        output.write("# EOF\n")


def _prometheus_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def runway(scratch: Path, runs: int, hypervisors: int) -> None:
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        print_table("plan runway", ("result",), [("not measured: prometheus and promtool are needed",)])
        return
    fleet = _hypervisors(hypervisors)
    rows: Table = []
    for label, recorded in (("recorded sums (the mixin's rules)", True), ("raw series summed", False)):
        directory = scratch / f"runway-{'recorded' if recorded else 'raw'}"
        directory.mkdir()
        began = time.perf_counter()
        _write_history(directory / "history.om", fleet, recorded, time.time())
        subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--max-block-duration=720h",
                str(directory / "history.om"),
                str(directory / "data"),
            ],
            check=True,
            capture_output=True,
        )
        (directory / "history.om").unlink()
        backfilled = time.perf_counter() - began
        (directory / "prometheus.yml").write_text("{}\n")
        port = free_port()
        command = [
            "prometheus",
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=3650d",
            "--query.lookback-delta=1h",
        ]
        with process(command):
            ready: Callable[[], bool] = functools.partial(_prometheus_ready, port)
            wait(ready, 60)
            seconds: list[float] = []
            answer = ""
            for _ in range(runs):
                started = time.perf_counter()
                result = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "virtcap",
                        "plan",
                        "runway",
                        "--prometheus",
                        f"http://127.0.0.1:{port}",
                        "--window",
                        f"{DAYS}d",
                        "--format",
                        "json",
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                    env=os.environ,
                )
                seconds.append(time.perf_counter() - started)
                if result.returncode != 0:
                    raise SystemExit(f"plan runway failed: {result.stderr}")
                answer = result.stdout
        import json  # noqa: PLC0415  (only to count the answer's rows)

        document = json.loads(answer)
        runways = document["runways"]
        points = max(row["points"] for row in runways)
        within = "yes" if max(seconds) < TARGET_SECONDS else "NO"
        rows.append(
            (
                label,
                f"{hypervisors} x {len(FLAVORS)}",
                document["source"],
                str(len(runways)),
                str(points),
                f"{backfilled:.0f} s",
                cell(seconds, " s"),
                within,
            )
        )
    print_table(
        f"plan runway over {DAYS} days (target: under {TARGET_SECONDS:g} s)",
        (
            "history",
            "hypervisors x flavors",
            "source",
            "runways",
            "points per series",
            "backfill",
            "plan runway",
            "under target",
        ),
        rows,
    )
