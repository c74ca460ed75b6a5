"""Failure tolerance of the fleet as last audited: whether each hypervisor's domains can be
re-homed on the others, and how many hypervisors the fleet can lose together.

The scheduling itself is model/scheduler/'s (`fleet_tolerance`); this module feeds it the
hypervisors' last good audits and keeps its answer between computations, so that a change to a
few hypervisors costs their share (`fleet_tolerance_update`) instead of the fleet's. What is
shown (/metrics, the JSON document) is a `ToleranceReport`, a plain summary that is safe to
hand to any thread. Blocking and CPU-bound: service/tolerance_task.py runs it in a thread of its
own, one computation at a time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.fleet.packing import FleetPacking, PackingReport, PackingSettings
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    EvacuationResult,
    FleetTolerance,
    Guest,
    HostState,
    Multipliers,
    Unplaced,
    domain_demand,
    fleet_tolerance,
    fleet_tolerance_update,
)

MAX_INCREMENTAL_CHANGES = 32
"""Beyond this many hypervisors changed since the last computation, the fleet is computed again
whole whatever updates have cost so far (below it, `prefer_full` decides from their durations)."""


@dataclass(frozen=True, slots=True)
class SimulatedHost:
    """One hypervisor as the simulation takes it: its last good audit (with its pending claims)
    and whether it is up now. One whose audit is stale is not taken at all (its data is no longer
    shown), so none is ever simulated as stale."""

    name: str
    audit: HypervisorSnapshot
    up: bool


@dataclass(frozen=True, slots=True)
class UnplacedDomain:
    """A domain of the lost hypervisor that finds no host, and which filter refused it where."""

    domain: str
    refused_by: Mapping[str, int]
    """Per filter (`Placement`, `NUMATopologyFilter`, ...), how many hypervisors it refused."""
    example: str
    """The first refusal of the first hypervisor (by name) that refused it, or why no hypervisor
    was looked at."""


@dataclass(frozen=True, slots=True)
class HostEvacuation:
    feasible: bool
    placements: tuple[tuple[str, str], ...]
    """(domain, hypervisor) of each domain re-homed, in the order they were scheduled."""
    unplaced: tuple[UnplacedDomain, ...] = ()


@dataclass(frozen=True, slots=True)
class ToleranceReport:
    """What the fleet survives, as of the audits taken at `computed_at`."""

    evacuations: Mapping[str, HostEvacuation]
    tolerated: int
    """How many hypervisors the fleet can lose together (the most allocated memory first)."""
    bound: int
    """The most that were tried (`scheduler.failure_tolerance.max_host_failures`)."""
    computed_at: float
    duration_seconds: float
    incremental: bool
    """Whether only the hypervisors that changed were computed again."""
    computations: Mapping[str, int] = field(default_factory=dict)
    """Computations so far, by kind (`full`, `incremental`), as whoever runs them counts them."""
    packing: PackingReport | None = None
    """The packing answers computed after it (fleet/packing.py), the last ones while the next
    computes; None before the first."""


def scheduler_host(host: SimulatedHost) -> HostState:
    """The hypervisor as the scheduler sees it, from the capacity its audit already computed (its
    pending claims counted): the domains its policy counts are what an evacuation moves, within
    its availability zone when it is in one."""
    snapshot = host.audit
    if snapshot.capacity is None or snapshot.facts is None or snapshot.hypervisor is None:
        raise ValueError(f"{host.name}: an audit that failed has nothing to simulate")
    policy = snapshot.hypervisor.policy
    zone = snapshot.hypervisor.availability_zone
    return HostState(
        name=host.name,
        capacity=snapshot.capacity,
        up=host.up,
        reserved_disk_bytes=policy.reserved.get(Resource.DISK, 0),
        availability_zone=zone,
        guests=tuple(
            Guest(domain.name, domain_demand(domain, policy, zone), domain.uuid)
            for domain in snapshot.facts.domains
            if domain.state in policy.counted_states
        ),
    )


def scheduling_key(state: HostState) -> tuple[object, ...]:
    """What the scheduler reads of a hypervisor. Every audit makes a new snapshot, and most change
    nothing of it: what the host really uses (`actual`) or how many of each flavor fit are not
    looked at, and differences there must not cost a computation."""
    capacity = state.capacity
    resources = sorted(
        (
            (resource.placement_class, replace(amounts, actual=None))
            for resource, amounts in capacity.resources.items()
        ),
        key=lambda item: item[0],
    )
    return (
        state.up,
        state.stale,
        # in or out of maintenance: it takes no evacuated domain, or takes them again
        capacity.maintenance,
        state.reserved_disk_bytes,
        state.availability_zone,  # which hosts its domains, and others' domains, may go to
        state.guests,
        tuple(resources),
        capacity.within,
        capacity.vgpus,
        capacity.claimed_vgpus,
    )


@dataclass(frozen=True, slots=True)
class SimulationRequest:
    """What the simulation needs to compute again: the fleet's hypervisors in order, the states of
    those that are new or changed since the last request (the others it has), and its settings.
    Crosses to the worker process (service/tolerance_worker.py) pickled."""

    names: tuple[str, ...]
    changed: Mapping[str, HostState]
    multipliers: Multipliers
    bound: int
    full: bool
    """Compute the whole fleet: another set of hypervisors or settings, or too many changes."""
    packing: PackingSettings | None = None
    """What the packing answers read beyond the states; None: no packing computed."""


class FleetChanges:
    """Which hypervisors changed what the scheduler reads since the last request: the side of the
    simulation that sees the audits. One thread at a time.

    A hypervisor's state and what the scheduler reads of it are worked out again only for a new
    audit (or when it goes up or down): a request then costs the hypervisors audited since the
    last one, not the fleet."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[object, ...]] = {}
        """What the simulation was last told of each hypervisor (scheduling_key)."""
        self._settings: tuple[Multipliers, int] | None = None
        self._packing: PackingSettings | None = None
        self._built: dict[str, tuple[SimulatedHost, HostState, tuple[object, ...]]] = {}

    def request(
        self,
        hosts: Sequence[SimulatedHost],
        multipliers: Multipliers,
        bound: int,
        packing: PackingSettings | None = None,
    ) -> SimulationRequest | None:
        """None when nothing the scheduler (or the packing) reads changed since the last request."""
        built = [self.state_of(host) for host in hosts]
        return self.request_from(hosts, built, multipliers, bound, packing)

    def request_from(
        self,
        hosts: Sequence[SimulatedHost],
        built: Sequence[tuple[HostState, tuple[object, ...]]],
        multipliers: Multipliers,
        bound: int,
        packing: PackingSettings | None = None,
        *,
        differ: Sequence[bool] | None = None,
    ) -> SimulationRequest | None:
        """`request`, given each host's `state_of` and whether it `differs` (which a caller may
        work out a few at a time). Other packing settings alone (a flavor discovered, a group
        changed) are a request with no change for the tolerance: only the packing reads them."""
        self._built = {host.name: self._built[host.name] for host in hosts}
        settings = (multipliers, bound)
        names = [state.name for state, _key in built]
        same_fleet = settings == self._settings and names == list(self._sent)
        if differ is None:
            differ = [self.differs(one) for one in built]
        changed = {state.name: state for (state, _key), moved in zip(built, differ, strict=True) if moved}
        if same_fleet and not changed and packing == self._packing:
            return None
        self._sent = {state.name: key for state, key in built}
        self._settings, self._packing = settings, packing
        full = not same_fleet or len(changed) > MAX_INCREMENTAL_CHANGES
        return SimulationRequest(tuple(names), changed, multipliers, bound, full, packing)

    def differs(self, built: tuple[HostState, tuple[object, ...]]) -> bool:
        """Whether what the scheduler reads of a host (its `state_of`) differs from what the
        simulation was last told: compared whole after a new audit, a tenth of a millisecond for
        a host of 50 domains. A new audit that reads the same is taken as what was told, so that
        it is compared whole once: left, every computation after it (one per burst of audits,
        every half second while a large fleet is audited) compared it whole again, a tenth of
        the exporter's CPU on a fleet of 1,000."""
        state, key = built
        told = self._sent.get(state.name)
        if key is told:
            return False
        if key != told:
            return True
        self._sent[state.name] = key
        return False

    def state_of(self, host: SimulatedHost) -> tuple[HostState, tuple[object, ...]]:
        """Built again only for a new audit (the domains' requests are parsed from their flavors'
        extra specs), adjusted when it goes up or down."""
        built = self._built.get(host.name)
        same_audit = built is not None and built[0].audit is host.audit  # snapshots: by identity
        if built is not None and same_audit and built[0].up == host.up:
            return built[1], built[2]
        state = replace(built[1], up=host.up) if built is not None and same_audit else scheduler_host(host)
        key = scheduling_key(state)
        self._built[host.name] = (host, state, key)
        return state, key


UPDATE_WEIGHT = 0.3
"""How much the last update counts in the average duration of an update."""


def prefer_full(changes: int, full_seconds: float | None, update_seconds: float | None) -> bool:
    """Whether several changes are better computed whole: one update costs from almost nothing (a
    hypervisor no evacuation uses) to most of a full computation (one every evacuation uses), so
    the durations measured so far decide. A single change is always an update: the way to learn
    what updates cost, and never more work than a full computation."""
    if changes <= 1 or full_seconds is None or update_seconds is None:
        return False
    return changes * update_seconds > full_seconds


class FleetSimulation:
    """The fleet's failure tolerance, kept between requests: the side that schedules (in the
    worker process). One thread at a time."""

    def __init__(self) -> None:
        self._packing = FleetPacking()
        self._result: FleetTolerance | None = None
        self._states: dict[str, HostState] = {}
        self._full_seconds: float | None = None
        self._update_seconds: float | None = None
        """The last full computation's duration, and an update's per changed hypervisor (a moving
        average): what decides between updating several changes one by one and starting over."""

    def apply(self, request: SimulationRequest) -> ToleranceReport:
        started = time.monotonic()
        known = {**self._states, **request.changed}
        missing = [name for name in request.names if name not in known]
        if missing:
            raise ValueError(f"no state of {', '.join(missing[:5])}: the request expects another simulation")
        self._states = {name: known[name] for name in request.names}
        result = self._result
        changes = len(request.changed)
        incremental = (
            not request.full
            and result is not None
            and not prefer_full(changes, self._full_seconds, self._update_seconds)
        )
        if incremental and result is not None:
            for state in request.changed.values():
                result = fleet_tolerance_update(result, state)
        else:
            states = list(self._states.values())
            result = fleet_tolerance(states, multipliers=request.multipliers, bound=request.bound)
        self._result = result
        elapsed = time.monotonic() - started
        if not incremental:
            self._full_seconds = elapsed
        elif changes:
            each = elapsed / changes
            previous = self._update_seconds
            if previous is not None:
                each = UPDATE_WEIGHT * each + (1 - UPDATE_WEIGHT) * previous
            self._update_seconds = each
        return ToleranceReport(
            evacuations={name: _evacuation(found) for name, found in result.evacuations.items()},
            tolerated=result.tolerated,
            bound=request.bound,
            computed_at=time.time(),
            duration_seconds=elapsed,
            incremental=incremental,
        )

    def update_packing(self, request: SimulationRequest) -> PackingReport | None:
        """The packing answers brought to the states of the request last applied, as far as they
        are at once (each changed hypervisor's stranded capacity; the rest queued, see
        `packing_step`); None without its settings."""
        if request.packing is None:
            return None
        self._packing.update(list(self._states.values()), request.packing, request.multipliers)
        return self._packing.report()

    def wait_for_packing_step(self, timeout: float | None = None) -> bool:
        """Wait until a packing answer is queued to compute again (`packing_step`); whether one is."""
        return self._packing.wait_queued(timeout)

    def packing_step(self) -> PackingReport | None:
        """The answers once the oldest queued one is computed again; None: none was queued. May
        run in another thread than `apply` and `update_packing`."""
        return self._packing.report() if self._packing.step() else None

    def pack(self, request: SimulationRequest) -> PackingReport | None:
        """Every packing answer for the states of the request last applied (None without its
        settings): `update_packing`, then every step, in one go."""
        if request.packing is None:
            return None
        return self._packing.apply(list(self._states.values()), request.packing, request.multipliers)

    def forget_packing(self) -> None:
        """After a failed packing computation: the next one starts from scratch."""
        self._packing.reset()


class LocalSimulation:
    """Both sides in one thread: a one-shot audit's, and the tests'."""

    def __init__(self) -> None:
        self.changes = FleetChanges()
        self.simulation = FleetSimulation()
        self.computations: Counter[str] = Counter()

    def compute(
        self,
        hosts: Sequence[SimulatedHost],
        multipliers: Multipliers,
        bound: int,
        packing: PackingSettings | None = None,
    ) -> ToleranceReport | None:
        request = self.changes.request(hosts, multipliers, bound, packing)
        if request is None:
            return None
        report = self.simulation.apply(request)
        self.computations["incremental" if report.incremental else "full"] += 1
        return replace(report, computations=dict(self.computations), packing=self.simulation.pack(request))


def packing_settings(
    hosts: Sequence[SimulatedHost], flavors: Mapping[str, Demand], reserve_host_failures: int
) -> PackingSettings:
    """The packing's settings for these hypervisors: their configured groups as their audits have
    them."""
    return PackingSettings(
        flavors=dict(flavors),
        groups={
            host.name: host.audit.hypervisor.groups
            for host in hosts
            if host.audit.hypervisor is not None and host.audit.hypervisor.groups
        },
        reserve_host_failures=reserve_host_failures,
    )


def one_shot_tolerance(
    snapshots: Sequence[HypervisorSnapshot],
    multipliers: Multipliers,
    bound: int,
    flavors: Mapping[str, Demand] | None = None,
    reserve_host_failures: int = 1,
) -> ToleranceReport | None:
    """The failure tolerance of one audit of the fleet (`virtcap audit`): the hypervisors whose
    audit failed are left out, as a stale one is from the exporter's. With `flavors`, the packing
    answers too."""
    hosts = [
        SimulatedHost(snapshot.name, snapshot, up=True)
        for snapshot in snapshots
        if snapshot.up and snapshot.capacity is not None
    ]
    packing = packing_settings(hosts, flavors, reserve_host_failures) if flavors is not None else None
    return LocalSimulation().compute(hosts, multipliers, bound, packing)


def _evacuation(result: EvacuationResult) -> HostEvacuation:
    return HostEvacuation(
        feasible=result.feasible,
        placements=result.placements,
        unplaced=tuple(_unplaced(domain) for domain in result.unplaced),
    )


def _unplaced(domain: Unplaced) -> UnplacedDomain:
    # the summaries, not the rejections: an evacuation's list every hypervisor of the fleet, and
    # on a full fleet most domains have them
    first = domain.first_rejection
    if domain.no_valid_host is not None:
        example = domain.no_valid_host
    elif first is not None:
        name, rejection = first
        example = f"{name}: {rejection.filter}: {rejection.reason}"
    else:
        example = "no other hypervisor is up"
    return UnplacedDomain(domain.guest, dict(sorted(domain.refused_by.items())), example)
