"""Reclaimable capacity on a real QEMU host: the session's private libvirtd with two TCG guests, one
whose vCPU spins in its boot sector (busy) and one whose vCPU halts with interrupts off (idle), and
a defined guest never started (shut off). With windows of seconds, the audits' CPU-time samples
(`vcpu.<n>.time`, read by the bulk statistics call) tell the idle one from the busy one, and the
history stored in SQLite outlives the tracker."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.support.libvirtd import Libvirtd
from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.claims.database import ClaimDatabase
from virtcap.model.reclaim import ReclaimPolicy, ReclaimReason
from virtcap.service.reclaim import ReclaimTracker

pytestmark = pytest.mark.libvirtd

# Boot sectors: one jumps to itself forever (its vCPU always runs), the other clears interrupts
# and halts (its vCPU sleeps for good).
SPIN = b"\xeb\xfe" + bytes(508) + b"\x55\xaa"
HALT = b"\xfa\xf4\xeb\xfd" + bytes(506) + b"\x55\xaa"

GUEST = """
<domain type='qemu'>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>32</memory>
  <vcpu placement='static'>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/><source file='{image}'/><target dev='hda' bus='ide'/>
    </disk>
  </devices>
</domain>"""

POLICY = ReclaimPolicy(shutoff_after=2.0, idle_cpu_below=0.05, idle_for=3.0)


def _guest_xml(libvirtd: Libvirtd, directory: Path, name: str, sector: bytes) -> str:
    image = directory / f"{name}.img"
    image.write_bytes(sector)
    os.chown(image, *libvirtd.owner)  # QEMU runs as the daemon's user
    return GUEST.format(name=name, uuid=uuid.uuid4(), image=image)


def test_an_idle_guest_and_a_busy_one_are_told_apart_and_a_stopped_one_found(
    libvirtd: Libvirtd, tmp_path: Path
) -> None:
    prefix = f"virtcap-reclaim-{uuid.uuid4().hex[:6]}"
    directory = libvirtd.owned_directory(f"{prefix}-")
    admin: Any = libvirt.open(libvirtd.uri)
    started: list[Any] = []
    defined: Any = None
    try:
        busy = admin.createXML(_guest_xml(libvirtd, directory, f"{prefix}-busy", SPIN), 0)
        started.append(busy)
        idle = admin.createXML(_guest_xml(libvirtd, directory, f"{prefix}-idle", HALT), 0)
        started.append(idle)
        defined = admin.defineXML(_guest_xml(libvirtd, directory, f"{prefix}-stopped", SPIN))
        mine = {busy.UUIDString(): "busy", idle.UUIDString(): "idle", defined.UUIDString(): "stopped"}
        database = str(tmp_path / "claims.sqlite")

        async def audits() -> dict[str, tuple[ReclaimReason, float]]:
            storage = ClaimDatabase(database)
            await storage.start()
            tracker = ReclaimTracker(POLICY, storage)
            await tracker.start()
            conn = open_read_only(libvirtd.uri)
            try:
                started_at = time.time()
                while time.time() - started_at < POLICY.idle_for + 2.5:
                    facts = await asyncio.to_thread(audit_host, conn, libvirtd.uri, None)
                    assert facts.domain_cpu_ns is not None, facts.problems
                    tracker.record("hv", facts)
                    assert await tracker.flush()
                    await asyncio.sleep(0.5)
                return {
                    mine[found.domain.uuid]: (found.reclaimable.reason, found.reclaimable.since)
                    for found in tracker.reclaimable_domains()
                    if found.domain.uuid in mine
                }
            finally:
                conn.close()
                await storage.close()

        answers = asyncio.run(audits())
        assert set(answers) == {"idle", "stopped"}, answers
        assert answers["idle"][0] == ReclaimReason.IDLE
        assert answers["stopped"][0] == ReclaimReason.SHUTOFF

        async def restarted() -> dict[str, float | None]:
            storage = ClaimDatabase(database)
            await storage.start()
            tracker = ReclaimTracker(POLICY, storage)
            await tracker.start()
            await storage.close()
            stored = tracker.histories["hv"]
            return {
                "idle": stored[idle.UUIDString()].idle_since,
                "stopped": stored[defined.UUIDString()].state_since,
            }

        # a restart goes on from the stored history: the same "since" as before
        kept = asyncio.run(restarted())
        assert kept == {"idle": answers["idle"][1], "stopped": answers["stopped"][1]}
    finally:
        for domain in started:
            domain.destroy()
        if defined is not None:
            defined.undefine()
        admin.close()
