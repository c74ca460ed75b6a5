"""Reading a libvirt domain definition (XML) into what capacity accounting needs.

Pure: no libvirt calls. Disk capacities are not in the XML; the audit resolves them from the
disk references parsed here.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from virtcap.audit.node_devices import pci_address
from virtcap.model.facts import (
    DomainPlacement,
    GuestCell,
    HugepageBacking,
    NovaFlavor,
    NovaInstance,
    NovaOwner,
    ProjectOwner,
)
from virtcap.model.ownership import OwnershipMetadata
from virtcap.units import parse_cpu_set

NOVA_NAMESPACE = "http://openstack.org/xmlns/libvirt/nova/1.1"
_NOVA = f"{{{NOVA_NAMESPACE}}}"

# `<memory unit=...>` units as libvirt documents them: bytes, SI (powers of 1000) and IEC.
MEMORY_UNITS = {
    "b": 1,
    "bytes": 1,
    "kb": 1000,
    "k": 1024,
    "kib": 1024,
    "mb": 1000**2,
    "m": 1024**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "g": 1024**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "t": 1024**4,
    "tib": 1024**4,
}

NON_LOCAL_DEVICES = frozenset({"cdrom", "floppy"})


class DomainXMLError(ValueError):
    """The definition lacks something accounting cannot do without."""


@dataclass(frozen=True, slots=True)
class DiskReference:
    """Where a disk's data lives, as the definition says: a file or block path, a pool volume or
    a network protocol."""

    target: str
    device: str
    kind: str
    path: str | None = None
    pool: str | None = None
    volume: str | None = None
    protocol: str | None = None

    @property
    def source(self) -> str:
        if self.kind == "network":
            return f"{self.protocol or 'network'}:{self.path or ''}"
        if self.kind == "volume":
            return f"{self.pool}/{self.volume}"
        return self.path or ""


@dataclass(frozen=True, slots=True)
class DomainDefinition:
    name: str
    uuid: str
    vcpus: int
    memory_bytes: int
    current_memory_bytes: int
    """The balloon target (`<currentMemory>`); the full memory when the definition has none."""
    hugepages: bool
    vcpu_pins: tuple[frozenset[int] | None, ...]
    disks: tuple[DiskReference, ...]
    nova: NovaInstance | None
    problems: tuple[str, ...] = ()
    placement: DomainPlacement = field(default_factory=DomainPlacement)
    owner: ProjectOwner | None = None
    """From the `ownership` metadata element, where one is configured and present."""


def parse_domain_xml(xml: str, ownership: OwnershipMetadata | None = None) -> DomainDefinition:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as error:
        raise DomainXMLError(f"unreadable domain XML: {error}") from None
    # One pass over the top-level elements: a thousand hypervisors' audits parse every domain of
    # the fleet, and each find() walks the children again.
    top: dict[str, ET.Element] = {}
    for child in root:
        top.setdefault(child.tag, child)
    name = _required_text(top.get("name"), "name")
    vcpu_element = top.get("vcpu")
    vcpus = _whole_number(vcpu_element, "vcpu") if vcpu_element is not None else 1
    problems: list[str] = []
    try:
        nova = _nova_instance(top.get("metadata"))
    except DomainXMLError as error:
        # Metadata is free-form: a broken flavor is ignored, the definition itself still counts.
        problems.append(f"domain {name}: {error}; accounted from its definition instead")
        nova = None
    try:
        placement = _placement(top, top.get("devices"))
    except DomainXMLError as error:
        # The whole-host amounts do not depend on it: the domain still counts, its cells do not.
        problems.append(f"domain {name}: {error}; its NUMA and device placement is unknown")
        placement = DomainPlacement()
    memory_bytes = _memory_bytes(top.get("memory"))
    current_memory = top.get("currentMemory")
    backing = top.get("memoryBacking")
    tuning = top.get("cputune")
    devices = top.get("devices")
    uuid = top.get("uuid")
    disk_elements = devices.iterfind("disk") if devices is not None else ()
    return DomainDefinition(
        name=name,
        uuid=(uuid.text or "").strip() if uuid is not None else "",
        vcpus=vcpus,
        memory_bytes=memory_bytes,
        current_memory_bytes=(
            memory_bytes if current_memory is None else _memory_bytes(current_memory, "currentMemory")
        ),
        hugepages=backing is not None and backing.find("hugepages") is not None,
        vcpu_pins=_vcpu_pins(vcpu_element, tuning, vcpus),
        disks=tuple(_disk_reference(disk) for disk in disk_elements),
        nova=nova,
        problems=tuple(problems),
        placement=placement,
        owner=_metadata_owner(top.get("metadata"), ownership) if ownership is not None else None,
    )


MAX_OWNER_CHARS = 255
"""A project id or name longer than this is cut: it becomes a label value on every project series."""


def _metadata_owner(metadata: ET.Element | None, ownership: OwnershipMetadata) -> ProjectOwner | None:
    if metadata is None:
        return None
    element = metadata.find("/".join(f"{{{ownership.namespace}}}{step}" for step in ownership.path))
    if element is None:
        return None
    name = (element.text or "").strip()[:MAX_OWNER_CHARS]
    project_id = (element.get(ownership.id_attribute) or "").strip()[:MAX_OWNER_CHARS] or name
    if not project_id:
        return None
    return ProjectOwner(project_id=project_id, project_name=name)


def _required_text(element: ET.Element | None, tag: str) -> str:
    text = (element.text or "").strip() if element is not None else ""
    if not text:
        raise DomainXMLError(f"domain XML has no <{tag}>")
    return text


def _whole_number(element: ET.Element | None, what: str) -> int:
    text = (element.text or "").strip() if element is not None else ""
    try:
        return int(text)
    except ValueError:
        raise DomainXMLError(f"<{what}> is not a whole number: {text!r}") from None


def _memory_bytes(element: ET.Element | None, tag: str = "memory") -> int:
    if element is None:
        raise DomainXMLError(f"domain XML has no <{tag}>")
    unit = element.get("unit", "KiB").lower()
    if unit not in MEMORY_UNITS:
        raise DomainXMLError(f"unknown {tag} unit {unit!r}")
    return _whole_number(element, tag) * MEMORY_UNITS[unit]


MAX_PLACEMENT_ITEMS = 4096
"""Guest cells, hugepage entries and host devices read from one definition: far beyond any real
guest; a definition with more is refused rather than read at every audit."""


def _placement(top: dict[str, ET.Element], devices: ET.Element | None) -> DomainPlacement:
    tuning = top.get("cputune")
    emulator = tuning.find("emulatorpin") if tuning is not None else None
    numatune = top.get("numatune")
    memory = numatune.find("memory") if numatune is not None else None
    backing = top.get("memoryBacking")
    hugepages = backing.find("hugepages") if backing is not None else None
    cpu = top.get("cpu")
    return DomainPlacement(
        emulator_pins=_cpuset_or_none(emulator.get("cpuset") if emulator is not None else None),
        guest_cells=tuple(_guest_cell(cell) for cell in _bounded(cpu, "numa/cell")),
        memory_nodes=_cpuset_or_none(memory.get("nodeset") if memory is not None else None),
        cell_memory_nodes={
            _attribute_number(node, "cellid"): _cpuset(node.get("nodeset"), "memnode nodeset")
            for node in _bounded(numatune, "memnode")
        },
        hugepages=_hugepages(hugepages),
        # Passthrough devices, and the VFs of SR-IOV ports (Neutron's vnic_type direct), which Nova
        # attaches as <interface type='hostdev'> and its PCI tracker holds as well.
        pci_addresses=tuple(
            address
            for element in (*_bounded(devices, "hostdev"), *_bounded(devices, "interface"))
            if (address := _pci_address(element))
        ),
        mdev_uuids=tuple(uuid for hostdev in _bounded(devices, "hostdev") if (uuid := _mdev_uuid(hostdev))),
    )


def _bounded(parent: ET.Element | None, path: str) -> list[ET.Element]:
    found = parent.findall(path) if parent is not None else []
    if len(found) > MAX_PLACEMENT_ITEMS:
        raise DomainXMLError(f"more than {MAX_PLACEMENT_ITEMS} <{path}> elements")
    return found


def _guest_cell(cell: ET.Element) -> GuestCell:
    unit = cell.get("unit", "KiB").lower()
    if unit not in MEMORY_UNITS:
        raise DomainXMLError(f"unknown guest cell memory unit {unit!r}")
    memory = cell.get("memory", "0").strip()
    if not memory.isdigit():
        raise DomainXMLError(f"guest cell memory is not a whole number: {memory!r}")
    return GuestCell(
        id=_attribute_number(cell, "id"),
        vcpus=_cpuset(cell.get("cpus"), "guest cell cpus"),
        memory_bytes=int(memory) * MEMORY_UNITS[unit],
    )


def _hugepages(hugepages: ET.Element | None) -> tuple[HugepageBacking, ...]:
    if hugepages is None:
        return ()
    pages = _bounded(hugepages, "page")
    if not pages:
        return (HugepageBacking(size_kib=None),)
    backings = []
    for page in pages:
        unit = page.get("unit", "KiB").lower()
        size = page.get("size", "").strip()
        if unit not in MEMORY_UNITS or not size.isdigit():
            raise DomainXMLError(f"unreadable hugepage size {size!r} {unit!r}")
        size_bytes = int(size) * MEMORY_UNITS[unit]
        nodeset = page.get("nodeset")
        backings.append(
            HugepageBacking(
                size_kib=size_bytes // 1024,
                guest_cells=_cpuset(nodeset, "hugepage nodeset") if nodeset else None,
            )
        )
    return tuple(backings)


def _pci_address(device: ET.Element) -> str | None:
    """`0000:3b:00.1` for a PCI passthrough (`<hostdev type='pci'>`) or a VF given to an SR-IOV
    port (`<interface type='hostdev'>`), as libvirt's node devices name addresses."""
    wanted = "pci" if device.tag == "hostdev" else "hostdev"
    if device.get("type") != wanted:
        return None
    address = device.find("source/address")
    if address is None or address.get("type", "pci") != "pci":
        return None
    try:
        parts = [int(address.get(key, "0"), 0) for key in ("domain", "bus", "slot", "function")]
    except ValueError:
        raise DomainXMLError(f"unreadable PCI address of a <{device.tag}>") from None
    return pci_address(*parts)


def _mdev_uuid(hostdev: ET.Element) -> str | None:
    if hostdev.get("type") != "mdev":
        return None
    address = hostdev.find("source/address")
    uuid = address.get("uuid") if address is not None else None
    return uuid.lower() if uuid else None


def _attribute_number(element: ET.Element, name: str) -> int:
    text = element.get(name, "").strip()
    if not text.isdigit():
        raise DomainXMLError(f"<{element.tag} {name}> is not a whole number: {text!r}")
    return int(text)


def _cpuset(spec: str | None, what: str) -> frozenset[int]:
    cpus = _cpuset_or_none(spec)
    if cpus is None:
        raise DomainXMLError(f"{what} is missing")
    return cpus


def _vcpu_pins(
    vcpu: ET.Element | None, tuning: ET.Element | None, vcpus: int
) -> tuple[frozenset[int] | None, ...]:
    """A `<vcpupin>` wins over the domain-wide `<vcpu cpuset=...>`, as in libvirt."""
    default = _cpuset_or_none(vcpu.get("cpuset") if vcpu is not None else None)
    pins: list[frozenset[int] | None] = [default] * vcpus
    for pin in tuning.iterfind("vcpupin") if tuning is not None else ():
        index = int(pin.get("vcpu", "-1"))
        if 0 <= index < vcpus:
            pins[index] = _cpuset_or_none(pin.get("cpuset"))
    return tuple(pins)


def _cpuset_or_none(spec: str | None) -> frozenset[int] | None:
    if not spec:
        return None
    try:
        return parse_cpu_set(spec)
    except ValueError:
        raise DomainXMLError(f"unreadable cpuset {spec!r}") from None


def _disk_reference(disk: ET.Element) -> DiskReference:
    kind = disk.get("type", "file")
    device = disk.get("device", "disk")
    target_element = disk.find("target")
    target = target_element.get("dev", "") if target_element is not None else ""
    source = disk.find("source")
    if source is None:
        return DiskReference(target=target, device=device, kind=kind)
    if kind == "network":
        return DiskReference(
            target=target, device=device, kind=kind, protocol=source.get("protocol"), path=source.get("name")
        )
    if kind == "volume":
        return DiskReference(
            target=target, device=device, kind=kind, pool=source.get("pool"), volume=source.get("volume")
        )
    path = source.get("file") or source.get("dev") or source.get("dir")
    return DiskReference(target=target, device=device, kind=kind, path=path)


NOVA_MAX_INT = 2**31 - 1
"""The largest flavor amount Nova's database holds."""
MAX_NOVA_ITEMS = 1024
"""Extra specs or image properties read from one domain's metadata: Nova's API bounds them far
lower; a definition with more is not Nova's, and reading it all would cost every audit."""


def _nova_instance(metadata: ET.Element | None) -> NovaInstance | None:
    instance = metadata.find(f"{_NOVA}instance") if metadata is not None else None
    flavor = instance.find(f"{_NOVA}flavor") if instance is not None else None
    if instance is None or flavor is None:
        return None
    root = instance.find(f"{_NOVA}root")
    return NovaInstance(
        flavor=_nova_flavor(flavor),
        image_properties=_named_values(instance.find(f"{_NOVA}image/{_NOVA}properties"), "property"),
        boot_from_volume=root is not None and root.get("type") == "volume",
        owner=_nova_owner(instance.find(f"{_NOVA}owner")),
    )


def _nova_flavor(flavor: ET.Element) -> NovaFlavor:
    def number(tag: str) -> int:
        text = flavor.findtext(f"{_NOVA}{tag}", default="0").strip() or "0"
        try:
            value = int(text)
        except ValueError:
            raise DomainXMLError(f"Nova flavor <{tag}> is not a whole number: {text!r}") from None
        if not 0 <= value <= NOVA_MAX_INT:
            raise DomainXMLError(f"Nova flavor <{tag}> is outside 0..{NOVA_MAX_INT}: {text!r}")
        return value

    return NovaFlavor(
        name=flavor.get("name", ""),
        vcpus=number("vcpus"),
        memory_mib=number("memory"),
        root_gib=number("disk"),
        ephemeral_gib=number("ephemeral"),
        swap_mib=number("swap"),
        extra_specs=_named_values(flavor.find(f"{_NOVA}extraSpecs"), "extraSpec"),
    )


def _named_values(parent: ET.Element | None, tag: str) -> dict[str, str]:
    """`<nova:extraSpec name="hw:cpu_policy">dedicated</nova:extraSpec>` and the like, by name."""
    if parent is None:
        return {}
    values: dict[str, str] = {}
    for index, element in enumerate(parent.iterfind(f"{_NOVA}{tag}")):
        if index >= MAX_NOVA_ITEMS:
            raise DomainXMLError(f"Nova metadata has more than {MAX_NOVA_ITEMS} <{tag}> elements")
        name = element.get("name")
        if name:
            values[name] = (element.text or "").strip()
    return values


def _nova_owner(owner: ET.Element | None) -> NovaOwner | None:
    if owner is None:
        return None
    user = owner.find(f"{_NOVA}user")
    project = owner.find(f"{_NOVA}project")
    return NovaOwner(
        project_id=project.get("uuid", "") if project is not None else "",
        project_name=(project.text or "").strip() if project is not None else "",
        user_id=user.get("uuid", "") if user is not None else "",
        user_name=(user.text or "").strip() if user is not None else "",
    )
