"""A client of the claims API for tests: the writer's credentials and an exporter configuration
that accepts them, and the requests that go with them."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import bcrypt

from tests.support.files import FIXTURES
from tests.support.serving import Server
from virtcap.demo import DEMO_DIR

MIXED = FIXTURES / "mixed-node.xml"
WRITER = ("builder", "b3tter-than-nothing")
HASH = bcrypt.hashpw(WRITER[1].encode(), bcrypt.gensalt(rounds=4)).decode()


def auth(user: str = WRITER[0], password: str = WRITER[1]) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def call(
    server: Server, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    request = urllib.request.Request(
        server.base_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        # longer than a plan may take (the planner's time limit and grace): a plan on a machine
        # the suite loads takes longer than on a quiet one
        with urllib.request.urlopen(request, timeout=90) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except json.JSONDecodeError:
            return error.code, text.decode()


def claim(server: Server, **body: Any) -> tuple[int, Any]:
    return call(server, "POST", "/api/v1/claims", body, auth())


def write_config(
    directory: Path,
    interval: str = "1h",
    database: str | None = None,
    extra_hypervisors: str = "",
    sections: str = "",
) -> Path:
    """Three test-driver hypervisors (mixed, big, small) and a writer; `sections` adds top-level
    sections, such as `scheduler: {weighers: {ram: -1.0}}`."""
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""{sections}
audit: {{interval: {interval}}}
claims:
  database: {database or directory / "claims.sqlite"}
  default_ttl: 10m
  max_ttl: 1h
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
  - {{name: mixed, uri: "test://{MIXED}", cpu_shared_set: "0", cpu_dedicated_set: "2,4"}}
  - {{name: big, uri: "test://{DEMO_DIR / "compute-04.xml"}"}}
  - {{name: small, uri: "test://{DEMO_DIR / "compute-05.xml"}"}}
{extra_hypervisors}flavors:
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 10GiB}}
"""
    )
    return config
