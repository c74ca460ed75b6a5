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
import concurrent.futures
import contextlib
import logging
import math
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from virtcap.config import ClaimSettings, ConfigError
from virtcap.model.capacity import RESOURCES, Amounts, Resource, claim_test
from virtcap.model.facts import HostFacts
from virtcap.service.snapshot import HypervisorSnapshot
from virtcap.service.store import SnapshotStore
from virtcap.units import MAX_SIZE

log = logging.getLogger(__name__)

ANY_HYPERVISOR = "any"
EXPIRY_PERIOD_SECONDS = 1.0
UNWRITTEN_RETRY_SECONDS = 5.0
"""While the database refuses writes, how often the rows of released claims are tried again."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Claim:
    id: str
    hypervisor: str
    amounts: Amounts
    created_at: float
    expires_at: float
    domain_uuid: str | None
    owner: str


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    hypervisor: str
    amounts: Amounts
    ttl: float
    domain_uuid: str | None
    owner: str


class ClaimRejectedError(Exception):
    """The claim does not fit: `reasons` per hypervisor, in Nova's words."""

    def __init__(self, message: str, reasons: Mapping[str, list[str]]) -> None:
        super().__init__(message)
        self.reasons = dict(reasons)


class UnknownHypervisorError(Exception):
    pass


class ClaimStorageError(Exception):
    """The database refused a write: nothing was acknowledged and nothing changed in memory."""


SQLITE_MAX_INTEGER = MAX_SIZE
"""The largest INTEGER SQLite stores (a larger amount would raise OverflowError on insert), which
is why sizes are bounded there in the first place."""


class ClaimDatabase:
    """SQLite on one dedicated thread: the event loop never waits on a disk write."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="claims-db")
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> list[Claim]:
        try:
            return await self._run(self._open)
        except (OSError, sqlite3.Error) as error:
            raise ConfigError(f"claims.database: cannot open {self.path}: {error}") from None

    def _open(self) -> list[Claim]:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            """CREATE TABLE IF NOT EXISTS claims (
                id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
                vcpu INTEGER NOT NULL, pcpu INTEGER NOT NULL, memory INTEGER NOT NULL, disk INTEGER NOT NULL,
                created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL)"""
        )
        self._conn = conn
        rows = conn.execute(
            "SELECT id, hypervisor, vcpu, pcpu, memory, disk, created_at, expires_at, domain_uuid, owner"
            " FROM claims"
        ).fetchall()
        return [
            Claim(
                id=row[0],
                hypervisor=row[1],
                amounts=dict(zip(RESOURCES, (row[2], row[3], row[4], row[5]), strict=True)),
                created_at=row[6],
                expires_at=row[7],
                domain_uuid=row[8],
                owner=row[9],
            )
            for row in rows
        ]

    async def insert(self, claim: Claim) -> None:
        await self._run(self._insert, claim)

    def _insert(self, claim: Claim) -> None:
        a = claim.amounts
        row = (
            claim.id,
            claim.hypervisor,
            a[Resource.VCPU],
            a[Resource.PCPU],
            a[Resource.MEMORY],
            a[Resource.DISK],
            claim.created_at,
            claim.expires_at,
            claim.domain_uuid,
            claim.owner,
        )
        self._write("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [row])

    async def delete(self, ids: Iterable[str]) -> None:
        await self._run(self._delete, list(ids))

    def _delete(self, ids: list[str]) -> None:
        self._write("DELETE FROM claims WHERE id = ?", [(i,) for i in ids])

    def _write(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        """One transaction: after an error (full, read-only, I/O) none of the rows changed, and
        whatever the error, no transaction is left open to fail every later write."""
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(statement, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        if self._conn is not None:
            await self._run(self._conn.close)
        self._executor.shutdown(wait=True)

    async def _run(self, function: Any, *args: Any) -> _T:
        result: _T = await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)
        return result


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

    def claimed(self, hypervisor: str) -> dict[Resource, int]:
        totals = dict.fromkeys(RESOURCES, 0)
        for claim in self.claims.values():
            if claim.hypervisor == hypervisor:
                for resource, amount in claim.amounts.items():
                    totals[resource] += amount
        return totals

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
            name = self._place(request) if request.hypervisor == ANY_HYPERVISOR else request.hypervisor
            if request.hypervisor != ANY_HYPERVISOR:
                reasons = self._reasons(name, request.amounts)
                if reasons:
                    self._rejected()
                    raise ClaimRejectedError(f"the claim does not fit on {name}", {name: reasons})
            now = time.time()
            claim = Claim(
                id=str(uuid.uuid4()),
                hypervisor=name,
                amounts=dict(request.amounts),
                created_at=now,
                expires_at=now + request.ttl,
                domain_uuid=request.domain_uuid,
                owner=request.owner,
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
            self.store.apply_claims(name, self.claimed(name))
        log.info("claim created", extra={"claim": claim.id, "hypervisor": name, "owner": claim.owner})
        return claim

    def _reasons(self, name: str, amounts: Amounts) -> list[str]:
        state = self.store.hypervisors.get(name)
        if state is None:
            raise UnknownHypervisorError(name)
        snapshot = state.latest
        if snapshot is None or not snapshot.up or snapshot.capacity is None:
            return [f"hypervisor {name} is not up: there is no current capacity to claim against"]
        return claim_test(snapshot.capacity.resources, amounts)

    def _place(self, request: ClaimRequest) -> str:
        """The weigher of `"hypervisor": "any"`: among the hypervisors where the claim fits, the one
        left with the largest share of its limit free after it, on the scarcest requested resource
        (ties by name). It spreads claims, as Nova's default weighers do."""
        reasons: dict[str, list[str]] = {}
        best: tuple[float, str] | None = None
        for name in sorted(self.store.hypervisors):
            failing = self._reasons(name, request.amounts)
            if failing:
                reasons[name] = failing
                continue
            state = self.store.hypervisors[name]
            assert state.latest is not None and state.latest.capacity is not None
            resources = state.latest.capacity.resources
            shares = []
            for resource, amount in request.amounts.items():
                capacity = resources.get(resource)
                # a resource without a limit (its total unknown) is not scarce: it does not weigh
                if amount > 0 and capacity is not None and capacity.limit and capacity.free is not None:
                    shares.append((capacity.free - amount) / capacity.limit)
            score = min(shares) if shares else 1.0
            if best is None or score > best[0]:
                best = (score, name)
        if best is None:
            self._rejected()
            raise ClaimRejectedError("no hypervisor fits the claim", reasons)
        return best[1]

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
            self._drop([claim], "deleted")
        return claim

    async def record_audit(self, snapshot: HypervisorSnapshot, facts: HostFacts) -> None:
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
                if c.hypervisor == snapshot.name
                and c.domain_uuid is not None
                and c.domain_uuid.lower() in present
            ]
            await self._forget(found, "reconciled", refresh=False)
            self.store.record(snapshot.with_claims(self.claimed(snapshot.name)), "success")

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
        self._drop(claims, outcome, refresh)

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

    def _drop(self, claims: list[Claim], outcome: str, refresh: bool = True) -> None:
        for claim in claims:
            del self.claims[claim.id]
            self.outcomes[outcome] += 1
            log.info(f"claim {outcome}", extra={"claim": claim.id, "hypervisor": claim.hypervisor})
        if refresh:
            for name in {claim.hypervisor for claim in claims}:
                self.store.apply_claims(name, self.claimed(name))
