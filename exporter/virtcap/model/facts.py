"""Plain facts read from a hypervisor: what the audit produces and the model consumes.

Nothing here knows about libvirt objects or about policy (ratios, reserved amounts, CPU sets):
the audit reports what the hypervisor says, the model decides what it means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class DomainState(StrEnum):
    """The four states capacity is split by; libvirt's finer states fold into them."""

    RUNNING = "running"
    PAUSED = "paused"
    SHUTOFF = "shutoff"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class NovaFlavor:
    """The flavor Nova wrote into the domain's metadata: the allocation Nova itself accounts."""

    name: str
    vcpus: int
    memory_mib: int
    root_gib: int
    ephemeral_gib: int
    swap_mib: int
    extra_specs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NovaOwner:
    """Who the instance belongs to: Keystone ids, and names as Nova recorded them."""

    project_id: str
    project_name: str
    user_id: str
    user_name: str


@dataclass(frozen=True, slots=True)
class NovaInstance:
    """What nova-compute wrote into `<nova:instance>`: enough to compute the allocation Nova's
    scheduler made for the instance, and whose it is."""

    flavor: NovaFlavor
    image_properties: Mapping[str, str] = field(default_factory=dict)
    boot_from_volume: bool = False
    """`<nova:root type="volume">`: the root disk is a volume, not local storage."""
    owner: NovaOwner | None = None


@dataclass(frozen=True, slots=True)
class DiskFacts:
    """One disk device of a domain.

    `local` is False for network disks (rbd, iscsi, nbd, ...), disks in shared or network storage
    pools, cdroms and floppies: they use no local disk. `capacity_bytes` is the virtual size, or
    None when it could not be read (the reason is then among the domain's problems).
    """

    target: str
    source: str
    local: bool
    capacity_bytes: int | None


@dataclass(frozen=True, slots=True)
class DomainFacts:
    name: str
    uuid: str
    state: DomainState
    vcpus: int
    """The maximum vCPU count (`<vcpu>`): hot-plug can raise the current count up to it."""
    memory_bytes: int
    """The maximum memory (`<memory>`): the balloon can grow up to it."""
    current_memory_bytes: int | None
    """The balloon's current size while the domain is active, else None."""
    hugepages: bool
    vcpu_pins: tuple[frozenset[int] | None, ...]
    """Per vCPU, the host CPUs it is pinned to, or None where it floats."""
    disks: tuple[DiskFacts, ...]
    nova: NovaInstance | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Cumulative busy (kernel + user) host CPU time, all CPUs together, and when it was read."""

    busy_ns: int
    sampled_at: float
    """time.monotonic() of the machine that read it."""


@dataclass(frozen=True, slots=True)
class CpuIdentity:
    """What the host's CPU is: constant for a connection's life, read once."""

    model: str
    arch: str


@dataclass(frozen=True, slots=True)
class StorageFacts:
    """The storage that holds instance disks: a libvirt pool or a local filesystem path."""

    source: str
    capacity_bytes: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class HostFacts:
    hostname: str
    hypervisor_type: str
    hypervisor_version: str
    libvirt_version: str
    cpus: int
    """Active host CPUs as libvirt counts them (`virNodeGetInfo`)."""
    online_cpus: frozenset[int] | None
    """Online host CPU numbers (`virNodeGetCPUMap`), or None if the driver cannot tell."""
    memory_bytes: int
    storage: StorageFacts | None
    memory_in_use_bytes: int | None
    """What the host really uses: MemTotal - (MemFree + Buffers + Cached), Nova's formula."""
    memory_in_use_source: str | None
    """`host` for the host's own counters, `guests` for the sum of running guests' balloons."""
    cpu_times: CpuTimes | None
    busy_cpus: float | None
    """Host CPUs busy on average since the previous sample, or None without two samples from a driver
    that measures CPU time."""
    domains: tuple[DomainFacts, ...]
    audited_at: float
    audit_duration_seconds: float
    problems: tuple[str, ...] = field(default=())
