"""Background audits: each hypervisor on its own jittered schedule, over a connection kept open.

Per hypervisor at most one libvirt call is in flight. One that hangs past the audit timeout
marks the hypervisor down; it is never started again while the first is stuck, so the number of
threads stays bounded by the number of hypervisors however long libvirt hangs. Lifecycle events
(a domain defined, started, undefined...) trigger a prompt re-audit, coalescing bursts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import threading
from collections.abc import Mapping
from typing import Any

import libvirt

from virtcap.audit.events import hand_to_loop
from virtcap.audit.hypervisor import (
    AuditError,
    audit_host,
    open_read_only,
    read_cpu_identity,
    read_cpu_times,
    redact_uri,
)
from virtcap.audit.threads import run_in_daemon_thread
from virtcap.claims.ledger import ClaimLedger
from virtcap.config import AuditSettings, Hypervisor
from virtcap.model.capacity import Amounts
from virtcap.model.facts import CpuIdentity, CpuTimes, HostFacts
from virtcap.service.snapshot import HypervisorSnapshot
from virtcap.service.store import SnapshotStore
from virtcap.service.supervise import Supervisor

log = logging.getLogger(__name__)

EVENT_COALESCE_SECONDS = 0.2
"""After a lifecycle event, wait this long for the rest of its burst before re-auditing."""
FIRST_RETRY_SECONDS = 1.0
JITTER = 0.1
"""Each interval is stretched or shrunk by up to 10% so that a fleet does not audit in lockstep."""
CLOSE_WAIT_SECONDS = 2.0
IN_PROCESS_DRIVER = "TEST"


class HypervisorAuditor:
    def __init__(  # noqa: PLR0917  (the collaborators its one caller, the fleet, wires in)
        self,
        hypervisor: Hypervisor,
        settings: AuditSettings,
        flavors: Mapping[str, Amounts],
        store: SnapshotStore,
        slots: asyncio.Semaphore,
        supervisor: Supervisor,
        claims: ClaimLedger | None = None,
    ) -> None:
        self.hypervisor = hypervisor
        self.supervisor = supervisor
        self.claims = claims
        self.settings = settings
        self.flavors = flavors
        self.store = store
        self.slots = slots
        self.uri_for_humans = redact_uri(hypervisor.uri)
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._in_flight: asyncio.Future[HostFacts] | None = None
        self._previous_cpu: CpuTimes | None = None
        self._retry_delay = 0.0
        # The connection is used by one audit thread at a time; the loop only flags it broken.
        self._conn: Any = None
        self._lifecycle_callback: int | None = None
        """The id of the lifecycle callback registered on `_conn`, deregistered with it."""
        self._conn_broken = False
        self._identity_pending = False
        self._identity: CpuIdentity | None = None
        self._announced = False
        self._stopped = False

    @property
    def name(self) -> str:
        return self.hypervisor.name

    @property
    def task_name(self) -> str:
        return f"audit-{self.name}"

    def start(self) -> None:
        self.supervisor.start(
            self.task_name, "audit", self._run, context={"hypervisor": self.name}, on_failure=self._crashed
        )

    def _crashed(self, error: BaseException) -> None:
        """A bug, not the hypervisor's fault: shown as a failed audit until the restart succeeds."""
        self._record_failure(f"internal error: {type(error).__name__}: {error}", "failure")

    def poke(self) -> None:
        """Re-audit soon: something changed on the hypervisor."""
        self._wake.set()

    @property
    def hung(self) -> bool:
        return self._in_flight is not None and not self._in_flight.done()

    async def stop(self) -> None:
        self._stopped = True
        await self.supervisor.stop(self.task_name)
        conn, self._conn = self._conn, None
        callback, self._lifecycle_callback = self._lifecycle_callback, None
        if conn is not None and not self.hung:
            # close() talks to the daemon: never let a hung one hold up the shutdown.
            closing = run_in_daemon_thread(lambda: _release(conn, callback), name=f"close-{self.name}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_SECONDS):
                    await closing

    async def _run(self) -> None:
        delay = 0.0
        while True:
            await self._sleep(delay)
            if await self._audit_once():
                self._retry_delay = 0.0
                delay = self.settings.interval * random.uniform(1 - JITTER, 1 + JITTER)
            else:
                self._retry_delay = min(
                    max(self._retry_delay * 2, FIRST_RETRY_SECONDS), self.settings.interval
                )
                delay = self._retry_delay

    async def _sleep(self, delay: float) -> None:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that
        # races with its own timeout, and the task would then never stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()
        if self._wake.is_set():
            await asyncio.sleep(EVENT_COALESCE_SECONDS)
            self._wake.clear()

    async def _audit_once(self) -> bool:
        if self.hung:
            self._record_failure(
                f"still waiting for libvirt since an audit timed out ({self.uri_for_humans})", "timeout"
            )
            return False
        async with self.slots:
            call = run_in_daemon_thread(self._audit_blocking, name=f"audit-{self.name}")
            call.add_done_callback(_consume_outcome)
            self._in_flight = call
            try:
                async with asyncio.timeout(self.settings.timeout):
                    facts = await asyncio.shield(call)
            except TimeoutError:
                self._record_failure(
                    f"audit timed out after {self.settings.timeout:g}s ({self.uri_for_humans})", "timeout"
                )
                return False
            except AuditError as error:
                self._record_failure(f"{error} ({self.uri_for_humans})", "failure")
                return False
            except libvirt.libvirtError as error:
                self._conn_broken = True
                self._record_failure(f"{error.get_error_message()} ({self.uri_for_humans})", "failure")
                return False
        self._previous_cpu = facts.cpu_times
        snapshot = HypervisorSnapshot.audited(self.hypervisor, facts, self.flavors)
        if self.claims is not None:
            await self.claims.record_audit(snapshot, facts)
        else:
            self.store.record(snapshot, "success")
        self._read_identity_once()
        return True

    def _record_failure(self, error: str, outcome: str) -> None:
        was_up = self.store.hypervisors.get(self.name) is not None and self.store.hypervisors[self.name].up
        self.store.record(HypervisorSnapshot.failed(self.hypervisor, error), outcome)
        if was_up:
            log.warning("hypervisor down", extra={"hypervisor": self.name, "error": error})
        else:
            log.debug("audit failed", extra={"hypervisor": self.name, "error": error})

    # Everything below runs in the audit thread, except the libvirt callbacks (on the loop).

    def _audit_blocking(self) -> HostFacts:
        conn = self._connection()
        try:
            facts = audit_host(
                conn, self.hypervisor.uri, self.hypervisor.disk, previous_cpu=self._previous_cpu
            )
        except AuditError:
            self._conn_broken = True
            raise
        if facts.hypervisor_type == IN_PROCESS_DRIVER:
            self._release_in_process(conn)
        return facts

    def _release_in_process(self, conn: Any) -> None:
        """libvirt's test driver is a private hypervisor inside this process, about 0.6 MiB a
        connection: nothing outside can change it, so no connection is kept between audits."""
        if self._identity is None:
            self._identity = read_cpu_identity(conn)  # cheap on this driver
            hand_to_loop(self._loop, self.store.set_identity, self.name, self._identity)
        self._identity_pending = False
        self._conn = None
        _close_quietly(conn)

    def _connection(self) -> Any:
        if self._conn is not None and self._conn_broken:
            old, self._conn = self._conn, None
            callback, self._lifecycle_callback = self._lifecycle_callback, None
            # Its callbacks hold a reference to it: deregistered, the old connection can be freed.
            threading.Thread(target=_release, args=(old, callback), daemon=True).start()
        if self._conn is None:
            conn = open_read_only(self.hypervisor.uri)
            if conn.getType() != IN_PROCESS_DRIVER:  # nothing outside can change an in-process one
                self._lifecycle_callback = self._watch(conn)
            # Busy CPUs are a rate: this first sample lets the first audit tell them already.
            self._previous_cpu = read_cpu_times(conn)
            self._conn, self._conn_broken = conn, False
            self._identity_pending = self._identity is None
            if not self._announced:  # in-process connections reopen every audit: say it once
                log.info("connected", extra={"hypervisor": self.name, "uri": self.uri_for_humans})
                self._announced = True
        return self._conn

    def _watch(self, conn: Any) -> int | None:
        """Keepalive (so that a hung daemon ends our calls), close and lifecycle callbacks; the
        lifecycle callback's id, to deregister it with the connection.

        Drivers without them (the test driver has no keepalive) simply go without.
        """
        with contextlib.suppress(libvirt.libvirtError):
            # libvirt counts whole seconds and reads 0 as "no keepalive": never round down to it.
            interval = max(1, math.ceil(self.settings.keepalive_interval))
            conn.setKeepAlive(interval, self.settings.keepalive_count)
        with contextlib.suppress(libvirt.libvirtError):
            conn.registerCloseCallback(self._on_closed, None)
        try:
            callback: int = conn.domainEventRegisterAny(
                None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
            )
        except libvirt.libvirtError:
            return None
        return callback

    # libvirt's event thread runs these two: they only hand the news to the asyncio loop.

    def _on_closed(self, _conn: Any, reason: int, _opaque: object) -> None:
        hand_to_loop(self._loop, self._connection_lost, reason)

    def _on_lifecycle(self, _conn: Any, _domain: Any, _event: int, _detail: int, _opaque: object) -> None:
        hand_to_loop(self._loop, self.poke)

    def _connection_lost(self, reason: int) -> None:
        self._conn_broken = True
        self._announced = False
        log.warning("connection closed", extra={"hypervisor": self.name, "reason": reason})
        if not self._stopped:
            self.poke()

    def _read_identity_once(self) -> None:
        """The CPU identity is slow to read on some drivers: once per connection, off the audit."""
        if not self._identity_pending or self._conn is None:
            return
        self._identity_pending = False
        conn = self._conn

        def read() -> None:
            try:
                identity = read_cpu_identity(conn)
            except libvirt.libvirtError:
                return
            self._identity = identity
            hand_to_loop(self._loop, self.store.set_identity, self.name, identity)

        threading.Thread(target=read, name=f"identity-{self.name}", daemon=True).start()


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(libvirt.libvirtError):
        conn.close()


def _release(conn: Any, lifecycle_callback: int | None) -> None:
    """Deregister a connection's callbacks and close it. On a broken connection the daemon cannot
    be told, but libvirt drops its own reference to each callback (and so to the connection)
    before it tries."""
    if lifecycle_callback is not None:
        with contextlib.suppress(libvirt.libvirtError):
            conn.domainEventDeregisterAny(lifecycle_callback)
    with contextlib.suppress(libvirt.libvirtError):
        conn.unregisterCloseCallback()
    _close_quietly(conn)


def _consume_outcome(future: asyncio.Future[Any]) -> None:
    """A call that finished after its timeout has nobody awaiting it; retrieve its error."""
    if not future.cancelled():
        future.exception()


class FleetAuditor:
    """One auditor per configured hypervisor, sharing a bound on concurrent audits."""

    def __init__(
        self, store: SnapshotStore, supervisor: Supervisor, claims: ClaimLedger | None = None
    ) -> None:
        self.store = store
        self.supervisor = supervisor
        self.claims = claims
        self.auditors: dict[str, HypervisorAuditor] = {}
        self._settings: AuditSettings | None = None
        self._slots = asyncio.Semaphore(1)

    async def apply(
        self, hypervisors: tuple[Hypervisor, ...], settings: AuditSettings, flavors: Mapping[str, Amounts]
    ) -> None:
        """Start auditing this fleet: removed hypervisors stop (and lose their series), changed
        ones restart with their new settings, new ones start."""
        if settings != self._settings:
            self._settings = settings
            self._slots = asyncio.Semaphore(settings.concurrency)
        wanted = {h.name: h for h in hypervisors}
        for name, auditor in list(self.auditors.items()):
            if wanted.get(name) != auditor.hypervisor or auditor.settings != settings:
                await auditor.stop()
                del self.auditors[name]
        self.store.track(list(wanted))
        for name, hypervisor in wanted.items():
            if name in self.auditors:
                self.auditors[name].flavors = flavors
                continue
            auditor = HypervisorAuditor(
                hypervisor, settings, flavors, self.store, self._slots, self.supervisor, self.claims
            )
            self.auditors[name] = auditor
            auditor.start()

    async def stop(self) -> None:
        await asyncio.gather(*(auditor.stop() for auditor in self.auditors.values()))
        self.auditors.clear()
