"""The fleet a scenario starts from and the fleet it makes: each hypervisor as what it has
(facts), what the operator decided (policy) and where it is (zone, groups), from which its
scheduler state is computed as the exporter computes it (`host_state`).

`apply_scenario` changes the policies first, then takes the removed and drained hypervisors out
of service (their domains and pending claims are `displaced`: placement.py re-homes them), then
adds the new hypervisors. Nothing here schedules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Amounts, Resource
from virtcap.model.scenario.spec import GroupKey, PolicyChange, Scenario
from virtcap.model.scheduler import Guest, HostState, host_state

DRAINED = "drained by the scenario"
"""The maintenance reason of a drained hypervisor: ComputeFilter refuses it, as Nova's disabled
compute service."""
PENDING_PREFIX = "pending-claim-"
"""The names of a removed or drained hypervisor's pending claims when they are re-homed."""


@dataclass(frozen=True, slots=True)
class PlannedHost:
    """One hypervisor of a scenario's fleet."""

    name: str
    facts: HostFacts
    policy: HostPolicy
    groups: tuple[GroupKey, ...] = ()
    up: bool = True
    stale: bool = False
    maintenance: str | None = None
    claimed: Amounts = field(default_factory=dict)
    pending: tuple[Demand, ...] = ()
    added: bool = False
    """Added by the scenario (not in the fleet before it)."""

    @property
    def availability_zone(self) -> str | None:
        return next((name for kind, name in self.groups if kind == "availability_zone"), None)

    def state(self) -> HostState:
        return host_state(
            self.name,
            self.facts,
            self.policy,
            claimed=self.claimed,
            pending=self.pending,
            up=self.up,
            stale=self.stale,
            maintenance=self.maintenance,
            availability_zone=self.availability_zone,
        )


@dataclass(frozen=True, slots=True)
class AppliedScenario:
    during: tuple[PlannedHost, ...]
    """The fleet while the removed and drained hypervisors are emptied: every hypervisor with the
    policy changes, those leaving still as they are, the added ones last."""
    after: tuple[PlannedHost, ...]
    """The fleet once they are: the removed hypervisors left out, the drained ones in maintenance
    without their domains and pending claims (before the domains re-homed and the demand)."""
    leaving: tuple[str, ...]
    """The removed and drained hypervisors, in the fleet's order."""
    removed: tuple[str, ...]
    drained: tuple[str, ...]
    added: tuple[str, ...]


def changed_policy(policy: HostPolicy, change: PolicyChange) -> HostPolicy:
    """The policy with the change's ratios, reserved amounts and CPU sets. Raises ValueError (its
    `key: why`) where they no longer go together, as the configuration refuses them."""
    ratios = {**policy.allocation_ratios, **change.allocation_ratios}
    ratios = {resource: ratio or resource.default_allocation_ratio for resource, ratio in ratios.items()}
    reserved = {**policy.reserved, **change.reserved}
    shared = change.cpu_sets.get("cpu_shared_set", policy.cpu_shared_set)
    dedicated = change.cpu_sets.get("cpu_dedicated_set", policy.cpu_dedicated_set)
    if shared is not None and dedicated is not None and not shared.isdisjoint(dedicated):
        raise ValueError("cpu_dedicated_set: overlaps cpu_shared_set; expected two disjoint sets")
    if reserved.get(Resource.VCPU, 0) and (shared is not None or dedicated is not None):
        raise ValueError(
            "reserved.vcpu: cannot be combined with cpu_shared_set/cpu_dedicated_set "
            "(host CPUs in neither set are not offered); expected 0"
        )
    return replace(
        policy,
        allocation_ratios=ratios,
        reserved=reserved,
        cpu_shared_set=shared,
        cpu_dedicated_set=dedicated,
    )


def apply_scenario(hosts: Sequence[PlannedHost], scenario: Scenario) -> AppliedScenario:
    """The fleet with the scenario's changes (see the module's docstring). Raises ValueError where a
    policy change leaves a hypervisor's policy inconsistent, naming the change (`policy[i]`)."""
    changed = list(hosts)
    for index, change in enumerate(scenario.policy):
        for position, host in enumerate(changed):
            if change.hosts.holds(host.name, host.groups):
                try:
                    changed[position] = replace(host, policy=changed_policy(host.policy, change))
                except ValueError as error:
                    raise ValueError(f"policy[{index}].{error} (hypervisor {host.name})") from None
    added: list[PlannedHost] = []
    taken = {host.name for host in hosts}
    for entry in scenario.add:
        for name in entry.names():
            if name in taken:
                raise ValueError(f"add_hypervisors: {name} is a hypervisor of the fleet already")
            taken.add(name)
            template = replace(entry.template, hostname=name, domains=())
            added.append(PlannedHost(name, template, entry.policy, entry.groups, added=True))
    after: list[PlannedHost] = []
    leaving: list[str] = []
    removed: list[str] = []
    drained: list[str] = []
    for host in changed:
        removing = scenario.remove.holds(host.name, host.groups)
        if not removing and not scenario.drain.holds(host.name, host.groups):
            after.append(host)
            continue
        leaving.append(host.name)
        if removing:
            removed.append(host.name)
            continue
        drained.append(host.name)
        emptied = replace(host.facts, domains=())
        after.append(
            replace(host, facts=emptied, claimed={}, pending=(), maintenance=host.maintenance or DRAINED)
        )
    return AppliedScenario(
        during=(*changed, *added),
        after=(*after, *added),
        leaving=tuple(leaving),
        removed=tuple(removed),
        drained=tuple(drained),
        added=tuple(host.name for host in added),
    )


def leaving_state(host: PlannedHost) -> HostState:
    """A removed or drained hypervisor's state while it is emptied: its pending claims among its
    guests too (instances about to be created there), so that they are re-homed with its domains."""
    state = host.state()
    zone = host.availability_zone
    claims = tuple(
        Guest(f"{PENDING_PREFIX}{number}@{host.name}", replace(demand, availability_zone=zone))
        for number, demand in enumerate(host.pending, start=1)
    )
    return replace(state, guests=(*state.guests, *claims)) if claims else state


def by_name(hosts: Sequence[PlannedHost]) -> Mapping[str, PlannedHost]:
    return {host.name: host for host in hosts}
