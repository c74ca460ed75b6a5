"""What the benchmark's scenarios share: test-driver fleets and their configuration, `virtcap serve`
and prometheus-libvirt-exporter started and stopped, /metrics timed, and the Markdown tables.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from virtcap.demo.fleetgen import FLAVORS, RUNNING, SHUTOFF, FlavorSpec, HostSpec, random_domain, write_fleet

PEER = "prometheus-libvirt-exporter"
Table = list[tuple[str, ...]]
BENCH_CPUS = frozenset(os.sched_getaffinity(0))
"""The CPUs the benchmark was started on, whatever a scraper apart has since pinned itself to."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_hosts(
    directory: Path,
    hypervisors: int,
    domains: int,
    *,
    seed: int = 7,
    size: tuple[int, int, int] = (64, 512, 100),
    flavors: tuple[FlavorSpec, ...] = FLAVORS,
) -> dict[str, Path]:
    """Hypervisors of `size` (CPUs, GiB of memory, GiB of disk pool) with random domains."""
    rng = random.Random(seed)
    cpus, memory_gib, pool_gib = size
    hosts = []
    for h in range(hypervisors):
        name = f"bench-{h:04d}"
        specs = [
            random_domain(rng, name, i, RUNNING if i % 5 else SHUTOFF, flavors=flavors)
            for i in range(domains)
        ]
        hosts.append(HostSpec(name, cpus, memory_gib, pool_gib, 0, domains=specs))
    return write_fleet(hosts, directory)


def write_config(directory: Path, uris: dict[str, str], interval: str = "1h", **audit: Any) -> Path:
    config = {
        "audit": {"interval": interval, "timeout": "60s", **audit},
        "claims": {"database": ":memory:"},
        "hypervisors": [{"name": name, "uri": uri} for name, uri in uris.items()],
        "flavors": [
            {"name": f"f{i}", "vcpu": 2**i, "memory": f"{2 ** (i + 1)}GiB", "disk": f"{10 * 2**i}GiB"}
            for i in range(5)
        ],
    }
    path = directory / f"virtcap-{len(uris)}.yaml"
    path.write_text(json.dumps(config))
    return path


def get(port: int, path: str, timeout: float = 10) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def wait(condition: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout}s")
        time.sleep(0.01)
    return time.monotonic() - started


@contextmanager
def process(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextmanager
def virtcap(
    config: Path, *, scraper_apart: bool = False, workers_apart: bool = False
) -> Iterator[tuple[int, subprocess.Popen[bytes], float]]:
    """A running `virtcap serve`, and how long it took from start to ready.

    `scraper_apart`: the exporter and every process it starts on all CPUs but one, and this process,
    which scrapes it, on that one until the exporter stops, as a Prometheus on a machine of its own.
    On two shared CPUs, the kernel wakes a scraper on the exporter's CPU rather than on one an idle
    worker holds (SCHED_IDLE): a process that only spins at that priority made a local scrape of a
    10 MB body 1 to 1.5 ms slower at the p99, and none once the scraper had its CPU. Apart, what
    the scrapes measure is the exporter's doing. Linux only; nothing changes on a single CPU.

    `workers_apart` (with `scraper_apart`): the processes the exporter starts (its workers) on the
    scraper's CPU instead, as they appear (`WorkersApart`), so that no worker computes on the CPU
    of the exporter's event loop."""
    port = free_port()
    command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config)]
    command += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"]
    every_cpu = os.sched_getaffinity(0)
    scraper_cpu = scrapers_cpu() if scraper_apart else None
    started = time.monotonic()
    try:
        if scraper_cpu is not None:
            os.sched_setaffinity(0, every_cpu - scraper_cpu)  # what this thread starts inherits it
        with process(command) as child, contextlib.ExitStack() as apart:
            if scraper_cpu is not None:
                os.sched_setaffinity(0, scraper_cpu)
                if workers_apart:
                    apart.enter_context(WorkersApart(child.pid, scraper_cpu))
            wait(lambda: get(port, "/-/ready") == 200, 600)
            yield port, child, time.monotonic() - started
    finally:
        os.sched_setaffinity(0, every_cpu)


class WorkersApart:
    """Every process a running exporter starts (and theirs) kept on `cpus`, the scraper's CPU.

    Where the exporter has one CPU, its idle-class worker shares it with the event loop, and Linux
    (6.18, EEVDF) gives even a SCHED_IDLE thread its small share of a busy CPU in turns of a whole
    scheduler tick (4 ms at 250 Hz): a scrape that arrives in such a turn waits it out. With its
    workers apart, the exporter's loop has a CPU that no worker computes on (on a machine with
    more CPUs, Linux decides, and may still wake the loop beside a worker). The scraper's CPU
    shared with an idle-class worker can only add to what the scrapes measure, never take from
    it; a scraper that fills its CPU (back to back) slows the worker down instead.

    A thread a pinned one starts inherits its affinity, so a process is pinned on the first few
    looks after it appears (`PINNED_LOOKS`: a thread started between listing and pinning is
    caught on the next), and then only the exporter's children are looked at, every
    `PERIOD_SECONDS`, from a thread of this process."""

    PERIOD_SECONDS = 0.25
    PINNED_LOOKS = 3

    def __init__(self, exporter: int, cpus: set[int]) -> None:
        self.exporter, self.cpus = exporter, cpus
        self._looks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_apart, name="workers-apart", daemon=True)

    def __enter__(self) -> WorkersApart:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _keep_apart(self) -> None:
        while True:
            for pid in descendants(self.exporter):
                looks = self._looks.get(pid, 0)
                if looks < self.PINNED_LOOKS:
                    self._looks[pid] = looks + 1
                    for thread in threads_of([pid]):
                        with contextlib.suppress(OSError):  # ended meanwhile
                            os.sched_setaffinity(thread, self.cpus)
            if self._stop.wait(self.PERIOD_SECONDS):
                return


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (Linux's per-thread children lists)."""
    found: list[int] = []
    for thread in threads_of([pid]):
        with contextlib.suppress(OSError):
            for child in Path(f"/proc/{pid}/task/{thread}/children").read_text().split():
                found += [int(child), *descendants(int(child))]
    return found


def scrapers_cpu() -> set[int] | None:
    """The CPU a scraper apart has to itself (`virtcap(scraper_apart=True)`); None on one CPU."""
    return {max(BENCH_CPUS)} if len(BENCH_CPUS) > 1 else None


def off_the_scrapers_cpu(pids: Iterable[int]) -> None:
    """Every thread of these processes (a Placement the exporter reads, say) on the exporter's
    CPUs, off the one a scraper apart has: what stands for another machine is then counted
    against the exporter, never against the scraper. Linux sets affinity per thread."""
    scraper_cpu = scrapers_cpu()
    if scraper_cpu is None:
        return
    for thread in threads_of(pids):
        with contextlib.suppress(OSError):  # ended meanwhile
            os.sched_setaffinity(thread, BENCH_CPUS - scraper_cpu)


def threads_of(pids: Iterable[int]) -> list[int]:
    """Every thread of these processes (Linux sets priority and affinity per thread), those of a
    process gone meanwhile left out."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            found += [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    return found


@contextmanager
def peer(uri: str) -> Iterator[int]:
    port = free_port()
    with process([PEER, f"--web.listen-address=127.0.0.1:{port}", f"--libvirt.uri={uri}"]):
        wait(lambda: get(port, "/", timeout=2) in (200, 404), 30)
        yield port


class BodyBuffer:
    """Where a scraper reads its bodies: one buffer kept from a scrape to the next, as Prometheus
    keeps its own (its scrape loop takes a buffer of the last body's size from a pool and gives it
    back). A fresh 8 MiB body each time (`HTTPResponse.read()`) made the timed scrape pay the
    scraper's own page faults now and then (2,000 of them, 3 to 4 ms of the scraper's CPU), the
    more often the more the machine's memory churned: a computing worker then showed in the
    scrapes' p99 as if the exporter had been slow."""

    def __init__(self) -> None:
        self._buffer = bytearray(1 << 20)
        self._size = 0

    def read(self, response: http.client.HTTPResponse) -> int:
        """The whole body read into the buffer (grown as needed); its size."""
        size = 0
        while True:
            if size == len(self._buffer):
                self._buffer.extend(bytes(len(self._buffer)))  # no view of it is held meanwhile
            with memoryview(self._buffer) as view:
                read = response.readinto(view[size:])
            if not read:
                break
            size += read
        self._size = size
        return size

    def body(self) -> bytes:
        """The last body read, as bytes of its own (made outside the timed scrape)."""
        return bytes(self._buffer[: self._size])


def latencies(port: int, count: int, path: str = "/metrics") -> list[float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    buffer = BodyBuffer()
    result = []
    for _ in range(count):
        started = time.perf_counter()
        connection.request("GET", path)
        buffer.read(connection.getresponse())
        result.append(time.perf_counter() - started)
    connection.close()
    return result


def throughput(port: int, clients: int, seconds: float) -> float:
    done = [0] * clients
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        buffer = BodyBuffer()
        while time.monotonic() < deadline:
            connection.request("GET", "/metrics")
            buffer.read(connection.getresponse())
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


def cell(values: list[float], unit: str = "", digits: int = 2) -> str:
    spread = (max(values) - min(values)) / 2
    return f"{statistics.median(values):.{digits}f}{unit} ± {spread:.{digits}f}"


def print_table(title: str, header: tuple[str, ...], rows: Table) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


SCRAPE_PERIOD_SECONDS = 0.1
"""A scraper at a fixed cadence, ten a second: a stall of the exporter then shows in every scrape
it meets, as a scraper on a schedule (Prometheus) meets it. Back to back, a scraper waits for
each answer before it asks again, and a 0.4 s stall is one slow scrape among hundreds."""


SCRAPERS = (
    ("back to back", None, False),
    ("10 a second", SCRAPE_PERIOD_SECONDS, False),
    ("10 a second gzipped", SCRAPE_PERIOD_SECONDS, True),
)
"""How the serving benchmarks scrape /metrics (`scrapes_while`'s period and whether it asks for
gzip, as Prometheus does), each named."""


class Scraper:
    """One keep-alive connection to an exporter, and the buffer its bodies are read into
    (`BodyBuffer`), kept for as long as the exporter is scraped, as Prometheus keeps its own. A
    window on a connection of its own paid that connection's first scrape: an 8 MiB body over a new
    connection (slow start, its receive buffer still small) took 5 to 13 ms against a p50 of 3.5,
    and windows that opened five connections (one per claim) against one for as many scrapes showed
    it at the p99."""

    def __init__(self, port: int) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self._buffer = BodyBuffer()

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._connection.close()

    def scrapes_while(
        self,
        busy: Callable[[bytes], bool] | None,
        limit: float,
        period: float | None = None,
        *,
        gzipped: bool = False,
    ) -> list[float]:
        """/metrics while `busy(body)` holds for the body of the last scrape (`sample` reads it:
        no scrape of its own), at most `limit` s (`busy` None: for `limit` s): back to back
        (`period` None) or one every `period` s, asking for gzip or not; the seconds each took to
        arrive. A gzipped body is decompressed after each scrape, whether `busy` reads it or not,
        as Prometheus does: 8 MiB take the scraper 30 ms of a CPU, and a window that skipped it
        scraped faster (ten gzipped scrapes a second of 1,000 hypervisors: p50 1.0 ms against 2.2
        ms, the same exporter with nothing to compute), so windows compared must do the same
        work."""
        headers = {"Accept-Encoding": "gzip"} if gzipped else {}
        result: list[float] = []
        deadline = time.monotonic() + limit
        due = time.perf_counter()
        while time.monotonic() < deadline:
            if period is not None:
                time.sleep(max(due - time.perf_counter(), 0.0))
                due = max(due + period, time.perf_counter())  # after a stall: on, not in a burst
            started = time.perf_counter()
            self._connection.request("GET", "/metrics", headers=headers)
            self._buffer.read(self._connection.getresponse())
            result.append(time.perf_counter() - started)
            body = self._buffer.body()
            if gzipped:
                body = gzip.decompress(body)
            if busy is not None and not busy(body):
                break
        return result


def scrapes_while(
    port: int,
    busy: Callable[[bytes], bool] | None,
    limit: float,
    period: float | None = None,
    *,
    gzipped: bool = False,
) -> list[float]:
    """`Scraper.scrapes_while` over a connection of its own: for an exporter scraped in one window."""
    with Scraper(port) as scraper:
        return scraper.scrapes_while(busy, limit, period, gzipped=gzipped)


def latency_figures(figures: dict[str, list[float]], measured: list[float]) -> None:
    """A run's p50, p99 and max of `measured` (seconds) added to `figures`, in milliseconds."""
    figures.setdefault("p50", []).append(percentile(measured, 0.5) * 1000)
    figures.setdefault("p99", []).append(percentile(measured, 0.99) * 1000)
    figures.setdefault("max", []).append(max(measured) * 1000)


def sample(body: bytes, name: str) -> float | None:
    """The value of the series `name` (without labels) in a /metrics body, None if absent."""
    start = body.find(b"\n" + name.encode() + b" ")
    if start < 0:
        return None
    start += len(name) + 2
    return float(body[start : body.index(b"\n", start)])


def metric_value(port: int, name: str) -> float | None:
    """One sample of /metrics (`name` with its labels as rendered), None if absent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None
