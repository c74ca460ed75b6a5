"""`virtcap serve`: the aiohttp server in front of the background audits, from start to shutdown.

Scrapes never wait for libvirt: /metrics is rendered (in a thread) whenever a snapshot changes,
and every scrape is served the cached bytes, gzipped when asked (render.py). The application's
routes are app.py's, the pages and the API their own modules'; SIGHUP is reload.py's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable

from aiohttp import web

from virtcap.audit.events import start_libvirt_event_thread
from virtcap.claims.backends import claim_storage
from virtcap.claims.ledger import ClaimLedger
from virtcap.config import Config, ConfigError
from virtcap.fleet.store import SnapshotStore
from virtcap.service.auditor import FleetAuditor
from virtcap.service.garbage import freeze_survivors
from virtcap.service.placement import PlacementTask
from virtcap.service.placement_worker import PlacementWorker
from virtcap.service.reclaim import ReclaimTracker, policy_of
from virtcap.service.supervise import Supervisor
from virtcap.service.tolerance_task import ToleranceTracker
from virtcap.web.access import WebConfigSource
from virtcap.web.app import build_app
from virtcap.web.auth import BasicAuth
from virtcap.web.connections import (
    ConnectionGuard,
    ConnectionLimits,
    GuardedSite,
    RequestErrorLog,
    raise_open_file_limit,
)
from virtcap.web.exporter import Exporter
from virtcap.web.middleware import writer_hashes
from virtcap.web.reload import ConfigReloads, follow_placement
from virtcap.web.render import MetricsCache

__all__ = [  # what the command line and the tests take from here; each is defined in its own module
    "DEFAULT_PORT",
    "Exporter",
    "MetricsCache",
    "build_app",
    "parse_listen_address",
    "serve",
]

log = logging.getLogger(__name__)

DEFAULT_PORT = 10463
_MAX_PORT = 65535
SHUTDOWN_GRACE_SECONDS = 10.0
SWITCH_INTERVAL_SECONDS = 0.0005
"""How long a thread running Python (a render, an audit's parsing) keeps the interpreter lock from
the event loop once the loop asks for it. CPython's default, 5 ms, is paid each time the loop
takes the lock back (after every write of a scrape's body), several times a scrape."""
_SPARE_FILES = 256
"""Open files beyond clients and libvirt connections: logs, the claims database, libraries."""


def parse_listen_address(text: str) -> tuple[str | None, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[IPv6]:PORT`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) <= _MAX_PORT:
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
    claims = ClaimLedger(config.claims, store, claim_storage(config.claims, config.source), config.shard)
    await claims.start()
    reclaim = ReclaimTracker(policy_of(config.reclaim), claims.database)
    await reclaim.start()
    fleet = FleetAuditor(store, supervisor, claims, reclaim)
    cache = MetricsCache(store, config.audit.staleness_bound, claims, supervisor)
    cache.exposition = config.exposition
    cache.reclaim = reclaim
    cache.shard = config.shard  # a reload keeps it (reload.py)
    exporter = Exporter(
        config,
        store,
        supervisor,
        fleet,
        cache,
        claims,
        web=web_config,
        writers=BasicAuth(writer_hashes(config), realm="virtcap claims"),
        connections=ConnectionGuard(limits),
        tolerance=ToleranceTracker(
            store, supervisor, config.failure_tolerance, config.multipliers, config.audit.staleness_bound
        ),
    )
    # the running configuration's flavors (reloads replace it) and those discovered meanwhile
    cache.flavor_sources = lambda: fleet.catalog.sources(exporter.config.flavors)
    assert exporter.tolerance is not None
    # the packing answers are for the same flavors as the headroom
    exporter.tolerance.flavors = lambda: fleet.catalog.demands(exporter.config.flavor_demands)
    runner = web.AppRunner(
        build_app(exporter),
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_GRACE_SECONDS,
        logger=RequestErrorLog(),
    )
    await runner.setup()
    assert exporter.connections is not None and exporter.tolerance is not None
    site = GuardedSite(runner, host, port, exporter.connections, ssl_context=web_config.ssl_context)
    await _listen(site, runner, claims, listen_address)
    _tune_interpreter()
    # Listening first: a taken port fails before a thousand hypervisors are connected to, and
    # /-/healthy answers while the first audits run (/-/ready tells when they are done).
    await fleet.apply(
        config.hypervisors, config.audit, config.flavor_demands, discover_flavors=config.discover_flavors
    )
    supervisor.start("render-metrics", "render", cache.run)
    supervisor.start("expire-claims", "expire-claims", claims.expire_forever)
    supervisor.start("store-domain-history", "domain-history", reclaim.store_forever)
    if claims.database.shared:
        supervisor.start("follow-claims", "follow-claims", claims.follow_forever)
    supervisor.start("connection-sweeper", "connections", exporter.connections.sweep_forever)
    exporter.tolerance.start()
    # its requests in a process of its own: their HTTP and JSON would hold the interpreter lock
    exporter.placement = PlacementTask(config, store, PlacementWorker())
    await follow_placement(exporter)
    scheme = "https" if web_config.ssl_context else "http"
    log.info(
        "listening",
        extra={
            "address": f"{scheme}://{host or '0.0.0.0'}:{port}",
            "hypervisors": len(config.hypervisors),
            "configured": len(config.configured_hypervisors),
            "shard": config.shard.ordinal,
            "total_shards": config.shard.total,
        },
    )

    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    reloads = ConfigReloads(exporter, reload_config) if reload_config is not None else None
    if reloads is not None:
        loop.add_signal_handler(signal.SIGHUP, reloads.request)
    await stopping.wait()

    log.info("shutting down")
    await _shut_down(exporter, reloads, runner)
    return 0


def _tune_interpreter() -> None:
    """From here on this process holds the fleet's audits for its whole life, and answers scrapes
    while other threads run: a scrape waits neither for the garbage collector to walk every audit
    (service/garbage.py) nor long for the interpreter lock."""
    freeze_survivors()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


async def _listen(site: GuardedSite, runner: web.AppRunner, claims: ClaimLedger, listen_address: str) -> None:
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        await claims.stop()
        raise ConfigError(
            f"--web.listen-address: cannot listen on {listen_address}: {error.strerror}"
        ) from None


async def _shut_down(exporter: Exporter, reloads: ConfigReloads | None, runner: web.AppRunner) -> None:
    """Audits and background tasks first, so that nothing writes to the ledger or the planner while
    they close; the server last, which lets answers in flight finish."""
    if reloads is not None:
        await reloads.stop()
    await exporter.fleet.stop()
    await exporter.supervisor.stop_all()
    await exporter.planner.stop()
    if exporter.placement is not None:
        exporter.placement.close()
    if exporter.fleet.reclaim is not None:
        await exporter.fleet.reclaim.flush()  # what the last audits changed, once, as it stops
    await exporter.claims.stop()
    await runner.cleanup()


def _log_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """asyncio's own errors as one line each: out of file descriptors, asyncio logs a traceback
    for every failed accept(), thousands a second."""
    error = context.get("exception")
    log.error(
        str(context.get("message", "event loop error")),
        extra={"error": f"{type(error).__name__}: {error}" if error is not None else ""},
    )
