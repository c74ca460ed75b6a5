"""The capacity resource: `GET /api/v1/capacity`, the document `virtcap audit --format json`
prints. exposition/report.py builds it; these models describe it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from virtcap.contract.fields import DATE_TIME
from virtcap.contract.maintenance import MaintenanceState


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
    packing: dict[str, Any] | None = Field(
        default=None,
        description="The packing answers computed after the failure tolerance (docs/packing.md): "
        "`stranded` capacity per hypervisor, the `compaction` of the fleet and its groups, the "
        "`sellable` instances per flavor and availability zone; null until the first computation, "
        "absent while the failure tolerance is off.",
    )
    generated_at: Annotated[str, WithJsonSchema(DATE_TIME)]
