"""Claims shared by replicas on a real PostgreSQL (tests/support/postgres.py): two `virtcap serve` on one
ledger never overfill a hypervisor, lose nothing acknowledged when one is killed, answer 503 while
the database is away and recover; the schema is created in an empty database; a password never
goes in the URL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.claims_client import HASH, WRITER, auth, call, claim
from tests.support.fleets import fleet_facts, guest
from tests.support.ledgers import hypervisor as engine_hypervisor
from tests.support.ledgers import request as engine_request
from tests.support.ledgers import shapes as engine_shapes
from tests.support.postgres import PASSWORD, USER, Postgres, running_postgres
from tests.support.serving import Server, free_port, running_server, value, wait_for
from virtcap.claims.database import SCHEMA_VERSION
from virtcap.claims.ledger import ClaimLedger, ClaimRejectedError, NotClaimOwnerError
from virtcap.claims.postgres import PostgresClaimDatabase
from virtcap.claims.redact import redact
from virtcap.claims.storage import LedgerState, Writes
from virtcap.config import ClaimSettings, ConfigError
from virtcap.demo import DEMO_DIR
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import HostFacts
from virtcap.model.maintenance import Maintenance
from virtcap.model.resources import GIB, Resource

SMALL = DEMO_DIR / "compute-05.xml"
BIG = DEMO_DIR / "compute-04.xml"


def write_config(directory: Path, database: str, password_file: Path | None = None) -> Path:
    """Two test-driver hypervisors and a writer, the claims in `database`."""
    config = directory / "virtcap.yaml"
    password = f"\n  password_file: {password_file}" if password_file is not None else ""
    config.write_text(
        f"""audit: {{interval: 1h}}
claims:
  database: "{database}"{password}
  default_ttl: 10m
  max_ttl: 1h
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
  - {{name: small, uri: "test://{SMALL}"}}
  - {{name: big, uri: "test://{BIG}"}}
"""
    )
    return config


@pytest.fixture
def with_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporters find the password where libpq looks: PGPASSWORD."""
    monkeypatch.setenv("PGPASSWORD", PASSWORD)


def password_file(directory: Path) -> Path:
    path = directory / "pgpassword"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


def replicas(tmp_path: Path, url: str) -> tuple[Path, Path]:
    """Two configurations of the same fleet and ledger: one with a password file, one with
    PGPASSWORD (the environment the tests give)."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    return write_config(first, url, password_file(first)), write_config(second, url)


def pending(server: Server, hypervisor: str) -> float:
    return value(server.samples(), "virtcap_claims_pending", hypervisor=hypervisor) or 0.0


def free_vcpus(server: Server, hypervisor: str) -> float:
    labels = {"hypervisor": hypervisor, "resource": "vcpu", "unit": "cpus"}
    free = value(server.samples(), "hypervisor_resource_free", **labels)
    assert free is not None, "no free vCPUs in /metrics"
    return free


def claim_ids(server: Server) -> set[str]:
    status, listed = call(server, "GET", "/api/v1/claims")
    assert status == 200, listed
    return {entry["id"] for entry in listed["claims"]}


def stored_claims(postgres: Postgres, database: str) -> set[str]:
    with postgres.connect(database) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM claims")}


def database_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def burst(
    servers: list[Server], count: int, body: dict[str, Any], workers: int = 16
) -> list[tuple[int, Any]]:
    """`count` claims at once, alternately to each server; a server that died answers (0, error)."""

    def one(number: int) -> tuple[int, Any]:
        try:
            return claim(servers[number % len(servers)], **body)
        except OSError as error:
            return 0, str(error)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(count)))


# --- two replicas on one ledger


@pytest.mark.usefixtures("with_password")
def test_two_replicas_racing_200_claims_never_overfill_a_hypervisor(
    tmp_path: Path, postgres: Postgres, claims_url: str
) -> None:
    first, second = replicas(tmp_path, claims_url)
    with (
        running_server(["--config", str(first)], tmp_path / "a") as one,
        running_server(["--config", str(second)], tmp_path / "b") as other,
    ):
        free = free_vcpus(one, "small")
        assert free == free_vcpus(other, "small") > 0
        size = 3
        fitting = math.floor(free / size)
        assert 0 < fitting < 200

        answers = burst([one, other], 200, {"hypervisor": "small", "vcpu": size, "ttl": "30m"})

        statuses = [status for status, _ in answers]
        assert statuses.count(201) == fitting, sorted(set(statuses))
        assert statuses.count(409) == 200 - fitting
        accepted = {body["id"] for status, body in answers if status == 201}
        assert stored_claims(postgres, database_of(claims_url)) == accepted

        # each replica answered its half: its own outcomes add up to the whole
        def counted(outcome: str) -> float:
            return sum(value(s.samples(), "virtcap_claims_total", outcome=outcome) or 0 for s in (one, other))

        wait_for(lambda: counted("created") == fitting, 5, what="claims created, counted")
        wait_for(lambda: counted("rejected") == 200 - fitting, 5, what="claims rejected, counted")
        # each replica shows every claim, whichever took it, within about a second
        for server in (one, other):
            wait_for(
                lambda server=server: pending(server, "small") == fitting, 5, what="pending claims shown"
            )
            assert claim_ids(server) == accepted
            assert free_vcpus(server, "small") == free - fitting * size >= 0
            assert value(server.samples(), "virtcap_claims_database_up") == 1


@pytest.mark.usefixtures("with_password")
def test_a_replica_killed_in_a_burst_loses_no_acknowledged_claim(
    tmp_path: Path, postgres: Postgres, claims_url: str
) -> None:
    first, second = replicas(tmp_path, claims_url)
    with (
        running_server(["--config", str(first)], tmp_path / "a") as victim,
        running_server(["--config", str(second)], tmp_path / "b") as survivor,
    ):
        answers: list[tuple[int, Any]] = []
        acknowledged = threading.Event()

        def claims_in_a_burst() -> None:
            for status, body in burst([victim, survivor], 160, {"hypervisor": "big", "vcpu": 1}, workers=8):
                answers.append((status, body))

        worker = threading.Thread(target=claims_in_a_burst)
        worker.start()

        def some_acknowledged() -> bool:
            # the ledger's count, seen from the survivor: claims are being taken by both
            if pending(survivor, "big") >= 20:
                acknowledged.set()
            return acknowledged.is_set()

        wait_for(some_acknowledged, 30, interval=0.01, what="claims acknowledged")
        victim.process.send_signal(signal.SIGKILL)
        worker.join(timeout=120)
        assert not worker.is_alive()
        victim.process.wait(timeout=10)

        accepted = {body["id"] for status, body in answers if status == 201}
        assert any(status == 0 for status, _ in answers), "the victim died after the burst"
        stored = stored_claims(postgres, database_of(claims_url))
        # every acknowledged claim is stored and counted by the survivor (and so is any the
        # victim committed without living to acknowledge it: held, never lost)
        assert accepted <= stored
        wait_for(lambda: claim_ids(survivor) == stored, 5, what="the survivor lists every stored claim")
        wait_for(lambda: pending(survivor, "big") == len(stored), 5, what="the survivor counts every claim")
        assert value(survivor.samples(), "virtcap_tasks_dead", task="follow-claims") in (None, 0)


def test_claims_answer_503_while_the_database_is_away_and_work_again_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with running_postgres() as own:
        url = own.url(own.create_database())
        with running_server(["--config", str(write_config(tmp_path, url))], tmp_path) as server:
            status, before = claim(server, hypervisor="small", vcpu=1)
            assert status == 201, before

            own.stop()
            started = time.monotonic()
            status, refused = claim(server, hypervisor="small", vcpu=1)
            assert status == 503, refused
            assert time.monotonic() - started < 5
            assert "claims database" in refused["error"] if isinstance(refused, dict) else refused
            status, refused = call(server, "DELETE", f"/api/v1/claims/{before['id']}", headers=auth())
            assert status == 503, refused
            status, refused = call(
                server, "PUT", "/api/v1/hypervisors/small/maintenance", {"reason": "disks"}, auth()
            )
            assert status == 503, refused
            # /metrics goes on, and says so
            wait_for(
                lambda: value(server.samples(), "virtcap_claims_database_up") == 0, 10, what="database down"
            )
            wait_for(lambda: pending(server, "small") == 1, 5, what="the claim shown")
            assert PASSWORD not in server.log_text()

            own.start()
            wait_for(
                lambda: claim(server, hypervisor="small", vcpu=1)[0] == 201,
                15,
                interval=0.5,
                what="claims again",
            )
            wait_for(
                lambda: value(server.samples(), "virtcap_claims_database_up") == 1, 5, what="database up"
            )
            assert before["id"] in claim_ids(server)
            wait_for(lambda: pending(server, "small") == 2, 5, what="both claims shown")
            samples = server.samples()
            assert all(v == 0 for (name, _), v in samples.items() if name == "virtcap_tasks_dead")


def test_an_exporter_starts_without_its_database_and_takes_claims_once_it_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with running_postgres() as own:
        url = own.url(own.create_database())
        own.stop()
        with running_server(["--config", str(write_config(tmp_path, url))], tmp_path) as server:
            assert value(server.samples(), "virtcap_claims_database_up") == 0
            assert value(server.samples(), "hypervisor_up", hypervisor="small") == 1
            started = time.monotonic()
            status, refused = claim(server, hypervisor="small", vcpu=1)
            assert status == 503, refused
            assert time.monotonic() - started < 5
            own.start()
            wait_for(
                lambda: claim(server, hypervisor="small", vcpu=1)[0] == 201, 15, interval=0.5, what="claims"
            )
            wait_for(
                lambda: value(server.samples(), "virtcap_claims_database_up") == 1, 5, what="database up"
            )
            wait_for(lambda: pending(server, "small") == 1, 5, what="the claim shown")


# --- the configuration


def _serve_exit(config: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config)]
    command += ["--web.listen-address", f"127.0.0.1:{free_port()}"]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://virtcap:s3cr3t-in-url@127.0.0.1:5432/claims",
        "postgres://127.0.0.1/claims?user=virtcap&password=s3cr3t-in-url",
    ],
)
def test_a_password_in_the_url_is_a_configuration_error(tmp_path: Path, url: str) -> None:
    config = write_config(tmp_path, url)
    result = _serve_exit(config)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert str(config) in message
    assert "claims.database" in message
    assert "PGPASSWORD" in message and "PGPASSFILE" in message and "claims.password_file" in message
    assert "s3cr3t-in-url" not in result.stderr + result.stdout


def test_an_unreadable_password_file_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-password"
    config = write_config(tmp_path, "postgresql://virtcap@127.0.0.1:1/claims", missing)
    result = _serve_exit(config)
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert str(config) in message and "claims.password_file" in message and str(missing) in message
    empty = tmp_path / "empty-password"
    empty.write_text("")
    result = _serve_exit(write_config(tmp_path, "postgresql://virtcap@127.0.0.1:1/claims", empty))
    assert result.returncode == 2, result.stderr
    assert "is empty" in result.stderr


def test_urls_are_shown_without_password() -> None:
    assert redact("postgresql://virtcap:pw@db.example:5433/claims?sslmode=require&password=x") == (
        "postgresql://virtcap@db.example:5433/claims?sslmode=require"
    )


# --- the schema


def _run(work: Any) -> Any:
    return asyncio.run(work)


def test_an_empty_database_gets_the_schema_and_keeps_what_is_written(
    postgres: Postgres, claims_url: str
) -> None:
    amounts = {Resource.VCPU: 2, Resource.MEMORY: 3 * GIB}
    two = Claim(
        "two",
        "big",
        amounts,
        1.0,
        4e9,
        None,
        "ci",
        "m1.pinned",
        {"hw:cpu_policy": "dedicated"},
        ("big", "small"),
    )
    one = Claim("one", "small", {Resource.DISK: 10 * GIB}, 1.0, 4e9, "0f0e-uuid", "ci")
    entry = Maintenance("api", "disks", until=None, since=2.0, set_by="ops")

    async def write() -> LedgerState | None:
        database = PostgresClaimDatabase(claims_url, PASSWORD)
        first = await database.start()

        async def insert(_changed: LedgerState | None, writes: Writes) -> None:
            await writes.insert(two)
            await writes.insert(one)
            await writes.put_maintenance("big", entry)

        await database.transaction(insert)
        await database.close()
        return first

    assert _run(write()) == LedgerState([], {})
    name = database_of(claims_url)
    with postgres.connect(name) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("SELECT version FROM ledger_version").fetchall() == [(1,)]
        assert conn.execute("SELECT resource_class, amount FROM claim_amounts ORDER BY 1").fetchall() == [
            ("DISK_GB", 10), ("MEMORY_MB", 3072), ("VCPU", 2)
        ]  # fmt: skip

    async def reread() -> LedgerState | None:
        database = PostgresClaimDatabase(claims_url, PASSWORD)
        try:
            return await database.start()
        finally:
            await database.close()

    state = _run(reread())
    assert state is not None
    assert sorted(state.claims, key=lambda c: c.id) == [one, two]
    assert state.maintenance == {"big": entry}


def test_a_newer_schema_is_refused(tmp_path: Path, postgres: Postgres, claims_url: str) -> None:
    name = database_of(claims_url)
    with postgres.connect(name) as conn:
        conn.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))

    async def start() -> None:
        database = PostgresClaimDatabase(claims_url, PASSWORD)
        try:
            await database.start()
        finally:
            await database.close()

    with pytest.raises(ConfigError, match="written by a newer virtcap"):
        _run(start())
    result = _serve_exit(write_config(tmp_path, claims_url, password_file(tmp_path)))
    assert result.returncode == 2, result.stderr
    assert "newer virtcap" in result.stderr


_VERSION_5 = (
    """CREATE TABLE claims (
        id text PRIMARY KEY, hypervisor text NOT NULL,
        created_at double precision NOT NULL, expires_at double precision NOT NULL, domain_uuid text,
        owner text NOT NULL, flavor text)""",
    """CREATE TABLE claim_amounts (
        claim_id text NOT NULL, resource_class text NOT NULL, amount bigint NOT NULL,
        PRIMARY KEY (claim_id, resource_class))""",
    """CREATE TABLE claim_extra_specs (
        claim_id text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (claim_id, key))""",
    """CREATE TABLE claim_instances (
        claim_id text NOT NULL, instance integer NOT NULL, hypervisor text NOT NULL,
        PRIMARY KEY (claim_id, instance))""",
    """CREATE TABLE maintenance (
        hypervisor text PRIMARY KEY, reason text NOT NULL, until double precision,
        since double precision NOT NULL, set_by text NOT NULL)""",
    "CREATE TABLE ledger_version (version bigint NOT NULL)",
    "INSERT INTO ledger_version VALUES (7)",
    "CREATE TABLE schema_version (version integer NOT NULL)",
    "INSERT INTO schema_version VALUES (5)",
    "INSERT INTO claims VALUES ('old', 'h0', 1.0, 4e9, NULL, 'ci', NULL)",
    "INSERT INTO claim_amounts VALUES ('old', 'VCPU', 2)",
    "INSERT INTO claim_instances VALUES ('old', 0, 'h0')",
    "INSERT INTO maintenance VALUES ('h1', 'disks', NULL, 1000000000.0, 'alice')",
)
"""A ledger as virtcap wrote it with schema version 5: a claim without a writer, a maintenance entry."""


def test_a_version_5_database_is_migrated_and_its_claims_are_anyones(
    postgres: Postgres, claims_url: str
) -> None:
    with postgres.connect(database_of(claims_url)) as conn:
        for statement in _VERSION_5:
            conn.execute(statement)
    facts = fleet_facts(engine_shapes((8, 64, 200)))["h0"]

    async def scenario() -> None:
        async with shared_ledger(claims_url, facts) as ledger:
            old = ledger.claims["old"]
            assert (old.created_by, old.amounts, old.hypervisors) == (None, {Resource.VCPU: 2}, ("h0",))
            assert ledger.maintenance["h1"].set_by == "alice"
            # a claim made now records its writer, and another writer cannot delete it
            mine = await ledger.create(replace(engine_request("h0"), created_by="alice"))
            with pytest.raises(NotClaimOwnerError):
                await ledger.delete(mine.id, "bob")
            # the old one has none: any writer deletes it
            assert await ledger.delete("old", "bob") == old
        async with shared_ledger(claims_url, facts) as again:
            assert set(again.claims) == {mine.id} and again.claims[mine.id].created_by == "alice"

    _run(scenario())
    with postgres.connect(database_of(claims_url)) as conn:
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT created_by FROM claims").fetchall() == [("alice",)]


def test_the_fixture_database_needs_the_password(postgres: Postgres, claims_url: str) -> None:
    """The exporters' URLs go through TCP with password authentication: without the password
    there is no way in, so the tests above do find it where they say."""
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(claims_url, password="wrong", connect_timeout=5).close()
    psycopg.connect(claims_url, password=PASSWORD, connect_timeout=5).close()
    assert USER in claims_url and PASSWORD not in claims_url


def test_a_replica_sees_at_once_what_another_committed(claims_url: str) -> None:
    """The notice wakes the other replica well before its poll; its next transaction hands over
    the other's claims before its own work, and what it already saw is not handed over again."""
    first_claim = Claim("first", "small", {Resource.VCPU: 1}, 1.0, 4e9, None, "a")
    second_claim = Claim("second", "big", {Resource.VCPU: 2}, 1.0, 4e9, None, "b")

    async def scenario() -> None:
        one = PostgresClaimDatabase(claims_url, PASSWORD)
        other = PostgresClaimDatabase(claims_url, PASSWORD)
        try:
            assert await one.start() == LedgerState([], {})
            assert await other.start() == LedgerState([], {})
            await other.wait()  # listening from now on (the first call connects and returns)
            assert await other.changes() is None
            handed: list[LedgerState | None] = []

            async def insert(claim: Claim, changed: LedgerState | None, writes: Writes) -> None:
                handed.append(changed)
                await writes.insert(claim)

            waiting = asyncio.create_task(other.wait())
            started = time.monotonic()
            await one.transaction(lambda changed, writes: insert(first_claim, changed, writes))
            await waiting
            assert time.monotonic() - started < 1.0  # the notice, not the 2 s poll
            assert await other.changes() == LedgerState([first_claim], {})
            assert await other.changes() is None

            await one.transaction(lambda changed, writes: insert(second_claim, changed, writes))
            await other.transaction(lambda changed, writes: insert(Claim(
                "third", "big", {Resource.VCPU: 1}, 1.0, 4e9, None, "c"), changed, writes))  # fmt: skip
            assert handed[0] is None and handed[1] is None  # one wrote alone
            assert handed[2] is not None and {c.id for c in handed[2].claims} == {"first", "second"}
            assert other.up and one.up
        finally:
            await one.close()
            await other.close()

    _run(scenario())


def test_a_hung_database_gives_503_within_seconds_and_metrics_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing answers (every server process stopped, connections open): each claim call ends
    within the exporter's bound, /metrics is not held up, and all works again once it answers."""
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with running_postgres() as own:
        url = own.url(own.create_database())
        with running_server(["--config", str(write_config(tmp_path, url))], tmp_path) as server:
            status, before = claim(server, hypervisor="small", vcpu=1)
            assert status == 201, before
            threads = server.threads()
            own.pause()
            try:
                for _ in range(3):
                    started = time.monotonic()
                    status, refused = claim(server, hypervisor="small", vcpu=1)
                    assert status == 503, refused
                    # the exporter's bound is 3 s; the margin is for a loaded machine, not for it
                    assert time.monotonic() - started < 6
                    started = time.monotonic()
                    assert server.get("/metrics")[0] == 200
                    # not held up by the database, whose calls wait up to 3 s
                    assert time.monotonic() - started < 2
                wait_for(lambda: value(server.samples(), "virtcap_claims_database_up") == 0, 10, what="down")
                # no thread left waiting on the hung server (as libpq's cancel request would be)
                assert server.threads() <= threads + 2
            finally:
                own.resume()
            wait_for(lambda: claim(server, hypervisor="small", vcpu=1)[0] == 201, 20, 0.5, "claims again")
            wait_for(lambda: value(server.samples(), "virtcap_claims_database_up") == 1, 5, what="up")
            wait_for(lambda: pending(server, "small") == 2, 5, what="both claims shown")
            assert all(v == 0 for (name, _), v in server.samples().items() if name == "virtcap_tasks_dead")


# --- two ledgers in one process, one database: what each replica's audits do to the other


@asynccontextmanager
async def shared_ledger(url: str, facts: HostFacts) -> AsyncIterator[ClaimLedger]:
    """A replica's ledger on `url`, with one good audit of h0 (`facts`) and its follow task."""
    store = SnapshotStore()
    store.track(["h0"])
    ledger = ClaimLedger(ClaimSettings(database=url), store, PostgresClaimDatabase(url, PASSWORD))
    await ledger.start()
    await ledger.record_audit(engine_hypervisor("h0"), replace(facts, audited_at=time.time()), {})
    following = asyncio.create_task(ledger.follow_forever())
    try:
        yield ledger
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        await ledger.stop()


def test_a_claim_one_replica_reconciled_counts_on_the_other_until_its_own_audit(claims_url: str) -> None:
    """Replicas audit at their own times: when one finds a claim's domain, the other, whose last
    audit has not, must go on counting the claim, or it would count neither and overfill."""
    # 2 vCPUs, 4 GiB, 10 GiB fit 3 times on 2 cpus, 16 GiB (less 512 MiB reserved), 30 GiB
    empty = fleet_facts(engine_shapes((2, 16, 30)))["h0"]
    built = replace(empty, domains=(guest("d0", 4, 2, 10),))  # the domain of the first claim

    async def scenario() -> None:
        async with shared_ledger(claims_url, empty) as one, shared_ledger(claims_url, empty) as other:
            first = await one.create(replace(engine_request("h0"), domain_uuid="uuid-d0"))
            await one.create(engine_request("h0"))
            await other.create(engine_request("h0"))
            with pytest.raises(ClaimRejectedError):
                await one.create(engine_request("h0"))
            # `one` audits the new domain: the claim is reconciled there, its row stays
            await one.record_audit(engine_hypervisor("h0"), replace(built, audited_at=time.time()), {})
            assert first.id not in one.claims and one.outcomes["reconciled"] == 1
            with pytest.raises(ClaimRejectedError):  # the domain holds what the claim did
                await one.create(engine_request("h0"))
            # `other` has not audited it: the claim still counts there, nothing more fits
            await asyncio.sleep(0.5)
            assert first.id in other.claims
            with pytest.raises(ClaimRejectedError):
                await other.create(engine_request("h0"))
            # its own audit finds the domain: reconciled there too, and still nothing fits
            await other.record_audit(engine_hypervisor("h0"), replace(built, audited_at=time.time()), {})
            assert first.id not in other.claims and other.outcomes["reconciled"] == 1
            with pytest.raises(ClaimRejectedError):
                await other.create(engine_request("h0"))
            # a deleted claim goes everywhere, at once
            held = next(iter(other.claims.values()))
            await other.delete(held.id, "builder")
            await asyncio.sleep(0.5)
            assert held.id not in one.claims
            assert (await one.create(engine_request("h0"))).hypervisor == "h0"

    _run(scenario())


def test_a_user_that_may_not_create_the_schema_is_a_configuration_error(
    tmp_path: Path, postgres: Postgres, claims_url: str
) -> None:
    """Reached, and refused for good (PostgreSQL 15 lets only the owner create tables in
    `public`): exit 2 with the database's reason, not a retry forever."""
    name = database_of(claims_url)
    role = f"reader_{name}"
    with postgres.connect(name) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
    url = claims_url.replace(f"//{USER}@", f"//{role}@")
    result = _serve_exit(write_config(tmp_path, url, password_file(tmp_path)))
    assert result.returncode == 2, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert "claims.database" in message and "permission denied" in message, message
    assert PASSWORD not in result.stderr
