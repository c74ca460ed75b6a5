"""Shared storage pools, once each for the fleet, from what every hypervisor sees (pure).

Hypervisors that share a Ceph pool or an NFS export each define a libvirt pool for it, under
names of their own, and each reports its full size. Summed per hypervisor, one Ceph cluster of
100 TiB seen by 50 hosts would count as 5 PiB. Here the pools are matched by their source, and
each shared pool is counted once.

**Identity.** Two hypervisors' pools are one pool when they have the same type, name the same
thing on their servers (the NFS export, the Ceph pool, the iSCSI target, the Gluster volume) and
share at least one server: a Ceph client lists some of the cluster's monitors, not always the same
ones, and any monitor in common means one cluster. Matching is transitive (A and B share a monitor,
B and C another: one pool). The pool's key is `type://server/path`, with the first server (in
sort order) of all those any hypervisor lists for it: `netfs://nfs1.example.com/export/vms`,
`rbd://10.0.0.1/volumes`. It is stable as long as that server stays among them; adding a server
that sorts before it changes the key (a new series), as renaming the pool would.

**Sizes** are those of the most recent audit among the hypervisors that see the pool (libvirt
reports a pool's sizes as of its last refresh on that hypervisor: two hosts may differ).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from virtcap.model.facts import HostFacts, SharedPoolFacts


@dataclass(frozen=True, slots=True)
class SharedPool:
    key: str
    """`type://server/path`: the pool's identity across hypervisors and audits (see the module)."""
    type: str
    servers: tuple[str, ...]
    """Every server any hypervisor lists for it, sorted."""
    path: str
    capacity_bytes: int
    used_bytes: int
    provisioned_bytes: int
    volumes: int
    members: tuple[tuple[str, str], ...]
    """(hypervisor, the pool's name there), sorted: who sees it."""
    sizes_from: str
    """The hypervisor whose audit the sizes come from."""

    @property
    def provisioned_ratio(self) -> float | None:
        """Provisioned / capacity, the thin-provisioning ratio: above 1, volumes were promised
        more than the pool holds. None for a pool of no capacity."""
        return self.provisioned_bytes / self.capacity_bytes if self.capacity_bytes > 0 else None


@dataclass(frozen=True, slots=True)
class _Sighting:
    hypervisor: str
    audited_at: float
    pool: SharedPoolFacts


def shared_pools(hypervisors: Mapping[str, HostFacts]) -> tuple[SharedPool, ...]:
    """Every shared pool the hypervisors see, once, by key."""
    by_what: dict[tuple[str, str], list[_Sighting]] = {}
    for name, facts in hypervisors.items():
        for pool in facts.shared_pools:
            by_what.setdefault((pool.type, pool.path), []).append(_Sighting(name, facts.audited_at, pool))
    pools = [_merged(group) for sightings in by_what.values() for group in _by_common_server(sightings)]
    return tuple(sorted(pools, key=lambda pool: pool.key))


def _by_common_server(sightings: list[_Sighting]) -> Iterable[list[_Sighting]]:
    """The sightings split into groups that share servers, transitively (union-find over servers);
    those naming no server at all form one group."""
    parent = list(range(len(sightings)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    first_with: dict[str, int] = {}
    for index, sighting in enumerate(sightings):
        for server in sighting.pool.hosts or ("",):
            other = first_with.setdefault(server, index)
            parent[root(index)] = root(other)
    groups: dict[int, list[_Sighting]] = {}
    for index, sighting in enumerate(sightings):
        groups.setdefault(root(index), []).append(sighting)
    return groups.values()


def _merged(group: list[_Sighting]) -> SharedPool:
    servers = tuple(sorted({server for sighting in group for server in sighting.pool.hosts}))
    # The latest audit; among audits of the same instant, the first hypervisor by name.
    latest = min(group, key=lambda sighting: (-sighting.audited_at, sighting.hypervisor))
    pool = latest.pool
    kind, path = pool.type, pool.path
    return SharedPool(
        key=f"{kind}://{servers[0] if servers else ''}/{path.lstrip('/')}",
        type=kind,
        servers=servers,
        path=path,
        capacity_bytes=pool.capacity_bytes,
        used_bytes=pool.used_bytes,
        provisioned_bytes=pool.provisioned_bytes,
        volumes=pool.volumes,
        members=tuple(sorted((sighting.hypervisor, sighting.pool.name) for sighting in group)),
        sizes_from=latest.hypervisor,
    )
