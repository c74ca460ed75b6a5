"""Plans under /api/v1/plans: what could be done to the fleet, as dry runs (nothing is held or
moved). `POST /api/v1/plans/consolidation`: the consolidation plan; `POST
/api/v1/plans/scenarios[?solve_for=add_hypervisors]`: a what-if scenario (the document as the
body). Both computed by the exporter's planner in its worker process (service/planner.py), one at
a time. Routed with the rest of /api/v1 (api.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from aiohttp import web

from virtcap.contract.plans import PlanError, parse_consolidation_body
from virtcap.contract.scenarios import ScenarioError, parse_scenario
from virtcap.fleet.scheduling import fleet_entries
from virtcap.service.consolidation import check_plan_options, compaction_target
from virtcap.service.planner import PlannerBusyError, PlannerFailedError
from virtcap.service.scenarios import SOLVE_FOR, plan_scenario
from virtcap.web.body import json_error, parse_json, read_body
from virtcap.web.exporter import EXPORTER

CONSOLIDATION_PATH = "/api/v1/plans/consolidation"
SCENARIOS_PATH = "/api/v1/plans/scenarios"
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
    return await _planned(exporter.planner.plan(fleet, claims, config.multipliers, body, target), PlanError)


async def scenarios(request: web.Request) -> web.Response:
    """A what-if scenario on the live snapshots, pending claims counted as usage; nothing is held
    or changed. `?solve_for=add_hypervisors`: the fewest copies of its one added kind that fit."""
    solve_for = request.query.get("solve_for")
    if solve_for is not None and solve_for not in SOLVE_FOR:
        raise json_error(
            web.HTTPBadRequest, f"solve_for: expected one of: {', '.join(SOLVE_FOR)}, got {solve_for[:60]!r}"
        )
    document = parse_json(await read_body(request))
    exporter = request.app[EXPORTER]
    try:
        body = await asyncio.to_thread(parse_scenario, document, "body")
    except ScenarioError as error:
        raise json_error(web.HTTPBadRequest, _one_line(str(error))) from None
    # taken on the event loop (the store, ledger and catalog are the loop's), computed in the worker
    config = exporter.fleet.catalog.effective(exporter.config)
    fleet = fleet_entries(exporter.store, time.time(), config.audit.staleness_bound)
    claims = list(exporter.claims.claims.values())
    computing = plan_scenario(
        exporter.planner, fleet, claims, config, config.flavor_demands, document=body, solve_for=solve_for
    )
    return await _planned(computing, ScenarioError)


async def _planned(computing: Awaitable[str], refused: type[ValueError]) -> web.Response:
    """The planner's answer: 400 where the request does not fit the fleet (`refused`), 503 with
    Retry-After where the planner is busy or failed."""
    try:
        text = await computing
    except refused as error:
        raise json_error(web.HTTPBadRequest, _one_line(str(error))) from None
    except PlannerBusyError as error:
        raise json_error(
            web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(error.retry_after)}
        ) from None
    except PlannerFailedError as error:
        raise json_error(
            web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(FAILED_RETRY_AFTER_SECONDS)}
        ) from None
    return web.Response(text=text, content_type="application/json")


def _one_line(message: str) -> str:
    """The problems of a request, one per line in a file's error, in one line as the API's are (a
    consolidation plan's are one line already)."""
    return "; ".join(line.removeprefix("body: ") for line in message.splitlines())
