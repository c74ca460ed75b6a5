"""A hypervisor that accepts connections and never answers, among healthy ones."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.serving import running_server, value, wait_for, write_fleet_config


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP port on loopback that accepts every connection and says nothing, ever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stopping.set()
        thread.join(timeout=2)
        for connection in held:
            connection.close()
        server.close()


def test_a_hung_hypervisor_never_holds_up_the_others(silent_listener: int, tmp_path: Path) -> None:
    healthy = ["compute-01", "compute-02", "compute-03"]
    hung = ("hung", f"qemu+tcp://127.0.0.1:{silent_listener}/system")
    config = write_fleet_config(tmp_path, healthy, [hung], audit="interval: 1s, timeout: 1s")
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(
            lambda: value(server.samples(), "hypervisor_up", hypervisor="hung") == 0.0, 5, what="hung down"
        )
        threads_early = server.threads()
        scrape_times = []
        threads = []
        ages: list[float] = []
        finish = time.monotonic() + 8
        while time.monotonic() < finish:
            started = time.monotonic()
            samples = server.samples()
            scrape_times.append(time.monotonic() - started)
            threads.append(server.threads())
            now = time.time()
            for name in healthy:
                assert value(samples, "hypervisor_up", hypervisor=name) == 1.0
                ages.append(
                    now - (value(samples, "hypervisor_audit_timestamp_seconds", hypervisor=name) or 0)
                )
            assert value(samples, "hypervisor_up", hypervisor="hung") == 0.0
            time.sleep(0.05)
        # the healthy ones stay fresh: audited every second (plus jitter), never waiting for the hung one
        assert max(ages) < 2.5, max(ages)
        # A scrape that waited for the hung audit would wait for what is left of its timeout of
        # 1 s, half of it on average: the typical scrape takes a fraction of that. A load of the
        # machine can hold up any one scrape (a timed bound on the slowest is for the benchmarks).
        assert statistics.median(scrape_times) < 0.25, sorted(scrape_times)[-5:]
        # One stuck call, never duplicated: the thread count does not grow with time. Audits of the
        # healthy hypervisors come and go, so compare the floor of the count at the start and the end.
        start, end = threads[: len(threads) // 4], threads[-len(threads) // 4 :]
        assert min(end) <= min(start) + 1, (threads_early, threads)
        assert max(threads) <= threads_early + len(healthy) + 1, (threads_early, threads)
        status, body = server.get("/probe?target=hung")
        assert status == 200 and b'hypervisor_up{hypervisor="hung"} 0.0' in body
        assert value(server.samples(), "virtcap_audits_total", hypervisor="hung", outcome="timeout") >= 1  # type: ignore[operator]
