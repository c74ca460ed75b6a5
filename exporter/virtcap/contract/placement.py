"""The Placement reconciliation as a document: `GET /api/v1/placement/drift` answers it and `virtcap
audit --placement --format json` prints it, from the last reading of Placement
(fleet/placement.py, model/placement_drift.py).

Only what disagrees is listed: an inventory field or a usage left out agrees with virtcap (0 on
/metrics), a class left out of an allocation holds nothing of it. Amounts are in the units of the
metrics (bytes for memory and disk, cpus, counts), keyed by `resource` label, each with its unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from virtcap.contract.fields import DATE_TIME
from virtcap.fleet.placement import PlacementReport
from virtcap.model.placement_drift import FIELDS, DomainRecord, Drift, HeldConsumer, Mismatch
from virtcap.model.resources import Resource, display_order
from virtcap.units import format_utc

RATIO_UNIT = "ratio"
"""The unit of an `allocation_ratio` drift: a plain ratio, whatever the class."""


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True)


class ResourceAmount(_Document):
    amount: int
    unit: str = Field(description="The class's unit, as the metrics' `unit` label: bytes, cpus, integer.")


class FieldDrift(_Document):
    drift: int | float = Field(description="Placement's value minus Nova's (never 0: agreement is left out).")
    unit: str = Field(description=f"The class's unit; `{RATIO_UNIT}` for `allocation_ratio`.")


class OrphanedConsumerDocument(_Document):
    uuid: str
    consumer_type: str | None = Field(
        description="What Placement says the consumer is (INSTANCE, MIGRATION...), where it says."
    )
    amounts: dict[str, ResourceAmount] = Field(description="What it holds on the provider tree.")


class UnallocatedDomainDocument(_Document):
    uuid: str
    name: str
    expected: dict[str, ResourceAmount] = Field(
        description="What its flavor and extra specs ask Placement for, and Placement does not hold."
    )


class MismatchedAllocationDocument(_Document):
    uuid: str
    name: str
    allocated: dict[str, ResourceAmount] = Field(description="What Placement holds for it.")
    expected: dict[str, ResourceAmount] = Field(description="What its flavor and extra specs ask.")


class HypervisorDriftDocument(_Document):
    """One hypervisor reconciled with its provider tree."""

    hypervisor: str
    provider: str = Field(description="The name of its root resource provider in Placement.")
    inventory_drift: dict[str, dict[str, FieldDrift]] = Field(
        description="Per `resource` label, per field (`total`, `reserved`, `allocation_ratio`, "
        "`max_unit`), Placement's inventory minus what Nova would report from the audited host; "
        "only the fields that disagree."
    )
    orphaned: list[OrphanedConsumerDocument] = Field(
        description="Consumers holding allocations with no domain of their UUID on the hypervisor "
        "(leaked by a failed migration, evacuation or delete), by UUID."
    )
    unallocated: list[UnallocatedDomainDocument] = Field(
        description="Nova instances on the hypervisor with no allocation on its provider tree, by UUID."
    )
    mismatched: list[MismatchedAllocationDocument] = Field(
        description="Domains allocated otherwise than their flavor asks (an unconfirmed resize, an "
        "edited flavor), by UUID."
    )
    usage_drift: dict[str, ResourceAmount] = Field(
        description="Placement's usage minus what the hypervisor's domains are allocated, per "
        "`resource` label; only the classes that disagree."
    )
    migrations: list[str] = Field(
        description="Migration records excused as migrations in progress (their instance runs on "
        "the other side), by UUID."
    )

    @classmethod
    def of(cls, drift: Drift) -> HypervisorDriftDocument:
        inventory: dict[str, dict[str, FieldDrift]] = {}
        for resource in display_order({resource for resource, _field in drift.inventory}):
            for field in FIELDS:
                value = drift.inventory.get((resource, field), 0)
                if value:
                    inventory.setdefault(resource.label, {})[field] = _field_drift(resource, field, value)
        return cls(
            hypervisor=drift.hypervisor,
            provider=drift.provider,
            inventory_drift=inventory,
            orphaned=[_orphaned(consumer) for consumer in drift.orphaned],
            unallocated=[_unallocated(record) for record in drift.unallocated],
            mismatched=[_mismatched(mismatch) for mismatch in drift.mismatched],
            usage_drift=amounts(drift.usage),
            migrations=list(drift.migrations),
        )


class PlacementDriftDocument(_Document):
    """The last reading of Placement, reconciled with the hypervisors' last good audits."""

    up: bool = Field(description="The last reading succeeded (`virtcap_placement_up`).")
    error: str | None = Field(description="Why the last reading failed, in one line.")
    read_at: Annotated[str, WithJsonSchema(DATE_TIME)] = Field(
        description="When the last reading ended, whether or not it succeeded."
    )
    last_success_at: Annotated[str | None, WithJsonSchema({**DATE_TIME, "type": ["string", "null"]})] = Field(
        description="When a reading last succeeded: the time `hypervisors` are as of."
    )
    unmatched: list[str] = Field(
        description="Audited hypervisors no resource provider matched (by hostname or `placement_provider`)."
    )
    hypervisors: list[HypervisorDriftDocument] = Field(
        description="Per hypervisor matched to a provider (and asked for), by name; empty while "
        "Placement is not read."
    )

    @classmethod
    def of(cls, report: PlacementReport, hypervisor: str | None = None) -> PlacementDriftDocument:
        """`hypervisor`: that one only (none when it has no reconciliation)."""
        drifts = report.drifts or {}
        succeeded = report.last_success_at
        return cls(
            up=report.up,
            error=report.error,
            read_at=format_utc(report.read_at),
            last_success_at=format_utc(succeeded) if succeeded is not None else None,
            unmatched=list(report.unmatched),
            hypervisors=[
                HypervisorDriftDocument.of(drifts[name])
                for name in sorted(drifts)
                if hypervisor is None or name == hypervisor
            ],
        )


def amounts(found: Mapping[Resource, int]) -> dict[str, ResourceAmount]:
    """By `resource` label in the metrics' order, the classes of non-zero amount."""
    return {
        resource.label: ResourceAmount(amount=found[resource], unit=resource.unit)
        for resource in display_order(found)
        if found[resource]
    }


def _field_drift(resource: Resource, field: str, value: float) -> FieldDrift:
    if field == "allocation_ratio":
        return FieldDrift(drift=value, unit=RATIO_UNIT)
    return FieldDrift(drift=round(value), unit=resource.unit)


def _orphaned(consumer: HeldConsumer) -> OrphanedConsumerDocument:
    return OrphanedConsumerDocument(
        uuid=consumer.uuid, consumer_type=consumer.consumer_type, amounts=amounts(consumer.amounts)
    )


def _unallocated(record: DomainRecord) -> UnallocatedDomainDocument:
    return UnallocatedDomainDocument(uuid=record.uuid, name=record.name, expected=amounts(record.expected))


def _mismatched(mismatch: Mismatch) -> MismatchedAllocationDocument:
    return MismatchedAllocationDocument(
        uuid=mismatch.uuid,
        name=mismatch.name,
        allocated=amounts(mismatch.allocated),
        expected=amounts(mismatch.expected),
    )
