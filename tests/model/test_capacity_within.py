"""host_capacity within the host: NUMA cells, hugepages, PCI devices and vGPUs limiting a flavor's
count below what the whole-host classes allow, with pending claims taking their share.

Every expected count is worked out by hand from the host's shape (in the comments), never by
calling model/numa.py or model/host_fit.py another way. Hosts are built from model.facts types;
flavors and policies come from a small configuration, as the exporter reads them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.support.factories import GIB, domain, host
from tests.support.hosts import (
    GPU_A,
    GPU_B,
    ONE_GIB_PAGE,
    PCI_CONFIG,
    PINNED_CONFIG,
    VGPU_CONFIG,
    configured,
    gpu_host,
    numa_cell,
    pinned_host,
    sriov_host,
    with_cells,
)
from virtcap.audit.capture_format import encode_capture
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.demo.hostgen import PAGE_1G_KIB, GuestSpec, HostSpec, Hugepages, NicSpec, capture_document
from virtcap.model.capacity import HostCapacity, host_capacity
from virtcap.model.facts import (
    DomainLayout,
    HostFacts,
    MdevType,
    MediatedDevice,
    PciDevice,
)
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource


def free_dedicated(capacity: HostCapacity) -> list[int]:
    return [len(cell.free_dedicated_cpus) for cell in capacity.within.cells]


# --- pinned guests on two cells ------------------------------------------------------------------


def test_the_pinned_host_is_the_shape_the_counts_are_worked_from() -> None:
    policy, _flavors = configured(PINNED_CONFIG)
    capacity = host_capacity(pinned_host(), policy)
    assert free_dedicated(capacity) == [6, 7]
    assert [cell.page(ONE_GIB_PAGE).free for cell in capacity.within.cells] == [2, 4]  # type: ignore[union-attr]
    assert capacity.resources[Resource.PCPU].free == 13
    assert capacity.resources[Resource.VCPU].free == 8


def test_a_flavor_no_cell_holds_counts_0_though_the_host_has_its_cpus() -> None:
    policy, flavors = configured(PINNED_CONFIG)
    capacity = host_capacity(pinned_host(), policy, flavors)
    # 13 free dedicated CPUs on the host, 6 and 7 in the cells: 8 pinned vCPUs fit in neither
    assert capacity.resources[Resource.PCPU].free == 13
    assert capacity.schedulable["p8"] == 0
    assert capacity.limited_within["p8"] == "numa"
    assert capacity.bottlenecks["p8"] is None
    assert capacity.refusals["p8"] == (
        "NUMA: cell 0: 6 free dedicated CPUs < 8 requested",
        "NUMA: cell 1: 7 free dedicated CPUs < 8 requested",
    )
    assert capacity.claim_test(flavors["p8"]) == list(capacity.refusals["p8"])


def test_pinned_flavors_count_what_each_cell_holds() -> None:
    policy, flavors = configured(PINNED_CONFIG)
    capacity = host_capacity(pinned_host(), policy, flavors)
    # p4: floor(6 / 4) + floor(7 / 4) = 2 (small pages hold 4 of 2 GiB a cell), below the
    # whole host's floor(13 / 4) = 3: the cells limit it
    assert capacity.schedulable["p4"] == 2
    assert capacity.limited_within["p4"] == "numa"
    assert capacity.bottlenecks["p4"] is None
    assert "p4" not in capacity.refusals
    # p1: 6 + 7 = 13, all the host's PCPUs (memory holds 23): the class limits it, not the cells
    assert capacity.schedulable["p1"] == 13
    assert "p1" not in capacity.limited_within
    assert capacity.bottlenecks["p1"] is Resource.PCPU
    # p2.1g: the 1 GiB pages bound it: cell 0 min(6 // 2, 2 // 2) = 1, cell 1 min(7 // 2, 4 // 2) = 2
    assert capacity.schedulable["p2.1g"] == 3
    assert capacity.limited_within["p2.1g"] == "numa"
    # a flavor without extra specs is the whole host's: 8 shared vCPUs, 23 of 2 GiB... 8
    assert capacity.schedulable["m1.small"] == 8
    assert capacity.bottlenecks["m1.small"] is Resource.VCPU
    assert "m1.small" not in capacity.limited_within


def test_1gib_pages_count_per_cell_and_reserved_pages_are_kept() -> None:
    policy, flavors = configured(PINNED_CONFIG)
    # s1.1g (shared CPUs, 2 GiB in 1 GiB pages): floor(2 / 2) + floor(4 / 2) = 3, whereas 8
    # shared vCPUs and 23.5 GiB would take 8
    capacity = host_capacity(pinned_host(), policy, flavors)
    assert capacity.schedulable["s1.1g"] == 3
    assert capacity.limited_within["s1.1g"] == "numa"
    # without the 2 pages kept in cell 0: floor(4 / 2) + floor(4 / 2) = 4
    unreserved = host_capacity(pinned_host(), replace(policy, reserved_huge_pages={}), flavors)
    assert unreserved.schedulable["s1.1g"] == 4
    assert unreserved.schedulable["p2.1g"] == 4  # cell 0 min(3, 2) = 2, cell 1 min(3, 2) = 2


# --- pending claims ------------------------------------------------------------------------------


def test_pending_claims_take_cells_in_order_and_lower_the_counts() -> None:
    policy, flavors = configured(PINNED_CONFIG)
    p4 = flavors["p4"]
    one = host_capacity(pinned_host(), policy, flavors, claimed=p4.request, pending=(p4,))
    # Nova's search order for a pinned guest: most free dedicated CPUs first: cell 1 (7 -> 3)
    assert free_dedicated(one) == [6, 3]
    assert one.resources[Resource.PCPU].free == 9
    assert one.schedulable["p4"] == 1  # cell 0 only; the whole host 9 // 4 = 2
    assert one.limited_within["p4"] == "numa"

    twice = {resource: 2 * amount for resource, amount in p4.request.items()}
    two = host_capacity(pinned_host(), policy, flavors, claimed=twice, pending=(p4, p4))
    # the second takes cell 0 (6 > 3 free): 2 and 3 left, 5 on the host
    assert free_dedicated(two) == [2, 3]
    assert two.resources[Resource.PCPU].free == 5
    assert two.schedulable["p4"] == 0
    assert two.refusals["p4"] == (
        "NUMA: cell 0: 2 free dedicated CPUs < 4 requested",
        "NUMA: cell 1: 3 free dedicated CPUs < 4 requested",
    )
    assert two.schedulable["p1"] == 5 and two.bottlenecks["p1"] is Resource.PCPU


def test_a_pending_claim_that_no_longer_fits_takes_nothing_within_the_host() -> None:
    policy, flavors = configured(PINNED_CONFIG)
    p8 = flavors["p8"]
    base = host_capacity(pinned_host(), policy, flavors)
    claimed = host_capacity(pinned_host(), policy, flavors, claimed=p8.request, pending=(p8,))
    assert claimed.within == base.within
    assert free_dedicated(claimed) == [6, 7]
    # its whole-host amounts still count: 13 - 8 = 5 PCPUs, so p4 fits once (in either cell)
    assert claimed.resources[Resource.PCPU].free == 5
    assert claimed.schedulable["p4"] == 1
    assert claimed.bottlenecks["p4"] is Resource.PCPU
    assert "p4" not in claimed.limited_within


# --- small pages, no hugepages -------------------------------------------------------------------

# Two cells of 4 CPUs and 8 GiB in small pages only, nothing reserved, no guest.
SMALL_PAGES_CONFIG = """
hypervisors:
  - {name: small, uri: "test:///default", reserved: {memory: 0}, allocation_ratios: {memory: RATIO}}
flavors:
  - {name: m3, vcpu: 1, memory: 3GiB}
  - {name: m3.small, vcpu: 1, memory: 3GiB, extra_specs: {"hw:mem_page_size": small}}
  - {name: m3.numa, vcpu: 1, memory: 3GiB, extra_specs: {"hw:numa_nodes": "1"}}
"""


def small_pages_host() -> HostFacts:
    return with_cells(host(), (numa_cell(0, range(0, 4), 8), numa_cell(1, range(4, 8), 8)))


def test_small_pages_count_each_cells_memory() -> None:
    policy, flavors = configured(SMALL_PAGES_CONFIG.replace("RATIO", "1.0"))
    capacity = host_capacity(small_pages_host(), policy, flavors)
    # 16 GiB on the host: 5 of 3 GiB; 8 GiB a cell: 2 + 2
    assert capacity.schedulable["m3"] == 5
    assert capacity.bottlenecks["m3"] is Resource.MEMORY
    assert capacity.schedulable["m3.small"] == 4
    assert capacity.limited_within["m3.small"] == "numa"
    assert capacity.schedulable["m3.numa"] == 4
    assert capacity.limited_within["m3.numa"] == "numa"


def test_the_ram_ratio_overcommits_cells_but_never_pages() -> None:
    policy, flavors = configured(SMALL_PAGES_CONFIG.replace("RATIO", "1.5"))
    capacity = host_capacity(small_pages_host(), policy, flavors)
    # 24 GiB on the host: 8; a cell's limit 12 GiB: 4 + 4, the whole host's count
    assert capacity.schedulable["m3"] == 8
    assert capacity.schedulable["m3.numa"] == 8
    assert capacity.bottlenecks["m3.numa"] is Resource.MEMORY
    assert "m3.numa" not in capacity.limited_within
    # pages asked for explicitly are never overcommitted: 8 GiB of free small pages a cell
    assert capacity.schedulable["m3.small"] == 4
    assert capacity.limited_within["m3.small"] == "numa"


# --- PCI devices ---------------------------------------------------------------------------------


def test_pci_devices_near_the_cells_under_each_numa_policy() -> None:
    policy, flavors = configured(PCI_CONFIG)
    capacity = host_capacity(sriov_host(), policy, flavors)
    assert {alias: devices.free for alias, devices in capacity.within.alias_devices().items()} == {
        "vf-required": 4,
        "vf-legacy": 4,
        "vf-preferred": 4,
    }
    # whole host: 12 free PCPUs, 6 of 2; the first instance goes to cell 0 (most devices) and
    # takes 2 of its 3 VFs; then neither cell has 2 near it
    for name in ("pv.required", "pv.legacy"):
        assert capacity.schedulable[name] == 1, name
        assert capacity.limited_within[name] == "numa"
        assert capacity.bottlenecks[name] is None
    # preferred: the second takes cell 1's VF and cell 0's last: 4 // 2
    assert capacity.schedulable["pv.preferred"] == 2
    assert capacity.schedulable["pv.legacy-preferred"] == 2  # the flavor's policy wins


def test_pci_devices_limit_a_flavor_without_a_numa_topology() -> None:
    policy, flavors = configured(PCI_CONFIG)
    for facts in (sriov_host(), sriov_host(numa=False)):
        capacity = host_capacity(facts, policy, flavors)
        # 8 shared vCPUs on the host, 4 free VFs wherever they are: 2 of 2, 0 of 5
        assert capacity.schedulable["v2"] == 2
        assert capacity.limited_within["v2"] == "pci"
        assert capacity.bottlenecks["v2"] is None
        assert capacity.schedulable["v5"] == 0
        assert capacity.limited_within["v5"] == "pci"
        assert capacity.refusals["v5"] == ("PCI: no free devices for vf-legacy:5 (vf-legacy 4 free)",)
        assert capacity.claim_test(flavors["v5"]) == [
            "PCI: no free devices for vf-legacy:5 (vf-legacy 4 free)"
        ]
        assert capacity.claim_test(flavors["v2"]) == []


def test_a_numa_flavor_asking_for_devices_on_a_host_without_cells() -> None:
    policy, flavors = configured(PCI_CONFIG)
    capacity = host_capacity(sriov_host(numa=False), policy, flavors)
    assert capacity.schedulable["pv.preferred"] == 0
    assert capacity.refusals["pv.preferred"] == ("NUMA: the host reports no NUMA cells",)


def test_claim_test_names_the_cells_refusing_the_devices() -> None:
    policy, flavors = configured(PCI_CONFIG)
    required = flavors["pv.required"]
    capacity = host_capacity(sriov_host(), policy, flavors, claimed=required.request, pending=(required,))
    # the pending claim took 2 of cell 0's VFs: 1 left near each cell
    assert {pool.numa_node: pool.free for pool in capacity.within.pci_pools} == {0: 1, 1: 1}
    assert capacity.schedulable["pv.required"] == 0
    reasons = capacity.claim_test(required)
    assert reasons == list(capacity.refusals["pv.required"])
    assert reasons == [
        "NUMA: cell 0: the PCI devices requested do not fit its placement",
        "NUMA: cell 1: the PCI devices requested do not fit its placement",
    ]
    assert capacity.claim_test(flavors["pv.preferred"]) == []


# --- vGPUs ---------------------------------------------------------------------------------------


def test_vgpus_come_from_one_gpu_per_allocation() -> None:
    policy, flavors = configured(VGPU_CONFIG)
    capacity = host_capacity(gpu_host(), policy, flavors)
    assert capacity.resources[Resource.VGPU].free == 5
    assert capacity.schedulable["g2"] == 2  # 3 // 2 + 2 // 2
    assert capacity.schedulable["g3"] == 1  # 3 // 3 + 2 // 3, though 5 // 3 = 1 anyway
    assert capacity.schedulable["g4"] == 0
    assert capacity.bottlenecks["g4"] is Resource.VGPU
    # no GPU holds 4: Placement's max_unit is one GPU's total, 3
    assert capacity.refusals["g4"] == ("Requested vgpu 4 VGPU > max_unit 3 VGPU: above max_unit",)
    assert capacity.claim_test(flavors["g4"]) == list(capacity.refusals["g4"])


def test_a_claim_takes_its_vgpus_from_one_gpu_the_tightest_that_holds_them() -> None:
    """A claim is one allocation: its vGPUs come from one GPU, and the one with the least free
    that holds them leaves the most for what comes next (3 and 2 free)."""
    policy, flavors = configured(VGPU_CONFIG)
    one = host_capacity(gpu_host(), policy, flavors, claimed={Resource.VGPU: 1})
    # from B (2 -> 1): 3 and 1 left, 4 on the host
    assert one.resources[Resource.VGPU].free == 4
    assert (one.schedulable["g2"], one.schedulable["g3"]) == (1, 1)
    two = host_capacity(gpu_host(), policy, flavors, claimed={Resource.VGPU: 2})
    # from B (2 -> 0): 3 and 0 left
    assert (two.schedulable["g2"], two.schedulable["g3"]) == (1, 1)
    three = host_capacity(gpu_host(), policy, flavors, claimed={Resource.VGPU: 3})
    # only A holds 3 (3 -> 0): 0 and 2 left, so no GPU has 3
    assert (three.schedulable["g2"], three.schedulable["g3"]) == (1, 0)
    assert three.bottlenecks["g3"] is Resource.VGPU
    assert three.claim_test(flavors["g3"]) == list(three.refusals["g3"])


def test_two_pending_claims_of_two_vgpus_each_take_a_gpu_each() -> None:
    policy, flavors = configured(VGPU_CONFIG)
    pair = Demand({Resource.VGPU: 2})
    both = host_capacity(gpu_host(), policy, flavors, claimed={Resource.VGPU: 4}, pending=(pair, pair))
    # the first from B (2 -> 0), the second from A (3 -> 1): nothing of 2 is left
    assert both.schedulable["g2"] == 0
    assert both.claim_test(Demand({Resource.VGPU: 1})) == []
    assert both.claim_test(pair)  # refused


def test_the_vgpu_refusal_shows_what_is_free_on_each_gpu() -> None:
    """A holds a guest's vGPU beside 2 it can still create (3 in all, 2 free), B 2 free: the
    host has 4 free and max_unit 3, yet no GPU has 3 free; a pending claim of 1 takes one of A's
    (both hold it with 2 free: the first by address)."""
    policy, flavors = configured(VGPU_CONFIG)
    held = "c2177883-f1bb-47f0-914d-32a22e3a8804"
    guest = replace(domain("ml"), layout=DomainLayout(mdev_uuids=(held,)))
    gpu_a, gpu_b = gpu_host().pci_devices
    two_more = (MdevType("nvidia-35", "GRID M10-0B", "vfio-pci", 2),)
    facts = replace(
        gpu_host(),
        pci_devices=(replace(gpu_a, mdev_types=two_more), gpu_b),
        mediated_devices=(MediatedDevice(held, "nvidia-35", GPU_A),),
        domains=(guest,),
    )
    capacity = host_capacity(facts, policy, flavors)
    assert capacity.resources[Resource.VGPU].free == 4
    assert capacity.schedulable["g3"] == 0 and capacity.bottlenecks["g3"] is Resource.VGPU
    assert capacity.refusals["g3"] == (
        f"Requested VGPU 3: no physical GPU has the free vGPUs ({GPU_A} 2, {GPU_B} 2)",
    )
    claimed = host_capacity(facts, policy, flavors, claimed={Resource.VGPU: 1})
    assert claimed.claim_test(flavors["g3"]) == [
        f"Requested VGPU 3: no physical GPU has the free vGPUs ({GPU_A} 1, {GPU_B} 2)"
    ]


def test_vgpus_of_several_groups_may_come_from_several_gpus() -> None:
    """Placement holds each group to one provider's max_unit, not their sum: one vGPU in each of
    two groups fits on GPUs of one vGPU each, which a sum of 2 above max_unit 1 would refuse."""
    config = VGPU_CONFIG.replace(
        "flavors:\n",
        'flavors:\n  - {name: g1x2, vcpu: 1, memory: 1GiB, extra_specs: {"resources1:VGPU": "1", '
        '"resources2:VGPU": "1", "group_policy": "isolate"}}\n',
    )
    policy, flavors = configured(config)

    def gpu(address: str) -> PciDevice:
        types = (MdevType("nvidia-35", "GRID A100-40C", "vfio-pci", 1),)
        return PciDevice(address, "10de", "20b7", None, "type-PCI", None, "0x030200", mdev_types=types)

    facts = replace(
        host(), pci_devices=tuple(gpu(f"0000:{bus:02x}:00.0") for bus in (0x3B, 0x5E, 0x86, 0xAF))
    )
    capacity = host_capacity(facts, policy, flavors)
    assert capacity.resources[Resource.VGPU].max_unit == 1
    assert capacity.schedulable["g1x2"] == 2
    assert capacity.schedulable["g2"] == 0  # one group of 2: no GPU holds it
    assert capacity.refusals["g2"] == ("Requested vgpu 2 VGPU > max_unit 1 VGPU: above max_unit",)


# --- a host without NUMA cells -------------------------------------------------------------------


def test_a_host_without_cells_fits_no_numa_topology() -> None:
    policy, flavors = configured(
        """
hypervisors: [{name: flat, uri: "test:///default"}]
flavors:
  - {name: n1, vcpu: 2, memory: 2GiB, extra_specs: {"hw:numa_nodes": "1"}}
  - {name: plain, vcpu: 2, memory: 2GiB}
"""
    )
    facts = host(cpus=16, memory=64 * GIB)
    assert facts.numa_cells == ()
    capacity = host_capacity(facts, policy, flavors)
    assert capacity.schedulable["n1"] == 0
    assert capacity.limited_within["n1"] == "numa"
    assert capacity.refusals["n1"] == ("NUMA: the host reports no NUMA cells",)
    # 64 VCPUs of 2; (64 GiB - 512 MiB) // 2 GiB = 31
    assert capacity.schedulable["plain"] == 31
    assert capacity.bottlenecks["plain"] is Resource.MEMORY
    assert "plain" not in capacity.limited_within and "plain" not in capacity.refusals


# --- end to end: a captured two-socket host ------------------------------------------------------

# 2 sockets x 4 cores x 2 threads: cell 0 holds CPUs 0-3 and their siblings 8-11, cell 1 CPUs 4-7
# and 12-15; 16 GiB a cell, 4 and 8 of it in 1 GiB pages. Core 0 of each socket (0, 8, 4, 12)
# floats shared guests: 6 dedicated CPUs a cell.
#   a: pinned to core 1 of socket 0 (CPUs 1, 9), 2 GiB of 1 GiB pages: cell 0 4 free CPUs, 2 pages
#   b: pinned to cores 1-2 of socket 1 (5, 13, 6, 14), 4 GiB: cell 1 2 free CPUs, 4 pages
#   a VF on each socket, the one of cell 0 held by a
CAPTURED = HostSpec(
    name="captured",
    sockets=2,
    cores=4,
    threads=2,
    memory_gib=16,
    hugepages=(Hugepages(PAGE_1G_KIB, (4, 8)),),
    nics=(NicSpec(cell=0, bus=0x3B, vfs=1), NicSpec(cell=1, bus=0xD8, vfs=1)),
    guests=(
        GuestSpec(
            "a",
            vcpus=2,
            memory_mib=2048,
            cell=0,
            pins=(1, 9),
            page_size_kib=PAGE_1G_KIB,
            pci=("0000:3b:02.0",),
        ),
        GuestSpec("b", vcpus=4, memory_mib=4096, cell=1, pins=(5, 13, 6, 14), page_size_kib=PAGE_1G_KIB),
    ),
)
CAPTURED_CONFIG = """
hypervisors:
  - name: captured
    uri: "replay:///captured.json"
    cpu_shared_set: "0,4,8,12"
    cpu_dedicated_set: "1-3,5-7,9-11,13-15"
    pci_device_spec:
      - {vendor_id: "8086", product_id: "154c"}
flavors:
  - name: p2.1g
    vcpu: 2
    memory: 2GiB
    extra_specs: {"hw:cpu_policy": dedicated, "hw:mem_page_size": 1GB}
  - {name: p6, vcpu: 6, memory: 1GiB, extra_specs: {"hw:cpu_policy": dedicated}}
  - {name: pv, vcpu: 1, memory: 1GiB,
     extra_specs: {"hw:cpu_policy": dedicated, "pci_passthrough:alias": "vf:1"}}
pci:
  alias:
    - {name: vf, vendor_id: "8086", product_id: "154c", device_type: type-VF, numa_policy: required}
"""


def test_a_captured_host_through_the_whole_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "captured.json"
    path.write_bytes(encode_capture(capture_document(CAPTURED)))
    uri = f"replay://{path}"
    conn = open_read_only(uri)
    try:
        facts = audit_host(conn, uri, None)
    finally:
        conn.close()
    assert facts.problems == ()
    policy, flavors = configured(CAPTURED_CONFIG)
    capacity = host_capacity(facts, policy, flavors)
    assert free_dedicated(capacity) == [4, 2]
    assert [cell.page(PAGE_1G_KIB).free for cell in capacity.within.cells] == [2, 4]  # type: ignore[union-attr]
    assert capacity.resources[Resource.PCPU].free == 6
    # p2.1g: cell 0 min(4 // 2, 2 // 2) = 1, cell 1 min(2 // 2, 4 // 2) = 1; the host 6 // 2 = 3
    assert capacity.schedulable["p2.1g"] == 2
    assert capacity.limited_within["p2.1g"] == "numa"
    # p6: the host's 6 free dedicated CPUs are 4 and 2
    assert capacity.schedulable["p6"] == 0
    assert capacity.refusals["p6"] == (
        "NUMA: cell 0: 4 free dedicated CPUs < 6 requested",
        "NUMA: cell 1: 2 free dedicated CPUs < 6 requested",
    )
    # pv: one free VF, on cell 1, which has 2 free dedicated CPUs: 1 instance
    assert capacity.schedulable["pv"] == 1
    assert capacity.limited_within["pv"] == "numa"
    assert capacity.hugepage_memory_bytes == 6 * GIB
    assert capacity.resources[Resource.MEMORY].used == 6 * GIB


def test_a_refusal_lists_the_aliases_asked_for_not_those_whose_name_is_inside_them() -> None:
    """An alias `vf` beside `vf-legacy`: a flavor asking for `vf-legacy:5` asks nothing of `vf`."""
    config = PCI_CONFIG.replace(
        "pci:\n  alias:\n",
        'pci:\n  alias:\n    - {name: vf, vendor_id: "8086", product_id: "154c", device_type: type-VF}\n',
    )
    policy, flavors = configured(config)
    capacity = host_capacity(sriov_host(), policy, flavors)
    assert capacity.refusals["v5"] == ("PCI: no free devices for vf-legacy:5 (vf-legacy 4 free)",)


def test_the_flavors_the_cells_or_devices_alone_refuse_are_typed_not_read_from_their_reasons() -> None:
    """The report's "fits nowhere here" line follows `refused_within`, set from the fit's typed
    refusals: a class refusal never counts, however its text begins."""
    policy, flavors = configured(PINNED_CONFIG)
    capacity = host_capacity(pinned_host(), policy, flavors)
    assert "p8" in capacity.refused_within  # both cells refuse it; the host's CPUs would take it
    assert all(name in capacity.refusals for name in capacity.refused_within)
    pci_policy, pci_flavors = configured(PCI_CONFIG)
    devices = host_capacity(sriov_host(), pci_policy, pci_flavors)
    assert "v5" in devices.refused_within
    assert "v2" not in devices.refused_within  # it fits: no refusal at all
    vgpu_policy, vgpu_flavors = configured(VGPU_CONFIG)
    gpus = host_capacity(gpu_host(), vgpu_policy, vgpu_flavors)
    assert gpus.refusals["g4"] and "g4" not in gpus.refused_within  # the classes refuse it
