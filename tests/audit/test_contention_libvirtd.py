"""vCPU wait on a real QEMU host: the session's private libvirtd with two TCG guests whose only vCPU
spins in its boot sector, both pinned to host CPU 0, so that each waits for the other whatever
the machine's size. Checked against the kernel's own count for each vCPU thread."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.libvirtd import Libvirtd
from tests.support.serving import running_server, value, wait_for
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.model.facts import HostFacts

pytestmark = pytest.mark.libvirtd

SCHEDSTAT = Path("/proc/self/schedstat")
# A boot sector that jumps to itself forever: the vCPU running it is always runnable.
SPIN = b"\xeb\xfe" + bytes(508) + b"\x55\xaa"

GUEST = """
<domain type='qemu'>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>32</memory>
  <vcpu placement='static' cpuset='0'>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/><source file='{image}'/><target dev='hda' bus='ide'/>
    </disk>
  </devices>
</domain>"""


@pytest.fixture(scope="module", autouse=True)
def _kernel_counts_run_delay() -> None:
    # libvirt reads vcpu.<n>.delay from the kernel's schedstat of each vCPU thread, which exists
    # only on kernels built with CONFIG_SCHED_INFO (set by CONFIG_SCHEDSTATS or task delay accounting).
    if not SCHEDSTAT.exists():
        pytest.skip(
            "this kernel keeps no run-queue delay per thread (no /proc/<pid>/schedstat: "
            "CONFIG_SCHED_INFO is off), so libvirt cannot report vcpu.<n>.delay"
        )


@dataclass
class Spinners:
    uri: str
    admin: Any
    directory: Path
    owner: tuple[int, int]
    prefix: str
    domains: list[Any]

    def start(self, suffix: str) -> Any:
        """Another spinning guest, transient: gone once destroyed. Each has its own disk: QEMU
        locks an image it writes to."""
        image = self.directory / f"{suffix}.img"
        image.write_bytes(SPIN)
        os.chown(image, *self.owner)  # QEMU runs as the daemon's user
        xml = GUEST.format(name=f"{self.prefix}-{suffix}", uuid=uuid.uuid4(), image=image)
        return self.admin.createXML(xml, 0)


@pytest.fixture(scope="module")
def spinners(libvirtd: Libvirtd) -> Iterator[Spinners]:
    conn: Any = libvirt.open(libvirtd.uri)
    prefix = f"virtcap-spin-{uuid.uuid4().hex[:6]}"
    spinners = Spinners(
        libvirtd.uri, conn, libvirtd.owned_directory(f"{prefix}-"), libvirtd.owner, prefix, []
    )
    try:
        spinners.domains += [spinners.start("0"), spinners.start("1")]
        yield spinners
    finally:
        for domain in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
            if domain.name().startswith(prefix):
                domain.destroy()
        conn.close()


def vcpu_threads(name: str) -> dict[int, Path]:
    """The /proc folders of the vCPU threads of the QEMU process running domain `name`, by vCPU:
    libvirt starts QEMU with `-name guest=NAME,debug-threads=on`, which names them `CPU N/TCG`."""
    for process in Path("/proc").iterdir():
        try:
            arguments = (process / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or gone
            continue
        if any(argument.startswith(f"guest={name},".encode()) for argument in arguments):
            threads = {}
            for task in (process / "task").iterdir():
                found = re.fullmatch(r"CPU (\d+)/\w+", (task / "comm").read_text().strip())
                if found:
                    threads[int(found.group(1))] = task
            return threads
    raise AssertionError(f"no QEMU process runs {name}")


def kernel_delays(domains: list[Any]) -> dict[tuple[str, int], int]:
    """Per (domain UUID, vCPU), the run-queue delay the kernel counts for its thread, in ns (the
    second field of its schedstat)."""
    delays = {}
    for domain in domains:
        if not domain.isActive():
            continue
        for vcpu, task in vcpu_threads(domain.name()).items():
            delays[(domain.UUIDString(), vcpu)] = int((task / "schedstat").read_text().split()[1])
    return delays


def audit(uri: str, previous: HostFacts | None = None) -> HostFacts:
    conn = open_read_only(uri)
    try:
        return audit_host(
            conn, uri, None, previous_vcpu_wait=None if previous is None else previous.vcpu_wait
        )
    finally:
        conn.close()


def test_each_vcpus_delay_is_what_the_kernel_counts_for_its_thread(spinners: Spinners) -> None:
    before = kernel_delays(spinners.domains)
    facts = audit(spinners.uri)
    after = kernel_delays(spinners.domains)
    assert facts.vcpu_wait is not None, facts.problems
    assert facts.vcpu_wait.total_ns == 0  # the first reading is the baseline
    assert set(facts.vcpu_wait.last_ns) == set(before) == set(after)
    for key, delay in facts.vcpu_wait.last_ns.items():
        assert before[key] <= delay <= after[key], key


def test_contending_vcpus_raise_the_counter_and_a_stopped_domain_takes_nothing_back(
    spinners: Spinners,
) -> None:
    leaving = spinners.start("leaving")
    domains = [*spinners.domains, leaving]
    first = audit(spinners.uri)
    kernel_first = kernel_delays(domains)
    time.sleep(2)
    kernel_second = kernel_delays(domains)
    second = audit(spinners.uri, first)
    assert first.vcpu_wait is not None and second.vcpu_wait is not None
    waited = second.vcpu_wait.total_ns
    # Three always-runnable threads on one CPU: each waits about two thirds of the time.
    kernel_waited = sum(kernel_second[key] - kernel_first[key] for key in kernel_first)
    assert kernel_waited > 1_000_000_000 * 0.5, kernel_waited
    assert waited >= kernel_waited

    gone = leaving.UUIDString()
    leaving.destroy()  # transient: undefined with it
    third = audit(spinners.uri, second)
    assert third.vcpu_wait is not None
    assert third.vcpu_wait.total_ns >= waited
    assert {key[0] for key in third.vcpu_wait.last_ns} == {d.UUIDString() for d in spinners.domains}
    assert gone not in {key[0] for key in third.vcpu_wait.last_ns}


def test_the_exporter_counts_vcpu_wait_in_seconds(spinners: Spinners, tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    config.write_text(
        f"audit: {{interval: 1s, timeout: 10s}}\nclaims: {{database: {tmp_path / 'claims.sqlite'}}}\n"
        f'hypervisors:\n  - {{name: local, uri: "{spinners.uri}"}}\n'
    )
    with running_server(["--config", str(config)], tmp_path) as server:

        def waited() -> float | None:
            return value(server.samples(), "hypervisor_vcpu_wait_seconds_total", hypervisor="local")

        wait_for(lambda: (waited() or 0.0) > 0.2, 20, interval=0.2, what="vCPU wait counted in /metrics")
