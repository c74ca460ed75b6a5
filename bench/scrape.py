"""Scrape latency of one hypervisor: virtcap next to prometheus-libvirt-exporter (`--only scrape`)."""

from __future__ import annotations

from pathlib import Path

from harness import (
    PEER,
    Table,
    cell,
    latencies,
    make_hosts,
    peer,
    percentile,
    print_table,
    throughput,
    virtcap,
    write_config,
)


def scrape_comparison(scratch: Path, runs: int, sizes: list[int]) -> None:
    rows: Table = []
    for domains in sizes:
        path = make_hosts(scratch / f"single-{domains}", 1, domains)["bench-0000"]
        uri = f"test://{path}"
        ours: dict[str, list[float]] = {"p50": [], "p99": [], "rate": []}
        theirs: dict[str, list[float]] = {"p50": [], "p99": [], "rate": []}
        for _ in range(runs):
            with virtcap(write_config(scratch, {"bench-0000": uri})) as (port, _child, _ready):
                measured = latencies(port, 300)
                ours["p50"].append(percentile(measured, 0.5) * 1000)
                ours["p99"].append(percentile(measured, 0.99) * 1000)
                ours["rate"].append(throughput(port, 4, 2.0))
            with peer(uri) as port:
                measured = latencies(port, 30 if domains >= 2000 else 100)
                theirs["p50"].append(percentile(measured, 0.5) * 1000)
                theirs["p99"].append(percentile(measured, 0.99) * 1000)
                theirs["rate"].append(throughput(port, 4, 2.0))
        ratio = [t / o for t, o in zip(theirs["p50"], ours["p50"], strict=True)]
        rows.append(
            (
                str(domains),
                cell(ours["p50"], " ms"),
                cell(ours["p99"], " ms"),
                cell(ours["rate"], "/s", 0),
                cell(theirs["p50"], " ms"),
                cell(theirs["p99"], " ms"),
                cell(theirs["rate"], "/s", 0),
                cell(ratio, "x", 1),
            )
        )
    print_table(
        f"Scrape latency, one hypervisor: virtcap next to {PEER} (same node file)",
        (
            "domains",
            "virtcap p50",
            "virtcap p99",
            "virtcap req/s",
            "peer p50",
            "peer p99",
            "peer req/s",
            "peer/virtcap p50",
        ),
        rows,
    )
