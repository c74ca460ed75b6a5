"""Sharding on one machine (`python bench/run.py --only sharding`): the largest test-driver fleet of
the benchmark (1,000 hypervisors x 50 domains, as `--only cycle` builds it) served by one
`virtcap serve`, then by two shards (`--shard 0|1 --total-shards 2`) started together.

For each process: the time from its start until /-/ready (every hypervisor of its shard audited
once), until its first failure-tolerance computation is shown, /metrics latency afterwards
(p50, p99; scraped alone, one process after the other), the size of the exposition, and its
resident memory (now and at its peak). For the shards together: until both are ready.

The shards share the machine's CPUs: on two cores, two processes audit with twice the CPU one
has, when nothing else runs.
"""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import (
    Table,
    cell,
    free_port,
    get,
    latencies,
    make_hosts,
    metric_value,
    percentile,
    print_table,
    process,
    write_config,
)

TOLERANCE_DURATION = "virtcap_failure_tolerance_duration_seconds"
SCRAPES = 300
POLL_SECONDS = 0.2
"""Between two looks at a process: a look at its failure tolerance is a whole /metrics."""


@dataclass
class Started:
    port: int
    child: subprocess.Popen[bytes]
    began: float


@contextmanager
def started(config: Path, *flags: str) -> Iterator[Started]:
    """`virtcap serve` started, not yet ready: several are started before any is waited for."""
    port = free_port()
    command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config), *flags]
    command += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"]
    began = time.monotonic()
    with process(command) as child:
        yield Started(port, child, began)


def memory_mib(pid: int, field: str) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def body_bytes(port: int) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        return len(connection.getresponse().read())
    finally:
        connection.close()


def measure_setup(config: Path, shards: int) -> tuple[list[dict[str, float]], float]:
    """Each process's figures, and how long until every one of them was ready."""
    flag_sets = (
        [()] if shards == 1 else [("--shard", str(n), "--total-shards", str(shards)) for n in range(shards)]
    )
    with ExitStack() as stack:
        servers = [stack.enter_context(started(config, *flags)) for flags in flag_sets]
        ready_at: dict[int, float] = {}
        computed_at: dict[int, float] = {}

        deadline = time.monotonic() + 1200
        while len(computed_at) < len(servers):
            if time.monotonic() > deadline:
                raise SystemExit("a process was not ready, or computed no failure tolerance, in 20 minutes")
            for index, server in enumerate(servers):
                if index not in ready_at and get(server.port, "/-/ready", timeout=5) == 200:
                    ready_at[index] = time.monotonic() - server.began
                elif (
                    index in ready_at
                    and index not in computed_at
                    and metric_value(server.port, TOLERANCE_DURATION) is not None
                ):
                    computed_at[index] = time.monotonic() - server.began
            time.sleep(POLL_SECONDS)
        figures = []
        for index, server in enumerate(servers):
            latencies(server.port, 20)
            measured = latencies(server.port, SCRAPES)
            figures.append(
                {
                    "ready": ready_at[index],
                    "tolerance": computed_at[index],
                    "p50": percentile(measured, 0.5) * 1000,
                    "p99": percentile(measured, 0.99) * 1000,
                    "body": body_bytes(server.port) / 2**20,
                    "rss": memory_mib(server.child.pid, "VmRSS"),
                    "peak": memory_mib(server.child.pid, "VmHWM"),
                }
            )
        return figures, max(ready_at.values())


def sharding(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    paths = make_hosts(scratch / f"sharding-{hypervisors}x{domains}", hypervisors, domains)
    config = write_config(scratch, {n: f"test://{p}" for n, p in paths.items()}, concurrency=32)
    rows: Table = []
    for shards in (1, 2):
        per_process: list[list[dict[str, float]]] = [[] for _ in range(shards)]
        together: list[float] = []
        for _ in range(runs):
            figures, all_ready = measure_setup(config, shards)
            together.append(all_ready)
            for index, found in enumerate(figures):
                per_process[index].append(found)
        for index, found_runs in enumerate(per_process):

            def column(key: str, found_runs: list[dict[str, float]] = found_runs) -> list[float]:
                return [found[key] for found in found_runs]

            label = "one exporter" if shards == 1 else f"shard {index} of 2"
            rows.append(
                (
                    label,
                    cell(column("ready"), " s", 1),
                    cell(together, " s", 1) if index == 0 else "",
                    cell(column("tolerance"), " s", 1),
                    cell(column("p50"), " ms", 1),
                    cell(column("p99"), " ms", 1),
                    cell(column("body"), " MiB", 1),
                    cell(column("rss"), " MiB", 0),
                    cell(column("peak"), " MiB", 0),
                )
            )
    print_table(
        f"{hypervisors} test-driver hypervisors x {domains} domains: one exporter, then two shards "
        "started together on the same machine",
        (
            "process",
            "start to ready",
            "all ready",
            "failure tolerance shown",
            "/metrics p50",
            "p99",
            "body",
            "RSS",
            "peak RSS",
        ),
        rows,
    )
