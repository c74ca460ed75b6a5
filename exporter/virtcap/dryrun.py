"""Dry-run placement: where a batch of instances would land if Nova's scheduler placed them now.

Shared by `POST /api/v1/placements` (the live snapshots and pending claims) and `virtcap place`
(one audit of the fleet, or the API): the same body, the same engine (model/scheduler.py), the
same answer. Nothing is held. Blocking: callers on the event loop run it in a thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from virtcap.claims.ledger import Claim, pending_claims
from virtcap.config import Config
from virtcap.model.pci import PCI_ALIAS_SPEC, PciRequestError, parse_alias_request
from virtcap.model.placement import Demand
from virtcap.model.scheduler import (
    COMPUTE,
    FORCE_HOSTS,
    IGNORE_HOSTS,
    WEIGHERS,
    HostState,
    Rejection,
    ScheduleResult,
    host_state,
    schedule,
)
from virtcap.service.snapshot import HypervisorSnapshot
from virtcap.web.models import (
    PlacementAnswer,
    PlacementBody,
    PlacementFlavor,
    PlacementRejection,
    PlacementStep,
)

NO_VALID_HOST = "No valid host was found. There are not enough hosts available."
"""Nova's NoValidHost message when the filters leave fewer hosts than instances."""


class PlacementError(ValueError):
    """The body names something the configuration does not have: one line, a 400."""


@dataclass(frozen=True, slots=True)
class FleetEntry:
    """One hypervisor as the scheduler may see it: its last good audit (None if it never had
    one), whether it is up now and whether that audit is too old."""

    name: str
    good: HypervisorSnapshot | None
    up: bool
    stale: bool = False
    error: str | None = None

    @classmethod
    def of(cls, snapshot: HypervisorSnapshot) -> FleetEntry:
        """A one-shot audit's outcome (`virtcap place --config/--demo`): never stale."""
        good = snapshot if snapshot.up and snapshot.facts is not None else None
        return cls(snapshot.name, good, snapshot.up, False, snapshot.error)


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


def host_states(fleet: Sequence[FleetEntry], claims: Iterable[Claim]) -> list[HostState]:
    """The audited hypervisors' states, each with its pending claims as usage."""
    held = list(claims)
    states = []
    for entry in fleet:
        good = entry.good
        if good is None or good.facts is None or good.hypervisor is None:
            continue
        pending = pending_claims(held, entry.name)
        states.append(
            host_state(
                entry.name,
                good.facts,
                good.hypervisor.policy,
                claimed=pending.amounts,
                pending=pending.claims,
                up=entry.up,
                stale=entry.stale,
            )
        )
    return states


def dry_run(
    config: Config, body: PlacementBody, fleet: Sequence[FleetEntry], claims: Iterable[Claim] = ()
) -> PlacementAnswer:
    """Where the body's instances land on the fleet, with the configuration's multipliers.
    Raises PlacementError for an unknown flavor or alias."""
    demand = requested_demand(body, config)
    states = host_states(fleet, claims)
    audited = {state.name for state in states}
    unaudited = [entry for entry in fleet if entry.name not in audited]
    left_out = _unaudited_rejections(unaudited, body)
    target = body.force_hosts[0].lower() if body.force_hosts else None
    if any(entry.name.lower() == target for entry in unaudited):
        # the forced host exists but was never audited: it is down (not missing), and the
        # others are not asked for
        ignored = {name.lower() for name in body.ignore_hosts}
        for state in states:
            if state.name.lower() in ignored:
                left_out[state.name] = Rejection(IGNORE_HOSTS, (f"{state.name} is in ignore_hosts",))
            else:
                left_out[state.name] = Rejection(FORCE_HOSTS, (_not_forced(body),))
        result = ScheduleResult(body.count, 0, (), {})
    else:
        result = schedule(
            states,
            demand,
            body.count,
            ignore_hosts=body.ignore_hosts,
            force_hosts=body.force_hosts,
            anti_affinity=body.anti_affinity,
            multipliers=config.multipliers,
        )
    return _answer(result, left_out)


def _not_forced(body: PlacementBody) -> str:
    return (
        f"not the forced host {body.force_hosts[0]} (Nova asks Placement for the first of force_hosts only)"
    )


def _unaudited_rejections(unaudited: Sequence[FleetEntry], body: PlacementBody) -> dict[str, Rejection]:
    """The hypervisors never audited successfully: the scheduler cannot see them, Nova's
    ComputeFilter would refuse them (after ignore_hosts and force_hosts, as for the others)."""
    ignored = {name.lower() for name in body.ignore_hosts}
    target = body.force_hosts[0].lower() if body.force_hosts else None
    rejected: dict[str, Rejection] = {}
    for entry in unaudited:
        if entry.name.lower() in ignored:
            rejected[entry.name] = Rejection(IGNORE_HOSTS, (f"{entry.name} is in ignore_hosts",))
        elif target is not None and entry.name.lower() != target:
            rejected[entry.name] = Rejection(FORCE_HOSTS, (_not_forced(body),))
        else:
            why = f"hypervisor {entry.name} is down" + (f": {entry.error}" if entry.error else "")
            rejected[entry.name] = Rejection(COMPUTE, (why,))
    return rejected


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
