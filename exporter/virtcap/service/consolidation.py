"""The consolidation plan for people: `virtcap plan consolidate` (one audit of the fleet) and
`POST /api/v1/plans/consolidation` (the live snapshots and pending claims), the same body
(virtcap.contract.plans), the same planner (virtcap.model.packing.consolidation), the same answer.
Nothing is held or moved.

On a running exporter the plan is computed in a worker process of its own (a
`ProcessPoolExecutor` of one worker, spawned on first use, at a lower CPU priority): a plan
takes seconds of CPU on a large fleet, which must neither block the event loop nor hold the
interpreter lock while a scrape is served. The host states are built and pickled on the event
loop a slice at a time (as the failure tolerance's are) and travel as one pickle each; the
answer comes back as its JSON text. One plan at a time: a request made while one is computed is
answered 503 with Retry-After (no queue to grow). A plan is bounded by the planner's time limit
(what it found by then is the plan, `complete: false`), and its worker is killed if it has not
answered PLAN_GRACE_SECONDS after that. Where the exporter's last fleet compaction was computed on
the same hypervisors and audits, its proven lower bound is the plan's `target`: the search stops
once the hypervisors left reach it (no plan gets below it, so the plan is the same, found sooner).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import pickle
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from virtcap.config import Config
from virtcap.contract.plans import ConsolidationAnswer, ConsolidationBody, PlanError
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.scheduling import FleetEntry, host_states
from virtcap.fleet.tolerance import ToleranceReport
from virtcap.model.packing.consolidation import ConsolidationOptionError, consolidation_plan
from virtcap.model.scheduler import HostState, Multipliers
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.tolerance_task import in_slices
from virtcap.service.tolerance_worker import pickle_one
from virtcap.units import brief_repr

PLAN_TIME_LIMIT_SECONDS = 30.0
"""The planner's time limit: the search stops between tries once it has passed."""
PLAN_GRACE_SECONDS = 30.0
"""How much longer than the time limit a worker may take before it is killed (one try of the
search is one evacuation: seconds on a large fleet)."""
WORKER_NICENESS = 10
"""The worker's CPU priority: below the exporter's, whose scrapes and audits take the CPU first,
but not SCHED_IDLE as the failure tolerance's worker: someone waits for a plan, and on a busy
machine an idle-class process may wait minutes for a CPU."""


def check_plan_options(body: ConsolidationBody, config: Config) -> None:
    """The body's hypervisors and zone are the configuration's (this exporter's share of it), and
    no more hypervisors are kept free than there are in scope; raises PlanError."""
    names = {hypervisor.name for hypervisor in config.hypervisors}
    for name in body.exclude_hosts:
        if name not in names:
            raise PlanError(f"exclude_hosts: unknown hypervisor {brief_repr(name)}: {config.not_here(name)}")
    scope = config.hypervisors
    where = "the fleet"
    zone = body.availability_zone
    if zone is not None:
        zones = sorted({h.availability_zone for h in config.hypervisors if h.availability_zone is not None})
        if zone not in zones:
            known = ", ".join(zones) if zones else "none (no hypervisor is in an availability zone)"
            raise PlanError(
                f"availability_zone: unknown availability zone {brief_repr(zone)}; expected one of: {known}"
            )
        scope = tuple(h for h in config.hypervisors if h.availability_zone == zone)
        where = f"availability zone {zone}"
    if body.keep_free > len(scope):
        raise PlanError(f"keep_free: at most the {len(scope)} hypervisor(s) of {where}, got {body.keep_free}")


def compaction_target(
    report: ToleranceReport | None, fleet: Sequence[FleetEntry], body: ConsolidationBody
) -> int | None:
    """The plan's target from the exporter's last fleet compaction (`report.packing`): its proven
    lower bound, where the plan's scope is the fleet (no zone, nothing excluded) and the
    compaction read the audits the plan reads: every packing answer caught up with the states of
    this report (none pending), taken before it began, every hypervisor it counted still there
    and no audit newer. None otherwise
    (unsure: no target, the same plan found a little later)."""
    if body.availability_zone is not None or body.exclude_hosts or report is None:
        return None
    packing = report.packing
    if packing is None or packing.compaction is None or packing.computed_at < report.computed_at:
        return None  # none yet, or kept from an earlier report: its states are older still
    if packing.pending:
        return None  # some answers, maybe the compaction, are older than the report's states
    began = report.computed_at - report.duration_seconds
    audited = {entry.name for entry in fleet if entry.good is not None}
    if not set(packing.stranded) <= audited:
        return None  # a hypervisor it counted is gone: its domains no longer need room
    if any(entry.good is not None and entry.good.taken_at >= began for entry in fleet):
        return None
    return packing.compaction.lower_bound


def plan_answer(
    states: Sequence[HostState],
    multipliers: Multipliers,
    body: ConsolidationBody,
    time_limit_seconds: float,
    target: int | None = None,
) -> ConsolidationAnswer:
    """The plan on the audited hypervisors' states, the body checked against the configuration
    first (check_plan_options). A hypervisor excluded or a zone asked for that has no audited
    state is no error: it was configured, and is down or not audited yet. `target`: the fleet's
    compaction bound (compaction_target), used only where the plan's scope is the fleet."""
    audited = {state.name for state in states}
    zone = body.availability_zone
    in_scope = [state for state in states if zone is None or state.availability_zone == zone]
    if not in_scope:
        return ConsolidationAnswer(
            hypervisors_before=0, hypervisors_after=0, emptied=[], moves=[], unmovable=[], complete=True
        )
    try:
        plan = consolidation_plan(
            states,
            multipliers,
            max_moves=body.max_moves,
            # more than the audited hypervisors (some are down): none emptied, as asked
            keep_free=min(body.keep_free, len(in_scope)),
            availability_zone=zone,
            exclude=frozenset(body.exclude_hosts) & audited,
            target=target if zone is None and not body.exclude_hosts else None,
            time_limit_seconds=time_limit_seconds,
        )
    except ConsolidationOptionError as error:
        raise PlanError(str(error)) from None
    return ConsolidationAnswer.of(plan)


def plan_locally(config: Config, body: ConsolidationBody) -> ConsolidationAnswer:
    """One audit of the fleet (no pending claims: there is no ledger), then the planner. Runs its
    own event loop: for `virtcap plan consolidate`, not for a caller on one."""
    check_plan_options(body, config)
    snapshots = asyncio.run(audit_fleet_once(config))
    states = host_states([FleetEntry.of(snapshot) for snapshot in snapshots], ())
    return plan_answer(states, config.multipliers, body, PLAN_TIME_LIMIT_SECONDS)


class PlannerBusyError(Exception):
    """Another plan is being computed: ask again after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"a consolidation plan is being computed; ask again in {retry_after} s")
        self.retry_after = retry_after


class PlannerFailedError(Exception):
    """The worker died, or took too long and was killed: no plan (a 503; the next request starts a
    new worker)."""


def _lower_priority() -> None:
    with contextlib.suppress(OSError):  # refused (a container's policy): the default priority
        os.nice(WORKER_NICENESS)


def _plan_in_worker(
    pickled: Sequence[bytes],
    multipliers: Multipliers,
    body: ConsolidationBody,
    time_limit_seconds: float,
    target: int | None,
) -> tuple[bool, str]:
    """In the worker process: (True, the answer's JSON) or (False, why the options do not fit)."""
    states = [pickle.loads(one) for one in pickled]
    try:
        return True, plan_answer(states, multipliers, body, time_limit_seconds, target).as_json()
    except PlanError as error:
        return False, str(error)


class ConsolidationPlanner:
    """The running exporter's planner: one worker process, one plan at a time."""

    def __init__(
        self, time_limit_seconds: float = PLAN_TIME_LIMIT_SECONDS, grace_seconds: float = PLAN_GRACE_SECONDS
    ) -> None:
        self.time_limit_seconds = time_limit_seconds
        self.grace_seconds = grace_seconds
        self._pool: ProcessPoolExecutor | None = None
        self._preparing = False
        self._running: Future[tuple[bool, str]] | None = None
        self._expected_by = 0.0
        self._stopped = False

    def busy(self) -> bool:
        return self._preparing or (self._running is not None and not self._running.done())

    async def plan(
        self,
        fleet: Sequence[FleetEntry],
        claims: Iterable[Claim],
        multipliers: Multipliers,
        body: ConsolidationBody,
        target: int | None = None,
    ) -> str:
        """The answer's JSON on the fleet with its pending claims (`target`: compaction_target's).
        Raises PlanError (options the fleet's states refuse), PlannerBusyError or
        PlannerFailedError. On the event loop; the body checked against the configuration first
        (check_plan_options)."""
        if self._stopped:
            raise PlannerFailedError("the exporter is stopping")
        if self.busy():
            raise PlannerBusyError(max(1, math.ceil(self._expected_by - time.monotonic())))
        self._preparing = True  # before the first await: a second request finds it busy
        self._expected_by = time.monotonic() + self.time_limit_seconds
        held = list(claims)
        try:
            # one entry's state at a time (a scrape waits for one slice at most), pickled there
            # too: the executor then only copies bytes
            pickled = await in_slices(
                fleet, lambda entry: [pickle_one(s) for s in host_states([entry], held)]
            )
            if self._stopped:
                raise PlannerFailedError("the exporter is stopping")
            pool = self._started()
            future = pool.submit(
                _plan_in_worker,
                [one for entry in pickled for one in entry],
                multipliers,
                body,
                self.time_limit_seconds,
                target,
            )
            self._running = future
        except BrokenProcessPool:
            self._discard()
            raise PlannerFailedError("the consolidation plan's worker process could not be started") from None
        finally:
            self._preparing = False
        limit = self.time_limit_seconds + self.grace_seconds
        try:
            async with asyncio.timeout(limit):
                answered, text = await asyncio.wrap_future(future)
        except TimeoutError:
            self._discard()
            raise PlannerFailedError(
                f"the consolidation plan took longer than {limit:g} s: its worker was stopped"
            ) from None
        except BrokenProcessPool:
            self._discard()
            raise PlannerFailedError("the consolidation plan's worker process died") from None
        if not answered:
            raise PlanError(text)
        return text

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawned, not forked: the exporter's threads (libvirt's, the executor's) hold locks
            # a forked child would inherit held
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_lower_priority
            )
        return self._pool

    def _discard(self) -> ProcessPoolExecutor | None:
        """The worker killed (whatever it is doing), the pool shut down without waiting: the
        pool, for a caller to wait for."""
        pool, self._pool = self._pool, None
        self._running = None  # abandoned with its pool: the next plan starts another
        if pool is None:
            return None
        _kill_workers(pool)
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
            _kill_workers(pool)
        await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    # ProcessPoolExecutor has no public way to stop a worker mid-task before Python 3.14
    # (terminate_workers): its processes, by pid
    processes = getattr(pool, "_processes", None) or {}
    for process in list(processes.values()):
        process.kill()
