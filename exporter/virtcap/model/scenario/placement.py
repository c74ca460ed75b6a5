"""A scenario's scheduling: the removed and drained hypervisors' domains re-homed (`rehome`), then
the demand placed in order (`place_demand`), each through the simulated scheduler as Nova would
place them, so that what finds no host is reported with Nova's NoValidHost reasons.

The domains leaving are re-homed as the failure tolerance evacuates lost hosts (largest first,
all leaving hypervisors together, each domain in its zone: `evacuate`); a demand entry is one
request for as many of its instances as fit (`schedule`'s steps: the first `fitted` land, the
rest find no host), and what it places joins its hosts' guests, so that the answers after the
scenario (an evacuation, a compaction) move it like any domain."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.model.scenario.hosts import AppliedScenario, leaving_state
from virtcap.model.scenario.spec import DemandItem
from virtcap.model.scheduler import Guest, HostState, Multipliers, Rejection, schedule
from virtcap.model.scheduler.evacuations import Unplaced, evacuate
from virtcap.model.scheduler.filters import CandidateMemo
from virtcap.model.scheduler.fleet_index import FleetIndex

DEMAND_PREFIX = "scenario-"
"""The names of the instances a scenario's demand places (`scenario-<entry>-<n>`)."""


@dataclass(frozen=True, slots=True)
class Refusals:
    """Why the next instance found no host: per filter, how many hypervisors it refused, and one
    refusal in the scheduler's words."""

    refused_by: Mapping[str, int]
    example: str

    @classmethod
    def of(cls, rejections: Mapping[str, Rejection], no_valid_host: str | None = None) -> Refusals:
        """The example is the first hypervisor (by name) that the filter refusing the most refused:
        what stops the request, rather than one hypervisor that happened to be down."""
        counts = Counter(rejection.filter for rejection in rejections.values())
        if no_valid_host is not None:
            example = no_valid_host
        elif rejections:
            most = counts.most_common(1)[0][0]
            name = min(name for name, rejection in rejections.items() if rejection.filter == most)
            first = rejections[name]
            example = f"{name}: {first.filter}: {'; '.join(first.reasons)}"
        else:
            example = "no hypervisor is up"
        return cls(dict(sorted(counts.items())), example)

    @classmethod
    def of_unplaced(cls, unplaced: Unplaced) -> Refusals:
        first = unplaced.first_rejection
        if unplaced.no_valid_host is not None:
            example = unplaced.no_valid_host
        elif first is not None:
            name, rejection = first
            example = f"{name}: {rejection.filter}: {'; '.join(rejection.reasons)}"
        else:
            example = "no other hypervisor is up"
        return cls(dict(sorted(unplaced.refused_by.items())), example)


@dataclass(frozen=True, slots=True)
class Move:
    """A domain (or pending claim) of a leaving hypervisor, and where it goes (None: nowhere)."""

    domain: str
    uuid: str
    source: str
    destination: str | None
    refusals: Refusals | None = None


@dataclass(frozen=True, slots=True)
class UnplacedDemand:
    """The instances of a demand entry that found no host."""

    label: str
    count: int
    refusals: Refusals


@dataclass(frozen=True, slots=True)
class PlacedDemand:
    """Where the instances of a demand entry landed: per hypervisor, how many, in the order the
    first of them landed there."""

    label: str
    hypervisors: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Placed:
    states: tuple[HostState, ...]
    moves: tuple[Move, ...] = ()
    unplaced: tuple[UnplacedDemand, ...] = ()
    placed: tuple[PlacedDemand, ...] = ()

    @property
    def displaced_unplaced(self) -> int:
        return sum(1 for move in self.moves if move.destination is None)

    @property
    def everything_placed(self) -> bool:
        return not self.unplaced and self.displaced_unplaced == 0


def rehome(applied: AppliedScenario, multipliers: Multipliers) -> Placed:
    """The fleet after the scenario's changes, the leaving hypervisors' domains and pending claims
    re-homed on the others (the added ones among them), largest first; those no host takes are
    moves without a destination."""
    leaving = set(applied.leaving)
    if not leaving:
        return Placed(tuple(host.state() for host in applied.after))
    during = _unique_names(
        [leaving_state(host) if host.name in leaving else host.state() for host in applied.during], leaving
    )
    fleet = FleetIndex(during, CandidateMemo())
    failed = [fleet.index[name] for name in applied.leaving]
    rehomed, unplaced, moved, _ = evacuate(fleet, failed, multipliers)
    order = [guest for guest, _ in fleet.evacuation_order(failed)]
    sources = {
        id(guest): fleet.states[number].name for number in failed for guest in fleet.states[number].guests
    }
    moves = _moves(order, sources, rehomed, unplaced)
    landed: dict[str, list[Guest]] = {}
    for move, guest in zip(moves, order, strict=True):
        if move.destination is not None:
            landed.setdefault(move.destination, []).append(guest)
    states = []
    for host in applied.after:
        number = fleet.index[host.name]
        if host.name in leaving:  # drained: in maintenance, emptied
            states.append(host.state())
            continue
        consumed = moved.get(number)
        state = consumed.current(fleet) if consumed is not None else fleet.states[number]
        arrived = landed.get(host.name)
        if arrived:
            state = replace(state, guests=(*state.guests, *arrived))
        states.append(state)
    return Placed(tuple(states), tuple(moves))


def _unique_names(states: list[HostState], leaving: set[str]) -> list[HostState]:
    """The leaving hypervisors' guests named apart where two share a name (`name@hypervisor`):
    the evacuation reports its outcome by guest name."""
    names = Counter(guest.name for state in states if state.name in leaving for guest in state.guests)
    if all(count == 1 for count in names.values()):
        return states
    return [
        replace(
            state,
            guests=tuple(
                replace(guest, name=f"{guest.name}@{state.name}") if names[guest.name] > 1 else guest
                for guest in state.guests
            ),
        )
        if state.name in leaving
        else state
        for state in states
    ]


def _moves(
    order: Sequence[Guest],
    sources: Mapping[int, str],
    rehomed: Sequence[tuple[str, str]],
    unplaced: Sequence[Unplaced],
) -> list[Move]:
    """The evacuation's outcome guest by guest: it lists the re-homed ones and the unplaced ones
    apart, each in the evacuation's order, so the two lists are merged back in that order (a
    guest's name heads at most one of them: `_unique_names` made them unique)."""
    moves = []
    placed_at = unplaced_at = 0
    for guest in order:
        source = sources[id(guest)]
        if placed_at < len(rehomed) and rehomed[placed_at][0] == guest.name:
            moves.append(Move(guest.name, guest.uuid, source, rehomed[placed_at][1]))
            placed_at += 1
        elif unplaced_at < len(unplaced) and unplaced[unplaced_at].guest == guest.name:
            refusals = Refusals.of_unplaced(unplaced[unplaced_at])
            moves.append(Move(guest.name, guest.uuid, source, None, refusals))
            unplaced_at += 1
        else:
            raise ValueError(f"{guest.name}: neither re-homed nor unplaced by the evacuation")
    return moves


def place_demand(
    states: Sequence[HostState], demand: Sequence[DemandItem], multipliers: Multipliers
) -> Placed:
    """The demand placed in order, each entry one request for as many as fit; the instances placed
    join their hosts' guests (in their hosts' zones), named `scenario-<entry>-<n>`."""
    current = tuple(states)
    unplaced: list[UnplacedDemand] = []
    placed: list[PlacedDemand] = []
    for index, item in enumerate(demand, start=1):
        result = schedule(current, item.demand, item.count, multipliers=multipliers)
        if not result.placed:
            unplaced.append(
                UnplacedDemand(
                    item.label, result.unplaced, Refusals.of(result.rejections, result.no_valid_host)
                )
            )
            if result.fitted == 0:
                placed.append(PlacedDemand(item.label, {}))
                continue
            result = schedule(current, item.demand, result.fitted, multipliers=multipliers)
        landed: dict[str, int] = Counter(step.host for step in result.steps)
        placed.append(PlacedDemand(item.label, dict(landed)))
        current = tuple(
            _with_instances(state, item, index, landed[state.name]) if state.name in landed else state
            for state in result.states
        )
    return Placed(current, unplaced=tuple(unplaced), placed=tuple(placed))


def _with_instances(state: HostState, item: DemandItem, index: int, count: int) -> HostState:
    """The host with `count` instances of the entry among its guests, in its zone (as a domain of
    a host in a zone stays in it)."""
    demand = replace(item.demand, availability_zone=state.availability_zone)
    first = sum(1 for guest in state.guests if guest.name.startswith(f"{DEMAND_PREFIX}{index}-")) + 1
    new = tuple(
        Guest(f"{DEMAND_PREFIX}{index}-{number}@{state.name}", demand)
        for number in range(first, first + count)
    )
    return replace(state, guests=(*state.guests, *new))
