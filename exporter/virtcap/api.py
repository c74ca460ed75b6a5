"""The claims and capacity HTTP API under /api/v1, described by openapi.py."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, Self
from uuid import UUID

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from virtcap.claims import (
    ANY_HYPERVISOR,
    Claim,
    ClaimLedger,
    ClaimRejectedError,
    ClaimRequest,
    UnknownHypervisorError,
)
from virtcap.config import ClaimSettings, Duration, Size, explain_validation_error
from virtcap.model import RESOURCES, amounts
from virtcap.openapi import OPENAPI
from virtcap.report import fleet_document
from virtcap.store import SnapshotStore

MAX_BODY_BYTES = 16 * 1024


class ClaimBody(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hypervisor: str = Field(min_length=1, max_length=253)
    vcpu: int = Field(default=0, ge=0, le=1_000_000, strict=True)
    pcpu: int = Field(default=0, ge=0, le=1_000_000, strict=True)
    memory: Size = 0
    disk: Size = 0
    ttl: Duration | None = None
    domain_uuid: UUID | None = None
    owner: str = Field(default="", max_length=256)

    @model_validator(mode="after")
    def _asks_for_something(self) -> Self:
        if not (self.vcpu or self.pcpu or self.memory or self.disk):
            raise ValueError("a claim asks for at least one of vcpu, pcpu, memory, disk")
        return self


def claim_document(claim: Claim) -> dict[str, Any]:
    return {
        "id": claim.id,
        "hypervisor": claim.hypervisor,
        **{resource.value: claim.amounts.get(resource, 0) for resource in RESOURCES},
        "created_at": _iso(claim.created_at),
        "expires_at": _iso(claim.expires_at),
        "domain_uuid": claim.domain_uuid,
        "owner": claim.owner,
    }


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _error(status: type[web.HTTPException], message: str, **extra: Any) -> web.HTTPException:
    return status(text=json.dumps({"error": message, **extra}), content_type="application/json")


def _ledger(request: web.Request) -> ClaimLedger:
    ledger: ClaimLedger = request.app["claims"]
    return ledger


async def create_claim(request: web.Request) -> web.Response:
    ledger = _ledger(request)
    settings: ClaimSettings = ledger.settings
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise _error(web.HTTPBadRequest, f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        document = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _error(web.HTTPBadRequest, f"the body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise _error(web.HTTPBadRequest, "the body must be a JSON object")
    try:
        body = ClaimBody.model_validate(document)
    except ValidationError as error:
        lines = explain_validation_error(error, "body", ClaimBody).splitlines()
        raise _error(web.HTTPBadRequest, "; ".join(line.removeprefix("body: ") for line in lines)) from None
    ttl = body.ttl if body.ttl is not None else settings.default_ttl
    if ttl > settings.max_ttl:
        raise _error(web.HTTPBadRequest, f"ttl: at most {settings.max_ttl:g}s (claims.max_ttl), got {ttl:g}s")
    claim_request = ClaimRequest(
        hypervisor=body.hypervisor,
        amounts=amounts(vcpu=body.vcpu, pcpu=body.pcpu, memory=body.memory, disk=body.disk),
        ttl=ttl,
        domain_uuid=str(body.domain_uuid) if body.domain_uuid is not None else None,
        owner=body.owner,
    )
    try:
        claim = await ledger.create(claim_request)
    except UnknownHypervisorError:
        raise _error(
            web.HTTPBadRequest,
            f"hypervisor: unknown hypervisor {body.hypervisor!r}; "
            f"expected a configured name or {ANY_HYPERVISOR!r}",
        ) from None
    except ClaimRejectedError as rejected:
        raise _error(web.HTTPConflict, str(rejected), reasons=rejected.reasons) from None
    return web.json_response(
        claim_document(claim), status=201, headers={"Location": f"/api/v1/claims/{claim.id}"}
    )


async def list_claims(request: web.Request) -> web.Response:
    claims = sorted(_ledger(request).claims.values(), key=lambda claim: claim.created_at)
    return web.json_response({"claims": [claim_document(claim) for claim in claims]})


async def get_claim(request: web.Request) -> web.Response:
    claim = _ledger(request).claims.get(request.match_info["claim_id"])
    if claim is None:
        raise _error(web.HTTPNotFound, "no such claim (it may have been reconciled, expired or deleted)")
    return web.json_response(claim_document(claim))


async def delete_claim(request: web.Request) -> web.Response:
    claim = await _ledger(request).delete(request.match_info["claim_id"])
    if claim is None:
        raise _error(web.HTTPNotFound, "no such claim (it may have been reconciled, expired or deleted)")
    return web.json_response(claim_document(claim))


async def capacity(request: web.Request) -> web.Response:
    """The same document as `virtcap audit --format json`, from the live snapshots."""
    store: SnapshotStore = request.app["store"]
    snapshots = [state.latest for state in store.hypervisors.values() if state.latest is not None]
    document = fleet_document(snapshots)
    document["generated_at"] = _iso(time.time())
    return web.json_response(document)


async def openapi(_request: web.Request) -> web.Response:
    return web.json_response(OPENAPI)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/claims", create_claim)
    app.router.add_get("/api/v1/claims", list_claims)
    app.router.add_get("/api/v1/claims/{claim_id}", get_claim)
    app.router.add_delete("/api/v1/claims/{claim_id}", delete_claim)
    app.router.add_get("/api/v1/capacity", capacity)
    app.router.add_get("/api/v1/openapi.json", openapi)
