"""The placements resource: `POST /api/v1/placements`, a dry run of Nova's scheduler. Its body,
read here for the API and for `virtcap place` alike, and its answer."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from virtcap.config.errors import explain_validation_error
from virtcap.config.schema import MAX_EXTRA_SPECS, MAX_NAME_CHARS, ExtraSpecText
from virtcap.contract.fields import MAX_CPUS, ZoneName
from virtcap.contract.quantities import Size
from virtcap.model.host_fit import Demand, within_host
from virtcap.model.nova import extra_spec_problems, flavor_request

MAX_PLACEMENT_COUNT = 1000
"""The most instances one dry-run placement asks for."""
MAX_PLACEMENT_HOSTS = 1000
"""The most names `ignore_hosts` or `force_hosts` hold."""
_HostName = Annotated[str, Field(min_length=1, max_length=253)]


def _flavor_kind(value: object) -> str:
    """A placement's flavor is an object (made up for the request) or else a configured one's name:
    its errors are then the one kind's, not both kinds' of a plain union."""
    return "object" if isinstance(value, dict | PlacementFlavor) else "name"


def placement_body_error(error: ValidationError) -> str:
    """The body's problems in one line, as the claims API gives them; the flavor's kind (its
    union tag) left out of the keys."""
    lines = explain_validation_error(error, "body", PlacementBody).splitlines()
    parts = []
    for line in lines:
        part = line.removeprefix("body: ").removeprefix("(top level): ")
        for tag in ("name", "object"):
            part = part.replace(f"flavor.{tag}.", "flavor.").replace(f"flavor.{tag}:", "flavor:")
        if part.startswith("flavor.") and part.endswith("; expected one of: "):  # behind the tag
            part += ", ".join(PlacementFlavor.model_fields)
        parts.append(part)
    return "; ".join(parts)


class PlacementFlavor(BaseModel):
    """A flavor made up for the request, as Nova's API would take it: `vcpu` (at least 1), `memory`,
    `disk` and extra specs read as Nova's scheduler reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vcpu: int = Field(ge=1, le=MAX_CPUS, strict=True, description="The flavor's vCPUs.")
    memory: Size = Field(description="The flavor's memory, in bytes or with a suffix such as 8GiB.")
    disk: Size = Field(default=0, description="The flavor's root disk, in bytes or with a suffix.")
    extra_specs: dict[ExtraSpecText, ExtraSpecText] = Field(
        default_factory=dict,
        max_length=MAX_EXTRA_SPECS,
        description="Nova's flavor extra specs (`hw:cpu_policy`, `hw:numa_nodes`, "
        "`pci_passthrough:alias` of a configured alias, `resources:CLASS`, ...); specs Nova's API "
        f"would refuse are refused. At most {MAX_EXTRA_SPECS} keys.",
    )

    @model_validator(mode="after")
    def _nova_would_take_it(self) -> Self:
        problems = extra_spec_problems(self.vcpu, self.extra_specs)
        if problems:
            raise ValueError(f"extra_specs: {'; '.join(problems)}")
        try:
            within_host(self.vcpu, self.memory, self.extra_specs)
        except ValueError as error:
            raise ValueError(f"extra_specs: {error}") from None
        if not self.memory:
            raise ValueError("memory: a flavor has memory; expected a size above 0")
        return self

    def demand(self) -> Demand:
        """What one instance asks for: Placement's request and the NUMA cells and devices."""
        request = flavor_request("placement", self.vcpu, self.memory, self.disk, self.extra_specs)
        return Demand(request, within_host(self.vcpu, self.memory, self.extra_specs))


class PlacementBody(BaseModel):
    """A dry-run placement: where `count` instances of a flavor would land if Nova's scheduler
    placed them now, one by one, all or nothing. Nothing is held."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flavor: Annotated[
        Annotated[Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)], Tag("name")]
        | Annotated[PlacementFlavor, Tag("object")],
        Discriminator(_flavor_kind),
    ] = Field(
        description="A configured flavor by name (or one discovered in the fleet's Nova metadata), or a "
        "flavor made up for the request."
    )
    count: int = Field(
        default=1, ge=1, le=MAX_PLACEMENT_COUNT, strict=True, description="How many instances."
    )
    ignore_hosts: list[_HostName] = Field(
        default_factory=list,
        max_length=MAX_PLACEMENT_HOSTS,
        description="Hypervisors never chosen (Nova's `ignore_hosts`), matched without regard to case.",
    )
    force_hosts: list[_HostName] = Field(
        default_factory=list,
        max_length=MAX_PLACEMENT_HOSTS,
        description="Only the first is tried (Nova's `force_hosts`); an unknown one is Nova's "
        "'No such host'.",
    )
    anti_affinity: bool = Field(
        default=False,
        strict=True,
        description="At most one instance per hypervisor (an anti-affinity group).",
    )
    availability_zone: ZoneName | None = Field(
        default=None,
        description="Only hypervisors of this availability zone (the configuration's `groups`) take "
        "the instances (Nova's `availability_zone` of a server create); any when absent or null.",
    )


class PlacementError(ValueError):
    """A dry run that cannot be answered: a body that is malformed, or names what the configuration
    does not have (a flavor, a PCI alias). One line, a 400."""


def parse_placement_body(document: dict[str, Any]) -> PlacementBody:
    """PlacementBody, its errors in one line as the API gives them."""
    try:
        return PlacementBody.model_validate(document)
    except ValidationError as error:
        raise PlacementError(placement_body_error(error)) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise PlacementError(f"the body is not a valid placement: {error}") from None


class PlacementRejection(BaseModel):
    """Why a hypervisor did not take the next instance."""

    filter: str = Field(
        description="The first test that refused it: ignore_hosts, force_hosts, ComputeFilter, "
        "Placement, NUMATopologyFilter, PciPassthroughFilter or ServerGroupAntiAffinityFilter."
    )
    reasons: list[str] = Field(description="Every reason it gave, such as `Free memory ... < requested ...`.")


class PlacementStep(BaseModel):
    """One instance placed (tentatively when not all fit)."""

    hypervisor: str
    weight: float = Field(description="Its weight at this step: the sum of the weighers' parts.")
    weights: dict[str, float] = Field(description="Per weigher (ram, cpu, disk): normalized x multiplier.")
    candidates: int = Field(description="How many hypervisors were weighed at this step.")


class PlacementAnswer(BaseModel):
    """Where the instances would land, or why they would not."""

    requested: int = Field(description="How many instances were asked for.")
    fitted: int = Field(
        description="How many would have been placed, one by one, before the first that found no host."
    )
    placed: list[str] = Field(
        description="Per instance, the hypervisor it lands on; empty when not all fit (all or nothing)."
    )
    unplaced: int = Field(description="requested - fitted.")
    no_valid_host: str | None = Field(description="Nova's NoValidHost message; null when all fit.")
    rejections: dict[str, PlacementRejection] = Field(
        description="Per hypervisor that did not take the last instance tried (the first that found "
        "no host, when not all fit), which filter refused it and why."
    )
    steps: list[PlacementStep] = Field(description="Each instance that found a hypervisor, in order.")
