"""The audit against the session's private libvirtd with tiny QEMU guests (TCG), checked against
virsh."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.libvirtd import Libvirtd
from virtcap.config import parse_config
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.model.facts import DomainState
from virtcap.model.resources import Resource
from virtcap.service.oneshot import audit_fleet_once

pytestmark = pytest.mark.libvirtd

MIB = 1024**2
GIB = 1024**3
KIB = 1024


@dataclass(frozen=True)
class Guest:
    name: str
    state: DomainState
    vcpus: int
    current_vcpus: int
    memory_mib: int
    disk_mib: int
    network_disk: bool = False
    """Only on a guest that never starts: QEMU would try to reach it."""


GUESTS = (
    Guest("running", DomainState.RUNNING, vcpus=2, current_vcpus=2, memory_mib=128, disk_mib=256),
    Guest("paused", DomainState.PAUSED, vcpus=4, current_vcpus=1, memory_mib=96, disk_mib=512),
    Guest(
        "stopped",
        DomainState.SHUTOFF,
        vcpus=1,
        current_vcpus=1,
        memory_mib=64,
        disk_mib=1024,
        network_disk=True,
    ),
)
NETWORK_DISK = """
    <disk type='network' device='disk'>
      <source protocol='nbd' name='nowhere'><host name='127.0.0.1' port='1'/></source>
      <target dev='vdb' bus='virtio'/>
    </disk>"""


def guest_xml(name: str, guest: Guest, image: str) -> str:
    return f"""
<domain type='qemu'>
  <name>{name}</name>
  <uuid>{uuid.uuid4()}</uuid>
  <memory unit='MiB'>{guest.memory_mib}</memory>
  <vcpu current='{guest.current_vcpus}'>{guest.vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/><source file='{image}'/><target dev='vda' bus='virtio'/>
    </disk>{NETWORK_DISK if guest.network_disk else ""}
    <memballoon model='virtio'/>
  </devices>
</domain>"""


@dataclass(frozen=True)
class Fleet:
    uri: str
    prefix: str
    pool: str
    pool_path: Path


@pytest.fixture(scope="module")
def guests(libvirtd: Libvirtd) -> Iterator[Fleet]:
    """Three guests (running, paused, shut off) with disks in a transient directory pool."""
    prefix = f"virtcap-test-{uuid.uuid4().hex[:6]}"
    # libvirt creates the volumes, and QEMU opens them, as the daemon's user.
    pool_path = libvirtd.owned_directory(f"{prefix}-")
    conn: Any = libvirt.open(libvirtd.uri)
    pool = conn.storagePoolCreateXML(
        f"<pool type='dir'><name>{prefix}</name><target><path>{pool_path}</path></target></pool>", 0
    )
    domains = []
    try:
        for guest in GUESTS:
            volume = pool.createXML(
                f"<volume><name>{guest.name}.qcow2</name><capacity unit='MiB'>{guest.disk_mib}</capacity>"
                "<target><format type='qcow2'/></target></volume>",
                0,
            )
            domain = conn.defineXML(guest_xml(f"{prefix}-{guest.name}", guest, volume.path()))
            domains.append(domain)
            if guest.state is not DomainState.SHUTOFF:
                domain.create()
            if guest.state is DomainState.PAUSED:
                domain.suspend()
        yield Fleet(libvirtd.uri, prefix, prefix, pool_path)
    finally:
        for domain in domains:
            if domain.isActive():
                domain.destroy()
            domain.undefine()
        for volume in pool.listAllVolumes(0):
            volume.delete(0)
        pool.destroy()
        conn.close()


def virsh(uri: str, *args: str) -> str:
    return subprocess.run(["virsh", "-c", uri, *args], capture_output=True, text=True, check=True).stdout


def virsh_fields(uri: str, *args: str) -> dict[str, str]:
    fields = {}
    for line in virsh(uri, *args).splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


@pytest.fixture(scope="module")
def snapshot(guests: Fleet) -> HypervisorSnapshot:
    config = parse_config(
        f"""
hypervisors:
  - {{name: local, uri: "{guests.uri}", disk: {{pool: {guests.pool}}}}}
flavors:
  - {{name: tiny, vcpu: 1, memory: 64MiB, disk: 256MiB}}
""",
        "inline",
    )
    (result,) = asyncio.run(audit_fleet_once(config))
    return result


def test_node_matches_virsh_nodeinfo(snapshot: HypervisorSnapshot, guests: Fleet) -> None:
    assert snapshot.up, snapshot.error
    facts = snapshot.facts
    assert facts is not None
    nodeinfo = virsh_fields(guests.uri, "nodeinfo")
    assert facts.cpus == int(nodeinfo["CPU(s)"])
    memory_kib = int(nodeinfo["Memory size"].split()[0])
    assert facts.memory_bytes == memory_kib // 1024 * MIB  # virNodeGetInfo's MiB, as Nova reads it
    assert facts.hypervisor_type == "QEMU"


def test_domains_match_virsh_dominfo(snapshot: HypervisorSnapshot, guests: Fleet) -> None:
    assert snapshot.facts is not None
    ours = {d.name: d for d in snapshot.facts.domains if d.name.startswith(guests.prefix)}
    assert len(ours) == len(GUESTS)
    for guest in GUESTS:
        name = f"{guests.prefix}-{guest.name}"
        facts = ours[name]
        dominfo = virsh_fields(guests.uri, "dominfo", name)
        assert facts.state is guest.state
        assert (
            dominfo["State"] == {"running": "running", "paused": "paused", "shutoff": "shut off"}[guest.state]
        )
        assert facts.memory_bytes == int(dominfo["Max memory"].split()[0]) * KIB
        assert int(dominfo["CPU(s)"]) == guest.current_vcpus
        # the maximum, not the current count: hot-plug can raise it
        assert (
            facts.vcpus
            == int(virsh(guests.uri, "vcpucount", name, "--maximum", "--config").strip())
            == guest.vcpus
        )
        root = next(d for d in facts.disks if d.target == "vda")
        assert root.local
        capacity = int(virsh_fields(guests.uri, "domblkinfo", name, "vda")["Capacity"])
        assert root.capacity_bytes == capacity == guest.disk_mib * MIB
        if guest.network_disk:
            network = next(d for d in facts.disks if d.target == "vdb")
            assert not network.local


def test_capacity_of_the_real_host(snapshot: HypervisorSnapshot, guests: Fleet) -> None:
    assert snapshot.capacity is not None and snapshot.facts is not None
    resources = snapshot.capacity.resources
    ours = [d for d in snapshot.facts.domains if d.name.startswith(guests.prefix)]
    others = [d for d in snapshot.facts.domains if not d.name.startswith(guests.prefix)]
    assert not others, "the test libvirtd should hold only this test's guests"
    assert len(ours) == 3
    assert resources[Resource.VCPU].used == sum(g.vcpus for g in GUESTS)
    assert resources[Resource.VCPU].allocated_by_state[DomainState.PAUSED] == 4
    assert resources[Resource.MEMORY].used == sum(g.memory_mib for g in GUESTS) * MIB
    # each domain's local disks count in whole GiB, rounded up, as Placement's DISK_GB
    assert resources[Resource.DISK].used == sum(math.ceil(g.disk_mib / 1024) for g in GUESTS) * GIB
    pool = virsh_fields(guests.uri, "pool-info", guests.pool, "--bytes")
    # the pool as virsh reports it, floored to whole GiB as Nova's DISK_GB inventory
    assert resources[Resource.DISK].total == int(pool["Capacity"]) // GIB * GIB
    assert snapshot.facts.storage is not None
    assert snapshot.facts.storage.capacity_bytes == int(pool["Capacity"])
    assert resources[Resource.VCPU].limit == snapshot.facts.cpus * 4


def test_actual_usage_of_the_local_host(snapshot: HypervisorSnapshot) -> None:
    facts = snapshot.facts
    assert facts is not None
    assert facts.memory_in_use_source == "host"
    meminfo = dict(re.findall(r"^(\w+):\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M))
    nova = (
        int(meminfo["MemTotal"]) - int(meminfo["MemFree"]) - int(meminfo["Buffers"]) - int(meminfo["Cached"])
    ) * KIB
    assert facts.memory_in_use_bytes is not None
    assert abs(facts.memory_in_use_bytes - nova) < 256 * MIB  # read a moment apart
    assert facts.busy_cpus is not None and 0.0 <= facts.busy_cpus <= facts.cpus + 0.5
