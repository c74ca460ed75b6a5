"""A consolidation plan: which hypervisors could be emptied by live migrations, and the moves, as
OpenStack Watcher's workload consolidation would propose them; a dry run (virtcap never moves a
domain).

The hypervisors the plan may empty are emptied in turn as the scheduler would re-home their
domains with those hypervisors disabled (Watcher disables a hypervisor it empties): every domain
goes through the filters, the weighers (the fleet's multipliers) and the claim test of the
simulated scheduler (`virtcap.model.scheduler`, its evacuation's fast path), with every move
before it consumed. A domain only ever moves to a hypervisor the plan keeps, which only gains
domains: a move never relies on room another move frees, and while a domain migrates its source
still holds it (Nova's migration allocation) without changing what the destination had to offer.

The search (docs/packing.md, "Consolidation plan"), fewest moves first:

1. Candidates: the eligible hypervisors in scope (up, not stale, not in maintenance, in the zone
   asked for, not excluded) holding domains, those with the fewest and smallest domains first.
2. The longest prefix of the candidates whose domains, together, all find a host on the other
   candidates: a sum bound first (what they ask for against what the others have free, per
   class), then a binary search with the scheduler deciding each try.
3. Then each remaining candidate alone, in order: emptied if all its domains find a host on the
   hypervisors the plan keeps (the moves committed), else rolled back, its domains that found no
   host reported with the scheduler's reason. A hypervisor that took a domain is kept.
4. `keep_free` hypervisors fewer, then the longest prefix within `max_moves`: the plan is a
   prefix of the hypervisors emptied in turn.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.model.resources import Resource
from virtcap.model.scheduler import CandidateMemo, Guest, HostState, Multipliers, Unplaced
from virtcap.model.scheduler.evacuations import evacuate
from virtcap.model.scheduler.fleet_index import FleetIndex

MAX_MOVES = 1_000_000
"""The largest `max_moves` accepted: more than any fleet virtcap audits holds domains."""

EMPTIED = "emptied by the consolidation plan"
"""Why a hypervisor the plan emptied refuses the domains of the next ones (ComputeFilter's
reason: Watcher disables the compute service of a hypervisor it empties)."""


class ConsolidationOptionError(ValueError):
    """An option the plan cannot be made with (an unknown hypervisor or zone, a negative count...):
    the API answers 400 with the message, the CLI exits 2."""


@dataclass(frozen=True, slots=True)
class Move:
    """One live migration: the domain (its UUID, or its name where the UUID is not known), from
    its hypervisor to another, with what it is allocated (per class, in the class's unit)."""

    domain: str
    name: str
    source: str
    destination: str
    resources: Mapping[Resource, int]

    def as_json(self) -> dict[str, object]:
        return {
            "domain": self.domain,
            "name": self.name,
            "from": self.source,
            "to": self.destination,
            "resources": {resource.label: amount for resource, amount in self.resources.items()},
        }


@dataclass(frozen=True, slots=True)
class Unmovable:
    """A domain that kept its hypervisor from being emptied: no hypervisor the plan keeps took
    it when its hypervisor was tried, and the scheduler's reason. The domain by its UUID (its
    name where the UUID is not known) and by its name, as a move names it."""

    domain: str
    name: str
    source: str
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"domain": self.domain, "name": self.name, "from": self.source, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class ConsolidationPlan:
    hypervisors_before: int
    """Eligible hypervisors in scope holding domains (excluded ones too)."""
    hypervisors_after: int
    """The same once the plan is carried out: before less the emptied ones."""
    emptied: tuple[str, ...]
    """In the order they are emptied."""
    moves: tuple[Move, ...]
    """In order: each is feasible with every move before it carried out."""
    unmovable: tuple[Unmovable, ...]
    complete: bool = True
    """False where the time limit cut the search short (the plan is valid, maybe not the best)."""

    def as_json(self) -> dict[str, object]:
        return {
            "hypervisors_before": self.hypervisors_before,
            "hypervisors_after": self.hypervisors_after,
            "emptied": list(self.emptied),
            "moves": [move.as_json() for move in self.moves],
            "unmovable": [domain.as_json() for domain in self.unmovable],
            "complete": self.complete,
        }


def consolidation_plan(
    states: Sequence[HostState],
    multipliers: Multipliers,
    *,
    max_moves: int | None = None,
    keep_free: int = 0,
    availability_zone: str | None = None,
    exclude: frozenset[str] = frozenset(),
    target: int | None = None,
    time_limit_seconds: float = 10.0,
) -> ConsolidationPlan:
    """The hypervisors that live migrations could empty, and the moves (see the module's
    docstring). `max_moves`: no more moves (whole hypervisors only); `keep_free`: that many
    hypervisors fewer emptied than the plan could (failover room); `availability_zone`: only its
    hypervisors; `exclude`: hypervisors neither emptied nor filled; `target`: the compaction's
    count, where known: the search stops once the hypervisors left reach it. Raises
    `ConsolidationOptionError` for an option it cannot be made with."""
    scoped = _check_options(
        states,
        max_moves=max_moves,
        keep_free=keep_free,
        availability_zone=availability_zone,
        exclude=exclude,
        target=target,
        time_limit_seconds=time_limit_seconds,
    )
    deadline = time.monotonic() + time_limit_seconds
    used = [state for state in scoped if not state.refused_by_compute and state.guests]
    candidates = sorted((state for state in used if state.name not in exclude), key=_emptying_order)
    most = len(candidates) if target is None else max(0, min(len(candidates), len(used) - target))
    search = _Search(candidates, multipliers, deadline)
    batch = search.largest_batch(most)
    order = [candidates[number].name for number in range(batch.count)]
    steps: list[tuple[str, tuple[Move, ...]]] = []
    unmovable: list[Unmovable] = []
    if batch.count < most and not search.out_of_time():
        steps, unmovable = search.one_by_one(batch, most - batch.count)
    order.extend(name for name, _ in steps)
    allowed = max(len(order) - keep_free, 0)
    if max_moves is not None:
        sizes = {state.name: len(state.guests) for state in candidates}
        moves_so_far = 0
        for position, name in enumerate(order[:allowed]):
            moves_so_far += sizes[name]
            if moves_so_far > max_moves:
                allowed = position
                break
    if allowed >= batch.count:
        moves = list(batch.moves)
        for _, emptying in steps[: allowed - batch.count]:
            moves.extend(emptying)
        emptied = order[:allowed]
    else:
        smaller = search.feasible_prefix(allowed)
        moves = list(smaller.moves)
        emptied = order[: smaller.count]
    return ConsolidationPlan(
        hypervisors_before=len(used),
        hypervisors_after=len(used) - len(emptied),
        emptied=tuple(emptied),
        moves=tuple(moves),
        unmovable=tuple(unmovable),
        complete=not search.cut_short,
    )


def _check_options(
    states: Sequence[HostState],
    *,
    max_moves: int | None,
    keep_free: int,
    availability_zone: str | None,
    exclude: frozenset[str],
    target: int | None,
    time_limit_seconds: float,
) -> list[HostState]:
    """The hypervisors in scope (of the zone asked for), once the options are checked."""
    names = [state.name for state in states]
    if len(set(names)) != len(names):
        raise ConsolidationOptionError("expected each hypervisor once")
    unknown = sorted(exclude - set(names))
    if unknown:
        raise ConsolidationOptionError(f"unknown hypervisor(s) to exclude: {', '.join(unknown)}")
    scoped = list(states)
    where = "the fleet"
    if availability_zone is not None:
        zones = sorted({state.availability_zone for state in states if state.availability_zone is not None})
        if availability_zone not in zones:
            known = ", ".join(zones) if zones else "none"
            raise ConsolidationOptionError(
                f"unknown availability zone {availability_zone!r} (the fleet's zones: {known})"
            )
        scoped = [state for state in states if state.availability_zone == availability_zone]
        where = f"availability zone {availability_zone}"
    if max_moves is not None and not 0 <= max_moves <= MAX_MOVES:
        raise ConsolidationOptionError(f"max_moves must be between 0 and {MAX_MOVES:,}, got {max_moves}")
    if keep_free < 0:
        raise ConsolidationOptionError(f"keep_free must be at least 0, got {keep_free}")
    if keep_free > len(scoped):
        raise ConsolidationOptionError(
            f"keep_free {keep_free} is more than the {len(scoped)} hypervisor(s) of {where}"
        )
    if target is not None and target < 0:
        raise ConsolidationOptionError(f"target must be at least 0, got {target}")
    if not (math.isfinite(time_limit_seconds) and time_limit_seconds > 0):
        raise ConsolidationOptionError(f"time_limit_seconds must be above 0, got {time_limit_seconds}")
    return scoped


def _emptying_order(state: HostState) -> tuple[int, int, int, int, str]:
    """Fewest domains first, then the smallest (memory, vCPUs, disk allocated), then by name."""
    resources = state.capacity.resources

    def used(*classes: Resource) -> int:
        return sum(found.used for resource in classes if (found := resources.get(resource)) is not None)

    return (
        len(state.guests),
        used(Resource.MEMORY),
        used(Resource.VCPU, Resource.PCPU),
        used(Resource.DISK),
        state.name,
    )


@dataclass(frozen=True, slots=True)
class _Batch:
    """The first `count` candidates emptied together, the moves, and the hypervisors as the moves
    left them (those that took a domain)."""

    count: int
    moves: tuple[Move, ...]
    consumed: Mapping[str, HostState]


class _Search:
    """The candidates, indexed once for the scheduler's fast path (`FleetIndex`), and the search's
    clock."""

    def __init__(self, candidates: Sequence[HostState], multipliers: Multipliers, deadline: float) -> None:
        self.candidates = candidates
        self.multipliers = multipliers
        self.deadline = deadline
        self.cut_short = False
        self.memo = CandidateMemo()
        self.fleet = FleetIndex(candidates, self.memo)
        self.numbers = [self.fleet.index[state.name] for state in candidates]
        self.tried: dict[int, _Batch | None] = {0: _Batch(0, (), {})}

    def out_of_time(self) -> bool:
        if time.monotonic() > self.deadline:
            self.cut_short = True
        return self.cut_short

    def batch(self, count: int) -> _Batch | None:
        """The first `count` candidates emptied together (their domains largest first, as an
        evacuation of them all), None where a domain finds no host."""
        if count in self.tried:
            return self.tried[count]
        failed = self.numbers[:count]
        rehomed, unplaced, consumed, _ = evacuate(self.fleet, failed, self.multipliers)
        found: _Batch | None = None
        if not unplaced:
            moves = _moves(self.fleet, failed, rehomed)
            states = {self.fleet.names[number]: host.current(self.fleet) for number, host in consumed.items()}
            found = _Batch(count, moves, states)
        self.tried[count] = found
        return found

    def largest_batch(self, most: int) -> _Batch:
        """The longest prefix of at most `most` candidates emptied together: the sum bound tried
        first (on a fleet of like hypervisors it is close), then prefixes shorter by 1, 2, 4...
        until one is emptied, then a binary search between it and the shortest that was not (a
        longer prefix that fails is taken to mean the longer ones fail too). Each try is a whole
        evacuation: few of them."""
        best = self._empty()
        failing = min(most, _sum_bound(self.candidates)) + 1
        step = 1
        while failing - step > best.count and not self.out_of_time():
            found = self.batch(failing - step)
            if found is not None:
                best = found
                break
            failing -= step
            step *= 2
        while failing - best.count > 1 and not self.out_of_time():
            middle = (best.count + failing) // 2
            found = self.batch(middle)
            if found is None:
                failing = middle
            else:
                best = found
        return best

    def feasible_prefix(self, count: int) -> _Batch:
        """The longest prefix of at most `count` candidates emptied together (a shorter prefix of
        a batch found feasible, tried again: fewer hypervisors emptied take other choices)."""
        while count > 0:
            found = self.batch(count)
            if found is not None:
                return found
            count -= 1
        return self._empty()

    def _empty(self) -> _Batch:
        found = self.tried[0]
        assert found is not None
        return found

    def one_by_one(
        self, batch: _Batch, most: int
    ) -> tuple[list[tuple[str, tuple[Move, ...]]], list[Unmovable]]:
        """The candidates after the batch, each emptied alone on the hypervisors the plan keeps
        (the batch's moves carried out, the batch's hypervisors gone), in order, up to `most`: the
        moves of each emptied, and the domains that kept the others from it."""
        kept = [batch.consumed.get(state.name, state) for state in self.candidates[batch.count :]]
        fleet = FleetIndex(kept, self.memo)
        receivers = set(batch.consumed)
        steps: list[tuple[str, tuple[Move, ...]]] = []
        unmovable: list[Unmovable] = []
        for state in self.candidates[batch.count :]:
            if len(steps) >= most or self.out_of_time():
                break
            if state.name in receivers:
                continue  # its new domains are not among its guests: it is kept
            number = fleet.index[state.name]
            rehomed, unplaced, consumed, _ = evacuate(fleet, (number,), self.multipliers)
            if unplaced:
                guests = {guest.name: guest for guest in state.guests}
                unmovable.extend(
                    Unmovable(_identity(guests[lost.guest]), lost.guest, state.name, _reason(lost))
                    for lost in unplaced
                )
                continue
            steps.append((state.name, _moves(fleet, (number,), rehomed)))
            changed = [host.current(fleet) for host in consumed.values()]
            changed.append(_disabled(fleet.states[number]))
            for updated in changed:
                fleet.replace(updated)
            receivers.update(fleet.names[taker] for taker in consumed)
        return steps, unmovable


def _disabled(state: HostState) -> HostState:
    """An emptied hypervisor: no domains left, and no more taken (as a disabled compute service)."""
    return replace(state, capacity=replace(state.capacity, maintenance=EMPTIED), guests=())


def _sum_bound(candidates: Sequence[HostState]) -> int:
    """The longest prefix of candidates whose domains, summed per class, do not ask for more than
    the other candidates have free (a class some other candidate does not limit, any amount): no
    longer prefix can be emptied."""
    limited: list[dict[Resource, int]] = []
    for state in candidates:
        free: dict[Resource, int] = {}
        for resource, capacity in state.capacity.resources.items():
            left = capacity.free
            free[resource] = max(left, 0) if left is not None else -1
        limited.append(free)
    asked: dict[Resource, int] = {}
    # what the candidates after each prefix have free: summed from the end
    suffix_free: list[dict[Resource, int | None]] = [{} for _ in range(len(candidates) + 1)]
    for position in range(len(candidates) - 1, -1, -1):
        room = dict(suffix_free[position + 1])
        for resource, left in limited[position].items():
            held = room.get(resource, 0)
            room[resource] = None if left < 0 or held is None else held + left
        suffix_free[position] = room
    for count, state in enumerate(candidates, start=1):
        for guest in state.guests:
            for resource, amount in guest.demand.request.items():
                asked[resource] = asked.get(resource, 0) + amount
        room = suffix_free[count]
        for resource, amount in asked.items():
            if amount <= 0:
                continue
            held = room.get(resource, 0)
            if held is not None and amount > held:
                return count - 1
    return len(candidates)


def _identity(guest: Guest) -> str:
    return guest.uuid or guest.name


def _moves(fleet: FleetIndex, failed: Iterable[int], rehomed: Sequence[tuple[str, str]]) -> tuple[Move, ...]:
    """The moves of an evacuation of the `failed` hypervisors where every domain found a host:
    `rehomed` follows the fleet's evacuation order of their domains, whose sources are found by
    the guests' identities (a sort keeps equal guests in the order they were given)."""
    failed = tuple(failed)
    sources: dict[int, list[str]] = {}
    for number in failed:
        state = fleet.states[number]
        for guest in state.guests:
            sources.setdefault(id(guest), []).append(state.name)
    taken: dict[int, int] = {}
    moves = []
    for (guest, _), (name, destination) in zip(fleet.evacuation_order(failed), rehomed, strict=True):
        if guest.name != name:
            raise ValueError(f"the evacuation moved {name}, expected {guest.name}")
        position = taken.get(id(guest), 0)
        taken[id(guest)] = position + 1
        source = sources[id(guest)][position]
        resources = {resource: amount for resource, amount in guest.demand.request.items() if amount > 0}
        moves.append(Move(_identity(guest), guest.name, source, destination, resources))
    return tuple(moves)


def _reason(unplaced: Unplaced) -> str:
    """The scheduler's reason a domain found no host: how many hypervisors each filter refused,
    and the first one's reason."""
    counts = unplaced.refused_by
    if not counts:
        return unplaced.no_valid_host or "no other hypervisor in scope"
    refused = ", ".join(f"{name} refused {count}" for name, count in sorted(counts.items()))
    first = unplaced.first_rejection
    if first is None:
        return f"no valid host: {refused}"
    host, rejection = first
    return f"no valid host: {refused} (first, {host}: {rejection.filter}: {rejection.reason})"
