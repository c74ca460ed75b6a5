"""`GET /api/v1/placement/drift[?hypervisor=NAME]`: the last Placement reconciliation
(contract/placement.py), as the store keeps it (service/placement.py reads Placement in the
background: the request never waits for it); read access, as any GET.

404 where this exporter does not read Placement (no `placement:` in the running configuration,
as /metrics shows no Placement family then); 503 while Placement is not read (before the first reading ends,
or the last one failed), with why; an unknown `hypervisor` lists none."""

from __future__ import annotations

import asyncio

from aiohttp import web

from virtcap.contract.placement import PlacementDriftDocument
from virtcap.web.body import json_error
from virtcap.web.exporter import EXPORTER

PLACEMENT_DRIFT_PATH = "/api/v1/placement/drift"
NOT_READ_RETRY_AFTER_SECONDS = 10


async def placement_drift(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER]
    if not exporter.cache.placement:
        raise json_error(web.HTTPNotFound, "placement: not configured: this exporter does not read Placement")
    report = exporter.store.placement
    retry = {"Retry-After": str(NOT_READ_RETRY_AFTER_SECONDS)}
    if report is None:
        raise json_error(
            web.HTTPServiceUnavailable, "placement: not read yet (the first reading runs)", retry
        )
    if report.drifts is None:
        raise json_error(web.HTTPServiceUnavailable, f"placement: not read: {report.error}", retry)
    document = PlacementDriftDocument.of(report, request.query.get("hypervisor"))
    # a fleet's worth of consumers is no small document: encoded in a thread
    body = await asyncio.to_thread(document.model_dump_json)
    return web.Response(text=body, content_type="application/json")
