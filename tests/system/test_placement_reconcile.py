"""The Placement reconciliation end to end: a real Placement 16 over HTTP (tests/support), loaded
through its own API with providers and allocations that mirror two hypervisors' audits, every kind
of drift planted on purpose, read and reconciled by the exporter's task (service/placement.py), and
each answer checked against what was planted. Then Placement stopped: the task says so and drops
the per-hypervisor answers, within its bound."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.factories import GIB, MIB, domain, host
from tests.support.placement_loader import PROJECT_ID, PlacementLoader, nova_inventories
from tests.support.placement_server import MisbehavingProxy, PlacementServer, running_placement
from virtcap.config import Config, parse_config
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import DomainFacts, NovaFlavor, NovaInstance, NovaOwner
from virtcap.model.placement_drift import Drift
from virtcap.model.resources import Resource
from virtcap.service.placement import ROUND_TIMEOUT_FACTOR, PlacementTask
from virtcap.service.placement_worker import PlacementWorker
from virtcap.service.planner import pool_processes
from virtcap.service.worker_process import idle_worker, start_worker

pytestmark = pytest.mark.upstream

SMALL = NovaFlavor("m1.small", 1, 2048, 20, 0, 0)
SMALL_ALLOCATION = {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
UUIDS = {name: f"00000000-0000-4000-8000-00000000000{index}" for index, name in enumerate("abcdm", start=1)}
LEAKED = "00000000-0000-4000-8000-0000000000ff"


def instance(name: str) -> DomainFacts:
    """A Nova instance of m1.small, with a UUID Placement takes as a consumer's."""
    owner = NovaOwner(PROJECT_ID, "demo", "u", "u")
    return replace(
        domain(name, vcpus=1, memory=2048 * MIB, nova=NovaInstance(SMALL, owner=owner)), uuid=UUIDS[name]
    )


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    with running_placement(tmp_path_factory.mktemp("placement")) as server:
        yield server


def fleet_config(url: str, timeout: str = "3s") -> Config:
    return parse_config(
        f"""
placement: {{endpoint: '{url}', timeout: {timeout}, interval: 1h}}
hypervisors:
  - {{name: hv1, uri: 'test:///default', placement_provider: hv1-node}}
  - {{name: hv2, uri: 'test:///default', placement_provider: hv2-node}}
""",
        "x.yaml",
    )


SLOW_START_SECONDS = 3.0
"""Longer than a round may take with a timeout of 0.5 s (4 timeouts and a bit, ROUND_TIMEOUT_FACTOR)."""
CHILDREN = 18
"""Nested providers under each root: the more providers, the more answers a round waits for in turn."""
MARGIN_SECONDS = 5.0
"""A round given up returns within its bound and this (no hang); never a measure of speed."""
BUSY_SECONDS = 8.0
"""Longer than a round may take with a timeout of 0.5 s."""
REAPED_WITHIN_SECONDS = 30.0
"""A killed worker's exit and reaping: milliseconds; a bound against a hang, never a measure."""


def slow_start() -> None:
    """A worker's start as slow as on a busy machine (its imports at a lower priority)."""
    idle_worker()
    time.sleep(SLOW_START_SECONDS)


def audited(config: Config) -> SnapshotStore:
    """hv1 runs a, b, c and d (d migrating to hv2, which shows it too); 16 CPUs, 64 GiB, 1000 GiB."""
    store = SnapshotStore()
    store.track(["hv1", "hv2"])
    guests = {"hv1": (instance("a"), instance("b"), instance("c"), instance("d")), "hv2": (instance("d"),)}
    for hypervisor in config.hypervisors:
        facts = host(cpus=16, memory=64 * GIB, disk=1000 * GIB, domains=guests[hypervisor.name])
        store.record(HypervisorSnapshot.audited(hypervisor, facts, {}), "ok")
    return store


def plant(loader: PlacementLoader) -> None:
    """Each drift on purpose: hv1's reserved memory wrong, hv2's disk total stale; a correct
    allocation (a), a missing one (b), a resized one (c), a leaked one, and d migrating from hv1
    to hv2 (its migration record on hv1, its own allocation on hv2)."""
    loader.load(
        {
            "providers": [
                {
                    "name": "hv1-node",
                    "inventories": nova_inventories(16, 64 * 1024, 1000, reserved_host_memory_mb=4096),
                },
                {"name": "hv2-node", "inventories": nova_inventories(16, 64 * 1024, 800)},
            ],
            "consumers": [
                {"uuid": UUIDS["a"], "allocations": {"hv1-node": SMALL_ALLOCATION}},
                {"uuid": UUIDS["c"], "allocations": {"hv1-node": {**SMALL_ALLOCATION, "VCPU": 2}}},
                {"uuid": LEAKED, "allocations": {"hv1-node": SMALL_ALLOCATION}},
            ],
        }
    )
    loader.migrate(UUIDS["d"], UUIDS["m"], "hv1-node", "hv2-node", SMALL_ALLOCATION)


def test_every_planted_drift_is_found_and_nothing_else(placement: PlacementServer) -> None:
    plant(PlacementLoader(placement.base_url))
    config = fleet_config(placement.base_url)
    store = audited(config)
    report = asyncio.run(PlacementTask(config, store).read_once())
    assert report.up and report.drifts is not None and store.placement is report
    hv1, hv2 = report.drifts["hv1"], report.drifts["hv2"]
    assert hv1.inventory[Resource.MEMORY, "reserved"] == (4096 - 512) * MIB
    assert hv2.inventory[Resource.DISK, "total"] == -200 * GIB
    assert {value for key, value in hv1.inventory.items() if key != (Resource.MEMORY, "reserved")} == {0}
    assert [consumer.uuid for consumer in hv1.orphaned] == [LEAKED]
    assert [record.uuid for record in hv1.unallocated] == [UUIDS["b"]]
    assert [mismatch.uuid for mismatch in hv1.mismatched] == [UUIDS["c"]]
    assert hv1.migrations == (UUIDS["m"],)
    assert not hv2.orphaned and not hv2.unallocated and not hv2.mismatched
    # Placement holds a, c (one more vCPU), the leak and d's migration record; the domains a-d
    assert hv1.usage[Resource.VCPU] == (1 + 2 + 1 + 1) - 4
    assert report.requests <= 3 * 2 + 1 + 2  # per provider, the list, the consumers described


def test_placement_gone_is_up_0_without_answers_within_the_bound(tmp_path: Path) -> None:
    with running_placement(tmp_path / "placement") as server:
        config = fleet_config(server.base_url)
        task = PlacementTask(config, audited(config))
        assert asyncio.run(task.read_once()).up
        server.kill()
        began = time.monotonic()
        report = asyncio.run(task.read_once())
    assert time.monotonic() - began < 30
    assert not report.up and report.drifts is None and report.error
    assert report.last_success_at is not None


def test_the_worker_process_reconciles_as_the_task_does_in_process(tmp_path: Path) -> None:
    """The exporter's worker, sent only the hypervisors whose side changed, answers every round as
    a reconciliation in process: after an audit that changed a hypervisor's capacity, and after a
    hypervisor left and came back."""
    with running_placement(tmp_path / "placement") as server:
        plant(PlacementLoader(server.base_url))
        config = fleet_config(server.base_url)
        store = audited(config)
        worker = PlacementWorker()
        task = PlacementTask(config, store, worker)

        def same_as_in_process() -> dict[str, Drift]:
            report = asyncio.run(task.read_once())
            assert report.up and report.drifts is not None, report.error
            assert report.drifts == asyncio.run(PlacementTask(config, store).read_once()).drifts
            return dict(report.drifts)

        try:
            assert same_as_in_process()["hv1"].orphaned
            hv1 = next(h for h in config.hypervisors if h.name == "hv1")
            smaller = host(cpus=16, memory=32 * GIB, disk=1000 * GIB, domains=(instance("a"), instance("b")))
            store.record(HypervisorSnapshot.audited(hv1, smaller, {}), "ok")
            assert same_as_in_process()["hv1"].inventory[Resource.MEMORY, "total"] == 32 * GIB
            store.track(["hv1"])
            assert set(same_as_in_process()) == {"hv1"}
            store.track(["hv1", "hv2"])
            hv2 = next(h for h in config.hypervisors if h.name == "hv2")
            # back as it left: the worker forgot it, and is sent it again all the same
            again = host(cpus=16, memory=64 * GIB, disk=1000 * GIB, domains=(instance("d"),))
            store.record(HypervisorSnapshot.audited(hv2, again, {}), "ok")
            assert set(same_as_in_process()) == {"hv1", "hv2"}
        finally:
            task.close()


def test_a_closed_task_leaves_no_worker_behind(placement: PlacementServer) -> None:
    """Closing the task (a reload that drops `placement:`, the exporter stopping) kills its worker,
    and the worker is reaped without the caller waiting for it: no process, no zombie, is left."""
    config = fleet_config(placement.base_url)
    worker = PlacementWorker()
    task = PlacementTask(config, audited(config), worker)
    try:
        assert asyncio.run(task.read_once()).up
        assert worker._pool is not None
        pids = [process.pid for process in pool_processes(worker._pool)]
    finally:
        task.close()
    assert pids
    deadline = time.monotonic() + REAPED_WITHIN_SECONDS
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]  # a zombie has its /proc entry


def test_a_worker_slow_to_start_has_its_round_bound_from_when_it_is_ready(placement: PlacementServer) -> None:
    """A round's bound is Placement's to keep: a worker that takes longer than that to start
    still has its rounds answered, and one that is not ready within its own bound is given up."""
    config = fleet_config(placement.base_url, timeout="0.5s")
    store = audited(config)
    task = PlacementTask(config, store, PlacementWorker(slow_start))
    try:
        report = asyncio.run(task.read_once())
        assert report.up, report.error
    finally:
        task.close()
    never_ready = PlacementWorker(slow_start, start_seconds=SLOW_START_SECONDS / 6)
    task = PlacementTask(config, store, never_ready)
    try:
        began = time.monotonic()
        report = asyncio.run(task.read_once())
        assert not report.up and report.error
        assert time.monotonic() - began < SLOW_START_SECONDS
    finally:
        task.close()


@contextmanager
def cpu_busy(cpu: int, seconds: float) -> Iterator[None]:
    """Eight busy loops at normal priority on CPU `cpu`, for `seconds`: an idle-priority process
    held to that CPU then gets it for a few milliseconds a second at most."""
    loop = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass"
    started = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nprint(flush=True)\n"
    command = [sys.executable, "-c", started + loop]
    busy = [subprocess.Popen(command, stdout=subprocess.PIPE) for _ in range(8)]
    try:
        for process in busy:  # each on its CPU, looping
            assert process.stdout is not None and process.stdout.readline()
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def test_a_round_waiting_for_a_cpu_is_not_given_up(placement: PlacementServer) -> None:
    """At idle priority the worker runs only on a CPU nothing else wants: a round kept waiting for
    one longer than its bound (4 request timeouts and a bit) is answered once it gets one, rather
    than taken for a Placement too slow (its worker killed, the families gone). The worker is held
    to one CPU, kept busy; Placement answers from the others."""
    config = fleet_config(placement.base_url, timeout="0.5s")
    bound = 0.5 * (ROUND_TIMEOUT_FACTOR + len(config.hypervisors) / 25)
    store = audited(config)
    worker = PlacementWorker()
    task = PlacementTask(config, store, worker)
    try:
        first = asyncio.run(task.read_once())  # the worker started, its modules imported
        assert first.up, first.error
        assert worker._pool is not None
        cpu = max(os.sched_getaffinity(0))
        for process in pool_processes(worker._pool):
            assert process.pid is not None
            os.sched_setaffinity(process.pid, {cpu})  # its main thread: the round's threads inherit it
        with cpu_busy(cpu, BUSY_SECONDS):
            began = time.monotonic()
            report = asyncio.run(task.read_once())
            took = time.monotonic() - began
        assert report.up, report.error
        assert took > bound, "the worker got a CPU within the bound: nothing was tested"
    finally:
        task.close()


class JustInTime(MisbehavingProxy):
    """Placement's answers, each just within the reader's timeout."""

    delay = 0.0

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        time.sleep(self.delay)
        return super().answer(method, path, headers, body)


def test_a_placement_answering_each_request_just_in_time_has_its_round_given_up(
    placement: PlacementServer,
) -> None:
    """The round's bound (4 request timeouts and a bit) counts the time the worker waits for
    Placement: a Placement whose every answer comes just within the timeout fails the round at its
    bound, its worker killed; the next round, answered at once, is read."""
    suffix = uuid.uuid4().hex[:8]  # the module's tests share a Placement
    providers = {"hv1": f"hv1-{suffix}", "hv2": f"hv2-{suffix}"}
    PlacementLoader(placement.base_url).load(
        {
            "providers": [
                {
                    "name": provider,
                    "inventories": nova_inventories(16, 64 * 1024, 1000),
                    "children": [
                        {"name": f"{provider}-vgpu-{index}", "inventories": {"VGPU": {"total": 4}}}
                        for index in range(CHILDREN)
                    ],
                }
                for provider in providers.values()
            ]
        }
    )
    proxy = JustInTime(placement.base_url)
    with proxy:
        config = parse_config(
            f"""
placement: {{endpoint: '{proxy.base_url}', timeout: 0.5s, interval: 1h}}
hypervisors:
  - {{name: hv1, uri: 'test:///default', placement_provider: {providers["hv1"]}}}
  - {{name: hv2, uri: 'test:///default', placement_provider: {providers["hv2"]}}}
""",
            "x.yaml",
        )
        bound = 0.5 * (ROUND_TIMEOUT_FACTOR + len(providers) / 25)
        store = audited(config)
        # at the exporter's priority: a busy machine does not keep it waiting for a CPU
        task = PlacementTask(config, store, PlacementWorker(start_worker))
        try:
            assert asyncio.run(task.read_once()).up  # the worker started
            # the list, then 2 requests per provider (76), 4 at a time: 20 answers in turn, about 6 s:
            # three times the bound, which a busy machine's waits for a CPU stretch
            proxy.delay = 0.3
            report = asyncio.run(task.read_once())
            assert not report.up and report.error, report
            assert report.duration_seconds < bound + 1.0 + MARGIN_SECONDS
            proxy.delay = 0.0
            assert asyncio.run(task.read_once()).up
        finally:
            task.close()
