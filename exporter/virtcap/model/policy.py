"""What the operator decides for a hypervisor, as opposed to what it has: Nova's allocation
ratios and reserved amounts, its CPU sets, the inventories it declares, its PCI devices and
aliases, its mediated device types. Read by the whole-host accounting (capacity.py) and by the
fit within one host (host_fit.py) alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from virtcap.model.facts import DomainState
from virtcap.model.pci import PciAlias, PciDeviceSpec
from virtcap.model.resources import PLACEMENT_MAX_INT, STANDARD_CLASSES, Resource
from virtcap.model.vgpu import EnabledMdevType

STATES: tuple[DomainState, ...] = tuple(DomainState)

NOVA_ALLOCATION_RATIOS: Mapping[Resource, float] = {r: r.default_allocation_ratio for r in STANDARD_CLASSES}
NOVA_RESERVED: Mapping[Resource, int] = {r: r.default_reserved for r in STANDARD_CLASSES}


@dataclass(frozen=True, slots=True)
class Inventory:
    """An inventory the operator declares (a CUSTOM_* class: licences, FPGAs, local NVMe), in
    Placement's terms and the class's unit, as Nova's provider configuration declares one."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = PLACEMENT_MAX_INT
    """Placement's default where the operator declares none (Nova passes a declared inventory as
    written); Nova's own classes have max_unit = total instead."""
    step_size: int = 1
    allocation_ratio: float = 1.0


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """What the operator decided for a hypervisor, as opposed to what it has."""

    allocation_ratios: Mapping[Resource, float] = field(default_factory=lambda: dict(NOVA_ALLOCATION_RATIOS))
    reserved: Mapping[Resource, int] = field(default_factory=lambda: dict(NOVA_RESERVED))
    cpu_shared_set: frozenset[int] | None = None
    cpu_dedicated_set: frozenset[int] | None = None
    count_inactive_domains: bool = True
    inventories: Mapping[Resource, Inventory] = field(default_factory=dict)
    """Declared inventories of classes the hypervisor cannot measure (CUSTOM_*)."""
    reserved_huge_pages: Mapping[tuple[int, int], int] = field(default_factory=dict)
    """Nova's `reserved_huge_pages`: pages kept for the host, by (NUMA cell, page size in KiB)."""
    pci_device_spec: tuple[PciDeviceSpec, ...] = ()
    """Nova's `[pci] device_spec`: the host devices passed through, first match deciding."""
    enabled_mdev_types: tuple[EnabledMdevType, ...] = ()
    """Nova's `[devices] enabled_mdev_types`, in order, each with its `[mdev_<type>]` section:
    which mediated device type each physical GPU offers as vGPUs (see virtcap.model.vgpu)."""
    pci_aliases: Mapping[str, PciAlias] = field(default_factory=dict)
    """Nova's `[pci] alias` (the same on every hypervisor): what flavors ask for devices by."""

    @property
    def counted_states(self) -> frozenset[DomainState]:
        if self.count_inactive_domains:
            return frozenset(STATES)
        return frozenset(STATES) - {DomainState.SHUTOFF}


__all__ = ["NOVA_ALLOCATION_RATIOS", "NOVA_RESERVED", "STATES", "HostPolicy", "Inventory"]
