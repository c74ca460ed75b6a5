"""The /metrics exposition of a running exporter, rendered again only where it changed: each
hypervisor's samples (and its evacuation, stranded capacity and Placement drift) kept while what
they show stays equal, and joined with the families' headers into the text that rendering the
whole fleet at once (exposition/families.py's `render`) produces, byte for byte.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from prometheus_client.core import Metric

from virtcap.config.schema import ExpositionSection
from virtcap.exposition.families import (
    DEFAULT_EXPOSITION,
    EvacuationShown,
    HypervisorView,
    PlacementShown,
    TaskHealth,
    build_families,
    evacuations_shown,
    exporter_families,
    generate,
    hypervisors_evacuations,
    shown_names,
    storage_families,
    tolerance_families,
)
from virtcap.exposition.packing_families import answer_families, hypervisors_stranded, shown_stranded
from virtcap.exposition.placement_families import drift_families, placement_families
from virtcap.exposition.reclaim_families import reclaim_families
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.tolerance import ToleranceReport
from virtcap.model.ownership import ProjectRanking
from virtcap.model.packing.stranded import StrandedCapacity
from virtcap.model.placement_drift import Drift
from virtcap.model.reclaim import ReclaimableDomain
from virtcap.model.sharding import UNSHARDED, Shard


class FragmentCache:
    """The fleet's exposition, re-rendering only the hypervisors whose view changed.

    A hypervisor's samples are rendered by prometheus-client on their own and kept, split by
    family; a render joins every family's header with each hypervisor's kept samples, in fleet
    order, which is exactly what rendering the whole fleet at once produces. A fleet of a
    thousand hypervisors then costs one hypervisor's rendering per audit, not the fleet's: a long
    render holds the interpreter lock, and every audit thread coming back from libvirt waits for it.

    Not thread-safe: one render at a time.
    """

    def __init__(self) -> None:
        self._hypervisors: _KeptSamples[HypervisorView] = _KeptSamples(build_families(()), same=_same_view)
        self._rendered_with: tuple[ExpositionSection, dict[str, str]] | None = None
        """The options and shown projects the kept fragments were rendered with."""
        self._ranking = ProjectRanking()
        self._placement: tuple[PlacementReport | None, frozenset[str], bytes] | None = None
        """The Placement families' text, with the reading and the hypervisors shown it was
        rendered for: a round's answers change once an interval, a render happens at every scrape."""
        self._drifts: _KeptSamples[Drift] = _KeptSamples(placement_families(None, ()))
        """Per hypervisor shown, its drift and its samples of each Placement family."""
        self._evacuations: _KeptSamples[EvacuationShown] = _KeptSamples(hypervisors_evacuations(()))
        self._stranded: _KeptSamples[StrandedCapacity] = _KeptSamples(hypervisors_stranded(()))

    @property
    def projects(self) -> Mapping[str, str]:
        """The projects with series of their own as of the last render (id to name shown)."""
        return self._rendered_with[1] if self._rendered_with is not None else {}

    def render(
        self,
        hypervisors: Iterable[HypervisorView],
        claim_outcomes: Mapping[str, int] | None = None,
        tasks: TaskHealth | None = None,
        tolerance: ToleranceReport | None = None,
        *,
        exposition: ExpositionSection = DEFAULT_EXPOSITION,
        flavors: Mapping[str, str] | None = None,
        database_up: bool | None = None,
        shard: Shard = UNSHARDED,
        reclaimable: Sequence[ReclaimableDomain] = (),
        placement: PlacementShown | None = None,
    ) -> bytes:
        hypervisors = tuple(hypervisors)
        for view in hypervisors:
            self._ranking.update(view.name, view.data.projects if view.data is not None else ())
        self._ranking.keep_only({view.name for view in hypervisors})
        # Which projects have series of their own is the fleet's: when it changes (rarely: the
        # largest projects stay the largest), every hypervisor with data is rendered again.
        largest = self._ranking.largest(exposition.top_projects) if exposition.top_projects else {}
        rendered_with = (exposition, largest)
        if rendered_with != self._rendered_with:
            self._hypervisors.forget(lambda view: view.data is not None)
            self._rendered_with = rendered_with
        projects = rendered_with[1]
        # Joining a thousand hypervisors' fragments takes 10 ms of the render thread, holding the
        # interpreter lock the scrapes need: done again only when one of them changed, or the
        # fleet did (a packing answer, a claim's outcome, changes none of them).
        parts = [
            self._hypervisors.text(
                ((view.name, view) for view in hypervisors),
                lambda _name, view: build_families((view,), exposition, projects),
            )
        ]
        if claim_outcomes is not None:
            shown = list(hypervisors)
            parts.append(self._fleet_text(tolerance, shown))
            parts.append(generate(reclaim_families(reclaimable, projects, exposition.top_projects)))
            parts.append(self._placement_text(placement, shown))
            parts.append(
                generate(
                    storage_families(shown)
                    + exporter_families(claim_outcomes, tasks, flavors, database_up, shard)
                )
            )
        # joined once: each `+=` copied the whole body (megabytes at 1,000 hypervisors) again, in
        # the render thread, holding the interpreter lock the scrapes need
        return b"".join(parts)

    def _fleet_text(self, tolerance: ToleranceReport | None, hypervisors: Iterable[HypervisorView]) -> bytes:
        """`fleet_families`' text, byte for byte. Its per-hypervisor families (evacuations,
        stranded capacity: 40 ms at 1,000 hypervisors, in the render thread, holding the
        interpreter lock the scrapes need) are rendered again only for the hypervisors whose
        evacuation or stranded capacity changed: each audit renders, a claim changes one
        hypervisor's, and each packing answer (sellable instances, a compaction) none."""
        shown = shown_names(hypervisors)
        packing = tolerance.packing if tolerance is not None else None
        return b"".join(
            (
                self._evacuations.text(evacuations_shown(tolerance, shown), _one_evacuation),
                generate(tolerance_families(tolerance)),
                self._stranded.text(shown_stranded(packing, shown), _one_stranded),
                generate(answer_families(packing)),
            )
        )

    def _placement_text(
        self, placement: PlacementShown | None, hypervisors: Iterable[HypervisorView]
    ) -> bytes:
        if placement is None:  # not configured: a fleet without OpenStack never sees these families
            self._placement = None
            self._drifts = _KeptSamples(placement_families(None, ()))
            return b""
        shown = frozenset(view.name for view in hypervisors if view.data is not None)
        kept = self._placement
        if kept is None or kept[0] is not placement.report or kept[1] != shown:
            kept = (placement.report, shown, self._placement_body(placement.report, shown))
            self._placement = kept
        return kept[2]

    def _placement_body(self, report: PlacementReport | None, shown: frozenset[str]) -> bytes:
        """The Placement families' text, each hypervisor's samples kept while its drift stays
        equal: a reading of a large fleet changes few drifts, and rendering all of them again (190
        ms at 1,000 hypervisors, in the render thread, holding the interpreter lock the scrapes
        need) came at every round. Byte for byte `placement_families` rendered whole."""
        fleet = _family_chunks(generate(placement_families(report, ())).decode())
        drifts = report.drifts if report is not None and report.drifts is not None else {}
        shown_drifts = ((name, drift) for name, drift in drifts.items() if name in shown)
        return self._drifts.text(shown_drifts, drift_families, headers=fleet)


_Shows = TypeVar("_Shows")


class _KeptSamples(Generic[_Shows]):
    """Some families of every hypervisor, as one text: each hypervisor's samples kept while what
    they show stays equal, and the whole joined again only when one of them changed. Byte for
    byte the families rendered for the same hypervisors at once, in the same order."""

    def __init__(self, empty: list[Metric], same: Callable[[_Shows, _Shows], bool] = operator.eq) -> None:
        """`empty`: the families with no hypervisor; `same`: whether what a hypervisor shows still
        renders as its kept samples do (equal, by default)."""
        self._headers = _family_chunks(generate(empty).decode())
        self._same = same
        self._kept: dict[str, tuple[_Shows, list[str]]] = {}
        self._text = _joined(self._headers, [])

    def forget(self, stale: Callable[[_Shows], bool]) -> None:
        """The kept samples of what `stale` says no longer renders the same (the options they were
        rendered with changed), made again at the next `text`."""
        self._kept = {name: kept for name, kept in self._kept.items() if not stale(kept[0])}

    def text(
        self,
        shown: Iterable[tuple[str, _Shows]],
        families_of: Callable[[str, _Shows], list[Metric]],
        headers: list[str] | None = None,
    ) -> bytes:
        """The families of the hypervisors `shown`, each with what it shows; `families_of`: the
        families of one of them alone; `headers`: each family's chunk where it holds samples of the
        fleet's own (by default the families' empty chunks)."""
        joined_with = self._headers
        if headers is not None:
            self._headers = headers
        before = self._kept
        kept: dict[str, tuple[_Shows, list[str]]] = {}
        remade = False
        for name, shows in shown:
            found = before.get(name)
            if found is None or not self._same(found[0], shows):
                found = (shows, _samples_by_family(families_of(name, shows)))
                remade = True
            kept[name] = found
        if remade or list(kept) != list(before) or self._headers != joined_with:
            self._text = _joined(self._headers, [samples for _, samples in kept.values()])
        self._kept = kept
        return self._text


def _same_view(kept: HypervisorView, view: HypervisorView) -> bool:
    """Equal views render equally; `data` is compared by identity (see HypervisorView). Most
    renders are given the very views they were last (web/render.py keeps them): a dataclass's
    `==` compares every field even then, a thousand times a render."""
    return kept is view or (kept == view and kept.data is view.data)


def _one_evacuation(name: str, shows: EvacuationShown) -> list[Metric]:
    return hypervisors_evacuations([(name, shows)])


def _one_stranded(name: str, found: StrandedCapacity) -> list[Metric]:
    return hypervisors_stranded([(name, found)])


_FAMILY_START = re.compile(r"^(?=# HELP )", re.MULTILINE)


def _family_chunks(text: str) -> list[str]:
    """The text format's families, each from its `# HELP` line on. A label value cannot hold a
    raw newline (it is escaped), so a line starting with `# HELP` always opens a family."""
    return [chunk for chunk in _FAMILY_START.split(text) if chunk]


def _samples_by_family(families: list[Metric]) -> list[str]:
    """Each family's samples as text, without its `# HELP` and `# TYPE` lines."""
    return [_samples_only(chunk) for chunk in _family_chunks(generate(families).decode())]


def _joined(chunks: Sequence[str], fragments: Iterable[Sequence[str]]) -> bytes:
    """The exposition: each family's chunk (its header, and samples of its own), then each
    fragment's samples of that family, in order."""
    fragments = list(fragments)
    parts = []
    for index, chunk in enumerate(chunks):
        parts.append(chunk)
        # itemgetter: taken in C, where a generator ran a frame per hypervisor and family (47,000
        # at 1,000 hypervisors: most of a render's 12 ms)
        parts.extend(map(operator.itemgetter(index), fragments))
    return "".join(parts).encode()


def _samples_only(chunk: str) -> str:
    """A family's chunk without its `# HELP` and `# TYPE` lines."""
    return chunk.split("\n", 2)[2]
