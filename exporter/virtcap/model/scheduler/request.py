"""The request loop: where the instances of one request land, one at a time (Nova's
`SchedulerManager._schedule`, see the package's docstring)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.model.host_fit import Demand
from virtcap.model.numa.fitting import refitted
from virtcap.model.scheduler.claims_replay import ClaimsTrace, Placements
from virtcap.model.scheduler.claims_request import ClaimsStep, claims_decide, claims_request
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.filters import (
    INSTANCE_FILTERS,
    PLACEMENT,
    REQUEST_FILTERS,
    CandidateMemo,
    FilterRequest,
    Rejection,
    first_rejection,
)
from virtcap.model.scheduler.fleet_index import FleetIndex
from virtcap.model.scheduler.host_states import HostState
from virtcap.model.scheduler.weighers import SPREAD, WEIGHERS, Multipliers, Weighed, weigh, weight_of


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
    answers for the next requests over the same states (the answer is the same without it).

    A demand that asks for no NUMA cells, devices nor vGPUs, in a request without anti-affinity,
    takes the fast path (claims_request.py): the same answer, to the last bit of every weight,
    as the general loop (`general_schedule`), which every other request takes."""
    return _schedule(
        hosts,
        demand,
        count,
        ignore_hosts=ignore_hosts,
        force_hosts=force_hosts,
        anti_affinity=anti_affinity,
        multipliers=multipliers,
        memo=memo,
        fast=True,
    )


def general_schedule(
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
    """`schedule` through the general loop whatever the demand: at every step every candidate
    goes through the instance filters and is weighed. The tests hold the fast path to it."""
    return _schedule(
        hosts,
        demand,
        count,
        ignore_hosts=ignore_hosts,
        force_hosts=force_hosts,
        anti_affinity=anti_affinity,
        multipliers=multipliers,
        memo=memo,
        fast=False,
    )


def request_hosts(
    hosts: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers = SPREAD,
    *,
    memo: CandidateMemo | None = None,
    placements: Placements | None = None,
) -> tuple[str, ...]:
    """Where the instances of one request for as many instances of the demand as fit land, in
    order: `schedule`'s steps for a request of more instances than fit (its first k steps are a
    request of k's: each step depends on those before only). A demand that asks for no cells,
    devices nor vGPUs takes the fast path to the first instance that finds no host (followed
    from the last request on the same hosts kept in `placements`, if given); any other asks
    `schedule` for twice as many instances until the request fails. Raises ValueError where a
    host takes instances without end (no limit on any class the demand asks for)."""
    memo = memo if memo is not None else CandidateMemo()
    if claims_decide(demand):
        if placements is not None:
            traced = request_trace(hosts, demand, multipliers, memo=memo, placements=placements)
            return tuple(traced.states[number].name for number in traced.hosts)
        _, request, _, candidates = _candidates(hosts, demand, memo)
        fleet = FleetIndex(hosts, memo)
        numbers = [fleet.index[name] for name in candidates]
        found = claims_request(fleet, numbers, request.demand, multipliers, count=None)
        return tuple(fleet.names[step.chosen] for step in found.steps)
    count = FIRST_REQUEST
    while True:
        result = schedule(hosts, demand, count, multipliers=multipliers, memo=memo)
        if not result.placed:
            return tuple(step.host for step in result.steps)
        count *= 2


def request_trace(
    hosts: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers,
    *,
    memo: CandidateMemo,
    placements: Placements,
) -> ClaimsTrace:
    """`request_hosts`'s fast path for a demand the claims decide, as the trace it keeps in
    `placements` (followed from the last request on the same hosts): its `hosts` are indices of
    its `states`, the hosts given in `FleetIndex` order."""
    _, request, _, candidates = _candidates(hosts, demand, memo)
    fleet = FleetIndex(hosts, memo)
    numbers = [fleet.index[name] for name in candidates]
    return placements.follow(fleet, numbers, request.demand, multipliers)


FIRST_REQUEST = 64
"""The instances `request_hosts` asks `schedule` for first (doubled until the request fails)."""


def _candidates(
    hosts: Sequence[HostState],
    demand: Demand,
    memo: CandidateMemo | None,
    *,
    ignore_hosts: Sequence[str] = (),
    force_hosts: Sequence[str] = (),
    anti_affinity: bool = False,
) -> tuple[dict[str, HostState], FilterRequest, dict[str, Rejection], list[str]]:
    """The hosts by name, the request, the hosts it leaves out (with why) and Placement's
    allocation candidates, asked once (by name)."""
    by_name = {state.name: state for state in hosts}
    if len(by_name) != len(hosts):
        raise ValueError("expected each host once")
    request = FilterRequest.of(
        demand, memo=memo, ignore_hosts=ignore_hosts, force_hosts=force_hosts, anti_affinity=anti_affinity
    )
    rejected: dict[str, Rejection] = {}
    candidates: list[str] = []
    for name in sorted(by_name):
        found = first_rejection(by_name[name], request, REQUEST_FILTERS)
        if found is not None:
            rejected[name] = found[1]
        else:
            candidates.append(name)
    return by_name, request, rejected, candidates


def _schedule(
    hosts: Sequence[HostState],
    demand: Demand,
    count: int,
    *,
    ignore_hosts: Sequence[str],
    force_hosts: Sequence[str],
    anti_affinity: bool,
    multipliers: Multipliers,
    memo: CandidateMemo | None,
    fast: bool,
) -> ScheduleResult:
    if count < 0:
        raise ValueError(f"expected a count of at least 0, got {count}")
    by_name, request, rejected, candidates = _candidates(
        hosts, demand, memo, ignore_hosts=ignore_hosts, force_hosts=force_hosts, anti_affinity=anti_affinity
    )
    no_such_host = _missing_forced_host(sorted(by_name), request.forced_host)
    if no_such_host is not None:
        # every host is listed all the same (not the forced one), as the unaudited ones are
        return ScheduleResult(count, 0, (), rejected, no_such_host, tuple(hosts))
    if fast and count > 0 and not anti_affinity and claims_decide(demand):
        return _schedule_by_claims(
            hosts,
            demand,
            count=count,
            rejected=rejected,
            candidates=candidates,
            multipliers=multipliers,
            memo=memo,
        )
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
                step_rejections[weighed.host] = _claim_refused(claim)
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


def _claim_refused(claim: Sequence[str]) -> Rejection:
    return Rejection(PLACEMENT, ("claim refused: " + claim[0], *claim[1:]))


def _schedule_by_claims(
    hosts: Sequence[HostState],
    demand: Demand,
    *,
    count: int,
    rejected: Mapping[str, Rejection],
    candidates: Sequence[str],
    multipliers: Multipliers,
    memo: CandidateMemo | None,
) -> ScheduleResult:
    """The general loop's answer from the fast path's steps (`claims_request`): each step's
    `Weighed` from its values, and the rejections of the last instance tried: the hosts the
    request left out, and the candidates whose claim failed ahead of the chosen one (every
    candidate, when the request fails)."""
    fleet = FleetIndex(hosts, memo if memo is not None else CandidateMemo())
    numbers = [fleet.index[name] for name in candidates]
    found = claims_request(fleet, numbers, demand, multipliers, count=count, traced=True)
    steps = tuple(
        _step(fleet.names[step.chosen], step, multipliers, found.alone, len(numbers)) for step in found.steps
    )
    rejections = dict(rejected)

    def refuse(name: str, state: HostState) -> None:
        claim = state.capacity.claim_test(demand)
        if not claim:
            raise ValueError(f"{name}: expected its claim to fail")
        rejections[name] = _claim_refused(claim)

    consumed = found.consumed
    if len(steps) < count:
        for number in numbers:
            host = consumed.get(number)
            refuse(fleet.names[number], host.current(fleet) if host is not None else fleet.states[number])
        return ScheduleResult(count, len(steps), steps, rejections, None, tuple(hosts))
    last = found.steps[-1]
    if last.tops is not None and not found.alone:
        # the full hosts `weigh` put ahead of the last one chosen: their values are those of that step
        for number, host in consumed.items():
            if number == last.chosen or _has_room(host, fleet, demand):
                continue
            weight = weight_of(host.clipped(fleet.level(number)), last.tops, multipliers)
            if (-weight, number) < (-last.weight, last.chosen):
                refuse(fleet.names[number], host.current(fleet))
    states = tuple(
        consumed[number].current(fleet) if (number := fleet.index[state.name]) in consumed else state
        for state in hosts
    )
    return ScheduleResult(count, len(steps), steps, rejections, None, states)


def _has_room(host: ConsumedHost, fleet: FleetIndex, demand: Demand) -> bool:
    """Whether one more instance of the demand passes the host's claim (the classes with a limit)."""
    needs = fleet.needs(fleet.key(demand), demand) or ()
    return all(need <= host.left.get(resource, need) for resource, need in needs)


def _step(name: str, step: ClaimsStep, multipliers: Multipliers, alone: bool, candidates: int) -> Step:
    """A fast path's step as the general loop gives it: the host's raw values, and each weigher's
    share of its weight as `weigh` computes it (all 0 for one host alone)."""
    raw, values, tops = step.raw, step.values, step.tops
    if raw is None or values is None or tops is None:
        raise ValueError("expected a traced step")
    if alone:
        parts = dict.fromkeys(WEIGHERS, 0.0)
    else:
        parts = {
            weigher: multipliers.of(weigher) * (values[part] / tops[part] if tops[part] != 0.0 else 0.0)
            for part, weigher in enumerate(WEIGHERS)
        }
    raws = dict(zip(WEIGHERS, raw, strict=True))
    return Step(name, Weighed(name, step.weight, raws, parts), candidates)


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
