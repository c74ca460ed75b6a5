"""Snapshots as the JSON document of `virtcap audit --format json` and as readable tables."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

from virtcap.contract.maintenance import maintenance_document
from virtcap.exposition.packing_report import packing_document, packing_text
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.tolerance import HostEvacuation, ToleranceReport, UnplacedDomain
from virtcap.model.capacity import HostCapacity, ResourceCapacity
from virtcap.model.discovery import DiscoveredFlavor, FlavorDiscovery, definition_text
from virtcap.model.facts import DomainState
from virtcap.model.host_fit import cell_amounts
from virtcap.model.maintenance import maintenance_reason
from virtcap.model.numa.cells import HostCell
from virtcap.model.ownership import UNKNOWN, ProjectUsage, fleet_projects
from virtcap.model.pci import PciPool
from virtcap.model.resources import display_order
from virtcap.units import format_bytes, format_cpu_set, format_utc

BAR_WIDTH = 20


def resource_document(capacity: ResourceCapacity) -> dict[str, Any]:
    """One resource, its inventory as Placement's (total, reserved, min_unit, max_unit, step_size,
    allocation_ratio) and every amount in `unit`; total, reserved, max_unit, limit and free are
    null where the total is unknown."""
    scale = capacity.resource.placement_unit  # min_unit and step_size are in Placement's unit
    return {
        "unit": capacity.unit,
        "placement_class": capacity.resource.placement_class,
        "total": capacity.total,
        "reserved": capacity.reserved,
        "min_unit": capacity.min_unit * scale,
        "max_unit": capacity.max_unit,
        "step_size": capacity.step_size * scale,
        "allocation_ratio": capacity.allocation_ratio,
        "limit": capacity.limit,
        "used": capacity.used,
        "free": capacity.free,
        "claimed": capacity.claimed,
        "actual": capacity.actual,
        "utilization": capacity.utilization,
        "effective_overcommit": capacity.effective_overcommit,
        "used_by_state": {state.value: capacity.allocated_by_state[state] for state in DomainState},
        "counted_states": sorted(state.value for state in capacity.counted_states),
        "refused": capacity.refused,
    }


def groups_document(snapshot: HypervisorSnapshot) -> dict[str, list[str]]:
    """The groups the hypervisor is in, by kind (from the configuration: shown down or up)."""
    groups: dict[str, list[str]] = {}
    for kind, name in snapshot.hypervisor.groups if snapshot.hypervisor is not None else ():
        groups.setdefault(kind, []).append(name)
    return groups


def hypervisor_document(snapshot: HypervisorSnapshot) -> dict[str, Any]:
    capacity, facts = snapshot.capacity, snapshot.facts
    document: dict[str, Any] = {
        "name": snapshot.name,
        "up": snapshot.up,
        "error": snapshot.error,
        "maintenance": maintenance_document(snapshot.maintenance),
        "groups": groups_document(snapshot),
    }
    if capacity is None or facts is None:
        document.update(domains=None, resources={}, schedulable={}, problems=[], projects=[])
        return document
    document.update(
        hostname=facts.hostname,
        domains={state.value: capacity.domains_by_state[state] for state in DomainState},
        resources={
            r.label: resource_document(capacity.resources[r]) for r in display_order(capacity.resources)
        },
        schedulable=dict(capacity.schedulable),
        bottlenecks={flavor: r.label if r else None for flavor, r in capacity.bottlenecks.items()},
        placement_limited=dict(capacity.limited_within),
        refusals={flavor: list(reasons) for flavor, reasons in capacity.refusals.items()},
        memory_actual_source=facts.memory_in_use_source,
        hugepage_memory_bytes=capacity.hugepage_memory_bytes,
        numa_cells=[_cell_document(capacity, cell) for cell in capacity.within.cells],
        pci_pools=[_pool_document(pool) for pool in capacity.within.pci_pools],
        pci_aliases={
            alias: {"devices": found.devices, "free": found.free}
            for alias, found in capacity.within.alias_devices().items()
        },
        gpus=[
            {
                "address": gpu.address,
                "mdev_type": gpu.mdev_type,
                "total": gpu.total,
                "used": gpu.used,
                "free": gpu.free,
            }
            for gpu in capacity.vgpus.gpus
        ],
        problems=[*facts.problems, *capacity.problems],
        projects=[project_document(project) for project in fleet_projects(snapshot.projects)],
    )
    return document


def project_document(project: ProjectUsage) -> dict[str, Any]:
    """One project's counted domains and their allocations, in each class's unit."""
    return {
        "project_id": project.project_id,
        "project_name": project.project_name,
        "domains": project.domains,
        "allocated": {resource.label: amount for resource, amount in project.allocated.items()},
    }


def discovered_flavor_document(found: DiscoveredFlavor) -> dict[str, Any]:
    flavor = found.flavor
    return {
        "name": flavor.name,
        "vcpus": flavor.vcpus,
        "memory_bytes": flavor.memory_mib * 1024**2,
        "root_disk_bytes": flavor.root_gib * 1024**3,
        "ephemeral_disk_bytes": flavor.ephemeral_gib * 1024**3,
        "swap_bytes": flavor.swap_mib * 1024**2,
        "extra_specs": dict(flavor.extra_specs),
        "domains": found.domains,
        "hypervisors": list(found.hypervisors),
    }


def _discovery_document(discovery: FlavorDiscovery, configured: Collection[str]) -> list[dict[str, Any]]:
    """Each name found once, with the definition used; `configured`: a configured flavor of the
    name wins; `other_definitions`: the definitions of the name not used (a conflict)."""
    return [
        {
            **discovered_flavor_document(found),
            "configured": name in configured,
            "other_definitions": [
                discovered_flavor_document(other) for other in discovery.conflicts.get(name, ())[1:]
            ],
        }
        for name, found in sorted(discovery.flavors.items())
    ]


def _cell_document(capacity: HostCapacity, cell: HostCell) -> dict[str, Any]:
    """One NUMA cell: its CPU sets, its amounts against Nova's NUMA limits, its pages per size."""
    within = capacity.within
    return {
        "id": cell.id,
        "shared_cpus": format_cpu_set(cell.shared_cpus),
        "dedicated_cpus": format_cpu_set(cell.dedicated_cpus),
        "pinned_cpus": format_cpu_set(cell.pinned_cpus),
        "resources": {
            amount.resource.label: {
                "unit": amount.resource.unit,
                "size": amount.size,
                "limit": amount.limit,
                "used": amount.used,
                "free": amount.free,
            }
            for amount in cell_amounts(cell, within.cpu_allocation_ratio, within.ram_allocation_ratio)
        },
        "pages": [
            {
                "size_bytes": pages.size_kib * 1024,
                "total": pages.total,
                "reserved": pages.reserved,
                "used": pages.used,
                "free": pages.free,
            }
            for pages in cell.pages
        ],
    }


def _pool_document(pool: PciPool) -> dict[str, Any]:
    return {
        "address": pool.address,
        "vendor_id": pool.vendor_id,
        "product_id": pool.product_id,
        "device_type": pool.dev_type,
        "numa_node": pool.numa_node,
        "tags": dict(pool.tags),
        "devices": pool.count,
        "free": pool.free,
    }


def fleet_document(
    snapshots: Iterable[HypervisorSnapshot],
    tolerance: ToleranceReport | None = None,
    discovery: FlavorDiscovery | None = None,
    configured_flavors: Collection[str] = (),
) -> dict[str, Any]:
    """Every hypervisor's document; with the fleet's failure tolerance, each one's `evacuation`
    (null for a hypervisor it did not take: down or stale) and the fleet's `failure_tolerance`
    (null while it is off or not computed yet). The fleet's `projects`, every one, the most
    allocated memory first; the `discovered_flavors` (null while discovery is off); the `packing`
    answers computed with the tolerance, when they were (exposition/packing_report.py)."""
    snapshots = list(snapshots)
    hypervisors = []
    for snapshot in snapshots:
        document = hypervisor_document(snapshot)
        if tolerance is not None:
            evacuation = tolerance.evacuations.get(snapshot.name)
            document["evacuation"] = _evacuation_document(evacuation) if evacuation is not None else None
        hypervisors.append(document)
    projects = fleet_projects(usage for snapshot in snapshots for usage in snapshot.projects)
    return {
        "hypervisors": hypervisors,
        "failure_tolerance": _tolerance_document(tolerance),
        "projects": [project_document(project) for project in projects],
        "discovered_flavors": _discovery_document(discovery, configured_flavors)
        if discovery is not None
        else None,
        **({"packing": packing_document(tolerance.packing)} if tolerance is not None else {}),
    }


def _tolerance_document(tolerance: ToleranceReport | None) -> dict[str, Any] | None:
    if tolerance is None:
        return None
    return {
        "host_failures_tolerated": tolerance.tolerated,
        "host_failures_bound": tolerance.bound,
        "infeasible_evacuations": sorted(
            name for name, evacuation in tolerance.evacuations.items() if not evacuation.feasible
        ),
        "computed_at": format_utc(tolerance.computed_at),
        "duration_seconds": tolerance.duration_seconds,
    }


def _evacuation_document(evacuation: HostEvacuation) -> dict[str, Any]:
    return {
        "feasible": evacuation.feasible,
        "unplaced_domains": len(evacuation.unplaced),
        "placements": [{"domain": domain, "hypervisor": host} for domain, host in evacuation.placements],
        "unplaced": [
            {"domain": found.domain, "refused_by": dict(found.refused_by), "example": found.example}
            for found in evacuation.unplaced
        ],
    }


def render_tables(
    snapshots: Iterable[HypervisorSnapshot],
    tolerance: ToleranceReport | None = None,
    discovery: FlavorDiscovery | None = None,
) -> str:
    snapshots = list(snapshots)
    parts = []
    for snapshot in snapshots:
        text = _render_one(snapshot)
        evacuation = tolerance.evacuations.get(snapshot.name) if tolerance is not None else None
        if evacuation is not None:
            text += "\n" + _evacuation_line(evacuation)
        parts.append(text)
    if tolerance is not None:
        parts.append(
            f"fleet: can lose {tolerance.tolerated} hypervisor(s) together with every domain re-homed "
            f"(the most allocated memory first; tried up to {tolerance.bound})"
        )
        if tolerance.packing is not None:
            parts.append(packing_text(tolerance.packing))
    projects = fleet_projects(usage for snapshot in snapshots for usage in snapshot.projects)
    if any(project.project_id != UNKNOWN for project in projects):  # no owner known: nothing to tell
        parts.append(_projects_text(projects))
    if discovery is not None and discovery.conflicts:
        parts.append(_conflicts_text(discovery))
    return "\n\n".join(parts) + "\n"


PROJECTS_SHOWN = 10
"""Projects listed in the tables, the most allocated memory first; the JSON document has them all."""


def _projects_text(projects: list[ProjectUsage]) -> str:
    lines = ["projects (counted domains and their allocations, the most memory first):"]
    for project in projects[:PROJECTS_SHOWN]:
        amounts = ", ".join(
            f"{resource.label} {format_bytes(amount) if resource.unit == 'bytes' else amount}"
            for resource, amount in project.allocated.items()
        )
        name = project.project_name or "-"
        lines.append(f"  {name} ({project.project_id}): {project.domains} domain(s), {amounts}")
    if len(projects) > PROJECTS_SHOWN:
        lines.append(f"  and {len(projects) - PROJECTS_SHOWN} more")
    return "\n".join(lines)


def _conflicts_text(discovery: FlavorDiscovery) -> str:
    lines = ["discovered flavors defined differently across the fleet (the first definition is used):"]
    for name, definitions in discovery.conflicts.items():
        lines.append(f"  {name}:")
        lines.extend(f"    {definition_text(found)}" for found in definitions)
    return "\n".join(lines)


UNPLACED_SHOWN = 3
"""Domains that find no host named on a hypervisor's line; the JSON document has them all."""


def _evacuation_line(evacuation: HostEvacuation) -> str:
    moved = len(evacuation.placements)
    if evacuation.feasible:
        return f"  if lost: its {moved} domain(s) find a host on the others"
    total = moved + len(evacuation.unplaced)
    named = "; ".join(_unplaced_text(found) for found in evacuation.unplaced[:UNPLACED_SHOWN])
    more = len(evacuation.unplaced) - UNPLACED_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return f"  if lost: {len(evacuation.unplaced)} of its {total} domain(s) find no host: {named}{tail}"


def _unplaced_text(found: UnplacedDomain) -> str:
    refused = ", ".join(f"{name} on {count}" for name, count in found.refused_by.items())
    return f"{found.domain}, refused by {refused or 'no hypervisor'} (such as {found.example})"


def _groups_line(snapshot: HypervisorSnapshot) -> list[str]:
    groups = groups_document(snapshot)
    if not groups:
        return []
    return ["  groups: " + "; ".join(f"{kind} {', '.join(names)}" for kind, names in groups.items())]


def _render_one(snapshot: HypervisorSnapshot) -> str:
    reason = maintenance_reason(snapshot.maintenance)
    maintenance = f"  IN MAINTENANCE, offers nothing: {reason}" if reason is not None else None
    if snapshot.capacity is None:
        down = [f"{snapshot.name}: DOWN: {snapshot.error}", *_groups_line(snapshot)]
        return "\n".join([*down, maintenance] if maintenance else down)
    capacity = snapshot.capacity
    domains = ", ".join(f"{count} {state.value}" for state, count in capacity.domains_by_state.items())
    lines = [f"{snapshot.name}: up, domains: {domains}", *_groups_line(snapshot)]
    if maintenance:
        lines.append(maintenance)
    header = ("resource", "total", "reserved", "ratio", "limit", "used", "free", "actual", "used / limit")
    rows = [header] + [_resource_row(capacity.resources[r]) for r in display_order(capacity.resources)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [
            cell.ljust(w) if i in (0, len(row) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines.extend(_cell_lines(capacity))
    if capacity.schedulable:
        fits = ", ".join(_fit(capacity, name, count) for name, count in capacity.schedulable.items())
        lines.append(f"  schedulable: {fits}")
    for flavor, reasons in capacity.refusals.items():
        if capacity.limited_within.get(flavor) or flavor in capacity.refused_within:
            lines.append(f"  {flavor} fits nowhere here: {'; '.join(reasons)}")
    if snapshot.facts is not None:
        lines.extend(f"  ! {problem}" for problem in snapshot.facts.problems)
    lines.extend(f"  ! {problem}" for problem in capacity.problems)
    return "\n".join(lines)


def _fit(capacity: HostCapacity, flavor: str, count: int) -> str:
    """`p1.8xlarge 0 (numa)`: the count, and the cells or devices where they hold it down."""
    limited = capacity.limited_within.get(flavor)
    return f"{flavor} {count} ({limited})" if limited else f"{flavor} {count}"


def _cell_lines(capacity: HostCapacity) -> list[str]:
    """Per NUMA cell one line: dedicated CPUs pinned, shared CPUs and memory used against their
    limits, and the hugepages free per size."""
    within = capacity.within
    lines = []
    for cell in within.cells:
        parts = []
        for amount in cell_amounts(cell, within.cpu_allocation_ratio, within.ram_allocation_ratio):
            if amount.size == 0:
                continue
            if amount.resource.unit == "bytes":
                parts.append(
                    f"{amount.resource.label} {format_bytes(amount.used)}/{format_bytes(amount.limit)}"
                )
            else:
                parts.append(f"{amount.resource.label} {amount.used}/{amount.limit:g}")
        base = min((pages.size_kib for pages in cell.pages), default=0)
        for pages in cell.pages:
            offered = pages.total - pages.reserved
            if pages.size_kib != base and pages.total:
                parts.append(f"{format_bytes(pages.size_kib * 1024)} pages {pages.free}/{offered} free")
        lines.append(f"  cell {cell.id}: {', '.join(parts)}")
    for alias, found in within.alias_devices().items():
        lines.append(f"  pci alias {alias}: {found.free}/{found.devices} free")
    for gpu in capacity.vgpus.gpus:
        lines.append(f"  gpu {gpu.address} ({gpu.mdev_type}): {gpu.free}/{gpu.total} vGPUs free")
    return lines


def _resource_row(capacity: ResourceCapacity) -> tuple[str, ...]:
    show = _formatter(capacity)
    return (
        capacity.resource.label,
        show(capacity.total),
        show(capacity.reserved),
        f"{capacity.allocation_ratio:g}",
        show(capacity.limit),
        show(capacity.used),
        show(capacity.free),
        show(capacity.actual),
        usage_bar(capacity.utilization),
    )


def _formatter(capacity: ResourceCapacity) -> Callable[[float | None], str]:
    """Unknown amounts show as `-`: a 0 would read as "none left"."""

    def show(value: float | None) -> str:
        if value is None:
            return "-"
        if capacity.unit == "bytes":
            return format_bytes(value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    return show


def usage_bar(utilization: float | None) -> str:
    """`[########------------]  42%`; a `!` at the end marks usage beyond the limit."""
    if utilization is None:
        return "-"
    filled = min(round(utilization * BAR_WIDTH), BAR_WIDTH)
    overflow = "!" if utilization > 1 else " "
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}]{overflow}{utilization * 100:4.0f}%"
