"""`GET /api/v1/reclaimable`: the domains whose allocation could be taken back, from the history
the audits keep (virtcap.service.reclaim); read access, as any GET."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from virtcap.contract.reclaim import ReclaimableList
from virtcap.web.exporter import EXPORTER

RECLAIMABLE_PATH = "/api/v1/reclaimable"


async def reclaimable(request: web.Request) -> web.Response:
    tracker = request.app[EXPORTER].fleet.reclaim
    found = tracker.reclaimable_domains() if tracker is not None else []
    document = ReclaimableList.of(found)
    # a fleet's worth of domains is no small document: encoded in a thread
    body = await asyncio.to_thread(lambda: json.dumps(document.model_dump(mode="json")))
    return web.Response(text=body, content_type="application/json")
