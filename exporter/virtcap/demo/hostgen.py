"""Captured multi-socket and GPU hosts, made up: a capture document (virtcap.audit.replay) for a
described host, with NUMA cells, hugepages, SR-IOV NICs, GPUs with vGPU types, and pinned guests.

libvirt's test driver reports no NUMA cells and counts no free page, and this project has no
multi-socket or GPU hardware to capture: the hosts made here are **synthetic**. Each answer is
written in the shape libvirt gives on real hardware, following libvirt's documented formats:

- the capabilities (`<host><cpu>` with its `<topology>` and page sizes, `<topology><cells>` with
  each cell's memory, pages per size, distances and CPUs with socket, core and thread siblings),
  numbered as Linux numbers an Intel host's CPUs: the first thread of every core of every socket,
  then the second threads (CPU 0's sibling on a 2 x 8-core host is CPU 16);
- node devices (formatnode.html): PCI functions with their `virt_functions` or `phys_function`,
  IOMMU group and NUMA node; GPUs with a `mdev_types` capability (NVIDIA GRID types, vfio-pci);
  mediated devices (`mdev_<uuid>`, their parent GPU, `<capability type='mdev'>`);
- domains as nova-compute defines them (formatdomain.html, and Nova's libvirt driver for the
  `<nova:instance>` metadata): `<vcpu>`, `<cputune>` pins, the guest's NUMA cell, `<numatune>`,
  `<memoryBacking><hugepages>`, `<hostdev>` of a VF or of a vGPU;
- the free hugepages of every cell (virNodeGetFreePages): each cell's total less the pages its
  running hugepage-backed guests hold, as the kernel counts them;
- the counters, with the rates `virtcap capture` records (RATE_INTERVAL_SECONDS): the host's CPU
  time (getCPUStats), its guests' vCPUs busy (`cpu_load`) plus its own (`host_busy_cpus`), and
  each running guest's vCPU statistics (VCPU_STATS), `vcpu.<n>.time` at its `cpu_load` and
  `vcpu.<n>.delay` at its `cpu_wait`, the share of time it waits for a host CPU.

A host is described by a HostSpec; `capture_document(spec)` gives the document and
`encode_capture(capture_document(spec))` the file `replay:///path` audits. The demo's two-socket
and GPU hosts and their four-socket spare are made here (virtcap.demo.generate), and the tests
audit hosts of two and four cells from it (tests/audit/test_hostgen.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

import libvirt

from virtcap import __version__
from virtcap.audit.capture import PROBE_POOL
from virtcap.audit.capture_format import (
    FORMAT,
    VERSION,
    Answer,
    CaptureDocument,
    CellPages,
    Domain,
    DomainRates,
    Domains,
    DomainStats,
    Failure,
    FreePages,
    MissingPool,
    Node,
    NodeDevice,
    PageCount,
    Source,
    StoragePool,
    StoragePools,
)
from virtcap.audit.domain_xml import NOVA_NAMESPACE
from virtcap.audit.libvirt_api import TypedParameter
from virtcap.units import format_cpu_set

__all__ = [
    "BASE_PAGE_KIB",
    "PAGE_1G_KIB",
    "PAGE_2M_KIB",
    "PAUSED",
    "RUNNING",
    "SHUTOFF",
    "FlavorSpec",
    "GpuSpec",
    "GuestSpec",
    "HostSpec",
    "Hugepages",
    "MdevSpec",
    "MdevTypeSpec",
    "NicSpec",
    "capabilities_xml",
    "capture_document",
    "cell_cpus",
    "cpu_id",
    "domain_xml",
    "free_pages",
    "mdev_available",
    "pci_address",
    "stable_uuid",
]

BASE_PAGE_KIB = 4
PAGE_2M_KIB = 2048
PAGE_1G_KIB = 1024 * 1024
GIB_IN_KIB = 1024 * 1024
MIB_IN_KIB = 1024

RUNNING, PAUSED, SHUTOFF = libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_SHUTOFF
_STATE_REASONS = {RUNNING: 1, PAUSED: 1, SHUTOFF: 1}
"""Booted, paused by the user, shut down: what a domain Nova started and stopped reports."""

CAPTURED_AT = "2026-11-21T12:00:00+00:00"
"""A fixed time: the same spec gives the same bytes, so committed files can be compared."""
RATE_INTERVAL_SECONDS = 1.0
UPTIME_SECONDS = 3600
"""How long the host and its running guests had run at the capture: their counters' values."""
NS = 1_000_000_000
LIBVIRT_VERSION = 10_000_000
QEMU_VERSION = 8_002_002
POOL_PATH = "/var/lib/nova/instances"


@dataclass(frozen=True)
class Hugepages:
    """The pages of one hugepage size the host reserved, per cell (`per_cell[i]` in cell i)."""

    size_kib: int
    per_cell: tuple[int, ...]


@dataclass(frozen=True)
class NicSpec:
    """An SR-IOV NIC's physical function with its virtual functions, on one cell. Intel X710 by
    default; its VFs sit at slot 2 of the PF's bus, functions 0 to 7, then slot 3..."""

    cell: int
    bus: int
    vfs: int
    vendor_id: str = "8086"
    product_id: str = "1572"
    product: str = "Ethernet Controller X710 for 10GbE SFP+"
    vf_product_id: str = "154c"
    vf_product: str = "Ethernet Virtual Function 700 Series"
    vendor: str = "Intel Corporation"
    driver: str = "i40e"

    @property
    def address(self) -> str:
        return pci_address(self.bus, 0, 0)

    @property
    def vf_addresses(self) -> tuple[str, ...]:
        return tuple(pci_address(self.bus, 2 + index // 8, index % 8) for index in range(self.vfs))


@dataclass(frozen=True)
class MdevTypeSpec:
    """A vGPU type a GPU offers; `instances` is how many it holds when it holds no other type."""

    type_id: str
    name: str
    instances: int


@dataclass(frozen=True)
class GpuSpec:
    """A GPU offering mediated device types, on one cell: an NVIDIA Tesla T4 by default."""

    cell: int
    bus: int
    mdev_types: tuple[MdevTypeSpec, ...]
    vendor_id: str = "10de"
    product_id: str = "1eb8"
    product: str = "TU104GL [Tesla T4]"
    vendor: str = "NVIDIA Corporation"

    @property
    def address(self) -> str:
        return pci_address(self.bus, 0, 0)


@dataclass(frozen=True)
class MdevSpec:
    """A mediated device created on a GPU, held by the guest that names it."""

    uuid: str
    type_id: str
    parent: str
    """The GPU's address."""


@dataclass(frozen=True)
class FlavorSpec:
    name: str
    vcpus: int
    memory_mib: int
    root_gib: int = 0
    extra_specs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GuestSpec:
    """A guest as nova-compute defines it. With a `cell`, its one guest NUMA cell is placed on that
    host cell (pins, memory, hugepages); without, it floats over `pins` (the shared CPUs)."""

    name: str
    vcpus: int
    memory_mib: int
    state: int = RUNNING
    cell: int | None = None
    pins: tuple[int, ...] | None = None
    """With a cell: one host CPU per vCPU. Without: the CPUs every vCPU floats over."""
    page_size_kib: int | None = None
    """Backed by hugepages of this size, from its cell."""
    flavor: FlavorSpec | None = None
    pci: tuple[str, ...] = ()
    """Host PCI functions passed through (`<hostdev type='pci'>`)."""
    mdevs: tuple[MdevSpec, ...] = ()
    project: str = "demo"
    cpu_load: float = 0.5
    """The share of time each of its vCPUs is busy, when it runs."""
    cpu_wait: float = 0.0
    """The share of time each of its vCPUs waits for a host CPU (its steal), when it runs."""

    @property
    def uuid(self) -> str:
        return stable_uuid(f"guest/{self.name}")


@dataclass(frozen=True)
class HostSpec:
    """A host of `sockets` sockets, one NUMA cell each, `cores` cores a socket, `threads` threads a
    core; `memory_gib` in every cell, of which `hugepages` are reserved as such."""

    name: str
    sockets: int
    cores: int
    threads: int
    memory_gib: int
    hugepages: tuple[Hugepages, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    guests: tuple[GuestSpec, ...] = ()
    pool_gib: int = 2000
    pool_used_gib: int = 200
    host_in_use_gib: int = 8
    """What the host itself uses beyond its guests and hugepages (kernel, agents, page cache)."""
    model: str = "Xeon-Gold-6338"
    mhz: int = 2000
    host_busy_cpus: float = 0.5
    """The host CPUs its own work keeps busy beyond its guests' vCPUs (kernel, agents, OVS)."""

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores * self.threads

    @property
    def mdevs(self) -> tuple[MdevSpec, ...]:
        return tuple(mdev for guest in self.guests for mdev in guest.mdevs)


def stable_uuid(seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"virtcap:{seed}"))


def pci_address(bus: int, slot: int, function: int, domain: int = 0) -> str:
    """`0000:3b:02.1`, as Nova and the audit write PCI addresses."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def cpu_id(host: HostSpec, socket: int, core: int, thread: int) -> int:
    """Linux's numbering on an Intel host: every core's first thread, socket by socket, then the
    second threads in the same order."""
    return thread * host.sockets * host.cores + socket * host.cores + core


def cell_cpus(host: HostSpec, cell: int) -> frozenset[int]:
    return frozenset(
        cpu_id(host, cell, core, thread) for core in range(host.cores) for thread in range(host.threads)
    )


def free_pages(host: HostSpec) -> dict[tuple[int, int], int]:
    """Free hugepages by (cell, size in KiB): the cell's total less what its active guests hold
    (a stopped guest gives its pages back to the kernel)."""
    free = {(cell, pages.size_kib): pages.per_cell[cell] for pages in host.hugepages for cell in _cells(host)}
    for guest in host.guests:
        if guest.page_size_kib is None or guest.state == SHUTOFF or guest.cell is None:
            continue
        key = (guest.cell, guest.page_size_kib)
        if key not in free:
            raise ValueError(f"{guest.name}: cell {guest.cell} has no {guest.page_size_kib} KiB pages")
        free[key] -= guest.memory_mib * MIB_IN_KIB // guest.page_size_kib
        if free[key] < 0:
            raise ValueError(f"{guest.name}: cell {guest.cell} has too few {guest.page_size_kib} KiB pages")
    return free


def _cells(host: HostSpec) -> range:
    return range(host.sockets)


def capture_document(host: HostSpec) -> CaptureDocument:
    """The capture `virtcap capture` would write of the host described."""
    _check(host)
    memory_kib = host.sockets * host.memory_gib * GIB_IN_KIB
    active = [guest for guest in host.guests if guest.state != SHUTOFF]
    hugepages_kib = sum(p.size_kib * sum(p.per_cell) for p in host.hugepages)
    small_pages_used_kib = sum(g.memory_mib * MIB_IN_KIB for g in active if g.page_size_kib is None)
    # The kernel counts reserved hugepages as used whether guests hold them or not: what Nova's
    # formula (MemTotal - MemFree - Buffers - Cached) then gives is the hugepages, the running
    # small-page guests' memory and the host's own.
    in_use_kib = hugepages_kib + small_pages_used_kib + host.host_in_use_gib * GIB_IN_KIB
    cached_kib = min(4 * GIB_IN_KIB, (memory_kib - in_use_kib) // 2)
    buffers_kib = 512 * MIB_IN_KIB
    mem_free_kib = memory_kib - in_use_kib - cached_kib - buffers_kib
    if mem_free_kib < 0:
        raise ValueError(f"{host.name}: its guests and hugepages take more than its memory")
    sizes = sorted({BASE_PAGE_KIB, PAGE_2M_KIB, PAGE_1G_KIB})
    free = free_pages(host)
    cpu_rates = _cpu_rates(host)
    node = Node(
        type="QEMU",
        version=QEMU_VERSION,
        lib_version=LIBVIRT_VERSION,
        info=(
            host.model,
            memory_kib // MIB_IN_KIB,
            host.cpus,
            host.mhz,
            host.sockets,  # NUMA nodes
            1,  # sockets per node: libvirt counts them per node, one socket each here
            host.cores,
            host.threads,
        ),
        hostname=Answer[str](value=f"{host.name}.example.org"),
        cpu_map=Answer[tuple[int, list[bool], int]](value=(host.cpus, [True] * host.cpus, host.cpus)),
        capabilities=Answer[str](value=capabilities_xml(host)),
        cpu_stats=Answer[dict[str, int]](
            value={key: rate * UPTIME_SECONDS for key, rate in cpu_rates.items()}
        ),
        cpu_stats_per_second=cpu_rates,
        memory_stats=Answer[dict[str, int]](
            value={
                "total": memory_kib,
                "free": mem_free_kib,
                "buffers": buffers_kib,
                "cached": cached_kib,
            }
        ),
        free_pages=FreePages(
            page_sizes_kib=sizes,
            cells=[
                CellPages(
                    cell=cell,
                    pages=Answer[list[PageCount]](
                        value=[
                            PageCount(size_kib=size, free=_free_count(host, free, cell, size, mem_free_kib))
                            for size in sizes
                        ]
                    ),
                )
                for cell in _cells(host)
            ],
        ),
    )
    return CaptureDocument(
        format=FORMAT,
        version=VERSION,
        source=Source(
            uri=f"qemu+ssh://{host.name}.example.org/system",
            captured_at=CAPTURED_AT,
            virtcap_version=__version__,
            rate_interval_seconds=RATE_INTERVAL_SECONDS,
        ),
        node=node,
        domains=_domains(host),
        storage_pools=_storage_pools(host),
        node_devices=Answer[list[NodeDevice]](value=list(_node_devices(host))),
    )


def _cpu_rates(host: HostSpec) -> dict[str, int]:
    """The host's CPU time a second, nanoseconds: its own work as kernel time, its guests' busy
    vCPUs as user time, as much of it as its CPUs have room for (an overcommitted host's guests
    wait), the rest idle."""
    kernel = min(host.host_busy_cpus, host.cpus)
    user = min(sum(g.vcpus * g.cpu_load for g in host.guests if g.state == RUNNING), host.cpus - kernel)
    return {
        "kernel": round(kernel * NS),
        "user": round(user * NS),
        "idle": round((host.cpus - kernel - user) * NS),
        "iowait": 0,
    }


def _vcpu_rates(guest: GuestSpec) -> dict[str, int]:
    rates = {}
    for vcpu in range(guest.vcpus):
        rates[f"vcpu.{vcpu}.time"] = round(guest.cpu_load * NS)
        rates[f"vcpu.{vcpu}.wait"] = 0  # libvirt's reading, with the kernel's schedstats off
        rates[f"vcpu.{vcpu}.delay"] = round(guest.cpu_wait * NS)
    return rates


def _vcpu_stats(guest: GuestSpec, rates: dict[str, int]) -> dict[str, TypedParameter]:
    """VCPU_STATS of an active guest as libvirt gives them, its counters as after UPTIME_SECONDS."""
    stats: dict[str, TypedParameter] = {"vcpu.current": guest.vcpus, "vcpu.maximum": guest.vcpus}
    for vcpu in range(guest.vcpus):
        stats[f"vcpu.{vcpu}.state"] = libvirt.VIR_VCPU_RUNNING
        for counter in ("time", "wait", "delay"):
            key = f"vcpu.{vcpu}.{counter}"
            stats[key] = rates[key] * UPTIME_SECONDS
    return stats


def _check(host: HostSpec) -> None:
    cells = set(_cells(host))
    for pages in host.hugepages:
        if len(pages.per_cell) != host.sockets:
            raise ValueError(f"{pages.size_kib} KiB pages: expected a count for each of {host.sockets} cells")
    for guest in host.guests:
        if guest.cell is not None and guest.cell not in cells:
            raise ValueError(f"{guest.name}: no cell {guest.cell}")
        if guest.cell is not None and guest.pins is not None:
            if len(guest.pins) != guest.vcpus:
                raise ValueError(f"{guest.name}: expected one pin per vCPU")
            if not set(guest.pins) <= cell_cpus(host, guest.cell):
                raise ValueError(f"{guest.name}: pinned outside cell {guest.cell}")
    for cell in cells:
        reserved = sum(p.size_kib * p.per_cell[cell] for p in host.hugepages)
        if reserved > host.memory_gib * GIB_IN_KIB:
            raise ValueError(f"cell {cell}: more hugepages than memory")


def _free_count(
    host: HostSpec, free: dict[tuple[int, int], int], cell: int, size: int, mem_free_kib: int
) -> int:
    if size != BASE_PAGE_KIB:
        return free.get((cell, size), 0)
    # The small pages free are the cell's MemFree (here an even share of the host's), which the
    # audit does not read: the page cache keeps lowering it.
    return mem_free_kib // host.sockets // BASE_PAGE_KIB


# The capabilities.


def capabilities_xml(host: HostSpec) -> str:
    sizes = (BASE_PAGE_KIB, PAGE_2M_KIB, PAGE_1G_KIB)
    lines = [
        "<capabilities>",
        "",
        "  <host>",
        f"    <uuid>{stable_uuid(f'host/{host.name}')}</uuid>",
        "    <cpu>",
        "      <arch>x86_64</arch>",
        "      <model>Icelake-Server-noTSX</model>",
        "      <vendor>Intel</vendor>",
        "      <microcode version='218104011'/>",
        f"      <counter name='tsc' frequency='{host.mhz * 1_000_000}' scaling='no'/>",
        # libvirt counts sockets per NUMA cell here, as virNodeGetInfo does
        f"      <topology sockets='1' dies='1' clusters='1' cores='{host.cores}' threads='{host.threads}'/>",
        "      <maxphysaddr mode='emulate' bits='46'/>",
        "      <feature name='vmx'/>",
        "      <feature name='pdpe1gb'/>",
        *(f"      <pages unit='KiB' size='{size}'/>" for size in sizes),
        "    </cpu>",
        "    <power_management>",
        "      <suspend_mem/>",
        "    </power_management>",
        "    <iommu support='yes'/>",
        "    <migration_features>",
        "      <live/>",
        "      <uri_transports>",
        "        <uri_transport>tcp</uri_transport>",
        "        <uri_transport>rdma</uri_transport>",
        "      </uri_transports>",
        "    </migration_features>",
        "    <topology>",
        f"      <cells num='{host.sockets}'>",
    ]
    for cell in _cells(host):
        lines.extend(_cell_xml(host, cell))
    lines += [
        "      </cells>",
        "    </topology>",
        "    <secmodel>",
        "      <model>apparmor</model>",
        "      <doi>0</doi>",
        "    </secmodel>",
        "  </host>",
        "",
        "  <guest>",
        "    <os_type>hvm</os_type>",
        "    <arch name='x86_64'>",
        "      <wordsize>64</wordsize>",
        "      <emulator>/usr/bin/qemu-system-x86_64</emulator>",
        "      <machine maxCpus='288'>pc-q35-8.2</machine>",
        "      <domain type='qemu'/>",
        "      <domain type='kvm'/>",
        "    </arch>",
        "  </guest>",
        "",
        "</capabilities>",
    ]
    return "\n".join(lines) + "\n"


def _cell_xml(host: HostSpec, cell: int) -> list[str]:
    memory_kib = host.memory_gib * GIB_IN_KIB
    hugepages_kib = sum(p.size_kib * p.per_cell[cell] for p in host.hugepages)
    counts = {PAGE_2M_KIB: 0, PAGE_1G_KIB: 0} | {p.size_kib: p.per_cell[cell] for p in host.hugepages}
    small_pages = (memory_kib - hugepages_kib) // BASE_PAGE_KIB
    lines = [
        f"        <cell id='{cell}'>",
        f"          <memory unit='KiB'>{memory_kib}</memory>",
        f"          <pages unit='KiB' size='{BASE_PAGE_KIB}'>{small_pages}</pages>",
        *(
            f"          <pages unit='KiB' size='{size}'>{count}</pages>"
            for size, count in sorted(counts.items())
        ),
        "          <distances>",
        *(
            f"            <sibling id='{other}' value='{10 if other == cell else 21}'/>"
            for other in _cells(host)
        ),
        "          </distances>",
        f"          <cpus num='{host.cores * host.threads}'>",
    ]
    cpus = sorted(
        (cpu_id(host, cell, core, thread), core)
        for core in range(host.cores)
        for thread in range(host.threads)
    )
    for cpu, core in cpus:
        siblings = format_cpu_set(frozenset(cpu_id(host, cell, core, t) for t in range(host.threads)))
        lines.append(
            f"            <cpu id='{cpu}' socket_id='{cell}' die_id='0' cluster_id='65535' "
            f"core_id='{core}' siblings='{siblings}'/>"
        )
    lines += ["          </cpus>", "        </cell>"]
    return lines


# The node devices.


def _node_devices(host: HostSpec) -> Iterable[NodeDevice]:
    group = iter(range(40, 1000))
    for nic in host.nics:
        yield _device(_pf_xml(nic, next(group)))
        for address in nic.vf_addresses:
            yield _device(_vf_xml(nic, address, next(group)))
    for gpu in host.gpus:
        yield _device(_gpu_xml(host, gpu, next(group)))
    for mdev in host.mdevs:
        yield _device(_mdev_xml(mdev, next(group)))


def _device(xml: str) -> NodeDevice:
    name = xml.split("<name>", 1)[1].split("</name>", 1)[0]
    return NodeDevice(name=name, xml=Answer[str](value=xml))


def _device_name(address: str) -> str:
    return "pci_" + address.replace(":", "_").replace(".", "_")


def _address_parts(address: str) -> tuple[int, int, int, int]:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16)


def _address_xml(address: str) -> str:
    domain, bus, slot, function = _address_parts(address)
    return (
        f"<address domain='0x{domain:04x}' bus='0x{bus:02x}' slot='0x{slot:02x}' function='0x{function:x}'/>"
    )


def _pci_xml(  # noqa: PLR0917  (one PCI function's fields, as libvirt lists them)
    address: str,
    parent: str,
    driver: str,
    class_code: str,
    product: tuple[str, str],
    vendor: tuple[str, str],
    functions: list[str],
    iommu_group: int,
    cell: int,
) -> str:
    domain, bus, slot, function = _address_parts(address)
    root_port = f"0000:{bus - 1:02x}:00.0"
    return "\n".join(
        [
            "<device>",
            f"  <name>{_device_name(address)}</name>",
            f"  <path>/sys/devices/pci{domain:04x}:{bus - 1:02x}/{root_port}/{address}</path>",
            f"  <parent>{parent}</parent>",
            "  <driver>",
            f"    <name>{driver}</name>",
            "  </driver>",
            "  <capability type='pci'>",
            f"    <class>{class_code}</class>",
            f"    <domain>{domain}</domain>",
            f"    <bus>{bus}</bus>",
            f"    <slot>{slot}</slot>",
            f"    <function>{function}</function>",
            f"    <product id='0x{product[0]}'>{escape(product[1])}</product>",
            f"    <vendor id='0x{vendor[0]}'>{escape(vendor[1])}</vendor>",
            *functions,
            f"    <iommuGroup number='{iommu_group}'>",
            f"      {_address_xml(address)}",
            "    </iommuGroup>",
            f"    <numa node='{cell}'/>",
            "    <pci-express>",
            "      <link validity='cap' port='0' speed='8' width='8'/>",
            "      <link validity='sta' speed='8' width='8'/>",
            "    </pci-express>",
            "  </capability>",
            "</device>",
            "",
        ]
    )


def _pf_xml(nic: NicSpec, group: int) -> str:
    bus = _address_parts(nic.address)[1]
    functions = [
        "    <capability type='virt_functions' maxCount='64'>",
        *(f"      {_address_xml(address)}" for address in nic.vf_addresses),
        "    </capability>",
    ]
    return _pci_xml(
        nic.address,
        _device_name(f"0000:{bus - 1:02x}:00.0"),
        nic.driver,
        "0x020000",
        (nic.product_id, nic.product),
        (nic.vendor_id, nic.vendor),
        functions,
        group,
        nic.cell,
    )


def _vf_xml(nic: NicSpec, address: str, group: int) -> str:
    functions = [
        "    <capability type='phys_function'>",
        f"      {_address_xml(nic.address)}",
        "    </capability>",
    ]
    return _pci_xml(
        address,
        _device_name(nic.address),
        "vfio-pci",
        "0x020000",
        (nic.vf_product_id, nic.vf_product),
        (nic.vendor_id, nic.vendor),
        functions,
        group,
        nic.cell,
    )


def mdev_available(host: HostSpec, gpu: GpuSpec) -> dict[str, int]:
    """Instances of each type the GPU can still create. An NVIDIA GPU holds vGPUs of one type at
    a time: once it holds one, the other types have none available."""
    held = [mdev for mdev in host.mdevs if mdev.parent == gpu.address]
    available = {}
    for kind in gpu.mdev_types:
        of_kind = sum(1 for mdev in held if mdev.type_id == kind.type_id)
        available[kind.type_id] = 0 if len(held) > of_kind else kind.instances - of_kind
    return available


def _gpu_xml(host: HostSpec, gpu: GpuSpec, group: int) -> str:
    bus = _address_parts(gpu.address)[1]
    available = mdev_available(host, gpu)
    functions = ["    <capability type='mdev_types'>"]
    for kind in gpu.mdev_types:
        functions += [
            f"      <type id={quoteattr(kind.type_id)}>",
            f"        <name>{escape(kind.name)}</name>",
            "        <deviceAPI>vfio-pci</deviceAPI>",
            f"        <availableInstances>{available[kind.type_id]}</availableInstances>",
            "      </type>",
        ]
    functions.append("    </capability>")
    return _pci_xml(
        gpu.address,
        _device_name(f"0000:{bus - 1:02x}:00.0"),
        "nvidia",
        "0x030200",
        (gpu.product_id, gpu.product),
        (gpu.vendor_id, gpu.vendor),
        functions,
        group,
        gpu.cell,
    )


def _mdev_xml(mdev: MdevSpec, group: int) -> str:
    name = "mdev_" + mdev.uuid.replace("-", "_")
    domain, bus, _slot, _function = _address_parts(mdev.parent)
    sysfs = f"/sys/devices/pci{domain:04x}:{bus - 1:02x}/{domain:04x}:{bus - 1:02x}:00.0/{mdev.parent}"
    return "\n".join(
        [
            "<device>",
            f"  <name>{name}</name>",
            f"  <path>{sysfs}/{mdev.uuid}</path>",
            f"  <parent>{_device_name(mdev.parent)}</parent>",
            "  <driver>",
            "    <name>vfio_mdev</name>",
            "  </driver>",
            "  <capability type='mdev'>",
            f"    <type id={quoteattr(mdev.type_id)}/>",
            f"    <uuid>{mdev.uuid}</uuid>",
            f"    <iommuGroup number='{group}'/>",
            "  </capability>",
            "</device>",
            "",
        ]
    )


# The domains.


def _domains(host: HostSpec) -> Domains:
    definitions = []
    stats = []
    vcpu_stats = []
    vcpu_rates = []
    ids = iter(range(1, 10_000))
    for guest in host.guests:
        domain_id = next(ids) if guest.state != SHUTOFF else None
        memory_kib = guest.memory_mib * MIB_IN_KIB
        cpu_time = 0 if guest.state == SHUTOFF else 3_600_000_000_000 * guest.vcpus
        definitions.append(
            Domain(
                uuid=guest.uuid,
                name=guest.name,
                info=Answer[tuple[int, int, int, int, int]](
                    value=(guest.state, memory_kib, memory_kib, guest.vcpus, cpu_time)
                ),
                xml=Answer[str](value=domain_xml(guest, domain_id)),
                block_info={},  # the guests boot from Ceph volumes: no local disk to size
            )
        )
        stats.append(
            DomainStats(
                uuid=guest.uuid,
                stats={"state.state": guest.state, "state.reason": _STATE_REASONS[guest.state]},
            )
        )
        if guest.state != SHUTOFF:  # VCPU_STATS lists the active domains: a paused one's vCPUs stand
            rates = _vcpu_rates(guest)
            vcpu_stats.append(DomainStats(uuid=guest.uuid, stats=_vcpu_stats(guest, rates)))
            moving = rates if guest.state == RUNNING else dict.fromkeys(rates, 0)
            vcpu_rates.append(DomainRates(uuid=guest.uuid, per_second=moving))
    uuids = [guest.uuid for guest in host.guests]
    return Domains(
        listed=Answer[list[str]](value=uuids),
        state_stats=Answer[list[DomainStats]](value=stats),
        vcpu_stats=Answer[list[DomainStats]](value=vcpu_stats),
        vcpu_stats_per_second=vcpu_rates,
        definitions=definitions,
    )


def domain_xml(guest: GuestSpec, domain_id: int | None) -> str:
    """The domain as nova-compute defines it and libvirt formats it (XMLDesc(0))."""
    memory_kib = guest.memory_mib * MIB_IN_KIB
    opening = f"<domain type='kvm' id='{domain_id}'>" if domain_id is not None else "<domain type='kvm'>"
    lines = [
        opening,
        f"  <name>{escape(guest.name)}</name>",
        f"  <uuid>{guest.uuid}</uuid>",
        *_metadata(guest),
        f"  <memory unit='KiB'>{memory_kib}</memory>",
        f"  <currentMemory unit='KiB'>{memory_kib}</currentMemory>",
    ]
    if guest.page_size_kib is not None:
        nodeset = " nodeset='0'" if guest.cell is not None else ""
        lines += [
            "  <memoryBacking>",
            "    <hugepages>",
            f"      <page size='{guest.page_size_kib}' unit='KiB'{nodeset}/>",
            "    </hugepages>",
            "  </memoryBacking>",
        ]
    if guest.cell is not None and guest.pins is not None:
        lines.append(f"  <vcpu placement='static'>{guest.vcpus}</vcpu>")
        lines.append("  <cputune>")
        lines.append(f"    <shares>{guest.vcpus * 1024}</shares>")
        lines += [f"    <vcpupin vcpu='{index}' cpuset='{cpu}'/>" for index, cpu in enumerate(guest.pins)]
        # Nova's default emulator threads policy: they share the guest's own pinned CPUs
        lines.append(f"    <emulatorpin cpuset='{format_cpu_set(frozenset(guest.pins))}'/>")
        lines.append("  </cputune>")
    elif guest.pins is not None:
        floating = format_cpu_set(frozenset(guest.pins))
        lines.append(f"  <vcpu placement='static' cpuset='{floating}'>{guest.vcpus}</vcpu>")
        lines += ["  <cputune>", f"    <shares>{guest.vcpus * 1024}</shares>", "  </cputune>"]
    else:
        lines.append(f"  <vcpu placement='static'>{guest.vcpus}</vcpu>")
    if guest.cell is not None:
        lines += [
            "  <numatune>",
            f"    <memory mode='strict' nodeset='{guest.cell}'/>",
            f"    <memnode cellid='0' mode='strict' nodeset='{guest.cell}'/>",
            "  </numatune>",
        ]
    lines += [
        "  <resource>",
        "    <partition>/machine</partition>",
        "  </resource>",
        "  <os>",
        "    <type arch='x86_64' machine='pc-q35-8.2'>hvm</type>",
        "    <boot dev='hd'/>",
        "  </os>",
        "  <features>",
        "    <acpi/>",
        "    <apic/>",
        "  </features>",
        "  <cpu mode='host-model' check='partial'>",
        f"    <topology sockets='{guest.vcpus}' dies='1' clusters='1' cores='1' threads='1'/>",
    ]
    if guest.cell is not None:
        access = " memAccess='shared'" if guest.page_size_kib is not None else ""
        lines += [
            "    <numa>",
            f"      <cell id='0' cpus='0-{guest.vcpus - 1}' memory='{memory_kib}' unit='KiB'{access}/>",
            "    </numa>",
        ]
    lines += [
        "  </cpu>",
        "  <on_poweroff>destroy</on_poweroff>",
        "  <on_reboot>restart</on_reboot>",
        "  <on_crash>destroy</on_crash>",
        "  <devices>",
        "    <emulator>/usr/bin/qemu-system-x86_64</emulator>",
        "    <disk type='network' device='disk'>",
        "      <driver name='qemu' type='raw' cache='none' discard='unmap'/>",
        f"      <source protocol='rbd' name='volumes/volume-{stable_uuid(f'volume/{guest.name}')}'>",
        "        <host name='10.20.0.11' port='6789'/>",
        "      </source>",
        "      <target dev='vda' bus='virtio'/>",
        "    </disk>",
    ]
    for index, address in enumerate(guest.pci):
        lines += [
            "    <hostdev mode='subsystem' type='pci' managed='yes'>",
            "      <driver name='vfio'/>",
            f"      <source>{_address_xml(address)}</source>",
            f"      <alias name='hostdev{index}'/>",
            f"      <address type='pci' domain='0x0000' bus='0x{5 + index:02x}' slot='0x00' function='0x0'/>",
            "    </hostdev>",
        ]
    for index, mdev in enumerate(guest.mdevs, start=len(guest.pci)):
        lines += [
            "    <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>",
            f"      <source><address uuid='{mdev.uuid}'/></source>",
            f"      <alias name='hostdev{index}'/>",
            f"      <address type='pci' domain='0x0000' bus='0x{5 + index:02x}' slot='0x00' function='0x0'/>",
            "    </hostdev>",
        ]
    lines += ["  </devices>", "</domain>"]
    return "\n".join(lines) + "\n"


def _metadata(guest: GuestSpec) -> list[str]:
    flavor = guest.flavor
    if flavor is None:
        return []
    # Keystone ids: 32 hex digits, no dashes
    user_id = stable_uuid(f"user/{guest.project}").replace("-", "")
    project_id = stable_uuid(f"project/{guest.project}").replace("-", "")
    specs = [
        f"          <nova:extraSpec name={quoteattr(key)}>{escape(value)}</nova:extraSpec>"
        for key, value in flavor.extra_specs
    ]
    return [
        "  <metadata>",
        f'    <nova:instance xmlns:nova="{NOVA_NAMESPACE}">',
        '      <nova:package version="29.2.0"/>',
        f"      <nova:name>{escape(guest.name)}</nova:name>",
        "      <nova:creationTime>2026-11-02 09:30:00</nova:creationTime>",
        f"      <nova:flavor name={quoteattr(flavor.name)}>",
        f"        <nova:memory>{flavor.memory_mib}</nova:memory>",
        f"        <nova:disk>{flavor.root_gib}</nova:disk>",
        "        <nova:swap>0</nova:swap>",
        "        <nova:ephemeral>0</nova:ephemeral>",
        f"        <nova:vcpus>{flavor.vcpus}</nova:vcpus>",
        *(["        <nova:extraSpecs>", *specs, "        </nova:extraSpecs>"] if specs else []),
        "      </nova:flavor>",
        "      <nova:owner>",
        f'        <nova:user uuid="{user_id}">{escape(guest.project)}-admin</nova:user>',
        f'        <nova:project uuid="{project_id}">{escape(guest.project)}</nova:project>',
        "      </nova:owner>",
        f'      <nova:root type="volume" uuid="{stable_uuid(f"volume/{guest.name}")}"/>',
        "    </nova:instance>",
        "  </metadata>",
    ]


# The storage.


def _storage_pools(host: HostSpec) -> StoragePools:
    capacity = host.pool_gib * GIB_IN_KIB * 1024
    allocation = host.pool_used_gib * GIB_IN_KIB * 1024
    xml = "\n".join(
        [
            "<pool type='dir'>",
            "  <name>default</name>",
            f"  <uuid>{stable_uuid(f'pool/{host.name}')}</uuid>",
            f"  <capacity unit='bytes'>{capacity}</capacity>",
            f"  <allocation unit='bytes'>{allocation}</allocation>",
            f"  <available unit='bytes'>{capacity - allocation}</available>",
            "  <source>",
            "  </source>",
            "  <target>",
            f"    <path>{POOL_PATH}</path>",
            "    <permissions>",
            "      <mode>0755</mode>",
            "      <owner>0</owner>",
            "      <group>0</group>",
            "    </permissions>",
            "  </target>",
            "</pool>",
            "",
        ]
    )
    missing = PROBE_POOL
    return StoragePools(
        listed=Answer[list[str]](value=["default"]),
        active=Answer[list[str]](value=["default"]),
        pools=[
            StoragePool(
                name="default",
                xml=Answer[str](value=xml),
                info=Answer[tuple[int, int, int, int]](
                    value=(2, capacity, allocation, capacity - allocation)
                ),
                volumes=Answer(value=[]),
            )
        ],
        missing=MissingPool(
            name=missing,
            error=Failure(
                code=libvirt.VIR_ERR_NO_STORAGE_POOL,
                domain=libvirt.VIR_FROM_STORAGE,
                message=f"Storage pool not found: no storage pool with matching name '{missing}'",
                level=libvirt.VIR_ERR_ERROR,
                str1="Storage pool not found: %s",
                str2=f"no storage pool with matching name '{missing}'",
                int1=-1,
                int2=-1,
            ),
        ),
    )
