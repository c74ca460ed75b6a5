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

from virtcap.model.facts import DomainFacts, DomainState, HostFacts

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

    @property
    def placement_unit(self) -> int:
        """How many of our units (cpus, bytes) make one of Placement's: MEMORY_MB counts MiB,
        DISK_GB counts GiB, and capacity is truncated in those units, not in bytes."""
        return _PLACEMENT_UNITS[self]


_PLACEMENT_UNITS: Mapping[Resource, int] = {
    Resource.VCPU: 1,
    Resource.PCPU: 1,
    Resource.MEMORY: MIB,
    Resource.DISK: GIB,
}

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
    refused: str | None = None
    """Why Placement would hold no inventory of the class (reserved above total, a CPU set naming
    offline CPUs): the hypervisor then offers none of it, and says so."""

    @property
    def unit(self) -> str:
        return self.resource.unit

    @property
    def usable(self) -> int | None:
        """total - reserved, never below 0; 0 for a refused inventory; None if unknown."""
        if self.total is None or self.reserved is None:
            return None
        if self.refused is not None:
            return 0
        return max(self.total - self.reserved, 0)

    @property
    def limit(self) -> int | None:
        """None where the total is unknown: unlimited, never 0 (a 0 would read as "full")."""
        usable = self.usable
        if usable is None:
            return None
        # Placement computes capacity in floating point in the class's unit (cpus, MiB, GiB) and
        # truncates it there: int((total - reserved) x ratio) whole units.
        unit = self.resource.placement_unit
        return int(usable // unit * self.allocation_ratio) * unit

    @property
    def max_unit(self) -> int | None:
        """The largest single allocation Placement accepts: Nova reports max_unit = total, so an
        instance never overcommits against itself, yet may be larger than total - reserved."""
        if self.total is None:
            return None
        return 0 if self.refused is not None else self.total

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
    """Hugepage-backed guest memory: tracked per NUMA cell by Nova, not as ordinary memory."""
    bottlenecks: Mapping[str, Resource | None] = field(default_factory=dict)
    """Per flavor, the resource that limits how many more instances fit."""

    @property
    def problems(self) -> tuple[str, ...]:
        """What the configuration makes the hypervisor refuse (offline CPUs in a set, reserved
        above total), each reason once: loud, since the hypervisor offers nothing of those."""
        return tuple(sorted({rc.refused for rc in self.resources.values() if rc.refused is not None}))


def domain_allocation(domain: DomainFacts, dedicated_cpus: frozenset[int] | None) -> dict[Resource, int]:
    """What one domain is allocated, in whole MiB of memory and whole GiB of disk as Placement
    counts them. The Nova flavor in its metadata wins where present."""
    flavor = domain.nova_flavor
    vcpus = flavor.vcpus if flavor is not None else domain.vcpus
    if flavor is not None:
        memory = flavor.memory_mib * MIB
        # Nova's scheduler asks for swap in whole GiB, rounded up.
        disk = (
            flavor.root_gib + flavor.ephemeral_gib + placement_units(Resource.DISK, flavor.swap_mib * MIB)
        ) * GIB
    else:
        memory = placement_units(Resource.MEMORY, domain.memory_bytes) * MIB
        local = sum(d.capacity_bytes or 0 for d in domain.disks if d.local)
        disk = placement_units(Resource.DISK, local) * GIB
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
    """The inventory totals Nova's libvirt driver reports: CPUs of the sets (or every CPU),
    memory, and the storage for instance disks floored to whole GiB (None when none was found)."""
    if policy.cpu_shared_set is not None:
        vcpu_total = len(policy.cpu_shared_set)
    elif policy.cpu_dedicated_set is not None:
        vcpu_total = 0  # every host CPU is either dedicated or in neither set: none is shared
    else:
        vcpu_total = facts.cpus
    storage = facts.storage
    return {
        Resource.VCPU: vcpu_total,
        Resource.PCPU: len(policy.cpu_dedicated_set or ()),
        Resource.MEMORY: facts.memory_bytes // MIB * MIB,
        Resource.DISK: storage.capacity_bytes // GIB * GIB if storage is not None else None,
    }


def inventory_reserved(resource: Resource, policy: HostPolicy) -> int:
    """The reserved amount in whole units of the class, rounded up: Nova reserves
    ceil(reserved_host_disk_mb / 1024) GiB of disk."""
    return placement_units(resource, policy.reserved.get(resource, 0)) * resource.placement_unit


def refusals(
    facts: HostFacts, policy: HostPolicy, totals: Mapping[Resource, int | None]
) -> dict[Resource, str]:
    """The classes Placement would hold no inventory of, and why.

    A CPU set naming a CPU that is not online makes nova-compute refuse its configuration: the
    hypervisor then offers nothing at all. A reserved amount above the total makes Placement
    refuse that class's inventory.
    """
    online = facts.online_cpus
    if online is not None:
        for key, cpus in (
            ("cpu_shared_set", policy.cpu_shared_set),
            ("cpu_dedicated_set", policy.cpu_dedicated_set),
        ):
            offline = (cpus or frozenset()) - online
            if offline:
                cpus_named = format_cpu_list(offline)
                why = f"{key} names CPUs that are not online ({cpus_named}): Nova refuses the configuration"
                return dict.fromkeys(RESOURCES, why)
    refused = {}
    for resource, total in totals.items():
        reserved = inventory_reserved(resource, policy)
        if total is not None and total > 0 and reserved > total:
            refused[resource] = (
                f"reserved {resource.value} exceeds its total: Placement refuses the inventory"
            )
    return refused


def format_cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


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
    refused = refusals(facts, policy, totals)
    resources = {
        resource: ResourceCapacity(
            resource=resource,
            total=total,
            reserved=inventory_reserved(resource, policy) if total is not None else None,
            allocation_ratio=policy.allocation_ratios.get(resource, 1.0),
            allocated_by_state=allocated[resource],
            counted_states=policy.counted_states,
            claimed=claimed.get(resource, 0),
            actual=actual[resource],
            refused=refused.get(resource),
        )
        for resource, total in totals.items()
    }
    fits = {name: flavor_fit(resources, request) for name, request in (flavors or {}).items()}
    schedulable = {name: count for name, (count, _) in fits.items()}
    bottlenecks = {name: resource for name, (_, resource) in fits.items()}
    return HostCapacity(resources, domains_by_state, schedulable, hugepage_bytes, bottlenecks)


def placement_units(resource: Resource, amount: int) -> int:
    """An amount in Placement's unit of the class, rounded up: an allocation is whole MiB or GiB."""
    unit = resource.placement_unit
    return -(-amount // unit)


def flavor_fit(
    resources: Mapping[Resource, ResourceCapacity], request: Amounts
) -> tuple[int, Resource | None]:
    """How many more instances of a flavor fit, and the resource that limits them: how many
    allocations of the request Placement would accept in a row.

    0 when a requested amount exceeds the class's max_unit (its total: an instance never
    overcommits against itself), else the minimum over requested resources of floor(free /
    request) in the class's unit, never below 0. A resource without a known total is unlimited,
    as in Nova's claim test: it never limits the count nor is it the bottleneck.
    """
    best: tuple[int, Resource | None] = (0, None)
    first = True
    for resource, amount in request.items():
        capacity = resources.get(resource)
        if amount <= 0 or capacity is None:
            continue
        free, max_unit = capacity.free, capacity.max_unit
        if free is None or max_unit is None:
            continue
        wanted = placement_units(resource, amount)
        if wanted > placement_units(resource, max_unit):
            return 0, resource
        fits = max(placement_free(capacity) // wanted, 0)
        if first or fits < best[0]:
            best, first = (fits, resource), False
    return best


def placement_free(capacity: ResourceCapacity) -> int:
    """limit - used in the class's unit, every allocation counted in whole units."""
    limit = capacity.limit
    assert limit is not None
    resource = capacity.resource
    return limit // resource.placement_unit - placement_units(resource, capacity.used)


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
    when it is larger than the class's max_unit (the total) or than free = limit - used.
    """
    reasons: list[str] = []
    for resource in RESOURCES:
        requested = request.get(resource, 0)
        capacity = resources.get(resource)
        if requested <= 0 or capacity is None:
            continue
        free, max_unit = capacity.free, capacity.max_unit
        if free is None or max_unit is None:
            continue
        unit, scale = _CLAIM_UNITS[resource]
        wanted = _amount(requested, scale)
        wanted_units = placement_units(resource, requested)
        if wanted_units > placement_units(resource, max_unit):
            reasons.append(
                f"Requested {resource.value} {wanted} {unit} > max_unit {_amount(max_unit, scale)} {unit}: "
                "larger than the whole hypervisor"
            )
        elif wanted_units > placement_free(capacity):
            reasons.append(f"Free {resource.value} {free / scale:.2f} {unit} < requested {wanted} {unit}")
    return reasons


def _amount(value: int, scale: int) -> str:
    return str(value // scale) if value % scale == 0 else f"{value / scale:.2f}"
