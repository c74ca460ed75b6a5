"""`virtcap audit`: one audit of the fleet, its capacity printed as tables or JSON."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from virtcap.commands.arguments import add_fleet_source, fleet_config
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.tolerance import one_shot_tolerance
from virtcap.model.discovery import discover, host_flavors
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once


def add_parser(commands: Any) -> None:
    audit = commands.add_parser("audit", help="audit the fleet once and print its capacity")
    add_fleet_source(audit)
    audit.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )


def run(args: argparse.Namespace) -> int:
    config = fleet_config(args)
    snapshots = asyncio.run(audit_fleet_once(config))
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
        json.dump(fleet_document(snapshots, tolerance, discovery, configured), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_tables(snapshots, tolerance, discovery))
    return 0
