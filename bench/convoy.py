"""The GIL convoy that shapes the audit (`--only convoy`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import (
    Table,
    cell,
    make_hosts,
    print_table,
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
