"""Claims: capacity reserved for builds in flight, before the hypervisor shows their domain.

A claim is tested with Nova's claim test against the latest snapshot plus the claims already
held, under one lock, so two concurrent claims can never both take the last free resources. It
counts in `used` until the audit finds its domain (reconciled: the domain now carries the
allocation), its TTL passes (expired) or it is deleted. Claims live in SQLite (WAL, synchronous
FULL): one acknowledged with 201 was committed first and survives a crash.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from virtcap.config import ClaimSettings, ConfigError
from virtcap.facts import HostFacts
from virtcap.model import RESOURCES, Amounts, Resource, claim_test
from virtcap.snapshot import HypervisorSnapshot
from virtcap.store import SnapshotStore

log = logging.getLogger("virtcap.claims")

ANY_HYPERVISOR = "any"
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
        assert self._conn is not None
        a = claim.amounts
        self._conn.execute(
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
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
            ),
        )

    async def delete(self, ids: Iterable[str]) -> None:
        await self._run(self._delete, list(ids))

    def _delete(self, ids: list[str]) -> None:
        assert self._conn is not None
        self._conn.executemany("DELETE FROM claims WHERE id = ?", [(i,) for i in ids])

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
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for claim in await self.database.open():
            self.claims[claim.id] = claim
        await self.expire()
        self._expiry = asyncio.create_task(self._expire_forever(), name="expire-claims")

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
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
            await self.database.insert(claim)
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
            shares = [
                (resources[r].free - amount) / resources[r].limit
                for r, amount in request.amounts.items()
                if amount > 0 and r in resources and resources[r].limit > 0
            ]
            score = min(shares) if shares else 1.0
            if best is None or score > best[0]:
                best = (score, name)
        if best is None:
            self._rejected()
            raise ClaimRejectedError("no hypervisor fits the claim", reasons)
        return best[1]

    async def delete(self, claim_id: str) -> Claim | None:
        async with self._lock:
            claim = self.claims.get(claim_id)
            if claim is None:
                return None
            await self._release([claim], "deleted")
        return claim

    async def record_audit(self, snapshot: HypervisorSnapshot, facts: HostFacts) -> None:
        """Record a successful audit with the claims still pending on its hypervisor.

        Claims whose domain now exists there are released first: the domain carries the
        allocation from this audit on, so nothing is counted twice. Under the lock, so that a
        claim created meanwhile is never left out of the recorded capacity.
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
            await self._release(found, "reconciled", refresh=False)
            self.store.record(snapshot.with_claims(self.claimed(snapshot.name)), "success")

    async def expire(self) -> None:
        now = time.time()
        expired = [claim for claim in self.claims.values() if claim.expires_at <= now]
        if expired:
            async with self._lock:
                await self._release([c for c in expired if c.id in self.claims], "expired")

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.expire()
            except sqlite3.Error as error:
                log.error("cannot expire claims", extra={"error": str(error)})

    async def _release(self, claims: list[Claim], outcome: str, refresh: bool = True) -> None:
        if not claims:
            return
        await self.database.delete(claim.id for claim in claims)
        for claim in claims:
            del self.claims[claim.id]
            self.outcomes[outcome] += 1
            log.info(f"claim {outcome}", extra={"claim": claim.id, "hypervisor": claim.hypervisor})
        if refresh:
            for name in {claim.hypervisor for claim in claims}:
                self.store.apply_claims(name, self.claimed(name))
