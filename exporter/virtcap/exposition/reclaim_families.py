"""Reclaimable capacity's metric families (model/reclaim.py, docs/reclaim.md): part of the catalogue
(exposition/catalogue.py's CATALOGUE), rendered with the fleet's families on /metrics only.

The allocations of the reclaimable domains are summed per hypervisor, resource and reason, and per
project as the project families show them: the fleet's top projects under their own names (the
same as `hypervisor_project_allocated`'s), the rest as `other`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import Metric

from virtcap.exposition.metric_family import UNIT_LABEL, MetricFamily
from virtcap.model.ownership import OTHER, domain_project
from virtcap.model.reclaim import ReclaimableDomain, ReclaimReason
from virtcap.model.resources import Resource, display_order

_SEE = "see [Reclaimable capacity](reclaim.md)"
_REASONS = {"reason": tuple(reason.value for reason in ReclaimReason)}

RECLAIMABLE = MetricFamily(
    "hypervisor_reclaimable",
    "gauge",
    "Allocated to the hypervisor's domains that are shut off or idle for longer than the `reclaim` "
    "windows: capacity that could be taken back, as of the last background audit.",
    ("hypervisor", "resource", "unit", "reason"),
    UNIT_LABEL,
    label_values=_REASONS,
    meaning="allocations (as the capacity counts them) of the domains shut off for `reclaim.shutoff_after` "
    "(`shutoff`) or running below `reclaim.idle_cpu_below` of their vCPUs for `reclaim.idle_for` "
    f"(`idle`); no series where none is; {_SEE}",
    stability="experimental",
)
PROJECT_RECLAIMABLE = MetricFamily(
    "hypervisor_project_reclaimable",
    "gauge",
    "Allocated to the project's reclaimable domains on the hypervisor (the projects of "
    'hypervisor_project_allocated, the others summed as project_id="other").',
    ("hypervisor", "project_id", "project_name", "resource", "unit", "reason"),
    UNIT_LABEL,
    label_values=_REASONS,
    meaning="`hypervisor_reclaimable` split by project: the fleet's `exposition.top_projects` largest "
    'projects, the rest summed as `project_id="other"`',
    stability="experimental",
)
RECLAIM_FAMILIES: tuple[MetricFamily, ...] = (RECLAIMABLE, PROJECT_RECLAIMABLE)


def reclaim_families(
    found: Iterable[ReclaimableDomain], projects: Mapping[str, str], top_projects: int
) -> list[Metric]:
    """The two families from the reclaimable domains; `projects`: those shown under their own name
    (id to name), none when `top_projects` is 0 (no project series at all)."""
    per_host: dict[tuple[str, ReclaimReason], dict[Resource, int]] = {}
    per_project: dict[tuple[str, str, str, ReclaimReason], dict[Resource, int]] = {}
    for item in found:
        reason = item.reclaimable.reason
        host = per_host.setdefault((item.hypervisor, reason), {})
        project_id, _name = domain_project(item.domain)
        shown = projects.get(project_id)
        key = (
            (item.hypervisor, project_id, shown, reason)
            if shown is not None
            else (item.hypervisor, OTHER, OTHER, reason)
        )
        project = per_project.setdefault(key, {})
        for resource, amount in item.allocation.items():
            host[resource] = host.get(resource, 0) + amount
            project[resource] = project.get(resource, 0) + amount
    hosts = RECLAIMABLE.gauge()
    for (hypervisor, reason), amounts in sorted(per_host.items()):
        for resource in display_order(amounts):
            hosts.add_metric([hypervisor, resource.label, resource.unit, reason.value], amounts[resource])
    by_project = PROJECT_RECLAIMABLE.gauge()
    if top_projects:
        for (hypervisor, project_id, name, reason), amounts in sorted(per_project.items()):
            for resource in display_order(amounts):
                by_project.add_metric(
                    [hypervisor, project_id, name, resource.label, resource.unit, reason.value],
                    amounts[resource],
                )
    return [hosts, by_project]
