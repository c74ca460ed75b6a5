"""/metrics latency of virtcap for a fleet, audits running meanwhile (`--only scale`)."""

from __future__ import annotations

from pathlib import Path

from harness import (
    cell,
    latencies,
    make_hosts,
    percentile,
    print_table,
    virtcap,
    write_config,
)


def scrape_at_scale(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    paths = make_hosts(scratch / f"fleet-{hypervisors}x{domains}", hypervisors, domains)
    # audits every 5 s during the measurement: scrapes compete with audits and re-renders
    config = write_config(scratch, {n: f"test://{p}" for n, p in paths.items()}, interval="5s")
    p50s, p99s, maxima = [], [], []
    for _ in range(runs):
        with virtcap(config) as (port, _child, _ready):
            latencies(port, 50)
            measured = latencies(port, 2000)
            p50s.append(percentile(measured, 0.5) * 1000)
            p99s.append(percentile(measured, 0.99) * 1000)
            maxima.append(max(measured) * 1000)
    print_table(
        f"virtcap /metrics, {hypervisors} hypervisors x {domains} domains, audits every 5 s",
        ("p50", "p99", "max"),
        [(cell(p50s, " ms"), cell(p99s, " ms"), cell(maxima, " ms"))],
    )
