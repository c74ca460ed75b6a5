"""`--web.config.file` in the exporter-toolkit format: TLS, mutual TLS, basic auth, headers, rate limit.

    tls_server_config:
      cert_file: server.crt                         # or cert: inline PEM
      key_file: server.key                          # or key: inline PEM
      client_ca_file: ca.crt                        # or client_ca: inline PEM
      client_auth_type: RequireAndVerifyClientCert  # default when a client CA is set
      client_allowed_sans: [scraper.example.net]    # the client certificate must carry one
      min_version: TLS12                            # TLS10 .. TLS13
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # Go's names, TLS 1.2 and below
      prefer_server_cipher_suites: true
      curve_preferences: [X25519]
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    rate_limit: {interval: 1s, burst: 10}
    basic_auth_users:
      prometheus: $2y$10$...                        # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')

Relative paths are relative to the file, as in exporter-toolkit. Like exporter-toolkit, the file
and the certificates it names are re-read while serving (`WebConfigSource`): a rotated
certificate, a new CA or new users apply to the next connection or request without a restart.
A changed file that does not load is logged and the last good configuration stays in force.

Where Python's ssl module and aiohttp differ from Go, the behaviour is this:

- `client_auth_type: RequestClientCert` (Go: ask for a certificate, accept any or none, verify
  nothing) does not ask: every client is accepted, as in Go, and nothing here reads an
  unverified certificate. `RequireAnyClientCert` (and its old name `RequireClientCert`) is refused
  at load: Python's ssl module verifies every client certificate it requires, and requiring one
  without verifying it authenticates nobody.
- A client CA without `client_auth_type` means RequireAndVerifyClientCert (Go refuses that file),
  and verifying client certificates needs a client CA (Go would trust the host's public CAs).
- `client_allowed_sans` is checked on each request (403) rather than during the handshake, and
  needs a verified certificate: VerifyClientCertIfGiven or RequireAndVerifyClientCert.
- `curve_preferences`: Python's ssl module can offer one curve only, so the first (most preferred)
  one that this Python can set is the only one offered (some builds cannot set X25519).
- `cipher_suites` names Go's suites; the TLS 1.3 ones are accepted and, as in Go, not configurable.
- `min_version: TLS10` or `TLS11` is applied, but OpenSSL 3's default security level still refuses
  those protocols' handshakes.
- `http_server_config.http2` is accepted and has no effect: aiohttp serves HTTP/1.1 only.
- `rate_limit` is exporter-toolkit's token bucket over all requests (429 beyond it).
- TLS cannot be turned on or off without a restart; such a change is refused like an invalid file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from virtcap.config import ConfigError, explain_validation_error
from virtcap.config.yamlfile import MAX_FILE_BYTES, load_yaml_bytes
from virtcap.units import parse_duration
from virtcap.web.auth import BasicAuth, BcryptHash, BcryptPool

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0
"""How often, at most, the files are looked at again (on a new connection or request)."""
_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 1.0

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "RequireClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_SUPPORTED_CLIENT_AUTH = (
    "NoClientCert, RequestClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
)

TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

CipherSuite = Literal[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
]
"""Go's tls.CipherSuites(), the only names exporter-toolkit accepts."""
_OPENSSL_CIPHERS: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
"""None: a TLS 1.3 suite, which neither Go nor OpenSSL lets a cipher list restrict."""

Curve = Literal["CurveP256", "CurveP384", "CurveP521", "X25519"]
_OPENSSL_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
"""The headers exporter-toolkit lets a web config set, and their allowed values (() for any)."""


def _scalar_text(value: object) -> object:
    """YAML scalars as Go's YAML decoder hands them to a string field (`X-XSS-Protection: 1`)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_scalar_text)]


def _interval(value: object) -> object:
    """0 turns the rate limit off, as in exporter-toolkit; anything else is a duration."""
    if value in (0, "0", "0s") and not isinstance(value, bool):
        return 0.0
    return parse_duration(value)


Interval = Annotated[float, BeforeValidator(_interval)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Strict):
    cert: str | None = None
    key: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    client_ca: str | None = None
    client_ca_file: str | None = None
    client_auth_type: ClientAuth | None = None
    client_allowed_sans: list[Text] | None = None
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    cipher_suites: list[CipherSuite] | None = None
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[Curve] | None = None


class HTTPServerConfig(_Strict):
    http2: bool = True
    headers: dict[str, Text] = {}


class RateLimitConfig(_Strict):
    interval: Interval = 0.0
    burst: int = Field(default=0, ge=0)


class WebConfigFile(_Strict):
    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = HTTPServerConfig()
    rate_limit: RateLimitConfig = RateLimitConfig()
    basic_auth_users: dict[Text, BcryptHash] = {}


@dataclass(frozen=True)
class RateLimit:
    interval: float
    """Seconds for one token to come back."""
    burst: int


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None
    users: dict[str, bytes]
    """User name to bcrypt hash; empty when basic auth is off."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Added to every response (http_server_config.headers)."""
    client_allowed_sans: frozenset[str] | None = None
    """When set, the verified client certificate must carry one of these SANs."""
    rate_limit: RateLimit | None = None


def load_web_config(path: str | Path | None) -> WebConfig:
    """The configuration as it is now (see WebConfigSource for one that follows the files)."""
    if path is None:
        return WebConfig(ssl_context=None, users={})
    path = Path(path)
    parsed = _parse(_read_limited(path, str(path)), str(path))
    return _build(parsed, _read_referenced(parsed, path), str(path))


def _read_limited(path: Path, where: str) -> bytes:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: {path} is larger than {MAX_FILE_BYTES // 1024} KiB")
    return data


def _parse(data: bytes, source: str) -> WebConfigFile:
    raw = load_yaml_bytes(data, source)
    try:
        parsed = WebConfigFile.model_validate(raw or {})
    except ValidationError as error:
        raise ConfigError(explain_validation_error(error, source, WebConfigFile)) from None
    _check(parsed, source)
    return parsed


def _check(parsed: WebConfigFile, source: str) -> None:
    """What the schema alone cannot say, each as one line naming the key."""
    tls = parsed.tls_server_config
    if tls is not None:
        where = f"{source}: tls_server_config"
        for inline, file in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
            if getattr(tls, inline) is not None and getattr(tls, file) is not None:
                raise ConfigError(f"{where}.{inline}: give {inline} (inline PEM) or {file}, not both")
        for inline, file in (("cert", "cert_file"), ("key", "key_file")):
            if not getattr(tls, inline) and not getattr(tls, file):
                raise ConfigError(f"{where}.{file}: required key is missing (or {inline}: inline PEM)")
        has_ca = bool(tls.client_ca or tls.client_ca_file)
        auth = _client_auth(tls)
        if auth in ("RequireAnyClientCert", "RequireClientCert"):
            raise ConfigError(
                f"{where}.client_auth_type: {auth} (a client certificate required but not verified) "
                "is not supported: Python's ssl module verifies every client certificate it requires; "
                f"expected one of: {_SUPPORTED_CLIENT_AUTH}"
            )
        if auth == "NoClientCert" and has_ca:
            raise ConfigError(
                f"{where}.client_auth_type: NoClientCert with a client CA; "
                "expected VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            )
        if _VERIFY_MODES[auth] != ssl.CERT_NONE and not has_ca:
            raise ConfigError(
                f"{where}.client_ca_file: {auth} needs client_ca_file (or client_ca: inline PEM)"
            )
        if tls.client_allowed_sans is not None and _VERIFY_MODES[auth] == ssl.CERT_NONE:
            raise ConfigError(
                f"{where}.client_allowed_sans: needs a verified client certificate; "
                "expected client_auth_type VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            )
        if _TLS_VERSIONS[tls.min_version] > _TLS_VERSIONS[tls.max_version]:
            raise ConfigError(
                f"{where}.min_version: {tls.min_version} is above max_version {tls.max_version}"
            )
        suites = tls.cipher_suites or []
        if suites and not any(_OPENSSL_CIPHERS[suite] for suite in suites) and tls.max_version != "TLS13":
            raise ConfigError(
                f"{where}.cipher_suites: no TLS 1.2 suite, and max_version is {tls.max_version}"
            )
    for name, value in parsed.http_server_config.headers.items():
        where = f"{source}: http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise ConfigError(f"{where}: cannot be configured; expected one of: {', '.join(_HEADERS)}")
        allowed = _HEADERS[name]
        if value and allowed and value not in allowed:
            raise ConfigError(f"{where}: expected one of: {', '.join(allowed)}, got {value!r}")
        if not value.isprintable():
            raise ConfigError(f"{where}: expected a header value without line breaks or control characters")


def _client_auth(tls: TLSServerConfig) -> str:
    if tls.client_auth_type is not None:
        return tls.client_auth_type
    return "RequireAndVerifyClientCert" if tls.client_ca or tls.client_ca_file else "NoClientCert"


def _read_referenced(parsed: WebConfigFile, path: Path) -> dict[str, bytes]:
    """The PEM contents the configuration uses, by key, read once so that what is loaded is what
    was compared when looking for changes."""
    tls = parsed.tls_server_config
    if tls is None:
        return {}
    contents: dict[str, bytes] = {}
    for key in ("cert", "key", "client_ca"):
        inline, file = getattr(tls, key), getattr(tls, f"{key}_file")
        if inline:
            contents[key] = inline.encode()
        elif file:
            contents[key] = _read_limited(path.parent / file, f"{path}: tls_server_config.{key}_file")
    return contents


def _build(parsed: WebConfigFile, contents: Mapping[str, bytes], source: str) -> WebConfig:
    tls = parsed.tls_server_config
    users = {user: hashed.encode() for user, hashed in parsed.basic_auth_users.items()}
    limit = parsed.rate_limit
    return WebConfig(
        ssl_context=None if tls is None else _ssl_context(tls, contents, source),
        users=users,
        headers={name: value for name, value in parsed.http_server_config.headers.items() if value},
        client_allowed_sans=(
            None if tls is None or tls.client_allowed_sans is None else frozenset(tls.client_allowed_sans)
        ),
        rate_limit=RateLimit(limit.interval, limit.burst) if limit.interval > 0 else None,
    )


class _EncryptedKeyError(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal, and a reload would hang on it.
    raise _EncryptedKeyError


def _ssl_context(tls: TLSServerConfig, contents: Mapping[str, bytes], source: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    where = f"{source}: tls_server_config"
    with warnings.catch_warnings():
        # TLS 1.0 and 1.1 are deprecated in Python too; the file asks for them explicitly.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = _TLS_VERSIONS[tls.min_version]
        context.maximum_version = _TLS_VERSIONS[tls.max_version]
    cert_key = "cert" if tls.cert else "cert_file"
    key_key = "key" if tls.key else "key_file"
    try:
        with _pem_file(contents["cert"]) as cert, _pem_file(contents["key"]) as key:
            context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKeyError:
        raise ConfigError(f"{where}.{key_key}: the key is encrypted; expected an unencrypted key") from None
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"{where}.{cert_key}/{key_key}: cannot load the certificate and key: {_reason(error)}"
        ) from None
    auth = _client_auth(tls)
    context.verify_mode = _VERIFY_MODES[auth]
    if context.verify_mode != ssl.CERT_NONE:
        ca_key = "client_ca" if tls.client_ca else "client_ca_file"
        try:
            context.load_verify_locations(cadata=contents["client_ca"].decode("ascii"))
        except (ValueError, ssl.SSLError) as error:
            raise ConfigError(f"{where}.{ca_key}: cannot load the client CA: {_reason(error)}") from None
    suites = [name for suite in tls.cipher_suites or [] if (name := _OPENSSL_CIPHERS[suite])]
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError as error:
            raise ConfigError(
                f"{where}.cipher_suites: this OpenSSL offers none of them: {_reason(error)}"
            ) from None
    elif tls.cipher_suites:
        # Only TLS 1.3 suites listed: as in Go, TLS 1.2 then has no suite to offer.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        _prefer_curve(context, tls.curve_preferences, where)
    return context


def _prefer_curve(context: ssl.SSLContext, preferences: list[Curve], where: str) -> None:
    """The most preferred curve that this Python can set. Python's ssl module sets one curve only,
    and some builds (Debian 12's Python 3.11.2) cannot set X25519 through it although OpenSSL
    offers it: the next listed curve is taken then, and the file is refused only when none can."""
    reasons = []
    for curve in preferences:
        try:
            context.set_ecdh_curve(_OPENSSL_CURVES[curve])
        except (ValueError, ssl.SSLError) as error:
            reasons.append(f"{curve}: {_reason(error)}")
            continue
        return
    raise ConfigError(f"{where}.curve_preferences: none can be offered here ({'; '.join(reasons)})")


def _reason(error: Exception) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return error.reason.lower().replace("_", " ")
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


@contextlib.contextmanager
def _pem_file(data: bytes) -> Iterator[str]:
    """A path to `data` for OpenSSL, which loads certificates and keys from files only: an
    in-memory file where Linux has them, so that an inline key never touches a disk."""
    if hasattr(os, "memfd_create"):
        descriptor = os.memfd_create("virtcap-pem", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            yield f"/proc/self/fd/{descriptor}"
        finally:
            os.close(descriptor)
        return
    with tempfile.TemporaryDirectory(prefix="virtcap-pem-") as directory:
        path = Path(directory) / "pem"
        path.write_bytes(data)
        path.chmod(0o600)
        yield str(path)


class TokenBucket:
    """exporter-toolkit's rate limit: `burst` requests at once, then one more per `interval`."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._updated = time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        elapsed, self._updated = now - self._updated, now
        self._tokens = min(float(self.limit.burst), self._tokens + elapsed / self.limit.interval)
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class _ReloadingContext(ssl.SSLContext):
    """The context the listening socket is given once. It never sets up a connection itself: each
    new connection is set up by the newest good context instead, so that every setting (the
    certificate, the client CA, verification, protocol versions, ciphers) follows the file.

    A context switched in an sni_callback would not do: OpenSSL then takes the new certificate and
    CA store but keeps the verification mode and protocol versions of the first context.
    """

    source: WebConfigSource

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.source.connection_context().wrap_bio(
            incoming, outgoing, server_side, server_hostname, session
        )

    def wrap_socket(  # noqa: PLR0917  (ssl.SSLContext.wrap_socket's parameters, positional as there)
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self.source.connection_context().wrap_socket(
            sock, server_side, do_handshake_on_connect, suppress_ragged_eofs, server_hostname, session
        )


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
            self._config = _build(parsed, contents, str(self.path))
        self._checked = time.monotonic()
        self.readers = BasicAuth(self._config.users, realm="virtcap", pool=bcrypt_pool)
        self._limiter = None if self._config.rate_limit is None else TokenBucket(self._config.rate_limit)
        self.ssl_context: ssl.SSLContext | None = None
        """For the listening socket: the same object for the server's lifetime."""
        if self._config.ssl_context is not None:
            front = _ReloadingContext(ssl.PROTOCOL_TLS_SERVER)
            front.source = self
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
            config = _build(parsed, contents, str(self.path))
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
        data = _read_limited(path, source)
        if data != self._parsed_from:
            # Parsed again only when the file changed: validating the hashes costs a bcrypt each.
            try:
                self._parsed = _parse(data, source)
            except ConfigError as error:
                self._parsed = str(error)
            self._parsed_from = data
        if isinstance(self._parsed, str):
            raise ConfigError(self._parsed)
        contents = _read_referenced(self._parsed, path)
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
        when bcrypt is saturated) for the requests `readers_skip` does not exempt."""

        @web.middleware
        async def web_config(request: web.Request, handler: Handler) -> web.StreamResponse:
            config = self.current()
            if self._limiter is not None and not self._limiter.allow():
                await _drain(request)
                return web.Response(status=429, text="Too Many Requests\n")
            if config.client_allowed_sans is not None and not peer_has_san(
                request, config.client_allowed_sans
            ):
                await _drain(request)
                return web.Response(
                    status=403, text="Forbidden: the client certificate carries none of the allowed SANs\n"
                )
            if config.users and not readers_skip(request):
                refused = await self.readers.refusal(request.headers.get("Authorization"))
                if refused is not None:
                    await _drain(request)
                    return refused
            return await handler(request)

        return web_config

    async def add_headers(self, _request: web.Request, response: web.StreamResponse) -> None:
        """http_server_config.headers on every response; a handler's own value wins, as in Go."""
        for name, value in self.current().headers.items():
            response.headers.setdefault(name, value)


async def _drain(request: web.Request) -> None:
    """Read a little of an unread body, so that the client sees the refusal and not a reset."""
    if not request.body_exists:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_DRAIN_SECONDS):
            await request.content.read(_DRAIN_BYTES)


def peer_has_san(request: web.Request, allowed: frozenset[str]) -> bool:
    """Whether the client's verified certificate carries an allowed SAN: a DNS name, e-mail
    address, IP address or URI written as Go writes them, compared exactly as exporter-toolkit does."""
    transport = request.transport
    ssl_object = None if transport is None else transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return False
    certificate = ssl_object.getpeercert()
    if not certificate:
        return False
    for kind, value in _subject_alt_names(certificate):
        if kind == "IP Address":
            try:
                written = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        elif kind in ("DNS", "email", "URI"):
            written = value
        else:
            continue
        if written in allowed:
            return True
    return False


def _subject_alt_names(certificate: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    entries = certificate.get("subjectAltName", ())
    if isinstance(entries, tuple):
        for entry in entries:
            if isinstance(entry, tuple) and len(entry) == 2:  # noqa: PLR2004  (a (type, value) pair)
                yield str(entry[0]), str(entry[1])
