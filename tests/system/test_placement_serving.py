"""The Placement reconciliation as an operator meets it: a real `virtcap serve` (tests/support/
serving.py) with `placement:` configured, reading a real Placement 16 (tests/support/
placement_server.py) that holds planted drift. Every family is on /metrics with the planted values
and promtool finds nothing to say of them. Then Placement misbehaves (answering 500, answering
HTML, hung, killed): scrapes still answer at once, audits go on, `virtcap_placement_up` is 0 and
the per-hypervisor families are gone (never stale), one log line per kind of failure and no
traceback; once Placement is back, so are `up` and the families. Configuration errors of the
section end the command with exit 2, the file and the key named."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.placement_loader import PROJECT_ID, PlacementLoader, nova_inventories
from tests.support.placement_server import (
    MisbehavingProxy,
    Misbehaviour,
    PlacementServer,
    running_placement,
)
from tests.support.serving import (
    WORKER_SECONDS,
    Samples,
    Server,
    free_port,
    parse_samples,
    running_server,
    series,
    value,
    wait_for,
)
from virtcap.service.placement import failure_kind

UUIDS = {name: f"00000000-0000-4000-8000-00000000000{index}" for index, name in enumerate("abc", start=1)}
LEAKED = "00000000-0000-4000-8000-0000000000ff"
SMALL_ALLOCATION = {"VCPU": 1, "MEMORY_MB": 2048}
MIB = 1024 * 1024

PLACEMENT_TIMEOUT = 1.0
"""Each request's bound, short so that a hung Placement costs a round little."""
ROUNDS = "500ms"
"""Audits and Placement rounds this far apart: every step below waits for a few of them."""
FAMILIES_SECONDS = WORKER_SECONDS
"""For the families after serve starts or Placement is back: the rounds run in a worker at idle
priority, which waits for a CPU while the suite's other tests hold them."""
FAILURE_SECONDS = WORKER_SECONDS
"""For a failed round and the next (in the same worker)."""
PER_HYPERVISOR = (
    "hypervisor_placement_inventory_drift",
    "hypervisor_placement_orphaned_consumers",
    "hypervisor_placement_orphaned_allocation",
    "hypervisor_placement_unallocated_domains",
    "hypervisor_placement_unallocated_allocation",
    "hypervisor_placement_mismatched_allocations",
    "hypervisor_placement_usage_drift",
)


def guest(name: str) -> str:
    """A running Nova instance of m1.small (1 vCPU, 2 GiB) in the test driver's XML."""
    return f"""
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>{name}</name><uuid>{UUIDS[name]}</uuid>
    <memory unit='MiB'>2048</memory><currentMemory unit='MiB'>2048</currentMemory>
    <vcpu placement='static'>1</vcpu>
    <metadata><nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>
      <nova:flavor name='m1.small'><nova:memory>2048</nova:memory><nova:disk>0</nova:disk>
        <nova:swap>0</nova:swap><nova:ephemeral>0</nova:ephemeral><nova:vcpus>1</nova:vcpus></nova:flavor>
      <nova:owner><nova:user uuid='u'>u</nova:user>
        <nova:project uuid='{PROJECT_ID}'>demo</nova:project></nova:owner>
    </nova:instance></metadata>
    <os><type arch='x86_64'>hvm</type></os>
    <test:runstate>1</test:runstate>
  </domain>"""


def write_config(directory: Path, endpoint: str) -> Path:
    """hv1: 16 CPUs, 64 GiB, guests a, b and c, its provider hv1-node; hv2 matches no provider."""
    node = directory / "hv1.xml"
    node.write_text(
        "<node><cpu><mhz>2600</mhz><model>Xeon</model><active>16</active><nodes>1</nodes>"
        "<sockets>1</sockets><cores>16</cores><threads>1</threads></cpu>"
        f"<memory>{64 * 1024 * 1024}</memory>{''.join(guest(name) for name in UUIDS)}</node>\n"
    )
    path = directory / "virtcap.yaml"
    path.write_text(
        f"""
audit: {{interval: {ROUNDS}}}
claims: {{database: {directory / "claims.sqlite"}}}
placement: {{endpoint: '{endpoint}', timeout: {PLACEMENT_TIMEOUT:g}s, interval: {ROUNDS}}}
hypervisors:
  - {{name: hv1, uri: 'test://{node}', placement_provider: hv1-node}}
  - {{name: hv2, uri: 'test:///default', placement_provider: nowhere}}
"""
    )
    return path


def plant(base_url: str) -> None:
    """hv1-node's reserved memory wrong (4096 MiB, Nova's 512), a correct allocation (a), a
    missing one (b), a resized one (c: 2 vCPUs), a leaked one."""
    loader = PlacementLoader(base_url)
    # no disk is configured: virtcap reports none, nor does Nova without a disk of its own
    inventories = nova_inventories(16, 64 * 1024, 1, reserved_host_memory_mb=4096)
    del inventories["DISK_GB"]
    loader.load(
        {
            "providers": [{"name": "hv1-node", "inventories": inventories}],
            "consumers": [
                {"uuid": UUIDS["a"], "allocations": {"hv1-node": SMALL_ALLOCATION}},
                {"uuid": UUIDS["c"], "allocations": {"hv1-node": {**SMALL_ALLOCATION, "VCPU": 2}}},
                {"uuid": LEAKED, "allocations": {"hv1-node": SMALL_ALLOCATION}},
            ],
        }
    )


class WatchedProxy(MisbehavingProxy):
    """The harness's proxy, which also notes when a request reaches it and can misbehave only
    for the paths that contain `misbehaving_paths` (a Placement breaking in the middle of a
    round: a provider's reads fail before the next round's list of providers does)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.misbehaving_paths = ""
        self.arrivals = 0
        self.last_arrival = 0.0
        self._lock = threading.Lock()

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._lock:
            self.arrivals += 1
            self.last_arrival = time.monotonic()
        if self.misbehaving_paths not in path:
            return self.forward(method, path, headers, body)
        return super().answer(method, path, headers, body)

    def behave(self) -> None:
        self.misbehaviour, self.misbehaving_paths = Misbehaviour.FORWARD, ""


class RestartablePlacement:
    """The module's Placement, planted once; killed, it can be started again at the same address
    with the same database, so that a test that kills it leaves it as it found it."""

    def __init__(self, directory: Path, stack: contextlib.ExitStack) -> None:
        self.directory, self.port, self._stack = directory, free_port(), stack
        self.server = self._started()
        self.base_url = self.server.base_url

    def restart(self) -> None:
        self.server = self._started()

    def _started(self) -> PlacementServer:
        return self._stack.enter_context(running_placement(self.directory, port=self.port))


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartablePlacement]:
    with contextlib.ExitStack() as stack:
        restartable = RestartablePlacement(tmp_path_factory.mktemp("placement"), stack)
        plant(restartable.base_url)
        yield restartable


def samples_of(server: Server) -> Samples:
    """A scrape, answered within the serving tests' usual bound (Server.get's timeout)."""
    return server.samples()


def per_hypervisor_families(samples: Samples) -> set[str]:
    return {name for name in PER_HYPERVISOR if series(samples, name)}


def placement_up(server: Server) -> float | None:
    return value(samples_of(server), "virtcap_placement_up")


def reconciled(server: Server) -> bool:
    """Placement read and every per-hypervisor family there."""
    samples = samples_of(server)
    return value(samples, "virtcap_placement_up") == 1 and per_hypervisor_families(samples) == set(
        PER_HYPERVISOR
    )


def assert_planted(samples: Samples) -> None:
    assert value(samples, "virtcap_placement_up") == 1
    drift = series(samples, "hypervisor_placement_inventory_drift", hypervisor="hv1")
    reserved_memory = frozenset({("hypervisor", "hv1"), ("resource", "memory"), ("field", "reserved")})
    assert drift.pop(reserved_memory) == (4096 - 512) * MIB
    assert set(drift.values()) == {0}
    one_small = {"vcpu": 1, "memory": 2048 * MIB}
    for family in ("hypervisor_placement_orphaned_allocation", "hypervisor_placement_unallocated_allocation"):
        amounts = {dict(labels)["resource"]: amount for labels, amount in series(samples, family).items()}
        assert amounts == one_small, family
    for family in (
        "hypervisor_placement_orphaned_consumers",
        "hypervisor_placement_unallocated_domains",
        "hypervisor_placement_mismatched_allocations",
    ):
        assert series(samples, family) == {frozenset({("hypervisor", "hv1")}): 1}, family
    # Placement holds a, c (2 vCPUs) and the leak; libvirt shows a, b and c
    usage = {
        dict(labels)["resource"]: amount
        for labels, amount in series(samples, "hypervisor_placement_usage_drift").items()
    }
    assert usage["vcpu"] == (1 + 2 + 1) - 3 and usage["memory"] == 0
    assert value(samples, "virtcap_placement_unmatched_hypervisors") == 1  # hv2
    assert (value(samples, "virtcap_placement_last_success_timestamp_seconds") or 0) > 0
    assert value(samples, "virtcap_placement_read_duration_seconds") is not None
    assert (value(samples, "virtcap_placement_requests_total", outcome="ok") or 0) > 0
    assert value(samples, "virtcap_placement_requests_total", outcome="error") is not None


def audited_at(server: Server) -> float:
    return value(samples_of(server), "hypervisor_audit_timestamp_seconds", hypervisor="hv1") or 0.0


def failed_rounds(server: Server) -> float:
    return value(samples_of(server), "virtcap_placement_requests_total", outcome="error") or 0.0


def warnings_since(server: Server, offset: int) -> list[str]:
    return [line for line in server.log_text()[offset:].splitlines() if "placement: not read" in line]


def goes_down_and_back(
    server: Server, misbehave: Callable[[], None], behave: Callable[[], None], said: str
) -> None:
    """While Placement misbehaves: `up` 0, no per-hypervisor family, audits going on, rounds
    still tried, one warning saying `said`; once it behaves, `up` 1 and the families back."""
    offset, audited, failed = len(server.log_text()), audited_at(server), failed_rounds(server)
    misbehave()
    try:
        wait_for(lambda: placement_up(server) == 0, FAILURE_SECONDS, what="placement_up 0")
        assert per_hypervisor_families(samples_of(server)) == set()
        # another round fails, and audits go on meanwhile
        wait_for(lambda: failed_rounds(server) >= failed + 2, FAILURE_SECONDS, what="a second failed round")
        wait_for(lambda: audited_at(server) > audited, FAILURE_SECONDS, what="an audit")
        samples = samples_of(server)
        assert value(samples, "virtcap_placement_up") == 0
        assert per_hypervisor_families(samples) == set()
        warned = warnings_since(server, offset)
        assert len(warned) == 1 and said in warned[0], warned
    finally:
        behave()
    wait_for(lambda: reconciled(server), FAMILIES_SECONDS, what="the placement families again")
    assert_planted(samples_of(server))


@pytest.mark.upstream
def test_a_misbehaving_placement_is_up_0_without_stale_families_and_comes_back(
    placement: RestartablePlacement, tmp_path: Path
) -> None:
    proxy = WatchedProxy(placement.base_url)
    with proxy:
        config = write_config(tmp_path, proxy.base_url)
        with running_server(["--config", str(config)], tmp_path) as server:
            wait_for(lambda: reconciled(server), FAMILIES_SECONDS, what="the placement families")

            def fails_mid_round_then_whole() -> None:
                # a provider's reads fail first, then the whole round: one kind, one line
                proxy.misbehaving_paths = "/inventories"
                proxy.misbehaviour = Misbehaviour.SERVER_ERROR
                wait_for(lambda: placement_up(server) == 0, FAILURE_SECONDS, what="placement_up 0")
                proxy.misbehaving_paths = ""

            goes_down_and_back(server, fails_mid_round_then_whole, proxy.behave, "500")

            def answers_html() -> None:
                proxy.misbehaviour = Misbehaviour.HTML

            goes_down_and_back(server, answers_html, proxy.behave, "text/html")

            def hangs() -> None:
                placement.server.hang()
                arrived = proxy.arrivals
                wait_for(
                    lambda: proxy.arrivals > arrived, FAILURE_SECONDS, what="a request to the hung Placement"
                )
                hung_since = proxy.last_arrival
                # this round waits for its request's timeout; a scrape does not wait for the round
                status, _ = server.get("/metrics", timeout=PLACEMENT_TIMEOUT)
                assert status == 200 and time.monotonic() < hung_since + PLACEMENT_TIMEOUT

            goes_down_and_back(server, hangs, placement.server.resume, "no answer within")
            assert "Traceback" not in server.log_text()


@pytest.mark.upstream
def test_every_family_is_served_as_planted_promtool_is_silent_and_a_killed_placement_is_up_0(
    placement: RestartablePlacement, tmp_path: Path
) -> None:
    config = write_config(tmp_path, placement.base_url)
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(lambda: reconciled(server), FAMILIES_SECONDS, what="the placement families")
        status, body = server.get("/metrics")
        assert status == 200
        assert_planted(parse_samples(body.decode()))
        checked = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, check=False, timeout=60
        )
        assert (checked.returncode, checked.stdout + checked.stderr) == (0, b"")

        goes_down_and_back(server, placement.server.kill, placement.restart, "cannot connect")
        assert "Traceback" not in server.log_text()


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("placement: {timeout: 5s}", "placement"),
        ("placement: {endpoint: 'http://127.0.0.1:8778', auth: {type: kerberos}}", "placement.auth.type"),
        (
            "placement:\n  auth: {type: password, auth_url: 'http://127.0.0.1:5000/v3', username: virtcap,\n"
            "         project_name: service, password_file: /nonexistent/virtcap/password}",
            "placement.auth.password_file",
        ),
    ],
    ids=["no endpoint", "unknown auth type", "unreadable password file"],
)
def test_serve_refuses_a_bad_placement_section_with_exit_2(tmp_path: Path, section: str, key: str) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text(f"{section}\nhypervisors:\n  - {{name: hv1, uri: 'test:///default'}}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "virtcap",
            "serve",
            "--config",
            str(path),
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert f"{path}: {key}: " in line, line


def test_one_outage_is_one_kind_of_failure_whatever_request_and_reason() -> None:
    """A Placement killed mid-round resets a provider's read, then refuses the next rounds' lists:
    one line in the log. Another kind of failure is another line."""
    reset = "GET /resource_providers/1b1e/inventories: cannot connect to http://p:8778 (Connection aborted.)"
    refused = "GET /resource_providers: cannot connect to http://p:8778 (Connection refused)"
    assert failure_kind(reset) == failure_kind(refused)
    assert failure_kind(refused) != failure_kind(
        "GET /resource_providers: no answer within 3 s from http://p:8778"
    )
