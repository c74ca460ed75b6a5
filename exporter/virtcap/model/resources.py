"""Resource classes: what a hypervisor offers and what domains and claims consume, as data.

Each class is Placement's resource class (VCPU, MEMORY_MB, CUSTOM_...) with what virtcap needs to
show and test it: the `resource` label value, the unit amounts are kept and shown in (cpus,
bytes, or a plain count), how many of those make one of Placement's units (a MiB, a GiB), Nova's
defaults, and the unit its claim test words a refusal in.

Adding a class is one place: a standard class is one entry in STANDARD_CLASSES, or in
DEVICE_CLASSES for one only some hypervisors have (and, if the hypervisor measures its total, the
reading of that total in the audit); a CUSTOM_* class needs no
code at all: it is an inventory in the configuration, consumed by Nova's `resources:CUSTOM_...`
extra specs and by claims.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

MIB = 1024**2
GIB = 1024**3

PLACEMENT_MAX_INT = 2**31 - 1
"""Placement's largest inventory amount, and its default max_unit."""

CUSTOM_PREFIX = "CUSTOM_"
CUSTOM_CLASS = re.compile(r"CUSTOM_[A-Z0-9_]{1,248}")
"""Placement's rule for custom class names (at most 255 characters in all)."""


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Resource:
    """One resource class. There is one object per class (the standard ones are constants, custom
    ones are interned by `custom_class`), so identity is equality and hashing is the interpreter's
    own: every audit looks classes up in dicts hundreds of times per hypervisor."""

    label: str
    """The `resource` label value and JSON key: `vcpu`, `memory`, `custom_fpga`."""
    placement_class: str
    """Placement's name of the class: `VCPU`, `MEMORY_MB`, `CUSTOM_FPGA`."""
    unit: str
    """What amounts are kept and shown in: `cpus`, `bytes`, or `integer` for a plain count."""
    placement_unit: int = 1
    """How many of our units make one of Placement's: MEMORY_MB counts MiB, DISK_GB counts GiB, and
    capacity is truncated in those units, not in bytes."""
    claim_unit: str = ""
    """The unit Nova's claim test words a refusal in ("Free memory 1024.00 MiB < ..."); the class's
    own name when empty."""
    default_allocation_ratio: float = 1.0
    default_reserved: int = 0

    VCPU: ClassVar[Resource]
    PCPU: ClassVar[Resource]
    MEMORY: ClassVar[Resource]
    DISK: ClassVar[Resource]
    VGPU: ClassVar[Resource]

    def __str__(self) -> str:
        return self.label

    @property
    def refusal_unit(self) -> str:
        return self.claim_unit or self.placement_class

    def __reduce__(self) -> tuple[object, tuple[str]]:
        """Unpickled as the one object of its class (the failure-tolerance worker gets host states
        pickled), never a copy that no dict lookup would find."""
        return resource_class, (self.placement_class,)

    @classmethod
    def custom_class(cls, name: str) -> Resource:
        """A CUSTOM_* class: a plain count, labelled by its name in lower case (as kube-state-metrics
        labels extended resources), with Placement's defaults."""
        with _INTERNING:
            interned = _CUSTOM_CLASSES.get(name)
            if interned is not None:
                return interned
            if not CUSTOM_CLASS.fullmatch(name):
                raise ValueError(
                    f"expected a custom resource class: CUSTOM_ and then capital letters, digits and _, "
                    f"got {name[:60]!r}"
                )
            created = cls(label=name.lower(), placement_class=name, unit="integer")
            _CUSTOM_CLASSES[name] = created
            return created


_CUSTOM_CLASSES: weakref.WeakValueDictionary[str, Resource] = weakref.WeakValueDictionary()
"""Custom classes by name while anything holds them: names come from domain metadata too, which
a hostile guest definition could fill with new ones, so none is kept for ever."""
_INTERNING = threading.Lock()
"""Audit threads and the event loop both meet classes: one object per name, whoever comes first."""

# Nova's defaults since release 27 (2023.1): see docs/accounting.md's table.
Amounts = Mapping[Resource, int]
"""An amount per resource (cpus, bytes or a count): a domain's allocation, a flavor's request, a
claim."""

Resource.VCPU = Resource("vcpu", "VCPU", "cpus", claim_unit="VCPU", default_allocation_ratio=4.0)
Resource.PCPU = Resource("pcpu", "PCPU", "cpus", claim_unit="PCPU")
Resource.MEMORY = Resource("memory", "MEMORY_MB", "bytes", MIB, "MiB", default_reserved=512 * MIB)
Resource.DISK = Resource("disk", "DISK_GB", "bytes", GIB, "GiB")

Resource.VGPU = Resource("vgpu", "VGPU", "integer")

STANDARD_CLASSES: tuple[Resource, ...] = (Resource.VCPU, Resource.PCPU, Resource.MEMORY, Resource.DISK)
"""The classes every hypervisor has an inventory of (or a known reason not to), in display order."""

DEVICE_CLASSES: tuple[Resource, ...] = (Resource.VGPU,)
"""Placement's standard classes of devices, which only some hypervisors have (VGPU: on physical
GPUs offering an enabled mediated device type, see virtcap.model.vgpu): listed where a hypervisor
offers or uses them, after the standard classes, never on every hypervisor."""

_KNOWN_CLASSES = STANDARD_CLASSES + DEVICE_CLASSES
_BY_LABEL = {resource.label: resource for resource in _KNOWN_CLASSES}
_BY_PLACEMENT_CLASS = {resource.placement_class: resource for resource in _KNOWN_CLASSES}


def resource_by_label(label: str) -> Resource:
    """A standard or device class by its label (`vcpu`, `vgpu`), as configuration keys and claim
    fields name it."""
    return _BY_LABEL[label]


def resource_class(name: str) -> Resource:
    """A class by Placement's name: a standard or device one, or a CUSTOM_* class. ValueError
    otherwise, naming the classes virtcap accounts."""
    standard = _BY_PLACEMENT_CLASS.get(name)
    if standard is not None:
        return standard
    if name.startswith(CUSTOM_PREFIX):
        return Resource.custom_class(name)
    known = ", ".join(_BY_PLACEMENT_CLASS)
    raise ValueError(f"expected one of {known} or a CUSTOM_* class, got {name[:60]!r}")


def display_order(resources: Iterable[Resource]) -> list[Resource]:
    """Standard classes first in their order, then device classes, then custom ones by name: the
    order of every listing."""
    found = set(resources)
    known = [r for r in _KNOWN_CLASSES if r in found]
    return known + sorted(found - set(_KNOWN_CLASSES), key=lambda r: r.label)


def placement_units(resource: Resource, amount: int) -> int:
    """An amount in Placement's unit of the class, rounded up: an allocation is whole MiB or GiB."""
    unit = resource.placement_unit
    return -(-amount // unit)


class ResourceRequest(Mapping[Resource, int]):
    """What one instance asks for: its request groups (the unsuffixed one and Placement's granular
    `resources<suffix>:` ones), and, as a mapping, their amounts summed, which is what the
    instance is allocated on one provider. Placement's allocation candidates hold each group to
    min_unit, max_unit and step_size on its own, so a fit test needs the groups."""

    __slots__ = ("_total", "groups")

    def __init__(self, groups: Iterable[Mapping[Resource, int]]) -> None:
        self.groups: tuple[Mapping[Resource, int], ...] = tuple(dict(group) for group in groups if group)
        total: dict[Resource, int] = {}
        for group in self.groups:
            for resource, amount in group.items():
                total[resource] = total.get(resource, 0) + amount
        self._total = total

    def __getitem__(self, resource: Resource) -> int:
        return self._total[resource]

    def __iter__(self) -> Iterator[Resource]:
        return iter(self._total)

    def __len__(self) -> int:
        return len(self._total)

    def __repr__(self) -> str:
        return f"ResourceRequest({list(self.groups)!r})"


def request_groups(request: Mapping[Resource, int]) -> tuple[Mapping[Resource, int], ...]:
    """The groups of a request; a plain mapping is one group."""
    return request.groups if isinstance(request, ResourceRequest) else (request,)
