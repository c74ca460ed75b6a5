"""The claims' SQLite database: one row per claim, one row per claimed class (what one instance
holds), one row per extra spec of a claim that carries a flavor's, one row per instance (its
hypervisor); and one row per hypervisor put into maintenance through the API.

Amounts are stored per Placement class in Placement's whole units (VCPU, MEMORY_MB, DISK_GB,
CUSTOM_...), so a new class needs no new column. The extra specs (`hw:cpu_policy`,
`hw:mem_page_size`, `pci_passthrough:alias`, ...) are what places a claim within its hypervisor's
NUMA cells and devices. Older schemas are migrated in place, in one transaction, at the first
start: version 1 (virtcap 0.1) had a column per class, in bytes; version 2 had no extra specs;
version 3 had one instance per claim, on the claim's hypervisor; version 4 had no maintenance;
version 5 recorded no claim's writer (its claims keep none: any writer may delete them) and not
when the configuration's maintenance was first seen; version 6 kept no domain history (reclaimable
capacity, model/reclaim.py). A file of a newer version is refused, as an older virtcap refuses a
file of version 7.

WAL with synchronous FULL: a claim acknowledged with 201 was committed first and survives a crash.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from virtcap.claims.storage import (
    HISTORY_COLUMNS,
    HistoryRow,
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
from virtcap.units import MAX_SIZE

log = logging.getLogger(__name__)
_T = TypeVar("_T")

SCHEMA_VERSION = 7
_VIRTCAP_0_1 = 1
_PER_CLASS_ROWS = 2
_ONE_INSTANCE = 3
_NO_MAINTENANCE = 4
_NO_WRITERS = 5
_NO_DOMAIN_HISTORY = 6
"""The earlier schema versions: a column per class, then a row per class without extra specs,
then one instance per claim, then no maintenance, then no claim's writer, then no domain history."""
SQLITE_MAX_INTEGER = MAX_SIZE
"""The largest INTEGER SQLite stores (a larger amount would raise OverflowError on insert), which
is why sizes are bounded there in the first place."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS claims (
        id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
        created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL,
        flavor TEXT, created_by TEXT)""",
    """CREATE TABLE IF NOT EXISTS claim_amounts (
        claim_id TEXT NOT NULL, resource_class TEXT NOT NULL, amount INTEGER NOT NULL,
        PRIMARY KEY (claim_id, resource_class))""",
    """CREATE TABLE IF NOT EXISTS claim_extra_specs (
        claim_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (claim_id, key))""",
    # `claims.hypervisor` stays the first instance's, so that the file reads as version 3 did
    """CREATE TABLE IF NOT EXISTS claim_instances (
        claim_id TEXT NOT NULL, instance INTEGER NOT NULL, hypervisor TEXT NOT NULL,
        PRIMARY KEY (claim_id, instance))""",
    # `until` NULL: until it is lifted; times in seconds since the epoch, as the claims'
    """CREATE TABLE IF NOT EXISTS maintenance (
        hypervisor TEXT PRIMARY KEY, reason TEXT NOT NULL, until REAL, since REAL NOT NULL,
        set_by TEXT NOT NULL)""",
    # when the exporter first saw the configuration's maintenance of a hypervisor in effect: its
    # start, which restarts keep
    """CREATE TABLE IF NOT EXISTS maintenance_configured (
        hypervisor TEXT PRIMARY KEY, since REAL NOT NULL)""",
    # per domain, since when it has been in its state and a summary of its CPU use
    # (virtcap.model.reclaim.DomainHistory); not part of the claims' transactions
    """CREATE TABLE IF NOT EXISTS domain_history (
        hypervisor TEXT NOT NULL, uuid TEXT NOT NULL, state TEXT NOT NULL, state_since REAL NOT NULL,
        cpu_time_ns INTEGER, cpu_sampled_at REAL, idle_since REAL,
        PRIMARY KEY (hypervisor, uuid))""",
)
_ONE_INSTANCE_EACH = "INSERT INTO claim_instances SELECT id, 0, hypervisor FROM claims"
# `created_by` NULL: a claim made before claims recorded their writer
_MIGRATE_FROM_6 = (_SCHEMA[6],)
_MIGRATE_FROM_5 = ("ALTER TABLE claims ADD COLUMN created_by TEXT", _SCHEMA[5], *_MIGRATE_FROM_6)
_MIGRATE_FROM_4 = (_SCHEMA[4], *_MIGRATE_FROM_5)
_MIGRATE_FROM_3 = (_SCHEMA[3], _ONE_INSTANCE_EACH, *_MIGRATE_FROM_4)
_MIGRATE_FROM_2 = (
    "ALTER TABLE claims ADD COLUMN flavor TEXT",
    _SCHEMA[2],
    *_MIGRATE_FROM_3,
)
# Version 1 kept vcpu and pcpu in cpus, memory and disk in bytes, every claim a multiple of nothing
# in particular: the migration rounds memory and disk up to whole MiB and GiB, as Placement counts.
_MIGRATE_FROM_1 = (
    "INSERT INTO claim_amounts SELECT id, 'VCPU', vcpu FROM claims_v1 WHERE vcpu > 0",
    "INSERT INTO claim_amounts SELECT id, 'PCPU', pcpu FROM claims_v1 WHERE pcpu > 0",
    "INSERT INTO claim_amounts SELECT id, 'MEMORY_MB', (memory + 1048575) / 1048576 FROM claims_v1"
    " WHERE memory > 0",
    "INSERT INTO claim_amounts SELECT id, 'DISK_GB', (disk + 1073741823) / 1073741824 FROM claims_v1"
    " WHERE disk > 0",
    "INSERT INTO claims (id, hypervisor, created_at, expires_at, domain_uuid, owner)"
    " SELECT id, hypervisor, created_at, expires_at, domain_uuid, owner FROM claims_v1",
    "DROP TABLE claims_v1",
    _ONE_INSTANCE_EACH,
)
_MAINTENANCE_ROW = "INSERT OR REPLACE INTO maintenance VALUES (?, ?, ?, ?, ?)"
CLAIM_COLUMNS = "id, hypervisor, created_at, expires_at, domain_uuid, owner, flavor, created_by"
"""The claims' columns as `assemble_claims` takes them (PostgreSQL's table has the same)."""


class ClaimDatabase:
    """SQLite on one dedicated thread: the event loop never waits on a disk write. One exporter's
    own, or shared by the shards of one machine, each writing the claims of its own hypervisors
    only (claims/ledger.py): the ledger's lock is all a transaction needs (see claims/storage.py)."""

    shared = False

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = path
        self._failing = False
        self.on_change: Callable[[], None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="claims-db")
        self._conn: sqlite3.Connection | None = None

    @property
    def up(self) -> bool:
        return not self._failing

    async def start(self) -> LedgerState:
        return LedgerState(await self.open(), await self.maintenance(), await self.configured_since())

    async def open(self) -> list[Claim]:
        try:
            return await self._run(self._open)
        except (OSError, StorageError) as error:
            raise ConfigError(f"claims.database: cannot open {self.path}: {error}") from None

    async def transaction(self, work: Work[_T]) -> _T:
        """Each write is a transaction of its own: nobody else writes this exporter's claims to
        the file, and the ledger's lock keeps the fit test and the write together."""
        return await work(None, self)

    async def wait(self) -> None:
        await asyncio.sleep(3600)  # nobody else writes this exporter's claims to the file

    async def changes(self) -> LedgerState | None:
        return None

    def _open(self) -> list[Claim]:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        self._conn = conn
        try:
            self._migrate(conn)
        except sqlite3.Error:
            conn.close()
            self._conn = None
            raise
        return assemble_claims(
            conn.execute(f"SELECT {CLAIM_COLUMNS} FROM claims").fetchall(),
            conn.execute("SELECT claim_id, resource_class, amount FROM claim_amounts").fetchall(),
            conn.execute("SELECT claim_id, key, value FROM claim_extra_specs").fetchall(),
            conn.execute(
                "SELECT claim_id, hypervisor FROM claim_instances ORDER BY claim_id, instance"
            ).fetchall(),
        )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} was written by a newer virtcap (this one knows {SCHEMA_VERSION})"
            )
        columns = {row[1] for row in conn.execute("PRAGMA table_info(claims)")}
        # A new file has no tables yet and user_version 0, as has a version 1 file (0.1 set none):
        # the columns tell them apart.
        found: int | None = None
        if "vcpu" in columns:
            found = _VIRTCAP_0_1
        elif version in (_ONE_INSTANCE, _NO_MAINTENANCE, _NO_WRITERS, _NO_DOMAIN_HISTORY):
            found = version
        elif columns:
            found = _PER_CLASS_ROWS

        def migrate() -> None:
            if found == _VIRTCAP_0_1:
                conn.execute("ALTER TABLE claims RENAME TO claims_v1")
                statements: tuple[str, ...] = _SCHEMA + _MIGRATE_FROM_1
            elif found == _PER_CLASS_ROWS:
                statements = _MIGRATE_FROM_2
            elif found == _ONE_INSTANCE:
                statements = _MIGRATE_FROM_3
            elif found == _NO_MAINTENANCE:
                statements = _MIGRATE_FROM_4
            elif found == _NO_WRITERS:
                statements = _MIGRATE_FROM_5
            elif found == _NO_DOMAIN_HISTORY:
                statements = _MIGRATE_FROM_6
            else:
                statements = _SCHEMA
            for statement in statements:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

        self._transaction(migrate)
        if found is not None:
            log.info("claims database migrated", extra={"from": found, "to": SCHEMA_VERSION})

    async def insert(self, claim: Claim) -> None:
        await self._run(self._insert, claim)

    def _insert(self, claim: Claim) -> None:
        conn = self._conn
        assert conn is not None
        amounts = [
            (claim.id, resource.placement_class, placement_units(resource, amount))
            for resource, amount in claim.amounts.items()
            if amount > 0
        ]
        extra_specs = [(claim.id, key, value) for key, value in claim.extra_specs.items()]
        instances = [(claim.id, number, hypervisor) for number, hypervisor in enumerate(claim.hypervisors)]

        def insert() -> None:
            conn.execute(
                f"INSERT INTO claims ({CLAIM_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
            conn.executemany("INSERT INTO claim_amounts VALUES (?, ?, ?)", amounts)
            conn.executemany("INSERT INTO claim_extra_specs VALUES (?, ?, ?)", extra_specs)
            conn.executemany("INSERT INTO claim_instances VALUES (?, ?, ?)", instances)

        self._transaction(insert)

    async def delete(self, ids: Iterable[str]) -> None:
        await self._run(self._delete, list(ids))

    def _delete(self, ids: list[str]) -> None:
        conn = self._conn
        assert conn is not None
        rows = [(claim_id,) for claim_id in ids]

        def delete() -> None:
            conn.executemany("DELETE FROM claim_amounts WHERE claim_id = ?", rows)
            conn.executemany("DELETE FROM claim_extra_specs WHERE claim_id = ?", rows)
            conn.executemany("DELETE FROM claim_instances WHERE claim_id = ?", rows)
            conn.executemany("DELETE FROM claims WHERE id = ?", rows)

        self._transaction(delete)

    async def maintenance(self) -> dict[str, Maintenance]:
        """The hypervisors put into maintenance through the API, whether or not it ended (the
        ledger drops those that did)."""
        return await self._run(self._maintenance)

    def _maintenance(self) -> dict[str, Maintenance]:
        conn = self._conn
        assert conn is not None
        rows = conn.execute("SELECT hypervisor, reason, until, since, set_by FROM maintenance")
        return {
            name: Maintenance("api", reason, until, since, set_by)
            for name, reason, until, since, set_by in rows
        }

    async def put_maintenance(self, hypervisor: str, entry: Maintenance) -> None:
        await self._run(self._put_maintenance, hypervisor, entry)

    def _put_maintenance(self, hypervisor: str, entry: Maintenance) -> None:
        conn = self._conn
        assert conn is not None
        row = (hypervisor, entry.reason or "", entry.until, entry.since or 0.0, entry.set_by or "")

        def put() -> None:
            conn.execute(_MAINTENANCE_ROW, row)

        self._transaction(put)

    async def delete_maintenance(self, hypervisors: Iterable[str]) -> None:
        await self._run(self._delete_maintenance, [(name,) for name in hypervisors])

    def _delete_maintenance(self, rows: list[tuple[str]]) -> None:
        conn = self._conn
        assert conn is not None

        def delete() -> None:
            conn.executemany("DELETE FROM maintenance WHERE hypervisor = ?", rows)

        self._transaction(delete)

    async def configured_since(self) -> dict[str, float]:
        """When the configuration's maintenance of each hypervisor was first seen in effect."""
        return await self._run(self._configured_since)

    def _configured_since(self) -> dict[str, float]:
        conn = self._conn
        assert conn is not None
        return dict(conn.execute("SELECT hypervisor, since FROM maintenance_configured").fetchall())

    async def put_configured_since(self, since: dict[str, float]) -> None:
        await self._run(self._put_configured_since, sorted(since.items()))

    def _put_configured_since(self, rows: list[tuple[str, float]]) -> None:
        conn = self._conn
        assert conn is not None

        def put() -> None:
            conn.executemany("INSERT OR IGNORE INTO maintenance_configured VALUES (?, ?)", rows)

        self._transaction(put)

    async def delete_configured_since(self, hypervisors: Iterable[str]) -> None:
        await self._run(self._delete_configured_since, [(name,) for name in hypervisors])

    def _delete_configured_since(self, rows: list[tuple[str]]) -> None:
        conn = self._conn
        assert conn is not None

        def delete() -> None:
            conn.executemany("DELETE FROM maintenance_configured WHERE hypervisor = ?", rows)

        self._transaction(delete)

    async def domain_history(self) -> list[DomainHistory]:
        """What is remembered of every domain (virtcap.model.reclaim)."""
        return await self._run(self._domain_history)

    def _domain_history(self) -> list[DomainHistory]:
        conn = self._conn
        assert conn is not None
        return history_from_rows(conn.execute(f"SELECT {HISTORY_COLUMNS} FROM domain_history").fetchall())

    async def write_domain_history(
        self, changed: Iterable[DomainHistory], forgotten: Iterable[tuple[str, str]]
    ) -> None:
        """Store the domains' `changed` histories and forget the (hypervisor, uuid) `forgotten`, in
        one transaction of its own: the claims' are not involved."""
        await self._run(self._write_domain_history, history_rows(changed), list(forgotten))

    def _write_domain_history(self, rows: list[HistoryRow], forgotten: list[tuple[str, str]]) -> None:
        conn = self._conn
        assert conn is not None

        def write() -> None:
            conn.executemany("DELETE FROM domain_history WHERE hypervisor = ? AND uuid = ?", forgotten)
            conn.executemany("INSERT OR REPLACE INTO domain_history VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

        self._transaction(write)

    def _transaction(self, work: Callable[[], None]) -> None:
        """One transaction: after an error (full, read-only, I/O) nothing changed, and whatever
        the error, no transaction is left open to fail every later write."""
        conn = self._conn
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
            work()
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

    async def _run(self, function: Callable[..., _T], *args: Any) -> _T:
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)
        except sqlite3.Error as error:
            self._set_failing(True)
            raise StorageError(str(error)) from error
        self._set_failing(False)
        return result

    def _set_failing(self, failing: bool) -> None:
        if failing != self._failing:
            self._failing = failing
            if self.on_change is not None:
                self.on_change()
