"""A full audit cycle of `virtcap serve` and its peak RSS, next to the bare libvirt calls (`--only cycle`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from harness import (
    Table,
    cell,
    free_port,
    get,
    make_hosts,
    print_table,
    process,
    wait,
    write_config,
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
