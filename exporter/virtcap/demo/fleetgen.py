"""Synthetic fleets for libvirt's test driver: node XML files describing a host and its domains.

The demo fleet, the tests' never-seen fleets and the benchmarks are all made here. A fleet is
described by plain specs first (the ground truth a test can compute from independently), then
written out as node files that `test:///path/to/node.xml` serves.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from virtcap.audit.domain_xml import NOVA_NAMESPACE

POOL_PATH = "/var/lib/libvirt/images"
TEST_NAMESPACE = "http://libvirt.org/schemas/domain/test/1.0"
OWNER_NAMESPACE = "http://virtcap.example/xmlns/owner/1.0"
"""The namespace of the owner element a site's tooling writes into the domains Nova did not
define (the demo's `ownership` configuration reads it)."""

# libvirt's virDomainState numbers, as the test driver's <test:runstate> takes them.
RUNNING, BLOCKED, PAUSED, SHUTDOWN, SHUTOFF, CRASHED, PMSUSPENDED = 1, 2, 3, 4, 5, 6, 7

GIB_IN_KIB = 1024 * 1024


@dataclass(frozen=True)
class FlavorSpec:
    name: str
    vcpus: int
    memory_mib: int
    root_gib: int
    ephemeral_gib: int = 0
    swap_mib: int = 0
    extra_specs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DiskSpec:
    target: str
    kind: str
    """`file` or `volume` (in the local pool), `network` (rbd), or `cdrom`."""
    capacity_gib: int = 0


@dataclass(frozen=True)
class DomainSpec:
    name: str
    uuid: str
    state: int
    vcpus: int
    memory_mib: int
    current_memory_mib: int
    disks: tuple[DiskSpec, ...] = ()
    flavor: FlavorSpec | None = None
    hugepages: bool = False
    pins: tuple[int, ...] | None = None
    """One host CPU per vCPU, as Nova pins dedicated guests."""
    project: str | None = None
    """The Keystone project Nova recorded as the owner (with a flavor only), or the project the
    site's own owner element names (without)."""


@dataclass(frozen=True)
class SharedPoolSpec:
    """An NFS export a host mounts as a libvirt `netfs` pool: hosts mounting the same export see
    the same volumes, each host under a pool name of its own."""

    name: str
    server: str
    export: str
    volumes: tuple[tuple[str, int, int], ...]
    """Name, capacity and allocation of each volume, in GiB."""


@dataclass
class HostSpec:
    name: str
    cpus: int
    memory_gib: int
    pool_gib: int
    pool_used_gib: int
    model: str = "Xeon-Gold-6338"
    domains: list[DomainSpec] = field(default_factory=list)
    shared_pools: tuple[SharedPoolSpec, ...] = ()


FLAVORS = (
    FlavorSpec("m1.small", 1, 2048, 20),
    FlavorSpec("m1.medium", 2, 4096, 40),
    FlavorSpec("m1.large", 4, 8192, 80),
    FlavorSpec("m1.xlarge", 8, 16384, 160),
    FlavorSpec("r1.large", 4, 32768, 40, ephemeral_gib=20, swap_mib=4096),
)


def node_xml(host: HostSpec) -> str:
    sockets = 2 if host.cpus % 2 == 0 else 1
    lines = [
        "<node>",
        "  <cpu>",
        f"    <mhz>2600</mhz><model>{host.model}</model><active>{host.cpus}</active>",
        f"    <nodes>1</nodes><sockets>{sockets}</sockets>",
        f"    <cores>{host.cpus // sockets}</cores><threads>1</threads>",
        "  </cpu>",
        f"  <memory>{host.memory_gib * GIB_IN_KIB}</memory>",
    ]
    lines.extend(_domain_xml(domain) for domain in host.domains)
    lines.append(_pool_xml(host))
    lines.extend(_shared_pool_xml(host, pool) for pool in host.shared_pools)
    lines.append("</node>")
    return "\n".join(lines) + "\n"


def _domain_xml(domain: DomainSpec) -> str:
    parts = [
        f"  <domain type='test' xmlns:test='{TEST_NAMESPACE}'>",
        f"    <name>{domain.name}</name><uuid>{domain.uuid}</uuid>",
        f"    <memory unit='MiB'>{domain.memory_mib}</memory>",
        f"    <currentMemory unit='MiB'>{domain.current_memory_mib}</currentMemory>",
        f"    <vcpu placement='static'>{domain.vcpus}</vcpu>",
    ]
    if domain.hugepages:
        parts.append("    <memoryBacking><hugepages/></memoryBacking>")
    if domain.pins is not None:
        pins = "".join(f"<vcpupin vcpu='{i}' cpuset='{cpu}'/>" for i, cpu in enumerate(domain.pins))
        parts.append(f"    <cputune>{pins}</cputune>")
    if domain.flavor is not None:
        f = domain.flavor
        parts.append(
            f"    <metadata><nova:instance xmlns:nova='{NOVA_NAMESPACE}'>"
            f"<nova:flavor name={quoteattr(f.name)}><nova:memory>{f.memory_mib}</nova:memory>"
            f"<nova:disk>{f.root_gib}</nova:disk><nova:swap>{f.swap_mib}</nova:swap>"
            f"<nova:ephemeral>{f.ephemeral_gib}</nova:ephemeral><nova:vcpus>{f.vcpus}</nova:vcpus>"
            f"{_extra_specs_xml(f.extra_specs)}</nova:flavor>{_nova_owner_xml(domain.project)}"
            "</nova:instance></metadata>"
        )
    elif domain.project is not None:
        parts.append(
            f"    <metadata><owner:project xmlns:owner='{OWNER_NAMESPACE}' id='{project_id(domain.project)}'>"
            f"{escape(domain.project)}</owner:project></metadata>"
        )
    parts.append("    <os><type arch='x86_64'>hvm</type></os>")
    parts.append("    <devices>")
    parts.extend(f"      {_disk_xml(domain, disk)}" for disk in domain.disks)
    parts.append("    </devices>")
    parts.append(f"    <test:runstate>{domain.state}</test:runstate>")
    parts.append("  </domain>")
    return "\n".join(parts)


def project_id(name: str) -> str:
    """A Keystone id (32 hex digits, no dashes), the same for the project wherever it is named."""
    return _stable_uuid(f"project/{name}").replace("-", "")


def _nova_owner_xml(project: str | None) -> str:
    if project is None:
        return ""
    user_id = _stable_uuid(f"user/{project}").replace("-", "")
    return (
        f"<nova:owner><nova:user uuid='{user_id}'>{escape(project)}-admin</nova:user>"
        f"<nova:project uuid='{project_id(project)}'>{escape(project)}</nova:project></nova:owner>"
    )


def _extra_specs_xml(specs: tuple[tuple[str, str], ...]) -> str:
    if not specs:
        return ""
    items = "".join(f"<nova:extraSpec name={quoteattr(k)}>{escape(v)}</nova:extraSpec>" for k, v in specs)
    return f"<nova:extraSpecs>{items}</nova:extraSpecs>"


def volume_name(domain: DomainSpec, disk: DiskSpec) -> str:
    return f"{domain.name}-{disk.target}.qcow2"


def _disk_xml(domain: DomainSpec, disk: DiskSpec) -> str:
    target = f"<target dev='{disk.target}'/>"
    if disk.kind == "file":
        source = f"<source file='{POOL_PATH}/{volume_name(domain, disk)}'/>"
        return f"<disk type='file' device='disk'>{source}{target}</disk>"
    if disk.kind == "volume":
        source = f"<source pool='default' volume='{volume_name(domain, disk)}'/>"
        return f"<disk type='volume' device='disk'>{source}{target}</disk>"
    if disk.kind == "network":
        source = f"<source protocol='rbd' name='volumes/{domain.name}-{disk.target}'/>"
        return f"<disk type='network' device='disk'>{source}{target}</disk>"
    return (
        f"<disk type='file' device='cdrom'><source file='/srv/iso/installer.iso'/>{target}<readonly/></disk>"
    )


def _pool_xml(host: HostSpec) -> str:
    volumes = [
        f"    <volume type='file'><name>{volume_name(domain, disk)}</name>"
        f"<capacity unit='GiB'>{disk.capacity_gib}</capacity><allocation unit='GiB'>1</allocation></volume>"
        for domain in host.domains
        for disk in domain.disks
        if disk.kind in ("file", "volume")
    ]
    available = host.pool_gib - host.pool_used_gib
    return "\n".join(
        [
            "  <pool type='dir'>",
            f"    <name>default</name><uuid>{_stable_uuid(host.name + '/pool')}</uuid>",
            f"    <capacity unit='GiB'>{host.pool_gib}</capacity>",
            f"    <allocation unit='GiB'>{host.pool_used_gib}</allocation>",
            f"    <available unit='GiB'>{available}</available>",
            f"    <target><path>{POOL_PATH}</path></target>",
            *volumes,
            "  </pool>",
        ]
    )


def _shared_pool_xml(host: HostSpec, pool: SharedPoolSpec) -> str:
    # The test driver gives a pool the capacity it gives every pool (100 GiB) and the allocation
    # its volumes add up to, whatever the XML says: only the volumes' sizes are written.
    volumes = [
        f"    <volume type='file'><name>{name}</name><capacity unit='GiB'>{capacity}</capacity>"
        f"<allocation unit='GiB'>{allocation}</allocation></volume>"
        for name, capacity, allocation in pool.volumes
    ]
    return "\n".join(
        [
            "  <pool type='netfs'>",
            f"    <name>{pool.name}</name><uuid>{_stable_uuid(f'{host.name}/{pool.name}')}</uuid>",
            f"    <source><host name='{pool.server}'/><dir path='{pool.export}'/>"
            "<format type='nfs'/></source>",
            f"    <target><path>/var/lib/nova/mnt/{pool.name}</path></target>",
            *volumes,
            "  </pool>",
        ]
    )


def _stable_uuid(seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"virtcap:{seed}"))


def random_domain(
    rng: random.Random,
    host: str,
    index: int,
    state: int,
    *,
    nova_share: float = 0.5,
    local_share: float = 0.75,
    flavors: tuple[FlavorSpec, ...] = FLAVORS,
) -> DomainSpec:
    """A domain drawn from the flavors: Nova-managed (metadata) or plain, its root disk local
    (a file or pool volume) or booted from a network volume, in which case its Nova flavor has
    a root disk of 0, as boot-from-volume flavors do."""
    flavor = rng.choice(flavors)
    name = f"{host}-vm{index:04d}"
    with_metadata = rng.random() < nova_share
    local_root = rng.random() < local_share
    disks: list[DiskSpec] = []
    if local_root:
        disks.append(DiskSpec("vda", rng.choice(("file", "volume")), flavor.root_gib))
    else:
        disks.append(DiskSpec("vda", "network", flavor.root_gib))
        flavor = replace(flavor, root_gib=0)
    if flavor.ephemeral_gib:
        disks.append(DiskSpec("vdb", "file", flavor.ephemeral_gib))
    if rng.random() < 0.2:  # noqa: PLR2004  (a CD-ROM in one guest of five)
        disks.append(DiskSpec("hdc", "cdrom"))
    active = state != SHUTOFF
    balloon = rng.choice((50, 60, 75, 90, 100)) * flavor.memory_mib // 100 if active else flavor.memory_mib
    return DomainSpec(
        name=name,
        uuid=_stable_uuid(name),
        state=state,
        vcpus=flavor.vcpus,
        memory_mib=flavor.memory_mib,
        current_memory_mib=balloon,
        disks=tuple(disks),
        flavor=flavor if with_metadata else None,
    )


def write_fleet(hosts: list[HostSpec], directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for host in hosts:
        path = directory / f"{host.name}.xml"
        path.write_text(node_xml(host), encoding="utf-8")
        paths[host.name] = path
    return paths
