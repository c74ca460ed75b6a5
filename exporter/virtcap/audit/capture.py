"""`virtcap capture`: everything an audit reads from one hypervisor, recorded into one file.

The capture opens the hypervisor read-only, as the audit does, and records each libvirt call the
audit makes with its answer, or the error it raised, including the free pages of every page size
in every NUMA cell and every node device (PCI functions with their mediated device types, mediated
devices, ...), of which the audit reads the PCI and mediated ones. The document's layout, and what
a replay of it answers, are described in virtcap.audit.replay, which reads it back as a
connection: `replay:///path/host.json`.

The document holds the host's name and its domains' definitions (names, UUIDs, Nova's metadata
with project and user names): it is written readable by its owner only.

Counters are recorded with their rates: the CPU time and the vCPU statistics are read twice,
`rate_interval` seconds apart, the second reading kept with each counter's increase a second
(virtcap.audit.replay advances them at those rates). Not on libvirt's test driver, whose numbers
are made up, nor with a `rate_interval` of 0.

Its size is bounded (`max_bytes`): the text libvirt returns is counted while it arrives, so that
a host too large to capture stops the capture early instead of filling the memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import libvirt
from pydantic import ValidationError

from virtcap import __version__
from virtcap.audit.capture_format import (
    FORMAT,
    MAX_FILE_BYTES,
    VCPU_STATS,
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
    Volume,
    ask,
    counter_rates,
    encode_capture,
    vcpu_counter,
)
from virtcap.audit.connection import AuditError, open_read_only, redact_uri
from virtcap.audit.domain_xml import DomainXMLError, parse_domain_xml
from virtcap.audit.host_readings import TEST_DRIVER
from virtcap.audit.libvirt_api import (
    BlockInfo,
    CPUMap,
    DomainInfo,
    NodeInfo,
    StoragePoolInfo,
    StorageVolInfo,
    TypedParameter,
    VirConnect,
    VirDomain,
    VirNodeDevice,
    VirStoragePool,
    VirStorageVol,
)
from virtcap.audit.replay import is_replay_uri, replay_path
from virtcap.audit.volumes import is_local_disk
from virtcap.config.errors import clip
from virtcap.units import brief_repr, format_bytes

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RATE_INTERVAL_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_FILE_BYTES",
    "MAX_RATE_INTERVAL_SECONDS",
    "CaptureError",
    "CaptureTooLargeError",
    "capture_host",
    "capture_uri",
    "encode_bounded",
    "uri_problem",
    "write_private",
]

DEFAULT_MAX_BYTES = 64 * 1024**2
DEFAULT_TIMEOUT_SECONDS = 300.0
DEFAULT_RATE_INTERVAL_SECONDS = 1.0
MAX_RATE_INTERVAL_SECONDS = 60.0
MAX_URI_CHARS = 1024
PROBE_POOL = "virtcap-capture-probe-no-such-pool"
"""A pool name no host has, looked up once to record how the host answers an unknown name."""
_RECORD_BYTES = 128
"""What each recorded object costs beyond its text, roughly, in the running size estimate."""
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S*")
_PAGE_UNITS = {"KiB": 1, "MiB": 1024, "GiB": 1024**2}


class CaptureError(Exception):
    """The hypervisor could not be captured; one line."""


class CaptureTooLargeError(CaptureError):
    """The capture would be larger than its maximum size."""


def uri_problem(uri: str) -> str | None:
    """What is wrong with `uri` as a URI to capture, before libvirt is asked; None if nothing."""
    if len(uri) > MAX_URI_CHARS:
        return f"expected a URI of at most {MAX_URI_CHARS} characters, got {len(uri)}"
    if not _URI.fullmatch(uri):
        return (
            f"expected a libvirt URI such as qemu:///system or qemu+ssh://host/system, got {brief_repr(uri)}"
        )
    if is_replay_uri(uri):
        try:
            replay_path(uri)
        except ValueError as error:
            return str(error)
    return None


def capture_uri(
    uri: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    rate_interval: float = DEFAULT_RATE_INTERVAL_SECONDS,
) -> bytes:
    """The capture of the hypervisor at `uri`, its rates measured over `rate_interval` seconds,
    encoded; CaptureError when it cannot be read in `timeout` seconds or would exceed `max_bytes`.

    libvirt's calls block as long as the daemon does: they run in a daemon thread that the caller
    stops waiting for after `timeout` (or on Ctrl-C), and that the process may exit without.
    """
    if not 0 < max_bytes <= MAX_FILE_BYTES:
        raise ValueError(f"expected a maximum size from 1 byte to {format_bytes(MAX_FILE_BYTES)}")
    if not 0 <= rate_interval <= MAX_RATE_INTERVAL_SECONDS:
        raise ValueError(f"expected a rate interval from 0 to {MAX_RATE_INTERVAL_SECONDS:g} seconds")
    outcome: list[bytes | BaseException] = []

    def work() -> None:
        try:
            conn = open_read_only(uri)
        except AuditError as error:
            outcome.append(CaptureError(str(error)))
            return
        try:
            document = capture_host(conn, uri, max_bytes, rate_interval)
            outcome.append(encode_bounded(document, max_bytes))
        except BaseException as error:  # handed to the waiting thread
            outcome.append(error)
        finally:
            with contextlib.suppress(libvirt.libvirtError):
                conn.close()

    worker = threading.Thread(target=work, name="capture", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise CaptureError(f"no complete answer within {timeout:g}s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def encode_bounded(document: CaptureDocument, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    data = encode_capture(document)
    if len(data) > max_bytes:
        raise CaptureTooLargeError(_too_large(max_bytes))
    return data


def write_private(path: Path, data: bytes) -> None:
    """`data` into `path`, whole or not at all (a temporary file renamed over it), readable by its
    owner only; OSError when it cannot be written."""
    directory = path.parent
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:  # mkstemp creates it 0600
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def capture_host(
    conn: VirConnect,
    uri: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    rate_interval: float = DEFAULT_RATE_INTERVAL_SECONDS,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> CaptureDocument:
    """Everything the audit reads from `conn` (the hypervisor at `uri`), as one document, its
    counters' rates measured over `rate_interval` seconds (0: none)."""
    budget = _Budget(max_bytes)
    try:
        try:
            node_type, version, lib_version = conn.getType(), conn.getVersion(), conn.getLibVersion()
            info = _node_info(conn)
        except libvirt.libvirtError as error:
            raise CaptureError(f"cannot read node information: {error.get_error_message()}") from None
        vcpu_stats = node_type != TEST_DRIVER  # the test driver's numbers are made up
        sampling = vcpu_stats and rate_interval > 0
        first = _Counters.read(conn, clock, vcpu_stats=vcpu_stats) if sampling else None
        if first is not None:
            sleep(rate_interval)
        capabilities = ask(Answer[str], lambda: budget.text(conn.getCapabilities()))
        cpu_stats = _Sample.read(lambda: dict(conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS)), clock)
        node = Node(
            type=node_type,
            version=version,
            lib_version=lib_version,
            info=info,
            hostname=ask(Answer[str], conn.getHostname),
            cpu_map=ask(Answer[CPUMap], lambda: _cpu_map(conn)),
            capabilities=capabilities,
            cpu_stats=Answer[dict[str, int]](value=cpu_stats.value, error=cpu_stats.error),
            cpu_stats_per_second=_cpu_rates(first.cpu if first else None, cpu_stats),
            memory_stats=ask(
                Answer[dict[str, int]],
                lambda: dict(conn.getMemoryStats(libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS)),
            ),
            free_pages=_free_pages(conn, capabilities.value),
        )
        domains = _domains(conn, budget, clock, vcpu_stats=vcpu_stats, first=first.vcpus if first else None)
        rated = node.cpu_stats_per_second is not None or domains.vcpu_stats_per_second is not None
        return CaptureDocument(
            format=FORMAT,
            version=VERSION,
            source=Source(
                uri=redact_uri(uri),
                captured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                virtcap_version=__version__,
                rate_interval_seconds=rate_interval if rated else None,
            ),
            node=node,
            domains=domains,
            storage_pools=_storage_pools(conn, budget),
            node_devices=ask(
                Answer[list[NodeDevice]], lambda: [_device(d, budget) for d in conn.listAllDevices(0)]
            ),
        )
    except ValidationError as error:  # libvirt answered with something of another type
        problem = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise CaptureError(f"unexpected answer from libvirt: {where}: {clip(problem['msg'])}") from None


@dataclass(frozen=True)
class _Sample:
    """One reading of counters, or the error it raised, and when (by the capture's clock)."""

    value: dict[str, int] | None
    error: Failure | None
    at: float

    @classmethod
    def read(cls, call: Callable[[], dict[str, int]], clock: Callable[[], float]) -> _Sample:
        try:
            value = call()
        except libvirt.libvirtError as error:
            return cls(None, Failure.of(error), clock())
        return cls(value, None, clock())


@dataclass(frozen=True)
class _Counters:
    """The first readings of the counters whose rates are recorded."""

    cpu: _Sample
    vcpus: _VcpuSample | None

    @classmethod
    def read(cls, conn: VirConnect, clock: Callable[[], float], *, vcpu_stats: bool) -> _Counters:
        cpu = _Sample.read(lambda: dict(conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS)), clock)
        vcpus = None
        if vcpu_stats:
            try:
                listed = {
                    domain.UUIDString(): dict(stats) for domain, stats in conn.getAllDomainStats(*VCPU_STATS)
                }
                vcpus = _VcpuSample(listed, clock())
            except libvirt.libvirtError:
                vcpus = None  # no rates: the second reading records what the host answered
        return cls(cpu, vcpus)


@dataclass(frozen=True)
class _VcpuSample:
    stats: dict[str, dict[str, TypedParameter]]
    """By domain UUID."""
    at: float


def _cpu_rates(first: _Sample | None, second: _Sample) -> dict[str, int] | None:
    if first is None or first.value is None or second.value is None or second.at <= first.at:
        return None
    return counter_rates(dict(first.value), dict(second.value), second.at - first.at, lambda _key: True)


class _Budget:
    """A running estimate of the document's size, stopping the capture past the maximum."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.spent = 0

    def text(self, text: str) -> str:
        self.spend(len(text))
        return text

    def spend(self, size: int) -> None:
        self.spent += size + _RECORD_BYTES
        if self.spent > self.max_bytes:
            raise CaptureTooLargeError(_too_large(self.max_bytes))


def _too_large(max_bytes: int) -> str:
    return f"the capture would be larger than its maximum size of {format_bytes(max_bytes)}"


def _node_info(conn: VirConnect) -> NodeInfo:
    model, memory_mib, cpus, mhz, nodes, sockets, cores, threads = conn.getInfo()
    return model, memory_mib, cpus, mhz, nodes, sockets, cores, threads


def _cpu_map(conn: VirConnect) -> CPUMap:
    count, online, online_count = conn.getCPUMap()
    return count, list(online), online_count


def _free_pages(conn: VirConnect, capabilities: str | None) -> FreePages:
    sizes, cells = _page_sizes_and_cells(capabilities)
    if not sizes:
        cells = []  # nothing to ask

    def pages(cell: int) -> list[PageCount]:
        counts = conn.getFreePages(sizes, cell, 1).get(cell, {})
        return [PageCount(size_kib=size, free=free) for size, free in counts.items()]

    return FreePages(
        page_sizes_kib=sizes,
        cells=[
            CellPages(cell=cell, pages=ask(Answer[list[PageCount]], partial(pages, cell))) for cell in cells
        ],
    )


def _page_sizes_and_cells(capabilities: str | None) -> tuple[list[int], list[int]]:
    """The host CPU's page sizes in KiB and the NUMA cells of the host's topology."""
    if capabilities is None:
        return [], []
    try:
        host = ET.fromstring(capabilities).find("host")
    except ET.ParseError:
        return [], []
    if host is None:
        return [], []
    sizes = []
    for page in host.findall("cpu/pages"):
        size, unit = page.get("size", ""), page.get("unit", "KiB")
        if size.isdigit() and unit in _PAGE_UNITS:
            sizes.append(int(size) * _PAGE_UNITS[unit])
    cells = [
        int(cell.get("id", ""))
        for cell in host.findall("topology/cells/cell")
        if cell.get("id", "").isdigit()
    ]
    return sorted(set(sizes)), sorted(set(cells))


def _domains(
    conn: VirConnect,
    budget: _Budget,
    clock: Callable[[], float],
    *,
    vcpu_stats: bool,
    first: _VcpuSample | None,
) -> Domains:
    seen: dict[str, VirDomain] = {}

    def known(domain: VirDomain) -> str:
        return seen.setdefault(domain.UUIDString(), domain).UUIDString()

    listed = ask(Answer[list[str]], lambda: [known(d) for d in conn.listAllDomains(0)])
    state_stats = ask(
        Answer[list[DomainStats]],
        lambda: [
            DomainStats(uuid=known(domain), stats=dict(stats))
            for domain, stats in conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0)
        ],
    )
    vcpus = rates = None
    if vcpu_stats:  # the audit reads none on libvirt's test driver: its numbers are made up
        vcpus = ask(
            Answer[list[DomainStats]],
            lambda: [
                DomainStats(uuid=known(domain), stats=dict(stats))
                for domain, stats in conn.getAllDomainStats(*VCPU_STATS)
            ],
        )
        rates = _vcpu_rates(first, vcpus.value, clock())
    return Domains(
        listed=listed,
        state_stats=state_stats,
        vcpu_stats=vcpus,
        vcpu_stats_per_second=rates,
        definitions=[_domain(uuid, domain, budget) for uuid, domain in seen.items()],
    )


def _vcpu_rates(
    first: _VcpuSample | None, second: list[DomainStats] | None, at: float
) -> list[DomainRates] | None:
    """The rates of the vCPU counters of the domains read twice (one started in between has none)."""
    if first is None or second is None or at <= first.at:
        return None
    rates = []
    for entry in second:
        before = first.stats.get(entry.uuid)
        if before is not None:
            per_second = counter_rates(before, entry.stats, at - first.at, vcpu_counter)
            rates.append(DomainRates(uuid=entry.uuid, per_second=per_second))
    return rates


def _domain(uuid: str, domain: VirDomain, budget: _Budget) -> Domain:
    xml = ask(Answer[str], lambda: budget.text(domain.XMLDesc(0)))
    return Domain(
        uuid=uuid,
        name=budget.text(domain.name()),
        info=ask(Answer[DomainInfo], lambda: _domain_info(domain)),
        xml=xml,
        block_info={
            target: ask(Answer[BlockInfo], partial(_block_info, domain, target))
            for target in _local_disk_targets(xml.value)
        },
    )


def _domain_info(domain: VirDomain) -> DomainInfo:
    state, max_memory, memory, vcpus, cpu_time = domain.info()
    return state, max_memory, memory, vcpus, cpu_time


def _block_info(domain: VirDomain, target: str) -> BlockInfo:
    capacity, allocation, physical = domain.blockInfo(target)
    return capacity, allocation, physical


def _local_disk_targets(xml: str | None) -> Iterable[str]:
    """The disks whose size the audit may ask libvirt for: those it counts as local (see
    virtcap.audit.volumes.is_local_disk). Asking for a network disk could wait on unreachable storage."""
    if xml is None:
        return []
    try:
        disks = parse_domain_xml(xml).disks
    except DomainXMLError:
        return []  # the audit leaves such a domain out before it asks for any disk
    return sorted({disk.target for disk in disks if is_local_disk(disk)})


def _storage_pools(conn: VirConnect, budget: _Budget) -> StoragePools:
    seen: dict[str, VirStoragePool] = {}

    def names(flags: int) -> list[str]:
        pools = conn.listAllStoragePools(flags)
        for pool in pools:
            seen.setdefault(pool.name(), pool)
        return [pool.name() for pool in pools]

    listed = ask(Answer[list[str]], lambda: names(0))
    active = ask(Answer[list[str]], lambda: names(libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE))
    try:
        conn.storagePoolLookupByName(PROBE_POOL)
        missing = None  # a pool by that very name: unknown names go unrecorded
    except libvirt.libvirtError as error:
        missing = MissingPool(name=PROBE_POOL, error=Failure.of(error))
    return StoragePools(
        listed=listed,
        active=active,
        pools=[_pool(name, pool, budget) for name, pool in seen.items()],
        missing=missing,
    )


def _pool(name: str, pool: VirStoragePool, budget: _Budget) -> StoragePool:
    return StoragePool(
        name=name,
        xml=ask(Answer[str], lambda: budget.text(pool.XMLDesc(0))),
        info=ask(Answer[StoragePoolInfo], lambda: _pool_info(pool)),
        volumes=ask(Answer[list[Volume]], lambda: [_volume(v, budget) for v in pool.listAllVolumes(0)]),
    )


def _pool_info(pool: VirStoragePool) -> StoragePoolInfo:
    state, capacity, allocation, available = pool.info()
    return state, capacity, allocation, available


def _volume(volume: VirStorageVol, budget: _Budget) -> Volume:
    return Volume(
        name=budget.text(volume.name()),
        path=ask(Answer[str], lambda: budget.text(volume.path())),
        info=ask(Answer[StorageVolInfo], lambda: _volume_info(volume)),
    )


def _volume_info(volume: VirStorageVol) -> StorageVolInfo:
    kind, capacity, allocation = volume.info()
    return kind, capacity, allocation


def _device(device: VirNodeDevice, budget: _Budget) -> NodeDevice:
    return NodeDevice(
        name=budget.text(device.name()), xml=ask(Answer[str], lambda: budget.text(device.XMLDesc(0)))
    )
