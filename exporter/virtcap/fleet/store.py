"""The latest audited state of every hypervisor, shared by the auditors and the web server.

Only the event loop touches it. Every change bumps `version` and wakes whoever renders the
exposition, so a scrape never waits for libvirt.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace

from virtcap.fleet.packing import PackingReport
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.tolerance import ToleranceReport
from virtcap.model.facts import CpuIdentity


@dataclass
class HypervisorState:
    name: str
    latest: HypervisorSnapshot | None = None
    """The newest outcome, success or failure; None until the first audit ends."""
    last_good: HypervisorSnapshot | None = None
    identity: CpuIdentity | None = None
    audits: Counter[str] = field(default_factory=Counter)
    """Finished audits by outcome: success, failure, timeout."""
    domain_reads: int = 0
    """Domain definitions read by the successful audits."""

    @property
    def up(self) -> bool:
        return self.latest is not None and self.latest.up


class SnapshotStore:
    def __init__(self) -> None:
        self.hypervisors: dict[str, HypervisorState] = {}
        self.version = 0
        self.ready_since: int | None = None
        """The version at which every hypervisor had been audited once (or had failed)."""
        self.changed = asyncio.Event()
        self.all_audited = asyncio.Event()
        """Set once, with `ready_since`."""
        self._never_audited: set[str] = set()
        self.tolerance: ToleranceReport | None = None
        """The fleet's failure tolerance as last computed (None until the first computation)."""
        self.packing: PackingReport | None = None
        """The packing answers last published (shown with the tolerance, see `publish_packing`)."""
        self.placement: PlacementReport | None = None
        """What the last reading of Placement found (None before the first, or without
        `placement:`), see `publish_placement`."""
        self._watchers: list[asyncio.Event] = []

    def track(self, names: list[str]) -> None:
        """Follow exactly these hypervisors: new ones start empty, removed ones are forgotten."""
        self.hypervisors = {name: self.hypervisors.get(name) or HypervisorState(name) for name in names}
        self._never_audited = {name for name, state in self.hypervisors.items() if state.latest is None}
        self._bump()

    def record(self, snapshot: HypervisorSnapshot, outcome: str) -> None:
        state = self.hypervisors.get(snapshot.name)
        if state is None:  # removed from the fleet while its audit ran
            return
        state.latest = snapshot
        self._never_audited.discard(snapshot.name)
        if snapshot.up:
            state.last_good = snapshot
        state.audits[outcome] += 1
        self._bump()

    def count_domain_reads(self, name: str, reads: int) -> None:
        """Before the audit's record(), which shows them."""
        state = self.hypervisors.get(name)
        if state is not None:
            state.domain_reads += reads

    def replace_good(self, name: str, audited: HypervisorSnapshot, updated: HypervisorSnapshot) -> None:
        """The last good audit recomputed with other pending claims: kept unless another audit
        was recorded since `audited` (it counted the claims already)."""
        state = self.hypervisors.get(name)
        if state is None or state.last_good is not audited:
            return
        if state.latest is state.last_good:
            state.latest = updated
        state.last_good = updated
        self._bump()

    def set_identity(self, name: str, identity: CpuIdentity) -> None:
        state = self.hypervisors.get(name)
        if state is not None:
            state.identity = identity
            self._bump()

    def publish_tolerance(self, report: ToleranceReport | None) -> None:
        """A new report shows the packing answers last published until the next come; None (the
        failure tolerance turned off) takes them away too."""
        if report is None:
            self.packing = None
        elif report.packing is None:
            report = replace(report, packing=self.packing)
        self.tolerance = report
        self._bump()

    def publish_packing(self, packing: PackingReport) -> None:
        """The packing answers as the worker last sent them, shown with the tolerance (they may
        come just before the report they follow is published)."""
        self.packing = packing
        if self.tolerance is not None:
            self.tolerance = replace(self.tolerance, packing=packing)
            self._bump()

    def publish_placement(self, report: PlacementReport | None) -> None:
        self.placement = report
        self._bump()

    def watch(self) -> asyncio.Event:
        """An event of one's own, set at every change: `changed` is the renderer's, which clears it."""
        event = asyncio.Event()
        self._watchers.append(event)
        return event

    def unwatch(self, event: asyncio.Event) -> None:
        if event in self._watchers:
            self._watchers.remove(event)

    @property
    def ready(self) -> bool:
        """Every hypervisor has been audited once or has failed."""
        return not self._never_audited  # kept as a set: checked on every change of a big fleet

    def until_next_stale(self, stale_after: float, now: float) -> float | None:
        """Seconds until the data of a down hypervisor turns stale (its series must then vanish,
        even if nothing else changes), None if no such data is waiting."""
        deadlines = [
            state.last_good.taken_at + stale_after
            for state in self.hypervisors.values()
            if not state.up and state.last_good is not None and state.last_good.taken_at + stale_after > now
        ]
        return max(min(deadlines) - now, 0.0) + 0.01 if deadlines else None

    def touch(self) -> None:
        """Something shown in /metrics changed outside the snapshots (a claim outcome)."""
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        if self.ready_since is None and self.ready:
            self.ready_since = self.version
            self.all_audited.set()
        self.changed.set()
        for event in self._watchers:
            event.set()
