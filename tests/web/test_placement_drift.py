"""`GET /api/v1/placement/drift` on a real `virtcap serve` auditing test-driver hypervisors and
reading a real Placement (tests/support/placement_fleet.py plants every kind of drift): the answer
is what was planted, as the OpenAPI description says; 404 without `placement:`, 503 (with why)
while Placement cannot be read, and readers' credentials are asked for as on any GET."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from jsonschema import Draft202012Validator

from tests.support.placement_fleet import EXPECTED, plant, write_fleet
from tests.support.placement_loader import PlacementLoader
from tests.support.placement_server import PlacementServer, running_placement
from tests.support.serving import WORKER_SECONDS, Server, free_port, running_server, wait_for

PATH = "/api/v1/placement/drift"


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    with running_placement(tmp_path_factory.mktemp("placement")) as server:
        plant(PlacementLoader(server.base_url))
        yield server


def answer(server: Server, path: str = PATH, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, body = server.get(path, headers=headers)
    return status, json.loads(body)


def reconciled(server: Server) -> bool:
    """Both hypervisors audited and reconciled (the first readings may come before the audits)."""
    status, document = answer(server)
    return status == 200 and [h["hypervisor"] for h in document["hypervisors"]] == ["hv1", "hv2"]


@pytest.mark.upstream
def test_the_drift_is_what_was_planted_as_the_description_says(
    placement: PlacementServer, tmp_path: Path
) -> None:
    with running_server(["--config", str(write_fleet(tmp_path, placement.base_url))], tmp_path) as server:
        wait_for(lambda: reconciled(server), timeout=WORKER_SECONDS, what="both hypervisors reconciled")
        status, document = answer(server)
        _, only = answer(server, PATH + "?hypervisor=hv2")
        _, unknown = answer(server, PATH + "?hypervisor=nowhere")
        odd, _ = server.get(PATH + "?hypervisor=%FF%00&hypervisor=hv1")
        _, description = answer(server, "/api/v1/openapi.json")
    assert status == 200
    assert "get" in description["paths"][PATH]
    schema = {"$ref": "#/components/schemas/PlacementDriftDocument", "components": description["components"]}
    Draft202012Validator(schema).validate(document)
    assert document["up"] is True and document["error"] is None
    assert document["unmatched"] == [] and document["last_success_at"] is not None
    found = {entry["hypervisor"]: {**entry} for entry in document["hypervisors"]}
    for entry in found.values():
        del entry["hypervisor"]
    assert found == EXPECTED
    assert [h["hypervisor"] for h in only["hypervisors"]] == ["hv2"]
    assert unknown["hypervisors"] == [] and unknown["up"] is True
    assert odd == 200


def test_without_placement_the_path_is_404(tmp_path: Path) -> None:
    with running_server(["--config", str(write_fleet(tmp_path, None))], tmp_path) as server:
        status, document = answer(server)
    assert status == 404
    assert "placement" in document["error"]


def test_placement_unreachable_is_503_with_why_and_scrapes_go_on(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with running_server(["--config", str(write_fleet(tmp_path, nowhere))], tmp_path) as server:
        # the first reading fails at once (connection refused): 503 before and after it
        wait_for(
            lambda: "not read:" in answer(server)[1]["error"], timeout=WORKER_SECONDS, what="a failed reading"
        )
        status, document = server.get(PATH)
        metrics, _ = server.get("/metrics")
        log = server.log_text()
    assert status == 503
    assert json.loads(document)["error"].startswith("placement: not read")
    assert metrics == 200
    assert "Traceback" not in log


def test_readers_credentials_are_asked_for(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    web_config = tmp_path / "web.yaml"
    web_config.write_text(f"basic_auth_users: {{reader: '{hashed}'}}\n")
    reader = {"Authorization": "Basic " + base64.b64encode(b"reader:secret").decode()}
    arguments = ["--config", str(write_fleet(tmp_path, None)), "--web.config.file", str(web_config)]
    with running_server(arguments, tmp_path, headers=reader) as server:
        refused, _ = server.get(PATH)
        status, _ = server.get(PATH, headers=reader)
    assert refused == 401
    assert status == 404  # let through to the handler: this exporter does not read Placement
