"""Plans under /api/v1/plans: what could be done to the fleet, as dry runs (nothing is held or
moved). `POST /api/v1/plans/consolidation`: the consolidation plan, computed by the exporter's
planner in its worker process (service/consolidation.py), one at a time. Routed with the rest
of /api/v1 (api.py)."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from virtcap.contract.plans import PlanError, parse_consolidation_body
from virtcap.fleet.scheduling import fleet_entries
from virtcap.service.consolidation import (
    PlannerBusyError,
    PlannerFailedError,
    check_plan_options,
    compaction_target,
)
from virtcap.web.body import json_error, parse_json, read_body
from virtcap.web.exporter import EXPORTER

CONSOLIDATION_PATH = "/api/v1/plans/consolidation"
FAILED_RETRY_AFTER_SECONDS = 10


async def consolidation(request: web.Request) -> web.Response:
    """The consolidation plan on the live snapshots, pending claims counted as usage."""
    document = parse_json(await read_body(request))
    if not isinstance(document, dict):
        raise json_error(web.HTTPBadRequest, "the body must be a JSON object")
    exporter = request.app[EXPORTER]
    config = exporter.config
    try:
        body = await asyncio.to_thread(parse_consolidation_body, document)
        check_plan_options(body, config)
    except PlanError as error:
        raise json_error(web.HTTPBadRequest, str(error)) from None
    # taken on the event loop (the store and ledger are the loop's), planned in the worker
    fleet = fleet_entries(exporter.store, time.time(), config.audit.staleness_bound)
    claims = list(exporter.claims.claims.values())
    target = compaction_target(exporter.store.tolerance, fleet, body)
    try:
        text = await exporter.planner.plan(fleet, claims, config.multipliers, body, target)
    except PlanError as error:
        raise json_error(web.HTTPBadRequest, str(error)) from None
    except PlannerBusyError as error:
        raise json_error(
            web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(error.retry_after)}
        ) from None
    except PlannerFailedError as error:
        raise json_error(
            web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(FAILED_RETRY_AFTER_SECONDS)}
        ) from None
    return web.Response(text=text, content_type="application/json")
