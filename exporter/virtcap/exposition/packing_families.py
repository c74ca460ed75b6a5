"""The packing answers as metric families (exposition/packing_catalogue.py), from the report the
failure-tolerance worker computed last (fleet/packing.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from prometheus_client.core import Metric

from virtcap.exposition import packing_catalogue as entries
from virtcap.exposition.metric_family import MetricFamily
from virtcap.fleet.packing import PackingReport
from virtcap.model.packing.stranded import StrandedCapacity
from virtcap.model.resources import display_order

ZONE_KIND = "availability_zone"


def packing_families(packing: PackingReport | None, shown: Collection[str]) -> list[Metric]:
    """The fleet's answers, and each hypervisor's stranded capacity for the hypervisors in
    `shown` (those whose data is shown: one that turned stale or was removed since the
    computation is left out at once); no series before the first computation."""
    return stranded_families(packing, shown) + answer_families(packing)


def stranded_families(packing: PackingReport | None, shown: Collection[str]) -> list[Metric]:
    """`packing_families`' first: each hypervisor's stranded capacity and its causes."""
    return hypervisors_stranded(shown_stranded(packing, shown))


def shown_stranded(
    packing: PackingReport | None, shown: Collection[str]
) -> list[tuple[str, StrandedCapacity]]:
    """The stranded capacity of each hypervisor in `shown`, in the order the report has them."""
    if packing is None:
        return []
    visible = set(shown)  # looked up once per hypervisor: not in a sequence of a thousand
    return [(name, found) for name, found in packing.stranded.items() if name in visible]


def hypervisors_stranded(found_by_hypervisor: Iterable[tuple[str, StrandedCapacity]]) -> list[Metric]:
    """The stranded families of these hypervisors, in this order."""
    stranded = entries.RESOURCE_STRANDED.gauge()
    stranded_by = entries.RESOURCE_STRANDED_BY.gauge()
    for name, found in found_by_hypervisor:
        for resource in display_order(found.amounts):
            stranded.add_metric([name, resource.label, resource.unit], found.amounts[resource])
            for cause in display_order(found.causes.get(resource, ())):
                stranded_by.add_metric([name, resource.label, cause.label], 1)
    return [stranded, stranded_by]


def answer_families(packing: PackingReport | None) -> list[Metric]:
    """`packing_families`' others: the fleet's, its groups' and its zones' answers."""
    hypervisors = entries.COMPACTION_HYPERVISORS.gauge()
    lower_bound = entries.COMPACTION_LOWER_BOUND.gauge()
    freeable = entries.HYPERVISORS_FREEABLE.gauge()
    groups = entries.GROUP_COMPACTION_HYPERVISORS.gauge()
    sellable = entries.FLAVOR_SELLABLE.gauge()
    zone_sellable = entries.GROUP_FLAVOR_SELLABLE.gauge()
    reserve = entries.FAILOVER_RESERVE.gauge()
    timestamp = entries.PACKING_TIMESTAMP.gauge()
    duration = entries.PACKING_DURATION.gauge()
    pending = entries.PACKING_PENDING.gauge()
    if packing is not None:
        compaction = packing.compaction
        if compaction is not None:
            hypervisors.add_metric([], compaction.hypervisors)
            lower_bound.add_metric([], compaction.lower_bound)
            freeable.add_metric([], compaction.freeable)
        for (kind, group), summary in packing.groups.items():
            groups.add_metric([kind, group], summary.hypervisors)
        for flavor, count in packing.sellable.items():
            sellable.add_metric([flavor], count)
        for (zone, flavor), count in packing.sellable_by_zone.items():
            zone_sellable.add_metric([ZONE_KIND, zone, flavor], count)
        reserve.add_metric([], packing.reserve_host_failures)
        timestamp.add_metric([], packing.computed_at)
        if packing.duration_seconds is not None:
            duration.add_metric([], packing.duration_seconds)
        pending.add_metric([], packing.pending)
    built: dict[MetricFamily, Metric] = {
        entries.COMPACTION_HYPERVISORS: hypervisors,
        entries.COMPACTION_LOWER_BOUND: lower_bound,
        entries.HYPERVISORS_FREEABLE: freeable,
        entries.GROUP_COMPACTION_HYPERVISORS: groups,
        entries.FLAVOR_SELLABLE: sellable,
        entries.GROUP_FLAVOR_SELLABLE: zone_sellable,
        entries.FAILOVER_RESERVE: reserve,
        entries.PACKING_TIMESTAMP: timestamp,
        entries.PACKING_DURATION: duration,
        entries.PACKING_PENDING: pending,
    }
    return [built[family] for family in entries.PACKING_FAMILIES if family in built]
