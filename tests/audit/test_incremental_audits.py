"""Incremental audits give what full audits give, reading only what changed: libvirt's test driver
kept open as a daemon's connection is kept (test:///default: every connection of the process sees
one host), changed through its API by a seeded random sequence."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import libvirt
import pytest

from tests.support.incremental import Watched, comparable, new_uuid
from virtcap.audit.domain_xml import NOVA_NAMESPACE
from virtcap.config import DiskSource

URI = "test:///default"
POOL = "default-pool"  # the test driver's own, a directory pool at /default-pool
STEPS = 100
SEEDS = (17, 4242)

SENTINEL = """<domain type='test'><name>incr-sentinel-{uuid}</name><uuid>{uuid}</uuid>
<memory unit='MiB'>1</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>"""


def nova_metadata(rng: random.Random) -> str:
    vcpus = rng.choice((1, 2, 4))
    return (
        f"<nova:instance xmlns:nova='{NOVA_NAMESPACE}'><nova:flavor name='f{vcpus}'>"
        f"<nova:memory>{rng.choice((512, 2048))}</nova:memory>"
        f"<nova:disk>{rng.choice((0, 10, 20))}</nova:disk>"
        f"<nova:swap>0</nova:swap><nova:ephemeral>{rng.choice((0, 5))}</nova:ephemeral>"
        f"<nova:vcpus>{vcpus}</nova:vcpus></nova:flavor></nova:instance>"
    )


class Host:
    """The test driver's host as the test changed it: what it defined, the volumes it made."""

    def __init__(self, admin: Any, rng: random.Random) -> None:
        self.admin = admin
        self.rng = rng
        self.pool = admin.storagePoolLookupByName(POOL)
        self.volumes: list[str] = []
        self.counter = 0
        self.run = new_uuid()[:8]

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"incr-{prefix}-{self.run}-{self.counter}"

    def mine(self) -> list[Any]:
        return [d for d in self.admin.listAllDomains(0) if d.name().startswith(f"incr-dom-{self.run}-")]

    def definition(self, name: str, domain_uuid: str) -> str:
        rng = self.rng
        disks = []
        for index in range(rng.randrange(4)):
            target = f"vd{'abcd'[index]}"
            kind = rng.choice(("volume-path", "volume", "outside", "cdrom", "network"))
            if kind in ("volume-path", "volume") and not self.volumes:
                kind = "outside"
            if kind == "volume-path":
                source = f"<source file='/{POOL}/{rng.choice(self.volumes)}'/>"
                disks.append(f"<disk type='file' device='disk'>{source}<target dev='{target}'/></disk>")
            elif kind == "volume":
                source = f"<source pool='{POOL}' volume='{rng.choice(self.volumes)}'/>"
                disks.append(f"<disk type='volume' device='disk'>{source}<target dev='{target}'/></disk>")
            elif kind == "outside":
                source = f"<source file='/elsewhere/{name}-{index}.img'/>"
                disks.append(f"<disk type='file' device='disk'>{source}<target dev='{target}'/></disk>")
            elif kind == "cdrom":
                source = f"<source file='/{POOL}/iso-{rng.randrange(3)}.iso'/>"
                disks.append(
                    f"<disk type='file' device='cdrom'>{source}<target dev='hd{target[-1]}'/></disk>"
                )
            else:
                source = "<source protocol='rbd' name='volumes/x'><host name='ceph'/></source>"
                disks.append(f"<disk type='network' device='disk'>{source}<target dev='{target}'/></disk>")
        memory = rng.choice((256, 512, 1024, 4096))
        metadata = f"<metadata>{nova_metadata(rng)}</metadata>" if rng.random() < 0.5 else ""
        return f"""<domain type='test'><name>{name}</name><uuid>{domain_uuid}</uuid>
<memory unit='MiB'>{memory}</memory><currentMemory unit='MiB'>{memory // rng.choice((1, 2))}</currentMemory>
<vcpu>{rng.choice((1, 2, 3, 8))}</vcpu>{metadata}<os><type>hvm</type></os>
<devices>{"".join(disks)}</devices></domain>"""

    # Each step returns the UUIDs of the domains it changed (and that are still there).

    def define(self) -> set[str]:
        domain_uuid = new_uuid()
        self.admin.defineXML(self.definition(self.fresh("dom"), domain_uuid))
        return {domain_uuid}

    def redefine(self) -> set[str]:
        persistent = [d for d in self.mine() if d.isPersistent()]
        if not persistent:
            return self.define()
        domain = self.rng.choice(persistent)
        self.admin.defineXML(self.definition(domain.name(), domain.UUIDString()))
        return {domain.UUIDString()}

    def undefine(self) -> set[str]:
        persistent = [d for d in self.mine() if d.isPersistent()]
        if not persistent:
            return set()
        domain = self.rng.choice(persistent)
        active = domain.isActive()
        domain.undefine()
        return {domain.UUIDString()} if active else set()  # a running one goes on, transient

    def start(self) -> set[str]:
        return self._with(lambda d: not d.isActive(), lambda d: d.create())

    def destroy(self) -> set[str]:
        return self._with(lambda d: d.isActive(), lambda d: d.destroy())

    def suspend(self) -> set[str]:
        return self._with(lambda d: d.state()[0] == libvirt.VIR_DOMAIN_RUNNING, lambda d: d.suspend())

    def resume(self) -> set[str]:
        return self._with(lambda d: d.state()[0] == libvirt.VIR_DOMAIN_PAUSED, lambda d: d.resume())

    def set_metadata(self) -> set[str]:
        metadata = nova_metadata(self.rng).replace(f" xmlns:nova='{NOVA_NAMESPACE}'", "")
        metadata = metadata.replace("nova:", "")
        return self._with(
            lambda _d: True,
            lambda d: d.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata, "nova", NOVA_NAMESPACE, 0),
        )

    def create_volume(self) -> set[str]:
        """No event tells of a new volume: the next domain naming it makes the index be read again."""
        name = self.fresh("vol") + ".qcow2"
        size = self.rng.choice((256, 1024, 1536)) * 1024**2  # the pool holds 100 GiB
        self.pool.createXML(f"<volume><name>{name}</name><capacity>{size}</capacity></volume>", 0)
        self.volumes.append(name)
        return set()

    def refresh_pool(self) -> set[str]:
        self.pool.refresh(0)
        return set()

    def _with(self, wanted: Callable[[Any], bool], change: Callable[[Any], object]) -> set[str]:
        candidates = [d for d in self.mine() if wanted(d)]
        if not candidates:
            return set()
        domain = self.rng.choice(candidates)
        domain_uuid = domain.UUIDString()
        change(domain)
        try:
            domain.isActive()
        except libvirt.libvirtError:  # a transient domain stopped is gone
            return set()
        return {domain_uuid}


@pytest.fixture
def admin() -> Iterator[Any]:
    """A read-write connection to test:///default, held for the test: the host lives while a
    connection to it does, and is new again once the last one closes."""
    conn: Any = libvirt.open(URI)
    try:
        yield conn
    finally:
        # Another connection left open would keep the host alive for the next test: leave it clean.
        for domain in conn.listAllDomains(0):
            if domain.name().startswith("incr-"):
                if domain.isActive():
                    domain.destroy()  # a transient one is gone with it
                with contextlib.suppress(libvirt.libvirtError):
                    domain.undefine()
        pool = conn.storagePoolLookupByName(POOL)
        for volume in pool.listAllVolumes(0):
            if volume.name().startswith("incr-"):
                volume.delete(0)
        conn.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_incremental_audits_equal_full_audits_through_random_changes(admin: Any, seed: int) -> None:
    rng = random.Random(seed)
    host = Host(admin, rng)
    watched = Watched(URI, admin, SENTINEL.format(uuid=new_uuid()))
    disk = DiskSource(pool=POOL)
    steps: list[tuple[str, Callable[[], set[str]]]] = [
        ("define", host.define),
        ("define", host.define),
        ("redefine", host.redefine),
        ("redefine", host.redefine),
        ("undefine", host.undefine),
        ("start", host.start),
        ("destroy", host.destroy),
        ("suspend", host.suspend),
        ("resume", host.resume),
        ("set_metadata", host.set_metadata),
        ("create_volume", host.create_volume),
        ("refresh_pool", host.refresh_pool),
        ("nothing", set),
    ]
    try:
        for _ in range(3):
            host.create_volume()
        for _ in range(8):
            host.define()
        watched.settle()
        first = watched.audit(disk)
        assert first.full_audit and first.domain_reads == len(first.domains)
        reads = incremental_audits = 0
        for number in range(STEPS):
            if number == STEPS // 2:
                watched.connect()  # a reconnect: a new connection, a new cache, a full audit
                reconnected = watched.audit(disk)
                assert reconnected.full_audit and reconnected.domain_reads == len(reconnected.domains)
            name, step = rng.choice(steps)
            changed = step()
            watched.settle()
            incremental = watched.audit(disk)
            full = watched.full_audit(disk)
            assert comparable(incremental) == comparable(full), f"step {number}: {name}"
            assert not incremental.full_audit
            # only what the step changed, and the sentinel redefined to settle the events
            assert incremental.domain_reads <= len(changed) + 1, f"step {number}: {name}"
            reads += incremental.domain_reads
            incremental_audits += 1
        # the unchanged domains were not read again: far fewer reads than domains audited
        assert reads < 3 * incremental_audits < len(full.domains) * incremental_audits
    finally:
        watched.finish()


def test_a_steady_audit_reads_no_domain_and_a_full_one_comes_every_resync(admin: Any) -> None:
    watched = Watched(URI, admin, SENTINEL.format(uuid=new_uuid()), resync_every=3)
    try:
        kinds = [(facts.full_audit, facts.domain_reads) for facts in (watched.audit() for _ in range(7))]
        domains = len(watched.full_audit().domains)
        full, steady = (True, domains), (False, 0)
        assert kinds == [full, steady, steady, full, steady, steady, full]
    finally:
        watched.finish()


def test_without_domain_events_every_audit_is_full(admin: Any) -> None:
    watched = Watched(URI, admin, SENTINEL.format(uuid=new_uuid()))
    try:
        watched.cache.domain_events = False  # as where the driver refused a registration
        assert all(watched.audit().full_audit for _ in range(3))
    finally:
        watched.finish()


def test_a_volume_created_since_the_index_was_read_is_found_for_a_domain_that_names_it(admin: Any) -> None:
    watched = Watched(URI, admin, SENTINEL.format(uuid=new_uuid()))
    pool = admin.storagePoolLookupByName(POOL)
    disk = DiskSource(pool=POOL)
    try:
        domain_uuid = new_uuid()
        watched.audit(disk)
        late_volume = f"incr-late-{domain_uuid}.qcow2"
        pool.createXML(f"<volume><name>{late_volume}</name><capacity>3221225472</capacity></volume>", 0)
        admin.defineXML(
            f"""<domain type='test'><name>incr-late-{domain_uuid}</name><uuid>{domain_uuid}</uuid>
<memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type>hvm</type></os><devices>
<disk type='file' device='disk'><source file='/{POOL}/{late_volume}'/><target dev='vda'/></disk>
</devices></domain>"""
        )
        watched.settle()
        incremental = watched.audit(disk)
        late = next(d for d in incremental.domains if d.uuid == domain_uuid)
        assert late.disks[0].capacity_bytes == 3 * 1024**3
        assert comparable(incremental) == comparable(watched.full_audit(disk))
    finally:
        watched.finish()
