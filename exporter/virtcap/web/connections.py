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

Malformed requests are answered at once and logged as one line at debug level: aiohttp takes an
HTTP/0.9 request line (`GET /`, no version) for the start of a head and waits for the rest, so a
connection's first line is looked at before aiohttp sees it (`_pass_first_line`); and aiohttp logs
every request it cannot parse as an error with a traceback, so its server log goes through
`RequestErrorLog`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import resource
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestPayloadError

log = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5
_MAX_LINE_BYTES = 8190
"""aiohttp's own bound on a request line: a longer one is aiohttp's to refuse (414)."""
_LINE_SO_FAR = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]*(?: [\x21-\x7e]*(?: [\x21-\x7e]*)?)?\r?")
"""What a request line can be up to its end: a method token, then the target, then a version.
Bytes that cannot be one (a TLS handshake on the plain port) go to aiohttp at once."""
_NOT_HTTP1 = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [\x21-\x7e]+(?: HTTP/(?!1\.)[0-9]\.[0-9])?\r?")
"""A request line of HTTP/0.9 (no version at all) or of a major version other than 1."""
_NOT_SERVED = b"Bad Request: only HTTP/1.0 and HTTP/1.1 requests are served\n"
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_NOT_SERVED), _NOT_SERVED)
)


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
        self._first_line: bytearray | None = bytearray()
        """The connection's first line while it arrives (held back from aiohttp); None once it
        has gone on."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # TCP and TLS transports alike are full Transports; the base type is asyncio's signature.
        self._state.transport = cast(asyncio.Transport, transport)
        self._inner.connection_made(transport)
        self._guard._opened(self._state)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state.waiting_since is None and not state.requests_in_flight:
            state.waiting_since = time.monotonic()  # the next request has begun to arrive
        if self._first_line is not None:
            self._first_line += data
            data = self._pass_first_line()
        if data:
            self._inner.data_received(data)

    def _pass_first_line(self) -> bytes:
        """What of the held back bytes aiohttp may have now; answers 400 itself to HTTP/0.9."""
        held = self._first_line
        assert held is not None
        end = held.find(b"\n")
        line = held if end < 0 else held[:end]
        if end < 0 and len(held) <= _MAX_LINE_BYTES and _LINE_SO_FAR.fullmatch(held):
            return b""  # the line is still arriving
        self._first_line = None
        if end >= 0 and _NOT_HTTP1.fullmatch(line):
            log.debug("malformed request", extra={"error": "not an HTTP/1.x request line"})
            transport = self._state.transport
            if transport is not None:
                transport.write(_BAD_REQUEST)
                transport.close()
            return b""
        return bytes(held)

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


class RequestErrorLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log (its `logger`), where a request that cannot be parsed, or whose body
    does not decode, is one line at debug level rather than an error with a traceback: that is
    the client's mistake, answered 400, and a scanner would otherwise fill the log. Errors of the
    server's own keep their traceback."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        super().__init__(logger or logging.getLogger("aiohttp.server"))

    def log(
        self,
        level: int,
        msg: object,
        *args: object,
        exc_info: Any = None,
        extra: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        error = sys.exc_info()[1] if exc_info is True else exc_info
        if isinstance(error, HttpProcessingError | RequestPayloadError):
            self.logger.debug("malformed request", extra={"error": _one_line(error)})
            return
        super().log(level, msg, *args, exc_info=exc_info, extra=extra, **kwargs)


def _one_line(error: BaseException) -> str:
    text = error.message if isinstance(error, HttpProcessingError) else str(error)
    return f"{type(error).__name__}: {' '.join(str(text).split())}"


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
