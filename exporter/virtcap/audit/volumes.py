"""The storage volumes an audit looks a domain's disks up in: every volume of every active storage
pool, indexed by path and by pool and name, read once per audit and only when a disk needs it.

The shared pools (NFS, Ceph...) are read with it: their sizes and what their volumes provision
come from the same listing. An incremental audit (virtcap.audit.domain_cache) keeps the index of
an earlier audit between full ones.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace

import libvirt

from virtcap.audit.domain_xml import NON_LOCAL_DEVICES, DiskReference
from virtcap.audit.libvirt_api import VirConnect, VirStoragePool
from virtcap.audit.storage_pools import SHARED_POOL_TYPES, pool_type, shared_pool_source
from virtcap.model.facts import SharedPoolFacts


def is_local_disk(reference: DiskReference) -> bool:
    """A disk on the host's own storage, whose size counts: not a CD-ROM, a floppy, or a network
    disk, nor one without a source."""
    return not (
        reference.device in NON_LOCAL_DEVICES
        or reference.kind == "network"
        or not reference.source.strip("/")
    )


@dataclass(frozen=True, slots=True)
class Volume:
    """A storage volume's size, and whether its pool is shared with other hosts."""

    capacity: int
    shared: bool


@dataclass
class VolumeIndex:
    """Every volume of every active storage pool, listed once per audit and only when needed; an
    incremental audit keeps the index of an earlier one (see reusable)."""

    conn: VirConnect
    block_info_is_real: bool = True
    problems: list[str] = field(default_factory=list)
    _paths: dict[str, Volume] | None = None
    _names: dict[tuple[str, str], Volume] = field(default_factory=dict)
    _shared: list[SharedPoolFacts] = field(default_factory=list)
    _shared_pools: dict[str, VirStoragePool] = field(default_factory=dict)
    _targets: list[str] = field(default_factory=list)
    """The pools' target directories, where their volumes' paths lie."""

    def reusable(self) -> bool:
        """Read completely, without a problem that reading again could clear: an incremental
        audit may keep it. Pools defined, started, stopped or refreshed are told by storage pool
        events, volumes created or deleted are not: lacks() tells when a domain read again names
        one created since, and a full audit reads the index again anyway."""
        return self._paths is not None and not self.problems

    def lacks(self, reference: DiskReference) -> bool:
        """The disk names a volume of a pool that this index does not hold (created since?)."""
        if not is_local_disk(reference):
            return False
        if reference.kind == "volume":
            self._load()
            return (reference.pool or "", reference.volume or "") not in self._names
        path = reference.path or ""
        return path not in self._load() and any(
            path.startswith(target.rstrip("/") + "/") for target in self._targets
        )

    def refresh_shared(self) -> bool:
        """The shared pools' sizes read again, one call each (other hosts fill them without any
        event here); False where one cannot be read: the index is then read again whole."""
        refreshed = []
        for facts in self._shared:
            try:
                _state, capacity, used, _available = self._shared_pools[facts.name].info()
            except libvirt.libvirtError:
                return False
            refreshed.append(replace(facts, capacity_bytes=int(capacity), used_bytes=int(used)))
        self._shared = refreshed
        return True

    def shared_pools(self) -> tuple[SharedPoolFacts, ...]:
        """The active pools of shared types with their sizes, by name. Called after the domains'
        disks were looked up: where none needed the pools, a driver without storage pools at all
        is no problem of the host."""
        self._load(disks=False)
        return tuple(sorted(self._shared, key=lambda pool: pool.name))

    def by_path(self, path: str) -> Volume | None:
        return self._load().get(path)

    def by_pool_volume(self, pool: str, volume: str) -> Volume | None:
        self._load()
        return self._names.get((pool, volume))

    def _load(self, *, disks: bool = True) -> dict[str, Volume]:
        if self._paths is not None:
            return self._paths
        self._paths = {}
        try:
            pools = self.conn.listAllStoragePools(libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE)
        except libvirt.libvirtError as error:
            if disks or error.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
                self.problems.append(f"cannot list storage pools: {error.get_error_message()}")
            return self._paths
        for pool in pools:
            try:
                pool_name = pool.name()
                xml = pool.XMLDesc(0)
                self._targets.extend(_pool_target(xml))
                shared = pool_type(xml) in SHARED_POOL_TYPES
                provisioned = 0
                listed = pool.listAllVolumes(0)
                for volume in listed:
                    entry = Volume(capacity=int(volume.info()[1]), shared=shared)
                    provisioned += entry.capacity
                    self._paths[volume.path()] = entry
                    self._names[(pool_name, volume.name())] = entry
                if shared:
                    self._add_shared(pool, pool_name, xml, provisioned, len(listed))
            except libvirt.libvirtError as error:
                self.problems.append(f"storage pool {pool.name()}: {error.get_error_message()}")
        return self._paths

    def _add_shared(self, pool: VirStoragePool, name: str, xml: str, provisioned: int, volumes: int) -> None:
        """A shared pool's source and sizes, once every volume of it was read: a partial sum of
        its volumes would understate what it promised."""
        try:
            source = shared_pool_source(xml)
        except ET.ParseError as error:
            self.problems.append(
                f"storage pool {name}: its XML does not parse ({error}); left out of shared pools"
            )
            return
        if source is None:
            return
        _state, capacity, used, _available = pool.info()
        self._shared_pools[name] = pool
        self._shared.append(
            SharedPoolFacts(
                name=name,
                type=source.type,
                hosts=source.hosts,
                path=source.path,
                capacity_bytes=int(capacity),
                used_bytes=int(used),
                provisioned_bytes=provisioned,
                volumes=volumes,
            )
        )


def _pool_target(xml: str) -> list[str]:
    """The pool's target directory (`<target><path>`), if its XML has one."""
    try:
        path = ET.fromstring(xml).findtext("target/path")
    except ET.ParseError:
        return []
    return [path.strip()] if path and path.strip() else []
