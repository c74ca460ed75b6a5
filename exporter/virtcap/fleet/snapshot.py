"""A hypervisor's latest audited state: facts plus the capacity computed from them, or the error."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from virtcap.model.capacity import HostCapacity, host_capacity
from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.maintenance import Maintenance, in_effect, maintenance_reason
from virtcap.model.ownership import ProjectUsage, host_projects
from virtcap.model.resources import Amounts

if TYPE_CHECKING:  # the configuration's models (pydantic, YAML): not for a worker that never reads one
    from virtcap.config import Hypervisor


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
    maintenance: tuple[Maintenance, ...] = ()
    """The maintenance entries in effect when its capacity was computed (none: in service)."""
    projects: tuple[ProjectUsage, ...] = ()
    """The counted domains' allocations per project (they do not depend on pending claims)."""

    @classmethod
    def audited(
        cls,
        hypervisor: Hypervisor,
        facts: HostFacts,
        flavors: Mapping[str, Demand],
        claims: PendingClaims = NO_CLAIMS,
        maintenance: tuple[Maintenance, ...] | None = None,
    ) -> HypervisorSnapshot:
        """`maintenance`: the entries in effect; None: the configuration's, if in effect now."""
        if maintenance is None:
            maintenance = configured_maintenance(hypervisor, time.time())
        capacity = host_capacity(
            facts,
            hypervisor.policy,
            flavors,
            claims.amounts,
            claims.claims,
            maintenance=maintenance_reason(maintenance),
        )
        return cls(
            hypervisor.name,
            True,
            None,
            facts,
            capacity,
            facts.audited_at,
            hypervisor,
            flavors,
            maintenance,
            host_projects(facts, hypervisor.policy),
        )

    @classmethod
    def failed(
        cls, hypervisor: Hypervisor, error: str, maintenance: tuple[Maintenance, ...] | None = None
    ) -> HypervisorSnapshot:
        now = time.time()
        if maintenance is None:
            maintenance = configured_maintenance(hypervisor, now)
        return cls(hypervisor.name, False, error, None, None, now, hypervisor, maintenance=maintenance)

    def with_claims(
        self, claims: PendingClaims, maintenance: tuple[Maintenance, ...] | None = None
    ) -> HypervisorSnapshot:
        """The same audit with other pending claims, and other maintenance entries in effect when
        given: capacity is recomputed, nothing is re-read."""
        if maintenance is None:
            maintenance = self.maintenance
        if self.facts is None or self.hypervisor is None:
            return replace(self, maintenance=maintenance)
        capacity = host_capacity(
            self.facts,
            self.hypervisor.policy,
            self.flavors,
            claims.amounts,
            claims.claims,
            maintenance=maintenance_reason(maintenance),
        )
        return replace(self, capacity=capacity, maintenance=maintenance)


def configured_maintenance(hypervisor: Hypervisor, now: float) -> tuple[Maintenance, ...]:
    """The configuration's maintenance of the hypervisor, if it is in effect at `now`."""
    return in_effect((hypervisor.maintenance,), now)
