"""Reclaimable capacity, kept up to date: each audit advances the history of its hypervisor's
domains (virtcap.model.reclaim) and stores what changed in the claims database, so that a restart
or a failover goes on from it.

A running domain's CPU-time sample changes at every audit; storing it every time would be a write
per domain and audit. A row is written when its state, the start of that state or of its idle
time changes, and otherwise at most every CHECKPOINT_SECONDS: after a restart, the time since the
stored sample is measured as one interval (its average use decides for all of it), which is what
the model does with any gap between samples.

The rows are written by a task of their own (`store_forever`), never by the audit that changed
them: a database locked by another process makes each write wait for its busy timeout, and audits
that waited for their writes, one after the other on the database's thread, went from once a
second to once every fifteen with three hypervisors. A database that fails loses nothing in
memory: what it refused is tried again, with whatever the audits changed since.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from virtcap.claims.maintenance_ledger import UNWRITTEN_RETRY_SECONDS
from virtcap.claims.storage import ClaimStorage, StorageError
from virtcap.config import ReclaimSettings
from virtcap.model.capacity import domain_allocation
from virtcap.model.facts import DomainFacts, DomainState, HostFacts
from virtcap.model.policy import HostPolicy
from virtcap.model.reclaim import (
    DomainHistory,
    DomainSample,
    ReclaimableDomain,
    ReclaimPolicy,
    advance_hypervisor,
    reclaimable_from,
)

log = logging.getLogger(__name__)

Candidate = tuple[DomainFacts, DomainHistory, frozenset[int] | None]
"""A domain of a hypervisor that may be reclaimable: its latest facts, its history, and the
hypervisor's dedicated CPUs (`cpu_dedicated_set`, None: none)."""

CHECKPOINT_SECONDS = 300.0
"""How often a running domain's CPU-time sample is stored when nothing else about it changed."""

Rows = dict[str, dict[str, DomainHistory | None]]
"""Rows to write, per hypervisor and UUID: a domain's newest history, or None to delete its row."""


def policy_of(settings: ReclaimSettings) -> ReclaimPolicy:
    return ReclaimPolicy(settings.shutoff_after, settings.idle_cpu_below, settings.idle_for)


def samples_of(facts: HostFacts, at: float) -> list[DomainSample]:
    """What one audit tells of each of its domains."""
    cpu = facts.domain_cpu_ns or {}
    return [DomainSample(d.uuid, d.state, d.vcpus, cpu.get(d.uuid), at) for d in facts.domains]


@dataclass(frozen=True, slots=True)
class _Decided:
    """One hypervisor's reclaimable domains as decided at `at`, from the candidates of its last
    audit, and until when time alone changes nothing of it (the first of the others to become
    reclaimable)."""

    candidates: list[Candidate]
    at: float
    until: float
    found: list[ReclaimableDomain]

    def holds(self, candidates: list[Candidate], at: float) -> bool:
        return self.candidates is candidates and self.at <= at < self.until


def _worth_storing(new: DomainHistory, stored: DomainHistory | None) -> bool:
    if stored is None:
        return True
    if (new.state, new.state_since, new.idle_since) != (stored.state, stored.state_since, stored.idle_since):
        return True
    if new.cpu_sampled_at is None:
        return False
    return stored.cpu_sampled_at is None or new.cpu_sampled_at - stored.cpu_sampled_at >= CHECKPOINT_SECONDS


class ReclaimTracker:
    """Every audited domain's history, per hypervisor, and which domains are reclaimable."""

    def __init__(self, policy: ReclaimPolicy, storage: ClaimStorage | None = None) -> None:
        self.policy = policy
        self.storage = storage
        self.histories: dict[str, dict[str, DomainHistory]] = {}
        self._stored: dict[str, dict[str, DomainHistory]] = {}
        """What the database holds, per hypervisor and UUID, as far as this exporter knows."""
        self._unwritten: Rows = {}
        """What the audits changed and `flush` has not taken yet."""
        self._writing: Rows = {}
        """What `flush` is writing: neither stored yet nor to write again, unless it fails."""
        self._changed = asyncio.Event()
        self._failing = False
        self._candidates: dict[str, list[Candidate]] = {}
        """Per hypervisor audited here, its counted domains shut off or idle as of its last audit,
        with their history and the hypervisor's dedicated CPUs, by name (an audit replaces the
        list whole, never changes it)."""
        self._decided: dict[str, _Decided] = {}

    async def start(self) -> None:
        """Read the history a previous run (or another replica) stored; an unreachable database
        starts from nothing, the next audits storing it again."""
        if self.storage is None:
            return
        try:
            stored = await self.storage.domain_history()
        except StorageError as error:
            log.error("domain history not read", extra={"error": str(error)})
            return
        for history in stored:
            self.histories.setdefault(history.hypervisor, {})[history.uuid] = history
            self._stored.setdefault(history.hypervisor, {})[history.uuid] = history

    def record(
        self, hypervisor: str, facts: HostFacts, policy: HostPolicy | None = None, now: float | None = None
    ) -> None:
        """Advance `hypervisor`'s domains with its latest audit, leaving what changed for
        `store_forever` to write. `policy` (the hypervisor's) says which domains hold capacity and
        which CPUs are dedicated; None: every domain, as a plain one would count."""
        at = time.time() if now is None else now
        previous = self.histories.get(hypervisor, {})
        current = advance_hypervisor(previous, samples_of(facts, at), hypervisor, self.policy.idle_cpu_below)
        self.histories[hypervisor] = current
        dedicated = policy.cpu_dedicated_set if policy is not None else None
        candidates = []
        for domain in sorted(facts.domains, key=lambda d: d.name):
            # a domain in a state the capacity does not count holds nothing to take back
            if policy is not None and domain.state not in policy.counted_states:
                continue
            history = current.get(domain.uuid)
            if history is not None and (
                history.state == DomainState.SHUTOFF or history.idle_since is not None
            ):
                candidates.append((domain, history, dedicated))
        self._candidates[hypervisor] = candidates
        stored = self._stored.get(hypervisor, {})
        changed = [h for h in current.values() if _worth_storing(h, stored.get(h.uuid))]
        self._to_write(
            changed, [(hypervisor, uuid) for uuid in self._known(hypervisor) if uuid not in current]
        )

    def keep_only(self, wanted: Iterable[str]) -> None:
        """The hypervisors this exporter audits from now on: those it audited before and no longer
        does (removed from the configuration) are forgotten. The others' rows stay, read or not:
        in a database shared by shards they are another shard's to keep."""
        self.forget(self._candidates.keys() - set(wanted))

    def forget(self, hypervisors: Iterable[str]) -> None:
        """These hypervisors' domains are forgotten, in memory and in the database."""
        names = set(hypervisors)
        for name in names:
            self.histories.pop(name, None)
            self._candidates.pop(name, None)
            self._decided.pop(name, None)
        self._to_write([], [(name, uuid) for name in names for uuid in self._known(name)])

    async def store_forever(self) -> None:
        """Write what the audits changed, as soon as they change it, until cancelled; a database
        that refuses is tried again every UNWRITTEN_RETRY_SECONDS."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if not await self.flush():
                await asyncio.sleep(UNWRITTEN_RETRY_SECONDS)
                self._changed.set()

    async def flush(self) -> bool:
        """Write what the audits changed so far, in one transaction; False if the database refused
        (it is kept, to write with the next)."""
        if self.storage is None or not self._unwritten:
            return True
        self._writing, self._unwritten = self._unwritten, {}
        changed = [h for rows in self._writing.values() for h in rows.values() if h is not None]
        gone = [(name, uuid) for name, rows in self._writing.items() for uuid, h in rows.items() if h is None]
        try:
            await self.storage.write_domain_history(changed, gone)
        except StorageError as error:
            self._give_back()
            if not self._failing:  # once per outage, not at every retry
                log.warning("domain history not stored", extra={"error": str(error)})
            self._failing = True
            return False
        except BaseException:  # cancelled (the exporter stopping), or a fault the supervisor logs
            self._give_back()
            raise
        self._writing = {}
        self._failing = False
        for hypervisor, uuid in gone:
            self._stored.get(hypervisor, {}).pop(uuid, None)
        for history in changed:
            self._stored.setdefault(history.hypervisor, {})[history.uuid] = history
        return True

    def _known(self, hypervisor: str) -> set[str]:
        """The UUIDs of `hypervisor` that may have a row, stored or about to be."""
        return (
            self._stored.get(hypervisor, {}).keys()
            | self._writing.get(hypervisor, {}).keys()
            | self._unwritten.get(hypervisor, {}).keys()
        )

    def _to_write(self, changed: list[DomainHistory], gone: list[tuple[str, str]]) -> None:
        if self.storage is None or not (changed or gone):
            return
        for history in changed:
            self._unwritten.setdefault(history.hypervisor, {})[history.uuid] = history
        for hypervisor, uuid in gone:
            self._unwritten.setdefault(hypervisor, {})[uuid] = None
        self._changed.set()

    def _give_back(self) -> None:
        """What `flush` failed to write is to write again, unless an audit changed it since."""
        for hypervisor, rows in self._writing.items():
            newer = self._unwritten.setdefault(hypervisor, {})
            for uuid, history in rows.items():
                newer.setdefault(uuid, history)
        self._writing = {}

    def reclaimable_domains(self, now: float | None = None) -> list[ReclaimableDomain]:
        """The domains reclaimable at `now`, by hypervisor and name, with their latest facts."""
        at = time.time() if now is None else now
        return [found for hypervisor in self.hypervisors() for found in self.reclaimable_on(hypervisor, at)]

    def hypervisors(self) -> list[str]:
        """The hypervisors audited here, by name: what `reclaimable_on` decides one at a time."""
        return sorted(self._candidates)

    def reclaimable_on(self, hypervisor: str, at: float) -> list[ReclaimableDomain]:
        """`hypervisor`'s domains reclaimable at `at`, by name. Only the candidates of its last
        audit are looked at (shut off or idle, and counted), and only again once an audit replaced
        them or one of them became reclaimable since: every render asks, on the event loop, and
        deciding 10,000 candidates each time took 5 to 9 ms of it (50,000 stopped test domains)."""
        candidates = self._candidates.get(hypervisor, [])
        kept = self._decided.get(hypervisor)
        if kept is not None and kept.holds(candidates, at):
            return kept.found
        found = []
        until = math.inf
        for domain, history, dedicated in candidates:
            pending = reclaimable_from(history, self.policy)
            if pending is None:
                continue
            start, why = pending
            if at < start:
                until = min(until, start)
                continue
            found.append(ReclaimableDomain(hypervisor, domain, why, domain_allocation(domain, dedicated)))
        self._decided[hypervisor] = _Decided(candidates, at, until, found)
        return found
