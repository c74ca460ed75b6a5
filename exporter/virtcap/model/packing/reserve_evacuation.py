"""The evacuations that decide whether a fleet with instances sold keeps its failover reserve
where `_ReserveWalk`'s certificate (model/packing/sellable.py) cannot show it: the fleet with the
first instances of a request placed (`SoldStates`), and the evacuation of lost hosts run up to
the first sold instance, the rest shown placed by their rooms (`evacuation_places_all`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Literal, NamedTuple

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler.claims_request import claims_decide
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.evacuations import StepTrace, evacuate
from virtcap.model.scheduler.failure_tolerance import steps_that_stand
from virtcap.model.scheduler.filters import CandidateMemo
from virtcap.model.scheduler.fleet_index import FleetIndex, RequestNumber
from virtcap.model.scheduler.host_states import Guest, HostState, consume_in_turn
from virtcap.model.scheduler.request import schedule
from virtcap.model.scheduler.weighers import Multipliers

SOLD_PREFIX = "sellable-"
"""The names of the instances a computation places (guests of their hosts, so that a host's
evacuation re-homes them too)."""


class Evacuated(NamedTuple):
    """What `evacuation_places_all` found: whether every domain was placed ("rest": the rest
    shown placed by `rest_margin`, with its `margin`), and the evacuation's steps up to the
    first sold instance."""

    found: Literal["rest"] | bool
    prefix: list[StepTrace]
    margin: int | None = None


def evacuation_places_all(
    fleet: FleetIndex, failed: Sequence[int], multipliers: Multipliers, prefix: Sequence[StepTrace]
) -> Evacuated:
    """Whether the evacuation of the failed hosts together (`evacuate`, as `tolerated_losses`
    runs it) places every domain, and its steps up to the first sold instance (the next count's
    `prefix`, where they stand: given, not searched again).

    The instances sold on them come last but for smaller domains and those of their size named
    after them (the order is largest first, then by name), and near the end of a small flavor
    they are most of the evacuation. So the domains before the first of them are
    evacuated (the same steps as the whole evacuation's first ones), and from the state they
    leave, `rest_margin` shows the others placed whatever the weighers choose ("rest"); where
    it cannot, the whole evacuation is run, its first steps given (not searched again)."""
    order = fleet.evacuation_order(failed)
    first_sold = next(
        (position for position, (guest, _) in enumerate(order) if guest.name.startswith(SOLD_PREFIX)),
        len(order),
    )
    if first_sold == len(order):
        _, unplaced, _, traces = evacuate(fleet, failed, multipliers, prefix)
        return Evacuated(not unplaced, traces or [])
    _, unplaced, moved, traces = evacuate(fleet, failed, multipliers, prefix, domains=first_sold)
    if unplaced:
        return Evacuated(False, [])
    traced = traces or []
    margin = rest_margin(fleet, order[first_sold:], set(failed), moved)
    if margin is not None:
        return Evacuated("rest", traced, margin)
    return Evacuated(not evacuate(fleet, failed, multipliers, traced)[1], traced)


def decided_by_evacuations(
    fleet: FleetIndex,
    top: Sequence[int],
    prefixes: Mapping[tuple[int, ...], Sequence[StepTrace]],
    multipliers: Multipliers,
    reserve: int,
) -> tuple[bool, Literal["rest", "evacuation"], int | None, dict[tuple[int, ...], list[StepTrace]]]:
    """Whether the evacuations of the top hosts, one more at a time up to the reserve, place
    every domain (`evacuation_places_all`, each from its `prefixes`), how ("rest" where every
    one showed the rest placed by their rooms), the least of their margins then, and their
    steps up to the first sold instance."""
    by: Literal["rest", "evacuation"] = "rest"
    margin: int | None = None
    evacuated: dict[tuple[int, ...], list[StepTrace]] = {}
    for lost in range(1, reserve + 1):
        failed = tuple(top[:lost])
        found = evacuation_places_all(fleet, failed, multipliers, prefixes.get(failed, ()))
        evacuated[failed] = found.prefix
        if found.margin is not None:
            margin = found.margin if margin is None else min(margin, found.margin)
        if found.found != "rest":
            by = "evacuation"
        if found.found is False:
            return False, by, None, evacuated
    return True, by, margin if by == "rest" else None, evacuated


def replaced_hosts(
    fleet: FleetIndex,
    states: Mapping[int, HostState],
    prefixes: Mapping[tuple[int, ...], Sequence[StepTrace]],
    multipliers: Multipliers,
    *,
    claimed_more: Collection[int],
) -> dict[tuple[int, ...], list[StepTrace]]:
    """The fleet with these hosts (indices) in new states (`claimed_more`: those that only took
    more instances of demands the claims decide, see `FleetIndex.replace`), and the steps of the
    evacuations up to the first sold instance (`prefixes`, per set of lost hosts) that still
    stand (`steps_that_stand`: where one host changed, the usual case from one count to the
    next; none where more did)."""
    changed = list(states)
    passed_before: dict[RequestNumber, tuple[int, ...]] = {}
    if len(changed) == 1:
        passed_before = {
            key: (changed[0],) if changed[0] in hosts else () for key, hosts in fleet.passing.items()
        }
    for number, state in states.items():
        fleet.replace(state, claimed_more=number in claimed_more)
    if len(changed) != 1:
        return {}
    return {
        failed: steps_that_stand(fleet, passed_before, changed[0], trace, multipliers)
        for failed, trace in prefixes.items()
        if changed[0] not in failed
    }


def rest_margin(
    fleet: FleetIndex,
    rest: Sequence[tuple[Guest, RequestNumber]],
    gone: set[int],
    moved: Mapping[int, ConsumedHost],
) -> int | None:
    """Whether the domains `rest`, evacuated in this order from the state an evacuation left
    (the hosts it `moved` as they are now, the others as the fleet has them, the `gone` ones
    lost), all find a host whatever the weighers choose, and by how much (None: not shown).
    Per request, its last domain finds one
    (and so do the earlier ones, with fewer domains before them) when:

    - more hosts pass for it than there are domains before it (the certificate of `_ReserveWalk`:
      one of them took none of those and passes still), or
    - the request is one the claims alone decide (`FleetIndex.needs`), and the domains before it
      cannot close every host that passes. In the request's own unit, per host, the slots it has
      (`_slots`: how many of the request fit its room) and per domain the most slots it can take
      from any host (`_slots_taken`: its claims in Placement's unit, rounded up, in each class
      the request needs); a host stops passing only once the domains placed on it took all its
      slots, each domain on one host. So however they are shared out, they close at most as
      many hosts as the smallest slot counts add up to within what they take, and at most one
      per domain. For a run of one flavor's instances (what the sold ones are) this is exact:
      they all fit when the slots outnumber those before the last.

    The margin: the least, over the requests, of how many more hosts pass than the first test
    needs, or where it fails, half as many more than the domains can close (another host that
    is not lost nor moved, in any state, changes the first by at most 1 and the second by at
    most 2: it passes or not, its slots are one of those sorted). So a fleet that differs from
    this one in at most that many such hosts shows the rest placed too
    (model/packing/sellable_update.py)."""
    lasts: dict[RequestNumber, int] = {}
    demands: dict[RequestNumber, Demand] = {}
    ahead: dict[RequestNumber, dict[RequestNumber, int]] = {}
    """Per request, how many domains of each request come before its last one."""
    seen: dict[RequestNumber, int] = {}
    for position, (guest, key) in enumerate(rest):
        lasts[key] = position
        demands.setdefault(key, guest.demand)
        ahead[key] = dict(seen)
        seen[key] = seen.get(key, 0) + 1
    least: int | None = None
    for key, last in lasts.items():
        demand = demands[key]
        passing = [
            number
            for number in fleet.passing_hosts(key, demand)
            if number not in gone and (number not in moved or moved[number].passes(fleet, demand, key))
        ]
        passing.extend(
            number
            for number, host in moved.items()
            if number not in fleet.passing[key] and host.passes(fleet, demand, key)
        )
        if last < len(passing):
            margin = len(passing) - 1 - last
            least = margin if least is None else min(least, margin)
            continue
        needs = fleet.needs(key, demand)
        if needs is None:
            return None
        taken = sum(
            count * _slots_taken(fleet.amounts(other, demands[other]), needs)
            for other, count in ahead[key].items()
        )
        slots = sorted(
            _slots(moved[number].left if number in moved else fleet.room_left(number), needs, last)
            for number in passing
        )
        closable = 0
        for slot in slots:
            taken -= slot
            if taken < 0 or closable == last:
                break
            closable += 1
        if closable >= len(passing):
            return None
        margin = (len(passing) - 1 - closable) // 2
        least = margin if least is None else min(least, margin)
    return least if least is not None else len(fleet.states)


def _slots(left: Mapping[Resource, int], needs: Sequence[tuple[Resource, int]], most: int) -> int:
    """How many instances of a request that `needs` these (in Placement's unit) a host with
    `left` free (per class with a limit) takes, counting no further than `most` + 1."""
    slots = most + 1
    for resource, need in needs:
        room = left.get(resource)
        if room is not None:
            slots = min(slots, max(room // need, 0))
    return slots


def _slots_taken(amounts: Sequence[tuple[Resource, int]], needs: Sequence[tuple[Resource, int]]) -> int:
    """The most slots (`_slots`) of a request that `needs` these one instance of a demand that
    claims `amounts` takes from a host: its claims lower what is free by at most their amounts
    rounded up (Placement's unit), so a host's slots by at most that divided by the need,
    rounded up, in the class where that is most."""
    needed = dict(needs)
    taken = 0
    for resource, amount in amounts:
        need = needed.get(resource)
        if need is not None:
            taken = max(taken, -(-placement_units(resource, amount) // need))
    return taken


def allocated_memory(state: HostState) -> int:
    memory = state.capacity.resources.get(Resource.MEMORY)
    return memory.used if memory is not None else 0


class SoldStates:
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
        self._consumed: dict[str, tuple[int, HostState]] = {}
        """Per host, the last state `consumed` built, with its instances."""
        self._guests: dict[str, list[Guest]] = {}
        """Per host, the instances as its guests, in order (see `_with_guests`)."""
        self._zoned: dict[str | None, Demand] = {}
        self.by_claims = claims_decide(demand)
        self.most = len(placed)

    def __call__(self, count: int) -> list[HostState]:
        counts: dict[str, int] = {}
        for name in self._placed[:count]:
            counts[name] = counts.get(name, 0) + 1
        if not self.by_claims:
            # the request's own states: its later instances consumed with the cells it refitted
            consumed = schedule(
                self._states, self._demand, count, multipliers=self._multipliers, memo=self._memo
            )
            if not consumed.placed:
                raise ValueError(f"expected {count} instances to fit, as the request placed them")
            return [self._with_guests(state, counts) for state in consumed.states]
        return [self.host(state, counts.get(state.name, 0)) for state in self._states]

    def host(self, state: HostState, number: int) -> HostState:
        """A demand the claims decide: the host's state with `number` instances placed on it."""
        if number == 0:
            return state
        built = self._built.get((state.name, number))
        if built is None:
            built = self._built[state.name, number] = self._with_guests(
                self.consumed(state, number), {state.name: number}
            )
        return built

    def consumed(self, state: HostState, number: int) -> HostState:
        """The host's state with `number` instances consumed (not yet among its guests): from the
        most consumed so far that is not more, one instance at a time being the same state
        (`consume_in_turn`)."""
        last = self._consumed.get(state.name)
        if last is not None and last[0] <= number:
            start, consumed = last
        else:
            start, consumed = 0, state
        if number > start:
            consumed = consume_in_turn(consumed, (self._demand,) * (number - start))
        self._consumed[state.name] = number, consumed
        return consumed

    def _with_guests(self, state: HostState, counts: Mapping[str, int]) -> HostState:
        """The state with the instances placed on it (`counts`) among its guests, each named
        apart (its number on the host, then the host): made once per host and number, with one
        demand per zone (a fleet index knows a demand by identity first)."""
        sold = counts.get(state.name, 0)
        if sold == 0:
            return state
        made = self._guests.get(state.name)
        if made is None:
            made = self._guests[state.name] = []
        if len(made) < sold:
            zone = state.availability_zone
            guest = self._zoned.get(zone)
            if guest is None:
                guest = self._zoned[zone] = replace(self._demand, availability_zone=zone)
            made.extend(
                Guest(f"{SOLD_PREFIX}{index:06d}@{state.name}", guest) for index in range(len(made), sold)
            )
        return replace(state, guests=(*state.guests, *made[:sold]))
