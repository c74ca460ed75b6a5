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
and the certificates it names are re-read while serving (`access.WebConfigSource`): a rotated
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

The file is read and judged here only (against webconfig_schema.py), at startup as on every
re-read, so that a bad file is refused the same way (one line naming its key) whenever it comes;
what a good one says is applied by tls.py (the TLS contexts), ratelimit.py and access.py (each
request).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from virtcap.config import ConfigError, explain_validation_error
from virtcap.config.yamlfile import MAX_FILE_BYTES, load_yaml_bytes
from virtcap.web.ratelimit import RateLimit
from virtcap.web.tls import OPENSSL_CIPHERS, TLS_VERSIONS, VERIFY_MODES, server_context
from virtcap.web.webconfig_schema import WebConfigFile

_SUPPORTED_CLIENT_AUTH = (
    "NoClientCert, RequestClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
)

_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
"""The headers exporter-toolkit lets a web config set, and their allowed values (() for any)."""


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
    """The configuration as it is now (see access.WebConfigSource for one that follows the files)."""
    if path is None:
        return WebConfig(ssl_context=None, users={})
    path = Path(path)
    parsed = parse_web_config(read_limited(path, str(path)), str(path))
    return build_web_config(parsed, read_referenced(parsed, path), str(path))


def read_limited(path: Path, where: str) -> bytes:
    """The bytes of the file or of a PEM file it names, at most MAX_FILE_BYTES: a path pointing at
    something huge (or endless) is refused rather than read."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read {path}: {error.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{where}: {path} is larger than {MAX_FILE_BYTES // 1024} KiB")
    return data


def parse_web_config(data: bytes, source: str) -> WebConfigFile:
    """The file's contents validated and checked; a ConfigError of one line otherwise."""
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
        auth = tls.client_auth()
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
        if VERIFY_MODES[auth] != ssl.CERT_NONE and not has_ca:
            raise ConfigError(
                f"{where}.client_ca_file: {auth} needs client_ca_file (or client_ca: inline PEM)"
            )
        if tls.client_allowed_sans is not None and VERIFY_MODES[auth] == ssl.CERT_NONE:
            raise ConfigError(
                f"{where}.client_allowed_sans: needs a verified client certificate; "
                "expected client_auth_type VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            )
        if TLS_VERSIONS[tls.min_version] > TLS_VERSIONS[tls.max_version]:
            raise ConfigError(
                f"{where}.min_version: {tls.min_version} is above max_version {tls.max_version}"
            )
        suites = tls.cipher_suites or []
        if suites and not any(OPENSSL_CIPHERS[suite] for suite in suites) and tls.max_version != "TLS13":
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


def read_referenced(parsed: WebConfigFile, path: Path) -> dict[str, bytes]:
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
            contents[key] = read_limited(path.parent / file, f"{path}: tls_server_config.{key}_file")
    return contents


def build_web_config(parsed: WebConfigFile, contents: Mapping[str, bytes], source: str) -> WebConfig:
    """What a checked file and the PEM contents read for it (read_referenced) configure."""
    tls = parsed.tls_server_config
    users = {user: hashed.encode() for user, hashed in parsed.basic_auth_users.items()}
    limit = parsed.rate_limit
    return WebConfig(
        ssl_context=None if tls is None else server_context(tls, contents, source),
        users=users,
        headers={name: value for name, value in parsed.http_server_config.headers.items() if value},
        client_allowed_sans=(
            None if tls is None or tls.client_allowed_sans is None else frozenset(tls.client_allowed_sans)
        ),
        rate_limit=RateLimit(limit.interval, limit.burst) if limit.interval > 0 else None,
    )
