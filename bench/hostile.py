"""/metrics and /-/healthy while 50 hostile libvirt peers share the fleet with 5 healthy
hypervisors (`--only hostile`): the figures behind tests/audit/test_faults.py, which only asserts
that the exporter keeps answering and never freezes.

The peers are the tests' own (tests/support/faults.py): 17 that reset the connection, 17 that
answer garbage, 8 that stop mid-message and 8 that never answer, audited every second.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness import Table, cell, latencies, make_hosts, percentile, print_table, virtcap, write_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.faults import hostile_peers

KINDS = {"reset": 17, "garbage": 17, "hang": 8, "stall": 8}


def hostile_fleet(scratch: Path, runs: int, seconds: float) -> None:
    paths = make_hosts(scratch / "hostile", 5, 50)
    rows: Table = []
    figures: dict[str, dict[str, list[float]]] = {
        path: {"p50": [], "p99": []} for path in ("/metrics", "/-/healthy")
    }
    with hostile_peers(KINDS) as peers:
        uris = {n: f"test://{p}" for n, p in paths.items()}
        uris |= {f"{peer.kind}-{i}": peer.uri for i, peer in enumerate(peers)}
        config = write_config(
            scratch,
            uris,
            interval="1s",
            timeout="2s",
            keepalive_interval="1s",
            keepalive_count=2,
            concurrency=64,
        )
        for _ in range(runs):
            with virtcap(config) as (port, _child, _ready):
                time.sleep(5)  # every peer tried once at least, the hanging ones stuck
                finish = time.monotonic() + seconds
                measured: dict[str, list[float]] = {path: [] for path in figures}
                while time.monotonic() < finish:
                    for path in figures:
                        measured[path].extend(latencies(port, 10, path))
                for path, samples in measured.items():
                    figures[path]["p50"].append(percentile(samples, 0.5) * 1000)
                    figures[path]["p99"].append(percentile(samples, 0.99) * 1000)
    for path, runs_of in figures.items():
        rows.append(
            (f"{path}, 5 healthy + 50 hostile", cell(runs_of["p50"], " ms"), cell(runs_of["p99"], " ms"))
        )
    print_table(f"Serving among hostile peers ({seconds:.0f} s per run)", ("request", "p50", "p99"), rows)
