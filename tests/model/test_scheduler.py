"""The scheduling engine: where instances land, why hosts refuse them, and evacuations.

Every expected placement is worked out by hand from the hosts' shapes (in the comments). Unless a
test says otherwise, hosts have allocation ratios of 1.0 and nothing reserved, so that a host's
limit is its size.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.factories import GIB, MIB, domain, host
from tests.support.fleets import (
    CRAMPED,
    DEFAULTS,
    DOMAINS,
    FLAT,
    FULL,
    LARGER,
    MULTIPLIERS,
    SHAPES,
    STACK,
    Shapes,
    fleet,
    fleet_facts,
    guest,
    larger_fleet,
    reference_tolerated,
    state,
)
from tests.support.hosts import (
    PCI_CONFIG,
    PINNED_CONFIG,
    VGPU_CONFIG,
    configured,
    gpu_host,
    pinned_host,
    sriov_host,
    with_cells,
)
from virtcap.claims import ledger
from virtcap.config import Hypervisor
from virtcap.fleet.scheduling import FleetEntry, schedule_fleet
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.model import scheduler
from virtcap.model.capacity import domain_allocation, host_capacity
from virtcap.model.facts import HostFacts, NovaFlavor, NumaCell, PageCount
from virtcap.model.host_fit import Demand, HostFitRefusal, within_host
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    ANTI_AFFINITY,
    AVAILABILITY_ZONE,
    COMPUTE,
    FILTERS,
    FORCE_HOSTS,
    IGNORE_HOSTS,
    NUMA_TOPOLOGY,
    PCI_PASSTHROUGH,
    PLACEMENT,
    SPREAD,
    CandidateMemo,
    FleetTolerance,
    Guest,
    HostState,
    Multipliers,
    Rejection,
    Unplaced,
    evacuation,
    evacuation_order,
    fleet_index,
    fleet_tolerance,
    fleet_tolerance_update,
    host_state,
    normalize,
    schedule,
    weigh,
)
from virtcap.model.scheduler.best_host import first_in_order, threshold_best, weigher_tops
from virtcap.model.scheduler.evacuations import reference_evacuation
from virtcap.model.scheduler.failure_tolerance import steps_that_stand
from virtcap.model.scheduler.filters import INSTANCE_FILTERS, REQUEST_FILTERS
from virtcap.model.scheduler.host_states import consume_in_turn, raw_weigher_values, weigher_levels
from virtcap.model.scheduler.weighers import weight_of


def demand(vcpu: int = 1, memory_gib: int = 4, disk_gib: int = 10) -> Demand:
    return Demand({Resource.VCPU: vcpu, Resource.MEMORY: memory_gib * GIB, Resource.DISK: disk_gib * GIB})


# --- weighing -------------------------------------------------------------------------------------


def test_normalize_is_novas_with_minval_0() -> None:
    assert normalize([]) == []
    assert normalize([5.0, 10.0, 0.0]) == [0.5, 1.0, 0.0]
    # equal values are not all 0 with minval 0: each is max / max
    assert normalize([7.0, 7.0]) == [1.0, 1.0]
    # all 0 only when the largest is the minval
    assert normalize([0.0, 0.0]) == [0.0, 0.0]
    # without minval: the smallest value is 0
    assert normalize([2.0, 4.0, 3.0], minval=None) == [0.0, 1.0, 0.5]
    assert normalize([3.0, 3.0], minval=None) == [0.0, 0.0]


def test_the_legacy_raw_values_come_from_the_capacity() -> None:
    # 8 CPUs at Nova's 4.0, 2 reserved; 32 GiB with 512 MiB reserved; 100 GiB disk, 1536 MiB
    # reserved (the inventory reserves 2 GiB, rounded up; the weigher the configured MiB)
    policy = HostPolicy(reserved={Resource.VCPU: 2, Resource.MEMORY: 512 * MIB, Resource.DISK: 1536 * MIB})
    dedicated = replace(HostPolicy(), cpu_dedicated_set=frozenset({6, 7}), cpu_shared_set=frozenset(range(6)))
    facts = host(cpus=8, memory=32 * GIB, disk=100 * GIB, domains=(guest("a", 4, vcpus=3, disk_gib=20),))
    hs = host_state("h", facts, policy)
    assert hs.free_ram_mb == 32 * 1024 - 512 - 4 * 1024
    assert hs.vcpus_total == 8 and hs.cpu_allocation_ratio == 4.0 and hs.vcpus_used == 2 + 3
    assert hs.raw_weights()["cpu"] == 8 * 4.0 - 5
    assert hs.free_disk_mb == 100 * 1024 - 1536 - 20 * 1024
    assert hs.capacity.resources[Resource.DISK].reserved == 2 * GIB
    # a pinned guest's vCPUs count in vcpus_used, as the resource tracker adds every flavor's
    pinned = replace(guest("p", 1, vcpus=2), vcpu_pins=(frozenset({6}), frozenset({7})))
    hd = host_state("d", host(cpus=8, memory=32 * GIB, domains=(pinned,)), dedicated)
    assert hd.vcpus_total == 6 and hd.vcpus_used == 2


def test_weights_clip_at_0_and_one_host_weighs_0() -> None:
    over = state("over", memory_gib=8, domains=(guest("big", 12),))  # free RAM -4 GiB: clipped to 0
    roomy = state("roomy", memory_gib=8)
    (alone,) = weigh([roomy])
    assert alone.weight == 0.0
    by_name = {w.host: w for w in weigh([over, roomy])}
    assert by_name["over"].raw["ram"] == -4096
    assert by_name["over"].parts["ram"] == 0.0 and by_name["roomy"].parts["ram"] == 1.0


# --- spread and stack -----------------------------------------------------------------------------

# Two hosts a and b of 4 CPUs, 16 GiB, 100 GiB; instances of 1 vCPU, 4 GiB, 10 GiB: 4 fit on each.
# Spread: equal hosts tie (a by name), then the emptier one wins: a, b, a, b.
# Stack: the fuller one wins: a until its 4 vCPUs are gone; the 5th is weighed on a (still an
# allocation candidate, RAM and CPU 0 but 60 GiB of disk: -0.6 against b's -3), refused at its
# Placement claim, and goes to b.


def test_spread_alternates_and_stack_fills_one_host_first() -> None:
    hosts = [state("a"), state("b")]
    assert schedule(hosts, demand(), 4).hosts == ("a", "b", "a", "b")
    stacked = schedule(hosts, demand(), 5, multipliers=STACK)
    assert stacked.hosts == ("a", "a", "a", "a", "b")
    assert stacked.steps[4].weighed.host == "b" and stacked.steps[4].candidates == 2
    assert stacked.rejections["a"].filter == PLACEMENT
    assert stacked.rejections["a"].reason.startswith("claim refused: Free vcpu 0.00 VCPU < requested 1 VCPU")


def test_spread_and_stack_choose_different_hosts_of_different_sizes() -> None:
    # big: 32 GiB, small: 16 GiB, both 4 CPUs and 100 GiB. Spread, first instance:
    #   big  ram 32768/32768 = 1, cpu 4/4 = 1, disk 1 -> 3
    #   small ram 16384/32768 = 0.5, cpu 1, disk 1 -> 2.5: big
    # Stack: -3 against -2.5: small.
    hosts = [state("big", memory_gib=32), state("small")]
    spread = schedule(hosts, demand(), 1)
    assert spread.hosts == ("big",)
    assert spread.steps[0].weighed.weight == pytest.approx(3.0)
    assert schedule(hosts, demand(), 1, multipliers=STACK).hosts == ("small",)
    # RAM stacks, CPU spreads twice as hard: big 1 x -1 + 1 x 2 + 0 = 1, small -0.5 + 2 = 1.5
    mixed = Multipliers(ram=-1.0, cpu=2.0, disk=0.0)
    assert schedule(hosts, demand(), 1, multipliers=mixed).hosts == ("small",)


# --- all or nothing, the reasons ------------------------------------------------------------------


def test_a_batch_is_all_or_nothing_and_says_why_the_rest_does_not_fit() -> None:
    hosts = [state("a"), state("b"), state("tiny", memory_gib=8, domains=(guest("six", 6),))]
    result = schedule(hosts, demand(), 9)
    assert not result.placed and result.hosts == () and result.fitted == 8 and result.unplaced == 1
    assert result.states == tuple(hosts)  # nothing consumed
    # tiny never was a candidate: Placement refused its memory at the start
    assert result.rejections["tiny"].filter == PLACEMENT
    assert result.rejections["tiny"].reason == "Free memory 2048.00 MiB < requested 4096 MiB"
    for name in ("a", "b"):
        assert result.rejections[name].reason.startswith("claim refused: Free vcpu 0.00 VCPU")
    assert schedule(hosts, demand(), 8).placed


def test_a_request_for_no_instance_places_nothing_and_succeeds() -> None:
    hosts = [state("a")]
    empty = schedule(hosts, demand(), 0)
    assert empty.placed and empty.hosts == () and empty.states == tuple(hosts)
    with pytest.raises(ValueError, match="at least 0"):
        schedule(hosts, demand(), -1)
    with pytest.raises(ValueError, match="each host once"):
        schedule([state("a"), state("a")], demand(), 1)


def test_a_request_larger_than_any_host_is_refused_by_max_unit() -> None:
    result = schedule([state("a")], demand(vcpu=6), 1)
    assert result.fitted == 0
    assert "larger than the whole hypervisor" in result.rejections["a"].reason


def test_down_and_stale_hosts_take_nothing() -> None:
    hosts = [state("a", up=False), replace(state("b"), stale=True), state("c")]
    result = schedule(hosts, demand(), 1)
    assert result.hosts == ("c",)
    assert result.rejections["a"].filter == COMPUTE and "down" in result.rejections["a"].reason
    assert result.rejections["b"].filter == COMPUTE and "stale" in result.rejections["b"].reason


def test_numa_refusals_are_the_numa_filters() -> None:
    # the pinned host has 13 free dedicated CPUs, 6 and 7 per cell: p8 fits the classes, no cell
    policy, flavors = configured(PINNED_CONFIG)
    pinned = host_state("pinned", pinned_host(), policy)
    result = schedule([pinned], flavors["p8"], 1)
    assert result.fitted == 0 and result.rejections["pinned"].filter == NUMA_TOPOLOGY
    # p4: one in each cell (6 and 7 free CPUs: 2 and 3 left), though 13 - 8 = 5 PCPUs are left:
    # the third finds no cell
    assert schedule([pinned], flavors["p4"], 2).placed
    third = schedule([pinned], flavors["p4"], 3)
    assert third.fitted == 2 and third.rejections["pinned"].filter == NUMA_TOPOLOGY
    assert host_capacity(pinned_host(), policy, flavors).schedulable["p4"] == 2


LARGE = {"hw:mem_page_size": "large"}
ONE_GIB_PAGES = 1024 * 1024
"""KiB."""


def paged(name: str, memory_gib: int, one_gib: int, two_mib: int = 0) -> HostState:
    return host_state(name, paged_facts(memory_gib, one_gib, two_mib), FLAT)


def paged_facts(memory_gib: int, one_gib: int, two_mib: int = 0) -> HostFacts:
    """One cell of 4 CPUs holding all the host's memory: `one_gib` free 1 GiB pages, `two_mib`
    free 2 MiB pages, the rest in 4 KiB pages."""
    small = (memory_gib * GIB - one_gib * GIB - two_mib * 2 * MIB) // 4096
    pages = [PageCount(4, small, None)]
    if two_mib:
        pages.append(PageCount(2048, two_mib, two_mib))
    if one_gib:
        pages.append(PageCount(ONE_GIB_PAGES, one_gib, one_gib))
    cell = NumaCell(0, frozenset(range(4)), (), memory_gib * GIB, tuple(pages))
    return with_cells(host(cpus=4, memory=memory_gib * GIB), (cell,))


def large_pages(memory_gib: int = 1) -> Demand:
    """One vCPU and its memory in large pages (a 1 GiB page if one is free, else 2 MiB ones)."""
    memory = memory_gib * GIB
    return Demand({Resource.VCPU: 1, Resource.MEMORY: memory}, within_host(1, memory, LARGE))


def free_pages(state: HostState, size_kib: int) -> int:
    pages = state.capacity.within.cells[0].page(size_kib)
    assert pages is not None
    return pages.free


def test_a_requests_later_instances_ask_for_the_page_size_fitted_before() -> None:
    # one cell: a free 1 GiB page and 512 free 2 MiB pages (1 GiB). The first instance takes the
    # 1 GiB page (large: the largest size that holds it); Nova's scheduler then asks 1 GiB pages
    # for the second (consume_from_request keeps the fitted topology in the request spec): none
    h = paged("h", 4, one_gib=1, two_mib=512)
    two = schedule([h], large_pages(), 2)
    assert two.fitted == 1
    assert two.rejections["h"] == Rejection(
        NUMA_TOPOLOGY,
        (
            "NUMA: cell 0: 0 free 1048576 KiB pages < 1 needed"
            " (the size fitted for the request's previous instance)",
        ),
    )
    # each in its own request, the second is fitted afresh: 2 MiB pages, all 512 of them
    first = schedule([h], large_pages(), 1)
    (after,) = first.states
    assert (free_pages(after, ONE_GIB_PAGES), free_pages(after, 2048)) == (0, 512)
    second = schedule([after], large_pages(), 1)
    assert second.placed and free_pages(second.states[0], 2048) == 0
    # a forced host skips the filters: nova-compute fits each instance with its own topology
    forced = schedule([h], large_pages(), 2, force_hosts=["h"])
    assert forced.hosts == ("h", "h")
    (consumed,) = forced.states
    assert (free_pages(consumed, ONE_GIB_PAGES), free_pages(consumed, 2048)) == (0, 0)


def test_the_page_size_fitted_on_one_host_sends_the_next_instance_to_another() -> None:
    # a: 16 GiB, a free 1 GiB page and 512 free 2 MiB pages; b: 8 GiB, two free 1 GiB pages;
    # 4 CPUs each, no disk asked. First instance: RAM 16 and 8 GiB free (1.0, 0.5), CPUs 4 and 4
    # (1.0 each), disk equal (1.0 each): a weighs 3.0, b 2.5, and takes it in its 1 GiB page.
    # Second: RAM 15 and 8 (1.0, 0.53), CPUs 3 and 4 (0.75, 1.0): a 2.75, b 2.53. On its own the
    # instance would go to a again (in 2 MiB pages), but it asks for a 1 GiB page now: a has none
    # left, and b, alone to pass (weighing 0), takes it.
    a, b = paged("a", 16, one_gib=1, two_mib=512), paged("b", 8, one_gib=2)
    result = schedule([a, b], large_pages(), 2)
    assert result.hosts == ("a", "b")
    assert [(round(step.weighed.weight, 2), step.candidates) for step in result.steps] == [(3.0, 2), (0.0, 1)]
    assert result.rejections["a"].filter == NUMA_TOPOLOGY
    states = {state.name: state for state in result.states}
    assert free_pages(states["a"], ONE_GIB_PAGES) == 0 and free_pages(states["a"], 2048) == 512
    assert free_pages(states["b"], ONE_GIB_PAGES) == 1
    # in two requests the second is fitted afresh, and a weighs more
    first = schedule([a, b], large_pages(), 1)
    again = schedule(first.states, large_pages(), 1)
    assert again.hosts == ("a",) and round(again.steps[0].weighed.weight, 2) == 2.75
    assert [round(w.weight, 2) for w in weigh(first.states)] == [2.75, 2.53]
    # three instances: the third asks for the size fitted on b for the second (1 GiB): b's
    # last page (a refuses it), though a still has 1 GiB of 2 MiB pages
    three = schedule([a, b], large_pages(), 3)
    assert three.hosts == ("a", "b", "b")
    four = schedule([a, b], large_pages(), 4)
    assert four.fitted == 3 and {r.filter for r in four.rejections.values()} == {NUMA_TOPOLOGY}


def test_a_claim_on_any_follows_the_scheduler_a_named_one_nova_computes_claims() -> None:
    # the host of the first case above: a claim of two on `any` lands where the dry run says (one
    # fits: the second asks for the 1 GiB page the first took); on the named host, each instance
    # is nova-compute's claim, fitted with its own topology: both fit (2 MiB pages for the second)
    hypervisor = Hypervisor("h", "test:///default", FLAT, None)
    entry = FleetEntry.of(HypervisorSnapshot.audited(hypervisor, paged_facts(4, one_gib=1, two_mib=512), {}))
    assert schedule_fleet([entry], [], large_pages(), 2).result.fitted == 1
    named = ledger._on_hypervisor(entry, [], large_pages(), 2)
    assert named.result.hosts == ("h", "h")


# --- ignore_hosts, force_hosts, anti-affinity -----------------------------------------------------


def test_ignore_hosts_leave_hosts_out_whatever_the_case() -> None:
    hosts = [state("a"), state("b")]
    result = schedule(hosts, demand(), 2, ignore_hosts=["A"])
    assert result.hosts == ("b", "b") and result.rejections["a"].filter == IGNORE_HOSTS
    none = schedule(hosts, demand(), 1, ignore_hosts=["a", "b"])
    assert none.fitted == 0 and {r.filter for r in none.rejections.values()} == {IGNORE_HOSTS}


def test_force_hosts_take_the_first_forced_host_only() -> None:
    hosts = [state("a"), state("b")]
    assert schedule(hosts, demand(), 3, force_hosts=["B"]).hosts == ("b", "b", "b")
    both = schedule(hosts, demand(), 2, force_hosts=["b", "a"])
    assert both.hosts == ("b", "b") and both.rejections["a"].filter == FORCE_HOSTS
    # the forced host is full after 4: the request fails rather than spill over
    assert schedule(hosts, demand(), 5, force_hosts=["b"]).fitted == 4
    missing = schedule(hosts, demand(), 1, force_hosts=["nowhere", "a"])
    assert missing.fitted == 0 and missing.no_valid_host == "No such host - host: nowhere"
    ignored = schedule(hosts, demand(), 1, force_hosts=["a"], ignore_hosts=["a"])
    assert ignored.fitted == 0 and ignored.rejections["a"].filter == IGNORE_HOSTS


def test_a_forced_host_that_does_not_exist_leaves_every_host_refused() -> None:
    # Nova fails at once ("No such host"); every host is listed all the same, not forced (as an
    # unaudited host is) or ignored, whatever the case of the names
    hosts = [state("a"), state("b"), state("c", up=False)]
    missing = schedule(hosts, demand(), 2, force_hosts=["Nowhere", "a"], ignore_hosts=["B"])
    assert (missing.fitted, missing.steps, missing.no_valid_host) == (0, (), "No such host - host: Nowhere")
    not_forced = "not the forced host Nowhere (Nova asks Placement for the first of force_hosts only)"
    assert dict(missing.rejections) == {
        "a": scheduler.Rejection(FORCE_HOSTS, (not_forced,)),
        "b": scheduler.Rejection(IGNORE_HOSTS, ("b is in ignore_hosts",)),
        "c": scheduler.Rejection(FORCE_HOSTS, (not_forced,)),
    }
    assert missing.states == tuple(hosts)


def test_anti_affinity_puts_each_instance_of_a_request_on_its_own_host() -> None:
    hosts = [state("a"), state("b")]
    assert schedule(hosts, demand(), 2, multipliers=STACK).hosts == ("a", "a")
    assert schedule(hosts, demand(), 2, multipliers=STACK, anti_affinity=True).hosts == ("a", "b")
    third = schedule(hosts, demand(), 3, anti_affinity=True)
    assert third.fitted == 2
    assert {r.filter for r in third.rejections.values()} == {ANTI_AFFINITY}


# --- consuming an instance ------------------------------------------------------------------------


CONSUMED = [
    (PINNED_CONFIG, pinned_host, ["p4", "m1.small", "p2.1g", "p1", "s1.1g"]),
    (PCI_CONFIG, sriov_host, ["pv.preferred", "pv.preferred"]),
    (PCI_CONFIG, sriov_host, ["v2", "pv.preferred"]),
    (PCI_CONFIG, lambda: sriov_host(numa=False), ["v2", "v2"]),
    (VGPU_CONFIG, gpu_host, ["g2", "g2"]),
    (VGPU_CONFIG, gpu_host, ["g3", "g2"]),
]


@pytest.mark.parametrize(("config", "facts", "sequence"), CONSUMED)
def test_consuming_is_host_capacity_with_the_instance_pending(
    config: str, facts: Callable[[], HostFacts], sequence: list[str]
) -> None:
    """consume() updates the state in place of recomputing it: the same classes, cells, devices,
    vGPUs and claim answers as host_capacity with the placed instances as pending claims."""
    policy, flavors = configured(config)
    measured = facts()
    incremental = host_state("h", measured, policy)
    placed: list[Demand] = []
    for name in sequence:
        instance = flavors[name]
        assert incremental.capacity.claim_test(instance) == [], name
        incremental = incremental.consume(instance)
        placed.append(instance)
        claimed: dict[Resource, int] = {}
        for one in placed:
            for resource, amount in one.request.items():
                claimed[resource] = claimed.get(resource, 0) + amount
        exact = host_capacity(measured, policy, None, claimed, placed)
        assert dict(incremental.capacity.resources) == dict(exact.resources)
        assert incremental.capacity.within == exact.within
        assert incremental.capacity.claimed_vgpus == exact.claimed_vgpus
        for other, flavor in flavors.items():
            assert incremental.capacity.claim_test(flavor) == exact.claim_test(flavor), other


def test_devices_and_vgpus_are_consumed_instance_by_instance() -> None:
    policy, flavors = configured(PCI_CONFIG)
    nics = host_state("nics", sriov_host(numa=False), policy)
    # 4 free VFs: two instances of 2, the third finds none
    two = schedule([nics], flavors["v2"], 3)
    assert two.fitted == 2 and two.rejections["nics"].filter == PCI_PASSTHROUGH
    assert two.rejections["nics"].reason == "PCI: no free devices for vf-legacy:2 (vf-legacy 0 free)"
    assert schedule([nics], flavors["v5"], 1).rejections["nics"].filter == PCI_PASSTHROUGH
    policy, flavors = configured(VGPU_CONFIG)
    gpus = host_state("gpus", gpu_host(), policy)
    # GPUs of 3 and 2 free: g2 takes one from each; 1 vGPU is left, on the first
    result = schedule([gpus], flavors["g2"], 3)
    assert result.fitted == 2 and result.rejections["gpus"].filter == PLACEMENT


def test_the_filters_are_walked_in_the_order_refusals_are_reported() -> None:
    assert [host_filter.name for host_filter in FILTERS] == [
        IGNORE_HOSTS,
        FORCE_HOSTS,
        AVAILABILITY_ZONE,
        COMPUTE,
        PLACEMENT,
        NUMA_TOPOLOGY,
        PCI_PASSTHROUGH,
        ANTI_AFFINITY,
    ]
    # the request's filters first, then each instance's: the two stages split the one order
    assert REQUEST_FILTERS + INSTANCE_FILTERS == FILTERS


def test_a_refusal_within_the_host_names_its_test_and_its_filter() -> None:
    policy, flavors = configured(PCI_CONFIG)
    nics = host_state("nics", sriov_host(numa=False), policy)
    within = nics.capacity.within
    # a NUMA flavor asking for devices on a host without cells: its NUMA fit refuses it
    numa = HostFitRefusal("numa", "the host reports no NUMA cells")
    assert within.refusals(flavors["pv.preferred"].within) == [numa]
    assert within.device_refusals(flavors["pv.preferred"].within) == []
    refused = schedule([nics], flavors["pv.preferred"], 1).rejections["nics"]
    assert refused == Rejection(NUMA_TOPOLOGY, (numa.message,))
    # devices alone: 4 free VFs, 5 asked
    devices = HostFitRefusal("pci", "no free devices for vf-legacy:5 (vf-legacy 4 free)")
    assert within.refusals(flavors["v5"].within) == [devices]
    assert within.numa_refusals(flavors["v5"].within) == []
    refused = schedule([nics], flavors["v5"], 1).rejections["nics"]
    assert refused == Rejection(PCI_PASSTHROUGH, (devices.message,))


# --- evacuation -----------------------------------------------------------------------------------


def sum_bound(hosts: Sequence[HostState], resource: Resource) -> int:
    """The alert's N+1 bound: sum(used) - (sum(limit) - max(limit)); it passes at 0 or below."""
    capacities = [h.capacity.resources[resource] for h in hosts]
    limits = [c.limit or 0 for c in capacities]
    return sum(c.used for c in capacities) - (sum(limits) - max(limits))


def test_the_sum_bound_passes_but_the_largest_domain_fits_nowhere() -> None:
    # a, b, c: 64 GiB each. a runs one 32 GiB domain; b and c five of 8 GiB (40 GiB, 24 free).
    # Memory: used 112 GiB, sum(limit) - max(limit) = 128 GiB: the bound passes by 16 GiB, yet
    # a's domain fits neither b nor c (24 GiB free each). b's five fit: a 32 and c 24 free,
    # spread: a (32), then a and c tie at 24: a, then c (24 > 16), a, c.
    eights = tuple(guest(f"e{i}", 8) for i in range(5))
    hosts = [
        state("a", cpus=64, memory_gib=64, domains=(guest("big", 32),)),
        state("b", cpus=64, memory_gib=64, domains=eights),
        state("c", cpus=64, memory_gib=64, domains=eights),
    ]
    assert sum_bound(hosts, Resource.MEMORY) == -16 * GIB
    lost_a = evacuation(hosts, "a")
    assert not lost_a.feasible and lost_a.unplaced_count == 1
    (big,) = lost_a.unplaced
    assert big.guest == "big"
    assert big.rejections["b"].reason == "Free memory 24576.00 MiB < requested 32768 MiB"
    lost_b = evacuation(hosts, "b")
    assert lost_b.feasible
    assert [where for _, where in lost_b.placements] == ["a", "a", "c", "a", "c"]
    assert evacuation(hosts, "c").feasible


def test_the_sum_bound_fails_though_every_hosts_domains_can_be_rehomed() -> None:
    # a, b, c: 64 GiB each, each running two 8 GiB domains and holding a 32 GiB pending claim:
    # used 48 GiB each, 144 in all, above sum(limit) - max(limit) = 128: the bound fails by 16.
    # But a failed host's domains are 16 GiB, and each other host has 16 GiB free: it can be
    # lost. (What the claims reserve on the failed host is not re-homed: they are instances that
    # do not exist yet.) The bound and the simulation answer different questions.
    hosts = [
        state(
            name,
            cpus=64,
            memory_gib=64,
            domains=(guest("x", 8), guest("y", 8)),
            claimed={Resource.MEMORY: 32 * GIB},
        )
        for name in ("a", "b", "c")
    ]
    assert sum_bound(hosts, Resource.MEMORY) == 16 * GIB
    for name in ("a", "b", "c"):
        assert evacuation(hosts, name).feasible


def test_evacuation_takes_the_largest_domains_first_and_skips_down_hosts() -> None:
    sized = [
        Guest("small", demand(1, 4, 10)),
        Guest("wide", demand(4, 8, 10)),
        Guest("narrow", demand(2, 8, 10)),
        Guest("b-twin", demand(2, 8, 20)),
        Guest("a-twin", demand(2, 8, 20)),
    ]
    assert [g.name for g in evacuation_order(sized)] == ["wide", "a-twin", "b-twin", "narrow", "small"]
    hosts = [
        state("src", domains=(guest("one", 4), guest("two", 2))),
        state("dead", up=False),
        state("alive", memory_gib=5),
    ]
    result = evacuation(hosts, "src")
    assert result.placements == (("one", "alive"),)
    assert [u.guest for u in result.unplaced] == ["two"]
    assert result.unplaced[0].rejections["dead"].filter == COMPUTE


def test_a_nova_guest_asks_for_its_flavors_numa_topology() -> None:
    flavor = NovaFlavor("p2", 2, 2048, 0, 0, 0, {"hw:cpu_policy": "dedicated"})
    nova_guest = domain("pinned", vcpus=2, memory=2 * GIB, flavor=flavor)
    hs = host_state("h", host(domains=(nova_guest,)), HostPolicy())
    (only,) = hs.guests
    assert only.demand.request[Resource.PCPU] == 2 and only.demand.within.topology is not None
    assert dict(only.demand.request) == domain_allocation(nova_guest, None)


# --- properties -----------------------------------------------------------------------------------

HOSTS = st.lists(
    st.tuples(
        st.integers(2, 32),  # cpus
        st.integers(8, 128),  # memory GiB
        st.integers(40, 500),  # disk GiB
        st.lists(st.tuples(st.integers(1, 8), st.integers(1, 16), st.integers(0, 80)), max_size=5),
        st.sampled_from([True, True, True, False]),  # up
    ),
    min_size=1,
    max_size=6,
)
DEMANDS = st.tuples(st.integers(1, 6), st.integers(1, 16), st.integers(0, 60))


@settings(max_examples=150, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
@given(HOSTS, DEMANDS, st.integers(1, 6), MULTIPLIERS, st.booleans(), st.randoms(use_true_random=False))
def test_placements_respect_capacity_and_do_not_depend_on_host_order(
    shapes: Shapes,
    wanted: tuple[int, int, int],
    count: int,
    multipliers: Multipliers,
    anti_affinity: bool,
    rng: random.Random,
) -> None:
    hosts = fleet(shapes)
    vcpu, memory, disk = wanted
    asked = Demand({Resource.VCPU: vcpu, Resource.MEMORY: memory * GIB, Resource.DISK: disk * GIB})
    result = schedule(hosts, asked, count, multipliers=multipliers, anti_affinity=anti_affinity)
    shuffled = list(hosts)
    rng.shuffle(shuffled)
    again = schedule(shuffled, asked, count, multipliers=multipliers, anti_affinity=anti_affinity)
    assert again.hosts == result.hosts and again.fitted == result.fitted
    assert dict(again.rejections) == dict(result.rejections)
    event(f"{result.fitted} of {count} placed")
    if not result.placed:
        assert result.states == tuple(hosts)
        return
    by_name = {h.name: h for h in result.states}
    for name in set(result.hosts):
        after = by_name[name].capacity.resources
        for resource, amount in asked.request.items():
            if amount <= 0:  # a class asked for 0 is not tested: the host may be over it already
                continue
            capacity = after[resource]
            assert capacity.max_unit is None or amount <= capacity.max_unit
            assert capacity.free is None or capacity.free >= 0
    if anti_affinity:
        assert len(set(result.hosts)) == len(result.hosts)


@settings(max_examples=80, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
@given(HOSTS, st.randoms(use_true_random=False))
def test_an_evacuation_does_not_depend_on_host_order_and_respects_capacity(
    shapes: Shapes, rng: random.Random
) -> None:
    hosts = fleet(shapes)
    failed = hosts[0].name
    result = evacuation(hosts, failed)
    shuffled = list(hosts)
    rng.shuffle(shuffled)
    again = evacuation(shuffled, failed)
    event(f"{len(result.placements)} re-homed, {result.unplaced_count} not")
    # a memo shared by the evacuations of every host changes no answer
    shared = CandidateMemo()
    for lost in hosts:
        assert evacuation(hosts, lost.name, memo=shared) == evacuation(hosts, lost.name)
    assert again.placements == result.placements
    assert [u.guest for u in again.unplaced] == [u.guest for u in result.unplaced]
    before = {h.name: h for h in hosts}
    for after in result.states:
        if after.placed:
            assert after.up and not after.stale
            for resource, capacity in after.capacity.resources.items():
                if any(d.request.get(resource, 0) > 0 for d in after.placed):
                    assert capacity.free is None or capacity.free >= 0, (after.name, resource)
        assert before[after.name].capacity.resources.keys() == after.capacity.resources.keys()
    # replayed as claims, one by one on each host, every placed domain is accepted
    facts = fleet_facts(shapes)
    for after in result.states:
        claimed: dict[Resource, int] = {}
        for index, placed in enumerate(after.placed):
            held = host_capacity(facts[after.name], DEFAULTS, None, claimed, after.placed[:index])
            assert held.claim_test(placed) == [], (after.name, index)
            for resource, amount in placed.request.items():
                claimed[resource] = claimed.get(resource, 0) + amount


# --- the fast paths against the straightforward ones -----------------------------------------------


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LARGER, MULTIPLIERS, st.randoms(use_true_random=False))
def test_the_fast_evacuation_and_tolerance_give_the_straightforward_answers(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    rng: random.Random,
) -> None:
    hosts = larger_fleet(shapes)
    rng.shuffle(hosts)
    expected = {state.name: reference_evacuation(hosts, state.name, multipliers) for state in hosts}
    for evacuated in hosts:
        assert evacuation(hosts, evacuated.name, multipliers) == expected[evacuated.name]
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=3)
    assert dict(tolerance.evacuations) == expected
    assert tolerance.tolerated == reference_tolerated(hosts, 3, multipliers)
    event(f"{sum(not e.feasible for e in expected.values())} infeasible, {tolerance.tolerated} tolerated")


CHANGES = st.sampled_from(["consume", "release", "down", "up", "domains", "twin", "reshape"])


def changed_state(
    hosts: Sequence[HostState],
    facts: dict[str, HostFacts],
    before: HostState,
    change: str,
    asked: tuple[int, int, int],
    other: int,
    shape: tuple[int, int, int],
) -> HostState:
    """One host in a new state: more used (a claim), less (a domain gone), down, up, a domain
    more, another host's weights (ties), or larger or smaller."""
    vcpus, memory, disk = asked
    cpus, ram, storage = shape
    demanded = Demand({Resource.VCPU: vcpus, Resource.MEMORY: memory * GIB, Resource.DISK: disk * GIB})
    if change == "consume":  # a claim (or a placement) on it
        return before.consume(demanded) if not before.capacity.claim_test(demanded) else before
    if change == "release":  # a domain gone, whose host is rebuilt from its facts
        gone = replace(facts[before.name], domains=facts[before.name].domains[1:])
        return host_state(before.name, gone, DEFAULTS, up=before.up)
    if change == "domains":  # a domain more
        more = (*facts[before.name].domains, guest(f"new{vcpus}{memory}", memory, vcpus, disk))
        return host_state(before.name, replace(facts[before.name], domains=more), DEFAULTS, up=before.up)
    if change == "twin":  # the facts of another host: the same weights, so ties
        twin = hosts[other % len(hosts)]
        return replace(twin, name=before.name, guests=before.guests)
    if change == "reshape":  # larger or smaller: the weighers' largest values move
        shaped = replace(facts[before.name], cpus=cpus, memory_bytes=ram * GIB)
        assert shaped.storage is not None
        shaped = replace(shaped, storage=replace(shaped.storage, capacity_bytes=storage * GIB))
        return host_state(before.name, shaped, DEFAULTS, up=before.up)
    return replace(before, up=change == "up")


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    MULTIPLIERS,
    st.lists(
        st.tuples(st.integers(0, 11), CHANGES, DOMAINS, st.integers(0, 11), SHAPES), min_size=1, max_size=3
    ),
    st.integers(0, 3),
)
def test_incremental_tolerance_is_full_recomputation(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    changes: list[tuple[int, str, tuple[int, int, int], int, tuple[int, int, int]]],
    bound: int,
) -> None:
    hosts = larger_fleet(shapes)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
    for index, change, asked, other, shape in changes:
        before = hosts[index % len(hosts)]
        after = changed_state(hosts, facts, before, change, asked, other, shape)
        hosts = [after if state.name == after.name else state for state in hosts]
        tolerance = fleet_tolerance_update(tolerance, after)
        full = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
        assert dict(tolerance.evacuations) == dict(full.evacuations)
        assert tolerance.tolerated == full.tolerated
        assert tolerance.hosts == tuple(hosts)
        event(change)


# --- the incremental update where it must recompute ------------------------------------------------

BIG = st.lists(st.sampled_from([(32, 256, 1000), (64, 512, 2000), (32, 256, 1000)]), min_size=1, max_size=3)
"""Empty hosts larger than any of LARGER's: spreading, every evacuation chooses them."""


def busiest(tolerance: FleetTolerance) -> str:
    """The host the most evacuations place a domain on (ties: the first name)."""
    uses = dict.fromkeys((state.name for state in tolerance.hosts), 0)
    for evacuated in tolerance.evacuations.values():
        for name in {where for _, where in evacuated.placements}:
            uses[name] += 1
    return min(uses, key=lambda name: (-uses[name], name))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    BIG,
    MULTIPLIERS,
    st.lists(st.tuples(CHANGES, DOMAINS, st.integers(0, 14), SHAPES), min_size=1, max_size=4),
    st.integers(0, 3),
)
def test_incremental_tolerance_when_the_changed_host_is_everyones_choice(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    big: list[tuple[int, int, int]],
    multipliers: Multipliers,
    changes: list[tuple[str, tuple[int, int, int], int, tuple[int, int, int]]],
    bound: int,
) -> None:
    """Each change is to the host the most evacuations chose (with SPREAD, one of the big empty
    ones): those evacuations are resumed from the step that chose it, or where the change may
    alter a choice, and must end as the full recomputation does; the host grows, shrinks, goes
    down and up, takes another's weights."""
    everything = [*shapes, *((shape, [], True) for shape in big)]
    hosts = larger_fleet(everything)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in everything])
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
    for change, asked, other, shape in changes:
        name = busiest(tolerance)
        users = sum(1 for e in tolerance.evacuations.values() if any(w == name for _, w in e.placements))
        before = next(state for state in hosts if state.name == name)
        after = changed_state(hosts, facts, before, change, asked, other, shape)
        hosts = [after if state.name == name else state for state in hosts]
        tolerance = fleet_tolerance_update(tolerance, after)
        full = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
        assert dict(tolerance.evacuations) == dict(full.evacuations)
        assert tolerance.tolerated == full.tolerated
        assert tolerance.hosts == tuple(hosts)
        event(f"{change}, used by {min(users, 5)}{'+' if users >= 5 else ''} evacuations")


def test_an_update_resumes_an_evacuation_at_the_step_that_chose_the_changed_host() -> None:
    # src's two domains (32 and 8 GiB) go to y (8 GiB more memory than x, all else equal), then
    # to x (y has 24 GiB less than x now); z passes but weighs less. x then takes a claim: the
    # first step stands (y still weighs more, every weigher's largest value is the same), the
    # second is searched again.
    hosts = [
        state("src", cpus=16, memory_gib=64, domains=(guest("d0", 32), guest("d1", 8)), policy=DEFAULTS),
        state("x", cpus=64, memory_gib=200, disk_gib=1000, policy=DEFAULTS),
        state("y", cpus=64, memory_gib=208, disk_gib=1000, policy=DEFAULTS),
        state("z", cpus=16, memory_gib=64, disk_gib=200, policy=DEFAULTS),
    ]
    tolerance = fleet_tolerance(hosts)
    assert tolerance.evacuations["src"].placements == (("d0", "y"), ("d1", "x"))
    x = hosts[1].consume(demand(vcpu=1, memory_gib=1, disk_gib=1))
    fleet = tolerance.fleet_index.copy()
    fleet.replace(x)
    trace = tolerance.step_traces["src"]
    assert trace is not None and len(trace) == 2
    assert len(steps_that_stand(fleet, tolerance.fleet_index.passing, fleet.index["x"], trace, SPREAD)) == 1
    after = [x if h.name == "x" else h for h in hosts]
    updated = fleet_tolerance_update(tolerance, x)
    assert dict(updated.evacuations) == dict(fleet_tolerance(after).evacuations)
    assert updated.evacuations["src"].placements == (("d0", "y"), ("d1", "x"))
    # x much smaller: the second domain goes to y again (176 GiB free against z's 64), from the
    # step that stood
    small = state("x", cpus=2, memory_gib=12, disk_gib=20, policy=DEFAULTS)
    shrunk = replace(hosts[1], capacity=small.capacity)
    resumed = fleet_tolerance_update(tolerance, shrunk)
    after = [shrunk if h.name == "x" else h for h in hosts]
    assert dict(resumed.evacuations) == dict(fleet_tolerance(after).evacuations)
    assert resumed.evacuations["src"].placements == (("d0", "y"), ("d1", "y"))


# --- the fast paths' parts against the straightforward ones ----------------------------------------


@pytest.mark.parametrize(("config", "facts", "sequence"), CONSUMED)
def test_consuming_several_at_once_is_consuming_them_in_turn(
    config: str, facts: Callable[[], HostFacts], sequence: list[str]
) -> None:
    """An evacuation builds a host's final state in one pass, and weighs it from its claims."""
    policy, flavors = configured(config)
    start = host_state("h", facts(), policy)
    demands = [flavors[name] for name in sequence]
    in_turn = start
    for one in demands:
        in_turn = in_turn.consume(one)
    at_once = consume_in_turn(start, demands)
    assert at_once == in_turn
    assert at_once.capacity.within == in_turn.capacity.within
    claimed: dict[Resource, int] = {}
    for one in demands:
        for resource, amount in one.request.items():
            claimed[resource] = claimed.get(resource, 0) + amount
    memory, disk = claimed.get(Resource.MEMORY, 0), claimed.get(Resource.DISK, 0)
    cpus = claimed.get(Resource.VCPU, 0) + claimed.get(Resource.PCPU, 0)
    raw = in_turn.raw_weights()
    assert raw_weigher_values(weigher_levels(start), memory, cpus, disk) == (
        raw["ram"],
        raw["cpu"],
        raw["disk"],
    )


VALUES = st.sampled_from([0.0, 1.0, 2.0, 3.0, 7.5, 10.0])
"""Few values: equal weights, whose ties only the hosts' numbers break."""


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(VALUES, VALUES, VALUES), min_size=2, max_size=12),
    st.data(),
    MULTIPLIERS,
)
def test_the_first_of_the_sorted_order_is_the_threshold_walks_best(
    values: list[tuple[float, float, float]], data: st.DataObject, multipliers: Multipliers
) -> None:
    """For a normalization met again, the best host is the first of the passing hosts sorted by
    weight (the consumed and lost ones stepped over), against the consumed ones passing again:
    the same host and weight as Fagin's walk, and as `weigh` (ties by number)."""
    numbers = range(len(values))
    skip = set(data.draw(st.lists(st.sampled_from(numbers), max_size=len(values))))
    gone = set(data.draw(st.lists(st.sampled_from(numbers), max_size=2))) - skip
    again = sorted(set(data.draw(st.lists(st.sampled_from(sorted(skip))))) if skip else [])
    clipped = list(values)
    for number in again:  # consumed: smaller now
        clipped[number] = data.draw(st.tuples(VALUES, VALUES, VALUES))
    ranking = (
        sorted(numbers, key=lambda n: (-values[n][0], n)),
        sorted(numbers, key=lambda n: (-values[n][1], n)),
        sorted(numbers, key=lambda n: (-values[n][2], n)),
    )
    passing = [n for n in numbers if n not in skip and n not in gone]
    if len(passing) + len(again) < 2:
        return
    tops = weigher_tops(ranking, skip, gone, again, clipped)
    walked = threshold_best(
        ranking,
        skip=skip,
        gone=gone,
        passing_again=again,
        clipped=clipped,
        tops=tops,
        multipliers=multipliers,
    )
    maxima = [top for top, _, _ in tops]
    order = sorted((-weight_of(values[n], maxima, multipliers), n) for n in numbers)
    first = first_in_order(
        order,
        skip=skip,
        gone=gone,
        passing_again=again,
        clipped=clipped,
        tops=tops,
        multipliers=multipliers,
        start=[0],
    )
    assert first == walked
    # as `weigh` computes them: each weigher normalized over the candidates, times its multiplier
    candidates = sorted({*passing, *again})
    parts = [
        [multiplier * value for value in normalize([clipped[n][part] for n in candidates])]
        for part, multiplier in enumerate((multipliers.ram, multipliers.cpu, multipliers.disk))
    ]
    weights = [0.0 + parts[0][i] + parts[1][i] + parts[2][i] for i in range(len(candidates))]
    best = min(range(len(candidates)), key=lambda i: (-weights[i], candidates[i]))
    assert walked == (candidates[best], weights[best])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    MULTIPLIERS,
    st.lists(
        st.tuples(st.integers(0, 11), CHANGES, DOMAINS, st.integers(0, 11), SHAPES), min_size=2, max_size=5
    ),
)
def test_what_a_fleet_forgets_between_updates_changes_no_answer(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    changes: list[tuple[int, str, tuple[int, int, int], int, tuple[int, int, int]]],
) -> None:
    """With nothing kept beyond what the last computation used (the sorted orders and built
    states), the updates give the full recomputation's answers."""
    hosts = larger_fleet(shapes)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    with (
        mock.patch.object(fleet_index, "KEPT_ORDERS", 0),
        mock.patch.object(fleet_index, "KEPT_STATES_PER_HOST", 0),
    ):
        tolerance = fleet_tolerance(hosts, multipliers=multipliers)
        for index, change, asked, other, shape in changes:
            before = hosts[index % len(hosts)]
            after = changed_state(hosts, facts, before, change, asked, other, shape)
            hosts = [after if state.name == after.name else state for state in hosts]
            tolerance = fleet_tolerance_update(tolerance, after)
            assert dict(tolerance.evacuations) == dict(
                fleet_tolerance(hosts, multipliers=multipliers).evacuations
            )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    MULTIPLIERS,
    st.lists(
        st.tuples(st.integers(0, 11), CHANGES, DOMAINS, st.integers(0, 11), SHAPES), min_size=2, max_size=4
    ),
)
def test_updates_from_the_same_result_do_not_disturb_each_other(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    changes: list[tuple[int, str, tuple[int, int, int], int, tuple[int, int, int]]],
) -> None:
    """A result stays valid once updated (the service may update it again, the benchmark does):
    each update from it, whatever came before, is the full recomputation of its own change."""
    hosts = larger_fleet(shapes)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    tolerance = fleet_tolerance(hosts, multipliers=multipliers)
    before = dict(tolerance.evacuations)
    for index, change, asked, other, shape in changes:
        after = changed_state(hosts, facts, hosts[index % len(hosts)], change, asked, other, shape)
        updated = fleet_tolerance_update(tolerance, after)
        changed = [after if state.name == after.name else state for state in hosts]
        assert dict(updated.evacuations) == dict(
            fleet_tolerance(changed, multipliers=multipliers).evacuations
        )
        assert dict(tolerance.evacuations) == before


# --- full fleets: most domains find no host ---------------------------------------------------------


def counted(rejections: Mapping[str, Rejection]) -> dict[str, int]:
    """Per filter, how many of the rejections it gave, counted from the dictionary itself."""
    return dict(Counter(rejection.filter for rejection in dict(rejections).values()))


def assert_like_schedule(found: Unplaced, expected: Unplaced) -> None:
    """An unplaced domain of the fast evacuation against the reference's (`schedule`'s dictionary):
    its summaries first (before anything builds the rejections), then the rejections themselves,
    equal both ways round and in the same order."""
    assert found.guest == expected.guest and found.no_valid_host == expected.no_valid_host
    assert dict(found.refused_by) == counted(expected.rejections)
    first = min(expected.rejections, default=None)
    assert found.first_rejection == (None if first is None else (first, expected.rejections[first]))
    assert found.rejections == expected.rejections and expected.rejections == found.rejections
    assert list(found.rejections.items()) == list(expected.rejections.items())
    assert len(found.rejections) == len(expected.rejections)
    assert dict(found.refused_by) == counted(found.rejections)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FULL, MULTIPLIERS, st.randoms(use_true_random=False))
def test_on_a_full_fleet_the_unplaced_domains_have_schedules_rejections(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    rng: random.Random,
) -> None:
    hosts = larger_fleet(shapes)
    rng.shuffle(hosts)
    expected = {state.name: reference_evacuation(hosts, state.name, multipliers) for state in hosts}
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=3)
    for evacuated in hosts:
        for found in (tolerance.evacuations[evacuated.name], evacuation(hosts, evacuated.name, multipliers)):
            assert found.placements == expected[evacuated.name].placements
            assert len(found.unplaced) == len(expected[evacuated.name].unplaced)
            for one, reference in zip(found.unplaced, expected[evacuated.name].unplaced, strict=True):
                assert_like_schedule(one, reference)
    assert dict(tolerance.evacuations) == expected
    assert tolerance.tolerated == reference_tolerated(hosts, 3, multipliers)
    unplaced = sum(e.unplaced_count for e in expected.values())
    placed = sum(len(e.placements) for e in expected.values())
    event(f"{'most' if unplaced > placed else 'some' if unplaced else 'no'} domains unplaced")
    both = any(e.placements and e.unplaced for e in expected.values())
    event(f"{'some' if both else 'no'} evacuation places some domains and leaves others")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    FULL,
    MULTIPLIERS,
    st.lists(
        st.tuples(st.integers(0, 9), CHANGES, DOMAINS, st.integers(0, 9), CRAMPED), min_size=1, max_size=3
    ),
    st.integers(0, 3),
)
def test_on_a_full_fleet_updates_are_full_recomputation_and_leave_the_result_before(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    changes: list[tuple[int, str, tuple[int, int, int], int, tuple[int, int, int]]],
    bound: int,
) -> None:
    """Each update gives the full recomputation's answers (the unplaced domains' summaries too),
    and the result it started from reads as it did: its rejections (read only now, after the
    update) are those it had."""
    hosts = larger_fleet(shapes)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
    for index, change, asked, other, shape in changes:
        before = hosts[index % len(hosts)]
        after = changed_state(hosts, facts, before, change, asked, other, shape)
        hosts = [after if state.name == after.name else state for state in hosts]
        previous = tolerance
        tolerance = fleet_tolerance_update(tolerance, after)
        full = fleet_tolerance(hosts, multipliers=multipliers, bound=bound)
        assert dict(tolerance.evacuations) == dict(full.evacuations)
        assert tolerance.tolerated == full.tolerated
        for name, found in tolerance.evacuations.items():
            for one, recomputed in zip(found.unplaced, full.evacuations[name].unplaced, strict=True):
                assert dict(one.refused_by) == dict(recomputed.refused_by) == counted(recomputed.rejections)
                assert one.first_rejection == recomputed.first_rejection
        # the result before, read now: every rejection as `schedule` gave it on the hosts before
        before_hosts = list(previous.hosts)
        for name, found in previous.evacuations.items():
            reference = reference_evacuation(before_hosts, name, multipliers)
            for one, expected in zip(found.unplaced, reference.unplaced, strict=True):
                assert_like_schedule(one, expected)
        event(change)


def test_the_unplaced_domains_list_the_filters_refusals_after_placements_and_computes() -> None:
    """Pinned domains on hosts with cells: a host whose Placement inventory fits but no cell does
    is refused by NUMATopologyFilter, listed by `schedule` after the hosts refused by ComputeFilter
    and Placement; the hosts the evacuation consumed refuse as they are now."""
    policy, flavors = configured(PINNED_CONFIG)
    pinned = [host_state(name, pinned_host(), policy) for name in ("a-pinned", "c-pinned")]
    plain = state("b-plain")  # no dedicated CPUs: no PCPU inventory
    down = state("d-down", policy=policy, up=False)
    # p8 fits no cell of the pinned hosts (6 and 7 dedicated CPUs free); p4 fits each cell once
    guests = (Guest("big", flavors["p8"]), *(Guest(f"four{n}", flavors["p4"]) for n in range(6)))
    source = replace(state("src", policy=policy), guests=guests)
    hosts = [source, *pinned, plain, down]
    expected = reference_evacuation(hosts, "src")
    found = evacuation(hosts, "src")
    assert found.placements == expected.placements and len(expected.placements) == 4
    assert [u.guest for u in found.unplaced] == ["big", "four4", "four5"]
    for one, reference in zip(found.unplaced, expected.unplaced, strict=True):
        assert_like_schedule(one, reference)
    big, last = found.unplaced[0], found.unplaced[-1]
    assert list(big.rejections) == ["b-plain", "d-down", "a-pinned", "c-pinned"]
    assert dict(big.refused_by) == {PLACEMENT: 1, COMPUTE: 1, NUMA_TOPOLOGY: 2}
    assert big.first_rejection == ("a-pinned", big.rejections["a-pinned"])
    # the pinned hosts took two p4 each: they refuse the last one at the filters still
    assert {name: r.filter for name, r in last.rejections.items()} == {
        "b-plain": PLACEMENT,
        "d-down": COMPUTE,
        "a-pinned": NUMA_TOPOLOGY,
        "c-pinned": NUMA_TOPOLOGY,
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LARGER, MULTIPLIERS, st.integers(0, 11), DOMAINS, st.integers(1, 4))
def test_a_host_that_claimed_more_passes_as_the_filters_say(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    which: int,
    taken: tuple[int, int, int],
    count: int,
) -> None:
    """`FleetIndex.replace(claimed_more=True)`: a host that took more instances of a demand the
    claims decide passes for each request met (the domains' requests, from every evacuation) as
    running the filters on its new state says."""
    hosts = larger_fleet(shapes)
    tolerance = fleet_tolerance(hosts, multipliers=multipliers)
    before = hosts[which % len(hosts)]
    cpus, memory, disk = taken
    # more than fits too: the filters refuse it, and so does its room
    grown = consume_in_turn(before, (demand(vcpu=cpus, memory_gib=memory, disk_gib=disk),) * count)
    filtered, followed = tolerance.fleet_index.copy(), tolerance.fleet_index.copy()
    filtered.replace(grown)
    followed.replace(grown, claimed_more=True)
    assert followed.passing == filtered.passing
