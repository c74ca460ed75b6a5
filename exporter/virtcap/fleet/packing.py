"""The fleet's packing answers as last computed: each hypervisor's stranded capacity, the
compaction of the fleet and of each configured group, and the sellable instances of each flavor
under the failover reserve (model/packing/, docs/packing.md).

Computed in the failure-tolerance worker (service/tolerance_worker.py) from the states of its
last request, and kept there between requests. The answers do not cost alike, so they are not
computed alike:

- a hypervisor's stranded capacity reads that hypervisor alone and costs milliseconds: it is
  solved again, for the hypervisors whose state changed, as soon as the states arrive
  (`update`), and published with the tolerance;
- the compactions and the sellable instances read a whole fleet, group or zone and cost seconds:
  each is a `Step`, queued when something it reads changed and computed later, one at a time
  (`step`, by another thread of the worker), on the states as they are then, in the order they
  were queued. A step already queued keeps its place when another change comes, so that every
  answer is brought up to date however often the fleet changes, and the next tolerance request
  and its stranded capacity never wait for a step.

What a compaction reads is the eligible hypervisors emptied of their domains, and the domains:
a pending claim, which the compaction leaves out, does not queue it. What crosses back to the
exporter is a `PackingReport`, summaries only (not the compaction's assignment of every domain).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import Compaction, compaction, emptied
from virtcap.model.packing.compaction_update import compaction_update
from virtcap.model.packing.sellable import sellable_by_zone, sellable_count
from virtcap.model.packing.sellable_update import KeptDecisions
from virtcap.model.packing.stranded import StrandedCache, StrandedCapacity, eligible, stranded_capacity
from virtcap.model.scheduler import HostState, Multipliers
from virtcap.model.scheduler.claims_replay import Placements
from virtcap.model.scheduler.filters import CandidateMemo

FLEET_COMPACTION_SECONDS = 60.0
"""The solvers' time limit for the fleet's compaction, a safety net: their node limits end them
first, at the same point on any machine (`compaction`); past it, the best packing found and the
proven bound are shown, `optimal` false. A step of its own: it holds up no other answer."""
GROUP_COMPACTION_SECONDS = 15.0
"""The same for one group's compaction."""

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
class Step:
    """One answer that reads a whole fleet, group or zone, computed on its own.

    `answer` "compaction": of the fleet (`group` None) or of one configured group; "sellable":
    one flavor's instances, in the fleet (`zone` None) or asked for in one availability zone."""

    answer: str
    flavor: str = ""
    group: Group | None = None
    zone: str | None = None


@dataclass(frozen=True, slots=True)
class PackingReport:
    """The packing answers, each as of the last time it was computed (`computed_at` is the latest)."""

    stranded: Mapping[str, StrandedCapacity]
    """Per eligible hypervisor (up, fresh, not in maintenance), in the fleet's order."""
    compaction: CompactionSummary | None
    """None until first computed."""
    groups: Mapping[Group, CompactionSummary]
    """Per configured (kind, group), the compaction of its members alone, sorted."""
    sellable: Mapping[str, int]
    """Per flavor, the instances the fleet can still take keeping the reserve."""
    sellable_by_zone: Mapping[tuple[str, str], int]
    """Per (availability zone, flavor), the same within the zone (failover stays in it)."""
    reserve_host_failures: int
    computed_at: float
    """When an answer shown was last computed (Unix time)."""
    duration_seconds: float | None
    """How long the answers last took to catch up with the states, from the change that started it
    to no step left; None before they first did."""
    pending: int = 0
    """The answers (steps) still to compute again since the states changed: 0 when every answer
    shown is as of the states last received."""
    solved: tuple[str, ...] = field(default=(), compare=False)
    """The hypervisors whose stranded capacity the last update solved (the others' was kept)."""


class FleetPacking:
    """The packing answers, kept between requests: the side that computes (the worker process).
    One thread updates, another may compute the steps: each method holds the lock while it reads
    or changes what is kept, and a step computes without it."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._clear()
        self.compactions_updated = 0
        """Compactions brought up to date rather than solved (`compaction_update`), for the tests
        and the benchmarks."""

    def _clear(self) -> None:
        self._states: dict[str, HostState] = {}
        self._settings: PackingSettings | None = None
        self._multipliers: Multipliers | None = None
        self._stranded: dict[str, StrandedCapacity] = {}
        self._solved: tuple[str, ...] = ()
        self._cache = StrandedCache()
        self._compactions: dict[Group | None, tuple[Compaction, list[HostState]]] = {}
        """Per configured group, and for the fleet (None), the last compaction with the states it
        was made of: what the next is brought up to date from (`compaction_update`), where a
        change allows."""
        self._placements = Placements()
        """Each sellable count's last request for as many as fit, followed by the next."""
        self._decisions = KeptDecisions()
        """Each sellable count's decisions, read by the next where the request was followed."""
        self._sellable: dict[tuple[str | None, str], int] = {}
        """Per (availability zone or None for the fleet, flavor), the last sellable count."""
        self._queue: dict[Step, None] = {}
        """The steps to compute, in the order they were first queued (a dict: ordered, unique)."""
        self._running: Step | None = None
        """The step being computed (by `step`, without the lock)."""
        self._computed_at = 0.0
        self._catching_up_since: float | None = None
        self._caught_up_seconds: float | None = None

    @property
    def pending(self) -> int:
        """The steps queued or being computed."""
        with self._lock:
            return self._pending()

    def _pending(self) -> int:
        return len(self._queue) + (self._running is not None)

    @property
    def queued(self) -> tuple[Step, ...]:
        """The steps to compute, in the order `step` computes them."""
        with self._lock:
            return tuple(self._queue)

    def wait_queued(self, timeout: float | None = None) -> bool:
        """Wait until a step is queued (at most `timeout` s); whether one is."""
        with self._lock:
            return self._lock.wait_for(lambda: bool(self._queue), timeout)

    def reset(self) -> None:
        """Forget everything (after a failure): the next update computes every answer again."""
        with self._lock:
            self._clear()

    def update(
        self, states: Sequence[HostState], settings: PackingSettings, multipliers: Multipliers
    ) -> None:
        """The fleet's states as they are now (in order): each changed hypervisor's stranded
        capacity solved again at once, and the steps whose input changed queued. A state is the
        same as before when it is the same object: the worker keeps the ones no request changed."""
        with self._lock:
            known, before = self._states, self._settings
            current = {state.name: state for state in states}
            changed = {name for name, state in current.items() if known.get(name) is not state}
            changed |= set(known) - set(current)
            flavors_same = before is not None and before.flavors == settings.flavors
            self._solved = self._stranded_of(states, settings, changed if flavors_same else None)
            reshaped = {
                name
                for name in changed
                if name not in known
                or name not in current
                or _compacted(known[name]) != _compacted(current[name])
            }
            sold_same = (
                before is not None
                and self._multipliers == multipliers
                and before.reserve_host_failures == settings.reserve_host_failures
            )
            # the fleet's answers first, then the groups' and zones'
            if reshaped or self._unanswered(Step("compaction"), None in self._compactions):
                self._queue_step(Step("compaction"))
            for flavor, demand in settings.flavors.items():
                again = not sold_same or before is None or before.flavors.get(flavor) != demand
                step = Step("sellable", flavor=flavor)
                if again or changed or self._unanswered(step, (None, flavor) in self._sellable):
                    self._queue_step(step)
            groups = _members(states, settings)
            old_groups = _members(list(known.values()), before) if before is not None else {}
            for group, names in groups.items():
                step = Step("compaction", group=group)
                unanswered = self._unanswered(step, group in self._compactions)
                if unanswered or old_groups.get(group) != names or reshaped & set(names):
                    self._queue_step(step)
            zones, old_zones = _zones(states), _zones(list(known.values()))
            for zone, names in zones.items():
                moved = old_zones.get(zone) != names or bool(changed & set(names))
                for flavor, demand in settings.flavors.items():
                    again = not sold_same or before is None or before.flavors.get(flavor) != demand
                    step = Step("sellable", flavor=flavor, zone=zone)
                    if again or moved or self._unanswered(step, (zone, flavor) in self._sellable):
                        self._queue_step(step)
            self._forget(groups, zones, settings.flavors)
            self._states, self._settings, self._multipliers = current, settings, multipliers
            self._computed_at = time.time()
            if self._queue and self._catching_up_since is None:
                self._catching_up_since = time.monotonic()
            self._caught_up()
            self._lock.notify_all()

    def step(self) -> bool:
        """Compute the oldest queued step on the states as they are; False when none was queued.
        The lock is not held while it computes: an update may come meanwhile, and queue the same
        step again if it changed what the step reads."""
        with self._lock:
            if not self._queue:
                return False
            settings, multipliers = self._settings, self._multipliers
            assert settings is not None and multipliers is not None
            step = next(iter(self._queue))
            del self._queue[step]
            self._running = step
            states = list(self._states.values())
        try:
            if step.answer == "compaction":
                members = _group_states(step.group, states, settings)
                found = self._compacted(step.group, members, settings)
                with self._lock:
                    if step.group is None or step.group in _members(list(self._states.values()), settings):
                        self._compactions[step.group] = (found, members)
            else:
                count = self._sold(step, states, settings, multipliers)
                with self._lock:
                    current = self._settings
                    if current is not None and step.flavor in current.flavors:
                        self._sellable[step.zone, step.flavor] = count
        finally:
            with self._lock:
                self._running = None
                self._computed_at = time.time()
                self._caught_up()
        return True

    def apply(
        self, states: Sequence[HostState], settings: PackingSettings, multipliers: Multipliers
    ) -> PackingReport:
        """`update`, then every step: the answers all as of these states (a one-shot audit's)."""
        self.update(states, settings, multipliers)
        while self.step():
            pass
        return self.report()

    def report(self) -> PackingReport:
        with self._lock:
            return self._report()

    def _report(self) -> PackingReport:
        settings = self._settings
        assert settings is not None
        groups = {
            group: CompactionSummary.of(found)
            for group, (found, _) in self._compactions.items()
            if group is not None
        }
        fleet = self._compactions.get(None)
        return PackingReport(
            stranded=dict(self._stranded),
            compaction=CompactionSummary.of(fleet[0]) if fleet is not None else None,
            groups=dict(sorted(groups.items())),
            sellable={
                flavor: self._sellable[None, flavor]
                for flavor in settings.flavors
                if (None, flavor) in self._sellable
            },
            sellable_by_zone=dict(
                sorted(
                    ((zone, flavor), count)
                    for (zone, flavor), count in self._sellable.items()
                    if zone is not None
                )
            ),
            reserve_host_failures=settings.reserve_host_failures,
            computed_at=self._computed_at,
            duration_seconds=self._caught_up_seconds,
            pending=self._pending(),
            solved=self._solved,
        )

    def _unanswered(self, step: Step, answered: bool) -> bool:
        """Neither answered nor being computed (a first answer is queued once)."""
        return not answered and step != self._running

    def _queue_step(self, step: Step) -> None:
        self._queue.setdefault(step, None)

    def _caught_up(self) -> None:
        if not self._queue and self._running is None and self._catching_up_since is not None:
            self._caught_up_seconds = time.monotonic() - self._catching_up_since
            self._catching_up_since = None

    def _forget(
        self,
        groups: Mapping[Group, tuple[str, ...]],
        zones: Mapping[str, tuple[str, ...]],
        flavors: Iterable[str],
    ) -> None:
        """The answers (and queued steps) of groups, zones and flavors that are gone."""
        names = set(flavors)
        self._compactions = {
            group: found for group, found in self._compactions.items() if group is None or group in groups
        }
        self._sellable = {
            (zone, flavor): count
            for (zone, flavor), count in self._sellable.items()
            if flavor in names and (zone is None or zone in zones)
        }
        self._queue = {
            step: None
            for step in self._queue
            if (step.group is None or step.group in groups)
            and (step.zone is None or step.zone in zones)
            and (step.answer == "compaction" or step.flavor in names)
        }

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

    def _compacted(
        self, group: Group | None, members: list[HostState], settings: PackingSettings
    ) -> Compaction:
        """The group's (or the fleet's) compaction: the last one brought up to date where only
        domains started since (`compaction_update`, exact), else solved."""
        last = self._compactions.get(group)
        if last is not None:
            updated = compaction_update(last[0], last[1], members)
            if updated is not None:
                self.compactions_updated += 1
                return updated
        limit = settings.fleet_time_limit_seconds if group is None else settings.group_time_limit_seconds
        return compaction(members, time_limit_seconds=limit)

    def _sold(
        self, step: Step, states: Sequence[HostState], settings: PackingSettings, multipliers: Multipliers
    ) -> int:
        demand = settings.flavors[step.flavor]
        reserve = settings.reserve_host_failures
        # the step thread's alone (one step at a time)
        placements, kept = self._placements, self._decisions
        if step.zone is None:
            return sellable_count(
                states, demand, multipliers, reserve, memo=CandidateMemo(), placements=placements, kept=kept
            )
        members = [state for state in states if state.availability_zone == step.zone]
        counts = sellable_by_zone(
            members, {step.flavor: demand}, multipliers, reserve, placements=placements, kept=kept
        )
        return counts[step.zone, step.flavor]


def _group_states(
    group: Group | None, states: Sequence[HostState], settings: PackingSettings
) -> list[HostState]:
    """The fleet's states (group None), or the group's members'."""
    if group is None:
        return list(states)
    return [state for state in states if group in settings.groups.get(state.name, ())]


def _compacted(state: HostState) -> tuple[object, ...]:
    """What a compaction reads of a hypervisor: whether a domain may go to it, its inventories and
    cells with nothing on them, and its domains (not its pending claims)."""
    return (state.refused_by_compute, state.guests, emptied(state))


def _members(states: Sequence[HostState], settings: PackingSettings) -> dict[Group, tuple[str, ...]]:
    members: dict[Group, list[str]] = {}
    for state in states:
        for group in settings.groups.get(state.name, ()):
            members.setdefault(group, []).append(state.name)
    return {group: tuple(names) for group, names in members.items()}


def _zones(states: Sequence[HostState]) -> dict[str, tuple[str, ...]]:
    zones: dict[str, list[str]] = {}
    for state in states:
        if state.availability_zone is not None:
            zones.setdefault(state.availability_zone, []).append(state.name)
    return {zone: tuple(names) for zone, names in zones.items()}
