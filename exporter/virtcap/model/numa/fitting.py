"""Whether and where an instance's guest cells fit a host's cells, as Nova's NUMA topology
filter answers (nova.virt.hardware numa_fit_instance_to_host), or why they do not.

`fit` tries the guest cells on the host cells in Nova's order (its sorting of the cells by free
memory, CPUs and PCI devices when there are more host cells than guest cells, then every
permutation) and keeps the first placement where every guest cell fits its host cell and the PCI
requests fit the chosen cells. Nova's search mutates the guest cells as it goes (a page size
`large` or `any`, once resolved on one host cell, stays resolved for the cells tried after it; a
pinning computed on one cell is reused where an earlier fit on another is remembered): `fit` keeps
the same state, so that its answers are Nova's, quirks included. The strangest: Nova remembers
which (host cell, guest cell) pairs fit by the guest cell object's id, which each fit overwrites
with the host cell's id, so that a guest cell can pass on the remembered fit of another (a pinned
guest cell then lands, unpinned, on a cell without dedicated CPUs).

`refitted` is the topology a fit leaves, which Nova's scheduler fits the next instance of the
request with (its page sizes chosen).

Not read (Nova's answer may then differ): the socket PCI policy (pci.py refuses it where it
matters). Which thread of a core a pinned vCPU gets is the lowest free one; Nova's is Python's set
order, which changes as Nova rebuilds its cell objects (the core, the counts and every later fit
are the same).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from virtcap.model.numa.cells import HostCell
from virtcap.model.numa.request import (
    DEDICATED,
    ISOLATE,
    KIB_PER_MIB,
    PAGE_ANY,
    PAGE_LARGE,
    PAGE_SMALL,
    PREFER,
    REQUIRE,
    SHARED,
    FittedCell,
    InstanceCell,
    InstanceTopology,
)
from virtcap.model.pci import (
    PciAlias,
    PciPool,
    support_requests,
)

__all__ = ["NumaFit", "PlacedCell", "fit", "refitted"]


class PageSizeUnsupportedError(Exception):
    """A guest cell asks for a page size its host cell does not have (Nova's
    MemoryPageSizeNotSupported): that host cell cannot take it."""


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
    for core in cell.free_cores():
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
