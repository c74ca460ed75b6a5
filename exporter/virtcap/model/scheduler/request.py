"""The request loop: where the instances of one request land, one at a time (Nova's
`SchedulerManager._schedule`, see the package's docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.model.host_fit import Demand
from virtcap.model.numa.fitting import refitted
from virtcap.model.scheduler.filters import (
    INSTANCE_FILTERS,
    PLACEMENT,
    REQUEST_FILTERS,
    CandidateMemo,
    FilterRequest,
    Rejection,
    first_rejection,
)
from virtcap.model.scheduler.host_states import HostState
from virtcap.model.scheduler.weighers import SPREAD, Multipliers, Weighed, weigh


@dataclass(frozen=True, slots=True)
class Step:
    """One instance placed: where, how its host weighed, and among how many weighed hosts."""

    host: str
    weighed: Weighed
    candidates: int


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    requested: int
    fitted: int
    """How many instances would have been placed one by one before the first that found no host:
    all of them when the request succeeds."""
    steps: tuple[Step, ...]
    """Each instance that found a host, in order (tentative when the request fails)."""
    rejections: Mapping[str, Rejection]
    """Per host that did not take the last instance tried (the first one that found no host when
    the request fails), its first refusal."""
    no_valid_host: str | None = None
    """Why the request fails where no host is ever looked at (a forced host that does not exist)."""
    states: tuple[HostState, ...] = ()
    """The hosts once the instances are placed (as given when the request fails)."""

    @property
    def placed(self) -> bool:
        return self.fitted == self.requested

    @property
    def hosts(self) -> tuple[str, ...]:
        """Where each instance lands; empty when the request fails (all or nothing)."""
        return tuple(step.host for step in self.steps) if self.placed else ()

    @property
    def unplaced(self) -> int:
        return self.requested - self.fitted


def schedule(
    hosts: Sequence[HostState],
    demand: Demand,
    count: int = 1,
    *,
    ignore_hosts: Sequence[str] = (),
    force_hosts: Sequence[str] = (),
    anti_affinity: bool = False,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> ScheduleResult:
    """Where `count` instances of the demand land, one at a time, each consumed by its host
    before the next; all or nothing (see the package's docstring). A `memo` keeps Placement's
    answers for the next requests over the same states (the answer is the same without it)."""
    if count < 0:
        raise ValueError(f"expected a count of at least 0, got {count}")
    by_name = {state.name: state for state in hosts}
    if len(by_name) != len(hosts):
        raise ValueError("expected each host once")
    names = sorted(by_name)
    request = FilterRequest.of(
        demand, memo=memo, ignore_hosts=ignore_hosts, force_hosts=force_hosts, anti_affinity=anti_affinity
    )
    # the hosts the request leaves out, then Placement's allocation candidates, asked once
    rejected: dict[str, Rejection] = {}
    candidates: list[str] = []
    for name in names:
        found = first_rejection(by_name[name], request, REQUEST_FILTERS)
        if found is not None:
            rejected[name] = found[1]
        else:
            candidates.append(name)
    no_such_host = _missing_forced_host(names, request.forced_host)
    if no_such_host is not None:
        # every host is listed all the same (not the forced one), as the unaudited ones are
        return ScheduleResult(count, 0, (), rejected, no_such_host, tuple(hosts))
    current = dict(by_name)
    steps: list[Step] = []
    chosen: set[str] = set()
    step_rejections: dict[str, Rejection] = {}
    for _ in range(count):
        step_rejections = dict(rejected)
        instance = replace(request, demand=demand, chosen=frozenset(chosen))
        passed = []
        for name in candidates:
            state = current[name]
            found = first_rejection(state, instance, INSTANCE_FILTERS)
            if found is not None:
                step_rejections[name] = found[1]
            else:
                passed.append(state)
        step: Step | None = None
        for weighed in weigh(passed, multipliers):
            state = current[weighed.host]
            claim = state.capacity.claim_test(demand)
            if claim:
                step_rejections[weighed.host] = Rejection(
                    PLACEMENT, ("claim refused: " + claim[0], *claim[1:])
                )
                continue
            step = Step(weighed.host, weighed, len(passed))
            break
        if step is None:
            return ScheduleResult(count, len(steps), tuple(steps), step_rejections, None, tuple(hosts))
        steps.append(step)
        chosen.add(step.host)
        # a forced host skips the filters: nova-compute fits each instance with its own topology
        demand = _consume_instance(current, step.host, demand, carry=request.forced_host is None)
    final = tuple(current[state.name] for state in hosts)
    return ScheduleResult(count, len(steps), tuple(steps), step_rejections, None, final)


def _missing_forced_host(names: Sequence[str], forced_host: str | None) -> str | None:
    """Why the request fails at once: the forced host does not exist (Nova's "No such host")."""
    if forced_host is None or any(name.lower() == forced_host.lower() for name in names):
        return None
    return f"No such host - host: {forced_host}"


def _consume_instance(current: dict[str, HostState], host: str, demand: Demand, *, carry: bool) -> Demand:
    """The host consumes one instance of the demand; the demand the request's next instance is
    filtered and consumed with: with `carry`, its NUMA topology as the fit on that host left it
    (`numa.refitted`), as Nova's scheduler keeps it in the request spec."""
    state = current[host]
    current[host] = state.consume(demand)
    topology = demand.within.topology
    if topology is None or not carry:
        return demand
    fitted = state.capacity.within.fit(demand.within)
    if fitted is None or not fitted.fits:  # the host passed this very fit, and took the instance
        raise ValueError(f"{state.name}: the instance placed does not fit its cells")
    return replace(demand, within=replace(demand.within, topology=refitted(topology, fitted)))
