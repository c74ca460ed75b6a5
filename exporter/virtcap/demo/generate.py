"""Writes the demo fleet's files: `python -m virtcap.demo.generate [DIR]`.

Each host is shaped to show one thing an operator must see (see demo.yaml for which): test-driver
node files (`compute-NN.xml`) for the hosts that driver can show, and captures
(`compute-NN.json`, virtcap.demo.hostgen) for the hosts with NUMA cells, hugepages and devices
it cannot. The files are committed; a test fails when this script would write them differently.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

from virtcap.audit.capture_format import encode_capture
from virtcap.demo import DEMO_DIR, hostgen
from virtcap.demo.fleetgen import (
    BLOCKED,
    CRASHED,
    PAUSED,
    PMSUSPENDED,
    RUNNING,
    SHUTDOWN,
    SHUTOFF,
    DiskSpec,
    DomainSpec,
    FlavorSpec,
    HostSpec,
    SharedPoolSpec,
    random_domain,
    write_fleet,
)

# The test driver gives every storage pool 100 GiB whatever the node file says, so the demo's
# flavors have small root disks and most instances boot from network volumes.
SMALL = FlavorSpec("m1.small", 1, 2048, 10)
MEDIUM = FlavorSpec("m1.medium", 2, 4096, 10)
LARGE = FlavorSpec("m1.large", 4, 8192, 20)
XLARGE = FlavorSpec("m1.xlarge", 8, 16384, 20)
RAM_LARGE = FlavorSpec("r1.large", 4, 32768, 10, ephemeral_gib=2, swap_mib=1024)


def _states(rng: random.Random, count: int, shutoff: int, paused: int, other: int) -> list[int]:
    running = count - shutoff - paused - other
    others = [CRASHED, PMSUSPENDED, SHUTDOWN]
    states = [RUNNING] * (running - running // 10) + [BLOCKED] * (running // 10)
    states += [SHUTOFF] * shutoff + [PAUSED] * paused + [others[i % 3] for i in range(other)]
    rng.shuffle(states)
    return states


def _host(  # noqa: PLR0917  (its callers are a table of hosts, one row each)
    name: str,
    cpus: int,
    memory_gib: int,
    pool_gib: int,
    states: list[int],
    flavors: tuple[FlavorSpec, ...],
    rng: random.Random,
    nova_share: float,
    local_share: float,
) -> HostSpec:
    domains = [
        random_domain(rng, name, i, state, nova_share=nova_share, local_share=local_share, flavors=flavors)
        for i, state in enumerate(states)
    ]
    used = min(sum(d.disks[0].capacity_gib for d in domains) * 3 // 10, pool_gib)
    return HostSpec(name, cpus, memory_gib, pool_gib, used, domains=domains)


def demo_hosts() -> list[HostSpec]:
    rng = random.Random(20261121)
    hosts = [
        # Healthy general-purpose host: comfortably inside every limit.
        _host("compute-01", 32, 256, 4000, _states(rng, 60, 8, 2, 2), (SMALL, SMALL, MEDIUM), rng, 0.6, 0.08),
        # vCPU allocations past the 4.0 policy: the overcommit alert's host.
        _host("compute-02", 16, 192, 3000, _states(rng, 40, 4, 1, 1), (SMALL, MEDIUM, MEDIUM), rng, 0.5, 0.1),
        # Big host: a database no other host has the memory free for, and many stopped instances
        # that still hold their allocation.
        _database_host(
            _host("compute-04", 64, 768, 8000, _states(rng, 200, 60, 5, 5), (SMALL,), rng, 0.3, 0.035)
        ),
    ]
    hosts.append(_memory_bound_host(rng))
    hosts.append(_pinned_host(rng))
    hosts.append(_edge_host(rng))
    hosts.append(_zone_spare())
    on_nfs = {"compute-02": NFS, "compute-03": NFS_AS_INSTANCES, "compute-11": NFS}
    hosts = [
        replace(host, shared_pools=(on_nfs[host.name],)) if host.name in on_nfs else host for host in hosts
    ]
    return sorted((_owned(host) for host in hosts), key=lambda host: host.name)


# The projects the demo's domains belong to: Nova's owner for its instances, the site's own owner
# element (demo.yaml's `ownership`) for some plain domains, and none (`unknown`) for the others.
NOVA_PROJECTS = {
    "compute-01": "web-shop",
    "compute-02": "web-shop",
    "compute-03": "analytics",
    "compute-04": "web-shop",
}
"""The project of the Nova instances of each test-driver host, but compute-06's and compute-04's
database."""
OWNED_PLAIN = {"compute-04": "batch", "compute-11": "platform"}
"""The plain domains an owner element names a project for: compute-04's (batch jobs) and
compute-11's service guests; those of compute-01, -02 and -05 have none."""


def _owned(host: HostSpec) -> HostSpec:
    """Each domain's project, by the rules above: set after the draws, which it leaves as they were."""

    def project(domain: DomainSpec) -> str | None:
        if domain.flavor is None:
            return OWNED_PLAIN.get(host.name)
        if domain.flavor.name == DATABASE.name:
            return "analytics"
        if host.name == "compute-06":  # the edge node: a shop's Windows front ends and a CDN
            specs = dict(domain.flavor.extra_specs)
            return "web-shop" if "resources:CUSTOM_WINDOWS_LICENCE" in specs else "edge-cdn"
        return NOVA_PROJECTS.get(host.name)

    return replace(host, domains=[replace(domain, project=project(domain)) for domain in host.domains])


NFS = SharedPoolSpec(
    "nova-nfs",
    "nfs1.demo",
    "/export/nova",
    (
        ("golden-ubuntu-24.04.qcow2", 20, 4),
        ("golden-windows-2022.qcow2", 50, 18),
        ("scratch-01.qcow2", 80, 8),
    ),
)
"""The NFS export the hosts of availability zone az-2 mount: 150 GiB of volumes promised on a pool
the test driver says holds 100 GiB (thin provisioning, 1.5 times), 30 GiB of them written."""
NFS_AS_INSTANCES = replace(NFS, name="instances-nfs", export="/export/nova/")
"""The same export, mounted under another name and written with a trailing slash: still one pool."""


def _zone_spare() -> HostSpec:
    """compute-11, the spare of availability zone az-2 (compute-02, compute-03): evacuations stay
    in their zone, and compute-10, the other zone's spare, cannot take their domains. 48 CPUs and
    192 GiB, running twenty small service guests (512 MiB, one vCPU, roots on network volumes)
    that compute-03's 14 GiB of free memory can take in; room for all of compute-03's 172 GiB
    or compute-02's 142. Its own generator, so that the other hosts' draws stay as they were."""
    rng = random.Random(20261122)
    service = FlavorSpec("s1.tiny", 1, 512, 0)
    states = _states(rng, 20, 2, 0, 0)
    domains = [
        random_domain(rng, "compute-11", i, state, nova_share=0.0, local_share=0.0, flavors=(service,))
        for i, state in enumerate(states)
    ]
    return HostSpec("compute-11", 48, 192, 2000, 100, domains=domains)


DATABASE = FlavorSpec("r1.8xlarge", 32, 256 * 1024, 0)
"""compute-04's database: 32 vCPUs and 256 GiB, its root on a network volume."""
DATABASE_REPLACES = 32
"""The running small instances that give the database their place on compute-04: its vCPUs stay
at 200 allocated (tests/claims/test_claims.py counts them)."""


def _database_host(drawn: HostSpec) -> HostSpec:
    """compute-04, too big to lose: a 256 GiB database (r1.8xlarge) and 168 small instances, 70 of
    them not running (60 stopped) yet holding their allocation. No other host has 256 GiB of
    memory free, though together they have more than compute-04 holds: the sum-based bound says
    the fleet can lose it, the evacuation finds no host for the database.

    Its small instances are the first of the 200 drawn for the host (the random draws stay as they
    were, so that the hosts drawn after it do too), less the last DATABASE_REPLACES running ones."""
    running = [d for d in drawn.domains if d.state in (RUNNING, BLOCKED)]
    dropped = {d.name for d in running[-DATABASE_REPLACES:]}
    name = f"{drawn.name}-db-01"
    database = DomainSpec(
        name=name,
        uuid=hostgen.stable_uuid(name),
        state=RUNNING,
        vcpus=DATABASE.vcpus,
        memory_mib=DATABASE.memory_mib,
        current_memory_mib=DATABASE.memory_mib * 90 // 100,
        disks=(DiskSpec("vda", "network", 200),),
        flavor=DATABASE,
    )
    domains = [database, *(d for d in drawn.domains if d.name not in dropped)]
    return replace(drawn, domains=domains)


def _memory_bound_host(rng: random.Random) -> HostSpec:
    """Memory ratio 1.5 (Nova's pre-2023 default), allocated to ~94% of its limit, guests'
    balloons near the physical memory: the nearly-exhausted and memory-pressure alerts' host."""
    name = "compute-03"
    flavors = [LARGE] * 16 + [XLARGE] * 2
    flavors += [SMALL] * (24 - len(flavors))
    states = _states(rng, len(flavors), 2, 0, 0)
    domains = []
    for index, (flavor, state) in enumerate(zip(flavors, states, strict=True)):
        base = random_domain(rng, name, index, state, nova_share=1.0, local_share=0.2, flavors=(flavor,))
        balloon = base.memory_mib if state == SHUTOFF else base.memory_mib * 76 // 100
        domains.append(replace(base, current_memory_mib=balloon))
    return HostSpec(name, 48, 128, 6000, 900, domains=domains)


def _pinned_host(rng: random.Random) -> HostSpec:
    """Dedicated CPUs (cpu_dedicated_set) with two pinned guests, and stopped instances that
    do not count (count_inactive_domains: false). The test driver reports CPUs 0, 2 and 4
    online, so the sets in demo.yaml are small."""
    name = "compute-05"
    domains = []
    for index, cpu in enumerate((2,)):
        base = random_domain(rng, name, index, RUNNING, nova_share=1.0, local_share=1.0, flavors=(SMALL,))
        # Nova pins the guests of a flavor with hw:cpu_policy=dedicated, and writes that extra spec
        dedicated = replace(SMALL, extra_specs=(("hw:cpu_policy", "dedicated"),))
        domains.append(replace(base, pins=(cpu,), flavor=dedicated if base.flavor is not None else None))
    states = [RUNNING] * 3 + [SHUTOFF] * 17
    for index, state in enumerate(states, start=len(domains)):
        domains.append(
            random_domain(rng, name, index, state, nova_share=0.0, local_share=0.1, flavors=(SMALL,))
        )
    return HostSpec(name, 16, 64, 2000, 200, domains=domains)


WINDOWS_EVERY = 5
"""One guest in five on the edge node runs Windows."""


def _edge_host(rng: random.Random) -> HostSpec:
    """An OpenStack edge node: every instance carries Nova metadata, roots on Ceph (network
    disks, still accounted by flavor), some guests backed by hugepages, and Windows guests whose
    flavor takes one of the host's licences (a custom class, CUSTOM_WINDOWS_LICENCE)."""
    name = "compute-06"
    domains = []
    for index, state in enumerate(_states(rng, 30, 3, 1, 0)):
        base = random_domain(
            rng, name, index, state, nova_share=1.0, local_share=0.0, flavors=(SMALL, MEDIUM, RAM_LARGE)
        )
        if index % WINDOWS_EVERY == 1 and base.flavor is not None:
            licensed = replace(base.flavor, extra_specs=(("resources:CUSTOM_WINDOWS_LICENCE", "1"),))
            base = replace(base, flavor=licensed)
        domains.append(replace(base, hugepages=index % 7 == 0))
    return HostSpec(name, 24, 448, 1000, 100, domains=domains)


# The captured hosts' flavors, as Nova wrote them into their guests' metadata.
_DEDICATED = ("hw:cpu_policy", "dedicated")
P1_XLARGE = hostgen.FlavorSpec("p1.xlarge", 4, 8192, extra_specs=(_DEDICATED, ("hw:mem_page_size", "2MB")))
RP1_LARGE = hostgen.FlavorSpec("rp1.large", 2, 16384, extra_specs=(_DEDICATED, ("hw:mem_page_size", "1GB")))
RP1_XLARGE = hostgen.FlavorSpec("rp1.xlarge", 4, 49152, extra_specs=(_DEDICATED, ("hw:mem_page_size", "1GB")))
SHARED_MEDIUM = hostgen.FlavorSpec("m1.medium", 2, 4096)
SHARED_LARGE = hostgen.FlavorSpec("m1.large", 4, 8192)
SHARED_RAM_LARGE = hostgen.FlavorSpec("r1.large", 4, 32768)
G1_XLARGE = hostgen.FlavorSpec("g1.xlarge", 4, 28672, extra_specs=(_DEDICATED, ("resources:VGPU", "1")))
G1_LARGE = hostgen.FlavorSpec(
    "g1.large",
    2,
    12288,
    extra_specs=(_DEDICATED, ("resources:VGPU", "1"), ("pci_passthrough:alias", "sriov-vf:1")),
)
T4_TYPES = (
    hostgen.MdevTypeSpec("nvidia-230", "GRID T4-1Q", 16),
    hostgen.MdevTypeSpec("nvidia-231", "GRID T4-2Q", 8),
    hostgen.MdevTypeSpec("nvidia-232", "GRID T4-4Q", 4),
)
"""A T4's vGPU profiles (16 GiB split in 1, 2 or 4 GiB); the `nvidia-NNN` ids are made up in the
driver's style: each driver release numbers its types."""


def _pins(host: hostgen.HostSpec, cell: int, first_core: int, vcpus: int) -> tuple[int, ...]:
    """Whole cores from `first_core` on, both threads of each, as Nova's default thread policy
    (prefer) packs a dedicated guest onto sibling threads."""
    cores = range(first_core, first_core + vcpus // host.threads)
    return tuple(hostgen.cpu_id(host, cell, core, thread) for core in cores for thread in range(host.threads))


def _pinned(
    host: hostgen.HostSpec,
    name: str,
    flavor: hostgen.FlavorSpec,
    cell: int,
    first_core: int,
    *,
    project: str,
    page_size_kib: int | None = None,
    pci: tuple[str, ...] = (),
    mdevs: tuple[hostgen.MdevSpec, ...] = (),
    cpu_load: float = 0.6,
) -> hostgen.GuestSpec:
    """A guest pinned to whole cores of its own: its vCPUs hardly ever wait for a host CPU."""
    return hostgen.GuestSpec(
        name=name,
        vcpus=flavor.vcpus,
        memory_mib=flavor.memory_mib,
        cell=cell,
        pins=_pins(host, cell, first_core, flavor.vcpus),
        page_size_kib=page_size_kib,
        flavor=flavor,
        pci=pci,
        mdevs=mdevs,
        project=project,
        cpu_load=cpu_load,
        cpu_wait=0.002,
    )


def _shared(
    name: str,
    flavor: hostgen.FlavorSpec,
    shared_cpus: tuple[int, ...],
    state: int = hostgen.RUNNING,
    *,
    cpu_load: float = 0.2,
    cpu_wait: float = 0.005,
) -> hostgen.GuestSpec:
    return hostgen.GuestSpec(
        name=name,
        vcpus=flavor.vcpus,
        memory_mib=flavor.memory_mib,
        state=state,
        pins=shared_cpus,
        flavor=flavor,
        project="web-shop",
        cpu_load=cpu_load,
        cpu_wait=cpu_wait,
    )


CROWDED_LOAD, CROWDED_WAIT = 0.35, 0.12
"""compute-08's shared guests: 10 vCPUs floating over its 4 shared CPUs, 3.5 of them busy, each
waiting 12% of the time for a CPU (5% for the host's average running vCPU: under the 10% of
HypervisorCPUContention)."""


ML = "ml-training"
"""The project of the GPU guests."""


def numa_host() -> hostgen.HostSpec:
    """compute-08: two sockets of 8 cores, 2 threads each, 128 GiB a cell in 80 pages of 1 GiB,
    6144 of 2 MiB and the rest in small pages, an X710 with 8 VFs on each socket. Core 0 of each
    socket (both threads) is shared, the other 28 CPUs dedicated. The pinned guests leave cell 0
    6 dedicated CPUs (30 GiB of 1 GiB pages usable) and cell 1 8 (only 14 GiB of 1 GiB pages
    usable after the 2 reserved, 12 GiB of 2 MiB pages): p1.8xlarge (8 dedicated vCPUs, 16 GiB in
    large pages) fits in neither cell, though the host has 14 dedicated CPUs and 44 GiB of memory
    free."""
    layout = hostgen.HostSpec(name="compute-08", sockets=2, cores=8, threads=2, memory_gib=128)
    nics = (hostgen.NicSpec(cell=0, bus=0x3B, vfs=8), hostgen.NicSpec(cell=1, bus=0xD8, vfs=8))
    shared_cpus = tuple(sorted(hostgen.cpu_id(layout, cell, 0, t) for cell in (0, 1) for t in (0, 1)))
    guests = (
        _pinned(
            layout,
            "compute-08-db-01",
            RP1_XLARGE,
            0,
            1,
            project="analytics",
            page_size_kib=hostgen.PAGE_1G_KIB,
        ),
        _pinned(
            layout,
            "compute-08-nfv-01",
            P1_XLARGE,
            0,
            3,
            project="telco",
            page_size_kib=hostgen.PAGE_2M_KIB,
            pci=nics[0].vf_addresses[:1],
        ),
        _pinned(
            layout,
            "compute-08-db-02",
            RP1_XLARGE,
            1,
            1,
            project="analytics",
            page_size_kib=hostgen.PAGE_1G_KIB,
        ),
        _pinned(
            layout,
            "compute-08-nfv-02",
            RP1_LARGE,
            1,
            3,
            project="telco",
            page_size_kib=hostgen.PAGE_1G_KIB,
            pci=nics[1].vf_addresses[:2],
        ),
        _shared("compute-08-web-01", SHARED_LARGE, shared_cpus, cpu_load=CROWDED_LOAD, cpu_wait=CROWDED_WAIT),
        _shared(
            "compute-08-app-01", SHARED_MEDIUM, shared_cpus, cpu_load=CROWDED_LOAD, cpu_wait=CROWDED_WAIT
        ),
        _shared(
            "compute-08-cache-01", SHARED_RAM_LARGE, shared_cpus, cpu_load=CROWDED_LOAD, cpu_wait=CROWDED_WAIT
        ),
        _shared("compute-08-cache-02", SHARED_RAM_LARGE, shared_cpus, hostgen.SHUTOFF),
    )
    return replace(
        layout,
        hugepages=(
            hostgen.Hugepages(hostgen.PAGE_2M_KIB, (6144, 6144)),
            hostgen.Hugepages(hostgen.PAGE_1G_KIB, (80, 80)),
        ),
        nics=nics,
        guests=guests,
    )


def gpu_host() -> hostgen.HostSpec:
    """compute-09: two sockets of 8 cores, 2 threads each, 64 GiB a cell, a Tesla T4 on each
    socket offering three vGPU types, an X710 with 8 VFs on socket 1. Guests are pinned, each
    with a vGPU of its cell's GPU (g1.xlarge, 28 GiB: cell 0 has 8 GiB left); those of cell 1
    also with a VF (g1.large). A T4 holds vGPUs of one type
    at a time: GPU 0 two T4-4Q (2 more available: the fleet is short of that type), GPU 1 two
    T4-1Q (14 more)."""
    layout = hostgen.HostSpec(
        name="compute-09", sockets=2, cores=8, threads=2, memory_gib=64, model="Xeon-Gold-6326"
    )
    nic = hostgen.NicSpec(cell=1, bus=0xAF, vfs=8)
    gpus = (
        hostgen.GpuSpec(cell=0, bus=0x3B, mdev_types=T4_TYPES),
        hostgen.GpuSpec(cell=1, bus=0xD8, mdev_types=T4_TYPES),
    )

    def vgpu(name: str, gpu: hostgen.GpuSpec, type_id: str) -> tuple[hostgen.MdevSpec, ...]:
        return (hostgen.MdevSpec(hostgen.stable_uuid(f"mdev/{name}"), type_id, gpu.address),)

    guests = (
        _pinned(
            layout,
            "compute-09-ml-01",
            G1_XLARGE,
            0,
            1,
            project=ML,
            mdevs=vgpu("ml-01", gpus[0], "nvidia-232"),
        ),
        _pinned(
            layout,
            "compute-09-ml-02",
            G1_XLARGE,
            0,
            3,
            project=ML,
            mdevs=vgpu("ml-02", gpus[0], "nvidia-232"),
        ),
        _pinned(
            layout,
            "compute-09-viz-01",
            G1_LARGE,
            1,
            1,
            project=ML,
            pci=nic.vf_addresses[0:1],
            mdevs=vgpu("viz-01", gpus[1], "nvidia-230"),
        ),
        _pinned(
            layout,
            "compute-09-viz-02",
            G1_LARGE,
            1,
            2,
            project=ML,
            pci=nic.vf_addresses[1:2],
            mdevs=vgpu("viz-02", gpus[1], "nvidia-230"),
        ),
    )
    return replace(layout, nics=(nic,), gpus=gpus, guests=guests)


def spare_host() -> hostgen.HostSpec:
    """compute-10, the spare of compute-08 and compute-09: four sockets of 6 cores, 2 threads
    each, 64 GiB a cell, an X710 with 4 VFs on each socket and a Tesla T4 on socket 3 offering
    T4-1Q. Cores 0 to 2 of each socket (both threads) float shared guests, cores 3 to 5 are
    dedicated: 6 CPUs a cell, so that p1.8xlarge (8 in one cell) fits in none. Cells 0 and 1 hold
    50 pages of 1 GiB (room for one of compute-08's 48 GiB databases each), cell 2 20 of 1 GiB and
    4608 of 2 MiB (its NFV guests), cell 3 none; compute-09's guests would take small pages, the
    VFs of their cells and vGPUs of the T4. It runs a visualisation guest (2 dedicated CPUs of
    cell 3, a VF and a T4-1Q vGPU) and two shared guests; its 216 GiB of free memory, the most of
    any host, are short of compute-04's 256 GiB database."""
    layout = hostgen.HostSpec(
        name="compute-10", sockets=4, cores=6, threads=2, memory_gib=64, model="Xeon-Gold-6128"
    )
    nics = tuple(
        hostgen.NicSpec(cell=cell, bus=bus, vfs=4) for cell, bus in enumerate((0x18, 0x3B, 0x86, 0xD8))
    )
    gpu = hostgen.GpuSpec(cell=3, bus=0xAF, mdev_types=T4_TYPES)
    shared_cpus = tuple(
        sorted(
            hostgen.cpu_id(layout, cell, core, t) for cell in range(4) for core in range(3) for t in (0, 1)
        )
    )
    vgpu = hostgen.MdevSpec(hostgen.stable_uuid("mdev/compute-10-viz-01"), "nvidia-230", gpu.address)
    guests = (
        _pinned(
            layout,
            "compute-10-viz-01",
            G1_LARGE,
            3,
            3,
            project=ML,
            pci=nics[3].vf_addresses[:1],
            mdevs=(vgpu,),
        ),
        _shared("compute-10-web-01", SHARED_LARGE, shared_cpus),
        _shared("compute-10-app-01", SHARED_MEDIUM, shared_cpus),
    )
    return replace(
        layout,
        hugepages=(
            hostgen.Hugepages(hostgen.PAGE_2M_KIB, (0, 0, 4608, 0)),
            hostgen.Hugepages(hostgen.PAGE_1G_KIB, (50, 50, 20, 0)),
        ),
        nics=nics,
        gpus=(gpu,),
        guests=guests,
    )


def captured_hosts() -> list[hostgen.HostSpec]:
    """The demo's hosts with NUMA cells, hugepages and devices, written as captures."""
    return [numa_host(), gpu_host(), spare_host()]


def write_captures(hosts: list[hostgen.HostSpec], directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for host in hosts:
        path = directory / f"{host.name}.json"
        path.write_bytes(encode_capture(hostgen.capture_document(host)))
        paths[host.name] = path
    return paths


def main(argv: list[str]) -> int:
    directory = Path(argv[1]) if len(argv) > 1 else DEMO_DIR
    paths = write_fleet(demo_hosts(), directory) | write_captures(captured_hosts(), directory)
    for path in paths.values():
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
