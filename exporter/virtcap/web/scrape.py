"""What Prometheus scrapes: /metrics from the rendered cache, /probe for one hypervisor."""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from virtcap.exposition.families import render, views
from virtcap.web.exporter import exporter_of


async def metrics(request: web.Request) -> web.Response:
    cache = exporter_of(request).cache
    await cache.rendered.wait()
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=await cache.gzipped(), headers=headers)
    return web.Response(body=cache.body, headers=headers)


async def probe(request: web.Request) -> web.Response:
    """The multi-target pattern: only the named hypervisor's series. Nothing is audited here."""
    exporter = exporter_of(request)
    target = request.query.get("target", "")
    if not target:
        raise web.HTTPBadRequest(text="missing the target parameter: /probe?target=HYPERVISOR\n")
    if target not in exporter.store.hypervisors:
        raise web.HTTPBadRequest(text=f"unknown target {target!r}: {exporter.config.not_here(target)}\n")
    pending = exporter.claims.pending()
    maintenance = exporter.claims.maintenance_now()
    everyone = views(exporter.store, time.time(), exporter.cache.stale_after, pending, maintenance)
    # the fleet's largest projects, as /metrics shows them: a target's `other` is the same projects'
    body = render(
        [view for view in everyone if view.name == target],
        exposition=exporter.cache.exposition,
        projects=exporter.cache.projects,
    )
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
