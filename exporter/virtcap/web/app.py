"""The aiohttp application of a running exporter: its middlewares, hooks and routes."""

from __future__ import annotations

from aiohttp import web

from virtcap.web.api import CLAIMS, STORE, add_routes
from virtcap.web.exporter import EXPORTER, Exporter
from virtcap.web.middleware import MAX_REQUEST_BYTES, writers_middleware, writes
from virtcap.web.pages import healthy, landing_page, ready
from virtcap.web.scrape import metrics, probe


def build_app(exporter: Exporter) -> web.Application:
    middlewares = [exporter.web.middleware(readers_skip=writes), writers_middleware(exporter)]
    if exporter.connections is not None:  # outermost: a request is busy from its head on
        middlewares.insert(0, exporter.connections.middleware())
    app = web.Application(middlewares=middlewares, client_max_size=MAX_REQUEST_BYTES)
    app.on_response_prepare.append(exporter.web.add_headers)
    app[EXPORTER] = exporter
    app[CLAIMS] = exporter.claims
    app[STORE] = exporter.store
    add_routes(app)
    app.router.add_get("/", landing_page)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/probe", probe)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    return app
