"""An independent check of a consolidation plan, written from Nova's and Placement's rules, not
from the planner's code: the plan's moves replayed one by one as live migrations.

Per hypervisor and class, Placement's capacity is `(total - reserved) x allocation_ratio` in the
class's Placement unit (MiB, GiB, CPUs), truncated; an allocation is whole units; a move is
accepted when the destination's usage plus the domain's allocation stays within it (and the
allocation within max_unit, the total). During a live migration both hypervisors hold the
domain (Nova's migration allocation): the destination takes it at the start of the step, the
source gives it back only at its end. The destination must be up, with fresh data, not in
maintenance, not excluded, in the zone of the source if the source has one. It reads the
hypervisors' inventories and usage (HostCapacity's numbers) and the domains' allocations (their
guests' requests), nothing else of virtcap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.model.packing.consolidation import ConsolidationPlan, Move
from virtcap.model.resources import Resource
from virtcap.model.scheduler import HostState


class BrokenPlanError(AssertionError):
    """The plan breaks a rule: the message says which move and why."""


def _units(resource: Resource, amount: int) -> int:
    unit = resource.placement_unit
    return (amount + unit - 1) // unit


@dataclass
class _Hypervisor:
    state: HostState
    capacity: dict[Resource, int] = field(default_factory=dict)
    """Per class with an inventory, Placement's capacity in its unit."""
    max_unit: dict[Resource, int] = field(default_factory=dict)
    usage: dict[Resource, int] = field(default_factory=dict)
    """Per class, what is allocated in Placement's unit."""
    domains: dict[str, Mapping[Resource, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, state: HostState) -> _Hypervisor:
        hypervisor = cls(state)
        for resource, numbers in state.capacity.resources.items():
            hypervisor.usage[resource] = _units(resource, numbers.used)
            if numbers.total is None or numbers.reserved is None:
                continue  # no inventory: the class limits nothing
            if numbers.refused is not None:
                hypervisor.capacity[resource] = hypervisor.max_unit[resource] = 0
                continue
            unit = resource.placement_unit
            usable = max(numbers.total // unit - _units(resource, numbers.reserved), 0)
            hypervisor.capacity[resource] = int(usable * numbers.allocation_ratio)
            hypervisor.max_unit[resource] = numbers.total // unit
        for guest in state.guests:
            identity = guest.uuid or guest.name
            hypervisor.domains[identity] = {r: a for r, a in guest.demand.request.items() if a > 0}
        return hypervisor

    @property
    def eligible(self) -> bool:
        state = self.state
        return state.up and not state.stale and state.capacity.maintenance is None

    def over(self) -> list[str]:
        return [
            f"{resource.placement_class} {self.usage.get(resource, 0)} > {limit}"
            for resource, limit in self.capacity.items()
            if self.usage.get(resource, 0) > limit
        ]


def replay_plan(
    states: Sequence[HostState],
    plan: ConsolidationPlan,
    *,
    exclude: frozenset[str] = frozenset(),
    availability_zone: str | None = None,
    max_moves: int | None = None,
) -> None:
    """Raise `BrokenPlanError` where a move breaks a rule, or where the plan does not end with its
    emptied hypervisors empty and no hypervisor that took a domain over its capacity."""
    hypervisors = {state.name: _Hypervisor.of(state) for state in states}
    in_scope = [
        h
        for h in hypervisors.values()
        if h.eligible and (availability_zone is None or h.state.availability_zone == availability_zone)
    ]
    holding = sum(1 for h in in_scope if h.domains)
    if plan.hypervisors_before != holding:
        raise BrokenPlanError(f"hypervisors_before {plan.hypervisors_before}, expected {holding}")
    if plan.hypervisors_after != holding - len(plan.emptied):
        raise BrokenPlanError(f"hypervisors_after {plan.hypervisors_after} with {len(plan.emptied)} emptied")
    emptied = set(plan.emptied)
    if len(emptied) != len(plan.emptied):
        raise BrokenPlanError("a hypervisor is emptied twice")
    if max_moves is not None and len(plan.moves) > max_moves:
        raise BrokenPlanError(f"{len(plan.moves)} moves, more than {max_moves}")
    for name in emptied:
        hypervisor = hypervisors.get(name)
        if hypervisor is None or hypervisor not in in_scope or name in exclude:
            raise BrokenPlanError(f"{name} may not be emptied")
    grown: set[str] = set()
    for step, move in enumerate(plan.moves):
        _migrate(hypervisors, step, move, emptied, exclude, availability_zone)
        grown.add(move.destination)
    for name in emptied:
        left = sorted(hypervisors[name].domains)
        if left:
            raise BrokenPlanError(f"{name} is emptied and still holds {', '.join(left)}")
    for name in grown:
        over = hypervisors[name].over()
        if over:
            raise BrokenPlanError(f"{name} ends over its capacity: {'; '.join(over)}")


def _migrate(
    hypervisors: Mapping[str, _Hypervisor],
    step: int,
    move: Move,
    emptied: set[str],
    exclude: frozenset[str],
    availability_zone: str | None,
) -> None:
    """One live migration: its rules tested, then the destination takes the domain while the source
    still holds it, and at the end of the step the source gives it back."""
    where = f"move {step} ({move.name}: {move.source} -> {move.destination})"
    source = hypervisors.get(move.source)
    destination = hypervisors.get(move.destination)
    if source is None or destination is None or source is destination:
        raise BrokenPlanError(f"{where}: no such pair of hypervisors")
    if move.source not in emptied:
        raise BrokenPlanError(f"{where}: moves a domain of a hypervisor the plan does not empty")
    allocation = source.domains.get(move.domain)
    if allocation is None:
        raise BrokenPlanError(f"{where}: the domain is not on its source")
    if move.domain in destination.domains:
        raise BrokenPlanError(f"{where}: the destination holds a domain of that identity already")
    if dict(move.resources) != dict(allocation):
        raise BrokenPlanError(f"{where}: resources {dict(move.resources)}, allocated {dict(allocation)}")
    if not destination.eligible or move.destination in exclude:
        raise BrokenPlanError(f"{where}: the destination takes no domain")
    if availability_zone is not None and destination.state.availability_zone != availability_zone:
        raise BrokenPlanError(f"{where}: the destination is out of the zone asked for")
    zone = source.state.availability_zone
    if zone is not None and destination.state.availability_zone != zone:
        raise BrokenPlanError(f"{where}: leaves availability zone {zone}")
    _take(destination, allocation, where)
    destination.domains[move.domain] = allocation
    # the step ends: the source gives its allocation back
    del source.domains[move.domain]
    for resource, amount in allocation.items():
        source.usage[resource] -= _units(resource, amount)


def _take(destination: _Hypervisor, allocation: Mapping[Resource, int], where: str) -> None:
    """The step begins: the destination takes the domain (the source still holds it)."""
    for resource, amount in allocation.items():
        needed = _units(resource, amount)
        limit = destination.capacity.get(resource)
        if limit is None:
            if resource in destination.state.capacity.resources:
                continue  # no inventory known: no limit (virtcap counts no total)
            raise BrokenPlanError(f"{where}: the destination has no {resource.placement_class}")
        if needed > destination.max_unit[resource]:
            raise BrokenPlanError(f"{where}: {resource.placement_class} above max_unit")
        if destination.usage.get(resource, 0) + needed > limit:
            raise BrokenPlanError(
                f"{where}: {resource.placement_class} {destination.usage.get(resource, 0)} + {needed}"
                f" > {limit}"
            )
    for resource, amount in allocation.items():
        destination.usage[resource] = destination.usage.get(resource, 0) + _units(resource, amount)
