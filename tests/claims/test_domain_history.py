"""The domain history of reclaimable capacity (virtcap.model.reclaim) in both claims databases:
kept across a restart, domains forgotten, and the schema migrated from version 6."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from tests.support.factories import domain, host
from tests.support.postgres import PASSWORD, Postgres
from virtcap.claims.database import SCHEMA_VERSION, ClaimDatabase
from virtcap.claims.postgres import PostgresClaimDatabase
from virtcap.claims.storage import ClaimStorage
from virtcap.fleet.claim_records import Claim
from virtcap.model.facts import DomainState
from virtcap.model.reclaim import DomainHistory, ReclaimableDomain, ReclaimPolicy
from virtcap.model.resources import Resource
from virtcap.service.reclaim import ReclaimTracker

T0 = 1_700_000_000.0
STOPPED = DomainHistory("hv1", "u-stopped", DomainState.SHUTOFF, T0)
IDLE = DomainHistory("hv1", "u-idle", DomainState.RUNNING, T0 - 5, 2**62, T0 + 30.5, T0 + 0.25)
OTHER_HOST = DomainHistory("hv2", "u-stopped", DomainState.RUNNING, T0 + 1, None, None, None)


def _run(work: Any) -> Any:
    return asyncio.run(work)


async def _history(database: ClaimStorage) -> set[DomainHistory]:
    try:
        await database.start()
        return set(await database.domain_history())
    finally:
        await database.close()


async def _write_and_forget(database: ClaimStorage) -> None:
    try:
        await database.start()
        await database.write_domain_history([STOPPED, IDLE, OTHER_HOST], [])
        moved = DomainHistory("hv1", "u-idle", DomainState.RUNNING, T0 - 5, 2**62 + 7, T0 + 60.0, T0 + 0.25)
        # the same UUID on another hypervisor is another domain: only hv1's is forgotten
        await database.write_domain_history([moved], [("hv1", "u-stopped")])
    finally:
        await database.close()


EXPECTED = {
    DomainHistory("hv1", "u-idle", DomainState.RUNNING, T0 - 5, 2**62 + 7, T0 + 60.0, T0 + 0.25),
    OTHER_HOST,
}


def test_sqlite_keeps_the_history_across_a_restart_and_forgets_domains(tmp_path: Path) -> None:
    path = str(tmp_path / "claims.sqlite")
    _run(_write_and_forget(ClaimDatabase(path)))
    assert _run(_history(ClaimDatabase(path))) == EXPECTED


def test_a_version_6_sqlite_file_gains_the_history_and_keeps_its_claims(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    claim = Claim("c1", "hv1", {Resource.VCPU: 2}, 1.0, 2.0, None, "ci")

    async def version_6() -> None:
        database = ClaimDatabase(str(path))
        await database.open()
        await database.insert(claim)
        await database.close()

    _run(version_6())
    with sqlite3.connect(path) as old:
        old.execute("DROP TABLE domain_history")
        old.execute("PRAGMA user_version = 6")

    async def reopen() -> tuple[list[Claim], list[DomainHistory]]:
        database = ClaimDatabase(str(path))
        try:
            claims = await database.open()
            await database.write_domain_history([STOPPED], [])
            return claims, await database.domain_history()
        finally:
            await database.close()

    assert _run(reopen()) == ([claim], [STOPPED])
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7


def test_postgresql_keeps_the_history_across_a_restart_and_forgets_domains(claims_url: str) -> None:
    _run(_write_and_forget(PostgresClaimDatabase(claims_url, PASSWORD)))
    # another replica (a failover) reads what the first wrote
    assert _run(_history(PostgresClaimDatabase(claims_url, PASSWORD))) == EXPECTED


def test_a_version_6_postgresql_ledger_gains_the_history(postgres: Postgres, claims_url: str) -> None:
    _run(_history(PostgresClaimDatabase(claims_url, PASSWORD)))
    name = claims_url.rsplit("/", 1)[1]
    with postgres.connect(name) as conn:
        conn.execute("DROP TABLE domain_history")
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version VALUES (6)")

    async def write_and_read() -> set[DomainHistory]:
        database = PostgresClaimDatabase(claims_url, PASSWORD)
        try:
            await database.start()
            await database.write_domain_history([STOPPED], [])
            return set(await database.domain_history())
        finally:
            await database.close()

    assert _run(write_and_read()) == {STOPPED}
    with postgres.connect(name) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)


def test_a_hypervisor_dropped_here_is_forgotten_and_another_shards_are_kept(tmp_path: Path) -> None:
    """Shards sharing one database read each other's rows: a shard forgets only the hypervisors it
    audited itself and no longer does."""
    path = str(tmp_path / "claims.sqlite")
    facts = host(domains=(domain("u1", DomainState.SHUTOFF),))
    policy = ReclaimPolicy(shutoff_after=1.0, idle_cpu_below=0.05, idle_for=1.0)

    async def scenario() -> set[tuple[str, str]]:
        first, second = ClaimDatabase(path), ClaimDatabase(path)
        try:
            await first.start()
            one = ReclaimTracker(policy, first)
            one.record("hv-a", facts, now=T0)
            one.record("hv-b", facts, now=T0)
            assert await one.flush()
            await second.start()
            other = ReclaimTracker(policy, second)
            await other.start()  # reads hv-a's and hv-b's rows, audits hv-c
            other.record("hv-c", facts, now=T0)
            other.keep_only(["hv-c"])  # hv-a and hv-b are not its own: kept
            assert await other.flush()
            one.keep_only(["hv-a"])  # hv-b was its own: forgotten
            assert await one.flush()
            return {(h.hypervisor, h.uuid) for h in await first.domain_history()}
        finally:
            await first.close()
            await second.close()

    assert _run(scenario()) == {("hv-a", "uuid-u1"), ("hv-c", "uuid-u1")}


def _names(found: list[ReclaimableDomain]) -> list[tuple[str, str]]:
    return [(domain.hypervisor, domain.domain.name) for domain in found]


def test_a_hypervisors_reclaimable_domains_are_decided_again_only_when_they_can_change() -> None:
    """A render asks for every hypervisor's reclaimable domains: they are decided again after an
    audit of that hypervisor, or once one of its candidates has become reclaimable since (time
    alone), and otherwise kept, as the same list."""
    policy = ReclaimPolicy(shutoff_after=10.0, idle_cpu_below=0.05, idle_for=10.0)
    tracker = ReclaimTracker(policy)
    tracker.record("hv-a", host(domains=(domain("u1", DomainState.SHUTOFF),)), now=T0)
    stopped_later = host(domains=(domain("u1", DomainState.SHUTOFF), domain("u2", DomainState.SHUTOFF)))
    tracker.record("hv-b", stopped_later, now=T0 + 5)
    assert tracker.hypervisors() == ["hv-a", "hv-b"]
    assert tracker.reclaimable_on("hv-a", T0 + 9.5) == []
    assert _names(tracker.reclaimable_on("hv-a", T0 + 10)) == [("hv-a", "u1")]
    kept = tracker.reclaimable_on("hv-a", T0 + 10)
    assert tracker.reclaimable_on("hv-a", T0 + 1000) is kept  # nothing left to change with time
    assert tracker.reclaimable_on("hv-a", T0 + 5) == []  # a clock gone back: decided again
    assert _names(tracker.reclaimable_domains(T0 + 15)) == [("hv-a", "u1"), ("hv-b", "u1"), ("hv-b", "u2")]
    # hv-b's domains started: its next audit decides again, whatever the time
    tracker.record("hv-b", host(domains=(domain("u1"),)), now=T0 + 16)
    assert tracker.reclaimable_on("hv-b", T0 + 17) == []
    assert tracker.reclaimable_on("unknown", T0) == []


def test_the_kept_decisions_are_those_made_afresh_at_every_time() -> None:
    """Decided at times in any order, with audits between, each answer is what a tracker that
    never decided before finds at that time."""
    policy = ReclaimPolicy(shutoff_after=7.0, idle_cpu_below=0.05, idle_for=3.0)
    audits = [
        host(domains=(domain("u1", DomainState.SHUTOFF), domain("u2"), domain("u3", DomainState.SHUTOFF))),
        host(domains=(domain("u1"), domain("u2", DomainState.SHUTOFF))),
    ]
    kept = ReclaimTracker(policy)
    asked = [(T0, (1, 8, 3, 12, 7, 30, 2)), (T0 + 40, (41, 49, 46, 60))]
    for facts, (audited_at, asked_at) in zip(audits, asked, strict=True):
        kept.record("hv-a", facts, now=audited_at)
        for offset in asked_at:
            fresh = ReclaimTracker(policy)
            fresh.record("hv-a", facts, now=audited_at)
            at = T0 + offset
            assert _names(kept.reclaimable_on("hv-a", at)) == _names(fresh.reclaimable_on("hv-a", at)), at


def test_a_locked_database_holds_up_no_audit_and_gets_the_newest_history_once_it_accepts(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock: audits go on recording (nothing of theirs waits for the
    database), each write waits for SQLite's busy timeout and fails, and once the lock is released
    the rows are those of the last audit, with the domains that went meanwhile deleted, even while
    a write of them was under way."""
    path = tmp_path / "claims.sqlite"
    policy = ReclaimPolicy(shutoff_after=1.0, idle_cpu_below=0.05, idle_for=1.0)

    def stored() -> dict[str, DomainState]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT uuid, state FROM domain_history WHERE hypervisor = 'hv-a'")
            return {uuid: DomainState(state) for uuid, state in rows}

    async def scenario(holder: sqlite3.Connection) -> None:
        database = ClaimDatabase(str(path))
        await database.start()
        try:
            tracker = ReclaimTracker(policy, database)
            tracker.record("hv-a", host(domains=(domain("u1", DomainState.SHUTOFF), domain("u2"))), now=T0)
            assert await tracker.flush()
            assert stored() == {"uuid-u1": DomainState.SHUTOFF, "uuid-u2": DomainState.RUNNING}

            holder.execute("BEGIN EXCLUSIVE")
            tracker.record("hv-a", host(domains=(domain("u1"), domain("u3"))), now=T0 + 1)
            writing = asyncio.create_task(tracker.flush())
            await asyncio.sleep(0.5)  # the write waits for the lock
            # audited meanwhile: u3, whose row is being written, is gone already; u4 came
            tracker.record(
                "hv-a", host(domains=(domain("u1"), domain("u4", DomainState.SHUTOFF))), now=T0 + 2
            )
            assert not await writing
            assert not await tracker.flush()
            holder.execute("ROLLBACK")
            assert stored() == {"uuid-u1": DomainState.SHUTOFF, "uuid-u2": DomainState.RUNNING}

            assert await tracker.flush()
            assert stored() == {"uuid-u1": DomainState.RUNNING, "uuid-u4": DomainState.SHUTOFF}
            assert await tracker.flush()  # nothing left to write
        finally:
            await database.close()

    with sqlite3.connect(path, isolation_level=None) as holder:
        _run(scenario(holder))
