"""What instances use of a host's cells: `consume` adds a fitted instance's usage to the cells,
as Nova's resource tracker does (nova.virt.hardware numa_usage_from_instance_numa), and
`how_many_fit` fits and consumes in a row (PCI devices aside: pci.apply_requests takes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from virtcap.model.numa.cells import HostCell
from virtcap.model.numa.fitting import NumaFit, fit
from virtcap.model.numa.request import (
    ISOLATE,
    KIB_PER_MIB,
    PAGE_ANY,
    PAGE_LARGE,
    PAGE_SMALL,
    InstanceTopology,
)
from virtcap.model.pci import PciPool

__all__ = ["PinningConflictError", "consume", "count_in_a_row", "how_many_fit"]


class PinningConflictError(ValueError):
    """A fit whose pinned CPUs are not free on their host cell (Nova refuses the claim)."""


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
            total += _count_on_cell_alone(
                cell, topology, cpu_allocation_ratio, ram_allocation_ratio, limit - total
            )
            if total >= limit:
                break
        return min(total, limit)
    return count_in_a_row(
        cells,
        topology,
        cpu_allocation_ratio=cpu_allocation_ratio,
        ram_allocation_ratio=ram_allocation_ratio,
        limit=limit,
        pci_pools=pci_pools,
    )


def count_in_a_row(
    cells: Sequence[HostCell],
    topology: InstanceTopology,
    *,
    cpu_allocation_ratio: float,
    ram_allocation_ratio: float,
    limit: int,
    pci_pools: Sequence[PciPool] = (),
) -> int:
    """How many instances of the topology fit one after another (at most `limit`), each fitted
    and consumed before the next: the long way, which `how_many_fit` shortens where the cells are
    independent."""
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


def _most_within(used: int, each: int, ceiling: float, limit: int) -> int:
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


def _count_on_cell_alone(
    cell: HostCell, topology: InstanceTopology, cpu_ratio: float, ram_ratio: float, limit: int
) -> int:
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
        _most_within(cell.shared_cpu_usage, shared, len(cell.shared_cpus) * cpu_ratio, limit),
        _most_within(cell.memory_usage_mib, guest.memory_mib, cell.memory_mib * ram_ratio, limit),
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
