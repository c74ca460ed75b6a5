"""NUMA placement as Nova accounts for it: a host's cells with their usage, the NUMA topology a
flavor (and image) asks for, whether and where it fits, what fitting it consumes, and how many
more fit.

Pure: no libvirt, no configuration file. The semantics are Nova 34's (nova.virt.hardware
numa_get_constraints, numa_fit_instance_to_host, numa_usage_from_instance_numa; nova.objects.numa;
the libvirt driver's _get_host_numa_topology), restated here and compared with upstream by
tests/conformance/test_numa.py.

- A host cell (`HostCell`) splits its CPUs into shared ones (Nova's `cpuset`, the VCPU
  inventory) and dedicated ones (`pcpuset`, PCPU): with `cpu_dedicated_set` and no
  `cpu_shared_set` the cell has no shared CPUs; with `cpu_shared_set` alone, no dedicated ones;
  with neither, every online CPU is both (Nova's legacy behaviour, kept for upgrades). Memory is
  in MiB (KiB / 1024, rounded down) and every page size has its total, the pages
  `reserved_huge_pages` keeps and the pages instances use.
- An instance has a NUMA topology (`InstanceTopology`) when its flavor or image asks for guest
  cells (`hw:numa_nodes`), pinned CPUs (`hw:cpu_policy` dedicated or mixed, `resources:PCPU`), a
  page size (`hw:mem_page_size`) or persistent memory (`hw:pmem`); otherwise Nova gives it none
  and the NUMA accounting ignores it. `instance_topology` raises NumaSpecError where Nova refuses
  the request; image properties are read as strings (Nova's `ImageMeta.from_dict` has already
  typed them: `hw_numa_nodes` an integer, `hw_numa_cpus.N` a CPU list), and an image's
  `traits_required` is not read.
- `fit` tries the guest cells on the host cells in Nova's order (its sorting of the cells by
  free memory, CPUs and PCI devices when there are more host cells than guest cells, then every
  permutation) and keeps the first placement where every guest cell fits its host cell and the
  PCI requests fit the chosen cells. Nova's search mutates the guest cells as it goes (a page
  size `large` or `any`, once resolved on one host cell, stays resolved for the cells tried after
  it; a pinning computed on one cell is reused where an earlier fit on another is remembered):
  `fit` keeps the same state, so that its answers are Nova's, quirks included. The strangest:
  Nova remembers which (host cell, guest cell) pairs fit by the guest cell object's id, which
  each fit overwrites with the host cell's id, so that a guest cell can pass on the remembered
  fit of another (a pinned guest cell then lands, unpinned, on a cell without dedicated CPUs).
- `consume` adds a fitted instance's usage to the cells, as the resource tracker does.
  `refitted` is the topology a fit leaves, which Nova's scheduler fits the next instance of the
  request with (its page sizes chosen).
  `how_many_fit` fits and consumes in a row (PCI devices aside: pci.apply_requests takes them).
- Not read (Nova's answer may then differ): an image's `traits_required`, memory encryption,
  the socket PCI policy (pci.py refuses it where it matters). Which thread of a core a pinned
  vCPU gets is the lowest free one; Nova's is Python's set order, which changes as Nova rebuilds
  its cell objects (the core, the counts and every later fit are the same).
- `host_cells` builds the cells from the host's facts and charges the domains that hold NUMA
  resources (see its docstring for how a domain's definition is read).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.facts import DomainFacts, DomainState, NumaCell
from virtcap.model.memory_backing import cell_page_size
from virtcap.model.pci import (
    PciAlias,
    PciPool,
    support_requests,
)

__all__ = [
    "PAGE_ANY",
    "PAGE_LARGE",
    "PAGE_SMALL",
    "CellPages",
    "FittedCell",
    "HostCell",
    "InstanceCell",
    "InstanceTopology",
    "NumaFit",
    "NumaSpecError",
    "PinningConflict",
    "PinningConflictError",
    "PlacedCell",
    "consume",
    "fit",
    "host_cells",
    "how_many_fit",
    "instance_topology",
    "refitted",
]

KIB_PER_MIB = 1024
MIB = 1024**2
PAGE_SMALL = -1
PAGE_LARGE = -2
PAGE_ANY = -3
"""`hw:mem_page_size` small, large and any, as Nova encodes them beside sizes in KiB."""
_PAGE_WORDS = {"small": PAGE_SMALL, "large": PAGE_LARGE, "any": PAGE_ANY}
SHARED, DEDICATED, MIXED = "shared", "dedicated", "mixed"
CPU_POLICIES = (DEDICATED, SHARED, MIXED)
PREFER, ISOLATE, REQUIRE = "prefer", "isolate", "require"
THREAD_POLICIES = (PREFER, ISOLATE, REQUIRE)
EMULATOR_POLICIES = ("share", "isolate")
_PINNED_POLICIES = (DEDICATED, MIXED)
NUMA_NODES_MAX = 128
"""How many `hw:numa_cpus.N` / `hw:numa_mem.N` entries Nova reads at most."""
_TRUE = frozenset({"1", "t", "true", "on", "y", "yes"})
_VCPU_RESOURCE = re.compile(r"resources([1-9][0-9]*)?:VCPU")
_PCPU_RESOURCE = re.compile(r"resources([1-9][0-9]*)?:PCPU")
_HYPERTHREADING_TRAIT = re.compile(r"trait([1-9][0-9]*)?:HW_CPU_HYPERTHREADING")
_PREFIX_EXPONENT = {prefix: exponent for exponent, prefix in enumerate("KMGTPEZYRQ", start=1)}
_SIZE = re.compile(r"(^[-+]?\d*\.?\d+)([KMGTPEZYRQ]i?)?(b|bit|B)$")
"""oslo's string_to_bytes in its default (IEC) unit system: `2MB`, `2MiB`, `1Gb` (bits)."""


class NumaSpecError(ValueError):
    """A flavor or image NUMA request Nova refuses; the message is one line."""


class PageSizeUnsupportedError(Exception):
    """A guest cell asks for a page size its host cell does not have (Nova's
    MemoryPageSizeNotSupported): that host cell cannot take it."""


# --- the host ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CellPages:
    """The pages of one size in one host cell."""

    size_kib: int
    total: int
    reserved: int = 0
    used: int = 0

    @property
    def free(self) -> int:
        return self.total - self.reserved - self.used


@dataclass(frozen=True, slots=True)
class HostCell:
    """One host NUMA cell as Nova's resource tracker holds it: what it has and what is used."""

    id: int
    shared_cpus: frozenset[int]
    """Nova's `cpuset`: the CPUs floating (shared) vCPUs run on."""
    dedicated_cpus: frozenset[int]
    """Nova's `pcpuset`: the CPUs pinned vCPUs get, one each."""
    siblings: tuple[frozenset[int], ...]
    """The cell's cores as sets of thread siblings (one CPU each without SMT), in Nova's order."""
    memory_mib: int
    pages: tuple[CellPages, ...] = ()
    """Per page size, in the host's order (smallest first)."""
    shared_cpu_usage: int = 0
    """Nova's `cpu_usage`: floating vCPUs of the guest cells placed here."""
    memory_usage_mib: int = 0
    pinned_cpus: frozenset[int] = frozenset()

    @property
    def free_dedicated_cpus(self) -> frozenset[int]:
        return self.dedicated_cpus - self.pinned_cpus

    @property
    def free_memory_mib(self) -> int:
        return self.memory_mib - self.memory_usage_mib

    @property
    def threads_per_core(self) -> int:
        return max((len(core) for core in self.siblings), default=0) or 1

    def page(self, size_kib: int) -> CellPages | None:
        return next((pages for pages in self.pages if pages.size_kib == size_kib), None)

    def _free_cores(self) -> list[list[int]]:
        """The free dedicated CPUs of each core, in Nova's order of the cores, each core's
        threads in ascending order (Nova takes them in Python's set order, which changes each
        time it rebuilds the cell: only which thread of a core a vCPU gets differs)."""
        free = self.dedicated_cpus - self.pinned_cpus
        return [sorted(core & free) for core in self.siblings]


def _sibling_order(cell: NumaCell, usable: frozenset[int]) -> tuple[frozenset[int], ...]:
    """The cell's cores restricted to `usable`, ordered as Nova's libvirt driver orders them.

    The driver dedups the cores through a set of tuples and sorts the result by set inclusion,
    which leaves disjoint cores in the set's iteration order: the same set is built here, so
    that the order (which decides the CPUs a pinned guest gets) is Nova's."""
    core_of: dict[int, frozenset[int]] = {}
    for core in cell.siblings:
        for cpu in core:
            core_of[cpu] = core
    cores = {tuple(set(sorted(core_of.get(cpu, frozenset({cpu}))))) for cpu in sorted(cell.cpus)}
    ordered = sorted((set(core) for core in cores), key=_InclusionOrder)
    restricted = (frozenset(core & usable) for core in ordered)
    return tuple(core for core in restricted if core)


class _InclusionOrder:
    """Sorts sets as Python sorts them: by strict inclusion (a partial order)."""

    __slots__ = ("cpus",)

    def __init__(self, cpus: set[int]) -> None:
        self.cpus = cpus

    def __lt__(self, other: _InclusionOrder) -> bool:
        return self.cpus < other.cpus


def host_cells(
    cells: Sequence[NumaCell],
    domains: Iterable[DomainFacts],
    *,
    cpu_shared_set: frozenset[int] | None,
    cpu_dedicated_set: frozenset[int] | None,
    online_cpus: frozenset[int] | None,
    reserved_huge_pages: Mapping[tuple[int, int], int],
    counted_states: frozenset[DomainState],
) -> tuple[HostCell, ...]:
    """The host's cells as Nova's libvirt driver reports them, with the usage of the counted
    domains that hold NUMA resources.

    CPU sets: see the module docstring; online_cpus None counts every CPU of the cells as online.
    A CPU set naming CPUs that are not online is refused by Nova (capacity.py reports it); here
    the named CPUs are simply intersected with each cell.

    A domain's usage, as Nova's tracker would count the instance behind it:

    - A domain Nova created counts only if its flavor (and image) give it a NUMA topology
      (`instance_topology`); a domain of its own (no `<nova:instance>`) counts when it has guest
      cells (`<cpu><numa>`), pinned vCPUs or hugepages: it would need a NUMA topology in Nova.
      Any other domain consumes no cell resources (it floats over the whole host).
    - Each guest cell lands on one host cell: the single node of its `<numatune><memnode>`,
      else the single node of `<numatune><memory>`, else the one cell holding all the host CPUs
      its vCPUs are pinned to. A domain without guest cells is one guest cell (all its vCPUs and
      memory). A guest cell whose host cell cannot be told (several nodes, pins spanning cells,
      nothing pinned or tuned) is charged to the host cells of its pinned CPUs one CPU at a time
      and its memory to no cell: it is not Nova's placement, so the CPUs it really holds are the
      least misleading usage.
    - A vCPU pinned inside the cell's dedicated CPUs pins that CPU (with its thread siblings when
      the flavor asks for `hw:cpu_thread_policy=isolate`); any other vCPU adds one to the cell's
      shared CPU usage. Emulator pins inside the dedicated CPUs are pinned too when the flavor
      asks for `hw:emulator_threads_policy=isolate`.
    - Its memory (MiB) adds to the cell's memory usage, and uses the pages libvirt backs the
      guest cell with (memory_backing.cell_page_size: the `<page>` naming the cell, else the one
      without a nodeset, else the small pages), as Nova counts them.
    """
    online = online_cpus if online_cpus is not None else frozenset().union(*(c.cpus for c in cells))
    if cpu_shared_set is not None:
        shared = cpu_shared_set
    elif cpu_dedicated_set is not None:
        shared = frozenset()
    else:
        shared = online
    dedicated = cpu_dedicated_set or frozenset()
    if not dedicated and cpu_shared_set is None:
        dedicated = shared
    built: dict[int, HostCell] = {}
    for cell in cells:
        usable = cell.cpus & (shared | dedicated)
        built[cell.id] = HostCell(
            id=cell.id,
            shared_cpus=cell.cpus & shared,
            dedicated_cpus=cell.cpus & dedicated,
            siblings=_sibling_order(cell, usable),
            memory_mib=cell.memory_bytes // MIB,
            pages=tuple(
                CellPages(pages.size_kib, pages.total, reserved_huge_pages.get((cell.id, pages.size_kib), 0))
                for pages in cell.pages
            ),
        )
    for domain in domains:
        if domain.state in counted_states:
            for cell_id, usage in _domain_usage(domain, built).items():
                built[cell_id] = usage.charge(built[cell_id])
    return tuple(built[cell.id] for cell in cells)


@dataclass(slots=True)
class _Usage:
    shared_cpus: int = 0
    pinned: set[int] = field(default_factory=set)
    memory_mib: int = 0
    pages: dict[int, int] = field(default_factory=dict)

    def charge(self, cell: HostCell) -> HostCell:
        pages = tuple(replace(p, used=p.used + self.pages.get(p.size_kib, 0)) for p in cell.pages)
        return replace(
            cell,
            shared_cpu_usage=cell.shared_cpu_usage + self.shared_cpus,
            memory_usage_mib=cell.memory_usage_mib + self.memory_mib,
            pinned_cpus=cell.pinned_cpus | frozenset(self.pinned),
            pages=pages,
        )


def _domain_needs_numa(domain: DomainFacts) -> tuple[bool, str | None, str | None]:
    """Whether the domain holds NUMA resources, and its thread and emulator policies."""
    if domain.nova is not None:
        flavor = domain.nova.flavor
        try:
            topology = instance_topology(
                flavor.vcpus, flavor.memory_mib, flavor.extra_specs, domain.nova.image_properties
            )
        except NumaSpecError:
            topology = None
        if topology is None:
            return False, None, None
        return True, topology.cpu_thread_policy, topology.emulator_threads_policy
    placement = domain.placement
    pinned = any(pins is not None for pins in domain.vcpu_pins)
    return bool(placement.guest_cells or pinned or domain.hugepages), None, None


def _domain_usage(domain: DomainFacts, cells: Mapping[int, HostCell]) -> dict[int, _Usage]:
    needed, thread_policy, emulator_policy = _domain_needs_numa(domain)
    if not needed:
        return {}
    placement = domain.placement
    guest_cells = [(c.id, c.vcpus, c.memory_bytes) for c in placement.guest_cells] or [
        (0, frozenset(range(domain.vcpus)), domain.memory_bytes)
    ]
    cell_of_cpu = {cpu: cell.id for cell in cells.values() for cpu in cell.shared_cpus | cell.dedicated_cpus}
    usage: dict[int, _Usage] = defaultdict(_Usage)
    for guest_id, vcpus, memory_bytes in guest_cells:
        pins = [domain.vcpu_pins[v] if v < len(domain.vcpu_pins) else None for v in sorted(vcpus)]
        home = _guest_cell_home(guest_id, pins, domain, cell_of_cpu)
        for pin in pins:
            pin_cell = home if home is not None else _single(pin, cell_of_cpu)
            if pin_cell is None or pin_cell not in cells:
                continue
            target = cells[pin_cell]
            if pin is not None and len(pin) == 1 and pin <= target.dedicated_cpus:
                usage[pin_cell].pinned |= pin
            else:
                usage[pin_cell].shared_cpus += 1
        if home is None or home not in cells:
            continue
        memory_mib = memory_bytes // MIB
        usage[home].memory_mib += memory_mib
        size = cell_page_size(domain, guest_id, sorted(pages.size_kib for pages in cells[home].pages))
        if size is not None:
            usage[home].pages[size] = usage[home].pages.get(size, 0) + memory_mib * KIB_PER_MIB // size
    if emulator_policy == "isolate" and placement.emulator_pins:
        for cell in cells.values():
            held = placement.emulator_pins & cell.dedicated_cpus
            if held:
                usage[cell.id].pinned |= held
    if thread_policy == ISOLATE:
        for cell_id, cell_usage in usage.items():
            for core in cells[cell_id].siblings:
                if core & cell_usage.pinned:
                    cell_usage.pinned |= core
    for cell_id, cell_usage in usage.items():
        cell_usage.pinned &= cells[cell_id].dedicated_cpus
    return dict(usage)


def _single(cpus: frozenset[int] | None, cell_of_cpu: Mapping[int, int]) -> int | None:
    if not cpus:
        return None
    homes = {cell_of_cpu.get(cpu) for cpu in cpus}
    return homes.pop() if len(homes) == 1 else None


def _guest_cell_home(
    guest_id: int,
    pins: Sequence[frozenset[int] | None],
    domain: DomainFacts,
    cell_of_cpu: Mapping[int, int],
) -> int | None:
    placement = domain.placement
    nodes = placement.cell_memory_nodes.get(guest_id)
    if nodes is not None:
        return next(iter(nodes)) if len(nodes) == 1 else None
    if placement.memory_nodes is not None and len(placement.memory_nodes) == 1:
        return next(iter(placement.memory_nodes))
    if not pins or any(pin is None for pin in pins):
        return None
    return _single(frozenset().union(*(pin for pin in pins if pin)), cell_of_cpu)


# --- the instance --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceCell:
    """One guest cell: its floating and pinned vCPUs and its memory."""

    id: int
    shared_vcpus: frozenset[int]
    dedicated_vcpus: frozenset[int]
    memory_mib: int

    @property
    def vcpus(self) -> frozenset[int]:
        return self.shared_vcpus | self.dedicated_vcpus


@dataclass(frozen=True, slots=True)
class FittedCell:
    """A guest cell as a fit left Nova's InstanceNUMACell: the page size it chose, the host
    cell's id it took, its pinning and the CPUs reserved for the emulator threads. A tuple and a
    frozenset, not a dict: a topology stays hashable, as a WithinHost keying requests must be."""

    page_size: int | None
    id: int
    pinning: tuple[tuple[int, int], ...] = ()
    reserved: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class InstanceTopology:
    """The NUMA topology Nova gives an instance; the policies apply to every cell."""

    cells: tuple[InstanceCell, ...]
    cpu_policy: str | None = None
    """`shared`, `dedicated`, `mixed` or None (unset: floating)."""
    cpu_thread_policy: str | None = None
    page_size: int | None = None
    """KiB, PAGE_SMALL, PAGE_LARGE, PAGE_ANY, or None (or 0) for no page size."""
    emulator_threads_policy: str | None = None
    fitted: tuple[FittedCell, ...] = ()
    """Per guest cell, what an earlier fit left in Nova's guest cell object, which the next fit
    starts from (see `refitted`); empty for the topology as the flavor asks for it."""

    @property
    def pinned(self) -> bool:
        return self.cpu_policy in _PINNED_POLICIES

    @property
    def emulator_threads_isolated(self) -> bool:
        return self.emulator_threads_policy == "isolate"


def _true(text: str | None) -> bool:
    return text is not None and str(text).strip().lower() in _TRUE


def _guest_cpu_spec(text: str) -> set[int]:
    """vCPU numbers in Nova's CPU list syntax (`0-3,^2`); may be empty, as Nova allows."""
    wanted: set[int] = set()
    rejected: set[int] = set()
    for raw in text.split(","):
        rule = raw.strip()
        if not rule:
            continue
        first, dash, last = rule.partition("-")
        try:
            if dash:
                reject = first[:1] == "^"
                low, high = int((first[1:] if reject else first).strip()), int(last.strip())
                if low > high:
                    raise ValueError
                (rejected if reject else wanted).update(range(low, high + 1))
            elif rule[0] == "^":
                rejected.add(int(rule[1:].strip()))
            else:
                wanted.add(int(rule))
        except ValueError:
            raise NumaSpecError(f"{text!r} is not a CPU list (such as 0-3,^2)") from None
    return wanted - rejected


def _page_size(text: str) -> int | float:
    """A `hw:mem_page_size` value as Nova reads it: a word, KiB, or a size with a unit (oslo's
    string_to_bytes, IEC: `2MB` and `2MiB` are 2048 KiB, `1Gb` is in bits)."""
    if text in _PAGE_WORDS:
        return _PAGE_WORDS[text]
    if text.isdigit():
        return int(text)
    match = _SIZE.match(text)
    if match is None:
        raise NumaSpecError(
            f"hw:mem_page_size {text!r}: expected small, large, any, a size in KiB or 2MB/1GB"
        )
    number, prefix, unit = match.groups()
    magnitude = float(number) / (8 if unit in ("b", "bit") else 1)
    size_bytes = math.ceil(magnitude * 1024 ** _PREFIX_EXPONENT[prefix[:1]] if prefix else magnitude)
    size_kib = size_bytes / KIB_PER_MIB
    return int(size_kib) if size_kib == int(size_kib) else size_kib


def _flavor_and_image(
    key: str, extra_specs: Mapping[str, str], image: Mapping[str, str]
) -> tuple[str | None, str | None]:
    return extra_specs.get(f"hw:{key}"), image.get(f"hw_{key}")


def _cpu_policy(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> str | None:
    flavor_policy, image_policy = _flavor_and_image("cpu_policy", extra_specs, image)
    for source, policy in (("flavor", flavor_policy), ("image", image_policy)):
        if policy and policy not in CPU_POLICIES:
            raise NumaSpecError(f"{source} cpu_policy {policy!r}: expected one of {', '.join(CPU_POLICIES)}")
    if flavor_policy == DEDICATED:
        return DEDICATED
    if flavor_policy == MIXED:
        if image_policy == DEDICATED:
            raise NumaSpecError("the image's hw_cpu_policy=dedicated conflicts with the flavor's mixed")
        return MIXED
    if flavor_policy == SHARED:
        if image_policy in (MIXED, DEDICATED):
            raise NumaSpecError(
                f"the image's hw_cpu_policy={image_policy} conflicts with the flavor's shared"
            )
        return SHARED
    return image_policy if image_policy in CPU_POLICIES else None


def _thread_policy(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> str | None:
    flavor_policy, image_policy = _flavor_and_image("cpu_thread_policy", extra_specs, image)
    for source, policy in (("flavor", flavor_policy), ("image", image_policy)):
        if policy and policy not in THREAD_POLICIES:
            raise NumaSpecError(
                f"{source} cpu_thread_policy {policy!r}: expected one of {', '.join(THREAD_POLICIES)}"
            )
    if flavor_policy in (None, PREFER):
        return flavor_policy or image_policy
    if image_policy and image_policy != flavor_policy:
        raise NumaSpecError(f"the image's hw_cpu_thread_policy conflicts with the flavor's {flavor_policy}")
    return flavor_policy


def _emulator_policy(extra_specs: Mapping[str, str]) -> str | None:
    policy = extra_specs.get("hw:emulator_threads_policy")
    if not policy:
        return None
    if policy not in EMULATOR_POLICIES:
        raise NumaSpecError(f"hw:emulator_threads_policy {policy!r}: expected share or isolate")
    return policy


def _mask(vcpus: int, mask: str) -> set[int]:
    return _guest_cpu_spec(f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask)


def _realtime_cpus(vcpus: int, extra_specs: Mapping[str, str], image: Mapping[str, str]) -> set[int] | None:
    if not _true(extra_specs.get("hw:cpu_realtime")):
        return None
    flavor_mask, image_mask = _flavor_and_image("cpu_realtime_mask", extra_specs, image)
    mask = image_mask or flavor_mask
    every = set(range(vcpus))
    realtime = _mask(vcpus, mask) if mask else set(every)
    if not realtime:
        raise NumaSpecError("hw:cpu_realtime_mask leaves no realtime vCPU")
    emulator = _emulator_policy(extra_specs)
    if realtime == every and not emulator:
        raise NumaSpecError("hw:cpu_realtime_mask must leave a vCPU out, or set hw:emulator_threads_policy")
    if not realtime <= every:
        raise NumaSpecError("hw:cpu_realtime_mask names vCPUs the flavor does not have")
    return realtime


def _dedicated_mask(vcpus: int, extra_specs: Mapping[str, str]) -> set[int] | None:
    mask = extra_specs.get("hw:cpu_dedicated_mask")
    if not mask:
        return None
    dedicated = _mask(vcpus, mask)
    every = set(range(vcpus))
    if not dedicated or not every - dedicated:
        raise NumaSpecError("hw:cpu_dedicated_mask must leave some vCPUs shared and some dedicated")
    if not dedicated <= every:
        raise NumaSpecError("hw:cpu_dedicated_mask names vCPUs the flavor does not have")
    return dedicated


def _requested_cpus(extra_specs: Mapping[str, str]) -> tuple[int, int]:
    shared = dedicated = 0
    for key, value in extra_specs.items():
        for pattern, is_dedicated in ((_VCPU_RESOURCE, False), (_PCPU_RESOURCE, True)):
            if pattern.match(key):
                try:
                    amount = int(value)
                except ValueError:
                    continue  # refused elsewhere (the flavor's resources), not by the NUMA constraints
                if is_dedicated:
                    dedicated += amount
                else:
                    shared += amount
    return shared, dedicated


def _node_count(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> int | None:
    flavor_nodes, image_nodes = _flavor_and_image("numa_nodes", extra_specs, image)
    if flavor_nodes and image_nodes:
        raise NumaSpecError("hw:numa_nodes is set by both the flavor and the image")
    nodes = flavor_nodes or image_nodes
    if nodes is None:
        return None
    try:
        int_like = str(int(nodes)) == str(nodes)
    except ValueError:
        int_like = False
    if not int_like or int(nodes) < 1:
        raise NumaSpecError(f"hw:numa_nodes {nodes!r}: expected a whole number of at least 1")
    return int(nodes) if nodes else None


def _page_size_request(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> int | float | None:
    flavor_size, image_size = _flavor_and_image("mem_page_size", extra_specs, image)
    if not flavor_size and image_size:
        raise NumaSpecError("the image's hw_mem_page_size needs the flavor's hw:mem_page_size")
    if not flavor_size:
        return None
    size = _page_size(flavor_size)
    if image_size and size in (PAGE_ANY, PAGE_LARGE):
        return _page_size(image_size)
    if image_size:
        raise NumaSpecError(f"the image's hw_mem_page_size is refused by the flavor's {flavor_size}")
    return size


def _locked_memory(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> None:
    flavor_lock, image_lock = _flavor_and_image("locked_memory", extra_specs, image)
    flavor_size, image_size = _flavor_and_image("mem_page_size", extra_specs, image)
    locked: bool | None = None
    if flavor_lock is not None:
        locked = _true(flavor_lock)
        if image_lock is not None and locked != _true(image_lock):
            raise NumaSpecError("hw:locked_memory differs between the flavor and the image")
    elif image_lock is not None:
        locked = _true(image_lock)
    if locked and not (flavor_size or image_size):
        raise NumaSpecError("hw:locked_memory needs hw:mem_page_size")


def _per_cell(extra_specs: Mapping[str, str], image: Mapping[str, str], key: str) -> list[str] | None:
    flavor_list: list[str] = []
    for index in range(NUMA_NODES_MAX):
        value = extra_specs.get(f"hw:{key}.{index}")
        if value is None:
            break
        flavor_list.append(value)
    image_list: list[str] = []
    for index in range(NUMA_NODES_MAX):
        value = image.get(f"hw_{key}.{index}")
        if value is None:
            break
        image_list.append(value)
    if flavor_list and image_list:
        raise NumaSpecError(f"hw_{key} is set by both the flavor and the image")
    return flavor_list or image_list or None


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise NumaSpecError(f"{what} {text!r}: expected a whole number of MiB") from None


def instance_topology(
    vcpus: int,
    memory_mib: int,
    extra_specs: Mapping[str, str],
    image_properties: Mapping[str, str] | None = None,
) -> InstanceTopology | None:
    """The NUMA topology Nova gives an instance of the flavor and image, None where it gives
    none; raises NumaSpecError (one line) where Nova refuses the request."""
    image = image_properties or {}
    cpu_policy = _cpu_policy(extra_specs, image)
    thread_policy = _thread_policy(extra_specs, image)
    realtime = _realtime_cpus(vcpus, extra_specs, image)
    dedicated = _dedicated_mask(vcpus, extra_specs)
    emulator = _emulator_policy(extra_specs)
    requested_shared, requested_dedicated = _requested_cpus(extra_specs)
    if cpu_policy and (requested_shared or requested_dedicated):
        raise NumaSpecError("resources:VCPU or resources:PCPU cannot be combined with hw:cpu_policy")
    if requested_shared and requested_dedicated:
        raise NumaSpecError("resources:VCPU and resources:PCPU cannot both be requested")
    if requested_dedicated:
        wanted = vcpus + 1 if emulator == "isolate" else vcpus
        if requested_dedicated != wanted:
            raise NumaSpecError(f"resources:PCPU must be {wanted} for this flavor, got {requested_dedicated}")
        cpu_policy = DEDICATED
    if requested_shared:
        cpu_policy = SHARED
    trait = next((v for k, v in extra_specs.items() if _HYPERTHREADING_TRAIT.match(k)), None)
    if thread_policy and trait:
        raise NumaSpecError("trait:HW_CPU_HYPERTHREADING cannot be combined with hw:cpu_thread_policy")
    if trait == "forbidden":
        thread_policy = ISOLATE
    elif trait == "required":
        thread_policy = REQUIRE
    if cpu_policy in (SHARED, None):
        if thread_policy:
            raise NumaSpecError("hw:cpu_thread_policy needs hw:cpu_policy dedicated or mixed")
        if emulator == "isolate":
            raise NumaSpecError("hw:emulator_threads_policy=isolate needs hw:cpu_policy dedicated or mixed")
        if dedicated:
            raise NumaSpecError("hw:cpu_dedicated_mask needs hw:cpu_policy=mixed")
        if realtime:
            raise NumaSpecError("hw:cpu_realtime needs hw:cpu_policy dedicated or mixed")
    elif cpu_policy == DEDICATED:
        if dedicated:
            raise NumaSpecError("hw:cpu_dedicated_mask needs hw:cpu_policy=mixed")
    else:
        if (realtime and dedicated) or not (realtime or dedicated):
            raise NumaSpecError(
                "hw:cpu_policy=mixed needs either hw:cpu_dedicated_mask or hw:cpu_realtime_mask"
            )
        dedicated = dedicated or realtime
    nodes = _node_count(extra_specs, image)
    page_size = _page_size_request(extra_specs, image)
    persistent_memory = [
        label.strip() for label in extra_specs.get("hw:pmem", "").split(",") if label.strip()
    ]
    _locked_memory(extra_specs, image)
    pinned = set(range(vcpus)) if cpu_policy == DEDICATED else dedicated or set()
    if not (nodes or page_size or persistent_memory or cpu_policy in _PINNED_POLICIES):
        return None
    cells = _cells(vcpus, memory_mib, nodes or 1, pinned, extra_specs=extra_specs, image=image)
    # A size with a unit that is not a whole number of KiB asks for a topology, but the cells
    # hold its whole KiB only (Nova's integer field), so that `100B` asks for no page size at all.
    cell_page_size = None if page_size is None else int(page_size)
    return InstanceTopology(cells, cpu_policy, thread_policy, cell_page_size, emulator)


def _cells(
    vcpus: int,
    memory_mib: int,
    nodes: int,
    pinned: set[int],
    *,
    extra_specs: Mapping[str, str],
    image: Mapping[str, str],
) -> tuple[InstanceCell, ...]:
    cpu_texts = _per_cell(extra_specs, image, "numa_cpus")
    cpu_lists = None if cpu_texts is None else [_guest_cpu_spec(text) for text in cpu_texts]
    mem_texts = _per_cell(extra_specs, image, "numa_mem")
    mem_list = None if mem_texts is None else [_whole(text, "hw:numa_mem") for text in mem_texts]
    if cpu_lists is None and mem_list is None:
        if vcpus % nodes or memory_mib % nodes:
            raise NumaSpecError(f"{vcpus} vCPUs and {memory_mib} MiB do not split evenly into {nodes} cells")
        per_cell = vcpus // nodes
        return tuple(
            _cell(node, set(range(node * per_cell, (node + 1) * per_cell)), memory_mib // nodes, pinned)
            for node in range(nodes)
        )
    if cpu_lists is None or mem_list is None or len(cpu_lists) != nodes or len(mem_list) != nodes:
        raise NumaSpecError("hw:numa_cpus.N and hw:numa_mem.N must be given for every cell")
    unassigned = set(range(vcpus))
    cells = []
    for node, (cpus, memory) in enumerate(zip(cpu_lists, mem_list, strict=True)):
        for cpu in cpus:
            if cpu > vcpus - 1:
                raise NumaSpecError(f"hw:numa_cpus.{node} names vCPU {cpu}; the flavor has {vcpus}")
            if cpu not in unassigned:
                raise NumaSpecError(f"hw:numa_cpus.{node} names vCPU {cpu} a second time")
            unassigned.remove(cpu)
        cells.append(_cell(node, cpus, memory, pinned))
    if unassigned:
        raise NumaSpecError(f"hw:numa_cpus.N leaves vCPUs {sorted(unassigned)} in no cell")
    if sum(mem_list) != memory_mib:
        raise NumaSpecError(f"hw:numa_mem.N add up to {sum(mem_list)} MiB, not the flavor's {memory_mib}")
    return tuple(cells)


def _cell(node: int, cpus: set[int], memory_mib: int, pinned: set[int]) -> InstanceCell:
    return InstanceCell(node, frozenset(cpus - pinned), frozenset(cpus & pinned), memory_mib)


# --- fitting -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlacedCell:
    """A guest cell on its host cell: the page size chosen, its pinning, the CPUs reserved for
    the emulator threads."""

    guest: InstanceCell
    host_cell: int
    page_size: int | None
    pinning: Mapping[int, int]
    """Guest vCPU -> host CPU (pinned vCPUs only)."""
    reserved_cpus: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class NumaFit:
    """Whether an instance fits the cells, where, and why not."""

    placed: tuple[PlacedCell, ...] = ()
    """Per guest cell, in order; empty when it does not fit."""
    reasons: tuple[str, ...] = ()
    """When it does not fit: one line per host cell, naming it."""

    @property
    def fits(self) -> bool:
        return bool(self.placed)

    @property
    def host_cells(self) -> tuple[int, ...]:
        return tuple(cell.host_cell for cell in self.placed)

    @property
    def pinning(self) -> dict[int, int]:
        return {vcpu: cpu for cell in self.placed for vcpu, cpu in cell.pinning.items()}


@dataclass(slots=True)
class _GuestState:
    """What Nova's search leaves in a guest cell object between attempts."""

    cell: InstanceCell
    page_size: int | None
    pinning: dict[int, int] = field(default_factory=dict)
    reserved: frozenset[int] = frozenset()
    id: int = -1
    """The id Nova's guest cell object holds: its own until it fits (or is packed onto) a host
    cell, whose id it then takes; Nova remembers the pairs it tried by this id."""

    def __post_init__(self) -> None:
        if self.id < 0:
            self.id = self.cell.id


@dataclass(frozen=True, slots=True)
class _PciRequest:
    """The PCI devices an instance asks for, for NUMA affinity: the flavor's
    `pci_passthrough:alias` against the host's pools."""

    pools: Sequence[PciPool]
    aliases: Mapping[str, PciAlias]
    extra_spec: str


def _fitting_page_size(cell: HostCell, memory_kib: int, sizes: Iterable[int]) -> int | None:
    for size in sizes:
        pages = cell.page(size)
        if pages is None:
            raise PageSizeUnsupportedError
        if memory_kib <= pages.free * pages.size_kib and memory_kib % pages.size_kib == 0:
            return size
    return None


def _resolve_page_size(cell: HostCell, guest: _GuestState) -> int | None:
    sizes = sorted((pages.size_kib for pages in cell.pages), reverse=True)
    memory_kib = guest.cell.memory_mib * KIB_PER_MIB
    wanted = guest.page_size
    if wanted == PAGE_SMALL:
        return _fitting_page_size(cell, memory_kib, sizes[-1:])
    if wanted == PAGE_LARGE:
        return _fitting_page_size(cell, memory_kib, sizes[:-1])
    if wanted == PAGE_ANY:
        return _fitting_page_size(cell, memory_kib, sizes)
    assert wanted is not None
    return _fitting_page_size(cell, memory_kib, [wanted])


def _cell_refusal(
    cell: HostCell,
    guest: _GuestState,
    policy: InstanceTopology,
    *,
    cpu_ratio: float,
    ram_ratio: float,
    reserved: int,
) -> str | None:
    """Why the guest cell does not fit the host cell, or None when it does (the guest state then
    holds its page size and pinning)."""
    instance = guest.cell
    pinned = policy.pinned
    if guest.page_size:
        chosen = _resolve_page_size(cell, guest)
        if not chosen:
            return _page_refusal(cell, guest) + _carried_size(policy)
        guest.page_size = chosen
    elif cell.pages:
        smallest = min(pages.size_kib for pages in cell.pages)
        small = cell.page(smallest)
        assert small is not None
        available = (small.free if pinned else small.total) * smallest
        memory_kib = instance.memory_mib * KIB_PER_MIB
        if not (memory_kib <= available and memory_kib % smallest == 0):
            kind = "free" if pinned else "total"
            return (
                f"{available // KIB_PER_MIB} MiB of {kind} small pages < {instance.memory_mib} MiB requested"
            )
    elif pinned and cell.free_memory_mib < instance.memory_mib:
        return f"{cell.free_memory_mib} MiB free < {instance.memory_mib} MiB requested"
    elif not pinned and cell.memory_mib < instance.memory_mib:
        return f"{cell.memory_mib} MiB < {instance.memory_mib} MiB requested"
    if pinned and len(instance.dedicated_vcpus) + reserved > len(cell.dedicated_cpus):
        wanted = len(instance.dedicated_vcpus) + reserved
        return f"{len(cell.dedicated_cpus)} dedicated CPUs < {wanted} requested"
    if policy.cpu_policy != DEDICATED and len(instance.shared_vcpus) > len(cell.shared_cpus):
        return f"{len(cell.shared_cpus)} shared CPUs < {len(instance.shared_vcpus)} requested"
    if pinned:
        free = len(cell.free_dedicated_cpus)
        if len(instance.dedicated_vcpus) + reserved > free:
            return f"{free} free dedicated CPUs < {len(instance.dedicated_vcpus) + reserved} requested"
        packed = _pack(cell, instance.dedicated_vcpus, policy.cpu_thread_policy, reserved)
        if packed is None or not instance.vcpus:  # Nova tests the packed cell's truth: its vCPU count
            thread_policy = policy.cpu_thread_policy or PREFER
            return f"no {thread_policy} thread placement for {len(instance.dedicated_vcpus)} pinned vCPUs"
        guest.pinning, guest.reserved = dict(packed[0]), packed[1]
        guest.id = cell.id
    if policy.cpu_policy != DEDICATED:
        cpu_usage = cell.shared_cpu_usage + len(instance.shared_vcpus)
        if cpu_usage > len(cell.shared_cpus) * cpu_ratio:
            return f"{cpu_usage} shared vCPUs > {len(cell.shared_cpus)} CPUs x {cpu_ratio:g}"
        ram_usage = cell.memory_usage_mib + instance.memory_mib
        if ram_usage > cell.memory_mib * ram_ratio:
            return f"{ram_usage} MiB > {cell.memory_mib} MiB x {ram_ratio:g}"
    return None


def _carried_size(topology: InstanceTopology) -> str:
    """Where the flavor asked for a kind of page and an earlier instance's fit chose the size, a
    refusal says so: the pages the flavor would take may well be free."""
    if topology.fitted and topology.page_size in (PAGE_SMALL, PAGE_LARGE, PAGE_ANY):
        return " (the size fitted for the request's previous instance)"
    return ""


def _page_refusal(cell: HostCell, guest: _GuestState) -> str:
    wanted = guest.page_size
    memory_kib = guest.cell.memory_mib * KIB_PER_MIB
    if wanted in (PAGE_SMALL, PAGE_LARGE, PAGE_ANY):
        kind = {PAGE_SMALL: "small", PAGE_LARGE: "large", PAGE_ANY: "any"}[int(wanted or 0)]
        free = ", ".join(f"{p.free} x {p.size_kib} KiB" for p in cell.pages) or "no pages"
        return f"no {kind} page size holds {guest.cell.memory_mib} MiB (free: {free})"
    assert wanted is not None
    pages = cell.page(int(wanted))
    assert pages is not None
    needed = -(-memory_kib // pages.size_kib)
    if memory_kib % pages.size_kib:
        return f"{guest.cell.memory_mib} MiB is not a whole number of {pages.size_kib} KiB pages"
    return f"{pages.free} free {pages.size_kib} KiB pages < {needed} needed"


def _pinning(threads: int, cores: Sequence[list[int]], vcpus: frozenset[int]) -> list[tuple[int, int]] | None:
    if threads * len(cores) < len(vcpus):
        return None
    usable = itertools.chain.from_iterable(core[:threads] for core in cores)
    return list(zip(sorted(vcpus), usable, strict=False))


def _reserved(
    cores: Sequence[list[int]], pinning: list[tuple[int, int]] | None, count: int, isolate: bool = False
) -> set[int] | None:
    """The CPUs left for the emulator threads once the pinning is taken."""
    if not pinning:
        return None
    remaining = [list(core) for core in cores]
    if count:
        for _vcpu, cpu in pinning:
            for core in remaining:
                if cpu in core:
                    if isolate:
                        remaining.remove(core)
                    else:
                        core.remove(cpu)
                    break
    chosen = set(list(itertools.chain.from_iterable(remaining))[:count]) if count else set()
    return chosen or None


def _pack(
    cell: HostCell, vcpus: frozenset[int], thread_policy: str | None, reserved: int
) -> tuple[list[tuple[int, int]], frozenset[int]] | None:
    """Nova's packing of pinned vCPUs onto the cell's free cores: emptier cores first, threads
    of one core together, as its thread policy allows."""
    threads_per_core = cell.threads_per_core
    by_threads: dict[int, list[list[int]]] = defaultdict(list)
    for core in cell._free_cores():
        for threads in range(1, len(core) + 1):
            by_threads[threads].append(core)
    pinning: list[tuple[int, int]] | None = None
    taken: set[int] | None = None
    if thread_policy == ISOLATE:
        if threads_per_core not in by_threads:
            return None
        if threads_per_core != 1 and cell.dedicated_cpus != cell.shared_cpus:
            return None
        pinning = _pinning(1, by_threads[threads_per_core], vcpus)
        taken = _reserved(by_threads[1], pinning, reserved, isolate=True)
        if not pinning or (reserved and not taken):
            return None
    else:
        if thread_policy == REQUIRE and threads_per_core <= 1:
            return None
        threads = 1
        for threads, cores in sorted(by_threads.items(), reverse=True):
            if thread_policy == REQUIRE and threads <= 1:
                continue
            pinning = _pinning(threads, cores, vcpus)
            taken = _reserved(by_threads[1], pinning, reserved)
            if pinning is None or (reserved and not taken):
                continue
            break
        if thread_policy != REQUIRE and not pinning:
            singles = [[cpu] for cpu in itertools.chain.from_iterable(by_threads[1])]
            pinning = _pinning(threads, singles, vcpus)
            taken = _reserved(singles, pinning, reserved)
    if pinning is None or (reserved and not taken):
        return None
    return pinning, frozenset(taken or ())


def _pci_counts(pools: Sequence[PciPool]) -> dict[int | None, int]:
    counts: dict[int | None, int] = defaultdict(int)
    for pool in pools:
        counts[pool.numa_node] += pool.free
    return counts


def _search_order(
    cells: Sequence[HostCell],
    topology: InstanceTopology,
    pci: _PciRequest | None,
    pci_pools: Sequence[PciPool],
) -> list[HostCell]:
    ordered = list(cells)
    if len(cells) <= len(topology.cells):
        return ordered
    ordered.sort(key=lambda cell: cell.free_memory_mib, reverse=True)
    if topology.cpu_policy in (None, SHARED):
        ordered.sort(key=lambda cell: cell.shared_cpu_usage)
    else:
        ordered.sort(key=lambda cell: len(cell.free_dedicated_cpus), reverse=True)
    if pci_pools:
        counts = _pci_counts(pci_pools)
        if pci is not None:
            ordered.sort(key=lambda cell: counts.get(cell.id, 0), reverse=True)
        else:
            ordered.sort(key=lambda cell: counts.get(cell.id, 0))
    return ordered


def fit(
    cells: Sequence[HostCell],
    topology: InstanceTopology,
    *,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    pci_pools: Sequence[PciPool] = (),
    pci_aliases: Mapping[str, PciAlias] | None = None,
    pci_request: str | None = None,
    pci_numa_policy: str | None = None,
) -> NumaFit:
    """Where the instance's guest cells go on the host cells, as Nova's NUMA topology filter
    answers, or why they do not fit.

    `pci_pools` are the host's PCI pools (device_pools' order): present, they order the host
    cells as Nova orders them (cells with devices first for an instance asking for devices,
    last otherwise). `pci_request` (a flavor's `pci_passthrough:alias`, with `pci_aliases`) must
    then also fit the chosen cells under each alias's NUMA policy, or `pci_numa_policy` (the
    flavor's `hw:pci_numa_affinity_policy`) where given; a request pci.support_requests refuses
    to read raises its PciRequestError.
    """
    pci = _PciRequest(pci_pools, pci_aliases or {}, pci_request) if pci_request else None
    if not cells:
        return NumaFit(reasons=("the host reports no NUMA cells",))
    if len(cells) < len(topology.cells):
        return NumaFit(reasons=(f"{len(cells)} host cells < {len(topology.cells)} guest cells",))
    ordered = _search_order(cells, topology, pci, pci_pools)
    if topology.fitted:
        states = [
            _GuestState(cell, left.page_size, dict(left.pinning), left.reserved, left.id)
            for cell, left in zip(topology.cells, topology.fitted, strict=True)
        ]
    else:
        states = [_GuestState(cell, topology.page_size) for cell in topology.cells]
    refusals: dict[int, str] = {}
    known_fits: set[tuple[int, int]] = set()
    known_refusals: set[tuple[int, int]] = set()
    pci_refused: list[tuple[int, ...]] = []
    for permutation in itertools.permutations(ordered, len(states)):
        chosen: list[int] = []
        for host, guest in zip(permutation, states, strict=True):
            pair = (host.id, guest.id)
            if pair in known_refusals:
                break
            if pair in known_fits:
                guest.id = host.id
                chosen.append(host.id)
                continue
            reserved = 1 if topology.emulator_threads_isolated and not chosen else 0
            try:
                why = _cell_refusal(
                    host,
                    guest,
                    topology,
                    cpu_ratio=cpu_allocation_ratio,
                    ram_ratio=ram_allocation_ratio,
                    reserved=reserved,
                )
            except PageSizeUnsupportedError:
                why = f"no {guest.page_size} KiB pages{_carried_size(topology)}"
            if why is not None:
                known_refusals.add(pair)
                label = f"guest cell {guest.cell.id}: " if len(states) > 1 else ""
                refusals.setdefault(host.id, f"cell {host.id}: {label}{why}")
                break
            known_fits.add(pair)
            guest.id = host.id
            chosen.append(host.id)
        if len(chosen) != len(states):
            continue
        if pci is not None and not support_requests(
            pci.pools, pci.aliases, pci.extra_spec, cells=frozenset(chosen), numa_policy=pci_numa_policy
        ):
            pci_refused.append(tuple(chosen))
            continue
        placed = tuple(
            PlacedCell(state.cell, host_id, state.page_size, dict(state.pinning), state.reserved)
            for state, host_id in zip(states, chosen, strict=True)
        )
        return NumaFit(placed=placed)
    reasons = []
    for cell in cells:
        if cell.id in refusals:
            reasons.append(refusals[cell.id])
        elif pci_refused:
            reasons.append(f"cell {cell.id}: the PCI devices requested do not fit its placement")
        else:
            reasons.append(f"cell {cell.id}: the other guest cells do not fit beside it")
    return NumaFit(reasons=tuple(reasons))


def refitted(topology: InstanceTopology, numa_fit: NumaFit) -> InstanceTopology:
    """The topology as the fit left it, which Nova's scheduler fits the request's next instance
    with: `consume_from_request` puts the topology `numa_fit_instance_to_host` returned (the same
    guest cell objects, changed by the search) in the request spec. What changes the next answer
    is each cell's page size (`large` or `any` resolved: the next instance must find pages of the
    size the previous one got, on any host); the ids (the host cells taken) key the search's
    memory of the pairs it tried, and the pinning is kept where that memory spares a packing, so
    they are carried too. `numa_fit` must fit."""
    if not numa_fit.fits:
        raise ValueError("only a topology that fits is carried to the next instance")
    return replace(
        topology,
        fitted=tuple(
            FittedCell(
                placed.page_size,
                placed.host_cell,
                tuple(sorted(placed.pinning.items())),
                placed.reserved_cpus,
            )
            for placed in numa_fit.placed
        ),
    )


class PinningConflictError(ValueError):
    """A placement whose pinned CPUs are not free on their host cell (Nova refuses the claim)."""


PinningConflict = PinningConflictError
"""The name model/placement.py was written against."""


def consume(cells: Sequence[HostCell], topology: InstanceTopology, numa_fit: NumaFit) -> tuple[HostCell, ...]:
    """The cells once the fitted instance's usage is added, as Nova's tracker adds it."""
    updated = []
    touched = set(numa_fit.host_cells)
    for cell in cells:
        if cell.id not in touched:
            updated.append(cell)
            continue
        memory = cell.memory_usage_mib
        shared = cell.shared_cpu_usage
        pages = cell.pages
        pinned = set(cell.pinned_cpus)
        for placed in numa_fit.placed:
            if placed.host_cell != cell.id:
                continue
            size = placed.page_size or min((p.size_kib for p in pages), default=None)
            pages = tuple(
                replace(p, used=max(0, p.used + placed.guest.memory_mib * KIB_PER_MIB // p.size_kib))
                if p.size_kib == size
                else p
                for p in pages
            )
            memory += placed.guest.memory_mib
            shared += len(placed.guest.shared_vcpus)
            if not topology.pinned:
                continue
            taken = set(placed.pinning.values()) | set(placed.reserved_cpus)
            if topology.cpu_thread_policy == ISOLATE:
                taken = set().union(*(core for core in cell.siblings if core & taken)) if taken else set()
            if taken - cell.dedicated_cpus or taken & pinned:
                raise PinningConflictError(f"cell {cell.id}: CPUs {sorted(taken)} cannot be pinned")
            pinned |= taken
        updated.append(
            replace(
                cell,
                pages=pages,
                memory_usage_mib=max(0, memory),
                shared_cpu_usage=max(0, shared),
                pinned_cpus=frozenset(pinned),
            )
        )
    return tuple(updated)


def how_many_fit(
    cells: Sequence[HostCell],
    topology: InstanceTopology,
    *,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    limit: int,
    pci_pools: Sequence[PciPool] = (),
) -> int:
    """How many instances of the topology fit one after another (at most `limit`): fit, consume,
    again. `pci_pools` only orders the cells (an instance without PCI devices avoids the cells
    holding them), as in `fit`.

    An instance of one guest cell without pinned CPUs, and with no page size or a fixed one,
    lands on whichever cell still takes it, and what it uses there depends on that cell alone:
    its count is then the sum of what each cell takes on its own, worked out per cell without
    trying the others each time. (Not with `small`, `large` or `any`: Nova's search keeps the
    size one cell resolved for the cells it tries next, so that the cells are not independent;
    nor with a topology an earlier fit left, whose cells' sizes may differ.)"""
    fixed_page_size = topology.page_size not in (PAGE_SMALL, PAGE_LARGE, PAGE_ANY)
    if len(topology.cells) == 1 and not topology.pinned and fixed_page_size and cells and not topology.fitted:
        total = 0
        for cell in cells:
            total += _alone(cell, topology, cpu_allocation_ratio, ram_allocation_ratio, limit - total)
            if total >= limit:
                break
        return min(total, limit)
    return _in_a_row(
        cells,
        topology,
        cpu_allocation_ratio=cpu_allocation_ratio,
        ram_allocation_ratio=ram_allocation_ratio,
        limit=limit,
        pci_pools=pci_pools,
    )


def _in_a_row(
    cells: Sequence[HostCell],
    topology: InstanceTopology,
    *,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    limit: int,
    pci_pools: Sequence[PciPool] = (),
) -> int:
    count = 0
    current = tuple(cells)
    while count < limit:
        placement = fit(
            current,
            topology,
            cpu_allocation_ratio=cpu_allocation_ratio,
            ram_allocation_ratio=ram_allocation_ratio,
            pci_pools=pci_pools,
        )
        if not placement.fits:
            break
        try:
            current = consume(current, topology, placement)
        except PinningConflictError:
            break
        count += 1
    return count


def _most(used: int, each: int, ceiling: float, limit: int) -> int:
    """The largest n (at most `limit`) with used + i x each <= ceiling for every i up to n, by
    Nova's own comparison."""
    if each <= 0:
        return limit if used <= ceiling else 0
    if used + each > ceiling:
        return 0
    n = min(limit, int((ceiling - used) // each))
    while n > 0 and used + n * each > ceiling:
        n -= 1
    while n < limit and used + (n + 1) * each <= ceiling:
        n += 1
    return n


def _alone(cell: HostCell, topology: InstanceTopology, cpu_ratio: float, ram_ratio: float, limit: int) -> int:
    """How many instances of a one-cell unpinned topology (no page size or a fixed one) the cell
    takes on its own."""
    if limit <= 0:
        return 0
    guest = topology.cells[0]
    memory_kib = guest.memory_mib * KIB_PER_MIB
    shared = len(guest.shared_vcpus)
    if shared > len(cell.shared_cpus):
        return 0
    most = min(
        limit,
        _most(cell.shared_cpu_usage, shared, len(cell.shared_cpus) * cpu_ratio, limit),
        _most(cell.memory_usage_mib, guest.memory_mib, cell.memory_mib * ram_ratio, limit),
    )
    wanted = topology.page_size
    if not wanted:
        if cell.pages:
            smallest = min(pages.size_kib for pages in cell.pages)
            small = cell.page(smallest)
            assert small is not None
            if not (memory_kib <= small.total * smallest and memory_kib % smallest == 0):
                return 0
        elif cell.memory_mib < guest.memory_mib:
            return 0
        return most
    pages = cell.page(wanted)
    if pages is None or memory_kib % wanted:
        return 0
    return min(most, max(0, pages.free) // (memory_kib // wanted))
