"""A real OpenStack Keystone over HTTP, so that a Placement (tests/support/placement_server.py)
validates Keystone-issued tokens with its keystonemiddleware (`auth_strategy = keystone`).

Keystone 30 from its own virtualenv (scripts/keystone-venv.sh) on a SQLite file of the test's
folder: `keystone-manage` db_sync, fernet_setup, credential_setup and bootstrap, then gunicorn on
127.0.0.1 (a port the kernel picks). Then, through its API: a `service` project, a `placement` user
for Placement's middleware and a `virtcap` user for the reader, both with the `service` role
there: Placement 16's default policy lets only `admin` or `service` read providers, inventories,
usages and allocations (a `reader` is refused with 403).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.placement_server import GunicornProcess, PlacementHarnessError, running_gunicorn

ROOT = Path(__file__).resolve().parents[2]
KEYSTONE_VENV = Path(os.environ.get("VIRTCAP_KEYSTONE_VENV", ROOT / ".venv-keystone"))
STAMP = ".virtcap-keystone-complete"
"""Written by scripts/keystone-venv.sh once everything is installed."""

ADMIN_PASSWORD = "admin-secret"
SERVICE_PROJECT = "service"
PLACEMENT_USER = ("placement", "placement-secret")
READER_USER = ("virtcap", "virtcap-secret")
MANAGE_SECONDS = 120.0
"""Each keystone-manage command takes 2 to 7 s, most of it importing Keystone."""


def keystone_venv() -> Path | None:
    """The Keystone virtualenv, or None when it is not installed (its tests are then skipped)."""
    if (KEYSTONE_VENV / STAMP).is_file() and (KEYSTONE_VENV / "bin" / "gunicorn").exists():
        return KEYSTONE_VENV
    return None


@dataclass
class Keystone:
    server: GunicornProcess
    admin_token: str

    @property
    def auth_url(self) -> str:
        return self.server.base_url + "/v3"

    def call(
        self, method: str, path: str, body: object = None, token: str | None = None
    ) -> tuple[int, Any, str]:
        """Status, decoded JSON and X-Subject-Token of one request to the identity API."""
        headers = {"X-Auth-Token": token or self.admin_token, "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.auth_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw, status, subject = (
                    response.read(),
                    response.status,
                    response.headers.get("X-Subject-Token", ""),
                )
        except urllib.error.HTTPError as error:
            raw, status, subject = error.read(), error.code, ""
        return status, json.loads(raw) if raw else None, subject

    def create(self, path: str, kind: str, body: dict[str, Any]) -> str:
        status, answer, _ = self.call("POST", path, {kind: body})
        if status != 201:
            raise PlacementHarnessError(f"Keystone answered {status} to POST {path}: {answer}")
        return str(answer[kind]["id"])

    def id_of(self, collection: str, name: str) -> str:
        status, answer, _ = self.call("GET", f"/{collection}?name={name}")
        if status != 200 or len(answer[collection]) != 1:
            raise PlacementHarnessError(f"Keystone has no single {collection} named {name}: {answer}")
        return str(answer[collection][0]["id"])

    def add_user(self, name: str, password: str, role: str, project: str = SERVICE_PROJECT) -> str:
        """A user of the default domain with `role` on `project`; its id."""
        user = self.create("/users", "user", {"name": name, "password": password, "domain_id": "default"})
        project_id, role_id = self.id_of("projects", project), self.id_of("roles", role)
        status, answer, _ = self.call("PUT", f"/projects/{project_id}/users/{user}/roles/{role_id}")
        if status != 204:
            raise PlacementHarnessError(f"Keystone refused to give {name} the role {role}: {answer}")
        return user

    def issue_token(self, user: str, password: str, project: str = SERVICE_PROJECT) -> str:
        """A project-scoped token for a user (keystoneauth1's `token` plugin takes one)."""
        status, answer, token = self.call(
            "POST", "/auth/tokens", password_auth(user, password, project), token=""
        )
        if status != 201:
            raise PlacementHarnessError(f"Keystone issued no token for {user}: {answer}")
        return token

    def revoke_token(self, token: str) -> None:
        """Revokes a token (`DELETE /v3/auth/tokens`): Placement refuses it from then on."""
        request = urllib.request.Request(
            self.auth_url + "/auth/tokens",
            headers={"X-Auth-Token": self.admin_token, "X-Subject-Token": token},
            method="DELETE",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status != 204:
                raise PlacementHarnessError(f"Keystone answered {response.status} to a revocation")

    def application_credential(self, user: str, password: str) -> tuple[str, str]:
        """A new application credential of a user (for its own project): its id and secret."""
        token = self.issue_token(user, password)
        user_id = self.id_of("users", user)
        status, answer, _ = self.call(
            "POST",
            f"/users/{user_id}/application_credentials",
            {"application_credential": {"name": f"{user}-reader"}},
            token,
        )
        if status != 201:
            raise PlacementHarnessError(f"Keystone created no application credential for {user}: {answer}")
        return str(answer["application_credential"]["id"]), str(answer["application_credential"]["secret"])

    def register(self, kind: str, name: str, url: str, interfaces: tuple[str, ...] = ("public",)) -> None:
        """A service in the catalog, with an endpoint at `url` for each interface."""
        service = self.create("/services", "service", {"type": kind, "name": name})
        for interface in interfaces:
            self.create(
                "/endpoints",
                "endpoint",
                {"service_id": service, "interface": interface, "url": url, "region_id": "RegionOne"},
            )

    def register_placement(self, url: str) -> None:
        """Placement in the catalog, as the `placement` service's public endpoint at `url`."""
        self.register("placement", "placement", url)

    def authtoken_options(self) -> list[str]:
        """Placement's [keystone_authtoken] section: its middleware validates tokens as `placement`."""
        name, password = PLACEMENT_USER
        return [
            f"www_authenticate_uri = {self.auth_url}",
            f"auth_url = {self.auth_url}",
            "auth_type = password",
            f"username = {name}",
            f"password = {password}",
            f"project_name = {SERVICE_PROJECT}",
            "user_domain_id = default",
            "project_domain_id = default",
            # Checked on every request: a revoked or expired token is refused at once.
            "token_cache_time = -1",
        ]


def password_auth(user: str, password: str, project: str) -> dict[str, Any]:
    return {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {"user": {"name": user, "domain": {"id": "default"}, "password": password}},
            },
            "scope": {"project": {"name": project, "domain": {"id": "default"}}},
        }
    }


def keystone_conf(directory: Path) -> str:
    return (
        "[DEFAULT]\ndebug = false\n"
        f"[database]\nconnection = sqlite:///{directory / 'keystone.sqlite'}\n"
        "[token]\nprovider = fernet\n"
        f"[fernet_tokens]\nkey_repository = {directory / 'fernet-keys'}\n"
        f"[fernet_receipts]\nkey_repository = {directory / 'fernet-receipts'}\n"
        f"[credential]\nkey_repository = {directory / 'credential-keys'}\n"
    )


def _manage(venv: Path, directory: Path, *arguments: str) -> None:
    command = [
        str(venv / "bin" / "keystone-manage"),
        "--config-file",
        str(directory / "keystone.conf"),
        *arguments,
    ]
    done = subprocess.run(
        command,
        check=False,
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=MANAGE_SECONDS,
        env={**os.environ, "PYTHONPATH": ""},
    )
    if done.returncode != 0:
        raise PlacementHarnessError(f"`keystone-manage {arguments[0]}` failed: {done.stderr[-4000:]}")


@contextmanager
def running_keystone(directory: Path, venv: Path) -> Iterator[Keystone]:
    """A bootstrapped Keystone with the service project and users above; killed on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "keystone.conf").write_text(keystone_conf(directory))
    owner = ["--keystone-user", str(os.getuid()), "--keystone-group", str(os.getgid())]
    # The key repositories need no database: made while the schema is migrated.
    with ThreadPoolExecutor(3) as pool:
        steps = [
            pool.submit(_manage, venv, directory, "db_sync"),
            pool.submit(_manage, venv, directory, "fernet_setup", *owner),
            pool.submit(_manage, venv, directory, "credential_setup", *owner),
        ]
        for step in steps:
            step.result()
    _manage(
        venv,
        directory,
        "bootstrap",
        "--bootstrap-password",
        ADMIN_PASSWORD,
        "--bootstrap-region-id",
        "RegionOne",
    )
    environment = {"OS_KEYSTONE_CONFIG_FILES": str(directory / "keystone.conf")}
    with running_gunicorn(
        venv / "bin" / "gunicorn", directory, "keystone.wsgi.api:application", environment, "/v3"
    ) as server:
        keystone = Keystone(server, admin_token="")
        keystone.admin_token = keystone.issue_token("admin", ADMIN_PASSWORD, project="admin")
        # Registered once the port is known (bootstrap came before it): keystonemiddleware finds
        # Keystone's internal endpoint in the catalog.
        keystone.register("identity", "keystone", keystone.auth_url, ("public", "internal"))
        keystone.create("/projects", "project", {"name": SERVICE_PROJECT, "domain_id": "default"})
        keystone.add_user(*PLACEMENT_USER, role="service")
        keystone.add_user(*READER_USER, role="service")
        yield keystone
