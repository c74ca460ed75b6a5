"""Failure tolerance in a running exporter: /metrics while it computes (`--only serving`)."""

from __future__ import annotations

import base64
import http.client
import json
import random
import threading
import time
from dataclasses import replace
from pathlib import Path

import bcrypt

from harness import (
    Table,
    cell,
    latency_figures,
    make_hosts,
    metric_value,
    print_table,
    sample,
    scrapes_while,
    virtcap,
    write_config,
)
from virtcap.demo.fleetgen import FLAVORS

BENCH_WRITER = ("bench", "bench-password")


def tolerance_config(directory: Path, uris: dict[str, str], enabled: bool) -> Path:
    path = write_config(directory, uris, concurrency=32)
    config = json.loads(path.read_text())
    # The test driver's pools hold 100 GiB whatever their XML says: a disk ratio gives the
    # domains' disks room, so that evacuations mostly succeed, as in a fleet run with headroom.
    config["defaults"] = {"allocation_ratios": {"disk": 60.0}}
    config["scheduler"] = {"failure_tolerance": {"enabled": enabled}}
    hashed = bcrypt.hashpw(BENCH_WRITER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    config["claims"]["writers"] = {BENCH_WRITER[0]: hashed}
    path.write_text(json.dumps(config))
    return path


def post_claim(port: int, hypervisor: str) -> int:
    credentials = base64.b64encode(f"{BENCH_WRITER[0]}:{BENCH_WRITER[1]}".encode()).decode()
    body = json.dumps({"hypervisor": hypervisor, "vcpu": 1, "memory": "1GiB", "ttl": "10m"})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Authorization": f"Basic {credentials}", "Content-Type": "application/json"}
        connection.request("POST", "/api/v1/claims", body, headers)
        return connection.getresponse().status
    finally:
        connection.close()


def tolerance_while_scraped(scratch: Path, runs: int, hypervisors: int, domains: int, seconds: float) -> None:
    """/metrics while the exporter computes the fleet's failure tolerance: during its first, full
    computation, and while a claim a second on a random hypervisor has it computed again;
    next to the same fleet and claims with it turned off."""
    paths = make_hosts(
        scratch / f"tolerance-{hypervisors}x{domains}", hypervisors, domains, size=ROOMY, flavors=FITTING
    )
    uris = {n: f"test://{p}" for n, p in paths.items()}
    names = list(uris)
    rows: Table = []
    figures: dict[str, dict[str, list[float]]] = {}
    for enabled in (False, True):
        for _ in range(runs):
            config = tolerance_config(scratch, uris, enabled)
            with virtcap(config) as (port, _child, ready):
                if enabled:
                    started = time.monotonic()
                    measured = scrapes_while(port, lambda body: sample(body, DURATION) is None, 600)
                    first = figures.setdefault("on: first computation (full)", {})
                    first.setdefault("cycle", []).append(ready)
                    first.setdefault("took", []).append(metric_value(port, DURATION) or 0.0)
                    first.setdefault("window", []).append(time.monotonic() - started)
                    latency_figures(first, measured)
                stop = threading.Event()
                rng = random.Random(3)

                def claim_again_and_again(
                    port: int = port, stop: threading.Event = stop, rng: random.Random = rng
                ) -> None:
                    while not stop.is_set():
                        post_claim(port, rng.choice(names))
                        stop.wait(1.0)

                before = [metric_value(port, kind) or 0.0 for kind in (FULL, INCREMENTAL)]
                claimer = threading.Thread(target=claim_again_and_again, daemon=True)
                claimer.start()
                try:
                    measured = scrapes_while(port, None, seconds)
                finally:
                    stop.set()
                    claimer.join()
                label = "on: a claim a second" if enabled else "off: a claim a second"
                steady = figures.setdefault(label, {})
                steady.setdefault("cycle", []).append(ready)
                steady.setdefault("window", []).append(seconds)
                if enabled:
                    after = [metric_value(port, kind) or 0.0 for kind in (FULL, INCREMENTAL)]
                    steady.setdefault("full", []).append(after[0] - before[0])
                    steady.setdefault("incremental", []).append(after[1] - before[1])
                    steady.setdefault("took", []).append(metric_value(port, DURATION) or 0.0)
                latency_figures(steady, measured)
    for label, found in figures.items():
        rows.append(
            (
                label,
                cell(found["cycle"], " s", 1),
                cell(found["took"], " s", 2) if "took" in found else "-",
                f"{cell(found['full'], '', 0)} full, {cell(found['incremental'], '', 0)} incremental"
                if "full" in found
                else "-",
                cell(found["window"], " s", 0),
                cell(found["p50"], " ms"),
                cell(found["p99"], " ms"),
                cell(found["max"], " ms"),
            )
        )
    print_table(
        f"virtcap serve, {hypervisors} hypervisors x {domains} domains: /metrics while the failure "
        "tolerance is computed (in its worker process), and with it off",
        (
            "failure tolerance",
            "audit cycle",
            "last computation",
            "computed",
            "scraped for",
            "p50",
            "p99",
            "max",
        ),
        rows,
    )


DURATION = "virtcap_failure_tolerance_duration_seconds"
INCREMENTAL = 'virtcap_failure_tolerance_computations_total{kind="incremental"}'
FULL = 'virtcap_failure_tolerance_computations_total{kind="full"}'
ROOMY = (96, 1536, 100)
"""CPUs, GiB of memory and of disk pool of the failure-tolerance fleet: about half allocated."""
FITTING = tuple(replace(flavor, root_gib=min(flavor.root_gib, 80)) for flavor in FLAVORS)
"""The test driver's pools hold 100 GiB whatever their XML says: no disk may be larger."""
