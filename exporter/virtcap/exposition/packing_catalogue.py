"""The packing answers' metric families (fleet/packing.py, docs/packing.md): part of the catalogue
(exposition/catalogue.py's CATALOGUE), rendered after the failure tolerance's and only on /metrics."""

from __future__ import annotations

from virtcap.exposition.metric_family import UNIT_LABEL, MetricFamily

_AS_OF = "as of the last packing computation"
"""Every help text says it: the answers come from the background worker, not from the scrape."""
_SEE = "see [Bin-packing](packing.md)"

RESOURCE_STRANDED = MetricFamily(
    "hypervisor_resource_stranded",
    "gauge",
    "Free amount of the resource that no packing of the fleet's flavors could use on the hypervisor, "
    f"because another resource (or its own remainder) is exhausted, {_AS_OF}.",
    ("hypervisor", "resource", "unit"),
    UNIT_LABEL,
    meaning="free that no packing of the fleet's flavors (configured and discovered) could use, in the "
    "unit of `hypervisor_resource_free` (0 where nothing is stranded); only for hypervisors up, fresh "
    f"and not in maintenance; {_SEE}",
    stability="experimental",
)
RESOURCE_STRANDED_BY = MetricFamily(
    "hypervisor_resource_stranded_by",
    "gauge",
    f"1 for each resource whose exhaustion strands the free amount of another on the hypervisor, {_AS_OF}.",
    ("hypervisor", "resource", "cause"),
    meaning="value 1 per `cause` class that leaves `resource`'s stranded amount unusable (it may be "
    "`resource` itself: a remainder below every flavor's share); none where the NUMA cells or devices "
    "hold the flavors back",
    stability="experimental",
)
COMPACTION_HYPERVISORS = MetricFamily(
    "virtcap_fleet_compaction_hypervisors",
    "gauge",
    "The fewest hypervisors up and not in maintenance that could hold every counted domain under the "
    f"scheduler's filters (Borg's compaction), {_AS_OF}.",
    (),
    meaning="the fewest eligible hypervisors holding every counted domain, each in its availability "
    "zone and under Nova's filters, NUMA and devices included (found by HiGHS, validated by the engine)",
    stability="experimental",
)
COMPACTION_LOWER_BOUND = MetricFamily(
    "virtcap_fleet_compaction_lower_bound",
    "gauge",
    f"A proven lower bound of the compaction: no packing uses fewer hypervisors, {_AS_OF}.",
    (),
    meaning="proven: no packing uses fewer hypervisors (LP relaxation, the solver's bound, a sum "
    "bound); equal to the compaction when it is optimal",
    stability="experimental",
)
HYPERVISORS_FREEABLE = MetricFamily(
    "virtcap_fleet_hypervisors_freeable",
    "gauge",
    "Hypervisors up and not in maintenance that the compaction leaves empty (eligible minus "
    f"virtcap_fleet_compaction_hypervisors), {_AS_OF}.",
    (),
    meaning="eligible hypervisors minus the compaction: how many could be emptied",
    stability="experimental",
)
GROUP_COMPACTION_HYPERVISORS = MetricFamily(
    "hypervisor_group_compaction_hypervisors",
    "gauge",
    "The fewest hypervisors of the group (up, not in maintenance) that could hold the counted domains "
    f"of its members, {_AS_OF}.",
    ("kind", "group"),
    meaning="the compaction of each configured group's members alone (a host in two aggregates "
    "counts in each)",
    stability="experimental",
)
FLAVOR_SELLABLE = MetricFamily(
    "virtcap_flavor_sellable_instances",
    "gauge",
    "Instances of the flavor the fleet can still take, placed as the scheduler would, while it still "
    "tolerates scheduler.failure_tolerance.reserve_host_failures hypervisors lost together, "
    f"{_AS_OF}.",
    ("flavor",),
    meaning="instances that can still be sold keeping the failover reserve "
    "(`reserve_host_failures`; 0: every schedulable instance); 0 where what is free is the reserve",
    stability="experimental",
)
GROUP_FLAVOR_SELLABLE = MetricFamily(
    "hypervisor_group_flavor_sellable_instances",
    "gauge",
    "Instances of the flavor the availability zone can still take while its hypervisors alone "
    f"tolerate the failover reserve, {_AS_OF}.",
    ("kind", "group", "flavor"),
    label_values={"kind": ("availability_zone",)},
    meaning="the same per availability zone, where failover happens",
    stability="experimental",
)
FAILOVER_RESERVE = MetricFamily(
    "virtcap_failover_reserve_host_failures",
    "gauge",
    "The hypervisors lost together that the sellable instances keep room for "
    f"(scheduler.failure_tolerance.reserve_host_failures), {_AS_OF}.",
    (),
    meaning="the failover reserve the sellable instances keep: with "
    "`virtcap_fleet_host_failures_tolerated` below it, nothing is sellable until the fleet "
    "tolerates it again",
    stability="experimental",
)
PACKING_TIMESTAMP = MetricFamily(
    "virtcap_packing_timestamp_seconds",
    "gauge",
    "When a packing answer shown was last computed in the background, from the audits as they were "
    "then (virtcap_packing_pending_answers says how many are still to compute again).",
    (),
    "seconds",
    meaning="when a packing answer was last computed (Unix time)",
    stability="experimental",
)
PACKING_DURATION = MetricFamily(
    "virtcap_packing_duration_seconds",
    "gauge",
    "How long the packing answers last took to catch up with a change of the hypervisors, in the "
    "background worker of the failure tolerance.",
    (),
    "seconds",
    meaning="how long the packing answers last took to catch up with a change (only what changed is "
    "computed again; each hypervisor's stranded capacity at once, the fleet's answers one after the other)",
    stability="experimental",
)
PACKING_PENDING = MetricFamily(
    "virtcap_packing_pending_answers",
    "gauge",
    "The packing answers (a compaction, a flavor's sellable instances in the fleet or a zone) still to "
    "compute again since the hypervisors last changed; 0 when every answer shown is as of the last change.",
    (),
    meaning="the packing answers still to compute again: while above 0, some compactions or sellable "
    "instances shown are older than the last change (stranded capacity never is)",
    stability="experimental",
)

PACKING_FAMILIES: tuple[MetricFamily, ...] = (
    RESOURCE_STRANDED,
    RESOURCE_STRANDED_BY,
    COMPACTION_HYPERVISORS,
    COMPACTION_LOWER_BOUND,
    HYPERVISORS_FREEABLE,
    GROUP_COMPACTION_HYPERVISORS,
    FLAVOR_SELLABLE,
    GROUP_FLAVOR_SELLABLE,
    FAILOVER_RESERVE,
    PACKING_TIMESTAMP,
    PACKING_DURATION,
    PACKING_PENDING,
)
"""Computed after the failure tolerance, by its worker: absent while it is off or before the
first packing computation."""
