"""A hypervisor described by its hardware (a SKU: CPUs, memory, disk, NUMA cells, hugepages, PCI
devices) rather than captured: the facts an audit of such a host, empty of domains, would give.

The CPUs and memory are shared out evenly over the cells (the first cells take one more CPU where
they do not divide), each core two threads where the cell's CPUs are even (SMT siblings, as on the
servers Nova's `hw:cpu_thread_policy` reads), the hugepages are per cell, and each PCI device
entry gives `count` functions per cell, on buses of their own."""

from __future__ import annotations

from dataclasses import dataclass

from virtcap.model.facts import HostFacts, NumaCell, PageCount, PciDevice, StorageFacts

SMALL_PAGE_KIB = 4
MAX_SKU_CELLS = 16
MAX_SKU_CPUS = 4096


@dataclass(frozen=True, slots=True)
class SkuHugepages:
    """Hugepages reserved in every cell: `count` pages of `size_kib`."""

    size_kib: int
    count: int


@dataclass(frozen=True, slots=True)
class SkuPciDevice:
    """PCI functions of one kind in every cell, as Nova types them (`type-PCI`, `type-PF`, `type-VF`)."""

    vendor_id: str
    product_id: str
    count: int
    dev_type: str = "type-PCI"
    class_code: str = ""


@dataclass(frozen=True, slots=True)
class Sku:
    cpus: int
    memory_bytes: int
    disk_bytes: int
    numa_cells: int = 1
    hugepages: tuple[SkuHugepages, ...] = ()
    pci_devices: tuple[SkuPciDevice, ...] = ()

    def problems(self) -> list[str]:
        """What makes no host: each a `key: why` line."""
        found = []
        if not 1 <= self.numa_cells <= MAX_SKU_CELLS:
            found.append(f"numa_cells: expected 1 to {MAX_SKU_CELLS}, got {self.numa_cells}")
        elif self.cpus < self.numa_cells:
            found.append(f"cpus: expected at least one per NUMA cell ({self.numa_cells}), got {self.cpus}")
        if self.cpus > MAX_SKU_CPUS:
            found.append(f"cpus: expected at most {MAX_SKU_CPUS}, got {self.cpus}")
        cell_kib = self.memory_bytes // 1024 // max(self.numa_cells, 1)
        huge_kib = sum(pages.size_kib * pages.count for pages in self.hugepages)
        if huge_kib > cell_kib:
            found.append(
                f"hugepages: {huge_kib} KiB of hugepages per cell, more than a cell's memory ({cell_kib} KiB)"
            )
        return found


def sku_facts(name: str, sku: Sku) -> HostFacts:
    """The facts of a host of this SKU named `name`, without domains. Raises ValueError where the
    SKU makes no host (`Sku.problems`)."""
    problems = sku.problems()
    if problems:
        raise ValueError("; ".join(problems))
    cells = []
    devices: list[PciDevice] = []
    first_cpu = 0
    cell_bytes = sku.memory_bytes // sku.numa_cells
    for cell in range(sku.numa_cells):
        count = sku.cpus // sku.numa_cells + (1 if cell < sku.cpus % sku.numa_cells else 0)
        cpus = frozenset(range(first_cpu, first_cpu + count))
        siblings: tuple[frozenset[int], ...] = ()
        if count % 2 == 0:
            # thread n and n + count/2 of the cell share a core, as Linux numbers them
            half = count // 2
            siblings = tuple(frozenset({first_cpu + core, first_cpu + half + core}) for core in range(half))
        first_cpu += count
        huge_kib = sum(pages.size_kib * pages.count for pages in sku.hugepages)
        pages = (
            PageCount(SMALL_PAGE_KIB, (cell_bytes // 1024 - huge_kib) // SMALL_PAGE_KIB, None),
            *(
                PageCount(p.size_kib, p.count, p.count)
                for p in sorted(sku.hugepages, key=lambda p: p.size_kib)
            ),
        )
        cells.append(NumaCell(cell, cpus, siblings, cell_bytes, pages))
        for kind, device in enumerate(sku.pci_devices):
            for function in range(device.count):
                devices.append(
                    PciDevice(
                        address=_address(cell, kind, function),
                        vendor_id=device.vendor_id,
                        product_id=device.product_id,
                        numa_node=cell,
                        dev_type=device.dev_type,
                        class_code=device.class_code,
                    )
                )
    return HostFacts(
        hostname=name,
        hypervisor_type="QEMU",
        hypervisor_version="0",
        libvirt_version="0",
        cpus=sku.cpus,
        online_cpus=frozenset(range(sku.cpus)),
        memory_bytes=cell_bytes * sku.numa_cells,
        storage=StorageFacts("scenario", sku.disk_bytes, 0),
        memory_in_use_bytes=None,
        memory_in_use_source=None,
        cpu_times=None,
        busy_cpus=None,
        domains=(),
        audited_at=0.0,
        audit_duration_seconds=0.0,
        numa_cells=tuple(cells),
        pci_devices=tuple(devices),
    )


def _address(cell: int, kind: int, function: int) -> str:
    """A distinct address per function: a bus per (cell, kind), 32 slots of 8 functions each."""
    bus = 0x10 + cell * 0x10 + kind
    slot, fn = divmod(function, 8)
    return f"0000:{bus:02x}:{slot:02x}.{fn:x}"
