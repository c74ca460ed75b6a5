"""Plans as tables for a person: `virtcap plan consolidate --format table`, and the reclaimable
domains of `virtcap plan reclaim --format table`."""

from __future__ import annotations

from collections.abc import Sequence

from virtcap.contract.plans import ConsolidationAnswer
from virtcap.contract.reclaim import ReclaimableList
from virtcap.model.resources import resource_by_label
from virtcap.units import format_bytes


def render_consolidation_plan(answer: ConsolidationAnswer) -> str:
    """Hypervisors before and after, those emptied with their moves, and the domains that kept
    others from being emptied, with the scheduler's reason."""
    emptied = len(answer.emptied)
    lines = [
        "Consolidation plan (a dry run: nothing is moved)",
        f"  hypervisors holding domains: {answer.hypervisors_before} before, "
        f"{answer.hypervisors_after} after ({emptied} emptied, {len(answer.moves)} live migration(s))",
    ]
    if not answer.complete:
        lines.append("  the search stopped at its time limit: a valid plan, maybe not the best")
    if answer.emptied:
        lines.append("Emptied, in order:")
        counts = {name: 0 for name in answer.emptied}
        for move in answer.moves:
            counts[move.source] = counts.get(move.source, 0) + 1
        width = max(len(name) for name in counts)
        lines.extend(f"  {name:<{width}}  {count} move(s)" for name, count in counts.items())
    if answer.moves:
        lines.append("Moves, in order (each feasible with the ones before it done):")
        rows = [
            (str(step), move.name, move.source, move.destination, _resources(move.resources))
            for step, move in enumerate(answer.moves, start=1)
        ]
        lines.extend(_table(("#", "domain", "from", "to", "allocated"), rows))
    if answer.unmovable:
        lines.append("Unmovable (their hypervisors are kept):")
        refused = [(domain.name, domain.source, domain.reason) for domain in answer.unmovable]
        lines.extend(_table(("domain", "from", "reason"), refused))
    return "\n".join(lines) + "\n"


def render_reclaimable(listing: ReclaimableList) -> str:
    """The reclaimable domains, one a line, then what they hold together per reason."""
    if not listing.domains:
        return "No reclaimable domain: none shut off or idle for longer than the reclaim windows.\n"
    lines = [
        f"Reclaimable domains ({len(listing.domains)}): shut off or idle for longer than the reclaim windows"
    ]
    rows = [
        (d.hypervisor, d.name, d.uuid, d.project_name, d.reason, d.since, _resources(d.allocation))
        for d in listing.domains
    ]
    lines.extend(_table(("hypervisor", "domain", "uuid", "project", "reason", "since", "allocated"), rows))
    lines.append("Together:")
    lines.extend(_table(("reason", "allocated"), [(r, _resources(t)) for r, t in listing.totals.items()]))
    return "\n".join(lines) + "\n"


def _resources(amounts: dict[str, int]) -> str:
    """`vcpu 2, memory 4.0 GiB`: bytes in IEC units, the rest as counts."""
    return ", ".join(f"{label} {_amount(label, amount)}" for label, amount in amounts.items())


def _amount(label: str, amount: int) -> str:
    try:
        bytes_ = resource_by_label(label).unit == "bytes"
    except KeyError:  # a custom class: a plain count
        bytes_ = False
    return format_bytes(amount) if bytes_ else str(amount)


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, two spaces apart, indented; the last column as long as it is."""
    widths = [max(len(row[column]) for row in [headers, *rows]) for column in range(len(headers) - 1)]

    def line(row: tuple[str, ...]) -> str:
        cells = [f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)]
        return "  " + "  ".join([*cells, row[-1]]).rstrip()

    return [line(headers), *(line(row) for row in rows)]
