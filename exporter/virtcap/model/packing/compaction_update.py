"""A compaction brought up to date after domains started, without solving it again, where that is
exact: the answer any optimal solve of the new states gives.

A compaction's lower bound holds for any larger set of domains on the same hypervisors: each
bound is the optimum of a relaxation (the LP, the added-up program, the sum of a class) whose
every constraint only tightens as domains are added, so the new optimum is at least the old bound.
So when the last compaction was proven optimal (it used as many hypervisors as its bound), and the
new domains all pass the scheduler's filters on hypervisors it already uses, as their domains left
them, the packing with them added is still optimal: it uses the same number, which no packing can
go below. That is what a domain started costs: milliseconds, where solving the fleet again takes
tens of seconds.

Anything else is solved again (`None`): a domain stopped, moved or resized (the bound may then be
below the new optimum, and only a solve tells whether one hypervisor fewer now suffices), a
hypervisor that came, went, changed its inventories or its eligibility, a last compaction not
proven optimal, or a new domain no hypervisor in use takes (whether one more is needed is again
for the solver).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import Compaction, eligible, emptied, largest_first, type_key
from virtcap.model.packing.shapes import DomainRef, shape_key
from virtcap.model.scheduler import HostState
from virtcap.model.scheduler.filters import FilterRequest, first_rejection
from virtcap.model.scheduler.host_states import consume_in_turn


def compaction_update(
    previous: Compaction, before: Sequence[HostState], states: Sequence[HostState]
) -> Compaction | None:
    """The compaction of `states`, from `previous`, the compaction of `before` (the same
    hypervisors, in the same order), when only domains were added and each of them fits a
    hypervisor `previous` uses; None where the states must be solved again (see the module's
    docstring)."""
    began = time.perf_counter()
    if not previous.optimal or previous.unplaced or previous.stuck or not previous.held:
        return None
    old, new = eligible(before), eligible(states)
    if [state.name for state in old] != [state.name for state in new]:
        return None
    added: list[tuple[DomainRef, Demand]] = []
    for was, now in zip(old, new, strict=True):
        if was is now:
            continue
        if type_key(emptied(was)) != type_key(emptied(now)):
            return None  # its zone, inventories, cells, devices or vGPUs changed
        found = _added(was, now)
        if found is None:
            return None
        added.extend(found)
    if not added:
        return previous  # pending claims or hypervisors no domain may go to: nothing it reads
    held = dict(previous.held)
    assignment = dict(previous.assignment)
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
    keys = previous.shape_keys | {shape_key(demand) for _, demand in added}
    return Compaction(
        hypervisors=previous.hypervisors,
        lower_bound=previous.lower_bound,
        optimal=True,
        assignment=assignment,
        kept=previous.kept,
        eligible=previous.eligible,
        shapes=len(keys),
        repaired=previous.repaired,
        validation_seconds=time.perf_counter() - began,
        held=held,
        shape_keys=keys,
    )


def _added(was: HostState, now: HostState) -> list[tuple[DomainRef, Demand]] | None:
    """The domains `now` has that `was` did not; None where one `was` had is gone or changed."""
    before: Mapping[str, Demand] = {guest.name: guest.demand for guest in was.guests}
    after = {guest.name: guest.demand for guest in now.guests}
    if len(before) != len(was.guests) or len(after) != len(now.guests):
        return None  # two domains of one name: not told apart
    if any(after.get(name) != demand for name, demand in before.items()):
        return None
    return [(DomainRef(now.name, name), demand) for name, demand in after.items() if name not in before]


__all__ = ["compaction_update"]
