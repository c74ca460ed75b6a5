"""The web configuration in force while serving, as exporter-toolkit keeps it: the file and its
certificates are looked at again as connections and requests come, not on a signal, so that a
rotated certificate or a new user applies without anyone telling the exporter.

One object holds the last good configuration so that the listening socket's TLS, the checks on
each request (rate limit, client certificate SANs, basic auth) and the response headers always
agree on one version of the file, and so that a bad re-read is logged once and changes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from virtcap.config import ConfigError
from virtcap.web.auth import BasicAuth, BcryptPool
from virtcap.web.ratelimit import TokenBucket
from virtcap.web.tls import ReloadingContext, peer_has_san
from virtcap.web.webconfig import (
    WebConfig,
    build_web_config,
    parse_web_config,
    read_limited,
    read_referenced,
)
from virtcap.web.webconfig_schema import WebConfigFile

# The name these lines had before this module was split from webconfig.py: log filters keep working.
log = logging.getLogger("virtcap.web.webconfig")

CHECK_INTERVAL_SECONDS = 1.0
"""How often, at most, the files are looked at again (on a new connection or request)."""


def _never(_request: web.Request) -> bool:
    return False


class WebConfigSource:
    """The web configuration, followed while serving.

    The file and the PEM files it names are looked at again at most every `check_interval`
    seconds, when a connection or a request comes; a change is applied when it loads, and logged
    and ignored (the last good configuration stays) when it does not.

    For the server: `ssl_context` goes to the listening socket, `middleware()` in front of the
    handlers (rate limit, client certificate SANs, basic auth of readers), and `add_headers` to
    the application's on_response_prepare.
    """

    def __init__(
        self,
        path: str | Path | None,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        bcrypt_pool: BcryptPool | None = None,
    ) -> None:
        self.path = None if path is None else Path(path)
        self.check_interval = check_interval
        self._parsed_from: bytes | None = None
        self._parsed: WebConfigFile | str = ""
        """The last file's contents parsed, or why they do not parse."""
        self._failed: tuple[bytes | None, str] | None = None
        """The digest of the files that last failed to load (None: unreadable), and why."""
        self._config = WebConfig(ssl_context=None, users={})
        self._digest = b""
        if self.path is not None:
            parsed, contents, self._digest = self._inputs(self.path)
            self._config = build_web_config(parsed, contents, str(self.path))
        self._checked = time.monotonic()
        self.readers = BasicAuth(self._config.users, realm="virtcap", pool=bcrypt_pool)
        self._limiter = None if self._config.rate_limit is None else TokenBucket(self._config.rate_limit)
        self.ssl_context: ssl.SSLContext | None = None
        """For the listening socket: the same object for the server's lifetime."""
        if self._config.ssl_context is not None:
            front = ReloadingContext(ssl.PROTOCOL_TLS_SERVER)
            front.newest = self.connection_context
            self.ssl_context = front

    def current(self) -> WebConfig:
        if time.monotonic() - self._checked >= self.check_interval:
            self.refresh()
        return self._config

    def connection_context(self) -> ssl.SSLContext:
        context = self.current().ssl_context
        if context is None:  # cannot happen: turning TLS off is refused
            raise ssl.SSLError("TLS is off")
        return context

    def refresh(self) -> WebConfig:
        """Look at the files now; apply what changed if it loads."""
        self._checked = time.monotonic()
        if self.path is None:
            return self._config
        digest: bytes | None = None
        try:
            parsed, contents, digest = self._inputs(self.path)
            if digest == self._digest:
                self._failed = None  # back to the files in force: a new failure is news again
                return self._config
            if self._failed is not None and self._failed[0] == digest:
                return self._config  # the same broken files: neither built nor logged again
            config = build_web_config(parsed, contents, str(self.path))
            if (config.ssl_context is None) != (self._config.ssl_context is None):
                raise ConfigError(
                    f"{self.path}: tls_server_config: TLS cannot be turned on or off without a restart"
                )
        except ConfigError as error:
            self._reject(digest, str(error))
            return self._config
        except Exception as error:  # a bad file must never break the connection or request at hand
            self._reject(digest, f"{self.path}: {type(error).__name__}: {error}")
            return self._config
        self._apply(config, digest)
        return config

    def _inputs(self, path: Path) -> tuple[WebConfigFile, dict[str, bytes], bytes]:
        """The parsed file, the PEM contents it names, and a digest of all of them."""
        source = str(path)
        data = read_limited(path, source)
        if data != self._parsed_from:
            # Parsed again only when the file changed: validating the hashes costs a bcrypt each.
            try:
                self._parsed = parse_web_config(data, source)
            except ConfigError as error:
                self._parsed = str(error)
            self._parsed_from = data
        if isinstance(self._parsed, str):
            raise ConfigError(self._parsed)
        contents = read_referenced(self._parsed, path)
        digest = hashlib.sha256(data)
        for key, content in sorted(contents.items()):
            digest.update(f"\0{key}\0{len(content)}\0".encode())
            digest.update(content)
        return self._parsed, contents, digest.digest()

    def _reject(self, digest: bytes | None, message: str) -> None:
        if self._failed is None or self._failed[1] != message:
            log.error("web configuration not reloaded; the last good one stays", extra={"error": message})
        self._failed = (digest, message)

    def _apply(self, config: WebConfig, digest: bytes) -> None:
        self._config, self._digest, self._failed = config, digest, None
        self.readers.replace_users(config.users)
        if config.rate_limit is None:
            self._limiter = None
        elif self._limiter is None or self._limiter.limit != config.rate_limit:
            self._limiter = TokenBucket(config.rate_limit)
        log.info("web configuration reloaded", extra={"file": str(self.path)})

    def middleware(self, readers_skip: Callable[[web.Request], bool] = _never) -> Middleware:
        """Rate limit (429), client certificate SANs (403), then readers' basic auth (401, or 503
        when bcrypt is saturated) for the requests `readers_skip` does not exempt.

        A refusal is answered at once, before the body: aiohttp reads and drops the rest of it
        after the answer (its lingering time), so the client sees the answer, not a reset."""

        @web.middleware
        async def web_config(request: web.Request, handler: Handler) -> web.StreamResponse:
            config = self.current()
            if self._limiter is not None and not self._limiter.allow():
                return web.Response(status=429, text="Too Many Requests\n")
            if config.client_allowed_sans is not None and not peer_has_san(
                request, config.client_allowed_sans
            ):
                return web.Response(
                    status=403, text="Forbidden: the client certificate carries none of the allowed SANs\n"
                )
            if config.users and not readers_skip(request):
                refused = await self.readers.refusal(request.headers.get("Authorization"))
                if refused is not None:
                    return refused
            return await handler(request)

        return web_config

    async def add_headers(self, _request: web.Request, response: web.StreamResponse) -> None:
        """http_server_config.headers on every response; a handler's own value wins, as in Go."""
        for name, value in self.current().headers.items():
            response.headers.setdefault(name, value)
