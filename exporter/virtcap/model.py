"""Capacity accounting as Nova's resource tracker and Placement do it. Pure: facts in, numbers out.

limit = floor((total - reserved) x allocation_ratio), used = allocations of counted domains plus
pending claims (Placement's convention: reserved is not part of used), free = limit - used, which
goes negative when allocations exceed the policy. A resource whose total could not be read (no
storage found for instance disks) has no inventory: its allocations are still counted, but it has
no reserved amount, limit or free, and it limits no request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from virtcap.facts import DomainFacts, DomainState, HostFacts

GIB = 1024**3
MIB = 1024**2


class Resource(StrEnum):
    VCPU = "vcpu"
    PCPU = "pcpu"
    MEMORY = "memory"
    DISK = "disk"

    @property
    def unit(self) -> str:
        return "cpus" if self in (Resource.VCPU, Resource.PCPU) else "bytes"


RESOURCES: tuple[Resource, ...] = tuple(Resource)
STATES: tuple[DomainState, ...] = tuple(DomainState)

# Nova's defaults since release 27 (2023.1): ACCOUNTING.md's table.
NOVA_ALLOCATION_RATIOS: Mapping[Resource, float] = {
    Resource.VCPU: 4.0,
    Resource.PCPU: 1.0,
    Resource.MEMORY: 1.0,
    Resource.DISK: 1.0,
}
NOVA_RESERVED: Mapping[Resource, int] = {
    Resource.VCPU: 0,
    Resource.PCPU: 0,
    Resource.MEMORY: 512 * MIB,
    Resource.DISK: 0,
}


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """What the operator decided for a hypervisor, as opposed to what it has."""

    allocation_ratios: Mapping[Resource, float] = field(default_factory=lambda: dict(NOVA_ALLOCATION_RATIOS))
    reserved: Mapping[Resource, int] = field(default_factory=lambda: dict(NOVA_RESERVED))
    cpu_shared_set: frozenset[int] | None = None
    cpu_dedicated_set: frozenset[int] | None = None
    count_inactive_domains: bool = True

    @property
    def counted_states(self) -> frozenset[DomainState]:
        if self.count_inactive_domains:
            return frozenset(STATES)
        return frozenset(STATES) - {DomainState.SHUTOFF}


Amounts = Mapping[Resource, int]
"""An amount per resource (cpus or bytes): a domain's allocation, a flavor's request, a claim."""


def amounts(vcpu: int = 0, pcpu: int = 0, memory: int = 0, disk: int = 0) -> dict[Resource, int]:
    return {Resource.VCPU: vcpu, Resource.PCPU: pcpu, Resource.MEMORY: memory, Resource.DISK: disk}


@dataclass(frozen=True, slots=True)
class ResourceCapacity:
    resource: Resource
    total: int | None
    """None when it could not be read: Placement then has no inventory of the class."""
    reserved: int | None
    """None without an inventory: nothing is taken out of a limit that does not exist."""
    allocation_ratio: float
    allocated_by_state: Mapping[DomainState, int]
    counted_states: frozenset[DomainState]
    claimed: int = 0
    actual: float | None = None

    @property
    def unit(self) -> str:
        return self.resource.unit

    @property
    def usable(self) -> int | None:
        """total - reserved, never below 0 (Placement refuses reserved > total); None if unknown."""
        if self.total is None or self.reserved is None:
            return None
        return max(self.total - self.reserved, 0)

    @property
    def limit(self) -> int | None:
        """None where the total is unknown: unlimited, never 0 (a 0 would read as "full")."""
        usable = self.usable
        if usable is None:
            return None
        # Placement computes capacity in floating point and truncates it: int((t - r) * ratio).
        return int(usable * self.allocation_ratio)

    @property
    def allocated(self) -> int:
        return sum(
            amount for state, amount in self.allocated_by_state.items() if state in self.counted_states
        )

    @property
    def used(self) -> int:
        return self.allocated + self.claimed

    @property
    def free(self) -> int | None:
        limit = self.limit
        return None if limit is None else limit - self.used

    @property
    def utilization(self) -> float | None:
        """used / limit; None where the limit is 0 or unknown and the ratio means nothing."""
        limit = self.limit
        return self.used / limit if limit else None

    @property
    def effective_overcommit(self) -> float | None:
        """used / (total - reserved), to compare with the configured allocation ratio."""
        usable = self.usable
        return self.used / usable if usable else None


@dataclass(frozen=True, slots=True)
class HostCapacity:
    resources: Mapping[Resource, ResourceCapacity]
    """Every resource; one whose total is unknown (disk without storage) has no limit."""
    domains_by_state: Mapping[DomainState, int]
    schedulable: Mapping[str, int]
    uncounted_hugepage_bytes: int = 0
    bottlenecks: Mapping[str, Resource | None] = field(default_factory=dict)
    """Per flavor, the resource that limits how many more instances fit."""
    """Hugepage-backed guest memory: tracked per NUMA cell by Nova, not as ordinary memory."""


def domain_allocation(domain: DomainFacts, dedicated_cpus: frozenset[int] | None) -> dict[Resource, int]:
    """What one domain is allocated. The Nova flavor in its metadata wins where present."""
    flavor = domain.nova_flavor
    vcpus = flavor.vcpus if flavor is not None else domain.vcpus
    memory = flavor.memory_mib * MIB if flavor is not None else domain.memory_bytes
    if flavor is not None:
        disk = (flavor.root_gib + flavor.ephemeral_gib) * GIB + flavor.swap_mib * MIB
    else:
        disk = sum(d.capacity_bytes or 0 for d in domain.disks if d.local)
    cpu_resource = Resource.PCPU if is_dedicated(domain, dedicated_cpus) else Resource.VCPU
    return {
        Resource.VCPU: vcpus if cpu_resource is Resource.VCPU else 0,
        Resource.PCPU: vcpus if cpu_resource is Resource.PCPU else 0,
        Resource.MEMORY: 0 if domain.hugepages else memory,
        Resource.DISK: disk,
    }


def is_dedicated(domain: DomainFacts, dedicated_cpus: frozenset[int] | None) -> bool:
    """A domain consumes dedicated pCPUs when every vCPU is pinned inside cpu_dedicated_set."""
    if not dedicated_cpus or not domain.vcpu_pins:
        return False
    return all(pin is not None and pin <= dedicated_cpus for pin in domain.vcpu_pins)


def host_totals(facts: HostFacts, policy: HostPolicy) -> dict[Resource, int | None]:
    """Physical totals. Disk is None when no storage was found for instance disks."""
    online = facts.online_cpus
    if policy.cpu_shared_set is not None:
        vcpu_total = len(policy.cpu_shared_set & online) if online is not None else len(policy.cpu_shared_set)
    elif policy.cpu_dedicated_set is not None:
        vcpu_total = 0  # every host CPU is either dedicated or in neither set: none is shared
    else:
        vcpu_total = facts.cpus
    dedicated = policy.cpu_dedicated_set or frozenset()
    pcpu_total = len(dedicated & online) if online is not None else len(dedicated)
    return {
        Resource.VCPU: vcpu_total,
        Resource.PCPU: pcpu_total,
        Resource.MEMORY: facts.memory_bytes,
        Resource.DISK: facts.storage.capacity_bytes if facts.storage is not None else None,
    }


def host_actual_usage(facts: HostFacts) -> dict[Resource, float | None]:
    return {
        Resource.VCPU: facts.busy_cpus,
        Resource.PCPU: None,
        Resource.MEMORY: facts.memory_in_use_bytes,
        Resource.DISK: facts.storage.used_bytes if facts.storage is not None else None,
    }


def host_capacity(
    facts: HostFacts,
    policy: HostPolicy,
    flavors: Mapping[str, Amounts] | None = None,
    claimed: Amounts | None = None,
) -> HostCapacity:
    allocated: dict[Resource, dict[DomainState, int]] = {r: dict.fromkeys(STATES, 0) for r in RESOURCES}
    domains_by_state = dict.fromkeys(STATES, 0)
    hugepage_bytes = 0
    for domain in facts.domains:
        domains_by_state[domain.state] += 1
        for resource, amount in domain_allocation(domain, policy.cpu_dedicated_set).items():
            allocated[resource][domain.state] += amount
        if domain.hugepages and domain.state in policy.counted_states:
            hugepage_bytes += domain.memory_bytes
    actual = host_actual_usage(facts)
    claimed = claimed or {}
    totals = host_totals(facts, policy)
    resources = {
        resource: ResourceCapacity(
            resource=resource,
            total=total,
            reserved=policy.reserved.get(resource, 0) if total is not None else None,
            allocation_ratio=policy.allocation_ratios.get(resource, 1.0),
            allocated_by_state=allocated[resource],
            counted_states=policy.counted_states,
            claimed=claimed.get(resource, 0),
            actual=actual[resource],
        )
        for resource, total in totals.items()
    }
    fits = {name: flavor_fit(resources, request) for name, request in (flavors or {}).items()}
    schedulable = {name: count for name, (count, _) in fits.items()}
    bottlenecks = {name: resource for name, (_, resource) in fits.items()}
    return HostCapacity(resources, domains_by_state, schedulable, hugepage_bytes, bottlenecks)


def flavor_fit(
    resources: Mapping[Resource, ResourceCapacity], request: Amounts
) -> tuple[int, Resource | None]:
    """How many more instances of a flavor fit, and the resource that limits them.

    The count is the minimum over requested resources of floor(free / request), never below 0.
    An instance never overcommits against itself: a request larger than total - reserved fits 0
    times whatever the ratio (Nova's "does not have N MB usable ram before overcommit").
    A resource without a known total is unlimited, as in Nova's claim test: it never limits the
    count nor is it the bottleneck.
    """
    best: tuple[int, Resource | None] = (0, None)
    first = True
    for resource, amount in request.items():
        capacity = resources.get(resource)
        if amount <= 0 or capacity is None:
            continue
        usable, free = capacity.usable, capacity.free
        if usable is None or free is None:
            continue
        if amount > usable:
            return 0, resource
        fits = max(free // amount, 0)
        if first or fits < best[0]:
            best, first = (fits, resource), False
    return best


# Nova's claim test words and units: "Free memory 1024.00 MiB < requested 2048 MiB".
_CLAIM_UNITS: Mapping[Resource, tuple[str, int]] = {
    Resource.VCPU: ("VCPU", 1),
    Resource.PCPU: ("PCPU", 1),
    Resource.MEMORY: ("MiB", MIB),
    Resource.DISK: ("GiB", GIB),
}


def claim_test(resources: Mapping[Resource, ResourceCapacity], request: Amounts) -> list[str]:
    """Every reason a request does not fit, in Nova's wording; empty when it fits.

    Per resource: without a limit (unknown total) it is unlimited; otherwise the request fails
    when it is larger than free = limit - used.
    """
    reasons: list[str] = []
    for resource in RESOURCES:
        requested = request.get(resource, 0)
        capacity = resources.get(resource)
        if requested <= 0 or capacity is None:
            continue
        free = capacity.free
        if free is not None and requested > free:
            unit, scale = _CLAIM_UNITS[resource]
            wanted = _amount(requested, scale)
            reasons.append(f"Free {resource.value} {free / scale:.2f} {unit} < requested {wanted} {unit}")
    return reasons


def _amount(value: int, scale: int) -> str:
    return str(value // scale) if value % scale == 0 else f"{value / scale:.2f}"
