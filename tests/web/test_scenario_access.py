"""`POST /api/v1/plans/scenarios` changes nothing (a what-if moves, holds and changes nothing, as a
dry-run placement or the consolidation plan): a reader's credentials may ask it, as they may ask
those, and no one else's."""

from __future__ import annotations

from pathlib import Path

import bcrypt

from tests.support.claims_client import HASH, WRITER, auth, call
from tests.support.serving import running_server
from virtcap.demo.fleetgen import HostSpec, write_fleet

SCENARIOS = "/api/v1/plans/scenarios"
READER = ("prometheus", "r3ader-pass")


def _fleet_config(directory: Path) -> Path:
    paths = write_fleet([HostSpec("big", 16, 64, 100, 0)], directory / "nodes")
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""
audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
  - {{name: big, uri: "test://{paths["big"]}"}}
flavors:
  - {{name: m1, vcpu: 2, memory: 8GiB, disk: 10GiB}}
"""
    )
    return config


def test_a_scenario_needs_a_reader_not_a_writer(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(READER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users:\n  {READER[0]}: '{hashed}'\n")
    args = ["--config", str(_fleet_config(tmp_path)), "--web.config.file", str(web_file)]
    scenario = {"demand": [{"flavor": "m1", "count": 2}]}
    with running_server(args, tmp_path, headers=auth(*READER)) as server:
        status, _ = call(server, "POST", SCENARIOS, scenario)
        assert status == 401
        status, _ = call(server, "POST", SCENARIOS, scenario, auth())  # a writer is not a reader
        assert status == 401
        status, answer = call(server, "POST", SCENARIOS, scenario, auth(*READER))
        assert status == 200, answer
        assert answer["placed"] == [{"flavor": "m1", "count": 2, "hypervisors": {"big": 2}}]
