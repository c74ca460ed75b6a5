"""Metric families built from hypervisor snapshots, as prometheus-client custom collectors do.

Nothing here is a global gauge: every render builds its families from the snapshots it is given,
so the series of a removed domain or hypervisor simply stop being produced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from virtcap import __version__
from virtcap.model.capacity import RESOURCES
from virtcap.model.facts import CpuIdentity, DomainState
from virtcap.service.snapshot import HypervisorSnapshot
from virtcap.service.store import SnapshotStore

AUDIT_OUTCOMES = ("success", "failure", "timeout")
CLAIM_OUTCOMES = ("created", "rejected", "reconciled", "expired", "deleted")


@dataclass(frozen=True, slots=True)
class HypervisorView:
    """An immutable copy of one hypervisor's state, safe to render in another thread."""

    name: str
    up: bool
    data: HypervisorSnapshot | None = field(compare=False)
    """The snapshot whose resources are shown: the latest good one while it is not stale. Left out
    of equality: snapshots are immutable, so comparing them by identity is enough and far cheaper."""
    last_success: float | None
    last_duration: float | None
    identity: CpuIdentity | None
    audits: Mapping[str, int]
    pending_claims: int = 0


def views(
    store: SnapshotStore, now: float, stale_after: float, pending_claims: Mapping[str, int] | None = None
) -> tuple[HypervisorView, ...]:
    """Take on the event loop, render anywhere."""
    result = []
    for state in store.hypervisors.values():
        good = state.last_good
        fresh = good is not None and now - good.taken_at <= stale_after
        result.append(
            HypervisorView(
                name=state.name,
                up=state.up,
                data=good if fresh else None,
                last_success=good.taken_at if good is not None else None,
                last_duration=good.facts.audit_duration_seconds if good is not None and good.facts else None,
                identity=state.identity,
                audits=dict(state.audits),
                pending_claims=(pending_claims or {}).get(state.name, 0),
            )
        )
    return tuple(result)


class FamiliesCollector(Collector):
    """Ready-built families, for prometheus-client's text rendering."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _generate(families: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(families))
    return generate_latest(registry)


@dataclass(frozen=True, slots=True)
class TaskHealth:
    """The supervised background tasks, by kind (audit, render, expire-claims)."""

    failures: Mapping[str, int]
    dead: Mapping[str, int]


def render(
    hypervisors: Iterable[HypervisorView],
    claim_outcomes: Mapping[str, int] | None = None,
    tasks: TaskHealth | None = None,
) -> bytes:
    """The exposition; the exporter's own families (build info, claim outcomes, task health) come
    with `claim_outcomes`, and are left out of a single target's /probe."""
    families = build_families(hypervisors)
    if claim_outcomes is not None:
        families += exporter_families(claim_outcomes, tasks)
    return _generate(families)


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
        self._headers = _family_chunks(_generate(build_families(())).decode())
        self._fragments: dict[str, tuple[HypervisorView, list[str]]] = {}

    def render(
        self,
        hypervisors: Iterable[HypervisorView],
        claim_outcomes: Mapping[str, int] | None = None,
        tasks: TaskHealth | None = None,
    ) -> bytes:
        fragments = {}
        for view in hypervisors:
            kept = self._fragments.get(view.name)
            # Equal views render equally; `data` is compared by identity (see HypervisorView).
            if kept is None or kept[0] != view or kept[0].data is not view.data:
                text = _generate(build_families((view,))).decode()
                kept = (view, [_samples_only(chunk) for chunk in _family_chunks(text)])
            fragments[view.name] = kept
        self._fragments = fragments  # removed hypervisors are forgotten
        parts = []
        for index, header in enumerate(self._headers):
            parts.append(header)
            parts.extend(samples[index] for _view, samples in fragments.values())
        body = "".join(parts).encode()
        if claim_outcomes is not None:
            body += _generate(exporter_families(claim_outcomes, tasks))
        return body


_FAMILY_START = re.compile(r"^(?=# HELP )", re.MULTILINE)


def _family_chunks(text: str) -> list[str]:
    """The text format's families, each from its `# HELP` line on. A label value cannot hold a
    raw newline (it is escaped), so a line starting with `# HELP` always opens a family."""
    return [chunk for chunk in _FAMILY_START.split(text) if chunk]


def _samples_only(chunk: str) -> str:
    """A family's chunk without its `# HELP` and `# TYPE` lines."""
    return chunk.split("\n", 2)[2]


def exporter_families(claim_outcomes: Mapping[str, int], tasks: TaskHealth | None = None) -> list[Metric]:
    info = GaugeMetricFamily("virtcap_build_info", "virtcap's version, value 1.", labels=["version"])
    info.add_metric([__version__], 1)
    claims = CounterMetricFamily(
        "virtcap_claims",
        "Claims by outcome: created, rejected (did not fit), reconciled (their domain appeared), "
        "expired, deleted.",
        labels=["outcome"],
    )
    for outcome in CLAIM_OUTCOMES:
        claims.add_metric([outcome], claim_outcomes.get(outcome, 0))
    failures = CounterMetricFamily(
        "virtcap_task_failures",
        "Crashes of the exporter's background tasks by kind (audit, render, expire-claims); each is "
        "logged and the task restarted with backoff.",
        labels=["task"],
    )
    dead = GaugeMetricFamily(
        "virtcap_tasks_dead",
        "Background tasks of the kind waiting for a restart after a crash; /-/healthy fails meanwhile.",
        labels=["task"],
    )
    if tasks is not None:
        for kind in sorted(set(tasks.failures) | set(tasks.dead)):
            failures.add_metric([kind], tasks.failures.get(kind, 0))
            dead.add_metric([kind], tasks.dead.get(kind, 0))
    return [info, claims, failures, dead]


_RESOURCE_GAUGES = {
    "total": "Physical amount of the resource.",
    "reserved": "Amount kept for the host itself, taken out of the limit.",
    "limit": "(total - reserved) x allocation_ratio, truncated: what may be allocated (Placement capacity).",
    "used": "Allocated to counted domains plus held by pending claims; reserved is not included.",
    "free": "limit - used; negative when allocations exceed the allocation-ratio policy.",
    "actual_usage": "What the host really uses: busy CPUs, memory in use (Nova's formula), storage used.",
}


def build_families(hypervisors: Iterable[HypervisorView]) -> list[Metric]:
    resource_labels = ["hypervisor", "resource", "unit"]
    up = GaugeMetricFamily(
        "hypervisor_up", "1 if the last audit of the hypervisor succeeded.", labels=["hypervisor"]
    )
    gauges = {
        key: GaugeMetricFamily(f"hypervisor_resource_{key}", help_text, labels=resource_labels)
        for key, help_text in _RESOURCE_GAUGES.items()
    }
    ratio = GaugeMetricFamily(
        "hypervisor_resource_allocation_ratio",
        "Configured overcommit ratio of the resource.",
        labels=["hypervisor", "resource"],
    )
    allocated = GaugeMetricFamily(
        "hypervisor_resource_allocated",
        "Allocated to domains, by domain state (shut off domains count unless configured otherwise).",
        labels=[*resource_labels, "state"],
    )
    claimed = GaugeMetricFamily(
        "hypervisor_resource_claimed", "Held by pending claims, part of used.", labels=resource_labels
    )
    schedulable = GaugeMetricFamily(
        "hypervisor_schedulable_instances",
        "How many more instances of the flavor fit on the hypervisor.",
        labels=["hypervisor", "flavor"],
    )
    bottleneck = GaugeMetricFamily(
        "hypervisor_flavor_bottleneck",
        "1 for the resource that limits how many more instances of the flavor fit on the hypervisor.",
        labels=["hypervisor", "flavor", "resource"],
    )
    domains = GaugeMetricFamily(
        "hypervisor_domains", "Defined domains by state.", labels=["hypervisor", "state"]
    )
    problems = GaugeMetricFamily(
        "hypervisor_audit_problems",
        "Problems the last audit reported (unreadable domains or disks, missing storage, a "
        "configuration the hypervisor's inventory is refused for).",
        labels=["hypervisor"],
    )
    refused = GaugeMetricFamily(
        "hypervisor_resource_inventory_refused",
        "1 where Placement would hold no inventory of the resource (reserved above total, a CPU set "
        "naming offline CPUs): the hypervisor offers none of it.",
        labels=["hypervisor", "resource"],
    )
    duration = GaugeMetricFamily(
        "hypervisor_audit_duration_seconds", "Duration of the last successful audit.", labels=["hypervisor"]
    )
    timestamp = GaugeMetricFamily(
        "hypervisor_audit_timestamp_seconds",
        "Unix time of the last successful audit.",
        labels=["hypervisor"],
    )
    audits = CounterMetricFamily(
        "virtcap_audits",
        "Finished audits by outcome (success, failure, timeout).",
        labels=["hypervisor", "outcome"],
    )
    pending = GaugeMetricFamily(
        "virtcap_claims_pending", "Claims held on the hypervisor, not yet reconciled.", labels=["hypervisor"]
    )
    info = InfoMetricFamily(
        "hypervisor",
        "Identity of the hypervisor, value 1.",
        labels=["hypervisor"],
    )
    for view in hypervisors:
        name = view.name
        up.add_metric([name], 1.0 if view.up else 0.0)
        pending.add_metric([name], view.pending_claims)
        for outcome in AUDIT_OUTCOMES:
            audits.add_metric([name, outcome], view.audits.get(outcome, 0))
        if view.last_success is not None:
            timestamp.add_metric([name], view.last_success)
        if view.last_duration is not None:
            duration.add_metric([name], view.last_duration)
        snapshot = view.data
        if snapshot is None or snapshot.capacity is None or snapshot.facts is None:
            continue
        facts, capacity = snapshot.facts, snapshot.capacity
        identity = view.identity or CpuIdentity(model="", arch="")
        info.add_metric(
            [name],
            {
                "hostname": facts.hostname,
                "hypervisor_type": facts.hypervisor_type,
                "hypervisor_version": facts.hypervisor_version,
                "libvirt_version": facts.libvirt_version,
                "cpu_model": identity.model,
                "arch": identity.arch,
            },
        )
        problems.add_metric([name], len(facts.problems) + len(capacity.problems))
        for state in DomainState:
            domains.add_metric([name, state.value], capacity.domains_by_state[state])
        for flavor, count in capacity.schedulable.items():
            schedulable.add_metric([name, flavor], count)
            limiting = capacity.bottlenecks.get(flavor)
            if limiting is not None:
                bottleneck.add_metric([name, flavor, limiting.value], 1)
        for resource in RESOURCES:
            rc = capacity.resources.get(resource)
            if rc is None:
                continue
            labels = [name, resource.value, resource.unit]
            # Unknown amounts (a total that could not be read, usage the driver cannot tell) get
            # no series: a 0 would read as "nothing left" or "idle".
            for key, amount in (
                ("total", rc.total),
                ("reserved", rc.reserved),
                ("limit", rc.limit),
                ("used", rc.used),
                ("free", rc.free),
                ("actual_usage", rc.actual),
            ):
                if amount is not None:
                    gauges[key].add_metric(labels, amount)
            ratio.add_metric([name, resource.value], rc.allocation_ratio)
            refused.add_metric([name, resource.value], 1 if rc.refused is not None else 0)
            claimed.add_metric(labels, rc.claimed)
            for state in DomainState:
                allocated.add_metric([*labels, state.value], rc.allocated_by_state[state])
    return [
        up,
        *gauges.values(),
        ratio,
        allocated,
        claimed,
        schedulable,
        bottleneck,
        domains,
        problems,
        refused,
        duration,
        timestamp,
        audits,
        pending,
        info,
    ]
