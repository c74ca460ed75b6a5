"""The exporter's Placement reconciliation in a worker process of its own (a `ProcessPoolExecutor`
of one worker, spawned on the first round): a round is thousands of requests whose HTTP and JSON
take seconds of CPU on a large fleet (audit/placement.py), and a comparison of tens of thousands
of consumers (model/placement_drift.py), which in the exporter's process would hold the
interpreter lock its scrapes need. The worker keeps its reader (its session, the consumers it
described) and the hypervisors' sides from round to round: the exporter sends the sides that
changed, the worker sends back the drifts. A new `placement:` section gets a new reader; a round
past its bound has its worker killed, the next round starting another.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING

from virtcap.audit.placement_error import PlacementError
from virtcap.config.placement import PlacementSection
from virtcap.model.capacity import HostCapacity
from virtcap.model.placement_drift import DomainRecord, Drift, DriftMemo, HypervisorView, reconcile_fleet
from virtcap.service.planner import START_SECONDS, kill_workers, one_worker, pool_processes, until_imported
from virtcap.service.worker_process import idle_worker, runnable

if TYPE_CHECKING:
    from virtcap.audit.placement import PlacementReader

READER_MODULE = "virtcap.audit.placement"
"""The reader (keystoneauth1, requests, urllib3): imported where a round runs, the worker or a
thread of a process without one, not by every process that imports this one."""

REAP_SECONDS = 1.0
"""How long a killed worker is waited for."""
SAMPLE_SECONDS = 0.1
"""How often a round's worker is looked at: waiting for Placement, or running or waiting for a CPU
(each look counts for the time since the last one)."""


@dataclass(frozen=True, slots=True)
class RoundAnswer:
    """What a round in the worker sends back: the drifts alone, not the trees they come from."""

    drifts: dict[str, Drift]
    unmatched: tuple[str, ...]
    """The hypervisors asked about that no provider matched."""
    requests: int


HypervisorSide = tuple[HostCapacity, tuple[DomainRecord, ...]]
"""What the reconciliation compares Placement with, of one hypervisor: its capacity, its domains."""


class Reconciler:
    """Rounds of reading and reconciling, with what they keep from one to the next: the reader
    (its session, the consumers it described, the trees it made), made anew for another
    `placement:` section, the hypervisors' sides as last given, and the drifts that hold while
    their hypervisor's tree and side stay (`DriftMemo`). Blocking: the worker process's, or a thread's."""

    def __init__(self) -> None:
        self._reader: tuple[PlacementSection, PlacementReader] | None = None
        self._sides: dict[str, HypervisorSide] = {}
        self._drifts = DriftMemo()
        """The last round's drifts that hold while their hypervisor's tree and side stay."""

    def round(
        self, section: PlacementSection, hypervisors: Mapping[str, str], changed: Mapping[str, HypervisorSide]
    ) -> RoundAnswer:
        """The sides that changed since the last round taken in (those of hypervisors no longer
        asked about forgotten), Placement read, and the fleet reconciled."""
        self._sides.update(changed)
        for name in [name for name in self._sides if name not in hypervisors]:
            del self._sides[name]
        if self._reader is None or self._reader[0] != section:
            self.close()
            reader: type[PlacementReader] = importlib.import_module(READER_MODULE).PlacementReader
            self._reader = (section, reader(section))
        # the consumers Placement is asked about: those that are no domain of their hypervisor
        local = {
            name: frozenset(record.uuid for record in domains) for name, (_, domains) in self._sides.items()
        }

        def foreign(hypervisor: str, consumer: str) -> bool:
            return consumer.lower() not in local.get(hypervisor, ())

        read = self._reader[1].read_trees(hypervisors, foreign)
        views = [
            HypervisorView(name, read.trees.get(name), capacity, domains)
            for name, (capacity, domains) in self._sides.items()
        ]
        unmatched = tuple(sorted(name for name, tree in read.trees.items() if tree is None))
        return RoundAnswer(reconcile_fleet(views, self._drifts), unmatched, read.total_requests)

    def close(self) -> None:
        if self._reader is not None:
            self._reader[1].close()
            self._reader = None


_IN_WORKER = Reconciler()
"""The worker process's."""


def reconcile_round(
    section: PlacementSection, hypervisors: Mapping[str, str], changed: Mapping[str, HypervisorSide]
) -> RoundAnswer:
    """In the worker: a round of its reconciler."""
    return _IN_WORKER.round(section, hypervisors, changed)


class PlacementWorker:
    """One worker process, one round at a time (the task's rounds never overlap)."""

    def __init__(
        self, initializer: Callable[[], None] = idle_worker, start_seconds: float = START_SECONDS
    ) -> None:
        """`initializer`: what the worker does first (`idle_worker`: at idle priority, a round's
        thousands of requests take no CPU a scrape or an audit wants; at nice 10 they still held
        it for a time slice whenever the exporter woke, and the p99 at ten scrapes a second was 54
        ms against 35 without the rounds, 41 at idle priority: docs/performance.md)."""
        self._initializer = initializer
        self._start_seconds = start_seconds
        self._pool: ProcessPoolExecutor | None = None
        self._sent: dict[str, HypervisorSide] = {}
        """The sides the worker holds (as of the last round sent to it)."""

    async def reconcile(
        self,
        section: PlacementSection,
        hypervisors: Mapping[str, str],
        sides: Mapping[str, HypervisorSide],
        timeout: float,
    ) -> RoundAnswer:
        """A round in the worker: the drifts, PlacementError from the reader, TimeoutError past
        `timeout` (the worker killed). Only the sides that changed since the last round go to the
        worker (an audit that changed nothing, most of them), found in a thread. A new worker is
        waited for until it is ready (`START_SECONDS`) before the round's `timeout` starts, and
        only the time the worker waits for Placement counts in it (`_answer`)."""
        try:
            pool = await self._ready()
            changed = await asyncio.to_thread(self._changed, sides)
            future = pool.submit(reconcile_round, section, hypervisors, changed)
            self._sent = dict(sides)  # what the worker holds once it has taken the round in
            return await self._answer(future, pool_processes(pool), timeout)
        except TimeoutError:
            self.close()
            raise
        except BrokenProcessPool:
            self.close()
            raise PlacementError("the Placement reader's worker process died") from None

    @staticmethod
    async def _answer(
        future: Future[RoundAnswer], processes: Sequence[BaseProcess], bound: float
    ) -> RoundAnswer:
        """The round's answer; TimeoutError once the worker has waited `bound` seconds for
        Placement. The time in which one of its threads runs or waits for a CPU (sampled every
        SAMPLE_SECONDS) is not counted: at idle priority the worker runs only on a CPU nothing else
        wants, and waits for one on a busy machine, which is no sign of a Placement too slow.
        Whatever its CPU, a round is given up START_SECONDS past its bound."""
        loop = asyncio.get_running_loop()
        answer = asyncio.wrap_future(future)
        began = loop.time()
        waited = 0.0
        every = min(SAMPLE_SECONDS, bound / 4)
        while True:
            sampled = loop.time()
            try:
                async with asyncio.timeout(every):
                    return await asyncio.shield(answer)
            except TimeoutError:
                now = loop.time()
                if not any(runnable(process.pid) for process in processes if process.pid is not None):
                    waited += now - sampled  # every thread asleep: waiting for Placement
                if waited >= bound or now - began >= bound + START_SECONDS:
                    answer.cancel()
                    raise

    def _changed(self, sides: Mapping[str, HypervisorSide]) -> dict[str, HypervisorSide]:
        # a side's records are the same tuple while its audit is: compared by identity first
        return {name: side for name, side in sides.items() if self._sent.get(name) != side}

    async def _ready(self) -> ProcessPoolExecutor:
        if self._pool is not None:
            return self._pool
        self._sent = {}  # a new worker holds nothing
        pool = self._pool = one_worker(self._initializer)
        try:
            for module in (__name__, READER_MODULE):
                await until_imported(pool, module, self._start_seconds)
        except TimeoutError:
            self.close()
            raise PlacementError(
                f"the Placement reader's worker process was not ready within {self._start_seconds:g} s"
            ) from None
        except asyncio.CancelledError:
            self.close()  # not ready: the next round would count the rest of its start
            raise
        return pool

    def close(self) -> None:
        """The worker killed, whatever it is doing (a hung round included), and reaped by a thread
        of its own rather than left a zombie: called on the event loop (a round given up, a reload
        that drops `placement:`), which must not wait while a killed worker of hundreds of MiB
        gives its memory back."""
        pool, self._pool = self._pool, None
        self._sent = {}
        if pool is None:
            return
        processes = pool_processes(pool)
        kill_workers(pool)
        with contextlib.suppress(Exception):
            pool.shutdown(wait=False, cancel_futures=True)
        threading.Thread(target=_reap, args=(processes,), name="placement-reap", daemon=True).start()


def _reap(processes: Sequence[BaseProcess]) -> None:
    for process in processes:
        process.join(REAP_SECONDS)  # killed: it exits at once
