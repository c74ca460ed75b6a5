"""Which host pages hold a domain's memory, guest cell by guest cell (issue 25): a guest cell no
`<page>` covers is on the small pages, whatever the other cells have.

Definitions are read by the audit's own parser; the expected sizes follow libvirt's rules (a page
naming the cell, else the page without a nodeset, else the small pages; a page of the small size
is no hugepage; a bare `<hugepages/>` is the default hugepage size). The last tests follow the
issue's reproduction as a user meets it: a captured host replayed, `virtcap audit`, the per-cell
hugepage series of /metrics, and a pending claim asking for the same split.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.factories import GIB, host
from tests.support.serving import parse_samples, value
from virtcap.audit.capture_format import (
    Answer,
    CaptureDocument,
    CellPages,
    Domain,
    Domains,
    DomainStats,
    PageCount,
    encode_capture,
)
from virtcap.audit.domain_xml import parse_domain_xml
from virtcap.config import parse_config
from virtcap.demo.hostgen import PAGE_2M_KIB, HostSpec, Hugepages, capture_document
from virtcap.exposition.families import render, views
from virtcap.fleet.store import SnapshotStore
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import DomainFacts, DomainState, NumaCell
from virtcap.model.facts import PageCount as NumaPageCount
from virtcap.model.memory_backing import cell_page_size, hugepage_backed_bytes
from virtcap.model.numa.cells import host_cells
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.service.oneshot import audit_fleet_once

MIB = 1024**2
SMALL = 4
PAGE_1G_KIB = 1024 * 1024
SIZES = (SMALL, PAGE_2M_KIB, PAGE_1G_KIB)
TWO_CELLS = (
    "<cpu><numa><cell id='0' cpus='0' memory='262144'/><cell id='1' cpus='1' memory='262144'/></numa></cpu>"
)


def facts(backing: str, cells: str = TWO_CELLS) -> DomainFacts:
    """A running 2-vCPU, 512 MiB domain with the `<memoryBacking>` and guest cells given."""
    definition = parse_domain_xml(
        "<domain type='kvm'><name>guest</name><memory unit='MiB'>512</memory><vcpu>2</vcpu>"
        f"{backing}{cells}<os><type>hvm</type></os></domain>"
    )
    assert definition.problems == ()
    return DomainFacts(
        name=definition.name,
        uuid="",
        state=DomainState.RUNNING,
        vcpus=definition.vcpus,
        memory_bytes=definition.memory_bytes,
        current_memory_bytes=None,
        hugepages=definition.hugepages,
        vcpu_pins=definition.vcpu_pins,
        disks=(),
        nova=None,
        layout=definition.layout,
    )


@pytest.mark.parametrize(
    ("backing", "sizes"),
    [
        # Nova's split guest: only the hugepage cell is named, the other is on small pages
        ("<memoryBacking><hugepages><page size='2048' nodeset='0'/></hugepages></memoryBacking>", (2048, 4)),
        # one page per cell, sizes of their own
        (
            "<memoryBacking><hugepages><page size='1' unit='G' nodeset='1'/>"
            "<page size='2048' unit='KiB' nodeset='0'/></hugepages></memoryBacking>",
            (2048, 1048576),
        ),
        # no nodeset: every cell
        ("<memoryBacking><hugepages><page size='2' unit='M'/></hugepages></memoryBacking>", (2048, 2048)),
        # the page naming the cell wins over the one without a nodeset, whatever their order
        (
            "<memoryBacking><hugepages><page size='2048'/>"
            "<page size='1048576' nodeset='1'/></hugepages></memoryBacking>",
            (2048, 1048576),
        ),
        # the default hugepage size, taken as the host's smallest
        ("<memoryBacking><hugepages/></memoryBacking>", (2048, 2048)),
        # a page of the small size is no hugepage
        ("<memoryBacking><hugepages><page size='4'/></hugepages></memoryBacking>", (4, 4)),
        # the source of the memory does not change its page size
        (
            "<memoryBacking><hugepages><page size='2048' nodeset='1'/></hugepages>"
            "<source type='memfd'/><access mode='shared'/></memoryBacking>",
            (4, 2048),
        ),
        ("<memoryBacking><source type='file'/><access mode='shared'/></memoryBacking>", (4, 4)),
        ("", (4, 4)),
    ],
)
def test_each_guest_cell_is_on_the_pages_libvirt_gives_it(backing: str, sizes: tuple[int, int]) -> None:
    domain = facts(backing)
    assert (cell_page_size(domain, 0, SIZES), cell_page_size(domain, 1, SIZES)) == sizes


def test_a_guest_without_cells_is_one_cell_and_its_page_may_name_it() -> None:
    named = facts(
        "<memoryBacking><hugepages><page size='1048576' nodeset='0'/></hugepages></memoryBacking>", ""
    )
    assert cell_page_size(named, 0, SIZES) == PAGE_1G_KIB
    assert hugepage_backed_bytes(named, SMALL) == 512 * MIB
    assert cell_page_size(facts("", ""), 0, SIZES) == SMALL


def test_a_bare_hugepages_on_a_host_without_hugepages_takes_no_pages() -> None:
    assert cell_page_size(facts("<memoryBacking><hugepages/></memoryBacking>"), 0, (SMALL,)) is None
    assert cell_page_size(facts(""), 0, ()) is None


def test_only_the_cells_on_hugepages_count_as_hugepage_memory() -> None:
    split = facts("<memoryBacking><hugepages><page size='2048' nodeset='0'/></hugepages></memoryBacking>")
    assert hugepage_backed_bytes(split, SMALL) == 256 * MIB
    assert hugepage_backed_bytes(facts("<memoryBacking><hugepages/></memoryBacking>"), SMALL) == 512 * MIB
    assert (
        hugepage_backed_bytes(
            facts("<memoryBacking><hugepages><page size='4'/></hugepages></memoryBacking>"), SMALL
        )
        == 0
    )
    assert hugepage_backed_bytes(facts(""), SMALL) == 0


def test_host_cells_charge_each_guest_cell_the_pages_of_its_own_page() -> None:
    """Guest cell 0 on host cell 1 under the page without a nodeset (2 MiB), guest cell 1 on host
    cell 0 under its own 1 GiB page, listed after: each host cell is charged its guest cell's."""
    domain = facts(
        "<memoryBacking><hugepages><page size='2048'/><page size='1048576' nodeset='1'/></hugepages>"
        "</memoryBacking><numatune><memnode cellid='0' nodeset='1'/><memnode cellid='1' nodeset='0'/>"
        "</numatune>",
        TWO_CELLS.replace("262144", "1048576"),
    )
    cells = host_cells(
        [
            NumaCell(cell, frozenset({2 * cell, 2 * cell + 1}), (), 8 * GIB, numa_pages)
            for cell, numa_pages in enumerate(
                [
                    (
                        NumaPageCount(SMALL, 1_000_000, None),
                        NumaPageCount(2048, 1024, None),
                        NumaPageCount(PAGE_1G_KIB, 4, None),
                    )
                ]
                * 2
            )
        ],
        [domain],
        cpu_shared_set=None,
        cpu_dedicated_set=None,
        online_cpus=None,
        reserved_huge_pages={},
        counted_states=frozenset({DomainState.RUNNING}),
    )
    assert [[pages.used for pages in cell.pages] for cell in cells] == [[0, 0, 1], [0, 512, 0]]


def test_the_hugepage_memory_of_a_split_guest_is_its_hugepage_cells_only() -> None:
    split = facts("<memoryBacking><hugepages><page size='2048' nodeset='0'/></hugepages></memoryBacking>")
    numa_pages = (NumaPageCount(SMALL, 1_000_000, None), NumaPageCount(2048, 1024, None))
    cells = tuple(NumaCell(cell, frozenset({cell}), (), 8 * GIB, numa_pages) for cell in (0, 1))
    capacity = host_capacity(replace(host(domains=(split,)), numa_cells=cells), HostPolicy())
    assert capacity.resources[Resource.MEMORY].used == 512 * MIB
    assert capacity.hugepage_memory_bytes == 256 * MIB


# --- the reproduction --------------------------------------------------------------------

# 2 cells of 4 CPUs (all dedicated) and 8 GiB, 128 and 64 pages of 2 MiB. The guest, a Nova
# instance of 2 vCPUs and 512 MiB (hw:cpu_policy dedicated, hw:numa_nodes 2, hw:mem_page_size
# any): Nova's fit put guest cell 0 on cell 0's 2 MiB pages (all 128) and guest cell 1 on cell
# 1's small pages, which cell 1's 64 pages of 2 MiB could not hold. Its definition is what Nova
# 34's libvirt driver wrote for that fit (the conformance suite's oracle writes the same).
HOST = HostSpec(
    name="split",
    sockets=2,
    cores=4,
    threads=1,
    memory_gib=8,
    hugepages=(Hugepages(PAGE_2M_KIB, (128, 64)),),
)
GUEST_UUID = "2f0e9c7a-5b7e-4d0c-9a51-6b1d7f1f0c25"
NOVA_GUEST = f"""<domain type='kvm' id='1'>
  <name>instance-00000001</name>
  <uuid>{GUEST_UUID}</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:package version="34.0.0"/>
      <nova:name>split</nova:name>
      <nova:flavor name="p2.any">
        <nova:memory>512</nova:memory><nova:disk>1</nova:disk><nova:swap>0</nova:swap>
        <nova:ephemeral>0</nova:ephemeral><nova:vcpus>2</nova:vcpus>
        <nova:extraSpecs>
          <nova:extraSpec name="hw:cpu_policy">dedicated</nova:extraSpec>
          <nova:extraSpec name="hw:numa_nodes">2</nova:extraSpec>
          <nova:extraSpec name="hw:mem_page_size">any</nova:extraSpec>
        </nova:extraSpecs>
      </nova:flavor>
      <nova:root type="volume" uuid="7c1c7a4e-9a0b-4f55-8a0e-3c1f3d2b9e11"/>
    </nova:instance>
  </metadata>
  <memory unit='KiB'>524288</memory>
  <currentMemory unit='KiB'>524288</currentMemory>
  <memoryBacking>
    <hugepages>
      <page size='2048' unit='KiB' nodeset='0'/>
    </hugepages>
  </memoryBacking>
  <vcpu placement='static'>2</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='0'/>
    <vcpupin vcpu='1' cpuset='6'/>
    <emulatorpin cpuset='0,6'/>
    <iothreadpin iothread='1' cpuset='0,6'/>
  </cputune>
  <numatune>
    <memory mode='strict' nodeset='0-1'/>
    <memnode cellid='0' mode='strict' nodeset='0'/>
    <memnode cellid='1' mode='strict' nodeset='1'/>
  </numatune>
  <os><type arch='x86_64' machine='pc-q35-8.2'>hvm</type></os>
  <cpu mode='host-model' check='partial'>
    <numa>
      <cell id='0' cpus='0' memory='262144' unit='KiB' memAccess='shared'/>
      <cell id='1' cpus='1' memory='262144' unit='KiB' memAccess='shared'/>
    </numa>
  </cpu>
  <devices/>
</domain>
"""
FLAVORS = """
flavors:
  - {name: p1.2mb, vcpu: 1, memory: 128MiB,
     extra_specs: {"hw:cpu_policy": dedicated, "hw:mem_page_size": 2MB}}
  - {name: p2.any, vcpu: 2, memory: 512MiB,
     extra_specs: {"hw:cpu_policy": dedicated, "hw:numa_nodes": "2", "hw:mem_page_size": any}}
"""


def with_the_guest(document: CaptureDocument) -> CaptureDocument:
    """The host's capture with the guest running: its definition, and cell 0's 2 MiB pages all
    held, as the kernel reports them."""
    free = {(0, PAGE_2M_KIB): 0, (1, PAGE_2M_KIB): 64}
    free_pages = document.node.free_pages
    assert free_pages is not None
    cells = [
        CellPages(
            cell=cell.cell,
            pages=Answer[list[PageCount]](
                value=[
                    PageCount(size_kib=page.size_kib, free=free.get((cell.cell, page.size_kib), page.free))
                    for page in cell.pages.get()
                ]
            ),
        )
        for cell in free_pages.cells
    ]
    guest = Domain(
        uuid=GUEST_UUID,
        name="instance-00000001",
        info=Answer[tuple[int, int, int, int, int]](value=(1, 524288, 524288, 2, 0)),
        xml=Answer[str](value=NOVA_GUEST),
        block_info={},
    )
    domains = Domains(
        listed=Answer[list[str]](value=[GUEST_UUID]),
        state_stats=Answer[list[DomainStats]](
            value=[DomainStats(uuid=GUEST_UUID, stats={"state.state": 1, "state.reason": 1})]
        ),
        definitions=[guest],
    )
    node = document.node.model_copy(update={"free_pages": free_pages.model_copy(update={"cells": cells})})
    return document.model_copy(update={"node": node, "domains": domains})


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    capture = tmp_path / "split.json"
    capture.write_bytes(encode_capture(with_the_guest(capture_document(HOST))))
    config = tmp_path / "virtcap.yaml"
    config.write_text(
        f'hypervisors:\n  - {{name: split, uri: "replay://{capture}", cpu_dedicated_set: "0-7"}}\n{FLAVORS}'
    )
    return config


def test_virtcap_audit_fits_the_flavor_once_on_the_small_page_cells_host(config_file: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(config_file), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (split,) = json.loads(result.stdout)["hypervisors"]
    assert split["problems"] == []
    # cell 0 has no 2 MiB page left, cell 1 all 64: 128 MiB on 2 MiB pages fits once, on cell 1
    assert split["schedulable"]["p1.2mb"] == 1
    pages_2m = [next(p for p in cell["pages"] if p["size_bytes"] == 2 * MIB) for cell in split["numa_cells"]]
    assert [(p["used"], p["free"]) for p in pages_2m] == [(128, 0), (0, 64)]
    # cell 1's 256 MiB are on its small pages
    small = [
        next(p for p in cell["pages"] if p["size_bytes"] == SMALL * 1024) for cell in split["numa_cells"]
    ]
    assert [p["used"] for p in small] == [0, 256 * MIB // (SMALL * 1024)]
    assert split["hugepage_memory_bytes"] == 256 * MIB


def test_the_per_cell_hugepage_series_show_cell_1_free(config_file: Path) -> None:
    async def audited() -> SnapshotStore:
        config = parse_config(config_file.read_text(), str(config_file))
        store = SnapshotStore()
        store.track(["split"])
        for snapshot in await audit_fleet_once(config, cpu_window=0.0):
            store.record(snapshot, "success")
        return store

    samples = parse_samples(render(views(asyncio.run(audited()), time.time(), 60.0), {}).decode())
    size = str(2 * MIB)
    for cell, used, free in (("0", 128, 0), ("1", 0, 64)):
        labels = {"hypervisor": "split", "cell": cell, "page_size_bytes": size}
        assert value(samples, "hypervisor_numa_cell_hugepages_used", **labels) == used
        assert value(samples, "hypervisor_numa_cell_hugepages_free", **labels) == free
        assert value(samples, "hypervisor_numa_cell_hugepages_kernel_free", **labels) == free
    assert value(samples, "hypervisor_schedulable_instances", hypervisor="split", flavor="p1.2mb") == 1


def test_a_pending_claim_split_the_same_way_takes_the_same_pages(tmp_path: Path) -> None:
    """The guest not yet there, claimed instead (its flavor's extra specs): the claim's fit
    splits it as Nova's does, and takes cell 0's pages and cell 1's small pages."""
    capture = tmp_path / "empty.json"
    capture.write_bytes(encode_capture(capture_document(HOST)))
    config = parse_config(
        f'hypervisors:\n  - {{name: split, uri: "replay://{capture}", cpu_dedicated_set: "0-7"}}\n{FLAVORS}',
        "test.yaml",
    )
    (snapshot,) = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    assert snapshot.facts is not None
    (hypervisor,) = config.hypervisors
    demands = config.flavor_demands
    capacity = host_capacity(snapshot.facts, hypervisor.policy, demands, pending=[demands["p2.any"]])
    pages_2m = [cell.page(PAGE_2M_KIB) for cell in capacity.within.cells]
    assert [(p.used, p.free) for p in pages_2m if p is not None] == [(128, 0), (0, 64)]
    assert capacity.schedulable["p1.2mb"] == 1
