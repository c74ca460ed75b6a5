"""Hostile libvirt peers among healthy hypervisors: the exporter keeps serving and stops on SIGTERM.

One hypervisor must never cost the rest of the fleet its monitoring, whatever its peer does:
resets, garbage, a reply that stops mid-message, or silence.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.faults import hostile_peers
from tests.support.serving import Server, running_server, value, wait_for, write_fleet_config

HEALTHY = ("compute-01", "compute-02", "compute-03", "compute-04", "compute-05")


def fleet_config(directory: Path, broken: list[tuple[str, str]]) -> Path:
    audit = "interval: 1s, timeout: 2s, keepalive_interval: 1s, keepalive_count: 2, concurrency: 64"
    return write_fleet_config(directory, HEALTHY, broken, audit)


def rss_kib(server: Server) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def answered(server: Server, path: str) -> None:
    """The path answers 200 within 5 s: a frozen event loop does not."""
    status, _ = server.get(path, timeout=5.0)
    assert status == 200, (path, status)


def stops_on_sigterm_within(server: Server, seconds: float) -> int:
    server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"virtcap ignored SIGTERM for {seconds}s: {server.log_text()[-2000:]}") from None


@pytest.mark.parametrize("kind", ["reset", "garbage", "stall", "hang"])
def test_one_kind_of_hostile_peer_never_freezes_the_exporter(kind: str, tmp_path: Path) -> None:
    """Two peers of one kind, audited every second: within 8 s the resetting kind froze the whole
    process (the event loop and the audit threads waited for each other inside libvirt)."""
    with hostile_peers({kind: 2}) as peers:
        broken = [(f"{kind}-{i}", peer.uri) for i, peer in enumerate(peers)]
        with running_server(["--config", str(fleet_config(tmp_path, broken))], tmp_path) as server:
            finish = time.monotonic() + 10
            while time.monotonic() < finish:
                answered(server, "/-/healthy")
                samples = server.samples()
                for name in HEALTHY:
                    assert value(samples, "hypervisor_up", hypervisor=name) == 1.0
                time.sleep(0.1)
            for name, _uri in broken:
                assert value(server.samples(), "hypervisor_up", hypervisor=name) == 0.0
            assert stops_on_sigterm_within(server, 5) == 0
        assert sum(peer.accepted for peer in peers) >= 2


def test_fifty_hostile_peers_for_a_minute(tmp_path: Path) -> None:
    """The acceptance run: 5 healthy and 50 broken peers for 60 s."""
    counts = {"reset": 17, "garbage": 17, "hang": 8, "stall": 8}
    with hostile_peers(counts) as peers:
        broken = [(f"{peer.kind}-{i}", peer.uri) for i, peer in enumerate(peers)]
        with running_server(["--config", str(fleet_config(tmp_path, broken))], tmp_path) as server:
            # Every peer tried once at least (a hanging one is never tried again while its call is stuck).
            wait_for(lambda: all(p.accepted >= 1 for p in peers), 20, interval=0.2, what="peers tried")
            threads_start, rss_start = server.threads(), rss_kib(server)
            threads: list[int] = []
            rss: list[int] = []
            finish = time.monotonic() + 60
            while time.monotonic() < finish:
                # how soon they answer is bench/hostile.py's figure, not a test's
                answered(server, "/-/healthy")
                answered(server, "/metrics")
                now = time.time()
                samples = server.samples()
                for name in HEALTHY:
                    assert value(samples, "hypervisor_up", hypervisor=name) == 1.0
                    audited = value(samples, "hypervisor_audit_timestamp_seconds", hypervisor=name) or 0
                    assert now - audited < 5.0, (name, now - audited)
                threads.append(server.threads())
                rss.append(rss_kib(server))
                time.sleep(0.05)
            # Bounded: at most one stuck call per hypervisor, never growing with time.
            assert max(threads) <= threads_start + len(peers) + 10, (threads_start, max(threads))
            # Audits and reconnects come and go; a leak of one thread per audit would add hundreds.
            quarter = len(threads) // 4
            assert statistics.median(threads[-quarter:]) <= statistics.median(threads[:quarter]) + 10, threads
            assert statistics.median(rss[-len(rss) // 4 :]) < rss_start * 1.25 + 20_000, (rss_start, rss)
            assert stops_on_sigterm_within(server, 5) == 0
