"""`virtcap audit`: one audit of the fleet, its capacity printed as tables or JSON; with
`--placement`, Placement read once and reconciled with that audit (a section per hypervisor, or
the API's `placement` document in the JSON)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from virtcap.commands.arguments import add_fleet_source, fleet_config
from virtcap.config import Config, ConfigError
from virtcap.contract.placement import PlacementDriftDocument
from virtcap.exposition.placement_table import render_placement
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.tolerance import one_shot_tolerance
from virtcap.model.discovery import discover, host_flavors
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once, reconcile_placement_once

EXIT_PLACEMENT_UNREAD = 1
"""Placement could not be read: the audit is printed all the same, the reconciliation is not."""


def add_parser(commands: Any) -> None:
    audit = commands.add_parser("audit", help="audit the fleet once and print its capacity")
    add_fleet_source(audit)
    audit.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )
    audit.add_argument(
        "--placement",
        action="store_true",
        help="also read OpenStack Placement once (the configuration's placement: section) and show "
        f"where it disagrees with the audit; exit {EXIT_PLACEMENT_UNREAD} if it cannot be read",
    )


def _check_placement(config: Config) -> None:
    if config.placement is None:
        raise ConfigError(
            f"{config.source}: placement: missing: --placement reads OpenStack Placement as this "
            "section says (at least placement.endpoint, or placement.auth to find it in Keystone's catalog)"
        )
    # the task logs a failed reading for the exporter's log; here the command says it, once
    logging.getLogger("virtcap.service.placement").setLevel(logging.ERROR)


async def _audited(
    config: Config, *, placement: bool
) -> tuple[list[HypervisorSnapshot], PlacementReport | None]:
    """The fleet audited, then (`placement`) Placement read and reconciled with that audit."""
    snapshots = await audit_fleet_once(config)
    return snapshots, await reconcile_placement_once(config, snapshots) if placement else None


def run(args: argparse.Namespace) -> int:
    config = fleet_config(args)
    if args.placement:
        _check_placement(config)
    snapshots, read = asyncio.run(_audited(config, placement=args.placement))
    placement = PlacementDriftDocument.of(read) if read is not None else None
    settings = config.failure_tolerance
    # the packing answers are for the flavors headroom is reported for: configured and discovered
    flavors = with_discovered_flavors(
        config, ((s.name, s.facts) for s in snapshots if s.facts is not None)
    ).flavor_demands
    tolerance = (
        one_shot_tolerance(
            snapshots,
            config.multipliers,
            settings.max_host_failures,
            flavors=flavors,
            reserve_host_failures=settings.reserve_host_failures,
        )
        if settings.enabled
        else None
    )
    discovery = (
        discover((s.name, host_flavors(s.facts)) for s in snapshots if s.facts is not None)
        if config.discover_flavors
        else None
    )
    if args.format == "json":
        configured = [flavor.name for flavor in config.flavors]
        document = fleet_document(snapshots, tolerance, discovery, configured)
        if placement is not None:
            document["placement"] = placement.model_dump(mode="json")
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_tables(snapshots, tolerance, discovery))
        if placement is not None and placement.up:
            sys.stdout.write("\n" + render_placement(placement))
    if placement is not None and not placement.up:
        print(f"virtcap: placement: not read: {placement.error}", file=sys.stderr)
        return EXIT_PLACEMENT_UNREAD
    return 0
