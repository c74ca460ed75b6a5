"""`virtcap serve`: the aiohttp server in front of the background audits.

Scrapes never wait for libvirt: /metrics is rendered (in a thread) whenever a snapshot changes,
and every scrape is served the cached bytes, gzipped when asked.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import gzip
import hashlib
import html
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST

from virtcap import __version__
from virtcap.api import add_routes
from virtcap.auditor import FleetAuditor
from virtcap.claims import ClaimDatabase, ClaimLedger
from virtcap.config import Config, ConfigError
from virtcap.events import register_libvirt_event_loop
from virtcap.exposition import FragmentCache, render, views
from virtcap.store import SnapshotStore
from virtcap.webconfig import WebConfig

log = logging.getLogger("virtcap.server")

DEFAULT_PORT = 10463
SHUTDOWN_GRACE_SECONDS = 10.0
RENDER_GAP_SECONDS = 0.5
"""At most two renders a second (fewer for a fleet that takes long to render): a large fleet
changes all the time, and scrapes need not see every change."""
_VERIFIED_CACHE_LIMIT = 1024
MAX_REQUEST_BYTES = 64 * 1024


class MetricsCache:
    """The fleet's exposition, rendered once per change and served to every scrape."""

    def __init__(self, store: SnapshotStore, stale_after: float, claims: ClaimLedger) -> None:
        self.store = store
        self.claims = claims
        self.stale_after = stale_after
        self.body = b""
        self.version = -1
        """The store version the body shows."""
        self._gzipped: bytes | None = None
        self._fragments = FragmentCache()
        self.rendered = asyncio.Event()

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            self._gzipped = gzip.compress(self.body, compresslevel=6)
        return self._gzipped

    async def run(self) -> None:
        while True:
            self.store.changed.clear()
            version = self.store.version
            started = time.monotonic()
            snapshot = views(self.store, time.time(), self.stale_after, self.claims.pending())
            body = await asyncio.to_thread(self._fragments.render, snapshot, dict(self.claims.outcomes))
            self.body, self.version, self._gzipped = body, version, None
            self.rendered.set()
            # Rendering a large fleet takes a while: never spend more than a third of the time on it.
            await self._pause(version, max(RENDER_GAP_SECONDS, 2 * (time.monotonic() - started)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._until_next_stale()):
                    await self.store.changed.wait()

    async def _pause(self, rendered_version: int, gap: float) -> None:
        """The gap between renders, cut short by the first complete picture of the fleet: /-/ready
        waits for it, and a small fleet is audited well within one gap."""
        ready_since = self.store.ready_since
        if ready_since is not None and rendered_version < ready_since:
            return
        if ready_since is not None:
            await asyncio.sleep(gap)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(gap):
                await self.store.all_audited.wait()

    def _until_next_stale(self) -> float | None:
        """Data of a down hypervisor must vanish when it turns stale, even if nothing else changes."""
        now = time.time()
        deadlines = [
            state.last_good.taken_at + self.stale_after
            for state in self.store.hypervisors.values()
            if not state.up
            and state.last_good is not None
            and state.last_good.taken_at + self.stale_after > now
        ]
        return max(min(deadlines) - now, 0.0) + 0.01 if deadlines else None


class BasicAuth:
    """bcrypt is slow by design: checks run in a thread, and verified credentials are remembered
    (as a digest) so that a scraper pays for bcrypt once, not on every scrape."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._verified: set[bytes] = set()

    async def allows(self, header: str | None) -> bool:
        if header is None or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed))).digest()
        if key in self._verified:
            return True
        if not await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed):
            return False
        if len(self._verified) >= _VERIFIED_CACHE_LIMIT:
            self._verified.clear()
        self._verified.add(key)
        return True


@dataclass
class Exporter:
    config: Config
    store: SnapshotStore
    fleet: FleetAuditor
    cache: MetricsCache
    claims: ClaimLedger
    readers: BasicAuth | None
    """Who may read (every path) when the web config has basic_auth_users; None: anyone."""
    writers: BasicAuth
    """Who may create and delete claims (claims.writers): always required, whatever readers is."""


def build_app(exporter: Exporter) -> web.Application:
    app = web.Application(middlewares=[_auth_middleware(exporter)], client_max_size=MAX_REQUEST_BYTES)
    app["exporter"] = exporter
    app["claims"] = exporter.claims
    app["store"] = exporter.store
    add_routes(app)
    app.router.add_get("/", landing_page)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/probe", probe)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    return app


_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _auth_middleware(exporter: Exporter) -> Middleware:
    """Changes need a writer (claims.writers), always; reads need a reader when readers are set.

    The two are separate so that a scraper's credentials can never create or delete claims.
    """

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if request.method in _MUTATING:
            if request.match_info.http_exception is not None:
                return await handler(request)  # no such route or method: 404 or 405 as it is
            if not await exporter.writers.allows(header):
                # read the (bounded) body anyway, so that the client sees the 401, not a reset
                with contextlib.suppress(Exception):
                    await request.content.read(MAX_REQUEST_BYTES)
                return _unauthorized("virtcap claims")
        elif exporter.readers is not None and not await exporter.readers.allows(header):
            return _unauthorized("virtcap")
        return await handler(request)

    return authenticate


def _unauthorized(realm: str) -> web.Response:
    return web.Response(
        status=401, text="Unauthorized\n", headers={"WWW-Authenticate": f'Basic realm="{realm}"'}
    )


def _exporter(request: web.Request) -> Exporter:
    exporter: Exporter = request.app["exporter"]
    return exporter


async def metrics(request: web.Request) -> web.Response:
    cache = _exporter(request).cache
    await cache.rendered.wait()
    headers = {"Content-Type": CONTENT_TYPE_LATEST}
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return web.Response(body=cache.gzipped(), headers=headers)
    return web.Response(body=cache.body, headers=headers)


async def probe(request: web.Request) -> web.Response:
    """The multi-target pattern: only the named hypervisor's series. Nothing is audited here."""
    exporter = _exporter(request)
    target = request.query.get("target", "")
    if not target:
        raise web.HTTPBadRequest(text="missing the target parameter: /probe?target=HYPERVISOR\n")
    if target not in exporter.store.hypervisors:
        raise web.HTTPBadRequest(text=f"unknown target {target!r}: not a configured hypervisor\n")
    pending = exporter.claims.pending()
    everyone = views(exporter.store, time.time(), exporter.cache.stale_after, pending)
    body = render([view for view in everyone if view.name == target])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthy(_request: web.Request) -> web.Response:
    return web.Response(text="OK\n")


async def ready(request: web.Request) -> web.Response:
    """Ready once /metrics shows every hypervisor's first audit (or its failure)."""
    exporter = _exporter(request)
    since = exporter.store.ready_since
    if since is not None and exporter.cache.version >= since:
        return web.Response(text="Ready\n")
    return web.Response(status=503, text="Not ready: some hypervisors have not been audited yet\n")


async def landing_page(request: web.Request) -> web.Response:
    store = _exporter(request).store
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


def _writer_hashes(config: Config) -> dict[str, bytes]:
    return {user: hashed.encode() for user, hashed in config.claims.writers.items()}


def parse_listen_address(text: str) -> tuple[str | None, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[IPv6]:PORT`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--web.listen-address: expected HOST:PORT such as :{DEFAULT_PORT}, got {text!r}")
    host = host.strip("[]")
    return (host or None), int(port)


async def serve(
    config: Config,
    listen_address: str,
    web_config: WebConfig,
    reload_config: Callable[[], Config] | None = None,
) -> int:
    host, port = parse_listen_address(listen_address)
    loop = asyncio.get_running_loop()
    register_libvirt_event_loop(loop)
    store = SnapshotStore()
    claims = ClaimLedger(config.claims, store, ClaimDatabase(config.claims.database))
    await claims.start()
    fleet = FleetAuditor(store, claims)
    cache = MetricsCache(store, config.audit.staleness_bound, claims)
    exporter = Exporter(
        config,
        store,
        fleet,
        cache,
        claims,
        readers=BasicAuth(web_config.users) if web_config.users else None,
        writers=BasicAuth(_writer_hashes(config)),
    )
    runner = web.AppRunner(build_app(exporter), handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=web_config.ssl_context, reuse_address=True)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        await claims.stop()
        raise ConfigError(
            f"--web.listen-address: cannot listen on {listen_address}: {error.strerror}"
        ) from None
    # Listening first: a taken port fails before a thousand hypervisors are connected to, and
    # /-/healthy answers while the first audits run (/-/ready tells when they are done).
    await fleet.apply(config.hypervisors, config.audit, config.flavor_requests)
    renderer = asyncio.create_task(cache.run(), name="render-metrics")
    scheme = "https" if web_config.ssl_context else "http"
    log.info(
        "listening",
        extra={"address": f"{scheme}://{host or '0.0.0.0'}:{port}", "hypervisors": len(config.hypervisors)},
    )

    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    if reload_config is not None:
        loop.add_signal_handler(
            signal.SIGHUP, lambda: asyncio.ensure_future(_reload(exporter, reload_config))
        )
    await stopping.wait()

    log.info("shutting down")
    await fleet.stop()
    await claims.stop()
    renderer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await renderer
    await runner.cleanup()
    return 0


async def _reload(exporter: Exporter, reload_config: Callable[[], Config]) -> None:
    try:
        config = reload_config()
    except ConfigError as error:
        log.error("configuration not reloaded", extra={"error": str(error)})
        return
    exporter.config = config
    exporter.cache.stale_after = config.audit.staleness_bound
    exporter.writers = BasicAuth(_writer_hashes(config))
    await exporter.fleet.apply(config.hypervisors, config.audit, config.flavor_requests)
    log.info("configuration reloaded", extra={"hypervisors": len(config.hypervisors)})
