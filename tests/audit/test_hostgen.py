"""Captured multi-socket and GPU hosts made by virtcap.demo.hostgen, audited through a replay: two
and four cells, SMT siblings, 2 MiB and 1 GiB pages, SR-IOV VFs on both sockets, GPUs with mdev
types, and guests whose pins, memory nodes, hugepages and devices are what the spec says; the
demo's compute-08 tells its story (p1.8xlarge fits in no cell), compute-09 holds its vGPUs and
compute-10, their spare, has the cells, pages, VFs and vGPUs their pinned guests would need."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from virtcap.audit.capture_format import decode_capture, encode_capture
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.demo import demo_config
from virtcap.demo.generate import gpu_host, numa_host, spare_host
from virtcap.demo.hostgen import (
    PAGE_1G_KIB,
    PAGE_2M_KIB,
    RUNNING,
    SHUTOFF,
    FlavorSpec,
    GpuSpec,
    GuestSpec,
    HostSpec,
    Hugepages,
    MdevSpec,
    MdevTypeSpec,
    NicSpec,
    capture_document,
)
from virtcap.model.facts import (
    GuestCell,
    HostFacts,
    HugepageBacking,
    MdevType,
    MediatedDevice,
    NumaCell,
    PageCount,
    PciDevice,
)
from virtcap.model.numa.cells import host_cells
from virtcap.model.numa.fitting import fit
from virtcap.model.numa.request import instance_topology
from virtcap.model.vgpu import vgpu_capacity

GIB = 1024**3
MIB = 1024**2
DEDICATED_1G = (("hw:cpu_policy", "dedicated"), ("hw:mem_page_size", "1GB"))
VGPU_UUID = "2b0c6a1e-8f0d-4c59-9a55-0d3f7d0e6c21"
A30_TYPES = (MdevTypeSpec("nvidia-689", "GRID A30-4C", 6), MdevTypeSpec("nvidia-690", "GRID A30-6C", 4))

# Two sockets of 2 cores, 2 threads each: cell 0 holds CPUs 0, 1, 4, 5, cell 1 CPUs 2, 3, 6, 7.
# 16 GiB a cell: 1024 pages of 2 MiB and 4 of 1 GiB in cell 0, 512 and 8 in cell 1.
TWO_CELLS = HostSpec(
    name="two-cells",
    sockets=2,
    cores=2,
    threads=2,
    memory_gib=16,
    hugepages=(Hugepages(PAGE_2M_KIB, (1024, 512)), Hugepages(PAGE_1G_KIB, (4, 8))),
    nics=(NicSpec(cell=0, bus=0x3B, vfs=2), NicSpec(cell=1, bus=0xD8, vfs=2)),
    gpus=(GpuSpec(cell=1, bus=0xAF, mdev_types=A30_TYPES, product_id="20b7", product="GA100GL [A30 PCIe]"),),
    guests=(
        # On cell 1 in 1 GiB pages, with a VF of the second socket's NIC and a vGPU.
        GuestSpec(
            name="pinned-1g",
            vcpus=2,
            memory_mib=4096,
            cell=1,
            pins=(2, 6),
            page_size_kib=PAGE_1G_KIB,
            flavor=FlavorSpec("p1.medium", 2, 4096, extra_specs=(*DEDICATED_1G, ("resources:VGPU", "1"))),
            pci=("0000:d8:02.1",),
            mdevs=(MdevSpec(VGPU_UUID, "nvidia-689", "0000:af:00.0"),),
        ),
        # On cell 0 in 2 MiB pages, with a VF of the first socket's NIC.
        GuestSpec(
            name="pinned-2m",
            vcpus=2,
            memory_mib=1024,
            cell=0,
            pins=(1, 5),
            page_size_kib=PAGE_2M_KIB,
            pci=("0000:3b:02.0",),
        ),
        # Stopped: its pages are back with the kernel.
        GuestSpec(
            name="stopped-1g",
            vcpus=1,
            memory_mib=2048,
            state=SHUTOFF,
            cell=1,
            pins=(3,),
            page_size_kib=PAGE_1G_KIB,
        ),
        # Floating over the first core of each socket, a plain 4 KiB guest.
        GuestSpec(
            name="shared",
            vcpus=2,
            memory_mib=2048,
            pins=(0, 2, 4, 6),
            flavor=FlavorSpec("m1.medium", 2, 2048),
        ),
    ),
)

TWO_CELLS_CELLS = (
    NumaCell(
        id=0,
        cpus=frozenset({0, 1, 4, 5}),
        siblings=(frozenset({0, 4}), frozenset({1, 5})),
        memory_bytes=16 * GIB,
        pages=(
            PageCount(4, (16 * GIB - 1024 * 2 * MIB - 4 * GIB) // 4096, None),
            PageCount(PAGE_2M_KIB, 1024, 1024 - 512),
            PageCount(PAGE_1G_KIB, 4, 4),
        ),
    ),
    NumaCell(
        id=1,
        cpus=frozenset({2, 3, 6, 7}),
        siblings=(frozenset({2, 6}), frozenset({3, 7})),
        memory_bytes=16 * GIB,
        pages=(
            PageCount(4, (16 * GIB - 512 * 2 * MIB - 8 * GIB) // 4096, None),
            PageCount(PAGE_2M_KIB, 512, 512),
            PageCount(PAGE_1G_KIB, 8, 8 - 4),
        ),
    ),
)
TWO_CELLS_DEVICES = (
    PciDevice("0000:3b:00.0", "8086", "1572", 0, "type-PF", None, "0x020000"),
    PciDevice("0000:3b:02.0", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000"),
    PciDevice("0000:3b:02.1", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000"),
    PciDevice(
        "0000:af:00.0",
        "10de",
        "20b7",
        1,
        "type-PCI",
        None,
        "0x030200",
        mdev_types=(
            # one A30-4C created: 5 more of it, and none of another type while it exists
            MdevType("nvidia-689", "GRID A30-4C", "vfio-pci", 5),
            MdevType("nvidia-690", "GRID A30-6C", "vfio-pci", 0),
        ),
    ),
    PciDevice("0000:d8:00.0", "8086", "1572", 1, "type-PF", None, "0x020000"),
    PciDevice("0000:d8:02.0", "8086", "154c", 1, "type-VF", "0000:d8:00.0", "0x020000"),
    PciDevice("0000:d8:02.1", "8086", "154c", 1, "type-VF", "0000:d8:00.0", "0x020000"),
)


def audit(host: HostSpec, tmp_path: Path) -> HostFacts:
    path = tmp_path / f"{host.name}.json"
    path.write_bytes(encode_capture(capture_document(host)))
    uri = f"replay://{path}"
    conn = open_read_only(uri)
    try:
        return audit_host(conn, uri, None)
    finally:
        conn.close()


def test_a_two_cell_host_audits_to_its_spec(tmp_path: Path) -> None:
    facts = audit(TWO_CELLS, tmp_path)
    assert facts.problems == ()
    assert facts.cpus == 8 and facts.online_cpus == frozenset(range(8))
    assert facts.memory_bytes == 32 * GIB
    assert facts.numa_cells == TWO_CELLS_CELLS
    assert tuple(sorted(facts.pci_devices, key=lambda d: d.address)) == TWO_CELLS_DEVICES
    assert facts.mediated_devices == (MediatedDevice(VGPU_UUID, "nvidia-689", "0000:af:00.0"),)


def test_the_guests_placements_are_the_spec(tmp_path: Path) -> None:
    domains = {d.name: d for d in audit(TWO_CELLS, tmp_path).domains}
    assert set(domains) == {"pinned-1g", "pinned-2m", "stopped-1g", "shared"}

    pinned = domains["pinned-1g"]
    assert pinned.vcpu_pins == (frozenset({2}), frozenset({6}))
    assert pinned.layout.emulator_pins == frozenset({2, 6})
    assert pinned.layout.guest_cells == (GuestCell(0, frozenset({0, 1}), 4 * GIB),)
    assert pinned.layout.memory_nodes == frozenset({1})
    assert pinned.layout.cell_memory_nodes == {0: frozenset({1})}
    assert pinned.layout.hugepages == (HugepageBacking(PAGE_1G_KIB, frozenset({0})),)
    assert pinned.layout.pci_addresses == ("0000:d8:02.1",)
    assert pinned.layout.mdev_uuids == (VGPU_UUID,)
    assert pinned.nova is not None and pinned.nova.flavor.name == "p1.medium"
    assert pinned.nova.flavor.extra_specs == dict((*DEDICATED_1G, ("resources:VGPU", "1")))
    assert pinned.nova.boot_from_volume and pinned.disks[0].local is False

    two_mib = domains["pinned-2m"]
    assert two_mib.layout.hugepages == (HugepageBacking(PAGE_2M_KIB, frozenset({0})),)
    assert two_mib.layout.memory_nodes == frozenset({0})
    assert two_mib.layout.pci_addresses == ("0000:3b:02.0",)
    assert two_mib.nova is None  # a domain of its own: no Nova metadata

    assert domains["stopped-1g"].state == "shutoff"
    shared = domains["shared"]
    assert shared.vcpu_pins == (frozenset({0, 2, 4, 6}),) * 2
    assert shared.layout.guest_cells == () and shared.layout.hugepages == ()
    assert shared.hugepages is False and shared.layout.memory_nodes is None


# Four sockets of 4 cores, 2 threads each: socket s holds CPUs 4s..4s+3 and their siblings 16 on.
FOUR_CELLS = HostSpec(
    name="four-cells",
    sockets=4,
    cores=4,
    threads=2,
    memory_gib=32,
    hugepages=(Hugepages(PAGE_2M_KIB, (2048, 2048, 1024, 0)), Hugepages(PAGE_1G_KIB, (8, 8, 16, 4))),
    nics=(NicSpec(cell=0, bus=0x18, vfs=4), NicSpec(cell=3, bus=0xD8, vfs=12)),
    gpus=(GpuSpec(cell=2, bus=0x86, mdev_types=(MdevTypeSpec("nvidia-35", "GRID M10-0B", 16),)),),
    guests=tuple(
        GuestSpec(
            name=f"cell{cell}",
            vcpus=4,
            memory_mib=4096,
            cell=cell,
            pins=(4 * cell + 1, 4 * cell + 17, 4 * cell + 2, 4 * cell + 18),
            page_size_kib=PAGE_1G_KIB,
            pci=(f"0000:d8:0{2 + cell}.0",) if cell == 3 else (),
        )
        for cell in range(4)
    ),
)


def test_a_four_cell_host_audits_to_its_spec(tmp_path: Path) -> None:
    facts = audit(FOUR_CELLS, tmp_path)
    assert facts.problems == ()
    assert [cell.id for cell in facts.numa_cells] == [0, 1, 2, 3]
    for cell in facts.numa_cells:
        first = range(4 * cell.id, 4 * cell.id + 4)
        assert cell.siblings == tuple(frozenset({cpu, cpu + 16}) for cpu in first)
        assert cell.cpus == frozenset(first) | frozenset(cpu + 16 for cpu in first)
        pages = {page.size_kib: (page.total, page.free) for page in cell.pages}
        two_mib = (2048, 2048, 1024, 0)[cell.id]
        one_gib = (8, 8, 16, 4)[cell.id]
        assert pages[PAGE_2M_KIB] == (two_mib, two_mib)
        assert pages[PAGE_1G_KIB] == (one_gib, one_gib - 4)  # each cell's guest holds 4
        assert pages[4][0] * 4096 == 32 * GIB - two_mib * 2 * MIB - one_gib * GIB
    assert (
        frozenset().union(*(cell.cpus for cell in facts.numa_cells))
        == facts.online_cpus
        == frozenset(range(32))
    )

    by_cell: dict[int | None, list[str]] = {}
    for device in facts.pci_devices:
        by_cell.setdefault(device.numa_node, []).append(device.dev_type)
    assert sorted(by_cell[0]) == ["type-PF"] + ["type-VF"] * 4
    assert sorted(by_cell[3]) == ["type-PF"] + ["type-VF"] * 12
    assert by_cell[2] == ["type-PCI"] and 1 not in by_cell
    (gpu,) = (d for d in facts.pci_devices if d.mdev_types)
    assert gpu.mdev_types == (MdevType("nvidia-35", "GRID M10-0B", "vfio-pci", 16),)
    # twelve VFs: functions 0-7 of slot 2, then 0-3 of slot 3
    assert max(d.address for d in facts.pci_devices if d.numa_node == 3) == "0000:d8:03.3"

    domains = {d.name: d for d in facts.domains}
    for cell_id in range(4):
        guest = domains[f"cell{cell_id}"]
        assert guest.layout.memory_nodes == frozenset({cell_id})
        assert guest.vcpu_pins[0] == frozenset({4 * cell_id + 1})
    assert domains["cell3"].layout.pci_addresses == ("0000:d8:05.0",)


def test_the_document_is_the_same_every_time_and_round_trips() -> None:
    data = encode_capture(capture_document(TWO_CELLS))
    assert encode_capture(capture_document(TWO_CELLS)) == data
    assert encode_capture(decode_capture(data, "two-cells")) == data
    document = capture_document(TWO_CELLS)
    assert [d.name for d in document.domains.definitions] == [g.name for g in TWO_CELLS.guests]
    states = [(s.stats["state.state"], s.stats["state.reason"]) for s in document.domains.state_stats.get()]
    assert states == [(RUNNING, 1), (RUNNING, 1), (SHUTOFF, 1), (RUNNING, 1)]
    info = {d.name: d.info.get() for d in document.domains.definitions}
    assert info["stopped-1g"][:4] == (SHUTOFF, 2048 * 1024, 2048 * 1024, 1)
    xml = {d.name: d.xml.get() for d in document.domains.definitions}
    assert xml["stopped-1g"].startswith("<domain type='kvm'>")  # no id: not running
    assert xml["shared"].startswith("<domain type='kvm' id=")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"guests": (GuestSpec("big", 1, 8 * 1024, cell=0, pins=(0,), page_size_kib=PAGE_1G_KIB),)},
            "too few",
        ),
        ({"guests": (GuestSpec("nowhere", 1, 1024, cell=2, pins=(0,)),)}, "no cell 2"),
        ({"guests": (GuestSpec("astray", 1, 1024, cell=0, pins=(2,)),)}, "pinned outside cell 0"),
        ({"hugepages": (Hugepages(PAGE_1G_KIB, (4,)),)}, "a count for each of 2 cells"),
        ({"hugepages": (Hugepages(PAGE_1G_KIB, (17, 0)),)}, "more hugepages than memory"),
    ],
)
def test_an_impossible_host_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        capture_document(replace(TWO_CELLS, **change))  # type: ignore[arg-type]


# The demo's hosts.


def test_compute_08_has_room_for_p1_8xlarge_in_no_cell(tmp_path: Path) -> None:
    """14 dedicated CPUs free and 44 GiB of memory, yet cell 0 has 6 free dedicated CPUs and
    cell 1, with 8, only 14 GiB of 1 GiB pages usable and 12 GiB of 2 MiB pages. Cell 0's 2 MiB
    pages are all taken: the guests hold 4096 and the host keeps the other 2048."""
    facts = audit(numa_host(), tmp_path)
    assert facts.problems == ()
    assert [len(cell.cpus) for cell in facts.numa_cells] == [16, 16]
    (policy,) = (h.policy for h in demo_config().hypervisors if h.name == "compute-08")
    cells = host_cells(
        facts.numa_cells,
        facts.domains,
        cpu_shared_set=policy.cpu_shared_set,
        cpu_dedicated_set=policy.cpu_dedicated_set,
        online_cpus=facts.online_cpus,
        reserved_huge_pages=policy.reserved_huge_pages,
        counted_states=policy.counted_states,
    )
    assert [len(cell.free_dedicated_cpus) for cell in cells] == [6, 8]
    usable = {
        (cell.id, page.size_kib): page.free for cell in cells for page in cell.pages if page.size_kib > 4
    }
    assert usable == {
        (0, PAGE_2M_KIB): 0,
        (0, PAGE_1G_KIB): 30,
        (1, PAGE_2M_KIB): 6144,
        (1, PAGE_1G_KIB): 14,
    }
    # the kernel's free pages: the reserved ones are free for it
    assert [[page.free for page in cell.pages[1:]] for cell in facts.numa_cells] == [[2048, 32], [6144, 16]]

    topology = instance_topology(8, 16384, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"})
    assert topology is not None
    numa_fit = fit(cells, topology, cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0)
    assert not numa_fit.fits
    assert numa_fit.reasons[0] == "cell 0: 6 free dedicated CPUs < 8 requested"
    assert numa_fit.reasons[1].startswith("cell 1: no large page size holds 16384 MiB")
    # whereas the whole host has the CPUs and the memory
    assert sum(len(cell.free_dedicated_cpus) for cell in cells) == 14
    sr_iov = [d for d in facts.pci_devices if d.dev_type == "type-VF"]
    assert {d.numa_node for d in sr_iov} == {0, 1} and len(sr_iov) == 16


def test_compute_09_holds_vgpus_of_one_type_per_gpu(tmp_path: Path) -> None:
    host = gpu_host()
    facts = audit(host, tmp_path)
    assert facts.problems == ()
    gpus = {d.address: d for d in facts.pci_devices if d.mdev_types}
    available = {address: {t.type_id: t.available for t in d.mdev_types} for address, d in gpus.items()}
    assert available == {
        "0000:3b:00.0": {"nvidia-230": 0, "nvidia-231": 0, "nvidia-232": 2},
        "0000:d8:00.0": {"nvidia-230": 14, "nvidia-231": 0, "nvidia-232": 0},
    }
    assert {(gpu.address, gpu.numa_node, gpu.product_id) for gpu in gpus.values()} == {
        ("0000:3b:00.0", 0, "1eb8"),
        ("0000:d8:00.0", 1, "1eb8"),
    }
    held = {uuid for d in facts.domains for uuid in d.layout.mdev_uuids}
    assert held == {m.uuid for m in facts.mediated_devices} and len(held) == 4
    assert {(m.type_id, m.parent_address) for m in facts.mediated_devices} == {
        ("nvidia-232", "0000:3b:00.0"),
        ("nvidia-230", "0000:d8:00.0"),
    }
    # as Nova's libvirt driver would report them with the demo's enabled types: a T4-4Q GPU of 4
    # and a T4-1Q GPU of 16, two held on each
    (policy,) = (h.policy for h in demo_config().hypervisors if h.name == "compute-09")
    inventories = vgpu_capacity(facts, policy.enabled_mdev_types, policy.counted_states)
    assert [(g.address, g.mdev_type, g.total, g.used) for g in inventories.gpus] == [
        ("0000:3b:00.0", "nvidia-232", 4, 2),
        ("0000:d8:00.0", "nvidia-230", 16, 2),
    ]
    assert inventories.unplaced == ()
    vfs = {a for d in facts.domains for a in d.layout.pci_addresses}
    assert vfs == {"0000:af:02.0", "0000:af:02.1"}
    for domain in facts.domains:
        assert domain.nova is not None and domain.nova.flavor.extra_specs["resources:VGPU"] == "1"


def test_compute_10_has_room_for_the_pinned_guests_of_compute_08_but_p1_8xlarge_fits_in_no_cell(
    tmp_path: Path,
) -> None:
    """Four cells of 6 dedicated CPUs (cores 3 to 5, both threads), 64 GiB each: 50 pages of 1 GiB
    in cells 0 and 1 (one of compute-08's 48 GiB databases each), 20 of 1 GiB and 4608 of 2 MiB
    in cell 2 (its NFV guests), none in cell 3, whose visualisation guest holds 2 dedicated CPUs,
    a VF and a T4-1Q vGPU. No cell has the 8 dedicated CPUs of p1.8xlarge."""
    facts = audit(spare_host(), tmp_path)
    assert facts.problems == ()
    assert facts.cpus == 48 and facts.memory_bytes == 256 * GIB
    (policy,) = (h.policy for h in demo_config().hypervisors if h.name == "compute-10")
    cells = host_cells(
        facts.numa_cells,
        facts.domains,
        cpu_shared_set=policy.cpu_shared_set,
        cpu_dedicated_set=policy.cpu_dedicated_set,
        online_cpus=facts.online_cpus,
        reserved_huge_pages=policy.reserved_huge_pages,
        counted_states=policy.counted_states,
    )
    assert [len(cell.free_dedicated_cpus) for cell in cells] == [6, 6, 6, 4]
    assert [len(cell.shared_cpus) for cell in cells] == [6, 6, 6, 6]
    usable = {
        (cell.id, page.size_kib): page.free
        for cell in cells
        for page in cell.pages
        if page.size_kib > 4 and page.free
    }
    assert usable == {
        (0, PAGE_1G_KIB): 50,
        (1, PAGE_1G_KIB): 50,
        (2, PAGE_2M_KIB): 4608,
        (2, PAGE_1G_KIB): 20,
    }

    topology = instance_topology(8, 16384, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"})
    assert topology is not None
    numa_fit = fit(cells, topology, cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0)
    assert not numa_fit.fits
    assert numa_fit.reasons[:3] == tuple(f"cell {cell}: 6 dedicated CPUs < 8 requested" for cell in range(3))

    vfs = [d.numa_node or 0 for d in facts.pci_devices if d.dev_type == "type-VF"]
    assert sorted(vfs) == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    inventories = vgpu_capacity(facts, policy.enabled_mdev_types, policy.counted_states)
    assert [(g.address, g.mdev_type, g.total, g.used) for g in inventories.gpus] == [
        ("0000:af:00.0", "nvidia-230", 16, 1)
    ]
