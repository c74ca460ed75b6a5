"""The claims database on its own: per-class rows in whole units, extra specs, and the migrations
from 0.1 and from schema version 2."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from virtcap.claims.database import SCHEMA_VERSION, ClaimDatabase
from virtcap.config import ConfigError
from virtcap.fleet.claim_records import Claim
from virtcap.model.resources import GIB, MIB, Resource

FPGA = Resource.custom_class("CUSTOM_FPGA")


def _reopen(path: Path) -> list[Claim]:
    async def read() -> list[Claim]:
        database = ClaimDatabase(str(path))
        try:
            return await database.open()
        finally:
            await database.close()

    return asyncio.run(read())


def test_every_class_is_stored_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    amounts = {Resource.VCPU: 2, Resource.MEMORY: 1536 * MIB, Resource.DISK: 20 * GIB, FPGA: 3}
    claim = Claim("c1", "h", amounts, 1.0, 2.0, None, "ci")

    async def write() -> None:
        database = ClaimDatabase(str(path))
        await database.open()
        await database.insert(claim)
        await database.close()

    asyncio.run(write())
    assert _reopen(path) == [claim]
    rows = sqlite3.connect(path).execute("SELECT resource_class, amount FROM claim_amounts ORDER BY 1")
    assert rows.fetchall() == [("CUSTOM_FPGA", 3), ("DISK_GB", 20), ("MEMORY_MB", 1536), ("VCPU", 2)]


def test_a_claim_keeps_its_flavor_and_extra_specs(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    specs = {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "1GB", "pci_passthrough:alias": "vf:2"}
    pinned = Claim(
        "p", "h", {Resource.PCPU: 4, Resource.MEMORY: 8 * GIB}, 1.0, 2.0, None, "ci", "p1.large", specs
    )
    plain = Claim("q", "h", {Resource.VCPU: 1}, 1.0, 2.0, None, "")

    async def write() -> None:
        database = ClaimDatabase(str(path))
        await database.open()
        await database.insert(pinned)
        await database.insert(plain)
        await database.delete(["q"])
        await database.close()

    asyncio.run(write())
    assert _reopen(path) == [pinned]
    deleted = sqlite3.connect(path).execute("SELECT count(*) FROM claim_extra_specs WHERE claim_id = 'q'")
    assert deleted.fetchone() == (0,)


def test_a_database_of_schema_version_2_gains_extra_specs(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    old = sqlite3.connect(path)
    old.execute(
        """CREATE TABLE claims (
            id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
            created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL)"""
    )
    old.execute(
        """CREATE TABLE claim_amounts (
            claim_id TEXT NOT NULL, resource_class TEXT NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (claim_id, resource_class))"""
    )
    old.execute("INSERT INTO claims VALUES ('a', 'h', 1.0, 9.0, NULL, 'ci')")
    old.execute("INSERT INTO claim_amounts VALUES ('a', 'VCPU', 2)")
    old.execute("PRAGMA user_version = 2")
    old.commit()
    old.close()
    assert _reopen(path) == [Claim("a", "h", {Resource.VCPU: 2}, 1.0, 9.0, None, "ci")]
    version = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION == 7


def test_a_database_of_virtcap_0_1_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    old = sqlite3.connect(path)
    old.execute(
        """CREATE TABLE claims (
            id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
            vcpu INTEGER NOT NULL, pcpu INTEGER NOT NULL, memory INTEGER NOT NULL, disk INTEGER NOT NULL,
            created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL)"""
    )
    old.execute("INSERT INTO claims VALUES ('a', 'h', 2, 0, 1073741825, 0, 1.0, 9.0, 'uuid-a', 'ci')")
    old.execute("INSERT INTO claims VALUES ('b', 'h', 0, 1, 0, 10737418240, 1.0, 9.0, NULL, '')")
    old.commit()
    old.close()
    claims = {claim.id: claim for claim in _reopen(path)}
    # memory and disk in whole MiB and GiB, as Placement counts them: one byte over 1 GiB is 1025 MiB
    assert claims["a"].amounts == {Resource.VCPU: 2, Resource.MEMORY: 1025 * MIB}
    assert claims["b"].amounts == {Resource.PCPU: 1, Resource.DISK: 10 * GIB}
    assert (claims["a"].domain_uuid, claims["a"].owner, claims["a"].expires_at) == ("uuid-a", "ci", 9.0)
    version = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA_VERSION
    assert {claim.id for claim in _reopen(path)} == {"a", "b"}  # a second start changes nothing


def test_a_database_from_a_newer_virtcap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    newer = sqlite3.connect(path)
    newer.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    newer.close()
    with pytest.raises(ConfigError, match="written by a newer virtcap"):
        _reopen(path)


def test_a_claim_of_several_instances_keeps_each_instances_hypervisor(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    spread = Claim("s", "h2", {Resource.VCPU: 2}, 1.0, 2.0, None, "ci", hypervisors=("h2", "h1", "h2"))
    gone = Claim("g", "h1", {Resource.VCPU: 1}, 1.0, 2.0, None, "", hypervisors=("h1", "h1"))

    async def write() -> None:
        database = ClaimDatabase(str(path))
        await database.open()
        await database.insert(spread)
        await database.insert(gone)
        await database.delete(["g"])
        await database.close()

    asyncio.run(write())
    (read,) = _reopen(path)
    assert read == spread and read.count == 3 and read.hypervisors == ("h2", "h1", "h2")
    rows = sqlite3.connect(path).execute("SELECT claim_id, instance, hypervisor FROM claim_instances")
    assert sorted(rows.fetchall()) == [("s", 0, "h2"), ("s", 1, "h1"), ("s", 2, "h2")]


def test_a_claim_of_one_instance_is_still_one_row_on_its_hypervisor(tmp_path: Path) -> None:
    """What an older virtcap reads from the claims table is unchanged: the claim's hypervisor."""
    path = tmp_path / "claims.sqlite"

    async def write() -> None:
        database = ClaimDatabase(str(path))
        await database.open()
        await database.insert(Claim("a", "h", {Resource.VCPU: 1}, 1.0, 2.0, None, ""))
        await database.close()

    asyncio.run(write())
    assert sqlite3.connect(path).execute("SELECT id, hypervisor FROM claims").fetchall() == [("a", "h")]
    (read,) = _reopen(path)
    assert read.hypervisors == ("h",) and read.count == 1


def _version_3(path: Path) -> None:
    """A file as virtcap wrote it with schema version 3: claims with flavors and extra specs, each
    one instance on the claims table's hypervisor."""
    old = sqlite3.connect(path)
    old.execute(
        """CREATE TABLE claims (
            id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
            created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL,
            flavor TEXT)"""
    )
    old.execute(
        """CREATE TABLE claim_amounts (
            claim_id TEXT NOT NULL, resource_class TEXT NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (claim_id, resource_class))"""
    )
    old.execute(
        """CREATE TABLE claim_extra_specs (
            claim_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (claim_id, key))"""
    )
    old.execute("INSERT INTO claims VALUES ('a', 'h1', 1.0, 9.0, 'uuid-a', 'ci', 'p1.large')")
    old.execute("INSERT INTO claims VALUES ('b', 'h2', 2.0, 9.0, NULL, '', NULL)")
    old.execute("INSERT INTO claim_amounts VALUES ('a', 'PCPU', 4)")
    old.execute("INSERT INTO claim_amounts VALUES ('a', 'MEMORY_MB', 4096)")
    old.execute("INSERT INTO claim_amounts VALUES ('b', 'VCPU', 2)")
    old.execute("INSERT INTO claim_extra_specs VALUES ('a', 'hw:cpu_policy', 'dedicated')")
    old.execute("PRAGMA user_version = 3")
    old.commit()
    old.close()


def test_a_database_of_schema_version_3_gains_one_instance_per_claim(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    _version_3(path)
    pinned = Claim(
        "a",
        "h1",
        {Resource.PCPU: 4, Resource.MEMORY: 4096 * MIB},
        1.0,
        9.0,
        "uuid-a",
        "ci",
        "p1.large",
        {"hw:cpu_policy": "dedicated"},
    )
    plain = Claim("b", "h2", {Resource.VCPU: 2}, 2.0, 9.0, None, "")
    assert sorted(_reopen(path), key=lambda claim: claim.id) == [pinned, plain]
    migrated = sqlite3.connect(path)
    assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    instances = migrated.execute("SELECT claim_id, instance, hypervisor FROM claim_instances ORDER BY 1")
    assert instances.fetchall() == [("a", 0, "h1"), ("b", 0, "h2")]
    migrated.close()
    # a second start changes nothing: no instance is added twice
    assert sorted(_reopen(path), key=lambda claim: claim.id) == [pinned, plain]
    assert sqlite3.connect(path).execute("SELECT count(*) FROM claim_instances").fetchone() == (2,)


def test_a_failed_migration_of_version_3_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """One transaction: a table in the way fails the migration, and nothing of it stays."""
    path = tmp_path / "claims.sqlite"
    _version_3(path)
    blocking = sqlite3.connect(path)
    # a row that collides with the first instance of claim 'a': the INSERT of the migration fails
    blocking.execute("CREATE TABLE claim_instances (claim_id TEXT, instance INTEGER, hypervisor TEXT)")
    blocking.execute("CREATE UNIQUE INDEX one ON claim_instances (claim_id, instance)")
    blocking.execute("INSERT INTO claim_instances VALUES ('a', 0, 'elsewhere')")
    blocking.commit()
    blocking.close()
    with pytest.raises(ConfigError, match="UNIQUE constraint failed"):
        _reopen(path)
    after = sqlite3.connect(path)
    assert after.execute("PRAGMA user_version").fetchone()[0] == 3
    assert after.execute("SELECT * FROM claim_instances").fetchall() == [("a", 0, "elsewhere")]
