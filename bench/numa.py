"""NUMA fit at scale on replayed multi-socket hosts (`--only numa`)."""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import (
    Table,
    free_port,
    get,
    percentile,
    print_table,
    process,
    wait,
)
from harness import cell as table_cell  # `cell` is a NUMA cell here
from virtcap.audit.capture_format import encode_capture
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.config import parse_config
from virtcap.demo import hostgen
from virtcap.demo.fleetgen import RUNNING, SHUTOFF
from virtcap.model.capacity import host_capacity
from virtcap.units import format_cpu_set

# NUMA fit at scale: replayed multi-socket hosts made by virtcap.demo.hostgen.

NUMA_CORES = 16
"""Cores a socket, 2 threads each: 64 CPUs on two sockets, 128 on four. Core 0 of each socket
(both threads) floats shared guests; the other 30 CPUs of each cell are dedicated."""
NUMA_CELL_GIB = 128
"""Memory a cell: 32 GiB of it in 1 GiB pages, 16 GiB in 2 MiB pages, the rest small pages."""
NUMA_HUGEPAGES = {hostgen.PAGE_1G_KIB: 32, hostgen.PAGE_2M_KIB: 8192}
NUMA_VFS = 16
"""SR-IOV VFs of the X710 on each socket."""
NUMA_BUSES = (0x17, 0x4B, 0x80, 0xB5)
_PINNED = ("hw:cpu_policy", "dedicated")
_PAGE_SPEC = {hostgen.PAGE_1G_KIB: "1GB", hostgen.PAGE_2M_KIB: "2MB"}
NUMA_FLAVORS: list[dict[str, Any]] = [
    {
        "name": "p2.1g",
        "vcpu": 2,
        "memory": "4GiB",
        "extra_specs": dict([_PINNED, ("hw:mem_page_size", "1GB")]),
    },
    {
        "name": "p4.2m",
        "vcpu": 4,
        "memory": "8GiB",
        "extra_specs": dict([_PINNED, ("hw:mem_page_size", "2MB")]),
    },
    {
        "name": "p8.1g",
        "vcpu": 8,
        "memory": "16GiB",
        "extra_specs": dict([_PINNED, ("hw:mem_page_size", "1GB")]),
    },
    {"name": "s4.numa2", "vcpu": 4, "memory": "8GiB", "extra_specs": {"hw:numa_nodes": "2"}},
    {
        "name": "pv2.sriov",
        "vcpu": 2,
        "memory": "4GiB",
        "extra_specs": dict([_PINNED, ("pci_passthrough:alias", "sriov-vf:1")]),
    },
    {"name": "m1.large", "vcpu": 4, "memory": "8GiB", "disk": "20GiB"},
]
"""Pinned 2, 4 and 8 vCPUs in hugepages, shared CPUs over two cells, pinned with a VF, and a plain
flavor: every path of the fit within the host, and one that takes none."""


def numa_host(rng: random.Random, name: str, sockets: int) -> hostgen.HostSpec:
    """A host of `sockets` cells whose dedicated cores are 30 to 90 % taken by pinned guests of 2,
    4 and 8 vCPUs (whole cores, both threads), in 1 GiB, 2 MiB or small pages, some with a VF of
    their socket's NIC; and a few floating guests over the shared cores, one of them stopped."""
    layout = hostgen.HostSpec(
        name=name, sockets=sockets, cores=NUMA_CORES, threads=2, memory_gib=NUMA_CELL_GIB
    )
    nics = tuple(hostgen.NicSpec(cell=cell, bus=NUMA_BUSES[cell], vfs=NUMA_VFS) for cell in range(sockets))
    shared = tuple(sorted(hostgen.cpu_id(layout, cell, 0, t) for cell in range(sockets) for t in (0, 1)))
    guests: list[hostgen.GuestSpec] = []
    for cell in range(sockets):
        pages_left = dict(NUMA_HUGEPAGES)
        vfs = list(nics[cell].vf_addresses)
        core, last = 1, 1 + int((NUMA_CORES - 1) * rng.uniform(0.3, 0.9))
        while core < last:
            vcpus = min(rng.choice((2, 4, 8)), 2 * (last - core))
            memory_mib = 2048 * vcpus
            page = rng.choice((hostgen.PAGE_1G_KIB, hostgen.PAGE_2M_KIB, None))
            if page is not None and pages_left[page] * page < memory_mib * 1024:
                page = None
            if page is not None:
                pages_left[page] -= memory_mib * 1024 // page
            pci = (vfs.pop(0),) if vfs and rng.random() < 0.3 else ()
            specs = [_PINNED] + ([("hw:mem_page_size", _PAGE_SPEC[page])] if page else [])
            specs += [("pci_passthrough:alias", "sriov-vf:1")] if pci else []
            flavor = hostgen.FlavorSpec(f"p{vcpus}", vcpus, memory_mib, extra_specs=tuple(specs))
            cores = range(core, core + vcpus // 2)
            guests.append(
                hostgen.GuestSpec(
                    name=f"{name}-c{cell}-{core}",
                    vcpus=vcpus,
                    memory_mib=memory_mib,
                    cell=cell,
                    pins=tuple(hostgen.cpu_id(layout, cell, c, t) for c in cores for t in (0, 1)),
                    page_size_kib=page,
                    flavor=flavor,
                    pci=pci,
                )
            )
            core += vcpus // 2
    for index in range(rng.randint(1, 3)):
        flavor = hostgen.FlavorSpec("m1.medium", 2, 4096, root_gib=20)
        state = SHUTOFF if index == 0 else RUNNING
        guests.append(
            hostgen.GuestSpec(f"{name}-shared-{index}", 2, 4096, state=state, pins=shared, flavor=flavor)
        )
    hugepages = tuple(hostgen.Hugepages(size, (count,) * sockets) for size, count in NUMA_HUGEPAGES.items())
    return hostgen.HostSpec(
        name=name,
        sockets=sockets,
        cores=NUMA_CORES,
        threads=2,
        memory_gib=NUMA_CELL_GIB,
        hugepages=hugepages,
        nics=nics,
        guests=tuple(guests),
    )


def numa_hosts(directory: Path, count: int, seed: int = 11) -> dict[str, tuple[Path, int]]:
    """`count` captures, two- and four-cell hosts in turn: name to (file, cells)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    hosts = {}
    for index in range(count):
        sockets = 2 if index % 2 == 0 else 4
        spec = numa_host(rng, f"numa-{index:04d}", sockets)
        path = directory / f"{spec.name}.json"
        path.write_bytes(encode_capture(hostgen.capture_document(spec)))
        hosts[spec.name] = (path, sockets)
    return hosts


def numa_config(directory: Path, hosts: dict[str, tuple[Path, int]], flavors: list[dict[str, Any]]) -> Path:
    """Each host's CPU sets (core 0 of every socket shared), 2 of cell 0's 1 GiB pages kept for the
    host, its VFs passed through; the flavors and the `sriov-vf` alias."""
    hypervisors = []
    for name, (path, sockets) in hosts.items():
        layout = hostgen.HostSpec(name=name, sockets=sockets, cores=NUMA_CORES, threads=2, memory_gib=1)
        cpus = frozenset(range(layout.cpus))
        shared = frozenset(hostgen.cpu_id(layout, cell, 0, t) for cell in range(sockets) for t in (0, 1))
        hypervisors.append(
            {
                "name": name,
                "uri": f"replay://{path}",
                "cpu_shared_set": format_cpu_set(shared),
                "cpu_dedicated_set": format_cpu_set(cpus - shared),
                "reserved": {"memory": "16GiB"},
                "reserved_huge_pages": [{"node": 0, "size": "1GiB", "count": 2}],
                "pci_device_spec": [{"vendor_id": "8086", "product_id": "154c"}],
            }
        )
    config = {
        "audit": {"interval": "1h", "timeout": "120s", "concurrency": 32},
        "claims": {"database": ":memory:"},
        "hypervisors": hypervisors,
        "flavors": flavors,
        "pci": {
            "alias": [
                {"name": "sriov-vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}
            ]
        },
    }
    path = directory / f"virtcap-numa-{len(hosts)}-{len(flavors)}.yaml"
    path.write_text(json.dumps(config))
    return path


def _timed(call: Callable[[], object], repeat: int) -> float:
    """The median of `repeat` calls, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def serve_cycle(config: Path) -> tuple[float, float]:
    """One `virtcap serve` from listening to ready (its first full audit cycle), and its peak RSS
    in MiB: as audit_cycle measures it."""
    port = free_port()
    command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config)]
    command += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"]
    with process(command) as child:
        wait(lambda: get(port, "/-/healthy") == 200, 120)
        listening = time.monotonic()
        wait(lambda: get(port, "/-/ready") == 200, 1800)
        cycle = time.monotonic() - listening
        status = Path(f"/proc/{child.pid}/status").read_text()
        peak = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        return cycle, int(peak.split()[1]) / 1024


def numa_fit(scratch: Path, runs: int, sampled: int, fleets: list[int], repeat: int) -> None:
    """host_capacity per replayed host, with the six flavors, the plain one alone and none; then
    `virtcap serve`'s first audit cycle on whole fleets of such hosts."""
    started = time.monotonic()
    hosts = numa_hosts(scratch / "numa", max([sampled, *fleets]))
    generated = time.monotonic() - started
    sample = dict(list(hosts.items())[:sampled])
    config = parse_config(numa_config(scratch, sample, NUMA_FLAVORS).read_text(), "bench")
    demands = config.flavor_demands
    plain = {"m1.large": demands["m1.large"]}
    per_cells: dict[int, dict[str, list[float]]] = {}
    for hypervisor in config.hypervisors:
        _path, cells = sample[hypervisor.name]
        conn = open_read_only(hypervisor.uri)
        try:
            facts = audit_host(conn, hypervisor.uri, None)
        finally:
            conn.close()
        assert not facts.problems, facts.problems
        policy = hypervisor.policy
        figures = per_cells.setdefault(
            cells, {"all": [], "plain": [], "none": [], "limited": [], "guests": []}
        )
        for _ in range(runs):
            figures["all"].append(_timed(lambda: host_capacity(facts, policy, demands), repeat))  # noqa: B023
            figures["plain"].append(_timed(lambda: host_capacity(facts, policy, plain), repeat))  # noqa: B023
            figures["none"].append(_timed(lambda: host_capacity(facts, policy), repeat))  # noqa: B023
        capacity = host_capacity(facts, policy, demands)
        figures["limited"].append(len(capacity.placement_limited))
        figures["guests"].append(len(facts.domains))
    rows: Table = []
    for cells, figures in sorted(per_cells.items()):
        rows.append(
            (
                f"{cells} cells, {cells * NUMA_CORES * 2} CPUs",
                str(len(figures["guests"])),
                f"{statistics.mean(figures['guests']):.1f}",
                _duration(statistics.median(figures["all"])),
                _duration(percentile(figures["all"], 0.9)),
                _duration(statistics.median(figures["plain"])),
                _duration(statistics.median(figures["none"])),
                f"{statistics.mean(figures['limited']):.1f} of {len(NUMA_FLAVORS)}",
            )
        )
    print_table(
        f"NUMA fit at scale: host_capacity per replayed host (median of {repeat} calls, {runs} run(s))",
        (
            "host",
            "hosts",
            "guests/host",
            f"{len(NUMA_FLAVORS)} flavors p50",
            f"{len(NUMA_FLAVORS)} flavors p90",
            "plain flavor only",
            "no flavors",
            "flavors held back by cells or devices",
        ),
        rows,
    )
    rows = []
    for count in fleets:
        fleet = dict(list(hosts.items())[:count])
        with_numa = numa_config(scratch, fleet, NUMA_FLAVORS)
        plain_only = numa_config(scratch, fleet, [NUMA_FLAVORS[-1]])
        numa_cycles, numa_rss, plain_cycles, plain_rss = [], [], [], []
        for _ in range(runs):
            cycle, rss = serve_cycle(with_numa)
            numa_cycles.append(cycle)
            numa_rss.append(rss)
            cycle, rss = serve_cycle(plain_only)
            plain_cycles.append(cycle)
            plain_rss.append(rss)
        per_host = [c / count * 1000 for c in numa_cycles]
        rows.append(
            (
                f"{count} ({count - count // 2} x 2 cells, {count // 2} x 4 cells)",
                table_cell(numa_cycles, " s"),
                table_cell(per_host, " ms"),
                table_cell(plain_cycles, " s"),
                table_cell(numa_rss, " MiB", 0),
                table_cell(plain_rss, " MiB", 0),
            )
        )
    print_table(
        f"NUMA fit at scale: first full audit cycle of `virtcap serve` (listening to ready) on replayed "
        f"hosts (captures generated in {generated:.1f} s)",
        (
            "hosts",
            f"cycle, {len(NUMA_FLAVORS)} flavors",
            "per host",
            "cycle, plain flavor only",
            f"peak RSS, {len(NUMA_FLAVORS)} flavors",
            "peak RSS, plain flavor only",
        ),
        rows,
    )
