"""A captured hypervisor played back: libvirt's answers from a capture file, through the same audit.

`virtcap capture` (virtcap.audit.capture) records what the audit reads from a hypervisor into one
JSON document (virtcap.audit.capture_format); a replay connection answers the calls of
virtcap.audit.libvirt_api from it, so the audit, the model and the exposition run unchanged on a
host that is not there: hosts of any shape in tests, the demo and benchmarks, and what-if audits of
captured hosts for operators.

**The URI.** `replay:///absolute/path/host.json` names a capture file: everything after
`replay://` is the file's absolute path, taken as is (no host, no query, no percent-decoding).
`open_read_only` (virtcap.audit.connection) dispatches on the scheme, so a replay URI goes
wherever a libvirt URI does: the configuration's `hypervisors`, `virtcap capture --uri`.

**Recorded rates.** A replay advances the counters that have a recorded rate (the document's
`*_per_second`) with the wall clock: each answer is the recorded value plus its rate times the
seconds since this process started replaying (ELAPSED), so the audit reads busy host CPUs and vCPU
wait from a replay through the same calls, getCPUStats and getAllDomainStats, as from the live
host. A counter without a rate stays at its captured value: a capture without rates (version 1, or
taken with `--rate-interval 0`) gives no busy CPUs (the audit knows its frozen CPU times tell no
rate, FROZEN_CPU_TIMES) and a vCPU wait that stays at 0.

**Not replayed**: anything else, such as other flags or statistics groups, one CPU's or cell's
statistics, an uncaptured disk or cell, raises libvirtError (VIR_ERR_ARGUMENT_UNSUPPORTED or
VIR_ERR_INVALID_ARG) saying it is not in the capture. The rest of the host is frozen at its
capture. Events: registering callbacks
succeeds and none ever fires; keepalive is not supported (nothing to keep alive), close() returns
0. What the audit reads outside libvirt for a local URI (/proc/meminfo, a disk path's statvfs)
is not in the capture: a replay URI is never local, so the audit reads libvirt's node memory
statistics and asks for a storage pool instead of a path.

A malformed or unreadable file is a CaptureFileError (virtcap.audit.capture_format).
"""

# ruff: noqa: N802 - the methods bear libvirt's own names

from __future__ import annotations

import itertools
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import libvirt

from virtcap.audit.capture_format import (
    VCPU_STATS,
    Answer,
    CaptureDocument,
    Domain,
    NodeDevice,
    StoragePool,
    Volume,
    libvirt_error,
    load_capture,
)
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
from virtcap.units import brief_repr

__all__ = [
    "REPLAY_SCHEME",
    "ReplayConnection",
    "ReplayDomain",
    "ReplayNodeDevice",
    "ReplayStoragePool",
    "ReplayStorageVol",
    "frozen_cpu_times",
    "is_replay_uri",
    "open_replay",
    "replay_path",
    "seconds_replayed",
]

REPLAY_SCHEME = "replay"
_PREFIX = f"{REPLAY_SCHEME}://"

_T = TypeVar("_T")

_STARTED = time.monotonic()


def seconds_replayed() -> float:
    """ELAPSED: the seconds since this process started replaying (since it loaded this module),
    by the monotonic clock. One clock for every replay connection: the audit opens a replay afresh
    for every audit, and its counters go on from where the last one left them."""
    return time.monotonic() - _STARTED


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
