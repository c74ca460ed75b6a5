"""vGPUs as Nova's libvirt driver reports them: one Placement provider per physical GPU, holding a
VGPU inventory of the one mediated device type enabled for that GPU. Pure: facts and the
configuration in, inventories and their use out.

Which type a GPU offers is the configuration's (Nova's `[devices] enabled_mdev_types` and each
type's `[mdev_<type>]` section): a GPU named in a type's `device_addresses` offers that type; any
other offers the first enabled type without addresses (the default; a later type without
addresses is not used at all), or nothing where every type names its GPUs.

A GPU's total is the mediated devices of its type already created on it (whether a guest holds
them or not) plus the instances of that type it can still create (libvirt's
`availableInstances`); reserved is 0, min_unit and step_size 1, max_unit the total, allocation
ratio 1.0: a vGPU is never overcommitted, and one allocation comes from one GPU. A type's
`max_instances` caps the vGPUs of the type on the host: the created ones count first, then each
GPU in turn adds what it can still create, and a GPU that would take the type past the cap gets a
total of 0, its created devices included.

A GPU of total 0 has no provider in Placement (Nova deletes it); it is still listed, with the
domains holding its devices, so that the mismatch shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from virtcap.model.facts import DomainState, HostFacts, MediatedDevice, PciDevice

NOVA_ALLOCATION_RATIO = 1.0


@dataclass(frozen=True, slots=True)
class EnabledMdevType:
    """One entry of Nova's `[devices] enabled_mdev_types`, with its `[mdev_<type>]` section."""

    type_id: str
    """As libvirt names the type: `nvidia-35`."""
    device_addresses: tuple[str, ...] = ()
    """The GPUs (`0000:84:00.0`) that offer this type; none: the type is the default of every
    GPU no other type names (only the first such type is)."""
    max_instances: int | None = None
    """Nova's `max_instances`: at most this many vGPUs of the type on the host; None: no cap."""


@dataclass(frozen=True, slots=True)
class MdevAssignment:
    """The type each GPU offers, as Nova derives it from the enabled types at its start."""

    by_address: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None
    max_instances: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, enabled: Iterable[EnabledMdevType]) -> MdevAssignment:
        """An address named by two types is refused by the configuration (Nova refuses to start);
        here the first keeps it."""
        by_address: dict[str, str] = {}
        default = None
        limits = {}
        for entry in enabled:
            if entry.max_instances:
                limits[entry.type_id] = entry.max_instances
            if not entry.device_addresses:
                default = default or entry.type_id
                continue
            for address in entry.device_addresses:
                by_address.setdefault(address, entry.type_id)
        return cls(by_address, default, limits)

    def type_of(self, address: str) -> str | None:
        """The type the GPU at `address` offers; None: it offers none."""
        return self.by_address.get(address) or self.default


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """One physical GPU's VGPU inventory (one provider, `<hypervisor>_pci_0000_84_00_0`), and
    what counted domains hold of it."""

    address: str
    """The GPU's PCI address: `0000:84:00.0`."""
    mdev_type: str
    total: int
    used: int = 0
    """Mediated devices on this GPU held by counted domains, whatever their type."""
    holders: tuple[str, ...] = ()
    """The names of those domains, one per device held, sorted."""

    reserved = 0
    min_unit = 1
    step_size = 1
    allocation_ratio = NOVA_ALLOCATION_RATIO

    @property
    def max_unit(self) -> int:
        return self.total

    @property
    def device_name(self) -> str:
        """libvirt's name of the GPU, which Nova's provider names end with: `pci_0000_84_00_0`."""
        return "pci_" + self.address.replace(":", "_").replace(".", "_")

    @property
    def has_provider(self) -> bool:
        """Placement holds no inventory of total 0: Nova deletes the provider."""
        return self.total > 0

    @property
    def free(self) -> int:
        """total - used; below 0 where domains hold more than Nova offers."""
        return self.total - self.reserved - self.used

    def fits(self, amount: int) -> int:
        """How many allocations of `amount` vGPUs this GPU still takes."""
        if amount <= 0 or not self.has_provider or amount > self.max_unit:
            return 0
        return max(self.free // amount, 0)


@dataclass(frozen=True, slots=True)
class VgpuCapacity:
    """A host's vGPUs: per GPU, and the devices counted domains hold on no GPU listed."""

    gpus: tuple[GpuInventory, ...] = ()
    """By address; only GPUs offering an enabled type (or holding created devices of it)."""
    unplaced: tuple[str, ...] = ()
    """Counted domains holding a mediated device the host does not list, or one on a GPU that
    offers no enabled type: one name per device, sorted. Used, yet of no provider."""

    @property
    def total(self) -> int:
        return sum(gpu.total for gpu in self.gpus)

    @property
    def reserved(self) -> int:
        return sum(gpu.reserved for gpu in self.gpus)

    @property
    def used(self) -> int:
        return sum(gpu.used for gpu in self.gpus) + len(self.unplaced)

    @property
    def free(self) -> int:
        """What providers can still give: each GPU's free amount, never below 0."""
        return sum(max(gpu.free, 0) for gpu in self.gpus if gpu.has_provider)

    @property
    def max_unit(self) -> int:
        """The largest single allocation: one GPU's total."""
        return max((gpu.max_unit for gpu in self.gpus), default=0)

    def fits(self, amount: int) -> int:
        """How many more allocations of `amount` vGPUs the host takes: each from one GPU."""
        return sum(gpu.fits(amount) for gpu in self.gpus)


def gpu_totals(
    devices: Iterable[PciDevice], mediated: Iterable[MediatedDevice], enabled: Iterable[EnabledMdevType]
) -> dict[str, tuple[str, int]]:
    """Nova's VGPU total per GPU address, with the GPU's type, by address (see the module's
    description). Empty without an enabled type.

    Under `max_instances`, GPUs add their available instances in the order of `devices`: the
    audit gives them by address, Nova takes them in libvirt's listing order, which follows no
    rule; the two agree whenever the cap does not split the GPUs of a type."""
    assignment = MdevAssignment.of(enabled)
    if assignment.default is None and not assignment.by_address:
        return {}
    totals: dict[str, int] = {}
    of_type: dict[str, int] = {}
    for mdev in mediated:
        address = mdev.parent_address
        gpu_type = assignment.type_of(address) if address is not None else None
        if address is None or gpu_type is None or mdev.type_id != gpu_type:
            continue  # created as another type than the GPU offers: Nova does not count it
        totals[address] = totals.get(address, 0) + 1
        of_type[gpu_type] = of_type.get(gpu_type, 0) + 1
    for device in devices:
        gpu_type = assignment.type_of(device.address)
        # a type listed twice counts once, its last entry, as Nova keys a GPU's types by id
        available = {t.type_id: t.available for t in device.mdev_types}.get(gpu_type or "")
        if gpu_type is None or available is None:
            continue
        limit = assignment.max_instances.get(gpu_type)
        if limit and of_type.get(gpu_type, 0) + available > limit:
            totals[device.address] = 0
            continue
        of_type[gpu_type] = of_type.get(gpu_type, 0) + available
        totals[device.address] = totals.get(device.address, 0) + available
    return {address: (_type_of(assignment, address), totals[address]) for address in sorted(totals)}


def _type_of(assignment: MdevAssignment, address: str) -> str:
    gpu_type = assignment.type_of(address)
    assert gpu_type is not None  # only GPUs offering a type get a total
    return gpu_type


def vgpu_capacity(
    facts: HostFacts, enabled: Iterable[EnabledMdevType], counted_states: frozenset[DomainState]
) -> VgpuCapacity:
    """The host's VGPU inventories, and the mediated devices counted domains hold (by UUID) on
    each GPU, whether a domain holds it or not, and in which state it is."""
    totals = gpu_totals(facts.pci_devices, facts.mediated_devices, enabled)
    parents = {mdev.uuid: mdev.parent_address for mdev in facts.mediated_devices}
    holders: dict[str, list[str]] = {address: [] for address in totals}
    unplaced = []
    for domain in facts.domains:
        if domain.state not in counted_states:
            continue
        for uuid in domain.layout.mdev_uuids:
            parent = parents.get(uuid)
            if parent is not None and parent in holders:
                holders[parent].append(domain.name)
            else:
                unplaced.append(domain.name)
    return VgpuCapacity(
        gpus=tuple(
            GpuInventory(
                address=address,
                mdev_type=gpu_type,
                total=total,
                used=len(holders[address]),
                holders=tuple(sorted(holders[address])),
            )
            for address, (gpu_type, total) in totals.items()
        ),
        unplaced=tuple(sorted(unplaced)),
    )
