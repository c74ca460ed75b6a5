"""Evacuation: whether every domain of a failed host finds a host among the others, one by one and
largest first, through the same filters and weighers as a request (`evacuation`).

`reference_evacuation` does it the straightforward way, each domain through `schedule`; the
evacuations the service runs take the fast path (`evacuate`), which gives the same answers: the
hosts that pass for a request are the fleet's (fleet_index.py) but for those the evacuation lost
or consumed, the consumed ones tested again from their claims (`ConsumedHost`), the best host
found without weighing every host (best_host.py), and the rejections of a domain that finds no
host built from the fleet's only when read (fleet_refusals.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from virtcap.model.host_fit import Demand
from virtcap.model.scheduler.best_host import (
    WeigherTops,
    first_in_order,
    threshold_best,
    weigher_tops,
)
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.filters import CandidateMemo, Rejection
from virtcap.model.scheduler.fleet_index import FleetIndex, Normalization, RequestNumber
from virtcap.model.scheduler.fleet_refusals import HostRefusal, UnplacedRejections
from virtcap.model.scheduler.host_states import (
    HostState,
    WeigherValues,
    evacuation_order,
)
from virtcap.model.scheduler.request import schedule
from virtcap.model.scheduler.weighers import SPREAD, Multipliers


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A domain of the failed host that found no host, and why each host refused it.

    An evacuation's `rejections` are schedule's dictionary, built only when read (see
    `UnplacedRejections`): on a full fleet most domains find no host, and each would list every host.
    `refused_by` and `first_rejection` summarize them without building them."""

    guest: str
    rejections: Mapping[str, Rejection]
    no_valid_host: str | None = None

    @property
    def refused_by(self) -> Mapping[str, int]:
        """Per filter, how many hosts it refused (counted among the rejections)."""
        if isinstance(self.rejections, UnplacedRejections):
            return self.rejections.refused_by()
        counts: dict[str, int] = {}
        for rejection in self.rejections.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return counts

    @property
    def first_rejection(self) -> tuple[str, Rejection] | None:
        """The first host by name that refused it, and why; None where no host was looked at."""
        if isinstance(self.rejections, UnplacedRejections):
            return self.rejections.first()
        if not self.rejections:
            return None
        first = min(self.rejections)
        return first, self.rejections[first]


@dataclass(frozen=True, slots=True)
class EvacuationResult:
    failed: str
    placements: tuple[tuple[str, str], ...]
    """(domain, host) of each domain re-homed, in the order they were scheduled."""
    unplaced: tuple[Unplaced, ...] = ()
    states: tuple[HostState, ...] = field(default=())
    """The remaining hosts once the re-homed domains are placed."""

    @property
    def feasible(self) -> bool:
        return not self.unplaced

    @property
    def unplaced_count(self) -> int:
        return len(self.unplaced)


def evacuation(
    hosts: Sequence[HostState],
    failed: str,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> EvacuationResult:
    """Whether every domain of the `failed` host can be scheduled, one by one and largest first,
    on the other hosts through the same engine (down, stale or in maintenance ones take none;
    the failed host's own domains are moved whether it is in maintenance or not), each placed
    domain consumed before the next; the domains that find no host are counted and go on. A
    `memo` shared by the evacuations of several hosts of the same fleet saves asking Placement
    again about the hosts they leave unchanged.

    The answer is `schedule`'s, domain by domain (`reference_evacuation`); it is found faster:
    the hosts that pass for a request are tested once, the hosts the evacuation consumed are
    tested and weighed from their claims, the best is found without weighing every host (see
    `evacuate`), and a domain that finds no host gets its rejections from the fleet's refusals
    of its request and what the evacuation changed."""
    memo = memo if memo is not None else CandidateMemo()
    sources = [state for state in hosts if state.name == failed]
    if len(sources) != 1:
        raise ValueError(f"expected one host named {failed!r}, found {len(sources)}")
    fleet = FleetIndex(hosts, memo)
    result, _ = evacuation_result(fleet, fleet.index[failed], multipliers)
    return result


def reference_evacuation(
    hosts: Sequence[HostState],
    failed: str,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> EvacuationResult:
    """`evacuation` the straightforward way: every domain through `schedule`. Kept for the tests,
    which hold the fast path to the same answers."""
    memo = memo if memo is not None else CandidateMemo()
    sources = [state for state in hosts if state.name == failed]
    if len(sources) != 1:
        raise ValueError(f"expected one host named {failed!r}, found {len(sources)}")
    (source,) = sources
    remaining = tuple(state for state in hosts if state.name != failed)
    rehomed: list[tuple[str, str]] = []
    unplaced: list[Unplaced] = []
    for guest in evacuation_order(source.guests):
        result = schedule(remaining, guest.demand, 1, multipliers=multipliers, memo=memo)
        if result.placed:
            rehomed.append((guest.name, result.steps[0].host))
            remaining = result.states
        else:
            unplaced.append(Unplaced(guest.name, result.rejections, result.no_valid_host))
    return EvacuationResult(failed, tuple(rehomed), tuple(unplaced), remaining)


class StepTrace(NamedTuple):
    """What decided one step of an evacuation, for the incremental tolerance: the request, the
    chosen host (an index of the fleet), its weight, how many hosts passed, and per weigher the
    largest clipped value among them with its holder and the largest among the others. (A named
    tuple: one is made at every step, and a frozen dataclass is slower to make.)"""

    key: RequestNumber
    demand: Demand
    chosen: int
    weight: float
    passed: int
    tops: WeigherTops
    exact: bool = True
    """Whether the second largest values are known (see `steps_that_stand`)."""


def consumed_hosts_passing(
    fleet: FleetIndex,
    demand: Demand,
    key: RequestNumber,
    *,
    moved: Mapping[int, ConsumedHost],
    consumed: Sequence[int],
    requests: dict[RequestNumber, tuple[set[int], list[int]]],
) -> set[int]:
    """The hosts an evacuation consumed that pass for the request as they are now: per request
    met, kept with how far in the hosts `consumed` (in turn) they are up to date, and brought up
    to date with the hosts consumed since (one, mostly: the domains of a flavor come in a row)."""
    known = requests.get(key)
    if known is None:
        needs = fleet.needs(key, demand)
        if needs is None:
            passing_again = {number for number, host in moved.items() if host.passes(fleet, demand, key)}
        else:
            # `ConsumedHost.passes` inline: a request met for the first time tests every consumed host
            passing_again = set()
            passing = fleet.passing[key]
            for number, host in moved.items():
                if number in passing:
                    left = host.left
                    for resource, need in needs:
                        room = left.get(resource)  # None: no limit
                        if room is not None and need > room:
                            break
                    else:
                        passing_again.add(number)
        requests[key] = (passing_again, [len(consumed)])
        return passing_again
    passing_again, upto = known
    if upto[0] == len(consumed) - 1:  # the usual: one host consumed since
        number = consumed[-1]
        if moved[number].passes(fleet, demand, key):
            passing_again.add(number)
        else:
            passing_again.discard(number)
        upto[0] += 1
    elif upto[0] < len(consumed):
        for number in set(consumed[upto[0] :]):
            if moved[number].passes(fleet, demand, key):
                passing_again.add(number)
            else:
                passing_again.discard(number)
        upto[0] = len(consumed)
    return passing_again


def choose_host(
    fleet: FleetIndex,
    key: RequestNumber,
    count: int,
    *,
    moved: Mapping[int, ConsumedHost],
    gone: set[int],
    passing_again: Collection[int],
    clipped: Sequence[WeigherValues],
    tops: WeigherTops,
    multipliers: Multipliers,
    firsts: dict[Normalization, list[int]],
    orders: dict[Normalization, list[tuple[float, int]] | None],
) -> tuple[int, float]:
    """The host `weigh` puts first among the `count` that pass, and its weight: the one host
    (weighing 0), the first of the fleet's order for this normalization, or `threshold_best`'s."""
    if count == 1:
        return max(holder for _, holder, _ in tops), 0.0
    normalization = (key, tops[0][0], tops[1][0], tops[2][0])
    order = fleet.sorted_by_weight(orders, multipliers, normalization)
    if order is not None:
        start = firsts.get(normalization)
        if start is None:
            start = firsts[normalization] = [0]
        return first_in_order(
            order,
            skip=moved,
            gone=gone,
            passing_again=passing_again,
            clipped=clipped,
            tops=tops,
            multipliers=multipliers,
            start=start,
        )
    return threshold_best(
        fleet.ranking(key),
        skip=moved,
        gone=gone,
        passing_again=passing_again,
        clipped=clipped,
        tops=tops,
        multipliers=multipliers,
    )


def evacuate(
    fleet: FleetIndex,
    failed: Sequence[int],
    multipliers: Multipliers,
    prefix: Sequence[StepTrace] = (),
    *,
    domains: int | None = None,
) -> tuple[list[tuple[str, str]], list[Unplaced], dict[int, ConsumedHost], list[StepTrace] | None]:
    """The domains of the `failed` hosts (indices of the fleet), largest first, each through the
    scheduler on the others as `schedule` would place one instance: the hosts that pass for it
    are the fleet's (kept per request) but for the failed ones and those this evacuation has
    consumed (tested again as they are now, from their claims: `ConsumedHost`); the best of them is
    the first of the fleet's order for the step's normalization when it was met before (see
    `FleetIndex.sorted_by_weight`), else found by a threshold walk (`threshold_best`), either way against the
    consumed hosts that pass, weighed one by one. The best host passes Placement and the filters
    as it is now, so its claim test (the same tests) succeeds: `schedule` would place the domain
    there. A domain no host passes for is unplaced with `schedule`'s rejections as they differ
    from the fleet's (`UnplacedRejections`: the request's refusals in the fleet, less the failed hosts,
    with the consumed hosts' as they are now), which costs what the evacuation changed, not the
    fleet's size; the steps are then not traced (None).

    The first domains may be given their hosts: the steps of a `prefix` (of a trace whose
    choices are known to stand, see `steps_that_stand`), consumed without a search and kept as the
    beginning of the trace. `domains`: only the first so many domains of the order are placed
    (the others are left as if the evacuation stopped there; None: all of them)."""
    gone = set(failed)
    moved: dict[int, ConsumedHost] = {}
    clipped = list(fleet.clipped)
    rehomed: list[tuple[str, str]] = []
    unplaced: list[Unplaced] = []
    traces: list[StepTrace] | None = list(prefix)
    consumed: list[int] = []
    """The hosts chosen, in turn: a request's hosts passing again are brought up to date from it."""
    requests: dict[RequestNumber, tuple[set[int], list[int]]] = {}
    """Per request met, the consumed hosts that pass for it and how far in `consumed` that is."""
    starts: dict[RequestNumber, list[int]] = {}
    """Per request met, where its rankings' hosts not consumed begin (see `weigher_tops`)."""
    firsts: dict[Normalization, list[int]] = {}
    """Per normalization met, where its order's hosts not consumed begin (see `first_in_order`)."""
    orders = fleet.orders_for(multipliers)
    lost: frozenset[int] | None = None
    """The failed hosts, kept by the domains that find no host."""
    order = fleet.evacuation_order(failed)
    for step, (guest, key) in enumerate(order if domains is None else order[:domains]):
        demand = guest.demand
        if step < len(prefix):
            chosen = prefix[step].chosen
        else:
            base = fleet.passing_hosts(key, demand)
            passing_again = consumed_hosts_passing(
                fleet, demand, key, moved=moved, consumed=consumed, requests=requests
            )
            count = len(base) - len(gone & base) - len(moved.keys() & base) + len(passing_again)
            if count > 0:
                known = starts.get(key)
                if known is None:
                    known = starts[key] = [0, 0, 0]
                tops = weigher_tops(fleet.ranking(key), moved, gone, passing_again, clipped, starts=known)
                chosen, weight = choose_host(
                    fleet,
                    key,
                    count,
                    moved=moved,
                    gone=gone,
                    passing_again=passing_again,
                    clipped=clipped,
                    tops=tops,
                    multipliers=multipliers,
                    firsts=firsts,
                    orders=orders,
                )
                if traces is not None:
                    traces.append(StepTrace(key, demand, chosen, weight, count, tops))
            else:
                # no host passes: every other refuses it, those the evacuation left as the fleet
                # has them (the request's refusals, shared), those it consumed as they are now
                traces = None
                if lost is None:
                    lost = frozenset(gone)
                unplaced.append(Unplaced(guest.name, _unplaced_rejections(fleet, key, demand, lost, moved)))
                continue
        host = moved.get(chosen)
        if host is None:
            host = moved[chosen] = ConsumedHost(chosen, fleet.rooms(chosen), fleet.room_left(chosen))
        rehomed.append((guest.name, fleet.states[chosen].name))
        host.add(demand, key, fleet.amounts(key, demand))
        clipped[chosen] = host.clipped(fleet.level(chosen))
        consumed.append(chosen)
    return rehomed, unplaced, moved, traces


def _unplaced_rejections(
    fleet: FleetIndex,
    key: RequestNumber,
    demand: Demand,
    lost: frozenset[int],
    moved: Mapping[int, ConsumedHost],
) -> UnplacedRejections:
    """`schedule`'s rejections of a domain no host passes for, in an evacuation that lost these
    hosts and consumed those: the consumed ones' refusals found now, the others' the fleet's."""
    now: dict[int, HostRefusal] = {}
    for number, host in moved.items():
        rejection = host.rejection(fleet, demand, key)
        if rejection is None:
            raise ValueError(f"{fleet.names[number]}: passes and was not counted")
        now[number] = rejection
    return UnplacedRejections(fleet.names, fleet.refused(key, demand), lost, now)


def evacuation_result(
    fleet: FleetIndex, failed: int, multipliers: Multipliers, prefix: Sequence[StepTrace] = ()
) -> tuple[EvacuationResult, list[StepTrace] | None]:
    rehomed, unplaced, moved, traces = evacuate(fleet, (failed,), multipliers, prefix)
    states = fleet.given()
    position = fleet.position
    for number, host in moved.items():
        states[position[number]] = host.current(fleet)
    del states[position[failed]]
    name = fleet.states[failed].name
    return EvacuationResult(name, tuple(rehomed), tuple(unplaced), tuple(states)), traces
