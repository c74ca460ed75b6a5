"""Failure tolerance: every host's evacuation over one fleet, how many hosts the fleet can lose
together (`fleet_tolerance`), and the same once one host changed, recomputing only what the
change can affect (`fleet_tolerance_update`: the steps of the evacuations before whose choices
stand are kept, `steps_that_stand`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.resources import Resource
from virtcap.model.scheduler.evacuations import (
    EvacuationResult,
    StepTrace,
    evacuate,
    evacuation_result,
)
from virtcap.model.scheduler.filters import CandidateMemo
from virtcap.model.scheduler.fleet_index import FleetIndex, RequestNumber
from virtcap.model.scheduler.host_states import HostState
from virtcap.model.scheduler.weighers import SPREAD, Multipliers, weight_of


@dataclass(frozen=True, slots=True)
class FleetTolerance:
    """Whether each host's domains can be re-homed on the others (its `evacuation`), and how many
    hosts the fleet can lose together: the largest k up to `bound` such that, for every j <= k,
    the domains of the j hosts with the most allocated memory (ties by name), evacuated together
    (largest first, as one host's), all find a host on the others."""

    evacuations: Mapping[str, EvacuationResult]
    tolerated: int
    bound: int
    multipliers: Multipliers
    hosts: tuple[HostState, ...]
    fleet_index: FleetIndex = field(repr=False, compare=False)
    """The fleet as the evacuations left it, for `fleet_tolerance_update`."""
    step_traces: Mapping[str, tuple[StepTrace, ...] | None] = field(repr=False, compare=False)
    """Per host, the steps of its evacuation (None where a domain found no host)."""

    def feasible(self, name: str) -> bool:
        return self.evacuations[name].feasible

    def unplaced(self, name: str) -> int:
        return self.evacuations[name].unplaced_count


def _allocated_memory(state: HostState) -> int:
    memory = state.capacity.resources.get(Resource.MEMORY)
    return memory.used if memory is not None else 0


def tolerated_losses(
    fleet: FleetIndex,
    bound: int,
    multipliers: Multipliers,
    single: Mapping[str, EvacuationResult],
    *,
    largest: Sequence[int] | None = None,
) -> int:
    """How many hosts the fleet can lose together, up to `bound`: for each j, the j hosts with
    the most allocated memory (ties by name) all evacuated at once. `largest`: those hosts in
    that order, at least `bound` of them, where the caller keeps them (else the fleet is sorted)."""
    if largest is None:
        largest = sorted(
            range(len(fleet.states)),
            key=lambda n: (-_allocated_memory(fleet.states[n]), fleet.states[n].name),
        )
    tolerated = 0
    for lost in range(1, min(bound, len(largest)) + 1):
        if lost == 1:
            feasible = single[fleet.states[largest[0]].name].feasible
        else:
            feasible = not evacuate(fleet, list(largest[:lost]), multipliers)[1]
        if not feasible:
            break
        tolerated = lost
    return tolerated


def fleet_tolerance(
    hosts: Sequence[HostState],
    *,
    multipliers: Multipliers = SPREAD,
    bound: int = 3,
    memo: CandidateMemo | None = None,
) -> FleetTolerance:
    """Every host's `evacuation` (the same answers), and how many hosts the fleet can lose
    together (see `FleetTolerance`). The evacuations share the hosts that pass for each request,
    Placement's answers, the hosts sorted by weight for the normalizations they meet again, the
    final states of the hosts they consume alike, and per request a domain found no host for,
    the hosts that refuse it and why; each changes only the hosts it consumes, on a copy of
    their values. Measured by `make bench` (`bench/run.py --only tolerance`)."""
    if bound < 0:
        raise ValueError(f"expected a bound of at least 0, got {bound}")
    fleet = FleetIndex(hosts, memo if memo is not None else CandidateMemo())
    evacuations: dict[str, EvacuationResult] = {}
    traces: dict[str, tuple[StepTrace, ...] | None] = {}
    for state in hosts:
        result, trace = evacuation_result(fleet, fleet.index[state.name], multipliers)
        evacuations[state.name] = result
        traces[state.name] = tuple(trace) if trace is not None else None
    tolerated = tolerated_losses(fleet, bound, multipliers, evacuations)
    fleet.prune()
    return FleetTolerance(evacuations, tolerated, bound, multipliers, tuple(hosts), fleet, traces)


def steps_that_stand(
    fleet: FleetIndex,
    passed_before: Mapping[RequestNumber, Collection[int]],
    changed: int,
    trace: Sequence[StepTrace],
    multipliers: Multipliers,
) -> list[StepTrace]:
    """How far an evacuation that is not the `changed` host's own makes the same choices with the
    host's new state (in `fleet`; `passed_before`: per request traced, the hosts that passed for
    it in the fleet the trace was made on, the changed one at least): the steps of its trace,
    from the first, whose choices stand, kept for the next change (all of them: the evacuation
    is unchanged).

    Up to a step, the evacuation must never have chosen the changed host. Then every other host
    is at that step as it was (by induction: the same choices consume the same hosts), and the
    changed host is its new state as a whole, as it was its old one. A step's choice stands when
    the hosts that passed but the changed one are at least 2 (so that weights are normalized,
    not all 0), the largest value of each weigher is the same with the changed host's new values
    (so that every other host weighs what it weighed: the chosen one too), and the changed host,
    if it passes, weighs less than the chosen one (or as much with a later name).

    A step kept this way is kept with what is still known for sure: the chosen host and its
    weight, the count of hosts that passed (the others', and whether the changed host passes
    now), each weigher's largest value and a host holding it (-1: not known), and the second
    largest values unknown (the changed host may have held one). A step that was kept so, and
    that the change leaves as it is, is kept itself: the usual change keeps every step of most
    evacuations."""
    values = fleet.clipped[changed]
    passes: dict[RequestNumber, tuple[bool, bool]] = {}
    kept: list[StepTrace] = []
    for step in trace:
        if step.chosen == changed:
            return kept
        key = step.key
        known = passes.get(key)
        if known is None:
            # both fleets have the sets of every request traced; the changed host is unconsumed
            known = passes[key] = (changed in passed_before[key], changed in fleet.passing[key])
        was, found = known
        others = step.passed - was
        if others < 2:  # noqa: PLR2004  (one host alone weighs 0, whatever its values)
            return kept
        same = not step.exact and was == found
        tops = []
        holders = []
        for part, (first, holder, second) in enumerate(step.tops):
            if holder == changed and step.exact:
                top = max(second, values[part]) if found else second
            elif holder == changed or holder < 0:
                # the others' largest is not known (or who holds it): the changed host must
                # hold it still
                top = values[part] if found else -1.0
            else:
                top = max(first, values[part]) if found else first
            if top != first:
                return kept
            if found and values[part] == first:
                same = False
                holders.append((first, changed, -1.0))
            elif holder == changed:
                same = False
                holders.append((first, -1, -1.0))
            else:
                holders.append((first, holder, -1.0))
            tops.append(top)
        if found:
            weight = weight_of(values, tops, multipliers)
            if weight > step.weight or (weight == step.weight and changed < step.chosen):
                return kept
        if same:
            kept.append(step)
            continue
        kept.append(
            StepTrace(key, step.demand, step.chosen, step.weight, others + found, tuple(holders), False)
        )
    return kept


def fleet_tolerance_update(
    previous: FleetTolerance, changed: HostState, *, memo: CandidateMemo | None = None
) -> FleetTolerance:
    """`fleet_tolerance` of the previous result's hosts with one of them (by name) in a new state,
    recomputing only what the change can affect: the changed host's own evacuation, those where
    a domain found no host (its rejections list the changed host), and from its first step whose
    choice `steps_that_stand` cannot vouch for (the changed host chosen, or a choice it may have
    changed) those of the others: the steps before stand and are not searched again. The others
    keep their placements, with the host's new state in their final states. The fleet's
    lost-together tolerance is computed again (at most `bound` evacuations)."""
    fleet = previous.fleet_index.copy()
    if memo is not None:
        fleet.memo = memo
    number = fleet.index.get(changed.name)
    if number is None:
        raise ValueError(f"{changed.name!r} is not a host of the fleet")
    fleet.replace(changed)
    multipliers = previous.multipliers
    hosts = tuple(changed if state.name == changed.name else state for state in previous.hosts)
    evacuations: dict[str, EvacuationResult] = {}
    traces: dict[str, tuple[StepTrace, ...] | None] = {}
    for name, before in previous.evacuations.items():
        trace = previous.step_traces[name]
        kept: list[StepTrace] = []
        if name != changed.name and trace is not None:
            kept = steps_that_stand(fleet, previous.fleet_index.passing, number, trace, multipliers)
        if trace is not None and len(kept) == len(trace) and name != changed.name:
            # the changed host is among the others of this evacuation, unconsumed: where it was
            # given, less one if the failed host was given before it
            failed = fleet.index[name]
            where = fleet.position[number] - (fleet.position[failed] < fleet.position[number])
            states = (*before.states[:where], changed, *before.states[where + 1 :])
            evacuations[name] = replace(before, states=states)
            traces[name] = tuple(kept)
            continue
        result, found = evacuation_result(fleet, fleet.index[name], multipliers, kept)
        evacuations[name] = result
        traces[name] = tuple(found) if found is not None else None
    tolerated = tolerated_losses(fleet, previous.bound, multipliers, evacuations)
    fleet.prune()
    return FleetTolerance(evacuations, tolerated, previous.bound, multipliers, hosts, fleet, traces)


def tolerated_failures(
    hosts: Sequence[HostState], bound: int, multipliers: Multipliers, *, memo: CandidateMemo | None = None
) -> int:
    """`fleet_tolerance`'s `tolerated` alone: the hosts with the most allocated memory evacuated
    together, one more at a time up to `bound`; only the first host's single evacuation is
    computed, not every host's."""
    if bound <= 0 or not hosts:
        return 0
    fleet = FleetIndex(hosts, memo if memo is not None else CandidateMemo())
    largest = sorted(
        range(len(fleet.states)), key=lambda n: (-_allocated_memory(fleet.states[n]), fleet.states[n].name)
    )
    top = largest[0]
    single = {fleet.names[top]: evacuation_result(fleet, top, multipliers)[0]}
    return tolerated_losses(fleet, bound, multipliers, single, largest=largest)
