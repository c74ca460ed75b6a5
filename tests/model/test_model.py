"""The capacity model against cases computed by hand from docs/accounting.md, and its invariants."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tests.support.factories import GIB, MIB, domain, host, local_disk
from virtcap.model.capacity import ResourceCapacity, claim_test, host_capacity
from virtcap.model.facts import DiskFacts, DomainState, NovaFlavor, NovaInstance
from virtcap.model.host_fit import Demand
from virtcap.model.nova import nova_request
from virtcap.model.policy import NOVA_ALLOCATION_RATIOS, NOVA_RESERVED, HostPolicy, Inventory
from virtcap.model.resources import STANDARD_CLASSES, Resource

R = Resource
S = DomainState


def policy(**changes: object) -> HostPolicy:
    ratios = dict(NOVA_ALLOCATION_RATIOS)
    reserved = dict(NOVA_RESERVED)
    ratios.update(changes.pop("ratios", {}))  # type: ignore[call-overload]
    reserved.update(changes.pop("reserved", {}))  # type: ignore[call-overload]
    return HostPolicy(allocation_ratios=ratios, reserved=reserved, **changes)  # type: ignore[arg-type]


def test_limit_used_free_on_a_plain_host() -> None:
    # 16 CPUs x 4.0 = 64 vCPUs; 64 GiB - 512 MiB reserved at 1.0; 1000 GiB disk.
    facts = host(
        domains=(
            domain("a", S.RUNNING, vcpus=4, memory=8 * GIB, disks=(local_disk(40 * GIB),)),
            domain("b", S.PAUSED, vcpus=2, memory=4 * GIB),
            domain("c", S.SHUTOFF, vcpus=8, memory=16 * GIB, disks=(local_disk(80 * GIB),)),
            domain("d", S.OTHER, vcpus=1, memory=1 * GIB),
        )
    )
    capacity = host_capacity(facts, policy()).resources
    vcpu, memory, disk = capacity[R.VCPU], capacity[R.MEMORY], capacity[R.DISK]
    assert (vcpu.total, vcpu.reserved, vcpu.limit, vcpu.used, vcpu.free) == (16, 0, 64, 15, 49)
    assert dict(vcpu.allocated_by_state) == {S.RUNNING: 4, S.PAUSED: 2, S.SHUTOFF: 8, S.OTHER: 1}
    assert memory.limit == 64 * GIB - 512 * MIB
    assert memory.used == 29 * GIB  # reserved is not part of used (Placement's convention)
    assert memory.free == 64 * GIB - 512 * MIB - 29 * GIB
    assert (disk.limit, disk.used) == (1000 * GIB, 120 * GIB)
    assert vcpu.utilization == 15 / 64
    assert vcpu.effective_overcommit == 15 / 16


def test_free_goes_negative_past_the_policy_and_is_not_clipped() -> None:
    facts = host(
        cpus=4, memory=8 * GIB, domains=tuple(domain(f"v{i}", vcpus=4, memory=2 * GIB) for i in range(5))
    )
    capacity = host_capacity(facts, policy()).resources
    assert capacity[R.VCPU].limit == 16
    assert capacity[R.VCPU].free == 16 - 20
    assert capacity[R.MEMORY].free == 8 * GIB - 512 * MIB - 10 * GIB
    assert capacity[R.VCPU].effective_overcommit == 5.0


def test_shutoff_domains_count_unless_told_otherwise() -> None:
    facts = host(domains=(domain("on", vcpus=2), domain("off", S.SHUTOFF, vcpus=6)))
    assert host_capacity(facts, policy()).resources[R.VCPU].used == 8
    skipping = host_capacity(facts, policy(count_inactive_domains=False)).resources[R.VCPU]
    assert skipping.used == 2
    assert skipping.allocated_by_state[S.SHUTOFF] == 6  # still shown, not counted


def test_ratio_and_reserved_truncate_like_placement() -> None:
    # (10 - 3) x 1.5 = 10.5 -> 10
    capacity = ResourceCapacity(R.VCPU, 10, 3, 1.5, dict.fromkeys(S, 0), frozenset(S))
    assert capacity.limit == 10
    # reserved above total: nothing is usable, nothing fits
    starved = ResourceCapacity(R.MEMORY, 256 * MIB, 512 * MIB, 1.0, dict.fromkeys(S, 0), frozenset(S))
    assert (starved.usable, starved.limit, starved.utilization, starved.effective_overcommit) == (
        0,
        0,
        None,
        None,
    )


def test_nova_flavor_metadata_is_the_allocation() -> None:
    flavor = NovaFlavor("m1.odd", vcpus=3, memory_mib=3000, root_gib=20, ephemeral_gib=5, swap_mib=512)
    facts = host(
        domains=(
            domain(
                "nova",
                vcpus=8,
                memory=32 * GIB,
                disks=(local_disk(200 * GIB), DiskFacts("vdb", "rbd:x", local=False, capacity_bytes=None)),
                flavor=flavor,
            ),
        )
    )
    capacity = host_capacity(facts, policy()).resources
    assert capacity[R.VCPU].used == 3
    assert capacity[R.MEMORY].used == 3000 * MIB
    assert capacity[R.DISK].used == 26 * GIB  # 512 MiB of swap is a whole GiB to Nova's scheduler


def test_network_disks_and_cdroms_use_no_local_disk() -> None:
    disks = (
        local_disk(10 * GIB),
        DiskFacts("vdb", "rbd:pool/img", local=False, capacity_bytes=None),
        DiskFacts("hdc", "/iso/x.iso", local=False, capacity_bytes=None),
    )
    capacity = host_capacity(host(domains=(domain(disks=disks),)), policy()).resources
    assert capacity[R.DISK].used == 10 * GIB


def test_cpu_sets_split_vcpu_and_pcpu() -> None:
    shared, dedicated = frozenset(range(4)), frozenset(range(4, 12))
    facts = host(
        cpus=16,
        online=frozenset(range(14)),  # 14 and 15 offline
        domains=(
            domain("float", vcpus=4),
            domain("pinned", vcpus=2, pins=(frozenset({4}), frozenset({5}))),
            domain("pinned-to-shared", vcpus=2, pins=(frozenset({0}), frozenset({1}))),
            domain("half-pinned", vcpus=2, pins=(frozenset({6}), None)),
        ),
    )
    capacity = host_capacity(facts, policy(cpu_shared_set=shared, cpu_dedicated_set=dedicated)).resources
    assert (capacity[R.VCPU].total, capacity[R.VCPU].limit, capacity[R.VCPU].used) == (4, 16, 8)
    assert (capacity[R.PCPU].total, capacity[R.PCPU].limit, capacity[R.PCPU].used) == (8, 8, 2)
    # A set naming offline CPUs: Nova refuses the configuration and the host offers nothing at all
    offline = host_capacity(
        facts,
        policy(cpu_dedicated_set=frozenset(range(8, 16)), cpu_shared_set=shared),
        flavors={"small": Demand(SMALL)},
    )
    for refused in offline.resources.values():
        assert refused.refused == (
            "cpu_dedicated_set names CPUs that are not online (14,15): Nova refuses the configuration"
        )
        assert refused.limit == 0 and refused.max_unit == 0
    assert offline.resources[R.PCPU].total == 8  # the set as configured, not its online part
    assert offline.schedulable == {"small": 0}
    assert claim_test(offline.resources, {R.VCPU: 1}) == [
        "Requested vcpu 1 VCPU: cpu_dedicated_set names CPUs that are not online (14,15): "
        "Nova refuses the configuration"
    ]


def test_a_dedicated_set_alone_offers_no_shared_cpus() -> None:
    facts = host(cpus=16, online=frozenset(range(16)))
    capacity = host_capacity(facts, policy(cpu_dedicated_set=frozenset(range(8, 16)))).resources
    assert capacity[R.VCPU].total == 0
    assert capacity[R.PCPU].total == 8


def test_without_sets_pinning_still_consumes_vcpu() -> None:
    facts = host(domains=(domain(vcpus=2, pins=(frozenset({4}), frozenset({5}))),))
    capacity = host_capacity(facts, policy()).resources
    assert (capacity[R.VCPU].used, capacity[R.PCPU].used, capacity[R.PCPU].total) == (2, 0, 0)


def test_hugepage_memory_is_still_memory() -> None:
    # Nova allocates MEMORY_MB for a hugepage-backed guest; its pages are also taken per NUMA cell
    facts = host(domains=(domain("huge", memory=16 * GIB, hugepages=True), domain("plain", memory=2 * GIB)))
    result = host_capacity(facts, policy())
    assert result.resources[R.MEMORY].used == 18 * GIB
    assert result.hugepage_memory_bytes == 16 * GIB


def _nova(vcpus: int = 4, specs: dict[str, str] | None = None, **changes: object) -> NovaInstance:
    flavor = NovaFlavor(
        "f", vcpus, 2048, root_gib=20, ephemeral_gib=5, swap_mib=1025, extra_specs=specs or {}
    )
    return NovaInstance(flavor, **changes)  # type: ignore[arg-type]


def test_nova_request_follows_the_flavor_and_its_extra_specs() -> None:
    gib = 20 + 5 + 2  # swap of 1025 MiB is two whole GiB
    assert nova_request(_nova()) == {R.VCPU: 4, R.MEMORY: 2048 * MIB, R.DISK: gib * GIB}
    assert nova_request(_nova(boot_from_volume=True))[R.DISK] == (gib - 20) * GIB
    assert nova_request(_nova(specs={"hw:cpu_policy": "dedicated"}))[R.PCPU] == 4
    assert R.VCPU not in nova_request(_nova(specs={"hw:cpu_policy": "dedicated"}))
    image = nova_request(_nova(image_properties={"hw_cpu_policy": "dedicated"}))
    assert (image.get(R.VCPU), image[R.PCPU]) == (None, 4)
    isolate = {"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}
    assert nova_request(_nova(specs=isolate))[R.PCPU] == 5
    for mask in ("1,3", "^0,^2", "0-3,^0,^2"):
        mixed = nova_request(_nova(specs={"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": mask}))
        assert (mixed[R.VCPU], mixed[R.PCPU]) == (2, 2), mask
    realtime = {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes", "hw:cpu_realtime_mask": "^0"}
    rt = nova_request(_nova(specs=realtime))
    assert (rt[R.PCPU], rt[R.VCPU]) == (3, 1)
    overridden = nova_request(
        _nova(specs={"resources:VCPU": "7", "resources:DISK_GB": "0", "resources1:CUSTOM_FPGA": "1"})
    )
    fpga = Resource.custom_class("CUSTOM_FPGA")
    assert overridden == {R.VCPU: 7, R.MEMORY: 2048 * MIB, fpga: 1}
    granular = nova_request(_nova(specs={"resources1:CUSTOM_FPGA": "1", "resources_x:CUSTOM_FPGA": "2"}))
    assert granular[fpga] == 3
    # the CPU policy replaces the unsuffixed group's amounts only: the other groups add up
    grouped = nova_request(_nova(specs={"hw:cpu_policy": "dedicated", "resources1:PCPU": "2"}))
    assert grouped[R.PCPU] == 6
    mixed_group = {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1", "resources_x:VCPU": "1"}
    assert nova_request(_nova(specs=mixed_group))[R.VCPU] == 3
    # an unmasked realtime flavor counts its vCPUs without building a set of them
    huge = {"hw:cpu_policy": "mixed", "hw:cpu_realtime": "yes"}
    assert nova_request(_nova(vcpus=2**31 - 1, specs=huge))[R.PCPU] == 2**31 - 1
    # What Nova skips with a warning is skipped: unknown classes, amounts that are not whole numbers
    skipped = {"resources:SRIOV_NET_VF": "1", "resources:CUSTOM_X": "two", "resources:x": "1"}
    ignored = nova_request(_nova(specs=skipped))
    assert ignored == nova_request(_nova())


FPGA = Resource.custom_class("CUSTOM_FPGA")


def test_a_declared_custom_inventory_is_accounted_like_any_class() -> None:
    fpga_flavor = NovaFlavor("fpga", 2, 1024, 10, 0, 0, extra_specs={"resources:CUSTOM_FPGA": "2"})
    facts = host(domains=(domain("accel", flavor=fpga_flavor),))
    inventories = {FPGA: Inventory(total=8, reserved=2, max_unit=4, step_size=2, allocation_ratio=1.5)}
    result = host_capacity(
        facts, policy(inventories=inventories), flavors={"fpga": Demand({FPGA: 2, R.VCPU: 1})}
    )
    fpga = result.resources[FPGA]
    assert (fpga.total, fpga.reserved, fpga.limit, fpga.used, fpga.free, fpga.max_unit) == (8, 2, 9, 2, 7, 4)
    assert result.schedulable == {"fpga": 3} and result.bottlenecks == {"fpga": FPGA}
    assert claim_test(result.resources, {FPGA: 6}) == [
        "Requested custom_fpga 6 CUSTOM_FPGA > max_unit 4 CUSTOM_FPGA: above max_unit"
    ]
    assert claim_test(result.resources, {FPGA: 3}) == [
        "Requested custom_fpga 3 CUSTOM_FPGA is not a multiple of step_size 2 CUSTOM_FPGA"
    ]
    assert claim_test(result.resources, {FPGA: 4}) == []
    # A host without the inventory fits none, and a domain using the class there shows it
    bare = host_capacity(facts, policy(), flavors={"fpga": Demand({FPGA: 2})})
    assert bare.schedulable == {"fpga": 0}
    assert (bare.resources[FPGA].total, bare.resources[FPGA].used, bare.resources[FPGA].free) == (0, 2, -2)
    other = Resource.custom_class("CUSTOM_LICENCE")
    assert claim_test(bare.resources, {other: 1}) == [
        "Requested custom_licence 1 CUSTOM_LICENCE: no inventory of CUSTOM_LICENCE on this hypervisor"
    ]


def test_actual_usage_comes_from_the_host() -> None:
    facts = host(memory_in_use=40 * GIB, busy_cpus=5.2, disk_used=300 * GIB)
    capacity = host_capacity(facts, policy()).resources
    assert capacity[R.MEMORY].actual == 40 * GIB
    assert capacity[R.VCPU].actual == 5.2
    assert capacity[R.DISK].actual == 300 * GIB
    assert capacity[R.PCPU].actual is None


def test_without_storage_disk_allocations_are_still_accounted_but_nothing_limits_them() -> None:
    # docs/accounting.md, "When a total is unknown": no inventory, so no reserved, limit or free (never
    # 0, which would read as a full host), while what the domains hold is still known.
    facts = host(
        disk=None,
        domains=(
            domain("on", disks=(local_disk(40 * GIB),)),
            domain("off", S.SHUTOFF, disks=(local_disk(10 * 1024 * GIB),)),
        ),
    )
    result = host_capacity(facts, policy(reserved={R.DISK: 10 * GIB}), claimed={R.DISK: 5 * GIB})
    disk = result.resources[R.DISK]
    assert (disk.total, disk.reserved, disk.usable, disk.limit, disk.free) == (None, None, None, None, None)
    assert (disk.utilization, disk.effective_overcommit, disk.actual) == (None, None, None)
    assert disk.allocated_by_state[S.SHUTOFF] == 10 * 1024 * GIB
    assert (disk.claimed, disk.used) == (5 * GIB, 40 * GIB + 10 * 1024 * GIB + 5 * GIB)


def test_an_unknown_disk_total_limits_neither_claims_nor_flavors() -> None:
    # Far more disk allocated and asked for than any real storage holds: with its size unknown,
    # Nova's old claim test (no limit, no check) lets it through, and memory stays the bottleneck.
    huge = {R.VCPU: 1, R.MEMORY: 1 * GIB, R.DISK: 100 * 1024 * GIB}
    facts = host(disk=None, domains=(domain(memory=1 * GIB, disks=(local_disk(500 * 1024 * GIB),)),))
    result = host_capacity(facts, policy(), flavors={"m1.small": Demand(SMALL), "d1.huge": Demand(huge)})
    assert claim_test(result.resources, huge) == []
    # memory: 64 GiB - 512 MiB - 1 GiB = 62.5 GiB free
    assert result.schedulable == {"m1.small": 31, "d1.huge": 62}
    assert result.bottlenecks == {"m1.small": R.MEMORY, "d1.huge": R.MEMORY}


def test_claims_count_in_used() -> None:
    result = host_capacity(host(), policy(), claimed={R.VCPU: 4, R.MEMORY: 8 * GIB})
    assert result.resources[R.VCPU].used == 4
    assert result.resources[R.VCPU].claimed == 4
    assert result.resources[R.MEMORY].free == 64 * GIB - 512 * MIB - 8 * GIB


SMALL = {R.VCPU: 1, R.MEMORY: 2 * GIB, R.DISK: 20 * GIB}


def test_schedulable_is_the_minimum_over_requested_resources() -> None:
    # vcpu: 64 - 15 = 49 free; memory: 63.5 GiB - 30 GiB = 33.5 GiB -> 16; disk 1000 - 0 -> 50
    facts = host(domains=(domain(vcpus=15, memory=30 * GIB),))
    result = host_capacity(facts, policy(), flavors={"m1.small": Demand(SMALL)})
    assert result.schedulable == {"m1.small": 16}
    assert result.bottlenecks == {"m1.small": R.MEMORY}


def test_an_instance_never_overcommits_against_itself() -> None:
    # 4 CPUs x 16.0 leaves 64 vCPUs free, but an 8-vCPU guest is larger than max_unit = 4 CPUs.
    big = {R.VCPU: 8, R.MEMORY: 1 * GIB}
    result = host_capacity(host(cpus=4), policy(ratios={R.VCPU: 16.0}), flavors={"big": Demand(big)})
    assert result.resources[R.VCPU].free == 64
    assert result.schedulable == {"big": 0}
    assert result.bottlenecks == {"big": R.VCPU}
    assert claim_test(result.resources, big) == [
        "Requested vcpu 8 VCPU > max_unit 4 VCPU: larger than the whole hypervisor"
    ]


def test_max_unit_is_the_total_not_total_minus_reserved() -> None:
    """Issue 13's case: 8 CPUs, 2 reserved, ratio 4.0: (8 - 2) x 4 = 24, and Placement accepts an
    8-vCPU allocation (max_unit = total = 8) three times in a row."""
    eight = {R.VCPU: 8, R.MEMORY: 1 * GIB}
    result = host_capacity(host(cpus=8), policy(reserved={R.VCPU: 2}), flavors={"eight": Demand(eight)})
    assert result.resources[R.VCPU].limit == 24
    assert result.schedulable == {"eight": 3}
    assert claim_test(result.resources, eight) == []
    # memory alike: 64 GiB at 1.5 leaves room for a 64 GiB guest even with 512 MiB reserved
    fat = {R.VCPU: 1, R.MEMORY: 64 * GIB}
    result = host_capacity(
        host(memory=64 * GIB), policy(ratios={R.MEMORY: 1.5}), flavors={"fat": Demand(fat)}
    )
    assert result.schedulable == {"fat": 1}
    # a 9-vCPU claim on an empty 8-CPU host at ratio 4 is larger than the host: refused
    nine = host_capacity(host(cpus=8), policy()).resources
    assert claim_test(nine, {R.VCPU: 9}) == [
        "Requested vcpu 9 VCPU > max_unit 8 VCPU: larger than the whole hypervisor"
    ]


def test_limits_are_truncated_in_mib_and_gib_and_reserved_disk_rounds_up() -> None:
    # 16 GiB, 512 MiB reserved, ratio 1.1: int(15872 x 1.1) = 17459 MiB, not 17459.2 MiB in bytes
    memory = host_capacity(host(memory=16 * GIB), policy(ratios={R.MEMORY: 1.1})).resources[R.MEMORY]
    assert memory.limit == 17459 * MIB
    # 1536 MiB of reserved disk is 2 GiB to Nova; a total of 100.7 GiB is 100 GiB
    disk_host = host(disk=100 * GIB + 700 * MIB)
    disk = host_capacity(disk_host, policy(reserved={R.DISK: 1536 * MIB})).resources[R.DISK]
    assert (disk.total, disk.reserved, disk.limit) == (100 * GIB, 2 * GIB, 98 * GIB)


def test_reserved_above_total_is_a_refused_inventory() -> None:
    result = host_capacity(host(cpus=4), policy(reserved={R.VCPU: 6}), flavors={"small": Demand(SMALL)})
    vcpu = result.resources[R.VCPU]
    assert vcpu.refused == "reserved vcpu exceeds its total: Placement refuses the inventory"
    assert (vcpu.limit, vcpu.max_unit) == (0, 0)
    assert result.resources[R.MEMORY].refused is None  # only that class
    assert result.schedulable == {"small": 0}


def test_schedulable_is_never_negative_and_ignores_unknown_disk() -> None:
    overfull = host(cpus=2, disk=None, domains=(domain(vcpus=20),))
    result = host_capacity(overfull, policy(), flavors={"m1.small": Demand(SMALL)})
    free = result.resources[R.VCPU].free
    assert free is not None and free < 0
    assert result.schedulable == {"m1.small": 0}
    roomy = host_capacity(host(disk=None), policy(), flavors={"m1.small": Demand(SMALL)})
    assert roomy.schedulable == {"m1.small": 31}  # memory-bound; disk unknown is unlimited


def test_claim_test_reports_every_failing_resource_in_novas_words() -> None:
    facts = host(
        cpus=2, memory=4 * GIB, disk=100 * GIB, domains=(domain(vcpus=5, memory=2 * GIB + 512 * MIB),)
    )
    resources = host_capacity(facts, policy()).resources
    # vcpu free 8 - 5 = 3; memory free 3.5 GiB - 2.5 GiB = 1 GiB; disk free 100 GiB
    reasons = claim_test(resources, {R.VCPU: 2, R.MEMORY: 2 * GIB, R.DISK: 40 * GIB})
    assert reasons == ["Free memory 1024.00 MiB < requested 2048 MiB"]
    reasons = claim_test(resources, {R.VCPU: 3, R.MEMORY: 2 * GIB, R.DISK: 40 * GIB})
    assert reasons == [
        "Requested vcpu 3 VCPU > max_unit 2 VCPU: larger than the whole hypervisor",
        "Free memory 1024.00 MiB < requested 2048 MiB",
    ]
    assert claim_test(resources, {R.VCPU: 2, R.MEMORY: 1 * GIB, R.DISK: 100 * GIB}) == []
    assert claim_test(resources, {R.DISK: 101 * GIB}) == [
        "Requested disk 101 GiB > max_unit 100 GiB: larger than the whole hypervisor"
    ]
    assert claim_test(resources, {R.PCPU: 1}) == [
        "Requested pcpu 1 PCPU: no inventory of PCPU on this hypervisor"
    ]


def test_claim_test_shows_negative_free() -> None:
    facts = host(cpus=1, domains=(domain(vcpus=6),))
    resources = host_capacity(facts, policy()).resources
    assert claim_test(resources, {R.VCPU: 1}) == ["Free vcpu -2.00 VCPU < requested 1 VCPU"]


# Invariants over arbitrary hosts and policies.

states = st.sampled_from(list(DomainState))
domains_strategy = st.lists(
    st.builds(
        domain,
        name=st.text(min_size=1, max_size=5),
        state=states,
        vcpus=st.integers(1, 64),
        memory=st.integers(1, 256).map(lambda g: g * GIB),
        disks=st.lists(st.integers(0, 500).map(lambda g: local_disk(g * GIB)), max_size=3).map(tuple),
    ),
    max_size=30,
).map(tuple)


@given(
    cpus=st.integers(1, 256),
    memory_gib=st.integers(1, 4096),
    disk_gib=st.none() | st.integers(0, 100_000),
    domains=domains_strategy,
    vcpu_ratio=st.floats(0.1, 32.0),
    memory_ratio=st.floats(0.1, 4.0),
    reserved_mib=st.integers(0, 65536),
    count_inactive=st.booleans(),
)
def test_invariants(
    cpus: int,
    memory_gib: int,
    disk_gib: int | None,
    domains: tuple[object, ...],
    vcpu_ratio: float,
    memory_ratio: float,
    reserved_mib: int,
    count_inactive: bool,
) -> None:
    disk = disk_gib * GIB if disk_gib is not None else None
    facts = host(cpus=cpus, memory=memory_gib * GIB, disk=disk, domains=domains)  # type: ignore[arg-type]
    chosen = policy(
        ratios={R.VCPU: vcpu_ratio, R.MEMORY: memory_ratio},
        reserved={R.MEMORY: reserved_mib * MIB},
        count_inactive_domains=count_inactive,
    )
    result = host_capacity(facts, chosen, flavors={"m1.small": Demand(SMALL)})
    counted = chosen.counted_states
    assert set(result.resources) == set(STANDARD_CLASSES)
    for capacity in result.resources.values():
        assert capacity.used == sum(v for s, v in capacity.allocated_by_state.items() if s in counted)
        if capacity.total is None:
            assert (capacity.reserved, capacity.limit, capacity.free) == (None, None, None)
            continue
        assert capacity.reserved is not None and capacity.limit is not None
        assert capacity.free == capacity.limit - capacity.used
        unit = capacity.resource.placement_unit
        usable_units = max(capacity.total - capacity.reserved, 0) // unit
        assert capacity.limit == math.floor(usable_units * capacity.allocation_ratio) * unit
        assert capacity.limit >= 0
    assert sum(result.domains_by_state.values()) == len(domains)
    fits = result.schedulable["m1.small"]
    assert fits >= 0
    if fits > 0:
        # one more instance fits: the claim test agrees
        assert claim_test(result.resources, SMALL) == []
    else:
        assert claim_test(result.resources, SMALL)
