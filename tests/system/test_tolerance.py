"""Failure tolerance as the exporter computes it: from audited snapshots (the scheduler's answer,
computed again only where audits changed what it reads), in the JSON document and the tables,
and in the background of a running exporter (series, claims and reloads)."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.claims_client import claim, write_config
from tests.support.fleets import FULL, larger_fleet
from tests.support.serving import WORKER_SECONDS, Samples, running_server, value, wait_for
from virtcap.demo import demo_config
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet import tolerance as tolerance_module
from virtcap.fleet.scheduling import FleetEntry, host_states
from virtcap.fleet.snapshot import HypervisorSnapshot, PendingClaims
from virtcap.fleet.tolerance import (
    FleetChanges,
    LocalSimulation,
    SimulatedHost,
    ToleranceReport,
    UnplacedDomain,
    prefer_full,
)
from virtcap.model.host_fit import Demand
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import SPREAD, Multipliers, Unplaced, fleet_tolerance
from virtcap.model.scheduler.evacuations import reference_evacuation
from virtcap.model.scheduler.fleet_refusals import UnplacedRejections
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.tolerance_worker import HEADER, WORKER_COMMAND, ReportDecoder, encode_request

STACK = Multipliers(ram=-1.0, cpu=-1.0, disk=-1.0)
TWO = {"compute-01", "compute-02"}


@pytest.fixture(scope="module")
def audited() -> tuple[HypervisorSnapshot, ...]:
    """One audit of the demo fleet (compute-07 fails: it is left out)."""
    return tuple(asyncio.run(audit_fleet_once(demo_config(), cpu_window=0.0)))


def _hosts(snapshots: tuple[HypervisorSnapshot, ...]) -> list[SimulatedHost]:
    return [SimulatedHost(s.name, s, up=True) for s in snapshots if s.up]


def _answers(report: ToleranceReport) -> dict[str, tuple[bool, tuple[tuple[str, str], ...], tuple[str, ...]]]:
    return {
        name: (found.feasible, found.placements, tuple(u.domain for u in found.unplaced))
        for name, found in report.evacuations.items()
    }


def _with_claim(snapshot: HypervisorSnapshot, memory: int) -> HypervisorSnapshot:
    """The same audit with a claim of `memory` bytes pending on it."""
    request = {Resource.MEMORY: memory}
    return snapshot.with_claims(PendingClaims(dict(request), (Demand(request),)))


@pytest.mark.parametrize("multipliers", [SPREAD, STACK], ids=["spread", "stack"])
def test_the_simulation_answers_as_the_scheduler_on_the_audits_facts(
    audited: tuple[HypervisorSnapshot, ...], multipliers: Multipliers
) -> None:
    """The service builds hosts from the capacity its audits computed; the dry-run placement
    builds them again from the facts: both see the same fleet, so the answers are the same."""
    report = LocalSimulation().compute(_hosts(audited), multipliers, 3)
    assert report is not None and not report.incremental
    expected = fleet_tolerance(
        host_states([FleetEntry.of(s) for s in audited], []), multipliers=multipliers, bound=3
    )
    assert _answers(report) == {
        name: (found.feasible, found.placements, tuple(u.guest for u in found.unplaced))
        for name, found in expected.evacuations.items()
    }
    assert report.tolerated == expected.tolerated and report.bound == 3
    assert "compute-07" not in report.evacuations  # its audit failed


def test_an_audit_that_changes_nothing_the_scheduler_reads_costs_no_computation(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    simulation = LocalSimulation()
    assert simulation.compute(_hosts(audited), SPREAD, 3) is not None
    # the next audit: new snapshots, the guests really using more memory, nothing else different
    again = []
    for host in _hosts(audited):
        capacity = host.audit.capacity
        assert capacity is not None
        memory = capacity.resources[Resource.MEMORY]
        busier = replace(memory, actual=(memory.actual or 0) + GIB)
        resources = {**capacity.resources, Resource.MEMORY: busier}
        audit = replace(host.audit, capacity=replace(capacity, resources=resources), taken_at=1.0)
        again.append(SimulatedHost(host.name, audit, up=True))
    assert simulation.compute(again, SPREAD, 3) is None


class Compared:
    """A part of what the scheduler reads whose comparisons are counted."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        Compared.comparisons += 1
        return isinstance(other, Compared)

    __hash__ = None  # type: ignore[assignment]


def test_a_new_audit_that_reads_the_same_is_compared_whole_once(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    changes, hosts = FleetChanges(), _hosts(audited)
    states = [changes.state_of(host)[0] for host in hosts]
    told = [(state, (Compared(),)) for state in states]
    assert changes.request_from(hosts, told, SPREAD, 3) is not None
    again = [(state, (Compared(),)) for state in states]  # every hypervisor audited again, alike
    before = Compared.comparisons
    assert not any(changes.differs(one) for one in again)
    assert Compared.comparisons - before == len(hosts)
    # the computations after it (each burst of audits of the others) compare nothing whole
    assert not any(changes.differs(one) for one in again)
    assert Compared.comparisons - before == len(hosts)
    assert changes.request_from(hosts, again, SPREAD, 3) is None


def test_a_changed_hypervisor_is_computed_again_incrementally_with_the_full_answer(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    simulation = LocalSimulation()
    hosts = _hosts(audited)
    first = simulation.compute(hosts, SPREAD, 3)
    assert first is not None
    # a claim of 100 GiB on compute-01: the domains re-homed there before must go elsewhere
    changed = [
        replace(host, audit=_with_claim(host.audit, 100 * GIB)) if host.name == "compute-01" else host
        for host in hosts
    ]
    report = simulation.compute(changed, SPREAD, 3)
    assert report is not None and report.incremental
    assert report.computations == {"full": 1, "incremental": 1}
    full = LocalSimulation().compute(changed, SPREAD, 3)
    assert full is not None and not full.incremental
    assert _answers(report) == _answers(full) and report.tolerated == full.tolerated
    assert _answers(report) != _answers(first)  # the claim moved something


def test_a_hypervisor_going_down_takes_no_domain_and_keeps_its_own_evacuation(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    simulation = LocalSimulation()
    hosts = _hosts(audited)
    assert simulation.compute(hosts, SPREAD, 3) is not None
    down = [replace(host, up=host.name != "compute-01") for host in hosts]
    report = simulation.compute(down, SPREAD, 3)
    assert report is not None and report.incremental
    assert "compute-01" in report.evacuations
    for name, found in report.evacuations.items():
        assert all(host != "compute-01" for _domain, host in found.placements), name
    full = LocalSimulation().compute(down, SPREAD, 3)
    assert full is not None and _answers(report) == _answers(full)


def test_other_settings_or_many_changes_compute_the_whole_fleet_again(
    audited: tuple[HypervisorSnapshot, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    simulation = LocalSimulation()
    hosts = _hosts(audited)
    assert simulation.compute(hosts, SPREAD, 3) is not None
    bounded = simulation.compute(hosts, SPREAD, 1)
    assert bounded is not None and not bounded.incremental and bounded.bound == 1
    stacked = simulation.compute(hosts, STACK, 1)
    assert stacked is not None and not stacked.incremental
    monkeypatch.setattr(tolerance_module, "MAX_INCREMENTAL_CHANGES", 1)
    two = [replace(host, audit=_with_claim(host.audit, GIB)) if host.name in TWO else host for host in hosts]
    report = simulation.compute(two, STACK, 1)
    assert report is not None and not report.incremental
    fewer = simulation.compute(two[1:], STACK, 1)  # a hypervisor left: the fleet is another
    assert fewer is not None and not fewer.incremental and "compute-01" not in fewer.evacuations


def test_the_document_and_the_tables_carry_each_evacuation_and_the_fleets_tolerance(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    report = LocalSimulation().compute(_hosts(audited), SPREAD, 2)
    assert report is not None
    document = fleet_document(audited, report)
    fleet = document["failure_tolerance"]
    assert fleet["host_failures_tolerated"] == report.tolerated and fleet["host_failures_bound"] == 2
    infeasible = sorted(name for name, found in report.evacuations.items() if not found.feasible)
    assert fleet["infeasible_evacuations"] == infeasible
    by_name = {hypervisor["name"]: hypervisor for hypervisor in document["hypervisors"]}
    assert by_name["compute-07"]["evacuation"] is None
    for name, found in report.evacuations.items():
        evacuation = by_name[name]["evacuation"]
        assert evacuation["feasible"] is found.feasible
        assert evacuation["unplaced_domains"] == len(evacuation["unplaced"]) == len(found.unplaced)
        assert [(p["domain"], p["hypervisor"]) for p in evacuation["placements"]] == list(found.placements)
        for unplaced in evacuation["unplaced"]:
            assert sum(unplaced["refused_by"].values()) >= 1 and unplaced["example"]
    json.dumps(document)  # plain JSON
    assert fleet_document(audited)["failure_tolerance"] is None
    tables = render_tables(audited, report)
    assert tables.count("  if lost: ") == len(report.evacuations)
    assert f"fleet: can lose {report.tolerated} hypervisor(s) together" in tables


def test_virtcap_audit_prints_the_failure_tolerance() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--demo", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    document = json.loads(shown.stdout)
    assert document["failure_tolerance"]["host_failures_bound"] == 3
    assert all("evacuation" in hypervisor for hypervisor in document["hypervisors"])


def _tolerance_series(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["hypervisor"]: found
        for (name, labels), found in samples.items()
        if name == "hypervisor_evacuation_feasible"
    }


def test_the_exporter_computes_it_in_the_background_after_claims_and_reloads(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(
            lambda: set(_tolerance_series(server.samples())) == {"mixed", "big", "small"},
            WORKER_SECONDS,
            what="every hypervisor's evacuation",
        )
        samples = server.samples()
        assert value(samples, "virtcap_fleet_host_failures_bound") == 3
        assert value(samples, "virtcap_failure_tolerance_computations_total", kind="full") == 1
        for name in ("mixed", "big", "small"):
            feasible = value(samples, "hypervisor_evacuation_feasible", hypervisor=name)
            unplaced = value(samples, "hypervisor_evacuation_unplaced_domains", hypervisor=name)
            assert (feasible == 1) == (unplaced == 0), name

        # A claim changes one hypervisor: only what it can affect is computed again.
        status, _ = claim(server, hypervisor="small", vcpu=1, memory="8GiB")
        assert status == 201
        computations = "virtcap_failure_tolerance_computations_total"
        wait_for(
            lambda: value(server.samples(), computations, kind="incremental") == 1,
            30,
            what="an incremental computation after the claim",
        )

        # A reload with another bound computes the fleet again with it.
        config.write_text(config.read_text() + "scheduler: {failure_tolerance: {max_host_failures: 1}}\n")
        server.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: value(server.samples(), "virtcap_fleet_host_failures_bound") == 1,
            30,
            what="the reloaded bound",
        )
        assert value(server.samples(), "virtcap_failure_tolerance_computations_total", kind="full") == 2

        # Turned off: the series are gone.
        config.write_text(config.read_text().replace("max_host_failures: 1", "enabled: false"))
        server.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: value(server.samples(), "virtcap_fleet_host_failures_bound") is None,
            30,
            what="the failure tolerance turned off",
        )
        assert _tolerance_series(server.samples()) == {}


def test_the_worker_process_answers_as_the_simulation_in_process(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    """Requests and reports cross the pipe pickled per hypervisor; the worker keeps its simulation
    between requests, so a change is computed incrementally there too."""
    hosts = _hosts(audited)
    changes = FleetChanges()
    first = changes.request(hosts, SPREAD, 3)
    changed = [
        replace(host, audit=_with_claim(host.audit, 100 * GIB)) if host.name == "compute-01" else host
        for host in hosts
    ]
    assert first is not None
    worker = subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert worker.stdin is not None and worker.stdout is not None
    try:
        reports, decoder, sent = [], ReportDecoder(), []
        for request in (first, changes.request(changed, SPREAD, 3)):
            assert request is not None
            worker.stdin.write(encode_request(request))
            worker.stdin.flush()
            (size,) = HEADER.unpack(worker.stdout.read(HEADER.size))
            encoded = pickle.loads(worker.stdout.read(size))
            sent.append(len(encoded.evacuations))
            reports.append(decoder.decode(encoded))
        worker.stdin.close()
        assert worker.wait(timeout=30) == 0  # its input closed: it ends
    finally:
        worker.kill()
        worker.wait()
    local = LocalSimulation()
    for report, fleet in zip(reports, (hosts, changed), strict=True):
        expected = local.compute(fleet, SPREAD, 3)
        assert expected is not None
        assert _answers(report) == _answers(expected) and report.tolerated == expected.tolerated
        assert report.incremental == expected.incremental
    assert reports[1].incremental
    # the second report sends only the evacuations the claim changed; the others are the first's
    assert sent[0] == len(reports[0].evacuations) and 0 < sent[1] < len(reports[1].evacuations)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def test_a_worker_that_dies_is_started_again_and_computes_the_fleet_again(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with running_server(["--config", str(config)], tmp_path) as server:
        computations = "virtcap_failure_tolerance_computations_total"
        wait_for(
            lambda: value(server.samples(), computations, kind="full") == 1,
            WORKER_SECONDS,
            what="a computation",
        )
        # and the packing answers that follow it: the worker is then idle, waiting for a request
        pending = "virtcap_packing_pending_answers"
        wait_for(lambda: value(server.samples(), pending) == 0, WORKER_SECONDS, what="every packing answer")
        (worker,) = _children(server.process.pid)
        os.kill(worker, signal.SIGKILL)
        # the next computation finds it dead: a claim asks for one
        status, _ = claim(server, hypervisor="small", vcpu=1, memory="1GiB")
        assert status == 201
        wait_for(
            lambda: value(server.samples(), "virtcap_task_failures_total", task="failure-tolerance") == 1,
            30,
            what="the failure counted",
        )
        # the new worker knows nothing: it computes the whole fleet
        wait_for(
            lambda: value(server.samples(), computations, kind="full") == 2, 60, what="a new computation"
        )
        assert set(_tolerance_series(server.samples())) == {"mixed", "big", "small"}
        wait_for(lambda: server.get("/-/healthy")[0] == 200, 30, what="healthy again")
        (again,) = _children(server.process.pid)
        assert again != worker
    # -9 (SIGKILL), or the 255 asyncio reports for a child its watcher found already reaped
    # (it then logs "Unknown child process")
    assert re.search(r"failure-tolerance worker exited with code (-9|255)\b", server.log_text())
    assert not Path(f"/proc/{again}").exists(), "the worker outlived the exporter"


def test_resource_classes_unpickle_as_the_one_object_of_their_class() -> None:
    """Host states cross to the worker pickled; their amounts are looked up by class identity."""
    custom = Resource.custom_class("CUSTOM_WINDOWS_LICENCE")
    for resource in (Resource.VCPU, Resource.PCPU, Resource.MEMORY, Resource.DISK, Resource.VGPU, custom):
        assert pickle.loads(pickle.dumps(resource)) is resource
    amounts = pickle.loads(pickle.dumps({Resource.MEMORY: 1, custom: 2}))
    assert amounts[Resource.MEMORY] == 1 and amounts[custom] == 2


def _counted_summary(domain: Unplaced) -> UnplacedDomain:
    """The summary the straightforward way: every rejection built and counted."""
    rejections = dict(domain.rejections)
    refused_by = Counter(rejection.filter for rejection in rejections.values())
    example = "no other hypervisor is up"
    if rejections:
        first = min(rejections)
        example = f"{first}: {rejections[first].filter}: {rejections[first].reason}"
    return UnplacedDomain(domain.guest, dict(sorted(refused_by.items())), example)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FULL, st.sampled_from([SPREAD, STACK]))
def test_an_unplaced_domains_summary_counts_its_rejections(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]], multipliers: Multipliers
) -> None:
    """On full fleets (most domains find no host, some hosts down), what the service shows of an
    unplaced domain, from the scheduler's summaries, is what counting its rejections gives; the
    same for the reference evacuation's (plain dictionaries)."""
    hosts = larger_fleet(shapes)
    tolerance = fleet_tolerance(hosts, multipliers=multipliers)
    # the service never builds an evacuation's rejections (each lists every other hypervisor)
    unread = mock.patch.object(UnplacedRejections, "_dict", side_effect=AssertionError("built"))
    with unread:
        shown = {
            name: [tolerance_module._unplaced(one) for one in e.unplaced]
            for name, e in tolerance.evacuations.items()
        }
    for name, found in tolerance.evacuations.items():
        reference = reference_evacuation(hosts, name, multipliers)
        assert shown[name] == [_counted_summary(expected) for expected in reference.unplaced]
        for one, expected in zip(found.unplaced, reference.unplaced, strict=True):
            assert tolerance_module._unplaced(one) == _counted_summary(expected)
            assert tolerance_module._unplaced(expected) == _counted_summary(expected)
    unplaced = sum(e.unplaced_count for e in tolerance.evacuations.values())
    event(f"{'some' if unplaced else 'no'} domain unplaced")


def test_a_lone_hypervisors_unplaced_domains_say_no_other_is_up() -> None:
    (only,) = larger_fleet([((4, 16, 100), [(1, 2, 20)], True)])
    (unplaced,) = fleet_tolerance([only]).evacuations[only.name].unplaced
    assert tolerance_module._unplaced(unplaced) == UnplacedDomain(
        unplaced.guest, {}, "no other hypervisor is up"
    )


def test_several_changes_are_computed_whole_when_updating_them_would_take_longer() -> None:
    assert not prefer_full(1, 1.0, 5.0)  # one change is always an update
    assert not prefer_full(3, None, 0.5) and not prefer_full(3, 1.0, None)  # nothing measured yet
    assert not prefer_full(3, 2.0, 0.5)  # 1.5 s of updates against 2 s whole
    assert prefer_full(5, 2.0, 0.5)  # 2.5 s of updates


def test_the_worker_runs_only_on_cpus_nothing_else_wants() -> None:
    """Every thread of it, those its imports started too (OpenBLAS's, started with numpy)."""
    worker = subprocess.Popen(WORKER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def policies() -> set[int]:
        return {os.sched_getscheduler(int(task.name)) for task in Path(f"/proc/{worker.pid}/task").iterdir()}

    try:
        wait_for(lambda: policies() == {os.SCHED_IDLE}, 30, what="SCHED_IDLE")
    finally:
        worker.kill()
        worker.wait()
