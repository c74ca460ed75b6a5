"""Bounds on client connections: how many, how slow a request may arrive, how long one may idle.

aiohttp waits forever for the first request of a connection and keeps idle keep-alive connections
for an hour, so a few hundred silent or slowloris clients hold every file descriptor the process
has: then scrapes time out and audits cannot open their connections. A ConnectionGuard wraps each
connection's protocol and a sweeper closes:
- a connection whose request head (or, when it connected, first request) has not fully arrived
  within the read timeout (slowloris);
- a connection idle between requests for longer than the idle timeout;
and at the connection limit, a new connection evicts the longest-idle one, or is closed at once
when every connection is busy, so the limit is never passed (Prometheus' --web.max-connections).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

log = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 512
    read_timeout: float = 10.0
    """A request's head must arrive within this many seconds of its first byte (or of the
    connection, for the first request)."""
    idle_timeout: float = 60.0
    """A keep-alive connection with no request for this long is closed."""


@dataclass(eq=False)
class _Connection:
    protocol: asyncio.Protocol
    transport: asyncio.Transport | None = None
    waiting_since: float | None = field(default_factory=time.monotonic)
    """When the request head now awaited started to arrive, or the connection was made; None while
    a request is being handled or the connection idles after one."""
    idle_since: float = field(default_factory=time.monotonic)
    requests_in_flight: int = 0

    def busy(self) -> bool:
        if self.requests_in_flight:
            return True
        # A response still being written to a slow reader is not idleness.
        return self.transport is not None and self.transport.get_write_buffer_size() > 0


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the guard told what happens on it."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._state = _Connection(inner)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # TCP and TLS transports alike are full Transports; the base type is asyncio's signature.
        self._state.transport = cast(asyncio.Transport, transport)
        self._inner.connection_made(transport)
        self._guard._opened(self._state)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state.waiting_since is None and not state.requests_in_flight:
            state.waiting_since = time.monotonic()  # the next request has begun to arrive
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard._closed(self._state)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class ConnectionGuard:
    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._connections: dict[asyncio.BaseTransport, _Connection] = {}

    def protocol_factory(self, make: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        return lambda: _GuardedProtocol(self, make())

    def middleware(self) -> Middleware:
        """Marks a connection busy while one of its requests is handled (and its body read)."""

        @web.middleware
        async def track(request: web.Request, handler: Handler) -> web.StreamResponse:
            state = self._connections.get(request.transport) if request.transport is not None else None
            if state is None:
                return await handler(request)
            state.requests_in_flight += 1
            state.waiting_since = None
            try:
                return await handler(request)
            finally:
                state.requests_in_flight -= 1
                state.idle_since = time.monotonic()

        return track

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.sweep()

    def sweep(self) -> None:
        now = time.monotonic()
        for state in list(self._connections.values()):
            if state.busy():
                continue
            if state.waiting_since is not None:
                if now - state.waiting_since > self.limits.read_timeout:
                    self._close(state)
            elif now - state.idle_since > self.limits.idle_timeout:
                self._close(state)

    def _opened(self, state: _Connection) -> None:
        assert state.transport is not None
        if len(self._connections) >= self.limits.max_connections:
            idle = [s for s in self._connections.values() if not s.busy()]
            if not idle:
                state.transport.abort()
                return
            oldest = min(idle, key=lambda s: s.waiting_since or s.idle_since)
            self._close(oldest)
        self._connections[state.transport] = state

    def _closed(self, state: _Connection) -> None:
        if state.transport is not None:
            self._connections.pop(state.transport, None)

    def _close(self, state: _Connection) -> None:
        if state.transport is not None:
            self._connections.pop(state.transport, None)
            state.transport.abort()


class GuardedSite(web.BaseSite):
    """aiohttp's TCP site with every connection under a ConnectionGuard."""

    def __init__(  # noqa: PLR0917  (TCPSite's runner, host and port, then the guard)
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int,
        guard: ConnectionGuard,
        ssl_context: Any = None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            ssl=self._ssl_context,
            # A TLS connection reaches the guard once its handshake is done: bound the handshake too.
            ssl_handshake_timeout=self._guard.limits.read_timeout if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=True,
        )


def raise_open_file_limit(needed: int) -> None:
    """Raise the soft limit on open files to the hard limit, as Go programs do at start: the
    common soft limit of 1,024 is far below what a fleet's connections and clients need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as error:
            log.warning("cannot raise the open file limit", extra={"soft": soft, "error": str(error)})
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open file limit may be too low for the fleet and --web.max-connections",
            extra={"limit": soft, "needed": needed},
        )
