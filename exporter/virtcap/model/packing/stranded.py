"""Stranded capacity: what a hypervisor has free that no packing of the fleet's flavors could use.

For each class with an inventory, `stranded = free - T`, where T is the most of that class any
packing could still take: a multiset of flavor instances that fits every class's free amount at
once, in Placement's units (each instance's request whole MiB, GiB...: `placement_free`), each
flavor as Placement and Nova test one instance of it:

- a flavor one instance of which Placement refuses whatever the usage (no inventory of a class it
  asks, above max_unit, below min_unit, off step_size: `inventory_refusal`) takes nothing;
- a flavor that asks for NUMA cells, hugepages, devices or vGPUs takes at most as many as fit alone
  (`HostCapacity.fit_count`, what `schedulable` counts). The joint fit of several such flavors in
  the same cells is not modelled: T may be above what they could really take together, so the
  stranded amount is then a lower bound (never reported stranded where a packing could use it).

The whole-host problem (classes only) is solved exactly: a depth-first search with bounds over
the flavors' counts, or HiGHS's MIP where the search would take too long (docs/packing.md).

A class no flavor asks for strands nothing: no packing could use it whatever else were free.

Causes: a class `s` strands `r` when, in every packing that takes the most of `r`, what is left
of `s` is below what each flavor asking for `r` needs of it: `s` alone refuses all of them one
more instance. `s` may be `r` itself (its remainder is below every flavor's share). The flavors
the cells or devices hold below their whole-host count, and those Placement refuses, do not count
in that test; where every flavor asking for `r` is refused, the causes are the classes that refuse
them. The causes may be empty: where the cells or devices hold the flavors back, or no one class
refuses them all. Checked by one more solve per class: some packing leaves `need` (the least
share) of `s` while taking T of `r` iff the most of `r` with `s`'s free amount lowered by `need`
is still T.

A hypervisor down, stale or in maintenance has no stranded capacity computed: callers filter
(`eligible`, as `fleet_stranded_capacity` does); a capacity in maintenance is refused
(ValueError), since it offers nothing at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.model.capacity import (
    HostCapacity,
    ResourceCapacity,
    flavor_fit,
    inventory_refusal,
    placement_free,
    vgpu_groups,
)
from virtcap.model.host_fit import Demand
from virtcap.model.packing.milp import INFINITY, LinearProgram, solve
from virtcap.model.resources import Resource, display_order, placement_units, request_groups
from virtcap.model.scheduler import HostState

SEARCH_NODE_LIMIT = 500
"""Nodes the exact search may visit before the problem goes to HiGHS instead: about what one
HiGHS solve costs (a few ms), measured on bench/stranded.py and 15 random flavors."""
SOLVER_TIME_LIMIT_SECONDS = 2.0
IMPLIED = -1
"""The bound of a flavor with neither cells, devices nor vGPUs: what fits is the classes' own."""


@dataclass(frozen=True, slots=True)
class StrandedCapacity:
    amounts: Mapping[Resource, int]
    """Per class with an inventory, in the class's unit as `free` (bytes, CPUs...); 0: none."""
    causes: Mapping[Resource, frozenset[Resource]]
    """Per class with a stranded amount, the classes whose exhaustion strands it (may be empty
    where the cells or devices hold the flavors back, or no one class refuses them all)."""


@dataclass(slots=True)
class StrandedCache:
    """The largest takes already solved, by problem: hypervisors of the same free amounts (and the
    cause checks of one hypervisor) solve each once. Cleared when it reaches `max_entries`."""

    max_entries: int = 200_000
    hits: int = 0
    misses: int = 0
    solver_calls: int = 0
    """Problems the search left to HiGHS."""
    _takes: dict[_Problem, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Problem:
    """Maximize `sum(n[f] x rows[f][objective])` subject to `sum(n[f] x rows[f][s]) <= free[s]`
    for every class s and `0 <= n[f] <= bounds[f]` (IMPLIED: no bound of its own), n integers."""

    rows: tuple[tuple[int, ...], ...]
    bounds: tuple[int, ...]
    free: tuple[int, ...]
    objective: int


def eligible(state: HostState) -> bool:
    """Whether a hypervisor's stranded capacity means anything: up, fresh, not in maintenance."""
    return state.up and not state.stale and state.capacity.maintenance is None


def fleet_stranded_capacity(
    states: Sequence[HostState],
    flavors: Mapping[str, Demand],
    *,
    cache: StrandedCache | None = None,
    search_node_limit: int = SEARCH_NODE_LIMIT,
) -> dict[str, StrandedCapacity]:
    """Each eligible hypervisor's stranded capacity, the problems shared through one cache."""
    cache = StrandedCache() if cache is None else cache
    return {
        state.name: stranded_capacity(
            state.capacity, flavors, cache=cache, search_node_limit=search_node_limit
        )
        for state in states
        if eligible(state)
    }


def stranded_capacity(
    capacity: HostCapacity,
    flavors: Mapping[str, Demand],
    *,
    cache: StrandedCache | None = None,
    search_node_limit: int = SEARCH_NODE_LIMIT,
) -> StrandedCapacity:
    """The hypervisor's stranded capacity and its causes (the module's docstring defines both).
    Raises ValueError for a hypervisor in maintenance: it offers nothing, so nothing is stranded."""
    if capacity.maintenance is not None:
        raise ValueError(f"no stranded capacity in maintenance ({capacity.maintenance}): it offers nothing")
    cache = StrandedCache() if cache is None else cache
    resources = capacity.resources
    names = sorted(flavors)
    refused = {name: _unit_refusals(resources, flavors[name]) for name in names}
    admitted = [name for name in names if not refused[name]]
    classes = [
        resource
        for resource in display_order(
            {r for name in admitted for r, a in flavors[name].request.items() if a > 0}
        )
        if (rc := resources.get(resource)) is not None and rc.free is not None
    ]
    free = tuple(max(placement_free(resources[resource]), 0) for resource in classes)
    rows = tuple(
        tuple(placement_units(r, flavors[name].request.get(r, 0)) for r in classes) for name in admitted
    )
    bounds: list[int] = []
    held_within: set[str] = set()
    for name in admitted:
        demand = flavors[name]
        if not demand.within.asks and not vgpu_groups(demand.request):
            bounds.append(IMPLIED)
            continue
        count = capacity.fit_count(demand).count
        bounds.append(count)
        if count < flavor_fit(resources, demand.request)[0]:
            held_within.add(name)
    solve = _Solver(cache, rows, tuple(bounds), search_node_limit)
    amounts: dict[Resource, int] = {}
    causes: dict[Resource, frozenset[Resource]] = {}
    for resource in display_order(resources):
        rc = resources[resource]
        if not _has_inventory(rc):
            continue
        askers = [name for name in names if flavors[name].request.get(resource, 0) > 0]
        if rc.free is None or rc.free <= 0 or not askers:
            amounts[resource] = 0
            continue
        if resource not in classes:  # every flavor asking for it is refused by the unit rules
            amounts[resource] = rc.free
            causes[resource] = frozenset[Resource]().union(*(refused[name] for name in askers))
            continue
        objective = classes.index(resource)
        taken = solve.largest_take(free, objective)
        amounts[resource] = rc.free - taken * resource.placement_unit
        if amounts[resource] > 0:
            counted = [
                row
                for name, row in zip(admitted, rows, strict=True)
                if row[objective] > 0 and name not in held_within
            ]
            causes[resource] = frozenset(
                cause
                for index, cause in enumerate(classes)
                if (need := min((row[index] for row in counted), default=0)) > 0
                and solve.largest_take(_lowered(free, index, need), objective) < taken
            )
    return StrandedCapacity(amounts, causes)


def _has_inventory(capacity: ResourceCapacity) -> bool:
    """A known total, and not the total 0 of a class Nova does not report (no inventory)."""
    return capacity.total is not None and (capacity.total > 0 or capacity.refused is not None)


def _unit_refusals(resources: Mapping[Resource, ResourceCapacity], demand: Demand) -> frozenset[Resource]:
    """The classes whose unit rules refuse one instance of the demand whatever the usage, each
    request group on its own and their sum (vGPUs of several groups: per group, as flavor_fit)."""
    groups = request_groups(demand.request)
    asked = [*groups] if len(groups) > 1 else []
    refusing = {
        resource
        for group in asked
        for resource, amount in group.items()
        if amount > 0 and inventory_refusal(resources.get(resource), resource, amount) is not None
    }
    several_gpus = len(vgpu_groups(demand.request)) > 1
    refusing.update(
        resource
        for resource, amount in demand.request.items()
        if amount > 0
        and not (resource is Resource.VGPU and several_gpus)
        and inventory_refusal(resources.get(resource), resource, amount) is not None
    )
    return frozenset(refusing)


def _lowered(free: tuple[int, ...], index: int, amount: int) -> tuple[int, ...]:
    return tuple(value - amount if position == index else value for position, value in enumerate(free))


class _SearchTooLargeError(Exception):
    pass


@dataclass(slots=True)
class _Solver:
    cache: StrandedCache
    rows: tuple[tuple[int, ...], ...]
    bounds: tuple[int, ...]
    search_node_limit: int

    def largest_take(self, free: tuple[int, ...], objective: int) -> int:
        """The most of class `objective` a packing takes within `free` (in Placement's units);
        -1 where even the empty packing does not fit (a free amount below 0)."""
        if min(free, default=0) < 0:
            return -1
        problem = _Problem(self.rows, self.bounds, free, objective)
        known = self.cache._takes.get(problem)
        if known is not None:
            self.cache.hits += 1
            return known
        self.cache.misses += 1
        items = _items(problem)
        try:
            taken = _search(items, free, self.search_node_limit)
        except _SearchTooLargeError:
            self.cache.solver_calls += 1
            taken = _solve_milp(items, free)
        if len(self.cache._takes) >= self.cache.max_entries:
            self.cache._takes.clear()
        self.cache._takes[problem] = taken
        return taken


@dataclass(frozen=True, slots=True)
class _Item:
    row: tuple[int, ...]
    value: int
    bound: int


def _fits(row: tuple[int, ...], free: Sequence[int]) -> int:
    """How many of the row fit in `free` (the row asks for something: its objective's share)."""
    return min(free[s] // amount for s, amount in enumerate(row) if amount > 0)


def _items(problem: _Problem) -> list[_Item]:
    """The flavors that could add to the objective, each with its bound; a flavor without a bound
    of its own that is a whole multiple of another such flavor is left out (the smaller one makes
    every packing it makes), ordered by bound so that the widest is decided last, greedily."""
    objective, free = problem.objective, problem.free
    candidates: list[tuple[tuple[int, ...], int, bool]] = []
    for row, bound in zip(problem.rows, problem.bounds, strict=True):
        if row[objective] <= 0:
            continue
        fits = _fits(row, free)
        most = fits if bound == IMPLIED else min(bound, fits)
        if most > 0:
            candidates.append((row, most, bound == IMPLIED))
    kept = [
        (row, most)
        for index, (row, most, plain) in enumerate(candidates)
        if not (
            plain
            and any(
                other_plain and _multiple_of(row, other, strictly=other_index > index)
                for other_index, (other, _, other_plain) in enumerate(candidates)
                if other_index != index
            )
        )
    ]
    kept.sort(key=lambda item: (item[1], item[0]))
    return [_Item(row, row[objective], most) for row, most in kept]


def _multiple_of(row: tuple[int, ...], other: tuple[int, ...], *, strictly: bool) -> bool:
    """Whether `row` is k x `other` for a whole k >= 2 (>= 1 unless `strictly`: of two equal rows
    the first is kept)."""
    ratios = {a // b for a, b in zip(row, other, strict=True) if b > 0}
    if len(ratios) != 1 or any((a > 0) != (b > 0) for a, b in zip(row, other, strict=True)):
        return False
    (k,) = ratios
    return k >= (2 if strictly else 1) and all(a == k * b for a, b in zip(row, other, strict=True))


def _search(items: Sequence[_Item], free: tuple[int, ...], node_limit: int) -> int:
    """The exact optimum by depth-first search over the counts, largest first: the last flavor's
    count is the most that fits; a branch whose bound cannot beat the best is cut. The bound of
    what flavors from `level` on could add: the least of what each could take alone summed, and
    per class the free amount times the best ratio of value to that class (the LP bound of a
    single constraint), each rounded down to the values' greatest common divisor."""
    if not items:
        return 0
    last = len(items) - 1
    divisors = [math.gcd(*(item.value for item in items[level:])) for level in range(len(items))]
    best = 0
    nodes = 0

    def bound(level: int, left: Sequence[int]) -> int:
        rest = items[level:]
        total = sum(item.value * min(item.bound, _fits(item.row, left)) for item in rest)
        for s, amount in enumerate(left):
            if all(item.row[s] > 0 for item in rest):
                total = min(total, max(amount * item.value // item.row[s] for item in rest))
        return total - total % divisors[level]

    ceiling = bound(0, free)

    def visit(level: int, left: tuple[int, ...], value: int) -> bool:
        """Whether the best reached the ceiling (then the search is over)."""
        nonlocal best, nodes
        nodes += 1
        if nodes > node_limit:
            raise _SearchTooLargeError
        item = items[level]
        most = min(item.bound, _fits(item.row, left))
        if level == last:
            best = max(best, value + item.value * most)
            return best >= ceiling
        for count in range(most, -1, -1):
            after = tuple(amount - count * share for amount, share in zip(left, item.row, strict=True))
            reached = value + item.value * count
            if reached + bound(level + 1, after) <= best:
                continue
            if visit(level + 1, after, reached):
                return True
        return False

    visit(0, free, 0)
    return best


def _solve_milp(items: Sequence[_Item], free: tuple[int, ...]) -> int:
    """The optimum from HiGHS's MIP (model/packing/milp.py: one thread, a zero gap, a time
    limit); past the limit, the proven bound (so the stranded amount is never above the truth)."""
    program = LinearProgram()
    columns = [program.column(-item.value, 0.0, float(item.bound)) for item in items]
    for s, limit in enumerate(free):
        program.row(
            [
                (column, float(item.row[s]))
                for column, item in zip(columns, items, strict=True)
                if item.row[s]
            ],
            -INFINITY,
            float(limit),
        )
    solution = solve(program, time_limit_seconds=SOLVER_TIME_LIMIT_SECONDS)
    counts = [round(value) for value in solution.values] if solution.values is not None else [0] * len(items)
    used = [
        sum(count * item.row[s] for count, item in zip(counts, items, strict=True)) for s in range(len(free))
    ]
    found = sum(count * item.value for count, item in zip(counts, items, strict=True))
    feasible = all(amount <= limit for amount, limit in zip(used, free, strict=True))
    if solution.optimal and feasible:
        return found
    # not proven (time limit) or rounded out of bounds: the proven bound, rounded down (with none
    # proven, every flavor at its own bound: still never below the optimum)
    if math.isfinite(solution.dual_bound):
        proven = math.floor(-solution.dual_bound + 1e-6)
    else:
        proven = sum(item.value * item.bound for item in items)
    return max(proven, found if feasible else 0)
