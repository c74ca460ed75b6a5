"""Hosts made by hand for the model's tests: NUMA cells and pinned guests, SR-IOV NICs, GPUs with
vGPU types, and the configurations that make them schedulable."""

from __future__ import annotations

from dataclasses import replace

from tests.support.factories import GIB, domain, host
from virtcap.config import parse_config
from virtcap.model.facts import (
    DomainFacts,
    DomainLayout,
    GuestCell,
    HostFacts,
    HugepageBacking,
    MdevType,
    NumaCell,
    PageCount,
    PciDevice,
)
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy

SMALL = 4


ONE_GIB_PAGE = 1024 * 1024


def configured(text: str) -> tuple[HostPolicy, dict[str, Demand]]:
    """The one hypervisor's policy and the flavors' demands of a configuration."""
    config = parse_config(text, "test.yaml")
    (hypervisor,) = config.hypervisors
    return hypervisor.policy, config.flavor_demands


def numa_cell(cell_id: int, cpus: range, memory_gib: int, huge_1g: int = 0) -> NumaCell:
    """A cell without SMT: `huge_1g` of its memory in 1 GiB pages, the rest in small pages."""
    pages = [PageCount(SMALL, (memory_gib - huge_1g) * GIB // 4096, None)]
    if huge_1g:
        pages.append(PageCount(ONE_GIB_PAGE, huge_1g, huge_1g))
    return NumaCell(cell_id, frozenset(cpus), (), memory_gib * GIB, tuple(pages))


def pinned_guest(
    name: str,
    cell: int,
    cpus: range,
    memory_gib: int,
    page_kib: int | None = None,
    pci: tuple[str, ...] = (),
) -> DomainFacts:
    """A guest as nova-compute defines a pinned one: one guest cell on host cell `cell`, one host
    CPU per vCPU, its memory from that cell (in pages of `page_kib` when given)."""
    vcpus = len(cpus)
    return replace(
        domain(name, vcpus=vcpus, memory=memory_gib * GIB, hugepages=page_kib is not None),
        vcpu_pins=tuple(frozenset({cpu}) for cpu in cpus),
        layout=DomainLayout(
            guest_cells=(GuestCell(0, frozenset(range(vcpus)), memory_gib * GIB),),
            memory_nodes=frozenset({cell}),
            cell_memory_nodes={0: frozenset({cell})},
            hugepages=(HugepageBacking(page_kib, frozenset({0})),) if page_kib is not None else (),
            pci_addresses=pci,
        ),
    )


def with_cells(facts: HostFacts, cells: tuple[NumaCell, ...]) -> HostFacts:
    """The host with these cells: their CPUs (all online) and memory are the host's."""
    cpus = frozenset().union(*(cell.cpus for cell in cells))
    memory = sum(cell.memory_bytes for cell in cells)
    return replace(facts, numa_cells=cells, cpus=len(cpus), online_cpus=cpus, memory_bytes=memory)


# Two cells of 16 CPUs (0-15, 16-31) and 16 GiB, 8 GiB of it in 1 GiB pages. CPU 0 and 16 float
# shared guests, the other 30 are dedicated; 2 of cell 0's 1 GiB pages are kept for the host.
#
# g0 is pinned to 9 CPUs of cell 0 in 4 GiB of 1 GiB pages, g1 to 8 CPUs of cell 1 in 4 GiB:
#   free dedicated CPUs: cell 0 15 - 9 = 6, cell 1 15 - 8 = 7; whole host 13
#   free 1 GiB pages:    cell 0 8 - 2 - 4 = 2, cell 1 8 - 4 = 4
#   free small pages:    8 GiB in each cell (the guests are in hugepages)
# Whole host: PCPU 30 - 17 = 13; VCPU 2 x 4.0 = 8; memory 32 GiB - 512 MiB - 8 GiB = 23.5 GiB.
PINNED_CONFIG = """
hypervisors:
  - name: two-cells
    uri: "test:///default"
    cpu_shared_set: "0,16"
    cpu_dedicated_set: "1-15,17-31"
    reserved_huge_pages:
      - {node: 0, size: 1GiB, count: 2}
flavors:
  - {name: p8, vcpu: 8, memory: 4GiB, extra_specs: {"hw:cpu_policy": dedicated}}
  - {name: p4, vcpu: 4, memory: 2GiB, extra_specs: {"hw:cpu_policy": dedicated}}
  - {name: p1, vcpu: 1, memory: 1GiB, extra_specs: {"hw:cpu_policy": dedicated}}
  - name: p2.1g
    vcpu: 2
    memory: 2GiB
    extra_specs: {"hw:cpu_policy": dedicated, "hw:mem_page_size": 1GB}
  - {name: s1.1g, vcpu: 1, memory: 2GiB, extra_specs: {"hw:mem_page_size": 1GB}}
  - {name: m1.small, vcpu: 1, memory: 2GiB}
"""


def pinned_host() -> HostFacts:
    cells = (numa_cell(0, range(0, 16), 16, huge_1g=8), numa_cell(1, range(16, 32), 16, huge_1g=8))
    guests = (
        pinned_guest("g0", 0, range(1, 10), 4, ONE_GIB_PAGE),
        pinned_guest("g1", 1, range(17, 25), 4, ONE_GIB_PAGE),
    )
    return with_cells(host(domains=guests), cells)


# Two cells of 8 CPUs (0-7, 8-15) and 16 GiB; CPU 0 and 8 shared, the rest dedicated. An X710 on
# each cell: 4 VFs on cell 0 (one held by a pinned guest on CPUs 1-2), 1 VF on cell 1: 3 + 1 free.
PCI_CONFIG = """
hypervisors:
  - name: sriov
    uri: "test:///default"
    cpu_shared_set: "0,8"
    cpu_dedicated_set: "1-7,9-15"
    pci_device_spec:
      - {vendor_id: "8086", product_id: "154c"}
flavors:
  - {name: pv.required, vcpu: 2, memory: 1GiB,
     extra_specs: {"hw:cpu_policy": dedicated, "pci_passthrough:alias": "vf-required:2"}}
  - {name: pv.legacy, vcpu: 2, memory: 1GiB,
     extra_specs: {"hw:cpu_policy": dedicated, "pci_passthrough:alias": "vf-legacy:2"}}
  - {name: pv.preferred, vcpu: 2, memory: 1GiB,
     extra_specs: {"hw:cpu_policy": dedicated, "pci_passthrough:alias": "vf-preferred:2"}}
  - {name: pv.legacy-preferred, vcpu: 2, memory: 1GiB,
     extra_specs: {"hw:cpu_policy": dedicated, "pci_passthrough:alias": "vf-legacy:2",
                   "hw:pci_numa_affinity_policy": preferred}}
  - {name: v2, vcpu: 1, memory: 1GiB, extra_specs: {"pci_passthrough:alias": "vf-legacy:2"}}
  - {name: v5, vcpu: 1, memory: 1GiB, extra_specs: {"pci_passthrough:alias": "vf-legacy:5"}}
pci:
  alias:
    - {name: vf-required, vendor_id: "8086", product_id: "154c", device_type: type-VF,
       numa_policy: required}
    - {name: vf-legacy, vendor_id: "8086", product_id: "154c", device_type: type-VF}
    - {name: vf-preferred, vendor_id: "8086", product_id: "154c", device_type: type-VF,
       numa_policy: preferred}
"""


def nic(cell: int, bus: int, vfs: int) -> list[PciDevice]:
    pf = f"0000:{bus:02x}:00.0"
    return [PciDevice(pf, "8086", "1572", cell, "type-PF", None, "0x020000")] + [
        PciDevice(f"0000:{bus:02x}:02.{i}", "8086", "154c", cell, "type-VF", pf, "0x020000")
        for i in range(vfs)
    ]


def sriov_host(numa: bool = True) -> HostFacts:
    guest = pinned_guest("vf-holder", 0, range(1, 3), 2, pci=("0000:3b:02.0",))
    facts = host(domains=(guest,))
    devices = tuple(nic(0, 0x3B, 4) + nic(1, 0xD8, 1))
    if not numa:
        return replace(facts, pci_devices=devices)
    cells = (numa_cell(0, range(0, 8), 16), numa_cell(1, range(8, 16), 16))
    return replace(with_cells(facts, cells), pci_devices=devices)


GPU_A, GPU_B = "0000:3b:00.0", "0000:d8:00.0"
VGPU_CONFIG = """
hypervisors:
  - name: gpus
    uri: "test:///default"
    devices: {enabled_mdev_types: [nvidia-35]}
flavors:
  - {name: g2, vcpu: 1, memory: 1GiB, extra_specs: {"resources:VGPU": "2"}}
  - {name: g3, vcpu: 1, memory: 1GiB, extra_specs: {"resources:VGPU": "3"}}
  - {name: g4, vcpu: 1, memory: 1GiB, extra_specs: {"resources:VGPU": "4"}}
"""


def gpu_host() -> HostFacts:
    def gpu(address: str, available: int) -> PciDevice:
        types = (MdevType("nvidia-35", "GRID M10-0B", "vfio-pci", available),)
        return PciDevice(address, "10de", "13bd", None, "type-PCI", None, "0x030000", mdev_types=types)

    return replace(host(), pci_devices=(gpu(GPU_A, 3), gpu(GPU_B, 2)))
