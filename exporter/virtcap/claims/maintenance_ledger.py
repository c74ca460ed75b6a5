"""The claim ledger's maintenance: the entries set through the API, beside the configuration's.

The ledger keeps the maintenance set through the API (in the same database as the claims) beside
the configuration's: a change recomputes the hypervisor's capacity at once, under the same lock as
claims, so /metrics, placements, claims and the failure tolerance see it without waiting for an
audit; an entry whose end passed is dropped by `expire`. The configuration's maintenance starts
when the ledger first sees it in effect (at start or at a reload), a time kept in the database
until the configuration no longer holds the hypervisor, so that restarts keep its start.

`LedgerMaintenance` is the half of ClaimLedger (claims/ledger.py) that does this: the ledger
inherits it, and brings the lock, the database, the store and the recomputation it relies on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import replace

from virtcap.claims.storage import ClaimStorage, LedgerState, StorageError, Writes
from virtcap.config import Hypervisor
from virtcap.fleet.store import SnapshotStore
from virtcap.model.maintenance import Maintenance, in_effect

log = logging.getLogger(__name__)

UNWRITTEN_RETRY_SECONDS = 5.0
"""While the database refuses writes, how often what it refused is tried again: the rows of
released claims (claims/ledger.py), the configuration's maintenance starts."""


class UnknownHypervisorError(Exception):
    """The configuration names no such hypervisor (for a claim, or its maintenance)."""


class MaintenanceConflictError(Exception):
    """The API cannot lift a maintenance the configuration sets."""


class LedgerMaintenance(ABC):
    """The maintenance state of the claim ledger and what changes it, under the ledger's lock."""

    store: SnapshotStore
    database: ClaimStorage
    _lock: asyncio.Lock

    def __init__(self) -> None:
        self.configured: dict[str, Maintenance | None] = {}
        """The configured hypervisors, each with its configuration's maintenance (see `configure`)."""
        self._configured_yet = False
        self.maintenance: dict[str, Maintenance] = {}
        """The maintenance set through the API, by hypervisor."""
        self.configured_since: dict[str, float] = {}
        """When the configuration's maintenance of each hypervisor was first seen in effect."""
        self._since_unstored: set[str] = set()
        """The names of `configured_since` not in the database yet."""
        self._since_retry_at = 0.0
        self._maintenance_shown: dict[str, tuple[Maintenance, ...]] = {}

    @abstractmethod
    async def _adopt(self, state: LedgerState) -> None:
        """The stored claims and maintenance as another exporter left them."""

    @abstractmethod
    async def _refresh(self, names: set[str]) -> None:
        """Recompute the capacity of these hypervisors' last audits."""

    @abstractmethod
    def _refused(self, what: str, error: StorageError) -> Exception:
        """The error a request gets when the database refuses its write."""

    def _adopt_maintenance(self, state: LedgerState) -> set[str]:
        """Take the stored maintenance and starts as another exporter left them; the hypervisors
        whose maintenance changed."""
        changed = {
            name
            for name in state.maintenance.keys() | self.maintenance.keys()
            if state.maintenance.get(name) != self.maintenance.get(name)
        }
        # the start another replica stored first wins; one not stored yet is kept, to be stored
        since = {
            name: self.configured_since[name] for name in self._since_unstored - state.configured_since.keys()
        }
        since.update(state.configured_since)
        changed.update(
            name
            for name in since.keys() | self.configured_since.keys()
            if since.get(name) != self.configured_since.get(name)
        )
        self._since_unstored &= since.keys() - state.configured_since.keys()
        self.maintenance = dict(state.maintenance)
        self.configured_since = since
        return changed

    def configure(self, hypervisors: Iterable[Hypervisor]) -> None:
        """The configuration's hypervisors, at start and at every reload: the names the
        maintenance API knows, and each one's configured maintenance (its capacity follows at
        its next audit, which a changed entry starts at once)."""
        self.configured = {hypervisor.name: hypervisor.maintenance for hypervisor in hypervisors}
        self._configured_yet = True
        now = time.time()
        for name, entry in self.configured.items():
            if entry is not None and entry.active(now) and name not in self.configured_since:
                self.configured_since[name] = now  # stored by the next `expire`
                self._since_unstored.add(name)
        self._publish_maintenance()

    def maintenance_of(self, name: str, now: float | None = None) -> tuple[Maintenance, ...]:
        """The maintenance entries of a hypervisor in effect (the configuration's first)."""
        when = time.time() if now is None else now
        return self._in_effect(name, self.configured.get(name), when)

    def _in_effect(self, name: str, configured: Maintenance | None, now: float) -> tuple[Maintenance, ...]:
        """The entries in effect, the configuration's with the time it was first seen."""
        if configured is not None and configured.since is None and name in self.configured_since:
            configured = replace(configured, since=self.configured_since[name])
        return in_effect((configured, self.maintenance.get(name)), now)

    def maintenance_now(self) -> dict[str, tuple[Maintenance, ...]]:
        """The configured hypervisors in maintenance now, with their entries in effect."""
        now = time.time()
        # at every render: only the hypervisors with an entry are looked at, not the whole fleet
        named = {name for name, entry in self.configured.items() if entry is not None}
        named.update(name for name in self.maintenance if name in self.configured)
        return {name: entries for name in sorted(named) if (entries := self.maintenance_of(name, now))}

    async def set_maintenance(
        self, name: str, reason: str, until: float | None, set_by: str
    ) -> tuple[Maintenance, ...]:
        """Put a hypervisor into maintenance (again: the same reason and end change nothing, and
        it keeps its `since`). Raises UnknownHypervisorError, ValueError for an end that passed,
        ClaimStorageError (nothing changed) when the database refuses."""
        if name not in self.configured:
            raise UnknownHypervisorError(name)
        async with self._lock:
            now = time.time()
            if until is not None and until <= now:
                raise ValueError("until: the time has passed already; expected a time to come")

            async def put(changed: LedgerState | None, writes: Writes) -> Maintenance | None:
                if changed is not None:
                    await self._adopt(changed)
                previous = self.maintenance.get(name)
                kept = previous is not None and previous.active(now) and previous.since is not None
                since = previous.since if kept and previous is not None else now
                entry = Maintenance("api", reason, until, since, set_by)
                if entry == previous:
                    return None
                await writes.put_maintenance(name, entry)
                return entry

            try:
                entry = await self.database.transaction(put)
            except StorageError as error:
                raise self._refused("maintenance not set", error) from None
            if entry is not None:
                self.maintenance[name] = entry
                log.info(
                    "hypervisor put into maintenance",
                    extra={"hypervisor": name, "reason": reason, "until": until, "by": set_by},
                )
                await asyncio.shield(self._refresh({name}))
            return self.maintenance_of(name, now)

    async def release_maintenance(self, name: str) -> tuple[Maintenance, ...]:
        """Lift the maintenance set through the API (nothing to lift is no error). Raises
        UnknownHypervisorError, MaintenanceConflictError while the configuration keeps it in
        maintenance (nothing changed), ClaimStorageError (nothing changed)."""
        if name not in self.configured:
            raise UnknownHypervisorError(name)
        async with self._lock:
            now = time.time()
            configured = in_effect((self.configured.get(name),), now)
            if configured:
                raise MaintenanceConflictError(
                    f"hypervisor {name} is in maintenance by its configuration ({configured[0].describe()}): "
                    "the API cannot lift it; remove `maintenance` from its entry in the configuration "
                    "file and reload"
                )

            async def lift(changed: LedgerState | None, writes: Writes) -> bool:
                if changed is not None:
                    await self._adopt(changed)
                if name not in self.maintenance:
                    return False
                await writes.delete_maintenance([name])
                return True

            try:
                lifted = await self.database.transaction(lift)
            except StorageError as error:
                raise self._refused("maintenance not lifted", error) from None
            if lifted:
                self.maintenance.pop(name, None)
                log.info("hypervisor out of maintenance", extra={"hypervisor": name})
                await asyncio.shield(self._refresh({name}))
            return self.maintenance_of(name, now)

    async def _end_maintenance(self, now: float) -> None:
        """Drop the API's entries whose end passed, and recompute the hypervisors whose capacity
        counts other entries than those in effect now (an end passed, the configuration's too).
        A database that refuses the delete does not keep an ended entry in effect: its row is
        dropped again at the next start."""
        ended = sorted(name for name, entry in self.maintenance.items() if not entry.active(now))
        if ended:

            async def delete(changed: LedgerState | None, writes: Writes) -> None:
                if changed is not None:
                    await self._adopt(changed)
                await writes.delete_maintenance(ended)

            try:
                await self.database.transaction(delete)
            except StorageError as error:
                log.error(
                    "maintenance ended, in memory only", extra={"hypervisors": ended, "error": str(error)}
                )
            for name in ended:
                if self.maintenance.pop(name, None) is None:
                    continue  # another exporter ended it first
                log.info("hypervisor out of maintenance: its end passed", extra={"hypervisor": name})
        if ended or self._maintenance_shown:
            # only while some hypervisor is (or was) in maintenance: a fleet without any costs nothing
            changed = {
                name
                for name, state in self.store.hypervisors.items()
                if state.last_good is not None
                and state.last_good.maintenance != self.maintenance_of(name, now)
            }
            if changed:
                await self._refresh(changed)
        self._publish_maintenance()

    async def _store_configured_since(self, now: float) -> None:
        """Store when the configuration's maintenance was first seen, and forget it for the
        hypervisors the configuration no longer holds; a refusal is tried again a little later
        (the start is kept in memory meanwhile)."""
        if not self._configured_yet:
            return  # at start, before the configuration is known: nothing it no longer holds
        held = {name for name, entry in self.configured.items() if entry is not None and entry.active(now)}
        gone = sorted(self.configured_since.keys() - held)
        if not (gone or self._since_unstored) or now < self._since_retry_at:
            return

        async def store(changed: LedgerState | None, writes: Writes) -> None:
            if changed is not None:
                await self._adopt(changed)
            if self._since_unstored:
                await writes.put_configured_since(
                    {name: self.configured_since[name] for name in self._since_unstored}
                )
            if gone:
                await writes.delete_configured_since(gone)

        try:
            await self.database.transaction(store)
        except StorageError as error:
            self._since_retry_at = now + UNWRITTEN_RETRY_SECONDS
            log.debug("maintenance start not stored", extra={"error": str(error)})
            return
        self._since_unstored.clear()
        for name in gone:
            self.configured_since.pop(name, None)

    def _publish_maintenance(self) -> None:
        """/metrics shows every hypervisor's maintenance: re-rendered when it changed."""
        shown = self.maintenance_now()
        if shown != self._maintenance_shown:
            self._maintenance_shown = shown
            self.store.touch()
