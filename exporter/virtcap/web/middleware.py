"""Who may change claims and maintenance: a writer of claims.writers, for every mutating request,
whatever the web configuration's readers (access.py's middleware) allow; a reader's credentials
are answered 403, any others 401.

A refusal is answered before any of the body is read, at once even when the body stalls: aiohttp
reads (and drops) what the client still sends after the answer, for its lingering time, so the
client sees the answer and not a reset."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from virtcap.config import Config
from virtcap.web.exporter import Exporter

MAX_REQUEST_BYTES = 64 * 1024
"""The most a request may send (aiohttp's client_max_size)."""

_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
READ_ONLY_POSTS = frozenset({"/api/v1/placements", "/api/v1/plans/consolidation", "/api/v1/plans/scenarios"})
"""POSTs that change nothing (a dry-run placement holds nothing, a plan moves nothing, a scenario
changes nothing): readers', like any GET."""


def writes(request: web.Request) -> bool:
    """Changes are authenticated by claims.writers, not by the web config's readers."""
    return request.method in _MUTATING and not (request.method == "POST" and request.path in READ_ONLY_POSTS)


def writer_hashes(config: Config) -> dict[str, bytes]:
    return {user: hashed.encode() for user, hashed in config.claims.writers.items()}


def writers_middleware(exporter: Exporter) -> Middleware:
    """Changes need a writer (claims.writers), always; readers are the web config's middleware.

    The two are separate so that a scraper's credentials can never create or delete claims.
    """

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if writes(request):
            if request.match_info.http_exception is not None:
                return await handler(request)  # no such route or method: 404 or 405 as it is
            refused = await exporter.writers.refusal(header)
            if (
                refused is not None
                and refused.status == HTTPStatus.UNAUTHORIZED
                and await _reader(exporter, header)
            ):
                # known, but only as a reader: 401 would invite the same credentials again
                refused = web.Response(
                    status=HTTPStatus.FORBIDDEN,
                    text="Forbidden: these credentials may read, not write (claims.writers)\n",
                )
            if refused is not None:
                return refused
        return await handler(request)

    return authenticate


async def _reader(exporter: Exporter, header: str | None) -> bool:
    """The credentials are a reader's of the web configuration (never without readers)."""
    return (
        header is not None
        and bool(exporter.web.current().users)
        and await exporter.web.readers.allows(header)
    )
