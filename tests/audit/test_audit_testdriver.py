"""The audit against libvirt's test driver: a real libvirt connection to a described host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.factories import storageless_fleet
from tests.support.files import FIXTURES
from virtcap.audit.connection import AuditError, open_read_only, redact_uri
from virtcap.audit.host_readings import read_cpu_times, read_host_layout
from virtcap.audit.hypervisor import audit_host
from virtcap.config import DiskSource, parse_config
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import DomainState, HostFacts
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.service.oneshot import audit_fleet_once

MIXED = FIXTURES / "mixed-node.xml"
GIB = 1024**3
MIB = 1024**2


@pytest.fixture(scope="module")
def mixed() -> HostFacts:
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        return audit_host(conn, f"test://{MIXED}", DiskSource(pool="default"))
    finally:
        conn.close()


def test_node_totals(mixed: HostFacts) -> None:
    assert mixed.cpus == 12
    assert mixed.memory_bytes == 32 * GIB
    assert mixed.hypervisor_type == "TEST"
    assert mixed.online_cpus == frozenset({0, 2, 4})  # the test driver's fixed CPU map
    assert mixed.storage is not None and mixed.storage.source == "pool default"
    assert mixed.storage.capacity_bytes == 100 * GIB  # the test driver's fixed pool size
    assert mixed.storage.used_bytes == 7 * GIB  # the volumes' allocations


def test_domain_states(mixed: HostFacts) -> None:
    states = {d.name: d.state for d in mixed.domains}
    assert states == {
        "web-1": DomainState.RUNNING,
        "nova-1": DomainState.PAUSED,
        "stopped-1": DomainState.SHUTOFF,
        "crashed-1": DomainState.OTHER,
        "pinned-1": DomainState.RUNNING,  # BLOCKED is a running guest
        "broken-metadata": DomainState.RUNNING,
    }


def test_maximums_not_current_values(mixed: HostFacts) -> None:
    web = next(d for d in mixed.domains if d.name == "web-1")
    assert web.vcpus == 4  # <vcpu current='2'>4</vcpu>
    assert web.memory_bytes == 4 * GIB
    assert web.current_memory_bytes == 3 * GIB


def test_disks(mixed: HostFacts) -> None:
    web = next(d for d in mixed.domains if d.name == "web-1")
    by_target = {disk.target: disk for disk in web.disks}
    assert (by_target["vda"].local, by_target["vda"].capacity_bytes) == (True, 20 * GIB)
    assert (by_target["vdb"].local, by_target["vdb"].capacity_bytes) == (True, 50 * GIB)
    assert by_target["vdc"].local is False  # rbd
    assert by_target["hdc"].local is False  # cdrom, even on a local file


def test_nova_metadata_pinning_and_hugepages(mixed: HostFacts) -> None:
    nova = next(d for d in mixed.domains if d.name == "nova-1")
    assert nova.nova is not None
    flavor = nova.nova.flavor
    assert (flavor.name, flavor.vcpus, flavor.root_gib) == ("m1.large", 4, 80)
    pinned = next(d for d in mixed.domains if d.name == "pinned-1")
    assert pinned.vcpu_pins == (frozenset({2}), frozenset({4}))
    assert pinned.hugepages


def test_a_bad_domain_does_not_fail_its_host(mixed: HostFacts) -> None:
    problems = "\n".join(mixed.problems)
    assert "domain broken-metadata: Nova flavor <memory> is not a whole number" in problems
    assert "domain stopped-1: disk vda (/elsewhere/stopped-1.img)" in problems
    broken = next(d for d in mixed.domains if d.name == "broken-metadata")
    assert broken.nova is None and broken.memory_bytes == 1 * GIB


def test_capacity_of_the_mixed_host(mixed: HostFacts) -> None:
    config = parse_config("defaults: {cpu_shared_set: '0', cpu_dedicated_set: '2,4'}", "inline")
    policy = config.hypervisors[0].policy
    resources = host_capacity(mixed, policy).resources
    # vcpu: web-1 4 + nova-1 flavor 4 + stopped-1 2 + crashed-1 1 + broken 1; pinned-1 is dedicated
    assert resources[Resource.VCPU].used == 12
    assert (resources[Resource.VCPU].total, resources[Resource.VCPU].limit) == (1, 4)
    assert (resources[Resource.PCPU].total, resources[Resource.PCPU].used) == (2, 2)
    # memory: 4 GiB + 8192 MiB + 2 + 1 + 1 GiB, and pinned-1's 2 GiB, which hugepages back
    assert resources[Resource.MEMORY].used == 18 * GIB
    # disk: web-1 20 + 50 (rbd and cdrom excluded); nova-1 flavor 80 + 10 + 1 GiB swap; stopped-1 unknown
    assert resources[Resource.DISK].used == 70 * GIB + 91 * GIB
    assert resources[Resource.DISK].allocated_by_state[DomainState.PAUSED] == 91 * GIB


def test_guest_balloons_stand_in_for_host_memory_on_drivers_without_node_stats(mixed: HostFacts) -> None:
    # web-1 3 GiB + nova-1 8 GiB + pinned-1 2 GiB + broken 1 GiB; shutoff and crashed hold nothing
    assert mixed.memory_in_use_source == "guests"
    assert mixed.memory_in_use_bytes == 14 * GIB


def test_a_missing_pool_is_a_problem_not_a_failure() -> None:
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        facts = audit_host(conn, f"test://{MIXED}", DiskSource(pool="nope"))
    finally:
        conn.close()
    assert facts.storage is None
    assert any("storage pool nope" in p for p in facts.problems)


@pytest.fixture(scope="module")
def storageless(tmp_path_factory: pytest.TempPathFactory) -> HypervisorSnapshot:
    (snapshot,) = asyncio.run(audit_fleet_once(storageless_fleet(tmp_path_factory.mktemp("fresh"))))
    return snapshot


def test_without_storage_the_json_report_keeps_disk_allocations_and_no_limit(
    storageless: HypervisorSnapshot,
) -> None:
    # Through JSON and back, as `virtcap audit --format json` prints it.
    (document,) = json.loads(json.dumps(fleet_document([storageless])))["hypervisors"]
    disk = document["resources"]["disk"]
    unknown = ("total", "reserved", "limit", "free", "utilization", "effective_overcommit", "actual")
    assert {key: disk[key] for key in unknown} == dict.fromkeys(unknown)
    # 40 GiB file of `on` (its rbd disk is not local) + 500 GiB volume of the shut off `off`
    assert disk["used_by_state"] == {"running": 40 * GIB, "paused": 0, "shutoff": 500 * GIB, "other": 0}
    assert (disk["used"], disk["claimed"]) == (540 * GIB, 0)
    # memory: 32 GiB - 512 MiB - 3 GiB = 28.5 GiB free; d1.huge's 100 TiB of disk limits nothing
    assert document["schedulable"] == {"m1.small": 14, "d1.huge": 28}
    assert document["bottlenecks"] == {"m1.small": "memory", "d1.huge": "memory"}
    assert any("storage pool instances" in problem for problem in document["problems"])


def test_without_storage_the_table_shows_unknown_amounts_as_dashes(storageless: HypervisorSnapshot) -> None:
    rows = {line.split()[0]: line.split() for line in render_tables([storageless]).splitlines()}
    # resource, total, reserved, ratio, limit, used (a number and its unit), free, actual, bar
    assert rows["disk"] == ["disk", "-", "-", "1", "-", "540.0", "GiB", "-", "-", "-"]


def test_the_test_drivers_constant_cpu_times_are_not_an_idle_host() -> None:
    """Its node CPU times are the same made-up numbers on every call: two samples of them say
    nothing about the host, so busy CPUs are unknown, not 0."""
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        every_cpu = libvirt.VIR_NODE_CPU_STATS_ALL_CPUS
        assert conn.getCPUStats(every_cpu) == conn.getCPUStats(every_cpu)
        assert read_cpu_times(conn) is None
        facts = audit_host(conn, f"test://{MIXED}", DiskSource(pool="default"), cpu_window=0.01)
    finally:
        conn.close()
    assert (facts.cpu_times, facts.busy_cpus) == (None, None)
    assert host_capacity(facts, HostPolicy()).resources[Resource.VCPU].actual is None


def _nova_memory_in_use() -> int:
    """MemTotal - (MemFree + Buffers + Cached) from /proc/meminfo, in bytes, read here on its own."""
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - (fields["MemFree"] + fields["Buffers"] + fields["Cached"])


def test_the_local_hosts_memory_in_use_is_novas_meminfo_figure() -> None:
    # A test-driver hypervisor lives in this process, so on this machine: audited under a local
    # URI, its host memory figure is this machine's. Memory moves between the reads: the audit's
    # figure must lie between the one before and the one after, within a few MiB. psutil's,
    # lower by SReclaimable (tens to hundreds of MiB), does not.
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        before = _nova_memory_in_use()
        facts = audit_host(conn, "qemu:///system", DiskSource(pool="default"))
        after = _nova_memory_in_use()
    finally:
        conn.close()
    assert facts.memory_in_use_source == "host"
    assert facts.memory_in_use_bytes is not None
    slack = 8 * MIB
    assert min(before, after) - slack <= facts.memory_in_use_bytes <= max(before, after) + slack


def test_cpu_identity_is_read_on_demand() -> None:
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        identity = read_host_layout(conn).identity
    finally:
        conn.close()
    assert identity.arch  # the test driver's capabilities name an architecture
    assert identity.model


def test_an_unreachable_uri_is_an_audit_error() -> None:
    with pytest.raises(AuditError, match="cannot connect"):
        open_read_only("qemu+unix:///system?socket=/nonexistent/virtcap.sock")


def test_the_fleet_reports_down_hosts_and_the_others() -> None:
    config = parse_config(
        f"""
hypervisors:
  - {{name: good, uri: "test://{MIXED}"}}
  - {{name: gone, uri: "qemu+unix:///system?socket=/nonexistent/virtcap.sock"}}
  - {{name: default, uri: "test:///default"}}
""",
        "inline",
    )
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    assert [(s.name, s.up) for s in snapshots] == [("good", True), ("gone", False), ("default", True)]
    assert snapshots[1].error is not None and "No such file" in snapshots[1].error


def test_passwords_never_leave_a_uri() -> None:
    assert redact_uri("qemu+tcp://admin:hunter2@host/system") == "qemu+tcp://admin:***@host/system"
    assert redact_uri("qemu+ssh://root@host/system") == "qemu+ssh://root@host/system"


def test_libvirt_errors_are_not_printed(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(libvirt.libvirtError):
        libvirt.openReadOnly("test:///nonexistent-file-for-virtcap.xml").close()
    assert "libvirt:" not in capfd.readouterr().err


class _WithoutBulkStats:
    """A real test-driver connection that answers virConnectGetAllDomainStats as drivers without
    it do (older remote daemons, some hypervisor drivers): with libvirt's own "not supported"."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def getAllDomainStats(self, _stats: int, _flags: int) -> Any:  # noqa: N802 - libvirt's name
        return self._conn.getMemoryStats(libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS)  # not supported here

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_drivers_without_bulk_domain_stats_are_audited_domain_by_domain(mixed: HostFacts) -> None:
    conn: Any = open_read_only(f"test://{MIXED}")
    try:
        with pytest.raises(libvirt.libvirtError) as unsupported:
            _WithoutBulkStats(conn).getAllDomainStats(0, 0)
        assert unsupported.value.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT
        fallback = audit_host(_WithoutBulkStats(conn), f"test://{MIXED}", DiskSource(pool="default"))
    finally:
        conn.close()
    assert [(d.name, d.state, d.current_memory_bytes) for d in fallback.domains] == [
        (d.name, d.state, d.current_memory_bytes) for d in mixed.domains
    ]
    assert fallback.domains == mixed.domains
