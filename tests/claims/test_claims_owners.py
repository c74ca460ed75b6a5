"""A claim belongs to the writer that created it: another writer's DELETE answers 403 and deletes
nothing, unless that writer is one of claims.admins (checked against claims.writers at load and
at reload); claims of a ledger written before claims recorded their writer have none, and any
writer may delete them."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.support.claims_client import auth, call
from tests.support.serving import Server, running_server, wait_for
from virtcap.config import ConfigError, parse_config
from virtcap.demo import DEMO_DIR

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
HASHES = {
    user: bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    for user, password in PASSWORDS.items()
}


def as_(user: str) -> dict[str, str]:
    return auth(user, PASSWORDS[user])


def config_text(directory: Path, admins: str = "[carol]") -> str:
    writers = ", ".join(f'{user}: "{hashed}"' for user, hashed in HASHES.items())
    return f"""audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  writers: {{{writers}}}
  admins: {admins}
hypervisors:
  - {{name: big, uri: "test://{DEMO_DIR / "compute-04.xml"}"}}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "virtcap.yaml"
    path.write_text(config_text(tmp_path))
    return path


@pytest.fixture
def server(config: Path, tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(config)], tmp_path) as running:
        yield running


def create(server: Server, user: str) -> dict[str, Any]:
    status, created = call(server, "POST", "/api/v1/claims", {"hypervisor": "big", "vcpu": 1}, as_(user))
    assert status == 201, created
    return dict(created)


def held(server: Server) -> dict[str, Any]:
    status, listed = call(server, "GET", "/api/v1/claims")
    assert status == 200, listed
    return {entry["id"]: entry for entry in listed["claims"]}


def delete(server: Server, claim_id: str, user: str) -> tuple[int, Any]:
    return call(server, "DELETE", f"/api/v1/claims/{claim_id}", headers=as_(user))


def test_a_claim_records_its_writer_and_another_writer_cannot_delete_it(server: Server) -> None:
    mine = create(server, "alice")
    assert mine["created_by"] == "alice"
    assert held(server)[mine["id"]]["created_by"] == "alice"
    assert call(server, "GET", f"/api/v1/claims/{mine['id']}")[1]["created_by"] == "alice"

    status, refused = delete(server, mine["id"], "bob")
    assert status == 403, refused
    assert "alice" in refused["error"] and "claims.admins" in refused["error"]
    assert mine["id"] in held(server)  # nothing deleted

    status, deleted = delete(server, mine["id"], "alice")
    assert status == 200 and deleted["id"] == mine["id"]
    assert mine["id"] not in held(server)


def test_an_admin_deletes_any_writers_claim(server: Server) -> None:
    bobs = create(server, "bob")
    status, deleted = delete(server, bobs["id"], "carol")
    assert status == 200 and deleted["created_by"] == "bob"
    assert bobs["id"] not in held(server)
    # an admin's own claim is no one else's to delete
    carols = create(server, "carol")
    assert delete(server, carols["id"], "alice")[0] == 403


def test_maintenance_records_its_writer(server: Server) -> None:
    status, document = call(
        server, "PUT", "/api/v1/hypervisors/big/maintenance", {"reason": "disks"}, as_("bob")
    )
    assert status == 200, document
    assert [entry["set_by"] for entry in document["entries"]] == ["bob"]


def test_the_claim_cli_shows_the_writer(server: Server) -> None:
    mine = create(server, "alice")
    listed = subprocess.run(
        [sys.executable, "-m", "virtcap", "claim", "list", "--url", server.base_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=os.environ.copy(),
    )
    assert listed.returncode == 0, listed.stderr
    shown = {entry["id"]: entry for entry in json.loads(listed.stdout)["claims"]}
    assert shown[mine["id"]]["created_by"] == "alice"


@pytest.mark.parametrize(
    ("admins", "expected"),
    [
        ("[dave]", "x.yaml: claims.admins: expected names of claims.writers (alice, bob, carol), got 'dave'"),
        ("carol", "x.yaml: claims.admins: "),
    ],
)
def test_admins_must_be_writers(tmp_path: Path, admins: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config_text(tmp_path, admins), "x.yaml")
    assert str(caught.value).startswith(expected), str(caught.value)


def test_an_unknown_admin_exits_2_naming_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text(config_text(tmp_path, "[carol, mallory]"))
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert f"{path}: claims.admins: expected names of claims.writers" in result.stderr
    assert "mallory" in result.stderr and "Traceback" not in result.stderr


def test_a_reload_applies_admins_and_refuses_an_admin_who_is_no_writer(
    server: Server, config: Path, tmp_path: Path
) -> None:
    alices = create(server, "alice")
    assert delete(server, alices["id"], "bob")[0] == 403

    def reload(text: str, logged: str) -> None:
        before = server.log_text().count(logged)
        config.write_text(text)
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: server.log_text().count(logged) > before, 10, what=logged)

    # refused: the running configuration (carol the only admin) stays whole
    reload(config_text(tmp_path, "[bob, mallory]"), "configuration not reloaded")
    assert "claims.admins" in server.log_text()
    assert delete(server, alices["id"], "bob")[0] == 403
    reload(config_text(tmp_path, "[bob]"), "configuration reloaded")
    status, deleted = delete(server, alices["id"], "bob")
    assert status == 200 and deleted["created_by"] == "alice"


# --- a ledger written before claims recorded their writer


def _version_5(path: Path, expires_at: float) -> None:
    """A file as virtcap wrote it with schema version 5: two claims and a maintenance entry."""
    old = sqlite3.connect(path)
    old.executescript(
        f"""
        CREATE TABLE claims (
            id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
            created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL,
            flavor TEXT);
        CREATE TABLE claim_amounts (
            claim_id TEXT NOT NULL, resource_class TEXT NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (claim_id, resource_class));
        CREATE TABLE claim_extra_specs (
            claim_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (claim_id, key));
        CREATE TABLE claim_instances (
            claim_id TEXT NOT NULL, instance INTEGER NOT NULL, hypervisor TEXT NOT NULL,
            PRIMARY KEY (claim_id, instance));
        CREATE TABLE maintenance (
            hypervisor TEXT PRIMARY KEY, reason TEXT NOT NULL, until REAL, since REAL NOT NULL,
            set_by TEXT NOT NULL);
        INSERT INTO claims VALUES ('old-1', 'big', 1.0, {expires_at}, NULL, 'ci', NULL);
        INSERT INTO claims VALUES ('old-2', 'big', 2.0, {expires_at}, NULL, 'ci', NULL);
        INSERT INTO claim_amounts VALUES ('old-1', 'VCPU', 2);
        INSERT INTO claim_amounts VALUES ('old-2', 'VCPU', 3);
        INSERT INTO claim_instances VALUES ('old-1', 0, 'big');
        INSERT INTO claim_instances VALUES ('old-2', 0, 'big');
        INSERT INTO maintenance VALUES ('big', 'disks', NULL, 1000000000.0, 'alice');
        PRAGMA user_version = 5;"""
    )
    old.commit()
    old.close()


def test_claims_of_a_version_5_file_have_no_writer_and_any_writer_deletes_them(
    config: Path, tmp_path: Path
) -> None:
    _version_5(tmp_path / "claims.sqlite", 4e9)
    with running_server(["--config", str(config)], tmp_path) as server:
        claims = held(server)
        assert {claim_id: entry["created_by"] for claim_id, entry in claims.items()} == {
            "old-1": None,
            "old-2": None,
        }
        assert claims["old-1"]["vcpu"] == 2
        maintenance = call(server, "GET", "/api/v1/hypervisors/big/maintenance")[1]
        assert [(entry["reason"], entry["set_by"]) for entry in maintenance["entries"]] == [
            ("disks", "alice")
        ]
        # no writer recorded: neither alice nor bob owns them, and either may delete them
        assert delete(server, "old-1", "bob")[0] == 200
        assert delete(server, "old-2", "alice")[0] == 200
        lifted = call(server, "DELETE", "/api/v1/hypervisors/big/maintenance", headers=as_("bob"))
        assert lifted[0] == 200, lifted
        # a claim made now has its writer, in the migrated file
        alices = create(server, "alice")
        assert delete(server, alices["id"], "bob")[0] == 403
    with sqlite3.connect(tmp_path / "claims.sqlite") as migrated:
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == 7
        assert migrated.execute("SELECT id, created_by FROM claims").fetchall() == [(alices["id"], "alice")]
