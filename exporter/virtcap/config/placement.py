"""`placement:`: the optional OpenStack Placement reader (service/placement.py), off by default.

Where Placement is (`endpoint`, or the Keystone catalog's `placement` service), how virtcap
authenticates (keystoneauth1: `auth.type` none, password, application_credential or token, each
secret read from a file or an environment variable, never written in the configuration), a CA
file, the requests' timeout, and how often the providers are read (`interval`, default the
audit interval). A secret is never logged nor shown in a label or an answer.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from virtcap.config.section import MAX_NAME_CHARS, MAX_PATH_CHARS, MAX_URI_CHARS, Duration

SECRET_NAMES = ("password", "application_credential_secret", "token")
"""The secrets: each from `<name>_file` or `<name>_env`, never written in the file."""
MAX_TIMEOUT_SECONDS = 300.0
NOAUTH_TOKEN = "admin"
"""What `auth.type: none` sends as X-Auth-Token: Placement's noauth2 middleware refuses a request
without one, and takes any (its own docs use `admin`)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlacementAuth(_Section):
    """How virtcap authenticates with Keystone (keystoneauth1's plugins), or `none` for a Placement
    served with `auth_strategy = noauth2`."""

    type: Literal["none", "password", "application_credential", "token"] = "none"
    auth_url: str | None = Field(default=None, min_length=1, max_length=MAX_URI_CHARS)
    """Keystone's identity endpoint (`https://keystone:5000/v3`); required but with `none`."""
    username: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    user_domain_name: str = Field(default="Default", min_length=1, max_length=MAX_NAME_CHARS)
    project_name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    project_domain_name: str = Field(default="Default", min_length=1, max_length=MAX_NAME_CHARS)
    application_credential_id: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    password_file: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)
    password_env: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    application_credential_secret_file: str | None = Field(
        default=None, min_length=1, max_length=MAX_PATH_CHARS
    )
    application_credential_secret_env: str | None = Field(
        default=None, min_length=1, max_length=MAX_NAME_CHARS
    )
    token_file: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)
    token_env: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)

    @model_validator(mode="after")
    def _complete(self) -> Self:
        needed: dict[str, tuple[str, ...]] = {
            "none": (),
            "password": ("auth_url", "username", "project_name", "password"),
            "application_credential": (
                "auth_url",
                "application_credential_id",
                "application_credential_secret",
            ),
            "token": ("auth_url", "project_name", "token"),
        }
        for key in needed[self.type]:
            if key in SECRET_NAMES:
                given = [s for s in (f"{key}_file", f"{key}_env") if getattr(self, s) is not None]
                if len(given) != 1:
                    raise ValueError(
                        f"auth.type {self.type} needs its {key} from exactly one of {key}_file and {key}_env"
                    )
            elif getattr(self, key) is None:
                raise ValueError(f"auth.type {self.type} needs {key}")
        for secret in SECRET_NAMES:
            if secret not in needed[self.type] and (
                getattr(self, f"{secret}_file") is not None or getattr(self, f"{secret}_env") is not None
            ):
                raise ValueError(f"{secret}_file/{secret}_env: auth.type {self.type} reads no {secret}")
        return self


class PlacementSection(_Section):
    """The Placement to reconcile with (docs/placement.md)."""

    endpoint: str | None = Field(default=None, min_length=1, max_length=MAX_URI_CHARS, pattern=r"^https?://")
    """Placement's URL (`https://placement:8778`); without it, the Keystone catalog's `placement`
    service (`interface`, `region_name`)."""
    auth: PlacementAuth = PlacementAuth()
    interface: Literal["public", "internal", "admin"] = "internal"
    region_name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    ca_file: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)
    timeout: Duration = Field(default=10.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    """Each request's: a Placement that does not answer within it is down for this round."""
    interval: Duration | None = Field(default=None, gt=0)
    """How often the providers are read; the audit interval when absent."""

    @model_validator(mode="after")
    def _reachable(self) -> Self:
        if self.endpoint is None and self.auth.type == "none":
            raise ValueError("expected endpoint (without Keystone there is no catalog to find Placement in)")
        return self
