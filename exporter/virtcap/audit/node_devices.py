"""Host PCI devices, their mediated device types and the mediated devices created on them, from
libvirt's node-device XML.

Pure: one device's XML in, a PciDevice or a MediatedDevice (or None for a device of another
kind) out. Devices are typed as Nova's libvirt driver types them: a device with an SR-IOV
`virt_functions` capability is a physical function (`type-PF`), one with a `phys_function` is a
virtual function (`type-VF`) of that parent, any other a plain `type-PCI`.
"""

from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET

from virtcap.model.facts import MdevType, MediatedDevice, PciDevice

MAX_MDEV_TYPES = 256


class NodeDeviceError(ValueError):
    """A node device's XML cannot be read; the audit reports it as a problem of the host."""


def pci_device(xml: str) -> PciDevice | None:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as error:
        raise NodeDeviceError(f"unreadable node device XML: {error}") from None
    capability = next((c for c in root.iterfind("capability") if c.get("type") == "pci"), None)
    if capability is None:
        return None
    name = root.findtext("name", default="?")
    address = pci_address(
        *(
            _number(capability.findtext(tag), f"{name}: {tag}")
            for tag in ("domain", "bus", "slot", "function")
        )
    )
    functions = {c.get("type"): c for c in capability.iterfind("capability")}
    parent = None
    if "virt_functions" in functions:
        dev_type = "type-PF"
    elif (
        "phys_function" in functions
        and (parent_element := functions["phys_function"].find("address")) is not None
    ):
        dev_type = "type-VF"
        parent = pci_address(
            *(
                _number(parent_element.get(key), f"{name}: phys_function {key}")
                for key in ("domain", "bus", "slot", "function")
            )
        )
    else:
        dev_type = "type-PCI"
    numa = capability.find("numa")
    node = numa.get("node") if numa is not None else None
    return PciDevice(
        address=address,
        vendor_id=_hex_id(capability.find("vendor"), f"{name}: vendor"),
        product_id=_hex_id(capability.find("product"), f"{name}: product"),
        # libvirt reports -1 where the firmware tells no node; Nova reads that as no node too
        numa_node=int(node) if node is not None and node.lstrip("-").isdigit() and int(node) >= 0 else None,
        dev_type=dev_type,
        parent_address=parent,
        class_code=(capability.findtext("class") or "").strip(),
        mdev_types=_mdev_types(functions.get("mdev_types"), name),
    )


_PCI_DEVICE_NAME = re.compile(r"pci_([0-9a-fA-F]{1,4})_([0-9a-fA-F]{1,2})_([0-9a-fA-F]{1,2})_([0-7])")
_MDEV_NAME = re.compile(r"mdev_([0-9a-fA-F]{8}(?:_[0-9a-fA-F]{4}){3}_[0-9a-fA-F]{12})(?:_.*)?", re.S)


def mediated_device(xml: str) -> MediatedDevice | None:
    """The mediated device an `mdev` node device describes; None for a device of another kind.

    Its UUID is the capability's `<uuid>` where libvirt writes one (7.3 and later); older
    versions only have it in the device's name, `mdev_<uuid with _ for ->`, which later ones
    follow with the parent's address (`mdev_<uuid>_0000_84_00_0`), as Nova reads it.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as error:
        raise NodeDeviceError(f"unreadable node device XML: {error}") from None
    capability = next((c for c in root.iterfind("capability") if c.get("type") == "mdev"), None)
    if capability is None:
        return None
    name = (root.findtext("name") or "").strip()
    type_element = capability.find("type")
    type_id = (type_element.get("id", "") if type_element is not None else "").strip()
    if not type_id:
        raise NodeDeviceError(f"{name or '?'}: mediated device without a type")
    return MediatedDevice(
        uuid=_mdev_uuid(capability.findtext("uuid"), name),
        type_id=type_id,
        parent_address=pci_name_address((root.findtext("parent") or "").strip()),
    )


def _mdev_uuid(written: str | None, name: str) -> str:
    text = (written or "").strip()
    if not text:
        match = _MDEV_NAME.fullmatch(name)
        if match is None:
            raise NodeDeviceError(f"{name or '?'}: mediated device without a UUID, in its XML or its name")
        text = match.group(1).replace("_", "-")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise NodeDeviceError(f"{name or '?'}: mediated device UUID is not a UUID: {text[:60]!r}") from None


def pci_name_address(device_name: str) -> str | None:
    """The PCI address of a node device named as libvirt names PCI devices (`pci_0000_84_00_0`
    is `0000:84:00.0`); None for a parent of another kind."""
    match = _PCI_DEVICE_NAME.fullmatch(device_name)
    if match is None:
        return None
    return pci_address(*(int(part, 16) for part in match.groups()))


def _mdev_types(capability: ET.Element | None, name: str) -> tuple[MdevType, ...]:
    if capability is None:
        return ()
    types = capability.findall("type")
    if len(types) > MAX_MDEV_TYPES:
        raise NodeDeviceError(f"{name}: more than {MAX_MDEV_TYPES} mediated device types")
    return tuple(
        MdevType(
            type_id=element.get("id", ""),
            name=(element.findtext("name") or "").strip(),
            device_api=(element.findtext("deviceAPI") or "").strip(),
            available=_number(element.findtext("availableInstances"), f"{name}: availableInstances"),
        )
        for element in types
    )


def pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    """`0000:3b:02.1`, as Nova writes PCI addresses: devices and the domains holding them meet on it."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def _hex_id(element: ET.Element | None, what: str) -> str:
    text = element.get("id", "") if element is not None else ""
    try:
        return f"{int(text, 16):04x}"
    except ValueError:
        raise NodeDeviceError(f"{what} id is not hexadecimal: {text!r}") from None


def _number(text: str | None, what: str) -> int:
    try:
        value = int((text or "").strip(), 0)
    except ValueError:
        raise NodeDeviceError(f"{what} is not a whole number: {text!r}") from None
    if value < 0:
        raise NodeDeviceError(f"{what} is negative: {text!r}")
    return value
