"""A captured hypervisor played back: libvirt's answers from a capture file, through the same audit.

`virtcap capture` (virtcap.audit.capture) records what the audit reads from a hypervisor into one
JSON document; a replay connection answers the calls of virtcap.audit.libvirt_api from it, so
the audit, the model and the exposition run unchanged on a host that is not there: hosts of any
shape in tests, the demo and benchmarks, and what-if audits of captured hosts for operators.

**The URI.** `replay:///absolute/path/host.json` names a capture file: everything after
`replay://` is the file's absolute path, taken as is (no host, no query, no percent-decoding).
`open_read_only` (virtcap.audit.connection) dispatches on the scheme, so a replay URI goes
wherever a libvirt URI does: the configuration's `hypervisors`, `virtcap capture --uri`.

**The document** (FORMAT, VERSION; version 1, without recorded rates, is read too), one key per
libvirt call, each answer as libvirt gave it: `{"value": ...}`, or `{"error": {...}}` with the
libvirtError's fields, raised again on replay (same class, get_error_code(), get_error_domain(),
get_error_message()):

- `source`: the URI captured (without password), when, by which virtcap, and how far apart the
  two samples of the recorded rates were (`rate_interval_seconds`, absent without rates);
- `node`: getType, getVersion, getLibVersion and getInfo (plain values: without them there is
  no capture), getHostname, getCPUMap, getCapabilities, getCPUStats(ALL_CPUS) with
  `cpu_stats_per_second`, the recorded rate of each of its counters (nanoseconds of CPU time a
  second), getMemoryStats(ALL_CELLS), and the free pages of every page size (KiB) of the capabilities'
  host CPU in every NUMA cell of their topology (one getFreePages(sizes, cell, 1) per cell; no
  cell where the topology has none; a cell the driver answered nothing for, as libvirt's test
  driver does, is left out of a replayed answer as the driver left it out);
- `domains`: listAllDomains(0) and getAllDomainStats(VIR_DOMAIN_STATS_STATE, 0) as UUIDs in
  libvirt's order, and per domain its name, info(), XMLDesc(0) and blockInfo of each local
  disk target; `vcpu_stats`, the running domains' vCPU statistics (VCPU_STATS), where the
  audit reads them (not on libvirt's test driver, nor in captures older than it: then absent,
  and a replay reports no vCPU wait), with `vcpu_stats_per_second`, per domain the recorded rate
  of its vCPUs' counters (`vcpu.<n>.time`, `.wait` and `.delay`: nanoseconds a second);
- `storage_pools`: listAllStoragePools(0) and (VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE) as names,
  per pool its XMLDesc(0), info() and volumes (name, path(), info()), and the error
  storagePoolLookupByName gave for a name the host does not have (`missing`), which a lookup of
  any unknown name raises with that name;
- `node_devices`: listAllDevices(0), each device's name and XMLDesc(0); listings by capability
  (PCI devices, devices offering mediated device types, mediated devices) are answered from it,
  filtered as libvirt filters them. The mediated devices and their GPUs' available instances are
  those of the moment of capture, at every audit.

**Recorded rates.** `virtcap capture` reads the CPU time counters and the vCPU statistics twice,
a short interval apart (`--rate-interval`), and records the second reading with each counter's
rate between the two. A replay advances the counters that have a recorded rate with the wall
clock: each answer is the recorded value plus its rate times the seconds since this process
started replaying (ELAPSED), so the audit reads busy host CPUs and vCPU wait from a replay through
the same calls, getCPUStats and getAllDomainStats, as from the live host. A counter without a
rate stays at its captured value: a capture without rates (version 1, or taken with
`--rate-interval 0`) gives no busy CPUs (the audit knows its frozen CPU times tell no rate,
FROZEN_CPU_TIMES) and a vCPU wait that stays at 0.

**Not replayed**: anything else, such as other flags or statistics groups, one CPU's or cell's
statistics, an uncaptured disk or cell, raises libvirtError (VIR_ERR_ARGUMENT_UNSUPPORTED or
VIR_ERR_INVALID_ARG) saying it is not in the capture. The rest of the host is frozen at its
capture. Events: registering callbacks
succeeds and none ever fires; keepalive is not supported (nothing to keep alive), close() returns
0. What the audit reads outside libvirt for a local URI (/proc/meminfo, a disk path's statvfs)
is not in the capture: a replay URI is never local, so the audit reads libvirt's node memory
statistics and asks for a storage pool instead of a path.

A malformed or unreadable file is a CaptureFileError of one line, `file: what was wrong`.
"""

# ruff: noqa: N802 - the methods bear libvirt's own names

from __future__ import annotations

import itertools
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, Generic, Literal, Self, TypeVar

import libvirt
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

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
from virtcap.config.errors import clip, explain_validation_error
from virtcap.units import brief_repr, format_bytes

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
    "REPLAY_SCHEME",
    "VCPU_STATS",
    "VERSION",
    "Answer",
    "CaptureDocument",
    "CaptureFileError",
    "CellPages",
    "Domain",
    "DomainRates",
    "DomainStats",
    "Domains",
    "Failure",
    "FreePages",
    "MissingPool",
    "Node",
    "NodeDevice",
    "PageCount",
    "ReplayConnection",
    "ReplayDomain",
    "ReplayNodeDevice",
    "ReplayStoragePool",
    "ReplayStorageVol",
    "Source",
    "StoragePool",
    "StoragePools",
    "Volume",
    "ask",
    "counter_rates",
    "decode_capture",
    "encode_capture",
    "frozen_cpu_times",
    "is_replay_uri",
    "libvirt_error",
    "load_capture",
    "open_replay",
    "replay_path",
    "seconds_replayed",
    "vcpu_counter",
]

VCPU_STATS: Final = (
    libvirt.VIR_DOMAIN_STATS_VCPU,
    libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE | libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT,
)
"""The vCPU statistics the audit reads, as getAllDomainStats' groups and flags: those of running
domains only (others have none), without waiting for a domain busy with a job (a migration, a
snapshot): the delays come from /proc, which needs no job."""

FORMAT: Final = "virtcap-capture"
VERSION: Final = 2
"""What `virtcap capture` writes: version 1 and the recorded rates (`*_per_second`)."""
READABLE_VERSIONS: Final = (1, 2)
REPLAY_SCHEME = "replay"
_PREFIX = f"{REPLAY_SCHEME}://"
MAX_FILE_BYTES = 256 * 1024**2
"""The largest capture file read (and written: virtcap.audit.capture bounds below it)."""

_T = TypeVar("_T")

_VCPU_COUNTER = re.compile(r"vcpu\.\d+\.(?:time|wait|delay)")
_STARTED = time.monotonic()


def vcpu_counter(key: str) -> bool:
    """Whether a vCPU statistic (VCPU_STATS) is a counter: `vcpu.<n>.time`, `.wait` or `.delay`,
    nanoseconds since the vCPU's QEMU process started. The others are states and counts."""
    return _VCPU_COUNTER.fullmatch(key) is not None


def seconds_replayed() -> float:
    """ELAPSED: the seconds since this process started replaying (since it loaded this module),
    by the monotonic clock. One clock for every replay connection: the audit opens a replay afresh
    for every audit, and its counters go on from where the last one left them."""
    return time.monotonic() - _STARTED


def counter_rates(
    before: dict[str, TypedParameter],
    after: dict[str, TypedParameter],
    seconds: float,
    counter: Callable[[str], bool],
) -> dict[str, int]:
    """Per counter read in both samples `seconds` apart, its increase a second (rounded to a whole
    nanosecond); none for one that went back (its domain restarted in between)."""
    rates = {}
    for key, value in after.items():
        first = before.get(key)
        if not counter(key) or type(value) is not int or type(first) is not int or value < first:
            continue
        rates[key] = round((value - first) / seconds)
    return rates


class CaptureFileError(Exception):
    """A capture file that cannot be replayed, in one line: `file: what was wrong`."""


# The document.


class _Record(BaseModel):
    """Strict: a capture is written by virtcap, and anything it did not write is a mistake."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Failure(_Record):
    """A libvirtError as libvirt raised it: the fields of its `err`, virGetLastError's record."""

    code: int
    domain: int
    message: str
    level: int
    str1: str | None = None
    str2: str | None = None
    str3: str | None = None
    int1: int
    int2: int

    @classmethod
    def of(cls, error: Any) -> Failure:
        """From a libvirt.libvirtError. One raised by libvirt-python itself without libvirt's
        record (rare) is kept as an internal error with its text."""
        err = error.err
        if err is None:
            return cls(
                code=libvirt.VIR_ERR_INTERNAL_ERROR,
                domain=libvirt.VIR_FROM_NONE,
                message=str(error),
                level=libvirt.VIR_ERR_ERROR,
                int1=-1,
                int2=-1,
            )
        code, domain, message, level, str1, str2, str3, int1, int2 = err
        return cls(
            code=code,
            domain=domain,
            message=message or "",
            level=level,
            str1=str1,
            str2=str2,
            str3=str3,
            int1=int1,
            int2=int2,
        )

    def raised(self) -> Any:
        """The libvirt.libvirtError to raise."""
        return libvirt_error(self.code, self.message, **self.model_dump(exclude={"code", "message"}))


class Answer(_Record, Generic[_T]):
    """One call's outcome: what it returned, or the error it raised."""

    value: _T | None = None
    error: Failure | None = None

    @model_validator(mode="after")
    def _one_outcome(self) -> Self:
        if (self.value is None) == (self.error is None):
            raise ValueError("expected either 'value' or 'error'")
        return self

    def get(self) -> _T:
        """The value, or the captured error raised."""
        if self.error is not None:
            raise self.error.raised()
        assert self.value is not None
        return self.value


def ask(kind: type[Answer[_T]], call: Callable[[], _T]) -> Answer[_T]:
    """`call()`'s outcome, its libvirtError kept as the answer."""
    try:
        return kind(value=call())
    except libvirt.libvirtError as error:
        return kind(error=Failure.of(error))


class Source(_Record):
    uri: str
    """The URI captured, without its password."""
    captured_at: str
    """ISO 8601, UTC."""
    virtcap_version: str
    rate_interval_seconds: float | None = None
    """How far apart the two samples of the recorded rates were; None: no rates recorded."""


class PageCount(_Record):
    size_kib: int
    free: int


class CellPages(_Record):
    cell: int
    pages: Answer[list[PageCount]]
    """getFreePages(sizes, cell, 1)."""


class FreePages(_Record):
    page_sizes_kib: list[int]
    """The host CPU's page sizes (capabilities' host/cpu/pages), each asked in every cell."""
    cells: list[CellPages]
    """One per NUMA cell of the capabilities' topology; none where it has no cell."""


class Node(_Record):
    type: str
    version: int
    lib_version: int
    info: NodeInfo
    hostname: Answer[str]
    cpu_map: Answer[CPUMap]
    capabilities: Answer[str]
    cpu_stats: Answer[dict[str, int]]
    """getCPUStats(VIR_NODE_CPU_STATS_ALL_CPUS)."""
    cpu_stats_per_second: dict[str, int] | None = None
    """The recorded rate of each counter of `cpu_stats`, nanoseconds a second; None: not recorded."""
    memory_stats: Answer[dict[str, int]]
    """getMemoryStats(VIR_NODE_MEMORY_STATS_ALL_CELLS)."""
    free_pages: FreePages


class DomainStats(_Record):
    uuid: str
    stats: dict[str, TypedParameter]


class DomainRates(_Record):
    uuid: str
    per_second: dict[str, int]
    """The recorded rate of each vCPU counter (vcpu_counter) of the domain, nanoseconds a second."""


class Domain(_Record):
    uuid: str
    name: str
    info: Answer[DomainInfo]
    xml: Answer[str]
    """XMLDesc(0): the live definition of a running domain, else the persistent one."""
    block_info: dict[str, Answer[BlockInfo]]
    """blockInfo of each local disk, by target."""


class Domains(_Record):
    listed: Answer[list[str]]
    """listAllDomains(0), as UUIDs."""
    state_stats: Answer[list[DomainStats]]
    """getAllDomainStats(VIR_DOMAIN_STATS_STATE, 0)."""
    vcpu_stats: Answer[list[DomainStats]] | None = None
    """getAllDomainStats(*VCPU_STATS); None where not captured."""
    vcpu_stats_per_second: list[DomainRates] | None = None
    """The recorded rates of `vcpu_stats`' counters, of the domains they were recorded for."""
    definitions: list[Domain]
    """Every domain either call named, once."""


class Volume(_Record):
    name: str
    path: Answer[str]
    info: Answer[StorageVolInfo]


class StoragePool(_Record):
    name: str
    xml: Answer[str]
    info: Answer[StoragePoolInfo]
    volumes: Answer[list[Volume]]
    """listAllVolumes(0)."""


class MissingPool(_Record):
    """What storagePoolLookupByName(name) raised for a name the host has no pool by."""

    name: str
    error: Failure


class StoragePools(_Record):
    listed: Answer[list[str]]
    """listAllStoragePools(0), as names."""
    active: Answer[list[str]]
    """listAllStoragePools(VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE), as names."""
    pools: list[StoragePool]
    """Every pool either listing named, once."""
    missing: MissingPool | None = None


class NodeDevice(_Record):
    name: str
    xml: Answer[str]


class CaptureDocument(_Record):
    """One hypervisor as the audit reads it (see the module's description)."""

    format: Literal["virtcap-capture"]
    version: Literal[1, 2]
    source: Source
    node: Node
    domains: Domains
    storage_pools: StoragePools
    node_devices: Answer[list[NodeDevice]]

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Every UUID and pool name a listing gives is described, once."""
        domains = _unique((d.uuid for d in self.domains.definitions), "domains.definitions", "UUID")
        listed = self.domains.listed.value or []
        stats = [s.uuid for s in self.domains.state_stats.value or []]
        vcpus = [s.uuid for s in (self.domains.vcpu_stats and self.domains.vcpu_stats.value) or []]
        rated = _unique(
            (r.uuid for r in self.domains.vcpu_stats_per_second or []),
            "domains.vcpu_stats_per_second",
            "UUID",
        )
        _all_known(listed, domains, "domains.listed", "domains.definitions")
        _all_known(stats, domains, "domains.state_stats", "domains.definitions")
        _all_known(vcpus, domains, "domains.vcpu_stats", "domains.definitions")
        _all_known(rated, set(vcpus), "domains.vcpu_stats_per_second", "domains.vcpu_stats")
        pools = _unique((p.name for p in self.storage_pools.pools), "storage_pools.pools", "name")
        for key in ("listed", "active"):
            answer: Answer[list[str]] = getattr(self.storage_pools, key)
            _all_known(answer.value or [], pools, f"storage_pools.{key}", "storage_pools.pools")
        return self


def _unique(keys: Iterable[str], where: str, what: str) -> set[str]:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise ValueError(f"{where}: {what} {brief_repr(key)} appears twice")
        seen.add(key)
    return seen


def _all_known(keys: Iterable[str], known: set[str], where: str, table: str) -> None:
    for key in keys:
        if key not in known:
            raise ValueError(f"{where}: {brief_repr(key)} is not in {table}")


class _Header(BaseModel):
    """The two keys read first, so that another format or version is told as such."""

    format: object = None
    version: object = None


def encode_capture(document: CaptureDocument) -> bytes:
    """The document as written: UTF-8 JSON, one key a line, the keys in the schema's order; reading
    it back and encoding it again gives the same bytes."""
    return document.model_dump_json(indent=1, exclude_none=True).encode() + b"\n"


def decode_capture(data: bytes, source: str) -> CaptureDocument:
    """The document in `data`, or CaptureFileError `source: what was wrong` in one line."""
    try:
        header = _Header.model_validate_json(data)
        if header.format != FORMAT:
            raise CaptureFileError(
                f"{source}: not a virtcap capture: 'format' is {brief_repr(header.format)}, "
                f"expected {FORMAT!r}"
            )
        if type(header.version) is not int or header.version not in READABLE_VERSIONS:
            readable = " and ".join(str(version) for version in READABLE_VERSIONS)
            raise CaptureFileError(
                f"{source}: capture version {brief_repr(header.version)} is not supported; "
                f"this virtcap reads versions {readable}"
            )
        return CaptureDocument.model_validate_json(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        if first["type"] == "json_invalid":  # where in the file is in the message
            raise CaptureFileError(f"{source}: {clip(first['msg'])}") from None
        problems = explain_validation_error(error, source, CaptureDocument).splitlines()
        more = error.error_count() - 1
        raise CaptureFileError(problems[0] + (f" (and {more} more problems)" if more > 0 else "")) from None


def load_capture(path: Path | str, max_bytes: int = MAX_FILE_BYTES) -> CaptureDocument:
    """The capture in `path`, reading at most `max_bytes` + 1 bytes of it; CaptureFileError in one
    line otherwise."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(max_bytes + 1)
    except OSError as error:
        raise CaptureFileError(f"{path}: cannot read: {clip(error.strerror or str(error))}") from None
    if len(data) > max_bytes:
        raise CaptureFileError(f"{path}: larger than the maximum capture size of {format_bytes(max_bytes)}")
    return decode_capture(data, str(path))


# The URI.


def is_replay_uri(uri: str) -> bool:
    return uri.startswith(f"{REPLAY_SCHEME}:")


def replay_path(uri: str) -> Path:
    """The capture file a replay URI names; ValueError unless it is `replay:///absolute/path`."""
    path = uri[len(_PREFIX) :] if uri.startswith(_PREFIX) else ""
    if not path.startswith("/") or "\x00" in path:
        raise ValueError(
            f"{brief_repr(uri)}: expected the capture file's absolute path, as in replay:///path/host.json"
        )
    return Path(path)


def open_replay(uri: str) -> ReplayConnection:
    """A connection replaying the capture `uri` names; ValueError for a URI of another shape,
    CaptureFileError for a file that cannot be replayed."""
    return ReplayConnection(load_capture(replay_path(uri)))


# Errors.


def libvirt_error(
    code: int,
    message: str,
    *,
    domain: int = libvirt.VIR_FROM_NONE,
    level: int = libvirt.VIR_ERR_ERROR,
    str1: str | None = None,
    str2: str | None = None,
    str3: str | None = None,
    int1: int = -1,
    int2: int = -1,
) -> Any:
    """A libvirt.libvirtError whose get_error_code(), get_error_message()... answer these."""
    error = libvirt.libvirtError(message)
    # Its constructor takes whatever error this thread last had from libvirt: replaced whole.
    error.args = (message,)
    error.err = (code, domain, message, level, str1, str2, str3, int1, int2)
    return error


def _not_captured(what: str, code: int = libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED) -> Any:
    return libvirt_error(code, f"not in the capture: {what}")


# The objects.

_LISTED_CAPABILITIES: Final = {
    libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV: "pci",
    libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES: "mdev_types",
    libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV: "mdev",
}
"""The listAllDevices filters replayed, each answered from listAllDevices(0) as libvirt filters."""


def frozen_cpu_times(conn: VirConnect) -> bool:
    """FROZEN_CPU_TIMES: whether `conn` replays CPU time counters without a recorded rate, which
    never move: two readings of them tell no busy time (unknown, not 0)."""
    return isinstance(conn, ReplayConnection) and conn.document.node.cpu_stats_per_second is None


class ReplayConnection:
    """A VirConnect answering from a capture. Like libvirt, every listing or lookup gives new
    objects; none of them changes anything. The counters with a recorded rate advance with
    `elapsed()`, the seconds replayed (ELAPSED, the tests give their own)."""

    def __init__(self, document: CaptureDocument, elapsed: Callable[[], float] = seconds_replayed) -> None:
        self.document = document
        self._elapsed = elapsed
        vcpu_rates = document.domains.vcpu_stats_per_second or []
        self._vcpu_rates = {entry.uuid: entry.per_second for entry in vcpu_rates}
        self._domains = {d.uuid: d for d in document.domains.definitions}
        self._pools = {p.name: p for p in document.storage_pools.pools}
        self._cells = {c.cell: c for c in document.node.free_pages.cells}
        self._callback_ids = itertools.count(1)
        self._callbacks: set[int] = set()

    def getType(self) -> str:
        return self.document.node.type

    def getVersion(self) -> int:
        return self.document.node.version

    def getLibVersion(self) -> int:
        return self.document.node.lib_version

    def getHostname(self) -> str:
        return self.document.node.hostname.get()

    def getCapabilities(self) -> str:
        return self.document.node.capabilities.get()

    def getInfo(self) -> NodeInfo:
        return self.document.node.info

    def getCPUMap(self) -> CPUMap:
        count, online, online_count = self.document.node.cpu_map.get()
        return count, list(online), online_count

    def getCPUStats(self, cpu_num: int, /) -> dict[str, int]:
        if cpu_num != libvirt.VIR_NODE_CPU_STATS_ALL_CPUS:
            raise _not_captured(f"the CPU statistics of CPU {cpu_num}", libvirt.VIR_ERR_INVALID_ARG)
        return _advanced(
            self.document.node.cpu_stats.get(), self.document.node.cpu_stats_per_second, self._elapsed
        )

    def getMemoryStats(self, cell_num: int, /) -> dict[str, int]:
        if cell_num != libvirt.VIR_NODE_MEMORY_STATS_ALL_CELLS:
            raise _not_captured(f"the memory statistics of NUMA cell {cell_num}", libvirt.VIR_ERR_INVALID_ARG)
        return dict(self.document.node.memory_stats.get())

    def getFreePages(
        self, pages: list[int], start_cell: int, cell_count: int, /
    ) -> dict[int, dict[int, int]]:
        free: dict[int, dict[int, int]] = {}
        for cell in range(start_cell, start_cell + cell_count):
            record = self._cells.get(cell)
            if record is None:
                raise _not_captured(f"the free pages of NUMA cell {cell}", libvirt.VIR_ERR_INVALID_ARG)
            counts = {page.size_kib: page.free for page in record.pages.get()}
            if not counts:
                continue  # the driver answered nothing for this cell (libvirt's test driver)
            for size in pages:
                if size not in counts:
                    raise _not_captured(
                        f"free {size} KiB pages of NUMA cell {cell}", libvirt.VIR_ERR_INVALID_ARG
                    )
            free[cell] = {size: counts[size] for size in pages}
        return free

    def listAllDomains(self, flags: int, /) -> list[VirDomain]:
        if flags != 0:
            raise _not_captured(f"listAllDomains with flags {flags}")
        return [ReplayDomain(self._domains[uuid]) for uuid in self.document.domains.listed.get()]

    def getAllDomainStats(
        self, stats: int, flags: int, /
    ) -> list[tuple[VirDomain, dict[str, TypedParameter]]]:
        captured = {
            (libvirt.VIR_DOMAIN_STATS_STATE, 0): self.document.domains.state_stats,
            VCPU_STATS: self.document.domains.vcpu_stats,
        }.get((stats, flags))
        if captured is None:
            raise _not_captured(f"getAllDomainStats of groups {stats} with flags {flags}")
        return [
            (
                ReplayDomain(self._domains[entry.uuid]),
                _advanced(entry.stats, self._vcpu_rates.get(entry.uuid), self._elapsed),
            )
            for entry in captured.get()
        ]

    def listAllStoragePools(self, flags: int, /) -> list[VirStoragePool]:
        listings = {0: "listed", libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE: "active"}
        if flags not in listings:
            raise _not_captured(f"listAllStoragePools with flags {flags}")
        answer: Answer[list[str]] = getattr(self.document.storage_pools, listings[flags])
        return [ReplayStoragePool(self._pools[name]) for name in answer.get()]

    def storagePoolLookupByName(self, name: str, /) -> VirStoragePool:
        pool = self._pools.get(name)
        if pool is not None:
            return ReplayStoragePool(pool)
        missing = self.document.storage_pools.missing
        if missing is None:
            raise libvirt_error(
                libvirt.VIR_ERR_NO_STORAGE_POOL,
                f"Storage pool not found: no storage pool with matching name '{name}'",
                domain=libvirt.VIR_FROM_STORAGE,
            )
        fields = missing.error.model_dump()
        for key in ("message", "str1", "str2", "str3"):
            if fields[key] is not None:
                fields[key] = fields[key].replace(missing.name, name)
        raise libvirt_error(**fields)

    def listAllDevices(self, flags: int, /) -> list[VirNodeDevice]:
        devices = [ReplayNodeDevice(device) for device in self.document.node_devices.get()]
        if flags != 0:
            capability = _LISTED_CAPABILITIES.get(flags)
            if capability is None:
                raise _not_captured(f"listAllDevices with flags {flags}")
            devices = [device for device in devices if device.has_capability(capability)]
        return list[VirNodeDevice](devices)

    def setKeepAlive(self, interval: int, count: int, /) -> int:
        """Nothing to keep alive: as libvirt's in-process test driver, not supported."""
        raise libvirt_error(
            libvirt.VIR_ERR_NO_SUPPORT, "this function is not supported by the connection driver: replay"
        )

    def registerCloseCallback(self, cb: Callable[[VirConnect, int, _T], None], opaque: _T, /) -> int:
        return 0  # a capture never closes: the callback is never called, and not kept

    def unregisterCloseCallback(self) -> None:
        return None

    def domainEventRegisterAny(
        self, dom: VirDomain | None, event_id: int, cb: Callable[..., None], opaque: _T, /
    ) -> int:
        callback_id = next(self._callback_ids)
        self._callbacks.add(callback_id)  # nothing ever fires: the callback itself is not kept
        return callback_id

    def domainEventDeregisterAny(self, callback_id: int, /) -> None:
        if callback_id not in self._callbacks:
            detail = f"could not find event callback {callback_id} for deletion"  # libvirt's words
            raise libvirt_error(
                libvirt.VIR_ERR_INVALID_ARG,
                f"invalid argument: {detail}",
                str1="invalid argument: %s",
                str2=detail,
            )
        self._callbacks.discard(callback_id)

    def storagePoolEventRegisterAny(
        self, pool: VirStoragePool | None, event_id: int, cb: Callable[..., None], opaque: _T, /
    ) -> int:
        """A capture's pools never change: as a driver without storage pool events."""
        raise libvirt_error(
            libvirt.VIR_ERR_NO_SUPPORT, "this function is not supported by the connection driver: replay"
        )

    def storagePoolEventDeregisterAny(self, callback_id: int, /) -> None:
        detail = f"could not find event callback {callback_id} for deletion"  # libvirt's words
        raise libvirt_error(
            libvirt.VIR_ERR_INVALID_ARG,
            f"invalid argument: {detail}",
            str1="invalid argument: %s",
            str2=detail,
        )

    def close(self) -> int:
        return 0


_V = TypeVar("_V", int, TypedParameter)


def _advanced(
    values: dict[str, _V], rates: dict[str, int] | None, elapsed: Callable[[], float]
) -> dict[str, _V]:
    """The values, each counter with a rate advanced by it over the seconds replayed."""
    answer = dict(values)
    if rates:
        seconds = elapsed()
        for key, rate in rates.items():
            value = answer.get(key)
            if type(value) is int:
                answer[key] = value + round(rate * seconds)
    return answer


class ReplayDomain:
    def __init__(self, record: Domain) -> None:
        self._record = record

    def name(self) -> str:
        return self._record.name

    def UUIDString(self) -> str:
        return self._record.uuid

    def info(self) -> DomainInfo:
        return self._record.info.get()

    def XMLDesc(self, flags: int, /) -> str:
        if flags != 0:
            raise _not_captured(f"the XML of domain {self._record.name} with flags {flags}")
        return self._record.xml.get()

    def blockInfo(self, disk: str, /) -> BlockInfo:
        answer = self._record.block_info.get(disk)
        if answer is None:
            raise _not_captured(
                f"the block info of disk {disk!r} of domain {self._record.name}", libvirt.VIR_ERR_INVALID_ARG
            )
        return answer.get()


class ReplayStoragePool:
    def __init__(self, record: StoragePool) -> None:
        self._record = record

    def name(self) -> str:
        return self._record.name

    def info(self) -> StoragePoolInfo:
        return self._record.info.get()

    def XMLDesc(self, flags: int, /) -> str:
        if flags != 0:
            raise _not_captured(f"the XML of storage pool {self._record.name} with flags {flags}")
        return self._record.xml.get()

    def listAllVolumes(self, flags: int, /) -> list[VirStorageVol]:
        if flags != 0:
            raise _not_captured(f"listAllVolumes with flags {flags}")
        return [ReplayStorageVol(volume) for volume in self._record.volumes.get()]


class ReplayStorageVol:
    def __init__(self, record: Volume) -> None:
        self._record = record

    def name(self) -> str:
        return self._record.name

    def path(self) -> str:
        return self._record.path.get()

    def info(self) -> StorageVolInfo:
        return self._record.info.get()


_NESTED_CAPABILITIES: Final = frozenset({"mdev_types"})


class ReplayNodeDevice:
    def __init__(self, record: NodeDevice) -> None:
        self._record = record

    def name(self) -> str:
        return self._record.name

    def XMLDesc(self, flags: int, /) -> str:
        if flags != 0:
            raise _not_captured(f"the XML of node device {self._record.name} with flags {flags}")
        return self._record.xml.get()

    def has_capability(self, kind: str) -> bool:
        """Whether the device has a capability of this type, as libvirt filters listings: a top-level
        one, or for `mdev_types` one within the device's own (a GPU's PCI capability holds it).
        One whose XML was captured as an error, or does not parse, is listed: its reader then
        meets the error, as it would have on the live host."""
        try:
            root = ET.fromstring(self._record.xml.get())
        except (libvirt.libvirtError, ET.ParseError):
            return True
        if kind in _NESTED_CAPABILITIES:  # a PCI device's (or channel's) own capability counts
            found = root.iterfind("capability/capability")
            if any(capability.get("type") == kind for capability in found):
                return True
        return any(capability.get("type") == kind for capability in root.iterfind("capability"))
