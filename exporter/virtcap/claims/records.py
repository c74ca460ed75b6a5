"""A claim as the ledger holds it and the database stores it."""

from __future__ import annotations

from dataclasses import dataclass

from virtcap.model.capacity import Amounts


@dataclass(frozen=True, slots=True)
class Claim:
    id: str
    hypervisor: str
    amounts: Amounts
    created_at: float
    expires_at: float
    domain_uuid: str | None
    owner: str


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    hypervisor: str
    amounts: Amounts
    ttl: float
    domain_uuid: str | None
    owner: str
