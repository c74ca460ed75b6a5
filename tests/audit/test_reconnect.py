"""A reconnect lets the old connection go: its callbacks are deregistered, so nothing keeps it."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from typing import Any

from tests.support.libvirtd import Libvirtd
from virtcap.audit.events import start_libvirt_event_thread
from virtcap.config import AuditSettings, Hypervisor
from virtcap.fleet.store import SnapshotStore
from virtcap.model.policy import HostPolicy
from virtcap.service.auditor import AuditSlots, HypervisorAuditor
from virtcap.service.supervise import Supervisor


def test_reconnecting_frees_the_old_connection(libvirtd: Libvirtd) -> None:
    """Each registered callback holds a reference to its connection: never deregistered, every
    reconnect (a restarted daemon, a reset) kept one more connection alive for good."""

    async def scenario() -> list[weakref.ref[Any]]:
        start_libvirt_event_thread()
        store = SnapshotStore()
        hypervisor = Hypervisor("local", libvirtd.uri, HostPolicy(), None)
        store.track([hypervisor.name])
        auditor = HypervisorAuditor(hypervisor, AuditSettings(), {}, store, AuditSlots(1, 1), Supervisor())
        old: list[weakref.ref[Any]] = []
        for _ in range(3):
            await asyncio.to_thread(auditor._connection)
            old.append(weakref.ref(auditor.connection.current))
            auditor.connection.mark_broken()  # what a close callback or a failed call does
        await asyncio.to_thread(auditor._connection)  # the third is released here
        await auditor.stop()
        return old

    old = asyncio.run(scenario())
    # the old connections are released by daemon threads: wait for them
    for thread in threading.enumerate():
        if thread.daemon and thread is not threading.current_thread() and thread.name != "libvirt-events":
            thread.join(timeout=10)
    gc.collect()
    assert [ref() for ref in old] == [None, None, None]
