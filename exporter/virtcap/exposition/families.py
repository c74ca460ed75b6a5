"""Metric families built from hypervisor snapshots, as prometheus-client custom collectors do;
what each family is (name, type, help, labels) is its entry in exposition/catalogue.py.

Nothing here is a global gauge: every render builds its families from the snapshots it is given,
so the series of a removed domain or hypervisor simply stop being produced.
A running exporter renders them through exposition/fragments.py, which keeps what did not change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from virtcap import __version__
from virtcap.config.schema import ExpositionSection
from virtcap.exposition import catalogue
from virtcap.exposition.catalogue import AUDIT_OUTCOMES, CLAIM_OUTCOMES
from virtcap.exposition.metric_family import MetricFamily
from virtcap.exposition.packing_families import (
    answer_families,
    stranded_families,
)
from virtcap.exposition.placement_families import placement_families
from virtcap.exposition.reclaim_families import reclaim_families
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import HypervisorState, SnapshotStore
from virtcap.fleet.tolerance import HostEvacuation, ToleranceReport
from virtcap.model.capacity import HostCapacity, domain_allocation
from virtcap.model.facts import CpuIdentity, DomainState, HostFacts
from virtcap.model.host_fit import cell_amounts
from virtcap.model.maintenance import Maintenance, maintenance_end, maintenance_start
from virtcap.model.ownership import domain_project, largest_projects, shown_projects
from virtcap.model.reclaim import ReclaimableDomain
from virtcap.model.resources import display_order
from virtcap.model.sharding import UNSHARDED, Shard
from virtcap.model.storage import shared_pools


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
    domain_reads: int = 0
    maintenance: tuple[Maintenance, ...] = ()
    """The maintenance entries in effect (none: in service), whatever its audits say."""
    groups: tuple[tuple[str, str], ...] = ()
    """(kind, group) of each group it is in, as its latest audit's configuration has them."""


def views(
    store: SnapshotStore,
    now: float,
    stale_after: float,
    pending_claims: Mapping[str, int] | None = None,
    maintenance: Mapping[str, tuple[Maintenance, ...]] | None = None,
) -> tuple[HypervisorView, ...]:
    """Take on the event loop, render anywhere (`hypervisor_view` of each)."""
    return tuple(
        hypervisor_view(state, now, stale_after, pending_claims, maintenance)
        for state in store.hypervisors.values()
    )


def hypervisor_view(
    state: HypervisorState,
    now: float,
    stale_after: float,
    pending_claims: Mapping[str, int] | None = None,
    maintenance: Mapping[str, tuple[Maintenance, ...]] | None = None,
) -> HypervisorView:
    """A hypervisor whose data is shown is in maintenance as its capacity was computed (so that
    the gauge and the zero counts change together); any other as `maintenance` says (the claims
    ledger's entries in effect), or without it as its last audit had it."""
    good = state.last_good
    fresh = is_fresh(good, now, stale_after)
    if good is not None and fresh:
        entries = good.maintenance
    elif maintenance is not None:
        entries = maintenance.get(state.name, ())
    else:
        entries = state.latest.maintenance if state.latest is not None else ()
    configured = state.latest.hypervisor if state.latest is not None else None
    return HypervisorView(
        name=state.name,
        up=state.up,
        data=good if fresh else None,
        last_success=good.taken_at if good is not None else None,
        last_duration=good.facts.audit_duration_seconds if good is not None and good.facts else None,
        identity=state.identity,
        audits=dict(state.audits),
        domain_reads=state.domain_reads,
        pending_claims=(pending_claims or {}).get(state.name, 0),
        maintenance=entries,
        groups=configured.groups if configured is not None else (),
    )


def is_fresh(good: HypervisorSnapshot | None, now: float, stale_after: float) -> bool:
    """Whether the last good audit's data is shown (not stale at `now`)."""
    return good is not None and now - good.taken_at <= stale_after


class FamiliesCollector(Collector):
    """Ready-built families, for prometheus-client's text rendering."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def generate(families: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(families))
    return generate_latest(registry)


@dataclass(frozen=True, slots=True)
class TaskHealth:
    """The supervised background tasks, by kind (audit, render, expire-claims)."""

    failures: Mapping[str, int]
    dead: Mapping[str, int]


DEFAULT_EXPOSITION = ExpositionSection()


def projects_shown(hypervisors: Iterable[HypervisorView], exposition: ExpositionSection) -> dict[str, str]:
    """The projects with series of their own: the largest by allocated memory among the shown
    hypervisors (a /probe: the one target's), id to the name shown."""
    if not exposition.top_projects:
        return {}
    usages = (usage for view in hypervisors if view.data is not None for usage in view.data.projects)
    return largest_projects(usages, exposition.top_projects)


def render(
    hypervisors: Iterable[HypervisorView],
    claim_outcomes: Mapping[str, int] | None = None,
    tasks: TaskHealth | None = None,
    tolerance: ToleranceReport | None = None,
    *,
    exposition: ExpositionSection = DEFAULT_EXPOSITION,
    projects: Mapping[str, str] | None = None,
    flavors: Mapping[str, str] | None = None,
    database_up: bool | None = None,
    reclaimable: Sequence[ReclaimableDomain] = (),
    placement: PlacementShown | None = None,
) -> bytes:
    """The exposition; the fleet's failure tolerance and the exporter's own families (build info,
    claim outcomes, task health) come with `claim_outcomes`, and are left out of a single
    target's /probe. `projects`: those with series of their own (a /probe passes the fleet's),
    by default the largest among these hypervisors."""
    views = tuple(hypervisors)
    families = build_families(views, exposition, projects)
    if claim_outcomes is not None:
        families += fleet_families(tolerance, views)
        shown = projects_shown(views, exposition) if projects is None else projects
        families += reclaim_families(reclaimable, shown, exposition.top_projects)
        if placement is not None:  # not configured: a fleet without OpenStack never sees these families
            with_data = {view.name for view in views if view.data is not None}
            families += placement_families(placement.report, with_data)
        families += storage_families(views)
        families += exporter_families(claim_outcomes, tasks, flavors, database_up)
    return generate(families)


@dataclass(frozen=True, slots=True)
class PlacementShown:
    """`placement:` is configured: its families are shown, with the last reading (None before)."""

    report: PlacementReport | None


def fleet_families(tolerance: ToleranceReport | None, hypervisors: Iterable[HypervisorView]) -> list[Metric]:
    """The failure tolerance, then the packing answers computed after it, for the hypervisors
    whose data is shown (one that turned stale or was removed since the computation is left out
    at once); no series before the first."""
    shown = shown_names(hypervisors)
    packing = tolerance.packing if tolerance is not None else None
    return (
        evacuation_families(tolerance, shown)
        + tolerance_families(tolerance)
        + stranded_families(packing, shown)
        + answer_families(packing)
    )


def shown_names(hypervisors: Iterable[HypervisorView]) -> tuple[str, ...]:
    return tuple(view.name for view in hypervisors if view.data is not None)


def evacuation_families(tolerance: ToleranceReport | None, shown: Sequence[str]) -> list[Metric]:
    """`fleet_families`' first: each shown hypervisor's evacuation."""
    return hypervisors_evacuations(evacuations_shown(tolerance, shown))


EvacuationShown = tuple[bool, int]
"""What the evacuation families show of a hypervisor: whether its evacuation is feasible, and
how many of its domains it leaves unplaced."""


def hypervisors_evacuations(shown: Iterable[tuple[str, EvacuationShown]]) -> list[Metric]:
    """The evacuation families of these hypervisors, in this order."""
    feasible = catalogue.EVACUATION_FEASIBLE.gauge()
    unplaced = catalogue.EVACUATION_UNPLACED.gauge()
    for name, (is_feasible, unplaced_count) in shown:
        feasible.add_metric([name], 1 if is_feasible else 0)
        unplaced.add_metric([name], unplaced_count)
    return [feasible, unplaced]


def evacuations_shown(
    tolerance: ToleranceReport | None, shown: Sequence[str]
) -> list[tuple[str, EvacuationShown]]:
    if tolerance is None:
        return []
    found = ((name, tolerance.evacuations.get(name)) for name in shown)
    return [(name, _evacuation_shown(evacuation)) for name, evacuation in found if evacuation is not None]


def _evacuation_shown(evacuation: HostEvacuation) -> EvacuationShown:
    return evacuation.feasible, len(evacuation.unplaced)


def tolerance_families(tolerance: ToleranceReport | None) -> list[Metric]:
    """`fleet_families`' second: the fleet's tolerance."""
    tolerated = catalogue.HOST_FAILURES_TOLERATED.gauge()
    bound = catalogue.HOST_FAILURES_BOUND.gauge()
    timestamp = catalogue.TOLERANCE_TIMESTAMP.gauge()
    duration = catalogue.TOLERANCE_DURATION.gauge()
    computations = catalogue.TOLERANCE_COMPUTATIONS.counter()
    if tolerance is not None:
        tolerated.add_metric([], tolerance.tolerated)
        bound.add_metric([], tolerance.bound)
        timestamp.add_metric([], tolerance.computed_at)
        duration.add_metric([], tolerance.duration_seconds)
        for kind in catalogue.TOLERANCE_COMPUTATIONS.label_values["kind"]:
            computations.add_metric([kind], tolerance.computations.get(kind, 0))
    built: dict[MetricFamily, Metric] = {
        catalogue.HOST_FAILURES_TOLERATED: tolerated,
        catalogue.HOST_FAILURES_BOUND: bound,
        catalogue.TOLERANCE_TIMESTAMP: timestamp,
        catalogue.TOLERANCE_DURATION: duration,
        catalogue.TOLERANCE_COMPUTATIONS: computations,
    }
    return [built[family] for family in catalogue.FLEET_FAMILIES if family in built]


def storage_families(hypervisors: Iterable[HypervisorView]) -> list[Metric]:
    """The shared storage pools of the hypervisors whose data is shown, each once."""
    seen = {
        view.name: view.data.facts
        for view in hypervisors
        if view.data is not None and view.data.facts is not None and view.data.facts.shared_pools
    }
    gauges = {f: f.gauge() for f in catalogue.STORAGE_FAMILIES if f.type == "gauge"}
    membership = catalogue.STORAGE_POOL_INFO.info()
    source = catalogue.STORAGE_POOL_SOURCE_INFO.info()
    for pool in shared_pools(seen):
        labels = [pool.key]
        source.add_metric(labels, {"type": pool.type, "servers": ",".join(pool.servers), "path": pool.path})
        for hypervisor, name in pool.members:
            membership.add_metric([hypervisor, pool.key], {"name": name})
        gauges[catalogue.STORAGE_POOL_HYPERVISORS].add_metric(labels, len({h for h, _name in pool.members}))
        gauges[catalogue.STORAGE_POOL_CAPACITY].add_metric(labels, pool.capacity_bytes)
        gauges[catalogue.STORAGE_POOL_USED].add_metric(labels, pool.used_bytes)
        gauges[catalogue.STORAGE_POOL_PROVISIONED].add_metric(labels, pool.provisioned_bytes)
        if pool.provisioned_ratio is not None:
            gauges[catalogue.STORAGE_POOL_PROVISIONED_RATIO].add_metric(labels, pool.provisioned_ratio)
        gauges[catalogue.STORAGE_POOL_VOLUMES].add_metric(labels, pool.volumes)
    built: dict[MetricFamily, Metric] = {
        **gauges,
        catalogue.STORAGE_POOL_INFO: membership,
        catalogue.STORAGE_POOL_SOURCE_INFO: source,
    }
    return [built[family] for family in catalogue.STORAGE_FAMILIES]


def exporter_families(
    claim_outcomes: Mapping[str, int],
    tasks: TaskHealth | None = None,
    flavors: Mapping[str, str] | None = None,
    database_up: bool | None = None,
    shard: Shard = UNSHARDED,
) -> list[Metric]:
    """`flavors`: each flavor of the headroom families and its source (configured, discovered);
    `database_up`: whether the claims database answers (its family left out when None)."""
    flavor_info = catalogue.FLAVOR_INFO.info()
    for flavor, source in (flavors or {}).items():
        flavor_info.add_metric([flavor], {"source": source})
    info = catalogue.BUILD_INFO.gauge()
    info.add_metric([__version__], 1)
    claims = catalogue.CLAIMS.counter()
    for outcome in CLAIM_OUTCOMES:
        claims.add_metric([outcome], claim_outcomes.get(outcome, 0))
    database = catalogue.CLAIMS_DATABASE_UP.gauge()
    if database_up is not None:
        database.add_metric([], 1 if database_up else 0)
    failures = catalogue.TASK_FAILURES.counter()
    dead = catalogue.TASKS_DEAD.gauge()
    if tasks is not None:
        for kind in sorted(set(tasks.failures) | set(tasks.dead)):
            failures.add_metric([kind], tasks.failures.get(kind, 0))
            dead.add_metric([kind], tasks.dead.get(kind, 0))
    ordinal = catalogue.SHARD_ORDINAL.gauge()
    ordinal.add_metric([], shard.ordinal)
    total = catalogue.TOTAL_SHARDS.gauge()
    total.add_metric([], shard.total)
    built: dict[MetricFamily, Metric] = {
        catalogue.BUILD_INFO: info,
        catalogue.SHARD_ORDINAL: ordinal,
        catalogue.TOTAL_SHARDS: total,
        catalogue.CLAIMS: claims,
        catalogue.CLAIMS_DATABASE_UP: database,
        catalogue.TASK_FAILURES: failures,
        catalogue.TASKS_DEAD: dead,
        catalogue.FLAVOR_INFO: flavor_info,
    }
    return [built[family] for family in catalogue.EXPORTER_FAMILIES]


def build_families(
    hypervisors: Iterable[HypervisorView],
    exposition: ExpositionSection = DEFAULT_EXPOSITION,
    projects: Mapping[str, str] | None = None,
) -> list[Metric]:
    """The hypervisors' families, in the catalogue's order, each built from its catalogue entry;
    `projects` are those with series of their own (see projects_shown), by default the largest
    among these hypervisors."""
    hypervisors = tuple(hypervisors)
    shown = projects_shown(hypervisors, exposition) if projects is None else projects
    gauges = {f: f.gauge() for f in catalogue.HYPERVISOR_FAMILIES if f.type == "gauge"}
    audits = catalogue.AUDITS.counter()
    domain_reads = catalogue.AUDIT_DOMAIN_READS.counter()
    vcpu_wait = catalogue.VCPU_WAIT.counter()
    info = catalogue.HYPERVISOR_INFO.info()
    group_info = catalogue.GROUP_INFO.info()
    domain_info = catalogue.DOMAIN_INFO.info()
    up = gauges[catalogue.HYPERVISOR_UP]
    domains = gauges[catalogue.DOMAINS]
    problems = gauges[catalogue.AUDIT_PROBLEMS]
    duration = gauges[catalogue.AUDIT_DURATION]
    timestamp = gauges[catalogue.AUDIT_TIMESTAMP]
    pending = gauges[catalogue.CLAIMS_PENDING]
    for view in hypervisors:
        name = view.name
        up.add_metric([name], 1.0 if view.up else 0.0)
        pending.add_metric([name], view.pending_claims)
        _add_maintenance(gauges, view)
        _add_audit_counts(audits, domain_reads, view)
        if view.last_success is not None:
            timestamp.add_metric([name], view.last_success)
        if view.last_duration is not None:
            duration.add_metric([name], view.last_duration)
        # membership is configuration: shown while the hypervisor is down too, so that a group's
        # hosts down can be counted
        for kind, group in view.groups:
            group_info.add_metric([name], {"kind": kind, "group": group})
        snapshot = view.data
        if snapshot is None or snapshot.capacity is None or snapshot.facts is None:
            continue
        facts, capacity = snapshot.facts, snapshot.capacity
        if facts.vcpu_wait is not None:
            vcpu_wait.add_metric([name], facts.vcpu_wait.total_ns / 1e9)
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
        _add_flavors(gauges, name, capacity)
        _add_cells(gauges, name, capacity, facts)
        _add_devices(gauges, name, capacity)
        _add_resources(gauges, name, capacity)
        if exposition.top_projects:
            _add_projects(gauges, name, snapshot, shown)
        if exposition.domains:
            _add_domains(gauges, domain_info, name, snapshot)
    built: dict[MetricFamily, Metric] = {
        **gauges,
        catalogue.AUDITS: audits,
        catalogue.AUDIT_DOMAIN_READS: domain_reads,
        catalogue.VCPU_WAIT: vcpu_wait,
        catalogue.HYPERVISOR_INFO: info,
        catalogue.GROUP_INFO: group_info,
        catalogue.DOMAIN_INFO: domain_info,
    }
    return [built[family] for family in catalogue.HYPERVISOR_FAMILIES]


_Gauges = Mapping[MetricFamily, GaugeMetricFamily]


def _add_maintenance(gauges: _Gauges, view: HypervisorView) -> None:
    """Whether it is in maintenance, up or down (alerts about a host that is down leave out one
    taken down for its maintenance), since when and until when."""
    name, entries = view.name, view.maintenance
    gauges[catalogue.HYPERVISOR_MAINTENANCE].add_metric([name], 1 if entries else 0)
    start = maintenance_start(entries)
    if start is not None:
        gauges[catalogue.MAINTENANCE_START].add_metric([name], start)
    end = maintenance_end(entries)
    if end is not None:
        gauges[catalogue.MAINTENANCE_END].add_metric([name], end)


def _add_audit_counts(
    audits: CounterMetricFamily, domain_reads: CounterMetricFamily, view: HypervisorView
) -> None:
    for outcome in AUDIT_OUTCOMES:
        audits.add_metric([view.name, outcome], view.audits.get(outcome, 0))
    domain_reads.add_metric([view.name], view.domain_reads)


def _add_resources(gauges: _Gauges, name: str, capacity: HostCapacity) -> None:
    """Every class the capacity has, custom ones too (`custom_fpga`, counted in `integer`)."""
    amounts = [gauges[family] for family in catalogue.RESOURCE_AMOUNTS]
    for resource in display_order(capacity.resources):
        rc = capacity.resources[resource]
        labels = [name, resource.label, resource.unit]
        # Unknown amounts (a total that could not be read, usage the driver cannot tell) get no
        # series: a 0 would read as "nothing left" or "idle". In RESOURCE_AMOUNTS' order.
        for family, amount in zip(
            amounts, (rc.total, rc.reserved, rc.limit, rc.used, rc.free, rc.actual), strict=True
        ):
            if amount is not None:
                family.add_metric(labels, amount)
        gauges[catalogue.RESOURCE_ALLOCATION_RATIO].add_metric([name, resource.label], rc.allocation_ratio)
        gauges[catalogue.INVENTORY_REFUSED].add_metric(
            [name, resource.label], 1 if rc.refused is not None else 0
        )
        gauges[catalogue.RESOURCE_CLAIMED].add_metric(labels, rc.claimed)
        for state in DomainState:
            gauges[catalogue.RESOURCE_ALLOCATED].add_metric(
                [*labels, state.value], rc.allocated_by_state[state]
            )


def _add_projects(gauges: _Gauges, name: str, snapshot: HypervisorSnapshot, shown: Mapping[str, str]) -> None:
    """The shown projects' allocations and domains on the hypervisor, the others summed."""
    allocated = gauges[catalogue.PROJECT_ALLOCATED]
    domains = gauges[catalogue.PROJECT_DOMAINS]
    for project in shown_projects(snapshot.projects, shown):
        labels = [name, project.project_id, project.project_name]
        domains.add_metric(labels, project.domains)
        for resource, amount in project.allocated.items():
            allocated.add_metric([*labels, resource.label, resource.unit], amount)


def _add_domains(gauges: _Gauges, info: InfoMetricFamily, name: str, snapshot: HypervisorSnapshot) -> None:
    """Each domain's allocation and identity: opt-in, one series per domain and resource."""
    assert snapshot.facts is not None
    dedicated = snapshot.hypervisor.policy.cpu_dedicated_set if snapshot.hypervisor is not None else None
    allocated = gauges[catalogue.DOMAIN_ALLOCATED]
    seen: set[str] = set()
    for domain in snapshot.facts.domains:
        # libvirt keeps UUIDs unique on a hypervisor; a definition without one is told by its name
        uuid = domain.uuid or domain.name
        if uuid in seen:
            continue
        seen.add(uuid)
        project_id, project_name = domain_project(domain)
        info.add_metric(
            [name, uuid],
            {
                "name": domain.name,
                "state": domain.state.value,
                "flavor": domain.nova.flavor.name if domain.nova is not None else "",
                "project_id": project_id,
                "project_name": project_name,
            },
        )
        allocation = domain_allocation(domain, dedicated)
        for resource in display_order(allocation):
            allocated.add_metric([name, uuid, resource.label, resource.unit], allocation[resource])


def _add_flavors(gauges: _Gauges, name: str, capacity: HostCapacity) -> None:
    """How many more of each flavor fit, and what limits them: a class, or the cells or devices."""
    for flavor, count in capacity.schedulable.items():
        gauges[catalogue.SCHEDULABLE_INSTANCES].add_metric([name, flavor], count)
        limiting = capacity.bottlenecks.get(flavor)
        if limiting is not None:
            gauges[catalogue.FLAVOR_BOTTLENECK].add_metric([name, flavor, limiting.label], 1)
        constraint = capacity.limited_within.get(flavor)
        if constraint is not None:
            gauges[catalogue.FLAVOR_PLACEMENT_LIMITED].add_metric([name, flavor, constraint], 1)


def _add_cells(gauges: _Gauges, name: str, capacity: HostCapacity, facts: HostFacts) -> None:
    """Per NUMA cell its CPUs and memory (size, limit, used, free), and per hugepage size its
    pages: what Nova's NUMA accounting holds, with the kernel's own free count beside it."""
    within = capacity.within
    families = [gauges[family] for family in catalogue.NUMA_CELL_AMOUNTS]
    *nova_pages, kernel_pages = [gauges[family] for family in catalogue.HUGEPAGE_COUNTS]
    kernel_free = {
        (cell.id, page.size_kib): page.free
        for cell in facts.numa_cells
        for page in cell.pages
        if page.free is not None
    }
    for cell in within.cells:
        cell_id = str(cell.id)
        for amount in cell_amounts(cell, within.cpu_allocation_ratio, within.ram_allocation_ratio):
            labels = [name, cell_id, amount.resource.label, amount.resource.unit]
            for family, value in zip(
                families, (amount.size, amount.limit, amount.used, amount.free), strict=True
            ):
                family.add_metric(labels, value)
        base = min((size.size_kib for size in cell.pages), default=0)
        for size in cell.pages:
            if size.size_kib == base:  # the base pages are the cell's memory, shown as memory
                continue
            labels = [name, cell_id, str(size.size_kib * 1024)]
            for family, value in zip(
                nova_pages, (size.total, size.reserved, size.used, size.free), strict=True
            ):
                family.add_metric(labels, value)
            free = kernel_free.get((cell.id, size.size_kib))
            if free is not None:
                kernel_pages.add_metric(labels, free)


def _add_devices(gauges: _Gauges, name: str, capacity: HostCapacity) -> None:
    """PCI pools as Nova pools them, the devices each configured alias could get, and the vGPUs
    of each physical GPU."""
    # Pools differing only in tags the labels leave out (remote_managed, a physical network
    # spelt empty) share one series: their devices add up, never two samples of one series.
    pools: dict[tuple[str, ...], tuple[int, int]] = {}
    for pool in capacity.within.pci_pools:
        labels: tuple[str, ...] = (
            name,
            pool.address,
            pool.vendor_id,
            pool.product_id,
            pool.dev_type,
            "" if pool.numa_node is None else str(pool.numa_node),
            dict(pool.tags).get("physical_network", ""),
        )
        count, free = pools.get(labels, (0, 0))
        pools[labels] = (count + pool.count, free + pool.free)
    for pool_labels, (count, free) in pools.items():
        gauges[catalogue.PCI_POOL_DEVICES].add_metric(list(pool_labels), count)
        gauges[catalogue.PCI_POOL_DEVICES_FREE].add_metric(list(pool_labels), free)
    for alias, found in capacity.within.alias_devices().items():
        gauges[catalogue.PCI_ALIAS_DEVICES].add_metric([name, alias], found.devices)
        gauges[catalogue.PCI_ALIAS_DEVICES_FREE].add_metric([name, alias], found.free)
    for gpu in capacity.vgpus.gpus:
        gpu_labels = [name, gpu.address, gpu.mdev_type]
        gauges[catalogue.GPU_VGPUS].add_metric(gpu_labels, gpu.total)
        gauges[catalogue.GPU_VGPUS_USED].add_metric(gpu_labels, gpu.used)
        gauges[catalogue.GPU_VGPUS_FREE].add_metric(gpu_labels, gpu.free)
