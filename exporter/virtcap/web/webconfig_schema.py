"""The schema of the web configuration file (`--web.config.file`), as exporter-toolkit reads it:
what each key takes. What the schema alone cannot say, and what a good file configures, are
webconfig.py's; the TLS section applied is tls.py's, which is why the schema stands apart from
both.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from virtcap.config.bcrypt_hash import BcryptHash
from virtcap.units import parse_duration

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "RequireClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]

TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]

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

Curve = Literal["CurveP256", "CurveP384", "CurveP521", "X25519"]


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

    def client_auth(self) -> str:
        """client_auth_type, or what it means when left out: verified certificates with a client CA."""
        if self.client_auth_type is not None:
            return self.client_auth_type
        return "RequireAndVerifyClientCert" if self.client_ca or self.client_ca_file else "NoClientCert"


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
