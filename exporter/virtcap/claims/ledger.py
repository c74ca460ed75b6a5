"""Claims: capacity reserved for builds in flight, before the hypervisor shows their domain.

A claim is tested with Nova's claim test against the latest snapshot plus the claims already
held, under one lock, so two concurrent claims can never both take the last free resources. It
counts in `used` until the audit finds its domain (reconciled: the domain now carries the
allocation), its TTL passes (expired) or it is deleted. Claims live in SQLite (WAL, synchronous
FULL): one acknowledged with 201 was committed first and survives a crash.

When the database refuses writes (read-only, full, locked, failing disk), creating and deleting
claims fail with ClaimStorageError and change nothing; reconciliation and expiry go on in
memory and delete the rows once the database accepts writes again (see `_forget`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping

from virtcap.claims.database import SQLITE_MAX_INTEGER, ClaimDatabase
from virtcap.claims.records import Claim, ClaimRequest
from virtcap.config import ClaimSettings, Hypervisor
from virtcap.model.facts import HostFacts
from virtcap.model.placement import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.resources import Amounts, Resource, placement_units
from virtcap.service.snapshot import HypervisorSnapshot, PendingClaims
from virtcap.service.store import SnapshotStore

__all__ = [  # the records are defined in virtcap.claims.records, beside the database that stores them
    "ANY_HYPERVISOR",
    "Claim",
    "ClaimDatabase",
    "ClaimLedger",
    "ClaimRejectedError",
    "ClaimRequest",
    "ClaimStorageError",
    "UnknownHypervisorError",
]

log = logging.getLogger(__name__)

ANY_HYPERVISOR = "any"
EXPIRY_PERIOD_SECONDS = 1.0
UNWRITTEN_RETRY_SECONDS = 5.0
"""While the database refuses writes, how often the rows of released claims are tried again."""


class ClaimRejectedError(Exception):
    """The claim does not fit: `reasons` per hypervisor, in Nova's words."""

    def __init__(self, message: str, reasons: Mapping[str, list[str]]) -> None:
        super().__init__(message)
        self.reasons = dict(reasons)


class UnknownHypervisorError(Exception):
    pass


class ClaimStorageError(Exception):
    """The database refused a write: nothing was acknowledged and nothing changed in memory."""


class ClaimLedger:
    def __init__(self, settings: ClaimSettings, store: SnapshotStore, database: ClaimDatabase) -> None:
        self.settings = settings
        self.store = store
        self.database = database
        self.claims: dict[str, Claim] = {}
        self.outcomes: Counter[str] = Counter()
        self._lock = asyncio.Lock()
        self._unwritten_deletes: set[str] = set()
        """Rows the database refused to delete, of claims already released in memory."""
        self._database_failing = False
        self._retry_unwritten_at = 0.0

    async def start(self) -> None:
        """Open the database and release what expired while the exporter was down. Expiry from
        then on is `expire_forever`, run (and restarted should it fail) by the server."""
        for claim in await self.database.open():
            self.claims[claim.id] = claim
        await self.expire()

    async def stop(self) -> None:
        await self.database.close()

    def pending(self) -> Counter[str]:
        return Counter(claim.hypervisor for claim in self.claims.values())

    def _rejected(self) -> None:
        self.outcomes["rejected"] += 1
        self.store.touch()

    async def create(self, request: ClaimRequest) -> Claim:
        """Raises ClaimStorageError, with nothing held, when the database refuses the claim."""
        if any(not 0 <= amount <= SQLITE_MAX_INTEGER for amount in request.amounts.values()):
            raise ValueError(f"every amount must be between 0 and {SQLITE_MAX_INTEGER}")
        if not (math.isfinite(request.ttl) and request.ttl > 0):
            raise ValueError(f"the ttl must be a finite number of seconds above 0, got {request.ttl}")
        async with self._lock:
            # The claim test fits NUMA cells and devices, on every hypervisor for `any`: in a
            # thread, on the snapshots of this moment (immutable; the store's dict is not).
            latest = {name: state.latest for name, state in self.store.hypervisors.items()}
            if request.hypervisor == ANY_HYPERVISOR:
                name, reasons = await asyncio.to_thread(place, latest, request)
            else:
                name = request.hypervisor
                if name not in latest:
                    raise UnknownHypervisorError(name)
                reasons = {name: await asyncio.to_thread(claim_reasons, latest[name], name, request)}
            if name is None or reasons.get(name):
                self._rejected()
                message = (
                    "no hypervisor fits the claim" if name is None else f"the claim does not fit on {name}"
                )
                raise ClaimRejectedError(message, reasons)
            now = time.time()
            claim = Claim(
                id=str(uuid.uuid4()),
                hypervisor=name,
                amounts=whole_units(request.amounts),
                created_at=now,
                expires_at=now + request.ttl,
                domain_uuid=request.domain_uuid,
                owner=request.owner,
                flavor=request.flavor,
                extra_specs=dict(request.extra_specs),
            )
            try:
                await self.database.insert(claim)
            except sqlite3.Error as error:
                # An error reported at commit may come after the row reached the disk: such a row
                # must not come back at the next start as a claim nobody was told about.
                self._unwritten_deletes.add(claim.id)
                raise self._refused("claim not created", error) from None
            self.claims[claim.id] = claim
            self.outcomes["created"] += 1
            # shielded: a cancelled request must not leave the store without the claim it holds
            await asyncio.shield(self._refresh({name}))
        log.info("claim created", extra={"claim": claim.id, "hypervisor": name, "owner": claim.owner})
        return claim

    async def delete(self, claim_id: str) -> Claim | None:
        """Raises ClaimStorageError, with the claim still held, when the database refuses."""
        async with self._lock:
            claim = self.claims.get(claim_id)
            if claim is None:
                return None
            try:
                await self.database.delete([claim.id])
            except sqlite3.Error as error:
                # Released in memory only, it would come back at the next start: the client is
                # told it failed, and may try again.
                raise self._refused("claim not deleted", error) from None
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
                if c.hypervisor == hypervisor.name
                and c.domain_uuid is not None
                and c.domain_uuid.lower() in present
            ]
            await self._forget(found, "reconciled", refresh=False)
            pending = list(self.claims.values())
            snapshot = await asyncio.to_thread(_audited, hypervisor, facts, flavors, pending)
            self.store.record(snapshot, "success")

    async def expire(self) -> None:
        """Release the claims past their TTL, and delete the rows the database refused before."""
        async with self._lock:
            now = time.time()
            await self._forget([c for c in self.claims.values() if c.expires_at <= now], "expired")
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
        try:
            await self.database.delete(claim.id for claim in claims)
        except sqlite3.Error as error:
            self._unwritten_deletes.update(claim.id for claim in claims)
            self._database_failing = True
            log.error(
                f"claims {outcome}, in memory only: the database refuses the delete",
                extra={"claims": [claim.id for claim in claims], "error": str(error)},
            )
        await self._drop(claims, outcome, refresh)

    async def _delete_unwritten(self) -> None:
        if not self._unwritten_deletes or time.monotonic() < self._retry_unwritten_at:
            return
        ids = sorted(self._unwritten_deletes)
        try:
            await self.database.delete(ids)
        except sqlite3.Error as error:
            self._retry_unwritten_at = time.monotonic() + UNWRITTEN_RETRY_SECONDS
            if not self._database_failing:  # once per outage, not at every retry
                log.error("the claims database refuses writes", extra={"error": str(error)})
            self._database_failing = True
            return
        self._unwritten_deletes.difference_update(ids)
        self._database_failing = False
        log.info("the claims database accepts writes again", extra={"deleted": len(ids)})

    def _refused(self, what: str, error: sqlite3.Error) -> ClaimStorageError:
        log.error(f"{what}: the claims database refuses writes", extra={"error": str(error)})
        return ClaimStorageError(f"the claims database refuses writes ({error}); {what}")

    async def _drop(self, claims: list[Claim], outcome: str, refresh: bool = True) -> None:
        for claim in claims:
            del self.claims[claim.id]
            self.outcomes[outcome] += 1
            log.info(f"claim {outcome}", extra={"claim": claim.id, "hypervisor": claim.hypervisor})
        if refresh:
            await self._refresh({claim.hypervisor for claim in claims})

    async def _refresh(self, names: set[str]) -> None:
        """Recompute the capacity of the last audits of these hypervisors with their pending claims,
        in a thread (it fits the claims into the NUMA cells and devices); an audit recorded in the
        meantime already counted them, and is kept."""
        for name in sorted(names):
            state = self.store.hypervisors.get(name)
            if state is None or state.last_good is None:
                continue
            audited = state.last_good
            pending = list(self.claims.values())
            updated = await asyncio.to_thread(_with_claims, audited, pending)
            self.store.replace_good(name, audited, updated)


def _audited(
    hypervisor: Hypervisor, facts: HostFacts, flavors: Mapping[str, Demand], claims: list[Claim]
) -> HypervisorSnapshot:
    return HypervisorSnapshot.audited(hypervisor, facts, flavors, pending_claims(claims, hypervisor.name))


def _with_claims(audited: HypervisorSnapshot, claims: list[Claim]) -> HypervisorSnapshot:
    return audited.with_claims(pending_claims(claims, audited.name))


def pending_claims(claims: Iterable[Claim], hypervisor: str) -> PendingClaims:
    """What the claims on the hypervisor hold, one by one in the order they were made (each took
    its cells, devices and GPU after the ones before it), and together."""
    totals: dict[Resource, int] = {}
    held = []
    for claim in sorted(claims, key=lambda made: made.created_at):
        if claim.hypervisor == hypervisor:
            for resource, amount in claim.amounts.items():
                totals[resource] = totals.get(resource, 0) + amount
            within = claim_within(claim.amounts, claim.extra_specs) if claim.extra_specs else NOTHING_WITHIN
            held.append(Demand(claim.amounts, within))
    return PendingClaims(totals, tuple(held))


def claim_reasons(snapshot: HypervisorSnapshot | None, name: str, request: ClaimRequest) -> list[str]:
    """Every reason the claim does not fit the hypervisor's latest snapshot; empty when it fits."""
    if snapshot is None or not snapshot.up or snapshot.capacity is None:
        return [f"hypervisor {name} is not up: there is no current capacity to claim against"]
    demand = Demand(request.amounts, claim_within(request.amounts, request.extra_specs))
    return snapshot.capacity.claim_test(demand)


def place(
    latest: Mapping[str, HypervisorSnapshot | None], request: ClaimRequest
) -> tuple[str | None, dict[str, list[str]]]:
    """The weigher of `"hypervisor": "any"`: among the hypervisors where the claim fits, the one
    left with the largest share of its limit free after it, on the scarcest requested resource
    (ties by name). It spreads claims, as Nova's default weighers do. None, with every
    hypervisor's reasons, where it fits nowhere."""
    reasons: dict[str, list[str]] = {}
    best: tuple[float, str] | None = None
    for name in sorted(latest):
        snapshot = latest[name]
        failing = claim_reasons(snapshot, name, request)
        if failing:
            reasons[name] = failing
            continue
        assert snapshot is not None and snapshot.capacity is not None
        resources = snapshot.capacity.resources
        shares = []
        for resource, amount in request.amounts.items():
            capacity = resources.get(resource)
            # a resource without a limit (its total unknown) is not scarce: it does not weigh
            if amount > 0 and capacity is not None and capacity.limit and capacity.free is not None:
                shares.append((capacity.free - amount) / capacity.limit)
        score = min(shares) if shares else 1.0
        if best is None or score > best[0]:
            best = (score, name)
    return (best[1], {}) if best is not None else (None, reasons)


def whole_units(amounts: Amounts) -> dict[Resource, int]:
    """A claim's amounts rounded up to Placement's whole units (MiB, GiB), as an allocation is."""
    return {
        resource: placement_units(resource, amount) * resource.placement_unit
        for resource, amount in amounts.items()
        if amount > 0
    }


def claim_within(amounts: Amounts, extra_specs: Mapping[str, str]) -> WithinHost:
    """What a claim's extra specs ask of the cells and devices: a flavor of its vCPUs (shared and
    dedicated, less the PCPU of isolated emulator threads, which is not a vCPU) and memory. Specs
    the API accepted always read; should a row have been edited into ones Nova refuses, the claim
    still holds its amounts, and nothing within the host."""
    vcpus = amounts.get(Resource.VCPU, 0) + amounts.get(Resource.PCPU, 0)
    isolated = extra_specs.get("hw:emulator_threads_policy") == "isolate"
    if isolated and extra_specs.get("hw:cpu_policy") in ("dedicated", "mixed"):
        vcpus -= 1  # nova_request's own rule: one more PCPU for the emulator threads
    try:
        return within_host(vcpus, amounts.get(Resource.MEMORY, 0), extra_specs)
    except ValueError:
        return NOTHING_WITHIN
