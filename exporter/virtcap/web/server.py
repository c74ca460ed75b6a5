"""`virtcap serve`: the aiohttp server in front of the background audits.

Scrapes never wait for libvirt: /metrics is rendered (in a thread) whenever a snapshot changes,
and every scrape is served the cached bytes, gzipped when asked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import html
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST

from virtcap import __version__
from virtcap.audit.events import start_libvirt_event_thread
from virtcap.claims.ledger import ClaimDatabase, ClaimLedger
from virtcap.config import Config, ConfigError
from virtcap.exposition.families import FragmentCache, TaskHealth, render, views
from virtcap.service.auditor import FleetAuditor
from virtcap.service.store import SnapshotStore
from virtcap.service.supervise import Supervisor
from virtcap.web.api import add_routes
from virtcap.web.auth import BasicAuth
from virtcap.web.connections import ConnectionGuard, ConnectionLimits, GuardedSite, raise_open_file_limit
from virtcap.web.webconfig import WebConfigSource

log = logging.getLogger(__name__)

DEFAULT_PORT = 10463
SHUTDOWN_GRACE_SECONDS = 10.0
RENDER_GAP_SECONDS = 0.5
"""At most two renders a second (fewer for a fleet that takes long to render): a large fleet
changes all the time, and scrapes need not see every change."""
MAX_REQUEST_BYTES = 64 * 1024
_SPARE_FILES = 256
"""Open files beyond clients and libvirt connections: logs, the claims database, libraries."""


class MetricsCache:
    """The fleet's exposition, rendered once per change and served to every scrape."""

    def __init__(
        self, store: SnapshotStore, stale_after: float, claims: ClaimLedger, supervisor: Supervisor
    ) -> None:
        self.store = store
        self.claims = claims
        self.supervisor = supervisor
        self.stale_after = stale_after
        self.body = b""
        self.version = -1
        """The store version the body shows."""
        self._gzipped: bytes | None = None
        self._fragments = FragmentCache()
        # Its own thread: renders never queue behind other work of the default pool, and the
        # fragment cache is rendered by one thread at a time.
        self._renderer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="render")
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
            tasks = TaskHealth(dict(self.supervisor.failures), self.supervisor.dead_by_kind())
            body = await asyncio.get_running_loop().run_in_executor(
                self._renderer, self._fragments.render, snapshot, dict(self.claims.outcomes), tasks
            )
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


@dataclass
class Exporter:
    config: Config
    store: SnapshotStore
    supervisor: Supervisor
    fleet: FleetAuditor
    cache: MetricsCache
    claims: ClaimLedger
    web: WebConfigSource
    """The web config, followed while serving: TLS, readers (basic_auth_users), headers, rate limit."""
    writers: BasicAuth
    """Who may create and delete claims (claims.writers): always required, whatever the readers."""
    connections: ConnectionGuard | None = None


def build_app(exporter: Exporter) -> web.Application:
    middlewares = [exporter.web.middleware(readers_skip=_writes), _auth_middleware(exporter)]
    if exporter.connections is not None:  # outermost: a request is busy from its head on
        middlewares.insert(0, exporter.connections.middleware())
    app = web.Application(middlewares=middlewares, client_max_size=MAX_REQUEST_BYTES)
    app.on_response_prepare.append(exporter.web.add_headers)
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


def _writes(request: web.Request) -> bool:
    """Changes are authenticated by claims.writers, not by the web config's readers."""
    return request.method in _MUTATING


def _auth_middleware(exporter: Exporter) -> Middleware:
    """Changes need a writer (claims.writers), always; readers are the web config's middleware.

    The two are separate so that a scraper's credentials can never create or delete claims.
    """

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if request.method in _MUTATING:
            if request.match_info.http_exception is not None:
                return await handler(request)  # no such route or method: 404 or 405 as it is
            refused = await exporter.writers.refusal(header)
            if refused is not None:
                # read the (bounded) body anyway, so that the client sees the 401, not a reset;
                # a body that stalls gets the 401 all the same
                limits = exporter.connections.limits if exporter.connections else ConnectionLimits()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(limits.read_timeout):
                        await request.content.read(MAX_REQUEST_BYTES)
                return refused
        return await handler(request)

    return authenticate


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


async def healthy(request: web.Request) -> web.Response:
    """Healthy unless a background task crashed and waits for its restart."""
    dead = _exporter(request).supervisor.dead()
    if dead:
        lines = "".join(f"{name}: {error}\n" for name, error in sorted(dead.items()))
        return web.Response(status=503, text=f"Unhealthy: background tasks restarting after a crash\n{lines}")
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
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:  # noqa: PLR2004  (the TCP ports)
        raise ConfigError(f"--web.listen-address: expected HOST:PORT such as :{DEFAULT_PORT}, got {text!r}")
    host = host.strip("[]")
    return (host or None), int(port)


async def serve(
    config: Config,
    listen_address: str,
    web_config: WebConfigSource,
    reload_config: Callable[[], Config] | None = None,
    limits: ConnectionLimits | None = None,
) -> int:
    host, port = parse_listen_address(listen_address)
    limits = limits or ConnectionLimits()
    raise_open_file_limit(limits.max_connections + 4 * len(config.hypervisors) + _SPARE_FILES)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_log_loop_error)
    start_libvirt_event_thread()
    store = SnapshotStore()
    supervisor = Supervisor(changed=store.touch)
    claims = ClaimLedger(config.claims, store, ClaimDatabase(config.claims.database))
    await claims.start()
    fleet = FleetAuditor(store, supervisor, claims)
    cache = MetricsCache(store, config.audit.staleness_bound, claims, supervisor)
    exporter = Exporter(
        config,
        store,
        supervisor,
        fleet,
        cache,
        claims,
        web=web_config,
        writers=BasicAuth(_writer_hashes(config), realm="virtcap claims"),
        connections=ConnectionGuard(limits),
    )
    runner = web.AppRunner(build_app(exporter), handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_SECONDS)
    await runner.setup()
    assert exporter.connections is not None
    site = GuardedSite(runner, host, port, exporter.connections, ssl_context=web_config.ssl_context)
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
    supervisor.start("render-metrics", "render", cache.run)
    supervisor.start("expire-claims", "expire-claims", claims.expire_forever)
    supervisor.start("connection-sweeper", "connections", exporter.connections.sweep_forever)
    scheme = "https" if web_config.ssl_context else "http"
    log.info(
        "listening",
        extra={"address": f"{scheme}://{host or '0.0.0.0'}:{port}", "hypervisors": len(config.hypervisors)},
    )

    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    reloads = ConfigReloads(exporter, reload_config) if reload_config is not None else None
    if reloads is not None:
        loop.add_signal_handler(signal.SIGHUP, reloads.request)
    await stopping.wait()

    log.info("shutting down")
    if reloads is not None:
        await reloads.stop()
    await fleet.stop()
    await supervisor.stop_all()
    await claims.stop()
    await runner.cleanup()
    return 0


def _log_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """asyncio's own errors as one line each: out of file descriptors, asyncio logs a traceback
    for every failed accept(), thousands a second."""
    error = context.get("exception")
    log.error(
        str(context.get("message", "event loop error")),
        extra={"error": f"{type(error).__name__}: {error}" if error is not None else ""},
    )


class ConfigReloads:
    """SIGHUP: read the file again, off the event loop, one reload at a time.

    The file is parsed in a thread (a large or hostile file must not stall scrapes); a file that
    cannot be used, for any reason, is logged and the running configuration kept whole.
    """

    def __init__(self, exporter: Exporter, reload_config: Callable[[], Config]) -> None:
        self.exporter = exporter
        self.reload_config = reload_config
        self._wanted = asyncio.Event()
        self._task = asyncio.create_task(self._serve(), name="reload-config")

    def request(self) -> None:
        self._wanted.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _serve(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()  # signals during a reload: one more reload after it
            try:
                await self._reload()
            except Exception:  # never let a bad reload end reloading for good
                log.exception("configuration not reloaded")

    async def _reload(self) -> None:
        exporter = self.exporter
        try:
            config = await asyncio.to_thread(self.reload_config)
        except ConfigError as error:
            log.error("configuration not reloaded", extra={"error": str(error)})
            return
        running_database = exporter.claims.database.path
        if config.claims.database != running_database:
            log.warning(
                "claims.database changed: takes effect at the next start",
                extra={"running": running_database, "configured": config.claims.database},
            )
        exporter.claims.settings = config.claims.model_copy(update={"database": running_database})
        exporter.config = config
        exporter.cache.stale_after = config.audit.staleness_bound
        exporter.writers.replace_users(_writer_hashes(config))
        await exporter.fleet.apply(config.hypervisors, config.audit, config.flavor_requests)
        exporter.store.touch()
        log.info("configuration reloaded", extra={"hypervisors": len(config.hypervisors)})
