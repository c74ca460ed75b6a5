"""`virtcap plan reclaim`: the domains whose allocation could be taken back (shut off, or idle, for
longer than the configuration's `reclaim` windows), from a running exporter (--url, `GET
/api/v1/reclaimable`: the history its audits keep) or from one audit of a fleet (--config, --demo)
judged with the history stored in the configuration's claims database, which it reads and never
changes. Without a stored history a one-shot audit knows no domain's past: nothing is reclaimable.

Exit 0 with an answer (an empty list too), 1 when the exporter cannot be reached or answers
something else than the list.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from virtcap.claims.backends import claim_storage
from virtcap.commands.client import (
    EXIT_REFUSED,
    Exporter,
    ExporterRefusedError,
    ExporterUnreachableError,
    add_answer_source,
)
from virtcap.config import Config, load_config
from virtcap.contract.reclaim import ReclaimableList
from virtcap.demo import demo_config
from virtcap.exposition.plan_table import render_reclaimable
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.reclaim import ReclaimTracker, policy_of

RECLAIMABLE_PATH = "/api/v1/reclaimable"


def add_parser(plans: Any) -> None:
    reclaim = plans.add_parser(
        "reclaim",
        help="the domains shut off or idle for longer than the reclaim windows, and what they hold",
        description="The domains whose allocation could be taken back: shut off for longer than "
        "reclaim.shutoff_after, or running below reclaim.idle_cpu_below of their vCPUs for "
        "reclaim.idle_for. Exit 0 with an answer, 1 when the exporter (--url) cannot be reached or "
        "refuses.",
    )
    add_answer_source(reclaim, RECLAIMABLE_PATH, method="GET")


def run(args: argparse.Namespace) -> int:
    if args.url is not None:
        listing = _ask(Exporter(args.url, args.user, args.ca_file))
        if listing is None:
            return EXIT_REFUSED
    else:
        config = demo_config() if args.demo else load_config(args.config)
        listing = asyncio.run(_locally(config, with_history=not args.demo))
    if args.format == "json":
        sys.stdout.write(listing.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render_reclaimable(listing))
    return 0


async def _locally(config: Config, *, with_history: bool) -> ReclaimableList:
    tracker = ReclaimTracker(policy_of(config.reclaim))
    # an absent SQLite file is no history, and is not created by a dry run
    if with_history and (config.claims.shared or Path(config.claims.database).exists()):
        storage = claim_storage(config.claims, config.source)
        try:
            await storage.start()
            tracker.storage = storage
            await tracker.start()
        finally:
            tracker.storage = None  # read, never written: the exporter's audits keep it
            await storage.close()
    for snapshot in await audit_fleet_once(config):
        if snapshot.facts is not None and snapshot.hypervisor is not None:
            tracker.record(snapshot.name, snapshot.facts, snapshot.hypervisor.policy)
    return ReclaimableList.of(tracker.reclaimable_domains())


def _ask(exporter: Exporter) -> ReclaimableList | None:
    url = exporter.endpoint(RECLAIMABLE_PATH)
    try:
        return ReclaimableList.model_validate_json(exporter.send("GET", url, None, timeout=30))
    except ExporterRefusedError as error:
        print(
            f"virtcap: plan reclaim: {url}: HTTP {error.status}: {error.text.strip()[:200]}", file=sys.stderr
        )
    except ExporterUnreachableError as error:
        print(f"virtcap: plan reclaim: cannot reach {error.url}: {error.reason}", file=sys.stderr)
    except ValidationError as error:
        print(
            f"virtcap: plan reclaim: {url}: not a list of reclaimable domains: "
            f"{error.error_count()} problem(s)",
            file=sys.stderr,
        )
    return None
