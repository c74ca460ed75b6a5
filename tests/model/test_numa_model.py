"""model/numa.py on hand-made hosts and flavors: the cases the conformance suite compares with Nova
by the hundred, here one at a time with the answer written out, and what only virtcap does (a
domain's definition read as NUMA usage, the reasons a flavor does not fit)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.support.factories import domain
from virtcap.model.facts import (
    DomainLayout,
    DomainState,
    GuestCell,
    HugepageBacking,
    NovaFlavor,
    NovaInstance,
    NumaCell,
    PageCount,
)
from virtcap.model.numa.cells import CellPages, HostCell, host_cells
from virtcap.model.numa.fitting import NumaFit, fit
from virtcap.model.numa.request import PAGE_ANY, PAGE_LARGE, InstanceCell, NumaSpecError, instance_topology
from virtcap.model.numa.usage import consume, count_in_a_row, how_many_fit
from virtcap.model.pci import PciAlias, PciPool, PciRequestError, apply_requests, support_requests

GIB = 1024**3
MIB = 1024**2
ALL_STATES = frozenset(DomainState)


def cell(
    cell_id: int = 0,
    dedicated: range | frozenset[int] = frozenset(),
    shared: range | frozenset[int] = frozenset(),
    siblings: tuple[frozenset[int], ...] | None = None,
    memory_mib: int = 8192,
    huge_1g: int = 0,
) -> HostCell:
    cpus = frozenset(dedicated) | frozenset(shared)
    return HostCell(
        id=cell_id,
        shared_cpus=frozenset(shared),
        dedicated_cpus=frozenset(dedicated),
        siblings=siblings if siblings is not None else tuple(frozenset({cpu}) for cpu in sorted(cpus)),
        memory_mib=memory_mib,
        pages=(CellPages(4, (memory_mib - huge_1g * 1024) * 256), CellPages(1048576, huge_1g)),
    )


def fits(
    cells: tuple[HostCell, ...], extra_specs: dict[str, str], vcpus: int = 2, memory_mib: int = 1024
) -> NumaFit:
    topology = instance_topology(vcpus, memory_mib, extra_specs)
    assert topology is not None
    return fit(cells, topology, cpu_allocation_ratio=4.0, ram_allocation_ratio=1.0)


# --- instance_topology ---------------------------------------------------------------------------


def test_only_pinning_pages_or_cells_give_a_topology() -> None:
    assert instance_topology(2, 1024, {}) is None
    assert instance_topology(2, 1024, {"hw:cpu_policy": "shared"}) is None
    dedicated = instance_topology(2, 1024, {"hw:cpu_policy": "dedicated"})
    assert dedicated is not None
    assert dedicated.cells == (InstanceCell(0, frozenset(), frozenset({0, 1}), 1024),)


def test_cells_split_evenly_or_as_the_flavor_says() -> None:
    even = instance_topology(4, 2048, {"hw:numa_nodes": "2"})
    assert even is not None
    assert [(set(c.shared_vcpus), c.memory_mib) for c in even.cells] == [({0, 1}, 1024), ({2, 3}, 1024)]
    manual = instance_topology(
        4,
        2048,
        {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1-3", "hw:numa_mem.0": "512",
         "hw:numa_mem.1": "1536"},
    )  # fmt: skip
    assert manual is not None
    assert [(set(c.vcpus), c.memory_mib) for c in manual.cells] == [({0}, 512), ({1, 2, 3}, 1536)]


def test_mixed_policy_splits_vcpus_by_the_dedicated_mask() -> None:
    mixed = instance_topology(4, 1024, {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"})
    assert mixed is not None
    assert mixed.cells[0].shared_vcpus == {0} and mixed.cells[0].dedicated_vcpus == {1, 2, 3}


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2048", 2048),
        ("2MB", 2048),
        ("1GB", 1048576),
        ("1GiB", 1048576),
        ("large", PAGE_LARGE),
        ("any", PAGE_ANY),
    ],
)
def test_page_sizes_read_as_nova_reads_them(text: str, size: int) -> None:
    topology = instance_topology(1, 1024, {"hw:mem_page_size": text})
    assert topology is not None and topology.page_size == size


def test_a_size_below_one_kib_asks_for_a_topology_without_a_page_size() -> None:
    topology = instance_topology(1, 1024, {"hw:mem_page_size": "100B"})
    assert topology is not None and not topology.page_size


@pytest.mark.parametrize(
    ("extra_specs", "image"),
    [
        ({"hw:numa_nodes": "3"}, {}),  # 2 vCPUs do not split in 3
        ({"hw:numa_nodes": "0"}, {}),
        ({"hw:cpu_thread_policy": "isolate"}, {}),  # a thread policy needs pinning
        ({"hw:emulator_threads_policy": "isolate"}, {}),
        ({"hw:cpu_policy": "mixed"}, {}),  # and no mask
        ({"hw:cpu_policy": "dedicated", "hw:cpu_dedicated_mask": "0"}, {}),
        ({"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated"}),
        ({"hw:mem_page_size": "huge"}, {}),
        ({}, {"hw_mem_page_size": "large"}),  # the image alone may not ask
        ({"hw:mem_page_size": "small"}, {"hw_mem_page_size": "large"}),
        ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_mem.0": "512"}, {}),
        ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "1024"}, {}),
        ({"hw:cpu_policy": "dedicated", "resources:PCPU": "3"}, {}),
    ],
)
def test_requests_nova_refuses(extra_specs: dict[str, str], image: dict[str, str]) -> None:
    with pytest.raises(NumaSpecError) as refused:
        instance_topology(2, 1024, extra_specs, image)
    assert "\n" not in str(refused.value)


def test_the_image_may_name_the_page_size_the_flavor_leaves_open() -> None:
    topology = instance_topology(1, 1024, {"hw:mem_page_size": "large"}, {"hw_mem_page_size": "1GB"})
    assert topology is not None and topology.page_size == 1048576


# --- fit -----------------------------------------------------------------------------------------


def test_pinned_vcpus_take_the_emptier_cell_and_whole_cores() -> None:
    siblings = (frozenset({0, 4}), frozenset({1, 5}), frozenset({2, 6}), frozenset({3, 7}))
    busy = replace(
        cell(0, dedicated=frozenset(range(8)), siblings=siblings), pinned_cpus=frozenset({0, 1, 2})
    )
    idle = cell(
        1, dedicated=frozenset(range(8, 16)), siblings=tuple(frozenset({c, c + 4}) for c in (8, 9, 10, 11))
    )
    numa_fit = fits((busy, idle), {"hw:cpu_policy": "dedicated"}, vcpus=2)
    assert numa_fit.fits and numa_fit.host_cells == (1,)
    assert numa_fit.pinning == {0: 8, 1: 12}


def test_isolate_refuses_smt_hosts_with_separate_cpu_sets() -> None:
    smt = cell(
        0,
        dedicated=frozenset({0, 2}),
        shared=frozenset({1, 3}),
        siblings=(frozenset({0, 1}), frozenset({2, 3})),
    )
    numa_fit = fits((smt,), {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"}, vcpus=1)
    assert not numa_fit.fits
    assert numa_fit.reasons == ("cell 0: no isolate thread placement for 1 pinned vCPUs",)


def test_require_needs_siblings() -> None:
    numa_fit = fits(
        (cell(0, dedicated=range(4)),), {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}
    )
    assert numa_fit.reasons == ("cell 0: no require thread placement for 2 pinned vCPUs",)


def test_isolated_emulator_threads_take_one_more_cpu() -> None:
    two = cell(0, dedicated=range(2))
    assert not fits((two,), {"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}).fits
    three = cell(0, dedicated=range(3))
    numa_fit = fits((three,), {"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"})
    assert numa_fit.placed[0].reserved_cpus == {2}


def test_hugepage_reasons_name_the_cell_and_the_pages() -> None:
    cells = (cell(0, shared=range(4), huge_1g=4), cell(1, shared=range(4, 8), huge_1g=8))
    loaded = (cells[0], replace(cells[1], pages=(cells[1].pages[0], CellPages(1048576, 8, reserved=2))))
    numa_fit = fits(loaded, {"hw:mem_page_size": "1GB"}, memory_mib=8192)
    assert numa_fit.reasons == (
        "cell 0: 4 free 1048576 KiB pages < 8 needed",
        "cell 1: 6 free 1048576 KiB pages < 8 needed",
    )
    assert fits(cells, {"hw:mem_page_size": "1GB"}, memory_mib=8192).host_cells == (1,)


def test_shared_vcpus_are_held_to_the_ratio() -> None:
    full = replace(cell(0, shared=range(2)), shared_cpu_usage=7)
    numa_fit = fits((full,), {"hw:numa_nodes": "1"})
    assert numa_fit.reasons == ("cell 0: 9 shared vCPUs > 2 CPUs x 4",)


def test_pci_affinity_chooses_the_cell_holding_the_device() -> None:
    cells = (cell(0, dedicated=range(4)), cell(1, dedicated=range(4, 8)))
    pool = PciPool("10de", "1eb8", 1, "type-PCI", "0000:3b:00.0", (), ("0000:3b:00.0",), ("0000:3b:00.0",))
    aliases = {"gpu": PciAlias("gpu", "10de", "1eb8", numa_policy="required")}
    topology = instance_topology(2, 1024, {"hw:cpu_policy": "dedicated"})
    assert topology is not None
    numa_fit = fit(
        cells,
        topology,
        cpu_allocation_ratio=1.0,
        ram_allocation_ratio=1.0,
        pci_pools=(pool,),
        pci_aliases=aliases,
        pci_request="gpu:1",
    )
    assert numa_fit.host_cells == (1,)
    busy = (cells[0], replace(cells[1], pinned_cpus=frozenset(range(4, 8))))
    refused = fit(
        busy,
        topology,
        cpu_allocation_ratio=1.0,
        ram_allocation_ratio=1.0,
        pci_pools=(pool,),
        pci_aliases=aliases,
        pci_request="gpu:1",
    )
    assert refused.reasons == (
        "cell 0: the PCI devices requested do not fit its placement",
        "cell 1: 0 free dedicated CPUs < 2 requested",
    )


# --- consume and how_many_fit --------------------------------------------------------------------


def test_consume_pins_cpus_and_uses_pages() -> None:
    host = (cell(0, dedicated=range(4), huge_1g=4),)
    topology = instance_topology(2, 2048, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "1GB"})
    assert topology is not None
    numa_fit = fit(host, topology, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0)
    (after,) = consume(host, topology, numa_fit)
    assert after.pinned_cpus == {0, 1} and after.pages[1].used == 2 and after.memory_usage_mib == 2048


def test_isolate_pins_the_whole_core() -> None:
    siblings = (frozenset({0, 2}), frozenset({1, 3}))
    host = (cell(0, dedicated=range(4), shared=range(4), siblings=siblings),)
    topology = instance_topology(1, 1024, {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"})
    assert topology is not None
    (after,) = consume(
        host, topology, fit(host, topology, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0)
    )
    assert after.pinned_cpus == {0, 2}
    assert how_many_fit(host, topology, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0, limit=10) == 2


def test_how_many_fit_stops_at_the_limit_and_at_the_last_fit() -> None:
    host = (cell(0, dedicated=range(4)), cell(1, dedicated=range(4, 8)))
    topology = instance_topology(2, 1024, {"hw:cpu_policy": "dedicated"})
    assert topology is not None
    assert how_many_fit(host, topology, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0, limit=100) == 4
    assert how_many_fit(host, topology, cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0, limit=3) == 3


# --- host_cells ----------------------------------------------------------------------------------


def numa_cells() -> list[NumaCell]:
    pages = (PageCount(4, 1024 * 256, None), PageCount(2048, 512, 512), PageCount(1048576, 2, 2))
    return [
        NumaCell(0, frozenset({0, 1, 4, 5}), (frozenset({0, 4}), frozenset({1, 5})), 4 * GIB, pages),
        NumaCell(1, frozenset({2, 3, 6, 7}), (frozenset({2, 6}), frozenset({3, 7})), 4 * GIB, pages),
    ]


def build(domains: tuple[object, ...] = (), **options: object) -> tuple[HostCell, ...]:
    settings: dict[str, object] = {
        "cpu_shared_set": None,
        "cpu_dedicated_set": frozenset(range(8)),
        "online_cpus": frozenset(range(8)),
        "reserved_huge_pages": {},
        "counted_states": ALL_STATES,
    }
    settings.update(options)
    return host_cells(numa_cells(), domains, **settings)  # type: ignore[arg-type]


def test_cpu_sets_split_each_cell_as_nova_does() -> None:
    legacy = build(cpu_dedicated_set=None)
    assert legacy[0].shared_cpus == legacy[0].dedicated_cpus == {0, 1, 4, 5}
    split = build(cpu_shared_set=frozenset({0, 4}), cpu_dedicated_set=frozenset({1, 5, 2, 3, 6, 7}))
    assert split[0].shared_cpus == {0, 4} and split[0].dedicated_cpus == {1, 5}
    shared_only = build(cpu_shared_set=frozenset(range(8)), cpu_dedicated_set=None)
    assert shared_only[1].dedicated_cpus == frozenset() and shared_only[1].shared_cpus == {2, 3, 6, 7}
    offline = build(cpu_dedicated_set=None, online_cpus=frozenset(range(7)))
    assert offline[1].shared_cpus == {2, 3, 6}
    # The offline CPU leaves its core; the cores keep Nova's order (a set's, not the CPUs').
    assert set(offline[1].siblings) == {frozenset({2, 6}), frozenset({3})}


def test_reserved_huge_pages_are_kept_per_cell_and_size() -> None:
    cells = build(reserved_huge_pages={(1, 2048): 64})
    assert cells[0].pages[1] == CellPages(2048, 512, 0, 0) and cells[1].pages[1] == CellPages(
        2048, 512, 64, 0
    )
    assert cells[0].memory_mib == 4096


def test_a_pinned_hugepage_domain_without_guest_cells_counts_on_its_cell() -> None:
    guest = replace(
        domain("pinned", vcpus=2, memory=2 * GIB, hugepages=True, pins=(frozenset({2}), frozenset({3}))),
        layout=DomainLayout(hugepages=(HugepageBacking(1048576),)),
    )
    cells = build((guest,))
    assert cells[0].pinned_cpus == frozenset() and cells[1].pinned_cpus == {2, 3}
    assert cells[1].memory_usage_mib == 2048 and cells[1].pages[2].used == 2


def test_guest_cells_land_on_their_memnodes() -> None:
    guest = replace(
        domain(
            "spread",
            vcpus=4,
            memory=2 * GIB,
            pins=(frozenset({0}), frozenset({1}), frozenset({2}), frozenset({3})),
        ),
        layout=DomainLayout(
            guest_cells=(GuestCell(0, frozenset({0, 1}), GIB), GuestCell(1, frozenset({2, 3}), GIB)),
            cell_memory_nodes={0: frozenset({0}), 1: frozenset({1})},
        ),
    )
    cells = build((guest,))
    assert [(set(c.pinned_cpus), c.memory_usage_mib) for c in cells] == [({0, 1}, 1024), ({2, 3}, 1024)]
    assert cells[0].pages[0].used == 1024 * 256  # memory without hugepages uses the small pages


def test_nova_guests_without_a_topology_and_uncounted_states_use_no_cell() -> None:
    flavor = NovaFlavor("m1", 2, 2048, 10, 0, 0)
    floating = domain("floating", vcpus=2, memory=2 * GIB, nova=NovaInstance(flavor))
    stopped = replace(
        domain("stopped", state=DomainState.SHUTOFF, vcpus=1, pins=(frozenset({0}),)),
        layout=DomainLayout(memory_nodes=frozenset({0})),
    )
    cells = build((floating, stopped), counted_states=ALL_STATES - {DomainState.SHUTOFF})
    assert all(c.memory_usage_mib == 0 and not c.pinned_cpus and not c.shared_cpu_usage for c in cells)
    counted = build((stopped,))
    assert counted[0].pinned_cpus == {0} and counted[0].memory_usage_mib == 1024


# --- PCI NUMA affinity ---------------------------------------------------------------------------


def pools() -> tuple[PciPool, ...]:
    def pool(address: str, numa: int | None) -> PciPool:
        return PciPool("8086", "154c", numa, "type-PCI", address, (), (address,), (address,))

    return (pool("0000:3b:00.0", 0), pool("0000:3b:00.1", None), pool("0000:5e:00.0", 1))


@pytest.mark.parametrize(
    ("policy", "count", "cells", "supported"),
    [
        ("required", 1, frozenset({0}), True),
        ("required", 2, frozenset({0}), False),
        ("legacy", 2, frozenset({0}), True),  # the device of no cell may serve
        ("legacy", 3, frozenset({0}), False),
        ("preferred", 3, frozenset({0}), True),  # any device, the cell's first
        ("required", 3, None, True),  # without cells, no affinity
    ],
)
def test_numa_policy_narrows_the_pools(
    policy: str, count: int, cells: frozenset[int] | None, supported: bool
) -> None:
    aliases = {"nic": PciAlias("nic", "8086", "154c", numa_policy=policy)}
    assert support_requests(pools(), aliases, f"nic:{count}", cells=cells) is supported


def test_socket_policy_is_refused_where_it_needs_the_sockets() -> None:
    aliases = {"nic": PciAlias("nic", "8086", "154c", numa_policy="socket")}
    assert support_requests(pools(), aliases, "nic:1", cells=frozenset({0}))
    with pytest.raises(PciRequestError):
        support_requests(pools(), aliases, "nic:2", cells=frozenset({0}))


def test_apply_requests_takes_the_devices_near_the_cells_first() -> None:
    aliases = {"nic": PciAlias("nic", "8086", "154c", numa_policy="legacy")}
    after = apply_requests(pools(), aliases, "nic:2", cells=frozenset({1}))
    assert after is not None and [pool.free for pool in after] == [1, 0, 0]
    assert apply_requests(after, aliases, "nic:2", cells=frozenset({1})) is None
    emptied = apply_requests(after, aliases, "nic:1")
    assert emptied is not None and all(not pool.free and pool.count == 1 for pool in emptied)


def test_one_cell_counts_add_up_per_cell_as_fitting_in_a_row_does() -> None:
    """The shortcut for unpinned one-cell topologies against fitting and consuming one by one."""
    rng = random.Random(7)
    compared = 0
    for _ in range(300):
        cells = tuple(
            replace(
                cell(
                    cell_id,
                    shared=range(cell_id * 8, cell_id * 8 + rng.randint(0, 8)),
                    memory_mib=rng.choice((2048, 4096, 8192)),
                    huge_1g=rng.choice((0, 1, 2)),
                ),
                shared_cpu_usage=rng.randint(0, 6),
                memory_usage_mib=rng.randint(0, 3000),
            )
            for cell_id in range(rng.choice((1, 2, 4)))
        )
        specs = rng.choice(
            ({"hw:numa_nodes": "1"}, {"hw:mem_page_size": "large"}, {"hw:mem_page_size": "any"},
             {"hw:mem_page_size": "small"}, {"hw:mem_page_size": "1GB"}, {"hw:mem_page_size": "2048"})
        )  # fmt: skip
        topology = instance_topology(rng.choice((1, 2)), rng.choice((256, 1024, 2048)), specs)
        assert topology is not None
        cpu, ram = rng.choice((1.0, 1.5, 16.0)), rng.choice((1.0, 1.5))
        limit = rng.choice((1, 5, 1000))
        fast = how_many_fit(cells, topology, cpu_allocation_ratio=cpu, ram_allocation_ratio=ram, limit=limit)
        slow = count_in_a_row(
            cells, topology, cpu_allocation_ratio=cpu, ram_allocation_ratio=ram, limit=limit
        )
        assert fast == slow, (cells, topology, cpu, ram, limit)
        compared += fast > 1
    assert compared > 50
