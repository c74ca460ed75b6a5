"""One hypervisor as the scheduler sees it (Nova's `HostState`): up or not, its capacity with
what the simulation placed on it, the values its weighers read, and its domains as the demands
they would make if they were scheduled again (an evacuation)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.capacity import HostCapacity, domain_allocation, host_capacity
from virtcap.model.facts import DomainFacts, HostFacts
from virtcap.model.host_fit import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.nova import nova_request
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import MIB, Amounts, Resource


@dataclass(frozen=True, slots=True)
class Guest:
    """A domain of a host as the scheduler would see it when it is moved: its request."""

    name: str
    demand: Demand
    uuid: str = ""
    """The domain's UUID, where known (a plan names the domains it moves by it)."""

    @property
    def size(self) -> tuple[int, int, int]:
        """Memory, vCPUs (shared and dedicated), disk: the order a host's domains are evacuated
        in, largest first."""
        request = self.demand.request
        return (
            request.get(Resource.MEMORY, 0),
            request.get(Resource.VCPU, 0) + request.get(Resource.PCPU, 0),
            request.get(Resource.DISK, 0),
        )


def evacuation_order(guests: Sequence[Guest]) -> list[Guest]:
    """Largest first: by memory, then vCPUs, then disk, then name."""
    return sorted(guests, key=lambda guest: (*(-amount for amount in guest.size), guest.name))


WeigherLevels = tuple[int | None, float, int, int | None]
"""What the weighers' raw values are computed from: free memory in bytes (None: no memory
inventory), `vcpus_total x cpu_allocation_ratio`, `vcpus_used`, free disk in bytes (None: no
storage found)."""

WeigherValues = tuple[float, float, float]
"""The RAM, CPU and disk weighers' values of one host, in this order."""


@dataclass(frozen=True, slots=True)
class HostState:
    """One hypervisor as the scheduler sees it: whether it is up, its capacity (with what this
    simulation placed on it consumed), and its domains (for an evacuation).

    The weighers read the compute node's legacy values, derived here from the capacity:

    - `free_ram_mb`: total - reserved - used memory in MiB, without the allocation ratio;
    - `vcpus_total` (the VCPU inventory's total: the shared set, or every CPU),
      `cpu_allocation_ratio` (VCPU's) and `vcpus_used`: `reserved_host_cpus` plus every
      instance's vCPUs, shared or dedicated, as the resource tracker and `consume_from_request`
      add a flavor's vCPUs whatever its CPU policy (here its VCPU and PCPU allocations: an
      instance isolating its emulator threads counts the extra PCPU too);
    - `free_disk_mb`: (total - reserved_host_disk_mb - used disk) in MiB, without the ratio, the
      reserved MiB as configured (not rounded up to GiB as the inventory's), without the
      `disk_available_least` cap; None where the storage was not found.
    """

    name: str
    capacity: HostCapacity
    up: bool = True
    stale: bool = False
    reserved_disk_bytes: int = 0
    """`reserved_host_disk_mb`, in bytes, as configured."""
    availability_zone: str | None = None
    """Its zone; None: in no zone (Nova's default zone), where only demands for any zone go."""
    guests: tuple[Guest, ...] = ()
    placed: tuple[Demand, ...] = ()
    """What this simulation placed on it, in order."""
    _raw_weigher_values: Mapping[str, float] = field(init=False, repr=False, compare=False)
    """The weighers' raw values, computed once: a state is weighed at every step of a request."""

    def __post_init__(self) -> None:
        ram, cpu, disk = raw_weigher_values(weigher_levels(self))
        object.__setattr__(self, "_raw_weigher_values", {"ram": ram, "cpu": cpu, "disk": disk})

    @property
    def free_ram_mb(self) -> float:
        memory = self.capacity.resources.get(Resource.MEMORY)
        if memory is None:
            return 0.0
        return ((memory.total or 0) - (memory.reserved or 0) - memory.used) / MIB

    @property
    def vcpus_total(self) -> int:
        vcpu = self.capacity.resources.get(Resource.VCPU)
        return vcpu.total or 0 if vcpu is not None else 0

    @property
    def cpu_allocation_ratio(self) -> float:
        vcpu = self.capacity.resources.get(Resource.VCPU)
        return vcpu.allocation_ratio if vcpu is not None else Resource.VCPU.default_allocation_ratio

    @property
    def vcpus_used(self) -> int:
        resources = self.capacity.resources
        vcpu, pcpu = resources.get(Resource.VCPU), resources.get(Resource.PCPU)
        reserved = (vcpu.reserved or 0) if vcpu is not None else 0
        return reserved + (vcpu.used if vcpu is not None else 0) + (pcpu.used if pcpu is not None else 0)

    @property
    def free_disk_mb(self) -> float | None:
        disk = self.capacity.resources.get(Resource.DISK)
        if disk is None or disk.total is None:
            return None
        return (disk.total - self.reserved_disk_bytes - disk.used) / MIB

    @property
    def maintenance(self) -> str | None:
        """Why it is in maintenance (its capacity's), None when it is not: ComputeFilter refuses it,
        as Nova's refuses a disabled compute service, with the reason."""
        return self.capacity.maintenance

    @property
    def refused_by_compute(self) -> bool:
        """ComputeFilter refuses it: down, stale, or in maintenance."""
        return not self.up or self.stale or self.capacity.maintenance is not None

    def raw_weights(self) -> Mapping[str, float]:
        """The RAM, CPU and disk weighers' raw values, before clipping."""
        return self._raw_weigher_values

    def consume(self, demand: Demand) -> HostState:
        """The state once one instance of the demand is placed (it must fit: see `claim_test`):
        its classes claimed, its cells, devices and vGPUs taken, as `host_capacity` with the
        instance among the pending claims computes them. The per-flavor counts of the capacity
        are left out (they would be out of date)."""
        return consume_in_turn(self, (demand,))


def consume_in_turn(state: HostState, demands: Sequence[Demand]) -> HostState:
    """`HostState.consume` of each demand in turn, in one pass: the same state (the claims are
    sums of integers, the cells and devices taken in the same order), built once. An evacuation
    places many domains on a host and only needs the host's state at its end."""
    capacity = state.capacity
    claimed: dict[Resource, int] = {}
    within = capacity.within
    vgpus = list(capacity.claimed_vgpus)
    for demand in demands:
        for resource, amount in demand.request.items():
            if amount > 0:
                claimed[resource] = claimed.get(resource, 0) + amount
        taken = within.take(demand.within)
        if taken is None:
            raise ValueError(f"{state.name}: the demand does not fit its cells and devices")
        within = taken
        wanted = demand.request.get(Resource.VGPU, 0)
        if wanted > 0:
            vgpus.append(wanted)
    resources = dict(capacity.resources)
    for resource, amount in claimed.items():
        current = resources[resource]
        resources[resource] = replace(current, claimed=current.claimed + amount)
    consumed = replace(
        capacity,
        resources=resources,
        within=within,
        claimed_vgpus=tuple(vgpus),
        schedulable={},
        bottlenecks={},
        limited_within={},
        refusals={},
    )
    return replace(state, capacity=consumed, placed=(*state.placed, *demands))


def weigher_levels(state: HostState) -> WeigherLevels:
    """A state's levels, from the integers of its capacity (see `HostState`)."""
    resources = state.capacity.resources
    memory = resources.get(Resource.MEMORY)
    ram = None if memory is None else (memory.total or 0) - (memory.reserved or 0) - memory.used
    disk = resources.get(Resource.DISK)
    room = None if disk is None or disk.total is None else disk.total - state.reserved_disk_bytes - disk.used
    return ram, state.vcpus_total * state.cpu_allocation_ratio, state.vcpus_used, room


def raw_weigher_values(levels: WeigherLevels, memory: int = 0, cpus: int = 0, disk: int = 0) -> WeigherValues:
    """The RAM, CPU and disk weighers' raw values from the levels, less `memory` and `disk`
    bytes and `cpus` vCPUs more claimed: one formula for a state and for a state an evacuation
    consumed (integers until the last division, so the two are equal to the bit)."""
    ram, capacity, used, room = levels
    return (
        (ram - memory) / MIB if ram is not None else 0.0,
        capacity - (used + cpus),
        (room - disk) / MIB if room is not None else 0.0,
    )


def host_state(
    name: str,
    facts: HostFacts,
    policy: HostPolicy,
    *,
    claimed: Amounts | None = None,
    pending: Sequence[Demand] = (),
    up: bool = True,
    stale: bool = False,
    maintenance: str | None = None,
    availability_zone: str | None = None,
) -> HostState:
    """A hypervisor's state from its facts, policy and pending claims (see `host_capacity`), and
    why it is in maintenance, if it is."""
    return HostState(
        name=name,
        capacity=host_capacity(facts, policy, None, claimed, pending, maintenance=maintenance),
        up=up,
        stale=stale,
        reserved_disk_bytes=policy.reserved.get(Resource.DISK, 0),
        availability_zone=availability_zone,
        guests=tuple(
            Guest(domain.name, domain_demand(domain, policy, availability_zone), domain.uuid)
            for domain in facts.domains
            if domain.state in policy.counted_states
        ),
    )


def domain_demand(domain: DomainFacts, policy: HostPolicy, availability_zone: str | None = None) -> Demand:
    """What a domain asks for when it is scheduled again: a plain domain its allocation; a Nova
    guest its flavor's request, group by group (which adds up to its allocation), and the NUMA
    topology and devices its flavor's extra specs ask for (none where Nova would refuse them;
    the image's `hw_*` properties are not read). On a host in an availability zone, it stays in
    that zone (see the package's docstring)."""
    if domain.nova is None:
        return Demand(
            domain_allocation(domain, policy.cpu_dedicated_set), availability_zone=availability_zone
        )
    request = nova_request(domain.nova)  # its request groups: each is held to max_unit on its own
    within: WithinHost = NOTHING_WITHIN
    flavor = domain.nova.flavor
    try:
        within = within_host(flavor.vcpus, flavor.memory_mib * MIB, flavor.extra_specs)
    except ValueError:
        within = NOTHING_WITHIN
    return Demand(request, within, availability_zone)
