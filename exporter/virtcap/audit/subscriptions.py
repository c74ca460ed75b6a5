"""The libvirt callbacks on a connection: its closing, its domains' events, its storage pools'.

libvirt's event thread (see virtcap.audit.events) runs the callbacks. They only record which
domain changed (a set operation under a lock held for nothing else: virtcap.audit.domain_cache)
and hand the news to the asyncio loop with `hand_to_loop`: they never block and never call
libvirt (a domain's UUIDString() is read from the client's own copy, not asked of the daemon).
Registering and deregistering them are libvirt calls, made by the worker thread that opens or
releases the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import libvirt

from virtcap.audit.domain_cache import DomainChanges
from virtcap.audit.events import hand_to_loop
from virtcap.audit.libvirt_api import VirConnect, VirDomain

CHANGE_EVENTS = (
    libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
    libvirt.VIR_DOMAIN_EVENT_ID_BALLOON_CHANGE,
    libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED,
    libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
    libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
    libvirt.VIR_DOMAIN_EVENT_ID_TUNABLE,
    libvirt.VIR_DOMAIN_EVENT_ID_BLOCK_JOB_2,
    libvirt.VIR_DOMAIN_EVENT_ID_DISK_CHANGE,
)
"""The domain events after which a domain's definition (as virtcap.audit.domains reads it)
may differ: lifecycle (defined, undefined, started, stopped, suspended, resumed, migrated), the
balloon's size (the live `<currentMemory>`), devices hot-plugged or unplugged, metadata (Nova's,
the ownership namespace), tunables (vCPU pins), a block job's end (a disk's source after a copy or
commit) and a removable medium changed. Incremental audits need every one of them."""

OPTIONAL_CHANGE_EVENTS = (libvirt.VIR_DOMAIN_EVENT_ID_MEMORY_DEVICE_SIZE_CHANGE,)
"""A virtio-mem device resized (libvirt 7.9): a daemon too old to know the event has no such
device either."""

POOL_EVENTS = (libvirt.VIR_STORAGE_POOL_EVENT_ID_LIFECYCLE, libvirt.VIR_STORAGE_POOL_EVENT_ID_REFRESH)


@dataclass(frozen=True, slots=True)
class Subscription:
    """The callbacks registered on one connection. Each holds a reference to the connection:
    until they are deregistered, the connection cannot be freed."""

    conn: VirConnect
    domain_callbacks: tuple[int, ...] = ()
    pool_callbacks: tuple[int, ...] = ()
    domain_events: bool = False
    """Every event of CHANGE_EVENTS was registered."""
    pool_events: bool = False
    """Every event of POOL_EVENTS was registered."""

    def cancel(self) -> None:
        """Deregister the callbacks; blocks. On a broken connection the daemon cannot be told,
        but libvirt drops its own reference to each callback (and so to the connection) before it
        tries."""
        for callback in self.domain_callbacks:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.domainEventDeregisterAny(callback)
        for callback in self.pool_callbacks:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.storagePoolEventDeregisterAny(callback)
        with contextlib.suppress(libvirt.libvirtError):
            self.conn.unregisterCloseCallback()


class ConnectionEvents:
    """Subscribes connections to their closing, told as `on_closed(reason)`, and to the changes
    of their domains and storage pools, told as `on_lifecycle()`: both run on the asyncio loop.
    Which domain changed is recorded in the connection's DomainChanges, when it has one."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_closed: Callable[[int], None],
        on_lifecycle: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._on_closed = on_closed
        self._on_lifecycle = on_lifecycle

    def subscribe(self, conn: VirConnect, changes: DomainChanges | None = None) -> Subscription:
        """Register the callbacks on `conn`; blocks. Drivers without some simply go without:
        the Subscription says which were registered."""
        with contextlib.suppress(libvirt.libvirtError):
            conn.registerCloseCallback(self._closed, None)
        domain_callbacks: list[int] = []
        missing = False
        # Without a cache to mark (full audits only), lifecycle events alone ask for an audit.
        wanted = (
            CHANGE_EVENTS + OPTIONAL_CHANGE_EVENTS
            if changes is not None
            else (libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,)
        )
        for event in wanted:
            try:
                domain_callbacks.append(
                    conn.domainEventRegisterAny(None, event, self._domain_changed, changes)
                )
            except libvirt.libvirtError:
                missing = missing or event in CHANGE_EVENTS
        pool_callbacks: list[int] = []
        for event in POOL_EVENTS if changes is not None else ():
            try:
                pool_callbacks.append(
                    conn.storagePoolEventRegisterAny(None, event, self._pool_changed, changes)
                )
            except libvirt.libvirtError:
                break
        return Subscription(
            conn,
            tuple(domain_callbacks),
            tuple(pool_callbacks),
            domain_events=changes is not None and not missing,
            pool_events=changes is not None and len(pool_callbacks) == len(POOL_EVENTS),
        )

    # libvirt's event thread runs these: they only record and hand the news to the asyncio loop.

    def _closed(self, _conn: VirConnect, reason: int, _opaque: object) -> None:
        hand_to_loop(self._loop, self._on_closed, reason)

    def _domain_changed(self, _conn: VirConnect, domain: VirDomain, *details: object) -> None:
        """Any of the domain events: each passes (connection, domain, ..., opaque)."""
        changes = details[-1]
        if isinstance(changes, DomainChanges):
            try:
                changes.mark_domain(domain.UUIDString())
            except libvirt.libvirtError:
                changes.mark_unknown()
        hand_to_loop(self._loop, self._on_lifecycle)

    def _pool_changed(self, _conn: VirConnect, _pool: object, *details: object) -> None:
        changes = details[-1]
        if isinstance(changes, DomainChanges):
            changes.mark_pools()
        hand_to_loop(self._loop, self._on_lifecycle)
