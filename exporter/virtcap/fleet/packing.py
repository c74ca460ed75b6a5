"""The fleet's packing answers as last computed: each hypervisor's stranded capacity, the
compaction of the fleet and of each configured group, and the sellable instances of each flavor
under the failover reserve (model/packing/, docs/packing.md).

Computed by the failure-tolerance worker (service/tolerance_worker.py) right after the tolerance,
from the same hypervisor states, and kept there between requests: a hypervisor whose state did not
change keeps its stranded capacity (its problems are not solved again), a group none of whose
members changed keeps its compaction, a zone none of whose members changed keeps its sellable
instances. The fleet's compaction and sellable instances read every hypervisor: any change
computes them again. What crosses back to the exporter is a `PackingReport`, summaries only (not
the compaction's assignment of every domain).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import Compaction, compaction
from virtcap.model.packing.sellable import sellable_by_zone, sellable_instances
from virtcap.model.packing.stranded import StrandedCache, StrandedCapacity, eligible, stranded_capacity
from virtcap.model.scheduler import HostState, Multipliers

FLEET_COMPACTION_SECONDS = 10.0
"""The solver's time limit for the fleet's compaction (past it, the best packing found and the
proven bound are shown, `optimal` false)."""
GROUP_COMPACTION_SECONDS = 2.0
"""The solver's time limit for one group's compaction."""

Group = tuple[str, str]
"""(kind, group), as the configuration names them: ("availability_zone", "az-1"), ("rack", "r2")."""


@dataclass(frozen=True, slots=True)
class PackingSettings:
    """What the packing reads beyond the hypervisors' states. Crosses to the worker pickled, with
    each request: small next to the states (a few flavors, each hypervisor's group names)."""

    flavors: Mapping[str, Demand]
    """The fleet's flavors, configured and discovered (what headroom is reported for)."""
    groups: Mapping[str, tuple[Group, ...]]
    """Per hypervisor, the configured groups it is in."""
    reserve_host_failures: int
    """`scheduler.failure_tolerance.reserve_host_failures`: the failures sellable headroom keeps room for."""
    fleet_time_limit_seconds: float = FLEET_COMPACTION_SECONDS
    group_time_limit_seconds: float = GROUP_COMPACTION_SECONDS


@dataclass(frozen=True, slots=True)
class CompactionSummary:
    """A compaction without its assignment: what is shown."""

    hypervisors: int
    """The fewest eligible hypervisors found that hold every counted domain."""
    lower_bound: int
    """Proven: no packing uses fewer."""
    optimal: bool
    eligible: int
    """Up, not stale, not in maintenance: the hypervisors a domain may go to."""

    @property
    def freeable(self) -> int:
        """The eligible hypervisors the compaction leaves empty."""
        return max(self.eligible - self.hypervisors, 0)

    @classmethod
    def of(cls, found: Compaction) -> CompactionSummary:
        return cls(found.hypervisors, found.lower_bound, found.optimal, found.eligible)


@dataclass(frozen=True, slots=True)
class PackingReport:
    """The packing answers, as of the hypervisor states taken at `computed_at`."""

    stranded: Mapping[str, StrandedCapacity]
    """Per eligible hypervisor (up, fresh, not in maintenance), in the fleet's order."""
    compaction: CompactionSummary
    groups: Mapping[Group, CompactionSummary]
    """Per configured (kind, group), the compaction of its members alone, sorted."""
    sellable: Mapping[str, int]
    """Per flavor, the instances the fleet can still take keeping the reserve."""
    sellable_by_zone: Mapping[tuple[str, str], int]
    """Per (availability zone, flavor), the same within the zone (failover stays in it)."""
    reserve_host_failures: int
    computed_at: float
    duration_seconds: float
    solved: tuple[str, ...] = field(default=(), compare=False)
    """The hypervisors whose stranded capacity this computation solved (the others' was kept)."""
    recomputed: bool = field(default=True, compare=False)
    """Whether the compaction and sellable instances were computed again (not kept)."""


class FleetPacking:
    """The packing answers, kept between requests: the side that computes (the worker process).
    One thread at a time."""

    def __init__(self) -> None:
        self._states: dict[str, HostState] = {}
        self._settings: PackingSettings | None = None
        self._multipliers: Multipliers | None = None
        self._stranded: dict[str, StrandedCapacity] = {}
        self._cache = StrandedCache()
        self._fleet: CompactionSummary | None = None
        self._groups: dict[Group, tuple[tuple[str, ...], CompactionSummary]] = {}
        """Per group, its members when computed and their compaction."""
        self._sellable: Mapping[str, int] = {}
        self._zones: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {}
        """Per availability zone, its members when computed and each flavor's sellable instances."""

    def apply(
        self, states: Sequence[HostState], settings: PackingSettings, multipliers: Multipliers
    ) -> PackingReport:
        """The answers for these states (the fleet's, in order). A state is the same as before when
        it is the same object: the worker keeps the ones no request changed."""
        started = time.monotonic()
        known = self._states
        changed = {state.name for state in states if known.get(state.name) is not state}
        changed |= set(known) - {state.name for state in states}
        flavors_same = self._settings is not None and self._settings.flavors == settings.flavors
        sold_same = (
            flavors_same
            and self._multipliers == multipliers
            and self._settings is not None
            and self._settings.reserve_host_failures == settings.reserve_host_failures
        )
        solved = self._stranded_of(states, settings, changed if flavors_same else None)
        recomputed = bool(changed) or self._fleet is None or not sold_same
        groups_same = self._settings is not None and self._settings.groups == settings.groups
        if changed or self._fleet is None or not groups_same:
            self._compact(states, settings, changed)
        if recomputed:
            self._sell(states, settings, multipliers, changed if sold_same else None)
        self._states = {state.name: state for state in states}
        self._settings, self._multipliers = settings, multipliers
        assert self._fleet is not None
        return PackingReport(
            stranded=dict(self._stranded),
            compaction=self._fleet,
            groups={group: summary for group, (_members, summary) in sorted(self._groups.items())},
            sellable=dict(self._sellable),
            sellable_by_zone={
                (zone, flavor): count
                for zone, (_members, counts) in sorted(self._zones.items())
                for flavor, count in counts.items()
            },
            reserve_host_failures=settings.reserve_host_failures,
            computed_at=time.time(),
            duration_seconds=time.monotonic() - started,
            solved=solved,
            recomputed=recomputed,
        )

    def _stranded_of(
        self, states: Sequence[HostState], settings: PackingSettings, changed: set[str] | None
    ) -> tuple[str, ...]:
        """Each eligible hypervisor's stranded capacity, solved again where its state changed
        (every one when `changed` is None: other flavors); returns those solved."""
        kept = self._stranded
        self._stranded = {}
        solved = []
        for state in states:
            if not eligible(state):
                continue
            found = kept.get(state.name)
            if found is None or changed is None or state.name in changed:
                found = stranded_capacity(state.capacity, settings.flavors, cache=self._cache)
                solved.append(state.name)
            self._stranded[state.name] = found
        return tuple(solved)

    def _compact(self, states: Sequence[HostState], settings: PackingSettings, changed: set[str]) -> None:
        if changed or self._fleet is None:
            self._fleet = CompactionSummary.of(
                compaction(states, time_limit_seconds=settings.fleet_time_limit_seconds)
            )
        members: dict[Group, list[HostState]] = {}
        for state in states:
            for group in settings.groups.get(state.name, ()):
                members.setdefault(group, []).append(state)
        kept = self._groups
        self._groups = {}
        for group, hosts in members.items():
            names = tuple(state.name for state in hosts)
            previous = kept.get(group)
            if previous is not None and previous[0] == names and not changed.intersection(names):
                self._groups[group] = previous
                continue
            found = compaction(hosts, time_limit_seconds=settings.group_time_limit_seconds)
            self._groups[group] = (names, CompactionSummary.of(found))

    def _sell(
        self,
        states: Sequence[HostState],
        settings: PackingSettings,
        multipliers: Multipliers,
        changed: set[str] | None,
    ) -> None:
        """The fleet's sellable instances, and each zone's where a member changed (every zone
        when `changed` is None: other flavors, weighers or reserve)."""
        reserve = settings.reserve_host_failures
        self._sellable = sellable_instances(states, settings.flavors, multipliers, reserve)
        members: dict[str, list[HostState]] = {}
        for state in states:
            if state.availability_zone is not None:
                members.setdefault(state.availability_zone, []).append(state)
        kept = self._zones
        self._zones = {}
        for zone, hosts in members.items():
            names = tuple(state.name for state in hosts)
            previous = kept.get(zone)
            unchanged = changed is not None and not changed.intersection(names)
            if previous is not None and unchanged and previous[0] == names:
                self._zones[zone] = previous
                continue
            found = sellable_by_zone(hosts, settings.flavors, multipliers, reserve)
            self._zones[zone] = (names, {flavor: found[zone, flavor] for flavor in settings.flavors})
