"""The sellable count of a flavor after a change, from the decisions of the last computation:
most counts of the new request keep the reserve for the reason the same count of the last one
did, and are not decided again.

The request is followed from the last one (`replayed_request`), which says how its counts match
the last one's (`Alignment`): after k instances, every host but a few (`differing`: the changed
ones, and those ahead or behind in their count) is as it was after p instances of the last
request. The last computation kept, per count it decided, a margin in hosts
(`DecisionLog`):

- where `_ReserveWalk`'s certificate showed it (model/packing/sellable.py), its slack: one host
  in another state changes each of the certificate's margins by at most one unit of the slack,
  so a count within the slack of one evaluated, before or after it, keeps as many units;
- where the evacuations up to the first sold instance and the rest's rooms showed it
  (`evacuation_places_all`), the rest's margin (`rest_margin`), with the evacuation's steps.

A count k keeps the reserve when its count p kept it with a margin of at least the hosts that
differ, the hosts lost first are the same (none of them differs, and none that differs has more
allocated memory than the last of them: the domains evacuated are the same, in the same order)
and, for the second kind, every step of the evacuation stands with the hosts that differ in
their new states (none of them chosen, none holding or reaching a weigher's largest value, each
weighing less than the host chosen, and at least two others passing, as `steps_that_stand`
reasons for one host). The new margin is the old less the hosts that differ, so that one more
change is read from it the same way.

The first count that is not shown so is decided by the evacuations, run to the end on the fleet
the last computation ended with, brought to this count (the hosts whose state or count differs
replaced); the counts after it the same way, as far as `MOST_EXACT` counts. Past that, or where
the request was not followed, `sellable_count` decides every count from the start.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from virtcap.model.host_fit import Demand
from virtcap.model.packing.reserve_evacuation import (
    SoldStates,
    allocated_memory,
    decided_by_evacuations,
    replaced_hosts,
)
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler.claims_replay import MOST_DIFFERING, ClaimsTrace
from virtcap.model.scheduler.evacuations import StepTrace
from virtcap.model.scheduler.filters import CandidateMemo
from virtcap.model.scheduler.fleet_index import FleetIndex
from virtcap.model.scheduler.host_states import HostState
from virtcap.model.scheduler.weighers import Multipliers, clipped_values, weight_of

IntArray = npt.NDArray[np.int64]

Top = tuple[tuple[int, int], ...]
"""The hosts lost first (`_ReserveWalk.top`), with the instances each has."""
Prefixes = Mapping[tuple[int, ...], Sequence[StepTrace]]
"""Per set of lost hosts, the steps of its evacuation up to the first sold instance."""

NOT_SHOWN = -1
"""A count's margin where no margin shows it keeping the reserve (decided by the evacuations run
to the end, broken, or not decided)."""

MOST_EXACT = 512
"""The counts `updated_count` decides by the evacuations run to the end before it gives up."""
FEW_REPLACED = 16
"""Past this many hosts replaced at once, the fleet's rankings and orders are found again rather
than each brought up to date with every host."""
KEPT_RECORDS = 64
"""The records `KeptDecisions` keeps, as `Placements` keeps its traces."""


@dataclass(eq=False)
class DecisionRecord:
    """The decisions of one sellable count, as the next computation reads them."""

    trace: ClaimsTrace
    reserve: int
    margins: IntArray
    """Per count, its margin in hosts (`NOT_SHOWN`: none)."""
    top_ids: IntArray
    """Per count with a margin, its lost hosts (an index of `tops`)."""
    prefix_ids: IntArray
    """Per count shown by the evacuations up to the first sold instance, their steps (an index of
    `prefixes`; -1 for the certificate's counts)."""
    deficits: IntArray
    """Per such count, the hosts that differed in the computations since its steps were traced."""
    tops: list[Top]
    prefixes: list[Prefixes]
    decided: int
    """The last count decided (the first that broke the reserve, or the request's last)."""
    fleet: FleetIndex | None = None
    """The fleet of the last count the evacuations decided, with each host's state before the
    instances (`bases`) and its instances (`known`)."""
    bases: list[HostState] = field(default_factory=list)
    known: list[int] = field(default_factory=list)


class DecisionLog:
    """What `reserve_decisions` finds, count by count, recorded for the next computation
    (`record`)."""

    def __init__(self, trace: ClaimsTrace, reserve: int) -> None:
        size = len(trace.chosen) + 1
        self.trace = trace
        self.reserve = reserve
        self.margins = np.full(size, NOT_SHOWN, dtype=np.int64)
        self.top_ids = np.full(size, -1, dtype=np.int64)
        self.prefix_ids = np.full(size, -1, dtype=np.int64)
        self.tops: list[Top] = []
        self.prefixes: list[Prefixes] = []
        self.certified: list[tuple[int, int, int]] = []
        """Each count the certificate was evaluated at, its slack and lost hosts."""
        self.evaluated: list[int] = []
        """Each count the evacuations decided."""
        self.decided = -1
        self.fleet: FleetIndex | None = None
        self.known: list[int] = []

    def _top(self, top: Top) -> int:
        if not self.tops or self.tops[-1] != top:
            self.tops.append(top)
        return len(self.tops) - 1

    def certificate(self, count: int, slack: int, top: Top) -> None:
        self.certified.append((count, slack, self._top(top)))
        self.decided = count

    def slack(self, count: int) -> None:
        self.decided = count

    def evacuations(
        self,
        count: int,
        *,
        kept: bool,
        margin: int | None,
        prefixes: Prefixes,
        top: Top,
        fleet: FleetIndex,
        known: list[int],
    ) -> None:
        """A count the evacuations decided (`margin`: shown by the rest's rooms, None: by the
        evacuations run to the end), and the fleet they ran on, at that count."""
        self.evaluated.append(count)
        self.decided = count
        self.fleet, self.known = fleet, known
        if kept and margin is not None:
            self.margins[count] = margin
            self.top_ids[count] = self._top(top)
            self.prefixes.append(prefixes)
            self.prefix_ids[count] = len(self.prefixes) - 1

    def record(self) -> DecisionRecord:
        """The record, with the margins of the counts the certificate showed: from the count
        it was evaluated at, its slack less the instances since, and where the next evaluation
        is the certificate's too with the same lost hosts, at least its slack less the instances
        until then (one instance, one host changed, either way)."""
        evaluated = sorted([count for count, _, _ in self.certified] + self.evaluated)
        by_count = {count: (slack, top) for count, slack, top in self.certified}
        for index, count in enumerate(evaluated):
            found = by_count.get(count)
            if found is None:
                continue
            slack, top = found
            end = evaluated[index + 1] if index + 1 < len(evaluated) else self.decided + 1
            counts = np.arange(count, end, dtype=np.int64)
            margins = slack - (counts - count)
            after = by_count.get(end)
            if after is not None and after[1] == top:
                margins = np.maximum(margins, after[0] - (end - counts))
            self.margins[count:end] = margins
            self.top_ids[count:end] = top
        bases = list(self.trace.states)
        return DecisionRecord(
            trace=self.trace,
            reserve=self.reserve,
            margins=self.margins,
            top_ids=self.top_ids,
            prefix_ids=self.prefix_ids,
            deficits=np.zeros(len(self.margins), dtype=np.int64),
            tops=self.tops,
            prefixes=self.prefixes,
            decided=self.decided,
            fleet=self.fleet,
            bases=bases,
            known=list(self.known),
        )


class KeptDecisions:
    """The last record of each sellable count (`DecisionRecord`), found again by the trace the
    next request was followed from. Used by one thread at a time."""

    def __init__(self) -> None:
        self._records: list[DecisionRecord] = []
        self.updated = 0
        """The counts found from a record (`updated_count`), not decided from the start."""

    def find(self, trace: ClaimsTrace, reserve: int) -> DecisionRecord | None:
        followed = trace.follows() if trace.follows is not None else None
        if followed is None:
            return None
        return next(
            (record for record in self._records if record.trace is followed and record.reserve == reserve),
            None,
        )

    def keep(self, record: DecisionRecord) -> None:
        """Keeps the record, in place of the one its trace was followed from (whose fleet it may
        have taken over) and of any other of the same trace."""
        trace = record.trace
        followed = trace.follows() if trace.follows is not None else None
        self._records = [
            kept for kept in self._records if kept.trace is not trace and kept.trace is not followed
        ]
        self._records.append(record)
        del self._records[:-KEPT_RECORDS]


def updated_count(
    record: DecisionRecord,
    trace: ClaimsTrace,
    demand: Demand,
    multipliers: Multipliers,
    memo: CandidateMemo,
) -> tuple[int, DecisionRecord] | None:
    """The sellable count of the request `trace` (followed from `record.trace`), and its record;
    None where it cannot be found from the record (see the module's docstring)."""
    update = _Update(record, trace, demand, multipliers, memo)
    return update.run()


class _Update:
    def __init__(
        self,
        record: DecisionRecord,
        trace: ClaimsTrace,
        demand: Demand,
        multipliers: Multipliers,
        memo: CandidateMemo,
    ) -> None:
        self.record = record
        self.trace = trace
        self.demand = demand
        self.multipliers = multipliers
        self.memo = memo
        old = record.trace
        self.candidates = np.asarray(trace.candidates, dtype=np.int64)
        candidates = set(trace.candidates)
        self.changed = [
            number
            for number, (before, now) in enumerate(zip(old.states, trace.states, strict=True))
            if before is not now
        ]
        self.changed_elsewhere = tuple(number for number in self.changed if number not in candidates)
        self.names = [state.name for state in trace.states]
        self.sold_memory = demand.request.get(Resource.MEMORY, 0)
        self.memory_before = [allocated_memory(state) for state in old.states]
        self.memory_now = [allocated_memory(state) for state in trace.states]
        # built one host at a time (`host`, `consumed`): the placements are not needed
        self.sold = SoldStates(trace.states, demand, (), multipliers, memo)
        self.steps_of: dict[tuple[int, bool], IntArray] = {}
        self.sold_before = SoldStates(old.states, demand, (), multipliers, memo)
        self.evacuated: dict[int, list[Demand]] = {}
        self.filters: FleetIndex | None = None
        self.passed: dict[tuple[int, int, int, bool], bool] = {}
        self.rooms: dict[tuple[int, int, bool], dict[Resource, int]] = {}
        self.values: dict[tuple[int, int, bool], tuple[float, float, float]] = {}
        size = len(trace.chosen) + 1
        self.top_ids = np.full(size, -1, dtype=np.int64)
        self.prefix_ids = np.full(size, -1, dtype=np.int64)
        self.deficits = np.zeros(size, dtype=np.int64)

    def _counts_at(self, numbers: Sequence[int], count: int) -> dict[int, int]:
        """`count_at` of each host, at once where they are many."""
        if len(numbers) <= FEW_REPLACED:
            return {number: self.count_at(number, count) for number in numbers}
        taken = np.bincount(self.trace.chosen[:count], minlength=len(self.candidates) + 1)
        hosts = np.asarray(numbers, dtype=np.int64)
        positions = np.searchsorted(self.candidates, hosts)
        bounded = np.minimum(positions, max(len(self.candidates) - 1, 0))
        candidate = (positions < len(self.candidates)) & (self.candidates[bounded] == hosts)
        # a host that is not a candidate takes none: read from the extra last cell, always 0
        found = taken[np.where(candidate, positions, len(self.candidates))]
        return dict(zip(numbers, (int(value) for value in found), strict=True))

    def count_at(self, number: int, count: int, *, now: bool = True) -> int:
        """The instances the new request (`now`), or the last one, placed on the host (an index
        of the fleet) in its first `count` steps."""
        steps = self.steps_of.get((number, now))
        if steps is None:
            position = int(np.searchsorted(self.candidates, number))
            if position >= len(self.candidates) or int(self.candidates[position]) != number:
                steps = np.zeros(0, dtype=np.int64)
            else:
                chosen = self.trace.chosen if now else self.record.trace.chosen
                steps = np.flatnonzero(chosen == position)
            self.steps_of[number, now] = steps
        return int(np.searchsorted(steps, count))

    def run(self) -> tuple[int, DecisionRecord] | None:
        alignment = self.trace.alignment
        if alignment is None:
            return None
        size = len(self.trace.chosen) + 1
        last_counts = np.full(size, -1, dtype=np.int64)
        segments = np.full(size, -1, dtype=np.int64)
        for index in range(len(alignment.counts)):
            start, length = int(alignment.counts[index]), int(alignment.lengths[index])
            first = int(alignment.last_counts[index])
            last_counts[start : start + length] = np.arange(first, first + length, dtype=np.int64)
            segments[start : start + length] = index
        if (segments < 0).any():
            return None
        record = self.record
        margins = np.full(size, NOT_SHOWN, dtype=np.int64)
        starts = np.concatenate(([0], np.flatnonzero(np.diff(segments)) + 1, [size]))
        for begin, end in itertools.pairwise(starts):
            segment = int(segments[begin])
            if len(alignment.differing[segment]) > MOST_DIFFERING:
                break  # the request went another way from here: no count after is shown
            self._shown(int(begin), int(end), segment, last_counts[begin:end], margins)
        updated = DecisionRecord(
            trace=self.trace,
            reserve=record.reserve,
            margins=margins,
            top_ids=self.top_ids,
            prefix_ids=self.prefix_ids,
            deficits=self.deficits,
            tops=record.tops,
            prefixes=record.prefixes,
            decided=size - 1,
            fleet=record.fleet,
            bases=record.bases,
            known=record.known,
        )
        return self._decided_exactly(np.flatnonzero(margins == NOT_SHOWN), updated)

    def _shown(self, begin: int, end: int, segment: int, before: IntArray, margins: IntArray) -> None:
        """The margins of the counts from `begin` to `end`, matched with the last request's
        counts `before` with the same hosts differing (`NOT_SHOWN` where a count is not shown
        keeping the reserve)."""
        record = self.record
        alignment = self.trace.alignment
        assert alignment is not None
        differing = tuple(
            sorted(
                {int(self.candidates[p]) for p in alignment.differing[segment]} | set(self.changed_elsewhere)
            )
        )
        counts = self._counts_at(differing, begin)
        inside = before <= record.decided
        index = np.where(inside, before, 0)
        tops = record.top_ids[index]
        prefixes = record.prefix_ids[index]
        shown = inside & (tops >= 0)
        relevant = np.zeros(end - begin, dtype=np.int64)
        choosing = np.zeros(end - begin, dtype=np.int64)
        for top in (int(found) for found in np.unique(tops[shown])):
            here = tops == top
            if not self._same_top(record.tops[top], differing, counts):
                shown &= ~here
                continue
            if not (here & (prefixes >= 0)).any() and (record.margins[index][here] >= len(differing)).all():
                # the certificate's counts, with room for every host that differs: no need to
                # look for those that cannot move the margins
                relevant[here] = len(differing)
                continue
            # the hosts that differ and pass for a domain evacuated, as they were or as they are
            kept = int(before[np.flatnonzero(here)[0]])
            moving, choosable = self._passing(top, differing, counts, kept)
            relevant[here] = len(moving)
            choosing[here] = len(choosable)
            shown &= ~here | (record.margins[index] >= len(moving))
            for prefix in np.unique(prefixes[shown & here & (prefixes >= 0)]):
                with_prefix = here & (prefixes == prefix)
                deficit = int(record.deficits[index][with_prefix].max())
                if not self._steps_stand(record.prefixes[int(prefix)], choosable, counts, deficit):
                    shown &= ~with_prefix
        margins[begin:end] = np.where(shown, record.margins[index] - relevant, NOT_SHOWN)
        self.top_ids[begin:end] = np.where(shown, tops, -1)
        self.prefix_ids[begin:end] = np.where(shown, prefixes, -1)
        self.deficits[begin:end] = np.where(shown, record.deficits[index] + choosing, 0)

    def _passing(
        self, top: int, differing: Sequence[int], counts: Mapping[int, int], before: int
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Of the hosts that differ, those that can move the margins of the lost hosts `top`,
        and those that can move the steps of their evacuations, between the last request's
        count `before` and now. A host that passes for no domain the evacuations move, as it was
        nor as it is, is among the hosts no margin counts, and no step can choose it; one that
        passes for the same of them, with the same room left in each class, counts as it did
        in every margin; one that passes for the same with the same weigher values, in every
        step."""
        demands = self._evacuated(top)
        margins, steps = [], []
        for number in differing:
            was, now = self.count_at(number, before, now=False), counts[number]
            passed = [self._passes(number, was, demand, now=False) for demand in demands]
            passes = [self._passes(number, now, demand, now=True) for demand in demands]
            if not any(passed) and not any(passes):
                continue
            same = passed == passes
            if not same or self._room(number, was, now=False) != self._room(number, now, now=True):
                margins.append(number)
            if not same or self._values(number, was, now=False) != self._values(number, now, now=True):
                steps.append(number)
        return tuple(margins), tuple(steps)

    def _evacuated(self, top: int) -> list[Demand]:
        """The demands of the domains the evacuations of these lost hosts move, once each."""
        found = self.evacuated.get(top)
        if found is None:
            found = []
            filters = self._filters()
            keys = set()
            for number, instances in self.record.tops[top]:
                state = self.trace.states[number]
                demands = [guest.demand for guest in state.guests]
                if instances > 0:
                    demands.append(replace(self.demand, availability_zone=state.availability_zone))
                for demand in demands:
                    key = filters.key(demand)
                    if key not in keys:
                        keys.add(key)
                        found.append(demand)
            self.evacuated[top] = found
        return found

    def _filters(self) -> FleetIndex:
        """A fleet index to run the filters with (they test one host as it is)."""
        if self.filters is None:
            self.filters = self.record.fleet or FleetIndex(self.trace.states, self.memo)
        return self.filters

    def _states(self, *, now: bool) -> tuple[SoldStates, Sequence[HostState]]:
        return (self.sold, self.trace.states) if now else (self.sold_before, self.record.trace.states)

    def _passes(self, number: int, count: int, demand: Demand, *, now: bool) -> bool:
        """Whether the host with so many instances passes for the demand, in the new request
        (`now`) or the last one: for a demand the claims decide, where it passes without them
        and its room holds the demand (`FleetIndex.needs`; the instances are claims only)."""
        filters = self._filters()
        key = filters.key(demand)
        found = self.passed.get((number, count, key, now))
        if found is None:
            sold, states = self._states(now=now)
            needs = filters.needs(key, demand)
            if needs is None or count == 0:
                found = filters.passes(sold.host(states[number], count), demand, key)
            else:
                left = self._room(number, count, now=now)
                found = self._passes(number, 0, demand, now=now) and all(
                    need <= left.get(resource, need) for resource, need in needs
                )
            self.passed[number, count, key, now] = found
        return found

    def _room(self, number: int, count: int, *, now: bool) -> dict[Resource, int]:
        found = self.rooms.get((number, count, now))
        if found is None:
            sold, states = self._states(now=now)
            found = self.rooms[number, count, now] = _room_left(sold.consumed(states[number], count))
        return found

    def _same_top(self, top: Top, differing: Sequence[int], counts: Mapping[int, int]) -> bool:
        """Whether the hosts lost first are these, with the same instances: none of them differs,
        and none that differs has more allocated memory than the last of them (ties by name)."""
        if any(number in differing for number, _ in top):
            return False
        last, instances = top[-1]
        bound = (-(self.memory_before[last] + instances * self.sold_memory), self.names[last])
        return all(
            (-(self.memory_now[number] + counts[number] * self.sold_memory), self.names[number]) > bound
            for number in differing
        )

    def _values(self, number: int, count: int, *, now: bool = True) -> tuple[float, float, float]:
        """The host's weigher values with so many instances, in the new request or the last."""
        found = self.values.get((number, count, now))
        if found is None:
            sold, states = self._states(now=now)
            found = self.values[number, count, now] = clipped_values(sold.consumed(states[number], count))
        return found

    def _steps_stand(
        self, prefixes: Prefixes, differing: Sequence[int], counts: Mapping[int, int], deficit: int
    ) -> bool:
        """Whether every step of the evacuations stands with the hosts that differ in their new
        states (see the module's docstring): they are not consumed by the steps before, so each
        is as the fleet has it."""
        if not differing:
            return True
        values = {number: self._values(number, counts[number]) for number in differing}
        for steps in prefixes.values():
            for step in steps:
                if step.chosen in values or step.passed - deficit - len(differing) < 2:  # noqa: PLR2004
                    return False
                firsts = (step.tops[0][0], step.tops[1][0], step.tops[2][0])
                if any(holder < 0 or holder in values for _, holder, _ in step.tops):
                    return False
                for number, found in values.items():
                    if not self._passes(number, counts[number], step.demand, now=True):
                        continue  # neither chosen nor among the largest values now
                    if any(value > first for value, first in zip(found, firsts, strict=True)):
                        return False
                    weight = weight_of(found, firsts, self.multipliers)
                    if weight > step.weight or (weight == step.weight and number < step.chosen):
                        return False
        return True

    def _decided_exactly(
        self, counts: IntArray, updated: DecisionRecord
    ) -> tuple[int, DecisionRecord] | None:
        """The counts no margin shows, in order, decided by the evacuations (`decided_by_evacuations`,
        as `reserve_decisions` decides them) on the last computation's fleet brought to each
        (the hosts whose state or instances differ replaced, the steps that still stand kept
        from one count to the next), up to the first that breaks the reserve; None past
        `MOST_EXACT` of them. Those shown by
        the rest's rooms get their margins, for the next computation."""
        last = len(self.trace.chosen)
        fleet = updated.fleet
        if len(counts) == 0:
            return last, updated
        if fleet is None or len(self.candidates) == 0:
            return None
        if int(np.count_nonzero(counts <= self.record.decided)) > MOST_EXACT:
            # the request went another way (the hosts that differ are many): deciding every
            # count from the first costs less than as many evacuations run to the end
            return None
        fleet.memo = self.memo
        bases, known = list(updated.bases), list(updated.known)
        chosen = self.candidates[self.trace.chosen]
        prefixes: Prefixes = {}
        for count in (int(count) for count in counts[:MOST_EXACT]):
            now = np.bincount(chosen[:count], minlength=len(bases))
            states: dict[int, HostState] = {}
            more: set[int] = set()
            for number in range(len(bases)):
                base, instances = self.trace.states[number], int(now[number])
                if bases[number] is base and known[number] == instances:
                    continue
                if bases[number] is base and instances > known[number]:
                    more.add(number)
                states[number] = self.sold.host(base, instances)
                bases[number], known[number] = base, instances
            if len(states) > FEW_REPLACED:
                fleet.forget_orders()
            prefixes = replaced_hosts(fleet, states, prefixes, self.multipliers, claimed_more=more)
            memory = np.asarray(self.memory_now, dtype=np.int64) + now * self.sold_memory
            # the most allocated memory first, ties by name (the fleet's order)
            order = np.lexsort((np.arange(len(bases)), -memory))
            top = [int(number) for number in order[: updated.reserve]]
            kept, _, margin, prefixes = decided_by_evacuations(
                fleet, top, prefixes, self.multipliers, updated.reserve
            )
            fleet.prune()
            updated.fleet, updated.bases, updated.known = fleet, bases, known
            if not kept:
                updated.decided = count
                return max(count - 1, 0), updated
            if margin is not None:
                updated.tops.append(tuple((number, known[number]) for number in top))
                updated.prefixes.append(prefixes)
                updated.margins[count] = margin
                updated.top_ids[count] = len(updated.tops) - 1
                updated.prefix_ids[count] = len(updated.prefixes) - 1
                updated.deficits[count] = 0
        if len(counts) > MOST_EXACT:
            return None
        return last, updated


def _room_left(state: HostState) -> dict[Resource, int]:
    """`FleetIndex.room_left` of a host's state."""
    return {
        resource: limit // resource.placement_unit - placement_units(resource, capacity.used)
        for resource, capacity in state.capacity.resources.items()
        if (limit := capacity.limit) is not None
    }
