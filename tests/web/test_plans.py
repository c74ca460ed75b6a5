"""The consolidation plan for users: `POST /api/v1/plans/consolidation` on a real `virtcap serve
--demo` and `virtcap plan consolidate` in a subprocess, the same plan either way, every plan
replayed through the independent checker (tests/support/migrations.py), bad input a 400 or exit 2,
and the planner's worker process: one plan at a time, killed past its time limit, stopped with the
exporter."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.claims_client import call
from tests.support.migrations import replay_plan
from tests.support.serving import Server, running_server, wait_for
from virtcap.contract.plans import ConsolidationBody, PlanError
from virtcap.demo import demo_config
from virtcap.fleet.packing import FleetPacking, PackingSettings
from virtcap.fleet.scheduling import FleetEntry, host_states
from virtcap.fleet.tolerance import ToleranceReport
from virtcap.model.packing.compaction import compaction
from virtcap.model.packing.consolidation import ConsolidationPlan, Move, Unmovable
from virtcap.model.resources import Resource, resource_by_label
from virtcap.model.scheduler import HostState
from virtcap.service.consolidation import ConsolidationPlanner, compaction_target, plan_answer
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.planner import Job, Planner, PlannerBusyError, PlannerFailedError, lower_priority

PLAN = "/api/v1/plans/consolidation"
OPTIONS: list[dict[str, Any]] = [
    {},
    {"max_moves": 30},
    {"keep_free": 1},
    {"availability_zone": "az-2"},
    {"availability_zone": "az-1", "exclude_hosts": ["compute-04", "compute-07"]},
]
"""compute-07 is configured and never audited (down): excluding it is no error."""


def _flags(options: dict[str, Any]) -> list[str]:
    flags = []
    if "max_moves" in options:
        flags += ["--max-moves", str(options["max_moves"])]
    if "keep_free" in options:
        flags += ["--keep-free", str(options["keep_free"])]
    if "availability_zone" in options:
        flags += ["--availability-zone", options["availability_zone"]]
    for host in options.get("exclude_hosts", []):
        flags += ["--exclude-host", host]
    return flags


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtcap", "plan", "consolidate", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("plans")
    with running_server(["--demo"], directory) as server:
        yield server


@pytest.fixture(scope="module")
def demo_states() -> list[HostState]:
    """The demo fleet as a one-shot audit sees it (the same data the server audits)."""
    snapshots = asyncio.run(audit_fleet_once(demo_config()))
    return host_states([FleetEntry.of(snapshot) for snapshot in snapshots], ())


def _resource(label: str) -> Resource:
    try:
        return resource_by_label(label)
    except KeyError:
        return Resource.custom_class(label.upper())


def _plan_of(answer: dict[str, Any]) -> ConsolidationPlan:
    """The answer read back into the planner's own type, for the checker: every field the JSON has."""
    return ConsolidationPlan(
        hypervisors_before=answer["hypervisors_before"],
        hypervisors_after=answer["hypervisors_after"],
        emptied=tuple(answer["emptied"]),
        moves=tuple(
            Move(
                move["domain"],
                move["name"],
                move["from"],
                move["to"],
                {_resource(label): amount for label, amount in move["resources"].items()},
            )
            for move in answer["moves"]
        ),
        unmovable=tuple(
            Unmovable(item["domain"], item["name"], item["from"], item["reason"])
            for item in answer["unmovable"]
        ),
        complete=answer["complete"],
    )


# --- the API and the command line agree, and every plan replays --------------------------------


@pytest.mark.parametrize("options", OPTIONS, ids=lambda options: json.dumps(options) or "defaults")
def test_the_api_plan_is_the_command_lines_on_the_same_audit_and_replays(
    demo: Server, demo_states: list[HostState], options: dict[str, Any]
) -> None:
    status, answer = call(demo, "POST", PLAN, options)  # a read: no credentials needed
    assert status == 200, answer
    run = _cli("--demo", "--format", "json", *_flags(options))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == answer
    zone = options.get("availability_zone")
    audited = {state.name for state in demo_states}
    replay_plan(
        demo_states,
        _plan_of(answer),
        exclude=frozenset(options.get("exclude_hosts", ())) & audited,
        availability_zone=zone,
        max_moves=options.get("max_moves"),
    )
    assert answer["complete"] is True
    assert not set(answer["emptied"]) & set(options.get("exclude_hosts", ()))


def test_the_demo_plan_empties_hypervisors_and_names_what_cannot_move(demo: Server) -> None:
    status, answer = call(demo, "POST", PLAN, {})
    assert status == 200, answer
    assert answer["hypervisors_after"] < answer["hypervisors_before"]
    assert answer["emptied"] and answer["moves"] and answer["unmovable"]
    assert set(answer) == {
        "hypervisors_before", "hypervisors_after", "emptied", "moves", "unmovable", "complete"
    }  # fmt: skip
    assert set(answer["moves"][0]) == {"domain", "name", "from", "to", "resources"}
    assert set(answer["unmovable"][0]) == {"domain", "name", "from", "reason"}
    # keeping one hypervisor free empties one fewer; no moves at all empties none
    status, kept = call(demo, "POST", PLAN, {"keep_free": 1})
    assert len(kept["emptied"]) == len(answer["emptied"]) - 1
    status, none = call(demo, "POST", PLAN, {"max_moves": 0})
    assert (none["emptied"], none["moves"]) == ([], [])
    assert none["hypervisors_after"] == none["hypervisors_before"]


def test_the_table_shows_before_after_the_emptied_moves_and_the_unmovable() -> None:
    run = _cli("--demo")
    assert run.returncode == 0, run.stderr
    json_run = _cli("--demo", "--format", "json")
    answer = json.loads(json_run.stdout)
    text = run.stdout
    assert f"{answer['hypervisors_before']} before, {answer['hypervisors_after']} after" in text
    for name in answer["emptied"]:
        assert name in text
    for move in answer["moves"]:
        assert move["name"] in text
    assert "Unmovable" in text
    for item in answer["unmovable"]:
        assert item["name"] in text


def test_the_command_line_asks_a_running_exporter(demo: Server) -> None:
    run = _cli("--url", demo.base_url, "--format", "json", "--keep-free", "1")
    assert run.returncode == 0, run.stderr
    status, answer = call(demo, "POST", PLAN, {"keep_free": 1})
    assert status == 200
    assert json.loads(run.stdout) == answer


def test_a_consolidation_plan_moves_and_holds_nothing(demo: Server) -> None:
    _, before = call(demo, "GET", "/api/v1/capacity")
    call(demo, "POST", PLAN, {})
    _, claims = call(demo, "GET", "/api/v1/claims")
    _, after = call(demo, "GET", "/api/v1/capacity")
    assert claims == {"claims": []}
    assert [h["domains"] for h in after["hypervisors"]] == [h["domains"] for h in before["hypervisors"]]


# --- bad input: 400 and exit 2, one line naming the key or flag ---------------------------------

BAD_BODIES = [
    pytest.param({"exclude_hosts": ["nowhere"]}, "exclude_hosts", id="unknown hypervisor"),
    pytest.param({"availability_zone": "az-9"}, "availability_zone", id="unknown zone"),
    pytest.param({"max_moves": -1}, "max_moves", id="negative max_moves"),
    pytest.param({"max_moves": 10**12}, "max_moves", id="huge max_moves"),
    pytest.param({"max_moves": 10**400}, "max_moves", id="a number past any integer type"),
    pytest.param({"keep_free": 12}, "keep_free", id="keep_free above the fleet's 11"),
    pytest.param({"keep_free": 5, "availability_zone": "az-2"}, "keep_free", id="keep_free above the zone's"),
    pytest.param({"keep_free": -1}, "keep_free", id="negative keep_free"),
    pytest.param({"max_moves": "3"}, "max_moves", id="a string for a number"),
    pytest.param({"max_moves": 2.5}, "max_moves", id="a fraction"),
    pytest.param({"keep_free": True}, "keep_free", id="a boolean for a number"),
    pytest.param({"availability_zone": ["az-1"]}, "availability_zone", id="a list for a zone"),
    pytest.param({"exclude_hosts": "compute-01"}, "exclude_hosts", id="a string for a list"),
    pytest.param({"exclude_hosts": [""]}, "exclude_hosts", id="an empty name"),
    pytest.param({"moves": 3}, "moves", id="an unknown field"),
]


@pytest.mark.parametrize(("body", "key"), BAD_BODIES)
def test_bad_input_is_a_400_naming_the_key(demo: Server, body: dict[str, Any], key: str) -> None:
    status, answer = call(demo, "POST", PLAN, body)
    assert status == 400, answer
    assert set(answer) == {"error"}
    assert answer["error"].startswith(key), answer
    assert "\n" not in answer["error"]


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'"plan"', b"{", b'{"max_moves": NaN}', b"\xff"],
    ids=["list", "string", "cut", "nan", "bytes"],
)
def test_a_body_that_is_not_an_object_is_a_400(demo: Server, raw: bytes) -> None:
    status, answer = call(demo, "POST", PLAN, raw)
    assert status == 400, answer
    assert set(answer) == {"error"}


CLI_BAD = [
    pytest.param(["--exclude-host", "nowhere"], "--exclude-host", id="unknown hypervisor"),
    pytest.param(["--availability-zone", "az-9"], "--availability-zone", id="unknown zone"),
    pytest.param(["--max-moves", "-1"], "--max-moves", id="negative"),
    pytest.param(["--max-moves", "1000000000000"], "--max-moves", id="huge"),
    pytest.param(["--max-moves", "lots"], "--max-moves", id="not a number"),
    pytest.param(["--keep-free", "12"], "--keep-free", id="above the fleet's size"),
    pytest.param(["--keep-free", "2.5"], "--keep-free", id="a fraction"),
]


@pytest.mark.parametrize(("flags", "flag"), CLI_BAD)
def test_bad_flags_exit_2_with_one_line_naming_the_flag(flags: list[str], flag: str) -> None:
    run = _cli("--demo", *flags)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith(f"virtcap: plan consolidate: {flag}: "), line


@pytest.mark.parametrize(("flags", "flag"), CLI_BAD)
def test_the_exporters_400_exits_2_naming_the_flag(demo: Server, flags: list[str], flag: str) -> None:
    run = _cli("--url", demo.base_url, *flags)
    assert run.returncode == 2, (run.stdout, run.stderr)
    [line] = run.stderr.splitlines()
    assert line.startswith(f"virtcap: plan consolidate: {flag}: "), line


def test_an_exporter_that_cannot_be_reached_exits_1(tmp_path: Path) -> None:
    run = _cli("--url", "http://127.0.0.1:9")  # discard: nothing listens
    assert run.returncode == 1
    [line] = run.stderr.splitlines()
    assert line.startswith("virtcap: plan consolidate: cannot reach http://127.0.0.1:9")


# --- the worker process --------------------------------------------------------------------------


def _demo_fleet() -> list[FleetEntry]:
    snapshots = asyncio.run(audit_fleet_once(demo_config()))
    return [FleetEntry.of(snapshot) for snapshot in snapshots]


def test_one_plan_at_a_time_the_second_is_told_when_to_ask_again(demo_states: list[HostState]) -> None:
    fleet = _demo_fleet()
    multipliers = demo_config().multipliers
    body = ConsolidationBody()

    async def two_at_once() -> tuple[object, object, str]:
        planner = ConsolidationPlanner()
        try:
            # the second starts once the first waits: for its states, or for the worker
            first, second = await asyncio.gather(
                planner.plan(fleet, [], multipliers, body),
                planner.plan(fleet, [], multipliers, body),
                return_exceptions=True,
            )
            third = await planner.plan(fleet, [], multipliers, body)  # the first is done
        finally:
            await planner.stop()
        return first, second, third

    first, second, third = asyncio.run(two_at_once())
    assert isinstance(second, PlannerBusyError) and second.retry_after >= 1
    assert isinstance(first, str) and first == third
    assert json.loads(first) == json.loads(plan_answer(demo_states, multipliers, body, 30.0).as_json())


@pytest.mark.parametrize("options", [{}, {"keep_free": 1}, {"max_moves": 30}])
def test_the_compactions_target_only_stops_the_search_sooner(
    demo_states: list[HostState], options: dict[str, Any]
) -> None:
    """The fleet's compaction bound as the target: the same plan as without it."""
    multipliers = demo_config().multipliers
    body = ConsolidationBody.model_validate(options)
    bound = compaction(demo_states).lower_bound
    without = plan_answer(demo_states, multipliers, body, 30.0)
    assert plan_answer(demo_states, multipliers, body, 30.0, target=bound) == without
    assert without.hypervisors_after >= bound


def test_the_exporters_compaction_is_the_target_only_on_the_audits_it_read(
    demo_states: list[HostState],
) -> None:
    fleet = _demo_fleet()
    newest = max(entry.good.taken_at for entry in fleet if entry.good is not None)
    settings = PackingSettings(flavors={}, groups={}, reserve_host_failures=1)
    packing = FleetPacking().apply(demo_states, settings, demo_config().multipliers)
    report = ToleranceReport(
        evacuations={},
        tolerated=0,
        bound=1,
        computed_at=newest + 2.0,
        duration_seconds=1.0,  # began after the newest audit
        incremental=False,
        packing=replace(packing, computed_at=newest + 3.0),
    )
    body = ConsolidationBody()
    assert packing.compaction is not None
    assert compaction_target(report, fleet, body) == packing.compaction.lower_bound
    assert compaction_target(None, fleet, body) is None
    assert compaction_target(replace(report, packing=None), fleet, body) is None
    # another scope than the fleet's
    assert compaction_target(report, fleet, ConsolidationBody(availability_zone="az-1")) is None
    assert compaction_target(report, fleet, ConsolidationBody(exclude_hosts=["compute-04"])) is None
    # an audit taken after the computation began, the packing kept from an earlier report, a
    # hypervisor it counted no longer audited
    assert compaction_target(replace(report, duration_seconds=3.0), fleet, body) is None
    kept = replace(report, packing=replace(packing, computed_at=newest + 1.0))
    assert compaction_target(kept, fleet, body) is None
    gone = next(name for name in packing.stranded)
    assert compaction_target(report, [e for e in fleet if e.name != gone], body) is None
    # answers still pending: the compaction may be older than the report's states
    behind = replace(report, packing=replace(packing, computed_at=newest + 3.0, pending=1))
    assert compaction_target(behind, fleet, body) is None


def test_a_worker_past_its_time_limit_is_killed_and_the_next_plan_starts_another() -> None:
    fleet = _demo_fleet()
    multipliers = demo_config().multipliers

    async def late_then_on_time() -> tuple[BaseException | None, list[int], str]:
        # a limit no plan meets: computing one takes longer than a millisecond
        planner = ConsolidationPlanner(time_limit_seconds=0.001, grace_seconds=0.0)
        failed: BaseException | None = None
        try:
            await planner.plan(fleet, [], multipliers, ConsolidationBody())
        except PlannerFailedError as error:
            failed = error
        # SIGKILL takes effect, and the child is reaped, a moment later; a worker left running
        # would stay (a pool's worker waits for its next task), so a few seconds tell them apart
        deadline = time.monotonic() + 5.0
        while (killed := list(_workers())) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        planner.time_limit_seconds, planner.grace_seconds = 30.0, 30.0
        try:
            answer = await planner.plan(fleet, [], multipliers, ConsolidationBody())
        finally:
            await planner.stop()
        return failed, killed, answer

    failed, killed, answer = asyncio.run(late_then_on_time())
    assert isinstance(failed, PlannerFailedError)
    assert json.loads(answer)["complete"] is True
    assert killed == []  # killed, not left to finish


SLOW_START_SECONDS = 3.0
"""Longer than the plans' bound below (their time limit and grace, 0.5 s each)."""


def slow_start() -> None:
    """A worker's start as slow as on a busy machine (its imports at a lower priority)."""
    lower_priority()
    time.sleep(SLOW_START_SECONDS)


def planned() -> tuple[bool, str]:
    return True, '"planned"'


async def nothing_to_prepare() -> Job:
    return planned, ()


def test_a_slow_worker_start_is_not_counted_in_a_plans_bound() -> None:
    """A plan whose new worker takes longer to start than the plan may take is answered all the
    same; a worker not ready within its own bound (START_SECONDS) is given up, plainly."""

    async def slow_then_stuck() -> tuple[str, BaseException | None, float]:
        planner = Planner(0.5, 0.5, initializer=slow_start)
        try:
            _answered, text = await planner.submit(nothing_to_prepare, 0.5, "the plan")
        finally:
            await planner.stop()
        stuck = Planner(0.5, 0.5, initializer=slow_start, start_seconds=SLOW_START_SECONDS / 6)
        failed: BaseException | None = None
        began = time.monotonic()
        try:
            await stuck.submit(nothing_to_prepare, 0.5, "the plan")
        except PlannerFailedError as error:
            failed = error
        finally:
            await stuck.stop()
        return text, failed, time.monotonic() - began

    text, failed, took = asyncio.run(slow_then_stuck())
    assert text == '"planned"'
    assert isinstance(failed, PlannerFailedError) and "not ready" in str(failed)
    assert took < SLOW_START_SECONDS


def test_options_the_planner_refuses_are_plan_errors(demo_states: list[HostState]) -> None:
    # checked against the configuration first; what the model refuses anyway is a PlanError too
    with pytest.raises(PlanError):
        plan_answer(demo_states, demo_config().multipliers, ConsolidationBody(), float("nan"))


def _workers() -> Iterator[int]:
    """This process's live planner workers (multiprocessing's spawned children)."""
    for pid in _children():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            yield pid


def _children(parent: int | None = None) -> Iterator[int]:
    """The live child processes of `parent` (this process by default), zombies left out."""
    parent = os.getpid() if parent is None else parent
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            yield int(entry.name)


def test_the_worker_stops_with_the_exporter(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        before = set(_children(server.process.pid))
        status, _ = call(server, "POST", PLAN, {})
        assert status == 200
        workers = set(_children(server.process.pid)) - before
        assert workers  # the planner's worker (and multiprocessing's resource tracker)
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
    wait_for(lambda: not workers & {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}, 10)
    assert "leaked" not in server.log_text()
