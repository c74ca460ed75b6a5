"""Capacity accounting as Nova's resource tracker and Placement do it. Pure: facts in, numbers out.

limit = floor((total - reserved) x allocation_ratio), used = allocations of counted domains plus
pending claims (Placement's convention: reserved is not part of used), free = limit - used, which
goes negative when allocations exceed the policy. A resource whose total could not be read (no
storage found for instance disks) has no inventory: its allocations are still counted, but it has
no reserved amount, limit or free, and it limits no request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from virtcap.model.facts import DomainFacts, DomainState, HostFacts
from virtcap.model.host_fit import (
    CellsAndDevices,
    Constraint,
    Demand,
    cells_and_devices,
    with_pending,
)
from virtcap.model.memory_backing import hugepage_backed_bytes
from virtcap.model.nova import nova_allocation
from virtcap.model.policy import STATES, HostPolicy, Inventory
from virtcap.model.resources import (
    GIB,
    MIB,
    Amounts,
    Resource,
    display_order,
    placement_units,
    request_groups,
)
from virtcap.model.vgpu import VgpuCapacity, vgpu_capacity


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
    min_unit: int = 1
    step_size: int = 1
    """In Placement's unit of the class, as min_unit and max_unit: one allocation is a multiple."""
    declared_max_unit: int | None = None
    """A declared inventory's max_unit, in the class's unit; None: the total."""

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
        if self.refused is not None:
            return 0
        return self.total if self.declared_max_unit is None else self.declared_max_unit

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
    hugepage_memory_bytes: int = 0
    """Memory of counted domains backed by hugepages: part of used memory (Nova allocates it as
    MEMORY_MB), and also held in hugepages, which Nova tracks per NUMA cell. Of a domain whose
    guest cells are not all backed by hugepages, only theirs (memory_backing)."""
    bottlenecks: Mapping[str, Resource | None] = field(default_factory=dict)
    """Per flavor, the resource that limits how many more instances fit (None where its NUMA fit
    or its devices limit it more: see `limited_within`)."""
    within: CellsAndDevices = field(default_factory=CellsAndDevices)
    """The NUMA cells and PCI pools with what domains and pending claims use."""
    vgpus: VgpuCapacity = field(default_factory=VgpuCapacity)
    limited_within: Mapping[str, Constraint] = field(default_factory=dict)
    """The flavors whose NUMA fit or devices let fewer fit than the whole-host amounts, and which."""
    refusals: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per flavor of which no more instance fits, why: the classes, cells or pools that refuse it."""
    refused_within: frozenset[str] = frozenset()
    """The flavors of which no more instance fits because of the NUMA cells or the PCI devices
    alone: the classes would take one more."""
    claimed_vgpus: tuple[int, ...] = ()
    """The vGPUs of each pending claim, oldest first: each claim takes its own from one GPU."""
    maintenance: str | None = None
    """Why the hypervisor is in maintenance (model/maintenance.py), None when it is not: it then
    offers nothing (no flavor fits, the scheduler refuses it) while its inventories and usage
    stay as they are."""

    def claim_test(self, demand: Demand) -> list[str]:
        """Every reason one more instance of the demand does not fit (Nova's claim test, then
        the vGPUs, the NUMA cells and the PCI devices); empty when it fits."""
        fit_test = _InstanceFitTest(self.resources, self.vgpus, self.claimed_vgpus, self.within)
        return list(fit_test.refusals(demand))

    def fit_count(self, demand: Demand) -> FlavorCount:
        """How many more instances of the demand fit, one after another, as `schedulable` counts a
        flavor: the classes, then the vGPUs, the NUMA cells and the PCI devices."""
        return _InstanceFitTest(self.resources, self.vgpus, self.claimed_vgpus, self.within).count(demand)

    @property
    def problems(self) -> tuple[str, ...]:
        """What the configuration makes the hypervisor refuse (offline CPUs in a set, reserved
        above total), each reason once: loud, since the hypervisor offers nothing of those."""
        return tuple(sorted({rc.refused for rc in self.resources.values() if rc.refused is not None}))


def domain_allocation(domain: DomainFacts, dedicated_cpus: frozenset[int] | None) -> dict[Resource, int]:
    """What one domain is allocated, in whole MiB of memory and whole GiB of disk as Placement
    counts them: Nova's own request for a Nova instance (its metadata), else virtcap's rule for
    plain domains (docs/accounting.md). Hugepage-backed memory counts as memory either way."""
    if domain.nova is not None:
        return nova_allocation(domain.nova)
    local = sum(d.capacity_bytes or 0 for d in domain.disks if d.local)
    cpus = Resource.PCPU if is_dedicated(domain, dedicated_cpus) else Resource.VCPU
    allocation = {
        cpus: domain.vcpus,
        Resource.MEMORY: placement_units(Resource.MEMORY, domain.memory_bytes) * MIB,
        Resource.DISK: placement_units(Resource.DISK, local) * GIB,
    }
    if domain.layout.mdev_uuids:  # a vGPU each, as Nova allocates them
        allocation[Resource.VGPU] = len(domain.layout.mdev_uuids)
    return allocation


def is_dedicated(domain: DomainFacts, dedicated_cpus: frozenset[int] | None) -> bool:
    """A domain consumes dedicated pCPUs when every vCPU is pinned inside cpu_dedicated_set."""
    if not dedicated_cpus or not domain.vcpu_pins:
        return False
    return all(pin is not None and pin <= dedicated_cpus for pin in domain.vcpu_pins)


def host_totals(
    facts: HostFacts, policy: HostPolicy, vgpus: VgpuCapacity | None = None
) -> dict[Resource, int | None]:
    """The inventory totals Nova's libvirt driver reports: CPUs of the sets (or every CPU),
    memory, the storage for instance disks floored to whole GiB (None when none was found), the
    vGPUs of the GPUs that have a provider; then the declared inventories."""
    if policy.cpu_shared_set is not None:
        vcpu_total = len(policy.cpu_shared_set)
    elif policy.cpu_dedicated_set is not None:
        vcpu_total = 0  # every host CPU is either dedicated or in neither set: none is shared
    else:
        vcpu_total = facts.cpus
    storage = facts.storage
    totals: dict[Resource, int | None] = {
        Resource.VCPU: vcpu_total,
        Resource.PCPU: len(policy.cpu_dedicated_set or ()),
        Resource.MEMORY: facts.memory_bytes // MIB * MIB,
        Resource.DISK: storage.capacity_bytes // GIB * GIB if storage is not None else None,
    }
    if vgpus is not None and any(gpu.has_provider for gpu in vgpus.gpus):
        totals[Resource.VGPU] = vgpus.total
    for resource, inventory in policy.inventories.items():
        totals[resource] = inventory.total * resource.placement_unit
    return totals


def inventory_reserved(resource: Resource, policy: HostPolicy) -> int:
    """The reserved amount in whole units of the class, rounded up: Nova reserves
    ceil(reserved_host_disk_mb / 1024) GiB of disk."""
    declared = policy.inventories.get(resource)
    if declared is not None:
        return declared.reserved * resource.placement_unit
    return placement_units(resource, policy.reserved.get(resource, 0)) * resource.placement_unit


def allocation_ratio(resource: Resource, policy: HostPolicy) -> float:
    declared = policy.inventories.get(resource)
    if declared is not None:
        return declared.allocation_ratio
    return policy.allocation_ratios.get(resource, resource.default_allocation_ratio)


def refusals(
    facts: HostFacts, policy: HostPolicy, totals: Mapping[Resource, int | None]
) -> dict[Resource, str]:
    """The classes Placement would hold no inventory of, and why.

    A CPU set naming a CPU that is not online makes nova-compute refuse its configuration: the
    hypervisor then offers nothing at all. A reserved amount so far above the total that the
    capacity is negative makes Placement refuse that class's inventory.
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
                return dict.fromkeys(totals, why)
    refused = {}
    for resource, total in totals.items():
        if total is None or total <= 0:
            continue
        # Placement refuses an inventory whose capacity, int((total - reserved) x ratio) in the
        # class's unit, is below 0: a reserve one unit above the total at a ratio of 0.5 passes.
        unit = resource.placement_unit
        overshoot = (
            (total - inventory_reserved(resource, policy)) // unit * allocation_ratio(resource, policy)
        )
        if int(overshoot) < 0:
            why = f"reserved {resource.label} exceeds its total: Placement refuses the inventory"
            refused[resource] = why
    return refused


def format_cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def host_actual_usage(facts: HostFacts) -> dict[Resource, float | None]:
    return {
        Resource.VCPU: facts.busy_cpus,
        Resource.MEMORY: facts.memory_in_use_bytes,
        Resource.DISK: facts.storage.used_bytes if facts.storage is not None else None,
    }


def host_capacity(
    facts: HostFacts,
    policy: HostPolicy,
    flavors: Mapping[str, Demand] | None = None,
    claimed: Amounts | None = None,
    pending: Sequence[Demand] = (),
    *,
    maintenance: str | None = None,
) -> HostCapacity:
    """Every class the hypervisor offers, and every class a domain or a claim uses even where it
    is not offered (a CUSTOM_* class of a Nova flavor on a host without that inventory: total 0,
    so its free amount goes negative and shows the mismatch); its NUMA cells, PCI pools and
    vGPUs; how many more of each flavor fit. `pending` is the pending claims one by one (oldest
    first), which take their cells, devices and GPU; `claimed` their amounts together. Without
    `pending`, the claimed vGPUs are one claim. In `maintenance` (its reason), no flavor fits,
    and each says why; the inventories, usage, cells and devices are what they are."""
    allocated: dict[Resource, dict[DomainState, int]] = {}
    domains_by_state = dict.fromkeys(STATES, 0)
    hugepage_bytes = 0
    small_page_kib = min((page.size_kib for cell in facts.numa_cells for page in cell.pages), default=None)
    for domain in facts.domains:
        domains_by_state[domain.state] += 1
        allocation = domain_allocation(domain, policy.cpu_dedicated_set)
        for resource, amount in allocation.items():
            allocated.setdefault(resource, dict.fromkeys(STATES, 0))[domain.state] += amount
        if domain.hugepages and domain.state in policy.counted_states:
            backed = hugepage_backed_bytes(domain, small_page_kib)
            # all of it: what Nova allocates; some guest cells only: their own memory
            hugepage_bytes += allocation.get(Resource.MEMORY, 0) if backed >= domain.memory_bytes else backed
    actual = host_actual_usage(facts)
    claimed = claimed or {}
    vgpus = vgpu_capacity(facts, policy.enabled_mdev_types, policy.counted_states)
    totals = host_totals(facts, policy, vgpus)
    for resource in _used_classes(allocated, claimed):
        totals.setdefault(resource, 0)
    refused = refusals(facts, policy, totals)
    resources = {
        resource: ResourceCapacity(
            resource=resource,
            total=totals[resource],
            reserved=inventory_reserved(resource, policy) if totals[resource] is not None else None,
            allocation_ratio=allocation_ratio(resource, policy),
            allocated_by_state=allocated.get(resource) or dict.fromkeys(STATES, 0),
            counted_states=policy.counted_states,
            claimed=claimed.get(resource, 0),
            actual=actual.get(resource),
            refused=refused.get(resource),
            **_declared_units(resource, policy.inventories.get(resource), vgpus),
        )
        for resource in display_order(totals)
    }
    within = with_pending(cells_and_devices(facts, policy), [claim.within for claim in pending])
    claimed_vgpus = tuple(amount for claim in pending if (amount := claim.request.get(Resource.VGPU, 0)) > 0)
    if not pending and claimed.get(Resource.VGPU, 0) > 0:
        claimed_vgpus = (claimed[Resource.VGPU],)
    fit_test = _InstanceFitTest(resources, vgpus, claimed_vgpus, within)
    if maintenance is not None:
        # offered nothing, as a disabled compute service: the counts are 0 whatever is free
        why = (f"in maintenance: {maintenance}",)
        return HostCapacity(
            resources,
            domains_by_state,
            schedulable=dict.fromkeys(flavors or {}, 0),
            hugepage_memory_bytes=hugepage_bytes,
            bottlenecks=dict.fromkeys(flavors or {}),
            within=within,
            vgpus=vgpus,
            claimed_vgpus=claimed_vgpus,
            refusals=dict.fromkeys(flavors or {}, why),
            maintenance=maintenance,
        )
    flavors = flavors or {}
    fits = {name: fit_test.count(demand) for name, demand in flavors.items()}
    refused_by_class = {
        name: fit_test.class_refusals(flavors[name]) for name, fit in fits.items() if fit.count == 0
    }
    # the flavors only the cells or the devices refuse, typed: the report tells them apart by that
    refused_within = {
        name: within_refusals
        for name, reasons in refused_by_class.items()
        if not reasons and (within_refusals := within.refusals(flavors[name].within))
    }
    return HostCapacity(
        resources,
        domains_by_state,
        schedulable={name: fit.count for name, fit in fits.items()},
        hugepage_memory_bytes=hugepage_bytes,
        bottlenecks={name: fit.bottleneck for name, fit in fits.items()},
        within=within,
        vgpus=vgpus,
        limited_within={name: fit.limited for name, fit in fits.items() if fit.limited is not None},
        claimed_vgpus=claimed_vgpus,
        refusals={
            name: reasons or tuple(refusal.message for refusal in refused_within.get(name, ()))
            for name, reasons in refused_by_class.items()
        },
        refused_within=frozenset(refused_within),
    )


@dataclass(frozen=True, slots=True)
class FlavorCount:
    count: int
    bottleneck: Resource | None
    limited: Constraint | None = None


@dataclass(frozen=True, slots=True)
class _InstanceFitTest:
    """What decides a count beyond the whole-host classes: vGPUs come from one GPU each, and the
    cells and devices hold the instances Nova's filters let in."""

    resources: Mapping[Resource, ResourceCapacity]
    vgpus: VgpuCapacity
    claimed_vgpus: tuple[int, ...]
    within: CellsAndDevices

    def count(self, demand: Demand) -> FlavorCount:
        count, bottleneck = flavor_fit(self.resources, demand.request)
        groups = vgpu_groups(demand.request)
        if groups and count > 0:
            on_gpus = vgpu_fits(self.vgpus, groups, self.claimed_vgpus, count)
            if on_gpus < count:
                count, bottleneck = on_gpus, Resource.VGPU
        if count == 0 or not demand.within.asks:
            return FlavorCount(count, bottleneck)
        within = self.within.count(demand.within, count)
        if within < count:
            limited: Constraint = "numa" if demand.within.topology is not None else "pci"
            return FlavorCount(within, None, limited)
        return FlavorCount(count, bottleneck)

    def refusals(self, demand: Demand) -> tuple[str, ...]:
        """Why one more does not fit: the classes first (Nova's claim test), then the vGPUs, the
        cells and the devices."""
        return self.class_refusals(demand) or tuple(
            refusal.message for refusal in self.within.refusals(demand.within)
        )

    def class_refusals(self, demand: Demand) -> tuple[str, ...]:
        """Why the classes (Nova's claim test) or the vGPUs refuse one more: empty when only the
        cells or the devices could still refuse it."""
        groups = vgpu_groups(demand.request)
        # a flavor's groups may take their vGPUs from several GPUs: its units are held per group
        reasons = [
            reason
            for reason in claim_test(self.resources, demand.request)
            if len(groups) == 1 or not reason.startswith(f"Requested {Resource.VGPU.label} ")
        ]
        if not reasons and groups and vgpu_fits(self.vgpus, groups, self.claimed_vgpus, 1) == 0:
            reasons.append(vgpu_refusal(self.vgpus, groups, self.claimed_vgpus))
        return tuple(reasons)


def vgpu_groups(request: Amounts) -> tuple[int, ...]:
    """The vGPUs of each request group that asks for some: each group's come from one GPU."""
    return tuple(amount for group in request_groups(request) if (amount := group.get(Resource.VGPU, 0)) > 0)


def vgpu_fits(vgpus: VgpuCapacity, groups: Sequence[int], claimed: Sequence[int] = (), limit: int = 1) -> int:
    """How many instances whose groups ask for these vGPUs the GPUs still take (at most `limit`
    when they ask in several groups), each group from one GPU, once each pending claim took its
    own. One group: each GPU takes `free // amount`. Several: the groups, largest first, each on
    the GPU with the least free that holds it, instance after instance; groups may share a GPU
    (`group_policy=none`; `isolate` is not told apart)."""
    left = vgpus_left(vgpus, claimed)
    if len(groups) == 1:
        return sum(free // groups[0] for _, free in left)
    count = 0
    while count < limit and all(_take_vgpus(left, amount) for amount in sorted(groups, reverse=True)):
        count += 1
    return count


def vgpus_left(vgpus: VgpuCapacity, claimed: Sequence[int] = ()) -> list[tuple[str, int]]:
    """Each GPU with a provider and its free vGPUs once each pending claim (oldest first) took its
    vGPUs from one GPU, the one with the least free that holds them: a claim names no GPU, and
    that choice leaves the most for what comes next. A claim no GPU holds any more takes none."""
    left = [(gpu.address, max(gpu.free, 0)) for gpu in vgpus.gpus if gpu.has_provider]
    for amount in claimed:
        _take_vgpus(left, amount)
    return left


def _take_vgpus(left: list[tuple[str, int]], amount: int) -> bool:
    holding = [index for index, (_, free) in enumerate(left) if free >= amount]
    if not holding:
        return False
    index = min(holding, key=lambda i: (left[i][1], left[i][0]))
    left[index] = (left[index][0], left[index][1] - amount)
    return True


def vgpu_refusal(vgpus: VgpuCapacity, groups: Sequence[int], claimed: Sequence[int] = ()) -> str:
    asked = " + ".join(map(str, groups))
    per_gpu = ", ".join(f"{address} {free}" for address, free in vgpus_left(vgpus, claimed))
    return f"Requested VGPU {asked}: no physical GPU has the free vGPUs ({per_gpu or 'no GPU offers vGPUs'})"


def _used_classes(allocated: Mapping[Resource, object], claimed: Amounts) -> Iterable[Resource]:
    yield from allocated
    yield from (resource for resource, amount in claimed.items() if amount)


class _DeclaredUnits(TypedDict):
    min_unit: int
    step_size: int
    declared_max_unit: int | None


def _declared_units(resource: Resource, declared: Inventory | None, vgpus: VgpuCapacity) -> _DeclaredUnits:
    """A declared inventory's unit constraints; Nova's (1, 1, the total) for measured classes,
    and one GPU's total as the largest allocation of vGPUs (each allocation comes from one)."""
    if resource is Resource.VGPU and declared is None:
        return {"min_unit": 1, "step_size": 1, "declared_max_unit": vgpus.max_unit}
    if declared is None:
        return {"min_unit": 1, "step_size": 1, "declared_max_unit": None}
    largest = declared.max_unit * resource.placement_unit
    return {"min_unit": declared.min_unit, "step_size": declared.step_size, "declared_max_unit": largest}


def refusal(capacity: ResourceCapacity | None, resource: Resource, amount: int) -> str | None:
    """Why Placement refuses an allocation of `amount` (in the class's unit) of one class, in
    Nova's words; None when it fits. Without a known total the class is unlimited, as in Nova's
    claim test."""
    why = inventory_refusal(capacity, resource, amount)
    if why is not None or capacity is None or capacity.free is None:
        return why
    if placement_units(resource, amount) > placement_free(capacity):
        unit, scale = resource.refusal_unit, resource.placement_unit
        return (
            f"Free {resource.label} {capacity.free / scale:.2f} {unit} "
            f"< requested {_amount(amount, scale)} {unit}"
        )
    return None


def inventory_refusal(capacity: ResourceCapacity | None, resource: Resource, amount: int) -> str | None:
    """Why no allocation of `amount` fits whatever the usage: no inventory of the class, above
    max_unit, below min_unit or off step_size. None when only free capacity can refuse it."""
    unit, scale = resource.refusal_unit, resource.placement_unit
    requested = f"Requested {resource.label} {_amount(amount, scale)} {unit}"
    # A class of total 0 is one Nova does not report (PCPU without a dedicated set, a custom class
    # only a guest uses): no inventory, as Placement sees it.
    if capacity is None or (capacity.total == 0 and capacity.refused is None):
        return f"{requested}: no inventory of {resource.placement_class} on this hypervisor"
    if capacity.refused is not None:
        return f"{requested}: {capacity.refused}"
    if capacity.max_unit is None:
        return None
    wanted = placement_units(resource, amount)
    if wanted > placement_units(resource, capacity.max_unit):
        largest = _amount(capacity.max_unit, scale)
        why = "larger than the whole hypervisor" if capacity.max_unit == capacity.total else "above max_unit"
        return f"{requested} > max_unit {largest} {unit}: {why}"
    if wanted < capacity.min_unit:
        return f"{requested} < min_unit {capacity.min_unit} {unit}"
    if wanted % capacity.step_size:
        return f"{requested} is not a multiple of step_size {capacity.step_size} {unit}"
    return None


def flavor_fit(
    resources: Mapping[Resource, ResourceCapacity], request: Amounts
) -> tuple[int, Resource | None]:
    """How many more instances of a flavor fit, and the resource that limits them: how many
    allocations of the request Placement would accept in a row.

    0 when one allocation is refused whatever the usage (a class without inventory, above
    max_unit, below min_unit, off step_size), else the minimum over requested classes of
    floor(free / request) in the class's unit, never below 0. A class without a known total is
    unlimited, as in Nova's claim test: it never limits the count nor is it the bottleneck.
    """
    groups = request_groups(request)
    for group in groups if len(groups) > 1 else ():  # each group is held to the units on its own
        for resource in display_order(group):
            if group[resource] > 0 and inventory_refusal(resources.get(resource), resource, group[resource]):
                return 0, resource
    best: tuple[int, Resource | None] = (0, None)
    first = True
    for resource in display_order(request):
        amount = request[resource]
        if amount <= 0:
            continue
        capacity = resources.get(resource)
        # vGPUs asked in several groups may come from several GPUs (one provider each): max_unit
        # holds each group, as checked above, and vgpu_fits how they share the GPUs
        several_gpus = resource is Resource.VGPU and len(groups) > 1
        if not several_gpus and inventory_refusal(capacity, resource, amount) is not None:
            return 0, resource
        assert capacity is not None
        if capacity.free is None:
            continue
        fits = max(placement_free(capacity) // placement_units(resource, amount), 0)
        if first or fits < best[0]:
            best, first = (fits, resource), False
    return best


def placement_free(capacity: ResourceCapacity) -> int:
    """limit - used in the class's unit, every allocation counted in whole units."""
    limit = capacity.limit
    assert limit is not None
    resource = capacity.resource
    return limit // resource.placement_unit - placement_units(resource, capacity.used)


def claim_test(resources: Mapping[Resource, ResourceCapacity], request: Amounts) -> list[str]:
    """Every reason a request does not fit, in Nova's wording ("Free memory 1024.00 MiB <
    requested 2048 MiB"); empty when it fits."""
    reasons = []
    for resource in display_order(request):
        if request[resource] > 0:
            why = refusal(resources.get(resource), resource, request[resource])
            if why is not None:
                reasons.append(why)
    return reasons


def _amount(value: int, scale: int) -> str:
    return str(value // scale) if value % scale == 0 else f"{value / scale:.2f}"
