"""/metrics while one hypervisor of the fleet hangs, and what the peer does then (`--only hung`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import (
    PEER,
    Table,
    cell,
    get,
    latencies,
    make_hosts,
    peer,
    percentile,
    print_table,
    virtcap,
    write_config,
)


@contextmanager
def silent_listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for connection in held:
            connection.close()
        server.close()


def hung_hypervisor(scratch: Path, runs: int) -> None:
    paths = make_hosts(scratch / "hung", 10, 50)
    rows: Table = []
    with silent_listener() as port_of_hung:
        hung_uri = f"qemu+tcp://127.0.0.1:{port_of_hung}/system"
        uris = {n: f"test://{p}" for n, p in paths.items()} | {"hung": hung_uri}
        config = write_config(scratch, uris, interval="2s", timeout="1s")
        p50s, p99s = [], []
        for _ in range(runs):
            with virtcap(config) as (port, _child, _ready):
                time.sleep(3)  # the hung one has timed out at least once
                measured = latencies(port, 1000)
                p50s.append(percentile(measured, 0.5) * 1000)
                p99s.append(percentile(measured, 0.99) * 1000)
        rows.append(("virtcap: 10 healthy + 1 hung", cell(p50s, " ms"), cell(p99s, " ms")))
        peer_times = []
        for _ in range(runs):
            with peer(hung_uri) as port:
                started = time.monotonic()
                status = get(port, "/metrics", timeout=10)
                peer_times.append(time.monotonic() - started)
        outcome = "no answer within 10 s" if all(t >= 9.9 for t in peer_times) else f"status {status}"
        rows.append((f"{PEER} on the hung one", cell(peer_times, " s"), outcome))
    print_table(
        "/metrics while one hypervisor hangs (accepts, never answers)", ("exporter", "p50", "p99"), rows
    )
