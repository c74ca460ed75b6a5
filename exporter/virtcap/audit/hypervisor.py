"""The audit: one hypervisor's libvirt connection in, plain facts out.

Everything here blocks on libvirt and runs in a worker thread. A domain that cannot be read is
reported among the problems and left out; it never fails the audit of its host.

What the host is built of (its CPU identity, NUMA cells and PCI devices: the HostLayout) is
constant for a connection's life and costly to read (the capabilities take seconds on QEMU without
KVM, the devices a call each): read once per connection (read_host_layout) and handed to each audit
on it, which reads only the free hugepages, in one call, and joins them into the cells.

Mediated devices (vGPUs) are the exception among devices: they are created and destroyed as
guests come and go, and the available instances of each type their physical GPUs offer move with
them. Where the layout has a device offering mediated device types, every audit lists those
devices and the mediated devices again (two calls, and one per device for its XML); a host
without any pays nothing.

Domains are the bulk of an audit: a definition each, and the volumes of the storage pools. Where
the connection keeps a DomainCache (virtcap.audit.domain_cache: incremental audits), an audit
between full ones reads again only the domains that changed, and keeps the volume index.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import libvirt

from virtcap.audit.capabilities import CapabilitiesError, numa_cells, parse_capabilities
from virtcap.audit.domain_cache import CachedDomain, DomainCache, HostReadings
from virtcap.audit.domain_states import ACTIVE_STATES, state_from_libvirt
from virtcap.audit.domain_xml import (
    DiskReference,
    DomainDefinition,
    DomainXMLError,
    parse_domain_xml,
)
from virtcap.audit.libvirt_api import VirConnect, VirDomain, VirNodeDevice
from virtcap.audit.node_devices import NodeDeviceError, mediated_device, pci_device, pci_name_address
from virtcap.audit.replay import VCPU_STATS, CaptureFileError, frozen_cpu_times, is_replay_uri, open_replay
from virtcap.audit.volumes import VolumeIndex, is_local_disk
from virtcap.config import DiskSource
from virtcap.model.contention import VcpuDelays, advance_vcpu_wait
from virtcap.model.facts import (
    CpuIdentity,
    CpuTimes,
    DiskFacts,
    DomainFacts,
    HostFacts,
    MediatedDevice,
    NumaCell,
    PciDevice,
    StorageFacts,
    VcpuWait,
)
from virtcap.model.ownership import OwnershipMetadata

MIB = 1024**2
KIB = 1024

MEMINFO = Path("/proc/meminfo")

# libvirt's test driver (virConnectGetType): an in-process fake whose node CPU times and block
# info are made-up constants, not measurements.
TEST_DRIVER = "TEST"

_NOT_REPORTED = (
    libvirt.VIR_ERR_NO_SUPPORT,
    libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED,
    libvirt.VIR_ERR_INVALID_ARG,
)


def _silence_libvirt(_context: object, _error: object) -> None:
    """libvirt prints every error to stderr by default; we report them ourselves."""


libvirt.registerErrorHandler(_silence_libvirt, None)


class AuditError(Exception):
    """The hypervisor could not be audited at all (connection or node information failed)."""


class DomainUnreadableError(Exception):
    """One domain could not be read: reported among the host's problems, never guessed at."""


def open_read_only(uri: str) -> VirConnect:
    """A read-only connection: where libvirt's objects enter, typed from here on. A replay URI
    (`replay:///path/host.json`, see virtcap.audit.replay) opens the capture it names instead."""
    if is_replay_uri(uri):
        try:
            return open_replay(uri)
        except (ValueError, CaptureFileError) as error:
            raise AuditError(f"cannot replay {error}") from None
    try:
        return cast(VirConnect, libvirt.openReadOnly(uri))
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot connect: {error.get_error_message()}") from None


def is_local_uri(uri: str) -> bool:
    """A QEMU URI without a host talks to this machine's own libvirtd."""
    parts = urlsplit(uri)
    return parts.scheme in ("qemu", "qemu+unix") and not parts.hostname


def redact_uri(uri: str) -> str:
    """The URI without a password, for logs, labels and error messages."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


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


def audit_host(
    conn: VirConnect,
    uri: str,
    disk: DiskSource | None,
    previous_cpu: CpuTimes | None = None,
    cpu_window: float = 0.0,
    *,
    layout: HostLayout | None = None,
    previous_vcpu_wait: VcpuWait | None = None,
    ownership: OwnershipMetadata | None = None,
    cache: DomainCache | None = None,
) -> HostFacts:
    """Read everything capacity accounting needs from one hypervisor.

    Host CPU busy time is a rate: it needs a previous sample (`previous_cpu`, from the last
    audit) or, for a one-shot audit, a second sample taken `cpu_window` seconds after the first.
    `layout` is the connection's (read_host_layout), read here when not given. The vCPU wait
    counter goes on from `previous_vcpu_wait`, the last audit's (virtcap.model.contention).
    `ownership` is where domains' metadata names their project, when the configuration says so.
    `cache` is the connection's (virtcap.audit.domain_cache), kept by its owner from one audit to
    the next: with it, audits between full ones read again only the domains that changed. Without
    it, every audit is full.
    """
    started = time.monotonic()
    problems: list[str] = []
    try:
        _model, memory_mib, cpus, *_ = conn.getInfo()
        hypervisor_type = conn.getType()
        readings = _host_readings(conn, cache)
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot read node information: {error.get_error_message()}") from None
    sampling = cpu_window > 0 and previous_cpu is None
    window_started = time.monotonic()
    if sampling:
        previous_cpu = read_cpu_times(conn)
    if layout is None:
        layout = read_host_layout(conn)
    if sampling:  # the layout was read within the window: only the rest of it is waited for
        time.sleep(max(0.0, cpu_window - (time.monotonic() - window_started)))
    storage = _storage(conn, uri, disk, problems)
    # The test driver answers virDomainGetBlockInfo with made-up constants (about 1 TiB for any
    # disk): only its storage pools' volumes are real data.
    block_info_is_real = hypervisor_type != TEST_DRIVER
    if cache is None:
        volumes = VolumeIndex(conn, block_info_is_real=block_info_is_real)
        domains, reads = _read_all_domains(conn, volumes, ownership, problems)
        full = True
    else:
        try:
            domains, volumes, reads, full = _audit_domains_with(
                cache, conn, block_info_is_real, ownership, problems
            )
        except BaseException:
            cache.valid = False  # the changes it took may be lost: the next audit is full
            raise
    memory_in_use, memory_source = _memory_in_use(conn, uri, domains)
    cells = _with_free_hugepages(conn, layout.numa_cells, problems)
    pci_devices, mediated_devices = _with_mediated_devices(conn, layout.pci_devices, problems)
    cpu_times = read_cpu_times(conn)
    vcpu_wait = advance_vcpu_wait(
        previous_vcpu_wait,
        None if hypervisor_type == TEST_DRIVER else read_vcpu_delays(conn, problems),
        {d.uuid for d in domains},
    )
    shared_pools = volumes.shared_pools()
    return HostFacts(
        hostname=readings.hostname,
        hypervisor_type=hypervisor_type,
        hypervisor_version=readings.hypervisor_version,
        libvirt_version=readings.libvirt_version,
        cpus=cpus,
        online_cpus=_online_cpus(conn),
        memory_bytes=memory_mib * MIB,
        storage=storage,
        memory_in_use_bytes=memory_in_use,
        memory_in_use_source=memory_source,
        cpu_times=cpu_times,
        busy_cpus=_busy_cpus(previous_cpu, cpu_times),
        domains=tuple(sorted(domains, key=lambda d: d.name)),
        audited_at=time.time(),
        audit_duration_seconds=time.monotonic() - started,
        # libvirt lists domains in no stable order: sorted, reports compare equal from audit to audit
        problems=tuple(
            sorted(
                problems + list(layout.problems) + volumes.problems + [p for d in domains for p in d.problems]
            )
        ),
        numa_cells=cells,
        pci_devices=pci_devices,
        mediated_devices=mediated_devices,
        vcpu_wait=vcpu_wait,
        shared_pools=shared_pools,
        domain_reads=reads,
        full_audit=full,
    )


def read_vcpu_delays(conn: VirConnect, problems: list[str]) -> VcpuDelays | None:
    """Per (domain UUID, vCPU) of the running domains, how long the vCPU waited for a physical CPU
    (libvirt's `vcpu.<n>.delay`, nanoseconds), in one call for every domain; None where the
    hypervisor does not report it.

    libvirt reads the delay from the kernel's schedstat of each vCPU thread (libvirt 7.2 and later
    on QEMU). `vcpu.<n>.wait` is not used: it is the same run-queue wait read from the kernel's
    scheduler statistics, which most kernels leave off (`kernel.sched_schedstats`), and libvirt then
    reports 0, which cannot be told from a host without contention. A reading where running domains
    report no delay at all is None: the hypervisor cannot tell, which is not "no wait".
    """
    try:
        listed = conn.getAllDomainStats(*VCPU_STATS)
    except libvirt.libvirtError as error:
        if error.get_error_code() not in _NOT_REPORTED:
            problems.append(
                f"cannot read the vCPU statistics: {error.get_error_message()}; vCPU wait not counted"
            )
        return None
    delays: dict[tuple[str, int], int] = {}
    for domain, stats in listed:
        try:
            uuid = domain.UUIDString()
        except libvirt.libvirtError:
            continue
        for key, value in stats.items():
            number, _, suffix = key.removeprefix("vcpu.").partition(".")
            if key.startswith("vcpu.") and suffix == "delay" and number.isdigit():
                delays[(uuid, int(number))] = int(value)
    if listed and not delays:
        return None
    return delays


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


def _with_free_hugepages(
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


def _with_mediated_devices(
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


def _host_readings(conn: VirConnect, cache: DomainCache | None) -> HostReadings:
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


def _online_cpus(conn: VirConnect) -> frozenset[int] | None:
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


def _busy_cpus(previous: CpuTimes | None, current: CpuTimes | None) -> float | None:
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


def _storage(conn: VirConnect, uri: str, disk: DiskSource | None, problems: list[str]) -> StorageFacts | None:
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


def _memory_in_use(conn: VirConnect, uri: str, domains: list[DomainFacts]) -> tuple[int | None, str | None]:
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


def _list_domains(conn: VirConnect) -> list[tuple[VirDomain, int | None]]:
    """Every domain with its state code, in one call where the driver can.

    libvirt-python releases the GIL around every call, and a thread coming back from one waits
    up to the interpreter's switch interval (5 ms) whenever another thread is busy in Python: with
    hundreds of hypervisors audited at once, the number of calls per domain, not their cost, sets
    the pace. One bulk state query replaces a virDomainGetInfo per domain; drivers without it
    (None) get the per-domain call.
    """
    try:
        return [
            (domain, int(stats["state.state"]) if "state.state" in stats else None)
            for domain, stats in conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0)
        ]
    except libvirt.libvirtError as error:
        if error.get_error_code() not in (libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED):
            raise AuditError(f"cannot list domains: {error.get_error_message()}") from None
    try:
        return [(domain, None) for domain in conn.listAllDomains(0)]
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot list domains: {error.get_error_message()}") from None


def _read_all_domains(
    conn: VirConnect, volumes: VolumeIndex, ownership: OwnershipMetadata | None, problems: list[str]
) -> tuple[list[DomainFacts], int]:
    """Every domain read: a full audit without a cache. Also the number of definitions read."""
    domains = []
    reads = 0
    for domain, state_code in _list_domains(conn):
        reads += 1
        read = _read_or_report(domain, state_code, ownership, problems)
        if read is not None:
            domains.append(_domain_facts(domain, *read, volumes, {}))
    return domains, reads


def _audit_domains_with(
    cache: DomainCache,
    conn: VirConnect,
    block_info_is_real: bool,
    ownership: OwnershipMetadata | None,
    problems: list[str],
) -> tuple[list[DomainFacts], VolumeIndex, int, bool]:
    """The domains, reading again only those that changed since the cache's last audit, unless
    this audit is a full one. Also the volume index used, the definitions read, and whether the
    audit was full. See virtcap.audit.domain_cache for why what is kept is still exact."""
    # Taken before the listing: a change told after this is read by the next audit.
    changes = cache.changes.take()
    full = cache.next_is_full() or changes.unknown
    listed = _list_domains(conn)
    if any(state_code is None for _domain, state_code in listed):
        full = True  # no bulk state query: nothing cheap tells a state change
    volumes, volumes_fresh = _volumes_for(
        cache, conn, block_info_is_real, full=full, pools_changed=changes.pools
    )
    reads = 0
    # Per listed domain: its UUID, and what was read of it now (None: kept from the cache).
    present: list[tuple[VirDomain, str, tuple[int, DomainDefinition] | None]] = []
    for domain, state_code in listed:
        try:
            uuid = domain.UUIDString()  # local to the client: no round trip
        except libvirt.libvirtError:
            uuid = ""
        kept = cache.domains.get(uuid)
        if full or not uuid or kept is None or state_code != kept.state_code or uuid in changes.domains:
            reads += 1
            definition_read = _read_or_report(domain, state_code, ownership, problems)
            if definition_read is not None:
                present.append((domain, uuid, definition_read))
        else:
            present.append((domain, uuid, None))
    # A domain read again may name a volume created since the index was read (libvirt tells of no
    # volume's creation): the index is read again, and the kept domains' disks looked up in it.
    if not volumes_fresh and any(
        volumes.lacks(reference) for *_, read in present if read for reference in read[1].disks
    ):
        volumes = cache.new_volumes(VolumeIndex(conn, block_info_is_real=block_info_is_real))
    domains: list[DomainFacts] = []
    kept_domains: dict[str, CachedDomain] = {}
    for domain, uuid, read in present:
        if read is not None:
            blocks: dict[str, int | str] = {}
            facts = _domain_facts(domain, *read, volumes, blocks)
            entry = CachedDomain(*read, facts, cache.volumes_generation, blocks)
        else:
            entry = cache.domains[uuid]
            if entry.volumes_generation != cache.volumes_generation:
                # Looked up in another index: rebuilt from the kept definition, without a round
                # trip but a virDomainGetBlockInfo for a disk that has left the pools.
                entry.facts = _domain_facts(
                    domain, entry.state_code, entry.definition, volumes, entry.block_capacities
                )
                entry.volumes_generation = cache.volumes_generation
        if uuid:
            kept_domains[uuid] = entry
        domains.append(entry.facts)
    cache.domains = kept_domains
    cache.audits += 1
    cache.valid = True
    return domains, volumes, reads, full


def _volumes_for(
    cache: DomainCache, conn: VirConnect, block_info_is_real: bool, *, full: bool, pools_changed: bool
) -> tuple[VolumeIndex, bool]:
    """The cache's volume index where it may be kept, else a new one (and True)."""
    volumes = cache.volumes
    if (
        full
        or volumes is None
        or not cache.pool_events
        or pools_changed
        or not volumes.reusable()
        or not volumes.refresh_shared()  # a call per shared pool: their sizes move without events
    ):
        return cache.new_volumes(VolumeIndex(conn, block_info_is_real=block_info_is_real)), True
    return volumes, False


def _read_or_report(
    domain: VirDomain, state_code: int | None, ownership: OwnershipMetadata | None, problems: list[str]
) -> tuple[int, DomainDefinition] | None:
    """`_read_definition`, an unreadable domain reported among `problems` (left out of the
    accounting, never a failure of its host); None for that, and for a domain gone while read."""
    try:
        return _read_definition(domain, state_code, ownership)
    except DomainUnreadableError as unreadable:
        problems.append(str(unreadable))
        return None


def _read_definition(
    domain: VirDomain, state_code: int | None, ownership: OwnershipMetadata | None
) -> tuple[int, DomainDefinition] | None:
    """The domain's state code and parsed definition; None when it vanished while being read
    (undefined between list and read)."""
    try:
        if state_code is None:
            state_code = int(domain.info()[0])
        return state_code, parse_domain_xml(domain.XMLDesc(0), ownership)
    except libvirt.libvirtError as error:
        if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise DomainUnreadableError(
            f"{_label(domain)}: {error.get_error_message()}; left out of the accounting"
        ) from None
    except DomainXMLError as error:
        raise DomainUnreadableError(f"{_label(domain)}: {error}; left out of the accounting") from None


def _domain_facts(
    domain: VirDomain,
    state_code: int,
    definition: DomainDefinition,
    volumes: VolumeIndex,
    block_capacities: dict[str, int | str],
) -> DomainFacts:
    """A domain's facts from its definition; its disks' sizes from the volume index, or from
    virDomainGetBlockInfo for a disk outside the pools, unless `block_capacities` has them."""
    label = f"domain {definition.name}"
    state = state_from_libvirt(state_code)
    active = state_code in ACTIVE_STATES
    problems = list(definition.problems)
    disks = tuple(
        _disk_facts(domain, reference, volumes, problems, label, block_capacities=block_capacities)
        for reference in definition.disks
    )
    return DomainFacts(
        name=definition.name,
        uuid=definition.uuid,
        state=state,
        vcpus=definition.vcpus,
        memory_bytes=definition.memory_bytes,
        # The live definition's <currentMemory> is the balloon target, what virDomainGetInfo
        # reports: read from the XML, it costs no call of its own.
        current_memory_bytes=definition.current_memory_bytes if active else None,
        hugepages=definition.hugepages,
        vcpu_pins=definition.vcpu_pins,
        disks=disks,
        nova=definition.nova,
        problems=tuple(problems),
        placement=definition.placement,
        owner=definition.owner,
    )


def _label(domain: VirDomain) -> str:
    try:
        return f"domain {domain.name()}"
    except libvirt.libvirtError:
        return "domain ?"


def _disk_facts(
    domain: VirDomain,
    reference: DiskReference,
    volumes: VolumeIndex,
    problems: list[str],
    label: str,
    *,
    block_capacities: dict[str, int | str],
) -> DiskFacts:
    if not is_local_disk(reference):
        return DiskFacts(reference.target, reference.source, local=False, capacity_bytes=None)
    if reference.kind == "volume":
        volume = volumes.by_pool_volume(reference.pool or "", reference.volume or "")
    else:
        volume = volumes.by_path(reference.path or "")
    if volume is not None:
        return DiskFacts(
            reference.target, reference.source, local=not volume.shared, capacity_bytes=volume.capacity
        )
    if not volumes.block_info_is_real:
        problems.append(f"{label}: disk {reference.target} ({reference.source}): not in any storage pool")
        return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=None)
    if reference.target not in block_capacities:
        try:
            block_capacities[reference.target] = int(domain.blockInfo(reference.target)[0])
        except libvirt.libvirtError as error:
            block_capacities[reference.target] = str(error.get_error_message())
    capacity = block_capacities[reference.target]
    if isinstance(capacity, str):
        problems.append(f"{label}: disk {reference.target} ({reference.source}): {capacity}")
        return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=None)
    return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=capacity)
