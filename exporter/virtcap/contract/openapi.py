"""The OpenAPI 3.1 description of /api/v1, served at /api/v1/openapi.json.

Its schemas are generated from the models the API parses and answers with (this package's), so the
description cannot drift from the parser; the paths are written here, and a test keeps them in
step with the routes the server really has.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel

from virtcap import __version__
from virtcap.contract.bodies import BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES, ErrorBody
from virtcap.contract.capacity import CapacityDocument
from virtcap.contract.claims import ClaimBody, ClaimDocument, ClaimList
from virtcap.contract.maintenance import MaintenanceBody, MaintenanceDocument, MaintenanceList
from virtcap.contract.placement import PlacementDriftDocument
from virtcap.contract.placements import PlacementAnswer, PlacementBody
from virtcap.contract.plans import ConsolidationAnswer, ConsolidationBody
from virtcap.contract.reclaim import ReclaimableList
from virtcap.contract.scenarios import ScenarioAnswer, ScenarioDocument

REF_TEMPLATE = "#/components/schemas/{model}"
_MODELS: tuple[tuple[type[BaseModel], Literal["validation", "serialization"]], ...] = (
    (ClaimBody, "validation"),
    (ClaimDocument, "serialization"),
    (ClaimList, "serialization"),
    (ErrorBody, "serialization"),
    (CapacityDocument, "serialization"),
    (PlacementBody, "validation"),
    (PlacementAnswer, "serialization"),
    (ConsolidationBody, "validation"),
    (ConsolidationAnswer, "serialization"),
    (MaintenanceBody, "validation"),
    (MaintenanceDocument, "serialization"),
    (MaintenanceList, "serialization"),
    (ReclaimableList, "serialization"),
    (PlacementDriftDocument, "serialization"),
    (ScenarioDocument, "validation"),
    (ScenarioAnswer, "serialization"),
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF_TEMPLATE.format(model=model.__name__)}


def _json(model: type[BaseModel] | None, description: str) -> dict[str, Any]:
    schema = _ref(model) if model is not None else {"type": "object"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _schemas() -> dict[str, Any]:
    """Every model's JSON Schema, and the schemas they refer to, by name."""
    schemas: dict[str, Any] = {}
    for model, mode in _MODELS:
        schema = model.model_json_schema(ref_template=REF_TEMPLATE, mode=mode)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    return schemas


@cache
def openapi_document() -> dict[str, Any]:
    not_found = _json(ErrorBody, "No such claim (reconciled, expired or deleted).")
    unauthorized = {"description": "Missing or wrong credentials."}
    forbidden = {"description": "A reader's credentials (the web configuration's): changes need a writer's."}
    unavailable = {
        **_json(
            ErrorBody,
            "The claims database refuses writes (read-only, full, failing) or cannot be reached: "
            "nothing changed.",
        ),
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}},
    }
    claim_id = {"name": "claim_id", "in": "path", "required": True, "schema": {"type": "string"}}
    hypervisor = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    no_hypervisor = _json(ErrorBody, "No such hypervisor in the configuration.")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "virtcap",
            "version": __version__,
            "description": "Claims reserve capacity for builds in flight; capacity is the live fleet report.",
        },
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "schemas": _schemas(),
        },
        "paths": {
            "/api/v1/claims": {
                "post": {
                    "summary": "Claim capacity for `count` instances, all or nothing, atomically: on a "
                    "named hypervisor (Nova's claim test) or where the scheduler places them (`any`, "
                    "as a dry-run placement).",
                    "security": [{"basic": []}],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref(ClaimBody)}},
                    },
                    "responses": {
                        "201": _json(ClaimDocument, "The claim is held."),
                        "400": _json(
                            ErrorBody,
                            "The request is malformed (not JSON, NaN or Infinity, nested, out of range)"
                            " or names an unknown hypervisor or resource class.",
                        ),
                        "401": unauthorized,
                        "403": forbidden,
                        "408": _json(
                            ErrorBody,
                            f"The body did not arrive within {BODY_TIMEOUT_SECONDS:g} s of the headers.",
                        ),
                        "409": _json(
                            ErrorBody,
                            "The claim does not fit; nothing is held. Every failing resource is given "
                            "per hypervisor (`reasons`), with the filter that refused it (`rejections`).",
                        ),
                        "413": _json(ErrorBody, f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."),
                        "503": unavailable,
                    },
                },
                "get": {
                    "summary": "The pending claims.",
                    "responses": {"200": _json(ClaimList, "Every pending claim, oldest first.")},
                },
            },
            "/api/v1/claims/{claim_id}": {
                "parameters": [claim_id],
                "get": {
                    "summary": "One pending claim.",
                    "responses": {"200": _json(ClaimDocument, "The claim."), "404": not_found},
                },
                "delete": {
                    "summary": "Release a claim: the writer that created it (`created_by`), one of "
                    "`claims.admins`, or any writer for a claim without `created_by`.",
                    "security": [{"basic": []}],
                    "responses": {
                        "200": _json(ClaimDocument, "The released claim."),
                        "401": unauthorized,
                        "403": {
                            "description": "Another writer created the claim and this one is not in "
                            "`claims.admins` (an ErrorBody), or a reader's credentials: nothing was deleted."
                        },
                        "404": not_found,
                        "503": unavailable,
                    },
                },
            },
            "/api/v1/capacity": {
                "get": {
                    "summary": "The fleet's capacity, as `virtcap audit --format json` prints it.",
                    "responses": {"200": _json(CapacityDocument, "The capacity report.")},
                }
            },
            "/api/v1/placements": {
                "post": {
                    "summary": "Dry-run placement: where a batch of instances would land now, Nova's "
                    "scheduler simulated (filters, weighers, all or nothing); nothing is held.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref(PlacementBody)}},
                    },
                    "responses": {
                        "200": _json(
                            PlacementAnswer,
                            "Where each instance lands, or how many do not fit and why each "
                            "hypervisor refused (NoValidHost is a 200 too: the simulation succeeded).",
                        ),
                        "400": _json(
                            ErrorBody,
                            "The request is malformed or names an unknown flavor or PCI alias.",
                        ),
                        "401": unauthorized,
                        "408": _json(
                            ErrorBody,
                            f"The body did not arrive within {BODY_TIMEOUT_SECONDS:g} s of the headers.",
                        ),
                        "413": _json(ErrorBody, f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."),
                    },
                }
            },
            "/api/v1/plans/consolidation": {
                "post": {
                    "summary": "Consolidation plan: which hypervisors live migrations could empty, and the "
                    "moves in order, each feasible at its step (the scheduler's filters, weighers and "
                    "claim test, both hypervisors holding a migrating domain); nothing is held or moved. "
                    "Computed in a worker process, one plan at a time.",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref(ConsolidationBody)}},
                    },
                    "responses": {
                        "200": _json(
                            ConsolidationAnswer,
                            "The plan (emptying no hypervisor is a plan too), on the live audits with "
                            "the pending claims counted as usage.",
                        ),
                        "400": _json(
                            ErrorBody,
                            "The request is malformed or names an unknown hypervisor or availability "
                            "zone, or keeps more hypervisors free than there are in scope.",
                        ),
                        "401": unauthorized,
                        "408": _json(
                            ErrorBody,
                            f"The body did not arrive within {BODY_TIMEOUT_SECONDS:g} s of the headers.",
                        ),
                        "413": _json(ErrorBody, f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."),
                        "503": {
                            **_json(
                                ErrorBody,
                                "Another plan is being computed, or the planner's worker failed or "
                                "ran past its time limit: nothing was planned; ask again later.",
                            ),
                            "headers": {
                                "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}
                            },
                        },
                    },
                }
            },
            "/api/v1/plans/scenarios": {
                "post": {
                    "summary": "What-if scenario: the fleet's answers (schedulable and sellable instances, "
                    "failures tolerated, stranded capacity, compaction) before and after hypervisors "
                    "added, removed or drained, policies changed and demand placed through the simulated "
                    "scheduler; nothing is held or changed. Computed in the planner's worker process, one "
                    "plan at a time. Captures (`capture:`) are refused: describe added hardware with `sku`.",
                    "parameters": [
                        {
                            "name": "solve_for",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["add_hypervisors"]},
                            "description": "Find the fewest copies of the scenario's one `add_hypervisors` "
                            "entry that fit all the demand and keep the reserve.",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref(ScenarioDocument)}},
                    },
                    "responses": {
                        "200": _json(
                            ScenarioAnswer,
                            "The answers before and after, on the live audits with the pending claims "
                            "counted as usage, and what found no host.",
                        ),
                        "400": _json(
                            ErrorBody,
                            "The scenario is malformed or names what the fleet does not have (a "
                            "hypervisor, group, flavor or zone), or no count up to the bound fits.",
                        ),
                        "401": unauthorized,
                        "408": _json(
                            ErrorBody,
                            f"The body did not arrive within {BODY_TIMEOUT_SECONDS:g} s of the headers.",
                        ),
                        "413": _json(ErrorBody, f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."),
                        "503": {
                            **_json(
                                ErrorBody,
                                "Another plan is being computed, or the planner's worker failed or "
                                "ran past its time limit: nothing was computed; ask again later.",
                            ),
                            "headers": {
                                "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}
                            },
                        },
                    },
                }
            },
            "/api/v1/reclaimable": {
                "get": {
                    "summary": "The domains whose allocation could be taken back: shut off or idle for "
                    "longer than the configuration's `reclaim` windows, with what each holds.",
                    "responses": {
                        "200": _json(ReclaimableList, "By hypervisor and name, and totals per reason.")
                    },
                }
            },
            "/api/v1/placement/drift": {
                "get": {
                    "summary": "The last OpenStack Placement reconciliation (`placement:`): per hypervisor, "
                    "its provider's inventory drift, the orphaned consumers, unallocated domains and "
                    "mismatched allocations by UUID with their amounts, the usage drift and the "
                    "migrations excused. Placement is read in the background: this never waits for it.",
                    "parameters": [
                        {
                            "name": "hypervisor",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                            "description": "That hypervisor only (an unknown name lists none).",
                        }
                    ],
                    "responses": {
                        "200": _json(PlacementDriftDocument, "As of the last successful reading."),
                        "404": _json(ErrorBody, "This exporter does not read Placement (no `placement:`)."),
                        "503": {
                            **_json(
                                ErrorBody,
                                "Placement is not read: the first reading has not ended, or the last "
                                "one failed (why, in `error`).",
                            ),
                            "headers": {
                                "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}
                            },
                        },
                    },
                }
            },
            "/api/v1/maintenance": {
                "get": {
                    "summary": "The hypervisors in maintenance now (by the configuration or the API).",
                    "responses": {"200": _json(MaintenanceList, "Every hypervisor in maintenance, by name.")},
                }
            },
            "/api/v1/hypervisors/{name}/maintenance": {
                "parameters": [hypervisor],
                "get": {
                    "summary": "Whether the hypervisor is in maintenance, why and until when.",
                    "responses": {
                        "200": _json(MaintenanceDocument, "Its maintenance."),
                        "404": no_hypervisor,
                    },
                },
                "put": {
                    "summary": "Put the hypervisor into maintenance (again: the same body changes nothing): "
                    "it is still audited, but offers nothing; persisted, in effect at once.",
                    "security": [{"basic": []}],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref(MaintenanceBody)}},
                    },
                    "responses": {
                        "200": _json(MaintenanceDocument, "It is in maintenance."),
                        "400": _json(
                            ErrorBody, "The body is malformed: no reason, an unknown key, an `until` passed."
                        ),
                        "401": unauthorized,
                        "403": forbidden,
                        "404": no_hypervisor,
                        "408": _json(
                            ErrorBody,
                            f"The body did not arrive within {BODY_TIMEOUT_SECONDS:g} s of the headers.",
                        ),
                        "413": _json(ErrorBody, f"The body is larger than {MAX_BODY_BYTES // 1024} KiB."),
                        "503": unavailable,
                    },
                },
                "delete": {
                    "summary": "Lift the maintenance set through the API (none to lift is no error).",
                    "security": [{"basic": []}],
                    "responses": {
                        "200": _json(
                            MaintenanceDocument, "Its maintenance now (the configuration's may remain)."
                        ),
                        "401": unauthorized,
                        "403": forbidden,
                        "404": no_hypervisor,
                        "409": _json(
                            ErrorBody,
                            "The configuration keeps it in maintenance: only the configuration lifts that; "
                            "nothing changed.",
                        ),
                        "503": unavailable,
                    },
                },
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This description.",
                    "responses": {"200": _json(None, "The OpenAPI document.")},
                }
            },
        },
    }
