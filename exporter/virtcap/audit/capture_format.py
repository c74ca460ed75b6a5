"""The capture file: one hypervisor as the audit reads it, in one JSON document that `virtcap
capture` (virtcap.audit.capture) writes and a replay (virtcap.audit.replay) answers from.

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
rate between the two (`*_per_second`, counter_rates); a replay advances the counters at those
rates. A capture without rates (version 1, or taken with `--rate-interval 0`) has none.

A malformed or unreadable file is a CaptureFileError of one line, `file: what was wrong`.
"""

from __future__ import annotations

import re
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
)
from virtcap.config.errors import clip, explain_validation_error
from virtcap.units import brief_repr, format_bytes

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
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
    "Source",
    "StoragePool",
    "StoragePools",
    "Volume",
    "ask",
    "counter_rates",
    "decode_capture",
    "encode_capture",
    "libvirt_error",
    "load_capture",
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
MAX_FILE_BYTES = 256 * 1024**2
"""The largest capture file read (and written: virtcap.audit.capture bounds below it)."""

_T = TypeVar("_T")

_VCPU_COUNTER = re.compile(r"vcpu\.\d+\.(?:time|wait|delay)")


def vcpu_counter(key: str) -> bool:
    """Whether a vCPU statistic (VCPU_STATS) is a counter: `vcpu.<n>.time`, `.wait` or `.delay`,
    nanoseconds since the vCPU's QEMU process started. The others are states and counts."""
    return _VCPU_COUNTER.fullmatch(key) is not None


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
