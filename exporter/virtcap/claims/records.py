"""A claim as the ledger holds it and the database stores it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from virtcap.model.resources import Amounts


@dataclass(frozen=True, slots=True)
class Claim:
    id: str
    hypervisor: str
    amounts: Amounts
    created_at: float
    expires_at: float
    domain_uuid: str | None
    owner: str
    flavor: str | None = None
    """The configured flavor the claim was made for, if it named one."""
    extra_specs: Mapping[str, str] = field(default_factory=dict)
    """A flavor's extra specs: where within the hypervisor (NUMA cells, devices) the claim is held."""


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    hypervisor: str
    amounts: Amounts
    ttl: float
    domain_uuid: str | None
    owner: str
    flavor: str | None = None
    extra_specs: Mapping[str, str] = field(default_factory=dict)
