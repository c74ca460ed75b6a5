"""A fleet's host states indexed for its evacuations (`FleetIndex`): per request, the hosts that
pass its filters, the hosts ranked by each weigher, the hosts sorted by weight for the
normalizations met again, and the states the evacuations built; shared by the evacuations of
every host of the fleet and updated host by host."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from virtcap.model.host_fit import Demand, WithinHost
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler.best_host import Ranking
from virtcap.model.scheduler.filters import (
    CandidateMemo,
    FilterRequest,
    RequestKey,
    Stage,
    first_rejection,
    request_key,
)
from virtcap.model.scheduler.fleet_refusals import HostRefusal, RequestRefusals
from virtcap.model.scheduler.host_states import (
    Guest,
    HostState,
    WeigherLevels,
    WeigherValues,
    consume_in_turn,
    evacuation_order,
    weigher_levels,
)
from virtcap.model.scheduler.weighers import Multipliers, clipped_values, weight_of

RequestIdentity = tuple[RequestKey, WithinHost, str | None]
RequestNumber = int
"""A request's number in its fleet (`FleetIndex.key`): the dictionaries of every step are keyed by
it, and a tuple of tuples is hashed again at every look-up."""
Normalization = tuple[RequestNumber, float, float, float]
"""A request and the weighers' largest values among the hosts that pass for it."""


KEPT_ORDERS = 512
"""Sorted orders a fleet keeps beyond those its last computation used (see `FleetIndex.prune`)."""
KEPT_STATES_PER_HOST = 4
"""The same for the states evacuations built, per host of the fleet."""


class FleetIndex:
    """The states of a fleet indexed by name (sorted: index order is name order) with, per
    request, the hosts whose candidate and filter tests pass as they are: shared by the
    evacuations of every host of the fleet, each of which changes only the hosts it consumes."""

    __slots__ = (
        "claims",
        "clipped",
        "demands",
        "free",
        "in_order",
        "index",
        "keys",
        "levels",
        "memo",
        "names",
        "need",
        "numbers",
        "order",
        "ordered",
        "orders",
        "passing",
        "position",
        "ranked",
        "refusals",
        "requests",
        "room",
        "states",
        "states_built",
        "touched",
        "touched_states",
    )

    def __init__(self, hosts: Sequence[HostState], memo: CandidateMemo) -> None:
        self.states = sorted(hosts, key=lambda state: state.name)
        positions = sorted(range(len(hosts)), key=lambda position: hosts[position].name)
        self.order = sorted(range(len(hosts)), key=lambda number: positions[number])
        """The fleet's indices in the order the hosts were given."""
        self.position = positions
        """Per index, where the host was given."""
        self.in_order = list(hosts)
        self.clipped = [clipped_values(state) for state in self.states]
        self.memo = memo
        self.names = tuple(state.name for state in self.states)
        self.index = {name: number for number, name in enumerate(self.names)}
        if len(self.index) != len(self.states):
            raise ValueError("expected each host once")
        self.passing: dict[RequestNumber, set[int]] = {}
        self.refusals: dict[RequestNumber, RequestRefusals] = {}
        """Per request a domain found no host for, the hosts that do not pass and why (see
        `refused`)."""
        self.demands: dict[RequestNumber, Demand] = {}
        self.ranked: dict[RequestNumber, Ranking] = {}
        self.levels: dict[int, WeigherLevels] = {}
        self.room: dict[int, dict[Resource, tuple[int, int]]] = {}
        self.free: dict[int, dict[Resource, int]] = {}
        self.need: dict[RequestNumber, tuple[tuple[Resource, int], ...] | None] = {}
        self.claims: dict[RequestNumber, tuple[tuple[Resource, int], ...]] = {}
        self.states_built: dict[tuple[int, tuple[RequestNumber, ...]], HostState] = {}
        self.ordered: dict[int, list[tuple[Guest, RequestNumber]]] = {}
        self.touched: set[Normalization] = set()
        self.touched_states: set[tuple[int, tuple[RequestNumber, ...]]] = set()
        """What the computation under way used (see `prune`)."""
        self.keys: dict[int, tuple[Demand, RequestNumber]] = {}
        """Per demand (by identity, the demand kept alive with it), its request's number."""
        self.numbers: dict[RequestIdentity, RequestNumber] = {}
        self.requests: list[RequestIdentity] = []
        self.orders: dict[Multipliers, dict[Normalization, list[tuple[float, int]] | None]] = {}
        """Per request, multipliers and largest values (see `sorted_by_weight`): the hosts that pass,
        best first, as (-weight, index); None once asked for and not sorted yet."""

    def orders_for(self, multipliers: Multipliers) -> dict[Normalization, list[tuple[float, int]] | None]:
        """The orders for these multipliers (see `sorted_by_weight`), fetched once per evacuation."""
        orders = self.orders.get(multipliers)
        if orders is None:
            orders = self.orders[multipliers] = {}
        return orders

    def sorted_by_weight(
        self,
        orders: dict[Normalization, list[tuple[float, int]] | None],
        multipliers: Multipliers,
        normalization: Normalization,
    ) -> list[tuple[float, int]] | None:
        """The hosts that pass for a request (as the fleet has them), as `weigh` orders them
        where the weighers' largest values are `tops` (a host the evacuation consumed can hold
        one), with their weights negated; None the first time a normalization is asked for.

        The evacuations of a fleet go through few normalizations (on the test-driver fleet of
        the benchmark, 459 for 50,000 domains), so a normalization met again is worth sorting
        once for all: each later step takes the first host of the order the evacuation has
        neither consumed nor lost. One met once is left to `threshold_best`."""
        self.touched.add(normalization)
        if normalization not in orders:
            orders[normalization] = None
            return None
        found = orders[normalization]
        if found is None:
            key, *tops = normalization
            clipped = self.clipped
            found = sorted(
                (-weight_of(clipped[number], tops, multipliers), number) for number in self.passing[key]
            )
            orders[normalization] = found
        return found

    def evacuation_order(self, failed: Sequence[int]) -> list[tuple[Guest, RequestNumber]]:
        """The domains of the failed hosts in `evacuation_order`, each with its request's number:
        kept for one failed host (an update of the fleet evacuates most hosts again)."""
        if len(failed) == 1:
            found = self.ordered.get(failed[0])
            if found is not None:
                return found
        guests = [guest for number in failed for guest in self.states[number].guests]
        found = [(guest, self.key(guest.demand)) for guest in evacuation_order(guests)]
        if len(failed) == 1:
            self.ordered[failed[0]] = found
        return found

    def given(self) -> list[HostState]:
        """The states in the order the hosts were given (a copy)."""
        return list(self.in_order)

    def key(self, demand: Demand) -> RequestNumber:
        found = self.keys.get(id(demand))
        if found is not None and found[0] is demand:
            return found[1]
        request = (request_key(demand.request), demand.within, demand.availability_zone)
        key = self.numbers.get(request)
        if key is None:
            key = self.numbers[request] = len(self.requests)
            self.requests.append(request)
        self.keys[id(demand)] = (demand, key)
        return key

    def level(self, number: int) -> WeigherLevels:
        found = self.levels.get(number)
        if found is None:
            found = self.levels[number] = weigher_levels(self.states[number])
        return found

    def rooms(self, number: int) -> dict[Resource, tuple[int, int]]:
        """Per class of the host with a limit, the limit in Placement's unit and what is used."""
        found = self.room.get(number)
        if found is None:
            found = self.room[number] = {
                resource: (limit // resource.placement_unit, capacity.used)
                for resource, capacity in self.states[number].capacity.resources.items()
                if (limit := capacity.limit) is not None
            }
        return found

    def room_left(self, number: int) -> dict[Resource, int]:
        """Per class of the host with a limit, what is free in Placement's unit
        (`placement_free`)."""
        found = self.free.get(number)
        if found is None:
            found = self.free[number] = {
                resource: limit - placement_units(resource, used)
                for resource, (limit, used) in self.rooms(number).items()
            }
        return found

    def amounts(self, key: RequestNumber, demand: Demand) -> tuple[tuple[Resource, int], ...]:
        """The classes a demand claims (its amounts above 0), per request: a request's mapping is
        slow to walk."""
        found = self.claims.get(key)
        if found is None:
            found = self.claims[key] = tuple(
                (resource, amount) for resource, amount in demand.request.items() if amount > 0
            )
        return found

    def needs(self, key: RequestNumber, demand: Demand) -> tuple[tuple[Resource, int], ...] | None:
        """What a demand asks of each class, in Placement's unit, where claims alone decide whether
        a host that passes as the fleet has it still passes once it took other demands: the
        demand asks for no cells, devices nor vGPUs. Claiming only lowers what is free, and the
        other tests of such a demand (up, no stale data, not in maintenance, the inventories'
        max_unit, min_unit and step_size) do not depend on the claims. None where they do not decide."""
        if key in self.need:
            return self.need[key]
        found: tuple[tuple[Resource, int], ...] | None = None
        if not demand.within.asks and demand.request.get(Resource.VGPU, 0) <= 0:
            found = tuple(
                (resource, placement_units(resource, amount))
                for resource, amount in demand.request.items()
                if amount > 0
            )
        self.need[key] = found
        return found

    def built(self, number: int, demands: Sequence[Demand], keys: tuple[RequestNumber, ...]) -> HostState:
        """The host's state once the demands (of these keys) are placed on it, in order: the
        evacuations of a fleet end with few different ones (on the benchmark's fleet, 1,949
        for 24,330 hosts consumed), built once each. An equal demand leaves an equal state."""
        self.touched_states.add((number, keys))
        found = self.states_built.get((number, keys))
        if found is None:
            found = self.states_built[number, keys] = consume_in_turn(self.states[number], demands)
        return found

    def forget_orders(self) -> None:
        """Forgets the rankings and weight orders kept (found again when needed): before many
        hosts are replaced, each of which would bring every one of them up to date."""
        self.orders = {}
        self.ranked = {}

    def prune(self) -> None:
        """Once a computation is done: beyond a bound, what it did not use is forgotten, so that a
        fleet updated again and again (the service keeps the last result) does not keep every
        order and state it ever met (an order of 1,000 hosts is some 90 kB). Forgotten, one is
        found again when needed."""
        for multipliers, orders in self.orders.items():
            if sum(1 for order in orders.values() if order is not None) > KEPT_ORDERS:
                self.orders[multipliers] = {
                    normalization: order
                    for normalization, order in orders.items()
                    if normalization in self.touched
                }
        if len(self.states_built) > KEPT_STATES_PER_HOST * len(self.states):
            self.states_built = {
                built: state for built, state in self.states_built.items() if built in self.touched_states
            }
        self.touched = set()
        self.touched_states = set()

    def passes(self, state: HostState, demand: Demand, key: RequestNumber) -> bool:
        """The filters of a request of one instance, on the host as it is."""
        return first_rejection(state, self._filter_request(demand, key)) is None

    def rejection(self, state: HostState, demand: Demand, key: RequestNumber) -> HostRefusal | None:
        """Why the host refuses one instance of the request as it is (None: it `passes`), as
        `schedule` finds it at its first step, and whether at the filters of each instance (NUMA,
        PCI) rather than at those of the request (ComputeFilter, Placement...)."""
        found = first_rejection(state, self._filter_request(demand, key))
        if found is None:
            return None
        host_filter, rejection = found
        return rejection, host_filter.stage is Stage.INSTANCE

    def _filter_request(self, demand: Demand, key: RequestNumber) -> FilterRequest:
        """One instance of the demand alone: no host ignored or forced, no anti-affinity."""
        return FilterRequest(demand, self.requests[key][0], self.memo)

    def refused(self, key: RequestNumber, demand: Demand) -> RequestRefusals:
        """The hosts that do not pass for the request as the fleet is, with their rejections:
        found once per request, for the evacuations' domains that find no host (`UnplacedRejections`)."""
        found = self.refusals.get(key)
        if found is None:
            passing = self.passing_hosts(key, demand)
            rejections: dict[int, HostRefusal] = {}
            for number, state in enumerate(self.states):
                if number not in passing:
                    rejection = self.rejection(state, demand, key)
                    if rejection is None:
                        raise ValueError(f"{state.name}: passes and does not pass")
                    rejections[number] = rejection
            found = self.refusals[key] = RequestRefusals.of(rejections)
        return found

    def passing_hosts(self, key: RequestNumber, demand: Demand) -> set[int]:
        """The hosts that pass for the demand, as the fleet is."""
        found = self.passing.get(key)
        if found is None:
            found = {number for number, state in enumerate(self.states) if self.passes(state, demand, key)}
            self.passing[key] = found
            self.demands[key] = demand
        return found

    def ranking(self, key: RequestNumber) -> Ranking:
        """The hosts that pass for the request (`passing_hosts` first), per weigher by their
        clipped value, largest first (ties by name)."""
        found = self.ranked.get(key)
        if found is None:
            hosts, clipped = self.passing[key], self.clipped
            ram, cpu, disk = (
                sorted(hosts, key=lambda number: (-clipped[number][part], number)) for part in range(3)
            )
            found = self.ranked[key] = (ram, cpu, disk)
        return found

    def copy(self) -> FleetIndex:
        copied = FleetIndex.__new__(FleetIndex)
        copied.states = list(self.states)
        copied.clipped = list(self.clipped)
        copied.memo = self.memo
        copied.names = self.names
        copied.index = self.index
        copied.order = self.order
        copied.position = self.position
        copied.in_order = list(self.in_order)
        copied.free = dict(self.free)
        copied.passing = {key: set(hosts) for key, hosts in self.passing.items()}
        copied.refusals = dict(self.refusals)
        copied.demands = dict(self.demands)
        copied.ranked = dict(self.ranked)
        copied.levels = dict(self.levels)
        copied.room = dict(self.room)
        copied.need = self.need
        copied.claims = self.claims
        copied.states_built = dict(self.states_built)
        copied.ordered = dict(self.ordered)
        copied.touched = set()
        copied.touched_states = set()
        copied.keys = self.keys
        copied.numbers = self.numbers
        copied.requests = self.requests
        copied.orders = {multipliers: dict(orders) for multipliers, orders in self.orders.items()}
        return copied

    def _passes_replaced(
        self, state: HostState, key: RequestNumber, *, passed: bool, claimed_more: bool
    ) -> bool:
        """Whether the host, now in this state, passes for the request (`replace`)."""
        demand = self.demands[key]
        needs = self.needs(key, demand) if claimed_more else None
        if needs is None:
            return self.passes(state, demand, key)
        left = self.room_left(self.index[state.name])
        return passed and all(need <= left.get(resource, need) for resource, need in needs)

    def replace(self, state: HostState, *, claimed_more: bool = False) -> None:
        """One host's state changes: its values, and whether it passes for each request.
        `claimed_more`: the new state is the old one with more claims of demands the claims
        alone decide, nothing else changed: for a request the claims decide too, the host passes
        only if it passed and its room still holds the request (`needs`: the other tests do not
        read the claims), without the filters run again."""
        number = self.index[state.name]
        for guest in self.states[number].guests:
            # its old domains are not asked about again (the dictionary is shared with the fleet
            # copied, for which this is only a look-up to do again): the service would otherwise
            # keep every domain it ever saw
            self.keys.pop(id(guest.demand), None)
        self.states[number] = state
        old = self.clipped[number]
        values = self.clipped[number] = clipped_values(state)
        self.levels.pop(number, None)
        self.room.pop(number, None)
        self.free.pop(number, None)
        self.in_order[self.position[number]] = state
        self.ordered.pop(number, None)
        self.states_built = {built: kept for built, kept in self.states_built.items() if built[0] != number}
        ranked = self.ranked
        self.ranked = {}
        refusals = self.refusals
        passed_keys: set[RequestNumber] = set()
        """The requests the host passed for before: those whose rankings and orders hold it."""
        for key, hosts in self.passing.items():
            if number in hosts:
                passed_keys.add(key)
            refused = refusals.get(key)
            if refused is not None:
                # a new object: the unplaced domains of the results before keep the old one
                rejection = self.rejection(state, self.demands[key], key)
                refusals[key] = refused.with_host(number, rejection)
                passes = rejection is None
            else:
                passes = self._passes_replaced(state, key, passed=number in hosts, claimed_more=claimed_more)
            if passes:
                hosts.add(number)
            else:
                hosts.discard(number)
            rankings = ranked.get(key)
            if rankings is not None:
                self.ranked[key] = self._reranked(
                    rankings, number, values, passed=key in passed_keys, passes=passes
                )
        self._reordered(number, old, values, passed_keys)

    def _reranked(
        self, rankings: Ranking, number: int, values: WeigherValues, *, passed: bool, passes: bool
    ) -> Ranking:
        """A request's rankings with the host in its new state: the other hosts keep their order,
        the host leaves its place and, if it passes, goes where its new value puts it (the lists
        may be shared with the fleet copied: new ones)."""
        if not passed and not passes:
            return rankings  # it was not there, and is not
        moved = []
        clipped = self.clipped
        for part, ranking in enumerate(rankings):
            others = [other for other in ranking if other != number]
            if passes:
                where = bisect.bisect_left(
                    others,
                    (-values[part], number),
                    key=lambda other, part=part: (-clipped[other][part], other),  # type: ignore[misc]
                )
                others.insert(where, number)
            moved.append(others)
        return (moved[0], moved[1], moved[2])

    def _reordered(
        self, number: int, old: WeigherValues, values: WeigherValues, passed: set[RequestNumber]
    ) -> None:
        """The orders of `sorted_by_weight` with the host in its new state (it held the `old`
        values, and was in the orders of the requests it `passed` for): the others keep their
        weights and order, the host its new place; it is found by its old weight (the same
        computation gives the same number)."""
        for multipliers, orders in self.orders.items():
            for normalization, order in orders.items():
                if order is None:
                    continue
                key, *tops = normalization
                passes = number in self.passing[key]
                if key not in passed:
                    # not in the order: it stays out, or comes in where its new weight puts it
                    if passes:
                        kept = list(order)
                        bisect.insort(kept, (-weight_of(values, tops, multipliers), number))
                        orders[normalization] = kept
                    continue
                entry = (-weight_of(old, tops, multipliers), number)
                where = bisect.bisect_left(order, entry)
                if where < len(order) and order[where] == entry:
                    kept = order[:where] + order[where + 1 :]
                else:  # not found by its old weight: looked for by its index
                    kept = [other for other in order if other[1] != number]
                if passes:
                    bisect.insort(kept, (-weight_of(values, tops, multipliers), number))
                orders[normalization] = kept
