"""Background tasks never die silently: a crash is logged with its context, counted, shown by
/-/healthy and /metrics, and the task restarts with backoff."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from virtcap.audit.events import start_libvirt_event_thread
from virtcap.claims.ledger import ClaimDatabase, ClaimLedger
from virtcap.config import AuditSettings, ClaimSettings, Config, Hypervisor
from virtcap.demo import DEMO_DIR
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.capacity import amounts
from virtcap.model.host_fit import Demand
from virtcap.model.policy import NOVA_ALLOCATION_RATIOS, HostPolicy
from virtcap.model.resources import Resource
from virtcap.service.auditor import FleetAuditor
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.supervise import FIRST_BACKOFF_SECONDS, Supervisor
from virtcap.web.access import WebConfigSource
from virtcap.web.auth import BasicAuth
from virtcap.web.server import Exporter, MetricsCache, build_app


async def eventually(condition: Callable[[], bool], timeout: float, what: str) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)
    assert condition(), what


def test_a_crashing_task_is_logged_counted_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[float] = []

    async def crashes_twice() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) <= 2:
            raise ValueError(f"crash number {len(runs)}")
        await asyncio.Event().wait()

    async def scenario() -> None:
        changes: list[int] = []
        supervisor = Supervisor(changed=lambda: changes.append(1))
        supervisor.start("worker", "render", crashes_twice, context={"hypervisor": "h1"})
        await eventually(lambda: supervisor.failures["render"] == 1, 2, "first crash")
        assert supervisor.dead() == {"worker": "ValueError: crash number 1"}
        assert supervisor.dead_by_kind()["render"] == 1
        await eventually(lambda: len(runs) == 3, 5, "restarted twice")
        await asyncio.sleep(0)
        assert supervisor.dead() == {}
        assert supervisor.failures["render"] == 2
        # backoff doubles: the second restart waits about twice as long as the first
        first_gap, second_gap = runs[1] - runs[0], runs[2] - runs[1]
        assert first_gap >= FIRST_BACKOFF_SECONDS * 0.9
        assert second_gap >= 2 * FIRST_BACKOFF_SECONDS * 0.9
        assert len(changes) == 4  # each crash and each restart is shown
        await supervisor.stop_all()

    with caplog.at_level(logging.ERROR, logger="virtcap.service.supervise"):
        asyncio.run(scenario())
    crashes = [r for r in caplog.records if r.getMessage().startswith("background task failed")]
    assert len(crashes) == 2
    assert crashes[0].__dict__["task"] == "worker" and crashes[0].__dict__["hypervisor"] == "h1"
    assert crashes[0].exc_info is not None and "crash number 1" in str(crashes[0].exc_info[1])


def test_a_task_that_returns_is_restarted_too() -> None:
    async def scenario() -> None:
        supervisor = Supervisor()
        returned = 0

        async def returns() -> None:
            nonlocal returned
            returned += 1

        supervisor.start("quitter", "expire-claims", returns)
        await eventually(lambda: returned >= 2, 3, "restarted")
        assert supervisor.failures["expire-claims"] >= 1
        await supervisor.stop_all()

    asyncio.run(scenario())


def demo_hypervisor(name: str, policy: HostPolicy) -> Hypervisor:
    return Hypervisor(name, f"test://{DEMO_DIR / 'compute-01.xml'}", policy, None)


def test_an_audit_loop_that_crashes_marks_its_hypervisor_down_and_is_retried() -> None:
    """An allocation ratio the model cannot compute with (infinite) makes the audit loop raise
    after libvirt answered: before, that task ended for good with nothing logged, and the
    hypervisor kept its last state forever."""
    broken_policy = HostPolicy(allocation_ratios={**NOVA_ALLOCATION_RATIOS, Resource.VCPU: math.inf})

    async def scenario() -> None:
        start_libvirt_event_thread()
        store = SnapshotStore()
        supervisor = Supervisor(changed=store.touch)
        fleet = FleetAuditor(store, supervisor)
        hypervisors = (demo_hypervisor("broken", broken_policy), demo_hypervisor("healthy", HostPolicy()))
        # how many more of a flavor fit is computed with each audit: it needs the vCPU limit
        flavors = {"m1.tiny": Demand(amounts(vcpu=1, memory=512 * 1024**2))}
        await fleet.apply(hypervisors, AuditSettings(interval=0.2, timeout=5), flavors)
        await eventually(lambda: supervisor.failures["audit"] >= 2, 10, "crashed and retried")
        broken = store.hypervisors["broken"]
        assert broken.latest is not None and not broken.up
        assert broken.latest.error is not None and "internal error: OverflowError" in broken.latest.error
        assert broken.audits["failure"] >= 2
        await eventually(lambda: store.hypervisors["healthy"].audits["success"] >= 3, 5, "healthy audited")
        assert store.hypervisors["healthy"].up
        await fleet.stop()
        await supervisor.stop_all()

    asyncio.run(scenario())


async def exporter_for(tmp_path: Path, store: SnapshotStore, supervisor: Supervisor) -> Exporter:
    settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
    claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
    await claims.start()
    config = Config(source="test", audit=AuditSettings(), hypervisors=(), flavors=(), claims=settings)
    cache = MetricsCache(store, 60.0, claims, supervisor)
    fleet = FleetAuditor(store, supervisor, claims)
    return Exporter(
        config, store, supervisor, fleet, cache, claims, web=WebConfigSource(None), writers=BasicAuth({})
    )


def with_client(
    tmp_path: Path, body: Callable[[TestClient[web.Request, web.Application], Exporter], Awaitable[None]]
) -> Callable[[], Coroutine[Any, Any, None]]:
    async def run() -> None:
        store = SnapshotStore()
        supervisor = Supervisor(changed=store.touch)
        exporter = await exporter_for(tmp_path, store, supervisor)
        async with TestClient(TestServer(build_app(exporter))) as client:
            try:
                await body(client, exporter)
            finally:
                await supervisor.stop_all()
                await exporter.claims.stop()

    return run


def test_a_crashed_renderer_fails_healthy_until_it_renders_again(tmp_path: Path) -> None:
    """Text that cannot be encoded stands in for any bug of the renderer: before, the render task
    ended for good and /metrics froze for the whole fleet while /-/healthy said OK."""

    async def body(client: TestClient[web.Request, web.Application], exporter: Exporter) -> None:
        store, supervisor = exporter.store, exporter.supervisor
        store.track(["h1"])
        good = await audited_snapshot("h1")
        store.record(good, "success")
        supervisor.start("render-metrics", "render", exporter.cache.run)
        await eventually(lambda: exporter.cache.version >= store.version, 5, "first render")
        assert (await client.get("/-/healthy")).status == 200

        assert good.facts is not None
        unencodable = dataclasses.replace(good.facts, hostname="bad\udcff")
        store.record(dataclasses.replace(good, facts=unencodable), "success")
        await eventually(lambda: bool(supervisor.dead()), 5, "renderer crash seen")
        response = await client.get("/-/healthy")
        assert response.status == 503
        assert "render-metrics: UnicodeEncodeError" in await response.text()

        store.record(good, "success")  # the bad data is gone: the restarted renderer succeeds
        await eventually(lambda: not supervisor.dead(), 5, "renderer restarted")
        await eventually(lambda: exporter.cache.version >= store.version, 5, "rendered again")
        assert (await client.get("/-/healthy")).status == 200
        metrics = await (await client.get("/metrics")).text()
        assert 'virtcap_task_failures_total{task="render"} 1.0' in metrics
        assert 'virtcap_tasks_dead{task="render"} 0.0' in metrics

    asyncio.run(with_client(tmp_path, body)())


async def audited_snapshot(name: str) -> HypervisorSnapshot:
    config = Config(
        source="test",
        audit=AuditSettings(),
        hypervisors=(demo_hypervisor(name, HostPolicy()),),
        flavors=(),
    )
    (snapshot,) = await audit_fleet_once(config, cpu_window=0.0)
    return snapshot
