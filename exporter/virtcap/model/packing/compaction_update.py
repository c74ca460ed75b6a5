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
longer holds. A new one is computed (`lower_bound`: the sum bound, the added-up program and the
configuration bound, about a second on a zone of the benchmark's 500 hypervisors, where the
per-hypervisor program takes tens): when the packing uses no more hypervisors than it, the packing
is optimal, and is the answer. Where that bound was already below the packing before (only the
per-hypervisor program's search closed the gap), it is not computed: domains stopped only lower
it.

Anything else is solved again (`None`): a hypervisor that came, went, changed its inventories or
its eligibility, a last compaction not proven optimal, a domain the packing cannot take without a
hypervisor more, or a packing the new bound does not prove (whether one hypervisor fewer now
suffices is for the solver).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import (
    Compaction,
    eligible,
    emptied,
    largest_first,
    lower_bound,
    type_key,
)
from virtcap.model.packing.shapes import DomainRef, shape_key
from virtcap.model.scheduler import HostState
from virtcap.model.scheduler.filters import FilterRequest, first_rejection
from virtcap.model.scheduler.host_states import consume_in_turn


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
    removed: list[DomainRef] = []
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
    if removed and not _release(removed, new, held, assignment):
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
    if removed:
        bound, keys = lower_bound(states, packing=kept)
    else:
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


def _changed(was: HostState, now: HostState) -> tuple[list[DomainRef], list[tuple[DomainRef, Demand]]] | None:
    """The domains `was` had that `now` has not or has with another demand (removed), and those
    `now` has that `was` had not or had with another demand (added); None where two domains of
    one name cannot be told apart."""
    before: Mapping[str, Demand] = {guest.name: guest.demand for guest in was.guests}
    after = {guest.name: guest.demand for guest in now.guests}
    if len(before) != len(was.guests) or len(after) != len(now.guests):
        return None
    removed = [DomainRef(was.name, name) for name, demand in before.items() if after.get(name) != demand]
    added = [
        (DomainRef(now.name, name), demand) for name, demand in after.items() if before.get(name) != demand
    ]
    return removed, added


__all__ = ["compaction_update"]
