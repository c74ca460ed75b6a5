"""vGPUs from the audit to the model: an NVIDIA Tesla M10 (four physical GPUs, mediated device
types nvidia-35 to nvidia-38) with mediated devices and the guests holding them, described to
libvirt's test driver, which parses and formats the node devices as libvirt does; the same host
captured and replayed; Nova's VGPU inventories computed by hand; the configuration."""

# ruff: noqa: N802 - the failing replay's methods bear libvirt's own names

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import libvirt
import pytest

from virtcap.audit.capture import capture_host
from virtcap.audit.capture_format import Answer, CaptureDocument, NodeDevice, libvirt_error
from virtcap.audit.connection import open_read_only
from virtcap.audit.host_readings import read_host_layout
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.libvirt_api import VirNodeDevice
from virtcap.audit.node_devices import NodeDeviceError, mediated_device, pci_device, pci_name_address
from virtcap.audit.replay import ReplayConnection
from virtcap.config import ConfigError, parse_config
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import DomainState, HostFacts, MdevType, MediatedDevice, NovaFlavor, NovaInstance
from virtcap.model.nova import nova_allocation, nova_request
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource, display_order, resource_class
from virtcap.model.vgpu import EnabledMdevType, GpuInventory, gpu_totals, vgpu_capacity

GPUS = ("0000:84:00.0", "0000:85:00.0", "0000:86:00.0", "0000:87:00.0")
TYPES = (
    ("nvidia-35", "GRID M10-0B"),
    ("nvidia-36", "GRID M10-0Q"),
    ("nvidia-37", "GRID M10-1A"),
    ("nvidia-38", "GRID M10-1B"),
)

# Available instances per GPU and type. A GPU runs one type at a time: once a device is created,
# the other types offer none. 84 has two nvidia-35 devices, 85 none, 86 one nvidia-36, 87 one
# nvidia-37 (a type no configuration below gives it).
AVAILABLE = {
    "0000:84:00.0": (14, 0, 0, 0),
    "0000:85:00.0": (16, 16, 8, 8),
    "0000:86:00.0": (0, 15, 0, 0),
    "0000:87:00.0": (0, 0, 7, 0),
}
M1 = "4b20d080-1b54-4048-85b3-a6a62d165c01"
M2 = "9d4b5a4e-52a8-4b8e-bb3c-1f5f0e1c2a77"  # an older libvirt's: its UUID only in its name
M3 = "c0a7d3f2-6f1e-4d0b-9a57-3e2b8f4d1c90"
M4 = "e5f8a2b1-0c3d-4e6f-8a9b-7c1d2e3f4a5b"
GONE = "11111111-2222-4333-8444-555555555555"  # held by a guest, listed by no node device


def gpu_xml(address: str) -> str:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    types = "".join(
        f"""
        <type id='{type_id}'>
          <name>{name}</name>
          <deviceAPI>vfio-pci</deviceAPI>
          <availableInstances>{available}</availableInstances>
        </type>"""
        for (type_id, name), available in zip(TYPES, AVAILABLE[address], strict=True)
    )
    return f"""
  <device>
    <name>pci_{domain}_{bus}_{slot}_{function}</name>
    <path>/sys/devices/pci0000:80/0000:80:03.0/0000:83:08.0/{address}</path>
    <parent>pci_0000_83_08_0</parent>
    <driver><name>nvidia</name></driver>
    <capability type='pci'>
      <class>0x030000</class>
      <domain>{int(domain, 16)}</domain><bus>{int(bus, 16)}</bus><slot>{int(slot, 16)}</slot>
      <function>{int(function, 16)}</function>
      <product id='0x13bd'>GM107GL [Tesla M10]</product>
      <vendor id='0x10de'>NVIDIA Corporation</vendor>
      <capability type='mdev_types'>{types}
      </capability>
      <iommuGroup number='{int(bus, 16) - 80}'>
        <address domain='0x{domain}' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>
      </iommuGroup>
      <numa node='1'/>
      <pci-express>
        <link validity='cap' port='0' speed='8' width='16'/>
        <link validity='sta' speed='8' width='16'/>
      </pci-express>
    </capability>
  </device>"""


def mdev_xml(uuid: str, parent: str, type_id: str, *, uuid_element: bool = True) -> str:
    """As libvirt 7.7 and later name and describe it; without `uuid_element`, as 7.2 and earlier
    did (the name is the UUID alone, the capability has none)."""
    parent_name = "pci_" + parent.replace(":", "_").replace(".", "_")
    suffix = "_" + parent_name[4:] if uuid_element else ""
    written = f"\n      <uuid>{uuid}</uuid>" if uuid_element else ""
    return f"""
  <device>
    <name>mdev_{uuid.replace("-", "_")}{suffix}</name>
    <path>/sys/devices/pci0000:80/0000:80:03.0/0000:83:08.0/{parent}/{uuid}</path>
    <parent>{parent_name}</parent>
    <driver><name>nvidia-vgpu-vfio</name></driver>
    <capability type='mdev'>
      <type id='{type_id}'/>{written}
      <iommuGroup number='{abs(hash(uuid)) % 100 + 200}'/>
    </capability>
  </device>"""


def guest_xml(name: str, uuid: str, mdev: str, state: int) -> str:
    return f"""
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>{name}</name>
    <uuid>{uuid}</uuid>
    <memory unit='KiB'>4194304</memory>
    <vcpu>2</vcpu>
    <os><type arch='x86_64'>hvm</type></os>
    <devices>
      <hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci' display='off'>
        <source><address uuid='{mdev}'/></source>
      </hostdev>
    </devices>
    <test:runstate>{state}</test:runstate>
  </domain>"""


RUNNING, SHUTOFF = 1, 5
NODE = f"""<node>
  <cpu><mhz>2600</mhz><model>x</model><active>16</active><nodes>1</nodes><sockets>1</sockets>
    <cores>16</cores><threads>1</threads></cpu>
  <memory>134217728</memory>
  {"".join(gpu_xml(address) for address in GPUS)}
  {mdev_xml(M1, GPUS[0], "nvidia-35")}
  {mdev_xml(M2, GPUS[0], "nvidia-35", uuid_element=False)}
  {mdev_xml(M3, GPUS[2], "nvidia-36")}
  {mdev_xml(M4, GPUS[3], "nvidia-37")}
  <device>
    <name>net_ens1f0_3c_fd_fe_00_00_01</name><parent>computer</parent>
    <capability type='net'><interface>ens1f0</interface><address>3c:fd:fe:00:00:01</address></capability>
  </device>
  {guest_xml("vm-a", "00000000-0000-4000-8000-00000000000a", M1, RUNNING)}
  {guest_xml("vm-b", "00000000-0000-4000-8000-00000000000b", M2, SHUTOFF)}
  {guest_xml("vm-c", "00000000-0000-4000-8000-00000000000c", M3, RUNNING)}
  {guest_xml("vm-d", "00000000-0000-4000-8000-00000000000d", M4, RUNNING)}
  {guest_xml("vm-e", "00000000-0000-4000-8000-00000000000e", GONE, RUNNING)}
</node>
"""

EVERY_STATE = frozenset(DomainState)
ACTIVE_ONLY = EVERY_STATE - {DomainState.SHUTOFF}
# Nova's documented example: nvidia-35 the default of every GPU, nvidia-36 on 0000:86:00.0.
TWO_TYPES = (EnabledMdevType("nvidia-35"), EnabledMdevType("nvidia-36", ("0000:86:00.0",)))


@pytest.fixture(scope="module")
def node_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu") / "m10.xml"
    path.write_text(NODE)
    return path


def audit(uri: str) -> HostFacts:
    conn = open_read_only(uri)
    try:
        return audit_host(conn, uri, None)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def gpu_host(node_file: Path) -> HostFacts:
    return audit(f"test://{node_file}")


@pytest.fixture(scope="module")
def captured(node_file: Path) -> CaptureDocument:
    uri = f"test://{node_file}"
    conn = open_read_only(uri)
    try:
        return capture_host(conn, uri)
    finally:
        conn.close()


# Parsing, as libvirt serves the XML.


def served(node_file: Path) -> dict[str, str]:
    conn = open_read_only(f"test://{node_file}")
    try:
        return {device.name(): device.XMLDesc(0) for device in conn.listAllDevices(0)}
    finally:
        conn.close()


def test_a_gpus_mdev_types_and_its_mediated_devices_are_read_from_libvirts_xml(node_file: Path) -> None:
    xml = served(node_file)
    gpu = pci_device(xml["pci_0000_84_00_0"])
    assert gpu is not None and (gpu.address, gpu.vendor_id, gpu.product_id) == (
        "0000:84:00.0",
        "10de",
        "13bd",
    )
    assert gpu.mdev_types == (
        MdevType("nvidia-35", "GRID M10-0B", "vfio-pci", 14),
        MdevType("nvidia-36", "GRID M10-0Q", "vfio-pci", 0),
        MdevType("nvidia-37", "GRID M10-1A", "vfio-pci", 0),
        MdevType("nvidia-38", "GRID M10-1B", "vfio-pci", 0),
    )
    named = f"mdev_{M1.replace('-', '_')}_0000_84_00_0"
    assert mediated_device(xml[named]) == MediatedDevice(M1, "nvidia-35", "0000:84:00.0")
    # libvirt before 7.3: the UUID is in the name only
    older = mediated_device(xml[f"mdev_{M2.replace('-', '_')}"])
    assert older == MediatedDevice(M2, "nvidia-35", "0000:84:00.0")
    # a mediated device is no PCI device, and the other way round
    assert pci_device(xml[named]) is None and mediated_device(xml["pci_0000_84_00_0"]) is None
    assert mediated_device(xml["net_ens1f0_3c_fd_fe_00_00_01"]) is None


def test_odd_mediated_devices() -> None:
    capability = "<capability type='mdev'><type id='mtty-1'/><uuid>{}</uuid></capability>"
    # a virtual parent (mtty) has no PCI address: Nova gives it no VGPU inventory
    virtual = mediated_device(
        f"<device><name>mdev_x</name><parent>mtty</parent>{capability.format(M1.upper())}</device>"
    )
    assert virtual == MediatedDevice(M1, "mtty-1", None)  # UUIDs in lower case, as domains have them
    assert pci_name_address("pci_0000_af_00_1") == "0000:af:00.1"
    assert pci_name_address("css_0_0_0023") is None
    with pytest.raises(NodeDeviceError, match="mdev_nothing: mediated device without a UUID"):
        mediated_device(
            "<device><name>mdev_nothing</name><capability type='mdev'><type id='t'/></capability></device>"
        )
    with pytest.raises(NodeDeviceError, match="without a type"):
        mediated_device(
            f"<device><name>mdev_x</name><capability type='mdev'><uuid>{M1}</uuid></capability></device>"
        )
    with pytest.raises(NodeDeviceError, match="is not a UUID: 'nope'"):
        mediated_device(
            "<device><name>m</name><capability type='mdev'><type id='t'/><uuid>nope</uuid>"
            "</capability></device>"
        )
    with pytest.raises(NodeDeviceError, match="unreadable node device XML"):
        mediated_device("<device>")


# The audit: the test driver, and the same host captured and replayed.


def test_the_audit_reads_the_gpus_the_mediated_devices_and_who_holds_them(gpu_host: HostFacts) -> None:
    assert gpu_host.problems == ()
    assert [d.address for d in gpu_host.pci_devices] == list(GPUS)
    assert {d.address: tuple(t.available for t in d.mdev_types) for d in gpu_host.pci_devices} == AVAILABLE
    assert gpu_host.mediated_devices == tuple(
        sorted(
            (
                MediatedDevice(M1, "nvidia-35", GPUS[0]),
                MediatedDevice(M2, "nvidia-35", GPUS[0]),
                MediatedDevice(M3, "nvidia-36", GPUS[2]),
                MediatedDevice(M4, "nvidia-37", GPUS[3]),
            ),
            key=lambda mdev: mdev.uuid,
        )
    )
    held = {d.name: (d.state, d.layout.mdev_uuids) for d in gpu_host.domains}
    assert held == {
        "vm-a": (DomainState.RUNNING, (M1,)),
        "vm-b": (DomainState.SHUTOFF, (M2,)),
        "vm-c": (DomainState.RUNNING, (M3,)),
        "vm-d": (DomainState.RUNNING, (M4,)),
        "vm-e": (DomainState.RUNNING, (GONE,)),
    }


def test_a_replayed_gpu_host_is_audited_as_the_live_one(
    captured: CaptureDocument, gpu_host: HostFacts, tmp_path: Path
) -> None:
    replayed = audit_host(ReplayConnection(captured), "replay:///gpu.json", None)
    for field in ("pci_devices", "mediated_devices", "domains", "problems"):
        assert getattr(replayed, field) == getattr(gpu_host, field), field


def test_the_test_driver_without_gpus_has_no_mediated_devices() -> None:
    facts = audit("test:///default")
    assert facts.mediated_devices == ()
    assert not [p for p in facts.problems if "device" in p and "disk" not in p]


class ListingReplay(ReplayConnection):
    """A replayed host noting the flags of each node device listing."""

    def __init__(self, document: CaptureDocument) -> None:
        super().__init__(document)
        self.listings: list[int] = []

    def listAllDevices(self, flags: int, /) -> list[VirNodeDevice]:
        self.listings.append(flags)
        return super().listAllDevices(flags)


def test_only_a_host_with_mediated_device_types_lists_them_at_each_audit(captured: CaptureDocument) -> None:
    with_gpus = ListingReplay(captured)
    layout = read_host_layout(with_gpus)
    assert with_gpus.listings == [libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV]  # once per connection
    with_gpus.listings.clear()
    audit_host(with_gpus, "replay:///gpu.json", None, layout=layout)
    assert with_gpus.listings == [
        libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES,
        libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV,
    ]
    others = [d for d in captured.node_devices.get() if d.name.startswith("net_")]
    without = ListingReplay(
        captured.model_copy(update={"node_devices": Answer[list[NodeDevice]](value=others)})
    )
    audit_host(without, "replay:///plain.json", None, layout=read_host_layout(without))
    assert without.listings == [libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV]


def with_gpu_edited(captured: CaptureDocument, available: int, *, mdevs: tuple[str, ...]) -> CaptureDocument:
    """The host later: GPU 85 offers `available` nvidia-35 instances, and only `mdevs` remain."""
    kept = []
    for device in captured.node_devices.get():
        xml = device.xml.get()
        if device.name == "pci_0000_85_00_0":
            xml = xml.replace(
                "<availableInstances>16</availableInstances>",
                f"<availableInstances>{available}</availableInstances>",
                1,
            )
        elif device.name.startswith("mdev_") and not any(
            uuid.replace("-", "_") in device.name for uuid in mdevs
        ):
            continue
        kept.append(NodeDevice(name=device.name, xml=Answer[str](value=xml)))
    return captured.model_copy(update={"node_devices": Answer[list[NodeDevice]](value=kept)})


def test_each_audit_reads_the_mediated_devices_and_available_instances_again(
    captured: CaptureDocument,
) -> None:
    """The layout is read once per connection; the GPUs' available instances and the mediated
    devices move as guests start and stop, so an audit with an old layout reads them anew."""
    layout = read_host_layout(ReplayConnection(captured))
    later = ReplayConnection(with_gpu_edited(captured, 12, mdevs=(M1, M3)))
    facts = audit_host(later, "replay:///later.json", None, layout=layout)
    gpu_85 = next(d for d in facts.pci_devices if d.address == GPUS[1])
    assert gpu_85.mdev_types[0].available == 12
    assert {mdev.uuid for mdev in facts.mediated_devices} == {M1, M3}
    assert facts.pci_devices[0] == layout.pci_devices[0]  # the others as they were


class FailingReplay(ReplayConnection):
    """A replayed host whose listings by `failing` capability flags fail as a daemon's would."""

    def __init__(self, document: CaptureDocument, failing: int) -> None:
        super().__init__(document)
        self.failing = failing

    def listAllDevices(self, flags: int, /) -> list[VirNodeDevice]:
        if flags == self.failing:
            raise libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR, "internal error: udev went away")
        return super().listAllDevices(flags)


def test_unreadable_mediated_devices_are_problems_of_the_host(captured: CaptureDocument) -> None:
    layout = read_host_layout(ReplayConnection(captured))
    failing_mdevs = FailingReplay(captured, libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV)
    facts = audit_host(failing_mdevs, "replay:///f.json", None, layout=layout)
    assert facts.problems == (
        "cannot list mediated devices: internal error: udev went away; vGPUs created unknown",
    )
    assert facts.mediated_devices == () and facts.pci_devices == layout.pci_devices

    later = with_gpu_edited(captured, 12, mdevs=(M1,))
    failing_gpus = FailingReplay(later, libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES)
    facts = audit_host(failing_gpus, "replay:///f.json", None, layout=layout)
    assert facts.problems == (
        "cannot list the devices offering mediated device types: internal error: udev went away; "
        "their available instances as read when the connection opened",
    )
    assert facts.pci_devices == layout.pci_devices and [m.uuid for m in facts.mediated_devices] == [M1]

    broken = [
        NodeDevice(name=d.name, xml=Answer[str](value=d.xml.get().replace(M3, "M3")))
        if d.name.startswith(f"mdev_{M3.replace('-', '_')}")
        else d
        for d in captured.node_devices.get()
    ]
    facts = audit_host(
        ReplayConnection(
            captured.model_copy(update={"node_devices": Answer[list[NodeDevice]](value=broken)})
        ),
        "replay:///f.json",
        None,
        layout=layout,
    )
    (problem,) = facts.problems
    assert problem.startswith(f"node device mdev_{M3.replace('-', '_')}_0000_86_00_0: ")
    assert "mediated device UUID is not a UUID: 'M3'" in problem
    assert problem.endswith("; left out of the mediated devices")
    assert M3 not in {m.uuid for m in facts.mediated_devices}


# The model, against Nova's numbers worked out by hand.


def test_novas_inventory_per_gpu_with_a_default_type_and_one_by_address(gpu_host: HostFacts) -> None:
    # 84: its 2 nvidia-35 devices + 14 available; 85: 16 available; 86 offers nvidia-36: 1 + 15;
    # 87 offers nvidia-35, has none available, and its nvidia-37 device is not counted: total 0.
    vgpus = vgpu_capacity(gpu_host, TWO_TYPES, EVERY_STATE)
    assert vgpus.gpus == (
        GpuInventory(GPUS[0], "nvidia-35", total=16, used=2, holders=("vm-a", "vm-b")),
        GpuInventory(GPUS[1], "nvidia-35", total=16),
        GpuInventory(GPUS[2], "nvidia-36", total=16, used=1, holders=("vm-c",)),
        GpuInventory(GPUS[3], "nvidia-35", total=0, used=1, holders=("vm-d",)),
    )
    gpu = vgpus.gpus[0]
    assert (gpu.reserved, gpu.min_unit, gpu.max_unit, gpu.step_size, gpu.allocation_ratio) == (
        0,
        1,
        16,
        1,
        1.0,
    )
    assert gpu.device_name == "pci_0000_84_00_0"
    assert [g.has_provider for g in vgpus.gpus] == [True, True, True, False]
    assert vgpus.unplaced == ("vm-e",)  # its device is listed by no GPU
    assert (vgpus.total, vgpus.reserved, vgpus.used, vgpus.free, vgpus.max_unit) == (48, 0, 5, 45, 16)
    # each allocation from one GPU: 14 + 16 + 15 single vGPUs, 7 + 8 + 7 pairs, one whole GPU
    assert [vgpus.fits(n) for n in (1, 2, 16, 17)] == [45, 22, 1, 0]
    # shut-off guests not counted: vm-b's device is free again
    active = vgpu_capacity(gpu_host, TWO_TYPES, ACTIVE_ONLY)
    assert (active.gpus[0].used, active.used, active.free) == (1, 4, 46)


def test_which_type_a_gpu_offers(gpu_host: HostFacts) -> None:
    devices, mdevs = gpu_host.pci_devices, gpu_host.mediated_devices

    def totals(*enabled: EnabledMdevType) -> dict[str, tuple[str, int]]:
        return gpu_totals(devices, mdevs, enabled)

    assert totals() == {}  # nothing enabled: no GPU is listed
    # two types without addresses: the first is every GPU's, the second is not used at all
    # (84 offers no nvidia-37 now; 87 has 1 device + 7 available)
    assert totals(EnabledMdevType("nvidia-37"), EnabledMdevType("nvidia-38")) == {
        GPUS[0]: ("nvidia-37", 0),
        GPUS[1]: ("nvidia-37", 8),
        GPUS[2]: ("nvidia-37", 0),
        GPUS[3]: ("nvidia-37", 8),
    }
    # every type names its GPUs: the others offer nothing and are not listed
    assert totals(EnabledMdevType("nvidia-36", ("0000:86:00.0", "0000:85:00.0"))) == {
        GPUS[1]: ("nvidia-36", 16),
        GPUS[2]: ("nvidia-36", 16),
    }
    # a GPU named by a type it does not offer at all is not listed either
    assert (
        gpu_totals([replace(devices[1], mdev_types=())], (), [EnabledMdevType("nvidia-35", (GPUS[1],))]) == {}
    )


def test_max_instances_caps_the_type_gpu_by_gpu(gpu_host: HostFacts) -> None:
    # nvidia-35 capped at 20: 84's 2 devices count first, then 84 adds 14 (16 <= 20); 85's 16
    # would make 32: its total is 0; 86 and 87 add nothing (0 available): 0 each.
    capped = gpu_totals(
        gpu_host.pci_devices, gpu_host.mediated_devices, [EnabledMdevType("nvidia-35", max_instances=20)]
    )
    assert capped == {
        GPUS[0]: ("nvidia-35", 16),
        GPUS[1]: ("nvidia-35", 0),
        GPUS[2]: ("nvidia-35", 0),
        GPUS[3]: ("nvidia-35", 0),
    }
    # a cap below the devices already created zeroes the GPUs holding them too
    below = gpu_totals(
        gpu_host.pci_devices, gpu_host.mediated_devices, [EnabledMdevType("nvidia-35", max_instances=1)]
    )
    assert below[GPUS[0]] == ("nvidia-35", 0)


# Resource classes and flavors.


def test_vgpu_is_a_class_listed_only_where_offered_or_used(gpu_host: HostFacts) -> None:
    assert resource_class("VGPU") is Resource.VGPU
    assert (Resource.VGPU.label, Resource.VGPU.unit, Resource.VGPU.placement_unit) == ("vgpu", "integer", 1)
    fpga = Resource.custom_class("CUSTOM_FPGA")
    assert display_order([fpga, Resource.VGPU, Resource.MEMORY]) == [Resource.MEMORY, Resource.VGPU, fpga]
    # a host without GPU inventory nor VGPU use lists no VGPU
    plain = replace(gpu_host, domains=(), pci_devices=(), mediated_devices=())
    assert Resource.VGPU not in host_capacity(plain, HostPolicy(enabled_mdev_types=TWO_TYPES)).resources


def test_a_flavor_asking_for_vgpus_counts_them() -> None:
    config = parse_config(
        "flavors:\n"
        "  - {name: g1, vcpu: 4, memory: 8GiB, extra_specs: {'resources:VGPU': '1'}}\n"
        "  - {name: g2, vcpu: 8, memory: 16GiB,\n"
        "     extra_specs: {'resources:VGPU': '2', 'resources1:VGPU': '1'}}\n",
        "inline",
    )
    requests = {name: demand.request for name, demand in config.flavor_demands.items()}
    assert requests["g1"][Resource.VGPU] == 1
    assert requests["g2"][Resource.VGPU] == 3  # two request groups, both on this host
    instance = NovaInstance(NovaFlavor("g1", 4, 8192, 0, 0, 0, extra_specs={"resources:VGPU": "1"}))
    assert nova_allocation(instance)[Resource.VGPU] == 1 == nova_request(instance)[Resource.VGPU]


# The configuration.


def test_devices_in_novas_vocabulary_per_hypervisor_or_in_defaults() -> None:
    config = parse_config(
        """
defaults:
  devices:
    enabled_mdev_types: [nvidia-35, nvidia-36]
    mdev_types:
      nvidia-36: {device_addresses: ["0000:86:00.0", "0000:87:00.0"], max_instances: 16}
hypervisors:
  - {name: a, uri: "test:///default"}
  - {name: b, uri: "test:///default", devices: {enabled_mdev_types: [nvidia-38]}}
  - {name: c, uri: "test:///default", devices: {}}
""",
        "inline",
    )
    inherited, own, none = (h.policy.enabled_mdev_types for h in config.hypervisors)
    assert inherited == (
        EnabledMdevType("nvidia-35"),
        EnabledMdevType("nvidia-36", ("0000:86:00.0", "0000:87:00.0"), 16),
    )
    assert own == (EnabledMdevType("nvidia-38"),)  # a hypervisor's section replaces the defaults'
    assert none == ()
    assert parse_config("", "inline").hypervisors[0].policy.enabled_mdev_types == ()


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (
            "{enabled_mdev_types: [nvidia-35], mdev_types: {nvidia-35: {device_addresses: ['0000:84:0.0']}}}",
            "defaults.devices.mdev_types.nvidia-35.device_addresses[0]: expected the address as libvirt "
            "writes it, '0000:84:00.0' (Nova compares it as written), got '0000:84:0.0'",
        ),
        (
            "{enabled_mdev_types: [nvidia-35], mdev_types: {nvidia-35: {device_addresses: ['84:00.0']}}}",
            "'0000:84:00.0' (Nova compares it as written), got '84:00.0'",
        ),
        (
            "{enabled_mdev_types: [nvidia-35], mdev_types: {nvidia-35: {device_addresses: [gpu0]}}}",
            "device_addresses[0]: expected a GPU's PCI address such as '0000:84:00.0', got 'gpu0'",
        ),
        (
            "{enabled_mdev_types: [nvidia-35, nvidia-35]}",
            "defaults.devices: enabled_mdev_types: 'nvidia-35' is listed twice",
        ),
        (
            "{enabled_mdev_types: [nvidia-35], mdev_types: {nvidia-36: {}}}",
            "defaults.devices: mdev_types: 'nvidia-36' is not in enabled_mdev_types",
        ),
        (
            "{enabled_mdev_types: [a, b], mdev_types: {a: {device_addresses: ['0000:84:00.0']}, "
            "b: {device_addresses: ['0000:84:00.0']}}}",
            "mdev_types.b.device_addresses: 0000:84:00.0 is named twice (also by a); Nova refuses to start",
        ),
        (
            "{enabled_mdev_types: [a], mdev_types: {a: {max_instances: 0}}}",
            "defaults.devices.mdev_types.a.max_instances: ",
        ),
        ("{enabled_mdev_types: ['nvidia 35']}", "defaults.devices.enabled_mdev_types[0]: "),
        ("{enabled_vgpu_types: [nvidia-35]}", "defaults.devices.enabled_vgpu_types: "),
    ],
)
def test_bad_devices_are_one_line_naming_the_file_and_key(devices: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(f"defaults:\n  devices: {devices}\n", "gpu.yaml")
    text = str(error.value)
    assert "\n" not in text and text.startswith("gpu.yaml: ") and message in text, text


def test_the_cli_exits_2_on_a_bad_device_address(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "defaults:\n  devices: {enabled_mdev_types: [a], mdev_types: {a: {device_addresses: [x]}}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"virtcap: configuration error: {path}: defaults.devices.mdev_types.a.device_addresses"
    )
