"""Nova's scheduler, simulated: where the instances of a request land, and why a host refuses one.

Pure: host states in, placements out. SCHEDULING.md ("The scheduler") gives the steps; this module
follows Nova 34's `SchedulerManager._schedule` for a request of N instances of one demand:

1. Placement's allocation candidates, once for the request: the up hosts where every requested
   class fits one instance (with min_unit, max_unit, step_size and the vGPUs of one GPU), as
   `HostCapacity.claim_test` tests them.
2. Per instance, in turn: the candidates go through the filters (ComputeFilter: a hypervisor down,
   with stale data, or in maintenance as Nova's disabled compute service, with the reason;
   NUMATopologyFilter and PciPassthroughFilter: the demand's cells and devices;
   ServerGroupAntiAffinityFilter, when asked, among the instances of this request), the
   survivors are weighed (RAM, CPU and disk weighers, `nova.weights.normalize` over the
   survivors), and the best one whose Placement claim still succeeds takes the instance: the
   candidates are not asked for again, so a host that a previous instance filled is weighed
   (and counts in the normalization) but refused at its claim, as in Nova.
3. The chosen host consumes the instance (its classes, cells, devices and vGPUs) before the next.
   Fewer hosts than instances: nothing is placed (NoValidHost), and the result says how many
   would have fit and why each host refused the next one.
4. The next instances of the request are filtered and consumed with the NUMA topology fitted for
   the instance before on its host, as Nova's `consume_from_request` leaves it in the request
   spec (`numa.refitted`): each guest cell's page size chosen (`hw:mem_page_size` large or any
   resolved), so that a later instance must find pages of that size, on whichever host, even
   where pages of another size the flavor allows are free. The cells' ids and pinning carry over
   too (Nova's search starts from them; each fit chooses its cells and pins its CPUs again).
   Each instance's own topology, as nova-compute's claim fits it, is used on a forced host (Nova
   skips the filters there: nova-compute's claims decide, one by one), by an evacuation (one
   domain per request), and outside the scheduler: a flavor's count within a host and the
   pending claims a host state is built with (placement.py).

Decisions where Nova leaves a choice or virtcap cannot see what Nova sees:

- A host refused by several tests is reported under the first, in this order: `ignore_hosts`,
  `force_hosts`, AvailabilityZoneFilter, ComputeFilter, Placement, NUMATopologyFilter, PciPassthroughFilter,
  ServerGroupAntiAffinityFilter (Nova runs ComputeFilter after Placement; a host that is down
  is reported down, whatever its last capacity says).
- The weighers' minval is 0, so `normalize` divides by the largest value: hosts with equal
  non-zero values each weigh 1.0, not 0 (all 0 only when the largest value is 0). The order is
  the same either way; the weights shown are Nova's.
- `host_subset_size` is 1 (Nova's default): the best host, never a random one among the best;
  hosts of equal weight are taken by name, so that answers are reproducible (Nova takes them in
  Placement's order).
- The weighers' raw values are the compute node's legacy ones, derived from the capacity
  (see `HostState`); the disk weigher leaves out Nova's cap by `disk_available_least` (thin disks
  grown to their full size), which virtcap does not model. A host whose instance-disk storage
  was not found weighs 0 on disk. Aggregate multipliers (`*_weight_multiplier` in aggregate
  metadata) are not modelled: one multiplier per weigher for the whole fleet.
- `ignore_hosts` and `force_hosts` are matched without regard to case, as Nova's host manager
  matches them. Nova asks Placement for the first forced host only (and fails with "No such
  host" when it does not exist: every host not ignored is then listed as refused by
  `force_hosts`), and skips its filters for a forced host; nova-compute's claim then repeats
  the resource, NUMA and PCI tests and the late anti-affinity check, and a forced instance is
  never rescheduled, so an instance that fails them does not land. Here a forced instance is
  tested the same way as any other, on the first forced host only, and a forced host that is
  down never takes it.
- The domains of a failed host (`evacuation`) are those that count in its capacity (the
  policy's counted states), each asking for what it is allocated: a Nova guest its flavor's
  request and NUMA topology and devices (`within_host` of its extra specs), a plain domain its
  allocation.
- Availability zones: a demand with an `availability_zone` is only placed on hosts of that zone
  (refused by `AvailabilityZoneFilter` elsewhere, after ignore_hosts and force_hosts and before
  ComputeFilter). Nova 34 does it before Placement (the request filter
  `map_az_to_placement_aggregate` in nova/scheduler/request_filter.py restricts the allocation
  candidates to the zone's aggregates); releases before did it with AvailabilityZoneFilter.
  Nova keeps `RequestSpec.availability_zone` for the instance's later moves, evacuation
  included (conductor's `rebuild_instance` schedules with the stored request spec): an
  instance created in a zone (or under `default_schedule_zone`) stays in it. libvirt does not
  say whether an instance was created with a zone (its `<nova:instance>` metadata names no zone
  nor aggregate), so an evacuation takes the conservative reading: every domain of a host in a
  zone stays in that zone, and the domains of a host in no zone (Nova's default zone) may go to
  any host.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from virtcap.model.capacity import HostCapacity, HostPolicy, domain_allocation, host_capacity
from virtcap.model.facts import DomainFacts, HostFacts
from virtcap.model.nova import nova_request
from virtcap.model.numa.fitting import refitted
from virtcap.model.placement import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.resources import MIB, Amounts, Resource, placement_units, request_groups

# Filter names, as Nova names its filters (Placement for the allocation candidates and claims).
IGNORE_HOSTS = "ignore_hosts"
FORCE_HOSTS = "force_hosts"
COMPUTE = "ComputeFilter"
PLACEMENT = "Placement"
NUMA_TOPOLOGY = "NUMATopologyFilter"
PCI_PASSTHROUGH = "PciPassthroughFilter"
ANTI_AFFINITY = "ServerGroupAntiAffinityFilter"
AVAILABILITY_ZONE = "AvailabilityZoneFilter"

WEIGHERS = ("ram", "cpu", "disk")
"""Nova's RAMWeigher, CPUWeigher and DiskWeigher, summed in this order."""


@dataclass(frozen=True, slots=True)
class Multipliers:
    """`[filter_scheduler] ram_weight_multiplier`, `cpu_weight_multiplier`,
    `disk_weight_multiplier`: 1.0 spreads (Nova's default), a negative one stacks."""

    ram: float = 1.0
    cpu: float = 1.0
    disk: float = 1.0

    def of(self, weigher: str) -> float:
        value: float = getattr(self, weigher)
        return value


SPREAD = Multipliers()


@dataclass(frozen=True, slots=True)
class Guest:
    """A domain of a host as the scheduler would see it when it is moved: its request."""

    name: str
    demand: Demand

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
    _raw: Mapping[str, float] = field(init=False, repr=False, compare=False)
    """The weighers' raw values, computed once: a state is weighed at every step of a request."""

    def __post_init__(self) -> None:
        ram, cpu, disk = _raw_values(_levels(self))
        object.__setattr__(self, "_raw", {"ram": ram, "cpu": cpu, "disk": disk})

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
        return self._raw

    def consume(self, demand: Demand) -> HostState:
        """The state once one instance of the demand is placed (it must fit: see `claim_test`):
        its classes claimed, its cells, devices and vGPUs taken, as `host_capacity` with the
        instance among the pending claims computes them. The per-flavor counts of the capacity
        are left out (they would be out of date)."""
        return _consumed(self, (demand,))


def _consumed(state: HostState, demands: Sequence[Demand]) -> HostState:
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
        placement_limited={},
        refusals={},
    )
    return replace(state, capacity=consumed, placed=(*state.placed, *demands))


_Levels = tuple[int | None, float, int, int | None]
"""What the weighers' raw values are computed from: free memory in bytes (None: no memory
inventory), `vcpus_total x cpu_allocation_ratio`, `vcpus_used`, free disk in bytes (None: no
storage found)."""


def _levels(state: HostState) -> _Levels:
    """A state's levels, from the integers of its capacity (see `HostState`)."""
    resources = state.capacity.resources
    memory = resources.get(Resource.MEMORY)
    ram = None if memory is None else (memory.total or 0) - (memory.reserved or 0) - memory.used
    disk = resources.get(Resource.DISK)
    room = None if disk is None or disk.total is None else disk.total - state.reserved_disk_bytes - disk.used
    return ram, state.vcpus_total * state.cpu_allocation_ratio, state.vcpus_used, room


def _raw_values(levels: _Levels, memory: int = 0, cpus: int = 0, disk: int = 0) -> _Clipped:
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
            Guest(domain.name, domain_demand(domain, policy, availability_zone))
            for domain in facts.domains
            if domain.state in policy.counted_states
        ),
    )


def domain_demand(domain: DomainFacts, policy: HostPolicy, availability_zone: str | None = None) -> Demand:
    """What a domain asks for when it is scheduled again: a plain domain its allocation; a Nova
    guest its flavor's request, group by group (which adds up to its allocation), and the NUMA
    topology and devices its flavor's extra specs ask for (none where Nova would refuse them;
    the image's `hw_*` properties are not read). On a host in an availability zone, it stays in
    that zone (see the module's docstring)."""
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


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a host did not take an instance: the first filter that refused it, with every reason it
    gave (a class's in Nova's claim-test wording: "Free memory 1024.00 MiB < requested 2048
    MiB")."""

    filter: str
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        return self.reasons[0] if self.reasons else ""


@dataclass(frozen=True, slots=True)
class Weighed:
    """A host's weight at one step: per weigher its raw value and its share of the weight
    (normalized value x multiplier); their sum is the weight."""

    host: str
    weight: float
    raw: Mapping[str, float]
    parts: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Step:
    """One instance placed: where, how its host weighed, and among how many weighed hosts."""

    host: str
    weighed: Weighed
    candidates: int


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    requested: int
    fitted: int
    """How many instances would have been placed one by one before the first that found no host:
    all of them when the request succeeds."""
    steps: tuple[Step, ...]
    """Each instance that found a host, in order (tentative when the request fails)."""
    rejections: Mapping[str, Rejection]
    """Per host that did not take the last instance tried (the first one that found no host when
    the request fails), its first refusal."""
    no_valid_host: str | None = None
    """Why the request fails where no host is ever looked at (a forced host that does not exist)."""
    states: tuple[HostState, ...] = ()
    """The hosts once the instances are placed (as given when the request fails)."""

    @property
    def placed(self) -> bool:
        return self.fitted == self.requested

    @property
    def hosts(self) -> tuple[str, ...]:
        """Where each instance lands; empty when the request fails (all or nothing)."""
        return tuple(step.host for step in self.steps) if self.placed else ()

    @property
    def unplaced(self) -> int:
        return self.requested - self.fitted


def normalize(values: Sequence[float], minval: float | None = 0.0) -> list[float]:
    """`nova.weights.normalize` with the weighers' minval and no maxval: (v - minval) / (max -
    minval), all 0 when max equals minval (with minval None, the smallest value)."""
    if not values:
        return []
    top = float(max(values))
    bottom = float(min(values) if minval is None else minval)
    if top == bottom:
        return [0.0] * len(values)
    return [(value - bottom) / (top - bottom) for value in values]


def weigh(hosts: Sequence[HostState], multipliers: Multipliers = SPREAD) -> list[Weighed]:
    """The hosts weighed as Nova's weight handler weighs them, best first, ties by name: each
    weigher's raw values clipped below at 0, normalized over the hosts, times its multiplier,
    summed. One host alone weighs 0, as in Nova."""
    raws = [host.raw_weights() for host in hosts]
    if len(hosts) <= 1:
        return [
            Weighed(host.name, 0.0, raw, dict.fromkeys(WEIGHERS, 0.0))
            for host, raw in zip(hosts, raws, strict=True)
        ]
    parts: list[dict[str, float]] = [{} for _ in hosts]
    for weigher in WEIGHERS:
        normalized = normalize([max(raw[weigher], 0.0) for raw in raws])
        multiplier = multipliers.of(weigher)
        for index, value in enumerate(normalized):
            parts[index][weigher] = multiplier * value
    weighed = []
    for host, raw, part in zip(hosts, raws, parts, strict=True):
        total = 0.0
        for weigher in WEIGHERS:
            total += part[weigher]
        weighed.append(Weighed(host.name, total, raw, part))
    return sorted(weighed, key=lambda w: (-w.weight, w.host))


def _split(reasons: Sequence[str]) -> Rejection | None:
    """claim_test's reasons under the filter that gives them: the classes and vGPUs are
    Placement's, the cells NUMATopologyFilter's, the devices PciPassthroughFilter's."""
    if not reasons:
        return None
    first = reasons[0]
    if first.startswith("NUMA: "):
        return Rejection(NUMA_TOPOLOGY, tuple(reasons))
    if first.startswith("PCI: "):
        return Rejection(PCI_PASSTHROUGH, tuple(reasons))
    return Rejection(PLACEMENT, tuple(reasons))


def _within_rejection(state: HostState, demand: Demand) -> Rejection | None:
    """The NUMA topology and PCI passthrough filters, on the host as it is now."""
    if not demand.within.asks:
        return None
    return _split(state.capacity.within.refusals(demand.within))


def _request_hosts(
    names: Sequence[str], ignore_hosts: Sequence[str], force_hosts: Sequence[str]
) -> tuple[dict[str, Rejection], str | None]:
    """The hosts `ignore_hosts` and `force_hosts` leave out, and why; with the reason the request
    fails at once where the forced host does not exist."""
    left_out: dict[str, Rejection] = {}
    ignored = {name.lower() for name in ignore_hosts}
    for name in names:
        if name.lower() in ignored:
            left_out[name] = Rejection(IGNORE_HOSTS, (f"{name} is in ignore_hosts",))
    if not force_hosts:
        return left_out, None
    target = force_hosts[0]
    why = f"not the forced host {target} (Nova asks Placement for the first of force_hosts only)"
    for name in names:
        if name not in left_out and name.lower() != target.lower():
            left_out[name] = Rejection(FORCE_HOSTS, (why,))
    if not any(name.lower() == target.lower() for name in names):
        # every host is listed all the same (not the forced one), as the unaudited ones are
        return left_out, f"No such host - host: {target}"
    return left_out, None


class CandidateMemo:
    """Placement's answer (the classes and vGPUs) per host state and request, kept for the
    requests that follow: states are immutable, so an answer holds for as long as its state
    object lives (the memo keeps it alive). One memo serves many requests and evacuations over
    the same states, where most hosts are asked about the same flavors again and again."""

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: dict[tuple[int, RequestKey], tuple[HostState, Rejection | None]] = {}

    def refusal(self, state: HostState, demand: Demand) -> Rejection | None:
        return self._refusal(state, demand, request_key(demand.request))

    def _refusal(self, state: HostState, demand: Demand, request: RequestKey) -> Rejection | None:
        key = (id(state), request)
        found = self._answers.get(key)
        if found is not None and found[0] is state:
            return found[1]
        answer = _split(_placement_reasons(state, demand))
        self._answers[key] = (state, answer)
        return answer


RequestKey = tuple[tuple[tuple[str, int], ...], ...]


def request_key(request: Amounts) -> RequestKey:
    """A request as a hashable value: its groups, each its classes and amounts."""
    return tuple(
        tuple(sorted((resource.placement_class, amount) for resource, amount in group.items()))
        for group in request_groups(request)
    )


def schedule(
    hosts: Sequence[HostState],
    demand: Demand,
    count: int = 1,
    *,
    ignore_hosts: Sequence[str] = (),
    force_hosts: Sequence[str] = (),
    anti_affinity: bool = False,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> ScheduleResult:
    """Where `count` instances of the demand land, one at a time, each consumed by its host
    before the next; all or nothing (see the module's docstring). A `memo` keeps Placement's
    answers for the next requests over the same states (the answer is the same without it)."""
    if count < 0:
        raise ValueError(f"expected a count of at least 0, got {count}")
    by_name = {state.name: state for state in hosts}
    if len(by_name) != len(hosts):
        raise ValueError("expected each host once")
    names = sorted(by_name)
    rejected, no_such_host = _request_hosts(names, ignore_hosts, force_hosts)
    if no_such_host is not None:
        return ScheduleResult(count, 0, (), rejected, no_such_host, tuple(hosts))
    # Placement's allocation candidates, asked once for the request
    candidates: list[str] = []
    for name in names:
        if name in rejected:
            continue
        refused = _candidate_refusal(by_name[name], demand, memo)
        if refused is not None:
            rejected[name] = refused
        else:
            candidates.append(name)
    current = dict(by_name)
    steps: list[Step] = []
    chosen: set[str] = set()
    step_rejections: dict[str, Rejection] = {}
    for _ in range(count):
        step_rejections = dict(rejected)
        passed = []
        for name in candidates:
            state = current[name]
            refused = _within_rejection(state, demand)
            if refused is None and anti_affinity and name in chosen:
                refused = Rejection(ANTI_AFFINITY, (f"an instance of this request is already on {name}",))
            if refused is not None:
                step_rejections[name] = refused
            else:
                passed.append(state)
        step: Step | None = None
        for weighed in weigh(passed, multipliers):
            state = current[weighed.host]
            claim = state.capacity.claim_test(demand)
            if claim:
                step_rejections[weighed.host] = Rejection(
                    PLACEMENT, ("claim refused: " + claim[0], *claim[1:])
                )
                continue
            step = Step(weighed.host, weighed, len(passed))
            break
        if step is None:
            return ScheduleResult(count, len(steps), tuple(steps), step_rejections, None, tuple(hosts))
        steps.append(step)
        chosen.add(step.host)
        # a forced host skips the filters: nova-compute fits each instance with its own topology
        demand = _place(current, step.host, demand, carry=not force_hosts)
    final = tuple(current[state.name] for state in hosts)
    return ScheduleResult(count, len(steps), tuple(steps), step_rejections, None, final)


def _place(current: dict[str, HostState], host: str, demand: Demand, *, carry: bool) -> Demand:
    """The host consumes one instance of the demand; the demand the request's next instance is
    filtered and consumed with: with `carry`, its NUMA topology as the fit on that host left it
    (`numa.refitted`), as Nova's scheduler keeps it in the request spec."""
    state = current[host]
    current[host] = state.consume(demand)
    topology = demand.within.topology
    if topology is None or not carry:
        return demand
    fitted = state.capacity.within.fit(demand.within)
    if fitted is None or not fitted.fits:  # the host passed this very fit, and took the instance
        raise ValueError(f"{state.name}: the instance placed does not fit its cells")
    return replace(demand, within=replace(demand.within, topology=refitted(topology, fitted)))


def _placement_reasons(state: HostState, demand: Demand) -> list[str]:
    """claim_test's reasons of the classes and vGPUs only (what Placement's candidates test)."""
    return state.capacity.claim_test(Demand(demand.request))


def _candidate_refusal(state: HostState, demand: Demand, memo: CandidateMemo | None) -> Rejection | None:
    """Why the host is not one of Placement's allocation candidates for the demand (None: it is):
    out of the requested zone, down, stale or in maintenance, or short of a class."""
    if not _in_zone(state, demand):
        return _out_of_zone(state, demand)
    if state.refused_by_compute:
        return Rejection(COMPUTE, (_down(state),))
    if memo is not None:
        return memo.refusal(state, demand)
    return _split(_placement_reasons(state, demand))


def _in_zone(state: HostState, demand: Demand) -> bool:
    return demand.availability_zone is None or state.availability_zone == demand.availability_zone


def _out_of_zone(state: HostState, demand: Demand) -> Rejection:
    where = (
        f"in availability zone {state.availability_zone}"
        if state.availability_zone is not None
        else "in no availability zone"
    )
    return Rejection(
        AVAILABILITY_ZONE,
        (f"hypervisor {state.name} is {where}, not in {demand.availability_zone} as requested",),
    )


def _down(state: HostState) -> str:
    if not state.up:
        return f"hypervisor {state.name} is down"
    if state.stale:
        return f"the data of hypervisor {state.name} is stale"
    return f"hypervisor {state.name} is in maintenance: {state.maintenance}"


class _Refused:
    """Per request, the hosts of a fleet that refuse one instance of it as they are (those that
    do not pass), each with `schedule`'s rejection and whether it was found at the filters
    (NUMA, PCI: `schedule` lists those after the others); by index (name order), with how many
    each filter refused. Never changed once built: the unplaced domains of a result keep the
    one they were found with, and a fleet whose host changes makes another (`with_host`)."""

    __slots__ = ("counts", "numbers", "rejections")

    def __init__(
        self, rejections: dict[int, tuple[Rejection, bool]], numbers: list[int], counts: dict[str, int]
    ) -> None:
        self.rejections = rejections
        self.numbers = numbers
        """The hosts of `rejections`, in index order."""
        self.counts = counts

    @classmethod
    def of(cls, rejections: dict[int, tuple[Rejection, bool]]) -> _Refused:
        counts: dict[str, int] = {}
        for rejection, _ in rejections.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return cls(rejections, sorted(rejections), counts)

    def with_host(self, number: int, found: tuple[Rejection, bool] | None) -> _Refused:
        """The same with one host's refusal as it is now (None: it passes)."""
        before = self.rejections.get(number)
        if before == found:
            return self
        rejections, counts, numbers = dict(self.rejections), dict(self.counts), self.numbers
        if before is not None:
            counts[before[0].filter] -= 1
            if found is None:
                del rejections[number]
                numbers = [other for other in numbers if other != number]
        if found is not None:
            counts[found[0].filter] = counts.get(found[0].filter, 0) + 1
            rejections[number] = found
            if before is None:
                numbers = list(numbers)
                bisect.insort(numbers, number)
        return _Refused(rejections, numbers, counts)


class _Rejections(Mapping[str, Rejection]):
    """`schedule`'s rejections of a domain that found no host in an evacuation, from what differs
    from the fleet: every host refuses it (none passes), the fleet's hosts as they are (the
    request's `_Refused`) but for those lost (`gone`) and those the evacuation consumed
    (`moved`: their refusals as they are now). Built into the dictionary `schedule` gives (the
    same order too) only when read: most readers want only `refused_by` and `first`, which cost
    what the evacuation changed, not the fleet's size."""

    __slots__ = ("_built", "_gone", "_moved", "_names", "_refused")

    def __init__(
        self,
        names: Sequence[str],
        refused: _Refused,
        gone: Collection[int],
        moved: dict[int, tuple[Rejection, bool]],
    ) -> None:
        self._names = names
        self._refused = refused
        self._gone = gone
        self._moved = moved
        self._built: dict[str, Rejection] | None = None

    def _dict(self) -> dict[str, Rejection]:
        built = self._built
        if built is None:
            gone, moved, refused = self._gone, self._moved, self._refused.rejections
            numbers = sorted(
                [number for number in self._refused.numbers if number not in gone and number not in moved]
                + list(moved)
            )
            early: dict[str, Rejection] = {}
            late: list[tuple[str, Rejection]] = []
            for number in numbers:
                rejection, at_filters = moved[number] if number in moved else refused[number]
                if at_filters:
                    late.append((self._names[number], rejection))
                else:
                    early[self._names[number]] = rejection
            early.update(late)
            built = self._built = early
        return built

    def __getitem__(self, name: str) -> Rejection:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Rejections):
            other = other._dict()
        return self._dict() == other

    __hash__ = None  # type: ignore[assignment]  # a mapping, equal to a dict: not hashable either

    def __repr__(self) -> str:
        return repr(self._dict())

    def refused_by(self) -> dict[str, int]:
        """Per filter, how many hosts refused the domain: the fleet's counts, less the lost and
        consumed hosts' refusals as the fleet has them, plus the consumed hosts' as they are."""
        counts = dict(self._refused.counts)
        refused = self._refused.rejections
        for number in (*self._gone, *self._moved):
            found = refused.get(number)
            if found is not None:
                counts[found[0].filter] -= 1
        for rejection, _ in self._moved.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return {name: count for name, count in counts.items() if count > 0}

    def first(self) -> tuple[str, Rejection] | None:
        """The first host by name that refused the domain, and why (None: no host left)."""
        gone, moved = self._gone, self._moved
        best = min(moved) if moved else None
        for number in self._refused.numbers:  # stops past the lost and consumed ones at most
            if best is not None and number > best:
                break
            if number not in gone and number not in moved:
                best = number
                break
        if best is None:
            return None
        rejection, _ = moved[best] if best in moved else self._refused.rejections[best]
        return self._names[best], rejection


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A domain of the failed host that found no host, and why each host refused it.

    An evacuation's `rejections` are schedule's dictionary, built only when read (see
    `_Rejections`): on a full fleet most domains find no host, and each would list every host.
    `refused_by` and `first_rejection` summarize them without building them."""

    guest: str
    rejections: Mapping[str, Rejection]
    no_valid_host: str | None = None

    @property
    def refused_by(self) -> Mapping[str, int]:
        """Per filter, how many hosts it refused (counted among the rejections)."""
        if isinstance(self.rejections, _Rejections):
            return self.rejections.refused_by()
        counts: dict[str, int] = {}
        for rejection in self.rejections.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return counts

    @property
    def first_rejection(self) -> tuple[str, Rejection] | None:
        """The first host by name that refused it, and why; None where no host was looked at."""
        if isinstance(self.rejections, _Rejections):
            return self.rejections.first()
        if not self.rejections:
            return None
        first = min(self.rejections)
        return first, self.rejections[first]


@dataclass(frozen=True, slots=True)
class EvacuationResult:
    failed: str
    placements: tuple[tuple[str, str], ...]
    """(domain, host) of each domain re-homed, in the order they were scheduled."""
    unplaced: tuple[Unplaced, ...] = ()
    states: tuple[HostState, ...] = field(default=())
    """The remaining hosts once the re-homed domains are placed."""

    @property
    def feasible(self) -> bool:
        return not self.unplaced

    @property
    def unplaced_count(self) -> int:
        return len(self.unplaced)


def evacuation_order(guests: Sequence[Guest]) -> list[Guest]:
    """Largest first: by memory, then vCPUs, then disk, then name."""
    return sorted(guests, key=lambda guest: (*(-amount for amount in guest.size), guest.name))


def evacuation(
    hosts: Sequence[HostState],
    failed: str,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> EvacuationResult:
    """Whether every domain of the `failed` host can be scheduled, one by one and largest first,
    on the other hosts through the same engine (down, stale or in maintenance ones take none;
    the failed host's own domains are moved whether it is in maintenance or not), each placed
    domain consumed before the next; the domains that find no host are counted and go on. A
    `memo` shared by the evacuations of several hosts of the same fleet saves asking Placement
    again about the hosts they leave unchanged.

    The answer is `schedule`'s, domain by domain (`_reference_evacuation`); it is found faster:
    the hosts that pass for a request are tested once, the hosts the evacuation consumed are
    tested and weighed from their claims, the best is found without weighing every host (see
    `_evacuate`), and a domain that finds no host gets its rejections from the fleet's refusals
    of its request and what the evacuation changed."""
    memo = memo if memo is not None else CandidateMemo()
    sources = [state for state in hosts if state.name == failed]
    if len(sources) != 1:
        raise ValueError(f"expected one host named {failed!r}, found {len(sources)}")
    fleet = _Fleet(hosts, memo)
    result, _ = _evacuation_result(fleet, fleet.index[failed], multipliers)
    return result


def _reference_evacuation(
    hosts: Sequence[HostState],
    failed: str,
    multipliers: Multipliers = SPREAD,
    memo: CandidateMemo | None = None,
) -> EvacuationResult:
    """`evacuation` the straightforward way: every domain through `schedule`. Kept for the tests,
    which hold the fast path to the same answers."""
    memo = memo if memo is not None else CandidateMemo()
    sources = [state for state in hosts if state.name == failed]
    if len(sources) != 1:
        raise ValueError(f"expected one host named {failed!r}, found {len(sources)}")
    (source,) = sources
    remaining = tuple(state for state in hosts if state.name != failed)
    placements: list[tuple[str, str]] = []
    unplaced: list[Unplaced] = []
    for guest in evacuation_order(source.guests):
        result = schedule(remaining, guest.demand, 1, multipliers=multipliers, memo=memo)
        if result.placed:
            placements.append((guest.name, result.steps[0].host))
            remaining = result.states
        else:
            unplaced.append(Unplaced(guest.name, result.rejections, result.no_valid_host))
    return EvacuationResult(failed, tuple(placements), tuple(unplaced), remaining)


_Clipped = tuple[float, float, float]


def _clipped(state: HostState) -> _Clipped:
    raw = state.raw_weights()
    return (max(raw["ram"], 0.0), max(raw["cpu"], 0.0), max(raw["disk"], 0.0))


_Request = tuple[RequestKey, WithinHost, str | None]
_Key = int
"""A request's number in its fleet (`_Fleet.key`): the dictionaries of every step are keyed by
it, and a tuple of tuples is hashed again at every look-up."""
_Normalization = tuple[_Key, float, float, float]
"""A request and the weighers' largest values among the hosts that pass for it."""


_KEPT_ORDERS = 512
"""Sorted orders a fleet keeps beyond those its last computation used (see `_Fleet.prune`)."""
_KEPT_STATES_PER_HOST = 4
"""The same for the states evacuations built, per host of the fleet."""


class _Fleet:
    """The states of a fleet indexed by name (sorted: index order is name order) with, per
    request, the hosts whose candidate and filter tests pass as they are: shared by the
    evacuations of every host of the fleet, each of which changes only the hosts it consumes."""

    __slots__ = (
        "claims",
        "clipped",
        "demands",
        "free",
        "in_order",
        "index",
        "keys",
        "levels",
        "memo",
        "names",
        "need",
        "numbers",
        "order",
        "ordered",
        "orders",
        "passing",
        "position",
        "ranked",
        "refusals",
        "requests",
        "room",
        "states",
        "states_built",
        "touched",
        "touched_states",
    )

    def __init__(self, hosts: Sequence[HostState], memo: CandidateMemo) -> None:
        self.states = sorted(hosts, key=lambda state: state.name)
        positions = sorted(range(len(hosts)), key=lambda position: hosts[position].name)
        self.order = sorted(range(len(hosts)), key=lambda number: positions[number])
        """The fleet's indices in the order the hosts were given."""
        self.position = positions
        """Per index, where the host was given."""
        self.in_order = list(hosts)
        self.clipped = [_clipped(state) for state in self.states]
        self.memo = memo
        self.names = tuple(state.name for state in self.states)
        self.index = {name: number for number, name in enumerate(self.names)}
        if len(self.index) != len(self.states):
            raise ValueError("expected each host once")
        self.passing: dict[_Key, set[int]] = {}
        self.refusals: dict[_Key, _Refused] = {}
        """Per request a domain found no host for, the hosts that do not pass and why (see
        `refused`)."""
        self.demands: dict[_Key, Demand] = {}
        self.ranked: dict[_Key, tuple[list[int], list[int], list[int]]] = {}
        self.levels: dict[int, _Levels] = {}
        self.room: dict[int, dict[Resource, tuple[int, int]]] = {}
        self.free: dict[int, dict[Resource, int]] = {}
        self.need: dict[_Key, tuple[tuple[Resource, int], ...] | None] = {}
        self.claims: dict[_Key, tuple[tuple[Resource, int], ...]] = {}
        self.states_built: dict[tuple[int, tuple[_Key, ...]], HostState] = {}
        self.ordered: dict[int, list[tuple[Guest, _Key]]] = {}
        self.touched: set[_Normalization] = set()
        self.touched_states: set[tuple[int, tuple[_Key, ...]]] = set()
        """What the computation under way used (see `prune`)."""
        self.keys: dict[int, tuple[Demand, _Key]] = {}
        """Per demand (by identity, the demand kept alive with it), its request's number."""
        self.numbers: dict[_Request, _Key] = {}
        self.requests: list[_Request] = []
        self.orders: dict[Multipliers, dict[_Normalization, list[tuple[float, int]] | None]] = {}
        """Per request, multipliers and largest values (see `sorted_by_weight`): the hosts that pass,
        best first, as (-weight, index); None once asked for and not sorted yet."""

    def orders_for(self, multipliers: Multipliers) -> dict[_Normalization, list[tuple[float, int]] | None]:
        """The orders for these multipliers (see `sorted_by_weight`), fetched once per evacuation."""
        orders = self.orders.get(multipliers)
        if orders is None:
            orders = self.orders[multipliers] = {}
        return orders

    def sorted_by_weight(
        self,
        orders: dict[_Normalization, list[tuple[float, int]] | None],
        multipliers: Multipliers,
        normalization: _Normalization,
    ) -> list[tuple[float, int]] | None:
        """The hosts that pass for a request (as the fleet has them), as `weigh` orders them
        where the weighers' largest values are `tops` (a host the evacuation consumed can hold
        one), with their weights negated; None the first time a normalization is asked for.

        The evacuations of a fleet go through few normalizations (on the test-driver fleet of
        the benchmark, 459 for 50,000 domains), so a normalization met again is worth sorting
        once for all: each later step takes the first host of the order the evacuation has
        neither consumed nor lost. One met once is left to `_best`."""
        self.touched.add(normalization)
        if normalization not in orders:
            orders[normalization] = None
            return None
        found = orders[normalization]
        if found is None:
            key, *tops = normalization
            clipped = self.clipped
            found = sorted(
                (-_weight(clipped[number], tops, multipliers), number) for number in self.passing[key]
            )
            orders[normalization] = found
        return found

    def evacuation_order(self, failed: Sequence[int]) -> list[tuple[Guest, _Key]]:
        """The domains of the failed hosts in `evacuation_order`, each with its request's number:
        kept for one failed host (an update of the fleet evacuates most hosts again)."""
        if len(failed) == 1:
            found = self.ordered.get(failed[0])
            if found is not None:
                return found
        guests = [guest for number in failed for guest in self.states[number].guests]
        found = [(guest, self.key(guest.demand)) for guest in evacuation_order(guests)]
        if len(failed) == 1:
            self.ordered[failed[0]] = found
        return found

    def given(self) -> list[HostState]:
        """The states in the order the hosts were given (a copy)."""
        return list(self.in_order)

    def key(self, demand: Demand) -> _Key:
        found = self.keys.get(id(demand))
        if found is not None and found[0] is demand:
            return found[1]
        request = (request_key(demand.request), demand.within, demand.availability_zone)
        key = self.numbers.get(request)
        if key is None:
            key = self.numbers[request] = len(self.requests)
            self.requests.append(request)
        self.keys[id(demand)] = (demand, key)
        return key

    def level(self, number: int) -> _Levels:
        found = self.levels.get(number)
        if found is None:
            found = self.levels[number] = _levels(self.states[number])
        return found

    def rooms(self, number: int) -> dict[Resource, tuple[int, int]]:
        """Per class of the host with a limit, the limit in Placement's unit and what is used."""
        found = self.room.get(number)
        if found is None:
            found = self.room[number] = {
                resource: (limit // resource.placement_unit, capacity.used)
                for resource, capacity in self.states[number].capacity.resources.items()
                if (limit := capacity.limit) is not None
            }
        return found

    def room_left(self, number: int) -> dict[Resource, int]:
        """Per class of the host with a limit, what is free in Placement's unit
        (`placement_free`)."""
        found = self.free.get(number)
        if found is None:
            found = self.free[number] = {
                resource: limit - placement_units(resource, used)
                for resource, (limit, used) in self.rooms(number).items()
            }
        return found

    def amounts(self, key: _Key, demand: Demand) -> tuple[tuple[Resource, int], ...]:
        """The classes a demand claims (its amounts above 0), per request: a request's mapping is
        slow to walk."""
        found = self.claims.get(key)
        if found is None:
            found = self.claims[key] = tuple(
                (resource, amount) for resource, amount in demand.request.items() if amount > 0
            )
        return found

    def needs(self, key: _Key, demand: Demand) -> tuple[tuple[Resource, int], ...] | None:
        """What a demand asks of each class, in Placement's unit, where claims alone decide whether
        a host that passes as the fleet has it still passes once it took other demands: the
        demand asks for no cells, devices nor vGPUs. Claiming only lowers what is free, and the
        other tests of such a demand (up, no stale data, not in maintenance, the inventories'
        max_unit, min_unit and step_size) do not depend on the claims. None where they do not decide."""
        if key in self.need:
            return self.need[key]
        found: tuple[tuple[Resource, int], ...] | None = None
        if not demand.within.asks and demand.request.get(Resource.VGPU, 0) <= 0:
            found = tuple(
                (resource, placement_units(resource, amount))
                for resource, amount in demand.request.items()
                if amount > 0
            )
        self.need[key] = found
        return found

    def built(self, number: int, demands: Sequence[Demand], keys: tuple[_Key, ...]) -> HostState:
        """The host's state once the demands (of these keys) are placed on it, in order: the
        evacuations of a fleet end with few different ones (on the benchmark's fleet, 1,949
        for 24,330 hosts consumed), built once each. An equal demand leaves an equal state."""
        self.touched_states.add((number, keys))
        found = self.states_built.get((number, keys))
        if found is None:
            found = self.states_built[number, keys] = _consumed(self.states[number], demands)
        return found

    def prune(self) -> None:
        """Once a computation is done: beyond a bound, what it did not use is forgotten, so that a
        fleet updated again and again (the service keeps the last result) does not keep every
        order and state it ever met (an order of 1,000 hosts is some 90 kB). Forgotten, one is
        found again when needed."""
        for multipliers, orders in self.orders.items():
            if sum(1 for order in orders.values() if order is not None) > _KEPT_ORDERS:
                self.orders[multipliers] = {
                    normalization: order
                    for normalization, order in orders.items()
                    if normalization in self.touched
                }
        if len(self.states_built) > _KEPT_STATES_PER_HOST * len(self.states):
            self.states_built = {
                built: state for built, state in self.states_built.items() if built in self.touched_states
            }
        self.touched = set()
        self.touched_states = set()

    def passes(self, state: HostState, demand: Demand, key: _Key | None = None) -> bool:
        """The candidate and filter tests of a request of one instance, on the host as it is."""
        if state.refused_by_compute or not _in_zone(state, demand):
            return False
        request = self.requests[key][0] if key is not None else request_key(demand.request)
        if self.memo._refusal(state, demand, request) is not None:
            return False
        return _within_rejection(state, demand) is None

    def rejection(self, state: HostState, demand: Demand, key: _Key) -> tuple[Rejection, bool] | None:
        """Why the host refuses one instance of the request as it is (None: it `passes`), as
        `schedule` finds it at its first step, and whether at the filters (NUMA, PCI) rather
        than at ComputeFilter or Placement."""
        if not _in_zone(state, demand):
            return _out_of_zone(state, demand), False
        if state.refused_by_compute:
            return Rejection(COMPUTE, (_down(state),)), False
        refused = self.memo._refusal(state, demand, self.requests[key][0])
        if refused is not None:
            return refused, False
        refused = _within_rejection(state, demand)
        return (refused, True) if refused is not None else None

    def refused(self, key: _Key, demand: Demand) -> _Refused:
        """The hosts that do not pass for the request as the fleet is, with their rejections:
        found once per request, for the evacuations' domains that find no host (`_Rejections`)."""
        found = self.refusals.get(key)
        if found is None:
            passing = self.passing_hosts(key, demand)
            rejections: dict[int, tuple[Rejection, bool]] = {}
            for number, state in enumerate(self.states):
                if number not in passing:
                    rejection = self.rejection(state, demand, key)
                    if rejection is None:
                        raise ValueError(f"{state.name}: passes and does not pass")
                    rejections[number] = rejection
            found = self.refusals[key] = _Refused.of(rejections)
        return found

    def passing_hosts(self, key: _Key, demand: Demand) -> set[int]:
        """The hosts that pass for the demand, as the fleet is."""
        found = self.passing.get(key)
        if found is None:
            found = {number for number, state in enumerate(self.states) if self.passes(state, demand, key)}
            self.passing[key] = found
            self.demands[key] = demand
        return found

    def ranking(self, key: _Key) -> tuple[list[int], list[int], list[int]]:
        """The hosts that pass for the request (`passing_hosts` first), per weigher by their
        clipped value, largest first (ties by name)."""
        found = self.ranked.get(key)
        if found is None:
            hosts, clipped = self.passing[key], self.clipped
            ram, cpu, disk = (
                sorted(hosts, key=lambda number: (-clipped[number][part], number)) for part in range(3)
            )
            found = self.ranked[key] = (ram, cpu, disk)
        return found

    def copy(self) -> _Fleet:
        copied = _Fleet.__new__(_Fleet)
        copied.states = list(self.states)
        copied.clipped = list(self.clipped)
        copied.memo = self.memo
        copied.names = self.names
        copied.index = self.index
        copied.order = self.order
        copied.position = self.position
        copied.in_order = list(self.in_order)
        copied.free = dict(self.free)
        copied.passing = {key: set(hosts) for key, hosts in self.passing.items()}
        copied.refusals = dict(self.refusals)
        copied.demands = dict(self.demands)
        copied.ranked = dict(self.ranked)
        copied.levels = dict(self.levels)
        copied.room = dict(self.room)
        copied.need = self.need
        copied.claims = self.claims
        copied.states_built = dict(self.states_built)
        copied.ordered = dict(self.ordered)
        copied.touched = set()
        copied.touched_states = set()
        copied.keys = self.keys
        copied.numbers = self.numbers
        copied.requests = self.requests
        copied.orders = {multipliers: dict(orders) for multipliers, orders in self.orders.items()}
        return copied

    def replace(self, state: HostState) -> None:
        """One host's state changes: its values, and whether it passes for each request."""
        number = self.index[state.name]
        for guest in self.states[number].guests:
            # its old domains are not asked about again (the dictionary is shared with the fleet
            # copied, for which this is only a look-up to do again): the service would otherwise
            # keep every domain it ever saw
            self.keys.pop(id(guest.demand), None)
        self.states[number] = state
        old = self.clipped[number]
        values = self.clipped[number] = _clipped(state)
        self.levels.pop(number, None)
        self.room.pop(number, None)
        self.free.pop(number, None)
        self.in_order[self.position[number]] = state
        self.ordered.pop(number, None)
        self.states_built = {built: kept for built, kept in self.states_built.items() if built[0] != number}
        ranked = self.ranked
        self.ranked = {}
        refusals = self.refusals
        for key, hosts in self.passing.items():
            refused = refusals.get(key)
            if refused is not None:
                # a new object: the unplaced domains of the results before keep the old one
                rejection = self.rejection(state, self.demands[key], key)
                refusals[key] = refused.with_host(number, rejection)
                passes = rejection is None
            else:
                passes = self.passes(state, self.demands[key], key)
            if passes:
                hosts.add(number)
            else:
                hosts.discard(number)
            rankings = ranked.get(key)
            if rankings is None:
                continue
            # the other hosts keep their order: the host leaves its place and, if it passes,
            # goes where its new value puts it (the lists may be shared with the fleet copied)
            moved = []
            for part, ranking in enumerate(rankings):
                others = [other for other in ranking if other != number]
                if passes:
                    clipped = self.clipped
                    where = bisect.bisect_left(
                        others,
                        (-values[part], number),
                        key=lambda other, part=part: (-clipped[other][part], other),  # type: ignore[misc]
                    )
                    others.insert(where, number)
                moved.append(others)
            self.ranked[key] = (moved[0], moved[1], moved[2])
        for multipliers, orders in self.orders.items():
            for normalization, order in orders.items():
                if order is None:
                    continue
                # the same: the others keep their weights and order, the host its new place; it
                # is found by its old weight (the same computation gives the same number)
                key, *tops = normalization
                entry = (-_weight(old, tops, multipliers), number)
                where = bisect.bisect_left(order, entry)
                if where < len(order) and order[where] == entry:
                    kept = order[:where] + order[where + 1 :]
                else:  # not there (it did not pass)
                    kept = [other for other in order if other[1] != number]
                if number in self.passing[key]:
                    bisect.insort(kept, (-_weight(values, tops, multipliers), number))
                orders[normalization] = kept


def _tops(
    ranking: tuple[list[int], list[int], list[int]],
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    again: Collection[int],
    clipped: Sequence[_Clipped],
    *,
    starts: list[int] | None = None,
) -> _Tops:
    """Per weigher, among the hosts that pass (the ranked ones but for those skipped or gone, and
    those passing again), the largest clipped value, a host that holds it, and the largest of
    the others (-1.0 where there is none).

    `starts`, per weigher, is where in its ranking the hosts neither skipped nor gone begin, moved
    on here: an evacuation only adds hosts to skip (those it consumes, mostly the top of the
    rankings), so it keeps one per request and the walk does not step over them again."""
    tops: list[tuple[float, int, float]] = []
    for part in range(3):
        ranked = ranking[part]
        length = len(ranked)
        position = starts[part] if starts is not None else 0
        while position < length and (ranked[position] in skip or ranked[position] in gone):
            position += 1
        if starts is not None:
            starts[part] = position
        first, holder, second = -1.0, -1, -1.0
        if position < length:
            holder = ranked[position]
            first = clipped[holder][part]
            position += 1
            while position < length and (ranked[position] in skip or ranked[position] in gone):
                position += 1
            if position < length:
                second = clipped[ranked[position]][part]
        tops.append((first, holder, second))
    if not again:
        return tuple(tops)
    (f_ram, h_ram, s_ram), (f_cpu, h_cpu, s_cpu), (f_disk, h_disk, s_disk) = tops
    for number in again:  # the three weighers in one pass: this runs at every step
        ram, cpu, disk = clipped[number]
        if ram > f_ram:
            f_ram, h_ram, s_ram = ram, number, f_ram
        elif ram > s_ram:
            s_ram = ram
        if cpu > f_cpu:
            f_cpu, h_cpu, s_cpu = cpu, number, f_cpu
        elif cpu > s_cpu:
            s_cpu = cpu
        if disk > f_disk:
            f_disk, h_disk, s_disk = disk, number, f_disk
        elif disk > s_disk:
            s_disk = disk
    return ((f_ram, h_ram, s_ram), (f_cpu, h_cpu, s_cpu), (f_disk, h_disk, s_disk))


def _best(
    ranking: tuple[list[int], list[int], list[int]],
    *,
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    again: Collection[int],
    clipped: Sequence[_Clipped],
    tops: _Tops,
    multipliers: Multipliers,
) -> tuple[int, float]:
    """The host `weigh` puts first among those that pass (two at least), and its weight, computed
    exactly as `weigh` computes it (each normalized value times its multiplier, summed in order),
    so that the choice is the same to the last bit; ties go to the lowest index (name).

    Fagin's threshold algorithm: the ranked hosts that are neither skipped nor gone (they have
    the values they were ranked by) are walked down every weigher's ranking at once (up it for a
    negative multiplier), each one seen weighed exactly; a host not seen yet comes after the
    walk's position in every ranking, so (normalizing, multiplying and adding, correctly rounded,
    are monotone) it weighs at most the threshold, the weight of the values at those positions
    computed the same way. The walk stops once the best seen weighs more than the threshold: no
    unseen host can beat it or tie with it. Skipped hosts are stepped over without counting:
    an evacuation skips the hosts it consumed, the top of the rankings, and their old values
    would hold the threshold up. The hosts passing again (consumed by this evacuation, their
    values changed) are weighed first."""
    m_ram, m_cpu, m_disk = multipliers.ram, multipliers.cpu, multipliers.disk
    t_ram, t_cpu, t_disk = tops[0][0], tops[1][0], tops[2][0]

    def weight_of(ram: float, cpu: float, disk: float) -> float:
        # as `_weight`
        return (
            0.0
            + m_ram * (ram / t_ram if t_ram != 0.0 else 0.0)
            + m_cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
            + m_disk * (disk / t_disk if t_disk != 0.0 else 0.0)
        )

    best, best_weight = -1, 0.0
    for number in again:
        weight = weight_of(*clipped[number])
        if best < 0 or weight > best_weight or (weight == best_weight and number < best):
            best, best_weight = number, weight
    walks = [
        ranking[part] if multiplier >= 0 else ranking[part][::-1]
        for part, multiplier in enumerate((m_ram, m_cpu, m_disk))
    ]
    length = len(walks[0])
    positions = [0, 0, 0]
    seen: set[int] = set()
    at = [0.0, 0.0, 0.0]
    while True:
        for part in range(3):
            walk, position = walks[part], positions[part]
            while position < length and (walk[position] in skip or walk[position] in gone):
                position += 1
            if position == length:
                # every host of this ranking that is neither skipped nor gone has been seen
                return best, best_weight
            number = walk[position]
            positions[part] = position + 1
            values = clipped[number]
            at[part] = values[part]
            if number in seen:
                continue
            seen.add(number)
            weight = weight_of(*values)
            if best < 0 or weight > best_weight or (weight == best_weight and number < best):
                best, best_weight = number, weight
        if best >= 0 and best_weight > weight_of(at[0], at[1], at[2]):
            return best, best_weight


def _first(
    order: Sequence[tuple[float, int]],
    *,
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    again: Collection[int],
    clipped: Sequence[_Clipped],
    tops: _Tops,
    multipliers: Multipliers,
    start: list[int],
) -> tuple[int, float]:
    """`_best` from the hosts that pass in the fleet sorted by their weight under these tops (see
    `_Fleet.sorted_by_weight`): the first neither skipped nor gone, against those passing
    again. `start` is where in the order the hosts not skipped begin, moved on here (as in
    `_tops`)."""
    best, best_weight = -1, 0.0
    position, length = start[0], len(order)
    while position < length and (order[position][1] in skip or order[position][1] in gone):
        position += 1
    start[0] = position
    if position < length:
        negated, best = order[position]
        best_weight = -negated
    m_ram, m_cpu, m_disk = multipliers.ram, multipliers.cpu, multipliers.disk
    t_ram, t_cpu, t_disk = tops[0][0], tops[1][0], tops[2][0]
    for number in again:
        ram, cpu, disk = clipped[number]
        # as `_weight`, inline: this runs for every consumed host at every step
        weight = (
            0.0
            + m_ram * (ram / t_ram if t_ram != 0.0 else 0.0)
            + m_cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
            + m_disk * (disk / t_disk if t_disk != 0.0 else 0.0)
        )
        if best < 0 or weight > best_weight or (weight == best_weight and number < best):
            best, best_weight = number, weight
    return best, best_weight


_Tops = tuple[tuple[float, int, float], ...]


class _StepTrace(NamedTuple):
    """What decided one step of an evacuation, for the incremental tolerance: the request, the
    chosen host (an index of the fleet), its weight, how many hosts passed, and per weigher the
    largest clipped value among them with its holder and the largest among the others. (A named
    tuple: one is made at every step, and a frozen dataclass is slower to make.)"""

    key: _Key
    demand: Demand
    chosen: int
    weight: float
    passed: int
    tops: _Tops
    exact: bool = True
    """Whether the second largest values are known (see `_unchanged`)."""


class _Moved:
    """A host an evacuation placed domains on, as it is now: its state in the fleet, the demands
    placed on it in order and what they claim. Its `HostState` is built only when asked for (the
    tests of a demand that asks for cells, devices or vGPUs, `schedule`, the evacuation's
    result): the weighers' values and the tests of the other demands come from the claims."""

    __slots__ = (
        "claimed",
        "cpus",
        "demands",
        "disk",
        "keys",
        "left",
        "memory",
        "number",
        "passing",
        "refusals",
        "rooms",
        "state",
    )

    def __init__(
        self, number: int, rooms: Mapping[Resource, tuple[int, int]], left: dict[Resource, int]
    ) -> None:
        self.number = number
        self.rooms = rooms
        self.demands: list[Demand] = []
        self.keys: list[_Key] = []
        self.claimed: dict[Resource, int] = {}
        self.memory = self.cpus = self.disk = 0
        """What the weighers read of the claims: memory and disk bytes, vCPUs (shared and
        dedicated)."""
        self.left = dict(left)
        """Per class with a limit, what is free in Placement's unit (`placement_free`)."""
        self.passing: dict[_Key, bool] = {}
        """Whether it passes for each request, as it is now."""
        self.refusals: dict[_Key, tuple[Rejection, bool] | None] = {}
        """Why it refuses each request a domain found no host for, as it is now."""
        self.state: HostState | None = None

    def add(self, demand: Demand, key: _Key, amounts: Sequence[tuple[Resource, int]]) -> None:
        """Place the demand (of this key, claiming these `amounts`: `_Fleet.amounts`)."""
        for resource, amount in amounts:
            claimed = self.claimed[resource] = self.claimed.get(resource, 0) + amount
            room = self.rooms.get(resource)
            if room is not None:
                self.left[resource] = room[0] - placement_units(resource, room[1] + claimed)
            if resource is Resource.MEMORY:
                self.memory = claimed
            elif resource is Resource.VCPU or resource is Resource.PCPU:
                self.cpus += amount
            elif resource is Resource.DISK:
                self.disk = claimed
        self.demands.append(demand)
        self.keys.append(key)
        self.passing = {}
        self.refusals = {}
        self.state = None

    def current(self, fleet: _Fleet) -> HostState:
        if self.state is None:
            self.state = fleet.built(self.number, self.demands, tuple(self.keys))
        return self.state

    def clipped(self, levels: _Levels) -> _Clipped:
        ram, cpu, disk = _raw_values(levels, self.memory, self.cpus, self.disk)
        return (max(ram, 0.0), max(cpu, 0.0), max(disk, 0.0))

    def rejection(self, fleet: _Fleet, demand: Demand, key: _Key) -> tuple[Rejection, bool] | None:
        """`_Fleet.rejection` of the host as it is now."""
        if key in self.refusals:
            return self.refusals[key]
        found = self.refusals[key] = fleet.rejection(self.current(fleet), demand, key)
        return found

    def passes(self, fleet: _Fleet, demand: Demand, key: _Key) -> bool:
        found = self.passing.get(key)
        if found is None:
            needs = fleet.needs(key, demand)
            if needs is None:
                found = fleet.passes(self.current(fleet), demand, key)
            else:
                found = self.number in fleet.passing[key]
                left = self.left
                for resource, need in needs:
                    room = left.get(resource)  # None: no limit
                    if found and room is not None and need > room:
                        found = False
            self.passing[key] = found
        return found


def _again(
    fleet: _Fleet,
    demand: Demand,
    key: _Key,
    *,
    moved: Mapping[int, _Moved],
    consumed: Sequence[int],
    requests: dict[_Key, tuple[set[int], list[int]]],
) -> set[int]:
    """The hosts an evacuation consumed that pass for the request as they are now: per request
    met, kept with how far in the hosts `consumed` (in turn) they are up to date, and brought up
    to date with the hosts consumed since (one, mostly: the domains of a flavor come in a row)."""
    known = requests.get(key)
    if known is None:
        needs = fleet.needs(key, demand)
        if needs is None:
            again = {number for number, host in moved.items() if host.passes(fleet, demand, key)}
        else:
            # `_Moved.passes` inline: a request met for the first time tests every consumed host
            again = set()
            passing = fleet.passing[key]
            for number, host in moved.items():
                if number in passing:
                    left = host.left
                    for resource, need in needs:
                        room = left.get(resource)  # None: no limit
                        if room is not None and need > room:
                            break
                    else:
                        again.add(number)
        requests[key] = (again, [len(consumed)])
        return again
    again, upto = known
    if upto[0] == len(consumed) - 1:  # the usual: one host consumed since
        number = consumed[-1]
        if moved[number].passes(fleet, demand, key):
            again.add(number)
        else:
            again.discard(number)
        upto[0] += 1
    elif upto[0] < len(consumed):
        for number in set(consumed[upto[0] :]):
            if moved[number].passes(fleet, demand, key):
                again.add(number)
            else:
                again.discard(number)
        upto[0] = len(consumed)
    return again


def _choose(
    fleet: _Fleet,
    key: _Key,
    count: int,
    *,
    moved: Mapping[int, _Moved],
    gone: set[int],
    again: Collection[int],
    clipped: Sequence[_Clipped],
    tops: _Tops,
    multipliers: Multipliers,
    firsts: dict[_Normalization, list[int]],
    orders: dict[_Normalization, list[tuple[float, int]] | None],
) -> tuple[int, float]:
    """The host `weigh` puts first among the `count` that pass, and its weight: the one host
    (weighing 0), the first of the fleet's order for this normalization, or `_best`'s."""
    if count == 1:
        return max(holder for _, holder, _ in tops), 0.0
    normalization = (key, tops[0][0], tops[1][0], tops[2][0])
    order = fleet.sorted_by_weight(orders, multipliers, normalization)
    if order is not None:
        start = firsts.get(normalization)
        if start is None:
            start = firsts[normalization] = [0]
        return _first(
            order,
            skip=moved,
            gone=gone,
            again=again,
            clipped=clipped,
            tops=tops,
            multipliers=multipliers,
            start=start,
        )
    return _best(
        fleet.ranking(key),
        skip=moved,
        gone=gone,
        again=again,
        clipped=clipped,
        tops=tops,
        multipliers=multipliers,
    )


def _evacuate(
    fleet: _Fleet, failed: Sequence[int], multipliers: Multipliers, prefix: Sequence[_StepTrace] = ()
) -> tuple[list[tuple[str, str]], list[Unplaced], dict[int, _Moved], list[_StepTrace] | None]:
    """The domains of the `failed` hosts (indices of the fleet), largest first, each through the
    scheduler on the others as `schedule` would place one instance: the hosts that pass for it
    are the fleet's (kept per request) but for the failed ones and those this evacuation has
    consumed (tested again as they are now, from their claims: `_Moved`); the best of them is
    the first of the fleet's order for the step's normalization when it was met before (see
    `_Fleet.sorted_by_weight`), else found by a threshold walk (`_best`), either way against the
    consumed hosts that pass, weighed one by one. The best host passes Placement and the filters
    as it is now, so its claim test (the same tests) succeeds: `schedule` would place the domain
    there. A domain no host passes for is unplaced with `schedule`'s rejections as they differ
    from the fleet's (`_Rejections`: the request's refusals in the fleet, less the failed hosts,
    with the consumed hosts' as they are now), which costs what the evacuation changed, not the
    fleet's size; the steps are then not traced (None).

    The first domains may be given their hosts: the steps of a `prefix` (of a trace whose
    choices are known to stand, see `_unchanged`), consumed without a search and kept as the
    beginning of the trace."""
    gone = set(failed)
    moved: dict[int, _Moved] = {}
    clipped = list(fleet.clipped)
    placements: list[tuple[str, str]] = []
    unplaced: list[Unplaced] = []
    traces: list[_StepTrace] | None = list(prefix)
    consumed: list[int] = []
    """The hosts chosen, in turn: a request's hosts passing again are brought up to date from it."""
    requests: dict[_Key, tuple[set[int], list[int]]] = {}
    """Per request met, the consumed hosts that pass for it and how far in `consumed` that is."""
    starts: dict[_Key, list[int]] = {}
    """Per request met, where its rankings' hosts not consumed begin (see `_tops`)."""
    firsts: dict[_Normalization, list[int]] = {}
    """Per normalization met, where its order's hosts not consumed begin (see `_first`)."""
    orders = fleet.orders_for(multipliers)
    lost: frozenset[int] | None = None
    """The failed hosts, kept by the domains that find no host."""
    for step, (guest, key) in enumerate(fleet.evacuation_order(failed)):
        demand = guest.demand
        if step < len(prefix):
            chosen = prefix[step].chosen
        else:
            base = fleet.passing_hosts(key, demand)
            again = _again(fleet, demand, key, moved=moved, consumed=consumed, requests=requests)
            count = len(base) - len(gone & base) - len(moved.keys() & base) + len(again)
            if count > 0:
                known = starts.get(key)
                if known is None:
                    known = starts[key] = [0, 0, 0]
                tops = _tops(fleet.ranking(key), moved, gone, again, clipped, starts=known)
                chosen, weight = _choose(
                    fleet,
                    key,
                    count,
                    moved=moved,
                    gone=gone,
                    again=again,
                    clipped=clipped,
                    tops=tops,
                    multipliers=multipliers,
                    firsts=firsts,
                    orders=orders,
                )
                if traces is not None:
                    traces.append(_StepTrace(key, demand, chosen, weight, count, tops))
            else:
                # no host passes: every other refuses it, those the evacuation left as the fleet
                # has them (the request's refusals, shared), those it consumed as they are now
                traces = None
                if lost is None:
                    lost = frozenset(gone)
                unplaced.append(Unplaced(guest.name, _unplaced_rejections(fleet, key, demand, lost, moved)))
                continue
        host = moved.get(chosen)
        if host is None:
            host = moved[chosen] = _Moved(chosen, fleet.rooms(chosen), fleet.room_left(chosen))
        placements.append((guest.name, fleet.states[chosen].name))
        host.add(demand, key, fleet.amounts(key, demand))
        clipped[chosen] = host.clipped(fleet.level(chosen))
        consumed.append(chosen)
    return placements, unplaced, moved, traces


def _unplaced_rejections(
    fleet: _Fleet, key: _Key, demand: Demand, lost: frozenset[int], moved: Mapping[int, _Moved]
) -> _Rejections:
    """`schedule`'s rejections of a domain no host passes for, in an evacuation that lost these
    hosts and consumed those: the consumed ones' refusals found now, the others' the fleet's."""
    now: dict[int, tuple[Rejection, bool]] = {}
    for number, host in moved.items():
        rejection = host.rejection(fleet, demand, key)
        if rejection is None:
            raise ValueError(f"{fleet.names[number]}: passes and was not counted")
        now[number] = rejection
    return _Rejections(fleet.names, fleet.refused(key, demand), lost, now)


def _evacuation_result(
    fleet: _Fleet, failed: int, multipliers: Multipliers, prefix: Sequence[_StepTrace] = ()
) -> tuple[EvacuationResult, list[_StepTrace] | None]:
    placements, unplaced, moved, traces = _evacuate(fleet, (failed,), multipliers, prefix)
    states = fleet.given()
    position = fleet.position
    for number, host in moved.items():
        states[position[number]] = host.current(fleet)
    del states[position[failed]]
    name = fleet.states[failed].name
    return EvacuationResult(name, tuple(placements), tuple(unplaced), tuple(states)), traces


@dataclass(frozen=True, slots=True)
class FleetTolerance:
    """Whether each host's domains can be re-homed on the others (its `evacuation`), and how many
    hosts the fleet can lose together: the largest k up to `bound` such that, for every j <= k,
    the domains of the j hosts with the most allocated memory (ties by name), evacuated together
    (largest first, as one host's), all find a host on the others."""

    evacuations: Mapping[str, EvacuationResult]
    tolerated: int
    bound: int
    multipliers: Multipliers
    hosts: tuple[HostState, ...]
    _fleet: _Fleet = field(repr=False, compare=False)
    _traces: Mapping[str, tuple[_StepTrace, ...] | None] = field(repr=False, compare=False)

    def feasible(self, name: str) -> bool:
        return self.evacuations[name].feasible

    def unplaced(self, name: str) -> int:
        return self.evacuations[name].unplaced_count


def _allocated_memory(state: HostState) -> int:
    memory = state.capacity.resources.get(Resource.MEMORY)
    return memory.used if memory is not None else 0


def _tolerated(
    fleet: _Fleet, bound: int, multipliers: Multipliers, single: Mapping[str, EvacuationResult]
) -> int:
    largest = sorted(
        range(len(fleet.states)), key=lambda n: (-_allocated_memory(fleet.states[n]), fleet.states[n].name)
    )
    tolerated = 0
    for lost in range(1, min(bound, len(largest)) + 1):
        if lost == 1:
            feasible = single[fleet.states[largest[0]].name].feasible
        else:
            feasible = not _evacuate(fleet, largest[:lost], multipliers)[1]
        if not feasible:
            break
        tolerated = lost
    return tolerated


def fleet_tolerance(
    hosts: Sequence[HostState],
    *,
    multipliers: Multipliers = SPREAD,
    bound: int = 3,
    memo: CandidateMemo | None = None,
) -> FleetTolerance:
    """Every host's `evacuation` (the same answers), and how many hosts the fleet can lose
    together (see `FleetTolerance`). The evacuations share the hosts that pass for each request,
    Placement's answers, the hosts sorted by weight for the normalizations they meet again, the
    final states of the hosts they consume alike, and per request a domain found no host for,
    the hosts that refuse it and why; each changes only the hosts it consumes, on a copy of
    their values. Measured by `make bench` (`bench/run.py --only tolerance`)."""
    if bound < 0:
        raise ValueError(f"expected a bound of at least 0, got {bound}")
    fleet = _Fleet(hosts, memo if memo is not None else CandidateMemo())
    evacuations: dict[str, EvacuationResult] = {}
    traces: dict[str, tuple[_StepTrace, ...] | None] = {}
    for state in hosts:
        result, trace = _evacuation_result(fleet, fleet.index[state.name], multipliers)
        evacuations[state.name] = result
        traces[state.name] = tuple(trace) if trace is not None else None
    tolerated = _tolerated(fleet, bound, multipliers, evacuations)
    fleet.prune()
    return FleetTolerance(evacuations, tolerated, bound, multipliers, tuple(hosts), fleet, traces)


def _unchanged(
    fleet: _Fleet, before: _Fleet, changed: int, trace: Sequence[_StepTrace], multipliers: Multipliers
) -> list[_StepTrace]:
    """How far an evacuation that is not the `changed` host's own makes the same choices with the
    host's new state (in `fleet`; `before` is the fleet the trace was made on): the steps of its
    trace, from the first, whose choices stand, kept for the next change (all of them: the
    evacuation is unchanged).

    Up to a step, the evacuation must never have chosen the changed host. Then every other host
    is at that step as it was (by induction: the same choices consume the same hosts), and the
    changed host is its new state as a whole, as it was its old one. A step's choice stands when
    the hosts that passed but the changed one are at least 2 (so that weights are normalized,
    not all 0), the largest value of each weigher is the same with the changed host's new values
    (so that every other host weighs what it weighed: the chosen one too), and the changed host,
    if it passes, weighs less than the chosen one (or as much with a later name).

    A step kept this way is kept with what is still known for sure: the chosen host and its
    weight, the count of hosts that passed (the others', and whether the changed host passes
    now), each weigher's largest value and a host holding it (-1: not known), and the second
    largest values unknown (the changed host may have held one). A step that was kept so, and
    that the change leaves as it is, is kept itself: the usual change keeps every step of most
    evacuations."""
    values = fleet.clipped[changed]
    passes: dict[_Key, tuple[bool, bool]] = {}
    kept: list[_StepTrace] = []
    for step in trace:
        if step.chosen == changed:
            return kept
        key = step.key
        known = passes.get(key)
        if known is None:
            # both fleets have the sets of every request traced; the changed host is unconsumed
            known = passes[key] = (changed in before.passing[key], changed in fleet.passing[key])
        was, found = known
        others = step.passed - was
        if others < 2:  # noqa: PLR2004  (one host alone weighs 0, whatever its values)
            return kept
        same = not step.exact and was == found
        tops = []
        holders = []
        for part, (first, holder, second) in enumerate(step.tops):
            if holder == changed and step.exact:
                top = max(second, values[part]) if found else second
            elif holder == changed or holder < 0:
                # the others' largest is not known (or who holds it): the changed host must
                # hold it still
                top = values[part] if found else -1.0
            else:
                top = max(first, values[part]) if found else first
            if top != first:
                return kept
            if found and values[part] == first:
                same = False
                holders.append((first, changed, -1.0))
            elif holder == changed:
                same = False
                holders.append((first, -1, -1.0))
            else:
                holders.append((first, holder, -1.0))
            tops.append(top)
        if found:
            weight = _weight(values, tops, multipliers)
            if weight > step.weight or (weight == step.weight and changed < step.chosen):
                return kept
        if same:
            kept.append(step)
            continue
        kept.append(
            _StepTrace(key, step.demand, step.chosen, step.weight, others + found, tuple(holders), False)
        )
    return kept


def _weight(values: _Clipped, tops: Sequence[float], multipliers: Multipliers) -> float:
    """One host's weight among two or more, as `_best` (and `weigh`) computes it."""
    ram, cpu, disk = values
    t_ram, t_cpu, t_disk = tops
    return (
        0.0
        + multipliers.ram * (ram / t_ram if t_ram != 0.0 else 0.0)
        + multipliers.cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
        + multipliers.disk * (disk / t_disk if t_disk != 0.0 else 0.0)
    )


def fleet_tolerance_update(
    previous: FleetTolerance, changed: HostState, *, memo: CandidateMemo | None = None
) -> FleetTolerance:
    """`fleet_tolerance` of the previous result's hosts with one of them (by name) in a new state,
    recomputing only what the change can affect: the changed host's own evacuation, those where
    a domain found no host (its rejections list the changed host), and from its first step whose
    choice `_unchanged` cannot vouch for (the changed host chosen, or a choice it may have
    changed) those of the others: the steps before stand and are not searched again. The others
    keep their placements, with the host's new state in their final states. The fleet's
    lost-together tolerance is computed again (at most `bound` evacuations)."""
    fleet = previous._fleet.copy()
    if memo is not None:
        fleet.memo = memo
    number = fleet.index.get(changed.name)
    if number is None:
        raise ValueError(f"{changed.name!r} is not a host of the fleet")
    fleet.replace(changed)
    multipliers = previous.multipliers
    hosts = tuple(changed if state.name == changed.name else state for state in previous.hosts)
    evacuations: dict[str, EvacuationResult] = {}
    traces: dict[str, tuple[_StepTrace, ...] | None] = {}
    for name, before in previous.evacuations.items():
        trace = previous._traces[name]
        kept: list[_StepTrace] = []
        if name != changed.name and trace is not None:
            kept = _unchanged(fleet, previous._fleet, number, trace, multipliers)
        if trace is not None and len(kept) == len(trace) and name != changed.name:
            # the changed host is among the others of this evacuation, unconsumed: where it was
            # given, less one if the failed host was given before it
            failed = fleet.index[name]
            where = fleet.position[number] - (fleet.position[failed] < fleet.position[number])
            states = (*before.states[:where], changed, *before.states[where + 1 :])
            evacuations[name] = replace(before, states=states)
            traces[name] = tuple(kept)
            continue
        result, found = _evacuation_result(fleet, fleet.index[name], multipliers, kept)
        evacuations[name] = result
        traces[name] = tuple(found) if found is not None else None
    tolerated = _tolerated(fleet, previous.bound, multipliers, evacuations)
    fleet.prune()
    return FleetTolerance(evacuations, tolerated, previous.bound, multipliers, hosts, fleet, traces)
