"""Plans as tables for a person: `virtcap plan consolidate --format table`, the reclaimable
domains of `virtcap plan reclaim --format table`, and the before/after of `virtcap plan scenario
--format table`."""

from __future__ import annotations

from collections.abc import Sequence

from virtcap.contract.plans import ConsolidationAnswer
from virtcap.contract.reclaim import ReclaimableList
from virtcap.contract.scenarios import FleetAnswersModel, Refused, ScenarioAnswer
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


def render_scenario(answer: ScenarioAnswer) -> str:
    """The fleet's answers before and after, side by side, then what found no host."""
    before, after = answer.before, answer.after
    lines = ["What-if scenario (a dry run: nothing is held, moved or changed)"]
    if answer.solved_add_hypervisors is not None:
        tried = ", ".join(f"{count} {'fits' if fits else 'does not'}" for count, fits in answer.tries.items())
        lines.append(
            f"  hypervisors to add: {answer.solved_add_hypervisors} (the fewest found that fit all the "
            f"demand with a reserve of {answer.reserve_host_failures}; counts tried: "
            f"{tried})"
        )
    changed = [
        f"{len(names)} {what}"
        for what, names in (("added", answer.added), ("removed", answer.removed), ("drained", answer.drained))
        if names
    ]
    if changed:
        lines.append(f"  hypervisors {', '.join(changed)}")
    rows = [
        ("hypervisors", str(before.hypervisors), str(after.hypervisors)),
        ("eligible (up, fresh, not in maintenance)", str(before.eligible), str(after.eligible)),
        (
            f"failures tolerated (of {after.failure_bound})",
            str(before.failures_tolerated),
            str(after.failures_tolerated),
        ),
        ("compaction (hypervisors needed)", _compaction(before), _compaction(after)),
    ]
    rows.extend(
        (f"stranded {label}", _amount(label, amount), _amount(label, after.stranded.get(label, 0)))
        for label, amount in before.stranded.items()
        if amount or after.stranded.get(label, 0)
    )
    lines.append("Fleet:")
    lines.extend(_table(("", "before", "after"), rows))
    lines.append(f"Per flavor (sellable: keeping a reserve of {answer.reserve_host_failures} hypervisor(s)):")
    flavors = [
        (
            name,
            str(count),
            str(after.schedulable.get(name, 0)),
            str(before.sellable.get(name, 0)),
            str(after.sellable.get(name, 0)),
        )
        for name, count in before.schedulable.items()
    ]
    lines.extend(_table(("flavor", "schedulable before", "after", "sellable before", "after"), flavors))
    zones = sorted(set(before.sellable_by_zone) | set(after.sellable_by_zone))
    if zones:
        lines.append("Sellable per availability zone:")
        zone_rows = [
            (zone, name, str(before.sellable_by_zone.get(zone, {}).get(name, 0)), str(count))
            for zone in zones
            for name, count in after.sellable_by_zone.get(zone, {}).items()
        ]
        lines.extend(_table(("zone", "flavor", "before", "after"), zone_rows))
    homeless = [move for move in answer.displaced if move.destination is None]
    if answer.displaced:
        lines.append(
            f"Domains re-homed off removed and drained hypervisors: {len(answer.displaced) - len(homeless)} "
            f"of {len(answer.displaced)}"
        )
        lines.extend(
            _table(
                ("domain", "from", "why no host"), [(m.domain, m.source, _why(m.reasons)) for m in homeless]
            )
            if homeless
            else []
        )
    if answer.placed:
        lines.append("Demand placed, in order:")
        asked = {u.flavor: u.count for u in answer.unplaced}
        rows = [
            (p.flavor, f"{p.count} of {p.count + asked.get(p.flavor, 0)}", str(len(p.hypervisors)))
            for p in answer.placed
        ]
        lines.extend(_table(("flavor", "placed", "on hypervisors"), rows))
    if answer.unplaced:
        lines.append("Demand that found no host (Nova's NoValidHost):")
        lines.extend(
            _table(
                ("flavor", "instances", "why"),
                [(u.flavor, str(u.count), _why(u.reasons)) for u in answer.unplaced],
            )
        )
    else:
        lines.append("All the demand found a host.")
    return "\n".join(lines) + "\n"


def _compaction(answers: FleetAnswersModel) -> str:
    found = answers.compaction
    if found is None:
        return "-"
    return (
        f"{found.hypervisors} (at least {found.lower_bound})" if not found.optimal else str(found.hypervisors)
    )


def _why(reasons: Refused | None) -> str:
    if reasons is None:
        return ""
    counts = ", ".join(f"{name} {count}" for name, count in reasons.refused_by.items())
    return f"{counts}; {reasons.example}" if counts else reasons.example


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
