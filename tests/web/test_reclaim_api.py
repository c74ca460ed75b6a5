"""`GET /api/v1/reclaimable` on a served fleet of test-driver hypervisors: the domains shut off for
longer than a window of a second, with what each holds, as the OpenAPI description says; and the
history is kept across a restart of the exporter (the claims database's SQLite file)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tests.support.claims_client import MIXED, call, write_config
from tests.support.serving import free_port, running_server, series, value, wait_for
from virtcap.demo import DEMO_DIR

SHUTOFF = 5
"""The test driver's `<test:runstate>` of a shut-off domain."""


def shut_off(path: Path) -> set[str]:
    """The UUIDs of the shut-off domains the test driver's node file defines, read independently."""
    found = set()
    for domain in re.findall(r"<domain\b.*?</domain>", path.read_text(), flags=re.DOTALL):
        state = re.search(r"<test:runstate>(\d+)</test:runstate>", domain)
        uuid = re.search(r"<uuid>([^<]+)</uuid>", domain)
        if state is not None and uuid is not None and int(state.group(1)) == SHUTOFF:
            found.add(uuid.group(1))
    return found


def _plan(arguments: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "plan", "reclaim", *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _listing(server: Any) -> dict[str, Any]:
    status, document = call(server, "GET", "/api/v1/reclaimable")
    assert status == 200, document
    return dict(document)


def test_shut_off_domains_are_listed_with_their_allocation_and_kept_across_a_restart(tmp_path: Path) -> None:
    expected = {
        "big": shut_off(DEMO_DIR / "compute-04.xml"),
        "small": shut_off(DEMO_DIR / "compute-05.xml"),
        "mixed": shut_off(MIXED),
    }
    assert expected["small"], "the fixture has shut-off domains"
    config = write_config(tmp_path, interval="1s", sections="reclaim: {shutoff_after: 2s}")
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(lambda: len(_listing(server)["domains"]) == sum(map(len, expected.values())), timeout=30)
        listing = _listing(server)
        status, description = call(server, "GET", "/api/v1/openapi.json")
        assert status == 200
        schema = {"$ref": "#/components/schemas/ReclaimableList", "components": description["components"]}
        Draft202012Validator(schema).validate(listing)
        # the metrics sum the same allocations, per hypervisor and per project (the rest as `other`)
        wanted = {
            name: sum(d["allocation"]["memory"] for d in listing["domains"] if d["hypervisor"] == name)
            for name in expected
        }

        def metrics_agree() -> bool:
            samples = server.samples()
            memory = {"resource": "memory", "reason": "shutoff"}
            for name, amount in wanted.items():
                host = value(samples, "hypervisor_reclaimable", hypervisor=name, unit="bytes", **memory)
                projects = series(samples, "hypervisor_project_reclaimable", hypervisor=name, **memory)
                if (host or 0) != amount or sum(projects.values()) != amount:
                    return False
            return True

        wait_for(metrics_agree, timeout=30)
    found = {(d["hypervisor"], d["uuid"]) for d in listing["domains"]}
    assert found == {(name, uuid) for name, uuids in expected.items() for uuid in uuids}
    assert {d["reason"] for d in listing["domains"]} == {"shutoff"}
    for domain in listing["domains"]:
        assert domain["allocation"]["memory"] > 0, domain
    totals = listing["totals"]["shutoff"]
    assert totals["memory"] == sum(d["allocation"]["memory"] for d in listing["domains"])
    since = {(d["hypervisor"], d["uuid"]): d["since"] for d in listing["domains"]}

    # restarted with the same database: the domains are reclaimable at once, since the same time
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(lambda: len(_listing(server)["domains"]) == len(found), timeout=30)
        again = {(d["hypervisor"], d["uuid"]): d["since"] for d in _listing(server)["domains"]}
        asked = _plan(["--url", server.base_url, "--format", "json"])
        table = _plan(["--url", server.base_url])
    assert again == since
    assert {(d["hypervisor"], d["uuid"]): d["since"] for d in json.loads(asked)["domains"]} == since
    assert all(d["name"] in table and d["uuid"] in table for d in listing["domains"])
    # one audit of the configuration's fleet, judged with the history its database keeps
    local = json.loads(_plan(["--config", str(config), "--format", "json"]))
    assert {(d["hypervisor"], d["uuid"]): d["since"] for d in local["domains"]} == since
    assert all(datetime.fromisoformat(when).timestamp() < time.time() for when in since.values())


def test_plan_reclaim_says_in_one_line_when_the_exporter_cannot_answer() -> None:
    port = free_port()
    for arguments, code in (
        (["--url", f"http://127.0.0.1:{port}"], 1),
        (["--demo", "--format", "xml"], 2),
        (["--demo", "--url", f"http://127.0.0.1:{port}"], 2),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "virtcap", "plan", "reclaim", *arguments],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        if code == 1:
            (line,) = result.stderr.splitlines()
            assert line.startswith("virtcap: plan reclaim: cannot reach"), line
