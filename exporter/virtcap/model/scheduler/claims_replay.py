"""A request for as many instances as fit (`claims_request`'s steps, count None), kept so that the
next one, on the fleet with a few hosts changed, is found from it rather than step by step: the
sellable counts place every instance that fits, 170,000 of a small flavor on the benchmark's
fleet, again after each change of one hypervisor.

Why the last request's steps can be followed: a host's weighers' values after j instances depend
on its own state and j alone, and its weight on those values and the largest of each weigher
among the candidates (`weight_of`, to the bit). So while the hosts that did not change have
taken as many instances in the new request as in the last one at some step p of it, and the
largest values are those of that step, every one of them weighs what it weighed there, and the
best of them is the one the last request chose at p (`argmax` keeps the first of equal weights:
the first of them too). The new step chooses it unless a host that differs (changed, or ahead or
behind in its count) weighs more, or as much with an earlier name. A host that differs keeps its
weight while it is not chosen and the largest values stay, so the run of steps up to the first
that one of them would take, the first the last request took on one of them, or the first after
the largest values changed, is compared in one pass over the arrays (`_run_length`) and copied
whole; the steps between runs are taken one at a time, as `claims_request` takes them.

The values of an unchanged host after each count are the last request's (kept per host in the
trace, with the count at which it had no room left), so that only the changed hosts' are
computed from their claims (`ConsumedHost`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from virtcap.model.host_fit import Demand
from virtcap.model.scheduler.claims_request import ClaimsRecord, claims_request, refuse_without_end
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.fleet_index import FleetIndex, RequestNumber
from virtcap.model.scheduler.host_states import HostState, WeigherValues
from virtcap.model.scheduler.weighers import Multipliers, weight_of

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MOST_DIFFERING = 64
"""Past this many hosts that differ from the last request, its runs are no longer looked for (each
look compares every differing host with the run): the steps are taken one at a time."""


@dataclass(frozen=True, slots=True, eq=False)
class Alignment:
    """How the counts of a request followed from the last one (`replayed_request`) match the
    last one's: after `counts[i] + j` instances (j < `lengths[i]`), the hosts that are not among
    `differing[i]` (positions) have taken as many as the last request's had after
    `last_counts[i] + j`, and the changed hosts are among those that differ. A later segment
    says the same of a count with fewer hosts that differ."""

    counts: IntArray
    last_counts: IntArray
    lengths: IntArray
    differing: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class ClaimsTrace:
    """The steps of a request for as many instances of the demand as fit, on the fleet of these
    `states`, with what the next request needs to follow them (`replayed_request`). Positions
    are the candidates' (the hosts that passed the request's filters and Placement's allocation
    candidates), in name order."""

    states: tuple[HostState, ...]
    """The fleet's states, in index order (`FleetIndex.states`): what changed is found by identity."""
    demand: Demand
    multipliers: Multipliers
    candidates: tuple[int, ...]
    """The candidates' indices in the fleet."""
    chosen: IntArray
    """Per step, the position of the host that took the instance."""
    weights: FloatArray
    """Per step, its weight."""
    top_steps: IntArray
    """The steps from which the weighers' largest values are `top_values`'s row (the first is 0)."""
    top_values: FloatArray
    values: FloatArray
    """Per position, its clipped weigher values after 0, 1, ... instances, up to `fitted`, one row
    each, from `offsets`."""
    offsets: IntArray
    fitted: IntArray
    """Per position, the instances it took: after as many, it had no room for another."""
    copied: int = 0
    """The steps copied from the last request's trace (`replayed_request`), not taken one by one."""
    follows: weakref.ReferenceType[ClaimsTrace] | None = field(default=None, repr=False)
    """The last request's trace this one was followed from, while something else keeps it."""
    alignment: Alignment | None = None
    """How its counts match the last request's (None: taken from the start)."""

    @property
    def hosts(self) -> list[int]:
        """Per step, the index in the fleet of the host chosen."""
        candidates = np.asarray(self.candidates, dtype=np.int64)
        return [int(number) for number in candidates[self.chosen]] if len(candidates) else []


def traced_request(
    fleet: FleetIndex, candidates: Sequence[int], demand: Demand, multipliers: Multipliers
) -> ClaimsTrace:
    """`claims_request` for as many as fit, every step taken, kept as a trace. Raises ValueError
    as it does."""
    record = ClaimsRecord()
    found = claims_request(fleet, candidates, demand, multipliers, count=None, record=record)
    numbers = np.asarray(candidates, dtype=np.int64)
    chosen = np.searchsorted(numbers, np.array([step.chosen for step in found.steps], dtype=np.int64))
    fitted = np.bincount(chosen, minlength=len(numbers)).astype(np.int64)
    # per position, its values before its first instance, then after each, in the order taken
    offsets = np.zeros(len(numbers), dtype=np.int64)
    offsets[1:] = np.cumsum(fitted + 1)[:-1]
    values = np.empty((len(chosen) + len(numbers), 3), dtype=np.float64)
    values[offsets] = np.array([fleet.clipped[number] for number in candidates], dtype=np.float64).reshape(
        -1, 3
    )
    order = np.argsort(chosen, kind="stable")
    starts = np.zeros(len(numbers), dtype=np.int64)
    starts[1:] = np.cumsum(fitted)[:-1]
    ranks = np.arange(len(chosen), dtype=np.int64) - starts[chosen[order]]
    values[offsets[chosen[order]] + 1 + ranks] = np.array(record.values, dtype=np.float64).reshape(-1, 3)[
        order
    ]
    # a renormalization after the last step starts no step
    starting = [
        index
        for index, step in enumerate(record.top_steps[: len(record.tops)])
        if index == 0 or step < len(chosen)
    ]
    return ClaimsTrace(
        states=tuple(fleet.states),
        demand=demand,
        multipliers=multipliers,
        candidates=tuple(candidates),
        chosen=chosen.astype(np.int64),
        weights=np.array([step.weight for step in found.steps], dtype=np.float64),
        top_steps=np.array([record.top_steps[index] for index in starting], dtype=np.int64),
        top_values=np.array([record.tops[index] for index in starting], dtype=np.float64).reshape(-1, 3),
        values=values,
        offsets=offsets,
        fitted=fitted,
    )


def replayed_request(
    fleet: FleetIndex,
    candidates: Sequence[int],
    demand: Demand,
    multipliers: Multipliers,
    last: ClaimsTrace,
) -> ClaimsTrace:
    """`traced_request` on this fleet, followed from the `last` one where it can be (the same
    steps to the bit): the same hosts by name, candidates, demand and multipliers, two
    candidates at least; from the start otherwise."""
    same = (
        len(last.states) == len(fleet.states)
        and all(old.name == new.name for old, new in zip(last.states, fleet.states, strict=True))
        and tuple(candidates) == last.candidates
        and last.demand == demand
        and last.multipliers == multipliers
        and len(candidates) > 1
    )
    if not same:
        return traced_request(fleet, candidates, demand, multipliers)
    return _Replay(fleet, demand, multipliers, last).run()


KEPT_TRACES = 64
"""The traces `Placements` keeps (the least recently followed forgotten first): one per flavor for
the fleet and for each zone, a few megabytes each at 1,000 hypervisors."""


class Placements:
    """The last trace of each request for as many as fit (by demand, multipliers and the fleet's
    hosts by name), so that the next on the same hosts is followed from it (`follow`). Used by
    one thread at a time."""

    def __init__(self) -> None:
        self._traces: list[ClaimsTrace] = []
        """The least recently followed first (a demand is not hashable: found by equality)."""

    def follow(
        self, fleet: FleetIndex, candidates: Sequence[int], demand: Demand, multipliers: Multipliers
    ) -> ClaimsTrace:
        """`replayed_request` from the last trace of this request on these hosts, else
        `traced_request`; kept for the next."""
        names = fleet.names
        last = next(
            (
                index
                for index, kept in enumerate(self._traces)
                if kept.demand == demand
                and kept.multipliers == multipliers
                and tuple(state.name for state in kept.states) == names
            ),
            None,
        )
        if last is None:
            found = traced_request(fleet, candidates, demand, multipliers)
        else:
            found = replayed_request(fleet, candidates, demand, multipliers, self._traces.pop(last))
        self._traces.append(found)
        del self._traces[:-KEPT_TRACES]
        return found


class _Replay:
    """One request's steps, as `claims_request` takes them, from the `last` request's where they
    are the same, the values of the hosts that did not change read from its trace."""

    def __init__(
        self, fleet: FleetIndex, demand: Demand, multipliers: Multipliers, last: ClaimsTrace
    ) -> None:
        self.fleet = fleet
        self.candidates = last.candidates
        self.demand = demand
        self.multipliers = multipliers
        self.key: RequestNumber = fleet.key(demand)
        needs = fleet.needs(self.key, demand)
        if needs is None:
            raise ValueError("expected a demand whose claims alone decide its fit")
        self.needs = needs
        self.amounts = fleet.amounts(self.key, demand)
        self.last = last
        size = len(self.candidates)
        self.changed = {
            position
            for position, number in enumerate(self.candidates)
            if fleet.states[number] is not last.states[number]
        }
        self.consumed: dict[int, ConsumedHost] = {}
        self.computed: dict[int, list[WeigherValues]] = {}
        """Per changed position, its values after each count (from 0)."""
        self.fitted = last.fitted.copy()
        """Per position, the count at which it has no room left (a changed one's when found)."""
        for position in self.changed:
            number = self.candidates[position]
            self.consumed[position] = ConsumedHost(number, fleet.rooms(number), fleet.room_left(number))
            self.computed[position] = [fleet.clipped[number]]
        refuse_without_end(fleet, list(self.consumed.values()), needs)
        self.counts = np.zeros(size, dtype=np.int64)
        values = [fleet.clipped[number] for number in self.candidates]
        self.columns = np.array(values, dtype=np.float64).reshape(-1, 3)
        self.factors = np.array([multipliers.ram, multipliers.cpu, multipliers.disk], dtype=np.float64)
        self.parts = (self.columns[:, 0], self.columns[:, 1], self.columns[:, 2])
        """The columns' views, for the steps' scalar reads and writes."""
        self.tops = self.columns.max(axis=0)
        self.top: WeigherValues = (float(self.tops[0]), float(self.tops[1]), float(self.tops[2]))
        self.room = np.ones(size, dtype=bool)
        self.with_room = size
        self.weights = self._weighed(np.arange(size))
        self.chosen: list[IntArray] = []
        self.chosen_weights: list[FloatArray] = []
        self.taken: list[int] = []
        self.taken_weights: list[float] = []
        """The steps taken one at a time since the last run copied (or the start)."""
        self.steps = 0
        self.copied = 0
        self.top_steps = [0]
        self.top_values = [self.tops.copy()]
        # the last request, followed: how many of its steps the new one has matched (`at`), the
        # counts at that point, and the positions whose count (or state) differs
        self.at = 0
        self.last_counts = np.zeros(size, dtype=np.int64)
        self.differing: set[int] = set(self.changed)
        self.segments: list[tuple[int, int, int, tuple[int, ...]]] = [(0, 0, 1, tuple(sorted(self.changed)))]
        """The alignment's (`Alignment`): count, the last request's count, length, differing."""

    def _weighed(self, positions: IntArray) -> FloatArray:
        """The positions' weights as `weight_of` computes them (its operations in its order: the
        same bits), -inf without room."""
        total: FloatArray = np.zeros(len(positions), dtype=np.float64)
        for part in range(3):
            top = float(self.tops[part])
            column = self.columns[positions, part]
            share = column / top if top != 0.0 else np.zeros(len(positions), dtype=np.float64)
            total = total + self.factors[part] * share
        total[~self.room[positions]] = -np.inf
        return total

    def run(self) -> ClaimsTrace:
        last = self.last
        while self.with_room > 0:
            if self.at < len(last.chosen) and len(self.differing) <= MOST_DIFFERING:
                self._skip_differing(last)
                if self._copy_run(last):
                    continue
            self._step(int(np.argmax(self.weights)))
            self._aligned(1)
        return self._trace()

    def _aligned(self, length: int) -> None:
        """The counts from `steps - length + 1` to `steps` match the last request's as its
        steps were matched (`at`), with the hosts that differ now."""
        self.segments.append(
            (self.steps - length + 1, self.at - length + 1, length, tuple(sorted(self.differing)))
        )

    def _skip_differing(self, last: ClaimsTrace) -> None:
        """The last request's steps that chose a host that differs: counted on its side only
        (the hosts that do not differ stay as they were)."""
        while self.at < len(last.chosen):
            position = int(last.chosen[self.at])
            if position not in self.differing:
                return
            self.last_counts[position] += 1
            self.at += 1
            self._differs(position)
            self._aligned(1)

    def _differs(self, position: int) -> None:
        if position in self.changed or self.counts[position] != self.last_counts[position]:
            self.differing.add(position)
        else:
            self.differing.discard(position)

    def _copy_run(self, last: ClaimsTrace) -> bool:
        """Copies the run of the last request's steps that this one takes alike, from `at`
        (`_run_length`); whether it copied any."""
        start = self.at
        if start >= len(last.chosen) or int(last.chosen[start]) in self.differing:
            return False
        index = int(np.searchsorted(last.top_steps, start, side="right"))
        if not np.array_equal(last.top_values[index - 1], self.tops):
            return False
        end = int(last.top_steps[index]) if index < len(last.top_steps) else len(last.chosen)
        length = self._run_length(last.chosen[start:end], last.weights[start:end])
        if length == 0:
            return False
        run = last.chosen[start : start + length]
        self._flush()
        self.chosen.append(run)
        self.chosen_weights.append(last.weights[start : start + length])
        self.steps += length
        self.copied += length
        self.at += length
        taken = np.bincount(run, minlength=len(self.counts))
        self.counts += taken
        self.last_counts += taken
        touched = np.flatnonzero(taken)
        offsets = last.offsets[touched] + self.counts[touched]
        self.columns[touched] = last.values[offsets]
        full = touched[self.counts[touched] >= self.fitted[touched]]
        self.room[full] = False
        self.with_room -= len(full)
        # the largest values stay: a run ends before the last host holding one here is chosen
        self.weights[touched] = self._weighed(touched)
        self._aligned(length + 1)
        return True

    def _run_length(self, chosen: IntArray, weights: FloatArray) -> int:
        """How many of these steps of the last request (its largest values the same throughout,
        as they are here now) this one takes alike: up to the first that chose a host that
        differs, the first that a host that differs (weighing what it weighs now: it is not
        chosen meanwhile) would have been chosen at, and the first after which a weigher's
        largest value would change here: the last request's kept it, but where only hosts that
        do not differ hold it here, it changes once each of them is chosen (the others holding
        it there may be hosts that differ)."""
        length = len(chosen)

        def first(position: int) -> int:
            found = np.flatnonzero(chosen[:length] == position)
            return int(found[0]) if len(found) else length

        for part in range(3):
            holding = self.columns[:, part] == self.tops[part]
            if any(holding[position] for position in self.differing):
                continue
            # the step at which the last of the holders is first chosen (none: it is not)
            steps = np.flatnonzero(holding[chosen[:length]])
            holders, firsts = np.unique(chosen[steps], return_index=True)
            if len(holders) == int(np.count_nonzero(holding)):
                length = min(length, int(steps[firsts].max()))
        for position in self.differing:
            length = min(length, first(position))
            weight = self.weights[position]
            if weight != -np.inf:
                beaten = np.flatnonzero((weight > weights) | ((weight == weights) & (position < chosen)))
                if len(beaten):
                    length = min(length, int(beaten[0]))
        return length

    def _step(self, position: int) -> None:
        """One instance on the host at `position` (the best), as `claims_request` places it."""
        self.taken.append(position)
        self.taken_weights.append(float(self.weights[position]))
        self.steps += 1
        self.counts[position] += 1
        count = int(self.counts[position])
        host = self.consumed.get(position)
        values: WeigherValues
        if host is not None:
            host.add(self.demand, self.key, self.amounts)
            values = host.clipped(self.fleet.level(host.number))
            self.computed[position].append(values)
            fits = all(need <= host.left.get(resource, need) for resource, need in self.needs)
            if not fits:
                self.fitted[position] = count
        else:
            row = self.last.values[self.last.offsets[position] + count]
            values = (float(row[0]), float(row[1]), float(row[2]))
            fits = count < self.fitted[position]
        renormalize = False
        for part, column in enumerate(self.parts):
            before = float(column[position])
            column[position] = values[part]
            if before == self.top[part] and values[part] < before:
                renormalize = True
        if not fits:
            self.room[position] = False
            self.with_room -= 1
        last = self.last
        if self.at < len(last.chosen) and int(last.chosen[self.at]) == position:
            # the step the last request took here: both sides count it
            self.last_counts[position] += 1
            self.at += 1
        self._differs(position)
        if renormalize:
            # it held a weigher's largest value: found again, and every weight with it if it changed
            found = self.columns.max(axis=0)
            if not np.array_equal(found, self.tops):
                self._renormalized(found)
                return
        self.weights[position] = weight_of(values, self.top, self.multipliers) if fits else -np.inf

    def _flush(self) -> None:
        if self.taken:
            self.chosen.append(np.array(self.taken, dtype=np.int64))
            self.chosen_weights.append(np.array(self.taken_weights, dtype=np.float64))
            self.taken, self.taken_weights = [], []

    def _renormalized(self, tops: FloatArray) -> None:
        self.tops = tops
        self.top = (float(tops[0]), float(tops[1]), float(tops[2]))
        self.top_steps.append(self.steps)
        self.top_values.append(tops.copy())
        self.weights = self._weighed(np.arange(len(self.counts)))

    def _trace(self) -> ClaimsTrace:
        self._flush()
        last = self.last
        rows: list[FloatArray] = []
        offsets = np.zeros(len(self.counts), dtype=np.int64)
        total = 0
        for position in range(len(self.counts)):
            offsets[position] = total
            computed = self.computed.get(position)
            if computed is not None:
                rows.append(np.array(computed, dtype=np.float64).reshape(-1, 3))
                total += len(computed)
            else:
                begin = int(last.offsets[position])
                rows.append(last.values[begin : begin + int(self.fitted[position]) + 1])
                total += int(self.fitted[position]) + 1
        steps = list(self.top_steps)
        values = list(self.top_values)
        # a renormalization after the last step starts no step
        while len(steps) > 1 and steps[-1] >= self.steps:
            steps.pop()
            values.pop()
        return ClaimsTrace(
            states=tuple(self.fleet.states),
            demand=self.demand,
            multipliers=self.multipliers,
            candidates=self.candidates,
            chosen=np.concatenate(self.chosen) if self.chosen else np.zeros(0, dtype=np.int64),
            weights=np.concatenate(self.chosen_weights) if self.chosen else np.zeros(0, dtype=np.float64),
            top_steps=np.array(steps, dtype=np.int64),
            top_values=np.array(values, dtype=np.float64).reshape(-1, 3),
            values=np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.float64),
            offsets=offsets,
            fitted=self.fitted.copy(),
            copied=self.copied,
            follows=weakref.ref(last),
            alignment=Alignment(
                counts=np.array([segment[0] for segment in self.segments], dtype=np.int64),
                last_counts=np.array([segment[1] for segment in self.segments], dtype=np.int64),
                lengths=np.array([segment[2] for segment in self.segments], dtype=np.int64),
                differing=tuple(segment[3] for segment in self.segments),
            ),
        )
