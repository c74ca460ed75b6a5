"""Facts built by hand, for testing the model without libvirt."""

from __future__ import annotations

from virtcap.facts import DiskFacts, DomainFacts, DomainState, HostFacts, NovaFlavor, StorageFacts

GIB = 1024**3
MIB = 1024**2


def domain(
    name: str = "vm",
    state: DomainState = DomainState.RUNNING,
    vcpus: int = 1,
    memory: int = 1 * GIB,
    disks: tuple[DiskFacts, ...] = (),
    flavor: NovaFlavor | None = None,
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
        nova_flavor=flavor,
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
