"""The shape of the YAML configuration file, as pydantic models: what each key may hold.

Kept apart from the merge (virtcap.config.load) so that the file's contract can be read in
one place, and so that other bodies (the claims API) can reuse its quantity types.

Everything is bounded, so that a hostile or mistaken file is refused quickly and cheaply: the
file itself (size, nesting, aliases: see virtcap.config.yamlfile), every quantity (see virtcap.units),
every whole number and string below, and the CPUs named by all CPU sets together.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Annotated, ClassVar, Literal, Self
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationInfo,
    field_validator,
    model_validator,
)

from virtcap.config.bcrypt_hash import BcryptHash
from virtcap.config.placement import PlacementSection
from virtcap.config.section import MAX_NAME_CHARS, MAX_PATH_CHARS, MAX_URI_CHARS, Duration
from virtcap.model.nova import extra_spec_problems
from virtcap.model.pci import (
    DEVICE_TYPES,
    NUMA_POLICIES,
    AddressGlob,
    AddressPatterns,
    PciAlias,
    PciDeviceSpec,
)
from virtcap.model.resources import CUSTOM_CLASS, PLACEMENT_MAX_INT
from virtcap.model.sharding import MAX_SHARDS
from virtcap.model.vgpu import EnabledMdevType
from virtcap.units import (
    MAX_CPU,
    MAX_QUANTITY_CHARS,
    MAX_RATIO,
    brief_repr,
    parse_cpu_set,
    parse_ratio,
    parse_size,
)

__all__ = [
    "AllocationRatios",
    "AuditSettings",
    "ClaimSettings",
    "ConfigFile",
    "CpuSet",
    "DevicesSection",
    "DiskSource",
    "Duration",
    "ExpositionSection",
    "FlavorSection",
    "Groups",
    "HostGroupSection",
    "HypervisorSection",
    "MaintenanceSection",
    "MdevTypeSection",
    "Name",
    "OwnershipSection",
    "PciAliasSection",
    "PciDeviceSpecSection",
    "PciSection",
    "PolicySection",
    "Ratio",
    "ReclaimSettings",
    "Reserved",
    "ShardingSection",
    "Size",
    "validate_document",
]

MAX_CONCURRENCY = 1024
MAX_KEEPALIVE_COUNT = 100
MAX_RESYNC_EVERY = 1000
"""A full audit at least every thousand: the bound on how long a change no event tells of (a
volume resized under an unchanged domain) can go unseen by incremental audits."""
MAX_HOST_CPUS = MAX_CPU + 1
MAX_FLAVOR_CPUS = 1_000_000
"""As for claims in the HTTP API."""
MAX_CONFIG_CPUS = 2**18
"""CPUs named by all CPU sets together, each distinct spelling counted once: a set is a Python
frozenset of up to 65536 numbers, so a thousand hypervisors each with its own large set would
cost gigabytes."""


def _cpu_set(value: object, info: ValidationInfo) -> frozenset[int]:
    budget = info.context.get(_CpuBudget.KEY) if isinstance(info.context, dict) else None
    return budget.parse(value) if isinstance(budget, _CpuBudget) else parse_cpu_set(value)


@dataclass
class _CpuBudget:
    """The CPUs the CPU sets of one configuration may still name; repeated spellings share one set."""

    KEY = "cpu_budget"
    remaining: int = MAX_CONFIG_CPUS
    known: dict[object, frozenset[int]] = field(default_factory=dict)

    def parse(self, value: object) -> frozenset[int]:
        key = value if isinstance(value, str | int) and not isinstance(value, bool) else None
        if key is not None and key in self.known:
            return self.known[key]
        # Once spent, no more sets are built: a set is never empty, so each would overspend.
        cpus = parse_cpu_set(value) if self.remaining >= 0 else frozenset()
        self.remaining -= max(len(cpus), 1)
        if self.remaining < 0:
            raise ValueError(
                f"the CPU sets of this configuration name more than {MAX_CONFIG_CPUS} CPUs in all "
                "(each distinct set counted once); expected at most that"
            )
        if key is not None:
            self.known[key] = cpus
        return cpus


Size = Annotated[int, BeforeValidator(parse_size)]
Ratio = Annotated[float, BeforeValidator(parse_ratio)]
# PlainValidator: pydantic would otherwise copy each set, validating up to 65536 numbers again.
CpuSet = Annotated[frozenset[int], PlainValidator(_cpu_set)]
Name = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSettings(_Section):
    interval: Duration = 30.0
    timeout: Duration = 10.0
    concurrency: int = Field(default=32, ge=1, le=MAX_CONCURRENCY)
    stale_after: Duration | None = None
    """How long the data of a failing hypervisor is still served (default: 3 intervals)."""
    keepalive_interval: Duration = 5.0
    keepalive_count: int = Field(default=3, ge=1, le=MAX_KEEPALIVE_COUNT)
    incremental: bool = True
    """Between full audits, re-read only the domains that are new, changed state, or that events
    marked changed (virtcap.audit.domain_cache); false reads every domain at every audit."""
    resync_every: int = Field(default=10, ge=1, le=MAX_RESYNC_EVERY)
    """With incremental audits, every N-th audit of a connection is a full one (1: always full)."""

    @property
    def staleness_bound(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval


class AllocationRatios(_Section):
    KEY_NOUN: ClassVar[str] = "resource"
    """What an unknown key is called in error messages (see virtcap.config.errors)."""

    vcpu: Ratio | None = None
    memory: Ratio | None = None
    disk: Ratio | None = None
    pcpu: float | None = None

    @model_validator(mode="after")
    def _pcpu_is_fixed(self) -> Self:
        if self.pcpu is not None and self.pcpu not in (0.0, 1.0):
            raise ValueError(
                "the pcpu allocation ratio is fixed at 1.0: dedicated CPUs are never overcommitted"
            )
        return self


class Reserved(_Section):
    KEY_NOUN: ClassVar[str] = "resource"
    """What an unknown key is called in error messages (see virtcap.config.errors)."""

    vcpu: int | None = Field(default=None, ge=0, le=MAX_HOST_CPUS)
    memory: Size | None = None
    disk: Size | None = None


class DiskSource(_Section):
    pool: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    path: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.pool is None) == (self.path is None):
            raise ValueError(
                "expected exactly one of 'pool' (a libvirt storage pool) or 'path' (a local directory)"
            )
        if self.path is not None and not self.path.startswith("/"):
            raise ValueError(f"expected an absolute path, got {brief_repr(self.path)}")
        return self


MAX_INVENTORY_AMOUNT = PLACEMENT_MAX_INT
"""Placement's bound on every inventory amount: it stores them as 32-bit integers."""
MAX_CUSTOM_CLASSES = 64


class InventorySection(_Section):
    """A custom class's inventory, in Placement's terms (as Nova's provider configuration
    declares one): amounts are whole units of the class."""

    total: int = Field(ge=1, le=MAX_INVENTORY_AMOUNT)
    reserved: int = Field(default=0, ge=0, le=MAX_INVENTORY_AMOUNT)
    min_unit: int = Field(default=1, ge=1, le=MAX_INVENTORY_AMOUNT)
    max_unit: int = Field(default=PLACEMENT_MAX_INT, ge=1, le=MAX_INVENTORY_AMOUNT)
    """Placement's default, not the total: a declared inventory is passed to Placement as written,
    and one allocation may then exceed the total where the ratio allows it."""
    step_size: int = Field(default=1, ge=1, le=MAX_INVENTORY_AMOUNT)
    allocation_ratio: Ratio = 1.0

    @model_validator(mode="after")
    def _units_agree(self) -> Self:
        if self.max_unit < self.min_unit:
            raise ValueError(f"max_unit {self.max_unit} is below min_unit {self.min_unit}")
        if self.allocation_ratio == 0:
            raise ValueError("expected an allocation_ratio above 0")
        return self


def _custom_class_names(value: object) -> object:
    if isinstance(value, dict):
        if len(value) > MAX_CUSTOM_CLASSES:
            raise ValueError(f"expected at most {MAX_CUSTOM_CLASSES} custom classes, got {len(value)}")
        for name in value:
            if not isinstance(name, str) or not CUSTOM_CLASS.fullmatch(name):
                raise ValueError(
                    f"expected custom resource class names (CUSTOM_ and then capital letters, digits "
                    f"and _; the standard classes come from the host), got {brief_repr(name, 60)}"
                )
    return value


Inventories = Annotated[dict[str, InventorySection], BeforeValidator(_custom_class_names)]


MAX_RESERVED_PAGE_ENTRIES = 1024


def _page_size_kib(value: object) -> object:
    """Nova reads a page size as KiB when it is a bare number, else as a size with its unit."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    size = parse_size(value)
    if size % 1024:
        raise ValueError(f"expected a page size in whole KiB, got {brief_repr(value)}")
    return size // 1024


class ReservedHugePages(_Section):
    """One entry of Nova's `reserved_huge_pages`: `node:0,size:2048,count:64`."""

    node: int = Field(ge=0, le=MAX_CPU)
    size: Annotated[int, BeforeValidator(_page_size_kib), Field(ge=4, le=2**40)]
    """KiB as a bare number (2048), or a size (2MiB, 1GiB)."""
    count: int = Field(ge=0, le=PLACEMENT_MAX_INT)


MAX_PCI_ENTRIES = 1024
MAX_PCI_TEXT = 255
_PCI_ID = re.compile(r"[0-9a-fA-F]{4}")


def _pci_id(value: object) -> str:
    """4 hex digits; YAML reads `8086` as a number, which is taken as written."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _PCI_ID.fullmatch(text):
        raise ValueError(
            f"expected 4 hex digits (quoted when they start with 0), got {brief_repr(value, 40)}"
        )
    return text.lower()


PciId = Annotated[str, PlainValidator(_pci_id)]
"""A vendor or product id: 4 hex digits."""
PciText = Annotated[str, Field(min_length=1, max_length=MAX_PCI_TEXT)]


def _pci_address(value: object) -> str | dict[str, str]:
    """A glob string, or a mapping of regular expressions per field, checked as Nova reads them."""
    if isinstance(value, str) and 0 < len(value) <= MAX_PCI_TEXT:
        AddressGlob.parse(value)
        return value
    if isinstance(value, dict) and all(isinstance(v, str) and len(v) <= MAX_PCI_TEXT for v in value.values()):
        AddressPatterns.parse(value)
        return dict(value)
    raise ValueError(
        "expected a string of * globs (`*:3b:02.*`) or a mapping of domain, bus, slot and "
        f"function to regular expressions (strings of at most {MAX_PCI_TEXT} characters), "
        f"got {brief_repr(value, 60)}"
    )


class PciDeviceSpecSection(_Section):
    """One entry of Nova's `[pci] device_spec`: the devices it allows, and their tags."""

    vendor_id: PciId | None = None
    """Any vendor when left out."""
    product_id: PciId | None = None
    address: Annotated[str | dict[str, str], PlainValidator(_pci_address)] | None = None
    """`*:3b:02.*` (globs; a missing field is `*`), or {domain, bus, slot, function} of regular
    expressions. Naming one SR-IOV physical function allows its virtual functions too."""
    devname: str | None = None
    physical_network: PciText | None = None
    remote_managed: bool | None = None
    resource_class: PciText | None = None
    traits: PciText | None = None

    @model_validator(mode="after")
    def _nova_reads_it(self) -> Self:
        if self.devname is not None:
            raise ValueError(
                "devname is not supported (Nova resolves it through the host's sysfs); "
                "expected the device's address, or vendor_id and product_id"
            )
        return self

    def spec(self) -> PciDeviceSpec:
        return PciDeviceSpec.from_entry(self.model_dump(exclude_none=True))


class PciAliasSection(_Section):
    """One entry of Nova's `[pci] alias`: a name flavors ask for devices by
    (`pci_passthrough:alias: NAME:COUNT`)."""

    name: Annotated[
        str, Field(min_length=1, max_length=MAX_PCI_TEXT, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
    ]
    vendor_id: PciId
    product_id: PciId
    device_type: Literal[DEVICE_TYPES] | None = None  # type: ignore[valid-type]
    numa_policy: Literal[NUMA_POLICIES] = "legacy"  # type: ignore[valid-type]

    def alias(self) -> PciAlias:
        return PciAlias(**self.model_dump())


def _unique_alias_names(aliases: list[PciAliasSection]) -> list[PciAliasSection]:
    seen: set[str] = set()
    for alias in aliases:
        if alias.name in seen:
            raise ValueError(f"the alias name {brief_repr(alias.name)} is used twice; expected unique names")
        seen.add(alias.name)
    return aliases


class PciSection(_Section):
    alias: Annotated[
        list[PciAliasSection], Field(max_length=MAX_PCI_ENTRIES), AfterValidator(_unique_alias_names)
    ] = []


MAX_MDEV_TYPES = 64
_GPU_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_LOOSE_PCI_ADDRESS = re.compile(
    r"\s*(?:([0-9a-fA-F]{1,4}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*"
)


def _gpu_address(value: object) -> str:
    """Nova compares `device_addresses` as written with the address it derives from libvirt's
    device name (lower case, zero-padded): another spelling of the same address would silently
    name no GPU, so it is refused with the spelling that works."""
    if isinstance(value, str) and _GPU_ADDRESS.fullmatch(value):
        return value
    loose = _LOOSE_PCI_ADDRESS.fullmatch(value) if isinstance(value, str) else None
    if loose is not None:
        domain, bus, slot, function = (int(part or "0", 16) for part in loose.groups())
        canonical = f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"
        raise ValueError(
            f"expected the address as libvirt writes it, {canonical!r} (Nova compares it as written), "
            f"got {brief_repr(value, 40)}"
        )
    raise ValueError(f"expected a GPU's PCI address such as '0000:84:00.0', got {brief_repr(value, 40)}")


GpuAddress = Annotated[str, PlainValidator(_gpu_address)]
MdevTypeName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:+-]*$")
]
"""A mediated device type as libvirt names it: `nvidia-35`, `i915-GVTg_V5_4`."""


class MdevTypeSection(_Section):
    """Nova's `[mdev_<type>]` section of one enabled type."""

    device_addresses: list[GpuAddress] = Field(default=[], max_length=MAX_PCI_ENTRIES)
    """The GPUs offering this type; none: the type is the default of every GPU no other type
    names (the first such enabled type only)."""
    max_instances: int | None = Field(default=None, ge=1, le=PLACEMENT_MAX_INT)
    """At most this many vGPUs of the type on the hypervisor."""


class DevicesSection(_Section):
    """Nova's `[devices]` and its `[mdev_<type>]` sections: the mediated device types offered as
    vGPUs. A hypervisor's own section replaces that of `defaults`, as a nova.conf replaces another."""

    enabled_mdev_types: list[MdevTypeName] = Field(default=[], max_length=MAX_MDEV_TYPES)
    mdev_types: dict[MdevTypeName, MdevTypeSection] = Field(default={}, max_length=MAX_MDEV_TYPES)
    """Per enabled type, Nova's `[mdev_<type>]` section: `device_addresses`, `max_instances`."""

    @model_validator(mode="after")
    def _as_nova_starts(self) -> Self:
        enabled = set()
        for type_id in self.enabled_mdev_types:
            if type_id in enabled:
                raise ValueError(
                    f"enabled_mdev_types: {brief_repr(type_id, 60)} is listed twice; expected each type once"
                )
            enabled.add(type_id)
        owners: dict[str, str] = {}
        for type_id, section in self.mdev_types.items():
            if type_id not in enabled:
                raise ValueError(
                    f"mdev_types: {brief_repr(type_id, 60)} is not in enabled_mdev_types; "
                    "expected sections of enabled types only"
                )
            for address in section.device_addresses:
                owner = owners.setdefault(address, type_id)
                if owner != type_id or section.device_addresses.count(address) > 1:
                    raise ValueError(
                        f"mdev_types.{type_id}.device_addresses: {address} is named twice "
                        f"(also by {owner}); Nova refuses to start with a GPU of two types"
                    )
        return self

    def enabled(self) -> tuple[EnabledMdevType, ...]:
        sections = self.mdev_types
        return tuple(
            EnabledMdevType(
                type_id=type_id,
                device_addresses=tuple(sections[type_id].device_addresses) if type_id in sections else (),
                max_instances=sections[type_id].max_instances if type_id in sections else None,
            )
            for type_id in self.enabled_mdev_types
        )


AVAILABILITY_ZONE = "availability_zone"
"""The group kind Nova's scheduler keeps an instance in (see virtcap.model.scheduler)."""
MAX_GROUP_KINDS = 16
MAX_GROUPS_PER_KIND = 64
MAX_HOST_GROUPS = 4096
"""Entries of `host_groups`: a group policy for every rack of a very large fleet."""
MAX_KIND_CHARS = 63
_GROUP_KIND = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_KIND_CHARS - 1}}}")
_GROUP_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.:@-]{{0,{MAX_NAME_CHARS - 1}}}")


def _group_kind(value: object) -> str:
    if not isinstance(value, str) or not _GROUP_KIND.fullmatch(value):
        raise ValueError(
            f"expected a group kind of lower-case letters, digits and _ (availability_zone, "
            f"aggregate, rack, ...), starting with a letter, at most {MAX_KIND_CHARS} characters, "
            f"got {brief_repr(value, 60)}"
        )
    return value


def _group_name(value: object, kind: str = "") -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**18:
        value = str(value)  # YAML reads `rack: 12` as a number: the rack is named "12"
    if not isinstance(value, str) or not _GROUP_NAME.fullmatch(value):
        where = f"{kind}: " if kind else ""
        raise ValueError(
            f"{where}expected a group name of letters, digits and . _ - : @ (at most "
            f"{MAX_NAME_CHARS} characters), got {brief_repr(value, 60)}"
        )
    return value


def _lone_group_name(value: object) -> str:
    return _group_name(value)


def _groups(value: object) -> dict[str, tuple[str, ...]]:
    """`{kind: name}` or `{kind: [names]}`, read as kind -> names. A host is in one availability
    zone at most, as Nova refuses to put a host in two."""
    if not isinstance(value, dict):
        raise ValueError(
            f"expected a mapping of group kind to a group name or a list of names, got {brief_repr(value)}"
        )
    if len(value) > MAX_GROUP_KINDS:
        raise ValueError(f"expected at most {MAX_GROUP_KINDS} group kinds, got {len(value)}")
    groups: dict[str, tuple[str, ...]] = {}
    for raw_kind, raw_names in value.items():
        kind = _group_kind(raw_kind)
        listed = raw_names if isinstance(raw_names, list) else [raw_names]
        if len(listed) > MAX_GROUPS_PER_KIND:
            raise ValueError(f"{kind}: expected at most {MAX_GROUPS_PER_KIND} groups, got {len(listed)}")
        names = tuple(_group_name(name, kind) for name in listed)
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"{kind}: {brief_repr(twice[0], 60)} is listed twice; expected each group once")
        if kind == AVAILABILITY_ZONE and len(names) > 1:
            raise ValueError(
                f"{kind}: a hypervisor is in one availability zone at most, as in Nova; got "
                f"{len(names)}: {brief_repr(', '.join(names), 80)}"
            )
        groups[kind] = names
    return groups


Groups = Annotated[dict[str, tuple[str, ...]], PlainValidator(_groups)]
"""Group kind -> the names of the groups of that kind a hypervisor is in (none: an empty list)."""


class HostGroupSection(_Section):
    """The policy of one group, applied to its members between `defaults` and their own keys (as
    Nova's aggregate metadata once set allocation ratios). A member of several groups that set
    the same key gets the smallest ratio (Nova's aggregate filters took the minimum over a host's
    aggregates) and the largest reserved amount (the most kept for the host)."""

    kind: Annotated[str, PlainValidator(_group_kind)]
    name: Annotated[str, PlainValidator(_lone_group_name)]
    allocation_ratios: AllocationRatios | None = None
    reserved: Reserved | None = None


def _unique_groups(sections: list[HostGroupSection]) -> list[HostGroupSection]:
    seen: set[tuple[str, str]] = set()
    for section in sections:
        if (section.kind, section.name) in seen:
            raise ValueError(
                f"the {section.kind} {brief_repr(section.name, 60)} has two entries; expected one per group"
            )
        seen.add((section.kind, section.name))
    return sections


class PolicySection(_Section):
    """The keys of `defaults`, each of which a hypervisor may override."""

    allocation_ratios: AllocationRatios | None = None
    reserved: Reserved | None = None
    cpu_shared_set: CpuSet | None = None
    cpu_dedicated_set: CpuSet | None = None
    disk: DiskSource | None = None
    count_inactive_domains: bool | None = None
    inventories: Inventories | None = None
    """CUSTOM_* classes the hypervisor offers (licences, FPGAs, local NVMe), by class name; a
    hypervisor's own entries are added to those of `defaults`, class by class."""
    reserved_huge_pages: list[ReservedHugePages] | None = Field(
        default=None, max_length=MAX_RESERVED_PAGE_ENTRIES
    )
    """Hugepages kept for the host per NUMA cell and page size; a hypervisor's own list replaces
    that of `defaults`, as a nova.conf replaces another."""
    pci_device_spec: list[PciDeviceSpecSection] | None = Field(default=None, max_length=MAX_PCI_ENTRIES)
    """Nova's `[pci] device_spec`: the host devices passed through; a hypervisor's own list
    replaces that of `defaults`."""
    devices: DevicesSection | None = None
    """Nova's `[devices] enabled_mdev_types` with the `[mdev_<type>]` sections: the vGPUs the
    physical GPUs offer; a hypervisor's own section replaces that of `defaults`."""
    groups: Groups | None = None
    """The groups the hypervisor is in, per kind; a hypervisor's own kinds replace those of
    `defaults` kind by kind (`rack: []` leaves the rack of `defaults` out)."""

    @model_validator(mode="before")
    @classmethod
    def _empty_cpu_sets_are_unset(cls, data: object) -> object:
        """Nova reads an empty CPU set option as unset."""
        if isinstance(data, dict):
            empty = [key for key in ("cpu_shared_set", "cpu_dedicated_set") if data.get(key) == ""]
            if empty:
                return {key: value for key, value in data.items() if key not in empty}
        return data


MAX_REASON_CHARS = 500
_RFC_3339 = "an RFC 3339 time with a time zone, such as 2026-11-23T18:00:00Z"


def parse_reason(value: object) -> str:
    """A maintenance reason: one line of printable text, shown in answers and logs."""
    if not isinstance(value, str):
        raise ValueError(f"expected a reason as text, got {brief_repr(value)}")
    text = value.strip()
    if not text or len(text) > MAX_REASON_CHARS or not text.isprintable():
        raise ValueError(
            f"expected a reason of 1 to {MAX_REASON_CHARS} printable characters on one line, "
            f"got {brief_repr(value)}"
        )
    return text


def parse_time(value: object) -> float:
    """An RFC 3339 time with its zone (YAML reads an unquoted one as a datetime), as seconds
    since the epoch: a time without a zone would mean another moment on every machine."""
    if isinstance(value, str) and len(value) <= MAX_QUANTITY_CHARS:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"expected {_RFC_3339}, got {brief_repr(value)}") from None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        if isinstance(value, datetime):
            what = f"{value.isoformat()}, without a time zone"
        elif isinstance(value, date):
            what = f"{value.isoformat()}, a date without a time"
        else:
            what = brief_repr(value)
        raise ValueError(f"expected {_RFC_3339}, got {what}")
    return value.timestamp()


MaintenanceReason = Annotated[str, PlainValidator(parse_reason)]
MaintenanceTime = Annotated[float, PlainValidator(parse_time)]


class MaintenanceSection(_Section):
    """A hypervisor in maintenance: `maintenance: {reason: ..., until: ...}`, or
    `maintenance: true` without a reason."""

    reason: MaintenanceReason | None = None
    until: MaintenanceTime | None = None
    """When it ends by itself; past it, the hypervisor is in service again."""


def _maintenance_shorthand(value: object) -> object:
    if value is True:
        return {}
    if value is False or value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"expected true, false or a mapping of reason and until, got {brief_repr(value)}")
    return value


class HypervisorSection(PolicySection):
    name: Name
    uri: str = Field(min_length=1, max_length=MAX_URI_CHARS)
    maintenance: Annotated[MaintenanceSection | None, BeforeValidator(_maintenance_shorthand)] = None
    """Per hypervisor only (never in `defaults`): it offers nothing while in maintenance."""
    placement_provider: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    """Its root resource provider in Placement, by name or UUID, where it is not named after the
    hypervisor's hostname (as Nova names a compute node's)."""


MAX_EXTRA_SPECS = 128
ExtraSpecText = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


class FlavorSection(_Section):
    name: Name
    vcpu: int = Field(default=0, ge=0, le=MAX_FLAVOR_CPUS)
    pcpu: int = Field(default=0, ge=0, le=MAX_FLAVOR_CPUS)
    memory: Size
    disk: Size = 0
    extra_specs: dict[ExtraSpecText, ExtraSpecText] = Field(default={}, max_length=MAX_EXTRA_SPECS)
    """Nova's flavor extra specs, read as Nova's scheduler reads them: `hw:cpu_policy`,
    `hw:cpu_dedicated_mask`, `hw:emulator_threads_policy`, `resources[N]:CLASS`..."""

    @model_validator(mode="after")
    def _requests_cpus(self) -> Self:
        if self.vcpu == 0 and self.pcpu == 0:
            raise ValueError("a flavor requests at least one vcpu or pcpu")
        if self.extra_specs and self.pcpu:
            raise ValueError(
                "a flavor with extra_specs asks for dedicated CPUs as Nova does: vcpu with "
                "hw:cpu_policy: dedicated, not pcpu"
            )
        problems = extra_spec_problems(self.vcpu, self.extra_specs)
        if problems:
            raise ValueError(f"extra_specs: {'; '.join(problems)}")
        return self


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class ClaimSettings(_Section):
    database: str = Field(default="/var/lib/virtcap/claims.sqlite", min_length=1, max_length=MAX_PATH_CHARS)
    """A SQLite file, or a `postgresql://` URL of a ledger shared by replicas (claims/postgres.py)."""
    password_file: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)
    """A file whose content is the PostgreSQL password, read at start (beside libpq's PGPASSWORD
    and PGPASSFILE): never in the URL, which shows in logs."""
    default_ttl: Duration = 900.0
    max_ttl: Duration = 86400.0
    writers: dict[str, BcryptHash] = {}
    """User name to bcrypt hash: who may create and delete claims (read-only scrapes never can)."""
    admins: list[str] = Field(default=[], max_length=1000)
    """Writers who may delete any writer's claim; the others delete their own only."""

    @field_validator("database")
    @classmethod
    def _no_password(cls, value: str) -> str:
        if value.lower().startswith(_POSTGRES_SCHEMES) and _url_password(value):
            raise ValueError(
                "the URL carries a password, which would show wherever the URL does; give it through "
                "PGPASSWORD, PGPASSFILE or claims.password_file"
            )
        return value

    @field_validator("admins")
    @classmethod
    def _admins_are_writers(cls, value: list[str], info: ValidationInfo) -> list[str]:
        writers = info.data.get("writers")
        if writers is None:
            return value  # claims.writers is refused on its own: its error says what is wrong
        unknown = [name for name in value if name not in writers]
        if unknown:
            known = ", ".join(sorted(writers)) or "none (claims.writers is empty)"
            named = ", ".join(brief_repr(name) for name in unknown)
            raise ValueError(f"expected names of claims.writers ({known}), got {named}")
        return value

    @property
    def shared(self) -> bool:
        """The database is a PostgreSQL URL."""
        return self.database.lower().startswith(_POSTGRES_SCHEMES)

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if self.default_ttl > self.max_ttl:
            raise ValueError("default_ttl is longer than max_ttl")
        return self


def _url_password(url: str) -> bool:
    """A password in the URL's user part or among its parameters."""
    parts = urlsplit(url)
    try:
        password = parts.password
    except ValueError:
        password = None
    return password is not None or any(key.lower() == "password" for key, _ in parse_qsl(parts.query))


def parse_multiplier(value: object) -> float:
    """A weigher's multiplier: a finite number from -MAX_RATIO to MAX_RATIO (negative: stack)."""
    bound = f"expected a finite number from {-MAX_RATIO:g} to {MAX_RATIO:g}"
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {brief_repr(value)}")
    if isinstance(value, int) and not -MAX_RATIO <= value <= MAX_RATIO:
        raise ValueError(f"{bound}, got {brief_repr(value)}")  # compared as an int: no OverflowError
    if isinstance(value, str):
        try:
            number = float(value) if len(value) <= MAX_QUANTITY_CHARS else math.nan
        except ValueError:
            raise ValueError(f"expected a number, got {brief_repr(value)}") from None
    else:
        number = float(value)
    if not math.isfinite(number) or not -MAX_RATIO <= number <= MAX_RATIO:
        raise ValueError(f"{bound}, got {brief_repr(value)}")
    return number


Multiplier = Annotated[float, BeforeValidator(parse_multiplier)]


class WeighersSection(_Section):
    """Nova's `[filter_scheduler] ram_weight_multiplier`, `cpu_weight_multiplier` and
    `disk_weight_multiplier`: 1.0 spreads (Nova's default), a negative multiplier stacks, 0 turns
    the weigher off."""

    ram: Multiplier = 1.0
    cpu: Multiplier = 1.0
    disk: Multiplier = 1.0


MAX_HOST_FAILURES = 16
"""Each host lost together is one more evacuation of them all after every change: a bound keeps
the background work bounded, and a fleet that can lose 16 hosts at once hardly needs more told."""


class FailureToleranceSettings(_Section):
    """Whether each hypervisor's domains can be re-homed on the others, and how many hypervisors
    the fleet can lose together, computed in the background after audits change."""

    enabled: bool = True
    max_host_failures: int = Field(default=3, ge=0, le=MAX_HOST_FAILURES)
    """The most hypervisors lost together that are simulated (0: each one alone only)."""
    reserve_host_failures: int = Field(default=1, ge=0, le=MAX_HOST_FAILURES, strict=True)
    """The hypervisors lost together that the sellable headroom keeps room for: a flavor's
    sellable instances are those the fleet can still take while tolerating this many failures
    (model/packing/sellable.py; 0: every schedulable instance). A reserve larger than the fleet
    is valid and leaves nothing sellable."""


class SchedulerSection(_Section):
    weighers: WeighersSection = WeighersSection()
    failure_tolerance: FailureToleranceSettings = FailureToleranceSettings()


_XML_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _namespace_uri(value: str) -> str:
    if not value or any(character.isspace() or character in "{}" for character in value):
        raise ValueError(f"expected a namespace URI without spaces or braces, got {brief_repr(value, 60)}")
    return value


def _element_path(value: str) -> str:
    if not all(_XML_NAME.fullmatch(step) for step in value.split("/")):
        raise ValueError(
            "expected an element's name, or a path of names joined by / (owner/project), "
            f"got {brief_repr(value, 60)}"
        )
    return value


def _attribute_name(value: str) -> str:
    if not _XML_NAME.fullmatch(value):
        raise ValueError(
            f"expected an attribute's name (letters, digits, _ . -), got {brief_repr(value, 60)}"
        )
    return value


class OwnershipSection(_Section):
    """Where domains that Nova did not define say whose they are, in their `<metadata>`: an element
    in a namespace of the operator's, such as `<x:owner xmlns:x="NAMESPACE"><x:project id="ID">NAME
    </x:project></x:owner>`. Nova's own owner metadata always comes first."""

    metadata_namespace: Annotated[str, Field(max_length=MAX_URI_CHARS), AfterValidator(_namespace_uri)]
    """The namespace URI of the element and of each element on its path."""
    element: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_element_path)] = "project"
    """The element below `<metadata>`: a local name, or a path of them (`owner/project`)."""
    id_attribute: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_attribute_name)] = "id"
    """The attribute holding the project's id; where it is absent the element's text is the id.
    The element's text is the project's name."""


MAX_TOP_PROJECTS = 1000


class ExpositionSection(_Section):
    """What /metrics shows beyond the hypervisors' own series: bounded, since each project and
    each domain is a series per resource."""

    domains: bool = False
    """Per-domain allocation and info series (`hypervisor_domain_allocated`, `hypervisor_domain_info`):
    one series per domain and resource; `virtcap serve --collector.domains` turns them on too."""
    top_projects: int = Field(default=20, ge=0, le=MAX_TOP_PROJECTS)
    """The projects with the most allocated memory fleet-wide get series of their own; the others
    are summed as `project_id="other"`. 0: no project series."""


class ShardingSection(_Section):
    """This exporter's part of a fleet split among several (kube-state-metrics' `--shard` and
    `--total-shards`): it audits and serves only the hypervisors a consistent hash of their names
    assigns to shard `shard` (virtcap.model.sharding). That shard is below `total_shards`: checked
    with the flags, which override these keys (virtcap.config.load.select_shard)."""

    shard: int = Field(default=0, ge=0, lt=MAX_SHARDS)
    """This exporter's shard, numbered from 0."""
    total_shards: int = Field(default=1, ge=1, le=MAX_SHARDS)
    """How many exporters share the fleet (1: one exporter audits every hypervisor)."""


WEEK = 7 * 24 * 3600.0


class ReclaimSettings(_Section):
    """When a domain's allocation counts as reclaimable (docs/reclaim.md): shut off for longer
    than `shutoff_after`, or running with its CPU use below `idle_cpu_below` of its vCPUs for
    `idle_for`. The windows go down to seconds so that tests can run them."""

    shutoff_after: Duration = WEEK
    """How long a domain stays shut off before its allocation is reclaimable (default 168h)."""
    idle_cpu_below: float = Field(default=0.05, gt=0.0, le=1.0, allow_inf_nan=False)
    """A running domain is idle while it uses less CPU than this fraction of its vCPUs (0.05: 5%
    of each vCPU on average, measured between audits)."""
    idle_for: Duration = WEEK
    """How long a running domain stays idle before its allocation is reclaimable (default 168h)."""


class ConfigFile(_Section):
    audit: AuditSettings = AuditSettings()
    claims: ClaimSettings = ClaimSettings()
    scheduler: SchedulerSection = SchedulerSection()
    defaults: PolicySection = PolicySection()
    hypervisors: list[HypervisorSection] | None = None
    flavors: list[FlavorSection] = []
    discover_flavors: bool = True
    """Nova flavors found in the metadata of existing domains join the configured ones (which win
    on the same name)."""
    pci: PciSection = PciSection()
    host_groups: Annotated[
        list[HostGroupSection], Field(max_length=MAX_HOST_GROUPS), AfterValidator(_unique_groups)
    ] = []
    ownership: OwnershipSection | None = None
    exposition: ExpositionSection = ExpositionSection()
    sharding: ShardingSection = ShardingSection()
    reclaim: ReclaimSettings = ReclaimSettings()
    placement: PlacementSection | None = None
    """The Placement to reconcile with (docs/placement.md); none by default."""

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for section, items in (("hypervisors", self.hypervisors or []), ("flavors", self.flavors)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{section}: the name {brief_repr(item.name)} is used twice")
                seen.add(item.name)
        return self


def validate_document(raw: object) -> ConfigFile:
    """A parsed YAML document checked against the schema, its CPU sets sharing one budget.

    Raises pydantic's ValidationError: virtcap.config.errors explains it.
    """
    return ConfigFile.model_validate(raw, context={_CpuBudget.KEY: _CpuBudget()})
