"""The consolidation plan for people: `virtcap plan consolidate` (one audit of the fleet) and
`POST /api/v1/plans/consolidation` (the live snapshots and pending claims), the same body
(virtcap.contract.plans), the same planner (virtcap.model.packing.consolidation), the same answer.
Nothing is held or moved.

On a running exporter the plan is computed by the exporter's planner (service/planner.py: a
worker process, one plan at a time): the host states are built and pickled on the event loop a
slice at a time (as the failure tolerance's are) and travel as one pickle each; the answer comes
back as its JSON text. A plan is bounded by the planner's time limit (what it found by then is
the plan, `complete: false`). Where the exporter's last fleet compaction was computed on
the same hypervisors and audits, its proven lower bound is the plan's `target`: the search stops
once the hypervisors left reach it (no plan gets below it, so the plan is the same, found sooner).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable, Iterable, Sequence

from virtcap.config import Config
from virtcap.contract.plans import ConsolidationAnswer, ConsolidationBody, PlanError
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.scheduling import FleetEntry, host_states
from virtcap.fleet.tolerance import ToleranceReport
from virtcap.model.packing.consolidation import ConsolidationOptionError, consolidation_plan
from virtcap.model.scheduler import HostState, Multipliers
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.planner import PLAN_GRACE_SECONDS, PLAN_TIME_LIMIT_SECONDS, Planner
from virtcap.service.slices import in_slices
from virtcap.service.tolerance_worker import pickle_one
from virtcap.units import brief_repr

__all__ = [
    "PLAN_GRACE_SECONDS",
    "PLAN_TIME_LIMIT_SECONDS",
    "ConsolidationPlanner",
    "check_plan_options",
    "compaction_target",
    "plan_answer",
    "plan_locally",
]


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


class ConsolidationPlanner(Planner):
    """The running exporter's planner: one worker process, one plan at a time (consolidation plans
    and scenarios share it: service/scenarios.py)."""

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
        held = list(claims)

        async def prepared() -> tuple[Callable[..., tuple[bool, str]], tuple[object, ...]]:
            # one entry's state at a time (a scrape waits for one slice at most), pickled there
            # too: the executor then only copies bytes
            pickled = await in_slices(
                fleet, lambda entry: [pickle_one(s) for s in host_states([entry], held)]
            )
            states = [one for entry in pickled for one in entry]
            return _plan_in_worker, (states, multipliers, body, self.time_limit_seconds, target)

        answered, text = await self.submit(prepared, self.time_limit_seconds, "the consolidation plan")
        if not answered:
            raise PlanError(text)
        return text
