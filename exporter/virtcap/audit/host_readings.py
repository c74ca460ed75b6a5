"""What one hypervisor's host reads, as the audit reads it: the node's versions, CPUs, memory,
CPU times and storage, and what the host is built of.

What the host is built of (its CPU identity, NUMA cells and PCI devices: the HostLayout) is
constant for a connection's life and costly to read (the capabilities take seconds on QEMU without
KVM, the devices a call each): read once per connection (read_host_layout) and handed to each audit
on it, which reads only the free hugepages, in one call, and joins them into the cells.

Mediated devices (vGPUs) are the exception among devices: they are created and destroyed as
guests come and go, and the available instances of each type their physical GPUs offer move with
them. Where the layout has a device offering mediated device types, every audit lists those
devices and the mediated devices again (two calls, and one per device for its XML); a host
without any pays nothing.

Blocks on libvirt: runs in the audit's worker thread.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path

import libvirt

from virtcap.audit.capabilities import CapabilitiesError, numa_cells, parse_capabilities
from virtcap.audit.connection import AuditError, is_local_uri
from virtcap.audit.domain_cache import DomainCache, HostReadings
from virtcap.audit.libvirt_api import VirConnect, VirNodeDevice
from virtcap.audit.node_devices import NodeDeviceError, mediated_device, pci_device, pci_name_address
from virtcap.audit.replay import frozen_cpu_times
from virtcap.config import DiskSource
from virtcap.model.facts import (
    CpuIdentity,
    CpuTimes,
    DomainFacts,
    MediatedDevice,
    NumaCell,
    PciDevice,
    StorageFacts,
)

KIB = 1024

MEMINFO = Path("/proc/meminfo")

# libvirt's test driver (virConnectGetType): an in-process fake whose node CPU times and block
# info are made-up constants, not measurements.
TEST_DRIVER = "TEST"


def version_string(encoded: int) -> str:
    """libvirt encodes versions as major * 1,000,000 + minor * 1,000 + release."""
    return f"{encoded // 1_000_000}.{encoded // 1000 % 1000}.{encoded % 1000}"


@dataclass(frozen=True, slots=True)
class HostLayout:
    """What a hypervisor is built of, constant for a connection's life (read_host_layout): its
    CPU identity, its NUMA cells without their free pages, its PCI devices, and the problems met
    reading them, which every audit with this layout reports again."""

    identity: CpuIdentity
    numa_cells: tuple[NumaCell, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    problems: tuple[str, ...] = ()


def read_host_layout(conn: VirConnect) -> HostLayout:
    """The host's CPU identity, NUMA cells (free pages unknown) and PCI devices.

    Slow on some drivers (the capabilities take seconds on QEMU without KVM, the devices a call
    each) and constant for a connection's life: callers read it once per connection, never on
    every audit. A reconnect reads it again, hot-plugged devices with it. What cannot be read
    (the capabilities, a device) is a problem of the host, never a failed audit.
    """
    problems: list[str] = []
    try:
        capabilities: str | None = conn.getCapabilities()
    except libvirt.libvirtError as error:
        capabilities = None
        problems.append(f"cannot read the capabilities: {error.get_error_message()}; NUMA cells unknown")
    cells: tuple[NumaCell, ...] = ()
    root = None
    if capabilities is not None:
        try:
            root = parse_capabilities(capabilities)
            cells = numa_cells(root)
        except CapabilitiesError as error:
            problems.append(f"NUMA topology: {error}; NUMA cells unknown")
    return HostLayout(
        identity=_cpu_identity(conn, root),
        numa_cells=cells,
        pci_devices=_all_pci_devices(conn, problems),
        problems=tuple(problems),
    )


def _cpu_identity(conn: VirConnect, capabilities: ET.Element | None) -> CpuIdentity:
    """The capabilities' host CPU; the node's CPU model (virNodeGetInfo) where they name none."""
    host_cpu = None if capabilities is None else capabilities.find("host/cpu")
    model = None if host_cpu is None else host_cpu.findtext("model")
    if host_cpu is not None and model is not None:
        return CpuIdentity(model=model, arch=host_cpu.findtext("arch", default=""))
    try:
        fallback = str(conn.getInfo()[0])
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot read node information: {error.get_error_message()}") from None
    return CpuIdentity(model=fallback, arch="" if host_cpu is None else host_cpu.findtext("arch", default=""))


def with_free_hugepages(
    conn: VirConnect, cells: tuple[NumaCell, ...], problems: list[str]
) -> tuple[NumaCell, ...]:
    """The cells with the free pages of each hugepage size joined in, read in one call for every
    cell and size (virNodeGetFreePages answers cell -> page size in KiB -> free pages).

    Free hugepages are what a hugepage-backed guest can still get. The base page size (the
    smallest) is not asked for: its free count is the cell's MemFree, which the page cache lowers
    and which moves from second to second; it stays unknown, as it does on a driver that cannot
    count free pages (VIR_ERR_NO_SUPPORT) or answers nothing for a cell (libvirt's test driver).
    """
    sizes = sorted({page.size_kib for cell in cells for page in cell.pages})
    hugepage_sizes = sizes[1:]
    if not cells or not hugepage_sizes:
        return cells
    first, last = cells[0].id, cells[-1].id  # sorted by id
    try:
        free = conn.getFreePages(hugepage_sizes, first, last - first + 1)
    except libvirt.libvirtError as error:
        if error.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
            problems.append(f"cannot read free hugepages: {error.get_error_message()}; free pages unknown")
        return cells
    joined = []
    for cell in cells:
        counts = free.get(cell.id) or {}
        pages = tuple(
            replace(page, free=int(counts[page.size_kib])) if page.size_kib in counts else page
            for page in cell.pages
        )
        joined.append(replace(cell, pages=pages) if counts else cell)
    return tuple(joined)


def _all_pci_devices(conn: VirConnect, problems: list[str]) -> tuple[PciDevice, ...]:
    """The host's PCI devices, by address. A driver without node devices has none."""
    read = _pci_devices(
        conn,
        problems,
        libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV,
        what="node devices",
        otherwise="PCI devices unknown",
        device_otherwise="left out of the PCI devices",
    )
    if read is None:
        return ()
    return tuple(sorted(read.devices, key=lambda device: device.address))


@dataclass(frozen=True, slots=True)
class _PciRead:
    devices: tuple[PciDevice, ...]
    unreadable: frozenset[str]
    """The addresses (where their names tell them) of the devices listed whose XML could not be
    read or parsed."""


def _pci_devices(
    conn: VirConnect, problems: list[str], flags: int, *, what: str, otherwise: str, device_otherwise: str
) -> _PciRead | None:
    """The PCI devices a listing with `flags` gives: one call to list them, one per device for its
    XML; None where the listing failed (a problem of the host, unless the driver has no node
    devices).

    A device whose XML cannot be read is a problem of the host and left out; one that went away
    between the two calls is simply gone.
    """
    try:
        listed = conn.listAllDevices(flags)
    except libvirt.libvirtError as error:
        if error.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
            problems.append(f"cannot list {what}: {error.get_error_message()}; {otherwise}")
        return None
    devices = {}
    unreadable: set[str | None] = set()
    for device in listed:
        try:
            parsed = pci_device(device.XMLDesc(0))
        except libvirt.libvirtError as error:
            if error.get_error_code() != libvirt.VIR_ERR_NO_NODE_DEVICE:
                problems.append(f"{_device_label(device)}: {error.get_error_message()}; {device_otherwise}")
                unreadable.add(_name_address(device))
            continue
        except NodeDeviceError as error:
            problems.append(f"{_device_label(device)}: {error}; {device_otherwise}")
            unreadable.add(_name_address(device))
            continue
        if parsed is not None:
            devices[parsed.address] = parsed
    return _PciRead(tuple(devices.values()), frozenset(address for address in unreadable if address))


def _name_address(device: VirNodeDevice) -> str | None:
    try:
        return pci_name_address(device.name())
    except libvirt.libvirtError:
        return None


def with_mediated_devices(
    conn: VirConnect, layout_devices: tuple[PciDevice, ...], problems: list[str]
) -> tuple[tuple[PciDevice, ...], tuple[MediatedDevice, ...]]:
    """The PCI devices with their mediated device types as of now, and the mediated devices.

    Nothing is read where no device of the layout offers mediated device types. Otherwise the
    devices offering them are listed again (a GPU whose driver was loaded after the connection
    opened comes in; one no longer listed offers none now) and each of their XML read: libvirt
    reads the available instances from sysfs at that moment. A device whose XML cannot be read
    keeps what the layout says, a problem of the host; so do all of them where the listing fails.
    """
    if not any(device.mdev_types for device in layout_devices):
        return layout_devices, ()
    by_address = {device.address: device for device in layout_devices}
    refreshed = _pci_devices(
        conn,
        problems,
        libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES,
        what="the devices offering mediated device types",
        otherwise="their available instances as read when the connection opened",
        device_otherwise="its available instances as read when the connection opened",
    )
    if refreshed is not None:
        listed = {device.address for device in refreshed.devices}
        for address, device in by_address.items():
            if device.mdev_types and address not in listed and address not in refreshed.unreadable:
                by_address[address] = replace(device, mdev_types=())
        by_address.update((device.address, device) for device in refreshed.devices)
    devices = tuple(by_address[address] for address in sorted(by_address))
    return devices, _mediated_devices(conn, problems)


def _mediated_devices(conn: VirConnect, problems: list[str]) -> tuple[MediatedDevice, ...]:
    """The host's mediated devices, by UUID: one call to list them, one per device for its XML.

    A driver without them (libvirt's test driver in older versions) has none. One that cannot be
    read is a problem of the host, and the domain holding it then holds a device of no known GPU.
    """
    try:
        listed = conn.listAllDevices(libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV)
    except libvirt.libvirtError as error:
        if error.get_error_code() not in (libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_INVALID_ARG):
            problems.append(
                f"cannot list mediated devices: {error.get_error_message()}; vGPUs created unknown"
            )
        return ()
    devices: dict[str, MediatedDevice] = {}
    for device in listed:
        try:
            parsed = mediated_device(device.XMLDesc(0))
        except libvirt.libvirtError as error:
            if error.get_error_code() != libvirt.VIR_ERR_NO_NODE_DEVICE:
                problems.append(
                    f"{_device_label(device)}: {error.get_error_message()}; left out of the mediated devices"
                )
            continue
        except NodeDeviceError as error:
            problems.append(f"{_device_label(device)}: {error}; left out of the mediated devices")
            continue
        if parsed is not None:
            devices[parsed.uuid] = parsed
    return tuple(devices[uuid] for uuid in sorted(devices))


def _device_label(device: VirNodeDevice) -> str:
    try:
        return f"node device {device.name()}"
    except libvirt.libvirtError:
        return "node device ?"


def read_host_readings(conn: VirConnect, cache: DomainCache | None) -> HostReadings:
    """The versions and the host name: read at full audits, kept by the cache between them (see
    virtcap.audit.domain_cache for why). Raises libvirt's error where a version cannot be read."""
    if cache is not None and cache.host_readings is not None and not cache.next_is_full():
        return cache.host_readings
    readings = HostReadings(
        hypervisor_version=version_string(conn.getVersion()),
        libvirt_version=version_string(conn.getLibVersion()),
        hostname=_hostname(conn),
    )
    if cache is not None:
        cache.host_readings = readings
    return readings


def _hostname(conn: VirConnect) -> str:
    try:
        return str(conn.getHostname())
    except libvirt.libvirtError:
        return ""


def read_online_cpus(conn: VirConnect) -> frozenset[int] | None:
    """The online CPUs (virNodeGetCPUMap); None where the driver cannot tell."""
    try:
        _count, online, _online_count = conn.getCPUMap()
    except libvirt.libvirtError:
        return None
    return frozenset(cpu for cpu, is_online in enumerate(online) if is_online)


def read_cpu_times(conn: VirConnect) -> CpuTimes | None:
    """The host's cumulative busy CPU time, or None where the driver does not measure it.

    A missing figure is unknown, never 0: two samples of a constant would report an idle host.
    The test driver and a capture replayed without recorded rates answer with constants (a capture
    with rates advances its counters: it is read as the live host), drivers without node statistics
    with an error, and a driver that leaves out kernel or user time tells only part of the busy time.
    """
    try:
        if conn.getType() == TEST_DRIVER or frozen_cpu_times(conn):
            return None
        stats = conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS)
    except libvirt.libvirtError:
        return None
    if "kernel" not in stats or "user" not in stats:
        return None
    busy = int(stats["kernel"]) + int(stats["user"])
    return CpuTimes(busy_ns=busy, sampled_at=time.monotonic())


def busy_cpus(previous: CpuTimes | None, current: CpuTimes | None) -> float | None:
    """Average busy host CPUs between two samples: CPU-nanoseconds per wall-clock nanosecond.

    None without two samples in order, or when the counter went back (the host rebooted between
    them): the rate is then unknown, not 0.
    """
    if previous is None or current is None:
        return None
    elapsed = current.sampled_at - previous.sampled_at
    busy = current.busy_ns - previous.busy_ns
    if elapsed <= 0 or busy < 0:
        return None
    return busy / 1e9 / elapsed


_NO_DISK_TOTAL = "disk has no limit: its allocations are counted, its total is unknown"


def read_storage(
    conn: VirConnect, uri: str, disk: DiskSource | None, problems: list[str]
) -> StorageFacts | None:
    """The disk the configuration names (a storage pool, or a path on the local host); None, the
    problem said, where its total cannot be read."""
    if disk is None:
        return None
    if disk.pool is not None:
        try:
            pool = conn.storagePoolLookupByName(disk.pool)
            state, capacity, allocation, _available = pool.info()
        except libvirt.libvirtError as error:
            problems.append(f"storage pool {disk.pool}: {error.get_error_message()}; {_NO_DISK_TOTAL}")
            return None
        if state != libvirt.VIR_STORAGE_POOL_RUNNING:
            problems.append(f"storage pool {disk.pool} is not active; {_NO_DISK_TOTAL}")
            return None
        return StorageFacts(source=f"pool {disk.pool}", capacity_bytes=capacity, used_bytes=allocation)
    assert disk.path is not None
    if not is_local_uri(uri):
        problems.append(
            f"disk path {disk.path} can only be read on the local host; configure a pool instead; "
            f"{_NO_DISK_TOTAL}"
        )
        return None
    try:
        stat = os.statvfs(disk.path)
    except OSError as error:
        problems.append(f"disk path {disk.path}: {error.strerror}; {_NO_DISK_TOTAL}")
        return None
    return StorageFacts(
        source=f"path {disk.path}",
        capacity_bytes=stat.f_frsize * stat.f_blocks,
        used_bytes=stat.f_frsize * (stat.f_blocks - stat.f_bfree),
    )


def read_memory_in_use(
    conn: VirConnect, uri: str, domains: list[DomainFacts]
) -> tuple[int | None, str | None]:
    """Nova's formula, MemTotal - (MemFree + Buffers + Cached), from the best source at hand.

    Where the driver offers no node memory statistics, the sum of the active guests' balloons
    stands in: a lower bound of what the host really uses, labelled as such.
    """
    if is_local_uri(uri):
        in_use = read_meminfo_in_use()
        if in_use is not None:
            return in_use, "host"
    stats: dict[str, int] | None
    try:
        stats = conn.getMemoryStats(libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS)
    except libvirt.libvirtError:
        stats = None
    if stats and "total" in stats:
        free = sum(int(stats.get(key, 0)) for key in ("free", "buffers", "cached"))
        return (int(stats["total"]) - free) * KIB, "host"
    return sum(d.current_memory_bytes or 0 for d in domains), "guests"


def read_meminfo_in_use(path: Path = MEMINFO) -> int | None:
    """MemTotal - (MemFree + Buffers + Cached) in bytes, with exactly those fields, as Nova's
    libvirt driver reads them; None where the file cannot be read (not Linux).

    Not psutil's figure: its `cached` adds SReclaimable, which makes memory in use hundreds of MiB
    lower than Nova's, and than what libvirt's node statistics give for a remote host.
    """
    try:
        text = path.read_text(encoding="ascii")
    except OSError:
        return None
    wanted = {"MemTotal", "MemFree", "Buffers", "Cached"}
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in wanted:
            fields[name] = int(rest.split()[0]) * KIB  # "kB" in the file: KiB
    if fields.keys() != wanted:
        return None
    return fields["MemTotal"] - (fields["MemFree"] + fields["Buffers"] + fields["Cached"])
