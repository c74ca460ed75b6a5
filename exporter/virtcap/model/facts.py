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
class ProjectOwner:
    """Whose a domain is, read from the metadata element the configuration names (`ownership`):
    the owner of domains Nova did not define, or whose Nova metadata names none."""

    project_id: str
    project_name: str


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
class GuestCell:
    """One NUMA cell the guest sees (`<cpu><numa><cell>`): its vCPUs and memory."""

    id: int
    vcpus: frozenset[int]
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class HugepageBacking:
    """A `<memoryBacking><hugepages><page>`: guest memory held in host pages of one size."""

    size_kib: int | None
    """None: the host's default hugepage size (a bare `<hugepages/>`)."""
    guest_cells: frozenset[int] | None = None
    """The guest cells it backs (`nodeset`); None: all of them."""


@dataclass(frozen=True, slots=True)
class DomainLayout:
    """Where a domain sits on the host's NUMA cells and devices, as its definition says: what
    Nova's NUMA and PCI accounting consume, beside the whole-host amounts."""

    emulator_pins: frozenset[int] | None = None
    """`<cputune><emulatorpin>`: the host CPUs of the emulator threads."""
    guest_cells: tuple[GuestCell, ...] = ()
    memory_nodes: frozenset[int] | None = None
    """`<numatune><memory nodeset>`: the host cells all guest memory comes from."""
    cell_memory_nodes: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """`<numatune><memnode>`: per guest cell, the host cells its memory comes from."""
    hugepages: tuple[HugepageBacking, ...] = ()
    pci_addresses: tuple[str, ...] = ()
    """Host PCI devices passed through (`<hostdev type='pci'>`), as `0000:3b:00.1`."""
    mdev_uuids: tuple[str, ...] = ()
    """Mediated devices (vGPUs) it holds (`<hostdev type='mdev'>`)."""


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
    layout: DomainLayout = field(default_factory=DomainLayout)
    owner: ProjectOwner | None = None
    """From the configured metadata element (`ownership`); None where it is not configured or absent."""


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
class PageCount:
    """The pages of one size in one NUMA cell."""

    size_kib: int
    total: int
    free: int | None
    """`virNodeGetFreePages`, read for hugepage sizes only; None for the small pages (their free
    count is the cell's free memory, which the page cache keeps lowering: no capacity) and where
    the driver cannot tell."""


@dataclass(frozen=True, slots=True)
class NumaCell:
    """One host NUMA cell, from the capabilities' `<topology>`."""

    id: int
    cpus: frozenset[int]
    siblings: tuple[frozenset[int], ...]
    """The thread siblings of each core with more than one thread (SMT), each set once."""
    memory_bytes: int
    pages: tuple[PageCount, ...]
    """Per page size, smallest first: the small pages and each hugepage size."""


@dataclass(frozen=True, slots=True)
class MdevType:
    """A mediated device type a physical device offers (a vGPU profile): libvirt's
    `mdev_types` capability."""

    type_id: str
    name: str
    device_api: str
    available: int
    """How many more instances of the type the device can create now."""


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A host PCI device from libvirt's node-device API, typed as Nova types them."""

    address: str
    """`0000:3b:02.1`, as Nova writes addresses."""
    vendor_id: str
    """Four lower-case hex digits, as in Nova's device_spec and alias: `8086`."""
    product_id: str
    numa_node: int | None
    dev_type: str
    """Nova's device types: `type-PCI`, `type-PF` (an SR-IOV physical function), `type-VF`."""
    parent_address: str | None = None
    """A VF's physical function."""
    class_code: str = ""
    """The PCI class, `0x030000` for a display controller."""
    mdev_types: tuple[MdevType, ...] = ()


@dataclass(frozen=True, slots=True)
class MediatedDevice:
    """A mediated device (a vGPU) created on a physical device: libvirt's `mdev` node device. A
    domain holds it by UUID (`<hostdev type='mdev'>`), whether or not that domain runs."""

    uuid: str
    """Lower case, hyphenated: as domains name it."""
    type_id: str
    """The mediated device type it was created as: `nvidia-35`."""
    parent_address: str | None
    """The physical device's PCI address (`0000:84:00.0`); None where the parent is not a PCI
    device (an s390 channel subsystem, a virtual parent such as mtty), which Nova gives no VGPU
    inventory."""


@dataclass(frozen=True, slots=True)
class VcpuWait:
    """How long the guests' vCPUs waited for a physical CPU (runnable, queued behind other threads),
    counted from the first audit that could tell: a counter that only grows (model/contention.py).

    libvirt's `vcpu.<n>.delay` is per vCPU thread and starts again from 0 with each QEMU process;
    summing the running domains' values would fall whenever a domain stops. Only what each vCPU
    added since it was last seen is counted, so the sum never goes back."""

    total_ns: int
    """Waited since counting began, all domains together, departed ones included."""
    last_ns: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """Per (domain UUID, vCPU number), the delay as last read: what the next reading is compared to."""


@dataclass(frozen=True, slots=True)
class SharedPoolFacts:
    """An active storage pool of a network or shared type (netfs, rbd, iscsi, gluster...) as one
    hypervisor sees it: where its data lives (its `<source>`) and its sizes.

    Several hypervisors see the same pool under names of their own; its source says which it is
    (model/storage.py)."""

    name: str
    """The pool's name on this hypervisor."""
    type: str
    """libvirt's pool type: `netfs`, `rbd`, `iscsi`, `gluster`..."""
    hosts: tuple[str, ...]
    """The servers its `<source>` names (NFS server, Ceph monitors, iSCSI portal), sorted, lower
    case, without ports."""
    path: str
    """What it is on those servers: the NFS export (`<dir path>`), the Ceph pool or Gluster volume
    (`<name>`, with a Gluster `<dir>` after it), the iSCSI target (`<device path>`)."""
    capacity_bytes: int
    used_bytes: int
    """Physically used, as libvirt reports the pool's allocation."""
    provisioned_bytes: int
    """The virtual capacities of its volumes summed: what thin provisioning promised."""
    volumes: int


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
    numa_cells: tuple[NumaCell, ...] = ()
    """Empty where the driver reports no topology."""
    pci_devices: tuple[PciDevice, ...] = ()
    """Their mediated device types' available instances as of this audit."""
    mediated_devices: tuple[MediatedDevice, ...] = ()
    """As of this audit, by UUID; empty where no device offers mediated device types."""
    vcpu_wait: VcpuWait | None = None
    """None where the hypervisor does not report how long vCPUs waited (libvirt's test driver, a
    libvirt without `vcpu.<n>.delay`), until a running domain reports it."""
    domain_cpu_ns: Mapping[str, int] | None = None
    """Per running domain's UUID, the CPU time its vCPUs used (nanoseconds, from its QEMU's start):
    what tells an idle domain (model/reclaim.py). None where the hypervisor does not report it."""
    shared_pools: tuple[SharedPoolFacts, ...] = ()
    """The active pools of shared or network types, by name."""
    domain_reads: int = 0
    """Domain definitions this audit read (virDomainGetXMLDesc): all of them in a full audit,
    those that changed in an incremental one. About the audit, not the host."""
    full_audit: bool = True
    """Every domain was read (not an incremental audit)."""
