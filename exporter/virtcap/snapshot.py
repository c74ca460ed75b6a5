"""A hypervisor's latest audited state: facts plus the capacity computed from them, or the error."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from virtcap.config import Hypervisor
from virtcap.facts import HostFacts
from virtcap.model import Amounts, HostCapacity, host_capacity


@dataclass(frozen=True, slots=True)
class HypervisorSnapshot:
    name: str
    up: bool
    error: str | None
    facts: HostFacts | None
    capacity: HostCapacity | None
    taken_at: float

    @classmethod
    def audited(
        cls,
        hypervisor: Hypervisor,
        facts: HostFacts,
        flavors: Mapping[str, Amounts],
        claimed: Amounts | None = None,
    ) -> HypervisorSnapshot:
        capacity = host_capacity(facts, hypervisor.policy, flavors, claimed)
        return cls(hypervisor.name, True, None, facts, capacity, facts.audited_at)

    @classmethod
    def failed(cls, hypervisor: Hypervisor, error: str) -> HypervisorSnapshot:
        return cls(hypervisor.name, False, error, None, None, time.time())
