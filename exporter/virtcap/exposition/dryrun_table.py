"""A dry-run placement's answer as a table for a person: `virtcap place --format table`."""

from __future__ import annotations

from collections.abc import Iterable

from virtcap.contract.placements import PlacementAnswer


def render_dry_run(answer: PlacementAnswer) -> str:
    """The answer for a person: where each instance lands, how many do not fit, and every
    rejected hypervisor with its filter and reasons."""
    lines = []
    if answer.placed:
        lines.append(f"All {answer.requested} instance(s) fit:")
        counts: dict[str, list[int]] = {}
        for index, name in enumerate(answer.placed, start=1):
            counts.setdefault(name, []).append(index)
        width = max(len(name) for name in counts)
        for name, indexes in sorted(counts.items()):
            lines.append(f"  {name:<{width}}  {len(indexes):>4}  (instances {_ranges(indexes)})")
    else:
        lines.append(
            f"NoValidHost: {answer.fitted} of {answer.requested} instance(s) would fit, "
            f"{answer.unplaced} would not; nothing is placed (all or nothing)."
        )
        if answer.no_valid_host:
            lines.append(f"  Nova: {answer.no_valid_host}")
        if answer.steps:
            tentative = ", ".join(
                f"{name} x{count}" for name, count in _tally(s.hypervisor for s in answer.steps)
            )
            lines.append(f"  the {answer.fitted} that fit would go to: {tentative}")
    if answer.rejections:
        which = "the last instance" if answer.placed else "the first instance that found no host"
        lines.append(f"Hypervisors that refused {which}:")
        width = max(len(name) for name in answer.rejections)
        filter_width = max(len(rejection.filter) for rejection in answer.rejections.values())
        for name, rejection in answer.rejections.items():
            first, *rest = rejection.reasons or [""]
            lines.append(f"  {name:<{width}}  {rejection.filter:<{filter_width}}  {first}")
            lines.extend(f"  {'':<{width}}  {'':<{filter_width}}  {reason}" for reason in rest)
    return "\n".join(lines) + "\n"


def _tally(names: Iterable[str]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items())


def _ranges(indexes: list[int]) -> str:
    parts: list[str] = []
    start = previous = indexes[0]
    for index in [*indexes[1:], None]:
        if index is not None and index == previous + 1:
            previous = index
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if index is not None:
            start = previous = index
    return ", ".join(parts)
