"""Which host pages hold a domain's memory, guest cell by guest cell, as libvirt backs them.

A domain's `<memoryBacking><hugepages>` lists `<page>` elements, each of one size, each for the
guest cells of its `nodeset` or, without a nodeset, for every guest cell no other page names
(libvirt refuses two pages without a nodeset, and nodesets that overlap). A guest cell that no
page covers is on the small pages: Nova's libvirt driver writes a `<page>` only for the guest
cells whose chosen page size is above the host's smallest (`hw:mem_page_size` any or large can
leave one cell on 2 MiB pages and the next on small ones), each with its own nodeset. A `<page>`
of the small page size is no hugepage either (libvirt then uses ordinary memory). A bare
`<hugepages/>` asks for the kernel's default hugepage size, which the capabilities do not report:
it is taken to be the host's smallest hugepage size (2 MiB on x86 unless the kernel was booted
with `default_hugepagesz`). A guest without NUMA cells is one guest cell, 0 (libvirt turns a page
of nodeset 0 into the page without a nodeset for it). The memory's source (`memfd`, `file`,
`anonymous`) does not change the page size.
"""

from __future__ import annotations

from collections.abc import Sequence

from virtcap.model.facts import DomainFacts, HugepageBacking

__all__ = ["cell_backing", "cell_page_size", "hugepage_backed_bytes"]


def cell_backing(hugepages: Sequence[HugepageBacking], guest_cell: int) -> HugepageBacking | None:
    """The `<page>` libvirt backs the guest cell with: the one whose nodeset names the cell,
    else the one without a nodeset, else none (the small pages)."""
    default = None
    for page in hugepages:
        if page.guest_cells is None:
            default = page
        elif guest_cell in page.guest_cells:
            return page
    return default


def cell_page_size(domain: DomainFacts, guest_cell: int, page_sizes: Sequence[int]) -> int | None:
    """The size (KiB) of the host pages holding the guest cell's memory, of the host's
    `page_sizes` (smallest first, the small pages first of all); None where the host reports no
    page sizes, or the domain asks for the default hugepage size on a host without hugepages."""
    if not page_sizes:
        return None
    small = page_sizes[0]
    default_huge = page_sizes[1] if len(page_sizes) > 1 else None
    if not domain.hugepages:
        return small
    if not domain.layout.hugepages:
        # a <hugepages> whose pages could not be read (the placement is unknown): the default size
        return default_huge or small
    page = cell_backing(domain.layout.hugepages, guest_cell)
    if page is None:
        return small
    return page.size_kib if page.size_kib is not None else default_huge


def hugepage_backed_bytes(domain: DomainFacts, small_page_kib: int | None) -> int:
    """How much of the domain's memory (per its definition) is held in hugepages: the memory of
    the guest cells a `<page>` above the small page size backs (`small_page_kib`; None where the
    host reports no page sizes, and any `<page>` then counts)."""
    if not domain.hugepages:
        return 0
    layout = domain.layout
    if not layout.hugepages:
        return domain.memory_bytes
    cells = [(cell.id, cell.memory_bytes) for cell in layout.guest_cells] or [(0, domain.memory_bytes)]
    backed = 0
    for guest_cell, memory_bytes in cells:
        page = cell_backing(layout.hugepages, guest_cell)
        if page is None:
            continue
        if page.size_kib is None or small_page_kib is None or page.size_kib > small_page_kib:
            backed += memory_bytes
    return backed
