"""The reclaimable resource: `GET /api/v1/reclaimable`, the domains whose allocation could be taken
back (shut off, or idle, for longer than the configuration's `reclaim` windows: model/reclaim.py),
and what each holds. `virtcap plan reclaim` prints the same document."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from virtcap.contract.fields import DATE_TIME
from virtcap.model.ownership import domain_project
from virtcap.model.reclaim import ReclaimableDomain
from virtcap.units import format_utc


class ReclaimableDomainDocument(BaseModel):
    model_config = ConfigDict(frozen=True)

    uuid: str
    name: str
    hypervisor: str
    project_id: str = Field(description="Nova's owner, the configured `ownership` element's, else `unknown`.")
    project_name: str
    reason: Literal["shutoff", "idle"] = Field(
        description="`shutoff`: shut off for at least `reclaim.shutoff_after`; `idle`: running with "
        "its CPU use below `reclaim.idle_cpu_below` of its vCPUs for at least `reclaim.idle_for`."
    )
    since: Annotated[str, WithJsonSchema(DATE_TIME)] = Field(
        description="Since when it has been shut off, or idle."
    )
    allocation: dict[str, int] = Field(
        description="What it holds, by `resource` label, in the units of the metrics (cpus, bytes, "
        "counts), as the capacity counts it."
    )

    @classmethod
    def of(cls, found: ReclaimableDomain) -> ReclaimableDomainDocument:
        project_id, project_name = domain_project(found.domain)
        return cls(
            uuid=found.domain.uuid,
            name=found.domain.name,
            hypervisor=found.hypervisor,
            project_id=project_id,
            project_name=project_name,
            reason=found.reclaimable.reason.value,
            since=format_utc(found.reclaimable.since),
            allocation={resource.label: amount for resource, amount in found.allocation.items() if amount},
        )


class ReclaimableList(BaseModel):
    """The reclaimable domains of the hypervisors this exporter audits, by hypervisor and name."""

    model_config = ConfigDict(frozen=True)

    domains: list[ReclaimableDomainDocument]
    totals: dict[str, dict[str, int]] = Field(
        description="Per reason, the allocations of its domains summed by `resource` label."
    )

    @classmethod
    def of(cls, found: list[ReclaimableDomain]) -> ReclaimableList:
        documents = [ReclaimableDomainDocument.of(item) for item in found]
        totals: dict[str, dict[str, int]] = {}
        for document in documents:
            summed = totals.setdefault(document.reason, {})
            for label, amount in document.allocation.items():
                summed[label] = summed.get(label, 0) + amount
        return cls(domains=documents, totals=totals)
