"""NUMA usage read from the guests Nova defined: the definitions Nova's libvirt driver writes for
guests placed by Nova's own fit, read back by virtcap's audit (parse_domain_xml) and charged to
the cells (numa.host_cells), against the cells Nova's tracker holds once it has added them
(numa_usage_from_instance_numa); then the fits and counts of flavors on those cells.

Guests asking for `hw:mem_page_size` any or large on cells with few hugepages end up with one
guest cell on hugepages and another on small pages: Nova then names only the hugepage cells in
`<memoryBacking><hugepages><page nodeset>`, and the other cells are on the small pages (issue
25). The oracle's `numa_guests` op (oracle_guests.py) places the guests and writes their parts
of the definition.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from tests.conformance.test_numa import _compare_flavor, _host_json, generated_flavor
from tests.conformance.upstream import Oracle, agree, generator
from virtcap.audit.domain_xml import parse_domain_xml
from virtcap.model.facts import DomainFacts, DomainState, NumaCell, PageCount
from virtcap.model.numa.cells import HostCell, host_cells
from virtcap.units import parse_cpu_set

HOSTS = 150
LIMIT = 40
GIB_KIB = 1024**2
SMALL_KIB = 4
RATIOS = {"cpu": 4.0, "ram": 1.0}
PAGE_SIZES = ("any", "any", "large", "large", "small", "2MB", "1GB", None)

# The issue's host: 2 cells of 4 dedicated CPUs and 8 GiB, 128 and 64 pages of 2 MiB.
ISSUE_HOST: dict[str, Any] = {
    "cells": [
        {
            "id": cell,
            "cpus": list(range(4 * cell, 4 * cell + 4)),
            "siblings": [],
            "memory_kib": 8 * GIB_KIB,
            "pages": [{"size": 4, "total": (8 * GIB_KIB - huge * 2048) // 4}, {"size": 2048, "total": huge}],
            "socket": cell,
        }
        for cell, huge in ((0, 128), (1, 64))
    ],
    "online": list(range(8)),
    "cpu_shared_set": None,
    "cpu_dedicated_set": "0-7",
    "reserved_huge_pages": [],
}
ISSUE_GUEST = {
    "vcpus": 2,
    "memory_mb": 512,
    "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2", "hw:mem_page_size": "any"},
    "image_properties": {},
}
ISSUE_FLAVOR = {
    "vcpus": 1,
    "memory_mb": 128,
    "extra_specs": {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "2MB"},
    "image_properties": {},
}


def generated_host(rng: random.Random) -> dict[str, Any]:
    """Cells of 2 to 4 cores (so that a shared guest cell floats over several CPUs), few 2 MiB
    pages (so that any and large run out of them on some cells), sometimes 1 GiB pages."""
    cell_count = rng.choice((1, 2, 2, 2, 4))
    cores = rng.choice((2, 3, 4))
    threads = rng.choice((1, 1, 2))
    total_cores = cell_count * cores
    cells: list[dict[str, Any]] = []
    for cell_id in range(cell_count):
        firsts = range(cell_id * cores, (cell_id + 1) * cores)
        siblings = [[first + thread * total_cores for thread in range(threads)] for first in firsts]
        memory_kib = rng.choice((4, 8, 16)) * GIB_KIB
        huge_2m = rng.choice((0, 32, 64, 128, 256, 512))
        huge_1g = rng.choice((0, 0, 1, 2))
        pages = [{"size": 4, "total": (memory_kib - huge_2m * 2048 - huge_1g * GIB_KIB) // 4}]
        pages.append({"size": 2048, "total": huge_2m})
        if rng.random() < 0.5:
            pages.append({"size": 1048576, "total": huge_1g})
        cells.append(
            {
                "id": cell_id,
                "cpus": sorted(cpu for core in siblings for cpu in core),
                "siblings": [core for core in siblings if len(core) > 1],
                "memory_kib": memory_kib,
                "pages": pages,
                "socket": cell_id // 2,
            }
        )
    every = sorted(cpu for cell in cells for cpu in cell["cpus"])
    shared: str | None = None
    dedicated: str | None = None
    split = rng.random()
    if split < 0.3:
        dedicated = ",".join(map(str, every))
    elif split < 0.7:
        chosen = set(rng.sample(every, len(every) // 3 or 1))
        shared = ",".join(map(str, sorted(chosen)))
        dedicated = ",".join(map(str, sorted(set(every) - chosen))) or None
    return {
        "cells": cells,
        "online": every,
        "cpu_shared_set": shared,
        "cpu_dedicated_set": dedicated,
        "reserved_huge_pages": [],
    }


def generated_guest(rng: random.Random, cell_count: int) -> dict[str, Any]:
    """A guest with a NUMA topology: a page size, pinned CPUs or guest cells, often several."""
    nodes = rng.choice((1, 2, 2)) if cell_count > 1 else 1
    vcpus = nodes * rng.choice((1, 2))
    memory_mb = nodes * rng.choice((128, 256, 512, 1024))
    specs: dict[str, str] = {}
    if nodes > 1 or rng.random() < 0.3:
        specs["hw:numa_nodes"] = str(nodes)
    policy = rng.choice(("dedicated", "dedicated", "shared", None))
    if policy:
        specs["hw:cpu_policy"] = policy
    if policy == "dedicated" and rng.random() < 0.15:
        specs["hw:emulator_threads_policy"] = "isolate"
    page_size = rng.choice(PAGE_SIZES)
    if page_size:
        specs["hw:mem_page_size"] = page_size
    if not specs.keys() & {"hw:numa_nodes", "hw:mem_page_size"} and policy != "dedicated":
        specs["hw:mem_page_size"] = "any"
    return {"vcpus": vcpus, "memory_mb": memory_mb, "extra_specs": specs, "image_properties": {}}


def domain_facts(index: int, guest: dict[str, Any], written: dict[str, Any]) -> DomainFacts:
    """The guest as virtcap's audit reads the definition Nova wrote (its NUMA parts as Nova's
    driver wrote them, the rest as plain as libvirt allows)."""
    parts = [written[part] or "" for part in ("cputune", "numatune", "memory_backing")]
    xml = (
        f"<domain type='kvm'><name>instance-{index:08x}</name><uuid>{uuid.uuid4()}</uuid>"
        f"<metadata>{written['metadata']}</metadata>"
        f"<memory unit='MiB'>{guest['memory_mb']}</memory>"
        f"<vcpu placement='static'>{guest['vcpus']}</vcpu>{''.join(parts)}"
        f"<cpu mode='host-model'>{written['numa'] or ''}</cpu>"
        "<os><type arch='x86_64'>hvm</type></os><devices/></domain>"
    )
    definition = parse_domain_xml(xml)
    assert not definition.problems, definition.problems
    return DomainFacts(
        name=definition.name,
        uuid=definition.uuid,
        state=DomainState.RUNNING,
        vcpus=definition.vcpus,
        memory_bytes=definition.memory_bytes,
        current_memory_bytes=definition.current_memory_bytes,
        hugepages=definition.hugepages,
        vcpu_pins=definition.vcpu_pins,
        disks=(),
        nova=definition.nova,
        placement=definition.placement,
    )


def virtcap_cells(host: dict[str, Any], domains: tuple[DomainFacts, ...]) -> tuple[HostCell, ...]:
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
        return None if text is None else parse_cpu_set(text)

    return host_cells(
        cells,
        domains,
        cpu_shared_set=cpu_set(host["cpu_shared_set"]),
        cpu_dedicated_set=cpu_set(host["cpu_dedicated_set"]),
        online_cpus=frozenset(host["online"]),
        reserved_huge_pages={},
        counted_states=frozenset({DomainState.RUNNING}),
    )


def usage_json(cells: tuple[HostCell, ...]) -> list[dict[str, Any]]:
    return [
        {
            **described,
            "cpu_usage": cell.shared_cpu_usage,
            "memory_usage": cell.memory_usage_mib,
            "pinned_cpus": sorted(cell.pinned_cpus),
        }
        for cell, described in zip(cells, _host_json(cells), strict=True)
    ]


def compare(
    question: dict[str, Any], answer: dict[str, Any], mismatches: list[str], kinds: dict[str, int]
) -> tuple[HostCell, ...] | None:
    """Compares the cells virtcap charges the guests to, then each flavor on them; the cells,
    or None where they differ (the flavors are then not compared)."""
    where = f"host {question['cells']} sets {question['cpu_shared_set']}/{question['cpu_dedicated_set']}"
    assert "error" not in answer and "oracle_error" not in answer, answer
    domains = tuple(
        domain_facts(index, guest, written)
        for index, (guest, written) in enumerate(zip(question["guests"], answer["guests"], strict=True))
        if written is not None
    )
    kinds["guests"] += len(domains)
    kinds["split guests"] += sum(
        1
        for written in answer["guests"]
        if written and len({(size or 0) > SMALL_KIB for size in written["pagesizes"]}) > 1
    )
    cells = virtcap_cells(question, domains)
    kinds["hosts"] += 1
    if usage_json(cells) != answer["host"]:
        mismatches.append(
            f"{where} guests {question['guests']}: virtcap charges {usage_json(cells)}, Nova {answer['host']}"
        )
        return None
    for flavor, upstream in zip(question["flavors"], answer["flavors"], strict=True):
        _compare_flavor(flavor, upstream, cells, question["ratios"], None, where, mismatches, kinds)
    return cells


def question_for(
    host: dict[str, Any], guests: list[dict[str, Any]], flavors: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "op": "numa_guests",
        **host,
        "ratios": RATIOS,
        "guests": guests,
        "flavors": flavors,
        "limit": LIMIT,
    }


def new_kinds() -> dict[str, int]:
    names = ("hosts", "guests", "split guests", "refused", "topology", "fit", "fits", "count", "several")
    return dict.fromkeys(names, 0)


def test_the_issue_host_charges_the_small_page_cell_to_small_pages(oracle: Oracle) -> None:
    """Issue 25: the guest's cell 1 is on small pages, so cell 1 keeps its 64 pages of 2 MiB and
    the 128 MiB flavor on 2 MiB pages fits there once."""
    question = question_for(ISSUE_HOST, [ISSUE_GUEST], [ISSUE_FLAVOR])
    (answer,) = oracle.ask([question])
    assert answer["guests"][0]["pagesizes"] == [2048, 4]
    assert answer["flavors"][0]["count"] == 1
    mismatches: list[str] = []
    kinds = new_kinds()
    cells = compare(question, answer, mismatches, kinds)
    agree("NUMA answers on the issue's host", mismatches, sum(kinds.values()))
    assert cells is not None
    assert [cell.page(2048).used for cell in cells] == [128, 0]  # type: ignore[union-attr]


def test_guests_nova_placed_are_charged_as_nova_charges_them(oracle: Oracle) -> None:
    rng = generator("numa-guests")
    questions = []
    for _ in range(HOSTS):
        host = generated_host(rng)
        guests = [generated_guest(rng, len(host["cells"])) for _ in range(rng.randint(1, 4))]
        flavors = [generated_flavor(rng, False) for _ in range(3)]
        questions.append(question_for(host, guests, flavors))
    answers = oracle.ask(questions)
    mismatches: list[str] = []
    kinds = new_kinds()
    for question, answer in zip(questions, answers, strict=True):
        compare(question, answer, mismatches, kinds)
    compared = kinds["hosts"] + kinds["topology"] + kinds["fit"] + kinds["count"]
    agree("NUMA usages and answers", mismatches, compared)
    assert kinds["split guests"] and kinds["fits"] < kinds["fit"] and kinds["several"], kinds
    print(f"compared with Nova: {kinds}")
