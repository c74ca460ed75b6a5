"""A hypervisor's latest audited state: facts plus the capacity computed from them, or the error."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from virtcap.config import Hypervisor
from virtcap.model.capacity import HostCapacity, host_capacity
from virtcap.model.facts import HostFacts
from virtcap.model.ownership import ProjectUsage, host_projects
from virtcap.model.placement import Demand
from virtcap.model.resources import Amounts


@dataclass(frozen=True, slots=True)
class PendingClaims:
    """What the claims pending on a hypervisor hold: their amounts together, and each instance
    held there (a claim of several instances once per instance on this hypervisor), oldest claim
    first, which takes its share of the cells, devices and GPUs in turn."""

    amounts: Amounts = field(default_factory=dict)
    claims: tuple[Demand, ...] = ()


NO_CLAIMS = PendingClaims()


@dataclass(frozen=True, slots=True)
class HypervisorSnapshot:
    name: str
    up: bool
    error: str | None
    facts: HostFacts | None
    capacity: HostCapacity | None
    taken_at: float
    hypervisor: Hypervisor | None = None
    flavors: Mapping[str, Demand] = field(default_factory=dict)
    projects: tuple[ProjectUsage, ...] = ()
    """The counted domains' allocations per project (they do not depend on pending claims)."""

    @classmethod
    def audited(
        cls,
        hypervisor: Hypervisor,
        facts: HostFacts,
        flavors: Mapping[str, Demand],
        claims: PendingClaims = NO_CLAIMS,
    ) -> HypervisorSnapshot:
        capacity = host_capacity(facts, hypervisor.policy, flavors, claims.amounts, claims.claims)
        projects = host_projects(facts, hypervisor.policy)
        return cls(
            hypervisor.name, True, None, facts, capacity, facts.audited_at, hypervisor, flavors, projects
        )

    @classmethod
    def failed(cls, hypervisor: Hypervisor, error: str) -> HypervisorSnapshot:
        return cls(hypervisor.name, False, error, None, None, time.time(), hypervisor)

    def with_claims(self, claims: PendingClaims) -> HypervisorSnapshot:
        """The same audit with other pending claims: capacity is recomputed, nothing is re-read."""
        if self.facts is None or self.hypervisor is None:
            return self
        capacity = host_capacity(
            self.facts, self.hypervisor.policy, self.flavors, claims.amounts, claims.claims
        )
        return replace(self, capacity=capacity)
