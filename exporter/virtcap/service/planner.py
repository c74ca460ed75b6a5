"""The exporter's planner: a worker process of its own (a `ProcessPoolExecutor` of one worker,
spawned on first use, at a lower CPU priority) for the plans asked through the API (consolidation,
scenarios): a plan takes seconds to minutes of CPU on a large fleet, which must neither block the
event loop nor hold the interpreter lock while a scrape is served. One plan at a time: a request
made while one is computed is answered 503 with Retry-After (no queue to grow). A plan past its
time limit and PLAN_GRACE_SECONDS more is stopped, its worker killed.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from virtcap.service.priority import lower_priority_by
from virtcap.service.worker_process import start_worker

PLAN_TIME_LIMIT_SECONDS = 30.0
"""The consolidation planner's time limit: the search stops between tries once it has passed."""
PLAN_GRACE_SECONDS = 30.0
"""How much longer than its time limit a plan may take before its worker is killed (one try of a
search is one evacuation: seconds on a large fleet)."""
START_SECONDS = 300.0
"""How long a new worker may take to be ready (a spawned interpreter importing what its jobs need,
below the exporter's priority: on a busy machine, tens of seconds) before it is taken for stuck and
killed. Apart from a job's own bound: counted in it, a slow start failed the job (the first plan
after the exporter started, every Placement round) on a machine too busy to start it in time."""
WORKER_NICENESS = 10
"""The worker's CPU priority: below the exporter's, whose scrapes and audits take the CPU first,
but not SCHED_IDLE as the failure tolerance's worker: someone waits for a plan, and on a busy
machine an idle-class process may wait minutes for a CPU."""

Job = tuple[Callable[..., tuple[bool, str]], tuple[object, ...]]
"""A function the worker runs (module level, picklable) and its arguments: it answers (True, the
answer's JSON) or (False, why the request does not fit the fleet)."""


class PlannerBusyError(Exception):
    """Another plan is being computed: ask again after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"a plan is being computed; ask again in {retry_after} s")
        self.retry_after = retry_after


class PlannerFailedError(Exception):
    """The worker died, or took too long and was killed: no plan (a 503; the next request starts a
    new worker)."""


def lower_priority() -> None:
    """A worker's start (`start_worker`), below the exporter's priority."""
    start_worker()
    lower_priority_by(WORKER_NICENESS)


def imported(module: str) -> None:
    """In a worker: `module` imported (a job's, before the job's bound starts)."""
    importlib.import_module(module)


def one_worker(initializer: Callable[[], None]) -> ProcessPoolExecutor:
    """A pool of one worker process, started by `initializer`: spawned, not forked (the
    exporter's threads, libvirt's and the executor's, hold locks a forked child would inherit held)."""
    return ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=initializer
    )


async def until_imported(pool: ProcessPoolExecutor, module: str, seconds: float) -> None:
    """Once `pool`'s worker has started and imported `module`; TimeoutError past `seconds`
    (START_SECONDS: its start is kept apart from its jobs' bounds)."""
    async with asyncio.timeout(seconds):
        await asyncio.wrap_future(pool.submit(imported, module))


class Planner:
    """One worker process, one plan at a time."""

    def __init__(
        self,
        time_limit_seconds: float = PLAN_TIME_LIMIT_SECONDS,
        grace_seconds: float = PLAN_GRACE_SECONDS,
        *,
        initializer: Callable[[], None] = lower_priority,
        start_seconds: float = START_SECONDS,
    ) -> None:
        """`initializer`: what the worker does first (`lower_priority`)."""
        self.time_limit_seconds = time_limit_seconds
        self.grace_seconds = grace_seconds
        self._initializer = initializer
        self._start_seconds = start_seconds
        self._pool: ProcessPoolExecutor | None = None
        self._imported: set[str] = set()
        """The job modules the worker has imported."""
        self._preparing = False
        self._running: Future[tuple[bool, str]] | None = None
        self._expected_by = 0.0
        self._stopped = False

    def busy(self) -> bool:
        return self._preparing or (self._running is not None and not self._running.done())

    async def submit(
        self, prepare: Callable[[], Awaitable[Job]], time_limit_seconds: float, what: str
    ) -> tuple[bool, str]:
        """`prepare`d on the event loop (the fleet's states taken and pickled a slice at a time),
        then run in the worker: its (answered, text). Raises PlannerBusyError or
        PlannerFailedError (`what` names the plan in their messages). A new worker, and one that
        has not run a job of this module yet, is waited for until ready (START_SECONDS) before the
        plan's time limit starts."""
        if self._stopped:
            raise PlannerFailedError("the exporter is stopping")
        if self.busy():
            raise PlannerBusyError(max(1, math.ceil(self._expected_by - time.monotonic())))
        self._preparing = True  # before the first await: a second request finds it busy
        self._expected_by = time.monotonic() + time_limit_seconds
        try:
            function, arguments = await prepare()
            if self._stopped:
                raise PlannerFailedError("the exporter is stopping")
            pool = await self._ready(function.__module__, what)
            future = pool.submit(function, *arguments)
            self._running = future
        except BrokenProcessPool:
            self._discard()
            raise PlannerFailedError(f"{what}: the planner's worker process could not be started") from None
        except asyncio.CancelledError:
            self._discard()  # not ready: the next plan would count the rest of its start
            raise
        finally:
            self._preparing = False
        limit = time_limit_seconds + self.grace_seconds
        try:
            async with asyncio.timeout(limit):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            self._discard()
            raise PlannerFailedError(f"{what} took longer than {limit:g} s: its worker was stopped") from None
        except BrokenProcessPool:
            self._discard()
            raise PlannerFailedError(f"{what}: the planner's worker process died") from None

    async def _ready(self, module: str, what: str) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = one_worker(self._initializer)
            self._imported = set()
        pool = self._pool
        if module not in self._imported:
            try:
                await until_imported(pool, module, self._start_seconds)
            except TimeoutError:
                self._discard()
                raise PlannerFailedError(
                    f"{what}: the planner's worker process was not ready within {self._start_seconds:g} s"
                ) from None
            self._imported.add(module)
        return pool

    def _discard(self) -> ProcessPoolExecutor | None:
        """The worker killed (whatever it is doing), the pool shut down without waiting: the
        pool, for a caller to wait for."""
        pool, self._pool = self._pool, None
        self._running = None  # abandoned with its pool: the next plan starts another
        if pool is None:
            return None
        kill_workers(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        return pool

    async def stop(self) -> None:
        """With the exporter: a plan being computed abandoned (its worker killed), an idle worker
        told to exit, and waited for (in a thread) so that its queues are released; no plan
        started after."""
        self._stopped = True
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if self.busy():
            kill_workers(pool)
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    for process in pool_processes(pool):
        process.kill()


def pool_processes(pool: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    # ProcessPoolExecutor has no public way to reach its workers before Python 3.14
    # (terminate_workers): its processes
    processes = getattr(pool, "_processes", None) or {}
    return list(processes.values())
