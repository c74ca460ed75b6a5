"""Incremental audits against full ones, on a connection kept open as the auditor keeps it.

A `Watched` connection is what virtcap.audit.connection makes of a daemon's connection: read-only,
subscribed to the events (virtcap.audit.subscriptions) that mark domains changed in its
DomainCache. Events arrive on libvirt's event thread a moment after the change: before auditing,
`settle()` redefines a sentinel domain unchanged and waits until the cache has it marked; libvirt
delivers a connection's events in order, so every earlier event has reached the cache. (libvirt
takes one callback per event and connection: the test cannot listen beside the cache.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import replace
from typing import Any

import libvirt

from virtcap.audit.domain_cache import DomainCache
from virtcap.audit.events import start_libvirt_event_thread
from virtcap.audit.host_readings import HostLayout, read_host_layout
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.subscriptions import ConnectionEvents, Subscription
from virtcap.config import DiskSource
from virtcap.model.facts import HostFacts

SETTLE_SECONDS = 10.0


def comparable(facts: HostFacts) -> HostFacts:
    """Everything but when and how the audit ran, and what moves by itself between two reads of
    the same state: the host's own memory in use and CPU times (guests' balloons stay), the vCPU
    wait (a counter carried from the previous audit), the domains' CPU times (they run)."""
    host_memory = facts.memory_in_use_source == "host"
    return replace(
        facts,
        audited_at=0.0,
        audit_duration_seconds=0.0,
        domain_reads=0,
        full_audit=True,
        cpu_times=None,
        busy_cpus=None,
        domain_cpu_ns=None,
        vcpu_wait=None,
        memory_in_use_bytes=None if host_memory else facts.memory_in_use_bytes,
    )


class Watched:
    """A read-only connection with a domain cache fed by its events, and a sentinel to settle them."""

    def __init__(self, uri: str, admin: Any, sentinel_xml: str, *, resync_every: int = 1000) -> None:
        start_libvirt_event_thread()
        self.uri = uri
        self.admin = admin
        self.sentinel_xml = sentinel_xml
        self.sentinel = admin.defineXML(sentinel_xml).UUIDString()
        # Never run: the callbacks' pokes for the auditor only queue there.
        self._loop = asyncio.new_event_loop()
        self.resync_every = resync_every
        self.conn: Any = None
        self.cache = DomainCache(resync_every)
        self.layout: HostLayout | None = None
        self._subscription: Subscription | None = None
        self.connect()

    def connect(self) -> None:
        """A new connection and a new cache, as a reconnect makes them."""
        self.close()
        self.conn = libvirt.openReadOnly(self.uri)
        self.cache = DomainCache(self.resync_every)
        events = ConnectionEvents(self._loop, lambda _reason: None, lambda: None)
        self._subscription = events.subscribe(self.conn, self.cache.changes)
        self.cache.domain_events = self._subscription.domain_events
        self.cache.pool_events = self._subscription.pool_events
        self.layout = read_host_layout(self.conn)  # once per connection, as the auditor reads it

    def settle(self) -> None:
        self.admin.defineXML(self.sentinel_xml)
        deadline = time.monotonic() + SETTLE_SECONDS
        while not self.cache.changes.marked(self.sentinel):
            assert time.monotonic() < deadline, "the sentinel's event never came"
            time.sleep(0.002)

    def audit(self, disk: DiskSource | None = None) -> HostFacts:
        return audit_host(self.conn, self.uri, disk, layout=self.layout, cache=self.cache)

    def full_audit(self, disk: DiskSource | None = None) -> HostFacts:
        """A full audit of the same state, without the cache (on the same connection: a test://
        URI opened again would be another host)."""
        return audit_host(self.conn, self.uri, disk, layout=self.layout)

    def close(self) -> None:
        if self.conn is None:
            return
        if self._subscription is not None:
            self._subscription.cancel()
        with contextlib.suppress(libvirt.libvirtError):
            self.conn.close()
        self.conn = None

    def finish(self) -> None:
        self.close()
        self._loop.close()


def new_uuid() -> str:
    return str(uuid.uuid4())
