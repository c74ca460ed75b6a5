"""Dry-run placement: where a batch of instances would land if Nova's scheduler placed them now.

Shared by `POST /api/v1/placements` (the live snapshots and pending claims) and `virtcap place`
(one audit of the fleet, or the API): the same body, the same engine (model/scheduler.py), the
same answer. Nothing is held. Blocking: callers on the event loop run it in a thread. The host
states and the engine's call are claims/scheduling.py's, which claims on `"hypervisor": "any"` use
too: a claim lands where the dry run of the same request says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from virtcap.config import Config
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.scheduling import FleetEntry, host_states, schedule_fleet
from virtcap.model.pci import PCI_ALIAS_SPEC, PciRequestError, parse_alias_request
from virtcap.model.placement import Demand
from virtcap.model.scheduler import WEIGHERS, Rejection, ScheduleResult
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once
from virtcap.web.models import (
    PlacementAnswer,
    PlacementBody,
    PlacementFlavor,
    PlacementRejection,
    PlacementStep,
    placement_body_error,
)

__all__ = [
    "FleetEntry",
    "PlacementError",
    "dry_run",
    "host_states",
    "parse_body",
    "place_locally",
    "render_answer",
    "requested_demand",
]

NO_VALID_HOST = "No valid host was found. There are not enough hosts available."
"""Nova's NoValidHost message when the filters leave fewer hosts than instances."""


class PlacementError(ValueError):
    """The body names something the configuration does not have: one line, a 400."""


def requested_demand(body: PlacementBody, config: Config) -> Demand:
    """What one instance asks for: a configured flavor's demand or the body's own flavor's."""
    if isinstance(body.flavor, PlacementFlavor):
        _check_aliases(body.flavor, config)
        return body.flavor.demand()
    flavor = next((flavor for flavor in config.flavors if flavor.name == body.flavor), None)
    if flavor is None:
        known = ", ".join(flavor.name for flavor in config.flavors) or "none (no flavor is configured)"
        raise PlacementError(f"flavor: unknown flavor {body.flavor!r}; expected one of: {known}")
    return flavor.demand


def _check_aliases(flavor: PlacementFlavor, config: Config) -> None:
    spec = flavor.extra_specs.get(PCI_ALIAS_SPEC)
    if spec is None:
        return
    where = f"flavor.extra_specs.{PCI_ALIAS_SPEC}"
    try:
        requests = parse_alias_request(spec)
    except PciRequestError as error:
        raise PlacementError(f"{where}: {error}") from None
    unknown = sorted({name for name, _count in requests if name not in config.pci_aliases})
    if unknown:
        known = ", ".join(sorted(config.pci_aliases)) or "none (pci.alias is empty)"
        raise PlacementError(
            f"{where}: unknown alias {', '.join(map(repr, unknown))}; expected one of: {known}"
        )


def dry_run(
    config: Config, body: PlacementBody, fleet: Sequence[FleetEntry], claims: Iterable[Claim] = ()
) -> PlacementAnswer:
    """Where the body's instances land on the fleet, with the configuration's multipliers.
    Raises PlacementError for an unknown flavor or alias."""
    demand = replace(requested_demand(body, config), availability_zone=body.availability_zone)
    scheduled = schedule_fleet(
        fleet,
        claims,
        demand,
        body.count,
        ignore_hosts=body.ignore_hosts,
        force_hosts=body.force_hosts,
        anti_affinity=body.anti_affinity,
        multipliers=config.multipliers,
    )
    return _answer(scheduled.result, scheduled.left_out)


def _answer(result: ScheduleResult, unaudited: dict[str, Rejection]) -> PlacementAnswer:
    rejections = {**result.rejections, **unaudited}
    no_valid_host = result.no_valid_host
    if no_valid_host is None and not result.placed:
        no_valid_host = NO_VALID_HOST
    return PlacementAnswer(
        requested=result.requested,
        fitted=result.fitted,
        placed=list(result.hosts),
        unplaced=result.unplaced,
        no_valid_host=no_valid_host,
        rejections={
            name: PlacementRejection(filter=rejection.filter, reasons=list(rejection.reasons))
            for name, rejection in sorted(rejections.items())
        },
        steps=[
            PlacementStep(
                hypervisor=step.host,
                weight=step.weighed.weight,
                weights={weigher: step.weighed.parts.get(weigher, 0.0) for weigher in WEIGHERS},
                candidates=step.candidates,
            )
            for step in result.steps
        ],
    )


def render_answer(answer: PlacementAnswer) -> str:
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


def parse_body(document: dict[str, Any]) -> PlacementBody:
    """PlacementBody, its errors in one line as the API gives them."""
    try:
        return PlacementBody.model_validate(document)
    except ValidationError as error:
        raise PlacementError(placement_body_error(error)) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise PlacementError(f"the body is not a valid placement: {error}") from None


def place_locally(config: Config, body: PlacementBody) -> PlacementAnswer:
    """One audit of the fleet (no pending claims: there is no ledger), then the engine. Runs its
    own event loop: for `virtcap place`, not for a caller on one."""
    snapshots = asyncio.run(audit_fleet_once(config))
    # a flavor by name: a configured one, or one discovered in the fleet's Nova metadata
    audited = [(snapshot.name, snapshot.facts) for snapshot in snapshots if snapshot.facts is not None]
    config = with_discovered_flavors(config, audited)
    return dry_run(config, body, [FleetEntry.of(snapshot) for snapshot in snapshots])
