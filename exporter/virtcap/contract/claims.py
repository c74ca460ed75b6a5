"""The claims API's documents as pydantic models: the request body it parses and the documents it
answers with. openapi.py generates the API's description from them, so the two cannot differ."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Strict,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from virtcap.claims.ledger import MAX_CLAIM_COUNT, Claim, claim_within
from virtcap.config.errors import explain_validation_error
from virtcap.config.schema import (
    MAX_EXTRA_SPECS,
    MAX_NAME_CHARS,
    MAX_REASON_CHARS,
    ExtraSpecText,
    parse_reason,
    parse_time,
)
from virtcap.contract.quantities import Duration, Size, not_zero
from virtcap.exposition.report import maintenance_document
from virtcap.model.maintenance import Maintenance
from virtcap.model.nova import extra_spec_problems, flavor_request
from virtcap.model.placement import Demand, within_host
from virtcap.model.resources import (
    CUSTOM_CLASS,
    STANDARD_CLASSES,
    Resource,
    display_order,
    placement_units,
    resource_class,
)
from virtcap.units import MAX_SIZE, brief_repr

MAX_CPUS = 1_000_000
"""The most cpus (VCPU, PCPU) one claim asks for."""
MAX_CLASSES = 64
"""The most classes `resources` names in one claim."""
_DATE_TIME = {"type": "string", "format": "date-time"}
_UUID = {"type": "string", "format": "uuid"}


def iso_time(timestamp: float) -> str:
    """`2024-05-01T12:00:00Z`: UTC, to the second."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


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


_ZoneName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
]
"""An availability zone, spelt as the configuration's group names are."""


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
    availability_zone: _ZoneName | None = Field(
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
    created_at: Annotated[str, WithJsonSchema(_DATE_TIME)]
    expires_at: Annotated[str, WithJsonSchema(_DATE_TIME)]
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
            created_at=iso_time(claim.created_at),
            expires_at=iso_time(claim.expires_at),
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


class PlacementRejection(BaseModel):
    """Why a hypervisor did not take the next instance."""

    filter: str = Field(
        description="The first test that refused it: ignore_hosts, force_hosts, ComputeFilter, "
        "Placement, NUMATopologyFilter, PciPassthroughFilter or ServerGroupAntiAffinityFilter."
    )
    reasons: list[str] = Field(description="Every reason it gave, such as `Free memory ... < requested ...`.")


class ErrorBody(BaseModel):
    """Why a request was refused."""

    error: str = Field(description="What was wrong, in one line: the key and what was expected.")
    reasons: dict[str, list[str]] = Field(
        default_factory=dict,
        description="A claim that does not fit (409): per hypervisor tried, every failing class "
        "in Nova's words, such as `Free memory 1024.00 MiB < requested 2048 MiB`, and for a claim "
        "with extra specs why no NUMA cell or device holds it, such as "
        "`NUMA: cell 0: 2 free dedicated CPUs < 4 requested`.",
    )
    rejections: dict[str, PlacementRejection] = Field(
        default_factory=dict,
        description="A claim that does not fit (409): per hypervisor, as a dry-run placement gives "
        "them, the first filter that refused the instance that found no host and its reasons.",
    )
    requested: int | None = Field(
        default=None, description="A claim that does not fit (409): how many instances it asked for."
    )
    fitted: int | None = Field(
        default=None,
        description="A claim that does not fit (409): how many of its instances would have been placed, "
        "one by one, before the first that found no host; none of them is held.",
    )


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
        WithJsonSchema({"anyOf": [_DATE_TIME, {"type": "null"}]}),
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
    until: Annotated[str | None, WithJsonSchema({"anyOf": [_DATE_TIME, {"type": "null"}]})] = Field(
        description="When it ends by itself; null: until it is lifted."
    )
    since: Annotated[str | None, WithJsonSchema({"anyOf": [_DATE_TIME, {"type": "null"}]})] = Field(
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
    until: Annotated[str | None, WithJsonSchema({"anyOf": [_DATE_TIME, {"type": "null"}]})] = Field(
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


class HypervisorCapacity(BaseModel):
    """One hypervisor of the capacity report (`virtcap audit --format json`): its capacity per
    class, domains, schedulable flavors and problems once audited."""

    model_config = ConfigDict(extra="allow")

    name: str
    up: bool
    error: str | None = Field(description="Why the last audit failed; null when it did not.")
    maintenance: MaintenanceState = Field(
        description="Whether it is in maintenance: then it is still audited and its usage shown, "
        "but `schedulable` is 0 for every flavor and each flavor's `refusals` says why."
    )
    groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="The groups the hypervisor is in, by kind (`availability_zone`, `aggregate`, "
        "`rack`, ...), from the configuration: at most one availability zone, several of other kinds.",
    )


class ProjectAllocation(BaseModel):
    """One project's counted domains and what they are allocated, as the capacity counts it."""

    project_id: str = Field(
        description="Nova's owner (`<nova:owner><nova:project uuid>`), else the configured `ownership` "
        "metadata element's id, else `unknown`."
    )
    project_name: str = Field(description="The name recorded with it (Nova's, or the element's text).")
    domains: int = Field(description="Counted domains of the project.")
    allocated: dict[str, int] = Field(
        description="Per resource (`vcpu`, `pcpu`, `memory`, `disk`, `vgpu`, `custom_*`), in the class's "
        "unit (cpus, bytes, integer)."
    )


class DiscoveredFlavorDefinition(BaseModel):
    """A flavor as Nova wrote it into the metadata of existing domains."""

    name: str
    vcpus: int
    memory_bytes: int
    root_disk_bytes: int
    ephemeral_disk_bytes: int
    swap_bytes: int
    extra_specs: dict[str, str]
    domains: int = Field(description="Domains carrying this definition, in any state.")
    hypervisors: list[str] = Field(description="Where they are.")


class DiscoveredFlavor(DiscoveredFlavorDefinition):
    """A flavor discovered in the fleet: the definition used, and the others of its name."""

    configured: bool = Field(description="A configured flavor of the same name wins over this one.")
    other_definitions: list[DiscoveredFlavorDefinition] = Field(
        description="Other definitions of the same name in the fleet (a conflict), not used: the one "
        "most domains carry is."
    )


class CapacityDocument(BaseModel):
    """The fleet's capacity, from the live snapshots."""

    hypervisors: list[HypervisorCapacity] = Field(description="Every hypervisor audited at least once.")
    failure_tolerance: dict[str, Any] | None = Field(
        default=None,
        description="How many hypervisors the fleet can lose together with every domain re-homed "
        "by the scheduler (see the README's Failure tolerance); null while it is off or not "
        "computed yet. Each hypervisor's `evacuation` is in `hypervisors`.",
    )
    projects: list[ProjectAllocation] = Field(
        default_factory=list,
        description="Every project of the fleet, the most allocated memory first; each hypervisor's "
        "are in its `projects`.",
    )
    discovered_flavors: list[DiscoveredFlavor] | None = Field(
        default=None,
        description="The flavors found in the Nova metadata of existing domains, which headroom is "
        "reported for beside the configured ones; null with `discover_flavors: false`.",
    )
    generated_at: Annotated[str, WithJsonSchema(_DATE_TIME)]


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
    availability_zone: _ZoneName | None = Field(
        default=None,
        description="Only hypervisors of this availability zone (the configuration's `groups`) take "
        "the instances (Nova's `availability_zone` of a server create); any when absent or null.",
    )


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
