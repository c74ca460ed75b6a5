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
from virtcap.model.reclaim import DomainHistory, ReclaimPolicy
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
            await one.record("hv-a", facts, now=T0)
            await one.record("hv-b", facts, now=T0)
            await second.start()
            other = ReclaimTracker(policy, second)
            await other.start()  # reads hv-a's and hv-b's rows, audits hv-c
            await other.record("hv-c", facts, now=T0)
            await other.keep_only(["hv-c"])  # hv-a and hv-b are not its own: kept
            await one.keep_only(["hv-a"])  # hv-b was its own: forgotten
            return {(h.hypervisor, h.uuid) for h in await first.domain_history()}
        finally:
            await first.close()
            await second.close()

    assert _run(scenario()) == {("hv-a", "uuid-u1"), ("hv-c", "uuid-u1")}


def test_the_candidates_are_made_as_they_are_taken_each_hypervisors_as_when_asked() -> None:
    """A render takes the candidates a slice of the event loop at a time: they are made as they
    are taken (not as one list first), and an audit meanwhile does not change those asked for."""
    stopped = host(domains=(domain("u1", DomainState.SHUTOFF), domain("u2", DomainState.SHUTOFF)))
    tracker = ReclaimTracker(ReclaimPolicy(shutoff_after=1.0, idle_cpu_below=0.05, idle_for=1.0))
    for name in ("hv-a", "hv-b"):
        _run(tracker.record(name, stopped, now=T0))
    expected = list(tracker.candidates())
    taken = tracker.candidates()
    first = next(taken)
    _run(tracker.record("hv-b", host(domains=(domain("u1"),)), now=T0 + 1))  # hv-b's domains started
    assert [first, *taken] == expected
    assert [(found[0], found[1].name) for found in expected] == [
        ("hv-a", "u1"),
        ("hv-a", "u2"),
        ("hv-b", "u1"),
        ("hv-b", "u2"),
    ]
    assert [found[0] for found in tracker.candidates()] == ["hv-a", "hv-a"]
