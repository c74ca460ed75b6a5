"""Is Placement telling the truth? One hypervisor's provider tree as Placement holds it, compared
with what Nova would report from the audited host (`HostCapacity`, the policy's classes) and with
the domains libvirt shows: pure, no I/O (service/placement.py reads Placement).

What is compared (docs/placement.md):

- inventory drift, per class and field (`total`, `reserved`, `allocation_ratio`, `max_unit`):
  Placement's value minus Nova's, in the class's unit (bytes for memory and disk). The root
  provider's classes field by field; a class on nested providers (a vGPU type per physical GPU)
  by its `total` and `reserved` summed over them, the fields Nova sets per device;
- orphaned consumers: a consumer holding allocations on the tree with no domain of that UUID on
  the hypervisor (leaked by a failed migration, evacuation or delete), except a migration in
  progress: a consumer Placement types MIGRATION whose instance, a domain of the same project, is
  on the migration's other side (allocated on another provider, where libvirt shows it);
- unallocated domains: Nova instances (by their metadata) with no allocation on the tree, except
  the source side of a live migration (the instance allocated on its destination's tree, which
  holds the domain too);
- mismatched allocations: a domain allocated otherwise than its flavor and extra specs ask (an
  unconfirmed resize, an edited flavor);
- usage drift: the allocations on the tree summed minus what the hypervisor's counted domains are
  allocated (virtcap's `allocated`, without its own claims, which Placement never sees).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from virtcap.model.capacity import HostCapacity, ResourceCapacity, domain_allocation
from virtcap.model.facts import DomainFacts
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource, resource_class

FIELDS = ("total", "reserved", "allocation_ratio", "max_unit")
MIGRATION = "MIGRATION"
"""Placement's consumer type of Nova's migration records (microversion 1.38)."""


@dataclass(frozen=True, slots=True)
class ProviderInventory:
    """One class of one provider, as Placement holds it (in Placement's unit: MiB, GiB...)."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 0
    step_size: int = 1
    allocation_ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class Consumer:
    """What one consumer holds on a provider tree, per Placement class summed over the tree's
    providers, with what Placement says of it (where it was read: `consumer_type`, `project_id`)."""

    uuid: str
    resources: Mapping[str, int]
    consumer_type: str | None = None
    project_id: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderTree:
    """A hypervisor's providers in Placement: the root (the compute node) and its descendants."""

    root_uuid: str
    root_name: str
    root: Mapping[str, ProviderInventory]
    """The root's inventories, by Placement class."""
    nested: Mapping[str, Mapping[str, ProviderInventory]] = field(default_factory=dict)
    """Per descendant provider (by name), its inventories."""
    consumers: Mapping[str, Consumer] = field(default_factory=dict)
    """Every consumer with allocations on the tree, by UUID."""


@dataclass(frozen=True, slots=True)
class DomainRecord:
    """A domain as the reconciliation needs it: where it is and what its flavor asks."""

    uuid: str
    name: str
    hypervisor: str
    project_id: str | None
    nova: bool
    """A Nova instance (its metadata names a flavor): one Placement must hold allocations for."""
    expected: Mapping[Resource, int]
    """What it is allocated by its flavor and extra specs (Nova's request), in virtcap's units."""


@dataclass(frozen=True, slots=True)
class HeldConsumer:
    uuid: str
    amounts: Mapping[Resource, int]
    """In the class's unit (bytes for memory and disk)."""
    consumer_type: str | None = None


@dataclass(frozen=True, slots=True)
class Mismatch:
    uuid: str
    name: str
    allocated: Mapping[Resource, int]
    expected: Mapping[Resource, int]


@dataclass(frozen=True, slots=True)
class Drift:
    """One hypervisor's reconciliation with Placement."""

    hypervisor: str
    provider: str
    inventory: Mapping[tuple[Resource, str], float]
    """(class, field) -> Placement's value minus Nova's, in the class's unit (0: they agree); a
    class only one side has counts as 0 on the other."""
    orphaned: tuple[HeldConsumer, ...]
    unallocated: tuple[DomainRecord, ...]
    mismatched: tuple[Mismatch, ...]
    usage: Mapping[Resource, int]
    """Placement's usage minus the counted domains' allocations, per class, in the class's unit."""
    migrations: tuple[str, ...] = ()
    """The consumers excused as migrations in progress."""

    @property
    def orphaned_amounts(self) -> dict[Resource, int]:
        return _summed(consumer.amounts for consumer in self.orphaned)

    @property
    def unallocated_amounts(self) -> dict[Resource, int]:
        return _summed(domain.expected for domain in self.unallocated)


def domain_record(domain: DomainFacts, hypervisor: str, policy: HostPolicy) -> DomainRecord:
    owner = domain.nova.owner if domain.nova is not None else None
    project = owner.project_id if owner is not None else (domain.owner.project_id if domain.owner else None)
    return DomainRecord(
        uuid=domain.uuid.lower(),
        name=domain.name,
        hypervisor=hypervisor,
        project_id=project,
        nova=domain.nova is not None,
        expected=domain_allocation(domain, policy.cpu_dedicated_set),
    )


def in_our_units(resources: Mapping[str, int]) -> dict[Resource, int]:
    """Placement's amounts (MiB, GiB...) in the class's unit; unknown classes are left out."""
    found: dict[Resource, int] = {}
    for name, amount in resources.items():
        try:
            resource = resource_class(name)
        except ValueError:
            continue
        found[resource] = amount * resource.placement_unit
    return found


def inventory_drift(tree: ProviderTree, capacity: HostCapacity) -> dict[tuple[Resource, str], float]:
    """Per (class, field), Placement's value minus Nova's (see the module's docstring)."""
    drift: dict[tuple[Resource, str], float] = {}
    nested: dict[str, list[ProviderInventory]] = {}
    for inventories in tree.nested.values():
        for name, inventory in inventories.items():
            nested.setdefault(name, []).append(inventory)
    names = set(tree.root) | set(nested)
    # Nova reports no inventory of a class it has none of, nor one Placement would refuse
    ours = {rc.resource: rc for rc in capacity.resources.values() if rc.total and rc.refused is None}
    classes: set[Resource] = set(ours)
    for name in names:
        try:
            classes.add(resource_class(name))
        except ValueError:
            continue
    for resource in classes:
        unit = resource.placement_unit
        rc = ours.get(resource)
        held = tree.root.get(resource.placement_class)
        if held is None and resource.placement_class in nested:
            parts = nested[resource.placement_class]
            theirs_total = sum(part.total for part in parts) * unit
            theirs_reserved = sum(part.reserved for part in parts) * unit
            drift[resource, "total"] = theirs_total - (rc.total or 0 if rc is not None else 0)
            drift[resource, "reserved"] = theirs_reserved - (rc.reserved or 0 if rc is not None else 0)
            continue
        if rc is None and held is None:
            continue
        ours_values = _nova_fields(rc) if rc is not None else dict.fromkeys(FIELDS, 0.0)
        theirs = (
            {
                "total": held.total * unit,
                "reserved": held.reserved * unit,
                "allocation_ratio": held.allocation_ratio,
                "max_unit": held.max_unit * unit,
            }
            if held is not None
            else dict.fromkeys(FIELDS, 0.0)
        )
        for name in FIELDS:
            drift[resource, name] = theirs[name] - ours_values[name]
    return drift


def _nova_fields(rc: ResourceCapacity) -> dict[str, float]:
    unit = rc.resource.placement_unit
    # Nova reports whole MiB and GiB: its totals are rounded down, reserved amounts up
    total = (rc.total or 0) // unit * unit
    reserved = -(-(rc.reserved or 0) // unit) * unit
    max_unit = rc.max_unit
    return {
        "total": float(total),
        "reserved": float(reserved),
        "allocation_ratio": rc.allocation_ratio,
        "max_unit": float((max_unit or 0) // unit * unit),
    }


@dataclass(frozen=True, slots=True)
class HypervisorView:
    """One hypervisor as the reconciliation takes it: its provider tree in Placement (None: no
    provider matched it), its audited capacity and its domains."""

    hypervisor: str
    tree: ProviderTree | None
    capacity: HostCapacity
    domains: tuple[DomainRecord, ...]


def reconcile_fleet(views: Sequence[HypervisorView], memo: DriftMemo | None = None) -> dict[str, Drift]:
    """Every hypervisor's drift that has a provider tree (see the module's docstring). The fleet
    together: a migration has two sides, on two hypervisors. With a `memo`, the drifts it kept
    from the last call are taken again where they hold (the same answer as without)."""
    fleet: _Fleet | None = None
    found: dict[str, Drift] = {}
    kept: dict[str, tuple[HypervisorView, Drift]] = {}
    for view in views:
        tree = view.tree
        if tree is None:
            continue
        drift = memo.drift(view) if memo is not None else None
        if drift is None:
            fleet = fleet if fleet is not None else _Fleet(views)
            drift = fleet.drift(view, tree)
            if not _reads_fleet(view, tree):
                kept[view.hypervisor] = (view, drift)
        else:
            kept[view.hypervisor] = (view, drift)
        found[view.hypervisor] = drift
    if memo is not None:
        memo.kept = kept
    return found


class DriftMemo:
    """The drifts of the last `reconcile_fleet` that read nothing of the rest of the fleet
    (`_reads_fleet`: every Nova instance allocated here, no consumer that is no domain here a
    migration record), with the view each was made of. Such a drift is a function of its view
    alone: the next call takes it again for a view of the same tree (the very object: the reader
    keeps a tree while Placement's answers for it stay the same), capacity and domains, rather
    than comparing its tens of consumers again. The views that still need computing are computed
    in the same order as without it, and a drift kept never pairs a migration record, so the
    others come out the same."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[HypervisorView, Drift]] = {}

    def drift(self, view: HypervisorView) -> Drift | None:
        """The kept drift of a view made of the same parts, if there is one."""
        found = self.kept.get(view.hypervisor)
        if found is None:
            return None
        before, drift = found
        if (
            before.tree is view.tree
            and (before.domains is view.domains or before.domains == view.domains)
            and (before.capacity is view.capacity or before.capacity == view.capacity)
        ):
            return drift
        return None


def _reads_fleet(view: HypervisorView, tree: ProviderTree) -> bool:
    """Whether `_Fleet.drift` reads the rest of the fleet for this view: for a Nova instance
    without allocation here (the source side of a live migration?) or for a migration record
    that is no domain here (a migration in progress?)."""
    consumers = {uuid.lower() for uuid in tree.consumers}
    if any(domain.nova and domain.uuid not in consumers for domain in view.domains):
        return True
    here = {domain.uuid for domain in view.domains}
    return any(
        consumer.consumer_type == MIGRATION and uuid.lower() not in here
        for uuid, consumer in tree.consumers.items()
    )


class _Fleet:
    """Where each domain runs and each consumer is allocated, fleet-wide, and the instances whose
    migration record has been accounted for so far."""

    def __init__(self, views: Sequence[HypervisorView]) -> None:
        self.present: dict[str, set[str]] = {}
        """Per domain UUID, the hypervisors libvirt shows it on."""
        self.allocated: dict[str, set[str]] = {}
        """Per consumer UUID, the hypervisors whose tree holds its allocations."""
        self.projects: dict[str, str | None] = {}
        self.paired: set[str] = set()
        for view in views:
            for domain in view.domains:
                self.present.setdefault(domain.uuid, set()).add(view.hypervisor)
                self.projects.setdefault(domain.uuid, domain.project_id)
            if view.tree is not None:
                for uuid in view.tree.consumers:
                    self.allocated.setdefault(uuid.lower(), set()).add(view.hypervisor)

    def on_other_side(self, uuid: str, here: str) -> bool:
        """Allocated on another hypervisor's tree, and shown by libvirt there."""
        return any(
            other != here and other in self.present.get(uuid, ()) for other in self.allocated.get(uuid, ())
        )

    def drift(self, view: HypervisorView, tree: ProviderTree) -> Drift:
        here = view.hypervisor
        by_uuid = {domain.uuid: domain for domain in view.domains}
        consumers = {uuid.lower(): consumer for uuid, consumer in tree.consumers.items()}
        # the source side of a live migration: the domain here, its allocation where it also runs
        moving = {
            uuid
            for uuid, domain in by_uuid.items()
            if domain.nova and uuid not in consumers and self.on_other_side(uuid, here)
        }
        orphaned: list[HeldConsumer] = []
        migrations: list[str] = []
        for uuid, consumer in sorted(consumers.items()):
            if uuid in by_uuid:
                continue
            if consumer.consumer_type == MIGRATION:
                instance = self.migrating_instance(consumer, moving, here)
                if instance is not None:
                    self.paired.add(instance)
                    migrations.append(uuid)
                    continue
            orphaned.append(HeldConsumer(uuid, in_our_units(consumer.resources), consumer.consumer_type))
        unallocated = tuple(
            domain
            for uuid, domain in sorted(by_uuid.items())
            if domain.nova and uuid not in consumers and uuid not in moving
        )
        mismatched = []
        for uuid, domain in sorted(by_uuid.items()):
            held = consumers.get(uuid)
            if held is None or not domain.nova:
                continue
            amounts = in_our_units(held.resources)
            if _rounded(amounts) != _rounded(domain.expected):
                mismatched.append(Mismatch(uuid, domain.name, amounts, domain.expected))
        theirs = _summed(in_our_units(consumer.resources) for consumer in consumers.values())
        ours = {rc.resource: rc.allocated for rc in view.capacity.resources.values()}
        usage = {r: theirs.get(r, 0) - ours.get(r, 0) for r in set(theirs) | set(ours)}
        return Drift(
            hypervisor=here,
            provider=tree.root_name,
            inventory=inventory_drift(tree, view.capacity),
            orphaned=tuple(orphaned),
            unallocated=unallocated,
            mismatched=tuple(mismatched),
            usage=usage,
            migrations=tuple(migrations),
        )

    def migrating_instance(self, record: Consumer, moving: set[str], here: str) -> str | None:
        """The instance a migration record on this hypervisor's tree belongs to, if one is
        migrating. Placement does not say which (the record is the migration's UUID), so it is one
        of the same project (where both are known), not yet paired, allocated on another
        hypervisor that libvirt shows it on: first one whose domain is here too (a live migration
        from here), else any (a cold migration or resize, whose domain has left)."""
        found = []
        for uuid in sorted(self.allocated):
            if uuid in self.paired or uuid == record.uuid.lower() or not self.on_other_side(uuid, here):
                continue
            project = self.projects.get(uuid)
            if record.project_id is not None and project is not None and project != record.project_id:
                continue
            found.append(uuid)
        live = [uuid for uuid in found if uuid in moving]
        if live:
            return live[0]
        return found[0] if found else None


def _rounded(amounts: Mapping[Resource, int]) -> dict[Resource, int]:
    """In Placement's unit, rounded up, zeros left out: how two allocations are compared."""
    return {
        resource: -(-amount // resource.placement_unit) for resource, amount in amounts.items() if amount > 0
    }


def _summed(parts: Iterable[Mapping[Resource, int]]) -> dict[Resource, int]:
    total: dict[Resource, int] = {}
    for part in parts:
        for resource, amount in part.items():
            total[resource] = total.get(resource, 0) + amount
    return total
