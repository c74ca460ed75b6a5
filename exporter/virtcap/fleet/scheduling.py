"""The fleet as Nova's scheduler sees it, with the claims pending on it: shared by dry-run
placements (`POST /api/v1/placements`, `virtcap place`) and claims on `"hypervisor": "any"`, so
that a claim lands where the dry run of the same request says.

Each hypervisor is its last good audit with every pending claim's instances on it as usage,
whether it is up now, whether that audit is older than `audit.stale_after`, and whether it is in
maintenance; one never audited successfully is refused by ComputeFilter (down), as one in
maintenance is (with its reason). Blocking: callers on the event loop run
`schedule_fleet` in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.fleet.claim_records import Claim
from virtcap.fleet.snapshot import HypervisorSnapshot, PendingClaims
from virtcap.fleet.store import SnapshotStore
from virtcap.model.host_fit import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.resources import Amounts, Resource
from virtcap.model.scenario.hosts import PlannedHost
from virtcap.model.scheduler import (
    COMPUTE,
    FORCE_HOSTS,
    IGNORE_HOSTS,
    SPREAD,
    HostState,
    Multipliers,
    Rejection,
    ScheduleResult,
    schedule,
)

NOT_AUDITED = "not audited yet"


@dataclass(frozen=True, slots=True)
class FleetEntry:
    """One hypervisor as the scheduler may see it: its last good audit (None if it never had
    one), whether it is up now and whether that audit is too old."""

    name: str
    good: HypervisorSnapshot | None
    up: bool
    stale: bool = False
    error: str | None = None

    @classmethod
    def of(cls, snapshot: HypervisorSnapshot) -> FleetEntry:
        """A one-shot audit's outcome (`virtcap place --config/--demo`): never stale."""
        good = snapshot if snapshot.up and snapshot.facts is not None else None
        return cls(snapshot.name, good, snapshot.up, False, snapshot.error)


def fleet_entries(store: SnapshotStore, now: float, stale_after: float) -> list[FleetEntry]:
    """The store's hypervisors at `now`, an audit older than `stale_after` seconds stale. On the
    event loop: the store is the loop's."""
    return [
        FleetEntry(
            name=state.name,
            good=state.last_good,
            up=state.up,
            stale=state.last_good is not None and now - state.last_good.taken_at > stale_after,
            error=state.latest.error if state.latest is not None else NOT_AUDITED,
        )
        for state in store.hypervisors.values()
    ]


def pending_claims(claims: Iterable[Claim], hypervisor: str) -> PendingClaims:
    """What the claims on the hypervisor hold, instance by instance in the order they were made
    (each took its cells, devices and GPU after the ones before it, a claim's instances in the
    order they were placed), and together."""
    totals: dict[Resource, int] = {}
    held = []
    for claim in sorted(claims, key=lambda made: made.created_at):
        instances = sum(1 for name in claim.hypervisors if name == hypervisor)
        if not instances:
            continue
        for resource, amount in claim.amounts.items():
            totals[resource] = totals.get(resource, 0) + amount * instances
        within = claim_within(claim.amounts, claim.extra_specs) if claim.extra_specs else NOTHING_WITHIN
        held.extend([Demand(claim.amounts, within)] * instances)
    return PendingClaims(totals, tuple(held))


def claim_within(amounts: Amounts, extra_specs: Mapping[str, str]) -> WithinHost:
    """What a claim's extra specs ask of the cells and devices: a flavor of its vCPUs (shared and
    dedicated, less the PCPU of isolated emulator threads, which is not a vCPU) and memory. Specs
    the API accepted always read; should a row have been edited into ones Nova refuses, the claim
    still holds its amounts, and nothing within the host."""
    vcpus = amounts.get(Resource.VCPU, 0) + amounts.get(Resource.PCPU, 0)
    isolated = extra_specs.get("hw:emulator_threads_policy") == "isolate"
    if isolated and extra_specs.get("hw:cpu_policy") in ("dedicated", "mixed"):
        vcpus -= 1  # nova_request's own rule: one more PCPU for the emulator threads
    try:
        return within_host(vcpus, amounts.get(Resource.MEMORY, 0), extra_specs)
    except ValueError:
        return NOTHING_WITHIN


def host_states(fleet: Sequence[FleetEntry], claims: Iterable[Claim]) -> list[HostState]:
    """The audited hypervisors' states, each with its pending claims as usage."""
    return [host.state() for host in planned_hosts(fleet, list(claims))]


def planned_hosts(fleet: Sequence[FleetEntry], claims: Sequence[Claim]) -> list[PlannedHost]:
    """The audited hypervisors as the scheduler takes them (what they have, the operator's policy,
    where they are, their pending claims), each made a state by `PlannedHost.state` (a scenario
    changes them first); those never audited are left out. The maintenance is the one its last good
    audit was recomputed with."""
    hosts = []
    for entry in fleet:
        good = entry.good
        if good is None or good.facts is None or good.hypervisor is None:
            continue
        pending = pending_claims(claims, entry.name)
        hosts.append(
            PlannedHost(
                entry.name,
                good.facts,
                good.hypervisor.policy,
                good.hypervisor.groups,
                up=entry.up,
                stale=entry.stale,
                maintenance=good.capacity.maintenance if good.capacity is not None else None,
                claimed=pending.amounts,
                pending=pending.claims,
            )
        )
    return hosts


@dataclass(frozen=True, slots=True)
class FleetSchedule:
    """`schedule`'s answer on a fleet, with the hypervisors it could not see (never audited
    successfully) refused beside those it refused."""

    result: ScheduleResult
    left_out: dict[str, Rejection] = field(default_factory=dict)
    """The hypervisors never audited: down (or left out by ignore_hosts or force_hosts)."""
    states: tuple[HostState, ...] = ()
    """The audited hypervisors' states the request was scheduled on, before it."""

    @property
    def rejections(self) -> dict[str, Rejection]:
        """Per hypervisor that did not take the last instance tried, its first refusal."""
        return {**self.result.rejections, **self.left_out}


def schedule_fleet(
    fleet: Sequence[FleetEntry],
    claims: Iterable[Claim],
    demand: Demand,
    count: int,
    *,
    ignore_hosts: Sequence[str] = (),
    force_hosts: Sequence[str] = (),
    anti_affinity: bool = False,
    multipliers: Multipliers = SPREAD,
) -> FleetSchedule:
    """Where `count` instances of the demand land on the fleet with its pending claims, all or
    nothing (model/scheduler/request.py's `schedule`)."""
    states = host_states(fleet, claims)
    audited = {state.name for state in states}
    unaudited = [entry for entry in fleet if entry.name not in audited]
    left_out = _unaudited_rejections(unaudited, ignore_hosts, force_hosts)
    target = force_hosts[0].lower() if force_hosts else None
    if any(entry.name.lower() == target for entry in unaudited):
        # the forced host exists but was never audited: it is down (not missing), and the
        # others are not asked for
        ignored = {name.lower() for name in ignore_hosts}
        for state in states:
            if state.name.lower() in ignored:
                left_out[state.name] = Rejection(IGNORE_HOSTS, (f"{state.name} is in ignore_hosts",))
            else:
                left_out[state.name] = Rejection(FORCE_HOSTS, (not_forced(force_hosts),))
        result = ScheduleResult(count, 0, (), {})
    else:
        result = schedule(
            states,
            demand,
            count,
            ignore_hosts=ignore_hosts,
            force_hosts=force_hosts,
            anti_affinity=anti_affinity,
            multipliers=multipliers,
        )
    return FleetSchedule(result, left_out, tuple(states))


def not_forced(force_hosts: Sequence[str]) -> str:
    return f"not the forced host {force_hosts[0]} (Nova asks Placement for the first of force_hosts only)"


def _unaudited_rejections(
    unaudited: Sequence[FleetEntry], ignore_hosts: Sequence[str], force_hosts: Sequence[str]
) -> dict[str, Rejection]:
    """The hypervisors never audited successfully: the scheduler cannot see them, Nova's
    ComputeFilter would refuse them (after ignore_hosts and force_hosts, as for the others)."""
    ignored = {name.lower() for name in ignore_hosts}
    target = force_hosts[0].lower() if force_hosts else None
    rejected: dict[str, Rejection] = {}
    for entry in unaudited:
        if entry.name.lower() in ignored:
            rejected[entry.name] = Rejection(IGNORE_HOSTS, (f"{entry.name} is in ignore_hosts",))
        elif target is not None and entry.name.lower() != target:
            rejected[entry.name] = Rejection(FORCE_HOSTS, (not_forced(force_hosts),))
        else:
            why = f"hypervisor {entry.name} is down" + (f": {entry.error}" if entry.error else "")
            rejected[entry.name] = Rejection(COMPUTE, (why,))
    return rejected
