"""Dry-run placement: where a batch of instances would land if Nova's scheduler placed them now.

Shared by `POST /api/v1/placements` (the live snapshots and pending claims) and `virtcap place`
(one audit of the fleet, or the API): the same body (virtcap.contract.placements), the same
engine (model/scheduler.py), the same answer. Nothing is held. Blocking: callers on the event loop
run it in a thread. The host states and the engine's call are fleet/scheduling.py's, which claims
on `"hypervisor": "any"` use too: a claim lands where the dry run of the same request says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace

from virtcap.config import Config
from virtcap.contract.placements import (
    PlacementAnswer,
    PlacementBody,
    PlacementError,
    PlacementFlavor,
    PlacementRejection,
    PlacementStep,
)
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.scheduling import FleetEntry, schedule_fleet
from virtcap.model.host_fit import Demand
from virtcap.model.pci import PCI_ALIAS_SPEC, alias_request_problem
from virtcap.model.scheduler import WEIGHERS, Rejection, ScheduleResult
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once

NO_VALID_HOST = "No valid host was found. There are not enough hosts available."
"""Nova's NoValidHost message when the filters leave fewer hosts than instances."""


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
    problem = None if spec is None else alias_request_problem(spec, config.pci_aliases)
    if problem is not None:
        raise PlacementError(f"flavor.extra_specs.{PCI_ALIAS_SPEC}: {problem}")


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


def place_locally(config: Config, body: PlacementBody) -> PlacementAnswer:
    """One audit of the fleet (no pending claims: there is no ledger), then the engine. Runs its
    own event loop: for `virtcap place`, not for a caller on one."""
    snapshots = asyncio.run(audit_fleet_once(config))
    # a flavor by name: a configured one, or one discovered in the fleet's Nova metadata
    audited = [(snapshot.name, snapshot.facts) for snapshot in snapshots if snapshot.facts is not None]
    config = with_discovered_flavors(config, audited)
    return dry_run(config, body, [FleetEntry.of(snapshot) for snapshot in snapshots])
