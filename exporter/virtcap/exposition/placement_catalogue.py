"""The Placement reconciliation's metric families (model/placement_drift.py, docs/placement.md):
part of the catalogue, shown only where `placement:` is configured; the per-hypervisor families
only while Placement is read successfully (they disappear rather than show stale values)."""

from __future__ import annotations

from virtcap.exposition.metric_family import UNIT_LABEL, MetricFamily

_AS_OF = "as of the last successful reading of Placement (virtcap_placement_last_success_timestamp_seconds)"
_SEE = "see [Placement reconciliation](placement.md)"

INVENTORY_DRIFT = MetricFamily(
    "hypervisor_placement_inventory_drift",
    "gauge",
    "Placement's inventory field of the class minus the value Nova would report from the audited "
    f"hypervisor and its configuration, in the class's unit (0 when they agree), {_AS_OF}.",
    ("hypervisor", "resource", "field"),
    label_values={"field": ("total", "reserved", "allocation_ratio", "max_unit")},
    meaning="Placement's value minus Nova's (bytes for memory and disk, a plain ratio for "
    "allocation_ratio): a stale or misconfigured nova-compute, or hardware changed under it; a class "
    f"on nested providers (vGPUs) by its total and reserved summed; {_SEE}",
    stability="experimental",
)
ORPHANED_CONSUMERS = MetricFamily(
    "hypervisor_placement_orphaned_consumers",
    "gauge",
    "Consumers holding allocations on the hypervisor's providers with no domain of that UUID on it "
    f"(migrations in progress left out), {_AS_OF}.",
    ("hypervisor",),
    meaning="allocations leaked by failed migrations, evacuations and deletes (Nova bug 1767553): "
    "`nova-manage placement audit --verbose`, then `--delete`",
    stability="experimental",
)
ORPHANED_ALLOCATION = MetricFamily(
    "hypervisor_placement_orphaned_allocation",
    "gauge",
    f"What the orphaned consumers hold on the hypervisor's providers, per class, {_AS_OF}.",
    ("hypervisor", "resource", "unit"),
    UNIT_LABEL,
    meaning="the capacity the orphaned consumers keep from the scheduler",
    stability="experimental",
)
UNALLOCATED_DOMAINS = MetricFamily(
    "hypervisor_placement_unallocated_domains",
    "gauge",
    "Nova instances on the hypervisor (by their metadata) with no allocation on its providers "
    f"(the source side of a live migration left out), {_AS_OF}.",
    ("hypervisor",),
    meaning="instances Placement does not count, so the scheduler overfills the hypervisor: "
    "`nova-manage placement heal_allocations`",
    stability="experimental",
)
UNALLOCATED_ALLOCATION = MetricFamily(
    "hypervisor_placement_unallocated_allocation",
    "gauge",
    f"What the unallocated instances' flavors ask for, per class, {_AS_OF}.",
    ("hypervisor", "resource", "unit"),
    UNIT_LABEL,
    meaning="the capacity Placement believes free but the unallocated instances use",
    stability="experimental",
)
MISMATCHED_ALLOCATIONS = MetricFamily(
    "hypervisor_placement_mismatched_allocations",
    "gauge",
    "Instances on the hypervisor whose allocation differs from what their flavor and extra specs ask "
    f"(an unconfirmed resize, an edited flavor), {_AS_OF}.",
    ("hypervisor",),
    meaning="allocations unlike the instance's flavor: a resize to confirm or revert, a flavor edited "
    "in place",
    stability="experimental",
)
USAGE_DRIFT = MetricFamily(
    "hypervisor_placement_usage_drift",
    "gauge",
    "Placement's usage of the class on the hypervisor's providers minus what its counted domains are "
    f"allocated (virtcap's claims left out), {_AS_OF}.",
    ("hypervisor", "resource", "unit"),
    UNIT_LABEL,
    meaning="Placement's usage minus virtcap's allocated (without virtcap's own claims): the sum of "
    "the drifts above, seen from the totals",
    stability="experimental",
)
PLACEMENT_UP = MetricFamily(
    "virtcap_placement_up",
    "gauge",
    "1 when the last reading of Placement succeeded, 0 when it failed (down, slow, refused or "
    "answering garbage); the per-hypervisor Placement families are absent while it is 0.",
    (),
    meaning="whether Placement answered the last round of requests",
    stability="experimental",
)
PLACEMENT_LAST_SUCCESS = MetricFamily(
    "virtcap_placement_last_success_timestamp_seconds",
    "gauge",
    "When Placement was last read successfully (Unix time): what the Placement families are as of.",
    (),
    "seconds",
    meaning="when the Placement families were read (Unix time)",
    stability="experimental",
)
PLACEMENT_READ_DURATION = MetricFamily(
    "virtcap_placement_read_duration_seconds",
    "gauge",
    "How long the last reading of Placement took (its requests and the comparison).",
    (),
    "seconds",
    meaning="the last round's duration, to compare with `placement.interval`",
    stability="experimental",
)
PLACEMENT_REQUESTS = MetricFamily(
    "virtcap_placement_requests_total",
    "counter",
    "Requests made to Placement since the exporter started, by outcome.",
    ("outcome",),
    label_values={"outcome": ("ok", "error")},
    meaning="requests made to Placement (`ok`: answered; `error`: refused, failed or unanswered)",
    stability="experimental",
)
UNMATCHED_HYPERVISORS = MetricFamily(
    "virtcap_placement_unmatched_hypervisors",
    "gauge",
    "Audited hypervisors no resource provider matched (by hostname or placement_provider), as of the "
    "last successful reading.",
    (),
    meaning="hypervisors Placement has no compute node for: nova-compute not running there, or a "
    "name to set in `placement_provider`",
    stability="experimental",
)

HYPERVISOR_FAMILIES: tuple[MetricFamily, ...] = (
    INVENTORY_DRIFT,
    ORPHANED_CONSUMERS,
    ORPHANED_ALLOCATION,
    UNALLOCATED_DOMAINS,
    UNALLOCATED_ALLOCATION,
    MISMATCHED_ALLOCATIONS,
    USAGE_DRIFT,
)
PLACEMENT_FAMILIES: tuple[MetricFamily, ...] = (
    *HYPERVISOR_FAMILIES,
    PLACEMENT_UP,
    PLACEMENT_LAST_SUCCESS,
    PLACEMENT_READ_DURATION,
    PLACEMENT_REQUESTS,
    UNMATCHED_HYPERVISORS,
)
"""Shown where `placement:` is configured."""
