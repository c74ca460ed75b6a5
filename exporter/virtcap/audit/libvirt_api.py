"""The part of libvirt-python's API that virtcap calls, as typing protocols.

libvirt-python ships no type information: without these, every connection, domain and storage
object would be `Any` and no call on them checked. The protocols are for typing only. The objects
still come from libvirt (`libvirt.openReadOnly`), cast once where they enter
(`virtcap.audit.connection.open_read_only`); whatever they return is typed from there on. A
replay of a capture (virtcap.audit.replay) implements them from a file.

Each method is declared as the project calls it, no wider: optional arguments that it never
passes are left out, and its arguments are positional-only, as every call passes them. The types
are those libvirt documents. libvirt-python returns its fixed records (virNodeInfo,
virDomainInfo...) as lists; they are typed here as fixed-length tuples, so that each field keeps
its own type where the code unpacks or indexes them.

Calls block for as long as the daemon does: they run in worker threads, never on the event loop.
"""

# ruff: noqa: N802 - the methods bear libvirt's own names

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

_T = TypeVar("_T")

NodeInfo = tuple[str, int, int, int, int, int, int, int]
"""virNodeGetInfo: CPU model, memory in MiB, active CPUs, MHz, NUMA nodes, sockets per node,
cores per socket, threads per core."""

CPUMap = tuple[int, list[bool], int]
"""virNodeGetCPUMap: the number of host CPUs, whether each is online, how many are."""

DomainInfo = tuple[int, int, int, int, int]
"""virDomainGetInfo: state (virDomainState), maximum memory in KiB, memory in KiB, vCPUs, CPU
time in nanoseconds."""

BlockInfo = tuple[int, int, int]
"""virDomainGetBlockInfo: capacity, allocation and physical size in bytes."""

StoragePoolInfo = tuple[int, int, int, int]
"""virStoragePoolGetInfo: state (virStoragePoolState), capacity, allocation and available bytes."""

StorageVolInfo = tuple[int, int, int]
"""virStorageVolGetInfo: type (virStorageVolType), capacity and allocation in bytes."""

TypedParameter = int | float | bool | str
"""A virTypedParameter's value, as libvirt-python converts it."""


class VirConnect(Protocol):
    """A connection to a hypervisor (virConnectPtr)."""

    def getType(self) -> str: ...

    def getVersion(self) -> int:
        """The hypervisor's version, encoded as major * 1,000,000 + minor * 1,000 + release."""

    def getLibVersion(self) -> int:
        """The daemon's libvirt version, encoded as getVersion's."""

    def getHostname(self) -> str: ...

    def getCapabilities(self) -> str:
        """The capabilities XML."""

    def getInfo(self) -> NodeInfo: ...

    def getCPUMap(self) -> CPUMap: ...

    def getCPUStats(self, cpu_num: int, /) -> dict[str, int]:
        """Cumulative CPU times in nanoseconds (kernel, user, idle, iowait...) of one CPU, or of
        all with VIR_NODE_CPU_STATS_ALL_CPUS."""

    def getMemoryStats(self, cell_num: int, /) -> dict[str, int]:
        """Memory figures in KiB (total, free, buffers, cached) of one NUMA cell, or of all with
        VIR_NODE_MEMORY_STATS_ALL_CELLS."""

    def getFreePages(
        self, pages: list[int], start_cell: int, cell_count: int, /
    ) -> dict[int, dict[int, int]]:
        """Free pages of each size in `pages` (KiB) in the `cell_count` NUMA cells from
        `start_cell`: cell -> page size -> free pages."""

    def listAllDevices(self, flags: int, /) -> list[VirNodeDevice]:
        """The host's node devices (PCI functions, mediated device parents, USB, network...)."""

    def listAllDomains(self, flags: int, /) -> list[VirDomain]: ...

    def getAllDomainStats(
        self, stats: int, flags: int, /
    ) -> list[tuple[VirDomain, dict[str, TypedParameter]]]:
        """The statistics groups in `stats` (VIR_DOMAIN_STATS_...) of every domain."""

    def listAllStoragePools(self, flags: int, /) -> list[VirStoragePool]: ...

    def storagePoolLookupByName(self, name: str, /) -> VirStoragePool: ...

    def setKeepAlive(self, interval: int, count: int, /) -> int:
        """Probe the daemon every `interval` seconds; after `count` unanswered probes the
        connection closes. 0 as interval turns keepalive off."""

    def registerCloseCallback(self, cb: Callable[[VirConnect, int, _T], None], opaque: _T, /) -> int:
        """`cb(connection, reason, opaque)` runs on libvirt's event thread when the connection
        closes; the reason is a virConnectCloseReason."""

    def unregisterCloseCallback(self) -> None: ...

    def domainEventRegisterAny(
        self, dom: VirDomain | None, event_id: int, cb: Callable[..., None], opaque: _T, /
    ) -> int:
        """Run `cb` on libvirt's event thread for each event `event_id` (VIR_DOMAIN_EVENT_ID_...)
        of `dom`, or of every domain with None; the callback's id, to deregister it. Its arguments
        depend on the event: (connection, domain, event, detail, opaque) for a lifecycle event."""

    def domainEventDeregisterAny(self, callback_id: int, /) -> None: ...

    def storagePoolEventRegisterAny(
        self, pool: VirStoragePool | None, event_id: int, cb: Callable[..., None], opaque: _T, /
    ) -> int:
        """Run `cb` on libvirt's event thread for each event `event_id`
        (VIR_STORAGE_POOL_EVENT_ID_...) of `pool`, or of every pool with None: (connection, pool,
        ..., opaque); the callback's id, to deregister it."""

    def storagePoolEventDeregisterAny(self, callback_id: int, /) -> None: ...

    def close(self) -> int:
        """The number of references to the connection that remain, or -1 on failure."""


class VirDomain(Protocol):
    """A domain (virDomainPtr)."""

    def name(self) -> str: ...

    def UUIDString(self) -> str: ...

    def info(self) -> DomainInfo: ...

    def XMLDesc(self, flags: int, /) -> str:
        """The domain's XML definition, live where it runs."""

    def blockInfo(self, disk: str, /) -> BlockInfo:
        """The sizes of one disk, named by its target (vda) or its source path."""


class VirStoragePool(Protocol):
    """A storage pool (virStoragePoolPtr)."""

    def name(self) -> str: ...

    def info(self) -> StoragePoolInfo: ...

    def XMLDesc(self, flags: int, /) -> str: ...

    def listAllVolumes(self, flags: int, /) -> list[VirStorageVol]: ...


class VirStorageVol(Protocol):
    """A storage volume (virStorageVolPtr)."""

    def name(self) -> str: ...

    def path(self) -> str: ...

    def info(self) -> StorageVolInfo: ...


class VirNodeDevice(Protocol):
    """A node device (virNodeDevicePtr)."""

    def name(self) -> str: ...

    def XMLDesc(self, flags: int, /) -> str:
        """The device's XML: its parent and capabilities (pci, mdev_types, ...)."""
