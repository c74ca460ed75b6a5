"""The host's NUMA topology, from libvirt's capabilities XML (`<host><topology><cells>`).

Pure: the XML in, cells out; free pages come from a separate call (`virNodeGetFreePages`) and are
joined here. A driver that reports no topology gives no cells, never an invented single one: the
NUMA accounting then says it does not know, rather than showing one cell that does not exist.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from virtcap.audit.domain_xml import MEMORY_UNITS
from virtcap.model.facts import NumaCell, PageCount
from virtcap.units import parse_cpu_set

MAX_CELLS = 1024
MAX_CELL_CPUS = 65536


class CapabilitiesError(ValueError):
    """The topology cannot be read; the audit reports it as a problem of the host."""


def parse_capabilities(capabilities_xml: str) -> ET.Element:
    """The capabilities document, parsed once for all that is read from it."""
    try:
        return ET.fromstring(capabilities_xml)
    except ET.ParseError as error:
        raise CapabilitiesError(f"unreadable capabilities XML: {error}") from None


def numa_cells(
    capabilities: str | ET.Element, free_pages: Mapping[tuple[int, int], int] | None = None
) -> tuple[NumaCell, ...]:
    """The host's cells, each with its CPUs, thread siblings, memory and pages per size, from the
    capabilities XML or its parsed document.

    `free_pages` maps (cell id, page size in KiB) to the free pages libvirt counts; a page size
    missing from it has free None (unknown)."""
    root = parse_capabilities(capabilities) if isinstance(capabilities, str) else capabilities
    cells = root.find("host/topology/cells")
    if cells is None:
        return ()
    result = []
    for index, cell in enumerate(cells.iterfind("cell")):
        if index >= MAX_CELLS:
            raise CapabilitiesError(f"more than {MAX_CELLS} NUMA cells")
        result.append(_cell(cell, free_pages or {}))
    return tuple(sorted(result, key=lambda cell: cell.id))


def _cell(cell: ET.Element, free_pages: Mapping[tuple[int, int], int]) -> NumaCell:
    cell_id = _number(cell.get("id"), "cell id")
    cpus: set[int] = set()
    siblings: set[frozenset[int]] = set()
    for index, cpu in enumerate(cell.iterfind("cpus/cpu")):
        if index >= MAX_CELL_CPUS:
            raise CapabilitiesError(f"cell {cell_id}: more than {MAX_CELL_CPUS} CPUs")
        cpus.add(_number(cpu.get("id"), f"cell {cell_id} cpu id"))
        threads = cpu.get("siblings")
        if threads:
            try:
                thread_set = parse_cpu_set(threads)
            except ValueError:
                raise CapabilitiesError(f"cell {cell_id}: unreadable siblings {threads!r}") from None
            if len(thread_set) > 1:
                siblings.add(thread_set)
    pages = tuple(
        PageCount(size_kib=size, total=total, free=free_pages.get((cell_id, size)))
        for size, total in sorted(_pages(cell, cell_id).items())
    )
    return NumaCell(
        id=cell_id,
        cpus=frozenset(cpus),
        siblings=tuple(sorted(siblings, key=min)),
        memory_bytes=_memory(cell.find("memory"), cell_id),
        pages=pages,
    )


def _pages(cell: ET.Element, cell_id: int) -> dict[int, int]:
    pages: dict[int, int] = {}
    for element in cell.iterfind("pages"):
        unit = element.get("unit", "KiB").lower()
        if unit not in ("kib", "k"):
            raise CapabilitiesError(f"cell {cell_id}: page size in an unexpected unit {unit!r}")
        pages[_number(element.get("size"), f"cell {cell_id} page size")] = _number(
            element.text, f"cell {cell_id} page count"
        )
    return pages


def _memory(element: ET.Element | None, cell_id: int) -> int:
    if element is None:
        return 0
    unit = element.get("unit", "KiB").lower()
    if unit not in MEMORY_UNITS:
        raise CapabilitiesError(f"cell {cell_id}: memory in an unknown unit {unit!r}")
    return _number(element.text, f"cell {cell_id} memory") * MEMORY_UNITS[unit]


def _number(text: str | None, what: str) -> int:
    try:
        value = int((text or "").strip())
    except ValueError:
        raise CapabilitiesError(f"{what} is not a whole number: {text!r}") from None
    if value < 0:
        raise CapabilitiesError(f"{what} is negative: {text!r}")
    return value
