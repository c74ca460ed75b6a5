"""The OpenAPI description of /api/v1, served at /api/v1/openapi.json; a test keeps it in step
with the routes the server really has."""

from __future__ import annotations

from typing import Any

from virtcap import __version__
from virtcap.units import MAX_SIZE

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "reasons": {
            "type": "object",
            "description": "Per hypervisor, every failing resource in Nova's words.",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
}
_SIZE = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_SIZE},
        {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?\\s*(B|KiB|MiB|GiB|TiB)?$"},
    ],
    "description": "Bytes, or a number with an IEC suffix such as 4GiB; at most 2^63-1 bytes.",
}
_CLAIM = {
    "type": "object",
    "required": ["id", "hypervisor", "vcpu", "pcpu", "memory", "disk", "created_at", "expires_at", "owner"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "hypervisor": {"type": "string"},
        "vcpu": {"type": "integer"},
        "pcpu": {"type": "integer"},
        "memory": {"type": "integer", "description": "bytes"},
        "disk": {"type": "integer", "description": "bytes"},
        "created_at": {"type": "string", "format": "date-time"},
        "expires_at": {"type": "string", "format": "date-time"},
        "domain_uuid": {"type": ["string", "null"], "format": "uuid"},
        "owner": {"type": "string"},
    },
}
_CLAIM_REQUEST = {
    "type": "object",
    "additionalProperties": False,
    "required": ["hypervisor"],
    "properties": {
        "hypervisor": {
            "type": "string",
            "description": "A configured hypervisor, or `any` to let virtcap place the claim.",
        },
        "vcpu": {"type": "integer", "minimum": 0},
        "pcpu": {"type": "integer", "minimum": 0},
        "memory": _SIZE,
        "disk": _SIZE,
        "ttl": {
            "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}],
            "description": "How long the claim is held unless reconciled, such as 15m (claims.default_ttl).",
        },
        "domain_uuid": {
            "type": "string",
            "format": "uuid",
            "description": "The UUID the domain will have: when an audit finds it, the claim is released.",
        },
        "owner": {"type": "string", "maxLength": 256},
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_NOT_FOUND = _json(_ERROR, "No such claim (reconciled, expired or deleted).")
_UNAUTHORIZED = {"description": "Missing or wrong credentials."}
_UNAVAILABLE = {
    **_json(_ERROR, "The claims database refuses writes (read-only, full, failing): nothing changed."),
    "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}},
}
_CLAIM_ID = {"name": "claim_id", "in": "path", "required": True, "schema": {"type": "string"}}

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "virtcap",
        "version": __version__,
        "description": "Claims reserve capacity for builds in flight; capacity is the live fleet report.",
    },
    "components": {
        "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
        "schemas": {"Claim": _CLAIM, "ClaimRequest": _CLAIM_REQUEST, "Error": _ERROR},
    },
    "paths": {
        "/api/v1/claims": {
            "post": {
                "summary": "Claim capacity on a hypervisor (Nova's claim test, atomically).",
                "security": [{"basic": []}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ClaimRequest"}}
                    },
                },
                "responses": {
                    "201": _json({"$ref": "#/components/schemas/Claim"}, "The claim is held."),
                    "400": _json(
                        _ERROR,
                        "The request is malformed (not JSON, NaN or Infinity, nested, out of range)"
                        " or names an unknown hypervisor.",
                    ),
                    "401": _UNAUTHORIZED,
                    "408": _json(_ERROR, "The body did not arrive within 5 seconds of the headers."),
                    "409": _json(_ERROR, "The claim does not fit; every failing resource is given."),
                    "413": _json(_ERROR, "The body is larger than 16 KiB."),
                    "503": _UNAVAILABLE,
                },
            },
            "get": {
                "summary": "The pending claims.",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "claims": {"type": "array", "items": {"$ref": "#/components/schemas/Claim"}}
                            },
                        },
                        "Every pending claim, oldest first.",
                    )
                },
            },
        },
        "/api/v1/claims/{claim_id}": {
            "parameters": [_CLAIM_ID],
            "get": {
                "summary": "One pending claim.",
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/Claim"}, "The claim."),
                    "404": _NOT_FOUND,
                },
            },
            "delete": {
                "summary": "Release a claim.",
                "security": [{"basic": []}],
                "responses": {
                    "200": _json({"$ref": "#/components/schemas/Claim"}, "The released claim."),
                    "401": _UNAUTHORIZED,
                    "404": _NOT_FOUND,
                    "503": _UNAVAILABLE,
                },
            },
        },
        "/api/v1/capacity": {
            "get": {
                "summary": "The fleet's capacity, as `virtcap audit --format json` prints it.",
                "responses": {"200": _json({"type": "object"}, "The capacity report.")},
            }
        },
        "/api/v1/openapi.json": {
            "get": {
                "summary": "This description.",
                "responses": {"200": _json({"type": "object"}, "The OpenAPI document.")},
            }
        },
    },
}
