"""The host's NUMA cells as Nova's resource tracker holds them: what each has and what is used
(the libvirt driver's _get_host_numa_topology; nova.objects.numa).

A host cell (`HostCell`) splits its CPUs into shared ones (Nova's `cpuset`, the VCPU inventory)
and dedicated ones (`pcpuset`, PCPU): with `cpu_dedicated_set` and no `cpu_shared_set` the cell
has no shared CPUs; with `cpu_shared_set` alone, no dedicated ones; with neither, every online CPU
is both (Nova's legacy behaviour, kept for upgrades). Memory is in MiB (KiB / 1024, rounded down)
and every page size has its total, the pages `reserved_huge_pages` keeps and the pages instances
use. `host_cells` builds the cells from the host's facts and charges the domains that hold NUMA
resources (see its docstring for how a domain's definition is read).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.facts import DomainFacts, DomainState, NumaCell
from virtcap.model.memory_backing import cell_page_size
from virtcap.model.numa.request import ISOLATE, KIB_PER_MIB, NumaSpecError, instance_topology

__all__ = ["CellPages", "HostCell", "host_cells"]

MIB = 1024**2


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

    def free_cores(self) -> list[list[int]]:
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
