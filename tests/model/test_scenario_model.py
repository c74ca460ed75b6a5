"""What-if scenarios in the model (model/scenario/, fleet/scenario.py), checked against what is
worked out here by hand or through the scheduler's own `schedule`: a SKU's facts, the changes a
scenario applies, the answers after adding identical hosts, the demand placed, the domains of the
hosts drained re-homed, and the search for the fewest hosts to add."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import pytest

from tests.support.factories import GIB, host
from tests.support.fleets import FLAT, guest, reference_tolerated
from tests.support.hosts import configured
from virtcap.fleet.scenario import (
    ScenarioSettings,
    SolveError,
    fits_with_reserve,
    run_scenario,
    solve_for_added,
)
from virtcap.model.facts import DomainFacts, HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scenario.hosts import PlannedHost, apply_scenario
from virtcap.model.scenario.placement import place_demand, rehome
from virtcap.model.scenario.sku import Sku, SkuHugepages, SkuPciDevice, sku_facts
from virtcap.model.scenario.spec import (
    AddedHypervisors,
    DemandItem,
    HostSelection,
    PolicyChange,
    Scenario,
)
from virtcap.model.scheduler import (
    PLACEMENT,
    SPREAD,
    Guest,
    HostState,
    evacuation_order,
    host_state,
    schedule,
)

TWO_GIB_PAGE = 2048
ONE_GIB_PAGE = 1024 * 1024

# Hosts of 16 CPUs, 64 GiB and 1000 GiB of disk, flat policy (ratios 1.0, nothing reserved): an
# instance of M2 (2 vCPUs, 4 GiB, 20 GiB) takes 1/8 of the CPUs, 1/16 of the memory, 1/50 of the
# disk, so 8 fit an empty host (the CPUs decide); an instance of S1, 1/16, 1/64, 1/100: 16.
M2 = Demand({Resource.VCPU: 2, Resource.MEMORY: 4 * GIB, Resource.DISK: 20 * GIB})
S1 = Demand({Resource.VCPU: 1, Resource.MEMORY: 1 * GIB, Resource.DISK: 10 * GIB})
PER_HOST = {"m2": 8, "s1": 16}
FLAVORS = {"m2": M2, "s1": S1}


def m2_domains(prefix: str, count: int) -> tuple[DomainFacts, ...]:
    """Plain domains allocated exactly what an M2 instance asks (the flat policy reserves none)."""
    return tuple(guest(f"{prefix}-{n}", 4, vcpus=2, disk_gib=20) for n in range(count))


def facts(
    name: str, *, cpus: int = 16, memory_gib: int = 64, domains: tuple[DomainFacts, ...] = ()
) -> HostFacts:
    return replace(host(cpus=cpus, memory=memory_gib * GIB, disk=1000 * GIB, domains=domains), hostname=name)


def planned(
    name: str,
    *,
    cpus: int = 16,
    memory_gib: int = 64,
    domains: tuple[DomainFacts, ...] = (),
    policy: HostPolicy = FLAT,
    zone: str | None = None,
    rack: str | None = None,
) -> PlannedHost:
    groups = ((("availability_zone", zone),) if zone else ()) + ((("rack", rack),) if rack else ())
    return PlannedHost(name, facts(name, cpus=cpus, memory_gib=memory_gib, domains=domains), policy, groups)


def identical(count: int, prefix: str = "new", zone: str | None = None) -> AddedHypervisors:
    groups = (("availability_zone", zone),) if zone else ()
    return AddedHypervisors(count, prefix, facts("template"), FLAT, groups)


def settings(reserve: int, flavors: dict[str, Demand] | None = None) -> ScenarioSettings:
    return ScenarioSettings(
        flavors=FLAVORS if flavors is None else flavors,
        multipliers=SPREAD,
        reserve_host_failures=reserve,
        failure_bound=max(reserve, 1),
    )


def states(hosts: Sequence[PlannedHost]) -> list[HostState]:
    """The hosts' scheduler states, built here from their parts (not through the scenario)."""
    return [
        host_state(
            h.name, h.facts, h.policy, availability_zone=h.availability_zone, maintenance=h.maintenance
        )
        for h in hosts
    ]


def new_guests(state: HostState, original: Sequence[HostState]) -> int:
    before = next(s for s in original if s.name == state.name)
    return len(state.guests) - len(before.guests)


# --- a SKU's facts ------------------------------------------------------------------------------


def test_a_skus_cpus_and_memory_are_shared_out_over_its_cells() -> None:
    # 7 CPUs over 2 cells: 4 and 3 (the first cell takes the one left over); 4 is even: two cores
    # of two threads each; 3 is odd: no SMT siblings
    sku = Sku(cpus=7, memory_bytes=64 * GIB, disk_bytes=2000 * GIB, numa_cells=2)
    found = sku_facts("big-1", sku)
    assert found.hostname == "big-1" and found.domains == ()
    assert found.cpus == 7 and found.online_cpus == frozenset(range(7))
    assert found.storage is not None and found.storage.capacity_bytes == 2000 * GIB
    assert found.storage.used_bytes == 0
    first, second = found.numa_cells
    assert (first.id, second.id) == (0, 1)
    assert (len(first.cpus), len(second.cpus)) == (4, 3)
    assert first.cpus | second.cpus == frozenset(range(7)) and not first.cpus & second.cpus
    assert first.memory_bytes == second.memory_bytes == 32 * GIB
    assert found.memory_bytes == 64 * GIB
    assert len(first.siblings) == 2
    assert all(len(core) == 2 for core in first.siblings)
    assert frozenset().union(*first.siblings) == first.cpus
    assert second.siblings == ()


def test_memory_that_does_not_divide_over_the_cells_is_the_cells_sum() -> None:
    found = sku_facts("odd", Sku(cpus=3, memory_bytes=10 * GIB + 1, disk_bytes=0, numa_cells=3))
    assert [len(cell.cpus) for cell in found.numa_cells] == [1, 1, 1]
    assert found.memory_bytes == sum(cell.memory_bytes for cell in found.numa_cells)
    assert found.memory_bytes <= 10 * GIB + 1


def test_hugepages_are_per_cell_and_the_small_pages_the_rest() -> None:
    pages = (SkuHugepages(ONE_GIB_PAGE, 8), SkuHugepages(TWO_GIB_PAGE, 1024))  # 8 GiB + 2 GiB a cell
    found = sku_facts(
        "huge", Sku(cpus=16, memory_bytes=64 * GIB, disk_bytes=0, numa_cells=2, hugepages=pages)
    )
    for cell in found.numa_cells:
        by_size = {count.size_kib: count for count in cell.pages}
        assert set(by_size) == {4, TWO_GIB_PAGE, ONE_GIB_PAGE}
        assert (by_size[ONE_GIB_PAGE].total, by_size[TWO_GIB_PAGE].total) == (8, 1024)
        assert by_size[ONE_GIB_PAGE].free == 8 and by_size[TWO_GIB_PAGE].free == 1024
        # 32 GiB a cell, 10 GiB of it in hugepages: 22 GiB of 4 KiB pages
        assert by_size[4].total == 22 * GIB // 4096
        assert by_size[4].total * 4096 + 8 * GIB + 2 * GIB == cell.memory_bytes


def test_a_sku_of_hugepages_offers_a_hugepage_flavor_per_cell() -> None:
    # each cell 8 CPUs and 16 GiB, 12 of them in 1 GiB pages: an instance of 4 GiB in 1 GiB pages
    # fits 3 times a cell (the pages decide: 8 CPUs x 4.0 are 32 vCPUs), 6 in the host
    policy, flavors = configured(
        """
hypervisors: [{name: sku, uri: "test:///default"}]
flavors:
  - {name: h4, vcpu: 1, memory: 4GiB, extra_specs: {"hw:mem_page_size": 1GB}}
  - {name: h16, vcpu: 1, memory: 16GiB, extra_specs: {"hw:mem_page_size": 1GB}}
"""
    )
    sku = Sku(
        cpus=16,
        memory_bytes=32 * GIB,
        disk_bytes=0,
        numa_cells=2,
        hugepages=(SkuHugepages(ONE_GIB_PAGE, 12),),
    )
    capacity = host_state("sku", sku_facts("sku", sku), policy).capacity
    assert capacity.fit_count(flavors["h4"]).count == 6
    assert capacity.fit_count(flavors["h16"]).count == 0  # 12 pages a cell: 16 GiB fits in none


def test_pci_devices_are_per_cell_with_addresses_of_their_own() -> None:
    devices = (SkuPciDevice("10de", "1eb8", 2), SkuPciDevice("8086", "154c", 3, "type-VF", "0x020000"))
    found = sku_facts(
        "gpus", Sku(cpus=8, memory_bytes=32 * GIB, disk_bytes=0, numa_cells=2, pci_devices=devices)
    )
    assert len(found.pci_devices) == 2 * (2 + 3)
    addresses = [device.address for device in found.pci_devices]
    assert len(set(addresses)) == len(addresses)
    per_cell = Counter((d.numa_node, d.vendor_id, d.product_id, d.dev_type) for d in found.pci_devices)
    assert per_cell == {
        (0, "10de", "1eb8", "type-PCI"): 2,
        (1, "10de", "1eb8", "type-PCI"): 2,
        (0, "8086", "154c", "type-VF"): 3,
        (1, "8086", "154c", "type-VF"): 3,
    }
    assert all(d.class_code == "0x020000" for d in found.pci_devices if d.vendor_id == "8086")


def test_the_pci_functions_of_a_sku_are_offered_to_a_flavor_asking_for_them() -> None:
    policy, flavors = configured(
        """
hypervisors:
  - {name: sku, uri: "test:///default", pci_device_spec: [{vendor_id: "10de", product_id: "1eb8"}]}
flavors:
  - {name: gpu1, vcpu: 1, memory: 1GiB, extra_specs: {"pci_passthrough:alias": "t4:1"}}
pci:
  alias: [{name: t4, vendor_id: "10de", product_id: "1eb8"}]
"""
    )
    sku = Sku(
        cpus=32,
        memory_bytes=256 * GIB,
        disk_bytes=0,
        numa_cells=2,
        pci_devices=(SkuPciDevice("10de", "1eb8", 2),),
    )
    capacity = host_state("sku", sku_facts("sku", sku), policy).capacity
    assert capacity.fit_count(flavors["gpu1"]).count == 4  # 2 a cell


@pytest.mark.parametrize(
    ("sku", "key"),
    [
        (Sku(cpus=4, memory_bytes=GIB, disk_bytes=0, numa_cells=0), "numa_cells"),
        (Sku(cpus=64, memory_bytes=GIB, disk_bytes=0, numa_cells=17), "numa_cells"),
        (Sku(cpus=2, memory_bytes=GIB, disk_bytes=0, numa_cells=4), "cpus"),
        (Sku(cpus=5000, memory_bytes=GIB, disk_bytes=0), "cpus"),
        (
            Sku(
                cpus=4,
                memory_bytes=8 * GIB,
                disk_bytes=0,
                numa_cells=2,
                hugepages=(SkuHugepages(ONE_GIB_PAGE, 5),),
            ),
            "hugepages",
        ),
    ],
    ids=["no cells", "too many cells", "fewer CPUs than cells", "too many CPUs", "hugepages past a cell"],
)
def test_a_sku_that_makes_no_host_says_why(sku: Sku, key: str) -> None:
    problems = sku.problems()
    assert problems and any(problem.startswith(f"{key}: ") for problem in problems), problems
    with pytest.raises(ValueError, match=f"^{key}: "):
        sku_facts("bad", sku)


def test_a_good_sku_has_no_problems() -> None:
    pages = (SkuHugepages(ONE_GIB_PAGE, 4),)  # exactly a cell's memory in hugepages
    assert Sku(cpus=8, memory_bytes=8 * GIB, disk_bytes=0, numa_cells=2, hugepages=pages).problems() == []


# --- the changes a scenario applies -------------------------------------------------------------


def fleet_of_three() -> list[PlannedHost]:
    return [
        planned("a", domains=m2_domains("a", 3), zone="az-1", rack="r1"),
        planned("b", domains=m2_domains("b", 1), zone="az-1", rack="r2"),
        planned("c", zone="az-2", rack="r2"),
    ]


def test_a_policy_change_changes_only_the_hosts_it_selects() -> None:
    hosts = fleet_of_three()
    by_name = PolicyChange(HostSelection(names=frozenset({"a"})), allocation_ratios={Resource.VCPU: 3.0})
    by_group = PolicyChange(
        HostSelection(groups=frozenset({("rack", "r2")})),
        reserved={Resource.MEMORY: 2 * GIB},
        cpu_sets={"cpu_dedicated_set": frozenset(range(8, 16)), "cpu_shared_set": frozenset(range(8))},
    )
    applied = apply_scenario(hosts, Scenario(policy=(by_name, by_group)))
    after = {h.name: h.policy for h in applied.after}
    assert after["a"].allocation_ratios[Resource.VCPU] == 3.0
    assert after["a"].allocation_ratios[Resource.MEMORY] == 1.0  # what the change does not name stays
    assert after["a"].reserved == FLAT.reserved and after["a"].cpu_dedicated_set is None
    for name in ("b", "c"):
        assert after[name].allocation_ratios == FLAT.allocation_ratios
        assert after[name].reserved[Resource.MEMORY] == 2 * GIB
        assert after[name].cpu_dedicated_set == frozenset(range(8, 16))
        assert after[name].cpu_shared_set == frozenset(range(8))
    # the hosts given are left as they were
    assert all(h.policy == FLAT for h in hosts)
    # every host with a policy for all
    everyone = PolicyChange(HostSelection(every=True), allocation_ratios={Resource.MEMORY: 1.5})
    assert all(
        h.policy.allocation_ratios[Resource.MEMORY] == 1.5
        for h in apply_scenario(hosts, Scenario(policy=(everyone,))).after
    )


def test_a_policy_change_is_counted_in_the_answers() -> None:
    # c (empty) with a CPU ratio of 2.0: 16 M2 (32 vCPUs) rather than 8; a and b unchanged
    hosts = fleet_of_three()
    change = PolicyChange(HostSelection(names=frozenset({"c"})), allocation_ratios={Resource.VCPU: 2.0})
    outcome = run_scenario(hosts, Scenario(policy=(change,)), settings(0))
    # before: a 8 - 3, b 8 - 1, c 8; after: c 16 (memory 64 / 4 = 16, disk 50)
    assert outcome.before.schedulable["m2"] == 5 + 7 + 8
    assert outcome.after.schedulable["m2"] == 5 + 7 + 16


def test_a_policy_change_that_overlaps_the_cpu_sets_names_the_change() -> None:
    hosts = fleet_of_three()
    fine = PolicyChange(HostSelection(every=True), allocation_ratios={Resource.VCPU: 2.0})
    shared = PolicyChange(
        HostSelection(names=frozenset({"b"})), cpu_sets={"cpu_shared_set": frozenset(range(4))}
    )
    overlapping = PolicyChange(
        HostSelection(names=frozenset({"b"})), cpu_sets={"cpu_dedicated_set": frozenset(range(2, 16))}
    )
    with pytest.raises(ValueError, match=r"^policy\[2\]") as raised:
        apply_scenario(hosts, Scenario(policy=(fine, shared, overlapping)))
    assert "b" in str(raised.value)


def test_removed_hosts_are_gone_and_drained_ones_stay_empty_in_maintenance() -> None:
    hosts = fleet_of_three()
    scenario = Scenario(
        remove=HostSelection(names=frozenset({"c"})), drain=HostSelection(names=frozenset({"b"}))
    )
    applied = apply_scenario(hosts, scenario)
    assert [h.name for h in applied.after] == ["a", "b"]
    assert (applied.removed, applied.drained, applied.leaving) == (("c",), ("b",), ("b", "c"))
    drained = next(h for h in applied.after if h.name == "b")
    assert drained.facts.domains == () and drained.maintenance is not None
    assert drained.state().refused_by_compute
    assert next(h for h in applied.after if h.name == "a").facts.domains == hosts[0].facts.domains


def test_a_group_is_removed_or_drained_whole() -> None:
    applied = apply_scenario(
        fleet_of_three(), Scenario(drain=HostSelection(groups=frozenset({("rack", "r2")})))
    )
    assert applied.drained == ("b", "c") and applied.removed == ()


def test_added_hosts_are_named_from_their_prefix_without_domains() -> None:
    template = facts("template", domains=m2_domains("t", 2))
    entry = AddedHypervisors(3, "rack9", template, FLAT, (("availability_zone", "az-2"),))
    applied = apply_scenario(fleet_of_three(), Scenario(add=(entry,)))
    assert applied.added == ("rack9-1", "rack9-2", "rack9-3")
    new = applied.after[3:]
    assert [h.name for h in new] == list(applied.added)
    assert all(h.added and h.facts.domains == () and h.facts.hostname == h.name for h in new)
    assert all(h.availability_zone == "az-2" for h in new)
    assert not any(h.added for h in applied.after[:3])


def test_an_added_name_that_clashes_is_an_error() -> None:
    with pytest.raises(ValueError, match="b-2"):
        apply_scenario([*fleet_of_three(), planned("b-2")], Scenario(add=(identical(3, "b"),)))
    # two entries with the same prefix clash with each other
    with pytest.raises(ValueError, match="x-1"):
        apply_scenario(fleet_of_three(), Scenario(add=(identical(1, "x"), identical(2, "x"))))


# --- adding N identical hosts adds N times what one offers ---------------------------------------


@pytest.mark.parametrize("added", [1, 2, 3, 7])
def test_adding_identical_hosts_adds_their_schedulable_instances(added: int) -> None:
    # two of the same kind before, 3 and 1 M2 domains on them: m2 8 - 3 + 8 - 1 = 12; s1 (16 a
    # host, halved by each M2's 2 CPUs) 16 - 6 + 16 - 2 = 24
    hosts = [planned("a", domains=m2_domains("a", 3)), planned("b", domains=m2_domains("b", 1))]
    outcome = run_scenario(hosts, Scenario(add=(identical(added),)), settings(0))
    assert outcome.before.schedulable == {"m2": 12, "s1": 24}
    assert outcome.after.schedulable == {"m2": 12 + added * 8, "s1": 24 + added * 16}
    assert (outcome.before.hypervisors, outcome.after.hypervisors) == (2, 2 + added)


@pytest.mark.parametrize("added", [1, 2, 5])
def test_adding_identical_hosts_adds_their_sellable_instances_without_a_reserve(added: int) -> None:
    hosts = [planned("a", domains=m2_domains("a", 3)), planned("b", domains=m2_domains("b", 1))]
    outcome = run_scenario(hosts, Scenario(add=(identical(added),)), settings(0))
    assert outcome.before.sellable == {"m2": 12, "s1": 24}
    assert outcome.after.sellable == {"m2": 12 + added * 8, "s1": 24 + added * 16}


@pytest.mark.parametrize("added", [1, 2, 5])
def test_adding_identical_hosts_adds_their_sellable_instances_with_a_reserve_of_one(added: int) -> None:
    # H hosts alike, each holding at most 8 M2 (every domain one), k held in all: losing the host
    # holding the most, its L domains find room on the others iff (H - 1) x 8 - (k - L) >= L, that
    # is k <= (H - 1) x 8 whatever L. With 4 held already: (H - 1) x 8 - 4 more.
    hosts = [planned("a", domains=m2_domains("a", 3)), planned("b", domains=m2_domains("b", 1))]
    outcome = run_scenario(hosts, Scenario(add=(identical(added),)), settings(1, {"m2": M2}))
    assert outcome.reserve_host_failures == 1
    assert outcome.before.sellable == {"m2": (2 - 1) * 8 - 4}
    assert outcome.after.sellable == {"m2": (2 + added - 1) * 8 - 4}
    assert outcome.after.sellable["m2"] - outcome.before.sellable["m2"] == added * 8
    assert outcome.after.failures_tolerated >= 1


def test_identical_hosts_added_in_a_zone_add_to_that_zone_only() -> None:
    hosts = [planned("a", zone="az-1"), planned("b", zone="az-2"), planned("c", zone="az-2")]
    outcome = run_scenario(hosts, Scenario(add=(identical(3, zone="az-1"),)), settings(0, {"m2": M2}))
    assert outcome.before.schedulable_by_zone == {("az-1", "m2"): 8, ("az-2", "m2"): 16}
    assert outcome.after.schedulable_by_zone == {("az-1", "m2"): 8 + 3 * 8, ("az-2", "m2"): 16}
    assert outcome.after.sellable_by_zone == {("az-1", "m2"): 32, ("az-2", "m2"): 16}


def test_a_scenario_that_changes_nothing_answers_the_same_after() -> None:
    hosts = fleet_of_three()
    outcome = run_scenario(hosts, Scenario(), settings(1))
    assert outcome.after == outcome.before
    assert (outcome.moves, outcome.unplaced) == ((), ())


# --- demand placed as the scheduler places it ----------------------------------------------------


def mixed_fleet() -> list[PlannedHost]:
    """Hosts of different sizes and loads: the scheduler's weighers decide where each lands."""
    return [
        planned("p", cpus=32, memory_gib=128, domains=m2_domains("p", 5)),
        planned("q", cpus=16, memory_gib=64, domains=m2_domains("q", 1)),
        planned("r", cpus=8, memory_gib=96),
        planned("s", cpus=24, memory_gib=48, domains=m2_domains("s", 2)),
    ]


@pytest.mark.parametrize("count", [1, 5, 17, 30])
def test_a_demand_lands_where_one_request_of_the_scheduler_puts_it(count: int) -> None:
    hosts = mixed_fleet()
    item = DemandItem("m2", M2, count)
    outcome = run_scenario(hosts, Scenario(demand=(item,)), settings(0))
    expected = schedule(states(hosts), M2, count, multipliers=SPREAD)
    assert expected.placed  # free: p 11, q 7, r 4, s 10
    assert [dict(p.hypervisors) for p in outcome.placed] == [dict(Counter(expected.hosts))]
    assert outcome.unplaced == ()
    assert outcome.after.schedulable["m2"] == outcome.before.schedulable["m2"] - count


def test_demand_that_does_not_all_fit_places_what_fits_and_says_why_the_rest_does_not() -> None:
    # free M2: p 16 - 5 = 11 (32 CPUs), q 8 - 1 = 7, r 4 (8 CPUs), s 12 - 2 = 10 (48 GiB: memory
    # 12, CPUs 12): 32 in all
    hosts = mixed_fleet()
    outcome = run_scenario(hosts, Scenario(demand=(DemandItem("m2", M2, 40),)), settings(0))
    fitted = schedule(states(hosts), M2, 32, multipliers=SPREAD)
    assert fitted.placed and not schedule(states(hosts), M2, 33, multipliers=SPREAD).placed
    [placed] = outcome.placed
    assert dict(placed.hypervisors) == dict(Counter(fitted.hosts))
    assert sum(placed.hypervisors.values()) == 32
    [unplaced] = outcome.unplaced
    assert (unplaced.label, unplaced.count) == ("m2", 8)
    assert unplaced.refusals.refused_by == {PLACEMENT: 4}
    assert unplaced.refusals.example.startswith("p: Placement: ")
    assert outcome.after.schedulable["m2"] == 0


def test_demand_entries_are_placed_in_order_each_after_the_one_before() -> None:
    hosts = mixed_fleet()
    first, second = DemandItem("m2", M2, 12), DemandItem("s1", S1, 9)
    placed = place_demand(states(hosts), (first, second), SPREAD)
    one = schedule(states(hosts), M2, 12, multipliers=SPREAD)
    two = schedule(one.states, S1, 9, multipliers=SPREAD)
    assert [dict(p.hypervisors) for p in placed.placed] == [
        dict(Counter(one.hosts)),
        dict(Counter(two.hosts)),
    ]
    landed = Counter(one.hosts) + Counter(two.hosts)
    assert {s.name: new_guests(s, states(hosts)) for s in placed.states} == {
        h.name: landed[h.name] for h in hosts
    }


def test_demand_in_a_zone_lands_in_it_and_on_the_added_hosts_as_the_scheduler_would() -> None:
    hosts = [planned("a", zone="az-1"), planned("b", zone="az-2", domains=m2_domains("b", 6))]
    item = DemandItem("m2 in az-2", replace(M2, availability_zone="az-2"), 10)
    outcome = run_scenario(hosts, Scenario(add=(identical(2, zone="az-2"),), demand=(item,)), settings(0))
    added = [
        host_state(
            f"new-{n}", replace(facts("template"), hostname=f"new-{n}"), FLAT, availability_zone="az-2"
        )
        for n in (1, 2)
    ]
    expected = schedule([*states(hosts), *added], item.demand, 10, multipliers=SPREAD)
    assert expected.placed and "a" not in expected.hosts
    assert [dict(p.hypervisors) for p in outcome.placed] == [dict(Counter(expected.hosts))]


# --- drained and removed hosts' domains re-homed ---------------------------------------------------


def test_a_drained_hosts_domains_are_re_homed_one_by_one_largest_first() -> None:
    domains = (
        *m2_domains("x", 2),
        guest("x-big", 16, vcpus=4, disk_gib=40),
        guest("x-small", 1, vcpus=1, disk_gib=0),
    )
    hosts = [
        planned("x", domains=domains),
        planned("y", domains=m2_domains("y", 5)),
        planned("z", cpus=8, memory_gib=32),
    ]
    outcome = run_scenario(hosts, Scenario(drain=HostSelection(names=frozenset({"x"}))), settings(0))
    # the reference: each domain of x, largest first, one request of one on what the others are
    remaining = states(hosts)[1:]
    expected = {}
    for moving in evacuation_order(states(hosts)[0].guests):
        result = schedule(remaining, moving.demand, 1, multipliers=SPREAD)
        assert result.placed
        expected[moving.name] = result.hosts[0]
        remaining = list(result.states)
    assert {move.domain: move.destination for move in outcome.moves} == expected
    assert [move.domain for move in outcome.moves] == list(expected)  # in the evacuation's order
    assert all(move.source == "x" and move.refusals is None for move in outcome.moves)
    after = _after_states(hosts, Scenario(drain=HostSelection(names=frozenset({"x"}))))
    held = {g.name: s.name for s in after for g in s.guests}
    for domain, destination in expected.items():
        assert held[domain] == destination
    drained = next(s for s in after if s.name == "x")
    assert drained.guests == () and drained.refused_by_compute
    assert outcome.after.eligible == 2


def _after_states(hosts: Sequence[PlannedHost], scenario: Scenario) -> tuple[HostState, ...]:
    return rehome(apply_scenario(hosts, scenario), SPREAD).states


def test_a_removed_hosts_domains_land_on_the_hosts_added_by_the_same_scenario() -> None:
    hosts = [planned("old", domains=m2_domains("old", 6)), planned("full", domains=m2_domains("full", 8))]
    scenario = Scenario(remove=HostSelection(names=frozenset({"old"})), add=(identical(1),))
    outcome = run_scenario(hosts, scenario, settings(0))
    assert {move.destination for move in outcome.moves} == {"new-1"}
    assert len(outcome.moves) == 6
    after = _after_states(hosts, scenario)
    assert [s.name for s in after] == ["full", "new-1"]
    assert len(next(s for s in after if s.name == "new-1").guests) == 6
    assert outcome.after.schedulable["m2"] == 8 - 6


def test_what_no_host_takes_is_reported_with_the_refusals() -> None:
    # y has room for 3 M2 (5 held: 6 CPUs and 44 GiB free) and none for a 48 GiB domain: x's two
    # M2 go, its big one not
    big = guest("x-big", 48, vcpus=4, disk_gib=0)
    hosts = [planned("x", domains=(big, *m2_domains("x", 2))), planned("y", domains=m2_domains("y", 5))]
    outcome = run_scenario(hosts, Scenario(drain=HostSelection(names=frozenset({"x"}))), settings(0))
    by_domain = {move.domain: move for move in outcome.moves}
    assert set(by_domain) == {"x-big", "x-0", "x-1"}
    nowhere = by_domain["x-big"]
    assert nowhere.destination is None and nowhere.refusals is not None
    assert nowhere.refusals.refused_by == {PLACEMENT: 1}
    assert nowhere.refusals.example.startswith("y: Placement")
    assert by_domain["x-0"].destination == by_domain["x-1"].destination == "y"
    assert not fits_with_reserve(hosts, Scenario(drain=HostSelection(names=frozenset({"x"}))), settings(0))


def test_a_leaving_hosts_pending_claims_are_re_homed_too() -> None:
    claim = M2
    leaving = replace(planned("x"), claimed=dict(claim.request), pending=(claim,))
    hosts = [leaving, planned("y")]
    outcome = run_scenario(hosts, Scenario(remove=HostSelection(names=frozenset({"x"}))), settings(0))
    [move] = outcome.moves
    assert (move.source, move.destination) == ("x", "y")
    assert move.domain.startswith("pending-claim-")
    assert outcome.before.schedulable["m2"] == 7 + 8
    assert outcome.after.schedulable["m2"] == 7


# --- the fewest hosts to add ---------------------------------------------------------------------


def _with_added(hosts: Sequence[PlannedHost], count: int) -> list[HostState]:
    added = [
        host_state(f"new-{n}", replace(facts("template"), hostname=f"new-{n}"), FLAT)
        for n in range(1, count + 1)
    ]
    return [*states(hosts), *added]


def _placed_states(fleet: Sequence[HostState], demand: Demand, count: int) -> list[HostState] | None:
    """The fleet with one request of `count` placed, each instance a guest of its host (so that a
    host's evacuation moves them); None: they do not all fit."""
    result = schedule(fleet, demand, count, multipliers=SPREAD)
    if not result.placed:
        return None
    landed = Counter(result.hosts)
    return [
        replace(s, guests=(*s.guests, *(Guest(f"new-{n}@{s.name}", demand) for n in range(landed[s.name]))))
        for s in result.states
    ]


@pytest.mark.parametrize(("demand", "reserve", "expected"), [(30, 0, 3), (30, 1, 4), (61, 0, 7), (10, 1, 2)])
def test_the_fewest_hosts_to_add_fit_and_one_fewer_does_not(demand: int, reserve: int, expected: int) -> None:
    # one host of 8 M2 before, each added one 8 more: without a reserve 8 x (1 + n) >= demand; with
    # a reserve of one host, 8 x n >= demand (the count of the sellable test above): 30 -> 3 and 4,
    # 61 -> 7, 10 -> 2 with the reserve (one added: 16 fit, but losing one leaves room for 8)
    hosts = [planned("a")]
    scenario = Scenario(add=(identical(1),), demand=(DemandItem("m2", M2, demand),))
    outcome = solve_for_added(hosts, scenario, settings(reserve))
    assert outcome.added_count == expected
    assert outcome.applied.added == tuple(f"new-{n}" for n in range(1, expected + 1))
    assert outcome.unplaced == ()
    tries = dict(outcome.tries)
    assert tries[expected] is True and tries[expected - 1] is False
    fits = replace(scenario, add=(identical(expected),))
    short = replace(scenario, add=(identical(expected - 1),) if expected > 1 else ())
    assert fits_with_reserve(hosts, fits, settings(reserve))
    assert not fits_with_reserve(hosts, short, settings(reserve))
    # and independently: the request placed by the scheduler, the reserve by the reference
    enough = _placed_states(_with_added(hosts, expected), M2, demand)
    fewer = _placed_states(_with_added(hosts, expected - 1), M2, demand)
    assert enough is not None
    assert reference_tolerated(enough, reserve, SPREAD) >= reserve
    assert fewer is None or reference_tolerated(fewer, reserve, SPREAD) < reserve


def test_nothing_to_add_when_the_demand_fits_already() -> None:
    hosts = [planned("a"), planned("b")]
    scenario = Scenario(add=(identical(5),), demand=(DemandItem("m2", M2, 8),))
    outcome = solve_for_added(hosts, scenario, settings(1))
    assert outcome.added_count == 0 and outcome.applied.added == ()
    assert outcome.after.hypervisors == 2


def test_past_the_limit_the_search_says_so() -> None:
    hosts = [planned("a")]
    too_many = Scenario(add=(identical(1),), demand=(DemandItem("m2", M2, 100),))  # 8 + 8n >= 100: n = 12
    with pytest.raises(SolveError, match=r"^add_hypervisors: "):
        solve_for_added(hosts, too_many, settings(0), limit=5)
    assert solve_for_added(hosts, too_many, settings(0), limit=12).added_count == 12
    # a flavor no host of the kind takes: never
    huge = Demand({Resource.VCPU: 32, Resource.MEMORY: 4 * GIB})
    never = Scenario(add=(identical(1),), demand=(DemandItem("huge", huge, 1),))
    with pytest.raises(SolveError):
        solve_for_added(hosts, never, settings(0), limit=4)


@pytest.mark.parametrize("entries", [0, 2])
def test_the_search_needs_exactly_one_kind_to_add(entries: int) -> None:
    add = tuple(identical(1, f"kind{n}") for n in range(entries))
    scenario = Scenario(add=add, demand=(DemandItem("m2", M2, 1),))
    with pytest.raises(ValueError, match=r"^add_hypervisors: ") as raised:
        solve_for_added([planned("a")], scenario, settings(0))
    assert not isinstance(raised.value, SolveError)
