"""Sellable headroom under a failover reserve: per flavor, how many more instances the fleet can
take, placed one by one as the simulated scheduler places a request (`schedule`), while it still
tolerates `reserve_host_failures` hosts lost together (`FleetTolerance.tolerated`, the notion of
model/scheduler/failure_tolerance.py: for every j up to the reserve, the domains of the j hosts
with the most allocated memory, the new instances among them, all find a host on the others).

The instances of one request land where `request_hosts` says (`schedule`'s steps, the same to
the last bit, faster for a demand that asks for no cells, devices nor vGPUs); k of them placed
keep the tolerance or not (`keeps_tolerance`), and the answer is the k the search below finds.
docs/packing.md ("Sellable headroom") gives the method and where it is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler.evacuations import ConsumedHost, EvacuationResult, evacuation_result
from virtcap.model.scheduler.failure_tolerance import tolerated_losses
from virtcap.model.scheduler.filters import REQUEST_FILTERS, CandidateMemo, FilterRequest, first_rejection
from virtcap.model.scheduler.fleet_index import FleetIndex
from virtcap.model.scheduler.host_states import Guest, HostState, consume_in_turn
from virtcap.model.scheduler.request import schedule
from virtcap.model.scheduler.weighers import Multipliers, weight_of

SOLD_PREFIX = "sellable-"
"""The names of the instances a computation places (guests of their hosts, so that a host's
evacuation re-homes them too)."""

FIRST_REQUEST = 64
"""The instances the general path asks `schedule` for first (doubled until the request fails)."""


def sellable_instances(
    states: Sequence[HostState],
    flavors: Mapping[str, Demand],
    multipliers: Multipliers,
    reserve_host_failures: int,
) -> Mapping[str, int]:
    """Per flavor, its sellable instances on the fleet (`sellable_count`, each flavor alone)."""
    memo = CandidateMemo()
    return {
        flavor: sellable_count(states, demand, multipliers, reserve_host_failures, memo=memo)
        for flavor, demand in flavors.items()
    }


def sellable_by_zone(
    states: Sequence[HostState],
    flavors: Mapping[str, Demand],
    multipliers: Multipliers,
    reserve_host_failures: int,
) -> Mapping[tuple[str, str], int]:
    """Per (availability zone, flavor), the flavor's instances the zone can still take, asked for
    in that zone, while the zone's hypervisors alone tolerate the reserve (failover stays in the
    zone: the domains of a host in a zone are re-homed in it, see docs/scheduling.md). The zones
    are those of the hypervisors given; hypervisors in no zone belong to none of them."""
    zones = sorted({state.availability_zone for state in states if state.availability_zone is not None})
    memo = CandidateMemo()
    found: dict[tuple[str, str], int] = {}
    for zone in zones:
        members = [state for state in states if state.availability_zone == zone]
        for flavor, demand in flavors.items():
            in_zone = replace(demand, availability_zone=zone)
            found[zone, flavor] = sellable_count(
                members, in_zone, multipliers, reserve_host_failures, memo=memo
            )
    return found


def sellable_count(
    states: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers,
    reserve_host_failures: int,
    *,
    memo: CandidateMemo | None = None,
) -> int:
    """The most instances of the demand that one request places (`request_hosts`, as many as
    fit, in order) such that the fleet, with the first k of them placed, still tolerates the
    reserve (`keeps_tolerance`): k with k placed keeping it and k + 1 breaking it (or every
    instance that fits, when all of them keep it; 0 when the fleet does not tolerate the reserve
    as it is, or the reserve is larger than the fleet). Reserve 0: every instance that fits.

    The search: every instance that fits is tried first (the usual answer on a fleet with room:
    no), then galloping down from it (1, 2, 4... fewer) to a count that keeps the tolerance,
    then a binary search between the two. Each tried count is computed from the fleet as given
    (its own fleet index; Placement's answers shared through the memo, and a host with the same
    instances placed is the same state object), so a count's answer does not depend on the
    others tried. The answer always keeps the tolerance, and one more instance breaks it (or does
    not fit). Where keeping it is monotone in k, it is also the largest k such that every count
    up to k keeps it (placing them one by one and stopping at the first that breaks it): with
    Nova's default weighers (spread) on every random fleet the tests tried. It is not monotone
    in general: the greedy scheduler's evacuation can succeed with more instances placed and
    fail with fewer (tests/model/test_sellable.py pins a two-host fleet, stacking, where one
    instance breaks the reserve and two to four keep it); there the answer is such an edge,
    above the one-by-one count (docs/packing.md)."""
    if reserve_host_failures < 0:
        raise ValueError(f"expected a reserve of at least 0 host failures, got {reserve_host_failures}")
    memo = memo if memo is not None else CandidateMemo()
    if reserve_host_failures > len(states):
        # `tolerated` counts hosts lost among the fleet's: never more than there are
        return 0
    placed = request_hosts(states, demand, multipliers, memo=memo)
    if reserve_host_failures == 0:
        return len(placed)
    after = _States(states, demand, placed, multipliers, memo)
    known: dict[int, bool] = {}

    def keeps(count: int) -> bool:
        if count not in known:
            known[count] = keeps_tolerance(after(count), reserve_host_failures, multipliers, memo=memo)
        return known[count]

    return _last_kept(len(placed), keeps)


def _last_kept(most: int, keeps: Callable[[int], bool]) -> int:
    """The search of `sellable_count` over 0..most: a k that keeps with k + 1 breaking (or
    `most`), 0 when 0 breaks."""
    if not keeps(0):
        return 0
    if keeps(most):
        return most
    kept, broken = 0, most
    fewer = 1
    while most - fewer > kept:
        if keeps(most - fewer):
            kept = most - fewer
            break
        broken = most - fewer
        fewer *= 2
    while broken - kept > 1:
        middle = (kept + broken) // 2
        if keeps(middle):
            kept = middle
        else:
            broken = middle
    return kept


def keeps_tolerance(
    states: Sequence[HostState],
    reserve_host_failures: int,
    multipliers: Multipliers,
    *,
    memo: CandidateMemo | None = None,
) -> bool:
    """Whether the fleet tolerates `reserve_host_failures` hosts lost together: `fleet_tolerance`'s
    `tolerated` (with that bound) reaches it. Computed with the same function as
    `fleet_tolerance` (`tolerated_losses`), which needs the single evacuation of the host with
    the most allocated memory only: that one is computed, not every host's."""
    fleet = FleetIndex(states, memo if memo is not None else CandidateMemo())
    single = _SingleEvacuations(fleet, multipliers)
    return tolerated_losses(fleet, reserve_host_failures, multipliers, single) >= reserve_host_failures


class _SingleEvacuations(Mapping[str, EvacuationResult]):
    """Each host's evacuation (`evacuation_result`), computed when first read."""

    def __init__(self, fleet: FleetIndex, multipliers: Multipliers) -> None:
        self._fleet = fleet
        self._multipliers = multipliers
        self._found: dict[str, EvacuationResult] = {}

    def __getitem__(self, name: str) -> EvacuationResult:
        found = self._found.get(name)
        if found is None:
            found, _ = evacuation_result(self._fleet, self._fleet.index[name], self._multipliers)
            self._found[name] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._fleet.names)

    def __len__(self) -> int:
        return len(self._fleet.names)


class _States:
    """The fleet with the first k instances of the request placed: each host's state with its
    instances consumed (as the request consumed them) and among its guests (with the host's
    zone, as `domain_demand` gives a domain of a host in a zone), one state object per host and
    count of instances on it."""

    def __init__(
        self,
        states: Sequence[HostState],
        demand: Demand,
        placed: Sequence[str],
        multipliers: Multipliers,
        memo: CandidateMemo,
    ) -> None:
        self._states = states
        self._demand = demand
        self._placed = placed
        self._multipliers = multipliers
        self._memo = memo
        self._built: dict[tuple[str, int], HostState] = {}
        self._by_claims = _claims_decide(demand)

    def __call__(self, count: int) -> list[HostState]:
        counts: dict[str, int] = {}
        for name in self._placed[:count]:
            counts[name] = counts.get(name, 0) + 1
        if not self._by_claims:
            # the request's own states: its later instances consumed with the cells it refitted
            consumed = schedule(
                self._states, self._demand, count, multipliers=self._multipliers, memo=self._memo
            )
            if not consumed.placed:
                raise ValueError(f"expected {count} instances to fit, as the request placed them")
            return [self._with_guests(state, counts) for state in consumed.states]
        result = []
        for state in self._states:
            number = counts.get(state.name, 0)
            if number == 0:
                result.append(state)
                continue
            built = self._built.get((state.name, number))
            if built is None:
                consumed_state = consume_in_turn(state, (self._demand,) * number)
                built = self._built[state.name, number] = self._with_guests(consumed_state, counts)
            result.append(built)
        return result

    def _with_guests(self, state: HostState, counts: Mapping[str, int]) -> HostState:
        """The state with the instances placed on it (`counts`) among its guests, each named
        apart (its number on the host, then the host)."""
        sold = counts.get(state.name, 0)
        if sold == 0:
            return state
        guest = replace(self._demand, availability_zone=state.availability_zone)
        new = tuple(Guest(f"{SOLD_PREFIX}{index:06d}@{state.name}", guest) for index in range(sold))
        return replace(state, guests=(*state.guests, *new))


def _claims_decide(demand: Demand) -> bool:
    """Whether the claims alone decide where the demand's instances fit (`FleetIndex.needs`): it
    asks for no cells, devices nor vGPUs."""
    return not demand.within.asks and demand.request.get(Resource.VGPU, 0) <= 0


def request_hosts(
    states: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers,
    *,
    memo: CandidateMemo | None = None,
) -> tuple[str, ...]:
    """Where the instances of one request for as many instances of the demand as fit land, in
    order: `schedule`'s steps for a request of more instances than fit (its first k steps are a
    request of k's: each step depends on those before only). A demand that asks for no cells,
    devices nor vGPUs takes `_claims_request_hosts`, the same steps found faster; any other
    asks `schedule` itself, for twice as many instances until the request fails."""
    memo = memo if memo is not None else CandidateMemo()
    if _claims_decide(demand):
        return _claims_request_hosts(states, demand, multipliers, memo)
    count = FIRST_REQUEST
    while True:
        result = schedule(states, demand, count, multipliers=multipliers, memo=memo)
        if not result.placed:
            return tuple(step.host for step in result.steps)
        count *= 2


FloatArray = npt.NDArray[np.float64]


def _claims_request_hosts(
    states: Sequence[HostState], demand: Demand, multipliers: Multipliers, memo: CandidateMemo
) -> tuple[str, ...]:
    """`schedule`'s steps for a demand whose fit the claims alone decide, one instance at a time
    as `schedule` takes them, without weighing every host at every step.

    As in `schedule`: the candidates are the hosts the request filters pass (asked once); the
    instance filters (NUMA, PCI, no anti-affinity) pass every one of them, so every candidate is
    weighed at each step, normalized over all of them (a full one too), and the best whose claim
    succeeds (ties by name) takes the instance. Here the weighers' values live in arrays (index
    order is name order: `argmax` keeps the first of equal weights), the weights are computed
    with `weight_of`'s operations in its order (IEEE, the same bits), and only the chosen host's
    weight changes unless its values held a weigher's largest, which then is found again and
    every weight computed again. A host's claims, room left and values are those the
    evacuations keep (`ConsumedHost`: the integers of its claims, the values to the bit)."""
    fleet = FleetIndex(states, memo)
    request = FilterRequest.of(demand, memo=memo)
    candidates = [
        number
        for number, state in enumerate(fleet.states)
        if first_rejection(state, request, REQUEST_FILTERS) is None
    ]
    if not candidates:
        return ()
    key = fleet.key(demand)
    needs = fleet.needs(key, demand)
    amounts = fleet.amounts(key, demand)
    if needs is None:
        raise ValueError("expected a demand whose claims alone decide its fit")
    hosts = [ConsumedHost(number, fleet.rooms(number), fleet.room_left(number)) for number in candidates]
    for host in hosts:
        if not any(resource in host.left for resource, _ in needs):
            raise ValueError(f"{fleet.names[host.number]}: the demand asks for no class with a limit")
    values = np.array([fleet.clipped[number] for number in candidates], dtype=np.float64).reshape(-1, 3)
    columns: tuple[FloatArray, FloatArray, FloatArray] = (
        values[:, 0].copy(),
        values[:, 1].copy(),
        values[:, 2].copy(),
    )
    factors = (multipliers.ram, multipliers.cpu, multipliers.disk)
    alone = len(candidates) == 1  # one host weighs 0 (`weigh`)
    tops = [float(column.max()) for column in columns]
    room = np.ones(len(candidates), dtype=bool)
    weights = _weights(columns, tops, factors, room, alone=alone)
    with_room = len(candidates)
    placed: list[str] = []
    while with_room > 0:
        chosen = int(np.argmax(weights))
        host = hosts[chosen]
        host.add(demand, key, amounts)
        placed.append(fleet.names[host.number])
        clipped = host.clipped(fleet.level(host.number))
        renormalize = False
        for part, column in enumerate(columns):
            before = float(column[chosen])
            column[chosen] = clipped[part]
            if before == tops[part] and clipped[part] < before:
                tops[part] = float(column.max())
                renormalize = renormalize or tops[part] != before
        fits = all(need <= host.left.get(resource, need) for resource, need in needs)
        if not fits:
            room[chosen] = False
            with_room -= 1
        if renormalize:
            weights = _weights(columns, tops, factors, room, alone=alone)
        elif not fits:
            weights[chosen] = -np.inf
        elif not alone:
            weights[chosen] = weight_of(clipped, tops, multipliers)
    return tuple(placed)


def _weights(
    columns: tuple[FloatArray, FloatArray, FloatArray],
    tops: Sequence[float],
    factors: tuple[float, float, float],
    room: npt.NDArray[np.bool_],
    *,
    alone: bool,
) -> FloatArray:
    """Every candidate's weight, as `weight_of` computes it (0 for one host alone), -inf where
    its claim would fail."""
    total: FloatArray = np.zeros(len(room), dtype=np.float64)
    if not alone:
        for column, top, factor in zip(columns, tops, factors, strict=True):
            part = factor * (column / top) if top != 0.0 else factor * np.zeros(len(room), dtype=np.float64)
            total = total + part
    total[~room] = -np.inf
    return total
