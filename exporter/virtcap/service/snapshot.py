"""A hypervisor's latest audited state: facts plus the capacity computed from them, or the error."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from virtcap.config import Hypervisor
from virtcap.model.capacity import Amounts, HostCapacity, host_capacity
from virtcap.model.facts import HostFacts


@dataclass(frozen=True, slots=True)
class HypervisorSnapshot:
    name: str
    up: bool
    error: str | None
    facts: HostFacts | None
    capacity: HostCapacity | None
    taken_at: float
    hypervisor: Hypervisor | None = None
    flavors: Mapping[str, Amounts] = field(default_factory=dict)

    @classmethod
    def audited(
        cls,
        hypervisor: Hypervisor,
        facts: HostFacts,
        flavors: Mapping[str, Amounts],
        claimed: Amounts | None = None,
    ) -> HypervisorSnapshot:
        capacity = host_capacity(facts, hypervisor.policy, flavors, claimed)
        return cls(hypervisor.name, True, None, facts, capacity, facts.audited_at, hypervisor, flavors)

    @classmethod
    def failed(cls, hypervisor: Hypervisor, error: str) -> HypervisorSnapshot:
        return cls(hypervisor.name, False, error, None, None, time.time(), hypervisor)

    def with_claims(self, claimed: Amounts) -> HypervisorSnapshot:
        """The same audit with other pending claims: capacity is recomputed, nothing is re-read."""
        if self.facts is None or self.hypervisor is None:
            return self
        capacity = host_capacity(self.facts, self.hypervisor.policy, self.flavors, claimed)
        return replace(self, capacity=capacity)
