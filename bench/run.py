"""virtcap at fleet scale, next to prometheus-libvirt-exporter (`make bench`). Prints Markdown.

    python bench/run.py [--runs 3] [--quick] [--only SECTION]

1. Scrape latency of /metrics for one hypervisor of 50, 500 and 2,000 domains: virtcap next to
   prometheus-libvirt-exporter (which talks to libvirt on every scrape) on the same node file.
2. /metrics latency for 100 hypervisors x 100 domains (the exporter's own target).
3. A full audit cycle of `virtcap serve` and its peak RSS for 10, 100 and 1,000 hypervisors of 50
   domains, next to the same libvirt calls in a bare loop (the floor).
4. Event-to-metric latency: a domain defined on a real libvirtd, until its allocation is in /metrics.
5. /metrics latency while one hypervisor of the fleet hangs, and what the peer does then.
6. The GIL convoy that shapes the audit: libvirt calls in a bare loop, alone and next to a thread
   running Python.
7. NUMA fit at scale (`--only numa`): host_capacity per replayed multi-socket host (virtcap.demo.
   hostgen: two and four cells, SMT, 2 MiB and 1 GiB pages, SR-IOV VFs, pinned guests) for
   flavors that ask for cells, pages and devices, and the full audit cycle of `virtcap serve` on
   100 and 500 such hosts.
8. Failure tolerance (`--only tolerance`): every hypervisor's evacuation through the simulated
   scheduler and how many hypervisors the fleet can lose together, on 1,000 hypervisors x 50
   domains (facts built in process, fleetgen's flavor mix), full and after one hypervisor changed:
   one no evacuation uses (typical), the median of those some use, the one they all use (worst);
   and the same hypervisors made full, where every evacuation fails.
9. Failure tolerance served (`--only serving`): `virtcap serve` on 1,000 test-driver hypervisors x
   50 domains with room to spare, /metrics latency during the first (full) computation and while a
   claim a second has it computed again (incrementally, or whole when claims pile up during a
   computation), next to the same fleet and claims with it
   turned off; the audit cycle and the computations' durations beside them.
10. Over real network latency (`--only latency`, root: bench/latency.py): a real libvirtd reached
   over qemu+tcp through a delay, in a network namespace of the benchmark's own, by many
   connections standing for many hypervisors: audit duration and libvirt round trips per
   hypervisor, full against incremental audits, next to prometheus-libvirt-exporter's scrape.
11. Sharding (`--only sharding`, bench/sharding.py): the same 1,000 x 50 fleet served by one
   exporter and by two shards on this machine: until every hypervisor is audited once, /metrics
   p50/p99 per process, RSS.

Each figure is the median of --runs runs, with half the range as the spread.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import bcrypt
import libvirt

from virtcap import __version__
from virtcap.audit.hypervisor import audit_host, open_read_only, version_string
from virtcap.audit.replay import encode_capture
from virtcap.config import parse_config
from virtcap.demo import hostgen
from virtcap.demo.fleetgen import FLAVORS, RUNNING, SHUTOFF, FlavorSpec, HostSpec, random_domain, write_fleet
from virtcap.model.capacity import HostPolicy, host_capacity
from virtcap.model.facts import (
    DiskFacts,
    DomainFacts,
    DomainState,
    HostFacts,
    NovaFlavor,
    NovaInstance,
    StorageFacts,
)
from virtcap.model.placement import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, HostState, fleet_tolerance, fleet_tolerance_update, host_state
from virtcap.units import format_cpu_set

PEER = "prometheus-libvirt-exporter"
Table = list[tuple[str, ...]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_hosts(
    directory: Path,
    hypervisors: int,
    domains: int,
    *,
    seed: int = 7,
    size: tuple[int, int, int] = (64, 512, 100),
    flavors: tuple[FlavorSpec, ...] = FLAVORS,
) -> dict[str, Path]:
    """Hypervisors of `size` (CPUs, GiB of memory, GiB of disk pool) with random domains."""
    rng = random.Random(seed)
    cpus, memory_gib, pool_gib = size
    hosts = []
    for h in range(hypervisors):
        name = f"bench-{h:04d}"
        specs = [
            random_domain(rng, name, i, RUNNING if i % 5 else SHUTOFF, flavors=flavors)
            for i in range(domains)
        ]
        hosts.append(HostSpec(name, cpus, memory_gib, pool_gib, 0, domains=specs))
    return write_fleet(hosts, directory)


def write_config(directory: Path, uris: dict[str, str], interval: str = "1h", **audit: Any) -> Path:
    config = {
        "audit": {"interval": interval, "timeout": "60s", **audit},
        "claims": {"database": ":memory:"},
        "hypervisors": [{"name": name, "uri": uri} for name, uri in uris.items()],
        "flavors": [
            {"name": f"f{i}", "vcpu": 2**i, "memory": f"{2 ** (i + 1)}GiB", "disk": f"{10 * 2**i}GiB"}
            for i in range(5)
        ],
    }
    path = directory / f"virtcap-{len(uris)}.yaml"
    path.write_text(json.dumps(config))
    return path


def get(port: int, path: str, timeout: float = 10) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def wait(condition: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout}s")
        time.sleep(0.01)
    return time.monotonic() - started


@contextmanager
def process(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextmanager
def virtcap(config: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], float]]:
    """A running `virtcap serve`, and how long it took from start to ready."""
    port = free_port()
    command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config)]
    command += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"]
    started = time.monotonic()
    with process(command) as child:
        wait(lambda: get(port, "/-/ready") == 200, 600)
        yield port, child, time.monotonic() - started


@contextmanager
def peer(uri: str) -> Iterator[int]:
    port = free_port()
    with process([PEER, f"--web.listen-address=127.0.0.1:{port}", f"--libvirt.uri={uri}"]):
        wait(lambda: get(port, "/", timeout=2) in (200, 404), 30)
        yield port


def latencies(port: int, count: int, path: str = "/metrics") -> list[float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    result = []
    for _ in range(count):
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        result.append(time.perf_counter() - started)
    connection.close()
    return result


def throughput(port: int, clients: int, seconds: float) -> float:
    done = [0] * clients
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while time.monotonic() < deadline:
            connection.request("GET", "/metrics")
            connection.getresponse().read()
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / seconds


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def cell(values: list[float], unit: str = "", digits: int = 2) -> str:
    spread = (max(values) - min(values)) / 2
    return f"{statistics.median(values):.{digits}f}{unit} ± {spread:.{digits}f}"


def print_table(title: str, header: tuple[str, ...], rows: Table) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


def scrape_comparison(scratch: Path, runs: int, sizes: list[int]) -> None:
    rows: Table = []
    for domains in sizes:
        path = make_hosts(scratch / f"single-{domains}", 1, domains)["bench-0000"]
        uri = f"test://{path}"
        ours: dict[str, list[float]] = {"p50": [], "p99": [], "rate": []}
        theirs: dict[str, list[float]] = {"p50": [], "p99": [], "rate": []}
        for _ in range(runs):
            with virtcap(write_config(scratch, {"bench-0000": uri})) as (port, _child, _ready):
                measured = latencies(port, 300)
                ours["p50"].append(percentile(measured, 0.5) * 1000)
                ours["p99"].append(percentile(measured, 0.99) * 1000)
                ours["rate"].append(throughput(port, 4, 2.0))
            with peer(uri) as port:
                measured = latencies(port, 30 if domains >= 2000 else 100)
                theirs["p50"].append(percentile(measured, 0.5) * 1000)
                theirs["p99"].append(percentile(measured, 0.99) * 1000)
                theirs["rate"].append(throughput(port, 4, 2.0))
        ratio = [t / o for t, o in zip(theirs["p50"], ours["p50"], strict=True)]
        rows.append(
            (
                str(domains),
                cell(ours["p50"], " ms"),
                cell(ours["p99"], " ms"),
                cell(ours["rate"], "/s", 0),
                cell(theirs["p50"], " ms"),
                cell(theirs["p99"], " ms"),
                cell(theirs["rate"], "/s", 0),
                cell(ratio, "x", 1),
            )
        )
    print_table(
        f"Scrape latency, one hypervisor: virtcap next to {PEER} (same node file)",
        (
            "domains",
            "virtcap p50",
            "virtcap p99",
            "virtcap req/s",
            "peer p50",
            "peer p99",
            "peer req/s",
            "peer/virtcap p50",
        ),
        rows,
    )


def scrape_at_scale(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    paths = make_hosts(scratch / f"fleet-{hypervisors}x{domains}", hypervisors, domains)
    # audits every 5 s during the measurement: scrapes compete with audits and re-renders
    config = write_config(scratch, {n: f"test://{p}" for n, p in paths.items()}, interval="5s")
    p50s, p99s, maxima = [], [], []
    for _ in range(runs):
        with virtcap(config) as (port, _child, _ready):
            latencies(port, 50)
            measured = latencies(port, 2000)
            p50s.append(percentile(measured, 0.5) * 1000)
            p99s.append(percentile(measured, 0.99) * 1000)
            maxima.append(max(measured) * 1000)
    print_table(
        f"virtcap /metrics, {hypervisors} hypervisors x {domains} domains, audits every 5 s",
        ("p50", "p99", "max"),
        [(cell(p50s, " ms"), cell(p99s, " ms"), cell(maxima, " ms"))],
    )


# The libvirt calls virtcap's audit of a test-driver hypervisor makes, in a bare sequential loop
# and nothing else: no XML parsing, no accounting, no exposition.
FLOOR = r"""
import sys, time, libvirt
libvirt.registerErrorHandler(lambda *a: None, None)
uris = sys.argv[1:]
started = time.monotonic()
for uri in uris:
    conn = libvirt.openReadOnly(uri)
    conn.getType(); conn.getCPUStats(-1)
    conn.getInfo(); conn.getType(); conn.getVersion(); conn.getLibVersion()
    conn.storagePoolLookupByName("default").info()
    for pool in conn.listAllStoragePools(libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE):
        pool.name(); pool.XMLDesc(0)
        for volume in pool.listAllVolumes(0):
            volume.info(); volume.path(); volume.name()
    for domain, _stats in conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0):
        domain.XMLDesc(0)
    try:
        conn.getMemoryStats(-1)  # not on the test driver: the audit falls back to guest balloons
    except libvirt.libvirtError:
        pass
    conn.getCPUStats(-1); conn.getHostname(); conn.getCPUMap()
    conn.close()
print(time.monotonic() - started)
"""


def audit_cycle(scratch: Path, runs: int, sizes: list[int], domains: int) -> None:
    rows: Table = []
    for hypervisors in sizes:
        paths = make_hosts(scratch / f"cycle-{hypervisors}", hypervisors, domains)
        uris = {n: f"test://{p}" for n, p in paths.items()}
        config = write_config(scratch, uris, concurrency=32)
        cycles, rss, floors = [], [], []
        for _ in range(runs):
            floor = subprocess.run(
                [sys.executable, "-c", FLOOR, *uris.values()], capture_output=True, text=True, check=True
            )
            floors.append(float(floor.stdout))
            port = free_port()
            command = [sys.executable, "-m", "virtcap", "serve", "--config", str(config)]
            command += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "error"]
            with process(command) as child:
                wait(lambda: get(port, "/-/healthy") == 200, 60)  # noqa: B023
                listening = time.monotonic()
                wait(lambda: get(port, "/-/ready") == 200, 600)  # noqa: B023
                cycles.append(time.monotonic() - listening)
                status = Path(f"/proc/{child.pid}/status").read_text()
                peak = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
                rss.append(int(peak.split()[1]) / 1024)
        ratio = [c / f for c, f in zip(cycles, floors, strict=True)]
        rows.append(
            (
                f"{hypervisors} x {domains}",
                cell(cycles, " s"),
                cell(floors, " s"),
                cell(ratio, "x", 2),
                cell(rss, " MiB", 0),
            )
        )
    print_table(
        "Full audit cycle of `virtcap serve` (listening to ready) and peak RSS, "
        "next to the raw libvirt calls in a bare loop",
        ("fleet", "audit cycle", "bare-loop floor", "cycle/floor", "peak RSS"),
        rows,
    )


CONVOY = r"""
import sys, threading, time, libvirt
libvirt.registerErrorHandler(lambda *a: None, None)
if sys.argv[1] == "busy":
    def spin():
        while True:
            sum(range(1000))
    threading.Thread(target=spin, daemon=True).start()
started = time.monotonic()
for uri in sys.argv[2:]:
    conn = libvirt.openReadOnly(uri)
    for domain in conn.listAllDomains(0):
        domain.info(); domain.XMLDesc(0)
    conn.close()
print(time.monotonic() - started)
"""


def gil_convoy(scratch: Path, runs: int, hypervisors: int) -> None:
    """Why the audit counts its libvirt calls: each one releases the GIL, and the thread coming
    back waits up to the 5 ms switch interval while another thread runs Python."""
    uris = [f"test://{p}" for p in make_hosts(scratch / "convoy", hypervisors, 50).values()]
    rows: Table = []
    for neighbour in ("alone", "busy"):
        command = [sys.executable, "-c", CONVOY, neighbour, *uris]
        times = [
            float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
            for _ in range(runs)
        ]
        label = "alone" if neighbour == "alone" else "next to one thread running Python"
        rows.append((label, cell(times, " s")))
    print_table(
        f"GIL convoy: {hypervisors} test-driver hypervisors x 50 domains, info + XMLDesc a domain",
        ("loop", "time"),
        rows,
    )


GUEST = """<domain type='qemu'><name>{name}</name><uuid>{uuid}</uuid><memory unit='MiB'>64</memory>
<vcpu>3</vcpu><os><type arch='x86_64' machine='pc'>hvm</type></os>
<devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"""


def event_latency(scratch: Path, runs: int) -> None:
    try:
        admin: Any = libvirt.open("qemu:///system")
    except libvirt.libvirtError as error:
        print_table("Event-to-metric latency", ("result",), [(f"not measured: no libvirtd ({error})",)])
        return
    config = write_config(scratch, {"local": "qemu:///system"})
    samples = []
    with virtcap(config) as (port, _child, _ready):

        def shutoff_vcpus() -> float:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
            connection.close()
            key = (
                'hypervisor_resource_allocated{hypervisor="local",resource="vcpu",'
                'state="shutoff",unit="cpus"}'
            )
            return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(key))

        for _ in range(max(runs, 5)):
            before = shutoff_vcpus()
            name = f"virtcap-bench-{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            domain = admin.defineXML(GUEST.format(name=name, uuid=uuid.uuid4()))
            try:
                wait(lambda: shutoff_vcpus() == before + 3, 10)  # noqa: B023
                samples.append(time.monotonic() - started)
            finally:
                domain.undefine()
            wait(lambda: shutoff_vcpus() == before, 10)  # noqa: B023
    admin.close()
    print_table(
        "Event-to-metric latency: a domain defined on a real libvirtd until its allocation is in /metrics",
        ("samples", "median", "max"),
        [(str(len(samples)), cell(samples, " s"), f"{max(samples):.2f} s")],
    )


@contextmanager
def silent_listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        for connection in held:
            connection.close()
        server.close()


def hung_hypervisor(scratch: Path, runs: int) -> None:
    paths = make_hosts(scratch / "hung", 10, 50)
    rows: Table = []
    with silent_listener() as port_of_hung:
        hung_uri = f"qemu+tcp://127.0.0.1:{port_of_hung}/system"
        uris = {n: f"test://{p}" for n, p in paths.items()} | {"hung": hung_uri}
        config = write_config(scratch, uris, interval="2s", timeout="1s")
        p50s, p99s = [], []
        for _ in range(runs):
            with virtcap(config) as (port, _child, _ready):
                time.sleep(3)  # the hung one has timed out at least once
                measured = latencies(port, 1000)
                p50s.append(percentile(measured, 0.5) * 1000)
                p99s.append(percentile(measured, 0.99) * 1000)
        rows.append(("virtcap: 10 healthy + 1 hung", cell(p50s, " ms"), cell(p99s, " ms")))
        peer_times = []
        for _ in range(runs):
            with peer(hung_uri) as port:
                started = time.monotonic()
                status = get(port, "/metrics", timeout=10)
                peer_times.append(time.monotonic() - started)
        outcome = "no answer within 10 s" if all(t >= 9.9 for t in peer_times) else f"status {status}"
        rows.append((f"{PEER} on the hung one", cell(peer_times, " s"), outcome))
    print_table(
        "/metrics while one hypervisor hangs (accepts, never answers)", ("exporter", "p50", "p99"), rows
    )


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
                cell(numa_cycles, " s"),
                cell(per_host, " ms"),
                cell(plain_cycles, " s"),
                cell(numa_rss, " MiB", 0),
                cell(plain_rss, " MiB", 0),
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


GIB = 1024**3


def tolerance_facts(rng: random.Random, name: str, domains: int) -> HostFacts:
    """A test-driver-like hypervisor: one of three sizes, `domains` domains of fleetgen's flavors
    (half of them Nova guests), about 620 GiB of memory allocated on 768, 1,024 or 1,536 GiB."""
    cpus, memory_gib = rng.choice(((64, 768), (96, 1024), (128, 1536)))
    guests = []
    for index in range(domains):
        spec = random_domain(rng, name, index, RUNNING)
        flavor = spec.flavor
        vcpus, memory_mib = spec.vcpus, spec.memory_mib
        disks = tuple(
            DiskFacts(
                target=d.target,
                source=f"/images/{name}-{index}-{d.target}",
                local=True,
                capacity_bytes=d.capacity_gib * GIB,
            )
            for d in spec.disks
            if d.kind in ("file", "volume")
        )
        nova = None
        if flavor is not None:
            nova = NovaInstance(
                NovaFlavor(
                    flavor.name,
                    flavor.vcpus,
                    flavor.memory_mib,
                    flavor.root_gib,
                    flavor.ephemeral_gib,
                    flavor.swap_mib,
                )
            )
        guests.append(
            DomainFacts(
                name=spec.name,
                uuid=spec.uuid,
                state=DomainState.RUNNING,
                vcpus=vcpus,
                memory_bytes=memory_mib * 1024**2,
                current_memory_bytes=None,
                hugepages=False,
                vcpu_pins=(None,) * vcpus,
                disks=disks,
                nova=nova,
            )
        )
    return HostFacts(
        hostname=name,
        hypervisor_type="QEMU",
        hypervisor_version="7.2.0",
        libvirt_version="9.0.0",
        cpus=cpus,
        online_cpus=None,
        memory_bytes=memory_gib * GIB,
        storage=StorageFacts("pool default", 8192 * GIB, 0),
        memory_in_use_bytes=None,
        memory_in_use_source=None,
        cpu_times=None,
        busy_cpus=None,
        domains=tuple(guests),
        audited_at=0.0,
        audit_duration_seconds=0.0,
    )


def tolerance_fleet(hypervisors: int, domains: int, seed: int = 5, *, full: bool = False) -> list[HostState]:
    """`full`: the same hypervisors with a quarter of their memory (192, 256 or 384 GiB for about
    620 GiB allocated), every one beyond its limit: no domain of any evacuation finds a host, and
    each lists why every other hypervisor refused it (the overcommitted fleet an operator looks
    at)."""
    rng = random.Random(seed)
    policy = HostPolicy()
    states = []
    for index in range(hypervisors):
        facts = tolerance_facts(rng, f"compute-{index:04d}", domains)
        if full:
            facts = replace(facts, memory_bytes=facts.memory_bytes // 4)
        states.append(host_state(f"compute-{index:04d}", facts, policy))
    return states


def full_fleet_tolerance(runs: int, hypervisors: int, domains: int) -> Table:
    """The full fleet's rows: its full computation, and one hypervisor changed (the first, then
    others: every evacuation has a domain that found no host, so each is computed again)."""
    hosts = tolerance_fleet(hypervisors, domains, full=True)
    full: list[float] = []
    result = None
    for _ in range(runs):
        began = time.perf_counter()
        result = fleet_tolerance(hosts, multipliers=SPREAD)
        full.append(time.perf_counter() - began)
    assert result is not None
    unplaced = sum(evacuated.unplaced_count for evacuated in result.evacuations.values())
    failed = sum(1 for evacuated in result.evacuations.values() if not evacuated.feasible)
    changed: list[float] = []
    for run in range(runs):
        smaller = tolerance_fleet_changed(hosts[run * 37 % len(hosts)])
        began = time.perf_counter()
        fleet_tolerance_update(result, smaller)
        changed.append(time.perf_counter() - began)
    label = f"full fleet ({failed:,} of {len(hosts):,} evacuations fail, {unplaced:,} domains find no host)"
    return [
        (f"{label}: full", cell(full, " s"), "< 30 s"),
        (f"{label}: one change", cell(changed, " s", 3), "< 2 s"),
    ]


def failure_tolerance(runs: int, hypervisors: int, domains: int) -> None:
    started = time.perf_counter()
    hosts = tolerance_fleet(hypervisors, domains)
    built = time.perf_counter() - started
    full: list[float] = []
    result = None
    for _ in range(runs):
        began = time.perf_counter()
        result = fleet_tolerance(hosts, multipliers=SPREAD)
        full.append(time.perf_counter() - began)
    assert result is not None
    # how many evacuations place a domain on each host: a change of a host none of them uses
    # keeps them all (typical: most hosts), one of the hosts they all use resumes them all from
    # the step that chose it (the worst)
    targets: dict[str, int] = dict.fromkeys((state.name for state in hosts), 0)
    for evacuated in result.evacuations.values():
        for name in {host for _, host in evacuated.placements}:
            targets[name] += 1
    unused = [name for name, count in targets.items() if count == 0]
    used = sorted((name for name in targets if targets[name] > 0), key=lambda name: (targets[name], name))
    median = used[len(used) // 2] if used else hosts[0].name
    busiest = max(targets, key=lambda name: (targets[name], name))
    by_name = {state.name: state for state in hosts}
    rows: Table = [
        ("full: every hypervisor's evacuation + the fleet's tolerated failures", cell(full, " s"), "< 30 s")
    ]
    for label, names in (
        (
            f"one change, typical: a hypervisor no evacuation uses ({len(unused):,} of {len(hosts):,})",
            unused,
        ),
        (
            f"one change: the median of the {len(used)} hypervisors some evacuation uses "
            f"({targets[median]} evacuations use it)",
            [median],
        ),
        (f"one change, worst: the hypervisor {targets[busiest]} evacuations use", [busiest]),
    ):
        changed = []
        for run in range(runs):
            state = by_name[names[run * 37 % len(names)]] if names else hosts[0]
            smaller = tolerance_fleet_changed(state)
            began = time.perf_counter()
            fleet_tolerance_update(result, smaller)
            changed.append(time.perf_counter() - began)
        rows.append((label, cell(changed, " s", 3), "< 2 s"))
    rows.extend(full_fleet_tolerance(runs, hypervisors, domains))
    infeasible = sum(1 for evacuated in result.evacuations.values() if not evacuated.feasible)
    print_table(
        f"Failure tolerance of {hypervisors:,} hypervisors x {domains} domains, {os.cpu_count()} CPUs, "
        f"one process (states built in {built:.1f} s; {infeasible} hypervisors cannot be evacuated, "
        f"{result.tolerated} failures tolerated of {result.bound})",
        ("computation", "time", "target"),
        rows,
    )


def tolerance_fleet_changed(state: HostState) -> HostState:
    """The hypervisor with one domain more (an m1.large claimed on it)."""
    large = Demand({Resource.VCPU: 4, Resource.MEMORY: 8 * GIB, Resource.DISK: 80 * GIB})
    return state.consume(large)


BENCH_WRITER = ("bench", "bench-password")


def metric_value(port: int, name: str) -> float | None:
    """One sample of /metrics (`name` with its labels as rendered), None if absent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if found else None


def tolerance_config(directory: Path, uris: dict[str, str], enabled: bool) -> Path:
    path = write_config(directory, uris, concurrency=32)
    config = json.loads(path.read_text())
    # The test driver's pools hold 100 GiB whatever their XML says: a disk ratio gives the
    # domains' disks room, so that evacuations mostly succeed, as in a fleet run with headroom.
    config["defaults"] = {"allocation_ratios": {"disk": 60.0}}
    config["scheduler"] = {"failure_tolerance": {"enabled": enabled}}
    hashed = bcrypt.hashpw(BENCH_WRITER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    config["claims"]["writers"] = {BENCH_WRITER[0]: hashed}
    path.write_text(json.dumps(config))
    return path


def post_claim(port: int, hypervisor: str) -> int:
    credentials = base64.b64encode(f"{BENCH_WRITER[0]}:{BENCH_WRITER[1]}".encode()).decode()
    body = json.dumps({"hypervisor": hypervisor, "vcpu": 1, "memory": "1GiB", "ttl": "10m"})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Authorization": f"Basic {credentials}", "Content-Type": "application/json"}
        connection.request("POST", "/api/v1/claims", body, headers)
        return connection.getresponse().status
    finally:
        connection.close()


def latencies_while(port: int, busy: Callable[[], bool], limit: float) -> list[float]:
    """Scrapes one after the other while `busy()` (checked every 50 scrapes), at most `limit` s."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    result: list[float] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and (len(result) % 50 or busy()):
        started = time.perf_counter()
        connection.request("GET", "/metrics")
        connection.getresponse().read()
        result.append(time.perf_counter() - started)
    connection.close()
    return result


def tolerance_while_scraped(scratch: Path, runs: int, hypervisors: int, domains: int, seconds: float) -> None:
    """/metrics while the exporter computes the fleet's failure tolerance: during its first, full
    computation, and while a claim a second on a random hypervisor has it computed again;
    next to the same fleet and claims with it turned off."""
    paths = make_hosts(
        scratch / f"tolerance-{hypervisors}x{domains}", hypervisors, domains, size=ROOMY, flavors=FITTING
    )
    uris = {n: f"test://{p}" for n, p in paths.items()}
    names = list(uris)
    rows: Table = []
    figures: dict[str, dict[str, list[float]]] = {}
    for enabled in (False, True):
        for _ in range(runs):
            config = tolerance_config(scratch, uris, enabled)
            with virtcap(config) as (port, _child, ready):
                if enabled:
                    started = time.monotonic()
                    measured = latencies_while(port, lambda: metric_value(port, DURATION) is None, 600)
                    first = figures.setdefault("on: first computation (full)", {})
                    first.setdefault("cycle", []).append(ready)
                    first.setdefault("took", []).append(metric_value(port, DURATION) or 0.0)
                    first.setdefault("window", []).append(time.monotonic() - started)
                    _latency_figures(first, measured)
                stop = threading.Event()
                rng = random.Random(3)

                def claim_again_and_again(
                    port: int = port, stop: threading.Event = stop, rng: random.Random = rng
                ) -> None:
                    while not stop.is_set():
                        post_claim(port, rng.choice(names))
                        stop.wait(1.0)

                before = [metric_value(port, kind) or 0.0 for kind in (FULL, INCREMENTAL)]
                claimer = threading.Thread(target=claim_again_and_again, daemon=True)
                claimer.start()
                try:
                    measured = latencies_while(port, lambda: True, seconds)
                finally:
                    stop.set()
                    claimer.join()
                label = "on: a claim a second" if enabled else "off: a claim a second"
                steady = figures.setdefault(label, {})
                steady.setdefault("cycle", []).append(ready)
                steady.setdefault("window", []).append(seconds)
                if enabled:
                    after = [metric_value(port, kind) or 0.0 for kind in (FULL, INCREMENTAL)]
                    steady.setdefault("full", []).append(after[0] - before[0])
                    steady.setdefault("incremental", []).append(after[1] - before[1])
                    steady.setdefault("took", []).append(metric_value(port, DURATION) or 0.0)
                _latency_figures(steady, measured)
    for label, found in figures.items():
        rows.append(
            (
                label,
                cell(found["cycle"], " s", 1),
                cell(found["took"], " s", 2) if "took" in found else "-",
                f"{cell(found['full'], '', 0)} full, {cell(found['incremental'], '', 0)} incremental"
                if "full" in found
                else "-",
                cell(found["window"], " s", 0),
                cell(found["p50"], " ms"),
                cell(found["p99"], " ms"),
                cell(found["max"], " ms"),
            )
        )
    print_table(
        f"virtcap serve, {hypervisors} hypervisors x {domains} domains: /metrics while the failure "
        "tolerance is computed (in its worker process), and with it off",
        (
            "failure tolerance",
            "audit cycle",
            "last computation",
            "computed",
            "scraped for",
            "p50",
            "p99",
            "max",
        ),
        rows,
    )


def _latency_figures(figures: dict[str, list[float]], measured: list[float]) -> None:
    figures.setdefault("p50", []).append(percentile(measured, 0.5) * 1000)
    figures.setdefault("p99", []).append(percentile(measured, 0.99) * 1000)
    figures.setdefault("max", []).append(max(measured) * 1000)


DURATION = "virtcap_failure_tolerance_duration_seconds"
INCREMENTAL = 'virtcap_failure_tolerance_computations_total{kind="incremental"}'
FULL = 'virtcap_failure_tolerance_computations_total{kind="full"}'
ROOMY = (96, 1536, 100)
"""CPUs, GiB of memory and of disk pool of the failure-tolerance fleet: about half allocated."""
FITTING = tuple(replace(flavor, root_gib=min(flavor.root_gib, 80)) for flavor in FLAVORS)
"""The test driver's pools hold 100 GiB whatever their XML says: no disk may be larger."""


def network_latency(quick: bool) -> None:
    """bench/latency.py (which uses this module's helpers), as root: it creates a network namespace."""
    if os.geteuid() != 0:
        print_table("Over real network latency", ("result",), [("not measured: needs root (ip netns, tc)",)])
        return
    import latency  # noqa: PLC0415  (imported here: it imports this module back)

    latency.network_latency(quick)


def shard_comparison(scratch: Path, runs: int, hypervisors: int, domains: int) -> None:
    from sharding import sharding  # noqa: PLC0415  (bench/sharding.py imports this module's helpers)

    sharding(scratch, runs, hypervisors, domains)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller fleets, one run: a smoke test")
    parser.add_argument(
        "--only",
        choices=(
            "scrape",
            "scale",
            "cycle",
            "events",
            "hung",
            "convoy",
            "numa",
            "tolerance",
            "serving",
            "latency",
            "sharding",
        ),
        help="run one measurement only",
    )
    args = parser.parse_args()
    if args.only in (None, "scrape", "hung", "latency") and shutil.which(PEER) is None:
        raise SystemExit(f"{PEER} is not installed: `apt-get install {PEER}` (make bench does)")
    runs = 1 if args.quick else args.runs
    peer_version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", PEER], capture_output=True, text=True, check=False
    ).stdout
    versions = (
        f"Python {platform.python_version()}, libvirt {version_string(libvirt.getVersion())}, "
        f"{PEER} {peer_version or '?'}"
    )
    print(f"virtcap {__version__}, {versions}")
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"each figure: median of {runs} runs ± half the range")
    with tempfile.TemporaryDirectory(prefix="virtcap-bench-") as directory:
        scratch = Path(directory)
        measurements: dict[str, Callable[[], None]] = {
            "scrape": lambda: scrape_comparison(scratch, runs, [50, 500] if args.quick else [50, 500, 2000]),
            "scale": lambda: scrape_at_scale(scratch, runs, 20 if args.quick else 100, 100),
            "cycle": lambda: audit_cycle(scratch, runs, [10, 100] if args.quick else [10, 100, 1000], 50),
            "events": lambda: event_latency(scratch, runs),
            "hung": lambda: hung_hypervisor(scratch, runs),
            "convoy": lambda: gil_convoy(scratch, runs, 10 if args.quick else 20),
            "numa": lambda: numa_fit(
                scratch, runs, 20 if args.quick else 50, [100, 500], 5 if args.quick else 20
            ),
            "tolerance": lambda: failure_tolerance(runs, 1000, 50),
            "serving": lambda: tolerance_while_scraped(
                scratch, runs, 200 if args.quick else 1000, 50, 20.0 if args.quick else 60.0
            ),
            "latency": lambda: network_latency(args.quick),
            "sharding": lambda: shard_comparison(scratch, runs, 200 if args.quick else 1000, 50),
        }
        for name, measure in measurements.items():
            if args.only in (None, name):
                measure()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
