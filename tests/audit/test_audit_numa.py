"""The host's NUMA cells (CPUs, thread siblings, memory, pages and free hugepages) and PCI devices in
every audit: a captured two-cell host replayed, the private libvirtd, the test driver; the topology
and devices read once per connection by `serve`, the free pages at every audit."""

# ruff: noqa: N802 - the counting replay's methods bear libvirt's own names

from __future__ import annotations

import asyncio
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

import virtcap.audit.connection
from tests.support.hugepages import hugepage_pools_held, more_hugepages
from tests.support.libvirtd import Libvirtd
from virtcap.audit.capture import capture_host, encode_bounded
from virtcap.audit.capture_format import (
    Answer,
    CaptureDocument,
    CellPages,
    Domain,
    Domains,
    DomainStats,
    Failure,
    FreePages,
    NodeDevice,
    PageCount,
    encode_capture,
    load_capture,
)
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.libvirt_api import VirConnect, VirNodeDevice
from virtcap.audit.replay import ReplayConnection
from virtcap.config import AuditSettings, DiskSource, Hypervisor, parse_config
from virtcap.demo import demo_config
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import (
    CpuIdentity,
    GuestCell,
    HostFacts,
    HugepageBacking,
    MdevType,
    NumaCell,
    PciDevice,
)
from virtcap.model.facts import PageCount as CellPageCount
from virtcap.model.policy import HostPolicy
from virtcap.service.auditor import AuditSlots, HypervisorAuditor
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.supervise import Supervisor

GIB = 1024**3
HUGEPAGES_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
NODES = Path("/sys/devices/system/node")
PCI_DEVICES = Path("/sys/bus/pci/devices")

# A two-socket host, two threads per core: cell 0 holds CPUs 0, 1, 4, 5, cell 1 CPUs 2, 3, 6, 7.
# Cell 0 has 1024 pages of 2 MiB and 4 of 1 GiB, cell 1 512 and 8; the rest in 4 KiB pages.
TWO_CELLS = """<topology>
      <cells num='2'>
        <cell id='0'>
          <memory unit='KiB'>16777216</memory>
          <pages unit='KiB' size='4'>2621440</pages>
          <pages unit='KiB' size='2048'>1024</pages>
          <pages unit='KiB' size='1048576'>4</pages>
          <distances>
            <sibling id='0' value='10'/>
            <sibling id='1' value='21'/>
          </distances>
          <cpus num='4'>
            <cpu id='0' socket_id='0' die_id='0' core_id='0' siblings='0,4'/>
            <cpu id='1' socket_id='0' die_id='0' core_id='1' siblings='1,5'/>
            <cpu id='4' socket_id='0' die_id='0' core_id='0' siblings='0,4'/>
            <cpu id='5' socket_id='0' die_id='0' core_id='1' siblings='1,5'/>
          </cpus>
        </cell>
        <cell id='1'>
          <memory unit='KiB'>16777216</memory>
          <pages unit='KiB' size='4'>1835008</pages>
          <pages unit='KiB' size='2048'>512</pages>
          <pages unit='KiB' size='1048576'>8</pages>
          <distances>
            <sibling id='0' value='21'/>
            <sibling id='1' value='10'/>
          </distances>
          <cpus num='4'>
            <cpu id='2' socket_id='1' die_id='0' core_id='0' siblings='2,6'/>
            <cpu id='3' socket_id='1' die_id='0' core_id='1' siblings='3,7'/>
            <cpu id='6' socket_id='1' die_id='0' core_id='0' siblings='2,6'/>
            <cpu id='7' socket_id='1' die_id='0' core_id='1' siblings='3,7'/>
          </cpus>
        </cell>
      </cells>
    </topology>"""
FREE = {0: {4: 2_000_000, 2048: 1000, 1048576: 3}, 1: {4: 1_500_000, 2048: 0, 1048576: 8}}

# The devices, as a test-driver node file: libvirt parses them and formats them as it would a
# real host's. An X710 physical function with two virtual functions (on different cells, as
# libvirt reports them), an A30 GPU offering one vGPU type, and a device that is not PCI.
DEVICES_NODE = """<node>
  <cpu><mhz>2600</mhz><model>x</model><active>8</active><nodes>2</nodes><sockets>1</sockets>
    <cores>2</cores><threads>2</threads></cpu>
  <memory>33554432</memory>
  <device>
    <name>pci_0000_3b_00_0</name><parent>computer</parent>
    <capability type='pci'>
      <class>0x020000</class><domain>0</domain><bus>59</bus><slot>0</slot><function>0</function>
      <product id='0x1572'>Ethernet Controller X710 for 10GbE SFP+</product>
      <vendor id='0x8086'>Intel Corporation</vendor>
      <capability type='virt_functions' maxCount='64'>
        <address domain='0x0000' bus='0x3b' slot='0x02' function='0x0'/>
        <address domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/>
      </capability>
      <numa node='0'/>
    </capability>
  </device>
  <device>
    <name>pci_0000_3b_02_0</name><parent>pci_0000_3b_00_0</parent>
    <capability type='pci'>
      <class>0x020000</class><domain>0</domain><bus>59</bus><slot>2</slot><function>0</function>
      <product id='0x154c'>Ethernet Virtual Function 700 Series</product>
      <vendor id='0x8086'>Intel Corporation</vendor>
      <capability type='phys_function'>
        <address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>
      </capability>
      <numa node='0'/>
    </capability>
  </device>
  <device>
    <name>pci_0000_3b_02_1</name><parent>pci_0000_3b_00_0</parent>
    <capability type='pci'>
      <class>0x020000</class><domain>0</domain><bus>59</bus><slot>2</slot><function>1</function>
      <product id='0x154c'>Ethernet Virtual Function 700 Series</product>
      <vendor id='0x8086'>Intel Corporation</vendor>
      <capability type='phys_function'>
        <address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>
      </capability>
      <numa node='1'/>
    </capability>
  </device>
  <device>
    <name>pci_0000_af_00_0</name><parent>computer</parent>
    <capability type='pci'>
      <class>0x030200</class><domain>0</domain><bus>175</bus><slot>0</slot><function>0</function>
      <product id='0x20b7'>GA100GL [A30 PCIe]</product>
      <vendor id='0x10de'>NVIDIA Corporation</vendor>
      <capability type='mdev_types'>
        <type id='nvidia-689'>
          <name>GRID A30-4C</name><deviceAPI>vfio-pci</deviceAPI><availableInstances>6</availableInstances>
        </type>
      </capability>
      <numa node='1'/>
    </capability>
  </device>
  <device>
    <name>net_ens1f0_3c_fd_fe_00_00_01</name><parent>pci_0000_3b_00_0</parent>
    <capability type='net'><interface>ens1f0</interface><address>3c:fd:fe:00:00:01</address></capability>
  </device>
</node>
"""
DEVICES = (
    PciDevice("0000:3b:00.0", "8086", "1572", 0, "type-PF", None, "0x020000"),
    PciDevice("0000:3b:02.0", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000"),
    PciDevice("0000:3b:02.1", "8086", "154c", 1, "type-VF", "0000:3b:00.0", "0x020000"),
    PciDevice(
        "0000:af:00.0",
        "10de",
        "20b7",
        1,
        "type-PCI",
        None,
        "0x030200",
        (MdevType("nvidia-689", "GRID A30-4C", "vfio-pci", 6),),
    ),
)
CELLS = (
    NumaCell(
        id=0,
        cpus=frozenset({0, 1, 4, 5}),
        siblings=(frozenset({0, 4}), frozenset({1, 5})),
        memory_bytes=16 * GIB,
        # the free 4 KiB pages are the cell's MemFree, which the page cache lowers: not read
        pages=(
            CellPageCount(4, 2621440, None),
            CellPageCount(2048, 1024, 1000),
            CellPageCount(1048576, 4, 3),
        ),
    ),
    NumaCell(
        id=1,
        cpus=frozenset({2, 3, 6, 7}),
        siblings=(frozenset({2, 6}), frozenset({3, 7})),
        memory_bytes=16 * GIB,
        pages=(CellPageCount(4, 1835008, None), CellPageCount(2048, 512, 0), CellPageCount(1048576, 8, 8)),
    ),
)

# A guest on cell 1, in 1 GiB pages, with the second VF passed through.
GUEST_UUID = "6a1f1c1e-3b5d-4d4e-9a52-2f4c1d0e7b11"
GUEST = f"""<domain type='kvm' id='1'>
  <name>numa-guest</name>
  <uuid>{GUEST_UUID}</uuid>
  <memory unit='KiB'>4194304</memory>
  <currentMemory unit='KiB'>4194304</currentMemory>
  <memoryBacking><hugepages><page size='1048576' unit='KiB' nodeset='0'/></hugepages></memoryBacking>
  <vcpu placement='static'>2</vcpu>
  <cputune>
    <vcpupin vcpu='0' cpuset='2'/><vcpupin vcpu='1' cpuset='6'/><emulatorpin cpuset='3'/>
  </cputune>
  <numatune><memory mode='strict' nodeset='1'/><memnode cellid='0' mode='strict' nodeset='1'/></numatune>
  <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type></os>
  <cpu mode='host-passthrough'><numa><cell id='0' cpus='0-1' memory='4194304' unit='KiB'/></numa></cpu>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/></source>
    </hostdev>
  </devices>
</domain>"""


def replay_uri(path: Path) -> str:
    return f"replay://{path}"


def served_devices(tmp_path: Path) -> list[NodeDevice]:
    """DEVICES_NODE's devices as libvirt formats them."""
    node = tmp_path / "devices.xml"
    node.write_text(DEVICES_NODE)
    conn = open_read_only(f"test://{node}")
    try:
        return [
            NodeDevice(name=device.name(), xml=Answer[str](value=device.XMLDesc(0)))
            for device in conn.listAllDevices(0)
        ]
    finally:
        conn.close()


def two_cell_host(captured: CaptureDocument, devices: list[NodeDevice]) -> CaptureDocument:
    """A capture edited into the two-cell host: topology, CPUs, free pages, devices, one guest."""
    node = captured.node
    capabilities, count = re.subn(
        r"<topology>\s*<cells.*?</topology>", TWO_CELLS, node.capabilities.get(), flags=re.S
    )
    assert count == 1, "the captured host has one topology"
    model, _memory, _cpus, mhz, *_ = node.info
    free_pages = FreePages(
        page_sizes_kib=[4, 2048, 1048576],
        cells=[
            CellPages(
                cell=cell,
                pages=Answer[list[PageCount]](
                    value=[PageCount(size_kib=s, free=n) for s, n in counts.items()]
                ),
            )
            for cell, counts in FREE.items()
        ],
    )
    node = node.model_copy(
        update={
            "capabilities": Answer[str](value=capabilities),
            "info": (model, 32768, 8, mhz, 2, 1, 2, 2),
            "cpu_map": Answer[tuple[int, list[bool], int]](value=(8, [True] * 8, 8)),
            "free_pages": free_pages,
        }
    )
    guest = Domain(
        uuid=GUEST_UUID,
        name="numa-guest",
        info=Answer[tuple[int, int, int, int, int]](value=(1, 4194304, 4194304, 2, 0)),
        xml=Answer[str](value=GUEST),
        block_info={},
    )
    domains = Domains(
        listed=Answer[list[str]](value=[GUEST_UUID]),
        state_stats=Answer[list[DomainStats]](
            value=[DomainStats(uuid=GUEST_UUID, stats={"state.state": 1, "state.reason": 1})]
        ),
        definitions=[guest],
    )
    return captured.model_copy(
        update={"node": node, "domains": domains, "node_devices": Answer[list[NodeDevice]](value=devices)}
    )


@pytest.fixture(scope="module")
def libvirtd_capture(libvirtd: Libvirtd) -> CaptureDocument:
    conn = open_read_only(libvirtd.uri)
    try:
        return capture_host(conn, libvirtd.uri)
    finally:
        conn.close()


@pytest.fixture
def two_cells(libvirtd_capture: CaptureDocument, tmp_path: Path) -> Path:
    path = tmp_path / "two-cells.json"
    path.write_bytes(encode_bounded(two_cell_host(libvirtd_capture, served_devices(tmp_path))))
    return path


def layout_problems(facts: HostFacts) -> list[str]:
    words = ("NUMA", "capabilities", "node device", "hugepages")
    return [p for p in facts.problems if any(word in p for word in words)]


def audit_once(uri: str, disk: DiskSource | None = None) -> HostFacts:
    conn = open_read_only(uri)
    try:
        return audit_host(conn, uri, disk)
    finally:
        conn.close()


# (a) A captured two-cell host with hugepages and devices, replayed.


def test_a_replayed_two_cell_host_has_its_cells_pages_and_devices(two_cells: Path) -> None:
    config = parse_config(f'hypervisors:\n  - {{name: numa, uri: "{replay_uri(two_cells)}"}}\n', "inline")
    # No storage to look for: the host's problems are then only what this audit adds.
    config = replace(config, hypervisors=tuple(replace(h, disk=None) for h in config.hypervisors))
    (snapshot,) = asyncio.run(audit_fleet_once(config, cpu_window=0.0))  # as `virtcap audit` does
    assert snapshot.up and snapshot.facts is not None
    facts = snapshot.facts
    assert facts.numa_cells == CELLS
    assert facts.pci_devices == DEVICES  # the network interface is no PCI device
    assert facts.problems == ()
    assert facts.cpus == 8 and facts.online_cpus == frozenset(range(8))

    (guest,) = facts.domains
    layout = guest.layout
    assert layout.pci_addresses == ("0000:3b:02.1",)
    assert layout.memory_nodes == frozenset({1}) and layout.cell_memory_nodes == {0: {1}}
    assert layout.guest_cells == (GuestCell(0, frozenset({0, 1}), 4 * GIB),)
    assert layout.hugepages == (HugepageBacking(1048576, frozenset({0})),)
    assert layout.emulator_pins == frozenset({3})
    assert guest.vcpu_pins == (frozenset({2}), frozenset({6}))


def test_what_cannot_be_read_is_a_problem_of_the_host(
    libvirtd_capture: CaptureDocument, tmp_path: Path
) -> None:
    """Broken capabilities and devices: the host is audited, its problems say what is missing."""
    document = two_cell_host(libvirtd_capture, served_devices(tmp_path))
    capabilities = document.node.capabilities.get().replace("<cell id='1'>", "<cell id='one'>")
    vanished = Failure(
        code=libvirt.VIR_ERR_NO_NODE_DEVICE,
        domain=libvirt.VIR_FROM_NODEDEV,
        message="Node device not found: no node device with matching name 'pci_0000_3b_02_0'",
        level=libvirt.VIR_ERR_ERROR,
        int1=-1,
        int2=-1,
    )
    refused = vanished.model_copy(
        update={"code": libvirt.VIR_ERR_INTERNAL_ERROR, "message": "internal error: cannot read config"}
    )
    devices = {d.name: d for d in document.node_devices.get()}
    devices["pci_0000_3b_02_0"] = NodeDevice(name="pci_0000_3b_02_0", xml=Answer[str](error=vanished))
    devices["pci_0000_3b_02_1"] = NodeDevice(name="pci_0000_3b_02_1", xml=Answer[str](error=refused))
    garbage = devices["pci_0000_af_00_0"].xml.get().replace("id='0x10de'", "id='nvidia'")
    devices["pci_0000_af_00_0"] = NodeDevice(name="pci_0000_af_00_0", xml=Answer[str](value=garbage))
    node = document.node.model_copy(update={"capabilities": Answer[str](value=capabilities)})
    broken = document.model_copy(
        update={"node": node, "node_devices": Answer[list[NodeDevice]](value=list(devices.values()))}
    )
    path = tmp_path / "broken.json"
    path.write_bytes(encode_capture(broken))

    facts = audit_once(replay_uri(path))
    assert facts.numa_cells == ()
    assert facts.pci_devices == DEVICES[:1]  # the VF that went away is simply gone
    assert facts.problems == (
        "NUMA topology: cell id is not a whole number: 'one'; NUMA cells unknown",
        "node device pci_0000_3b_02_1: internal error: cannot read config; left out of the PCI devices",
        "node device pci_0000_af_00_0: pci_0000_af_00_0: vendor id is not hexadecimal: 'nvidia'; "
        "left out of the PCI devices",
    )
    assert [d.name for d in facts.domains] == ["numa-guest"]


# (b) The private libvirtd: this machine's own cells and pages.


def test_the_real_host_cells_hold_the_online_cpus(libvirtd: Libvirtd) -> None:
    facts = audit_once(libvirtd.uri)
    assert facts.numa_cells, "a Linux host has at least one NUMA cell"
    assert frozenset().union(*(cell.cpus for cell in facts.numa_cells)) == facts.online_cpus
    for cell in facts.numa_cells:
        pages = {page.size_kib: page for page in cell.pages}
        assert pages[2048].free is not None, cell
        assert 0 <= pages[2048].free <= pages[2048].total
        assert pages[min(pages)].free is None  # the base pages' MemFree is not a capacity
    assert layout_problems(facts) == []
    if PCI_DEVICES.is_dir():  # what the kernel lists, libvirt lists
        assert {d.address for d in facts.pci_devices} == {p.name for p in PCI_DEVICES.iterdir()}


def _hugepages_file(cells: tuple[NumaCell, ...]) -> Path:
    """Where to reserve 2 MiB pages in the first cell: its own file on a multi-node host."""
    if len(cells) > 1:
        return NODES / f"node{cells[0].id}" / "hugepages" / "hugepages-2048kB" / "nr_hugepages"
    return HUGEPAGES_2M


def _pages_2m(facts: HostFacts) -> dict[int, tuple[int, int | None]]:
    return {
        cell.id: next((p.total, p.free) for p in cell.pages if p.size_kib == 2048)
        for cell in facts.numa_cells
    }


def test_reserved_hugepages_show_in_the_next_audit(libvirtd: Libvirtd) -> None:
    """4 more pages of 2 MiB in the first cell: its total and free counts move by 4 (the totals
    on the next connection, since they are read once per connection)."""
    with hugepage_pools_held():
        before = audit_once(libvirtd.uri)
        path = _hugepages_file(before.numa_cells)
        if not path.exists() or not os.access(path, os.W_OK):
            pytest.skip(f"reserving hugepages needs root and a writable {path}")
        with more_hugepages(path, 4) as taken:
            if taken != 4:
                pytest.skip(f"the kernel could not find 4 free pages of 2 MiB for {path}")
            after = audit_once(libvirtd.uri)
    expected = _pages_2m(before)
    first = before.numa_cells[0].id
    total, free = expected[first]
    assert free is not None
    expected[first] = (total + 4, free + 4)
    assert _pages_2m(after) == expected


# (c) The test driver.


def test_the_test_driver_has_no_topology_devices_or_free_pages() -> None:
    for hypervisor in demo_config().hypervisors:
        if not hypervisor.uri.startswith("test:"):
            continue
        facts = audit_once(hypervisor.uri, hypervisor.disk)
        assert (facts.numa_cells, facts.pci_devices) == ((), ()), hypervisor.name
        assert layout_problems(facts) == [], hypervisor.name
    # Its built-in host has two cells, but counts no free page: unknown, never 0.
    default = audit_once("test:///default")
    assert [len(cell.cpus) for cell in default.numa_cells] == [8, 8]
    assert all(page.free is None for cell in default.numa_cells for page in cell.pages)
    assert default.pci_devices == () and layout_problems(default) == []


def test_the_test_driver_lists_a_node_file_pci_devices(tmp_path: Path) -> None:
    node = tmp_path / "devices.xml"
    node.write_text(DEVICES_NODE)
    facts = audit_once(f"test://{node}")
    assert facts.pci_devices == DEVICES and facts.numa_cells == () and layout_problems(facts) == []


# (d) `serve`: the topology and devices once per connection, the free pages at every audit.


class CountingReplay(ReplayConnection):
    """A replayed host counting the calls that read its layout and free pages; its free pages
    drop by one at each reading, as on a host whose guests take hugepages."""

    def __init__(self, document: CaptureDocument, calls: Counter[str]) -> None:
        super().__init__(document)
        self.calls = calls

    def getCapabilities(self) -> str:
        self.calls["getCapabilities"] += 1
        return super().getCapabilities()

    def getFreePages(
        self, pages: list[int], start_cell: int, cell_count: int, /
    ) -> dict[int, dict[int, int]]:
        self.calls["getFreePages"] += 1
        taken = self.calls["getFreePages"] - 1
        answer = super().getFreePages(pages, start_cell, cell_count)
        return {
            cell: {size: max(0, free - taken) for size, free in counts.items()}
            for cell, counts in answer.items()
        }

    def listAllDevices(self, flags: int, /) -> list[VirNodeDevice]:
        self.calls["listAllDevices"] += 1
        return [CountingDevice(device, self.calls) for device in super().listAllDevices(flags)]


class CountingDevice:
    def __init__(self, device: VirNodeDevice, calls: Counter[str]) -> None:
        self._device = device
        self.calls = calls

    def name(self) -> str:
        return self._device.name()

    def XMLDesc(self, flags: int, /) -> str:
        self.calls["device XMLDesc"] += 1
        return self._device.XMLDesc(flags)


@pytest.fixture
def kept_replay(two_cells: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Counter[str]]]:
    """A URI the auditor keeps its connection to (no replay: URI, no test driver), opened as a
    counting replay of the two-cell host."""
    uri = "qemu+ssh://two-cells.example/system"
    calls: Counter[str] = Counter()
    document = load_capture(two_cells)

    def opener(wanted: str) -> VirConnect:
        if wanted != uri:
            return open_read_only(wanted)
        calls["open"] += 1
        return CountingReplay(document, calls)

    monkeypatch.setattr(virtcap.audit.connection, "open_read_only", opener)
    yield uri, calls


def test_serve_reads_the_layout_once_per_connection(
    kept_replay: tuple[str, Counter[str]], two_cells: Path
) -> None:
    uri, calls = kept_replay
    host_cpu = ET.fromstring(load_capture(two_cells).node.capabilities.get()).find("host/cpu")
    assert host_cpu is not None
    identity = CpuIdentity(model=host_cpu.findtext("model", ""), arch=host_cpu.findtext("arch", ""))

    async def scenario() -> list[tuple[HostFacts, Counter[str]]]:
        store = SnapshotStore()
        hypervisor = Hypervisor("two-cells", uri, HostPolicy(), None)
        store.track([hypervisor.name])
        auditor = HypervisorAuditor(hypervisor, AuditSettings(), {}, store, AuditSlots(1, 1), Supervisor())
        audits = []
        try:
            for reconnect in (False, False, True):
                if reconnect:
                    auditor.connection.mark_broken()  # what a close callback or a failed call does
                assert await auditor._audit_once()
                state = store.hypervisors[hypervisor.name]
                assert state.latest is not None and state.latest.facts is not None
                assert state.identity == identity  # from the same capabilities
                audits.append((state.latest.facts, Counter(calls)))
        finally:
            await auditor.stop()
        return audits

    (first, after_first), (second, after_second), (reconnected, after_reconnect) = asyncio.run(scenario())
    per_connection = {
        "open": 1,
        "getCapabilities": 1,
        "listAllDevices": 1,  # with the PCI filter: the network interface is not listed
        "device XMLDesc": len(DEVICES),
    }
    # Every audit reads the free pages, and, the host having a GPU with mediated device types,
    # lists that GPU (its XML: the available instances) and the mediated devices again.
    per_audit = {"getFreePages": 1, "listAllDevices": 2, "device XMLDesc": 1}

    def expected(connections: int, audits: int) -> Counter[str]:
        counts = Counter({k: connections * n for k, n in per_connection.items()})
        counts.update({k: audits * n for k, n in per_audit.items()})
        return counts

    assert after_first == expected(1, 1)
    # A second audit on the kept connection: the capabilities and devices were read once.
    assert after_second == expected(1, 2)
    # A new connection reads them again.
    assert after_reconnect == expected(2, 3)

    assert first.numa_cells == CELLS and first.pci_devices == DEVICES
    assert _pages_2m(second) == {0: (1024, 999), 1: (512, 0)}  # the free pages as read again
    assert [cell.cpus for cell in second.numa_cells] == [cell.cpus for cell in CELLS]
    assert second.pci_devices == reconnected.pci_devices == DEVICES
    assert _pages_2m(reconnected) == {0: (1024, 998), 1: (512, 0)}
