"""The packing answers (fleet/packing.py) in `virtcap audit`: the JSON document's `packing` and a
section of the tables."""

from __future__ import annotations

from typing import Any

from virtcap.fleet.packing import CompactionSummary, PackingReport
from virtcap.model.packing.stranded import StrandedCapacity
from virtcap.model.resources import Resource, display_order
from virtcap.units import format_bytes, format_utc


def packing_document(packing: PackingReport | None) -> dict[str, Any] | None:
    """Null while the failure tolerance is off. `stranded`: per eligible hypervisor, each class
    with a stranded amount (in the class's unit) and the classes that strand it."""
    if packing is None:
        return None
    zones: dict[str, dict[str, int]] = {}
    for (zone, flavor), count in packing.sellable_by_zone.items():
        zones.setdefault(zone, {})[flavor] = count
    return {
        "stranded": {name: _stranded_document(found) for name, found in packing.stranded.items()},
        "compaction": {
            **(_compaction_document(packing.compaction) if packing.compaction is not None else {}),
            "groups": [
                {"kind": kind, "group": group, **_compaction_document(summary)}
                for (kind, group), summary in packing.groups.items()
            ],
        },
        "sellable": {
            "reserve_host_failures": packing.reserve_host_failures,
            "flavors": dict(packing.sellable),
            "availability_zones": zones,
        },
        "computed_at": format_utc(packing.computed_at),
        "duration_seconds": packing.duration_seconds,
        "pending": packing.pending,
    }


def _stranded_document(found: StrandedCapacity) -> dict[str, Any]:
    return {
        resource.label: {
            "unit": resource.unit,
            "amount": found.amounts[resource],
            "causes": [cause.label for cause in display_order(found.causes.get(resource, ()))],
        }
        for resource in display_order(found.amounts)
        if found.amounts[resource] > 0
    }


def _compaction_document(summary: CompactionSummary) -> dict[str, Any]:
    return {
        "hypervisors": summary.hypervisors,
        "lower_bound": summary.lower_bound,
        "optimal": summary.optimal,
        "eligible": summary.eligible,
        "freeable": summary.freeable,
    }


def packing_text(packing: PackingReport) -> str:
    """The tables' section: stranded capacity per hypervisor, the compaction, sellable instances."""
    lines = ["stranded capacity (free that no packing of the fleet's flavors could use):"]
    stranded = [
        f"  {name}: {text}" for name, found in packing.stranded.items() if (text := _stranded_text(found))
    ]
    lines.extend(stranded or ["  none"])
    compaction = packing.compaction
    lines.append(
        f"compaction: {_compaction_text(compaction) if compaction is not None else 'not computed yet'}"
    )
    lines.extend(
        f"  {kind} {group}: {_compaction_text(summary)}" for (kind, group), summary in packing.groups.items()
    )
    lines.append(
        f"sellable instances, keeping {packing.reserve_host_failures} hypervisor failure(s) in reserve:"
    )
    zones = sorted({zone for zone, _flavor in packing.sellable_by_zone})
    rows = [("flavor", "fleet", *zones)] + [
        (
            flavor,
            str(count),
            *(str(packing.sellable_by_zone.get((zone, flavor), "-")) for zone in zones),
        )
        for flavor, count in packing.sellable.items()
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines.extend(
        "  " + "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
    return "\n".join(lines)


def _stranded_text(found: StrandedCapacity) -> str:
    parts = []
    for resource in display_order(found.amounts):
        amount = found.amounts[resource]
        if amount <= 0:
            continue
        causes = ", ".join(cause.label for cause in display_order(found.causes.get(resource, ())))
        parts.append(f"{resource.label} {_amount(resource, amount)}" + (f" (by {causes})" if causes else ""))
    return "; ".join(parts)


def _amount(resource: Resource, amount: int) -> str:
    return format_bytes(amount) if resource.unit == "bytes" else str(amount)


def _compaction_text(summary: CompactionSummary) -> str:
    proof = "optimal" if summary.optimal else f"lower bound {summary.lower_bound}"
    return (
        f"{summary.hypervisors} of {summary.eligible} eligible hypervisor(s) could hold every domain "
        f"({proof}); {summary.freeable} freeable"
    )
