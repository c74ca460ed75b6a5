"""Reading NUMA topology and a domain's placement from libvirt's XML: the host's cells, thread
siblings and pages from real capabilities documents, and the placement elements of a definition."""

from __future__ import annotations

import libvirt
import pytest

from tests.support.libvirtd import Libvirtd
from virtcap.audit.capabilities import CapabilitiesError, numa_cells
from virtcap.audit.domain_xml import parse_domain_xml
from virtcap.model.facts import GuestCell, HugepageBacking, PageCount

GIB = 1024**3

TWO_SOCKETS_WITH_SMT = """
<capabilities><host><topology><cells num='2'>
  <cell id='1'>
    <memory unit='KiB'>8388608</memory>
    <pages unit='KiB' size='4'>1048576</pages>
    <pages unit='KiB' size='2048'>1024</pages>
    <cpus num='4'>
      <cpu id='2' socket_id='1' core_id='0' siblings='2,6'/>
      <cpu id='3' socket_id='1' core_id='1' siblings='3,7'/>
      <cpu id='6' socket_id='1' core_id='0' siblings='2,6'/>
      <cpu id='7' socket_id='1' core_id='1' siblings='3,7'/>
    </cpus>
  </cell>
  <cell id='0'>
    <memory unit='KiB'>8388608</memory>
    <pages unit='KiB' size='4'>1048576</pages>
    <pages unit='KiB' size='1048576'>4</pages>
    <cpus num='4'>
      <cpu id='0' socket_id='0' core_id='0' siblings='0,4'/>
      <cpu id='1' socket_id='0' core_id='1' siblings='1,5'/>
      <cpu id='4' socket_id='0' core_id='0' siblings='0,4'/>
      <cpu id='5' socket_id='0' core_id='1' siblings='1,5'/>
    </cpus>
  </cell>
</cells></topology></host></capabilities>
"""


def test_cells_siblings_and_pages_of_a_two_socket_host() -> None:
    cells = numa_cells(TWO_SOCKETS_WITH_SMT, free_pages={(1, 2048): 1000, (0, 1048576): 3})
    assert [cell.id for cell in cells] == [0, 1]
    first, second = cells
    assert first.cpus == {0, 1, 4, 5} and first.siblings == (frozenset({0, 4}), frozenset({1, 5}))
    assert first.memory_bytes == 8 * GIB
    assert first.pages == (PageCount(4, 1048576, None), PageCount(1048576, 4, 3))
    assert second.pages == (PageCount(4, 1048576, None), PageCount(2048, 1024, 1000))


def test_the_test_driver_reports_its_built_in_topology() -> None:
    conn = libvirt.openReadOnly("test:///default")
    try:
        cells = numa_cells(conn.getCapabilities())
    finally:
        conn.close()
    assert [len(cell.cpus) for cell in cells] == [8, 8]
    assert all(cell.siblings == () for cell in cells)  # one thread per core


def test_a_real_qemu_host_has_at_least_one_cell(libvirtd: Libvirtd) -> None:
    conn = libvirt.openReadOnly(libvirtd.uri)
    try:
        cells = numa_cells(conn.getCapabilities())
        online = {cpu for cpu, up in enumerate(conn.getCPUMap()[1]) if up}
    finally:
        conn.close()
    assert cells, "a Linux host has at least one NUMA cell"
    assert set().union(*(cell.cpus for cell in cells)) == online
    assert all(any(page.size_kib == 2048 for page in cell.pages) for cell in cells)


def test_no_topology_is_no_cells_and_garbage_is_an_error() -> None:
    assert numa_cells("<capabilities><host/></capabilities>") == ()
    with pytest.raises(CapabilitiesError, match="unreadable"):
        numa_cells("<capabilities")
    with pytest.raises(CapabilitiesError, match="cell id is not a whole number"):
        numa_cells(
            "<capabilities><host><topology><cells><cell id='x'/></cells></topology></host></capabilities>"
        )


PLACED = """
<domain type='kvm'>
  <name>pinned</name><uuid>00000000-0000-0000-0000-000000000001</uuid>
  <memory unit='GiB'>4</memory>
  <vcpu placement='static'>4</vcpu>
  <memoryBacking><hugepages>
    <page size='2' unit='M' nodeset='0'/>
    <page size='1048576' unit='KiB' nodeset='1'/>
  </hugepages></memoryBacking>
  <cputune>
    <vcpupin vcpu='0' cpuset='2'/><vcpupin vcpu='1' cpuset='6'/>
    <vcpupin vcpu='2' cpuset='3'/><vcpupin vcpu='3' cpuset='7'/>
    <emulatorpin cpuset='0-1'/>
  </cputune>
  <numatune>
    <memory mode='strict' nodeset='1'/>
    <memnode cellid='0' mode='strict' nodeset='1'/>
    <memnode cellid='1' mode='strict' nodeset='0'/>
  </numatune>
  <cpu><numa>
    <cell id='0' cpus='0-1' memory='2097152' unit='KiB'/>
    <cell id='1' cpus='2-3' memory='2' unit='GiB'/>
  </numa></cpu>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source><address uuid='C2177883-F1BB-47F0-914D-32A22E3A8804'/></source>
    </hostdev>
    <interface type='hostdev' managed='yes'>
      <mac address='fa:16:3e:11:22:33'/>
      <source><address type='pci' domain='0x0000' bus='0xd8' slot='0x02' function='0x3'/></source>
      <vlan><tag id='1042'/></vlan>
    </interface>
    <interface type='bridge'>
      <source bridge='br-int'/>
    </interface>
  </devices>
</domain>
"""


def test_a_definition_says_where_the_guest_sits() -> None:
    layout = parse_domain_xml(PLACED).layout
    assert layout.emulator_pins == frozenset({0, 1})
    assert layout.guest_cells == (
        GuestCell(0, frozenset({0, 1}), 2 * GIB),
        GuestCell(1, frozenset({2, 3}), 2 * GIB),
    )
    assert layout.memory_nodes == frozenset({1})
    assert layout.cell_memory_nodes == {0: {1}, 1: {0}}
    assert layout.hugepages == (
        HugepageBacking(2048, frozenset({0})),
        HugepageBacking(1048576, frozenset({1})),
    )
    # a passthrough device, and the VF of an SR-IOV port (Neutron's vnic_type direct)
    assert layout.pci_addresses == ("0000:3b:02.1", "0000:d8:02.3")
    assert layout.mdev_uuids == ("c2177883-f1bb-47f0-914d-32a22e3a8804",)


def test_a_plain_definition_has_no_placement_and_bare_hugepages_use_the_default_size() -> None:
    plain = PLACED.split("<memoryBacking>", maxsplit=1)[0] + "</domain>"
    assert parse_domain_xml(plain).layout.guest_cells == ()
    bare = plain.replace("</domain>", "<memoryBacking><hugepages/></memoryBacking></domain>")
    assert parse_domain_xml(bare).layout.hugepages == (HugepageBacking(None),)


def test_a_broken_placement_is_a_problem_and_the_domain_still_counts() -> None:
    broken = parse_domain_xml(PLACED.replace("cellid='1'", "cellid='one'"))
    assert broken.problems == (
        "domain pinned: <memnode cellid> is not a whole number: 'one'; "
        "its NUMA and device placement is unknown",
    )
    assert broken.layout.guest_cells == () and broken.memory_bytes == 4 * GIB
