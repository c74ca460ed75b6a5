"""The Placement reconciliation for a person: the section `virtcap audit --placement` prints after
the capacity tables, a block per hypervisor with its provider, where the inventories disagree, and
the consumers by UUID with their amounts (from the document the API answers, contract/placement.py)."""

from __future__ import annotations

from collections.abc import Sequence

from virtcap.contract.placement import (
    RATIO_UNIT,
    FieldDrift,
    HypervisorDriftDocument,
    PlacementDriftDocument,
    ResourceAmount,
)
from virtcap.units import format_bytes


def render_placement(document: PlacementDriftDocument) -> str:
    if not document.up:
        return f"Placement: not read: {document.error}\n"
    lines = [
        f"Placement (read {document.read_at}): {len(document.hypervisors)} hypervisor(s) reconciled "
        "with their resource providers"
    ]
    if document.unmatched:
        lines.append(f"  no resource provider matches: {', '.join(document.unmatched)}")
    for hypervisor in document.hypervisors:
        lines.extend(_hypervisor(hypervisor))
    return "\n".join(lines) + "\n"


def _hypervisor(drift: HypervisorDriftDocument) -> list[str]:
    lines = [f"{drift.hypervisor}: provider {drift.provider}"]
    agrees = not (
        drift.inventory_drift or drift.orphaned or drift.unallocated or drift.mismatched or drift.usage_drift
    )
    if agrees:
        lines.append("  agrees with Placement")
    if drift.inventory_drift:
        lines.append("  inventory drift (Placement's value minus Nova's):")
        rows = [
            (label, field, _drift(value))
            for label, fields in drift.inventory_drift.items()
            for field, value in fields.items()
        ]
        lines.extend(_table(("resource", "field", "drift"), rows))
    if drift.orphaned:
        lines.append(
            _heading("orphaned consumers", drift.orphaned, "allocations with no domain of their UUID here")
        )
        rows = [(c.uuid, c.consumer_type or "-", _amounts(c.amounts)) for c in drift.orphaned]
        lines.extend(_table(("consumer", "type", "allocated"), rows))
    if drift.unallocated:
        lines.append(
            _heading("unallocated domains", drift.unallocated, "Nova instances Placement holds nothing for")
        )
        rows = [(d.uuid, d.name, _amounts(d.expected)) for d in drift.unallocated]
        lines.extend(_table(("domain", "name", "expected"), rows))
    if drift.mismatched:
        lines.append(
            _heading("mismatched allocations", drift.mismatched, "allocated otherwise than their flavor asks")
        )
        resized = [(m.uuid, m.name, _amounts(m.allocated), _amounts(m.expected)) for m in drift.mismatched]
        lines.extend(_table(("domain", "name", "allocated", "expected"), resized))
    if drift.usage_drift:
        usage = _signed(drift.usage_drift)
        lines.append(f"  usage drift (Placement's usage minus virtcap's allocated): {usage}")
    if drift.migrations:
        lines.append(f"  migrations in progress, excused: {', '.join(drift.migrations)}")
    return lines


def _heading(what: str, found: Sequence[object], meaning: str) -> str:
    return f"  {what} ({len(found)}): {meaning}"


def _amounts(amounts: dict[str, ResourceAmount]) -> str:
    """`vcpu 2, memory 4.0 GiB`; `none` for nothing."""
    listed = ", ".join(f"{label} {_quantity(held.amount, held.unit)}" for label, held in amounts.items())
    return listed or "none"


def _drift(value: FieldDrift) -> str:
    if value.unit == RATIO_UNIT:
        return f"{value.drift:+g}"
    return ("+" if value.drift > 0 else "") + _quantity(value.drift, value.unit)


def _quantity(amount: float, unit: str) -> str:
    if unit == "bytes":
        return format_bytes(amount)
    return str(int(amount)) if float(amount).is_integer() else f"{amount:g}"


def _signed(amounts: dict[str, ResourceAmount]) -> str:
    return ", ".join(
        f"{label} {'+' if held.amount > 0 else ''}{_quantity(held.amount, held.unit)}"
        for label, held in amounts.items()
    )


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, two spaces apart, under the hypervisor's heading; the last column as
    long as it is."""
    widths = [max(len(row[column]) for row in [headers, *rows]) for column in range(len(headers) - 1)]

    def line(row: tuple[str, ...]) -> str:
        cells = [f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)]
        return "    " + "  ".join([*cells, row[-1]]).rstrip()

    return [line(headers), *(line(row) for row in rows)]
