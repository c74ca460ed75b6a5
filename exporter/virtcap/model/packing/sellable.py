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

import bisect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Literal, NamedTuple

from virtcap.model.host_fit import Demand
from virtcap.model.packing.reserve_evacuation import (
    SOLD_PREFIX,
    SoldStates,
    allocated_memory,
    decided_by_evacuations,
    replaced_hosts,
)
from virtcap.model.packing.sellable_update import DecisionLog, KeptDecisions, updated_count
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler.claims_replay import ClaimsTrace, Placements
from virtcap.model.scheduler.claims_request import claims_decide
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.evacuations import EvacuationResult, StepTrace, evacuation_result
from virtcap.model.scheduler.failure_tolerance import tolerated_losses
from virtcap.model.scheduler.filters import CandidateMemo
from virtcap.model.scheduler.fleet_index import FleetIndex, RequestNumber
from virtcap.model.scheduler.host_states import Guest, HostState, evacuation_order
from virtcap.model.scheduler.request import request_hosts, request_trace
from virtcap.model.scheduler.weighers import Multipliers


def sellable_instances(
    states: Sequence[HostState],
    flavors: Mapping[str, Demand],
    multipliers: Multipliers,
    reserve_host_failures: int,
    *,
    placements: Placements | None = None,
    kept: KeptDecisions | None = None,
) -> Mapping[str, int]:
    """Per flavor, its sellable instances on the fleet (`sellable_count`, each flavor alone)."""
    memo = CandidateMemo()
    return {
        flavor: sellable_count(
            states, demand, multipliers, reserve_host_failures, memo=memo, placements=placements, kept=kept
        )
        for flavor, demand in flavors.items()
    }


def sellable_by_zone(
    states: Sequence[HostState],
    flavors: Mapping[str, Demand],
    multipliers: Multipliers,
    reserve_host_failures: int,
    *,
    placements: Placements | None = None,
    kept: KeptDecisions | None = None,
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
                members,
                in_zone,
                multipliers,
                reserve_host_failures,
                memo=memo,
                placements=placements,
                kept=kept,
            )
    return found


def sellable_count(
    states: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers,
    reserve_host_failures: int,
    *,
    memo: CandidateMemo | None = None,
    placements: Placements | None = None,
    kept: KeptDecisions | None = None,
) -> int:
    """The most instances of the demand that can be placed one by one (`request_hosts`: the
    steps of one request for as many as fit, in order, followed from the last request on the
    same hosts kept in `placements`, if given) such that afterwards the fleet still
    tolerates the reserve: the largest k such that for every count up to k, the fleet with that
    many placed keeps it (`keeps_tolerance`); every instance that fits when all of them keep
    it, 0 when the fleet does not keep it as it is or the reserve is larger than the fleet.
    Reserve 0: every instance that fits.

    Keeping the reserve is not monotone in the count (the greedy scheduler's evacuation can
    succeed with more instances placed and fail with fewer), so every count is decided, in
    increasing order, stopping at the first that breaks it (`reserve_decisions`). With
    `placements` and `kept` (the decisions of the last computations), most of them are read
    from the last computation on the hosts the request was followed from
    (model/packing/sellable_update.py), and the decisions of this one kept for the next."""
    if reserve_host_failures < 0:
        raise ValueError(f"expected a reserve of at least 0 host failures, got {reserve_host_failures}")
    memo = memo if memo is not None else CandidateMemo()
    if reserve_host_failures > len(states):
        # `tolerated` counts hosts lost among the fleet's: never more than there are
        return 0
    if reserve_host_failures == 0:
        return len(request_hosts(states, demand, multipliers, memo=memo, placements=placements))
    trace: ClaimsTrace | None = None
    log: DecisionLog | None = None
    if kept is not None and placements is not None and claims_decide(demand):
        trace = request_trace(states, demand, multipliers, memo=memo, placements=placements)
        record = kept.find(trace, reserve_host_failures)
        if record is not None:
            found = updated_count(record, trace, demand, multipliers, memo)
            if found is not None:
                kept.keep(found[1])
                kept.updated += 1
                return found[0]
        log = DecisionLog(trace, reserve_host_failures)
    last = 0
    decisions = reserve_decisions(
        states,
        demand,
        multipliers,
        reserve_host_failures,
        memo=memo,
        placements=placements,
        trace=trace,
        log=log,
    )
    for decision in decisions:
        if not decision.kept:
            last = max(decision.instances - 1, 0)
            break
        last = decision.instances
    if kept is not None and log is not None:
        kept.keep(log.record())
    return last


class Decision(NamedTuple):
    """Whether the fleet with so many `instances` placed keeps the reserve, and how that was
    found (`reserve_decisions`)."""

    instances: int
    kept: bool
    by: Literal["certificate", "slack", "rest", "evacuation"]


def reserve_decisions(
    states: Sequence[HostState],
    demand: Demand,
    multipliers: Multipliers,
    reserve_host_failures: int,
    *,
    memo: CandidateMemo | None = None,
    skip_ahead: bool = True,
    placements: Placements | None = None,
    trace: ClaimsTrace | None = None,
    log: DecisionLog | None = None,
) -> Iterator[Decision]:
    """Each count of the request's instances from 0 (`sellable_count`'s placements), whether
    the fleet with that many placed keeps a reserve of at least one host, up to the first that
    does not (or every instance that fits), and how it was found:

    - "certificate": `_ReserveWalk`'s, evaluated at this count (enough hosts pass for each domain
      an evacuation would move, so that it cannot fail);
    - "slack": a count after one the certificate showed, within its `_ReserveWalk.slack` (the
      certificate holds there too, without being evaluated; `skip_ahead=False` evaluates it at
      every count, for the tests);
    - "rest": the evacuations run up to the first sold instance, the rest shown placed
      (`evacuation_places_all`);
    - "evacuation": the evacuations run to the end (exact: this is where a count can break the
      reserve).

    `trace`: the request's, where it was already made (`request_trace`); `log`: records every
    decision for the next computation."""
    if not 0 < reserve_host_failures <= len(states):
        raise ValueError(
            f"expected a reserve of 1 to {len(states)} host failures, got {reserve_host_failures}"
        )
    memo = memo if memo is not None else CandidateMemo()
    if trace is not None:
        placed: Sequence[str] = [trace.states[number].name for number in trace.hosts]
    else:
        placed = request_hosts(states, demand, multipliers, memo=memo, placements=placements)
    after = SoldStates(states, demand, placed, multipliers, memo)
    walk = _ReserveWalk(
        states, demand, reserve_host_failures, memo, None if after.by_claims else after, placed=placed
    )
    fleet: FleetIndex | None = None
    known: list[int] = []
    prefixes: dict[tuple[int, ...], list[StepTrace]] = {}
    """Per set of lost hosts, its last evacuation's steps up to the first sold instance, that
    stand on `fleet` as it is (`evacuation_places_all`)."""
    certain = 0
    """The counts after this one the certificate shows keeping the reserve (`_ReserveWalk.slack`)."""
    for count in range(len(placed) + 1):
        if count > 0:
            walk.place(placed[count - 1])
        if certain > 0 and not walk.top_moved:
            certain -= 1
            if log is not None:
                log.slack(count)
            yield Decision(count, True, "slack")
            continue
        slack = walk.slack()
        if slack is not None:
            certain = slack if skip_ahead else 0
            if log is not None:
                log.certificate(count, slack, walk.identity())
            yield Decision(count, True, "certificate")
            continue
        certain = 0
        if fleet is None or not after.by_claims:
            fleet, known = FleetIndex(after(count), memo), list(walk.counts)
            prefixes = {}
        else:
            prefixes = _brought_up_to_date(
                fleet, after, walk, known=known, prefixes=prefixes, multipliers=multipliers
            )
        kept, by, margin, evacuated = decided_by_evacuations(
            fleet, walk.top, prefixes, multipliers, reserve_host_failures
        )
        prefixes = evacuated
        fleet.prune()
        if log is not None:
            log.evacuations(
                count,
                kept=kept,
                margin=margin,
                prefixes=evacuated,
                top=walk.identity(),
                fleet=fleet,
                known=known,
            )
        yield Decision(count, kept, by)
        if not kept:
            return


def _brought_up_to_date(
    fleet: FleetIndex,
    after: SoldStates,
    walk: _ReserveWalk,
    *,
    known: list[int],
    prefixes: Mapping[tuple[int, ...], list[StepTrace]],
    multipliers: Multipliers,
) -> dict[tuple[int, ...], list[StepTrace]]:
    """The fleet of the last count decided by the evacuations, with the hosts that took instances
    since (`known`: their counts in it), and the steps of the last evacuations that still stand
    (`steps_that_stand`: where one host changed, the usual case from one count to the next; none
    where more did)."""
    changed = [number for number, now in enumerate(walk.counts) if now != known[number]]
    for number in changed:
        known[number] = walk.counts[number]
    # more instances of a demand the claims decide: nothing else of the host changed
    states = {number: after.host(walk.fleet.states[number], walk.counts[number]) for number in changed}
    return replaced_hosts(fleet, states, prefixes, multipliers, claimed_more=set(changed))


class _ReserveWalk:
    """The fleet as the instances of the request are placed one by one, followed for a cheap
    certificate that it keeps the reserve (`slack`).

    The certificate: an evacuation (of the j <= R hosts with the most allocated memory, their
    domains largest first, as `tolerated_losses` evacuates them) places a domain whenever some
    host passes its filters as the evacuation left it, and a host the evacuation has placed
    nothing on is as the fleet has it. Before the i-th domain at most i - 1 hosts took one, so
    when more than i - 1 hosts (the lost ones left out) pass for the i-th domain's request in
    the fleet, one of them is untouched and takes it: whatever the weighers choose, the
    evacuation places every domain when, for each request, the position of its last domain in
    the evacuation order is at most the hosts that pass for it. Where the certificate does not
    hold, the evacuations decide (the caller's `evacuation_places_all`).

    The hosts that pass for each request met among the evacuated domains are counted once, then
    kept up to date as each instance lands: a demand the claims alone decide is followed from its
    claims (`ConsumedHost`, the test the evacuations use; for a request the claims decide too, a
    host passes until the count where its room runs out, found once per host and request:
    `_drop_at`); for another, a host that took instances is tested in the fleet with every
    instance placed (`final`): it passes for fewer requests than with only some of them
    (consuming never lets a request pass that did not), so the certificate stays sound, only
    weaker.

    The certificate is not evaluated at every count: see `slack`."""

    def __init__(
        self,
        states: Sequence[HostState],
        demand: Demand,
        reserve: int,
        memo: CandidateMemo,
        final: SoldStates | None,
        *,
        placed: Sequence[str],
    ) -> None:
        self.fleet = FleetIndex(states, memo)
        self.demand = demand
        self.reserve = reserve
        self.final = FleetIndex(final(final.most), memo) if final is not None else None
        fleet = self.fleet
        self.memory = [allocated_memory(state) for state in fleet.states]
        self.sold_memory = demand.request.get(Resource.MEMORY, 0)
        self.sold_key = fleet.key(demand)
        self.counts = [0] * len(fleet.states)
        self.most = [0] * len(fleet.states)
        """Per host, the instances the whole request places on it."""
        for name in placed:
            self.most[fleet.index[name]] += 1
        self.instances = len(placed)
        self.consumed: dict[int, ConsumedHost] = {}
        self.sold: dict[str | None, Demand] = {}
        """The instances as guests of a host of each zone (see `SoldStates`), one demand per zone."""
        self.requests: dict[RequestNumber, Demand] = {}
        self.passing: dict[RequestNumber, set[int]] = {}
        """Per request met among the evacuated domains, the hosts that pass for it now."""
        self.drops: dict[int, dict[int, list[RequestNumber]]] = {}
        """Per host and count of instances on it, the requests it stops passing for there."""
        self.touched: set[int] = set()
        """The hosts that took instances since the certificate was last evaluated."""
        self.top_moved = True
        """Whether an instance landed on one of the top hosts, or they changed, since then."""
        self.top = sorted(range(len(fleet.states)), key=self._largest)[:reserve]
        self._rooms = _RoomsByClass(fleet)
        self.orders: dict[
            tuple[tuple[int, int], ...],
            tuple[dict[RequestNumber, int], dict[RequestNumber, dict[Resource, int]]],
        ] = {}

    def identity(self) -> tuple[tuple[int, int], ...]:
        """The top hosts, with the instances each has (what the evacuations of the lost hosts
        depend on, the rest of the fleet being given)."""
        return tuple((number, self.counts[number]) for number in self.top)

    def _largest(self, number: int) -> tuple[int, str]:
        """`tolerated_losses`'s order: the most allocated memory first, ties by name."""
        return -self.memory[number], self.fleet.names[number]

    def place(self, name: str) -> None:
        """The next instance lands on the host: what the certificate reads is brought up to date
        when it is next evaluated, but for the requests a host stops passing for at this count
        (`drops`) and the top hosts."""
        fleet = self.fleet
        number = fleet.index[name]
        count = self.counts[number] = self.counts[number] + 1
        self.memory[number] += self.sold_memory
        self.touched.add(number)
        if self.final is None:
            host = self.consumed.get(number)
            if host is None:
                host = self.consumed[number] = ConsumedHost(
                    number, fleet.rooms(number), fleet.room_left(number)
                )
            host.add(self.demand, self.sold_key, fleet.amounts(self.sold_key, self.demand))
        if count == 1:
            for key, hosts in self.passing.items():
                self._follow(number, key, hosts)
        drops = self.drops.get(number)
        if drops is not None:
            for key in drops.pop(count, ()):
                self.passing[key].discard(number)
        if number in self.top:
            self.top.sort(key=self._largest)
            self.top_moved = True
        elif self._largest(number) < self._largest(self.top[-1]):
            self.top[-1] = number
            self.top.sort(key=self._largest)
            self.top_moved = True

    def _follow(self, number: int, key: RequestNumber, hosts: set[int]) -> None:
        """Whether the host passes for the request now, and where it will stop: for a request
        the claims decide, the count `_drop_at` finds; for the others with the walk followed
        from the claims, tested again when the certificate is next evaluated (the host is
        `touched`); with `final`, once (every count above 0 is tested in the final fleet)."""
        if self._passes(number, key):
            hosts.add(number)
        else:
            hosts.discard(number)
            return
        if self.final is not None or self.fleet.needs(key, self.requests[key]) is None:
            return
        drop = self._drop_at(number, key)
        if drop is not None:
            self.drops.setdefault(number, {}).setdefault(drop, []).append(key)

    def _drop_at(self, number: int, key: RequestNumber) -> int | None:
        """For a request the claims decide and a host that passes for it now (with instances on
        it), the count of instances on the host at which it stops passing (None: not before the
        request's last instance). `ConsumedHost.passes`'s test, whose rooms only shrink as
        instances land: the first count that fails is found by bisection."""
        needs = self.fleet.needs(key, self.requests[key])
        if needs is None:
            raise ValueError("expected a request the claims decide")
        rooms = self.fleet.rooms(number)
        amounts = dict(self.fleet.amounts(self.sold_key, self.demand))

        def passes(count: int) -> bool:
            for resource, need in needs:
                room = rooms.get(resource)
                if room is not None:
                    claimed = count * amounts.get(resource, 0)
                    if need > room[0] - placement_units(resource, room[1] + claimed):
                        return False
            return True

        low, high = self.counts[number], self.most[number] + 1  # passes at low
        if passes(self.most[number]):
            return None
        while high - low > 1:
            middle = (low + high) // 2
            if passes(middle):
                low = middle
            else:
                high = middle
        return high

    def _passes(self, number: int, key: RequestNumber) -> bool:
        """Whether the host passes for the request as the instances placed so far left it."""
        demand = self.requests[key]
        passing = self.fleet.passing_hosts(key, demand)  # as the fleet is given
        if self.counts[number] == 0:
            return number in passing
        if self.final is not None:
            final = self.final
            return final.passes(final.states[number], demand, final.key(demand))
        return self.consumed[number].passes(self.fleet, demand, key)

    def _refresh(self) -> None:
        """Brings what the certificate reads up to date with the hosts touched since it was
        last evaluated: their rooms, and whether they pass for the requests `_drop_at` does not
        follow (tested again, once per host)."""
        if self.final is None:
            lazy = [
                (key, hosts)
                for key, hosts in self.passing.items()
                if self.fleet.needs(key, self.requests[key]) is None
            ]
            for number in self.touched:
                self._rooms.moved(number, self.consumed[number].left)
                for key, hosts in lazy:
                    if self._passes(number, key):
                        hosts.add(number)
                    else:
                        hosts.discard(number)
        self.touched.clear()

    def slack(self) -> int | None:
        """None where the certificate does not show every evacuation of the reserve placing every
        domain; else how many more instances it shows so without being evaluated again.

        Until an instance lands on one of the top hosts (or they change), the evacuations move
        the same domains in the same order, and one instance changes one host: the hosts that
        pass for a request, the lost ones left out, lose at most that one, so the first test's
        margin (hosts that pass less the last position) drops by at most 1 per instance. The
        room test (`_room_margin`) holds while the hosts that pass outnumber those the claims
        before can close, and one instance lowers that margin by at most 1 plus the classes
        the request needs (one host fewer passes; the host's room lower can add at most one
        host to each class's count, its closing amount still at least 1 while it passes). The
        least margin over every request and loss, each divided by what one instance can take
        from it, is the count of instances certain without looking."""
        self._refresh()
        self.top_moved = False
        slack: int | None = None
        for lost in range(1, self.reserve + 1):
            gone = self.top[:lost]
            lasts, before = self._last_positions(gone)
            for key, last in lasts.items():
                hosts = self.passing[key]
                untouched = len(hosts) - sum(1 for number in gone if number in hosts)
                if last <= untouched:
                    margin = untouched - last
                else:
                    room = self._room_margin(key, last, before[key], hosts, gone)
                    if room is None:
                        return None
                    needs = self.fleet.needs(key, self.requests[key])
                    margin = room // (1 + len(needs or ()))
                slack = margin if slack is None else min(slack, margin)
        return slack if slack is not None else self.instances  # nothing to evacuate

    def _room_margin(
        self,
        key: RequestNumber,
        last: int,
        before: Mapping[Resource, int],
        hosts: set[int],
        gone: Sequence[int],
    ) -> int | None:
        """The certificate's second test, for a request the claims alone decide (`FleetIndex.needs`)
        while the instances are followed from their claims: a host that passes for it stops
        passing only once the domains placed on it claimed more of some class than its room
        there less the request's need, in Placement's unit. The domains before the request's
        last one claim `before` in all (each rounded up, so at least what they take), and
        however they are shared out, the hosts they can close are at most, per class, the most
        of the passing hosts whose closing amounts, smallest first, add up to that class's
        claims. When hosts that pass outnumber those, one is left for every domain of the
        request. The margin: how many more hosts pass than that (and than the domains before),
        less one (None: no more pass)."""
        if self.final is not None:
            return None
        needs = self.fleet.needs(key, self.requests[key])
        if needs is None:
            return None
        available = len(hosts) - sum(1 for number in gone if number in hosts)
        closable = 0
        for resource, need in needs:
            claimed = before.get(resource, 0)
            if claimed > 0:
                closable += self._rooms.closable(
                    resource, need, claimed, hosts, gone, most=available - closable
                )
                if closable >= available:
                    return None
        margin = available - min(last - 1, closable) - 1
        return margin if margin >= 0 else None

    def _last_positions(
        self, gone: Sequence[int]
    ) -> tuple[dict[RequestNumber, int], dict[RequestNumber, dict[Resource, int]]]:
        """Per request among the domains of the lost hosts, the position (from 1) of its last
        domain in the evacuation order (`evacuation_order`, the instances placed among them),
        and what the domains before that one claim per class, each rounded up to Placement's
        unit."""
        identity = tuple((number, self.counts[number]) for number in gone)
        found = self.orders.get(identity)
        if found is not None:
            return found
        fleet = self.fleet
        guests: list[Guest] = []
        for number in gone:
            state = fleet.states[number]
            sold = self.sold.get(state.availability_zone)
            if sold is None:
                sold = self.sold[state.availability_zone] = replace(
                    self.demand, availability_zone=state.availability_zone
                )
            guests.extend(state.guests)
            guests.extend(
                Guest(f"{SOLD_PREFIX}{index:06d}@{state.name}", sold) for index in range(self.counts[number])
            )
        lasts: dict[RequestNumber, int] = {}
        before: dict[RequestNumber, dict[Resource, int]] = {}
        claimed: dict[Resource, int] = {}
        for position, guest in enumerate(evacuation_order(guests), start=1):
            key = fleet.key(guest.demand)
            lasts[key] = position
            before[key] = dict(claimed)
            for resource, amount in fleet.amounts(key, guest.demand):
                claimed[resource] = claimed.get(resource, 0) + placement_units(resource, amount)
            if key not in self.passing:
                self.requests[key] = guest.demand
                hosts = self.passing[key] = set(fleet.passing_hosts(key, guest.demand))
                for number, count in enumerate(self.counts):
                    if count > 0:
                        self._follow(number, key, hosts)
        if len(self.orders) > len(fleet.states):  # the top hosts change as instances land
            self.orders.clear()
        self.orders[identity] = lasts, before
        return lasts, before


class _RoomsByClass:
    """Per class, every host's room (what is free in Placement's unit, the instances placed on it
    claimed) in increasing order, kept up to date as instances land: the certificate's room test
    walks the smallest rooms first, and would otherwise sort the fleet at every count."""

    def __init__(self, fleet: FleetIndex) -> None:
        self._fleet = fleet
        self._rooms: dict[int, Mapping[Resource, int]] = {}
        self._sorted: dict[Resource, list[tuple[int, int]]] = {}

    def _ordered(self, resource: Resource) -> list[tuple[int, int]]:
        found = self._sorted.get(resource)
        if found is None:
            found = self._sorted[resource] = sorted(
                (room, number)
                for number in range(len(self._fleet.states))
                if (room := self._room(number).get(resource)) is not None
            )
        return found

    def _room(self, number: int) -> Mapping[Resource, int]:
        found = self._rooms.get(number)
        return found if found is not None else self._fleet.room_left(number)

    def moved(self, number: int, rooms: Mapping[Resource, int]) -> None:
        """The host's rooms are now `rooms` (an instance landed on it)."""
        before = self._room(number)
        for resource, ordered in self._sorted.items():
            old, new = before.get(resource), rooms.get(resource)
            if old == new:
                continue
            if old is not None:
                del ordered[bisect.bisect_left(ordered, (old, number))]
            if new is not None:
                bisect.insort(ordered, (new, number))
        self._rooms[number] = dict(rooms)

    def closable(
        self, resource: Resource, need: int, claimed: int, hosts: set[int], gone: Sequence[int], *, most: int
    ) -> int:
        """How many of `hosts` (but those `gone`) claims of `claimed` in the class could close
        for a request that needs `need` of it: the most whose closing amounts (room - need + 1),
        smallest first, add up to the claims; counting stops at `most`."""
        closed = 0
        for room, number in self._ordered(resource):
            if number not in hosts or number in gone:
                continue
            claimed -= room - need + 1
            if claimed < 0:
                break
            closed += 1
            if closed >= most:
                break
        return closed


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
