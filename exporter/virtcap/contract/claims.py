"""The claims resource: `POST /api/v1/claims`'s body and the documents of the claims held."""

from __future__ import annotations

from typing import Annotated, Any, Self
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, Strict, WithJsonSchema, field_validator, model_validator

from virtcap.config.schema import MAX_EXTRA_SPECS, MAX_NAME_CHARS, ExtraSpecText
from virtcap.contract.fields import DATE_TIME, MAX_CPUS, ZoneName
from virtcap.contract.quantities import Duration, Size, not_zero
from virtcap.fleet.claim_records import MAX_CLAIM_COUNT, Claim
from virtcap.fleet.scheduling import claim_within
from virtcap.model.host_fit import within_host
from virtcap.model.nova import extra_spec_problems, flavor_request
from virtcap.model.resources import (
    CUSTOM_CLASS,
    STANDARD_CLASSES,
    Resource,
    display_order,
    placement_units,
    resource_class,
)
from virtcap.units import MAX_SIZE, brief_repr, format_utc

MAX_CLASSES = 64
"""The most classes `resources` names in one claim."""
_UUID = {"type": "string", "format": "uuid"}


def largest_claim_amount(resource: Resource) -> int:
    """The largest amount of a class one claim asks for, in Placement's unit: what the database
    stores, once in bytes, and no more cpus than MAX_CPUS."""
    largest = MAX_SIZE // resource.placement_unit
    return min(largest, MAX_CPUS) if resource.unit == "cpus" else largest


def _amount_schema(resource: Resource | None) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 0,
        "maximum": largest_claim_amount(resource) if resource else MAX_SIZE,
    }


def _resources_schema() -> dict[str, Any]:
    names = "|".join([*(r.placement_class for r in STANDARD_CLASSES), CUSTOM_CLASS.pattern])
    return {
        "type": "object",
        "maxProperties": MAX_CLASSES,
        # (?![\s\S]) ends the name: Python's $ would also match before a final newline.
        "propertyNames": {"pattern": f"^(?:{names})(?![\\s\\S])"},
        "properties": {r.placement_class: _amount_schema(r) for r in STANDARD_CLASSES},
        "additionalProperties": _amount_schema(None),
        "default": {},
    }


_STANDARD_FIELDS = ", ".join(r.label for r in STANDARD_CLASSES)
_PLACEMENT_UNITS = ", ".join(
    f"{r.placement_class} in {r.claim_unit if r.unit == 'bytes' else r.unit}" for r in STANDARD_CLASSES
)


def _claim_rules(schema: dict[str, Any]) -> None:
    """What ClaimBody's model validator checks, said in JSON Schema: at least one class asked for
    (a size with a digit other than 0 is not 0) or a flavor named, no class both as a field and in
    resources, nothing asked for beside a flavor, extra specs beside vcpu (at least 1) but
    neither pcpu nor resources, and no domain UUID beside a count above 1."""
    asks: list[dict[str, Any]] = [
        {
            "required": [r.label],
            "properties": {
                r.label: {"minimum": 1} if r.unit == "cpus" else {"not": {"const": 0}, "pattern": not_zero()}
            },
        }
        for r in STANDARD_CLASSES
    ]
    asks.append(
        {
            "required": ["resources"],
            "properties": {"resources": {"not": {"additionalProperties": {"const": 0}}}},
        }
    )
    asks.append(_NAMES_A_FLAVOR)
    schema["anyOf"] = asks
    rules: list[dict[str, Any]] = [
        {
            "not": {
                "required": [r.label, "resources"],
                "properties": {"resources": {"required": [r.placement_class]}},
            }
        }
        for r in STANDARD_CLASSES
    ]
    rules.extend(
        {"not": {"required": ["flavor", name], "properties": _NAMES_A_FLAVOR["properties"]}}
        for name in _NOT_BESIDE_A_FLAVOR
    )
    rules.append(
        {
            "if": {"required": ["extra_specs"], "properties": {"extra_specs": {"minProperties": 1}}},
            "then": {
                "required": ["vcpu"],
                "properties": {"vcpu": {"minimum": 1}},
                "not": {"anyOf": [{"required": [name]} for name in _NOT_BESIDE_EXTRA_SPECS]},
            },
        }
    )
    rules.append(
        {
            "not": {
                "required": ["count", "domain_uuid"],
                "properties": {"count": {"minimum": 2}, "domain_uuid": {"type": "string"}},
            }
        }
    )
    schema["allOf"] = rules


_NAMES_A_FLAVOR: dict[str, Any] = {"required": ["flavor"], "properties": {"flavor": {"type": "string"}}}
_NOT_BESIDE_A_FLAVOR = (*(r.label for r in STANDARD_CLASSES), "resources", "extra_specs")
"""What a claim naming a flavor does not say: the flavor says it."""
_NOT_BESIDE_EXTRA_SPECS = ("pcpu", "resources")
"""What a claim carrying extra specs does not say: the extra specs say it, as in a Nova flavor."""


ResourceAmounts = Annotated[dict[str, Annotated[int, Strict()]], WithJsonSchema(_resources_schema())]
"""Placement class name to a whole amount in Placement's unit: the names checked before the
amounts, each amount within its class's bounds (`most`)."""


class ClaimBody(BaseModel):
    """A claim: capacity to reserve on a hypervisor for a build in flight, until its domain appears,
    its TTL passes or it is deleted. It asks for at least one class, each named once: `vcpu`,
    `pcpu`, `memory`, `disk`, or any class in `resources`; or for what one instance of a
    configured `flavor` asks for; `count` instances of it, all or nothing. Counts and amounts are
    JSON integers written without a fraction or an exponent (2, not 2.0: JSON Schema cannot tell
    them apart)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_claim_rules)

    hypervisor: str = Field(
        min_length=1,
        max_length=253,
        description="A configured hypervisor, where every instance is held; or `any`: Nova's scheduler "
        "simulated places the instances, one by one, exactly as `POST /api/v1/placements` would "
        "(the same filters, `scheduler.weighers` multipliers and ties by name; a hypervisor down or "
        "with stale data takes none).",
    )
    count: int = Field(
        default=1,
        ge=1,
        le=MAX_CLAIM_COUNT,
        strict=True,
        description="How many instances of what the claim asks for, all or nothing (Nova's "
        "min_count = max_count): each placed after the ones before it took their share, held "
        "together in one claim and released together. No `domain_uuid` beside a count above 1.",
    )
    vcpu: int = Field(default=0, ge=0, le=MAX_CPUS, strict=True, description="VCPU: shared cpus.")
    pcpu: int = Field(default=0, ge=0, le=MAX_CPUS, strict=True, description="PCPU: dedicated cpus.")
    memory: Size = Field(default=0, description="MEMORY_MB, in bytes; a partial MiB counts as a whole one.")
    disk: Size = Field(default=0, description="DISK_GB, in bytes; a partial GiB counts as a whole one.")
    resources: ResourceAmounts = Field(
        default_factory=dict,
        description=f"Any class by Placement's name, with a whole amount in Placement's unit "
        f"({_PLACEMENT_UNITS}, CUSTOM_* classes in a plain count), such as "
        f'{{"CUSTOM_FPGA": 1, "VCPU": 2, "MEMORY_MB": 4096}}; at most {MAX_CLASSES} classes. A class '
        f"named here is not also one of {_STANDARD_FIELDS}.",
    )
    flavor: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_CHARS,
        description="A configured flavor (or one discovered in the fleet's Nova metadata): the claim "
        "asks for what one instance of it asks for, its "
        "Placement request (summed into one allocation, as every claim is) and, with its extra specs, "
        f"its share of the NUMA cells and devices. Nothing is asked for beside it: none of "
        f"{_STANDARD_FIELDS}, resources or extra_specs.",
    )
    extra_specs: dict[ExtraSpecText, ExtraSpecText] = Field(
        default_factory=dict,
        max_length=MAX_EXTRA_SPECS,
        description="Nova's flavor extra specs, for a flavor of `vcpu` (at least 1), `memory` and "
        "`disk` made up for the claim: it asks for what Nova's scheduler would ask Placement for "
        "(`hw:cpu_policy: dedicated` makes the vCPUs PCPU, `resources:CLASS` adds a class, ...) and is "
        "held in the NUMA cells and devices they ask for (`hw:numa_nodes`, `hw:mem_page_size`, "
        "`pci_passthrough:alias` of a configured alias, ...). Specs Nova's API would refuse are "
        f"refused. Not beside `pcpu` or `resources`: the extra specs say them. At most "
        f"{MAX_EXTRA_SPECS} keys.",
    )
    availability_zone: ZoneName | None = Field(
        default=None,
        description="Only hypervisors of this availability zone (the configuration's `groups`) take "
        "the instances, as Nova keeps an instance created in a zone; a named hypervisor outside it "
        "refuses them. Any hypervisor when absent or null.",
    )
    ttl: Duration | None = Field(
        default=None,
        description="How long the claim is held unless its domain appears, such as 15m; "
        "claims.default_ttl when absent or null, at most claims.max_ttl.",
    )
    domain_uuid: UUID | None = Field(
        default=None,
        description="The UUID the domain will have: when an audit finds it, the claim is released.",
    )
    owner: str = Field(default="", max_length=256, description="Free text: who or what holds the claim.")

    @field_validator("resources", mode="before")
    @classmethod
    def _known_classes(cls, value: object) -> object:
        if isinstance(value, dict):
            if len(value) > MAX_CLASSES:
                raise ValueError(f"expected at most {MAX_CLASSES} classes, got {len(value)}")
            for name in value:
                if isinstance(name, str):
                    resource_class(name)  # its ValueError names the classes there are
        return value

    @field_validator("resources")
    @classmethod
    def _within_bounds(cls, value: dict[str, int]) -> dict[str, int]:
        for name, amount in value.items():
            largest = largest_claim_amount(resource_class(name))
            if not 0 <= amount <= largest:
                raise ValueError(
                    f"{name}: expected a whole number from 0 to {largest}, got {brief_repr(amount)}"
                )
        return value

    @model_validator(mode="after")
    def _asks_for_something(self) -> Self:
        if self.count > 1 and self.domain_uuid is not None:
            raise ValueError(
                "domain_uuid: a domain UUID names one domain; expected none beside a count above 1"
            )
        if self.flavor is not None:
            beside = [name for name in _NOT_BESIDE_A_FLAVOR if name in self.model_fields_set]
            if beside:
                raise ValueError(
                    f"flavor: the flavor says what the claim asks for; expected none of "
                    f"{', '.join(beside)} beside it"
                )
            return self
        if self.extra_specs:
            self._check_extra_specs()
        for resource in STANDARD_CLASSES:
            if resource.label in self.model_fields_set and resource.placement_class in self.resources:
                raise ValueError(
                    f"{resource.label} and resources.{resource.placement_class} ask for the same class: "
                    "name it once"
                )
        if not self.amounts():
            raise ValueError(
                f"a claim asks for at least one of {_STANDARD_FIELDS} or a class in resources, "
                "or names a flavor"
            )
        return self

    def _check_extra_specs(self) -> None:
        beside = [name for name in _NOT_BESIDE_EXTRA_SPECS if name in self.model_fields_set]
        if beside:
            raise ValueError(
                f"extra_specs: the extra specs say what {' and '.join(beside)} would, as in a Nova "
                f"flavor (vcpu with hw:cpu_policy: dedicated, resources:CLASS); expected no "
                f"{' or '.join(beside)} beside them"
            )
        if self.vcpu < 1:
            raise ValueError(
                "extra_specs: a flavor has at least one vCPU; expected vcpu of at least 1 beside them"
            )
        problems = extra_spec_problems(self.vcpu, self.extra_specs)
        if problems:
            raise ValueError(f"extra_specs: {'; '.join(problems)}")
        try:
            within = within_host(self.vcpu, self.memory, self.extra_specs)
        except ValueError as error:
            raise ValueError(f"extra_specs: {error}") from None
        if claim_within(self.amounts(), self.extra_specs) != within:
            raise ValueError(
                "extra_specs: resources:VCPU, resources:PCPU or resources:MEMORY_MB ask Placement for "
                "other vCPUs or memory than the NUMA topology they ask for, which a claim cannot hold "
                "apart; expected them only without a NUMA topology"
            )

    def amounts(self) -> dict[Resource, int]:
        """What the claim asks for, in each class's unit (cpus, bytes, a count): none of zero.
        With extra specs, what Nova's scheduler asks Placement for, its groups summed; nothing
        for a flavor, which the configuration knows."""
        if self.flavor is not None:
            return {}
        if self.extra_specs:
            request = flavor_request("claim", self.vcpu, self.memory, self.disk, self.extra_specs)
            return {resource: amount for resource, amount in request.items() if amount}
        asked: dict[Resource, int] = {r: getattr(self, r.label) for r in STANDARD_CLASSES}
        for name, amount in self.resources.items():
            resource = resource_class(name)
            asked[resource] = amount * resource.placement_unit
        return {resource: amount for resource, amount in asked.items() if amount}


class ClaimDocument(BaseModel):
    """A claim held."""

    model_config = ConfigDict(frozen=True)

    id: Annotated[str, WithJsonSchema(_UUID)]
    hypervisor: str = Field(
        description="Where the claim is held (the one chosen, for `any`); for more than one "
        "instance, where the first is (see `hypervisors`)."
    )
    vcpu: int = Field(description="VCPU, in cpus (per instance).")
    pcpu: int = Field(description="PCPU, in cpus (per instance).")
    memory: int = Field(description="MEMORY_MB, in bytes (per instance).")
    disk: int = Field(description="DISK_GB, in bytes (per instance).")
    resources: dict[str, int] = Field(
        description="Every class one instance holds, by Placement's name, in Placement's unit "
        f"({_PLACEMENT_UNITS}, CUSTOM_* classes in a plain count); no class of 0."
    )
    created_at: Annotated[str, WithJsonSchema(DATE_TIME)]
    expires_at: Annotated[str, WithJsonSchema(DATE_TIME)]
    domain_uuid: Annotated[str | None, WithJsonSchema({"anyOf": [_UUID, {"type": "null"}]})]
    owner: str
    flavor: str | None = Field(description="The configured flavor the claim named; null when it named none.")
    extra_specs: dict[str, str] = Field(
        description="The extra specs the claim is held by in the NUMA cells and devices, its flavor's "
        "or its own; empty when it has none."
    )
    count: int = Field(description="How many instances the claim holds (1 unless it asked for more).")
    hypervisors: list[str] = Field(
        description="Per instance, in the order they were placed, the hypervisor it is held on: "
        "`count` names, the first `hypervisor`."
    )
    created_by: str | None = Field(
        description="The writer (claims.writers) that created the claim: only it, or one of "
        "claims.admins, may delete it (another writer's DELETE answers 403). null for a claim made "
        "before claims recorded their writer, which any writer may delete."
    )

    @classmethod
    def of(cls, claim: Claim) -> ClaimDocument:
        amounts = claim.amounts
        held = [resource for resource in display_order(amounts) if amounts[resource]]
        return cls(
            id=claim.id,
            hypervisor=claim.hypervisor,
            **{r.label: amounts.get(r, 0) for r in STANDARD_CLASSES},
            resources={r.placement_class: placement_units(r, amounts[r]) for r in held},
            created_at=format_utc(claim.created_at),
            expires_at=format_utc(claim.expires_at),
            domain_uuid=claim.domain_uuid,
            owner=claim.owner,
            flavor=claim.flavor,
            extra_specs=dict(claim.extra_specs),
            count=claim.count,
            hypervisors=list(claim.hypervisors),
            created_by=claim.created_by,
        )


class ClaimList(BaseModel):
    claims: list[ClaimDocument] = Field(description="Every pending claim, oldest first.")
