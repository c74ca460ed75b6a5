"""The plans resource: `POST /api/v1/plans/consolidation`, the consolidation plan as a dry run
(virtcap.model.packing.consolidation). Its body, read here for the API and for
`virtcap plan consolidate` alike, and its answer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from virtcap.config.errors import explain_validation_error
from virtcap.contract.fields import ZoneName
from virtcap.model.packing.consolidation import MAX_MOVES, ConsolidationPlan

MAX_EXCLUDED_HOSTS = 1000
"""The most names `exclude_hosts` holds."""
MAX_KEEP_FREE = 100_000
"""The largest `keep_free` read at all: a fleet's size is checked once the fleet is known."""
_HostName = Annotated[str, Field(min_length=1, max_length=253)]


class ConsolidationBody(BaseModel):
    """A consolidation plan: which hypervisors live migrations could empty, and the moves, each
    feasible at its step under the scheduler's rules. Nothing is held or moved."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_moves: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MOVES,
        strict=True,
        description="At most this many moves (whole hypervisors only: the plan empties fewer); "
        "no bound when absent or null.",
    )
    keep_free: int = Field(
        default=0,
        ge=0,
        le=MAX_KEEP_FREE,
        strict=True,
        description="Empty this many hypervisors fewer than the plan could, as failover room; at most "
        "the hypervisors in scope.",
    )
    availability_zone: ZoneName | None = Field(
        default=None,
        description="Only this availability zone's hypervisors (the configuration's `groups`) are "
        "emptied or filled; the whole fleet when absent or null.",
    )
    exclude_hosts: list[_HostName] = Field(
        default_factory=list,
        max_length=MAX_EXCLUDED_HOSTS,
        description="Configured hypervisors neither emptied nor filled.",
    )


class PlanError(ValueError):
    """A plan that cannot be made: a malformed body, or options the fleet does not have (an unknown
    hypervisor or zone, more hypervisors kept free than there are). One line, a 400, starting
    with the body's key where the problem is one key's (`max_moves: ...`)."""


def parse_consolidation_body(document: dict[str, Any]) -> ConsolidationBody:
    """ConsolidationBody, its errors in one line as the API gives them."""
    try:
        return ConsolidationBody.model_validate(document)
    except ValidationError as error:
        lines = explain_validation_error(error, "body", ConsolidationBody).splitlines()
        raise PlanError(
            "; ".join(line.removeprefix("body: ").removeprefix("(top level): ") for line in lines)
        ) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise PlanError(f"the body is not a valid plan request: {error}") from None


class PlannedMove(BaseModel):
    """One live migration of the plan, feasible with every move before it carried out."""

    model_config = ConfigDict(populate_by_name=True)

    domain: str = Field(description="The domain's UUID (its name where the UUID is not known).")
    name: str = Field(description="The domain's name.")
    source: str = Field(alias="from", description="The hypervisor it leaves (emptied by the plan).")
    destination: str = Field(alias="to", description="The hypervisor it moves to (kept by the plan).")
    resources: dict[str, int] = Field(
        description="What it is allocated, per resource class (`vcpu`, `memory`...), in the class's "
        "unit as the capacity document gives `free` (bytes for memory and disk)."
    )


class UnmovableDomain(BaseModel):
    """A domain that kept its hypervisor from being emptied."""

    model_config = ConfigDict(populate_by_name=True)

    domain: str = Field(description="The domain's UUID (its name where the UUID is not known).")
    name: str = Field(description="The domain's name.")
    source: str = Field(alias="from", description="Its hypervisor, which the plan keeps.")
    reason: str = Field(
        description="Why no hypervisor the plan keeps took it: how many hypervisors each filter "
        "refused, and the first one's reason, in the scheduler's words."
    )


class ConsolidationAnswer(BaseModel):
    """The plan: what the scheduler would do if the `emptied` hypervisors were disabled and their
    domains live-migrated in order. Advisory: virtcap never moves a domain."""

    hypervisors_before: int = Field(
        description="Eligible hypervisors in scope (up, fresh data, not in maintenance) holding domains."
    )
    hypervisors_after: int = Field(description="The same once the plan is carried out.")
    emptied: list[str] = Field(description="The hypervisors the plan empties, in the order it empties them.")
    moves: list[PlannedMove] = Field(description="The live migrations, in order.")
    unmovable: list[UnmovableDomain] = Field(
        description="The domains that kept a hypervisor from being emptied, found while searching."
    )
    complete: bool = Field(
        description="False where the time limit cut the search short: the plan is valid, maybe not "
        "the one emptying the most."
    )

    @classmethod
    def of(cls, plan: ConsolidationPlan) -> ConsolidationAnswer:
        return cls.model_validate(plan.as_json())

    def as_json(self) -> str:
        """The answer as the API sends it and `--format json` prints it."""
        return self.model_dump_json(by_alias=True, indent=2) + "\n"
