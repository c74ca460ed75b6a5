"""The scenarios resource: `POST /api/v1/plans/scenarios` and `virtcap plan scenario FILE`, a
what-if on the fleet (virtcap.fleet.scenario). The scenario document, read here for the file and
the API alike (its errors name the key, as the configuration's do), and the answer.

The document (docs/scenarios.md has examples); every key is optional:

- `add_hypervisors`: entries of `count` new hypervisors alike, named `<name_prefix>-<n>`, each
  described by its hardware (`sku`) or a capture (`capture: FILE`, `virtcap capture`'s file, its
  domains left out), with the keys of a configuration's `hypervisors` entry for their policy and
  groups (merged over `defaults` and the groups' policies as a configured hypervisor's are);
- `remove_hypervisors`, `drain`: hypervisors by name or group (their domains are re-homed on the
  others; a drained one stays, in maintenance);
- `policy`: new allocation ratios, reserved amounts or CPU sets for some hypervisors (by name,
  group, or `all: true`), in order;
- `demand`: instances to place in order, a flavor (configured, discovered, or described as a
  dry-run placement describes one) and a count, optionally in one availability zone;
- `reserve_host_failures`: the failures sellable headroom keeps room for (default: the
  configuration's `scheduler.failure_tolerance.reserve_host_failures`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from virtcap.config.errors import explain_validation_error
from virtcap.config.schema import (
    MAX_HOST_FAILURES,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    AllocationRatios,
    CpuSet,
    Groups,
    Name,
    PolicySection,
    Reserved,
    Size,
)
from virtcap.contract.fields import ZoneName
from virtcap.contract.placements import PlacementFlavor
from virtcap.model.scenario.sku import (
    MAX_SKU_CELLS,
    MAX_SKU_CPUS,
    SMALL_PAGE_KIB,
    Sku,
    SkuHugepages,
    SkuPciDevice,
)
from virtcap.model.scenario.spec import MAX_ADDED_HYPERVISORS, MAX_DEMAND_INSTANCES

MAX_SCENARIO_BYTES = 1024 * 1024
"""The largest scenario read (file or body)."""
MAX_ENTRIES = 100
"""The most entries of each list of a scenario (added kinds, policy changes, demand entries)."""
MAX_NAMES = 10_000
"""The most hypervisor names one selection lists."""
MAX_PCI_KINDS = 15
MAX_PCI_FUNCTIONS = 256
_HypervisorName = Annotated[str, Field(min_length=1, max_length=253)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HugepagesSection(_Strict):
    size: Size = Field(description="The page size, such as 2MiB or 1GiB.")
    count: int = Field(ge=1, le=2**30, strict=True, description="Pages reserved in every NUMA cell.")


class PciDeviceSection(_Strict):
    vendor_id: str = Field(pattern=r"^[0-9a-f]{4}$", description="Four lower-case hex digits: `10de`.")
    product_id: str = Field(pattern=r"^[0-9a-f]{4}$")
    count: int = Field(ge=1, le=MAX_PCI_FUNCTIONS, strict=True, description="Functions in every NUMA cell.")
    dev_type: Literal["type-PCI", "type-PF", "type-VF"] = "type-PCI"
    class_code: str = Field(default="", max_length=16)


class SkuSection(_Strict):
    """A hypervisor described by its hardware (model/scenario/sku.py says how it is laid out)."""

    cpus: int = Field(ge=1, le=MAX_SKU_CPUS, strict=True, description="Logical CPUs (threads).")
    memory: Size = Field(description="Memory, such as 512GiB.")
    disk: Size = Field(default=0, description="The storage of instance disks, such as 4TiB.")
    numa_cells: int = Field(default=1, ge=1, le=MAX_SKU_CELLS, strict=True)
    hugepages: list[HugepagesSection] = Field(default_factory=list, max_length=8)
    pci_devices: list[PciDeviceSection] = Field(default_factory=list, max_length=MAX_PCI_KINDS)

    @model_validator(mode="after")
    def _makes_a_host(self) -> Self:
        problems = self.sku().problems()
        if self.memory <= 0:
            problems.insert(0, "memory: expected a size above 0")
        if any(pages.size % 1024 or pages.size <= SMALL_PAGE_KIB * 1024 for pages in self.hugepages):
            problems.append("hugepages: expected page sizes larger than 4KiB, in whole KiB")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def sku(self) -> Sku:
        return Sku(
            cpus=self.cpus,
            memory_bytes=self.memory,
            disk_bytes=self.disk,
            numa_cells=self.numa_cells,
            hugepages=tuple(SkuHugepages(pages.size // 1024, pages.count) for pages in self.hugepages),
            pci_devices=tuple(
                SkuPciDevice(d.vendor_id, d.product_id, d.count, d.dev_type, d.class_code)
                for d in self.pci_devices
            ),
        )


class AddedHypervisorsSection(PolicySection):
    """`count` new hypervisors alike: their hardware (`sku` or `capture`, exactly one) and the keys
    of a configuration's hypervisor entry for their policy and groups."""

    count: int = Field(ge=0, le=MAX_ADDED_HYPERVISORS, strict=True)
    name_prefix: Name | None = None
    """Their names are `<name_prefix>-1`, `-2`...; default `added-<entry number>`."""
    sku: SkuSection | None = None
    capture: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)
    """A capture file (`virtcap capture`): the hardware of the host captured, its domains left out.
    A relative path is read from the scenario file's directory (not through the API)."""

    @model_validator(mode="after")
    def _one_kind_of_hardware(self) -> Self:
        if (self.sku is None) == (self.capture is None):
            raise ValueError("expected exactly one of sku and capture (the new hypervisors' hardware)")
        return self


class HostsSection(_Strict):
    """Hypervisors of the fleet by name and by group (kind -> names)."""

    hypervisors: list[_HypervisorName] = Field(default_factory=list, max_length=MAX_NAMES)
    groups: Groups | None = None

    @model_validator(mode="after")
    def _names_some(self) -> Self:
        if not self.hypervisors and not self.groups:
            raise ValueError("expected hypervisors or groups (which hypervisors)")
        return self


class PolicyChangeSection(_Strict):
    """New ratios, reserved amounts or CPU sets for the hypervisors named, those of the groups
    named, or all of them; what the change does not set stays as configured."""

    hypervisors: list[_HypervisorName] = Field(default_factory=list, max_length=MAX_NAMES)
    groups: Groups | None = None
    all: bool = False
    allocation_ratios: AllocationRatios | None = None
    reserved: Reserved | None = None
    cpu_shared_set: CpuSet | None = None
    cpu_dedicated_set: CpuSet | None = None

    @model_validator(mode="after")
    def _changes_something_somewhere(self) -> Self:
        if not self.all and not self.hypervisors and not self.groups:
            raise ValueError("expected hypervisors, groups or all: true (which hypervisors change)")
        if self.all and (self.hypervisors or self.groups):
            raise ValueError("all: true names every hypervisor; expected no hypervisors nor groups with it")
        changes = ("allocation_ratios", "reserved", "cpu_shared_set", "cpu_dedicated_set")
        if not self.model_fields_set & set(changes):
            raise ValueError(f"expected at least one of {', '.join(changes)} (what changes)")
        return self


def _flavor_kind(value: object) -> str:
    return "object" if isinstance(value, dict | PlacementFlavor) else "name"


class DemandSection(_Strict):
    """`count` instances of a flavor, one request for as many as fit, after the entries before."""

    flavor: Annotated[
        Annotated[Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)], Tag("name")]
        | Annotated[PlacementFlavor, Tag("object")],
        Discriminator(_flavor_kind),
    ]
    count: int = Field(ge=1, le=MAX_DEMAND_INSTANCES, strict=True)
    availability_zone: ZoneName | None = None


class ScenarioDocument(_Strict):
    """A what-if scenario, applied to the fleet as last audited; nothing is held or changed."""

    add_hypervisors: list[AddedHypervisorsSection] = Field(default_factory=list, max_length=MAX_ENTRIES)
    remove_hypervisors: HostsSection | None = None
    drain: HostsSection | None = None
    policy: list[PolicyChangeSection] = Field(default_factory=list, max_length=MAX_ENTRIES)
    demand: list[DemandSection] = Field(default_factory=list, max_length=MAX_ENTRIES)
    reserve_host_failures: int | None = Field(default=None, ge=0, le=MAX_HOST_FAILURES, strict=True)

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        added = sum(entry.count for entry in self.add_hypervisors)
        if added > MAX_ADDED_HYPERVISORS:
            raise ValueError(
                f"add_hypervisors: {added} hypervisors in all; expected at most {MAX_ADDED_HYPERVISORS}"
            )
        instances = sum(entry.count for entry in self.demand)
        if instances > MAX_DEMAND_INSTANCES:
            raise ValueError(f"demand: {instances} instances in all; expected at most {MAX_DEMAND_INSTANCES}")
        return self


class ScenarioError(ValueError):
    """A scenario that cannot be applied: malformed, or naming what the fleet does not have. One
    line per problem, each starting with its key (`add_hypervisors[0].sku.cpus: ...`)."""


def parse_scenario(document: object, source: str = "scenario") -> ScenarioDocument:
    """ScenarioDocument, its errors one per line as `source: key: why`."""
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ScenarioError(
            f"{source}: expected a mapping of add_hypervisors, remove_hypervisors, drain, "
            "policy, demand and reserve_host_failures"
        )
    try:
        return ScenarioDocument.model_validate(document)
    except ValidationError as error:
        text = explain_validation_error(error, source, ScenarioDocument)
        for tag in ("name", "object"):
            text = text.replace(f"flavor.{tag}.", "flavor.").replace(f"flavor.{tag}:", "flavor:")
        raise ScenarioError(text) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise ScenarioError(f"{source}: not a valid scenario: {error}") from None


# The answer


class CompactionAnswer(BaseModel):
    hypervisors: int = Field(description="The fewest eligible hypervisors found that hold every domain.")
    lower_bound: int = Field(description="Proven: no packing uses fewer.")
    optimal: bool
    freeable: int = Field(description="Eligible hypervisors the compaction leaves empty.")


class FleetAnswersModel(BaseModel):
    """The fleet's answers on one side of the scenario."""

    hypervisors: int = Field(description="Hypervisors audited (before) or in the scenario's fleet (after).")
    eligible: int = Field(description="Up, fresh, not in maintenance.")
    schedulable: dict[str, int] = Field(
        description="Per flavor, the instances that still fit, each hypervisor counted alone, summed."
    )
    schedulable_by_zone: dict[str, dict[str, int]] = Field(description="Per availability zone, the same.")
    sellable: dict[str, int] = Field(
        description="Per flavor, the instances the fleet can still take keeping the reserve."
    )
    sellable_by_zone: dict[str, dict[str, int]] = Field(
        description="Per availability zone, the same asked for in the zone (failover stays in it)."
    )
    failures_tolerated: int = Field(description="Hypervisors the fleet can lose together, up to the bound.")
    failure_bound: int
    stranded: dict[str, int] = Field(
        description="Per resource class, the stranded capacity of the eligible hypervisors summed, in the "
        "class's unit (bytes for memory and disk)."
    )
    compaction: CompactionAnswer | None


class Refused(BaseModel):
    refused_by: dict[str, int] = Field(description="Per filter, how many hypervisors it refused.")
    example: str = Field(description="The first hypervisor's refusal (by name), in the scheduler's words.")


class UnplacedAnswer(BaseModel):
    flavor: str = Field(description="The demand entry's flavor (its name, or `vcpu/memory/disk` described).")
    count: int = Field(description="Its instances that found no host.")
    reasons: Refused = Field(description="Nova's NoValidHost: why the first of them found none.")


class PlacedAnswer(BaseModel):
    flavor: str = Field(description="The demand entry's flavor.")
    count: int = Field(description="Its instances that found a host.")
    hypervisors: dict[str, int] = Field(
        description="Where they landed: per hypervisor, how many, in the order the first landed there."
    )


class DisplacedAnswer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    domain: str = Field(
        description="The domain's name (`pending-claim-<n>@<hypervisor>` for a pending claim)."
    )
    uuid: str
    source: str = Field(alias="from", description="The removed or drained hypervisor it leaves.")
    destination: str | None = Field(alias="to", description="Where it goes; null: no hypervisor takes it.")
    reasons: Refused | None = None


class ScenarioAnswer(BaseModel):
    """The answers before and after the scenario, and what found no host. Advisory: nothing is held,
    moved or changed."""

    model_config = ConfigDict(populate_by_name=True)

    before: FleetAnswersModel
    after: FleetAnswersModel
    placed: list[PlacedAnswer] = Field(description="Per demand entry, where its instances landed.")
    unplaced: list[UnplacedAnswer] = Field(description="Per demand entry, the instances that found no host.")
    displaced: list[DisplacedAnswer] = Field(
        description="The removed and drained hypervisors' domains and pending claims, re-homed in order."
    )
    added: list[str] = Field(description="The hypervisors the scenario adds.")
    removed: list[str]
    drained: list[str]
    reserve_host_failures: int
    solved_add_hypervisors: int | None = Field(
        default=None,
        description="With --solve-for add_hypervisors: the fewest copies found that fit the demand with the "
        "reserve (the entry's count replaced by it; `added` lists them).",
    )
    tries: dict[str, bool] = Field(
        default_factory=dict, description="With --solve-for: each count tried and whether it fitted."
    )
    seconds: float = Field(description="How long the computation took.")

    def as_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def scenario_document_schema() -> dict[str, Any]:
    """The JSON Schema of the body (the OpenAPI document's)."""
    return ScenarioDocument.model_json_schema()
