"""The fleet's failure tolerance, computed in the background whenever audits change what the
scheduler reads.

Never in the way of the event loop nor of a scrape: the hypervisors are taken on the loop (the
store is the loop's), what changed is found there half a millisecond at a time, and
the scheduling runs in a worker process
(service/tolerance_worker.py), one computation at a time, whose report is published to the
store, which re-renders /metrics. The packing answers (fleet/packing.py: stranded capacity,
compaction, sellable instances) come from the same worker, after each report and then after
each answer it computes again while no request waits, and are published as they come. A
worker that dies or fails is started again by the supervisor, and computes the whole fleet.

A burst of audits is waited for and computed once; after a computation of d seconds the next
waits at least d, so that a large fleet spends at most about half of one core on it. The first
computation waits until every hypervisor was audited once: a fleet coming up would otherwise be
computed whole once per hypervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from virtcap.config import FailureToleranceSettings
from virtcap.fleet.packing import PackingReport
from virtcap.fleet.store import HypervisorState, SnapshotStore
from virtcap.fleet.tolerance import (
    FleetChanges,
    SimulatedHost,
    SimulationRequest,
    ToleranceReport,
    packing_settings,
)
from virtcap.model.host_fit import Demand
from virtcap.model.scheduler import Multipliers
from virtcap.service.slices import in_slices
from virtcap.service.supervise import Supervisor
from virtcap.service.tolerance_worker import (
    HEADER,
    WORKER_COMMAND,
    EncodedPacking,
    EncodedReport,
    PackingDecoder,
    ReportDecoder,
    pickle_one,
    request_frame,
)

log = logging.getLogger(__name__)

TASK_NAME = "failure-tolerance"
SETTLE_SECONDS = 0.5
"""After a change, wait this long for the rest of its burst before computing."""
EXIT_WAIT_SECONDS = 5.0
"""How long a worker whose answers ended is waited for, to tell how it exited."""


class WorkerProcess:
    """The worker, started on first use; each computation a request written and a report read.

    Its answers are read as they come, by a task of its own (`_read_answers`): the tolerance
    reports go to the computation that waits for them, the packing answers, which the worker
    sends after a request and then after each step it computes, are handed to `on_packing`. A
    worker that exits or answers garbage fails the computation that waits, or the next one."""

    def __init__(self, on_packing: Callable[[PackingReport], None] | None = None) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reports = ReportDecoder()
        self._packing = PackingDecoder()
        self._on_packing = on_packing
        self._answers: asyncio.Queue[EncodedReport | BaseException] = asyncio.Queue()

    async def compute(self, request: SimulationRequest) -> ToleranceReport:
        process = await self._started()
        assert process.stdin is not None
        pickled = await in_slices(list(request.changed.items()), lambda item: (item[0], pickle_one(item[1])))
        try:
            process.stdin.write(request_frame(request, dict(pickled)))
            await process.stdin.drain()
        except ConnectionError as error:  # it exited before reading the request
            raise RuntimeError(await self._why_not_answering(process, error)) from error
        encoded = await self._answers.get()
        if isinstance(encoded, BaseException):
            self._answers.put_nowait(encoded)  # and to any computation after this one
            raise RuntimeError(await self._why_not_answering(process, encoded)) from encoded
        loaded = await in_slices(
            list(encoded.evacuations.items()), lambda item: (item[0], pickle.loads(item[1]))
        )
        return self._reports.complete(encoded, dict(loaded))

    @staticmethod
    async def _why_not_answering(process: asyncio.subprocess.Process, error: BaseException) -> str:
        """A worker whose answers ended has mostly exited (killed, or failed): say how, once it is
        reaped; one that still runs answered garbage."""
        if isinstance(error, asyncio.IncompleteReadError | ConnectionError):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_WAIT_SECONDS):
                    await process.wait()
        if process.returncode is not None:
            return f"the failure-tolerance worker exited with code {process.returncode}"
        return f"the failure-tolerance worker stopped answering: {error}"

    async def _read_answers(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        try:
            while True:
                (size,) = HEADER.unpack(await process.stdout.readexactly(HEADER.size))
                encoded = pickle.loads(await process.stdout.readexactly(size))  # bytes per host inside
                if isinstance(encoded, EncodedReport):
                    self._answers.put_nowait(encoded)
                elif isinstance(encoded, EncodedPacking):
                    await self._take_packing(encoded)
                else:
                    raise TypeError(f"expected an answer from the worker, got {type(encoded).__name__}")
        except (asyncio.IncompleteReadError, TypeError, pickle.UnpicklingError) as error:
            self._answers.put_nowait(error)

    async def _take_packing(self, encoded: EncodedPacking) -> None:
        loaded = await in_slices(
            list(encoded.stranded.items()), lambda item: (item[0], pickle.loads(item[1]))
        )
        try:
            packing = self._packing.complete(encoded, dict(loaded))
        except RuntimeError as error:  # the tolerance stands; the last answers stay shown
            log.warning("packing answers not computed", extra={"error": str(error)})
            return
        if self._on_packing is not None:
            self._on_packing(packing)

    async def stop(self) -> None:
        process, self._process = self._process, None
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if process is None or process.returncode is not None:
            return
        process.kill()
        await process.wait()

    async def _started(self) -> asyncio.subprocess.Process:
        """The worker, started the first time. One that has exited is not started again here: it
        took what it knew with it, and the task's restart starts afresh."""
        if self._process is not None and self._process.returncode is not None:
            raise RuntimeError(f"the failure-tolerance worker exited with code {self._process.returncode}")
        if self._process is None:
            self._process = await asyncio.create_subprocess_exec(
                *WORKER_COMMAND,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            self._reader = asyncio.create_task(self._read_answers(self._process), name="tolerance-answers")
        return self._process


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
        self._wake = store.watch()
        self._computations: Counter[str] = Counter()
        """By kind, for the exporter's life: a worker started again starts counting at 0."""
        self.flavors: Callable[[], Mapping[str, Demand]] | None = None
        """The fleet's flavors, configured and discovered, as they are now (set by whoever wires
        the exporter); None: no packing answers are computed."""

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
        """One worker and what it was last told, for this run of the task: a restart (after the
        worker died or failed) starts both afresh, and the whole fleet is computed again."""
        changes, worker = FleetChanges(), WorkerProcess(self._publish_packing)
        try:
            await self.store.all_audited.wait()
            while True:
                self._wake.clear()
                gap = 0.0
                if self.settings.enabled:
                    gap = await self._compute_once(changes, worker)
                elif self.store.tolerance is not None:
                    self.store.publish_tolerance(None)
                    changes = FleetChanges()
                    await worker.stop()  # its memory back while it is off
                await asyncio.sleep(gap)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._until_next_stale()):
                        await self._wake.wait()
                await asyncio.sleep(SETTLE_SECONDS)
        finally:
            await worker.stop()

    async def _compute_once(self, changes: FleetChanges, worker: WorkerProcess) -> float:
        """Computes what changed; returns how long the worker took (0 when nothing changed)."""
        now = time.time()
        found = await in_slices(list(self.store.hypervisors.values()), lambda state: self._host(state, now))
        hosts = [host for host in found if host is not None]
        multipliers, bound = self.multipliers, self.settings.max_host_failures
        built = await in_slices(hosts, changes.state_of)
        differ = await in_slices(built, changes.differs)  # after an audit cycle, 0.1 s in all
        packing = (
            packing_settings(hosts, self.flavors(), self.settings.reserve_host_failures)
            if self.flavors is not None
            else None
        )
        request = changes.request_from(hosts, built, multipliers, bound, packing, differ=differ)
        if request is None:
            return 0.0
        report = await worker.compute(request)
        self._computations["incremental" if report.incremental else "full"] += 1
        report = replace(report, computations=dict(self._computations))
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
        return report.duration_seconds

    def _publish_packing(self, packing: PackingReport) -> None:
        self.store.publish_packing(packing)
        log.debug(
            "packing answers published",
            extra={
                "stranded_solved": len(packing.solved),
                "pending": packing.pending,
                "compaction": packing.compaction.hypervisors if packing.compaction is not None else None,
            },
        )

    def _host(self, state: HypervisorState, now: float) -> SimulatedHost | None:
        """The hypervisor as the simulation sees it, if it has a last good audit that is not stale.
        A stale one is left out: its data is no longer shown, nor would Nova place anything on it."""
        good = state.last_good
        if good is None or good.capacity is None or now - good.taken_at > self.stale_after:
            return None
        return SimulatedHost(state.name, good, up=state.up)

    def _until_next_stale(self) -> float | None:
        return self.store.until_next_stale(self.stale_after, time.time())
