"""`virtcap capture` and `replay:///` URIs: a captured host, audited through the replay, gives the
facts the live host gave; the file round-trips, and a broken one is refused in one line."""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.files import FIXTURES
from tests.support.libvirtd import Libvirtd
from tests.support.serving import WORKER_SECONDS, running_server, series, value, wait_for
from virtcap.audit.capture import capture_host, encode_bounded, uri_problem
from virtcap.audit.capture_format import (
    VCPU_STATS,
    Answer,
    CaptureDocument,
    CellPages,
    PageCount,
    encode_capture,
    load_capture,
)
from virtcap.audit.connection import AuditError, open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.libvirt_api import VirConnect
from virtcap.audit.replay import ReplayConnection
from virtcap.commands.main import main
from virtcap.config import DiskSource
from virtcap.demo import DEMO_DIR, demo_config, demo_config_text
from virtcap.model.facts import DomainState, HostFacts, VcpuWait

MIXED = FIXTURES / "mixed-node.xml"
KIB = 1024
MIB = 1024**2

# Every demo host on the test driver, the mixed fixture (odd disks, a domain that cannot be read,
# states of every kind) and libvirt's own default host (two NUMA cells, node devices).
TEST_HOSTS: dict[str, tuple[str, DiskSource | None]] = {
    **{h.name: (h.uri, h.disk) for h in demo_config().hypervisors if h.uri.startswith("test:")},
    "mixed": (f"test://{MIXED}", DiskSource(pool="default")),
    "default": ("test:///default", DiskSource(pool="default-pool")),
}


def replay_uri(path: Path) -> str:
    return f"replay://{path}"


def capture(uri: str, path: Path) -> CaptureDocument:
    conn = open_read_only(uri)
    try:
        document = capture_host(conn, uri)
    finally:
        conn.close()
    path.write_bytes(encode_bounded(document))
    return document


def audit(uri: str, disk: DiskSource | None) -> HostFacts:
    conn = open_read_only(uri)
    try:
        return audit_host(conn, uri, disk)
    finally:
        conn.close()


def timeless(facts: HostFacts) -> HostFacts:
    """The facts without when and how fast they were read."""
    cpu_times = None if facts.cpu_times is None else replace(facts.cpu_times, sampled_at=0.0)
    return replace(facts, audited_at=0.0, audit_duration_seconds=0.0, cpu_times=cpu_times)


def libvirt_failure(call: Callable[[], object]) -> tuple[Any, ...]:
    """The error a libvirt call raised, as libvirt's own record."""
    with pytest.raises(libvirt.libvirtError) as raised:
        call()
    assert type(raised.value) is libvirt.libvirtError
    error: Any = raised.value
    assert str(error) == error.get_error_message()
    return tuple(error.err)


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("captures")
    paths = {name: directory / f"{name}.json" for name in TEST_HOSTS}
    for name, (uri, _disk) in TEST_HOSTS.items():
        capture(uri, paths[name])
    return paths


# The test driver's hosts.


@pytest.mark.parametrize("name", sorted(TEST_HOSTS))
def test_the_replay_audits_as_the_live_host(captures: dict[str, Path], name: str) -> None:
    uri, disk = TEST_HOSTS[name]
    replayed = audit(replay_uri(captures[name]), disk)
    assert timeless(replayed) == timeless(audit(uri, disk))
    assert replayed.hypervisor_type == "TEST" and replayed.domains


@pytest.mark.parametrize(
    "disk", [None, DiskSource(pool="default"), DiskSource(pool="absent"), DiskSource(path="/var/tmp")]
)
def test_every_disk_source_is_replayed_as_audited(captures: dict[str, Path], disk: DiskSource | None) -> None:
    """A pool the host lacks fails with libvirt's own words, its name in them; a path is never
    read on a remote host, and a replay is never local."""
    live = audit(f"test://{MIXED}", disk)
    assert timeless(audit(replay_uri(captures["mixed"]), disk)) == timeless(live)
    if disk is not None and disk.pool == "absent":
        assert any("no storage pool with matching name 'absent'" in p for p in live.problems)


def test_the_capture_round_trips(captures: dict[str, Path], tmp_path: Path) -> None:
    for path in captures.values():
        written = path.read_bytes()
        assert encode_capture(load_capture(path)) == written
        again = tmp_path / path.name
        again.write_bytes(encode_capture(load_capture(path)))
        assert again.read_bytes() == written


def test_capturing_the_replay_gives_the_captured_document(captures: dict[str, Path], tmp_path: Path) -> None:
    """The replay answers every captured call as the host did: captured again, the same document."""
    for name, path in captures.items():
        original = load_capture(path)
        again = capture(replay_uri(path), tmp_path / f"{name}.json")
        assert again.model_copy(update={"source": original.source}) == original, name
        assert again.source.uri == replay_uri(path)


def test_the_document_records_what_the_next_audits_need(captures: dict[str, Path]) -> None:
    document = load_capture(captures["default"])
    assert document.format == "virtcap-capture" and document.version == 2
    # The test driver's counters are made up: no rates are measured.
    assert document.source.rate_interval_seconds is None and document.node.cpu_stats_per_second is None
    assert document.node.free_pages.page_sizes_kib == [4, 8, 2048, 1048576]
    assert [cell.cell for cell in document.node.free_pages.cells] == [0, 1]
    devices = document.node_devices.get()
    assert {"computer", "scsi_host1"} <= {d.name for d in devices}
    assert all("<device>" in d.xml.get() for d in devices)
    # A host without NUMA cells in its topology: recorded as such, no call made.
    assert load_capture(captures["compute-01"]).node.free_pages.cells == []
    # The test driver measures no node memory: the error is kept, to be raised again.
    failure = document.node.memory_stats.error
    assert failure is not None and failure.code == libvirt.VIR_ERR_NO_SUPPORT


def test_the_replay_raises_what_the_host_raised(captures: dict[str, Path]) -> None:
    live: Any = libvirt.openReadOnly("test:///default")
    replayed = open_read_only(replay_uri(captures["default"]))
    try:
        for call in (
            lambda c: c.getMemoryStats(libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS),
            lambda c: c.storagePoolLookupByName("nowhere"),
            lambda c: c.domainEventDeregisterAny(12345),
        ):
            assert libvirt_failure(partial(call, replayed)) == libvirt_failure(partial(call, live))
        assert replayed.getFreePages([4, 2048], 0, 2) == live.getFreePages([4, 2048], 0, 2) == {}
        assert [(d.name(), d.XMLDesc(0)) for d in replayed.listAllDevices(0)] == [
            (d.name(), d.XMLDesc(0)) for d in live.listAllDevices(0)
        ]
        assert replayed.getCapabilities() == live.getCapabilities()
    finally:
        live.close()
        replayed.close()


def test_what_was_not_captured_is_an_error_saying_so(captures: dict[str, Path]) -> None:
    conn = open_read_only(replay_uri(captures["mixed"]))
    domain = conn.listAllDomains(0)[0]
    for call, code in (
        (lambda: conn.getCPUStats(0), libvirt.VIR_ERR_INVALID_ARG),
        (
            lambda: conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE),
            libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED,
        ),
        (
            lambda: conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_VCPU, 0),
            libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED,
        ),
        (lambda: domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED),
        (lambda: domain.blockInfo("sdz"), libvirt.VIR_ERR_INVALID_ARG),
        (lambda: conn.getFreePages([4], 0, 1), libvirt.VIR_ERR_INVALID_ARG),  # no cell captured
    ):
        failure = libvirt_failure(call)
        assert failure[0] == code and failure[2].startswith("not in the capture: "), failure


def test_events_register_and_never_fire(captures: dict[str, Path]) -> None:
    conn = open_read_only(replay_uri(captures["compute-01"]))
    fired: list[object] = []
    assert conn.registerCloseCallback(lambda *args: fired.append(args), None) == 0
    first = conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, fired.append, None)
    second = conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, fired.append, None)
    assert first != second
    conn.domainEventDeregisterAny(first)
    assert libvirt_failure(lambda: conn.domainEventDeregisterAny(first))[0] == libvirt.VIR_ERR_INVALID_ARG
    conn.unregisterCloseCallback()
    assert libvirt_failure(lambda: conn.setKeepAlive(5, 3))[0] == libvirt.VIR_ERR_NO_SUPPORT
    assert conn.close() == 0
    assert fired == []


def test_a_two_cell_host_with_huge_pages_is_replayed(captures: dict[str, Path], tmp_path: Path) -> None:
    """What the test driver cannot describe, a capture can: free 2 MiB and 1 GiB pages per cell."""
    document = load_capture(captures["default"])
    counts = {0: {4: 100_000, 2048: 512, 1048576: 4}, 1: {4: 90_000, 2048: 0, 1048576: 8}}
    cells = [
        CellPages(
            cell=cell,
            pages=Answer[list[PageCount]](value=[PageCount(size_kib=s, free=n) for s, n in free.items()]),
        )
        for cell, free in counts.items()
    ]
    node = document.node.model_copy(
        update={"free_pages": document.node.free_pages.model_copy(update={"cells": cells})}
    )
    path = tmp_path / "numa.json"
    path.write_bytes(encode_capture(document.model_copy(update={"node": node})))
    conn = open_read_only(replay_uri(path))
    assert conn.getFreePages([2048, 1048576], 0, 2) == {0: {2048: 512, 1048576: 4}, 1: {2048: 0, 1048576: 8}}
    assert conn.getFreePages([4], 1, 1) == {1: {4: 90_000}}
    assert libvirt_failure(lambda: conn.getFreePages([8], 0, 1))[0] == libvirt.VIR_ERR_INVALID_ARG
    assert libvirt_failure(lambda: conn.getFreePages([4], 1, 2))[0] == libvirt.VIR_ERR_INVALID_ARG
    assert encode_capture(load_capture(path)) == path.read_bytes()


# Broken files.


def _edit(change: Callable[[dict[str, Any]], object]) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        document = json.loads(data)
        change(document)
        return json.dumps(document).encode()

    return edit


BROKEN: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda data: data[: len(data) // 2], "Invalid JSON: EOF while parsing"),
    "empty": (lambda data: b"", "Invalid JSON"),
    "not an object": (lambda data: b"[1, 2]", "expected a mapping"),
    "another format": (_edit(lambda d: d.update(format="kubeconfig")), "not a virtcap capture"),
    "a newer version": (
        _edit(lambda d: d.update(version=3)),
        "capture version 3 is not supported; this virtcap reads versions 1 and 2",
    ),
    "a missing key": (_edit(lambda d: d["node"].pop("info")), "node.info: required key is missing"),
    "an unknown key": (_edit(lambda d: d["node"].update(extra=1)), "node.extra: unknown key 'extra'"),
    "a wrong type": (_edit(lambda d: d["node"].update(version="2")), "node.version: expected a whole number"),
    "an answer without outcome": (
        _edit(lambda d: d["node"].update(hostname={})),
        "node.hostname: expected either 'value' or 'error'",
    ),
    "an unknown domain": (
        _edit(lambda d: d["domains"]["listed"]["value"].append("no-such-uuid")),
        "domains.listed: 'no-such-uuid' is not in domains.definitions",
    ),
    "binary": (lambda data: b"\xff\xfe\x00garbage", "Invalid JSON"),
    "deep nesting": (lambda data: b"[" * 100_000, "recursion limit exceeded"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_capture_is_one_line_naming_the_file(
    captures: dict[str, Path], tmp_path: Path, case: str
) -> None:
    damage, expected = BROKEN[case]
    path = tmp_path / "broken.json"
    path.write_bytes(damage(captures["mixed"].read_bytes()))
    with pytest.raises(AuditError) as raised:
        open_read_only(replay_uri(path))
    message = str(raised.value)
    assert message.startswith(f"cannot replay {path}: ") and expected in message, message
    assert "\n" not in message and len(message) < 600


def test_an_unreadable_or_oversized_capture_is_one_line(captures: dict[str, Path], tmp_path: Path) -> None:
    for path, expected in (
        (tmp_path / "missing.json", "cannot read: No such file or directory"),
        (tmp_path, "cannot read: Is a directory"),
    ):
        with pytest.raises(AuditError, match=f"^cannot replay {path}: {expected}$"):
            open_read_only(replay_uri(path))
    with pytest.raises(Exception, match=r"larger than the maximum capture size of 1\.0 KiB$"):
        load_capture(captures["mixed"], max_bytes=1024)
    for uri in ("replay://relative.json", "replay:relative.json", "replay://host/tmp/x.json"):
        with pytest.raises(AuditError, match=r"expected the capture file's absolute path, as in replay:///"):
            open_read_only(uri)


# The command.


def test_virtcap_capture_writes_a_private_file_or_stdout(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    uri, disk = TEST_HOSTS["compute-02"]
    output = tmp_path / "compute-02.json"
    assert main(["capture", "--uri", uri, "--output", str(output)]) == 0
    assert stat.S_IMODE(output.stat().st_mode) == 0o600  # host names and domain definitions
    assert [p.name for p in tmp_path.iterdir()] == [output.name]  # no temporary file left
    assert timeless(audit(replay_uri(output), disk)) == timeless(audit(uri, disk))

    capsysbinary.readouterr()
    assert main(["capture", "--uri", uri]) == 0
    printed = capsysbinary.readouterr().out
    domains, written = json.loads(printed)["domains"], json.loads(output.read_bytes())["domains"]
    assert domains["listed"] == written["listed"]
    # The test driver's CPU time of a domain is the clock's: only its definitions are the same.
    assert [d["xml"] for d in domains["definitions"]] == [d["xml"] for d in written["definitions"]]


@pytest.mark.parametrize(
    ("arguments", "code", "expected"),
    [
        (["--uri", "qemu:///system extra"], 2, "virtcap: capture: --uri: expected a libvirt URI"),
        (["--uri", ""], 2, "virtcap: capture: --uri: expected a libvirt URI"),
        (["--uri", "replay://relative.json"], 2, "expected the capture file's absolute path"),
        (
            ["--uri", "qemu+unix:///system?socket=/nonexistent/virtcap-capture.sock"],
            1,
            "virtcap: cannot capture qemu+unix:///system?socket=/nonexistent/virtcap-capture.sock: "
            "cannot connect: ",
        ),
        (
            ["--uri", "replay:///nonexistent/host.json"],
            1,
            "cannot replay /nonexistent/host.json: cannot read",
        ),
        (
            ["--uri", "test:///default", "--max-size", "4KiB"],
            1,
            "larger than its maximum size of 4.0 KiB (--max-size)",
        ),
        (["--uri", "test:///default", "--output", "/nonexistent/dir/x.json"], 1, "virtcap: cannot write"),
    ],
)
def test_virtcap_capture_fails_in_one_line(
    capsys: pytest.CaptureFixture[str], arguments: list[str], code: int, expected: str
) -> None:
    assert main(["capture", *arguments]) == code
    output = capsys.readouterr()
    assert output.out == ""
    lines = output.err.splitlines()
    assert len(lines) == 1 and expected in lines[0], output.err


def test_uri_problems() -> None:
    assert uri_problem("qemu+ssh://root@compute-01/system?keyfile=/k") is None
    assert uri_problem("replay:///srv/captures/compute-01.json") is None
    assert uri_problem("test:///default") is None
    assert uri_problem("x" * 2000) is not None
    assert uri_problem("qemu:///system\n") is not None


# Serving a fleet of captures.


def test_serving_captures_exposes_what_serving_the_hosts_does(
    captures: dict[str, Path], tmp_path: Path
) -> None:
    """The demo fleet served twice, live and from its captures: the same series, but timing."""
    demo = demo_config_text()
    broken = tmp_path / "broken.json"
    broken.write_bytes(b'{"format": "virtcap-capture", "version": 1')
    # Both fleets also have a host whose capture is broken: down, its error on the landing page.
    broken_host = f'  - name: broken\n    uri: "{replay_uri(broken)}"\nflavors:'
    demo = demo.replace("flavors:", broken_host, 1)
    # Reclaimable capacity is judged at each scrape against when the domain was first seen: with
    # the demo's windows of 10 s, a server scraped sooner after its first audits than the other
    # would show fewer. Shut-off domains count from 1 s, and no idle one within the test (the
    # captures replay vCPU time, the test driver none).
    assert "shutoff_after: 10s" in demo and "idle_for: 10s" in demo
    demo = demo.replace("shutoff_after: 10s", "shutoff_after: 1s").replace("idle_for: 10s", "idle_for: 168h")
    replayed = demo
    for name, path in captures.items():
        replayed = replayed.replace(TEST_HOSTS[name][0], replay_uri(path))
    # the demo's own captures and broken one, and the captures of its test-driver hosts
    test_driver_hosts = sum(1 for name in captures if TEST_HOSTS[name][0] in demo)
    assert test_driver_hosts == 7
    assert replayed.count("replay://") == demo.count("replay://") + test_driver_hosts
    up = len(demo_config().hypervisors) - 1  # all but the unreachable compute-07
    (tmp_path / "live").mkdir()
    (tmp_path / "replayed").mkdir()
    (tmp_path / "live.yaml").write_text(demo)
    (tmp_path / "replayed.yaml").write_text(replayed)

    def settled(kind: str) -> tuple[dict[Any, float], str]:
        with running_server(["--config", str(tmp_path / f"{kind}.yaml")], tmp_path / kind) as server:
            wait_for(lambda: len(series(server.samples(), "hypervisor_info")) == up, 20, what="the hosts up")
            every_domain_seen = time.monotonic()

            def every_flavor_fitted() -> bool:
                # a flavor discovered on one host is fitted on those audited before it right after
                samples = server.samples()
                flavors = len(series(samples, "virtcap_flavor_info"))
                return len(series(samples, "hypervisor_schedulable_instances")) == up * flavors

            wait_for(every_flavor_fitted, 20, what="every discovered flavor fitted everywhere")

            def every_evacuation_computed() -> bool:
                # the failure tolerance is computed in the background, after the audits
                return len(series(server.samples(), "hypervisor_evacuation_feasible")) == up

            wait_for(every_evacuation_computed, WORKER_SECONDS, what="every hypervisor's evacuation")
            # and the packing answers that follow it, every one computed
            pending = "virtcap_packing_pending_answers"
            wait_for(
                lambda: value(server.samples(), pending) == 0, WORKER_SECONDS, what="every packing answer"
            )
            # every domain shut off at the first audits is reclaimable 1 s after them
            time.sleep(max(0.0, every_domain_seen + 1.5 - time.monotonic()))
            samples = server.samples()
            page = server.get("/")[1].decode()
        return samples, page

    live, _ = settled("live")
    served, page = settled("replayed")
    # when each server audited, and when each first saw the configuration's maintenance
    timing = {
        "hypervisor_audit_duration_seconds",
        "hypervisor_audit_timestamp_seconds",
        "hypervisor_maintenance_start_timestamp_seconds",
    }
    # measured over the time between two audits: the demo's captures replay their rates
    measured = {"hypervisor_vcpu_wait_seconds_total", "hypervisor_resource_actual_usage:vcpu"}

    def hypervisor_series(samples: dict[Any, float]) -> dict[Any, float]:
        return {
            k: v
            for k, v in samples.items()
            if k[0].startswith("hypervisor_")
            and k[0] not in timing | measured
            and f"{k[0]}:{dict(k[1]).get('resource')}" not in measured
        }

    assert hypervisor_series(served) == hypervisor_series(live)
    assert series(served, "hypervisor_reclaimable") != {}
    started = "hypervisor_maintenance_start_timestamp_seconds"
    assert series(served, started).keys() == series(live, started).keys() != set()
    assert value(served, "hypervisor_up", hypervisor="compute-02") == 1.0
    assert value(served, "hypervisor_up", hypervisor="broken") == 0.0
    assert f"cannot replay {broken}: Invalid JSON" in page


# The session's real libvirtd.


@dataclass(frozen=True)
class RealHost:
    uri: str
    pool: str
    domain: str


@pytest.fixture(scope="module")
def real_host(libvirtd: Libvirtd) -> Iterator[RealHost]:
    """A transient pool with a volume, and a domain defined with it, a disk in no pool and a
    network disk, started paused: no guest code ever runs."""
    prefix = f"virtcap-capture-{uuid.uuid4().hex[:6]}"
    pool_path = libvirtd.owned_directory(f"{prefix}-")
    loose = libvirtd.owned_directory(f"{prefix}-loose-") / "loose.img"
    with loose.open("wb") as image:
        image.truncate(16 * MIB)
    os.chown(loose, *libvirtd.owner)
    conn: Any = libvirt.open(libvirtd.uri)
    pool = conn.storagePoolCreateXML(
        f"<pool type='dir'><name>{prefix}</name><target><path>{pool_path}</path></target></pool>", 0
    )
    volume = pool.createXML(
        "<volume><name>root.qcow2</name><capacity unit='MiB'>64</capacity>"
        "<target><format type='qcow2'/></target></volume>",
        0,
    )
    domain = conn.defineXML(f"""
<domain type='qemu'>
  <name>{prefix}</name>
  <memory unit='MiB'>96</memory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/><source file='{volume.path()}'/><target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/><source file='{loose}'/><target dev='vdb' bus='virtio'/>
    </disk>
    <memballoon model='virtio'/>
  </devices>
</domain>""")
    try:
        domain.createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)
        yield RealHost(libvirtd.uri, prefix, prefix)
    finally:
        if domain.isActive():
            domain.destroy()
        domain.undefine()
        pool.destroy()
        conn.close()


def test_a_real_libvirtd_replays_as_audited(real_host: RealHost, tmp_path: Path) -> None:
    """The same facts, but for what moved between the capture and the live audit: the host's
    memory in use and CPU time, which the replay gives as captured."""
    path = tmp_path / "libvirtd.json"
    document = capture(real_host.uri, path)
    disk = DiskSource(pool=real_host.pool)
    live = audit(real_host.uri, disk)
    replayed = audit(replay_uri(path), disk)

    def unmeasured(facts: HostFacts) -> HostFacts:
        return replace(timeless(facts), memory_in_use_bytes=None, cpu_times=None, vcpu_wait=None)

    assert unmeasured(replayed) == unmeasured(live)
    assert replayed.hypervisor_type == "QEMU" and replayed.storage is not None
    ours = next(d for d in replayed.domains if d.name == real_host.domain)
    assert ours.state is DomainState.PAUSED
    assert [(d.target, d.capacity_bytes) for d in ours.disks] == [("vda", 64 * MIB), ("vdb", 16 * MIB)]

    memory = document.node.memory_stats.get()
    used_kib = memory["total"] - memory["free"] - memory["buffers"] - memory["cached"]
    assert (replayed.memory_in_use_bytes, replayed.memory_in_use_source) == (used_kib * KIB, "host")
    # The CPU time counters with their rates, measured over a second: the host's CPUs add up
    # time every second, whatever they do. The replay reads them as the live host's.
    assert document.node.cpu_stats.get()["kernel"] > 0
    rates = document.node.cpu_stats_per_second
    assert rates is not None and {"kernel", "user", "idle"} <= set(rates) and sum(rates.values()) > 0
    assert document.source.rate_interval_seconds == 1.0
    assert replayed.cpu_times is not None and replayed.busy_cpus is None  # a rate needs two audits
    # the paused domain's vCPUs: recorded, their counters standing still
    (paused,) = document.domains.vcpu_stats_per_second or []
    assert paused.per_second and {key.split(".")[2] for key in paused.per_second} <= {"time", "wait", "delay"}
    # The vCPU delays as captured: the replay's first audit takes them as its baseline.
    vcpu_stats = document.domains.vcpu_stats
    assert vcpu_stats is not None
    captured = {
        (entry.uuid, int(key.split(".")[1])): int(delay)
        for entry in vcpu_stats.get()
        for key, delay in entry.stats.items()
        if key.startswith("vcpu.") and key.endswith(".delay")
    }
    assert {uuid for uuid, _vcpu in captured} == {
        d.uuid for d in replayed.domains if d.state in (DomainState.RUNNING, DomainState.PAUSED)
    }
    assert replayed.vcpu_wait == VcpuWait(0, captured)

    # What the next audits need: free pages in every cell of the topology, the node devices.
    free_pages = document.node.free_pages
    assert free_pages.cells and 4 in free_pages.page_sizes_kib
    conn: VirConnect = ReplayConnection(load_capture(path))
    assert set(conn.getFreePages(free_pages.page_sizes_kib, 0, 1)[0]) == set(free_pages.page_sizes_kib)
    assert "vdb" in next(d for d in document.domains.definitions if d.name == real_host.domain).block_info
    assert document.node_devices.error is not None or document.node_devices.get()

    # Captured again through the replay, the same document, but for its moving counters.
    again = capture(replay_uri(path), tmp_path / "again.json")
    assert without_counters(again).model_copy(update={"source": document.source}) == without_counters(
        document
    )


def without_counters(document: CaptureDocument) -> CaptureDocument:
    """The document without its CPU time and vCPU statistics and their rates."""
    node = document.node.model_copy(
        update={"cpu_stats": Answer[dict[str, int]](value={}), "cpu_stats_per_second": None}
    )
    domains = document.domains.model_copy(update={"vcpu_stats": None, "vcpu_stats_per_second": None})
    return document.model_copy(update={"node": node, "domains": domains})


# Recorded rates.


class ReplayClock:
    """The seconds replayed, as the tests set them; capture_host's clock and sleep alike."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


COMPUTE_08 = DEMO_DIR / "compute-08.json"


def test_the_replay_advances_the_counters_at_their_recorded_rates() -> None:
    """Through the calls the audit makes: the CPU time (getCPUStats) and the vCPU statistics
    (getAllDomainStats), each counter with a rate at it, the others as captured."""
    document = load_capture(COMPUTE_08)
    cpu_rates = document.node.cpu_stats_per_second
    assert cpu_rates is not None and cpu_rates["user"] > 0
    clock = ReplayClock()
    conn = ReplayConnection(document, clock)
    assert conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS) == document.node.cpu_stats.get()
    clock.now = 10.0
    assert conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS) == {
        key: value + 10 * cpu_rates[key] for key, value in document.node.cpu_stats.get().items()
    }
    assert document.domains.vcpu_stats is not None
    captured = {entry.uuid: entry.stats for entry in document.domains.vcpu_stats.get()}
    vcpu_rates = {entry.uuid: entry.per_second for entry in document.domains.vcpu_stats_per_second or []}
    replayed = conn.getAllDomainStats(*VCPU_STATS)
    assert {domain.UUIDString() for domain, _stats in replayed} == set(captured) == set(vcpu_rates)
    for domain, stats in replayed:
        before, rates = captured[domain.UUIDString()], vcpu_rates[domain.UUIDString()]
        assert stats == {key: int(value) + 10 * rates.get(key, 0) for key, value in before.items()}
        assert stats["vcpu.current"] == before["vcpu.current"]  # a count, not a counter


def test_a_replay_with_rates_is_audited_as_a_live_host() -> None:
    """Busy CPU time and vCPU wait between two audits, the second audit's connection opened afresh
    (as the service opens a replay for every audit): exactly the recorded rates over the seconds
    replayed."""
    document = load_capture(COMPUTE_08)
    clock = ReplayClock()
    uri = replay_uri(COMPUTE_08)
    first = audit_host(ReplayConnection(document, clock), uri, None)
    assert first.cpu_times is not None and first.vcpu_wait is not None and first.vcpu_wait.total_ns == 0
    clock.now = 30.0
    second = audit_host(
        ReplayConnection(document, clock),
        uri,
        None,
        previous_cpu=first.cpu_times,
        previous_vcpu_wait=first.vcpu_wait,
    )
    cpu_rates = document.node.cpu_stats_per_second or {}
    assert second.cpu_times is not None and second.busy_cpus is not None and second.busy_cpus > 0
    assert second.cpu_times.busy_ns - first.cpu_times.busy_ns == 30 * (
        cpu_rates["kernel"] + cpu_rates["user"]
    )
    delays = sum(
        rate
        for entry in document.domains.vcpu_stats_per_second or []
        for key, rate in entry.per_second.items()
        if key.endswith(".delay")
    )
    assert delays > 0 and second.vcpu_wait is not None and second.vcpu_wait.total_ns == 30 * delays


def test_a_capture_without_rates_replays_without_busy_cpus_or_vcpu_wait(tmp_path: Path) -> None:
    """A capture of version 1, before rates were recorded (as the demo's were): frozen counters
    tell no busy CPUs; no vCPU statistics, no vCPU wait."""
    document = load_capture(COMPUTE_08)
    node = document.node.model_copy(update={"cpu_stats_per_second": None})
    domains = document.domains.model_copy(update={"vcpu_stats": None, "vcpu_stats_per_second": None})
    source = document.source.model_copy(update={"rate_interval_seconds": None})
    old = document.model_copy(update={"version": 1, "node": node, "domains": domains, "source": source})
    path = tmp_path / "old.json"
    path.write_bytes(encode_capture(old))
    assert b'"version": 1' in path.read_bytes() and b"per_second" not in path.read_bytes()
    first = audit(replay_uri(path), None)
    second = audit_host(
        open_read_only(replay_uri(path)), replay_uri(path), None, previous_cpu=first.cpu_times
    )
    assert (first.cpu_times, second.cpu_times, second.busy_cpus) == (None, None, None)
    assert first.vcpu_wait is None and second.vcpu_wait is None
    assert first.problems == second.problems == ()


def test_capturing_a_replay_records_its_rates(tmp_path: Path) -> None:
    """The capture's two samples, its `rate_interval` apart, measure the rates the replay moves at:
    captured again, the same rates, the counters where the second sample found them."""
    document = load_capture(COMPUTE_08)
    clock = ReplayClock()
    again = capture_host(
        ReplayConnection(document, clock),
        "replay:///x.json",
        rate_interval=5.0,
        clock=clock,
        sleep=clock.sleep,
    )
    assert again.source.rate_interval_seconds == 5.0
    cpu_rates = document.node.cpu_stats_per_second or {}
    assert again.node.cpu_stats_per_second == cpu_rates
    assert again.node.cpu_stats.get() == {
        k: v + 5 * cpu_rates[k] for k, v in document.node.cpu_stats.get().items()
    }
    assert again.domains.vcpu_stats_per_second == document.domains.vcpu_stats_per_second
    assert without_counters(again).model_copy(update={"source": document.source}) == without_counters(
        document
    )
    # None with an interval of 0
    unrated = capture_host(ReplayConnection(document, clock), "replay:///x.json", rate_interval=0)
    assert unrated.node.cpu_stats_per_second is None and unrated.domains.vcpu_stats_per_second is None
    assert unrated.source.rate_interval_seconds is None and unrated.domains.vcpu_stats is not None


def test_virtcap_capture_takes_its_rate_interval(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["capture", "--uri", "test:///default", "--rate-interval", "2m"])
    assert exited.value.code == 2
    assert "--rate-interval: expected 0 or a duration of at most 60s, got '2m'" in capsys.readouterr().err
    assert main(["capture", "--uri", replay_uri(COMPUTE_08), "--rate-interval", "0"]) == 0
    assert '"cpu_stats_per_second"' not in capsys.readouterr().out
