"""Host PCI devices as Nova types them, read from libvirt's node-device XML as libvirt itself
serves it (the test driver's node file holds the devices; libvirt parses and re-formats them)."""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from virtcap.audit.node_devices import NodeDeviceError, pci_device
from virtcap.model.facts import MdevType, PciDevice

NODE = """<node>
  <cpu><mhz>2600</mhz><model>x</model><active>4</active><nodes>1</nodes><sockets>1</sockets>
    <cores>4</cores><threads>1</threads></cpu>
  <memory>8388608</memory>
  <device>
    <name>pci_0000_3b_00_0</name><parent>computer</parent>
    <capability type='pci'>
      <class>0x020000</class><domain>0</domain><bus>59</bus><slot>0</slot><function>0</function>
      <product id='0x1572'>Ethernet Controller X710</product>
      <vendor id='0x8086'>Intel Corporation</vendor>
      <capability type='virt_functions' maxCount='64'>
        <address domain='0x0000' bus='0x3b' slot='0x02' function='0x0'/>
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
</node>
"""


def _served(tmp_path: Path) -> list[str]:
    node = tmp_path / "node.xml"
    node.write_text(NODE)
    conn = libvirt.openReadOnly(f"test://{node}")
    try:
        return [device.XMLDesc(0) for device in conn.listAllDevices(0)]
    finally:
        conn.close()


def test_devices_are_typed_as_nova_types_them(tmp_path: Path) -> None:
    devices = {d.address: d for xml in _served(tmp_path) if (d := pci_device(xml)) is not None}
    assert devices["0000:3b:00.0"] == PciDevice(
        "0000:3b:00.0", "8086", "1572", 0, "type-PF", None, "0x020000"
    )
    assert devices["0000:3b:02.0"] == PciDevice(
        "0000:3b:02.0", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000"
    )
    gpu = devices["0000:af:00.0"]
    assert (gpu.dev_type, gpu.numa_node, gpu.vendor_id) == ("type-PCI", 1, "10de")
    assert gpu.mdev_types == (MdevType("nvidia-689", "GRID A30-4C", "vfio-pci", 6),)


def test_devices_that_are_not_pci_are_left_out_and_garbage_is_an_error() -> None:
    assert pci_device("<device><name>computer</name><capability type='system'/></device>") is None
    with pytest.raises(NodeDeviceError, match="unreadable"):
        pci_device("<device")
    broken = NODE.split("<device>")[1].split("</device>", maxsplit=1)[0].replace("0x8086", "intel")
    with pytest.raises(NodeDeviceError, match="vendor id is not hexadecimal"):
        pci_device(f"<device>{broken}</device>")
