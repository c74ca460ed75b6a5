"""Event-to-metric latency on a real libvirtd (`--only events`)."""

from __future__ import annotations

import http.client
import time
import uuid
from pathlib import Path
from typing import Any

import libvirt

from harness import (
    cell,
    print_table,
    virtcap,
    wait,
    write_config,
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
