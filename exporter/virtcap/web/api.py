"""The claims and capacity HTTP API under /api/v1: the handlers and their routes.

What the API reads and answers is virtcap.contract's (described by contract/openapi.py); how a body
is read is body.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from aiohttp import hdrs, web, web_urldispatcher
from aiohttp.http import HttpVersion11
from pydantic import ValidationError

from virtcap.claims.ledger import (
    ANY_HYPERVISOR,
    Claim,
    ClaimLedger,
    ClaimRejectedError,
    ClaimRequest,
    ClaimStorageError,
    NotClaimOwnerError,
    claim_within,
)
from virtcap.claims.maintenance_ledger import MaintenanceConflictError, UnknownHypervisorError
from virtcap.config import ClaimSettings, Config, explain_validation_error
from virtcap.contract.claims import ClaimBody, ClaimDocument, ClaimList
from virtcap.contract.maintenance import MaintenanceBody, MaintenanceDocument, MaintenanceList
from virtcap.contract.openapi import openapi_document
from virtcap.contract.placements import PlacementError, PlacementRejection, parse_placement_body
from virtcap.exposition.report import fleet_document
from virtcap.fleet.scheduling import fleet_entries
from virtcap.fleet.store import SnapshotStore
from virtcap.model.maintenance import Maintenance
from virtcap.model.pci import PCI_ALIAS_SPEC, alias_request_problem
from virtcap.model.resources import Resource
from virtcap.service.dryrun import dry_run
from virtcap.units import brief_repr, format_utc
from virtcap.web.auth import parse_basic_credentials
from virtcap.web.body import json_error, parse_json, read_body
from virtcap.web.exporter import EXPORTER
from virtcap.web.placement import PLACEMENT_DRIFT_PATH, placement_drift
from virtcap.web.plans import CONSOLIDATION_PATH, SCENARIOS_PATH, consolidation, scenarios
from virtcap.web.reclaim import RECLAIMABLE_PATH, reclaimable

STORAGE_RETRY_AFTER_SECONDS = 10
CLAIMS = web.AppKey("claims", ClaimLedger)
"""The application's claims ledger, which the API reads and changes."""
STORE = web.AppKey("store", SnapshotStore)
"""The application's snapshots, which the capacity document shows."""


def claim_document(claim: Claim) -> dict[str, Any]:
    document: dict[str, Any] = ClaimDocument.of(claim).model_dump(mode="json")
    return document


def _unavailable(error: ClaimStorageError) -> web.HTTPException:
    return json_error(
        web.HTTPServiceUnavailable, str(error), headers={"Retry-After": str(STORAGE_RETRY_AFTER_SECONDS)}
    )


def _ledger(request: web.Request) -> ClaimLedger:
    return request.app[CLAIMS]


def _writer(request: web.Request) -> str:
    """The writer making the change: the user of the credentials the writers' middleware let
    through (middleware.py), which it checked against claims.writers."""
    credentials = parse_basic_credentials(request.headers.get("Authorization"))
    return credentials[0].decode("utf-8", "replace") if credentials is not None else ""


async def create_claim(request: web.Request) -> web.Response:
    ledger = _ledger(request)
    settings: ClaimSettings = ledger.settings
    document = parse_json(await read_body(request))
    if not isinstance(document, dict):
        raise json_error(web.HTTPBadRequest, "the body must be a JSON object")
    try:
        # in a thread: reading extra specs builds a NUMA topology, as long as the vCPUs asked for
        body = await asyncio.to_thread(ClaimBody.model_validate, document)
    except ValidationError as error:
        lines = explain_validation_error(error, "body", ClaimBody).splitlines()
        # a rule across fields names its own: "(top level)" would say nothing more
        message = "; ".join(line.removeprefix("body: ").removeprefix("(top level): ") for line in lines)
        raise json_error(web.HTTPBadRequest, message) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise json_error(web.HTTPBadRequest, f"the body is not a valid claim: {error}") from None
    ttl = body.ttl if body.ttl is not None else settings.default_ttl
    if ttl > settings.max_ttl:
        message = f"ttl: at most {settings.max_ttl:g}s (claims.max_ttl), got {ttl:g}s"
        raise json_error(web.HTTPBadRequest, message)
    exporter = request.app[EXPORTER]
    # a flavor by name: a configured one, or one discovered in the fleet's Nova metadata
    amounts, extra_specs = await asyncio.to_thread(
        _asked, body, exporter.fleet.catalog.effective(exporter.config)
    )
    claim_request = ClaimRequest(
        hypervisor=body.hypervisor,
        amounts=amounts,
        ttl=ttl,
        domain_uuid=str(body.domain_uuid) if body.domain_uuid is not None else None,
        owner=body.owner,
        flavor=body.flavor,
        extra_specs=extra_specs,
        count=body.count,
        availability_zone=body.availability_zone,
        created_by=_writer(request),
    )
    config = request.app[EXPORTER].config
    try:
        claim = await ledger.create(
            claim_request, multipliers=config.multipliers, stale_after=config.audit.staleness_bound
        )
    except UnknownHypervisorError:
        elsewhere = config.shard_elsewhere(body.hypervisor)
        if elsewhere is not None:
            raise json_error(
                web.HTTPBadRequest, f"hypervisor: {body.hypervisor!r} is {config.not_here(body.hypervisor)}"
            ) from None
        raise json_error(
            web.HTTPBadRequest,
            f"hypervisor: unknown hypervisor {body.hypervisor!r}; "
            f"expected a configured name or {ANY_HYPERVISOR!r}",
        ) from None
    except ClaimRejectedError as rejected:
        rejections = {
            name: PlacementRejection(filter=rejection.filter, reasons=list(rejection.reasons))
            for name, rejection in sorted(rejected.rejections.items())
        }
        raise json_error(
            web.HTTPConflict,
            str(rejected),
            reasons=rejected.reasons,
            rejections=rejections,
            requested=rejected.requested,
            fitted=rejected.fitted,
        ) from None
    except ClaimStorageError as error:
        raise _unavailable(error) from None
    return web.json_response(
        claim_document(claim), status=201, headers={"Location": f"/api/v1/claims/{claim.id}"}
    )


def _asked(body: ClaimBody, config: Config) -> tuple[dict[Resource, int], dict[str, str]]:
    """What the claim asks for and the extra specs it is held by: a configured flavor's, or the
    body's own, their aliases checked against the running configuration's."""
    if body.flavor is None:
        _check_aliases(body.extra_specs, config)
        return body.amounts(), body.extra_specs
    flavor = next((flavor for flavor in config.flavors if flavor.name == body.flavor), None)
    if flavor is None:
        known = ", ".join(flavor.name for flavor in config.flavors) or "none (no flavor is configured)"
        raise json_error(
            web.HTTPBadRequest, f"flavor: unknown flavor {body.flavor!r}; expected one of: {known}"
        )
    amounts = {resource: amount for resource, amount in flavor.request.items() if amount}
    if not amounts:
        raise json_error(web.HTTPBadRequest, f"flavor: {body.flavor!r} asks for nothing")
    extra_specs = dict(flavor.extra_specs)
    if claim_within(amounts, extra_specs) != flavor.within:
        raise json_error(
            web.HTTPBadRequest,
            f"flavor: {body.flavor!r} asks Placement (resources:VCPU, resources:PCPU or "
            "resources:MEMORY_MB) for other vCPUs or memory than its NUMA topology, which a claim "
            "cannot hold apart",
        )
    return amounts, extra_specs


def _check_aliases(extra_specs: dict[str, str], config: Config) -> None:
    """`pci_passthrough:alias` names configured aliases, readably, as Nova's API requires of a
    flavor."""
    spec = extra_specs.get(PCI_ALIAS_SPEC)
    problem = None if spec is None else alias_request_problem(spec, config.pci_aliases)
    if problem is not None:
        raise json_error(web.HTTPBadRequest, f"extra_specs.{PCI_ALIAS_SPEC}: {problem}")


async def list_claims(request: web.Request) -> web.Response:
    claims = sorted(_ledger(request).claims.values(), key=lambda claim: claim.created_at)
    listing = ClaimList(claims=[ClaimDocument.of(claim) for claim in claims])
    return web.json_response(listing.model_dump(mode="json"))


async def get_claim(request: web.Request) -> web.Response:
    claim = _ledger(request).claims.get(request.match_info["claim_id"])
    if claim is None:
        raise json_error(web.HTTPNotFound, "no such claim (it may have been reconciled, expired or deleted)")
    return web.json_response(claim_document(claim))


async def delete_claim(request: web.Request) -> web.Response:
    try:
        claim = await _ledger(request).delete(request.match_info["claim_id"], _writer(request))
    except NotClaimOwnerError as error:
        raise json_error(web.HTTPForbidden, str(error)) from None
    except ClaimStorageError as error:
        raise _unavailable(error) from None
    if claim is None:
        raise json_error(web.HTTPNotFound, "no such claim (it may have been reconciled, expired or deleted)")
    return web.json_response(claim_document(claim))


async def capacity(request: web.Request) -> web.Response:
    """The same document as `virtcap audit --format json`, from the live snapshots and the
    failure tolerance last computed from them."""
    store = request.app[STORE]
    ledger = _ledger(request)
    now = time.time()
    snapshots = [
        # a failed audit's snapshot knows only the configuration's maintenance; an audited one
        # was recomputed with the API's when it changed
        state.latest
        if state.latest.up
        else replace(state.latest, maintenance=ledger.maintenance_of(state.name, now))
        for state in store.hypervisors.values()
        if state.latest is not None
    ]
    exporter = request.app[EXPORTER]
    catalog = exporter.fleet.catalog
    discovery = catalog.discovery if catalog.discover else None
    configured = [flavor.name for flavor in exporter.config.flavors]
    # built and encoded in a thread: a fleet's cells, pools and GPUs are no small document; with
    # the failure tolerance last computed in the background (each hypervisor's evacuation)
    document = await asyncio.to_thread(fleet_document, snapshots, store.tolerance, discovery, configured)
    document["generated_at"] = format_utc(time.time())
    body = await asyncio.to_thread(json.dumps, document)
    return web.Response(text=body, content_type="application/json")


async def placements(request: web.Request) -> web.Response:
    """A dry-run placement on the live snapshots, pending claims counted as usage: nothing is held."""
    document = parse_json(await read_body(request))
    if not isinstance(document, dict):
        raise json_error(web.HTTPBadRequest, "the body must be a JSON object")
    try:
        body = await asyncio.to_thread(parse_placement_body, document)
    except PlacementError as error:
        raise json_error(web.HTTPBadRequest, str(error)) from None
    exporter = request.app[EXPORTER]
    # taken on the event loop (the store and ledger are the loop's), scheduled in a thread
    fleet = fleet_entries(request.app[STORE], time.time(), exporter.config.audit.staleness_bound)
    claims = list(_ledger(request).claims.values())
    try:
        config = exporter.fleet.catalog.effective(exporter.config)  # discovered flavors by name too
        answer = await asyncio.to_thread(dry_run, config, body, fleet, claims)
    except PlacementError as error:
        raise json_error(web.HTTPBadRequest, str(error)) from None
    text = await asyncio.to_thread(answer.model_dump_json)
    return web.Response(text=text, content_type="application/json")


def _maintenance_answer(name: str, entries: tuple[Maintenance, ...]) -> web.Response:
    return web.json_response(MaintenanceDocument.of(name, entries).model_dump(mode="json"))


def _unknown_hypervisor(request: web.Request, name: str) -> web.HTTPException:
    why = request.app[EXPORTER].config.not_here(name)
    return json_error(web.HTTPNotFound, f"unknown hypervisor {brief_repr(name)}: {why}")


async def get_maintenance(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    ledger = _ledger(request)
    if name not in ledger.configured:
        raise _unknown_hypervisor(request, name)
    return _maintenance_answer(name, ledger.maintenance_of(name))


async def put_maintenance(request: web.Request) -> web.Response:
    """Into maintenance, at once: persisted, then its capacity recomputed before the answer;
    /metrics follows within a render's gap, the failure tolerance after its computation."""
    name = request.match_info["name"]
    ledger = _ledger(request)
    if name not in ledger.configured:
        raise _unknown_hypervisor(request, name)
    document = parse_json(await read_body(request))
    if not isinstance(document, dict):
        raise json_error(web.HTTPBadRequest, "the body must be a JSON object")
    try:
        body = MaintenanceBody.model_validate(document)
    except ValidationError as error:
        lines = explain_validation_error(error, "body", MaintenanceBody).splitlines()
        raise json_error(
            web.HTTPBadRequest, "; ".join(line.removeprefix("body: ") for line in lines)
        ) from None
    try:
        entries = await ledger.set_maintenance(name, body.reason, body.until, _writer(request))
    except UnknownHypervisorError:  # removed by a reload meanwhile
        raise _unknown_hypervisor(request, name) from None
    except ValueError as error:
        raise json_error(web.HTTPBadRequest, str(error)) from None
    except ClaimStorageError as error:
        raise _unavailable(error) from None
    return _maintenance_answer(name, entries)


async def delete_maintenance(request: web.Request) -> web.Response:
    """Out of the API's maintenance (none to lift is no error); the configuration's is lifted
    only in the configuration: 409."""
    name = request.match_info["name"]
    try:
        entries = await _ledger(request).release_maintenance(name)
    except UnknownHypervisorError:
        raise _unknown_hypervisor(request, name) from None
    except MaintenanceConflictError as error:
        raise json_error(web.HTTPConflict, str(error)) from None
    except ClaimStorageError as error:
        raise _unavailable(error) from None
    return _maintenance_answer(name, entries)


async def list_maintenance(request: web.Request) -> web.Response:
    found = _ledger(request).maintenance_now()
    listing = MaintenanceList(
        hypervisors=[MaintenanceDocument.of(name, entries) for name, entries in sorted(found.items())]
    )
    return web.json_response(listing.model_dump(mode="json"))


async def openapi(_request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


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
    router.add_post("/api/v1/placements", placements)
    router.add_post(CONSOLIDATION_PATH, consolidation)
    router.add_post(SCENARIOS_PATH, scenarios)
    router.add_get(RECLAIMABLE_PATH, reclaimable)
    router.add_get(PLACEMENT_DRIFT_PATH, placement_drift)
    router.add_get("/api/v1/maintenance", list_maintenance)
    router.add_get("/api/v1/hypervisors/{name}/maintenance", get_maintenance)
    router.add_put("/api/v1/hypervisors/{name}/maintenance", put_maintenance)
    router.add_delete("/api/v1/hypervisors/{name}/maintenance", delete_maintenance)
    router.add_get("/api/v1/openapi.json", openapi)
