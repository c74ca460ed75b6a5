"""The reconciliation with Placement (model/placement_drift.py), on hand-built hypervisors and
provider trees: every kind of drift planted on purpose, its expected value written out here."""

from __future__ import annotations

import random

from tests.support.factories import domain, host
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import HostFacts, NovaFlavor, NovaInstance, NovaOwner
from virtcap.model.placement_drift import (
    MIGRATION,
    Consumer,
    DriftMemo,
    HypervisorView,
    ProviderInventory,
    ProviderTree,
    domain_record,
    reconcile_fleet,
)
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import GIB, MIB, Resource

POLICY = HostPolicy()
SMALL = NovaFlavor("m1.small", 1, 2048, 20, 0, 0)
PROJECT = "p1"


def instance(name: str, flavor: NovaFlavor = SMALL, project: str = PROJECT) -> object:
    owner = NovaOwner(project, project, "u", "u")
    return domain(
        name, vcpus=flavor.vcpus, memory=flavor.memory_mib * MIB, nova=NovaInstance(flavor, owner=owner)
    )


def facts(*domains: object) -> HostFacts:
    return host(cpus=16, memory=64 * GIB, disk=1000 * GIB, domains=tuple(domains))  # type: ignore[arg-type]


def nova_inventory() -> dict[str, ProviderInventory]:
    """What Nova reports for `facts()` under Nova's defaults, written out by hand."""
    return {
        "VCPU": ProviderInventory(16, 0, 1, 16, 1, 4.0),
        "MEMORY_MB": ProviderInventory(64 * 1024, 512, 1, 64 * 1024, 1, 1.0),
        "DISK_GB": ProviderInventory(1000, 0, 1, 1000, 1, 1.0),
    }


def small(uuid: str, consumer_type: str | None = "INSTANCE", project: str | None = PROJECT) -> Consumer:
    return Consumer(uuid, {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}, consumer_type, project)


def view(name: str, host_facts: HostFacts, tree: ProviderTree | None) -> HypervisorView:
    records = tuple(domain_record(d, name, POLICY) for d in host_facts.domains)
    return HypervisorView(name, tree, host_capacity(host_facts, POLICY), records)


def tree(
    name: str, consumers: list[Consumer], inventory: dict[str, ProviderInventory] | None = None
) -> ProviderTree:
    return ProviderTree(f"rp-{name}", name, inventory or nova_inventory(), {}, {c.uuid: c for c in consumers})


def test_a_provider_that_agrees_has_no_drift() -> None:
    hv = facts(instance("a"), instance("b"))
    found = reconcile_fleet([view("hv1", hv, tree("hv1", [small("uuid-a"), small("uuid-b")]))])["hv1"]
    assert set(found.inventory.values()) == {0}
    assert not found.orphaned and not found.unallocated and not found.mismatched
    assert set(found.usage.values()) == {0}


def test_a_wrong_reserved_and_a_stale_total_are_drift_in_bytes() -> None:
    inventory = nova_inventory() | {
        "MEMORY_MB": ProviderInventory(64 * 1024, 4096, 1, 64 * 1024, 1, 1.0),
        "DISK_GB": ProviderInventory(800, 0, 1, 800, 1, 1.0),
    }
    found = reconcile_fleet([view("hv1", facts(), tree("hv1", [], inventory))])["hv1"]
    assert found.inventory[Resource.MEMORY, "reserved"] == (4096 - 512) * MIB
    assert found.inventory[Resource.DISK, "total"] == -200 * GIB
    assert found.inventory[Resource.DISK, "max_unit"] == -200 * GIB
    assert found.inventory[Resource.VCPU, "allocation_ratio"] == 0


def test_a_leaked_allocation_is_orphaned_and_counts_in_usage() -> None:
    found = reconcile_fleet(
        [view("hv1", facts(instance("a")), tree("hv1", [small("uuid-a"), small("gone")]))]
    )["hv1"]
    assert [c.uuid for c in found.orphaned] == ["gone"]
    assert found.orphaned_amounts == {Resource.VCPU: 1, Resource.MEMORY: 2048 * MIB, Resource.DISK: 20 * GIB}
    assert found.usage[Resource.MEMORY] == 2048 * MIB


def test_an_instance_without_allocation_is_unallocated() -> None:
    found = reconcile_fleet(
        [view("hv1", facts(instance("a"), instance("b")), tree("hv1", [small("uuid-a")]))]
    )["hv1"]
    assert [d.uuid for d in found.unallocated] == ["uuid-b"]
    assert found.usage[Resource.VCPU] == -1


def test_a_plain_domain_needs_no_allocation() -> None:
    plain = domain("plain", vcpus=2, memory=1 * GIB)
    found = reconcile_fleet([view("hv1", facts(plain), tree("hv1", []))])["hv1"]
    assert not found.unallocated
    assert found.usage[Resource.VCPU] == -2  # its allocation is virtcap's used, not Placement's


def test_an_allocation_unlike_the_flavor_is_a_mismatch() -> None:
    resized = Consumer("uuid-a", {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}, "INSTANCE", PROJECT)
    found = reconcile_fleet([view("hv1", facts(instance("a")), tree("hv1", [resized]))])["hv1"]
    assert [m.uuid for m in found.mismatched] == ["uuid-a"]
    assert found.mismatched[0].allocated[Resource.VCPU] == 2


def test_a_live_migration_in_progress_is_neither_orphaned_nor_unallocated() -> None:
    """The domain on both sides; the migration record holds the source, the instance the
    destination."""
    source = facts(instance("a"))
    destination = facts(instance("a"))
    views = [
        view("src", source, tree("src", [small("migration-1", MIGRATION)])),
        view("dst", destination, tree("dst", [small("uuid-a")])),
    ]
    found = reconcile_fleet(views)
    assert not found["src"].orphaned and not found["src"].unallocated
    assert found["src"].migrations == ("migration-1",)
    assert not found["dst"].orphaned and not found["dst"].unallocated


def test_a_migration_record_left_behind_is_orphaned() -> None:
    """The instance came back (or never left): allocated here, no other side."""
    views = [
        view("src", facts(instance("a")), tree("src", [small("uuid-a"), small("migration-1", MIGRATION)]))
    ]
    found = reconcile_fleet(views)["src"]
    assert [c.uuid for c in found.orphaned] == ["migration-1"]


def test_a_migration_record_of_another_project_is_not_excused() -> None:
    views = [
        view("src", facts(), tree("src", [small("migration-1", MIGRATION, project="other")])),
        view("dst", facts(instance("a")), tree("dst", [small("uuid-a")])),
    ]
    assert [c.uuid for c in reconcile_fleet(views)["src"].orphaned] == ["migration-1"]


def test_one_instance_excuses_one_migration_record() -> None:
    views = [
        view("src", facts(), tree("src", [small("m1", MIGRATION), small("m2", MIGRATION)])),
        view("dst", facts(instance("a")), tree("dst", [small("uuid-a")])),
    ]
    assert [c.uuid for c in reconcile_fleet(views)["src"].orphaned] == ["m2"]


def test_a_hypervisor_without_provider_has_no_answer() -> None:
    assert reconcile_fleet([view("hv1", facts(), None)]) == {}


def test_a_vgpu_class_on_nested_providers_is_summed() -> None:
    nested = {
        "hv1_pci_0000_84_00_0": {"VGPU": ProviderInventory(4, 0, 1, 4, 1, 1.0)},
        "hv1_pci_0000_85_00_0": {"VGPU": ProviderInventory(4, 1, 1, 4, 1, 1.0)},
    }
    planted = ProviderTree("rp-hv1", "hv1", nova_inventory(), nested, {})
    found = reconcile_fleet([view("hv1", facts(), planted)])["hv1"]
    assert found.inventory[Resource.VGPU, "total"] == 8  # virtcap sees no GPU on this host
    assert found.inventory[Resource.VGPU, "reserved"] == 1


def test_a_memo_keeps_what_a_hypervisor_alone_decides_and_not_a_migrations_pairing() -> None:
    """A hypervisor whose views are the same objects keeps its drift; one whose migration record
    is excused by a domain elsewhere is computed again, since the other side may have changed."""
    memo = DriftMemo()
    healthy = view(
        "healthy",
        facts(instance("h", project="p2")),
        tree("healthy", [small("uuid-h", project="p2"), small("leaked")]),
    )
    source = view("src", facts(), tree("src", [small("migration-1", MIGRATION)]))
    destination = view("dst", facts(instance("a")), tree("dst", [small("uuid-a")]))
    first = reconcile_fleet([healthy, source, destination], memo)
    assert first["src"].migrations == ("migration-1",)
    assert set(memo.kept) == {"healthy", "dst"}
    # the instance leaves the destination: the record left behind is orphaned now
    gone = view("dst", facts(), tree("dst", []))
    second = reconcile_fleet([healthy, source, gone], memo)
    assert second["healthy"] is first["healthy"]
    assert [consumer.uuid for consumer in second["src"].orphaned] == ["migration-1"]
    assert second == reconcile_fleet([healthy, source, gone])


def test_a_memo_changes_no_answer_over_rounds_of_random_changes() -> None:
    """Rounds of fleets whose hypervisors change at random (a new tree, other domains, leaked
    allocations, migration records, instances without allocation, live migrations): each
    round's drifts with the memo equal those computed afresh."""
    generator = random.Random(29)
    names = [f"hv{index}" for index in range(8)]
    memo = DriftMemo()
    views = {name: _random_view(generator, name) for name in names}
    reused = 0
    for _ in range(30):
        for name in generator.sample(names, generator.randint(0, 3)):
            views[name] = _random_view(generator, name)
        fleet = list(views.values())
        before = dict(memo.kept)
        found = reconcile_fleet(fleet, memo)
        assert found == reconcile_fleet(fleet)
        reused += sum(1 for name, drift in found.items() if name in before and before[name][1] is drift)
    assert reused > 30  # the memo was used, not only kept


def _random_view(generator: random.Random, name: str) -> HypervisorView:
    shared = [f"x{index}" for index in range(4)]  # instances that may run or be allocated anywhere
    domains = [instance(f"{name}-{index}") for index in range(generator.randint(0, 3))]
    domains += [instance(uuid) for uuid in shared if generator.random() < 0.15]
    consumers = [small(f"uuid-{d.name}") for d in domains if generator.random() < 0.85]  # type: ignore[attr-defined]
    consumers += [small(f"uuid-{uuid}") for uuid in shared if generator.random() < 0.15]
    consumers += [small(f"leak-{name}-{index}") for index in range(generator.randint(0, 2))]
    consumers += [small(f"mig-{name}-{index}", MIGRATION) for index in range(generator.randint(0, 2))]
    unique = {consumer.uuid: consumer for consumer in consumers}
    return view(name, facts(*domains), tree(name, list(unique.values())))
