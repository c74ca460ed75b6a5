"""Each hypervisor's view (`hypervisor_view`), taken again only when what it shows may differ.

Every render takes the views of the whole fleet on the event loop (they read what the loop
owns), in slices: 3.6 ms of the loop at 1,000 hypervisors, for every render, though an answer of
the worker (a compaction, sellable instances) changes none of them. A scrape that arrives
meanwhile waits for a slice at each turn of the loop it needs. A view is made again when its
hypervisor's state has changed (an audit recorded: a new snapshot), when its data turned stale
or fresh, or when its pending claims or its maintenance changed; otherwise the last one is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from virtcap.exposition.families import HypervisorView, hypervisor_view, is_fresh
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import HypervisorState
from virtcap.model.facts import CpuIdentity
from virtcap.model.maintenance import Maintenance


@dataclass(frozen=True, slots=True, eq=False)
class _Made:
    """A view and what it was made from. Snapshots are immutable and compared by identity: an
    audit records a new one, and comparing two by value would walk their facts."""

    latest: HypervisorSnapshot | None
    good: HypervisorSnapshot | None
    identity: CpuIdentity | None
    audits: int
    domain_reads: int
    fresh: bool
    pending_claims: int
    maintenance: tuple[Maintenance, ...] | None
    view: HypervisorView

    def shows(
        self,
        state: HypervisorState,
        fresh: bool,
        pending_claims: int,
        maintenance: tuple[Maintenance, ...] | None,
    ) -> bool:
        return (
            self.latest is state.latest
            and self.good is state.last_good
            and self.identity is state.identity
            and self.audits == state.audits.total()
            and self.domain_reads == state.domain_reads
            and self.fresh == fresh
            and self.pending_claims == pending_claims
            and self.maintenance == maintenance
        )


class KeptViews:
    """The last view of each hypervisor, by name; those no longer asked for are dropped."""

    def __init__(self) -> None:
        self._made: dict[str, _Made] = {}
        self._asked: set[str] = set()

    def view(
        self,
        state: HypervisorState,
        now: float,
        stale_after: float,
        pending_claims: Mapping[str, int],
        maintenance: Mapping[str, tuple[Maintenance, ...]] | None,
    ) -> HypervisorView:
        """What `hypervisor_view` makes of `state`, the last one where it would be the same."""
        self._asked.add(state.name)
        good = state.last_good
        fresh = is_fresh(good, now, stale_after)
        pending = pending_claims.get(state.name, 0)
        entries = maintenance.get(state.name, ()) if maintenance is not None else None
        made = self._made.get(state.name)
        if made is not None and made.shows(state, fresh, pending, entries):
            return made.view
        view = hypervisor_view(state, now, stale_after, pending_claims, maintenance)
        self._made[state.name] = _Made(
            state.latest,
            good,
            state.identity,
            state.audits.total(),
            state.domain_reads,
            fresh,
            pending,
            entries,
            view,
        )
        return view

    def forget_unasked(self) -> None:
        """Drop the views of hypervisors not asked for since the last call (removed from the
        fleet): called after each render has taken every view."""
        for name in self._made.keys() - self._asked:
            del self._made[name]
        self._asked.clear()
