"""PCI passthrough as Nova accounts for it: which host devices the operator allows, how Nova pools
them, and whether a flavor's `pci_passthrough:alias` request fits the free ones.

Pure: no libvirt, no configuration file. The semantics are Nova 34's (nova.pci.devspec,
nova.pci.whitelist, nova.pci.stats, nova.pci.request), restated here and compared with upstream
by tests/conformance/test_pci.py.

- A `[pci] device_spec` entry (`PciDeviceSpec`) allows the devices it matches: its vendor and
  product ids (`*` or absent: any) and its address. An address is either a string of `*` globs
  (`*:3b:02.*`, `3b:02`, a missing field being `*`), or a mapping of regular expressions per field
  (`domain`, `bus`, `slot`, `function`, each matched at the start of the device's field, `.*`
  when absent). When the address names one device that is an SR-IOV physical function of the host
  (every field plain hex), the spec also allows that function's virtual functions. `devname`
  (a network interface name, resolved through the host's sysfs) is not supported.
- The first spec (in configuration order) that matches a device decides its tags
  (`physical_network`, `remote_managed`; `resource_class` and `traits` are kept but never tag a
  pool). A spec with `remote_managed: true` allows only devices whose VPD carries a card serial
  number; the node-device facts virtcap reads hold no VPD, so such a spec allows nothing here.
- Pools (`PciPool`) group the allowed devices by vendor, product, NUMA node, device type, the
  spec's tags and the physical function: a VF's pool is keyed by its PF's address, any other
  device's by its own, so each PF's VFs share a pool and every other device has one of its own.
  PFs and VFs carry `remote_managed: false` when the spec leaves it out.
- A device is free unless a domain holds it, or it is a PF one of whose allowed VFs a domain holds,
  or a VF whose allowed PF a domain holds (Nova marks such relatives unavailable). Devices that no
  spec allows are not tracked at all, and holding one makes no relative unavailable.
- `support_requests` answers as Nova's PCI passthrough filter does: each alias of the request in
  turn takes its count from the free pools that match it, in Nova's pool order; PF pools only
  serve aliases that ask for `type-PF`, and remote-managed pools no alias. Given the host cells
  an instance's guest cells landed on (`cells`, as the NUMA fit asks), each alias's `numa_policy`
  narrows the pools first: `required` to the devices of those cells; `legacy` to those and the
  devices of no known cell, unless the cells' own suffice; `preferred` to either of these when
  they suffice, else to every pool with the cells' first. `socket` needs the host's sockets,
  which virtcap does not read: where the cells' own devices do not suffice, PciRequestError.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from virtcap.model.facts import PciDevice

__all__ = [
    "ANY",
    "DEVICE_TYPES",
    "NUMA_POLICIES",
    "AddressGlob",
    "AddressPatterns",
    "PciAlias",
    "PciAliasError",
    "PciDeviceSpec",
    "PciPool",
    "PciRequestError",
    "PciSpecError",
    "allowing_spec",
    "apply_requests",
    "device_pools",
    "parse_alias_request",
    "support_requests",
]

ANY = "*"
DEVICE_TYPES = ("type-PCI", "type-PF", "type-VF")
"""The device types an alias may ask for (Nova's `device_type`: standard, SR-IOV PF and VF)."""
NUMA_POLICIES = ("required", "legacy", "preferred", "socket")
LEGACY = "legacy"
MAX_ALIAS_NAME = 256
_SRIOV_TYPES = ("type-PF", "type-VF")
_HEX = frozenset(string.hexdigits)
_ID = re.compile(r"[0-9a-fA-F]{4}")
_SPEC_KEYS = frozenset(
    {"vendor_id", "product_id", "address", "physical_network", "remote_managed", "resource_class", "traits"}
)
_ADDRESS_FIELDS = ("domain", "bus", "slot", "function")
_TRUE = frozenset({"1", "t", "true", "on", "y", "yes"})
_FALSE = frozenset({"0", "f", "false", "off", "n", "no"})


class PciSpecError(ValueError):
    """A device_spec entry Nova would refuse (or one virtcap does not support)."""


PCI_ALIAS_SPEC = "pci_passthrough:alias"
"""The flavor extra spec that asks for PCI devices by alias: `a1:2,a2:1`."""


class PciAliasError(ValueError):
    """An alias entry Nova would refuse."""


class PciRequestError(ValueError):
    """A `pci_passthrough:alias` extra spec that cannot be read, or names an unknown alias."""


def _hex_field(name: str, text: str, maximum: int, width: int) -> str:
    """A glob field: `*`, or a hex number at most `maximum`, written with `width` digits."""
    if text == ANY:
        return text
    try:
        value = int(text, 16)
    except ValueError:
        raise PciSpecError(f"{name} {text!r} is neither * nor a hex number") from None
    if value > maximum:
        raise PciSpecError(f"{name} {text!r} is above the maximum {maximum:X}")
    return f"{value:0{width}x}"


def _device_fields(address: str) -> tuple[str, str, str, str]:
    """A device's address `0000:3b:02.1` as its four normalized fields."""
    head, _, function = address.partition(".")
    domain, bus, slot = head.split(":")
    return (
        f"{int(domain, 16):04x}",
        f"{int(bus, 16):02x}",
        f"{int(slot, 16):02x}",
        f"{int(function, 16):1x}",
    )


@dataclass(frozen=True, slots=True)
class AddressGlob:
    """A string address: each field `*` or a normalized hex number."""

    domain: str = ANY
    bus: str = ANY
    slot: str = ANY
    function: str = ANY

    @classmethod
    def parse(cls, text: str) -> AddressGlob:
        head, _, function = text.partition(".")
        fields = {"domain": ANY, "bus": ANY, "slot": ANY, "function": ANY}
        if function:
            fields["function"] = _hex_field("function", function.strip(), 0x7, 1)
        if head:
            parts = head.split(":")
            if len(parts) > len(_ADDRESS_FIELDS) - 1:
                raise PciSpecError(f"address {text!r} has more than domain:bus:slot before the function")
            parts = [ANY] * (len(_ADDRESS_FIELDS) - 1 - len(parts)) + parts
            domain, bus, slot = (part.strip() or ANY for part in parts)
            fields["domain"] = _hex_field("domain", domain, 0xFFFF, 4)
            fields["bus"] = _hex_field("bus", bus, 0xFF, 2)
            fields["slot"] = _hex_field("slot", slot, 0x1F, 2)
        return cls(**fields)

    def fields(self) -> tuple[str, str, str, str]:
        return (self.domain, self.bus, self.slot, self.function)

    def match(self, address: str) -> bool:
        return all(
            mine in (ANY, theirs) for mine, theirs in zip(self.fields(), _device_fields(address), strict=True)
        )


@dataclass(frozen=True, slots=True)
class AddressPatterns:
    """A mapping address: a regular expression per field, matched at the start of the field."""

    domain: str = ".*"
    bus: str = ".*"
    slot: str = ".*"
    function: str = ".*"

    @classmethod
    def parse(cls, value: Mapping[str, object]) -> AddressPatterns:
        unknown = sorted(str(key) for key in value if key not in _ADDRESS_FIELDS)
        if unknown:
            raise PciSpecError(
                f"address has unknown keys {', '.join(unknown)}; expected {', '.join(_ADDRESS_FIELDS)}"
            )
        fields: dict[str, str] = {}
        for name in _ADDRESS_FIELDS:
            if name not in value:
                continue
            pattern = value[name]
            if not isinstance(pattern, str):
                raise PciSpecError(f"address {name}: expected a regular expression as a string")
            try:
                re.compile(pattern)
            except re.error as error:
                raise PciSpecError(
                    f"address {name}: {pattern!r} is not a regular expression ({error})"
                ) from None
            fields[name] = pattern
        return cls(**fields)

    def fields(self) -> tuple[str, str, str, str]:
        return (self.domain, self.bus, self.slot, self.function)

    def match(self, address: str) -> bool:
        return all(
            re.match(pattern, theirs) is not None
            for pattern, theirs in zip(self.fields(), _device_fields(address), strict=True)
        )


def _boolean(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise PciSpecError(f"{name}: expected true or false, got {value!r}")


@dataclass(frozen=True, slots=True)
class PciDeviceSpec:
    """One `[pci] device_spec` entry."""

    vendor_id: str = ANY
    product_id: str = ANY
    address: AddressGlob | AddressPatterns = AddressGlob()
    physical_network: str | None = None
    remote_managed: bool | None = None
    resource_class: str | None = None
    traits: str | None = None

    @classmethod
    def from_entry(cls, entry: Mapping[str, object]) -> PciDeviceSpec:
        """An entry as an operator writes it in nova.conf (a JSON object)."""
        if "devname" in entry:
            raise PciSpecError(
                "devname is not supported (it names a network interface of the host's sysfs); "
                "expected the device's address or vendor_id and product_id"
            )
        unknown = sorted(str(key) for key in entry if key not in _SPEC_KEYS)
        if unknown:
            raise PciSpecError(
                f"unknown keys {', '.join(unknown)}; expected some of {', '.join(sorted(_SPEC_KEYS))}"
            )
        ids = {}
        for name, maximum in (("vendor_id", 0xFFFF), ("product_id", 0xFFFF)):
            value = entry.get(name, ANY)
            if not isinstance(value, str):
                raise PciSpecError(f"{name}: expected * or 4 hex digits as a string")
            ids[name] = _hex_field(name, value.strip(), maximum, 4)
        raw_address = entry.get("address")
        address: AddressGlob | AddressPatterns
        if raw_address is None or raw_address == "":
            address = AddressGlob()
        elif isinstance(raw_address, str):
            address = AddressGlob.parse(raw_address)
        elif isinstance(raw_address, Mapping):
            address = AddressPatterns.parse(raw_address)
        else:
            raise PciSpecError(
                "address: expected a string (with * globs) or a mapping of domain, bus, slot, function"
            )
        texts: dict[str, str | None] = {}
        for name in ("physical_network", "resource_class", "traits"):
            value = entry.get(name)
            if value is not None and not isinstance(value, str):
                raise PciSpecError(f"{name}: expected a string")
            texts[name] = value
        remote = entry.get("remote_managed")
        return cls(
            vendor_id=ids["vendor_id"],
            product_id=ids["product_id"],
            address=address,
            remote_managed=None if remote is None else _boolean("remote_managed", remote),
            **texts,
        )

    def single_address(self) -> str | None:
        """The one address the spec names when each field is plain hex, else None. Nova forms it
        from the fields as written (normalized for a glob, verbatim for patterns)."""
        fields = self.address.fields()
        if all(all(char in _HEX for char in field) for field in fields):
            domain, bus, slot, function = fields
            return f"{domain}:{bus}:{slot}.{function}"
        return None

    def matches(self, device: PciDevice, physical_functions: frozenset[str]) -> bool:
        """Whether the spec allows `device` on a host whose SR-IOV PFs are at `physical_functions`."""
        if self.vendor_id not in (ANY, device.vendor_id) or self.product_id not in (ANY, device.product_id):
            return False
        if self.remote_managed:
            return False  # needs the device's VPD card serial number, which the facts do not hold
        single = self.single_address()
        if (
            single is not None
            and single in physical_functions
            and device.parent_address
            and self.address.match(device.parent_address)
        ):
            return True
        return self.address.match(device.address)

    def pool_tags(self) -> tuple[tuple[str, str], ...]:
        """The spec's tags that key a pool, sorted by name."""
        tags = []
        if self.physical_network is not None:
            tags.append(("physical_network", self.physical_network))
        if self.remote_managed is not None:
            tags.append(("remote_managed", "true" if self.remote_managed else "false"))
        return tuple(sorted(tags))


@dataclass(frozen=True, slots=True)
class PciAlias:
    """One `[pci] alias` entry: a name a flavor asks for devices by."""

    name: str
    vendor_id: str
    product_id: str
    device_type: str | None = None
    numa_policy: str = LEGACY

    def __post_init__(self) -> None:
        if not self.name.strip() or len(self.name) > MAX_ALIAS_NAME:
            raise PciAliasError(f"name: expected 1 to {MAX_ALIAS_NAME} characters")
        for name, value in (("vendor_id", self.vendor_id), ("product_id", self.product_id)):
            if not _ID.fullmatch(value):
                raise PciAliasError(f"{name}: expected 4 hex digits, got {value!r}")
        if self.device_type is not None and self.device_type not in DEVICE_TYPES:
            raise PciAliasError(
                f"device_type: expected one of {', '.join(DEVICE_TYPES)}, got {self.device_type!r}"
            )
        if self.numa_policy not in NUMA_POLICIES:
            raise PciAliasError(
                f"numa_policy: expected one of {', '.join(NUMA_POLICIES)}, got {self.numa_policy!r}"
            )

    def matches(self, pool: PciPool) -> bool:
        return (
            pool.vendor_id.lower() == self.vendor_id.lower()
            and pool.product_id.lower() == self.product_id.lower()
            and (self.device_type is None or pool.dev_type.lower() == self.device_type.lower())
        )


@dataclass(frozen=True, slots=True)
class PciPool:
    """Allowed devices Nova counts together."""

    vendor_id: str
    product_id: str
    numa_node: int | None
    dev_type: str
    address: str
    """The PF's address for VFs, the device's own for any other."""
    tags: tuple[tuple[str, str], ...]
    devices: tuple[str, ...]
    """Addresses of its devices, sorted."""
    free_devices: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def free(self) -> int:
        return len(self.free_devices)

    @property
    def remote_managed(self) -> bool:
        return dict(self.tags).get("remote_managed") == "true"

    def _key_count(self) -> int:
        """How many properties key the pool: Nova orders its pools by that, then by creation."""
        return 5 + len(self.tags)


def allowing_spec(
    device: PciDevice, specs: Sequence[PciDeviceSpec], physical_functions: frozenset[str]
) -> PciDeviceSpec | None:
    """The first spec that allows the device, or None: it is then not passed through."""
    for spec in specs:
        if spec.matches(device, physical_functions):
            return spec
    return None


def device_pools(
    devices: Iterable[PciDevice], specs: Sequence[PciDeviceSpec], held: Iterable[str]
) -> tuple[PciPool, ...]:
    """The pools of the allowed devices, in the order Nova's pools are kept: by how many
    properties key them, then by the address of their first free device (Nova adds the free
    devices sorted by address); pools with no free device come last."""
    ordered = sorted(devices, key=lambda device: device.address)
    physical_functions = frozenset(d.address for d in ordered if d.dev_type == "type-PF")
    allowed: list[tuple[PciDevice, tuple[tuple[str, str], ...]]] = []
    for device in ordered:
        spec = allowing_spec(device, specs, physical_functions)
        if spec is not None:
            spec_tags = dict(spec.pool_tags())
            if device.dev_type in _SRIOV_TYPES:
                spec_tags.setdefault("remote_managed", "false")
            allowed.append((device, tuple(sorted(spec_tags.items()))))
    held_set = frozenset(held)
    tracked_pfs = {device.address for device, _ in allowed if device.dev_type == "type-PF"}
    unavailable = set(held_set)
    for device, _ in allowed:
        if device.address not in held_set:
            continue
        if device.dev_type == "type-VF" and device.parent_address in tracked_pfs:
            unavailable.add(device.parent_address)
        if device.dev_type == "type-PF":
            unavailable.update(
                d.address
                for d, _ in allowed
                if d.dev_type == "type-VF" and d.parent_address == device.address
            )
    groups: dict[_PoolKey, tuple[list[str], list[str]]] = {}
    for device, tags in allowed:
        key = (
            device.vendor_id,
            device.product_id,
            device.numa_node,
            device.dev_type,
            device.parent_address or device.address,
            tags,
        )
        members, free = groups.setdefault(key, ([], []))
        members.append(device.address)
        if device.address not in unavailable:
            free.append(device.address)
    pools = [
        PciPool(*key, devices=tuple(members), free_devices=tuple(free))
        for key, (members, free) in groups.items()
    ]
    return tuple(sorted(pools, key=lambda pool: (not pool.free, pool._key_count(), _first(pool))))


_PoolKey = tuple[str, str, int | None, str, str, tuple[tuple[str, str], ...]]


def _first(pool: PciPool) -> str:
    return (pool.free_devices or pool.devices)[0]


@dataclass(eq=False, slots=True)
class _Remaining:
    pool: PciPool
    free: int


def _total(entries: Iterable[_Remaining]) -> int:
    return sum(entry.free for entry in entries)


def parse_alias_request(extra_spec: str) -> list[tuple[str, int]]:
    """`pci_passthrough:alias` (`a1:2,a2:1`) as (alias name, count) in order."""
    requests = []
    for item in extra_spec.split(","):
        parts = item.split(":")
        if len(parts) != len(("name", "count")):
            raise PciRequestError(f"{item!r} is not NAME:COUNT")
        name, count = parts[0].strip(), parts[1]
        try:
            number = int(count)
        except ValueError:
            raise PciRequestError(f"the count of {name!r} is not a whole number: {count!r}") from None
        if number < 0:
            raise PciRequestError(f"the count of {name!r} is negative: {number}")
        requests.append((name, number))
    return requests


def alias_request_problem(extra_spec: str, aliases: Iterable[str]) -> str | None:
    """Why a flavor's `pci_passthrough:alias` cannot be asked for, as Nova's API refuses it (not
    readable, or naming an alias that is not configured); None when it can."""
    try:
        requests = parse_alias_request(extra_spec)
    except PciRequestError as error:
        return str(error)
    configured = set(aliases)
    unknown = sorted({name for name, _count in requests if name not in configured})
    if not unknown:
        return None
    known = ", ".join(sorted(configured)) or "none (pci.alias is empty)"
    return f"unknown alias {', '.join(map(repr, unknown))}; expected one of: {known}"


def support_requests(
    pools: Sequence[PciPool],
    aliases: Mapping[str, PciAlias],
    extra_spec: str,
    *,
    cells: frozenset[int] | None = None,
    numa_policy: str | None = None,
) -> bool:
    """Whether the free devices of `pools` (as `device_pools` orders them) satisfy the flavor's
    `pci_passthrough:alias` extra spec, as Nova answers: without `cells` (or with none) as its
    PCI passthrough filter does, with the host cells of the instance's guest cells as its NUMA
    fit does, each alias's `numa_policy` deciding which devices are near enough.

    `numa_policy` (the flavor's `hw:pci_numa_affinity_policy` or the image's
    `hw_pci_numa_affinity_policy`) replaces every alias's own, as in Nova.

    Raises PciRequestError when the extra spec cannot be read or names an unknown alias, or when
    answering needs the host's sockets (`numa_policy` socket).
    """
    return _apply(pools, aliases, extra_spec, cells, numa_policy) is not None


def apply_requests(
    pools: Sequence[PciPool],
    aliases: Mapping[str, PciAlias],
    extra_spec: str,
    *,
    cells: frozenset[int] | None = None,
    numa_policy: str | None = None,
) -> tuple[PciPool, ...] | None:
    """The pools once the request's devices are taken, in the same order, as Nova's scheduler
    takes them from its host state (`apply_requests`); None where `support_requests` says no.
    Nova counts per pool, not per device: the devices taken from a pool are its first free ones.
    Raises as `support_requests` does."""
    remaining = _apply(pools, aliases, extra_spec, cells, numa_policy)
    if remaining is None:
        return None
    return tuple(
        replace(pool, free_devices=pool.free_devices[pool.free - left :])
        for pool, left in zip(pools, remaining, strict=True)
    )


def _apply(
    pools: Sequence[PciPool],
    aliases: Mapping[str, PciAlias],
    extra_spec: str,
    cells: frozenset[int] | None,
    numa_policy: str | None,
) -> list[int] | None:
    """The free devices left in each pool once the request is served, or None."""
    requests = []
    for name, count in parse_alias_request(extra_spec):
        if name not in aliases:
            raise PciRequestError(f"the alias {name!r} is not defined")
        requests.append((aliases[name], count))
    entries = [_Remaining(pool, pool.free) for pool in pools]
    live = [entry for entry in entries if entry.free]
    for alias, count in requests:
        candidates = [entry for entry in live if alias.matches(entry.pool)]
        if _total(candidates) < count:
            return None
        if cells:
            candidates = _near(candidates, numa_policy or alias.numa_policy, alias.name, count, cells)
            if _total(candidates) < count:
                return None
        if alias.device_type != "type-PF":  # PFs serve only the aliases that ask for them
            candidates = [entry for entry in candidates if entry.pool.dev_type != "type-PF"]
            if _total(candidates) < count:
                return None
        candidates = [entry for entry in candidates if not entry.pool.remote_managed]
        if _total(candidates) < count or not candidates:
            return None
        wanted = count
        for entry in candidates:
            if entry.free > wanted:
                entry.free -= wanted
                wanted = 0
            else:
                wanted -= entry.free
                entry.free = 0
                live.remove(entry)
            if not wanted:
                break
    return [entry.free for entry in entries]


def _near(
    candidates: list[_Remaining], policy: str, alias_name: str, count: int, cells: frozenset[int]
) -> list[_Remaining]:
    """The candidates the alias's NUMA policy allows for guest cells on `cells`, in the order
    they are taken."""
    in_cells = [entry for entry in candidates if entry.pool.numa_node in cells]
    if policy == "required" or _total(in_cells) >= count:
        return in_cells
    if policy == "socket":
        raise PciRequestError(
            f"the alias {alias_name!r} asks for devices on the instance's socket, "
            "which virtcap cannot tell: it does not read the host's sockets"
        )

    def unplaced_or_near(entry: _Remaining) -> bool:
        return entry.pool.numa_node is None or entry.pool.numa_node in cells

    near = [entry for entry in candidates if unplaced_or_near(entry)]
    if policy == LEGACY or _total(near) >= count:
        return near
    return sorted(candidates, key=lambda entry: not unplaced_or_near(entry))
