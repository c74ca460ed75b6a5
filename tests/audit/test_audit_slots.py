"""How many audits run at once (virtcap.service.auditor.AuditSlots): `audit.concurrency` in all,
and at most one per CPU of those of hypervisors simulated in this process."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from virtcap.audit.connection import runs_in_process
from virtcap.config import AuditSettings, Hypervisor
from virtcap.fleet.store import SnapshotStore
from virtcap.model.policy import HostPolicy
from virtcap.service.auditor import AuditSlots, HypervisorAuditor
from virtcap.service.supervise import Supervisor


async def _most_at_once(slots: AuditSlots, audits: list[bool]) -> Counter[str]:
    """The most audits in flight together: in all, in process, remote."""
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()

    async def audit(in_process: bool) -> None:
        kinds = ("all", "in process" if in_process else "remote")
        async with slots.taken(in_process=in_process):
            for kind in kinds:
                running[kind] += 1
                most[kind] = max(most[kind], running[kind])
            await asyncio.sleep(0.005)
            for kind in kinds:
                running[kind] -= 1

    await asyncio.gather(*(audit(in_process) for in_process in audits))
    return most


def test_in_process_audits_run_at_most_one_per_cpu() -> None:
    most = asyncio.run(_most_at_once(AuditSlots(32, 2), [True] * 10))
    assert most["in process"] == 2


def test_remote_audits_run_up_to_the_concurrency() -> None:
    most = asyncio.run(_most_at_once(AuditSlots(3, 2), [False] * 10))
    assert most["remote"] == 3


def test_the_concurrency_bounds_both_kinds_together() -> None:
    most = asyncio.run(_most_at_once(AuditSlots(3, 2), [True, False] * 10))
    assert most["all"] <= 3
    assert most["in process"] <= 2
    # fewer CPUs than the concurrency asks: the in-process bound is the concurrency
    assert AuditSlots(1, 8).in_process_concurrency == 1


def test_in_process_audits_waiting_for_a_cpu_hold_none_of_the_fleets_slots() -> None:
    async def scenario() -> int:
        slots = AuditSlots(3, 1)
        release = asyncio.Event()
        remote_running = 0
        most_remote = 0

        async def in_process() -> None:
            async with slots.taken(in_process=True):
                await release.wait()

        async def remote() -> None:
            nonlocal remote_running, most_remote
            async with slots.taken(in_process=False):
                remote_running += 1
                most_remote = max(most_remote, remote_running)
                await asyncio.sleep(0.005)
                remote_running -= 1

        waiting = [asyncio.create_task(in_process()) for _ in range(3)]
        await asyncio.sleep(0)  # one runs, two wait for the CPU
        # two slots of three are free: the remote audits get them while the in-process ones wait
        await asyncio.wait_for(asyncio.gather(*(remote() for _ in range(4))), timeout=10)
        release.set()
        await asyncio.gather(*waiting)
        return most_remote

    assert asyncio.run(scenario()) == 2


@pytest.mark.parametrize(
    ("uri", "in_process"),
    [
        ("test:///default", True),
        ("test:///var/lib/virtcap/node.xml", True),
        ("replay:///var/lib/virtcap/host.json", True),
        ("qemu:///system", False),
        ("qemu+ssh://root@compute-1/system", False),
        ("qemu+tls://compute-1.example.org/system", False),
        ("test+tcp://compute-1/default", False),  # a test driver served by a remote libvirtd
    ],
)
def test_which_hypervisors_run_in_process(uri: str, in_process: bool) -> None:
    assert runs_in_process(uri) is in_process

    async def auditor() -> HypervisorAuditor:  # its connection belongs to a running loop
        return HypervisorAuditor(
            Hypervisor("h", uri, HostPolicy(), None),
            AuditSettings(),
            {},
            SnapshotStore(),
            AuditSlots(1, 1),
            Supervisor(),
        )

    assert asyncio.run(auditor()).in_process is in_process
