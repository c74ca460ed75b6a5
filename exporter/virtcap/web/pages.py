"""The pages for people and orchestrators: the landing page, /-/healthy and /-/ready."""

from __future__ import annotations

import html

from aiohttp import web

from virtcap import __version__
from virtcap.web.exporter import Exporter, exporter_of


async def healthy(request: web.Request) -> web.Response:
    """Healthy unless a background task crashed and waits for its restart."""
    dead = exporter_of(request).supervisor.dead()
    if dead:
        lines = "".join(f"{name}: {error}\n" for name, error in sorted(dead.items()))
        return web.Response(status=503, text=f"Unhealthy: background tasks restarting after a crash\n{lines}")
    return web.Response(text="OK\n")


async def ready(request: web.Request) -> web.Response:
    """Ready once /metrics shows every hypervisor's first audit (or its failure)."""
    exporter = exporter_of(request)
    since = exporter.store.ready_since
    if since is not None and exporter.cache.version >= since:
        return web.Response(text=f"Ready\n{shard_line(exporter)}\n")
    return web.Response(
        status=503, text=f"Not ready: some hypervisors have not been audited yet\n{shard_line(exporter)}\n"
    )


def shard_line(exporter: Exporter) -> str:
    """Which part of the fleet this exporter serves: `shard 1 of 3 (0 to 2): 334 of 1000
    configured hypervisors`, or `not sharded: 12 hypervisors`."""
    config = exporter.config
    held, configured = len(config.hypervisors), len(config.configured_hypervisors)
    if not config.shard.sharded:
        return f"not sharded: {held} hypervisors"
    return f"{config.shard}: {held} of {configured} configured hypervisors"


async def landing_page(request: web.Request) -> web.Response:
    exporter = exporter_of(request)
    store = exporter.store
    rows = []
    for state in store.hypervisors.values():
        status = "not audited yet" if state.latest is None else ("up" if state.up else "down")
        error = state.latest.error if state.latest is not None and state.latest.error else ""
        name = html.escape(state.name)
        link = f"<a href='probe?target={name}'>{name}</a>"
        rows.append(f"<tr><td>{link}</td><td>{status}</td><td>{html.escape(error)}</td></tr>")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>virtcap</title></head>
<body>
<h1>virtcap {html.escape(__version__)}</h1>
<p>Capacity and overcommit monitor for libvirt/KVM fleets.</p>
<p>This exporter: {html.escape(shard_line(exporter))}.</p>
<ul>
<li><a href="metrics">/metrics</a>: every hypervisor</li>
<li>/probe?target=NAME: one hypervisor (multi-target pattern)</li>
<li><a href="-/healthy">/-/healthy</a>, <a href="-/ready">/-/ready</a></li>
</ul>
<table border="1" cellpadding="4"><tr><th>hypervisor</th><th>status</th><th>error</th></tr>
{"".join(rows)}
</table>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")
