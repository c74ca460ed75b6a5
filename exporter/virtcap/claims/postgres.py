"""The claims in PostgreSQL: one ledger shared by the exporters auditing the same hypervisors.

The tables are SQLite's version 7 (claims/database.py), with a `schema_version` table in place of
SQLite's user_version and a `ledger_version` row that every write transaction increments. A
database of version 5 (no claim's writer, no start of the configuration's maintenance) or 6 (no
domain history) is migrated at start, in the transaction that reads it, under the ledger-wide lock.
The domain history (reclaimable capacity) is written outside the claims' transactions and does not
move `ledger_version`: the claims do not depend on it.

Every write transaction, on whichever replica, first takes one ledger-wide transaction-level
advisory lock: writers run one at a time. Holding it, the replica compares `ledger_version` with
the version its memory holds and, when another replica wrote meanwhile, reads every claim and
maintenance entry again (within the same transaction) before its fit test. The fit test, the
insert and the increment then commit together, and the lock goes with the commit: a claim is
tested against every claim committed before it, and no claim commits between the test and the
write. A notice on CHANNEL at every commit (and a poll, should a notice be lost with a connection)
lets the other replicas read the change at once, for /metrics.

No call waits more than OPERATION_SECONDS: libpq's connect_timeout, the server's statement and
lock timeouts, and on this side a bound after which the connection is abandoned (psycopg's own
cancellation may take longer, in the background). The password comes from libpq's environment
(PGPASSWORD, PGPASSFILE, ~/.pgpass) or `claims.password_file`, never from the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors

from virtcap.claims.database import CLAIM_COLUMNS, SCHEMA_VERSION
from virtcap.claims.redact import redact
from virtcap.claims.storage import (
    HISTORY_COLUMNS,
    LedgerState,
    StorageError,
    Work,
    assemble_claims,
    history_from_rows,
    history_rows,
)
from virtcap.config import ConfigError
from virtcap.fleet.claim_records import Claim
from virtcap.model.maintenance import Maintenance
from virtcap.model.reclaim import DomainHistory
from virtcap.model.resources import placement_units

log = logging.getLogger(__name__)
_T = TypeVar("_T")

URL_SCHEMES = ("postgresql", "postgres")
CHANNEL = "virtcap_claims"
LEDGER_LOCK = 0x7669727463617000
"""The advisory lock every write transaction takes: "virtcap" in ASCII, as a bigint."""
OPERATION_SECONDS = 3.0
CONNECT_TIMEOUT_SECONDS = 2
"""libpq's connect_timeout (whole seconds, 2 at least); the connection as a whole is bounded by
OPERATION_SECONDS."""
RECONNECT_SECONDS = 1.0
"""After a failed connection, calls fail at once for this long rather than wait again."""
POLL_SECONDS = 2.0
"""How long a replica waits for a notice before it looks at `ledger_version` anyway."""
RETRIES = 3
"""Attempts of a transaction refused for a serialization failure or a deadlock."""
_SERVER_OPTIONS = (
    f"-c statement_timeout={int(OPERATION_SECONDS * 1000)} -c lock_timeout={int(OPERATION_SECONDS * 1000)} "
    "-c idle_in_transaction_session_timeout=10000"
)
_RETRIED = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)

_SCHEMA = (
    """CREATE TABLE claims (
        id text PRIMARY KEY, hypervisor text NOT NULL,
        created_at double precision NOT NULL, expires_at double precision NOT NULL, domain_uuid text,
        owner text NOT NULL, flavor text, created_by text)""",
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
    "CREATE TABLE maintenance_configured (hypervisor text PRIMARY KEY, since double precision NOT NULL)",
    "CREATE TABLE ledger_version (version bigint NOT NULL)",
    "INSERT INTO ledger_version VALUES (0)",
    """CREATE TABLE domain_history (
        hypervisor text NOT NULL, uuid text NOT NULL, state text NOT NULL,
        state_since double precision NOT NULL, cpu_time_ns bigint, cpu_sampled_at double precision,
        idle_since double precision, PRIMARY KEY (hypervisor, uuid))""",
)
_NO_WRITERS = 5
"""The schema before claims recorded their writer (`created_by` NULL: any writer may delete them)."""
_NO_DOMAIN_HISTORY = 6
_MIGRATE_FROM_6 = (_SCHEMA[8],)
_MIGRATE_FROM_5 = ("ALTER TABLE claims ADD COLUMN created_by text", _SCHEMA[5], *_MIGRATE_FROM_6)
_UPSERT_HISTORY = (
    f"INSERT INTO domain_history ({HISTORY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (hypervisor, uuid) DO UPDATE SET state = excluded.state,"
    " state_since = excluded.state_since, cpu_time_ns = excluded.cpu_time_ns,"
    " cpu_sampled_at = excluded.cpu_sampled_at, idle_since = excluded.idle_since"
)


def is_postgres_url(database: str) -> bool:
    return urlsplit(database).scheme in URL_SCHEMES


class PostgresClaimDatabase:
    """The ledger in PostgreSQL, through psycopg's AsyncConnection on the event loop: one
    connection for transactions, one that listens for the other replicas' commits."""

    shared = True

    def __init__(self, url: str, password: str | None = None) -> None:
        self._url = url
        self._password = password
        self.description = redact(url)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._opened = False
        """The schema was found or created: the database can be read and written."""
        self._seen: int | None = None
        """The ledger version this exporter's memory holds (None: read it all at the next look)."""
        self._retry_at = 0.0
        self._up = False
        self._abandoned: set[asyncio.Task[None]] = set()
        self._busy = asyncio.Lock()
        self.on_change: Callable[[], None] | None = None

    @property
    def up(self) -> bool:
        return self._up

    # --- connections

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if time.monotonic() < self._retry_at:
            raise StorageError(f"the claims database {self.description} is unreachable; retrying")
        arguments: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            "application_name": "virtcap",
            "options": _SERVER_OPTIONS,
        }
        if self._password is not None:
            arguments["password"] = self._password
        try:
            async with asyncio.timeout(OPERATION_SECONDS):
                return await psycopg.AsyncConnection.connect(self._url, **arguments)
        except (psycopg.Error, TimeoutError, OSError) as error:
            self._retry_at = time.monotonic() + RECONNECT_SECONDS
            self._failed()
            raise StorageError(
                f"cannot connect to the claims database {self.description}: {_brief(error)}"
            ) from None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
            self._seen = None  # whatever happened meanwhile: read it all again
        return self._conn

    async def _bounded(self, conn: psycopg.AsyncConnection[Any], operation: Awaitable[_T]) -> _T:
        """The operation's result within OPERATION_SECONDS, or StorageError and the connection
        abandoned (in a state nobody knows: it is never used again)."""
        task = asyncio.ensure_future(operation)
        try:
            done, _ = await asyncio.wait({task}, timeout=OPERATION_SECONDS)
        except asyncio.CancelledError:
            self._abandon(conn, task)
            raise
        if not done:
            self._abandon(conn, task)
            self._failed()
            raise StorageError(
                f"the claims database {self.description} did not answer within {OPERATION_SECONDS:g} s"
            )
        try:
            return task.result()
        except psycopg.Error as error:
            if not (conn.broken or conn.closed):
                raise  # the database's answer (a retried conflict, a constraint): the caller's to judge
            self._abandon(conn, task)
            self._failed()
            raise StorageError(f"the claims database {self.description}: {_brief(error)}") from error

    def _abandon(self, conn: psycopg.AsyncConnection[Any], task: asyncio.Future[Any]) -> None:
        if self._conn is conn:
            self._conn = None
        if self._listener is conn:
            self._listener = None

        async def finish() -> None:
            # The socket shut down under it: the operation ends at once with an error of its own.
            # Cancelling it instead would have psycopg ask the server to cancel the query, with
            # libpq's blocking PQcancel in a thread that a hung server holds for as long as it hangs.
            _shut_down(conn)
            await asyncio.wait({task}, timeout=OPERATION_SECONDS)
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            with contextlib.suppress(BaseException):
                task.result()  # retrieved: no "exception never retrieved" in the log
            with contextlib.suppress(Exception):
                await conn.close()

        finishing = asyncio.get_running_loop().create_task(finish())
        self._abandoned.add(finishing)
        finishing.add_done_callback(self._abandoned.discard)

    def _failed(self) -> None:
        if self._listener is not None:
            # it may not know yet (a connection that a dead network keeps open): a new one
            _shut_down(self._listener)
        if self._up:
            log.error("the claims database is unreachable", extra={"database": self.description})
            self._up = False
            if self.on_change is not None:
                self.on_change()

    def _answered(self) -> None:
        if not self._up:
            log.info("the claims database answers", extra={"database": self.description})
            self._up = True
            if self.on_change is not None:
                self.on_change()

    # --- opening and reading

    async def start(self) -> LedgerState | None:
        """The schema created or checked, and the ledger read; None when the database cannot be
        reached (the exporter serves meanwhile, and `changes` opens it later)."""
        try:
            return await self._open()
        except StorageError as error:
            log.error("the claims database cannot be opened yet", extra={"error": str(error)})
            return None
        except psycopg.Error as error:  # reached, and refused: no privilege to create the tables...
            raise ConfigError(f"claims.database: cannot open {self.description}: {_brief(error)}") from None

    async def _open(self) -> LedgerState:
        async with self._busy:
            conn = await self._connection()
            state, self._seen = await self._bounded(conn, self._migrate_and_read(conn))
            self._opened = True
            self._answered()
            return state

    async def _migrate_and_read(self, conn: psycopg.AsyncConnection[Any]) -> tuple[LedgerState, int]:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (LEDGER_LOCK,))
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
            row = await (await conn.execute("SELECT max(version) FROM schema_version")).fetchone()
            found = row[0] if row is not None else None
            if found is None:
                for statement in _SCHEMA:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
                log.info(
                    "claims database created", extra={"database": self.description, "to": SCHEMA_VERSION}
                )
            elif found > SCHEMA_VERSION:
                raise ConfigError(
                    f"claims.database: cannot open {self.description}: schema version {found} was written "
                    f"by a newer virtcap (this one knows {SCHEMA_VERSION})"
                )
            elif found in (_NO_WRITERS, _NO_DOMAIN_HISTORY):
                for statement in _MIGRATE_FROM_5 if found == _NO_WRITERS else _MIGRATE_FROM_6:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION,))
                # the other replicas read the ledger again (their claims gain no writer, but the
                # version tells them the schema is read in full)
                await conn.execute("UPDATE ledger_version SET version = version + 1")
                log.info(
                    "claims database migrated",
                    extra={"database": self.description, "from": found, "to": SCHEMA_VERSION},
                )
            return await self._read(conn)

    async def _read(self, conn: psycopg.AsyncConnection[Any]) -> tuple[LedgerState, int]:
        """Everything, as one snapshot (within a transaction of the caller's), and its version:
        the caller records it as seen once the state is handed over."""

        async def rows(query: str) -> list[Any]:
            return await (await conn.execute(query)).fetchall()

        version = await rows("SELECT version FROM ledger_version")
        claims = assemble_claims(
            await rows(f"SELECT {CLAIM_COLUMNS} FROM claims"),
            await rows("SELECT claim_id, resource_class, amount FROM claim_amounts"),
            await rows("SELECT claim_id, key, value FROM claim_extra_specs"),
            await rows("SELECT claim_id, hypervisor FROM claim_instances ORDER BY claim_id, instance"),
        )
        maintenance = {
            name: Maintenance("api", reason, until, since, set_by)
            for name, reason, until, since, set_by in await rows(
                "SELECT hypervisor, reason, until, since, set_by FROM maintenance"
            )
        }
        configured_since = dict(await rows("SELECT hypervisor, since FROM maintenance_configured"))
        return LedgerState(claims, maintenance, configured_since), int(version[0][0])

    async def _read_if_changed(
        self, conn: psycopg.AsyncConnection[Any]
    ) -> tuple[LedgerState | None, int | None]:
        row = await (await conn.execute("SELECT version FROM ledger_version")).fetchone()
        if row is not None and row[0] == self._seen:
            return None, self._seen
        return await self._read(conn)

    async def wait(self) -> None:
        """Until another replica may have committed: a notice, or POLL_SECONDS passed. Connects
        (again) the listening connection; never raises for an unreachable database."""
        listener = self._listener
        if listener is None or listener.closed:
            try:
                listener = await self._connect()
                await self._bounded(listener, listener.execute(f"LISTEN {CHANNEL}"))
            except (StorageError, psycopg.Error) as error:
                log.debug("not listening for claims", extra={"error": str(error)})
                await asyncio.sleep(RECONNECT_SECONDS)
                return
            self._listener = listener
        try:
            # to its end (the first notice, or the timeout): a generator left open keeps the
            # connection's lock
            async for _notice in listener.notifies(timeout=POLL_SECONDS, stop_after=1):
                pass
        except psycopg.Error:
            self._listener = None
            with contextlib.suppress(Exception):
                await listener.close()

    async def changes(self) -> LedgerState | None:
        """The ledger as other replicas left it, if it changed since this replica last saw it
        (opening the database first, if it never was). Never raises for an unreachable database."""
        try:
            if not self._opened:
                return await self._open()
            async with self._busy:
                conn = await self._connection()
                state, self._seen = await self._bounded(conn, self._snapshot(conn))
                self._answered()
                return state
        except StorageError as error:
            log.debug("claims not followed", extra={"error": str(error)})
        except ConfigError as error:  # a newer virtcap migrated it meanwhile: nothing to do but say so
            log.error("claims database refused", extra={"error": str(error)})
        except psycopg.Error as error:
            log.error("claims not followed", extra={"error": _brief(error)})
        return None

    async def _snapshot(self, conn: psycopg.AsyncConnection[Any]) -> tuple[LedgerState | None, int | None]:
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await self._read_if_changed(conn)

    # --- writing

    async def transaction(self, work: Work[_T]) -> _T:
        if not self._opened:
            try:
                await self._open()
            except ConfigError as error:  # a newer virtcap migrated it while this one waited for it
                raise StorageError(str(error)) from None
            except psycopg.Error as error:
                raise StorageError(f"the claims database {self.description}: {_brief(error)}") from None
            self._seen = None  # what `_open` read is the ledger's to adopt: within the transaction
        async with self._busy:
            for attempt in range(1, RETRIES + 1):
                conn = await self._connection()
                try:
                    return await self._attempt(conn, work)
                except _RETRIED as error:
                    if attempt == RETRIES:
                        raise StorageError(f"the claims database: {_brief(error)}") from None
                    log.warning("claims transaction retried", extra={"error": _brief(error)})
                except psycopg.Error as error:
                    raise StorageError(f"the claims database {self.description}: {_brief(error)}") from None
        raise AssertionError("unreachable")

    async def _attempt(self, conn: psycopg.AsyncConnection[Any], work: Work[_T]) -> _T:
        transaction = _Transaction(self, conn)
        await self._bounded(conn, transaction.begin())
        try:
            changed, self._seen = await self._bounded(conn, transaction.lock_and_read())
            # handed over: the work adopts it before anything else (claims/storage.py)
            result = await work(changed, transaction)
            version = await self._bounded(conn, transaction.finish())
        except BaseException:
            if self._conn is conn and not conn.closed and not conn.broken:  # (not abandoned)
                with contextlib.suppress(Exception):
                    await self._bounded(conn, conn.execute("ROLLBACK"))
            raise
        try:
            await self._bounded(conn, conn.execute("COMMIT"))
        except BaseException:
            self._seen = None
            raise
        if version is not None:
            self._seen = version
        self._answered()
        return result

    # --- domain history (reclaimable capacity): not the claims', no ledger lock, no version

    async def domain_history(self) -> list[DomainHistory]:
        async def read(conn: psycopg.AsyncConnection[Any]) -> list[DomainHistory]:
            cursor = await conn.execute(f"SELECT {HISTORY_COLUMNS} FROM domain_history")
            return history_from_rows(await cursor.fetchall())

        return await self._history_call(read)

    async def write_domain_history(
        self, changed: Iterable[DomainHistory], forgotten: Iterable[tuple[str, str]]
    ) -> None:
        rows = history_rows(changed)
        gone = list(forgotten)

        async def write(conn: psycopg.AsyncConnection[Any]) -> None:
            async with conn.transaction(), conn.cursor() as cursor:
                if gone:
                    await cursor.executemany(
                        "DELETE FROM domain_history WHERE hypervisor = %s AND uuid = %s", gone
                    )
                if rows:
                    await cursor.executemany(_UPSERT_HISTORY, rows)

        await self._history_call(write)

    async def _history_call(self, call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        if not self._opened:
            try:
                await self._open()
            except (ConfigError, psycopg.Error) as error:
                raise StorageError(f"the claims database {self.description}: {error}") from None
        async with self._busy:
            conn = await self._connection()
            try:
                result = await self._bounded(conn, call(conn))
            except psycopg.Error as error:
                raise StorageError(f"the claims database {self.description}: {_brief(error)}") from None
        self._answered()
        return result

    async def close(self) -> None:
        for conn in (self._conn, self._listener):
            if conn is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(OPERATION_SECONDS):
                        await conn.close()
        self._conn = self._listener = None
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=OPERATION_SECONDS)


class _Transaction:
    """One write transaction: its statements on the connection, each bounded."""

    def __init__(self, database: PostgresClaimDatabase, conn: psycopg.AsyncConnection[Any]) -> None:
        self._database = database
        self._conn = conn
        self._changed = False

    async def begin(self) -> None:
        await self._conn.execute("BEGIN")

    async def lock_and_read(self) -> tuple[LedgerState | None, int | None]:
        await self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (LEDGER_LOCK,))
        return await self._database._read_if_changed(self._conn)

    async def finish(self) -> int | None:
        """The ledger's next version and the notice, if anything changed."""
        if not self._changed:
            return None
        row = await (
            await self._conn.execute("UPDATE ledger_version SET version = version + 1 RETURNING version")
        ).fetchone()
        await self._conn.execute(f"NOTIFY {CHANNEL}")
        return int(row[0]) if row is not None else None

    async def _run(self, statements: Callable[[psycopg.AsyncCursor[Any]], Awaitable[bool]]) -> None:
        async def run() -> bool:
            async with self._conn.cursor() as cursor:
                return await statements(cursor)

        if await self._database._bounded(self._conn, run()):
            self._changed = True

    async def insert(self, claim: Claim) -> None:
        async def insert(cursor: psycopg.AsyncCursor[Any]) -> bool:
            await cursor.execute(
                f"INSERT INTO claims ({CLAIM_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    claim.id,
                    claim.hypervisor,
                    claim.created_at,
                    claim.expires_at,
                    claim.domain_uuid,
                    claim.owner,
                    claim.flavor,
                    claim.created_by,
                ),
            )
            amounts = [
                (claim.id, resource.placement_class, placement_units(resource, amount))
                for resource, amount in claim.amounts.items()
                if amount > 0
            ]
            await cursor.executemany("INSERT INTO claim_amounts VALUES (%s, %s, %s)", amounts)
            specs = [(claim.id, key, value) for key, value in claim.extra_specs.items()]
            await cursor.executemany("INSERT INTO claim_extra_specs VALUES (%s, %s, %s)", specs)
            instances = [(claim.id, number, name) for number, name in enumerate(claim.hypervisors)]
            await cursor.executemany("INSERT INTO claim_instances VALUES (%s, %s, %s)", instances)
            return True

        await self._run(insert)

    async def delete(self, ids: Iterable[str]) -> None:
        wanted = list(ids)

        async def delete(cursor: psycopg.AsyncCursor[Any]) -> bool:
            for table in ("claim_amounts", "claim_extra_specs", "claim_instances"):
                await cursor.execute(f"DELETE FROM {table} WHERE claim_id = ANY(%s)", (wanted,))
            await cursor.execute("DELETE FROM claims WHERE id = ANY(%s)", (wanted,))
            # another replica may have deleted them first (both expire the same claims): no change
            return cursor.rowcount > 0

        await self._run(delete)

    async def put_maintenance(self, hypervisor: str, entry: Maintenance) -> None:
        row = (hypervisor, entry.reason or "", entry.until, entry.since or 0.0, entry.set_by or "")

        async def put(cursor: psycopg.AsyncCursor[Any]) -> bool:
            await cursor.execute(
                "INSERT INTO maintenance VALUES (%s, %s, %s, %s, %s) ON CONFLICT (hypervisor) DO UPDATE"
                " SET reason = EXCLUDED.reason, until = EXCLUDED.until, since = EXCLUDED.since,"
                " set_by = EXCLUDED.set_by",
                row,
            )
            return True

        await self._run(put)

    async def delete_maintenance(self, hypervisors: Iterable[str]) -> None:
        names = list(hypervisors)

        async def delete(cursor: psycopg.AsyncCursor[Any]) -> bool:
            await cursor.execute("DELETE FROM maintenance WHERE hypervisor = ANY(%s)", (names,))
            return cursor.rowcount > 0

        await self._run(delete)

    async def put_configured_since(self, since: dict[str, float]) -> None:
        rows = sorted(since.items())

        async def put(cursor: psycopg.AsyncCursor[Any]) -> bool:
            await cursor.executemany(
                "INSERT INTO maintenance_configured VALUES (%s, %s) ON CONFLICT (hypervisor) DO NOTHING", rows
            )
            return True

        await self._run(put)

    async def delete_configured_since(self, hypervisors: Iterable[str]) -> None:
        names = list(hypervisors)

        async def delete(cursor: psycopg.AsyncCursor[Any]) -> bool:
            await cursor.execute("DELETE FROM maintenance_configured WHERE hypervisor = ANY(%s)", (names,))
            return cursor.rowcount > 0

        await self._run(delete)


def _shut_down(conn: psycopg.AsyncConnection[Any]) -> None:
    """No more traffic either way on the connection's socket (its descriptor stays psycopg's)."""
    with contextlib.suppress(Exception), socket.socket(fileno=os.dup(conn.pgconn.socket)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


def _brief(error: BaseException) -> str:
    """The error's first line: libpq's messages run on with hints and context."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
