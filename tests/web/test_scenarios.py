"""What-if scenarios for users: `POST /api/v1/plans/scenarios` on a real `virtcap serve --demo` and
`virtcap plan scenario FILE` in a subprocess (--demo, --url): the answer before and after, the
search for the hypervisors to add checked by hand, a capture's hardware added without its domains,
bad scenarios a 400 or exit 2 naming the key (never a 500 nor a traceback), and one scenario at a
time. The computations themselves are checked in tests/model/test_scenario_model.py."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.demo import GROUP_HEADROOM
from tests.support.factories import MIB
from tests.support.serving import Server, running_server
from virtcap.audit.capture_format import load_capture
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.replay import ReplayConnection
from virtcap.contract.scenarios import parse_scenario
from virtcap.demo import DEMO_DIR, demo_config
from virtcap.fleet.scheduling import FleetEntry
from virtcap.model.policy import NOVA_ALLOCATION_RATIOS, NOVA_RESERVED, HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import host_state
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.planner import Planner, PlannerBusyError
from virtcap.service.scenarios import plan_scenario

SCENARIOS = "/api/v1/plans/scenarios"
ANSWER_KEYS = {
    "before", "after", "placed", "unplaced", "displaced", "added", "removed", "drained",
    "reserve_host_failures", "solved_add_hypervisors", "tries", "seconds",
}  # fmt: skip
SIDE_KEYS = {
    "hypervisors", "eligible", "schedulable", "schedulable_by_zone", "sellable", "sellable_by_zone",
    "failures_tolerated", "failure_bound", "stranded", "compaction",
}  # fmt: skip

SMALL_SKU = {"cpus": 32, "memory": "128GiB", "disk": "2TiB"}
"""m1.small (1 vCPU, 2 GiB, 10 GiB) under the demo's defaults (vCPU 4.0, 512 MiB reserved): the
memory decides, (128 GiB - 512 MiB) / 2 GiB = 63 a host (CPUs 128, disk 204)."""
SMALLS_PER_SKU = 63

GROWING_AZ_2: dict[str, Any] = {
    "add_hypervisors": [
        {"count": 2, "name_prefix": "buy", "sku": SMALL_SKU, "groups": {"availability_zone": ["az-2"]}}
    ],
    "demand": [{"flavor": "m1.small", "count": 40, "availability_zone": "az-2"}],
}
"""Two hosts of SMALL_SKU in az-2 and 40 m1.small there: az-2 has room for 13 before, 13 + 126 after."""

TO_SOLVE: dict[str, Any] = {
    "add_hypervisors": [
        {"count": 1, "name_prefix": "buy", "sku": SMALL_SKU, "groups": {"availability_zone": ["az-2"]}}
    ],
    "demand": [{"flavor": "m1.small", "count": 1000, "availability_zone": "az-2"}],
    "reserve_host_failures": 0,
}
"""1,000 m1.small in az-2, where 13 fit: ceil((1000 - 13) / 63) = 16 hosts of SMALL_SKU. (No
reserve: the demo's fleet keeps none, compute-04's database finding no host in az-1, whatever is
added in az-2.)"""
TWO_KINDS: dict[str, Any] = {
    "add_hypervisors": [
        {"count": 1, "name_prefix": "one", "sku": SMALL_SKU},
        {"count": 1, "name_prefix": "two", "sku": SMALL_SKU},
    ],
    "demand": [{"flavor": "m1.small", "count": 1}],
}
TO_SOLVE_ANSWER = math.ceil(
    (1000 - GROUP_HEADROOM[("availability_zone", "az-2")]["m1.small"]) / SMALLS_PER_SKU
)


def post(
    server: Server, body: Any, query: str = "", timeout: float = 120.0
) -> tuple[int, Any, dict[str, str]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        server.base_url + SCENARIOS + query,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response), dict(response.headers)
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            answer = json.loads(text)
        except json.JSONDecodeError:
            answer = text.decode(errors="replace")
        return error.code, answer, dict(error.headers)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtcap", "plan", "scenario", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def without_time(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key != "seconds"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("scenarios")
    with running_server(["--demo"], directory) as server:
        yield server


# --- the API on the live fleet -----------------------------------------------------------------


def test_an_empty_scenario_answers_the_fleet_as_it_is_before_and_after(demo: Server) -> None:
    status, answer, _ = post(demo, {})
    assert status == 200, answer
    assert set(answer) == ANSWER_KEYS
    assert set(answer["before"]) == SIDE_KEYS
    assert answer["after"] == answer["before"]
    assert (answer["added"], answer["placed"], answer["unplaced"], answer["displaced"]) == ([], [], [], [])
    # the demo's figures: 10 audited (compute-07 down), compute-05 in maintenance; az-2's headroom
    assert (answer["before"]["hypervisors"], answer["before"]["eligible"]) == (10, 9)
    for (kind, zone), counts in GROUP_HEADROOM.items():
        if kind == "availability_zone":
            for flavor, count in counts.items():
                assert answer["before"]["schedulable_by_zone"][zone][flavor] == count, (zone, flavor)


def test_hypervisors_added_and_demand_placed_on_the_live_fleet(demo: Server) -> None:
    status, answer, _ = post(demo, GROWING_AZ_2)
    assert status == 200, answer
    before, after = answer["before"], answer["after"]
    assert answer["added"] == ["buy-1", "buy-2"]
    assert after["hypervisors"] == before["hypervisors"] + 2
    assert after["eligible"] == before["eligible"] + 2
    [placed] = answer["placed"]
    assert placed["count"] == 40 and sum(placed["hypervisors"].values()) == 40
    assert answer["unplaced"] == []
    # az-2's room for m1.small: 13 + 2 x 63 - 40; az-1's unchanged
    assert after["schedulable_by_zone"]["az-2"]["m1.small"] == 13 + 2 * SMALLS_PER_SKU - 40
    assert after["schedulable_by_zone"]["az-1"] == before["schedulable_by_zone"]["az-1"]
    assert answer["reserve_host_failures"] == 1  # the configuration's


def test_a_scenario_holds_and_changes_nothing_on_the_exporter(demo: Server) -> None:
    _, capacity_before = demo.get("/api/v1/capacity", timeout=10)
    status, _, _ = post(demo, {**GROWING_AZ_2, "drain": {"hypervisors": ["compute-11"]}})
    assert status == 200
    _, capacity_after = demo.get("/api/v1/capacity", timeout=10)
    hypervisors = [h["name"] for h in json.loads(capacity_after)["hypervisors"]]
    assert "buy-1" not in hypervisors
    assert [h["domains"] for h in json.loads(capacity_after)["hypervisors"]] == [
        h["domains"] for h in json.loads(capacity_before)["hypervisors"]
    ]
    _, claims, _ = _get_json(demo, "/api/v1/claims")
    assert claims == {"claims": []}


def _get_json(server: Server, path: str) -> tuple[int, Any, None]:
    status, body = server.get(path, timeout=10)
    return status, json.loads(body), None


def test_solving_for_the_hypervisors_to_add_answers_the_fewest_by_hand(demo: Server) -> None:
    status, answer, _ = post(demo, TO_SOLVE, "?solve_for=add_hypervisors")
    assert status == 200, answer
    found = answer["solved_add_hypervisors"]
    assert found == TO_SOLVE_ANSWER
    assert answer["tries"][str(found)] is True and answer["tries"][str(found - 1)] is False
    assert answer["added"] == [f"buy-{n}" for n in range(1, found + 1)]
    assert answer["unplaced"] == []
    assert answer["placed"][0]["count"] == 1000


# --- bad scenarios: a 400 naming the key --------------------------------------------------------

SKU = {"cpus": 8, "memory": "32GiB"}
BAD_BODIES = [
    pytest.param({"add_hypervisor": []}, "add_hypervisor", id="unknown key"),
    pytest.param(
        {"add_hypervisors": [{"count": 1, "sku": {**SKU, "gpus": 2}}]},
        "add_hypervisors[0].sku",
        id="unknown sku key",
    ),
    pytest.param(
        {"add_hypervisors": [{"count": -1, "sku": SKU}]}, "add_hypervisors[0].count", id="negative count"
    ),
    pytest.param(
        {"add_hypervisors": [{"count": 10_001, "sku": SKU}]}, "add_hypervisors", id="too many added"
    ),
    pytest.param({"add_hypervisors": [{"count": 1}]}, "add_hypervisors[0]", id="no hardware"),
    pytest.param(
        {"add_hypervisors": [{"count": 1, "sku": {"cpus": 2, "memory": "8GiB", "numa_cells": 4}}]},
        "add_hypervisors[0].sku",
        id="a sku that makes no host",
    ),
    pytest.param(
        {"add_hypervisors": [{"count": 1, "capture": "/etc/hostname"}]},
        "add_hypervisors[0].capture",
        id="a capture through the API",
    ),
    pytest.param({"demand": [{"flavor": "m1.small", "count": -3}]}, "demand[0].count", id="negative demand"),
    pytest.param({"demand": [{"flavor": "m1.small", "count": 100_001}]}, "demand", id="too much demand"),
    pytest.param({"demand": [{"flavor": "m9.huge", "count": 1}]}, "demand[0].flavor", id="unknown flavor"),
    pytest.param(
        {"demand": [{"flavor": "m1.small", "count": 1, "availability_zone": "az-9"}]},
        "demand[0].availability_zone",
        id="unknown zone",
    ),
    pytest.param({"drain": {"hypervisors": ["nowhere"]}}, "drain.hypervisors[0]", id="unknown hypervisor"),
    pytest.param(
        {"remove_hypervisors": {"groups": {"rack": ["r9"]}}}, "remove_hypervisors.groups", id="unknown group"
    ),
    pytest.param(
        {"policy": [{"hypervisors": ["compute-01"]}]}, "policy[0]", id="a policy that changes nothing"
    ),
    pytest.param(
        {"policy": [{"all": True, "cpu_shared_set": "0-3", "cpu_dedicated_set": "2-5"}]},
        "policy[0]",
        id="overlapping cpu sets",
    ),
    pytest.param({"reserve_host_failures": -1}, "reserve_host_failures", id="negative reserve"),
    pytest.param({"reserve_host_failures": "1"}, "reserve_host_failures", id="a string for a number"),
]


@pytest.mark.parametrize(("body", "key"), BAD_BODIES)
def test_a_bad_scenario_is_a_400_naming_the_key(demo: Server, body: dict[str, Any], key: str) -> None:
    status, answer, _ = post(demo, body)
    assert status == 400, answer
    assert set(answer) == {"error"}
    assert answer["error"].startswith(key), answer
    assert "\n" not in answer["error"]


@pytest.mark.parametrize(
    ("query", "body", "key"),
    [
        ("?solve_for=remove_hypervisors", GROWING_AZ_2, "solve_for"),
        ("?solve_for=", GROWING_AZ_2, "solve_for"),
        ("?solve_for=add_hypervisors", {"demand": [{"flavor": "m1.small", "count": 1}]}, "add_hypervisors"),
        ("?solve_for=add_hypervisors", TWO_KINDS, "add_hypervisors"),
    ],
    ids=["unknown", "empty", "nothing to add", "two kinds to add"],
)
def test_a_bad_solve_for_is_a_400(demo: Server, query: str, body: dict[str, Any], key: str) -> None:
    status, answer, _ = post(demo, body, query)
    assert status == 400, answer
    assert answer["error"].startswith(key), answer


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'"scenario"', b"{", b"\xff", b'{"demand": [{"flavor": "m1.small", "count": NaN}]}'],
    ids=["list", "string", "cut", "bytes", "nan"],
)
def test_a_body_that_is_no_scenario_is_a_400(demo: Server, raw: bytes) -> None:
    status, answer, _ = post(demo, raw)
    assert status == 400, answer
    assert set(answer) == {"error"}


def test_a_body_too_large_is_refused_not_read(demo: Server) -> None:
    body = json.dumps(
        {"drain": {"hypervisors": ["compute-01"] * 10}, "pad": "x" * (10 * 1024 * 1024)}
    ).encode()
    status, answer, _ = post(demo, body)
    assert status in (400, 413), answer


# --- one scenario at a time --------------------------------------------------------------------


def test_a_second_scenario_while_one_is_computed_is_told_when_to_ask_again() -> None:
    """Deterministic: whichever of the two reaches the planner first takes it before its next pause
    (it finds it free and marks it busy at once); the other finds it busy."""
    config = demo_config()
    snapshots = asyncio.run(audit_fleet_once(config))
    fleet = [FleetEntry.of(snapshot) for snapshot in snapshots]
    document = parse_scenario({"add_hypervisors": [{"count": 1, "sku": SMALL_SKU}]})

    async def two_at_once() -> tuple[object, object, object]:
        planner = Planner()
        try:
            first, second = await asyncio.gather(
                plan_scenario(
                    planner, fleet, [], config, config.flavor_demands, document=document, solve_for=None
                ),
                plan_scenario(
                    planner, fleet, [], config, config.flavor_demands, document=document, solve_for=None
                ),
                return_exceptions=True,
            )
            third = await plan_scenario(
                planner, fleet, [], config, config.flavor_demands, document=document, solve_for=None
            )
        finally:
            await planner.stop()
        return first, second, third

    first, second, third = asyncio.run(two_at_once())
    [busy] = [answer for answer in (first, second) if isinstance(answer, PlannerBusyError)]
    [answered] = [answer for answer in (first, second) if isinstance(answer, str)]
    assert busy.retry_after >= 1
    assert isinstance(third, str)
    assert without_time(json.loads(answered)) == without_time(json.loads(third))


# --- the command --------------------------------------------------------------------------------


def _capture_fits(flavors: list[str]) -> dict[str, int]:
    """Per flavor, what an empty host of compute-10's capture offers under the demo's defaults
    (what an added hypervisor's policy is without keys of its own), built here from the audit."""
    config = demo_config()
    path = DEMO_DIR / "compute-10.json"
    disk = next(h for h in config.hypervisors if h.name == "compute-10").disk
    facts = audit_host(ReplayConnection(load_capture(path)), f"replay://{path}", disk, cpu_window=0.0)
    assert facts.domains  # the capture has domains: an added copy leaves them out
    policy = HostPolicy(
        allocation_ratios={
            **NOVA_ALLOCATION_RATIOS,
            Resource.VCPU: 4.0,
            Resource.MEMORY: 1.0,
            Resource.DISK: 1.0,
        },
        reserved={**NOVA_RESERVED, Resource.VCPU: 0, Resource.MEMORY: 512 * MIB, Resource.DISK: 0},
    )
    capacity = host_state("copy", replace(facts, domains=()), policy).capacity
    return {flavor: capacity.fit_count(config.flavor_demands[flavor]).count for flavor in flavors}


@pytest.fixture(scope="module")
def capture_scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two copies of compute-10's capture in az-1, read relative to the scenario's directory."""
    directory = tmp_path_factory.mktemp("capture-scenario")
    shutil.copy(DEMO_DIR / "compute-10.json", directory / "spare.json")
    path = directory / "scenario.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "add_hypervisors": [
                    {
                        "count": 2,
                        "name_prefix": "spare",
                        "capture": "spare.json",
                        "groups": {"availability_zone": "az-1"},
                    }
                ]
            }
        )
    )
    return path


def test_a_capture_adds_hypervisors_of_its_hardware_without_its_domains(capture_scenario: Path) -> None:
    run = cli(str(capture_scenario), "--demo", "--format", "json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert set(answer) == ANSWER_KEYS
    assert answer["added"] == ["spare-1", "spare-2"]
    before, after = answer["before"], answer["after"]
    assert (after["hypervisors"], after["eligible"]) == (before["hypervisors"] + 2, before["eligible"] + 2)
    flavors = ["m1.small", "m1.medium", "m1.large", "m1.xlarge", "b1.large"]
    one = _capture_fits(flavors)
    for flavor in flavors:
        assert after["schedulable"][flavor] == before["schedulable"][flavor] + 2 * one[flavor], flavor
        in_zone = after["schedulable_by_zone"]["az-1"][flavor]
        assert in_zone == before["schedulable_by_zone"]["az-1"][flavor] + 2 * one[flavor], flavor
        assert after["schedulable_by_zone"]["az-2"][flavor] == before["schedulable_by_zone"]["az-2"][flavor]


def test_the_table_says_what_the_scenario_changes(tmp_path: Path) -> None:
    path = tmp_path / "grow.yaml"
    path.write_text(yaml.safe_dump(GROWING_AZ_2))
    run = cli(str(path), "--demo")
    assert run.returncode == 0, run.stderr
    text = run.stdout
    assert "before" in text and "after" in text
    assert "m1.small" in text and "az-2" in text
    assert "40 of 40" in text  # the demand placed


def test_the_command_asks_a_running_exporter_for_the_same_answer(demo: Server, tmp_path: Path) -> None:
    path = tmp_path / "grow.yaml"
    path.write_text(yaml.safe_dump(GROWING_AZ_2))
    asked = cli(str(path), "--url", demo.base_url, "--format", "json")
    assert asked.returncode == 0, asked.stderr
    local = cli(str(path), "--demo", "--format", "json")
    assert local.returncode == 0, local.stderr
    # the API's answer itself is checked against the fleet by the tests above
    assert set(json.loads(asked.stdout)) == set(json.loads(local.stdout)) == ANSWER_KEYS
    assert without_time(json.loads(asked.stdout)) == without_time(json.loads(local.stdout))


def test_the_exporter_refuses_a_capture_and_the_command_exits_2_naming_the_key(
    demo: Server, capture_scenario: Path
) -> None:
    run = cli(str(capture_scenario), "--url", demo.base_url)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith(f"virtcap: plan scenario: {capture_scenario}: add_hypervisors[0].capture: "), line


BAD_FILES = [
    pytest.param("add_hypervisor: []\n", "add_hypervisor: ", id="unknown key"),
    pytest.param(
        "add_hypervisors:\n  - {count: -2, sku: {cpus: 8, memory: 32GiB}}\n",
        "add_hypervisors[0].count: ",
        id="negative count",
    ),
    pytest.param(
        "add_hypervisors:\n  - {count: 1, capture: bad.json}\n",
        "add_hypervisors[0].capture: ",
        id="a bad capture",
    ),
    pytest.param(
        "policy:\n  - {all: true, cpu_shared_set: '0-3', cpu_dedicated_set: '2-5'}\n",
        "policy[0].",
        id="overlapping cpu sets",
    ),
    pytest.param("demand: [{flavor: m1.small, count: 1\n  reserve: {\n", "", id="not YAML"),
    pytest.param("# " + "x" * (10 * 1024 * 1024) + "\n", "", id="10 MB"),
]


@pytest.mark.parametrize(("text", "key"), BAD_FILES)
def test_a_bad_scenario_file_exits_2_naming_the_file_and_the_key(tmp_path: Path, text: str, key: str) -> None:
    (tmp_path / "bad.json").write_text('{"not": "a capture"')
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    run = cli(str(path), "--demo")
    assert run.returncode == 2, (run.stdout, run.stderr[-2000:])
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith(f"virtcap: plan scenario: {path}"), line
    assert line.removeprefix(f"virtcap: plan scenario: {path}").startswith((f": {key}", ":")), line
    if key:
        assert line.startswith(f"virtcap: plan scenario: {path}: {key}"), line
