"""Claims: capacity reserved for builds in flight, before the hypervisor shows their domain.

A claim holds `count` instances (1 unless asked), all or nothing. On a named hypervisor each is
tested in turn with Nova's claim test against its last audit plus the claims already held, the
ones before it consumed; on `any` the scheduling engine places them (model/scheduler/, through
fleet/scheduling.py: the same host states, multipliers and answers as a dry-run placement). Under
one lock, so two concurrent claims can never both take the last free resources. It counts in
`used`, each instance on its hypervisor, until the audit finds its domain (reconciled: the domain
now carries the allocation), its TTL passes (expired) or it is deleted, all its instances
together. Claims live in SQLite (WAL, synchronous FULL), or in PostgreSQL shared by replicas
(claims/postgres.py, where the fit test and the write are one transaction under a ledger-wide
lock): one acknowledged with 201 was committed first, in one transaction with every instance,
and survives a crash.

When the database refuses writes (read-only, full, locked, failing disk), creating and deleting
claims fail with ClaimStorageError and change nothing; reconciliation and expiry go on in
memory and delete the rows once the database accepts writes again (see `_forget`).

The ledger also keeps the maintenance set through the API beside the configuration's, in the same
database and under the same lock: claims/maintenance_ledger.py, the half of the ledger it inherits.

A claim belongs to the writer that created it (`created_by`): another writer may delete it only if
named in `claims.admins`. Claims made before the ledger recorded their writer have none, and any
writer may delete them.

Shards sharing one database (one SQLite file, one PostgreSQL database) each hold only the claims
and maintenance of the hypervisors their shard's hash assigns them (model/sharding.py), configured
or not: every row has one shard that lists, counts, expires and deletes it, and no shard touches
another's. A hypervisor removed from the configuration keeps its claims, as without shards, on the
shard its name hashes to, until they expire; one added by a reload was that shard's all along.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Mapping

from virtcap.claims.database import SQLITE_MAX_INTEGER, ClaimDatabase
from virtcap.claims.maintenance_ledger import (
    UNWRITTEN_RETRY_SECONDS,
    LedgerMaintenance,
    UnknownHypervisorError,
)
from virtcap.claims.storage import ClaimStorage, LedgerState, StorageError, Writes
from virtcap.config import ClaimSettings, Hypervisor
from virtcap.fleet.claim_records import MAX_CLAIM_COUNT, Claim, ClaimRequest
from virtcap.fleet.scheduling import (
    FleetEntry,
    FleetSchedule,
    claim_within,
    fleet_entries,
    pending_claims,
    schedule_fleet,
)
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.maintenance import Maintenance
from virtcap.model.resources import Amounts, Resource, placement_units
from virtcap.model.scheduler import (
    COMPUTE,
    NUMA_TOPOLOGY,
    PCI_PASSTHROUGH,
    PLACEMENT,
    SPREAD,
    Multipliers,
    Rejection,
    ScheduleResult,
)
from virtcap.model.sharding import UNSHARDED, Shard

__all__ = [  # the records are virtcap.fleet.claim_records', below the fleet scheduling that counts them
    "ANY_HYPERVISOR",
    "MAX_CLAIM_COUNT",
    "Claim",
    "ClaimDatabase",
    "ClaimLedger",
    "ClaimRejectedError",
    "ClaimRequest",
    "ClaimStorageError",
    "NotClaimOwnerError",
    "claim_within",
    "pending_claims",
]

log = logging.getLogger(__name__)

ANY_HYPERVISOR = "any"
EXPIRY_PERIOD_SECONDS = 1.0


class ClaimRejectedError(Exception):
    """The claim does not fit: `reasons` per hypervisor, in Nova's words (its claim test), and
    `rejections` per hypervisor as a dry-run placement gives them (the first filter that refused
    the instance that found no host, and its reasons); `fitted` of `requested` instances would
    have been placed one by one before it."""

    def __init__(
        self,
        message: str,
        reasons: Mapping[str, list[str]],
        rejections: Mapping[str, Rejection] | None = None,
        requested: int = 1,
        fitted: int = 0,
    ) -> None:
        super().__init__(message)
        self.reasons = dict(reasons)
        self.rejections = dict(rejections or {})
        self.requested = requested
        self.fitted = fitted


class ClaimStorageError(Exception):
    """The database refused a write: nothing was acknowledged and nothing changed in memory."""


class NotClaimOwnerError(Exception):
    """Another writer created the claim, and this one is not among `claims.admins`: nothing
    was deleted."""

    def __init__(self, claim: Claim, writer: str) -> None:
        super().__init__(
            f"claim {claim.id} was created by writer {claim.created_by!r}: only that writer, or one of "
            f"claims.admins, may delete it (not {writer!r})"
        )
        self.claim = claim


class ClaimLedger(LedgerMaintenance):
    def __init__(
        self,
        settings: ClaimSettings,
        store: SnapshotStore,
        database: ClaimStorage,
        shard: Shard = UNSHARDED,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.shard = shard
        """The exporter's shard, which a reload keeps (web/reload.py): the claims it holds."""
        self.store = store
        self.database = database
        database.on_change = self._touch  # its `up` is shown in /metrics
        self.claims: dict[str, Claim] = {}
        self.outcomes: Counter[str] = Counter()
        self._lock = asyncio.Lock()
        self._unwritten_deletes: set[str] = set()
        """Rows still to delete, of claims already released in memory (see `_forget`)."""
        self._reconciled_here: dict[str, float] = {}
        """On a shared database, the claims this exporter's audits reconciled, by expiry: their
        rows stay for the replicas whose own audits have not found the domain yet (see `_forget`)."""
        self._database_failing = False
        self._retry_unwritten_at = 0.0

    async def start(self) -> None:
        """Open the database and release what expired while the exporter was down. Expiry from
        then on is `expire_forever`, run (and restarted should it fail) by the server."""
        state = await self.database.start()
        if state is not None:  # None: a shared database not reachable yet, read by `follow_forever`
            # nothing audited yet, nothing to recompute (and the store must not call itself ready)
            mine = self._mine(state)
            self.claims.update((claim.id, claim) for claim in mine.claims)
            self.maintenance = dict(mine.maintenance)
            self.configured_since = dict(mine.configured_since)
        await self.expire()

    async def follow_forever(self) -> None:
        """Read what other exporters sharing the database changed, at their notice or every few
        seconds, and open it should it have been unreachable so far (claims/postgres.py). Runs
        until cancelled; an unreachable database does not end it."""
        while True:
            await self.database.wait()
            async with self._lock:
                state = await self.database.changes()
                if state is not None:
                    await self._adopt(state)

    async def _adopt(self, state: LedgerState) -> None:
        """The stored claims and maintenance as another exporter left them: the capacity of every
        hypervisor whose claims or maintenance changed is recomputed. The claims released here
        whose delete the database refused, or that an audit here reconciled, stay released."""
        released = self._unwritten_deletes | self._reconciled_here.keys()
        stored = {claim.id for claim in state.claims}
        state = self._mine(state)
        claims = {claim.id: claim for claim in state.claims if claim.id not in released}
        self._reconciled_here = {key: ends for key, ends in self._reconciled_here.items() if key in stored}
        changed = {
            name
            for claim_id in claims.keys() ^ self.claims.keys()
            for name in (claims.get(claim_id) or self.claims[claim_id]).hypervisors
        }
        changed |= self._adopt_maintenance(state)
        self.claims.clear()
        self.claims.update(claims)
        if changed:
            await self._refresh(changed)
            self._touch()  # the pending claims of hypervisors without an audit yet, too

    def holds(self, claim: Claim) -> bool:
        """Whether the claim is this shard's: one of its instances is on a hypervisor of the shard.
        Placement keeps a claim within one shard; one made before the fleet was sharded may span
        shards, and each of them holds it, so that no fit test leaves it out."""
        return any(_shard_holds(self.shard, name) for name in claim.hypervisors)

    def _mine(self, state: LedgerState) -> LedgerState:
        """The stored claims and maintenance of this shard's hypervisors."""
        if not self.shard.sharded:
            return state
        return LedgerState(
            [claim for claim in state.claims if self.holds(claim)],
            {name: entry for name, entry in state.maintenance.items() if _shard_holds(self.shard, name)},
            {name: when for name, when in state.configured_since.items() if _shard_holds(self.shard, name)},
        )

    def _touch(self) -> None:
        """/metrics rendered again; not before the first audits start, or the store, empty,
        would call itself ready."""
        if self.store.hypervisors:
            self.store.touch()

    async def stop(self) -> None:
        if not self._database_failing:
            # the rows of the claims released since the last expiry round; a database that refuses
            # writes would only hold up the stop (the rows come back at the next start, and their
            # claims are released again: see `_forget`); not failing, no retry is being waited for
            await self._delete_unwritten()
        await self.database.close()

    def pending(self) -> Counter[str]:
        """Instances held per hypervisor: a claim of 3 instances on one hypervisor counts 3."""
        return Counter(name for claim in self.claims.values() for name in claim.hypervisors)

    def _rejected(self) -> None:
        self.outcomes["rejected"] += 1
        self.store.touch()

    async def create(
        self,
        request: ClaimRequest,
        *,
        multipliers: Multipliers = SPREAD,
        stale_after: float = math.inf,
    ) -> Claim:
        """Hold `request.count` instances, all or nothing: on the named hypervisor, or where the
        scheduling engine places them for `any`, with these weigher multipliers, a hypervisor
        whose last good audit is older than `stale_after` seconds refused (the configuration's
        `scheduler.weighers` and `audit.stale_after`, as a dry-run placement has them).

        Raises ClaimRejectedError when they do not fit (nothing held), UnknownHypervisorError,
        and ClaimStorageError, with nothing held, when the database refuses the claim."""
        if any(not 0 <= amount <= SQLITE_MAX_INTEGER for amount in request.amounts.values()):
            raise ValueError(f"every amount must be between 0 and {SQLITE_MAX_INTEGER}")
        if not (math.isfinite(request.ttl) and request.ttl > 0):
            raise ValueError(f"the ttl must be a finite number of seconds above 0, got {request.ttl}")
        if not 1 <= request.count <= MAX_CLAIM_COUNT:
            raise ValueError(f"the count must be from 1 to {MAX_CLAIM_COUNT}, got {request.count}")
        if request.count > 1 and request.domain_uuid is not None:
            raise ValueError("a domain UUID names one domain: a claim of more than one instance has none")
        amounts = whole_units(request.amounts)
        demand = Demand(amounts, claim_within(amounts, request.extra_specs), request.availability_zone)
        claim_id = str(uuid.uuid4())

        async def fit_and_insert(changed: LedgerState | None, writes: Writes) -> Claim:
            """The fit test and the write in one transaction: on a shared database, after reading
            what the other exporters claimed, under a lock they all take (claims/postgres.py)."""
            if changed is not None:
                await self._adopt(changed)
            # The engine fits NUMA cells and devices: in a thread, on the snapshots and claims
            # of this moment (immutable; the store's dict and the ledger's are not).
            fleet = fleet_entries(self.store, time.time(), stale_after)
            held = list(self.claims.values())
            if request.hypervisor == ANY_HYPERVISOR:
                scheduled = await asyncio.to_thread(
                    schedule_fleet, fleet, held, demand, request.count, multipliers=multipliers
                )
            else:
                entry = next((entry for entry in fleet if entry.name == request.hypervisor), None)
                if entry is None:
                    raise UnknownHypervisorError(request.hypervisor)
                scheduled = await asyncio.to_thread(_on_hypervisor, entry, held, demand, request.count)
            if not scheduled.result.placed:
                self._rejected()
                # in a thread too: it replays the instances that fitted, up to MAX_CLAIM_COUNT
                raise await asyncio.to_thread(_rejection, request, scheduled, demand)
            hosts = scheduled.result.hosts
            now = time.time()
            claim = Claim(
                id=claim_id,
                hypervisor=hosts[0],
                amounts=amounts,
                created_at=now,
                expires_at=now + request.ttl,
                domain_uuid=request.domain_uuid,
                owner=request.owner,
                flavor=request.flavor,
                extra_specs=dict(request.extra_specs),
                hypervisors=hosts,
                created_by=request.created_by,
            )
            await writes.insert(claim)
            return claim

        async with self._lock:
            try:
                claim = await self.database.transaction(fit_and_insert)
            except StorageError as error:
                # An error reported at commit may come after the row reached the disk: such a row
                # must not come back at the next start as a claim nobody was told about.
                self._unwritten_deletes.add(claim_id)
                raise self._refused("claim not created", error) from None
            self.claims[claim.id] = claim
            self.outcomes["created"] += 1
            # shielded: a cancelled request must not leave the store without the claim it holds
            await asyncio.shield(self._refresh(set(claim.hypervisors)))
        log.info(
            "claim created",
            extra={
                "claim": claim.id,
                "hypervisors": sorted(set(claim.hypervisors)),
                "count": claim.count,
                "owner": claim.owner,
            },
        )
        return claim

    async def delete(self, claim_id: str, writer: str) -> Claim | None:
        """Release a claim for `writer`: its creator, one of `claims.admins`, or any writer for a
        claim that recorded none. Raises NotClaimOwnerError for another writer's claim, and
        ClaimStorageError when the database refuses; either way the claim is still held."""

        async def remove(changed: LedgerState | None, writes: Writes) -> Claim | None:
            if changed is not None:
                await self._adopt(changed)
            claim = self.claims.get(claim_id)
            if claim is not None:
                owner = claim.created_by
                if owner is not None and owner != writer and writer not in self.settings.admins:
                    raise NotClaimOwnerError(claim, writer)
                await writes.delete([claim.id])
            return claim

        async with self._lock:
            try:
                claim = await self.database.transaction(remove)
            except StorageError as error:
                # Released in memory only, it would come back at the next start: the client is
                # told it failed, and may try again.
                raise self._refused("claim not deleted", error) from None
            if claim is not None:
                await self._drop([claim], "deleted")
        return claim

    async def record_audit(
        self, hypervisor: Hypervisor, facts: HostFacts, flavors: Mapping[str, Demand]
    ) -> None:
        """Record a successful audit with the claims still pending on its hypervisor.

        Claims whose domain now exists there are released first: the domain carries the
        allocation from this audit on, so nothing is counted twice. Under the lock, so that a
        claim created meanwhile is never left out of the recorded capacity. A database that
        refuses the delete does not stop the audit from being recorded (see `_forget`).
        """
        async with self._lock:
            present = {domain.uuid.lower() for domain in facts.domains}
            found = [
                c
                for c in self.claims.values()
                if hypervisor.name in c.hypervisors
                and c.domain_uuid is not None
                and c.domain_uuid.lower() in present
            ]
            await self._forget(found, "reconciled", refresh=False)
            pending = list(self.claims.values())
            # the hypervisor's own configuration: a reload that changed it restarted its audits
            maintenance = self._in_effect(hypervisor.name, hypervisor.maintenance, time.time())
            snapshot = await asyncio.to_thread(_audited, hypervisor, facts, flavors, pending, maintenance)
            self.store.record(snapshot, "success")

    async def expire(self) -> None:
        """Release the claims past their TTL, end the maintenance past its end, and delete the
        rows the database refused before."""
        async with self._lock:
            now = time.time()
            await self._forget([c for c in self.claims.values() if c.expires_at <= now], "expired")
            await self._end_maintenance(now)
            await self._store_configured_since(now)
            await self._delete_reconciled(now)
        if self.database.shared:
            # under the lock: the transaction reads what the other exporters changed
            async with self._lock:
                await self._delete_unwritten()
        else:
            # outside the lock: these claims are gone from memory already, and a database that is
            # locked by someone else must not hold up claims for its busy timeout
            await self._delete_unwritten()

    async def expire_forever(self) -> None:
        """`expire()` every second until cancelled. A database that refuses writes does not end it;
        anything unexpected does, for the supervisor to log and restart it."""
        while True:
            await asyncio.sleep(EXPIRY_PERIOD_SECONDS)
            await self.expire()

    async def _forget(self, claims: list[Claim], outcome: str, refresh: bool = True) -> None:
        """Release claims whose purpose has ended (reconciled, expired), whether or not the
        database accepts the delete.

        Keeping them until it does would be wrong for as long as it refuses, hours for a full disk:
        a reconciled claim would count its domain twice, an expired one would hold capacity nobody
        holds anymore. Releasing them in memory loses nothing acknowledged: their rows are deleted
        once the database accepts writes again (`_delete_unwritten`), and should the exporter
        restart first, the rows come back and are released again, an expired claim at once (its
        expiry is stored) and a reconciled one at the first audit that finds its domain. At worst a
        domain counts twice for one audit after a restart; if it was removed meanwhile, its claim
        counts until its TTL: too much used, never too little.
        """
        if not claims:
            return
        if outcome == "reconciled" and self.database.shared:
            # Another replica's audit may not have found the domain yet: deleting the row now
            # would have it count neither the claim nor the domain until then, and take a claim
            # on capacity that is not free. The row stays until the claim's expiry.
            self._reconciled_here.update((claim.id, claim.expires_at) for claim in claims)
        else:
            # Deleted by the next expiry round, not here: the audit that reconciles and the
            # expiry both hold the lock, and a database locked by another process would hold them
            # (and claims) for its busy timeout, an audit's delete queued behind the others' writes.
            self._unwritten_deletes.update(claim.id for claim in claims)
        await self._drop(claims, outcome, refresh)

    async def _delete_unwritten(self) -> None:
        if not self._unwritten_deletes or time.monotonic() < self._retry_unwritten_at:
            return
        ids = sorted(self._unwritten_deletes)
        try:
            await self._delete_rows(ids)
        except StorageError as error:
            self._retry_unwritten_at = time.monotonic() + UNWRITTEN_RETRY_SECONDS
            if not self._database_failing:  # once per outage, not at every retry
                log.error(
                    "claim rows left in the database: the database refuses the delete",
                    extra={"claims": ids, "error": str(error)},
                )
            self._database_failing = True
            return
        self._unwritten_deletes.difference_update(ids)
        if self._database_failing:
            log.info("the claims database accepts writes again", extra={"deleted": len(ids)})
        self._database_failing = False

    async def _delete_reconciled(self, now: float) -> None:
        """The rows of claims reconciled here whose expiry passed (every replica has audited the
        domain by then, or counts the claim as expired); a refusal is tried again at the next."""
        ended = sorted(key for key, ends in self._reconciled_here.items() if ends <= now)
        if not ended:
            return
        try:
            await self._delete_rows(ended)
        except StorageError:
            return  # the expiry of claims says so already, once per outage
        for key in ended:
            self._reconciled_here.pop(key, None)

    async def _delete_rows(self, ids: list[str]) -> None:
        """Delete these claims' rows; idempotent, as exporters sharing the database each release
        the same expired and reconciled claims."""

        async def delete(changed: LedgerState | None, writes: Writes) -> None:
            if changed is not None:
                await self._adopt(changed)
            await writes.delete(ids)

        await self.database.transaction(delete)

    def _refused(self, what: str, error: StorageError) -> ClaimStorageError:
        log.error(f"{what}: the claims database refuses writes", extra={"error": str(error)})
        return ClaimStorageError(f"the claims database refuses writes ({error}); {what}")

    async def _drop(self, claims: list[Claim], outcome: str, refresh: bool = True) -> None:
        for claim in claims:
            if self.claims.pop(claim.id, None) is None:
                continue  # another exporter sharing the database released it first
            if not _shard_holds(self.shard, claim.hypervisor):
                continue  # a claim spanning shards is counted by the shard of its first instance
            self.outcomes[outcome] += 1
            log.info(
                f"claim {outcome}", extra={"claim": claim.id, "hypervisors": sorted(set(claim.hypervisors))}
            )
        if refresh:
            # every instance of every claim is released together, on each of its hypervisors
            await self._refresh({name for claim in claims for name in claim.hypervisors})

    async def _refresh(self, names: set[str]) -> None:
        """Recompute the capacity of the last audits of these hypervisors with their pending claims
        and the maintenance in effect, in a thread (it fits the claims into the NUMA cells and
        devices); an audit recorded in the meantime already counted them, and is kept."""
        for name in sorted(names):
            state = self.store.hypervisors.get(name)
            if state is None or state.last_good is None:
                continue
            audited = state.last_good
            pending = list(self.claims.values())
            maintenance = self.maintenance_of(name)
            updated = await asyncio.to_thread(_with_claims, audited, pending, maintenance)
            self.store.replace_good(name, audited, updated)
        self._publish_maintenance()


@functools.lru_cache(maxsize=65536)
def _shard_holds(shard: Shard, name: str) -> bool:
    """Cached: a shared ledger's changes are filtered whole, every claim's hypervisors hashed."""
    return shard.holds(name)


def _audited(
    hypervisor: Hypervisor,
    facts: HostFacts,
    flavors: Mapping[str, Demand],
    claims: list[Claim],
    maintenance: tuple[Maintenance, ...],
) -> HypervisorSnapshot:
    pending = pending_claims(claims, hypervisor.name)
    return HypervisorSnapshot.audited(hypervisor, facts, flavors, pending, maintenance)


def _with_claims(
    audited: HypervisorSnapshot, claims: list[Claim], maintenance: tuple[Maintenance, ...]
) -> HypervisorSnapshot:
    return audited.with_claims(pending_claims(claims, audited.name), maintenance)


def _on_hypervisor(entry: FleetEntry, claims: list[Claim], demand: Demand, count: int) -> FleetSchedule:
    """`count` instances on the one hypervisor, each after the ones before it, by the engine on
    that hypervisor alone: Nova's claim test, NUMA cells and devices, as nova-compute repeats them
    for a forced host. Its audit is not refused for its age (a claim on a named hypervisor never
    was), only for a failed last audit. Forced, as it is: each instance is fitted with its own NUMA
    topology, as nova-compute's claim fits it, not with the one the scheduler fitted for the
    instance before (which a claim on `any` follows)."""
    if not entry.up or entry.good is None:
        reason = f"hypervisor {entry.name} is not up: there is no current capacity to claim against"
        result = ScheduleResult(count, 0, (), {entry.name: Rejection(COMPUTE, (reason,))})
        return FleetSchedule(result)
    up = FleetEntry(entry.name, entry.good, up=True, stale=False)
    return schedule_fleet([up], claims, demand, count, force_hosts=(entry.name,))


_CAPACITY_FILTERS = (PLACEMENT, NUMA_TOPOLOGY, PCI_PASSTHROUGH)


def _rejection(request: ClaimRequest, scheduled: FleetSchedule, demand: Demand) -> ClaimRejectedError:
    """Why the claim does not fit: per hypervisor the engine's rejection, and in `reasons` every
    failing class, cell and device in Nova's words (the claim test of the hypervisor as the
    instances placed before the one that found no host left it)."""
    result = scheduled.result
    current = {state.name: state for state in scheduled.states}
    for step in result.steps:
        current[step.host] = current[step.host].consume(demand)
    rejections = scheduled.rejections
    reasons: dict[str, list[str]] = {}
    for name, rejection in sorted(rejections.items()):
        state = current.get(name)
        failing = state.capacity.claim_test(demand) if state is not None else []
        if rejection.filter in _CAPACITY_FILTERS and failing:
            reasons[name] = failing
        else:
            reasons[name] = list(rejection.reasons)
    count = request.count
    if request.hypervisor == ANY_HYPERVISOR:
        message = "no hypervisor fits the claim"
        if count > 1:
            message = (
                f"no valid host for all {count} instances: {result.fitted} would fit, one by one; "
                "nothing is held (all or nothing)"
            )
    else:
        message = f"the claim does not fit on {request.hypervisor}"
        refused = rejections.get(request.hypervisor)
        if refused is not None and refused.filter == COMPUTE and count == 1:
            message += f": {refused.reason}"  # down, or in maintenance: why, in one line
        if count > 1:
            message = (
                f"{result.fitted} of {count} instances fit on {request.hypervisor}; "
                "nothing is held (all or nothing)"
            )
    return ClaimRejectedError(message, reasons, rejections, count, result.fitted)


def whole_units(amounts: Amounts) -> dict[Resource, int]:
    """A claim's amounts rounded up to Placement's whole units (MiB, GiB), as an allocation is."""
    return {
        resource: placement_units(resource, amount) * resource.placement_unit
        for resource, amount in amounts.items()
        if amount > 0
    }
