"""A tiny TCG guest on this machine's real NUMA cell, backed by 2 MiB hugepages the test reserves
and pinned to host CPUs, audited and checked against virsh and the kernel.

What happens to the pages here (libvirt 9.0, QEMU 7.2, Debian 12), and why the counts below are
exact rather than eventual: libvirt gives every hugepage-backed memory backend `prealloc: true`
(and refuses `<allocation mode='ondemand'/>` with hugepages), so QEMU faults every page of the
guest's RAM in before virDomainCreate returns. The node's free 2 MiB pages (sysfs
free_hugepages, which is what virNodeGetFreePages and `virsh freepages` report) have then dropped
by the guest's memory / 2 MiB, and none is left merely reserved (HugePages_Rsvd back where it
was): with 40 pages reserved, a 64 MiB guest leaves 8 free, Rsvd 0, and QEMU's numa_maps shows its
32 pages in node 0. Without that preallocation an mmap of a hugetlbfs file only reserves its pages
(64 MiB shared: Rsvd 32, Free still 40) until each page is touched (Rsvd 0, Free 8).

The session's libvirtd cannot hold such a guest: it has no hugetlbfs. This module starts a daemon
of its own, pointed (qemu.conf `hugetlbfs_mount`) at a private hugetlbfs it mounts, owned by the
daemon's user. Everything the module takes is given back whatever happens: the guest, the daemon,
the mount, the pages (nr_hugepages lowered by as many as it was raised).

For assertions on the capacity model, `numa_guest` yields a `NumaGuest`: the daemon's URI, the
guest's name, and the audit with the guest running (`facts`, `domain`), the one before it started
(`before`) and fresh ones (`audit()`); the pinned host CPUs; the pages QEMU holds per host cell as
the kernel counts them (`held_pages()`).

The machine's hugepages are not the module's alone: another process may hold some, or take and
give back some while the tests run. The tests assert what the guest changed (the kernel's counts
read just before and just after it started), never the counts themselves, and compare the audit
with virsh or the kernel only at a steady moment (`steady`), when no count moved around both reads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import libvirt
import pytest

from tests.support.hugepages import hugepage_pools_held, more_hugepages
from tests.support.libvirtd import SEARCH_PATH, Libvirtd, _bounded, daemon_owner, prepare, running_daemon
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.config import parse_config
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import DomainFacts, DomainState, GuestCell, HostFacts, HugepageBacking, NumaCell
from virtcap.model.host_fit import Demand, HostFitRefusal
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource

# A real libvirtd: left out, with the session's own daemon tests, by `-m "not libvirtd"`.
pytestmark = pytest.mark.libvirtd

KIB = 1024
MIB = 1024**2
PAGE_KIB = 2048
GUEST_MIB = 64
GUEST_PAGES = GUEST_MIB * KIB // PAGE_KIB  # 32
RESERVED_PAGES = GUEST_PAGES + 8
HOST_CELL = 0
"""The host cell the guest's memory and CPUs come from."""
GUEST_CELL = 0
"""The guest's one cell."""
NODE_PAGES = Path(f"/sys/devices/system/node/node{HOST_CELL}/hugepages/hugepages-{PAGE_KIB}kB")
POOL = Path(f"/sys/kernel/mm/hugepages/hugepages-{PAGE_KIB}kB")
NODES = Path("/sys/devices/system/node")
COMMAND_SECONDS = 30
GUEST_SECONDS = 60
STEADY_TRIES = 20

_T = TypeVar("_T")


def audit_once(uri: str) -> HostFacts:
    conn = open_read_only(uri)
    try:
        return audit_host(conn, uri, None)
    finally:
        conn.close()


def run(*command: str) -> str:
    """A command's output; its failure, with what it said, fails the test."""
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            check=False,
            env={**os.environ, "PATH": SEARCH_PATH, "LC_ALL": "C"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(command)} took longer than {COMMAND_SECONDS} s")
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited with {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def virsh(uri: str, *args: str) -> str:
    return run("virsh", "--readonly", "--connect", uri, *args)


def cpu_list(text: str) -> frozenset[int]:
    """`0-3,6`, as libvirt and the kernel write CPU and node lists."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def free_pages(cell: NumaCell, size_kib: int = PAGE_KIB) -> int:
    (page,) = (page for page in cell.pages if page.size_kib == size_kib)
    assert page.free is not None, f"no free count for the {size_kib} KiB pages of cell {cell.id}"
    return page.free


def host_cell(facts: HostFacts) -> NumaCell:
    return next(cell for cell in facts.numa_cells if cell.id == HOST_CELL)


def kernel_hugepages() -> dict[tuple[int, int], tuple[int, int]]:
    """(cell, page size in KiB) to the kernel's (total, free) hugepages, for every cell and size."""
    counts = {}
    for pool in NODES.glob("node*/hugepages/hugepages-*kB"):
        cell = int(pool.parent.parent.name.removeprefix("node"))
        size_kib = int(pool.name.removeprefix("hugepages-").removesuffix("kB"))
        counts[cell, size_kib] = (
            int((pool / "nr_hugepages").read_text()),
            int((pool / "free_hugepages").read_text()),
        )
    return counts


def steady(measure: Callable[[], _T]) -> _T:
    """What `measure` read while no cell's hugepage counts moved: others on the machine may take
    and give back pages meanwhile, and two reads of them (the audit's and virsh's) agree only
    when neither saw a move. Measured again until the counts around it are the same."""
    for _ in range(STEADY_TRIES):
        counts = kernel_hugepages()
        measured = measure()
        if kernel_hugepages() == counts:
            return measured
    pytest.fail(f"the kernel's hugepage counts moved during each of {STEADY_TRIES} reads")


@dataclass(frozen=True)
class PoolCounts:
    """The kernel's own 2 MiB page counts: the host cell's free pages, and the pages reserved
    (mapped, not yet faulted in) in all cells, as HugePages_Rsvd."""

    free: int
    reserved: int

    @classmethod
    def read(cls) -> PoolCounts:
        return cls(
            free=int((NODE_PAGES / "free_hugepages").read_text()),
            reserved=int((POOL / "resv_hugepages").read_text()),
        )


@dataclass(frozen=True)
class NumaGuest:
    """The running guest, for assertions on what the audit and the model make of it."""

    uri: str
    name: str
    facts: HostFacts
    """The audit with the guest running."""
    before: HostFacts
    """The audit of the same daemon just before the guest started."""
    vcpu_cpu: int
    """The host CPU vCPU 0 is pinned to."""
    emulator_cpu: int
    """The host CPU the emulator threads are pinned to."""
    pid: int
    """QEMU's."""
    mount_point: Path
    """The private hugetlbfs the guest's memory is in."""
    kernel_before: PoolCounts
    kernel_after: PoolCounts

    @property
    def domain(self) -> DomainFacts:
        (domain,) = (domain for domain in self.facts.domains if domain.name == self.name)
        return domain

    def audit(self) -> HostFacts:
        return audit_once(self.uri)

    def held_pages(self) -> dict[int, int]:
        """The 2 MiB pages QEMU holds now, per host cell, as the kernel counts them."""
        return hugepages_by_node(self.pid, self.mount_point)


def guest_xml(name: str, vcpu_cpu: int, emulator_cpu: int) -> str:
    """No disk, no network: SeaBIOS finds nothing to boot and waits, which is all a guest needs
    to hold its memory and CPU. No balloon: hugepage-backed memory cannot be ballooned."""
    return f"""
<domain type='qemu'>
  <name>{name}</name>
  <uuid>{uuid.uuid4()}</uuid>
  <memory unit='MiB'>{GUEST_MIB}</memory>
  <vcpu>1</vcpu>
  <memoryBacking>
    <hugepages><page size='{PAGE_KIB}' unit='KiB' nodeset='{GUEST_CELL}'/></hugepages>
  </memoryBacking>
  <cputune><vcpupin vcpu='0' cpuset='{vcpu_cpu}'/><emulatorpin cpuset='{emulator_cpu}'/></cputune>
  <numatune>
    <memory mode='strict' nodeset='{HOST_CELL}'/>
    <memnode cellid='{GUEST_CELL}' mode='strict' nodeset='{HOST_CELL}'/>
  </numatune>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <cpu><numa><cell id='{GUEST_CELL}' cpus='0' memory='{GUEST_MIB * KIB}' unit='KiB'/></numa></cpu>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <memballoon model='none'/>
  </devices>
</domain>"""


@pytest.fixture(scope="module")
def reserved_pages() -> Iterator[int]:
    """RESERVED_PAGES more 2 MiB pages in the host cell, on top of what the machine has, given
    back at the end (tests/support/hugepages.py)."""
    if os.geteuid() != 0:
        pytest.skip("reserving hugepages (sysfs) and mounting a hugetlbfs need root")
    count = NODE_PAGES / "nr_hugepages"
    if not count.exists():
        pytest.skip(f"no 2 MiB hugepages in node {HOST_CELL}: {count} does not exist")
    # held for the module's whole life: its guest's counts are measured
    with hugepage_pools_held(), more_hugepages(count, RESERVED_PAGES) as taken:
        if PoolCounts.read().free < GUEST_PAGES:
            pytest.skip(
                f"the kernel found {taken} of {RESERVED_PAGES} free 2 MiB pages in node {HOST_CELL}, "
                f"the guest needs {GUEST_PAGES}"
            )
        yield taken  # the guest is gone by then: its pages are free again


def unmount(path: Path) -> None:
    unmounted = subprocess.run(
        ["umount", str(path)], capture_output=True, timeout=COMMAND_SECONDS, check=False
    )
    if unmounted.returncode:
        # busy (a QEMU that would not die): detached now, its pages freed when the last user goes
        subprocess.run(["umount", "--lazy", str(path)], timeout=COMMAND_SECONDS, check=True)


@pytest.fixture(scope="module")
def hugepages_libvirtd(reserved_pages: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Libvirtd]:
    """A private libvirtd of this module's own, as the session's (tests/support/libvirtd.py), whose QEMU
    guests take their hugepages from a private hugetlbfs with 2 MiB pages. The machine's own
    hugetlbfs, if it has one (systemd's /dev/hugepages), belongs to root: the daemon runs as an
    unprivileged user and must create its folders in the mount."""
    owner = daemon_owner()
    # In /tmp, as the session's: the daemon's user must reach it, and a socket path is short.
    directory = Path(tempfile.mkdtemp(prefix="virtcap-hugepages-", dir="/tmp"))
    mount_point = directory / "hugepages"
    log = tmp_path_factory.mktemp("hugepages-libvirtd") / "libvirtd.log"
    mounted = False
    try:
        environment = prepare(directory, owner, qemu_conf=f'hugetlbfs_mount = "{mount_point}"\n')
        mount_point.mkdir()
        uid, gid = owner
        run(
            "mount",
            "-t",
            "hugetlbfs",
            "-o",
            f"pagesize=2M,uid={uid},gid={gid},mode=0755",
            "virtcap-test-hugepages",
            str(mount_point),
        )
        mounted = True
        with running_daemon(directory, log, owner, environment) as daemon:
            yield daemon
    finally:
        try:
            if mounted:
                unmount(mount_point)
        finally:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def numa_guest(hugepages_libvirtd: Libvirtd) -> Iterator[NumaGuest]:
    """The guest running: its vCPU pinned to the host cell's second CPU, its emulator to the
    first, its one cell's memory in 2 MiB pages of the host cell. Destroyed and undefined at the
    end, whatever happened."""
    daemon = hugepages_libvirtd
    before = audit_once(daemon.uri)
    cells = {cell.id: cell for cell in before.numa_cells}
    if HOST_CELL not in cells:
        pytest.fail(f"libvirt reports no cell {HOST_CELL}, though the kernel has node {HOST_CELL}: {cells}")
    cpus = sorted(cells[HOST_CELL].cpus)
    if len(cpus) < 2:
        pytest.skip(f"pinning the vCPU and the emulator apart needs two CPUs in cell {HOST_CELL}: {cpus}")
    emulator_cpu, vcpu_cpu = cpus[:2]
    name = f"virtcap-numa-{uuid.uuid4().hex[:6]}"
    kernel_before = PoolCounts.read()
    conn: Any = libvirt.open(daemon.uri)
    domains: list[Any] = []

    def start() -> None:
        domains.append(conn.defineXML(guest_xml(name, vcpu_cpu, emulator_cpu)))
        domains[0].create()

    try:
        _bounded(start, GUEST_SECONDS, "starting the hugepage-backed guest")
        kernel_after = PoolCounts.read()
        pid_file = daemon.directory / "run" / "libvirt" / "qemu" / "run" / f"{name}.pid"
        yield NumaGuest(
            uri=daemon.uri,
            name=name,
            facts=audit_once(daemon.uri),
            before=before,
            vcpu_cpu=vcpu_cpu,
            emulator_cpu=emulator_cpu,
            pid=int(pid_file.read_text()),
            mount_point=daemon.directory / "hugepages",
            kernel_before=kernel_before,
            kernel_after=kernel_after,
        )
    finally:

        def remove() -> None:
            for domain in domains:
                if domain.isActive():
                    domain.destroy()
                domain.undefine()
            conn.close()

        _bounded(remove, GUEST_SECONDS, "removing the hugepage-backed guest")


def allowed_cpus(pid: int, thread: int | None = None) -> frozenset[int]:
    """The CPUs the kernel lets a thread run on (the process's main thread by default)."""
    status = Path(f"/proc/{pid}/task/{thread or pid}/status").read_text()
    (line,) = re.findall(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M)
    return cpu_list(line)


def vcpu_affinity(uri: str, name: str) -> dict[int, frozenset[int]]:
    """`virsh vcpuinfo`: per vCPU, the CPUs its thread may run on, as the kernel has them (a `y`
    per allowed host CPU)."""
    affinity = {}
    for block in virsh(uri, "vcpuinfo", name).strip().split("\n\n"):
        fields = dict(re.findall(r"^([^:]+):\s*(\S+)", block, re.M))
        affinity[int(fields["VCPU"])] = frozenset(i for i, c in enumerate(fields["CPU Affinity"]) if c == "y")
    return affinity


def hugepages_by_node(pid: int, mount_point: Path) -> dict[int, int]:
    """The 2 MiB pages QEMU holds in its hugetlbfs mappings, per host node, from numa_maps
    (`... file=<mount>/... huge ... N0=32 kernelpagesize_kB=2048`)."""
    pages: dict[int, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        if f"file={mount_point}/" not in line or f"kernelpagesize_kB={PAGE_KIB}" not in line:
            continue
        for node, count in re.findall(r"\bN(\d+)=(\d+)", line):
            pages[int(node)] = pages.get(int(node), 0) + int(count)
    return pages


def virsh_free_pages(uri: str) -> dict[tuple[int, int], int]:
    """`virsh freepages --all`: (cell, page size in KiB) to free pages."""
    free = {}
    cell = None
    for line in virsh(uri, "freepages", "--all").splitlines():
        if match := re.fullmatch(r"Node (\d+):", line.strip()):
            cell = int(match[1])
        elif match := re.fullmatch(r"(\d+)KiB: (\d+)", line.strip()):
            assert cell is not None, line
            free[cell, int(match[1])] = int(match[2])
    return free


def pci_address(name: str) -> str:
    """A node device name, `pci_0000_3b_02_1`, as an address, `0000:3b:02.1`."""
    match = re.fullmatch(r"pci_([0-9a-f]{4,})_([0-9a-f]{2})_([0-9a-f]{2})_([0-7])", name)
    assert match, name
    domain, bus, slot, function = match.groups()
    return f"{domain}:{bus}:{slot}.{function}"


# (a) Where the guest sits.


def test_the_audit_shows_the_guest_placement(numa_guest: NumaGuest) -> None:
    domain = numa_guest.domain
    assert domain.state is DomainState.RUNNING
    assert domain.problems == ()
    assert domain.memory_bytes == GUEST_MIB * MIB and domain.vcpus == 1
    assert domain.hugepages
    assert domain.vcpu_pins == (frozenset({numa_guest.vcpu_cpu}),)
    layout = domain.layout
    assert layout.emulator_pins == frozenset({numa_guest.emulator_cpu})
    assert layout.guest_cells == (GuestCell(GUEST_CELL, frozenset({0}), GUEST_MIB * MIB),)
    assert layout.memory_nodes == frozenset({HOST_CELL})
    assert layout.cell_memory_nodes == {GUEST_CELL: frozenset({HOST_CELL})}
    assert layout.hugepages == (HugepageBacking(PAGE_KIB, frozenset({GUEST_CELL})),)
    assert layout.pci_addresses == () and layout.mdev_uuids == ()


def test_the_guest_really_runs_where_it_is_pinned(numa_guest: NumaGuest) -> None:
    """The definition the audit reads is what the host does: the vCPU thread's affinity as
    libvirt reads it from the kernel, the emulator's main thread's in /proc."""
    assert vcpu_affinity(numa_guest.uri, numa_guest.name) == {0: frozenset({numa_guest.vcpu_cpu})}
    assert allowed_cpus(numa_guest.pid) == frozenset({numa_guest.emulator_cpu})


# (b) The pages it takes.


def test_the_guest_takes_its_pages_from_the_cell(numa_guest: NumaGuest) -> None:
    before, after = host_cell(numa_guest.before), host_cell(numa_guest.facts)
    # libvirt has QEMU preallocate hugepage-backed memory: every page is taken once it runs
    assert free_pages(before) - free_pages(after) == GUEST_PAGES
    # hugepage pools are as they were; the base pages' total is the cell's memory less its hugepages,
    # and the machine's memory grows and shrinks by itself (virtio-mem and the balloon move it in
    # 128 MiB blocks), so only its size is compared
    assert [p.size_kib for p in after.pages] == [p.size_kib for p in before.pages]
    smallest = min(p.size_kib for p in before.pages)
    assert [(p.size_kib, p.total) for p in after.pages if p.size_kib != smallest] == [
        (p.size_kib, p.total) for p in before.pages if p.size_kib != smallest
    ]
    # the kernel's counts moved as the audit's, and no page is left merely reserved
    kernel_before, kernel_after = numa_guest.kernel_before, numa_guest.kernel_after
    assert kernel_before.free - kernel_after.free == GUEST_PAGES
    assert kernel_after.reserved == kernel_before.reserved
    # QEMU holds them, all in the host cell
    assert numa_guest.held_pages() == {HOST_CELL: GUEST_PAGES}

    # and virsh reads what the audit reads
    def audit_and_virsh() -> tuple[int, str]:
        audited = free_pages(host_cell(numa_guest.audit()))
        listed = virsh(numa_guest.uri, "freepages", "--cellno", str(HOST_CELL), "--pagesize", str(PAGE_KIB))
        return audited, listed.strip()

    audited, listed = steady(audit_and_virsh)
    assert listed == f"{PAGE_KIB}KiB: {audited}"


# (c) The host as virsh lists it.


def test_the_cells_and_cpus_are_those_of_virsh_capabilities(numa_guest: NumaGuest) -> None:
    def audit_and_virsh() -> tuple[HostFacts, str, dict[tuple[int, int], int]]:
        return (
            numa_guest.audit(),
            virsh(numa_guest.uri, "capabilities"),
            virsh_free_pages(numa_guest.uri),
        )

    facts, capabilities_xml, listed_free = steady(audit_and_virsh)
    assert [p for p in facts.problems if "NUMA" in p or "capabilities" in p or "hugepages" in p] == []
    capabilities = ET.fromstring(capabilities_xml)
    expected = {}
    for cell in capabilities.iterfind("host/topology/cells/cell"):
        memory = cell.find("memory")
        assert memory is not None and memory.get("unit") == "KiB"
        siblings = {cpu_list(cpu.get("siblings", "")) for cpu in cell.iterfind("cpus/cpu")}
        expected[int(cell.get("id", ""))] = (
            frozenset(int(cpu.get("id", "")) for cpu in cell.iterfind("cpus/cpu")),
            # the audit keeps the sibling sets of cores with more than one thread, each once
            {threads for threads in siblings if len(threads) > 1},
            int(memory.text or "") * KIB,
            {int(pages.get("size", "")): int(pages.text or "") for pages in cell.iterfind("pages")},
        )
    assert {
        cell.id: (cell.cpus, set(cell.siblings), cell.memory_bytes, {p.size_kib: p.total for p in cell.pages})
        for cell in facts.numa_cells
    } == expected
    # the guest's pinned CPUs are in the cell its memory is bound to
    assert {numa_guest.vcpu_cpu, numa_guest.emulator_cpu} <= expected[HOST_CELL][0]
    # the free hugepages of every cell and size; the base pages' free count is left unknown
    audited = {(cell.id, page.size_kib): page.free for cell in facts.numa_cells for page in cell.pages}
    smallest = min(size for _, size in audited)
    assert {key: free for key, free in audited.items() if key[1] != smallest} == {
        key: free for key, free in listed_free.items() if key[1] != smallest
    }
    assert all(free is None for (_, size), free in audited.items() if size == smallest)


def test_the_pci_devices_are_those_of_virsh_nodedev_list(numa_guest: NumaGuest) -> None:
    facts = numa_guest.audit()
    assert [p for p in facts.problems if "node device" in p] == []
    listed = {pci_address(name) for name in virsh(numa_guest.uri, "nodedev-list", "--cap", "pci").split()}
    assert {device.address for device in facts.pci_devices} == listed


# (d) What the capacity model makes of it.


def test_the_model_charges_the_guest_to_its_cell(numa_guest: NumaGuest) -> None:
    """With the vCPU's CPU dedicated and the emulator's shared, as Nova would configure this host:
    the cell has the vCPU's CPU pinned, the guest's 64 MiB in use and its 32 pages used, as many as
    the kernel counted gone when it started. Nova counts the pages free from its own guests alone:
    pages other processes on the machine hold are not its business, nor this test's."""
    facts = numa_guest.facts
    policy = HostPolicy(
        cpu_dedicated_set=frozenset({numa_guest.vcpu_cpu}),
        cpu_shared_set=frozenset({numa_guest.emulator_cpu}),
    )
    flavors = {
        # one more pinned vCPU: the cell's only dedicated CPU is the guest's
        "pinned": parse_flavor(1, 16, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "2MB"}),
        # floating, in 16 MiB of 2 MiB pages: as many as the free pages hold
        "paged": parse_flavor(1, 16, {"hw:mem_page_size": "2MB"}),
    }
    capacity = host_capacity(facts, policy, flavors)
    cell = next(cell for cell in capacity.within.cells if cell.id == HOST_CELL)
    assert cell.pinned_cpus == frozenset({numa_guest.vcpu_cpu})
    assert cell.dedicated_cpus == frozenset({numa_guest.vcpu_cpu})
    assert cell.memory_usage_mib == GUEST_MIB
    pages = cell.page(PAGE_KIB)
    assert pages is not None
    # what the model charges the guest is what the kernel counted gone when it started
    kernel_taken = numa_guest.kernel_before.free - numa_guest.kernel_after.free
    assert pages.used == kernel_taken == GUEST_PAGES
    capacity_before = host_capacity(numa_guest.before, policy, flavors)
    cell_before = next(cell for cell in capacity_before.within.cells if cell.id == HOST_CELL)
    pages_before = cell_before.page(PAGE_KIB)
    assert pages_before is not None and pages_before.used == 0
    assert pages_before.free - pages.free == kernel_taken
    audited = next(p for p in host_cell(facts).pages if p.size_kib == PAGE_KIB)
    assert pages.total == audited.total
    # the whole-host PCPU inventory already says no (the guest holds its one dedicated CPU), so
    # the class is the bottleneck and the cell is not what limits it
    assert capacity.schedulable["pinned"] == 0
    assert capacity.bottlenecks["pinned"] is Resource.PCPU
    assert "pinned" not in capacity.limited_within
    assert [reason.split(" ")[:2] for reason in capacity.refusals["pinned"]] == [["Free", "pcpu"]]
    assert capacity.within.refusals(flavors["pinned"].within) == [
        HostFitRefusal("numa", f"cell {HOST_CELL}: 0 free dedicated CPUs < 1 requested")
    ]
    assert capacity.schedulable["paged"] == pages.free * PAGE_KIB // (16 * KIB)


def parse_flavor(vcpus: int, memory_mib: int, extra_specs: dict[str, str]) -> Demand:
    """A flavor as the configuration reads it: its Placement request and what it asks within the
    host."""
    specs = "".join(f"\n        {key!r}: {value!r}" for key, value in extra_specs.items())
    config = parse_config(
        f"flavors:\n  - name: f\n    vcpu: {vcpus}\n    memory: {memory_mib}MiB\n    extra_specs:{specs}\n",
        "test",
    )
    return config.flavors[0].demand
