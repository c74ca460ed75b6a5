"""`virtcap serve` against the session's private libvirtd: lifecycle events, a hung daemon, a
restarted one."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.claims_client import HASH, WRITER, call, claim
from tests.support.libvirtd import Libvirtd
from tests.support.serving import Server, running_server, value, wait_for

pytestmark = pytest.mark.libvirtd

GUEST = """
<domain type='qemu'>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>64</memory>
  <vcpu>3</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>"""


def config_file(directory: Path, uri: str, interval: str, timeout: str = "2s") -> Path:
    path = directory / "virtcap.yaml"
    path.write_text(
        f"""
audit:
  {{interval: {interval}, timeout: {timeout}, keepalive_interval: 1s, keepalive_count: 2, stale_after: 1h}}
claims: {{database: {directory / "claims.sqlite"}, writers: {{{WRITER[0]}: "{HASH}"}}}}
hypervisors:
  - {{name: local, uri: "{uri}"}}
"""
    )
    return path


def shutoff_vcpus(server: Server) -> float | None:
    return value(
        server.samples(), "hypervisor_resource_allocated", hypervisor="local", resource="vcpu", unit="cpus",
        state="shutoff",
    )  # fmt: skip


def up(server: Server) -> float | None:
    return value(server.samples(), "hypervisor_up", hypervisor="local")


@pytest.fixture
def admin(libvirtd: Libvirtd) -> Iterator[Any]:
    """A read-write connection for the test's own changes; the domains it defined are removed."""
    conn: Any = libvirt.open(libvirtd.uri)
    prefix = f"virtcap-events-{uuid.uuid4().hex[:6]}"
    conn.test_prefix = prefix
    try:
        yield conn
    finally:
        # a fresh connection: the test may have restarted the daemon under the first one
        cleaner: Any = libvirt.open(libvirtd.uri)
        for domain in cleaner.listAllDomains(0):
            if domain.name().startswith(prefix):
                if domain.isActive():
                    domain.destroy()
                domain.undefine()
        cleaner.close()
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def define_and_undefine_are_seen_within_2s(server: Server, admin: Any, suffix: str) -> tuple[float, float]:
    before = shutoff_vcpus(server) or 0.0
    started = time.monotonic()
    domain = admin.defineXML(GUEST.format(name=f"{admin.test_prefix}-{suffix}", uuid=uuid.uuid4()))
    wait_for(
        lambda: shutoff_vcpus(server) == before + 3, 2.0, interval=0.02, what="the defined domain in /metrics"
    )
    defined = time.monotonic() - started
    started = time.monotonic()
    domain.undefine()
    wait_for(lambda: shutoff_vcpus(server) == before, 2.0, interval=0.02, what="the undefined domain gone")
    return defined, time.monotonic() - started


def test_lifecycle_events_reach_metrics_within_2s(libvirtd: Libvirtd, admin: Any, tmp_path: Path) -> None:
    # The interval is an hour: only the events can explain an update within 2 seconds.
    with running_server(["--config", str(config_file(tmp_path, libvirtd.uri, "1h"))], tmp_path) as server:
        assert up(server) == 1.0
        defined, undefined = define_and_undefine_are_seen_within_2s(server, admin, "a")
        assert defined < 2.0 and undefined < 2.0


def test_a_hung_libvirtd_is_marked_down_while_metrics_keep_answering(
    libvirtd: Libvirtd, tmp_path: Path
) -> None:
    with running_server(
        ["--config", str(config_file(tmp_path, libvirtd.uri, "2s", timeout="2s"))], tmp_path
    ) as server:
        assert up(server) == 1.0
        baseline_threads = server.threads()
        libvirtd.pause()
        try:
            scrape_times: list[float] = []

            def down_and_timed() -> bool:
                started = time.monotonic()
                is_down = up(server) == 0.0
                scrape_times.append(time.monotonic() - started)
                return is_down

            # the next audit starts within an interval (2s + 10% jitter) and times out 2s later
            took = wait_for(down_and_timed, 2.2 + 2.0 + 1.0, interval=0.1, what="hypervisor_up 0")
            hang_started = time.monotonic()
            threads = []
            while time.monotonic() - hang_started < 6:
                started = time.monotonic()
                server.samples()
                scrape_times.append(time.monotonic() - started)
                threads.append(server.threads())
                time.sleep(0.1)
        finally:
            libvirtd.resume()
        assert took <= 5.2
        assert max(scrape_times) < 0.5, max(scrape_times)
        # the stuck call is never duplicated: at most the stuck audit and a reconnect attempt
        assert max(threads) <= baseline_threads + 3, (baseline_threads, threads)
        wait_for(lambda: up(server) == 1.0, 15, interval=0.1, what="recovery after SIGCONT")
        assert "hypervisor down" in server.log_text()


def test_a_restarted_libvirtd_is_reconnected(libvirtd: Libvirtd, admin: Any, tmp_path: Path) -> None:
    with running_server(["--config", str(config_file(tmp_path, libvirtd.uri, "2s"))], tmp_path) as server:
        assert up(server) == 1.0
        libvirtd.kill()
        wait_for(lambda: up(server) == 0.0, 5, interval=0.1, what="down after SIGKILL")
        libvirtd.start()
        wait_for(lambda: up(server) == 1.0, 10, interval=0.1, what="up after restart")
        assert "connection closed" in server.log_text()
        # events are registered again on the new connection
        fresh: Any = libvirt.open(libvirtd.uri)
        fresh.test_prefix = admin.test_prefix
        try:
            defined, undefined = define_and_undefine_are_seen_within_2s(server, fresh, "b")
        finally:
            fresh.close()
        assert defined < 2.0 and undefined < 2.0


def test_a_claim_is_reconciled_when_its_domain_is_defined(
    libvirtd: Libvirtd, admin: Any, tmp_path: Path
) -> None:
    with running_server(["--config", str(config_file(tmp_path, libvirtd.uri, "1h"))], tmp_path) as server:
        vcpu = {"hypervisor": "local", "resource": "vcpu", "unit": "cpus"}
        before = value(server.samples(), "hypervisor_resource_used", **vcpu) or 0.0
        domain_uuid = str(uuid.uuid4())
        # One vCPU: no claim may be larger than the host (max_unit = its CPUs, two on a small runner)
        status, created = claim(server, hypervisor="local", vcpu=1, memory="64MiB", domain_uuid=domain_uuid)
        assert status == 201, created
        wait_for(
            lambda: value(server.samples(), "hypervisor_resource_used", **vcpu) == before + 1, 2, what="claim"
        )
        started = time.monotonic()
        admin.defineXML(GUEST.format(name=f"{admin.test_prefix}-claimed", uuid=domain_uuid))
        wait_for(
            lambda: call(server, "GET", f"/api/v1/claims/{created['id']}")[0] == 404,
            2,
            interval=0.05,  # timed below
            what="reconciled",
        )
        reconciled_after = time.monotonic() - started
        # the domain carries its 3 vCPUs now, the claim its 1 no longer: counted once
        wait_for(lambda: value(server.samples(), "virtcap_claims_total", outcome="reconciled") == 1, 2)
        samples = server.samples()
        assert value(samples, "hypervisor_resource_used", **vcpu) == before + 3
        assert value(samples, "hypervisor_resource_claimed", **vcpu) == 0
        assert reconciled_after < 2.0
