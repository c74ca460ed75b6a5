"""The claims database on its own: per-class rows in whole units, extra specs, and the migrations
from 0.1 and from schema version 2."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from virtcap.claims.database import SCHEMA_VERSION, ClaimDatabase
from virtcap.claims.records import Claim
from virtcap.config import ConfigError
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
    assert version == SCHEMA_VERSION == 3


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
