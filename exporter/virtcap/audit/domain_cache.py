"""What an incremental audit keeps from one audit of a connection to the next.

A full audit reads every domain's definition (virDomainGetXMLDesc, and a virDomainGetBlockInfo
per disk outside the storage pools) and every volume of every storage pool: round trips that grow
with the number of domains. Between full audits, an incremental audit lists the domains with their
state codes in one bulk call and reads again only the domains that are new, whose state code
changed, or that an event marked changed; the others keep the facts read last time.

Why a kept domain's facts are still what a full audit would read:
- its definition (virDomainGetXMLDesc, live where it runs) changes only through what libvirt tells
  of with an event: a definition or undefinition, a start, stop, suspend, resume or migration
  (lifecycle), a balloon change (the live `<currentMemory>`), a device added or removed, a change
  of metadata (Nova's, or the ownership namespace), a tunable (vCPU pins), a block job's end (a
  disk's new source after a copy or commit) and a media change; libvirt's event thread records the
  domain's UUID (DomainChanges), and the next audit reads it again;
- a state change without such an event still shows in the bulk call's state code, which makes the
  domain read again (its live and persistent definitions differ);
- an event racing an audit is not lost: the set of marked UUIDs is taken at the start of the
  domain pass, so a mark that comes later is read by the next audit, which the event also asked
  for.

The hypervisor's and libvirt's versions and the host name (HostReadings) are read at full audits
only: a libvirtd restart, which brings a new libvirt, closes the connection (its next audit is
full), and a hypervisor upgraded under a running libvirtd or a host renamed is rare enough to wait
for the next full audit, three round trips an audit saved.

What no event tells of (a volume or a disk image resized, a volume deleted under a domain that
did not change, an image file appearing for a shut-off domain) is seen at the next full audit:
every `resync_every` audits, after every reconnect, and at every audit where the driver refused an
event registration (the test driver's in-process connections are never subscribed: always full).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from virtcap.audit.domain_xml import DomainDefinition
from virtcap.audit.volumes import VolumeIndex
from virtcap.model.facts import DomainFacts


@dataclass(frozen=True, slots=True)
class Changes:
    """What events told of since the last audit took them."""

    domains: frozenset[str] = frozenset()
    """UUIDs of the domains to read again."""
    pools: bool = False
    """A storage pool was defined, started, stopped, refreshed...: the volume index is stale."""
    unknown: bool = False
    """A domain changed that could not be told: every domain is read again."""


class DomainChanges:
    """The UUIDs events marked changed, shared by libvirt's event thread (which marks) and the
    audit thread (which takes): a lock held for a set operation only, so the event thread never
    waits for a libvirt call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._domains: set[str] = set()
        self._pools = False
        self._unknown = False

    def mark_domain(self, uuid: str) -> None:
        with self._lock:
            self._domains.add(uuid)

    def mark_pools(self) -> None:
        with self._lock:
            self._pools = True

    def mark_unknown(self) -> None:
        with self._lock:
            self._unknown = True

    def marked(self, uuid: str) -> bool:
        """Marked and not yet taken: what waits for the next audit."""
        with self._lock:
            return uuid in self._domains

    def take(self) -> Changes:
        """Everything marked so far, leaving nothing marked: one atomic swap."""
        with self._lock:
            taken = Changes(frozenset(self._domains), self._pools, self._unknown)
            self._domains = set()
            self._pools = self._unknown = False
        return taken


@dataclass(frozen=True, slots=True)
class HostReadings:
    """What a full audit reads of the host beside its domains and keeps for the audits after it."""

    hypervisor_version: str
    libvirt_version: str
    hostname: str


@dataclass(slots=True)
class CachedDomain:
    """One domain as the last audit that read it found it, and what its facts were built from."""

    state_code: int
    definition: DomainDefinition
    facts: DomainFacts
    volumes_generation: int
    """The volume index its disks were looked up in: another index (reloaded) rebuilds the facts
    from the definition, without reading the domain again."""
    block_capacities: dict[str, int | str] = field(default_factory=dict)
    """Per disk target outside the storage pools: the capacity virDomainGetBlockInfo gave, or its
    error message, as read with the definition. Kept with it: an image resized (by libvirt's
    virDomainBlockResize or outside libvirt) sends no event, and is seen at the next full audit."""


@dataclass
class DomainCache:
    """One connection's: born with it, dropped with it, so a reconnect starts with a full audit.
    Only the audit thread touches it, except `changes`, which libvirt's event thread marks."""

    resync_every: int
    changes: DomainChanges = field(default_factory=DomainChanges)
    domain_events: bool = False
    """Every domain event that tells of a change was registered: without them only full audits
    are exact."""
    pool_events: bool = False
    """Storage pool events were registered: without them the volume index is read every audit."""
    domains: dict[str, CachedDomain] = field(default_factory=dict)
    volumes: VolumeIndex | None = None
    volumes_generation: int = 0
    host_readings: HostReadings | None = None
    """The versions and host name the last full audit read."""
    audits: int = 0
    """Audits finished on this connection: every `resync_every`-th, from the first, is full."""
    valid: bool = True
    """False after an audit failed halfway: what it took from `changes` may be lost."""

    def next_is_full(self) -> bool:
        return (
            not self.valid
            or not self.domain_events
            or self.resync_every <= 1
            or self.audits % self.resync_every == 0
        )

    def new_volumes(self, volumes: VolumeIndex) -> VolumeIndex:
        """Keep `volumes` from now on: the domains kept are looked up in it again."""
        self.volumes = volumes
        self.volumes_generation += 1
        return volumes
