"""A compaction brought up to date after domains started, stopped or were resized, without solving
it again, where that is exact: the answer any optimal solve of the new states gives.

Domains started: a compaction's lower bound holds for any larger set of domains on the same
hypervisors (each bound is the optimum of a relaxation, the LP, the added-up program, the sum of a
class, whose every constraint only tightens as domains are added), so the new optimum is at least
the old bound. When the last compaction was proven optimal (it used as many hypervisors as its
bound) and the new domains all pass the scheduler's filters on hypervisors it already uses, as
their domains left them, the packing with them added is still optimal: it uses the same number,
which no packing can go below. That costs milliseconds, where solving the fleet again takes tens
of seconds.

Domains stopped (or resized: stopped, then started with their new demand): the last packing
without them still fits (a hypervisor that loses domains only gains room; each one that held them
consumes the rest again, in the validation's order, through the filters), but the old bound no
longer holds where domains were lost. A zone part that lost none keeps its bound. One that did is
bounded by the prices that proved its configuration bound last time (part_bound.py's
`Certificate`: a sum over its shapes, no program), and where they no longer prove the hypervisors
the packing uses there, computed again (`part_lower_bound`: the sum bound, the added-up program
and the configuration bound, about a second on a zone of the benchmark's 500 hypervisors, where
the per-hypervisor program takes tens). When the packing uses no more hypervisors than the parts'
bounds add up to, it is optimal, and is the answer. Where the bound was already below the packing
before (only the per-hypervisor program's search closed the gap), nothing is computed: domains
stopped only lower it.

Anything else is solved again (`None`): a hypervisor that came, went, changed its inventories or
its eligibility, a last compaction not proven optimal, a domain the packing cannot take without a
hypervisor more, or a packing the new bound does not prove (whether one hypervisor fewer now
suffices is for the solver).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from itertools import chain, repeat

from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import (
    Compaction,
    eligible,
    emptied,
    largest_first,
    part_lower_bound,
    type_key,
    zone_parts,
)
from virtcap.model.packing.part_bound import PartBound
from virtcap.model.packing.shapes import DomainRef, shape_key
from virtcap.model.scheduler import HostState
from virtcap.model.scheduler.filters import FilterRequest, first_rejection
from virtcap.model.scheduler.host_states import consume_in_turn

BOUND_SECONDS = 10.0
"""The safety net of the parts bounded again, all together (as `lower_bound`'s)."""


def compaction_update(
    previous: Compaction, before: Sequence[HostState], states: Sequence[HostState]
) -> Compaction | None:
    """The compaction of `states`, from `previous`, the compaction of `before` (the same
    hypervisors, in the same order), when only domains started, stopped or were resized and the
    answer is still proven optimal; None where the states must be solved again (see the module's
    docstring)."""
    began = time.perf_counter()
    if not previous.optimal or previous.unplaced or previous.stuck or not previous.held:
        return None
    old, new = eligible(before), eligible(states)
    if [state.name for state in old] != [state.name for state in new]:
        return None
    added: list[tuple[DomainRef, Demand]] = []
    removed: list[tuple[DomainRef, Demand]] = []
    for was, now in zip(old, new, strict=True):
        if was is now:
            continue
        if type_key(emptied(was)) != type_key(emptied(now)):
            return None  # its zone, inventories, cells, devices or vGPUs changed
        found = _changed(was, now)
        if found is None:
            return None
        removed.extend(found[0])
        added.extend(found[1])
    if not added and not removed:
        return previous  # pending claims or hypervisors no domain may go to: nothing it reads
    held = dict(previous.held)
    assignment = dict(previous.assignment)
    if removed and not _release([member for member, _ in removed], new, held, assignment):
        return None
    requests: dict[int, FilterRequest] = {}
    for member, demand in sorted(added, key=lambda item: largest_first(item[1], item[0])):
        request = requests.setdefault(id(demand), FilterRequest.of(demand))
        own = [member.hypervisor] if member.hypervisor in held else []
        target = next(
            (
                name
                for name in (*own, *previous.kept)
                if name in held and first_rejection(held[name], request) is None
            ),
            None,
        )
        if target is None:
            return None
        held[target] = consume_in_turn(held[target], (demand,))
        assignment[member] = target
    kept = tuple(name for name in previous.kept if name in held)
    if removed and not added and previous.relaxation_bound < len(kept):
        return None  # fewer domains never raise that bound: it cannot prove the packing now
    counted = _counted(previous.parts, new, removed, added)
    if removed:
        parts = _bounded(counted, kept)
        bound, keys = sum(part.value for part in parts), frozenset(k for p in parts for k in p.counts)
    else:
        lasts = [part for _, _, part in counted]
        parts = tuple(part for part in lasts if part is not None) if None not in lasts else ()
        bound, keys = previous.lower_bound, previous.shape_keys | {shape_key(d) for _, d in added}
    if len(kept) > bound:
        return None
    return Compaction(
        hypervisors=len(kept),
        lower_bound=bound,
        optimal=True,
        relaxation_bound=previous.relaxation_bound if not removed else bound,
        assignment=assignment,
        kept=kept,
        eligible=previous.eligible,
        shapes=len(keys),
        repaired=tuple(member for member in previous.repaired if member in assignment),
        validation_seconds=time.perf_counter() - began,
        held=held,
        shape_keys=keys,
        parts=parts,
    )


def _release(
    removed: Sequence[DomainRef],
    states: Sequence[HostState],
    held: dict[str, HostState],
    assignment: dict[DomainRef, str],
) -> bool:
    """The packing without the removed domains: each hypervisor that held one consumes the rest
    of its domains again from empty, in the validation's order, each through the filters; one it
    no longer holds is dropped. False where a domain is not in the packing or is refused (the
    cells' greedy fit can place differently once a domain before it is gone)."""
    losing: set[str] = set()
    for member in removed:
        target = assignment.pop(member, None)
        if target is None or target not in held:
            return False
        losing.add(target)
    by_name = {state.name: state for state in states}
    demands = {DomainRef(state.name, guest.name): guest.demand for state in states for guest in state.guests}
    staying: dict[str, list[DomainRef]] = {name: [] for name in losing}
    for member, target in assignment.items():
        if target in staying:
            if member not in demands:
                return False  # not a domain of these states: the packing is not theirs
            staying[target].append(member)
    requests: dict[int, FilterRequest] = {}
    for name, members in staying.items():
        if not members:
            del held[name]
            continue
        state = emptied(by_name[name])
        for member in sorted(members, key=lambda member: largest_first(demands[member], member)):
            demand = demands[member]
            request = requests.setdefault(id(demand), FilterRequest.of(demand))
            if first_rejection(state, request) is not None:
                return False
            state = consume_in_turn(state, (demand,))
        held[name] = state
    return True


def _counted(
    parts: Sequence[PartBound],
    states: Sequence[HostState],
    removed: Sequence[tuple[DomainRef, Demand]],
    added: Sequence[tuple[DomainRef, Demand]],
) -> list[tuple[list[HostState], bool, PartBound | None]]:
    """The zone parts of `states`, each with whether it lost domains of a shape and the last bound
    of the same hypervisors with their domains counted again (None where the last compaction had
    no such part: its zones or the domains held to them changed)."""
    change: dict[str, Counter[Hashable]] = {}
    for (member, demand), step in chain(zip(removed, repeat(-1)), zip(added, repeat(1))):
        change.setdefault(member.hypervisor, Counter())[shape_key(demand)] += step
    last = {part.hosts: part for part in parts}
    found: list[tuple[list[HostState], bool, PartBound | None]] = []
    for members in zone_parts(states):
        names = tuple(state.name for state in members)
        part = last.get(names)
        moved: Counter[Hashable] = Counter()
        for name in names:
            moved.update(change.get(name, {}))
        if part is not None and moved:
            counts = Counter(part.counts)
            counts.update(moved)
            part = replace(part, counts={key: count for key, count in counts.items() if count > 0})
        found.append((members, any(step < 0 for step in moved.values()), part))
    return found


def _bounded(
    counted: Sequence[tuple[list[HostState], bool, PartBound | None]], kept: Sequence[str]
) -> tuple[PartBound, ...]:
    """Each zone part's lower bound after domains stopped (`_counted`'s parts): the last one where
    it lost no domain of any shape (a bound holds for more domains), else the last prices where
    they prove the hypervisors the packing uses there (`Certificate`), else computed again
    (`part_lower_bound`)."""
    using = set(kept)
    deadline = time.perf_counter() + BOUND_SECONDS
    bounded = []
    for members, lost, last in counted:
        target = sum(1 for state in members if state.name in using)
        part = last
        if last is not None and lost:
            proven = None if last.certificate is None else last.certificate.bound(last.counts)
            part = None if proven is None or proven < target else replace(last, value=proven)
        bounded.append(part or part_lower_bound(members, target, deadline=deadline))
    return tuple(bounded)


def _changed(
    was: HostState, now: HostState
) -> tuple[list[tuple[DomainRef, Demand]], list[tuple[DomainRef, Demand]]] | None:
    """The domains `was` had that `now` has not or has with another demand (removed), and those
    `now` has that `was` had not or had with another demand (added); None where two domains of
    one name cannot be told apart."""
    before: Mapping[str, Demand] = {guest.name: guest.demand for guest in was.guests}
    after = {guest.name: guest.demand for guest in now.guests}
    if len(before) != len(was.guests) or len(after) != len(now.guests):
        return None
    removed = [
        (DomainRef(was.name, name), demand) for name, demand in before.items() if after.get(name) != demand
    ]
    added = [
        (DomainRef(now.name, name), demand) for name, demand in after.items() if before.get(name) != demand
    ]
    return removed, added


__all__ = ["compaction_update"]
