"""Shards sharing one claims database (one SQLite file, one PostgreSQL database): each shard holds,
lists, counts, expires and exports the claims of its own hypervisors only, and leaves the other
shards' rows alone; a hypervisor removed from the configuration keeps its claims on its shard."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.claims_client import HASH, WRITER, auth, call, claim
from tests.support.postgres import PASSWORD, Postgres
from tests.support.serving import Server, running_server, series, value, wait_for
from virtcap.claims.database import ClaimDatabase
from virtcap.claims.ledger import ClaimLedger
from virtcap.config import ClaimSettings
from virtcap.demo import DEMO_DIR
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.store import SnapshotStore
from virtcap.model.resources import GIB, Resource
from virtcap.model.sharding import Shard, shard_of

DEMO_FILES = ("compute-04", "compute-05")  # with room for the claims
NAMES = [f"hv-{index:02d}" for index in range(8)]
MINE = {ordinal: sorted(name for name in NAMES if shard_of(name, 2) == ordinal) for ordinal in (0, 1)}


def write_config(path: Path, database: str, names: list[str] = NAMES) -> Path:
    entries = "\n".join(
        f'  - {{name: {name}, uri: "test://{DEMO_DIR / DEMO_FILES[NAMES.index(name) % 2]}.xml"}}'
        for name in names
    )
    path.write_text(
        f"""audit: {{interval: 1h}}
discover_flavors: false
claims:
  database: "{database}"
  default_ttl: 10m
  max_ttl: 1h
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
{entries}
"""
    )
    return path


def shard_args(config: Path, ordinal: int) -> list[str]:
    return ["--config", str(config), "--shard", str(ordinal), "--total-shards", "2"]


def listed(server: Server) -> set[str]:
    status, answer = call(server, "GET", "/api/v1/claims")
    assert status == 200, answer
    return {entry["id"] for entry in answer["claims"]}


def pending_series(server: Server) -> dict[str, float]:
    return {
        dict(labels)["hypervisor"]: count
        for labels, count in series(server.samples(), "virtcap_claims_pending").items()
    }


def outcome(server: Server, name: str) -> float:
    return value(server.samples(), "virtcap_claims_total", outcome=name) or 0.0


def held(server: Server, hypervisor: str, ttl: str = "1h", **body: object) -> dict[str, Any]:
    status, answer = claim(server, hypervisor=hypervisor, vcpu=1, memory="1GiB", ttl=ttl, **body)
    assert status == 201, answer
    return dict(answer)


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_database(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Callable[[], set[str]]]]:
    """One claims database for both shards, and a reader of the claim ids stored in it."""
    if request.param == "sqlite":
        path = tmp_path / "claims.sqlite"

        def sqlite_rows() -> set[str]:
            with sqlite3.connect(path) as conn:
                return {row[0] for row in conn.execute("SELECT id FROM claims")}

        yield str(path), sqlite_rows
        return
    postgres: Postgres = request.getfixturevalue("postgres")
    url: str = request.getfixturevalue("claims_url")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)  # where libpq looks, in the exporters' environment

    def postgres_rows() -> set[str]:
        with postgres.connect(url.rsplit("/", 1)[1]) as conn:
            return {row[0] for row in conn.execute("SELECT id FROM claims")}

    yield url, postgres_rows


def test_each_shard_holds_lists_expires_and_exports_only_its_own_claims(
    tmp_path: Path, shared_database: tuple[str, Callable[[], set[str]]]
) -> None:
    database, stored = shared_database
    config = write_config(tmp_path / "virtcap.yaml", database)
    a, a2, b = MINE[0][0], MINE[0][1], MINE[1][0]
    with ExitStack() as stack:
        zero = stack.enter_context(running_server(shard_args(config, 0), tmp_path))
        # before shard 1 starts: its start reads them from the database (and must leave them)
        long0 = held(zero, a)
        pair = held(zero, "any", count=2)
        short = held(zero, a2, ttl="20s")  # long enough for shard 1 to start on a busy machine
        assert set(pair["hypervisors"]) <= set(MINE[0])
        one = stack.enter_context(running_server(shard_args(config, 1), tmp_path))
        long1 = held(one, b)
        # after shard 1 started: on PostgreSQL shard 1 follows it, and must leave it
        late0 = held(zero, a)
        mine0 = {long0["id"], pair["id"], short["id"], late0["id"]}
        assert listed(zero) == mine0
        assert listed(one) == {long1["id"]}
        for ordinal, server in ((0, zero), (1, one)):
            shown = pending_series(server)
            assert set(shown) == set(MINE[ordinal]), "pending claims of another shard's hypervisors"
        held_on = {name: 0 for name in MINE[0]}
        for answer in (long0, pair, short, late0):
            for name in answer["hypervisors"]:
                held_on[name] += 1
        wait_for(lambda: pending_series(zero) == held_on, 10, what="shard 0's pending claims")
        wait_for(lambda: pending_series(one) == {name: int(name == b) for name in MINE[1]}, 10)
        # another shard's claim is not there to read or delete
        assert call(one, "GET", f"/api/v1/claims/{long0['id']}")[0] == 404
        assert call(one, "DELETE", f"/api/v1/claims/{long0['id']}", headers=auth())[0] == 404
        assert call(zero, "DELETE", f"/api/v1/claims/{long1['id']}", headers=auth())[0] == 404

        wait_for(lambda: outcome(zero, "expired") == 1, 30, what="shard 0's claim expired")
        wait_for(lambda: short["id"] not in stored(), 5, what="the expired claim's row deleted")
        time.sleep(2)  # an expiry round of shard 1 after the claim's TTL
        assert outcome(one, "expired") == 0
        assert listed(zero) == mine0 - {short["id"]}
        assert listed(one) == {long1["id"]}
        assert stored() == mine0 - {short["id"]} | {long1["id"]}
        assert outcome(zero, "created") == 4 and outcome(one, "created") == 1


def test_a_removed_hypervisor_keeps_its_claims_on_its_shard_until_added_again(tmp_path: Path) -> None:
    """As without shards: a reload that removes a hypervisor leaves its claims held (listed, and
    expired at their TTL), and so does a start without it; the shard its name hashes to holds
    them, and counts them again once it is configured again."""
    database = str(tmp_path / "claims.sqlite")
    config = write_config(tmp_path / "virtcap.yaml", database)
    removed = MINE[0][0]
    without = [name for name in NAMES if name != removed]
    with running_server(shard_args(config, 1), tmp_path) as one:
        with running_server(shard_args(config, 0), tmp_path) as zero:
            kept = held(zero, removed)
            before = zero.log_text().count("configuration reloaded")
            write_config(config, database, without)
            zero.process.send_signal(signal.SIGHUP)
            wait_for(lambda: zero.log_text().count("configuration reloaded") > before, 10, what="reload")
            assert listed(zero) == {kept["id"]}
            wait_for(lambda: removed not in pending_series(zero), 10, what="its series gone")
        with running_server(shard_args(config, 0), tmp_path) as zero:
            assert listed(zero) == {kept["id"]}  # read at start, though not configured
            before = zero.log_text().count("configuration reloaded")
            write_config(config, database)
            zero.process.send_signal(signal.SIGHUP)
            wait_for(lambda: zero.log_text().count("configuration reloaded") > before, 10, what="reload")
            wait_for(lambda: pending_series(zero).get(removed) == 1, 10, what="its claim counted again")
        assert listed(one) == set()
        assert removed not in pending_series(one)


def test_a_claim_made_before_sharding_that_spans_shards_is_held_by_each_and_counted_once(
    tmp_path: Path,
) -> None:
    """Placement keeps a claim within a shard; one placed before the fleet was split may span two.
    Each shard holds it (a fit test on its hypervisors counts it), the shard of its first instance
    counts its expiry."""
    settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
    now = time.time()
    amounts = {Resource.VCPU: 1, Resource.MEMORY: GIB}
    first, second = MINE[1][0], MINE[0][0]
    spanning = Claim("spanning", first, amounts, now, now + 2, None, "ci", hypervisors=(first, second))
    gone = next(f"gone-{index}" for index in range(100) if shard_of(f"gone-{index}", 2) == 0)
    unconfigured = Claim("unconfigured", gone, amounts, now, now + 3600, None, "ci")

    async def scenario() -> None:
        writer = ClaimDatabase(settings.database)
        await writer.open()
        await writer.insert(spanning)
        await writer.insert(unconfigured)
        await writer.close()
        ledgers = [
            ClaimLedger(settings, SnapshotStore(), ClaimDatabase(settings.database), Shard(ordinal, 2))
            for ordinal in (0, 1)
        ]
        for ledger in ledgers:
            await ledger.start()
        assert set(ledgers[0].claims) == {"spanning", "unconfigured"}
        assert set(ledgers[1].claims) == {"spanning"}
        await asyncio.sleep(max(0.0, spanning.expires_at - time.time()) + 0.1)
        for ledger in ledgers:
            await ledger.expire()
        assert [dict(ledger.outcomes) for ledger in ledgers] == [{}, {"expired": 1}]
        assert set(ledgers[0].claims) == {"unconfigured"} and not ledgers[1].claims
        for ledger in ledgers:
            await ledger.stop()

    asyncio.run(scenario())
    with sqlite3.connect(settings.database) as conn:
        assert {row[0] for row in conn.execute("SELECT id FROM claims")} == {"unconfigured"}
