"""The Placement reconciliation's background task: every `placement.interval` (the audit interval
by default), Placement's provider trees read (audit/placement.py) and compared with the
hypervisors' last good audits (model/placement_drift.py), in the exporter's worker process
(service/placement_worker.py) or a one-shot's daemon thread: a hung Placement holds up nothing
else. The answer is kept in the store (`store.placement`) for /metrics and the
API. Placement down, slow or answering garbage: one log line, `up` 0 and no per-hypervisor
families (never stale values); the next round tries again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from virtcap.audit.placement_error import PlacementError
from virtcap.audit.threads import run_in_daemon_thread
from virtcap.config import Config, Hypervisor
from virtcap.config.placement import PlacementSection
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import DomainFacts
from virtcap.model.placement_drift import DomainRecord, HypervisorView, domain_record
from virtcap.model.policy import HostPolicy
from virtcap.service.placement_worker import HypervisorSide, PlacementWorker, Reconciler, RoundAnswer

log = logging.getLogger(__name__)

ROUND_TIMEOUT_FACTOR = 4
"""A round (its requests, four at a time) is given up after this many request timeouts plus one
per 25 providers: a Placement that answers each request just in time still ends its round."""
_REQUEST_PATH = re.compile(r"GET /\S*")
_REASON = re.compile(r" \([^()]*\)$")


def failure_kind(message: str) -> str:
    """A failure's message without the request it names nor the system's reason in parentheses:
    a Placement killed in the middle of a round fails a provider's read first (the connection
    reset), then every next round its list (the connection refused); one outage, one line."""
    return _REASON.sub("", _REQUEST_PATH.sub("GET", message))


class PlacementTask:
    """Reads Placement and reconciles, forever (supervised by the exporter's Supervisor), with
    the running configuration: `configure()` gives it a reloaded one."""

    def __init__(self, config: Config, store: SnapshotStore, worker: PlacementWorker | None = None) -> None:
        """`worker`: the rounds' requests made in that process (the exporter's), else in a thread
        of this one (a one-shot command's)."""
        self.store = store
        self._worker = worker
        self.config = config
        self.section: PlacementSection | None = None
        self._here = Reconciler()
        """Without a worker: the rounds' reconciler, run in a daemon thread."""
        self._requests_total = {"ok": 0, "error": 0}
        self._last_success: float | None = None
        self._last_error: str | None = None
        self._records: dict[str, DomainRecords] = {}
        """Per hypervisor, its domains' records as of the audit the last round read."""
        self.configure(config)

    def configure(self, config: Config) -> None:
        """The configuration from now on. A changed `placement:` section is read with a new
        session from the next round (the reconciler makes it, closing the old one), and what was
        read with the old one is dropped."""
        self.config = config
        if config.placement == self.section:
            return
        self.section = config.placement
        self._last_success = None
        self._last_error = None
        self.store.publish_placement(None)

    @property
    def interval(self) -> float:
        configured = self.section.interval if self.section is not None else None
        return float(configured or self.config.audit.interval)

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            if self.section is not None:
                await self.read_once()
            await asyncio.sleep(max(self.interval - (time.monotonic() - started), 0.0))

    async def read_once(self) -> PlacementReport:
        """One round: the trees read, the fleet reconciled, the report stored (and returned)."""
        began = time.monotonic()
        audited = self._audited()
        # a fleet's domains are tens of thousands of records: made off the event loop, and only
        # for the audits that changed since the last round
        hosts = await asyncio.to_thread(self._hosts, audited)
        mapping = {name: provider for name, (provider, _view) in hosts.items()}
        section = self.section
        limit = (section.timeout if section is not None else 0.0) * (ROUND_TIMEOUT_FACTOR + len(mapping) / 25)
        try:
            if section is None:
                raise PlacementError("placement: is no longer configured")
            sides = {name: (view.capacity, view.domains) for name, (_provider, view) in hosts.items()}
            answer = await self._reconciled(section, mapping, sides, limit)
        except PlacementError as error:
            self._requests_total["ok"] += max(error.requests - 1, 0)
            return self._failed(str(error), began, section)
        except TimeoutError:
            return self._failed(f"the round took longer than {limit:g} s", began, section)
        now = time.time()
        self._requests_total["ok"] += answer.requests
        self._last_success = now
        if self._last_error is not None:
            log.info("placement: read again after: %s", self._last_error)
            self._last_error = None
        report = PlacementReport(
            up=True,
            drifts=answer.drifts,
            unmatched=answer.unmatched,
            read_at=now,
            last_success_at=now,
            duration_seconds=time.monotonic() - began,
            requests=answer.requests,
            requests_total=dict(self._requests_total),
        )
        self._publish(report, section)
        return report

    def _failed(self, message: str, began: float, section: PlacementSection | None) -> PlacementReport:
        self._requests_total["error"] += 1
        if self._last_error is None or failure_kind(message) != failure_kind(self._last_error):
            log.warning("placement: not read: %s", message)  # once per kind of failure, not every round
        self._last_error = message
        report = PlacementReport(
            up=False,
            drifts=None,
            error=message,
            read_at=time.time(),
            last_success_at=self._last_success,
            duration_seconds=time.monotonic() - began,
            requests_total=dict(self._requests_total),
        )
        self._publish(report, section)
        return report

    def _publish(self, report: PlacementReport, section: PlacementSection | None) -> None:
        if section is not self.section:
            return  # read with a configuration a reload has replaced since
        self.store.publish_placement(report)

    async def _reconciled(
        self,
        section: PlacementSection,
        mapping: dict[str, str],
        sides: dict[str, HypervisorSide],
        limit: float,
    ) -> RoundAnswer:
        """Placement read and the fleet reconciled: in the worker process where there is one,
        else in a daemon thread (a hung Placement holds up nothing else; the reconciler of a
        round given up is left to it, the next round has another)."""
        if self._worker is not None:
            return await self._worker.reconcile(section, mapping, sides, limit)
        here = self._here
        try:
            return await asyncio.wait_for(
                run_in_daemon_thread(lambda: here.round(section, mapping, sides), name="placement-read"),
                timeout=limit,
            )
        except TimeoutError:
            self._here = Reconciler()
            raise

    def _audited(self) -> list[tuple[Hypervisor, HypervisorSnapshot]]:
        """The configured hypervisors with a good audit, and that audit (on the event loop: the
        store changes there)."""
        configured = {hypervisor.name: hypervisor for hypervisor in self.config.hypervisors}
        found = []
        for name, state in self.store.hypervisors.items():
            good = state.last_good
            hypervisor = configured.get(name)
            if (
                good is not None
                and good.facts is not None
                and good.capacity is not None
                and hypervisor is not None
            ):
                found.append((hypervisor, good))
        return found

    def _hosts(
        self, audited: list[tuple[Hypervisor, HypervisorSnapshot]]
    ) -> dict[str, tuple[str, HypervisorView]]:
        """Per hypervisor with a good audit: the provider it matches (its configured
        `placement_provider`, else the hostname libvirt gives, as Nova names its compute node)
        and what the reconciliation reads of it (its domains' records: `DomainRecords`)."""
        found: dict[str, tuple[str, HypervisorView]] = {}
        records: dict[str, DomainRecords] = {}
        for hypervisor, good in audited:
            assert good.facts is not None and good.capacity is not None  # _audited's
            kept = records[hypervisor.name] = DomainRecords.of(
                hypervisor.name, good, hypervisor.policy, self._records.get(hypervisor.name)
            )
            provider = hypervisor.placement_provider or good.facts.hostname
            found[hypervisor.name] = (
                provider,
                HypervisorView(hypervisor.name, None, good.capacity, kept.records),
            )
        self._records = records  # those no longer audited are forgotten
        return found

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
        self._here.close()


@dataclass(frozen=True, slots=True)
class DomainRecords:
    """One hypervisor's domains as the reconciliation reads them (`domain_record`), and what they
    were made from: its audit and policy, and per domain UUID its facts.

    Each round reads every hypervisor's last good audit, and an audit's domains are new objects
    even where nothing changed (a full audit of the test driver, a reconnect, a resync): a record
    is made again only for a domain whose facts differ from those its record was made from, and
    where none does, the records are the same tuple as before (so that the worker's sides compare
    by identity). Made in a thread, off the event loop, but holding the interpreter lock the
    scrapes need: made again every round, the 50,000 records of a 1,000-hypervisor fleet took 0.3
    to 0.8 s of it, and the scrapes that met it were the round's slowest."""

    snapshot: HypervisorSnapshot
    policy: HostPolicy
    records: tuple[DomainRecord, ...]
    made_from: Mapping[str, tuple[DomainFacts, DomainRecord]]

    @classmethod
    def of(
        cls, hypervisor: str, snapshot: HypervisorSnapshot, policy: HostPolicy, before: DomainRecords | None
    ) -> DomainRecords:
        """The records of the audit `snapshot`, those of `before` kept where their domain's facts
        are equal (and the policy is)."""
        if before is not None and before.snapshot is snapshot and before.policy == policy:
            return before
        facts = snapshot.facts
        assert facts is not None  # a good audit's
        same_policy = before is not None and before.policy == policy
        if before is not None and same_policy and _domains(before.snapshot) == facts.domains:
            return cls(snapshot, policy, before.records, before.made_from)  # the common case: one comparison
        known = before.made_from if before is not None and same_policy else {}
        made_from: dict[str, tuple[DomainFacts, DomainRecord]] = {}
        made: list[DomainRecord] = []
        for domain in facts.domains:
            kept = known.get(domain.uuid)
            if kept is None or kept[0] != domain:
                kept = (domain, domain_record(domain, hypervisor, policy))
            made_from[domain.uuid] = kept
            made.append(kept[1])
        return cls(snapshot, policy, tuple(made), made_from)


def _domains(snapshot: HypervisorSnapshot) -> tuple[DomainFacts, ...] | None:
    return snapshot.facts.domains if snapshot.facts is not None else None
