"""The claims and capacity HTTP API under /api/v1, described by openapi.py."""

from __future__ import annotations

import asyncio
import json
import math
import time
from datetime import UTC, datetime
from typing import Any, Self
from uuid import UUID

from aiohttp import hdrs, web, web_urldispatcher
from aiohttp.http import HttpVersion11
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from virtcap.claims.ledger import (
    ANY_HYPERVISOR,
    Claim,
    ClaimLedger,
    ClaimRejectedError,
    ClaimRequest,
    ClaimStorageError,
    UnknownHypervisorError,
)
from virtcap.config import ClaimSettings, Duration, Size, explain_validation_error
from virtcap.exposition.report import fleet_document
from virtcap.model.capacity import RESOURCES, amounts
from virtcap.service.store import SnapshotStore
from virtcap.web.openapi import OPENAPI

MAX_BODY_BYTES = 16 * 1024
BODY_TIMEOUT_SECONDS = 5.0
"""How long a claim body may take to arrive once the headers are in: a client that stalls is
answered 408 rather than holding a connection and a handler for ever."""
MAX_BODY_DEPTH = 8
"""A claim is a flat object: deeper JSON is refused, whatever the recursion limit allows."""
STORAGE_RETRY_AFTER_SECONDS = 10


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


def _error(
    status: type[web.HTTPException], message: str, headers: dict[str, str] | None = None, **extra: Any
) -> web.HTTPException:
    return status(
        text=json.dumps({"error": message, **extra}), content_type="application/json", headers=headers
    )


def _too_large(limit: int) -> web.HTTPException:
    return web.HTTPRequestEntityTooLarge(
        limit,
        text=json.dumps({"error": f"the body is larger than {limit} bytes"}),
        content_type="application/json",
    )


def _unavailable(error: ClaimStorageError) -> web.HTTPException:
    return _error(
        web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)}
    )


def _ledger(request: web.Request) -> ClaimLedger:
    ledger: ClaimLedger = request.app["claims"]
    return ledger


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, however it arrives (in pieces, chunked), within a bound of size and time.

    `request.content.read(n)` returns what has arrived so far, which may be a part of the body.
    """
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise _error(
            web.HTTPRequestTimeout, f"the body did not arrive within {BODY_TIMEOUT_SECONDS:g}s"
        ) from None
    except HttpProcessingError as error:  # a broken chunked encoding, a body cut short
        raise _error(web.HTTPBadRequest, f"the body could not be read: {error.message}") from None
    except web.RequestPayloadError as error:  # a Content-Encoding that does not decode
        raise _error(web.HTTPBadRequest, f"the body could not be read: {error}") from None
    return b"".join(chunks)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text[:40]} is out of range for a number")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json(raw: bytes) -> Any:
    """Strict JSON: no NaN or Infinity (Python's json accepts them), no number that overflows to
    infinity, and no nesting deeper than MAX_BODY_DEPTH."""
    try:
        document = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise _error(web.HTTPBadRequest, "the body is not JSON we accept: nested too deeply") from None
    except ValueError as error:  # also JSONDecodeError, UnicodeDecodeError and over-long integers
        raise _error(web.HTTPBadRequest, f"the body is not JSON: {error}") from None
    if _depth(document) > MAX_BODY_DEPTH:
        raise _error(web.HTTPBadRequest, "the body is not JSON we accept: nested too deeply")
    return document


def _depth(document: Any) -> int:
    deepest = 0
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            pending.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            pending.extend((child, depth + 1) for child in value)
    return deepest


async def create_claim(request: web.Request) -> web.Response:
    ledger = _ledger(request)
    settings: ClaimSettings = ledger.settings
    document = parse_json(await read_body(request))
    if not isinstance(document, dict):
        raise _error(web.HTTPBadRequest, "the body must be a JSON object")
    try:
        body = ClaimBody.model_validate(document)
    except ValidationError as error:
        lines = explain_validation_error(error, "body", ClaimBody).splitlines()
        raise _error(web.HTTPBadRequest, "; ".join(line.removeprefix("body: ") for line in lines)) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise _error(web.HTTPBadRequest, f"the body is not a valid claim: {error}") from None
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
    except ClaimStorageError as error:
        raise _unavailable(error) from None
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
    try:
        claim = await _ledger(request).delete(request.match_info["claim_id"])
    except ClaimStorageError as error:
        raise _unavailable(error) from None
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


async def expect_continue(request: web.Request) -> None:
    """aiohttp's default, without echoing the value: its 417 repeats an unknown Expect header, and
    one that is not UTF-8 cannot be encoded into the answer, a 500."""
    if request.version != HttpVersion11:
        return
    if request.headers.get(hdrs.EXPECT, "").lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own size starts after the interim one
    else:
        raise web.HTTPExpectationFailed(text="unknown Expect header: only 100-continue is known\n")


# aiohttp answers 500 to an Expect header that is not UTF-8 (its default handler echoes the value),
# and runs the Expect handler before any middleware, for 404 and 405 answers too (routes it makes
# per request): so the default every route takes is replaced, before any route is made. The HTTP
# robustness tests fail if a release of aiohttp stops using it.
web_urldispatcher._default_expect_handler = expect_continue


def add_routes(app: web.Application) -> None:
    router = app.router
    router.add_post("/api/v1/claims", create_claim)
    router.add_get("/api/v1/claims", list_claims)
    router.add_get("/api/v1/claims/{claim_id}", get_claim)
    router.add_delete("/api/v1/claims/{claim_id}", delete_claim)
    router.add_get("/api/v1/capacity", capacity)
    router.add_get("/api/v1/openapi.json", openapi)
