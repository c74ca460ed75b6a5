"""Snapshots as the JSON document of `virtcap audit --format json` and as readable tables."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from virtcap.model.capacity import ResourceCapacity
from virtcap.model.facts import DomainState
from virtcap.model.resources import display_order
from virtcap.service.snapshot import HypervisorSnapshot
from virtcap.units import format_bytes

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


def hypervisor_document(snapshot: HypervisorSnapshot) -> dict[str, Any]:
    capacity, facts = snapshot.capacity, snapshot.facts
    document: dict[str, Any] = {"name": snapshot.name, "up": snapshot.up, "error": snapshot.error}
    if capacity is None or facts is None:
        document.update(domains=None, resources={}, schedulable={}, problems=[])
        return document
    document.update(
        hostname=facts.hostname,
        domains={state.value: capacity.domains_by_state[state] for state in DomainState},
        resources={
            r.label: resource_document(capacity.resources[r]) for r in display_order(capacity.resources)
        },
        schedulable=dict(capacity.schedulable),
        bottlenecks={flavor: r.label if r else None for flavor, r in capacity.bottlenecks.items()},
        memory_actual_source=facts.memory_in_use_source,
        hugepage_memory_bytes=capacity.hugepage_memory_bytes,
        problems=[*facts.problems, *capacity.problems],
    )
    return document


def fleet_document(snapshots: Iterable[HypervisorSnapshot]) -> dict[str, Any]:
    return {"hypervisors": [hypervisor_document(snapshot) for snapshot in snapshots]}


def render_tables(snapshots: Iterable[HypervisorSnapshot]) -> str:
    return "\n\n".join(_render_one(snapshot) for snapshot in snapshots) + "\n"


def _render_one(snapshot: HypervisorSnapshot) -> str:
    if snapshot.capacity is None:
        return f"{snapshot.name}: DOWN: {snapshot.error}"
    capacity = snapshot.capacity
    domains = ", ".join(f"{count} {state.value}" for state, count in capacity.domains_by_state.items())
    lines = [f"{snapshot.name}: up, domains: {domains}"]
    header = ("resource", "total", "reserved", "ratio", "limit", "used", "free", "actual", "used / limit")
    rows = [header] + [_resource_row(capacity.resources[r]) for r in display_order(capacity.resources)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        cells = [
            cell.ljust(w) if i in (0, len(row) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    if capacity.schedulable:
        fits = ", ".join(f"{name} {count}" for name, count in capacity.schedulable.items())
        lines.append(f"  schedulable: {fits}")
    if snapshot.facts is not None:
        lines.extend(f"  ! {problem}" for problem in snapshot.facts.problems)
    lines.extend(f"  ! {problem}" for problem in capacity.problems)
    return "\n".join(lines)


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
