"""Hosts for libvirt's test driver, read by both sides: Nova's libvirt driver (in the oracle) and
virtcap's audit each connect to `test:///path/to/node.xml` on their own.

The test driver's CPU map is fixed whatever the node file says: 8 CPUs, of which 0, 2 and 4 are
online (virNodeGetCPUMap). The nodes written here therefore have 3 active CPUs, so that the CPU
count of virNodeGetInfo agrees with it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

ONLINE_CPUS = frozenset({0, 2, 4})
"""The online CPUs of every test-driver host (its fixed CPU map)."""
MAP_CPUS = 8
"""How many CPUs the test driver's CPU map has: the others (1, 3, 5, 6, 7) are offline."""


@dataclass(frozen=True)
class GuestSpec:
    name: str
    vcpus: int
    memory_mib: int
    metadata: str = ""
    """The `<nova:instance>` element, as Nova writes it, or nothing for a plain domain."""
    pins: tuple[int, ...] | None = None
    """One host CPU per vCPU, as Nova pins the vCPUs of a guest with a CPU policy."""
    floating: str | None = None
    """`<vcpu cpuset=...>`: the host CPUs an unpinned guest floats over (Nova: the shared set)."""
    hugepages: bool = False


def node_xml(memory_kib: int, pool_bytes: int, guests: tuple[GuestSpec, ...] = (), cpus: int = 3) -> str:
    domains = "\n".join(_domain_xml(guest) for guest in guests)
    return f"""<node>
  <cpu>
    <mhz>2600</mhz><model>Xeon-Gold-6338</model><active>{cpus}</active>
    <nodes>1</nodes><sockets>1</sockets><cores>{cpus}</cores><threads>1</threads>
  </cpu>
  <memory>{memory_kib}</memory>
{domains}
  <pool type='dir'>
    <name>default</name><uuid>{uuid.uuid4()}</uuid>
    <capacity unit='bytes'>{pool_bytes}</capacity>
    <allocation unit='bytes'>0</allocation>
    <available unit='bytes'>{pool_bytes}</available>
    <target><path>/var/lib/nova/instances</path></target>
  </pool>
</node>
"""


def _domain_xml(guest: GuestSpec) -> str:
    cpuset = f" cpuset='{guest.floating}'" if guest.floating else ""
    parts = [
        "  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>",
        f"    <name>{escape(guest.name)}</name><uuid>{uuid.uuid4()}</uuid>",
        f"    <memory unit='MiB'>{guest.memory_mib}</memory>",
        f"    <currentMemory unit='MiB'>{guest.memory_mib}</currentMemory>",
        f"    <vcpu placement='static'{cpuset}>{guest.vcpus}</vcpu>",
    ]
    if guest.hugepages:
        parts.append("    <memoryBacking><hugepages/></memoryBacking>")
    if guest.pins is not None:
        pins = "".join(f"<vcpupin vcpu='{i}' cpuset='{cpu}'/>" for i, cpu in enumerate(guest.pins))
        parts.append(f"    <cputune>{pins}</cputune>")
    if guest.metadata:
        parts.append(f"    <metadata>{guest.metadata}</metadata>")
    parts += [
        "    <os><type arch='x86_64'>hvm</type></os>",
        "    <devices/>",
        "    <test:runstate>1</test:runstate>",
        "  </domain>",
    ]
    return "\n".join(parts)


def write_node(
    path: Path, memory_kib: int, pool_bytes: int, guests: tuple[GuestSpec, ...] = (), cpus: int = 3
) -> str:
    """Writes the node file and returns its URI."""
    path.write_text(node_xml(memory_kib, pool_bytes, guests, cpus), encoding="utf-8")
    return f"test://{path.resolve()}"
