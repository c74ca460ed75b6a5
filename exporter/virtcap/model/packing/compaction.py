"""Compaction (Borg's packing metric, with Nova's rules): the fewest eligible hypervisors that
could hold every counted domain of the eligible hypervisors, each domain passing the scheduler's
filters where it lands (its availability zone, Placement's classes, the NUMA cells, hugepages,
devices and vGPUs).

The method (docs/packing.md, "Compaction"):

1. The eligible hypervisors (up, not stale, not in maintenance) are emptied of their counted
   domains (`emptied`); identical empty hypervisors form a type. The domains form shapes
   (shapes.py).
2. Per shape and type, the engine says how many of the shape fit an empty hypervisor of the type
   in a row (`in_a_row`: its filters, then Placement's count or, for a shape that asks for cells,
   devices or vGPUs, one instance consumed after the other).
3. An integer program over shapes, one copy of each hypervisor: how many of each shape each
   hypervisor holds, within its classes' free amounts and the count of step 2, every domain
   somewhere, the fewest hypervisors used (HiGHS, one thread, a node limit and a time limit,
   started from a first-fit packing). The lower bound: a sum bound per class and zone, the
   program with the copies of a type added up, and the configuration bound (configurations.py);
   the per-hypervisor program is solved only where they do not prove the first packing, and its
   dual bound adds to them.
4. The answer is validated domain by domain through the engine: each hypervisor kept consumes the
   domains assigned to it, largest first, each passing the filters on the hypervisor as the ones
   before left it. A domain refused there (the linear model was too optimistic about the cells,
   devices or vGPUs) is repaired: placed on another kept hypervisor, else on an unused one, and
   reported.

A domain no eligible hypervisor takes even empty stays where it is (`stuck`): its hypervisor is
kept, with it consumed first. Pending claims are not domains: the emptied hypervisors leave them
out. When every eligible hypervisor is in an availability zone and every domain is held to its
own, no domain can leave its zone: each zone is solved alone and the answers added up.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from virtcap.model.capacity import HostCapacity, flavor_fit, placement_free
from virtcap.model.host_fit import Demand
from virtcap.model.numa.cells import CellPages, HostCell
from virtcap.model.packing.configurations import Item, Kind, priced_bound
from virtcap.model.packing.milp import LinearProgram, solve
from virtcap.model.packing.part_bound import EPSILON, Certificate, PartBound, ceil_bound
from virtcap.model.packing.shapes import DomainRef, Shape, domain_shapes, shape_key
from virtcap.model.packing.sharing import Counts, HostType, spread
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler import HostState
from virtcap.model.scheduler.filters import FilterRequest, first_rejection
from virtcap.model.scheduler.host_states import consume_in_turn

COMPACT_PROGRAM_LIMIT = 20_000
"""Up to this many (hypervisor, shape) pairs, the program with one copy per hypervisor is solved
(exact on small fleets); above it, the added-up one shared out (see `sharing.spread`)."""

MAX_NODES = 1_000
"""Branch-and-bound nodes per program, past its root. The search ends here, at the same point on
any machine, unless the time limit (a safety net) comes first. Measured on 2 CPUs: a node takes
1.5 to 6 ms on a program of 40 hypervisors (the few of 200 random such fleets that reach the
limit stop within 6 s) and about 12 ms on one of 1,000, whose root alone takes about 15 s on the
benchmark's 1,000 x 50 fleet (closed there, at the root)."""


@dataclass(frozen=True, slots=True)
class Compaction:
    hypervisors: int
    """The fewest eligible hypervisors found that hold every counted domain (validated)."""
    lower_bound: int
    """Proven: no packing uses fewer (the LP relaxation, the solver's bound, a sum bound)."""
    optimal: bool
    """The solver proved its packing optimal and the validation kept it as it was."""
    assignment: Mapping[DomainRef, str]
    """Each counted domain of the eligible hypervisors, and the hypervisor it goes to."""
    kept: tuple[str, ...]
    """The hypervisors used, in the order of the states given."""
    eligible: int
    """The eligible hypervisors: up, not stale, not in maintenance."""
    shapes: int
    repaired: tuple[DomainRef, ...] = ()
    """The domains the validation moved off the hypervisor the solver gave them."""
    unplaced: tuple[DomainRef, ...] = ()
    """The domains no hypervisor took, even after repair (then `hypervisors` holds the others)."""
    stuck: tuple[DomainRef, ...] = ()
    """The domains no eligible hypervisor takes even empty: left where they are."""
    relaxation_bound: int = 0
    """The part of `lower_bound` found without the per-hypervisor program (the stuck domains'
    hypervisors, the sum bound, the added-up program and, where those did not prove the packing,
    the configuration bound: what `lower_bound()` computes), or less after an update that added
    domains: what `compaction_update` looks at after domains stopped."""
    time_limited: bool = False
    """A program stopped at the time limit, not at its node limit or its optimum: the answer may
    differ on a slower or faster machine."""
    solver_seconds: float = field(default=0.0, compare=False)
    validation_seconds: float = field(default=0.0, compare=False)
    held: Mapping[str, HostState] = field(default_factory=dict, compare=False, repr=False)
    """Each hypervisor used, as the validation left it: empty, then its domains consumed (what
    `compaction_update` places a new domain on)."""
    shape_keys: frozenset[Hashable] = field(default=frozenset(), compare=False, repr=False)
    """The shapes' `shape_key`s (`shapes` counts them)."""
    parts: tuple[PartBound, ...] = field(default=(), compare=False, repr=False)
    """Each zone part's lower bound (they add up to `lower_bound`), its domains per shape and
    what proved it: what `compaction_update` bounds a part with again."""


def eligible(states: Sequence[HostState]) -> list[HostState]:
    """The hypervisors a domain may go to: those ComputeFilter passes (up, not stale, not in
    maintenance)."""
    return [state for state in states if not state.refused_by_compute]


def emptied(state: HostState) -> HostState:
    """The hypervisor without its counted domains and pending claims: its classes, cells, pages,
    devices and vGPUs all free, its inventories as they are."""
    capacity = state.capacity
    resources = {
        resource: replace(
            rc,
            allocated_by_state={
                domain_state: 0 if domain_state in rc.counted_states else amount
                for domain_state, amount in rc.allocated_by_state.items()
            },
            claimed=0,
        )
        for resource, rc in capacity.resources.items()
    }
    within = capacity.within
    cells = tuple(_free_cell(cell) for cell in within.cells)
    pools = tuple(replace(pool, free_devices=pool.devices) for pool in within.pci_pools)
    vgpus = replace(
        capacity.vgpus, gpus=tuple(replace(gpu, used=0) for gpu in capacity.vgpus.gpus), unplaced=()
    )
    empty = HostCapacity(
        resources=resources,
        domains_by_state=capacity.domains_by_state,
        schedulable={},
        within=replace(within, cells=cells, pci_pools=pools),
        vgpus=vgpus,
        maintenance=capacity.maintenance,
    )
    return replace(state, capacity=empty, guests=(), placed=())


def _free_cell(cell: HostCell) -> HostCell:
    pages = tuple(CellPages(page.size_kib, page.total, page.reserved) for page in cell.pages)
    return replace(cell, shared_cpu_usage=0, memory_usage_mib=0, pinned_cpus=frozenset(), pages=pages)


def in_a_row(state: HostState, demand: Demand, limit: int) -> int:
    """How many instances of the demand the hypervisor takes one after the other (at most
    `limit`): none where a filter refuses the first, else Placement's count of the classes, and
    for a demand that asks for cells, devices or vGPUs, those the engine consumes in a row."""
    request = FilterRequest.of(demand)
    if limit <= 0 or first_rejection(state, request) is not None:
        return 0
    count, _ = flavor_fit(state.capacity.resources, demand.request)
    if not _has_limited_class(state, demand):
        count = limit  # nothing Placement counts limits it: the cells or devices, if any, do
    count = min(count, limit)
    if not demand.within.asks and demand.request.get(Resource.VGPU, 0) <= 0:
        return count
    fitted = 0
    while fitted < count and first_rejection(state, request) is None:
        state = consume_in_turn(state, (demand,))
        fitted += 1
    return fitted


def _has_limited_class(state: HostState, demand: Demand) -> bool:
    resources = state.capacity.resources
    return any(
        amount > 0 and (rc := resources.get(resource)) is not None and rc.free is not None
        for resource, amount in demand.request.items()
    )


def type_key(state: HostState, *, zoned: bool = True) -> Hashable:
    """What makes two empty hypervisors interchangeable for a packing: their zone (unless no
    domain is `zoned`: then no filter reads it) and inventories, cells, devices and vGPUs (not
    their names, nor what they measured)."""
    capacity = state.capacity
    inventories = tuple(
        (
            resource.placement_class,
            rc.total,
            rc.reserved,
            rc.allocation_ratio,
            rc.refused,
            rc.min_unit,
            rc.step_size,
            rc.declared_max_unit,
            rc.allocated,
        )
        for resource, rc in sorted(capacity.resources.items(), key=lambda item: item[0].placement_class)
    )
    return (
        state.availability_zone if zoned else None,
        inventories,
        repr(capacity.within),
        repr(capacity.vgpus),
        capacity.claimed_vgpus,
    )


def _host_type(states: list[HostState], shapes: Sequence[Shape]) -> HostType:
    first = states[0]
    fits = [in_a_row(first, shape.demand, shape.count) for shape in shapes]
    free = {
        resource: max(placement_free(rc), 0)
        for resource, rc in first.capacity.resources.items()
        if rc.limit is not None
    }
    return HostType(states, fits, free)


def compaction(
    states: Sequence[HostState], *, time_limit_seconds: float = 10.0, max_nodes: int = MAX_NODES
) -> Compaction:
    """The fewest of the eligible `states` that hold every counted domain of theirs (any subset
    of a fleet: a group's hypervisors give the group's compaction). Each program stops after
    `max_nodes` nodes; `time_limit_seconds` bounds them all together, the safety net. Where no
    domain can leave its availability zone, each zone is solved alone (`zone_parts`)."""
    hosts = eligible(states)
    parts = zone_parts(hosts)
    if len(parts) <= 1:
        return _compaction(hosts, time.perf_counter() + time_limit_seconds, max_nodes)
    return _by_zone(hosts, parts, time_limit_seconds, max_nodes)


def zone_parts(hosts: Sequence[HostState]) -> list[list[HostState]]:
    """The eligible hypervisors zone by zone, in the order the zones come in, when no domain can
    leave its zone: every hypervisor is in one and each of its domains is held to it (as
    `host_state` builds them). Else one part: a domain of no zone may go to any zone, and a
    hypervisor of no zone takes such domains from any zone."""
    parts: dict[str, list[HostState]] = {}
    for state in hosts:
        zone = state.availability_zone
        if zone is None or any(guest.demand.availability_zone != zone for guest in state.guests):
            return [list(hosts)]
        parts.setdefault(zone, []).append(state)
    return list(parts.values())


def _by_zone(
    hosts: Sequence[HostState], parts: Sequence[list[HostState]], time_limit_seconds: float, max_nodes: int
) -> Compaction:
    """The zones' compactions added up: apart, their packings add up to the fleet's, and so do
    their lower bounds. Each zone's programs get their own node limits, and a share of the time
    left by its hypervisors."""
    deadline = time.perf_counter() + time_limit_seconds
    answers: list[Compaction] = []
    waiting = len(hosts)
    for part in parts:
        share = _left(deadline) * len(part) / waiting
        answers.append(_compaction(part, time.perf_counter() + share, max_nodes))
        waiting -= len(part)
    used = {name for answer in answers for name in answer.kept}
    return Compaction(
        hypervisors=sum(answer.hypervisors for answer in answers),
        lower_bound=sum(answer.lower_bound for answer in answers),
        relaxation_bound=sum(answer.relaxation_bound for answer in answers),
        optimal=all(answer.optimal for answer in answers),
        assignment={member: name for answer in answers for member, name in answer.assignment.items()},
        kept=tuple(state.name for state in hosts if state.name in used),
        eligible=len(hosts),
        shapes=sum(answer.shapes for answer in answers),
        repaired=tuple(member for answer in answers for member in answer.repaired),
        unplaced=tuple(member for answer in answers for member in answer.unplaced),
        stuck=tuple(member for answer in answers for member in answer.stuck),
        time_limited=any(answer.time_limited for answer in answers),
        solver_seconds=sum(answer.solver_seconds for answer in answers),
        validation_seconds=sum(answer.validation_seconds for answer in answers),
        held={name: state for answer in answers for name, state in answer.held.items()},
        shape_keys=frozenset().union(*(answer.shape_keys for answer in answers)),
        parts=tuple(part for answer in answers for part in answer.parts),
    )


class LowerBound(NamedTuple):
    value: int
    shape_keys: frozenset[Hashable]
    """The `shape_key`s of the domains it was found for (a `Compaction`'s, met on the way)."""
    parts: tuple[PartBound, ...] = ()
    """Each zone part's (they add up to `value`)."""


def lower_bound(
    states: Sequence[HostState],
    *,
    packing: Collection[str] | None = None,
    time_limit_seconds: float = 10.0,
    max_nodes: int = MAX_NODES,
) -> LowerBound:
    """A proven lower bound on the compaction of `states` without solving it: per zone part (as
    `compaction` splits them), the largest of the stuck domains' hypervisors, the sum bound, the
    added-up program's bound and the configuration bound (not the per-hypervisor program's, which
    `compaction` may add). Given the hypervisors a `packing` uses, a part whose cheaper bounds
    already reach the hypervisors it uses there is not priced, and its pricing stops there."""
    deadline = time.perf_counter() + time_limit_seconds
    parts = tuple(
        part_lower_bound(
            part,
            None if packing is None else sum(1 for state in part if state.name in packing),
            deadline=deadline,
            max_nodes=max_nodes,
        )
        for part in zone_parts(eligible(states))
    )
    keys = frozenset(key for part in parts for key in part.counts)
    return LowerBound(sum(part.value for part in parts), keys, parts)


def part_lower_bound(
    part: Sequence[HostState], target: int | None, *, deadline: float, max_nodes: int = MAX_NODES
) -> PartBound:
    """`lower_bound` of one zone part (eligible hypervisors), priced only where its cheaper bounds
    stay below `target` (the hypervisors a packing uses there; None: always)."""
    prepared = _Prepared.of(part)
    shapes, types = prepared.shapes, prepared.types
    _, _, aggregate_bound, _ = _aggregate(shapes, types, prepared.forced, deadline, max_nodes)
    bound = prepared.bound(aggregate_bound)
    certificate = None
    if target is None or bound < target:
        # priced to the end: its prices bound the part again after the next domains stopped
        configured, certificate = prepared.configured(deadline, target if prepared.stuck else None)
        bound = max(bound, configured)
    return PartBound(tuple(state.name for state in part), bound, prepared.counts, certificate)


@dataclass(slots=True)
class _Prepared:
    """What a program is made of: the domains' shapes (the stuck ones left out), each hypervisor
    emptied (a stuck domain's consumed first), the domains' demands, the hypervisors' types."""

    shapes: tuple[Shape, ...]
    counts: dict[Hashable, int]
    """The domains per `shape_key`, stuck ones included."""
    base: dict[str, HostState]
    guests: dict[DomainRef, Demand]
    types: list[HostType]
    stuck: list[DomainRef]

    @property
    def forced(self) -> set[str]:
        """The hypervisors kept for their stuck domains."""
        return {member.hypervisor for member in self.stuck}

    def bound(self, aggregate_bound: float) -> int:
        """The largest of the stuck domains' hypervisors, the sum bound and the added-up program's."""
        return max(len(self.forced), _sum_bound(self.shapes, self.types), ceil_bound(aggregate_bound))

    @property
    def shape_keys(self) -> frozenset[Hashable]:
        return frozenset(self.counts)

    def configured(self, deadline: float, target: int | None) -> tuple[int, Certificate | None]:
        """The configuration bound (configurations.py), its search ended once it reaches `target`
        (the hypervisors of a packing, then proven optimal), and the prices that proved it (none
        where a domain is stuck: its hypervisor's kind must be used)."""
        items = [
            Item({resource: placement_units(resource, amount) for resource, amount in request.items()}, count)
            for request, count in ((shape.demand.request, shape.count) for shape in self.shapes)
        ]
        kinds = [
            Kind(
                host_type.free,
                host_type.fits,
                len(host_type.states),
                sum(1 for state in host_type.states if state.name in self.forced),
            )
            for host_type in self.types
        ]
        enough = math.inf if target is None else target - 1 + EPSILON
        priced = priced_bound(items, kinds, deadline=deadline, enough=enough)
        if self.stuck or not priced.prices:
            return ceil_bound(priced.value), None
        keys = [shape_key(shape.demand) for shape in self.shapes]
        prices = {key: price for key, price in zip(keys, priced.prices, strict=True) if price > 0}
        caps = {
            key: shape.count
            for index, (key, shape) in enumerate(zip(keys, self.shapes, strict=True))
            if key in prices and shape.count <= max(host_type.fits[index] for host_type in self.types)
        }
        return ceil_bound(priced.value), Certificate(prices, caps, priced.penalty)

    @classmethod
    def of(cls, hosts: Sequence[HostState]) -> _Prepared:
        shapes = domain_shapes(hosts)
        counts = {shape_key(shape.demand): shape.count for shape in shapes}
        base = {state.name: emptied(state) for state in hosts}
        guests = {
            DomainRef(state.name, guest.name): guest.demand for state in hosts for guest in state.guests
        }
        fullest = {state.name: -len(state.guests) for state in hosts}
        types = _types(list(base.values()), shapes, fullest)
        stuck = [
            member
            for index, shape in enumerate(shapes)
            if all(host_type.fits[index] == 0 for host_type in types)
            for member in shape.members
        ]
        if stuck:
            # each left on its hypervisor, which is kept with it consumed first, a type of its own
            by_host: dict[str, list[Demand]] = {}
            for member in stuck:
                by_host.setdefault(member.hypervisor, []).append(guests[member])
            for name, demands in by_host.items():
                base[name] = _forced(base[name], demands)
            stuck_set = set(stuck)
            movable = (
                Shape(shape.demand, tuple(m for m in shape.members if m not in stuck_set)) for shape in shapes
            )
            shapes = tuple(shape for shape in movable if shape.count)
            others = [state for state in base.values() if state.name not in by_host]
            types = _types(others, shapes, fullest) + [
                _host_type([base[name]], shapes) for name in sorted(by_host)
            ]
        return cls(shapes, counts, base, guests, types, stuck)


def _compaction(hosts: Sequence[HostState], deadline: float, max_nodes: int) -> Compaction:
    """The compaction of these eligible hypervisors as one program."""
    began = time.perf_counter()
    prepared = _Prepared.of(hosts)
    shapes, types, base, guests, stuck = (
        prepared.shapes,
        prepared.types,
        prepared.base,
        prepared.guests,
        prepared.stuck,
    )
    forced = prepared.forced
    used, holds, aggregate_bound, time_limited = _aggregate(shapes, types, forced, deadline, max_nodes)
    counts = spread(shapes, types, used, holds) if used is not None else {}
    relaxation_bound = prepared.bound(aggregate_bound)
    certificate = None
    if len(counts) > relaxation_bound:
        configured, certificate = prepared.configured(deadline, len(counts))
        relaxation_bound = max(relaxation_bound, configured)
    bounds = [relaxation_bound]
    copies = sum(len(host_type.states) for host_type in types)
    if copies * len(shapes) <= COMPACT_PROGRAM_LIMIT and len(counts) > max(bounds):
        program, columns = _program(shapes, types, forced)
        start = _compact_start(types, columns, len(program.costs), counts) if used is not None else None
        solution = solve(program, time_limit_seconds=_left(deadline), start=start, max_nodes=max_nodes)
        time_limited = time_limited or solution.time_limited
        bounds.append(ceil_bound(solution.dual_bound))
        if solution.values is not None:
            counts = _compact_counts(types, columns, solution.values)
    solved = time.perf_counter()
    planned = _planned(shapes, counts)
    for name in forced:
        planned.setdefault(name, [])
    shape_of = {member: index for index, shape in enumerate(shapes) for member in shape.members}
    outcome = _validate(hosts, base, planned, guests, shape_of)
    outcome.assignment.update((member, member.hypervisor) for member in stuck)
    validated = time.perf_counter()
    kept = tuple(state.name for state in hosts if state.name in set(outcome.assignment.values()) | forced)
    return Compaction(
        hypervisors=len(kept),
        lower_bound=max(bounds),
        optimal=len(kept) <= max(bounds) and not outcome.unplaced,
        relaxation_bound=relaxation_bound,
        assignment=outcome.assignment,
        kept=kept,
        eligible=len(hosts),
        shapes=len(shapes),
        repaired=tuple(outcome.repaired),
        unplaced=tuple(outcome.unplaced),
        stuck=tuple(stuck),
        time_limited=time_limited,
        solver_seconds=solved - began,
        validation_seconds=validated - solved,
        held={name: outcome.held[name] for name in kept if name in outcome.held},
        shape_keys=prepared.shape_keys,
        parts=(PartBound(tuple(state.name for state in hosts), max(bounds), prepared.counts, certificate),),
    )


def _left(deadline: float) -> float:
    return max(deadline - time.perf_counter(), 0.0)


def _types(states: list[HostState], shapes: Sequence[Shape], fullest: Mapping[str, int]) -> list[HostType]:
    zoned = any(shape.demand.availability_zone is not None for shape in shapes)
    grouped: dict[Hashable, list[HostState]] = {}
    for state in sorted(states, key=lambda state: fullest[state.name]):
        grouped.setdefault(type_key(state, zoned=zoned), []).append(state)
    return [_host_type(group, shapes) for group in grouped.values()]


def _forced(state: HostState, demands: Sequence[Demand]) -> HostState:
    """The state once these demands are placed whatever the filters say: a demand whose cells or
    devices do not fit still takes its classes (as a pending claim that no longer fits does)."""
    for demand in demands:
        try:
            state = consume_in_turn(state, (demand,))
        except ValueError:
            state = consume_in_turn(state, (Demand(demand.request),))
    return state


Columns = tuple[list[list[int]], list[list[dict[int, int]]]]
"""Per type, the column of each copy's "used", and per copy the column of each shape it may hold."""


def _program(
    shapes: Sequence[Shape], types: Sequence[HostType], forced: set[str]
) -> tuple[LinearProgram, Columns]:
    """minimize the copies used, each shape's domains all held, each copy within its free
    amounts and the shapes' counts in a row; identical copies used in order."""
    program = LinearProgram()
    used: list[list[int]] = []
    holds: list[list[dict[int, int]]] = []
    held: list[list[tuple[int, float]]] = [[] for _ in shapes]
    for host_type in types:
        type_used: list[int] = []
        type_holds: list[dict[int, int]] = []
        for copy, state in enumerate(host_type.states):
            opened = program.column(1.0, 1.0 if state.name in forced else 0.0, 1.0)
            columns: dict[int, int] = {}
            for index, shape in enumerate(shapes):
                fits = host_type.fits[index]
                if fits > 0:
                    columns[index] = program.column(0.0, 0.0, float(min(fits, shape.count)))
                    held[index].append((columns[index], 1.0))
            _capacity_rows(program, shapes, host_type, opened, columns)
            if copy > 0:
                program.row([(type_used[-1], 1.0), (opened, -1.0)], 0.0, math.inf)
            type_used.append(opened)
            type_holds.append(columns)
        used.append(type_used)
        holds.append(type_holds)
    for index, shape in enumerate(shapes):
        program.row(held[index], float(shape.count), float(shape.count))
    return program, (used, holds)


def _class_room(demand: Demand, free: Mapping[Resource, int]) -> float:
    """How many of the demand the linear model's class rows let onto an empty copy."""
    rooms = [
        free[resource] // units
        for resource, amount in demand.request.items()
        if resource in free and (units := placement_units(resource, amount)) > 0
    ]
    return min(rooms) if rooms else math.inf


def _aggregate(
    shapes: Sequence[Shape], types: Sequence[HostType], forced: set[str], deadline: float, max_nodes: int
) -> tuple[list[int] | None, list[dict[int, int]], float, bool]:
    """The program with the copies of a type added up: per type, how many are used and how many
    of each shape they hold together. A relaxation (any packing adds up to one of its solutions),
    small whatever the fleet's size: its optimum bounds the compaction from below, and its
    solution is what `sharing.spread` shares out among the copies."""
    program = LinearProgram()
    used: list[int] = []
    holds: list[dict[int, int]] = []
    held: list[list[tuple[int, float]]] = [[] for _ in shapes]
    for host_type in types:
        least = sum(1 for state in host_type.states if state.name in forced)
        opened = program.column(1.0, float(least), float(len(host_type.states)))
        columns: dict[int, int] = {}
        for index, shape in enumerate(shapes):
            if host_type.fits[index] > 0:
                columns[index] = program.column(0.0, 0.0, float(shape.count))
                held[index].append((columns[index], 1.0))
        _capacity_rows(program, shapes, host_type, opened, columns)
        used.append(opened)
        holds.append(columns)
    for index, shape in enumerate(shapes):
        program.row(held[index], float(shape.count), float(shape.count))
    solution = solve(program, time_limit_seconds=_left(deadline), max_nodes=max_nodes)
    relaxation = solve(program, time_limit_seconds=_left(deadline), relaxed=True)
    bound = max(solution.dual_bound, relaxation.dual_bound)
    time_limited = solution.time_limited or relaxation.time_limited
    if solution.values is None:
        return None, [], bound, time_limited
    values = solution.values
    return (
        [round(values[column]) for column in used],
        [{index: round(values[column]) for index, column in columns.items()} for columns in holds],
        bound,
        time_limited,
    )


def _capacity_rows(
    program: LinearProgram,
    shapes: Sequence[Shape],
    host_type: HostType,
    opened: int,
    columns: Mapping[int, int],
) -> None:
    """What `opened` hypervisors of the type hold at most: their classes' free amounts, and of
    each shape the count in a row where the classes alone would let more in."""
    for resource, free in host_type.free.items():
        terms = [
            (column, float(placement_units(resource, amount)))
            for index, column in columns.items()
            if (amount := shapes[index].demand.request.get(resource, 0)) > 0
        ]
        if terms:
            program.row([*terms, (opened, -float(free))], -math.inf, 0.0)
    for index, column in columns.items():
        fits = host_type.fits[index]
        if _class_room(shapes[index].demand, host_type.free) > fits:
            program.row([(column, 1.0), (opened, -float(fits))], -math.inf, 0.0)


def _compact_start(types: Sequence[HostType], columns: Columns, size: int, counts: Counts) -> list[float]:
    """The shared-out packing as a solution of the one-copy-per-hypervisor program (whose copies
    of a type are used in order)."""
    used, holds = columns
    values = [0.0] * size
    for type_index, host_type in enumerate(types):
        copy = 0
        for state in host_type.states:
            held = counts.get(state.name)
            if held is None:
                continue
            values[used[type_index][copy]] = 1.0
            for index, count in held.items():
                values[holds[type_index][copy][index]] = float(count)
            copy += 1
    return values


def _compact_counts(types: Sequence[HostType], columns: Columns, values: Sequence[float]) -> Counts:
    used, holds = columns
    counts: Counts = {}
    for type_index, host_type in enumerate(types):
        for copy, state in enumerate(host_type.states):
            if round(values[used[type_index][copy]]) == 1:
                counts[state.name] = {
                    index: round(values[column])
                    for index, column in holds[type_index][copy].items()
                    if round(values[column]) > 0
                }
    return counts


def _sum_bound(shapes: Sequence[Shape], types: Sequence[HostType]) -> int:
    """Per class, the fewest hypervisors whose free amounts add up to what the domains ask for:
    over the fleet, and zone by zone for the shapes only one zone's hypervisors take (the zones'
    hypervisors are apart, so their counts add up). The largest of the classes'."""
    zones: dict[str | None, list[int]] = {}
    for index in range(len(shapes)):
        takers = {t.first.availability_zone for t in types if t.fits[index] > 0}
        zone = takers.pop() if len(takers) == 1 else None
        zones.setdefault(zone, []).append(index)
    resources = {resource for t in types for resource in t.free}
    best = 0
    for resource in resources:
        fleet = _fewest(shapes, types, range(len(shapes)), resource, zone=None)
        by_zone = sum(
            _fewest(shapes, types, indices, resource, zone=zone)
            for zone, indices in zones.items()
            if zone is not None
        )
        best = max(best, fleet, by_zone)
    return best


def _fewest(
    shapes: Sequence[Shape],
    types: Sequence[HostType],
    indices: Sequence[int] | range,
    resource: Resource,
    *,
    zone: str | None,
) -> int:
    asked = sum(
        placement_units(resource, shapes[index].demand.request.get(resource, 0)) * shapes[index].count
        for index in indices
    )
    if asked <= 0:
        return 0
    frees = sorted(
        (
            t.free.get(resource, 0)
            for t in types
            if zone is None or t.first.availability_zone == zone
            for _ in t.states
        ),
        reverse=True,
    )
    total = 0
    for count, free in enumerate(frees, start=1):
        total += free
        if total >= asked:
            return count
    return len(frees)


def _planned(shapes: Sequence[Shape], counts: Counts) -> dict[str, list[DomainRef]]:
    """The packing as domains per hypervisor: of each shape, the domains already on a hypervisor
    stay there first, so that as few as possible move."""
    counts = {name: dict(held) for name, held in counts.items()}
    planned: dict[str, list[DomainRef]] = {name: [] for name in counts}
    for index, shape in enumerate(shapes):
        waiting: list[DomainRef] = []
        for member in shape.members:
            wanted = counts.get(member.hypervisor, {})
            if wanted.get(index, 0) > 0:
                wanted[index] -= 1
                planned[member.hypervisor].append(member)
            else:
                waiting.append(member)
        queue = iter(waiting)
        for name, wanted in counts.items():
            while wanted.get(index, 0) > 0 and (moving := next(queue, None)) is not None:
                wanted[index] -= 1
                planned[name].append(moving)
        for member in queue:  # more than the solver placed (rounding): the validation finds them a host
            planned.setdefault(member.hypervisor, []).append(member)
    return planned


@dataclass(slots=True)
class _Outcome:
    assignment: dict[DomainRef, str]
    repaired: list[DomainRef]
    unplaced: list[DomainRef]
    held: dict[str, HostState]


def _validate(
    hosts: Sequence[HostState],
    base: Mapping[str, HostState],
    planned: Mapping[str, list[DomainRef]],
    guests: Mapping[DomainRef, Demand],
    shape_of: Mapping[DomainRef, int],
) -> _Outcome:
    """Each kept hypervisor, from its base state, consumes its domains largest first, each only
    where the filters pass on the hypervisor as those before left it; a refused domain goes to
    the first kept hypervisor that passes for it, else to the first unused one that does.

    A hypervisor only ever consumes more, so one that refused a shape (domains of one demand)
    refuses it for good: each is tested once per shape, and once no hypervisor takes a shape, its
    next domains are unplaced at once. On a fleet beyond its limits, where the program's counts
    leave thousands of domains to repair, this is what keeps the validation to seconds (each
    domain tested against every hypervisor, the repair took longer than the solvers' limit)."""
    outcome = _Outcome({}, [], [], {})
    current = outcome.held
    requests: dict[int, FilterRequest] = {}

    def request_of(demand: Demand) -> FilterRequest:
        found = requests.get(id(demand))
        if found is None:
            found = requests[id(demand)] = FilterRequest.of(demand)
        return found

    refused: list[DomainRef] = []
    order = [state.name for state in hosts if state.name in planned]
    for name in order:
        state = base[name]
        members = sorted(planned[name], key=lambda member: largest_first(guests[member], member))
        for member in members:
            demand = guests[member]
            if first_rejection(state, request_of(demand)) is None:
                state = consume_in_turn(state, (demand,))
                outcome.assignment[member] = name
            else:
                refused.append(member)
        current[name] = state
    spare = [state.name for state in hosts if state.name not in current]
    refusing: dict[int, set[str]] = {}
    """Per shape, the hypervisors known to refuse it."""
    homeless: set[int] = set()
    """The shapes no hypervisor takes any more."""
    for member in sorted(refused, key=lambda member: largest_first(guests[member], member)):
        demand = guests[member]
        shape = shape_of.get(member, -1 - len(refusing))  # a stuck domain is no shape: its own
        if shape in homeless:
            outcome.unplaced.append(member)
            continue
        request = request_of(demand)
        known = refusing.setdefault(shape, set())

        def takes(
            name: str, state: HostState, request: FilterRequest = request, known: set[str] = known
        ) -> bool:
            if name in known:
                return False
            if first_rejection(state, request) is None:
                return True
            known.add(name)
            return False

        target = next((name for name in current if takes(name, current[name])), None)
        if target is None:
            target = next((name for name in spare if takes(name, base[name])), None)
            if target is not None:
                spare.remove(target)
                current[target] = base[target]
        if target is None:
            homeless.add(shape)
            outcome.unplaced.append(member)
            continue
        current[target] = consume_in_turn(current[target], (demand,))
        outcome.assignment[member] = target
        outcome.repaired.append(member)
    return outcome


def largest_first(demand: Demand, member: DomainRef) -> tuple[int, int, int, DomainRef]:
    """The order domains are placed in: the most memory first, then vCPUs, then disk, then by name."""
    request = demand.request
    return (
        -request.get(Resource.MEMORY, 0),
        -(request.get(Resource.VCPU, 0) + request.get(Resource.PCPU, 0)),
        -request.get(Resource.DISK, 0),
        member,
    )


__all__ = [
    "Compaction",
    "LowerBound",
    "compaction",
    "eligible",
    "emptied",
    "in_a_row",
    "largest_first",
    "lower_bound",
    "zone_parts",
]
