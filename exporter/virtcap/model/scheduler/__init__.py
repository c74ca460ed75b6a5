"""Nova's scheduler, simulated: where the instances of a request land, and why a host refuses one.

Pure: host states in, where instances land out. docs/scheduling.md ("The simulated scheduler")
gives the steps; this package follows Nova 34's `SchedulerManager._schedule` for a request of N
instances of one demand:

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
   pending claims a host state is built with (model/host_fit.py).

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

The package, laid out as Nova's scheduler is:

- `host_states`: `HostState`, one hypervisor as the scheduler sees it, and the demands of its
  domains;
- `filters`: `FILTERS`, every filter in the order above, and `Rejection`, the first refusal;
- `weighers`: the RAM, CPU and disk weighers and their multipliers;
- `request`: the request loop, `schedule` (and `request_hosts`, a request for as many instances
  as fit), with its fast path for a demand the claims alone decide: `claims_request` (and
  `consumed_host`, a host followed from its claims, shared with the evacuations);
- `evacuations`: a failed host's domains scheduled on the others, `evacuation`, with its fast
  path's parts: `fleet_index` (the fleet's hosts per request), `best_host` (the best host without
  weighing every host) and `fleet_refusals` (the rejections of a domain that finds no host);
- `failure_tolerance`: every host's evacuation and how many hosts the fleet can lose together.
"""

from virtcap.model.scheduler.evacuations import EvacuationResult, Unplaced, evacuation
from virtcap.model.scheduler.failure_tolerance import FleetTolerance, fleet_tolerance, fleet_tolerance_update
from virtcap.model.scheduler.filters import (
    ANTI_AFFINITY,
    AVAILABILITY_ZONE,
    COMPUTE,
    FILTERS,
    FORCE_HOSTS,
    IGNORE_HOSTS,
    NUMA_TOPOLOGY,
    PCI_PASSTHROUGH,
    PLACEMENT,
    CandidateMemo,
    Rejection,
)
from virtcap.model.scheduler.host_states import Guest, HostState, domain_demand, evacuation_order, host_state
from virtcap.model.scheduler.request import ScheduleResult, Step, general_schedule, request_hosts, schedule
from virtcap.model.scheduler.weighers import SPREAD, WEIGHERS, Multipliers, Weighed, normalize, weigh

__all__ = [
    "ANTI_AFFINITY",
    "AVAILABILITY_ZONE",
    "COMPUTE",
    "FILTERS",
    "FORCE_HOSTS",
    "IGNORE_HOSTS",
    "NUMA_TOPOLOGY",
    "PCI_PASSTHROUGH",
    "PLACEMENT",
    "SPREAD",
    "WEIGHERS",
    "CandidateMemo",
    "EvacuationResult",
    "FleetTolerance",
    "Guest",
    "HostState",
    "Multipliers",
    "Rejection",
    "ScheduleResult",
    "Step",
    "Unplaced",
    "Weighed",
    "domain_demand",
    "evacuation",
    "evacuation_order",
    "fleet_tolerance",
    "fleet_tolerance_update",
    "general_schedule",
    "host_state",
    "normalize",
    "request_hosts",
    "schedule",
    "weigh",
]
