"""Facts built by hand, for testing the model without libvirt; and small test-driver fleets."""

from __future__ import annotations

from pathlib import Path

from virtcap.config import Config, parse_config
from virtcap.demo.fleetgen import RUNNING, SHUTOFF, DiskSpec, DomainSpec, HostSpec, write_fleet
from virtcap.model.facts import (
    DiskFacts,
    DomainFacts,
    DomainState,
    HostFacts,
    NovaFlavor,
    NovaInstance,
    StorageFacts,
)

GIB = 1024**3
MIB = 1024**2


def domain(
    name: str = "vm",
    state: DomainState = DomainState.RUNNING,
    vcpus: int = 1,
    memory: int = 1 * GIB,
    disks: tuple[DiskFacts, ...] = (),
    flavor: NovaFlavor | None = None,
    nova: NovaInstance | None = None,
    hugepages: bool = False,
    pins: tuple[frozenset[int] | None, ...] | None = None,
    current_memory: int | None = None,
) -> DomainFacts:
    return DomainFacts(
        name=name,
        uuid=f"uuid-{name}",
        state=state,
        vcpus=vcpus,
        memory_bytes=memory,
        current_memory_bytes=current_memory,
        hugepages=hugepages,
        vcpu_pins=pins if pins is not None else (None,) * vcpus,
        disks=disks,
        nova=nova if nova is not None else (NovaInstance(flavor) if flavor is not None else None),
    )


def local_disk(capacity: int, target: str = "vda") -> DiskFacts:
    return DiskFacts(target=target, source=f"/images/{target}", local=True, capacity_bytes=capacity)


def host(
    cpus: int = 16,
    memory: int = 64 * GIB,
    disk: int | None = 1000 * GIB,
    domains: tuple[DomainFacts, ...] = (),
    online: frozenset[int] | None = None,
    memory_in_use: int | None = None,
    busy_cpus: float | None = None,
    disk_used: int = 0,
) -> HostFacts:
    return HostFacts(
        hostname="host",
        hypervisor_type="QEMU",
        hypervisor_version="7.2.0",
        libvirt_version="9.0.0",
        cpus=cpus,
        online_cpus=online,
        memory_bytes=memory,
        storage=StorageFacts("pool default", disk, disk_used) if disk is not None else None,
        memory_in_use_bytes=memory_in_use,
        memory_in_use_source="host" if memory_in_use is not None else None,
        cpu_times=None,
        busy_cpus=busy_cpus,
        domains=domains,
        audited_at=0.0,
        audit_duration_seconds=0.0,
    )


def storageless_fleet(directory: Path) -> Config:
    """One test-driver host, `fresh`, whose instance-disk storage is not found: the configuration
    names a pool `instances` the host lacks, as a fresh libvirt lacks `default`.

    8 CPUs, 32 GiB. `on` (running, 2 vCPUs, 2 GiB) has a 40 GiB local file and a 100 GiB rbd
    disk; `off` (shut off, 1 vCPU, 1 GiB) a 500 GiB volume of the host's own pool: 540 GiB of
    local disk allocated, far beyond the pool's 100 GiB, so a disk limit would show at once.
    """
    host = HostSpec(
        "fresh",
        cpus=8,
        memory_gib=32,
        pool_gib=100,
        pool_used_gib=10,
        domains=[
            DomainSpec(
                "on",
                "00000000-0000-4000-8000-000000000001",
                RUNNING,
                vcpus=2,
                memory_mib=2048,
                current_memory_mib=2048,
                disks=(DiskSpec("vda", "file", 40), DiskSpec("vdb", "network", 100)),
            ),
            DomainSpec(
                "off",
                "00000000-0000-4000-8000-000000000002",
                SHUTOFF,
                vcpus=1,
                memory_mib=1024,
                current_memory_mib=1024,
                disks=(DiskSpec("vda", "volume", 500),),
            ),
        ],
    )
    path = write_fleet([host], directory)["fresh"]
    return parse_config(
        f"""
hypervisors:
  - {{name: fresh, uri: "test://{path}", disk: {{pool: instances}}}}
flavors:
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 20GiB}}
  - {{name: d1.huge, vcpu: 1, memory: 1GiB, disk: 100TiB}}
""",
        "inline",
    )
