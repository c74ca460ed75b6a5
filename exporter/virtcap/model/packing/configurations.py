"""The configuration bound of a packing (Gilmore and Gomory's linear program over what one
hypervisor can hold): a lower bound on the fewest hypervisors, as strong as the one-copy-per-
hypervisor program's own proof on the fleets that program takes tens of seconds to close, found in
about a second by column generation.

A configuration is what one hypervisor of a kind can hold: how many of each shape, within its
classes' free amounts (Placement's unit) and each shape's count in a row, as the per-hypervisor
program lets one copy hold them. Any packing uses, on each hypervisor, one configuration of its
kind, so for any prices p >= 0 of the shapes, with v the most a configuration of kind t is worth
(sum of p times what it holds; the pricing problem, an integer program solved by HiGHS) and n the
hypervisors of kind t the packing uses (at least those kept for stuck domains, at most the kind's
hypervisors):

    sum of p * count  <=  sum over kinds of n * v  =  used + sum over kinds of n * (v - 1)
                      <=  used + sum over kinds of (copies * max(v - 1, 0) + least * min(v - 1, 0))

so `used` is at least the left side less that sum, whatever the prices. The prices are the duals
of the restricted linear program over the configurations found so far; each round adds the
configurations that price out, and the bound is the best of the rounds'. The bound is sound at any
round (it needs only the pricing's proven upper bound); the rounds only make it stronger, up to the
linear program's optimum, where no configuration prices out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from virtcap.model.packing.milp import LinearProgram, solve
from virtcap.model.resources import Resource

MAX_ROUNDS = 200
"""Rounds of column generation at most: the count, not the clock, ends a long computation, so that
the bound is the same on any machine (the deadline is a safety net). On the 1,000 x 50 benchmark's
zones (16 shapes, 3 kinds) it closes in about 20."""

REDUCED_COST_TOLERANCE = 1e-9
"""A configuration prices out when its reduced cost is below minus this."""

PRICING_NODES = 10_000
"""Branch-and-bound nodes per pricing program at most (a work limit, as `MAX_ROUNDS`): where it
stops short, its proven bound still keeps the configuration bound sound."""

PRICING_MARGIN = 1e-6
"""Added to the pricing program's proven bound: HiGHS proves it to its tolerances (about 1e-7 on
a configuration's worth, which is about 1), and the bound subtracts it once per hypervisor, so the
margin keeps the bound sound (about 1e-3 lower on 1,000 hypervisors) where an exact integer would
otherwise round up."""


_KindKey = tuple[tuple[tuple[Resource, int], ...], tuple[int, ...]]
"""What makes two kinds price alike: their free amounts and their counts in a row."""


@dataclass(frozen=True, slots=True)
class Item:
    """Domains alike (a shape): what one asks of each class in Placement's unit, and how many."""

    needs: Mapping[Resource, int]
    count: int


@dataclass(frozen=True, slots=True)
class Kind:
    """Identical hypervisors: per class with a limit what is free in Placement's unit, per item
    how many fit one in a row, how many there are, and how many a packing must use (kept for
    domains no hypervisor takes)."""

    free: Mapping[Resource, int]
    fits: Sequence[int]
    copies: int
    least: int = 0


class PricedBound(NamedTuple):
    """A configuration bound and the round that proved it: `value` is the items' counts times
    `prices` less `penalty` (the sum over kinds of the module's docstring)."""

    value: float
    prices: tuple[float, ...]
    penalty: float


def priced_bound(
    items: Sequence[Item],
    kinds: Sequence[Kind],
    *,
    deadline: float,
    enough: float = math.inf,
    max_rounds: int = MAX_ROUNDS,
) -> PricedBound:
    """A proven lower bound (fractional, `value`) on the hypervisors any packing of the items on the
    kinds uses (the module's docstring), with the prices and the penalty of its best round. Stops
    early once the bound exceeds `enough` (the caller's packing is then proven optimal: nothing
    more is needed); -inf when no round finished. On the same kinds, the same prices and penalty
    prove a bound for fewer of any item (a configuration of fewer items is one the pricing looked
    at), and for more of an item whose count was above what a hypervisor of any kind holds of it
    in a row (the count did not cap its pricing)."""
    configurations: list[tuple[int, tuple[int, ...]]] = []
    for kind_index, kind in enumerate(kinds):
        for index, item in enumerate(items):
            alone = _most_alone(item, kind, index)
            if alone > 0:
                held = [0] * len(items)
                held[index] = alone
                configurations.append((kind_index, tuple(held)))
    seen = set(configurations)
    penalty = float(sum(kind.copies for kind in kinds) + 1)
    best = PricedBound(-math.inf, (), 0.0)
    for _ in range(max_rounds):
        if time.perf_counter() >= deadline:
            break
        prices, kind_duals = _master_duals(items, kinds, configurations, penalty, deadline)
        if prices is None:
            break
        beyond = 0.0
        priced: dict[_KindKey, tuple[float, tuple[int, ...]]] = {}
        added = False
        for kind_index, kind in enumerate(kinds):
            key = (tuple(sorted(kind.free.items(), key=lambda pair: pair[0].label)), tuple(kind.fits))
            found = priced.get(key)
            if found is None:
                found = priced[key] = _price(items, kind, prices, deadline)
            worth, holding = found
            beyond += kind.copies * max(worth - 1.0, 0.0) + kind.least * min(worth - 1.0, 0.0)
            value = sum(price * count for price, count in zip(prices, holding, strict=True))
            if 1.0 - value - kind_duals[kind_index] < -REDUCED_COST_TOLERANCE:
                configuration = (kind_index, holding)
                if configuration not in seen:
                    seen.add(configuration)
                    configurations.append(configuration)
                    added = True
        bound = sum(price * item.count for price, item in zip(prices, items, strict=True)) - beyond
        if bound > best.value:
            best = PricedBound(bound, tuple(prices), beyond)
        if best.value > enough or not added:
            break
    return best


def _most_alone(item: Item, kind: Kind, index: int) -> int:
    """How many of the item one hypervisor of the kind holds with nothing else."""
    most = min(kind.fits[index], item.count)
    for resource, need in item.needs.items():
        if need > 0 and resource in kind.free:
            most = min(most, kind.free[resource] // need)
    return max(most, 0)


def _master_duals(
    items: Sequence[Item],
    kinds: Sequence[Kind],
    configurations: Sequence[tuple[int, tuple[int, ...]]],
    penalty: float,
    deadline: float,
) -> tuple[list[float] | None, list[float]]:
    """The restricted program's duals: per item its price (>= 0), per kind its row's dual.
    minimize the configurations used, each item's count covered, each kind within its copies
    (and at least its `least`); a column per item at `penalty` keeps it feasible whatever the
    configurations found so far."""
    program = LinearProgram()
    columns = [program.column(1.0, 0.0, math.inf, integer=False) for _ in configurations]
    uncovered = [program.column(penalty, 0.0, math.inf, integer=False) for _ in items]
    for index, item in enumerate(items):
        terms = [
            (column, float(held[index]))
            for column, (_, held) in zip(columns, configurations, strict=True)
            if held[index] > 0
        ]
        program.row([*terms, (uncovered[index], 1.0)], float(item.count), math.inf)
    for kind_index, kind in enumerate(kinds):
        terms = [
            (column, 1.0)
            for column, (owner, _) in zip(columns, configurations, strict=True)
            if owner == kind_index
        ]
        program.row(terms, float(kind.least), float(kind.copies))
    solution = solve(program, time_limit_seconds=max(deadline - time.perf_counter(), 0.0), relaxed=True)
    if solution.row_duals is None:
        return None, []
    duals = solution.row_duals
    return [max(dual, 0.0) for dual in duals[: len(items)]], list(duals[len(items) :])


def _price(
    items: Sequence[Item], kind: Kind, prices: Sequence[float], deadline: float
) -> tuple[float, tuple[int, ...]]:
    """The most a configuration of the kind is worth at these prices, proven (the pricing
    program's bound, so that the configuration bound stays sound where the search stops short),
    and the best configuration found."""
    program = LinearProgram()
    columns: dict[int, int] = {}
    for index, item in enumerate(items):
        most = min(kind.fits[index], item.count)
        if prices[index] > 0 and most > 0:
            columns[index] = program.column(-prices[index], 0.0, float(most))
    if not columns:
        return 0.0, (0,) * len(items)
    for resource, free in kind.free.items():
        terms = [
            (column, float(need))
            for index, column in columns.items()
            if (need := items[index].needs.get(resource, 0)) > 0
        ]
        if terms:
            program.row(terms, -math.inf, float(free))
    solution = solve(
        program, time_limit_seconds=max(deadline - time.perf_counter(), 0.0), max_nodes=PRICING_NODES
    )
    held = [0] * len(items)
    if solution.values is not None:
        for index, column in columns.items():
            held[index] = round(solution.values[column])
    found = sum(price * count for price, count in zip(prices, held, strict=True))
    proven = -solution.dual_bound if math.isfinite(solution.dual_bound) else _everything(items, kind, prices)
    return max(proven, found) + PRICING_MARGIN, tuple(held)


def _everything(items: Sequence[Item], kind: Kind, prices: Sequence[float]) -> float:
    """What a configuration is worth at most without the classes: each item as many as fit alone."""
    return sum(price * min(kind.fits[index], items[index].count) for index, price in enumerate(prices))


__all__ = ["Item", "Kind", "PricedBound", "priced_bound"]
