"""Background audits: each hypervisor on its own jittered schedule, over a connection kept open.

Per hypervisor at most one libvirt call is in flight. One that hangs past the audit timeout
marks the hypervisor down; it is never started again while the first is stuck, so the number of
threads stays bounded by the number of hypervisors however long libvirt hangs. Lifecycle events
(a domain defined, started, undefined...) trigger a prompt re-audit, coalescing bursts. Between
full audits, an audit reads again only the domains that changed (virtcap.audit.domain_cache, kept
with the connection; `audit.incremental`, `audit.resync_every`).

What the host is built of (CPU identity, NUMA cells, PCI devices: virtcap.audit.host_readings'
HostLayout) is read once per connection, in the audit thread and so within the audit timeout, and
kept for the audits on that connection; each audit still reads the free hugepages.

The auditor keeps the schedule and hands what each audit found to the store; the connection's
lifecycle is virtcap.audit.connection's, its libvirt callbacks virtcap.audit.subscriptions', and
the one call in flight virtcap.audit.threads.SerialCaller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import AsyncIterator, Mapping

import libvirt

from virtcap.audit.connection import (
    IN_PROCESS_DRIVER,
    AuditError,
    HypervisorConnection,
    redact_uri,
    runs_in_process,
)
from virtcap.audit.host_readings import HostLayout, read_cpu_times, read_host_layout
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.libvirt_api import VirConnect
from virtcap.audit.parsed_definitions import ParsedDefinitions
from virtcap.audit.replay import is_replay_uri
from virtcap.audit.threads import SerialCaller
from virtcap.claims.ledger import ClaimLedger
from virtcap.config import AuditSettings, Hypervisor
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import CpuIdentity, CpuTimes, HostFacts, VcpuWait
from virtcap.model.host_fit import Demand
from virtcap.service.flavors import FlavorCatalog
from virtcap.service.reclaim import ReclaimTracker
from virtcap.service.supervise import Supervisor

log = logging.getLogger(__name__)

EVENT_COALESCE_SECONDS = 0.2
"""After a lifecycle event, wait this long for the rest of its burst before re-auditing."""
FIRST_RETRY_SECONDS = 1.0
JITTER = 0.1
"""Each interval is stretched or shrunk by up to 10% so that a fleet does not audit in lockstep."""


class AuditSlots:
    """How many audits run at once: `audit.concurrency` in all, and of those of hypervisors
    simulated in this process (`runs_in_process`) at most one per CPU.

    The concurrency hides round trips: a remote hypervisor's audit mostly waits for its libvirtd.
    An in-process one waits for nothing: libvirt's test driver parses its XML and answers in this
    process's threads. Run 32 at once on two CPUs and the event loop's thread is one of 34 sharing
    them, so that every scrape during an audit cycle waited for a core (0.3 to 0.5 s each at
    1,000 test-driver hypervisors, docs/performance.md), and the cycle itself took longer."""

    def __init__(self, concurrency: int, cpus: int) -> None:
        self.in_process_concurrency = max(1, min(concurrency, cpus))
        self._all = asyncio.Semaphore(concurrency)
        self._in_process = asyncio.Semaphore(self.in_process_concurrency)

    @contextlib.asynccontextmanager
    async def taken(self, *, in_process: bool) -> AsyncIterator[None]:
        """Held while one audit runs. An in-process audit waits for its own bound first, so that
        it never holds one of the fleet's slots while it waits."""
        if not in_process:
            async with self._all:
                yield
            return
        async with self._in_process, self._all:
            yield


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container's cpuset narrows)."""
    return len(os.sched_getaffinity(0))


class HypervisorAuditor:
    def __init__(  # noqa: PLR0917  (the collaborators its one caller, the fleet, wires in)
        self,
        hypervisor: Hypervisor,
        settings: AuditSettings,
        flavors: Mapping[str, Demand],
        store: SnapshotStore,
        slots: AuditSlots,
        supervisor: Supervisor,
        claims: ClaimLedger | None = None,
        *,
        catalog: FlavorCatalog | None = None,
        reclaim: ReclaimTracker | None = None,
    ) -> None:
        self.hypervisor = hypervisor
        self.reclaim = reclaim
        """Each audit advances its domains' history (reclaimable capacity)."""
        self.catalog = catalog
        """The fleet's discovered flavors: this audit's are recorded, the merged set is fitted."""
        self.fitted: Mapping[str, Demand] | None = None
        """The flavors the last audit was fitted with (None before, and while an audit fits)."""
        self.supervisor = supervisor
        self.claims = claims
        self.settings = settings
        self.flavors = flavors
        self.store = store
        self.slots = slots
        self.uri_for_humans = redact_uri(hypervisor.uri)
        self.in_process = runs_in_process(hypervisor.uri)
        self.connection = HypervisorConnection(
            hypervisor.name,
            hypervisor.uri,
            settings,
            on_closed=self._connection_lost,
            on_lifecycle=self.poke,
        )
        self._wake = asyncio.Event()
        self._calls = SerialCaller(name=f"audit-{hypervisor.name}")
        self._previous_cpu: CpuTimes | None = None
        self._vcpu_wait: VcpuWait | None = None
        """The vCPU wait counter as of the last successful audit, which the next one goes on from:
        kept across reconnects (guests outlive a libvirtd restart), gone with the auditor."""
        self._retry_delay = 0.0
        self._definitions = ParsedDefinitions()
        """The domains' definitions as last parsed, kept across reconnects (only the audit thread
        touches it): a full audit parses again only the XML that changed."""
        self._layout: HostLayout | None = None
        """The current connection's, read by its first audit; only the audit thread touches it."""
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
        return self._calls.stuck

    async def stop(self) -> None:
        self._stopped = True
        await self.supervisor.stop(self.task_name)
        await self.connection.close(in_use=self.hung)

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
        async with self.slots.taken(in_process=self.in_process):
            try:
                facts, identity = await self._calls.call(self._audit_blocking, self.settings.timeout)
            except TimeoutError:
                self._record_failure(
                    f"audit timed out after {self.settings.timeout:g}s ({self.uri_for_humans})", "timeout"
                )
                return False
            except AuditError as error:
                self._record_failure(f"{error} ({self.uri_for_humans})", "failure")
                return False
            except libvirt.libvirtError as error:
                self.connection.mark_broken()
                self._record_failure(f"{error.get_error_message()} ({self.uri_for_humans})", "failure")
                return False
        self._previous_cpu = facts.cpu_times
        self._vcpu_wait = facts.vcpu_wait
        self.store.count_domain_reads(self.name, facts.domain_reads)
        log.debug(
            "audited",
            extra={
                "hypervisor": self.name,
                "kind": "full" if facts.full_audit else "incremental",
                "domains": len(facts.domains),
                "domain_reads": facts.domain_reads,
            },
        )
        if identity != self._identity:  # a new connection may find another host (or CPU)
            self._identity = identity
            self.store.set_identity(self.name, identity)
        flavors = self.flavors
        if self.catalog is not None:
            self.catalog.record(self.name, facts)
            self.fitted = None  # this audit fits the newest flavors: no need to audit it again for them
            flavors = self.catalog.demands(self.flavors)
        self.fitted = flavors
        # The capacity fits flavors into NUMA cells and devices, milliseconds a host: in a thread.
        if self.claims is not None:
            await self.claims.record_audit(self.hypervisor, facts, flavors)
        else:
            snapshot = await asyncio.to_thread(HypervisorSnapshot.audited, self.hypervisor, facts, flavors)
            self.store.record(snapshot, "success")
        if self.reclaim is not None:
            self.reclaim.record(self.name, facts, self.hypervisor.policy)
        return True

    def _record_failure(self, error: str, outcome: str) -> None:
        was_up = self.store.hypervisors.get(self.name) is not None and self.store.hypervisors[self.name].up
        self.store.record(HypervisorSnapshot.failed(self.hypervisor, error), outcome)
        if was_up:
            log.warning("hypervisor down", extra={"hypervisor": self.name, "error": error})
        else:
            log.debug("audit failed", extra={"hypervisor": self.name, "error": error})

    def _connection_lost(self, reason: int) -> None:
        """The daemon closed the connection (told on the loop): the next audit reconnects."""
        self._announced = False
        log.warning("connection closed", extra={"hypervisor": self.name, "reason": reason})
        if not self._stopped:
            self.poke()

    # Everything below runs in the audit thread, except where said.

    def _audit_blocking(self) -> tuple[HostFacts, CpuIdentity]:
        conn = self._connection()
        try:
            if self._layout is None:
                # Once per connection: slow on some drivers, constant for the connection's life.
                self._layout = read_host_layout(conn)
            layout = self._layout
            facts = audit_host(
                conn,
                self.hypervisor.uri,
                self.hypervisor.disk,
                previous_cpu=self._previous_cpu,
                layout=layout,
                previous_vcpu_wait=self._vcpu_wait,
                ownership=self.hypervisor.ownership,
                cache=self.connection.cache,
                definitions=self._definitions,
            )
        except AuditError:
            self.connection.mark_broken()
            raise
        if facts.hypervisor_type == IN_PROCESS_DRIVER or is_replay_uri(self.hypervisor.uri):
            self._release_in_process()
        return facts, layout.identity

    def _connection(self) -> VirConnect:
        conn, opened = self.connection.get()
        if opened:
            # Busy CPUs are a rate: this first sample lets the first audit tell them already.
            self._previous_cpu = read_cpu_times(conn)
            self._layout = None  # another connection, maybe to a host rebuilt meanwhile
            if not self._announced:  # in-process connections reopen every audit: say it once
                log.info("connected", extra={"hypervisor": self.name, "uri": self.uri_for_humans})
                self._announced = True
        return conn

    def _release_in_process(self) -> None:
        """libvirt's test driver is a private hypervisor inside this process, about 0.6 MiB a
        connection: nothing outside can change it, so no connection is kept between audits (nor
        a replayed capture, read again from its file). Both are cheap to open and to read the
        layout of again."""
        self._layout = None
        self.connection.discard()


class FleetAuditor:
    """One auditor per configured hypervisor, sharing a bound on concurrent audits."""

    def __init__(
        self,
        store: SnapshotStore,
        supervisor: Supervisor,
        claims: ClaimLedger | None = None,
        reclaim: ReclaimTracker | None = None,
    ) -> None:
        self.store = store
        self.reclaim = reclaim
        self.supervisor = supervisor
        self.claims = claims
        self.auditors: dict[str, HypervisorAuditor] = {}
        self.catalog = FlavorCatalog()
        """The flavors discovered in the fleet's Nova metadata (see virtcap.service.flavors)."""
        self.catalog.on_change = self._refit
        self._settings: AuditSettings | None = None
        self._slots = AuditSlots(1, 1)

    async def apply(
        self,
        hypervisors: tuple[Hypervisor, ...],
        settings: AuditSettings,
        flavors: Mapping[str, Demand],
        *,
        discover_flavors: bool = False,
    ) -> None:
        """Start auditing this fleet: removed hypervisors stop (and lose their series), changed
        ones restart with their new settings, new ones start. With `discover_flavors`, headroom
        is also reported for the flavors found in the fleet's Nova metadata."""
        self.catalog.discover = discover_flavors
        if settings != self._settings:
            self._settings = settings
            self._slots = AuditSlots(settings.concurrency, available_cpus())
        wanted = {h.name: h for h in hypervisors}
        for name, auditor in list(self.auditors.items()):
            if wanted.get(name) != auditor.hypervisor or auditor.settings != settings:
                await auditor.stop()
                del self.auditors[name]
        if self.reclaim is not None:
            self.reclaim.keep_only(wanted)
        self.store.track(list(wanted))
        if self.claims is not None:
            # the names the maintenance API knows, and their configuration's; after `track`: the
            # store it touches must not look ready with no hypervisor tracked yet
            self.claims.configure(hypervisors)
        self.catalog.track(wanted)
        for name, hypervisor in wanted.items():
            if name in self.auditors:
                self.auditors[name].flavors = flavors
                continue
            auditor = HypervisorAuditor(
                hypervisor,
                settings,
                flavors,
                self.store,
                self._slots,
                self.supervisor,
                self.claims,
                catalog=self.catalog,
                reclaim=self.reclaim,
            )
            self.auditors[name] = auditor
            auditor.start()

    def _refit(self, flavors: Mapping[str, Demand]) -> None:
        """Other flavors are in use (one discovered, or gone): every hypervisor fitted with the
        previous ones is audited again soon, so that headroom is reported for the same flavors
        everywhere (a burst of changes is one audit each: pokes coalesce)."""
        for auditor in self.auditors.values():
            if auditor.fitted is not None and auditor.fitted is not flavors:
                auditor.poke()

    async def stop(self) -> None:
        await asyncio.gather(*(auditor.stop() for auditor in self.auditors.values()))
        self.auditors.clear()
