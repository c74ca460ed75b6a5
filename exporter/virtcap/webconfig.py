"""`--web.config.file` in the exporter-toolkit format: TLS, mutual TLS and basic auth users.

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_ca_file: ca.crt                        # optional: ask clients for certificates
      client_auth_type: RequireAndVerifyClientCert  # default when client_ca_file is set
    basic_auth_users:
      prometheus: $2y$10$...                        # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')

Relative paths are relative to the file, as in exporter-toolkit.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from virtcap.config import ConfigError, explain_validation_error

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
_VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Strict):
    cert_file: str = Field(min_length=1)
    key_file: str = Field(min_length=1)
    client_ca_file: str | None = None
    client_auth_type: ClientAuth | None = None

    @model_validator(mode="after")
    def _ca_when_verifying(self) -> Self:
        if (
            self.client_auth_type in ("RequireAndVerifyClientCert", "VerifyClientCertIfGiven")
            and not self.client_ca_file
        ):
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        return self


class WebConfigFile(_Strict):
    tls_server_config: TLSServerConfig | None = None
    basic_auth_users: dict[str, str] = {}

    @model_validator(mode="after")
    def _bcrypt_hashes(self) -> Self:
        for user, hashed in self.basic_auth_users.items():
            if not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise ValueError(f"basic_auth_users.{user}: expected a bcrypt hash ($2y$...), not a password")
        return self


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None
    users: dict[str, bytes]
    """User name to bcrypt hash; empty when basic auth is off."""


def load_web_config(path: str | Path | None) -> WebConfig:
    if path is None:
        return WebConfig(ssl_context=None, users={})
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML: {error}") from None
    try:
        parsed = WebConfigFile.model_validate(raw or {})
    except ValidationError as error:
        raise ConfigError(explain_validation_error(error, str(path), WebConfigFile)) from None
    context = (
        _ssl_context(parsed.tls_server_config, path.parent, str(path)) if parsed.tls_server_config else None
    )
    users = {user: hashed.encode() for user, hashed in parsed.basic_auth_users.items()}
    return WebConfig(ssl_context=context, users=users)


def _ssl_context(tls: TLSServerConfig, base: Path, source: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = base / tls.cert_file, base / tls.key_file
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"{source}: tls_server_config.cert_file/key_file: cannot load {cert} and {key}: {error}"
        ) from None
    auth = tls.client_auth_type or ("RequireAndVerifyClientCert" if tls.client_ca_file else "NoClientCert")
    context.verify_mode = _VERIFY_MODES[auth]
    if tls.client_ca_file:
        ca = base / tls.client_ca_file
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(
                f"{source}: tls_server_config.client_ca_file: cannot load {ca}: {error}"
            ) from None
    return context
