"""NUMA placement: virtcap's model/numa.py against Nova's numa_get_constraints,
numa_fit_instance_to_host and numa_usage_from_instance_numa, on generated hosts and flavors.

Each host has 1, 2 or 4 cells of 1 to 6 cores, with or without SMT siblings (numbered as Linux
numbers them: a core's second thread after every first thread), sometimes an offline CPU; its
CPUs split by cpu_shared_set / cpu_dedicated_set (neither, either, both); memory with 4 KiB,
2 MiB and 1 GiB pages, some reserved (reserved_huge_pages) and some used; and existing usage
(pinned CPUs, shared CPU usage, memory usage). Flavors mix the extra specs Nova reads for NUMA
(valid and not), some with image properties. A third of the hosts have PCI devices (on a cell or
none) and flavors asking for them through aliases of each NUMA policy.

Compared with the oracle's `numa` op: the cells the libvirt driver builds (CPU sets, sibling
order, memory, pages), the topology (or a refusal), whether it fits and where (host cell, page
size and pinning of each guest cell, the emulator threads' CPU), how many fit in a row, and for
flavors asking for devices how many fit in a row with their devices taken near their cells.
Pinned host CPUs are compared by core: which thread of a core Nova gives a vCPU is Python's set
order, which changes each time Nova rebuilds its cell objects (the core, the count and every
later fit do not depend on it).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tests.conformance.upstream import Oracle, agree, generator
from virtcap.model.facts import NumaCell, PageCount, PciDevice
from virtcap.model.host_fit import CellsAndDevices, WithinHost
from virtcap.model.numa.cells import CellPages, HostCell, host_cells
from virtcap.model.numa.fitting import fit
from virtcap.model.numa.request import InstanceTopology, NumaSpecError, instance_topology
from virtcap.model.pci import PciAlias, PciDeviceSpec, PciPool, device_pools

HOSTS = 500
LIMIT = 60
"""How many instances in a row the count goes up to: enough to fill most generated cells."""
GIB_KIB = 1024**2
HOST_KEYS = ("cells", "online", "cpu_shared_set", "cpu_dedicated_set", "reserved_huge_pages")

ALIASES = (
    {"name": "nic-required", "vendor_id": "8086", "product_id": "154c", "numa_policy": "required"},
    {"name": "nic-legacy", "vendor_id": "8086", "product_id": "154c"},
    {"name": "nic-preferred", "vendor_id": "8086", "product_id": "154c", "numa_policy": "preferred"},
    {"name": "gpu-required", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "required"},
    {"name": "gpu-legacy", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "legacy"},
    {"name": "gpu-preferred", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "preferred"},
)
VIRTCAP_ALIASES = {
    entry["name"]: PciAlias(
        entry["name"], entry["vendor_id"], entry["product_id"], None, entry.get("numa_policy", "legacy")
    )
    for entry in ALIASES
}
PCI_SPECS = ({"vendor_id": "8086", "product_id": "154c"}, {"vendor_id": "10de"})


def _cpu_list(cpus: frozenset[int] | set[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def generated_host(rng: random.Random) -> dict[str, Any]:
    """A host as the oracle takes it (cells in libvirt's terms, the options, the usage)."""
    cell_count = rng.choice((1, 2, 2, 4))
    cores = rng.choice((1, 2, 3, 4, 4, 6, 8))
    threads = rng.choice((1, 2, 2))
    total_cores = cell_count * cores
    cells: list[dict[str, Any]] = []
    for cell_id in range(cell_count):
        firsts = range(cell_id * cores, (cell_id + 1) * cores)
        siblings = [[first + thread * total_cores for thread in range(threads)] for first in firsts]
        cpus = sorted(cpu for core in siblings for cpu in core)
        memory_kib = rng.choice((2, 4, 8, 16, 32)) * GIB_KIB
        huge_2m = rng.choice((0, 256, 512, 1024, 2048, 4096))
        huge_1g = rng.choice((0, 1, 2, 4, 8))
        huge_kib = huge_2m * 2048 + huge_1g * GIB_KIB
        if huge_kib > memory_kib // 2:
            huge_2m, huge_1g, huge_kib = 256, 0, 256 * 2048
        pages = [{"size": 4, "total": (memory_kib - huge_kib) // 4}]
        if rng.random() < 0.9:
            pages.append({"size": 2048, "total": huge_2m})
        if rng.random() < 0.7:
            pages.append({"size": 1048576, "total": huge_1g})
        cells.append(
            {
                "id": cell_id,
                "cpus": cpus,
                "siblings": [core for core in siblings if len(core) > 1],
                "memory_kib": memory_kib,
                "pages": pages,
                "socket": cell_id // 2,
            }
        )
    every = sorted(cpu for cell in cells for cpu in cell["cpus"])
    online = list(every)
    if rng.random() < 0.1 and len(online) > 2:
        online.remove(rng.choice(online[1:]))
    split = rng.random()
    shared: str | None = None
    dedicated: str | None = None
    if split < 0.25:
        pass
    elif split < 0.4:
        shared = _cpu_list(set(rng.sample(online, rng.randint(1, len(online)))))
    elif split < 0.6:
        dedicated = _cpu_list(set(rng.sample(online, rng.randint(1, len(online)))))
    else:
        chosen = [cpu for cpu in online if rng.random() < 0.9] or online[:1]
        rng.shuffle(chosen)
        cut = rng.randint(0, len(chosen))
        shared = _cpu_list(set(chosen[:cut])) or None
        dedicated = _cpu_list(set(chosen[cut:])) or None
    reserved = []
    for cell in cells:
        for page in cell["pages"]:
            if page["size"] != 4 and page["total"] and rng.random() < 0.3:
                reserved.append(
                    {"node": cell["id"], "size": page["size"], "count": rng.randint(0, page["total"])}
                )
    return {
        "cells": cells,
        "online": online,
        "cpu_shared_set": shared,
        "cpu_dedicated_set": dedicated,
        "reserved_huge_pages": reserved,
    }


def generated_usage(rng: random.Random, cells: tuple[HostCell, ...]) -> dict[str, Any]:
    usage: dict[str, Any] = {}
    for cell in cells:
        if rng.random() < 0.4:
            continue
        heavy = rng.random() < 0.3
        dedicated = sorted(cell.dedicated_cpus)
        most = len(dedicated) if heavy else len(dedicated) // 3
        pinned = rng.sample(dedicated, rng.randint(0, most)) if rng.random() < 0.6 else []
        pages_used = {}
        for pages in cell.pages:
            room = pages.total - pages.reserved
            if pages.size_kib != 4 and room > 0 and rng.random() < 0.5:
                pages_used[str(pages.size_kib)] = rng.randint(0, room if heavy else room // 3)
        usage[str(cell.id)] = {
            "pinned": sorted(pinned),
            "cpu_usage": rng.randint(0, 2 * len(cell.shared_cpus) + 1 if heavy else len(cell.shared_cpus)),
            "memory_usage": rng.randint(0, cell.memory_mib if heavy else cell.memory_mib // 3),
            "pages_used": pages_used,
        }
    return usage


PAGE_SIZES = (
    "small",
    "large",
    "any",
    "2048",
    "1048576",
    "2MB",
    "1GB",
    "4",
    "2MiB",
    "1GiB",
    "huge",
    "3",
    "100B",
)


def generated_flavor(rng: random.Random, with_pci: bool) -> dict[str, Any]:
    """Mostly requests Nova accepts (so that fits and counts are compared), now and then one it
    refuses: an unknown value, a policy without the pinning it needs, an uneven split."""
    odd = rng.random() < 0.2
    vcpus = rng.choice((1, 2, 2, 2, 3, 4, 4, 6, 8))
    memory_mb = rng.choice((256, 512, 1024, 1024, 2048, 2048, 3072, 4096))
    if with_pci and rng.random() < 0.6:  # small enough to fit often: the devices then decide
        vcpus, memory_mb = rng.choice((1, 2)), rng.choice((256, 512, 1024))
    specs: dict[str, str] = {}
    policy = rng.choice((None, None, "dedicated", "dedicated", "dedicated", "shared", "mixed"))
    if odd and rng.random() < 0.3:
        policy = "bogus"
    if policy:
        specs["hw:cpu_policy"] = policy
    if policy == "mixed" or (odd and rng.random() < 0.2):
        masks = ("^0", "0", "1-2", "^0-1", f"0-{vcpus - 1}", "x") if odd else ("^0", "0", f"^{vcpus - 1}")
        specs["hw:cpu_dedicated_mask"] = rng.choice(masks)
    if (policy in ("dedicated", "mixed") and rng.random() < 0.5) or (odd and rng.random() < 0.2):
        specs["hw:cpu_thread_policy"] = rng.choice(
            ("prefer", "isolate", "require", "require", *(("bogus",) * odd))
        )
    if (policy in ("dedicated", "mixed") and rng.random() < 0.2) or (odd and rng.random() < 0.1):
        specs["hw:emulator_threads_policy"] = rng.choice(("isolate", "isolate", "share", *(("bogus",) * odd)))
    if rng.random() < 0.45:
        specs["hw:mem_page_size"] = rng.choice(PAGE_SIZES if odd else PAGE_SIZES[:10])
    if rng.random() < 0.35:
        nodes = rng.choice((1, 2, 2, 3, 4))
        if not odd:
            vcpus = max(vcpus - vcpus % nodes, nodes)
            memory_mb = max(memory_mb - memory_mb % (256 * nodes), 256 * nodes)
        specs["hw:numa_nodes"] = rng.choice(("0", "two", "02")) if odd and rng.random() < 0.3 else str(nodes)
        if rng.random() < 0.3 and nodes == 2 and vcpus > 1:
            first = rng.randint(1, vcpus - 1)
            specs["hw:numa_cpus.0"] = f"0-{first - 1}"
            specs["hw:numa_cpus.1"] = f"{first}-{vcpus - 1}"
            half = rng.choice((256, memory_mb // 2, memory_mb - 256))
            specs["hw:numa_mem.0"] = str(half)
            if not odd or rng.random() < 0.5:
                specs["hw:numa_mem.1"] = str(memory_mb - half + (rng.choice((0, 256)) if odd else 0))
    if odd and rng.random() < 0.15:
        specs["resources:PCPU"] = str(vcpus + rng.choice((0, 0, 1)))
    if odd and rng.random() < 0.15:
        specs["hw:cpu_realtime"] = "yes"
        specs["hw:cpu_realtime_mask"] = rng.choice(("^0", "0-1"))
    if with_pci and rng.random() < 0.8:
        names = [alias["name"] for alias in ALIASES]
        specs["pci_passthrough:alias"] = ",".join(
            f"{rng.choice(names)}:{rng.choice((1, 1, 2, 3))}" for _ in range(rng.choice((1, 1, 2)))
        )
        if rng.random() < 0.25:
            specs["hw:pci_numa_affinity_policy"] = rng.choice(("required", "legacy", "preferred"))
    image: dict[str, str] = {}
    if rng.random() < 0.15:
        key = rng.choice(("hw_cpu_policy", "hw_cpu_thread_policy", "hw_mem_page_size", "hw_numa_nodes"))
        image[key] = {
            "hw_cpu_policy": rng.choice(("dedicated", "shared", "mixed")),
            "hw_cpu_thread_policy": rng.choice(("prefer", "isolate", "require")),
            "hw_mem_page_size": rng.choice(("small", "large", "2048", "1GB")),
            "hw_numa_nodes": rng.choice(("1", "2")),
        }[key]
    return {"vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": specs, "image_properties": image}


def generated_pci(rng: random.Random, cell_count: int, buses: Sequence[int] = ()) -> dict[str, Any]:
    """NICs and GPUs on a cell or none, some held: on 1 to 4 buses, or as many as one of `buses`."""
    devices = []
    for bus in range(rng.choice(buses) if buses else rng.randint(1, 4)):
        numa_node = rng.choice([*range(cell_count), None])
        vendor, product = rng.choice((("8086", "154c"), ("10de", "1eb8")))
        for function in range(rng.randint(1, 3)):
            address = f"0000:{0x20 + bus:02x}:00.{function}"
            devices.append(
                {
                    "dev_id": "pci_" + address.replace(":", "_").replace(".", "_"),
                    "address": address,
                    "vendor_id": vendor,
                    "product_id": product,
                    "numa_node": numa_node,
                    "label": f"label_{vendor}_{product}",
                    "dev_type": "type-PCI",
                    "parent_addr": None,
                }
            )
    held = [d["address"] for d in devices if rng.random() < 0.2]
    return {"devices": devices, "specs": list(PCI_SPECS), "held": held, "aliases": list(ALIASES)}


def virtcap_cells(host: dict[str, Any]) -> tuple[HostCell, ...]:
    cells = [
        NumaCell(
            id=cell["id"],
            cpus=frozenset(cell["cpus"]),
            siblings=tuple(frozenset(core) for core in cell["siblings"]),
            memory_bytes=cell["memory_kib"] * 1024,
            pages=tuple(PageCount(page["size"], page["total"], None) for page in cell["pages"]),
        )
        for cell in host["cells"]
    ]

    def cpu_set(text: str | None) -> frozenset[int] | None:
        return None if text is None else frozenset(int(cpu) for cpu in text.split(","))

    return host_cells(
        cells,
        (),
        cpu_shared_set=cpu_set(host["cpu_shared_set"]),
        cpu_dedicated_set=cpu_set(host["cpu_dedicated_set"]),
        online_cpus=frozenset(host["online"]),
        reserved_huge_pages={(r["node"], r["size"]): r["count"] for r in host["reserved_huge_pages"]},
        counted_states=frozenset(),
    )


def with_usage(cells: tuple[HostCell, ...], usage: dict[str, Any]) -> tuple[HostCell, ...]:
    used = []
    for cell in cells:
        mine = usage.get(str(cell.id), {})
        pages_used = mine.get("pages_used", {})
        used.append(
            replace(
                cell,
                pinned_cpus=frozenset(mine.get("pinned", ())),
                shared_cpu_usage=mine.get("cpu_usage", 0),
                memory_usage_mib=mine.get("memory_usage", 0),
                pages=tuple(replace(p, used=pages_used.get(str(p.size_kib), 0)) for p in cell.pages),
            )
        )
    return tuple(used)


def _host_json(cells: tuple[HostCell, ...]) -> list[dict[str, Any]]:
    return [
        {
            "id": cell.id,
            "cpuset": sorted(cell.shared_cpus),
            "pcpuset": sorted(cell.dedicated_cpus),
            "siblings": [sorted(core) for core in cell.siblings],
            "memory": cell.memory_mib,
            "mempages": [[p.size_kib, p.total, p.reserved, p.used] for p in cell.pages],
        }
        for cell in cells
    ]


def _pages_json(cells: tuple[HostCell, ...]) -> list[list[CellPages]]:
    return [list(cell.pages) for cell in cells]


def _by_core(placement: dict[str, Any], cells: tuple[HostCell, ...]) -> dict[str, Any]:
    """A placement with each host CPU replaced by its core: which thread of a core Nova picks
    follows Python's set order, which changes each time Nova rebuilds its cell objects."""
    core_of = {cpu: tuple(sorted(core)) for cell in cells for core in cell.siblings for cpu in core}
    return {
        **placement,
        "pinning": {int(vcpu): core_of.get(cpu, (cpu,)) for vcpu, cpu in placement["pinning"].items()},
        "reserved": sorted(core_of.get(cpu, (cpu,)) for cpu in placement["reserved"]),
    }


Case = tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]


def _compare_flavor(
    flavor: dict[str, Any],
    upstream: dict[str, Any],
    cells: tuple[HostCell, ...],
    ratios: dict[str, float],
    pci: dict[str, Any] | None,
    where: str,
    mismatches: list[str],
    kinds: dict[str, int],
) -> None:
    try:
        topology = instance_topology(
            flavor["vcpus"], flavor["memory_mb"], flavor["extra_specs"], flavor["image_properties"]
        )
    except NumaSpecError as error:
        kinds["refused"] += 1
        if "error" not in upstream:
            mismatches.append(f"{where} {flavor}: virtcap refuses it ({error}), Nova accepts it")
        return
    if "error" in upstream:
        mismatches.append(
            f"{where} {flavor}: Nova refuses it ({upstream['error']}), virtcap gives {topology}"
        )
        return
    kinds["topology"] += 1
    if topology is None or upstream["topology"] is None:
        if (topology is None) != (upstream["topology"] is None):
            mismatches.append(f"{where} {flavor}: virtcap topology {topology}, Nova {upstream['topology']}")
        return
    mine_cells = [
        {
            "id": cell.id,
            "cpuset": sorted(cell.shared_vcpus),
            "pcpuset": sorted(cell.dedicated_vcpus),
            "pagesize": topology.page_size,
            "memory": cell.memory_mib,
        }
        for cell in topology.cells
    ]
    theirs = upstream["topology"]
    mine_policies = (topology.cpu_policy, topology.cpu_thread_policy, topology.emulator_threads_policy)
    upstream_policies = (theirs["cpu_policy"], theirs["cpu_thread_policy"], theirs["emulator_threads_policy"])
    if mine_cells != theirs["cells"] or mine_policies != upstream_policies:
        mismatches.append(
            f"{where} {flavor}: virtcap topology {mine_cells} {mine_policies}, "
            f"Nova {theirs['cells']} {upstream_policies}"
        )
        return
    pools: tuple[PciPool, ...] = ()
    if pci is not None:
        specs = [PciDeviceSpec.from_entry(entry) for entry in pci["specs"]]
        devices = [
            PciDevice(d["address"], d["vendor_id"], d["product_id"], d["numa_node"], d["dev_type"])
            for d in pci["devices"]
        ]
        pools = device_pools(devices, specs, pci["held"])
    placement = fit(
        cells,
        topology,
        cpu_allocation_ratio=ratios["cpu"],
        ram_allocation_ratio=ratios["ram"],
        pci_pools=pools,
        pci_aliases=VIRTCAP_ALIASES,
        pci_request=flavor["extra_specs"].get("pci_passthrough:alias") if pci is not None else None,
        pci_numa_policy=flavor["extra_specs"].get("hw:pci_numa_affinity_policy"),
    )
    kinds["fit"] += 1
    upstream_fit = upstream["fit"]
    if placement.fits:
        kinds["fits"] += 1
    if pci is not None and "pci_passthrough:alias" in flavor["extra_specs"]:
        kinds["pci fit"] += 1
        kinds["pci fits"] += placement.fits
    mine_fit = None
    if placement.fits:
        mine_fit = {
            "cells": list(placement.host_cells),
            "pagesizes": [cell.page_size for cell in placement.placed],
            "pinning": {str(vcpu): cpu for vcpu, cpu in sorted(placement.pinning.items())},
            "reserved": sorted(set().union(*(cell.reserved_cpus for cell in placement.placed))),
        }
    if upstream_fit is not None:
        upstream_fit = _by_core(upstream_fit, cells)
    if mine_fit is not None:
        mine_fit = _by_core(mine_fit, cells)
    if mine_fit != upstream_fit:
        mismatches.append(
            f"{where} {flavor} ratios {ratios}: virtcap fit {mine_fit} ({placement.reasons}), "
            f"Nova {upstream_fit}"
        )
        return
    kinds["count"] += 1
    # the count host_capacity gives: placement.CellsAndDevices.count
    count = CellsAndDevices(cells, pools, VIRTCAP_ALIASES, ratios["cpu"], ratios["ram"]).count(
        WithinHost(topology), LIMIT
    )
    if "pci_count" in upstream:
        kinds["pci count"] += 1
        pci_count = _pci_count(cells, topology, ratios, pools, flavor["extra_specs"])
        if pci_count != upstream["pci_count"]:
            mismatches.append(
                f"{where} {flavor} ratios {ratios} pools {pools}: virtcap fits {pci_count} "
                f"with their devices in a row, Nova {upstream['pci_count']}"
            )
    kinds["several"] += upstream["count"] > 1
    if count != upstream["count"]:
        mismatches.append(
            f"{where} {flavor} ratios {ratios}: virtcap fits {count} in a row, Nova {upstream['count']}"
            f" ({upstream['count_error']})"
        )


def _pci_count(
    cells: tuple[HostCell, ...],
    topology: InstanceTopology,
    ratios: dict[str, float],
    pools: tuple[PciPool, ...],
    extra_specs: dict[str, str],
) -> int:
    """Fit, consume the cells, take the devices near them, as many times as that works: the
    count host_capacity gives (placement.CellsAndDevices.count)."""
    within = WithinHost(
        topology, extra_specs["pci_passthrough:alias"], extra_specs.get("hw:pci_numa_affinity_policy")
    )
    layout = CellsAndDevices(cells, pools, VIRTCAP_ALIASES, ratios["cpu"], ratios["ram"])
    return layout.count(within, LIMIT)


def test_numa_topologies_fits_and_counts_agree_with_nova(oracle: Oracle) -> None:
    rng = generator("numa")
    questions = []
    cases: list[tuple[dict[str, Any], tuple[HostCell, ...], dict[str, Any]]] = []
    for index in range(HOSTS):
        host = generated_host(rng)
        cells = virtcap_cells(host)
        usage = generated_usage(rng, cells)
        pci = generated_pci(rng, len(host["cells"])) if index % 3 == 0 else None
        ratios = {"cpu": rng.choice((1.0, 2.0, 4.0, 16.0)), "ram": rng.choice((1.0, 1.0, 1.5))}
        flavors = [generated_flavor(rng, pci is not None) for _ in range(4)]
        question = {
            "op": "numa",
            **host,
            "usage": usage,
            "ratios": ratios,
            "flavors": flavors,
            "limit": LIMIT,
        }
        if pci is not None:
            question["pci"] = pci
        questions.append(question)
        cases.append((question, cells, usage))
    answers = oracle.ask(questions)
    mismatches: list[str] = []
    kinds = dict.fromkeys(
        (
            "host",
            "refused",
            "topology",
            "fit",
            "fits",
            "pci fit",
            "pci fits",
            "count",
            "several",
            "pci count",
        ),
        0,
    )
    for (question, cells, usage), answer in zip(cases, answers, strict=True):
        where = f"host { {k: question[k] for k in HOST_KEYS} } usage {usage}:"
        kinds["host"] += 1
        if "error" in answer:
            mismatches.append(f"{where} Nova refuses the host: {answer['error']}")
            continue
        used = with_usage(cells, usage)
        if _host_json(used) != answer["host"]:
            mismatches.append(f"{where} virtcap cells {_host_json(used)}, Nova {answer['host']}")
            continue
        for flavor, upstream in zip(question["flavors"], answer["flavors"], strict=True):
            _compare_flavor(
                flavor, upstream, used, question["ratios"], question.get("pci"), where, mismatches, kinds
            )
    compared = sum(kinds.values()) - kinds["fits"] - kinds["pci fit"] - kinds["pci fits"] - kinds["several"]
    agree("NUMA answers", mismatches, compared)
    assert all(kinds.values()) and kinds["fits"] < kinds["fit"] and kinds["pci fits"] < kinds["pci fit"], (
        kinds
    )
    print(f"compared with Nova: {kinds}")
