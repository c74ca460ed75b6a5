"""The packing answers as the exporter computes them (fleet/packing.py): after the failure
tolerance, in its worker, kept between computations so that a change costs the changed
hypervisor's stranded problem; in /metrics, /api/v1/capacity and `virtcap audit`."""

from __future__ import annotations

import asyncio
import itertools
import json
import pickle
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import IO

import pytest

from tests.support.claims_client import auth, call, write_config
from tests.support.serving import WORKER_SECONDS, Samples, running_server, series, value, wait_for
from virtcap.demo import demo_config
from virtcap.exposition.packing_catalogue import PACKING_FAMILIES
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.packing import PackingReport
from virtcap.fleet.snapshot import HypervisorSnapshot, PendingClaims
from virtcap.fleet.tolerance import (
    FleetChanges,
    FleetSimulation,
    LocalSimulation,
    SimulatedHost,
    packing_settings,
    scheduler_host,
)
from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import compaction
from virtcap.model.packing.stranded import stranded_capacity
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import SPREAD
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.tolerance_worker import (
    HEADER,
    WORKER_COMMAND,
    AnswerWriter,
    EncodedPacking,
    PackingDecoder,
    compute_steps,
    encode_request,
)

IN_MAINTENANCE, DOWN = "compute-05", "compute-07"


@pytest.fixture(scope="module")
def audited() -> tuple[HypervisorSnapshot, ...]:
    return tuple(asyncio.run(audit_fleet_once(demo_config(), cpu_window=0.0)))


@pytest.fixture(scope="module")
def flavors(audited: tuple[HypervisorSnapshot, ...]) -> dict[str, Demand]:
    facts = [(s.name, s.facts) for s in audited if s.facts is not None]
    return with_discovered_flavors(demo_config(), facts).flavor_demands


def _hosts(snapshots: tuple[HypervisorSnapshot, ...]) -> list[SimulatedHost]:
    return [SimulatedHost(s.name, s, up=True) for s in snapshots if s.up]


def _packed(
    simulation: LocalSimulation, hosts: list[SimulatedHost], flavors: dict[str, Demand]
) -> PackingReport:
    report = simulation.compute(hosts, SPREAD, 3, packing_settings(hosts, flavors, 1))
    assert report is not None and report.packing is not None
    return report.packing


def test_the_demo_shows_stranded_capacity_and_a_compaction_below_its_size(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    hosts = _hosts(audited)
    packing = _packed(LocalSimulation(), hosts, flavors)
    # every eligible hypervisor, as the model answers it alone
    assert IN_MAINTENANCE not in packing.stranded and DOWN not in packing.stranded
    assert set(packing.stranded) == {h.name for h in hosts} - {IN_MAINTENANCE}
    for host in hosts:
        if host.name in packing.stranded:
            assert host.audit.capacity is not None
            assert packing.stranded[host.name] == stranded_capacity(host.audit.capacity, flavors)
    stranded = sum(amount > 0 for found in packing.stranded.values() for amount in found.amounts.values())
    assert stranded >= 3
    assert packing.compaction is not None and packing.pending == 0
    assert 0 < packing.compaction.lower_bound <= packing.compaction.hypervisors < packing.compaction.eligible
    assert packing.compaction.freeable == packing.compaction.eligible - packing.compaction.hypervisors
    # each configured group alone: its eligible members hold their own domains
    zone = packing.groups["availability_zone", "az-2"]
    assert zone.eligible == 3 and 1 <= zone.hypervisors <= 3
    assert set(packing.sellable) == set(flavors)
    assert {zone for zone, _flavor in packing.sellable_by_zone} == {"az-1", "az-2"}


def test_one_changed_hypervisor_solves_its_stranded_problem_alone(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    simulation = LocalSimulation()
    hosts = _hosts(audited)
    first = _packed(simulation, hosts, flavors)
    assert set(first.solved) == set(first.stranded) and first.pending == 0
    # a claim of 8 GiB pending on compute-01: its state changes, no other's
    changed = [
        replace(host, audit=_with_claim(host.audit, 8 * GIB)) if host.name == "compute-01" else host
        for host in hosts
    ]
    again = _packed(simulation, changed, flavors)
    assert again.solved == ("compute-01",)
    for name, found in first.stranded.items():
        if name != "compute-01":
            assert again.stranded[name] is found  # kept, not solved again
    capacity = changed[0].audit.capacity
    assert capacity is not None and again.stranded["compute-01"] == stranded_capacity(capacity, flavors)
    # the compaction leaves pending claims out: kept, and what the model answers for the new states
    assert again.compaction is not None and again.compaction == first.compaction
    states = [scheduler_host(host) for host in changed]
    assert again.compaction.hypervisors == compaction(states).hypervisors
    # nothing changed: no request at all, the answers stay
    assert simulation.compute(changed, SPREAD, 3, packing_settings(changed, flavors, 1)) is None
    # other flavors: every hypervisor solved again, though the tolerance's states are the same
    fewer = {name: demand for name, demand in flavors.items() if name != "m1.small"}
    other = _packed(simulation, changed, fewer)
    assert set(other.solved) == set(other.stranded)


def _answers_until_caught_up(stream: IO[bytes]) -> list[object]:
    """The worker's frames, up to packing answers with none pending after those of the second
    request (its update solved compute-01's stranded capacity alone)."""
    answers: list[object] = []
    updated = False
    while True:
        (size,) = HEADER.unpack(stream.read(HEADER.size))
        answer = pickle.loads(stream.read(size))
        answers.append(answer)
        if isinstance(answer, EncodedPacking):
            assert answer.report is not None, answer.error
            updated = updated or answer.report.solved == ("compute-01",)
            if updated and answer.report.pending == 0:
                return answers


def test_the_worker_sends_the_packing_answers_as_it_computes_them(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    """Each request gets its report, then its stranded capacity at once; the compactions and
    sellable counts follow one frame each, computed beside the requests, and once none is
    pending they are what the model answers for the last request's states."""
    hosts = _hosts(audited)
    changed = [
        replace(host, audit=_with_claim(host.audit, 8 * GIB)) if host.name == "compute-01" else host
        for host in hosts
    ]
    changes = FleetChanges()
    requests = [
        changes.request(fleet, SPREAD, 3, packing_settings(fleet, flavors, 1)) for fleet in (hosts, changed)
    ]
    with subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as worker:
        assert worker.stdin is not None and worker.stdout is not None
        for request in requests:
            assert request is not None
            worker.stdin.write(encode_request(request))
        worker.stdin.flush()
        answers = _answers_until_caught_up(worker.stdout)
        worker.stdin.close()  # its input's end: it leaves
    assert worker.returncode == 0
    kinds = [type(answer).__name__ for answer in answers]
    assert kinds[0] == "EncodedReport" and kinds.count("EncodedReport") == 2
    packed = [answer for answer in answers if isinstance(answer, EncodedPacking)]
    # each hypervisor's stranded capacity travels once, then only where it was solved again
    assert set(packed[0].stranded) == set(packed[0].names)
    assert all(set(answer.stranded) <= {"compute-01"} for answer in packed[1:])
    assert any(answer.stranded for answer in packed[1:])
    decoder = PackingDecoder()
    reports = [
        decoder.complete(answer, {name: pickle.loads(data) for name, data in answer.stranded.items()})
        for answer in answers
        if isinstance(answer, EncodedPacking)
    ]
    first = reports[0]
    assert first.compaction is None and first.pending > 0  # the stranded capacity, at once
    assert set(first.solved) == set(first.stranded)
    # one frame per step: the answers pending go down by one from frame to frame, but where an
    # update queued some again
    for before, after in itertools.pairwise(reports):
        assert after.pending == before.pending - 1 or after.solved == ("compute-01",)
    expected = _packed(LocalSimulation(), changed, flavors)
    last = reports[-1]
    assert last.stranded == expected.stranded
    assert (last.compaction, last.groups) == (expected.compaction, expected.groups)
    assert (last.sellable, last.sellable_by_zone) == (expected.sellable, expected.sellable_by_zone)


def test_a_hypervisor_down_or_in_maintenance_has_no_stranded_capacity(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    simulation = LocalSimulation()
    hosts = _hosts(audited)
    assert "compute-02" in _packed(simulation, hosts, flavors).stranded
    down = [replace(host, up=False) if host.name == "compute-02" else host for host in hosts]
    packing = _packed(simulation, down, flavors)
    assert "compute-02" not in packing.stranded and IN_MAINTENANCE not in packing.stranded
    assert packing.solved == ()  # going down solves nothing: it is left out
    assert packing.compaction is not None
    assert packing.compaction.eligible == len(hosts) - 2


def test_the_document_and_the_tables_carry_the_packing_answers(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    hosts = _hosts(audited)
    report = LocalSimulation().compute(hosts, SPREAD, 3, packing_settings(hosts, flavors, 1))
    assert report is not None and report.packing is not None
    packing = report.packing
    assert packing.compaction is not None
    document = fleet_document(audited, report)["packing"]
    json.dumps(document)
    assert set(document["stranded"]) == set(packing.stranded)
    assert document["stranded"]["compute-03"]["vcpu"]["causes"] == ["memory"]
    compacted = document["compaction"]
    assert compacted["hypervisors"] == packing.compaction.hypervisors
    assert compacted["freeable"] == packing.compaction.freeable
    assert {(g["kind"], g["group"]) for g in compacted["groups"]} == set(packing.groups)
    assert document["sellable"]["flavors"] == dict(packing.sellable)
    assert document["sellable"]["reserve_host_failures"] == 1
    zones = document["sellable"]["availability_zones"]
    assert zones["az-2"]["m1.small"] == packing.sellable_by_zone["az-2", "m1.small"]
    # without the tolerance there is no packing, and the document is as it was
    assert "packing" not in fleet_document(audited)
    tables = render_tables(audited, report)
    assert "  compute-03: vcpu 99 (by memory)" in tables
    assert f"compaction: {packing.compaction.hypervisors} of {packing.compaction.eligible} eligible" in tables
    assert "  availability_zone az-2: " in tables
    assert "sellable instances, keeping 1 hypervisor failure(s) in reserve:" in tables
    assert "packing" not in render_tables(audited, replace(report, packing=None))


def test_virtcap_audit_prints_the_packing_answers_unless_the_tolerance_is_off(tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--demo", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    packing = json.loads(shown.stdout)["packing"]
    assert packing["compaction"]["hypervisors"] < packing["compaction"]["eligible"]
    assert any(packing["stranded"].values())
    config = write_config(tmp_path, sections="scheduler: {failure_tolerance: {enabled: false}}")
    off = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(config), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "packing" not in json.loads(off.stdout)


PENDING = "virtcap_packing_pending_answers"
"""0 once every packing answer is computed for the audits as they are."""


def _packing_series(samples: Samples) -> set[str]:
    names = {family.name for family in PACKING_FAMILIES}
    return {name for name, _labels in samples if name in names}


def test_the_running_demo_exposes_the_packing_families(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        timestamp = "virtcap_packing_timestamp_seconds"
        wait_for(lambda: value(server.samples(), PENDING) == 0, WORKER_SECONDS, what="every packing answer")
        samples = server.samples()
        computed = value(samples, "virtcap_failure_tolerance_timestamp_seconds")
        packed = value(samples, timestamp)
        assert computed is not None and packed is not None and packed >= computed  # after the tolerance
        assert _packing_series(samples) == {family.name for family in PACKING_FAMILIES}
        stranded = series(samples, "hypervisor_resource_stranded")
        hypervisors = {dict(labels)["hypervisor"] for labels in stranded}
        assert IN_MAINTENANCE not in hypervisors and DOWN not in hypervisors and len(hypervisors) == 9
        memory = {"resource": "memory", "unit": "bytes"}
        stranded_memory = value(samples, "hypervisor_resource_stranded", hypervisor="compute-02", **memory)
        free = value(samples, "hypervisor_resource_free", hypervisor="compute-02", **memory)
        assert stranded_memory is not None and free is not None and 0 < stranded_memory <= free
        assert (
            value(
                samples,
                "hypervisor_resource_stranded_by",
                hypervisor="compute-02",
                resource="memory",
                cause="vcpu",
            )
            == 1
        )
        compacted = value(samples, "virtcap_fleet_compaction_hypervisors")
        lower = value(samples, "virtcap_fleet_compaction_lower_bound")
        freeable = value(samples, "virtcap_fleet_hypervisors_freeable")
        assert lower is not None and compacted is not None and freeable is not None
        assert 0 < lower <= compacted and compacted + freeable == 9 and freeable > 0
        zone = value(
            samples, "hypervisor_group_compaction_hypervisors", kind="availability_zone", group="az-1"
        )
        assert zone is not None and 1 <= zone <= 6
        sold = series(samples, "hypervisor_group_flavor_sellable_instances")
        assert {dict(labels)["kind"] for labels in sold} == {"availability_zone"}
        assert value(samples, "virtcap_flavor_sellable_instances", flavor="m1.small") is not None

        status, body = server.get("/api/v1/capacity")
        assert status == 200
        document = json.loads(body)["packing"]
        assert document["compaction"]["hypervisors"] == compacted
        assert set(document["stranded"]) == hypervisors


def _stranded_hypervisors(samples: Samples) -> set[str]:
    return {dict(labels)["hypervisor"] for labels in series(samples, "hypervisor_resource_stranded")}


def test_maintenance_recomputes_the_packing_and_turning_the_tolerance_off_removes_it(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with running_server(["--config", str(config)], tmp_path) as server:
        timestamp = "virtcap_packing_timestamp_seconds"
        wait_for(lambda: value(server.samples(), PENDING) == 0, WORKER_SECONDS, what="every packing answer")
        assert _stranded_hypervisors(server.samples()) == {"mixed", "big", "small"}

        # in maintenance: the packing is computed again without its stranded series
        status, held = call(server, "PUT", "/api/v1/hypervisors/big/maintenance", {"reason": "disks"}, auth())
        assert status == 200, held
        wait_for(
            lambda: _stranded_hypervisors(server.samples()) == {"mixed", "small"},
            60,
            what="big's stranded series gone",
        )
        assert value(server.samples(), "virtcap_fleet_compaction_hypervisors") is not None

        config.write_text(config.read_text() + "scheduler: {failure_tolerance: {enabled: false}}\n")
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: value(server.samples(), timestamp) is None, 30, what="the packing turned off")
        assert _packing_series(server.samples()) == set()


def _with_claim(snapshot: HypervisorSnapshot, memory: int) -> HypervisorSnapshot:
    request = {Resource.MEMORY: memory}
    return snapshot.with_claims(PendingClaims(dict(request), (Demand(request),)))


def test_a_packing_answer_that_cannot_be_written_ends_the_worker(
    audited: tuple[HypervisorSnapshot, ...], flavors: dict[str, Demand]
) -> None:
    """Not a pipe closed (the exporter gone: the thread just stops) but a write that fails
    otherwise (/dev/full: no space left): the worker ends, to be started again, rather than go on
    answering the tolerance with no packing answer ever again."""
    hosts = _hosts(audited)
    request = FleetChanges().request(hosts, SPREAD, 3, packing_settings(hosts, flavors, 1))
    assert request is not None
    simulation = FleetSimulation()
    simulation.apply(request)
    simulation.update_packing(request)  # its stranded capacity, and the steps queued
    ended = threading.Event()
    with Path("/dev/full").open("wb", buffering=0) as full:
        steps = threading.Thread(target=compute_steps, args=(simulation, AnswerWriter(full), ended.set))
        steps.start()
        steps.join(timeout=120)
    assert not steps.is_alive()
    assert ended.is_set()
