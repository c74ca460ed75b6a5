"""The maintenance resource: `PUT /api/v1/hypervisors/{name}/maintenance`'s body and the documents
of a hypervisor's maintenance, which each hypervisor of the capacity report carries too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema

from virtcap.config.schema import MAX_REASON_CHARS, parse_reason, parse_time
from virtcap.contract.fields import DATE_TIME
from virtcap.model.maintenance import Maintenance, maintenance_end, maintenance_reason
from virtcap.units import brief_repr, format_utc


def maintenance_document(entries: Sequence[Maintenance]) -> dict[str, Any]:
    """Whether the hypervisor is in maintenance, why (every entry in effect, the configuration's
    first), until when (null: until lifted), and each entry."""
    end = maintenance_end(entries)
    return {
        "in_maintenance": bool(entries),
        "reason": maintenance_reason(entries),
        "until": format_utc(end) if end is not None else None,
        "entries": [
            {
                "source": entry.source,
                "reason": entry.reason,
                "until": format_utc(entry.until) if entry.until is not None else None,
                "since": format_utc(entry.since) if entry.since is not None else None,
                "set_by": entry.set_by,
            }
            for entry in entries
        ],
    }


def _api_time(value: object) -> float | None:
    """An RFC 3339 time with its zone, which JSON can only carry as a string; null: none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected an RFC 3339 time with a time zone as a string, got {brief_repr(value)}")
    return parse_time(value)


class MaintenanceBody(BaseModel):
    """Put a hypervisor into maintenance: it offers nothing (no flavor fits, placements, claims
    and evacuations refuse it) until the maintenance is lifted or `until` passes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: Annotated[
        str,
        PlainValidator(parse_reason),
        WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_REASON_CHARS}),
    ] = Field(description="Why, in one line of printable text (shown to those refused).")
    until: Annotated[
        float | None,
        PlainValidator(_api_time),
        WithJsonSchema({"anyOf": [DATE_TIME, {"type": "null"}]}),
    ] = Field(
        default=None,
        description="When it ends by itself, an RFC 3339 time with a time zone (such as "
        "2026-11-23T18:00:00Z), in the future; absent or null: until it is lifted.",
    )


class MaintenanceEntry(BaseModel):
    """One source keeping the hypervisor in maintenance."""

    source: Literal["config", "api"] = Field(
        description="`config`: its entry in the configuration file (lifted only there); `api`: "
        "set through this API (persisted)."
    )
    reason: str | None = Field(
        description="Why; null for a configuration that says only `maintenance: true`."
    )
    until: Annotated[str | None, WithJsonSchema({"anyOf": [DATE_TIME, {"type": "null"}]})] = Field(
        description="When it ends by itself; null: until it is lifted."
    )
    since: Annotated[str | None, WithJsonSchema({"anyOf": [DATE_TIME, {"type": "null"}]})] = Field(
        description="When it started: when it was set through the API, or when the exporter first "
        "saw the configuration's in effect (kept in the claims database across restarts)."
    )
    set_by: str | None = Field(
        description="The writer who set it through the API; null for the configuration's."
    )


class MaintenanceState(BaseModel):
    """Whether a hypervisor is in maintenance: either source is enough."""

    in_maintenance: bool
    reason: str | None = Field(
        description="Every entry in effect with its end and source, the configuration's first; null "
        "when not in maintenance."
    )
    until: Annotated[str | None, WithJsonSchema({"anyOf": [DATE_TIME, {"type": "null"}]})] = Field(
        description="When the maintenance ends by itself: the last end when every entry has one; "
        "null when one lasts until lifted, or when not in maintenance."
    )
    entries: list[MaintenanceEntry] = Field(description="The entries in effect, the configuration's first.")


class MaintenanceDocument(MaintenanceState):
    """A hypervisor's maintenance."""

    hypervisor: str

    @classmethod
    def of(cls, hypervisor: str, entries: tuple[Maintenance, ...]) -> MaintenanceDocument:
        return cls(hypervisor=hypervisor, **maintenance_document(entries))


class MaintenanceList(BaseModel):
    hypervisors: list[MaintenanceDocument] = Field(
        description="The configured hypervisors in maintenance now, by name."
    )
