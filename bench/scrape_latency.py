"""/metrics latency of `virtcap serve` for a test-driver fleet, measured from a second process.

    python bench/scrape_latency.py [--hypervisors 100] [--domains 100] [--requests 2000]

Prints a Markdown table: latency percentiles over sequential scrapes on one keep-alive
connection (as Prometheus scrapes), and throughput with several concurrent clients.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from virtcap import __version__
from virtcap.fleetgen import RUNNING, SHUTOFF, HostSpec, random_domain, write_fleet


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_fleet(directory: Path, hypervisors: int, domains: int) -> Path:
    rng = random.Random(7)
    hosts = []
    for h in range(hypervisors):
        name = f"bench-{h:04d}"
        specs = [random_domain(rng, name, i, RUNNING if i % 5 else SHUTOFF) for i in range(domains)]
        hosts.append(HostSpec(name, 64, 512, 100, 0, domains=specs))
    paths = write_fleet(hosts, directory / "nodes")
    config = {
        # audits keep running during the measurement: scrapes compete with them and with renders
        "audit": {"interval": "5s", "timeout": "20s"},
        "claims": {"database": ":memory:"},
        "hypervisors": [{"name": name, "uri": f"test://{path}"} for name, path in paths.items()],
        "flavors": [
            {"name": f"f{i}", "vcpu": 2**i, "memory": f"{2 ** (i + 1)}GiB", "disk": f"{10 * 2**i}GiB"}
            for i in range(5)
        ],
    }
    path = directory / "virtcap.yaml"
    path.write_text(json.dumps(config))
    return path


def wait_ready(port: int, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/-/ready")
            if connection.getresponse().status == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("virtcap did not become ready")


def sequential(port: int, count: int) -> tuple[list[float], int]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies = []
    size = 0
    for _ in range(count):
        started = time.perf_counter()
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read()
        latencies.append(time.perf_counter() - started)
        size = len(body)
    return latencies, size


def throughput(port: int, clients: int, seconds: float) -> float:
    done = [0] * clients
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < deadline:
            connection.request("GET", "/metrics")
            connection.getresponse().read()
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / seconds


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hypervisors", type=int, default=100)
    parser.add_argument("--domains", type=int, default=100)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="virtcap-bench-") as scratch:
        config = make_fleet(Path(scratch), args.hypervisors, args.domains)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "virtcap", "serve", "--config", str(config),
             "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warn"],
        )  # fmt: skip
        try:
            ready = wait_ready(port)
            sequential(port, 50)  # warm-up
            p50s, p99s, maxima, rates = [], [], [], []
            size = 0
            for _ in range(args.runs):
                latencies, size = sequential(port, args.requests)
                p50s.append(percentile(latencies, 0.50) * 1000)
                p99s.append(percentile(latencies, 0.99) * 1000)
                maxima.append(max(latencies) * 1000)
                rates.append(throughput(port, 4, 3.0))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)

    def cell(values: list[float], unit: str = "") -> str:
        spread = (max(values) - min(values)) / 2
        return f"{statistics.median(values):.2f}{unit} ± {spread:.2f}"

    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}"
    print(f"virtcap {__version__}, Python {platform.python_version()}, {machine}")
    fleet = f"{args.hypervisors} test-driver hypervisors x {args.domains} domains"
    print(f"fleet: {fleet}; /metrics {size / 1024:.0f} KiB; ready after {ready:.1f} s")
    print(f"median of {args.runs} runs ± half the range")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| /metrics p50, one keep-alive connection | {cell(p50s, ' ms')} |")
    print(f"| /metrics p99, one keep-alive connection | {cell(p99s, ' ms')} |")
    print(f"| /metrics max | {cell(maxima, ' ms')} |")
    print(f"| throughput, 4 concurrent clients | {cell(rates, ' req/s')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
