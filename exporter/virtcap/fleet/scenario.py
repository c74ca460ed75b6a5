"""What-if scenarios: every answer virtcap gives about the fleet, computed before and after a
scenario (model/scenario/: hypervisors added, removed or drained, policies changed, demand
placed), and the fewest hypervisors of the scenario's kind to add so that its demand fits
(`solve_for_added`). Pure computation on the states given: nothing here reads the exporter's
state or changes it; service/scenarios.py feeds it an audit or the exporter's snapshots."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.fleet.packing import FLEET_COMPACTION_SECONDS, CompactionSummary
from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import compaction
from virtcap.model.packing.sellable import sellable_by_zone, sellable_count
from virtcap.model.packing.stranded import fleet_stranded_capacity
from virtcap.model.resources import Resource
from virtcap.model.scenario.hosts import AppliedScenario, PlannedHost, apply_scenario
from virtcap.model.scenario.placement import (
    Move,
    Placed,
    PlacedDemand,
    UnplacedDemand,
    place_demand,
    rehome,
)
from virtcap.model.scenario.spec import MAX_ADDED_HYPERVISORS, Scenario
from virtcap.model.scheduler import HostState, Multipliers
from virtcap.model.scheduler.failure_tolerance import tolerated_failures
from virtcap.model.scheduler.filters import CandidateMemo


@dataclass(frozen=True, slots=True)
class FleetAnswers:
    """The fleet's answers as the exporter gives them, on one set of states."""

    hypervisors: int
    eligible: int
    """Up, fresh, not in maintenance: those a domain may go to."""
    schedulable: Mapping[str, int]
    """Per flavor, the instances that still fit, each hypervisor counted alone (as
    `hypervisor_schedulable_instances`), summed over the eligible ones."""
    schedulable_by_zone: Mapping[tuple[str, str], int]
    sellable: Mapping[str, int]
    """Per flavor, the instances the fleet can still take keeping the reserve (docs/packing.md)."""
    sellable_by_zone: Mapping[tuple[str, str], int]
    failures_tolerated: int
    failure_bound: int
    stranded: Mapping[Resource, int]
    """Per class, the stranded capacity of the eligible hypervisors summed, in the class's unit."""
    compaction: CompactionSummary | None


@dataclass(frozen=True, slots=True)
class ScenarioSettings:
    flavors: Mapping[str, Demand]
    multipliers: Multipliers
    reserve_host_failures: int
    failure_bound: int
    """`scheduler.failure_tolerance.max_host_failures`: the most lost hypervisors tried."""


@dataclass(frozen=True, slots=True)
class ScenarioOutcome:
    before: FleetAnswers
    after: FleetAnswers
    applied: AppliedScenario
    moves: tuple[Move, ...]
    unplaced: tuple[UnplacedDemand, ...]
    placed: tuple[PlacedDemand, ...]
    reserve_host_failures: int
    added_count: int | None = None
    """With `solve_for_added`: the copies of the scenario's hypervisors it found (None otherwise)."""
    tries: tuple[tuple[int, bool], ...] = ()
    """With `solve_for_added`: each count tried and whether the demand fitted with the reserve."""
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SoldAnswers:
    """The sellable instances, per flavor in the fleet and per (zone, flavor): the longest of the
    answers, computed apart where a second process can take them (service/scenarios.py)."""

    sellable: Mapping[str, int]
    by_zone: Mapping[tuple[str, str], int]


SoldUnit = tuple[str | None, str]
"""One sellable count: (availability zone, flavor), the zone None for the fleet."""


def sold_units(states: Sequence[HostState], settings: ScenarioSettings) -> list[SoldUnit]:
    """The sellable counts the answers hold: each flavor in the fleet, then in each zone."""
    zones = sorted({state.availability_zone for state in states if state.availability_zone is not None})
    return [(None, flavor) for flavor in settings.flavors] + [
        (zone, flavor) for zone in zones for flavor in settings.flavors
    ]


def sold_unit(states: Sequence[HostState], settings: ScenarioSettings, reserve: int, unit: SoldUnit) -> int:
    """One sellable count, as the exporter's packing step computes it (fleet/packing.py)."""
    zone, flavor = unit
    demand = settings.flavors[flavor]
    if zone is None:
        return sellable_count(states, demand, settings.multipliers, reserve, memo=CandidateMemo())
    members = [state for state in states if state.availability_zone == zone]
    return sellable_by_zone(members, {flavor: demand}, settings.multipliers, reserve)[zone, flavor]


def sold_from(counts: Mapping[SoldUnit, int]) -> SoldAnswers:
    return SoldAnswers(
        {flavor: count for (zone, flavor), count in counts.items() if zone is None},
        {(zone, flavor): count for (zone, flavor), count in counts.items() if zone is not None},
    )


def sold_answers(states: Sequence[HostState], settings: ScenarioSettings, reserve: int) -> SoldAnswers:
    """Per flavor, the sellable instances in the fleet and in each zone."""
    return sold_from(
        {unit: sold_unit(states, settings, reserve, unit) for unit in sold_units(states, settings)}
    )


def fleet_answers(
    states: Sequence[HostState],
    settings: ScenarioSettings,
    reserve: int,
    *,
    sold: Callable[[], SoldAnswers] | None = None,
) -> FleetAnswers:
    """Every answer on these states, each as the exporter computes it (the packing's as its worker's
    steps, fleet/packing.py, without group compactions: a scenario's groups are its zones). `sold`:
    the sellable instances where the caller computes them elsewhere, read once the rest is done."""
    eligible = [state for state in states if not state.refused_by_compute]
    zones = sorted({state.availability_zone for state in eligible if state.availability_zone is not None})
    schedulable = {
        flavor: sum(state.capacity.fit_count(demand).count for state in eligible)
        for flavor, demand in settings.flavors.items()
    }
    by_zone = {
        (zone, flavor): sum(
            state.capacity.fit_count(demand).count for state in eligible if state.availability_zone == zone
        )
        for zone in zones
        for flavor, demand in settings.flavors.items()
    }
    stranded: dict[Resource, int] = {}
    for found in fleet_stranded_capacity(states, settings.flavors).values():
        for resource, amount in found.amounts.items():
            stranded[resource] = stranded.get(resource, 0) + amount
    compacted = CompactionSummary.of(compaction(states, time_limit_seconds=FLEET_COMPACTION_SECONDS))
    tolerated = tolerated_failures(states, settings.failure_bound, settings.multipliers)
    found_sold = sold() if sold is not None else sold_answers(states, settings, reserve)
    return FleetAnswers(
        hypervisors=len(states),
        eligible=len(eligible),
        schedulable=schedulable,
        schedulable_by_zone=by_zone,
        sellable=dict(found_sold.sellable),
        sellable_by_zone=dict(found_sold.by_zone),
        failures_tolerated=tolerated,
        failure_bound=settings.failure_bound,
        stranded=stranded,
        compaction=compacted,
    )


def scenario_fleet(
    hosts: Sequence[PlannedHost], scenario: Scenario, multipliers: Multipliers
) -> tuple[AppliedScenario, Placed]:
    """The fleet after the scenario: its changes applied, the leaving hypervisors' domains re-homed,
    then its demand placed. Raises ValueError (`key: why`) where the changes do not apply."""
    applied = apply_scenario(hosts, scenario)
    moved = rehome(applied, multipliers)
    placed = place_demand(moved.states, scenario.demand, multipliers)
    return applied, Placed(placed.states, moved.moves, placed.unplaced, placed.placed)


def run_scenario(
    hosts: Sequence[PlannedHost],
    scenario: Scenario,
    settings: ScenarioSettings,
    *,
    before: Callable[[], FleetAnswers] | None = None,
    sold_elsewhere: Callable[[Sequence[HostState], int], Callable[[], SoldAnswers]] | None = None,
) -> ScenarioOutcome:
    """The scenario's answers before and after (`fleet_answers` of the fleet as given, and of the
    fleet it makes). `before`: the answers before, where the caller computes them elsewhere (they
    do not depend on the scenario but for its reserve: `scenario_reserve`), read once after's are;
    `sold_elsewhere`: given the fleet after and the reserve, the sellable instances after, computed
    elsewhere while the rest of the answers after are computed here."""
    began = time.perf_counter()
    reserve = scenario_reserve(scenario, settings)
    applied, placed = scenario_fleet(hosts, scenario, settings.multipliers)
    sold = sold_elsewhere(placed.states, reserve) if sold_elsewhere is not None else None
    after = fleet_answers(placed.states, settings, reserve, sold=sold)
    if before is None:
        before_answers = fleet_answers([host.state() for host in hosts], settings, reserve)
    else:
        before_answers = before()
    return ScenarioOutcome(
        before_answers,
        after,
        applied,
        placed.moves,
        placed.unplaced,
        placed.placed,
        reserve,
        seconds=time.perf_counter() - began,
    )


def scenario_reserve(scenario: Scenario, settings: ScenarioSettings) -> int:
    """The reserve both sides are answered with: the scenario's, else the configuration's."""
    return (
        settings.reserve_host_failures
        if scenario.reserve_host_failures is None
        else scenario.reserve_host_failures
    )


class SolveError(ValueError):
    """No count of added hypervisors up to the bound makes the demand fit with the reserve."""


def fits_with_reserve(hosts: Sequence[PlannedHost], scenario: Scenario, settings: ScenarioSettings) -> bool:
    """Whether the scenario's fleet holds every domain re-homed and every instance of its demand,
    and still tolerates the reserve's hypervisors lost together."""
    _, placed = scenario_fleet(hosts, scenario, settings.multipliers)
    if not placed.everything_placed:
        return False
    reserve = scenario_reserve(scenario, settings)
    return tolerated_failures(placed.states, reserve, settings.multipliers) >= reserve


def solve_for_added(
    hosts: Sequence[PlannedHost],
    scenario: Scenario,
    settings: ScenarioSettings,
    *,
    limit: int = MAX_ADDED_HYPERVISORS,
    before: Callable[[], FleetAnswers] | None = None,
    sold_elsewhere: Callable[[Sequence[HostState], int], Callable[[], SoldAnswers]] | None = None,
) -> ScenarioOutcome:
    """The scenario with the count of its one `add_hypervisors` entry replaced by the fewest copies
    found that make it fit (`fits_with_reserve`), and that count's answers.

    Whether a count fits is not monotone in general (the greedy scheduler may fit a demand on
    fewer hosts and not on more), so the search doubles the count from 1 until one fits, then
    bisects between the last that did not and the first that did, and answers a count n that fits
    with n - 1 that does not: the smallest wherever more hosts never hurt, which holds whenever the
    demand alone decides (more hosts only add room). 0 when the scenario fits without adding any.
    Raises SolveError when `limit` hypervisors do not make it fit, ValueError when the scenario
    has not exactly one `add_hypervisors` entry."""
    if len(scenario.add) != 1:
        raise ValueError(
            f"add_hypervisors: solving for the hypervisors to add needs exactly one entry (the kind "
            f"to buy), got {len(scenario.add)}"
        )
    began = time.perf_counter()
    entry = scenario.add[0]
    tries: dict[int, bool] = {}

    def fits(count: int) -> bool:
        if count not in tries:
            trial = replace(scenario, add=(replace(entry, count=count),) if count else ())
            tries[count] = fits_with_reserve(hosts, trial, settings)
        return tries[count]

    if fits(0):
        found = 0
    else:
        low, high = 0, 1
        while not fits(high):
            if high >= limit:
                raise SolveError(f"add_hypervisors: {_why_unsolved(hosts, scenario, settings, limit)}")
            low, high = high, min(high * 2, limit)
        while high - low > 1:
            middle = (low + high) // 2
            if fits(middle):
                high = middle
            else:
                low = middle
        fits(high - 1)
        found = high
    solved = replace(scenario, add=(replace(entry, count=found),) if found else ())
    outcome = run_scenario(hosts, solved, settings, before=before, sold_elsewhere=sold_elsewhere)
    return replace(
        outcome,
        added_count=found,
        tries=tuple(sorted(tries.items())),
        seconds=time.perf_counter() - began,
    )


def _why_unsolved(
    hosts: Sequence[PlannedHost], scenario: Scenario, settings: ScenarioSettings, limit: int
) -> str:
    """Why no count up to `limit` fits: the demand that still finds no host, or the reserve the
    fleet does not keep (and whether it kept it before the scenario: a domain of its largest
    hypervisors that fits nowhere else is not helped by more hardware of another kind)."""
    entry = scenario.add[0]
    _, placed = scenario_fleet(
        hosts, replace(scenario, add=(replace(entry, count=limit),)), settings.multipliers
    )
    if not placed.everything_placed:
        left = sum(item.count for item in placed.unplaced) + placed.displaced_unplaced
        return f"even {limit} hypervisors of the kind leave {left} instance(s) or domain(s) without a host"
    reserve = scenario_reserve(scenario, settings)
    before = tolerated_failures([host.state() for host in hosts], reserve, settings.multipliers)
    return (
        f"even with {limit} hypervisors of the kind, the fleet does not tolerate the reserve of {reserve} "
        f"hypervisor failure(s); before the scenario it tolerated {before}"
    )
