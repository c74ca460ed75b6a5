"""The fleet's failure tolerance, computed in the background whenever audits change what the
scheduler reads.

Never on the event loop nor on the scrape path: the hypervisors are taken on the loop (the store
is the loop's), the simulation runs in a daemon thread of its own, one computation at a time,
and its report is published to the store, which re-renders /metrics. A burst of audits is
waited for and computed once; after a computation of d seconds the next waits at least d, so
that a large fleet spends at most about half of one core on it. The first computation waits
until every hypervisor was audited once: a fleet coming up would otherwise be computed whole
once per hypervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from virtcap.audit.threads import run_in_daemon_thread
from virtcap.config import FailureToleranceSettings
from virtcap.model.scheduler import Multipliers
from virtcap.service.store import SnapshotStore
from virtcap.service.supervise import Supervisor
from virtcap.service.tolerance import FleetSimulation, SimulatedHost, ToleranceReport

log = logging.getLogger(__name__)

TASK_NAME = "failure-tolerance"
SETTLE_SECONDS = 0.5
"""After a change, wait this long for the rest of its burst before computing."""


class ToleranceTracker:
    def __init__(
        self,
        store: SnapshotStore,
        supervisor: Supervisor,
        settings: FailureToleranceSettings,
        multipliers: Multipliers,
        stale_after: float,
    ) -> None:
        self.store = store
        self.supervisor = supervisor
        self.settings = settings
        self.multipliers = multipliers
        self.stale_after = stale_after
        self._simulation = FleetSimulation()
        self._wake = store.watch()
        self._running: asyncio.Future[ToleranceReport | None] | None = None
        """The computation in its thread: a task restarted meanwhile waits for it to end."""

    def configure(
        self, settings: FailureToleranceSettings, multipliers: Multipliers, stale_after: float
    ) -> None:
        """A reloaded configuration: the next computation uses it (a full one if it changed)."""
        self.settings, self.multipliers, self.stale_after = settings, multipliers, stale_after
        self._wake.set()

    def start(self) -> None:
        self.supervisor.start(TASK_NAME, TASK_NAME, self._run)

    async def stop(self) -> None:
        await self.supervisor.stop(TASK_NAME)
        self.store.unwatch(self._wake)

    async def _run(self) -> None:
        await self.store.all_audited.wait()
        while True:
            self._wake.clear()
            gap = 0.0
            if self.settings.enabled:
                started = time.monotonic()
                await self._compute_once()
                gap = time.monotonic() - started
            elif self.store.tolerance is not None:
                self.store.publish_tolerance(None)
            await asyncio.sleep(gap)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._until_next_stale()):
                    await self._wake.wait()
            await asyncio.sleep(SETTLE_SECONDS)

    async def _compute_once(self) -> None:
        if self._running is not None and not self._running.done():
            await asyncio.shield(self._running)
        hosts = self._hosts(time.time())
        multipliers, bound = self.multipliers, self.settings.max_host_failures
        simulation = self._simulation
        running = run_in_daemon_thread(lambda: simulation.compute(hosts, multipliers, bound), name=TASK_NAME)
        running.add_done_callback(_retrieve)
        self._running = running
        report = await asyncio.shield(running)
        if report is not None:
            self.store.publish_tolerance(report)
            log.debug(
                "failure tolerance computed",
                extra={
                    "hypervisors": len(hosts),
                    "tolerated": report.tolerated,
                    "seconds": f"{report.duration_seconds:.3f}",
                    "incremental": report.incremental,
                },
            )

    def _hosts(self, now: float) -> list[SimulatedHost]:
        """The hypervisors with a last good audit that is not stale, as the store has them now.
        A stale one is left out: its data is no longer shown, nor would Nova place anything on it."""
        hosts = []
        for state in self.store.hypervisors.values():
            good = state.last_good
            if good is None or good.capacity is None or now - good.taken_at > self.stale_after:
                continue
            hosts.append(SimulatedHost(state.name, good, up=state.up))
        return hosts

    def _until_next_stale(self) -> float | None:
        """A down hypervisor leaves the simulation when its data turns stale, even if nothing else
        changes."""
        now = time.time()
        deadlines = [
            state.last_good.taken_at + self.stale_after
            for state in self.store.hypervisors.values()
            if not state.up
            and state.last_good is not None
            and state.last_good.taken_at + self.stale_after > now
        ]
        return max(min(deadlines) - now, 0.0) + 0.01 if deadlines else None


def _retrieve(future: asyncio.Future[ToleranceReport | None]) -> None:
    """A computation whose task was stopped meanwhile has nobody awaiting it: retrieve its error."""
    if not future.cancelled():
        future.exception()
