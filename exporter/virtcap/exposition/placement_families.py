"""The Placement reconciliation as metric families (exposition/placement_catalogue.py), from the
report the Placement reader made last (fleet/placement.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

from virtcap.exposition import placement_catalogue as entries
from virtcap.exposition.metric_family import MetricFamily
from virtcap.fleet.placement import PlacementReport
from virtcap.model.placement_drift import Drift
from virtcap.model.resources import display_order

OUTCOMES = ("ok", "error")


def placement_families(report: PlacementReport | None, shown: Collection[str]) -> list[Metric]:
    """Every family, for the hypervisors in `shown` (whose data is shown); the per-hypervisor ones
    empty while the last reading failed or before the first."""
    gauges = _gauges()
    requests = entries.PLACEMENT_REQUESTS.counter()
    if report is not None:
        gauges[entries.PLACEMENT_UP].add_metric([], 1 if report.up else 0)
        if report.last_success_at is not None:
            gauges[entries.PLACEMENT_LAST_SUCCESS].add_metric([], report.last_success_at)
        gauges[entries.PLACEMENT_READ_DURATION].add_metric([], report.duration_seconds)
        for outcome in OUTCOMES:
            requests.add_metric([outcome], report.requests_total.get(outcome, 0))
        if report.drifts is not None:
            gauges[entries.UNMATCHED_HYPERVISORS].add_metric([], len(report.unmatched))
            for name, drift in report.drifts.items():
                if name in shown:
                    _add_drift(gauges, name, drift)
    return _in_order(gauges, requests)


def drift_families(name: str, drift: Drift) -> list[Metric]:
    """Every family, with one hypervisor's drift alone: `placement_families` without the fleet's
    samples, for a render that keeps each hypervisor's samples while its drift stays the same."""
    gauges = _gauges()
    _add_drift(gauges, name, drift)
    return _in_order(gauges, entries.PLACEMENT_REQUESTS.counter())


def _gauges() -> dict[MetricFamily, GaugeMetricFamily]:
    return {family: family.gauge() for family in entries.PLACEMENT_FAMILIES if family.type == "gauge"}


def _add_drift(gauges: Mapping[MetricFamily, GaugeMetricFamily], name: str, drift: Drift) -> None:
    for (resource, field), value in sorted(
        drift.inventory.items(), key=lambda item: (item[0][0].label, item[0][1])
    ):
        gauges[entries.INVENTORY_DRIFT].add_metric([name, resource.label, field], value)
    gauges[entries.ORPHANED_CONSUMERS].add_metric([name], len(drift.orphaned))
    gauges[entries.UNALLOCATED_DOMAINS].add_metric([name], len(drift.unallocated))
    gauges[entries.MISMATCHED_ALLOCATIONS].add_metric([name], len(drift.mismatched))
    for family, amounts in (
        (entries.ORPHANED_ALLOCATION, drift.orphaned_amounts),
        (entries.UNALLOCATED_ALLOCATION, drift.unallocated_amounts),
        (entries.USAGE_DRIFT, drift.usage),
    ):
        for resource in display_order(amounts):
            gauges[family].add_metric([name, resource.label, resource.unit], amounts[resource])


def _in_order(gauges: Mapping[MetricFamily, GaugeMetricFamily], requests: Metric) -> list[Metric]:
    built: dict[MetricFamily, Metric] = {**gauges, entries.PLACEMENT_REQUESTS: requests}
    return [built[family] for family in entries.PLACEMENT_FAMILIES]
