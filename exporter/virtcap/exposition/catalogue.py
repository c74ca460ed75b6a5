"""Every metric family virtcap exposes, described once, as data.

The exposition builds its families from these entries (exposition/families.py), the metrics page of
the documentation is generated from them (`python -m virtcap.exposition.catalogue docs/metrics.md`),
and the tests hold both a real rendering and that page to them. Names, help texts and labels are what
dashboards and alerts query: changing one here changes /metrics.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from virtcap.exposition.metric_family import UNIT_LABEL, MetricFamily
from virtcap.exposition.packing_catalogue import PACKING_FAMILIES
from virtcap.exposition.placement_catalogue import PLACEMENT_FAMILIES
from virtcap.exposition.reclaim_families import RECLAIM_FAMILIES

AUDIT_OUTCOMES = ("success", "failure", "timeout")
CLAIM_OUTCOMES = ("created", "rejected", "reconciled", "expired", "deleted")
TASK_KINDS = (
    "audit",
    "render",
    "expire-claims",
    "follow-claims",
    "domain-history",
    "connections",
    "failure-tolerance",
    "placement",
)
"""The kinds of supervised background tasks (service/supervise.py), as the exporter starts them."""


_HYPERVISOR = ("hypervisor",)
_RESOURCE = ("hypervisor", "resource")
_AMOUNT = ("hypervisor", "resource", "unit")

HYPERVISOR_UP = MetricFamily(
    "hypervisor_up",
    "gauge",
    "1 if the last background audit of the hypervisor succeeded.",
    _HYPERVISOR,
    meaning="1 if the last audit succeeded",
)
RESOURCE_SIZE = MetricFamily(
    "hypervisor_resource_size",
    "gauge",
    "Physical amount of the resource, as of the last successful background audit.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="physical amount; of a custom class, its declared inventory (0 where a domain or claim uses "
    "a class the hypervisor does not offer)",
)
RESOURCE_RESERVED = MetricFamily(
    "hypervisor_resource_reserved",
    "gauge",
    "Amount kept for the host itself, taken out of the limit, as of the last successful background audit.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="kept for the host, out of the limit",
)
RESOURCE_LIMIT = MetricFamily(
    "hypervisor_resource_limit",
    "gauge",
    "(total - reserved) x allocation_ratio, truncated: what may be allocated (Placement capacity), as of "
    "the last successful background audit.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="`(total - reserved) x ratio` (Placement capacity)",
)
RESOURCE_USED = MetricFamily(
    "hypervisor_resource_used",
    "gauge",
    "Allocated to counted domains (as of the last successful background audit) plus held by pending claims; "
    "reserved is not included.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="allocated to counted domains + claimed (Placement usage; reserved not included)",
)
RESOURCE_FREE = MetricFamily(
    "hypervisor_resource_free",
    "gauge",
    "limit - used, from the last successful background audit and pending claims; negative when allocations "
    "exceed the allocation-ratio policy.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="`limit - used`, negative past the policy",
)
RESOURCE_ACTUAL_USAGE = MetricFamily(
    "hypervisor_resource_actual_usage",
    "gauge",
    "What the host really uses: busy CPUs, memory in use (Nova's formula), storage used, as of the last "
    "successful background audit.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="busy CPUs, memory in use, storage used (no series where unknown: busy CPUs need two "
    "samples of a driver that measures CPU time, which libvirt's test driver does not; none for a "
    "custom class)",
)
RESOURCE_ALLOCATION_RATIO = MetricFamily(
    "hypervisor_resource_allocation_ratio",
    "gauge",
    "Configured overcommit ratio of the resource.",
    _RESOURCE,
    "ratio",
    meaning="the overcommit policy",
)
RESOURCE_ALLOCATED = MetricFamily(
    "hypervisor_resource_allocated",
    "gauge",
    "Allocated to domains, by domain state (shut off domains count unless configured otherwise), as of the "
    "last successful background audit.",
    (*_AMOUNT, "state"),
    UNIT_LABEL,
    meaning="allocations by domain state (shut off ones shown even when not counted)",
)
RESOURCE_CLAIMED = MetricFamily(
    "hypervisor_resource_claimed",
    "gauge",
    "Held by pending claims, part of used.",
    _AMOUNT,
    UNIT_LABEL,
    meaning="held by pending claims (0 until claims exist)",
)
SCHEDULABLE_INSTANCES = MetricFamily(
    "hypervisor_schedulable_instances",
    "gauge",
    "How many more instances of the flavor fit on the hypervisor (0 while it is in maintenance), from the "
    "last successful background audit and pending claims.",
    ("hypervisor", "flavor"),
    meaning="how many more instances of the flavor fit (0 while the hypervisor is in maintenance)",
)
FLAVOR_BOTTLENECK = MetricFamily(
    "hypervisor_flavor_bottleneck",
    "gauge",
    "1 for the resource that limits how many more instances of the flavor fit on the hypervisor, from the "
    "last successful background audit and pending claims.",
    ("hypervisor", "flavor", "resource"),
    meaning="value 1 for the resource that runs out first for the flavor (never one without a limit; "
    "none while the hypervisor is in maintenance)",
)
DOMAINS = MetricFamily(
    "hypervisor_domains",
    "gauge",
    "Defined domains by state, as of the last successful background audit.",
    ("hypervisor", "state"),
    meaning="defined domains",
)
AUDIT_PROBLEMS = MetricFamily(
    "hypervisor_audit_problems",
    "gauge",
    "Problems the last successful background audit reported (unreadable domains or disks, missing storage, "
    "a configuration the hypervisor's inventory is refused for).",
    _HYPERVISOR,
    meaning="problems the last audit reported (unreadable domains, missing storage)",
)
INVENTORY_REFUSED = MetricFamily(
    "hypervisor_resource_inventory_refused",
    "gauge",
    "1 where Placement would hold no inventory of the resource (reserved above total, a CPU set naming "
    "offline CPUs): the hypervisor offers none of it; as of the last successful background audit.",
    _RESOURCE,
    meaning="1 where Placement would hold no inventory of the resource (reserved above total, a CPU "
    "set naming offline CPUs), else 0",
)
AUDIT_DURATION = MetricFamily(
    "hypervisor_audit_duration_seconds",
    "gauge",
    "Duration of the last successful background audit.",
    _HYPERVISOR,
    "seconds",
    meaning="duration of the last successful audit",
)
AUDIT_TIMESTAMP = MetricFamily(
    "hypervisor_audit_timestamp_seconds",
    "gauge",
    "Unix time of the last successful background audit.",
    _HYPERVISOR,
    "seconds",
    meaning="Unix time of the last successful audit",
)
AUDITS = MetricFamily(
    "virtcap_audits_total",
    "counter",
    "Finished background audits by outcome (success, failure, timeout).",
    ("hypervisor", "outcome"),
    label_values={"outcome": AUDIT_OUTCOMES},
    meaning="finished audits",
)
AUDIT_DOMAIN_READS = MetricFamily(
    "virtcap_audit_domain_reads_total",
    "counter",
    "Domain definitions read by the successful background audits: every domain in a full audit, "
    "only those that changed in an incremental one.",
    _HYPERVISOR,
    meaning="domain definitions read (one virDomainGetXMLDesc each); against `virtcap_audits_total` "
    "and `hypervisor_domains`, how much incremental audits save (`audit.incremental`)",
    stability="experimental",
)
CLAIMS_PENDING = MetricFamily(
    "virtcap_claims_pending",
    "gauge",
    "Claims held on the hypervisor, not yet reconciled.",
    _HYPERVISOR,
    meaning="claims held, not yet reconciled",
)
HYPERVISOR_INFO = MetricFamily(
    "hypervisor_info",
    "info",
    "Identity of the hypervisor as of the last successful background audit, value 1.",
    _HYPERVISOR,
    info_labels=("hostname", "hypervisor_type", "hypervisor_version", "libvirt_version", "cpu_model", "arch"),
    meaning="value 1",
)
GROUP_INFO = MetricFamily(
    "hypervisor_group_info",
    "info",
    "Membership of the hypervisor in a group of a kind (availability_zone, aggregate, rack, or "
    "any the configuration names), value 1: one series per membership, from the configuration.",
    _HYPERVISOR,
    info_labels=("kind", "group"),
    meaning="value 1 per group the hypervisor is in (`kind`: `availability_zone`, `aggregate`, `rack` "
    "or any kind the configuration names); per-group sums join it as the many side, "
    "`hypervisor_group_info * on(hypervisor) group_left() <one series per hypervisor>` (a host in two "
    "aggregates counts once in each). Shown whether the hypervisor is up or not, once audited",
)
BUILD_INFO = MetricFamily(
    "virtcap_build_info",
    "gauge",
    "virtcap's version, value 1.",
    ("version",),
    meaning="value 1",
)
CLAIMS = MetricFamily(
    "virtcap_claims_total",
    "counter",
    "Claims by outcome: created, rejected (did not fit), reconciled (their domain appeared), "
    "expired, deleted.",
    ("outcome",),
    label_values={"outcome": CLAIM_OUTCOMES},
    meaning="claims by outcome",
)
CLAIMS_DATABASE_UP = MetricFamily(
    "virtcap_claims_database_up",
    "gauge",
    "1 when the last exchange with the claims database succeeded, 0 while it refuses writes or "
    "cannot be reached: creating and deleting claims and setting maintenance then answer 503.",
    (),
    meaning="1 while the claims database (SQLite file or shared PostgreSQL) answers and accepts "
    "writes; 0 while claim and maintenance changes answer 503 (/metrics goes on either way)",
    stability="experimental",
)
TASK_FAILURES = MetricFamily(
    "virtcap_task_failures_total",
    "counter",
    "Crashes of the exporter's background tasks by kind (audit, render, expire-claims); each is "
    "logged and the task restarted with backoff.",
    ("task",),
    label_values={"task": TASK_KINDS},
    meaning="crashes of background tasks, each logged and restarted",
)
TASKS_DEAD = MetricFamily(
    "virtcap_tasks_dead",
    "gauge",
    "Background tasks of the kind waiting for a restart after a crash; /-/healthy fails meanwhile.",
    ("task",),
    meaning="tasks of the kind waiting for their restart after a crash",
)

_CELL_AMOUNT = ("hypervisor", "cell", "resource", "unit")
_CELL_PAGES = ("hypervisor", "cell", "page_size_bytes")
_PCI_POOL = ("hypervisor", "pool", "vendor_id", "product_id", "device_type", "numa_node", "physical_network")
_CELL_RESOURCES = {"resource": ("vcpu", "pcpu", "memory")}

NUMA_CELL_SIZE = MetricFamily(
    "hypervisor_numa_cell_size",
    "gauge",
    "What one NUMA cell has, as Nova's NUMA accounting splits it: CPUs of the shared set (vcpu) and of the "
    "dedicated set (pcpu), memory; as of the last successful background audit.",
    _CELL_AMOUNT,
    UNIT_LABEL,
    label_values=_CELL_RESOURCES,
    meaning="the cell's CPUs of the shared set (`vcpu`) and of the dedicated set (`pcpu`), and its "
    "memory; without CPU sets Nova counts every CPU in both",
)
NUMA_CELL_LIMIT = MetricFamily(
    "hypervisor_numa_cell_limit",
    "gauge",
    "What the cell may give guests: shared CPUs x cpu allocation ratio, dedicated CPUs, memory x ram "
    "allocation ratio (Nova's NUMA limits); as of the last successful background audit.",
    _CELL_AMOUNT,
    UNIT_LABEL,
    label_values=_CELL_RESOURCES,
    meaning="shared CPUs x the vCPU ratio, dedicated CPUs, memory x the memory ratio: Nova's NUMA limits",
)
NUMA_CELL_USED = MetricFamily(
    "hypervisor_numa_cell_used",
    "gauge",
    "What counted domains with a NUMA placement (as of the last successful background audit) and pending "
    "claims take from the cell: floating vCPUs, pinned dedicated CPUs, memory.",
    _CELL_AMOUNT,
    UNIT_LABEL,
    label_values=_CELL_RESOURCES,
    meaning="floating vCPUs, pinned dedicated CPUs and memory of counted domains with a NUMA "
    "placement and of pending claims carrying extra specs (Nova counts no cell usage for an "
    "instance without a NUMA topology)",
)
NUMA_CELL_FREE = MetricFamily(
    "hypervisor_numa_cell_free",
    "gauge",
    "limit - used in the cell, from the last successful background audit and pending claims; negative past "
    "the policy.",
    _CELL_AMOUNT,
    UNIT_LABEL,
    label_values=_CELL_RESOURCES,
    meaning="`limit - used` in the cell",
)
HUGEPAGES = MetricFamily(
    "hypervisor_numa_cell_hugepages",
    "gauge",
    "Hugepages of the size in the cell, as of the last successful background audit.",
    _CELL_PAGES,
    meaning="hugepages of the size in the cell (small pages are not shown: their free count is not capacity)",
)
HUGEPAGES_RESERVED = MetricFamily(
    "hypervisor_numa_cell_hugepages_reserved",
    "gauge",
    "Hugepages of the size kept for the host (Nova's reserved_huge_pages), as of the last successful "
    "background audit.",
    _CELL_PAGES,
    meaning="kept for the host (`reserved_huge_pages`)",
)
HUGEPAGES_USED = MetricFamily(
    "hypervisor_numa_cell_hugepages_used",
    "gauge",
    "Hugepages of the size held by counted domains whose memory they back (as of the last successful "
    "background audit), and by pending claims.",
    _CELL_PAGES,
    meaning="held by counted domains and pending claims",
)
HUGEPAGES_FREE = MetricFamily(
    "hypervisor_numa_cell_hugepages_free",
    "gauge",
    "total - reserved - used: what the next guest can get, as Nova counts it, from the last successful "
    "background audit and pending claims.",
    _CELL_PAGES,
    meaning="`total - reserved - used`, as Nova counts what the next guest can get",
)
HUGEPAGES_KERNEL_FREE = MetricFamily(
    "hypervisor_numa_cell_hugepages_kernel_free",
    "gauge",
    "Free hugepages of the size in the cell as the kernel reports them (virNodeGetFreePages), as of the "
    "last successful background audit.",
    _CELL_PAGES,
    meaning="free as the kernel says (`virNodeGetFreePages`): below Nova's free count when "
    "something beside the counted domains holds pages, above it while pending claims hold pages "
    "no guest has taken yet",
)
PCI_POOL_DEVICES = MetricFamily(
    "hypervisor_pci_pool_devices",
    "gauge",
    "Passthrough devices of the PCI pool (devices Nova pools together: same ids, NUMA node, type, tags and "
    "physical function), as of the last successful background audit.",
    _PCI_POOL,
    label_values={"device_type": ("type-PCI", "type-PF", "type-VF")},
    meaning="devices of a pool as Nova pools them (`pool`: the physical function's address for "
    "VFs, the device's own otherwise; `numa_node` empty where the firmware tells none)",
)
PCI_POOL_DEVICES_FREE = MetricFamily(
    "hypervisor_pci_pool_devices_free",
    "gauge",
    "Devices of the pool no domain or pending claim holds (nor one holding their physical or virtual "
    "functions), from the last successful background audit and pending claims.",
    _PCI_POOL,
    label_values={"device_type": ("type-PCI", "type-PF", "type-VF")},
    meaning="devices of the pool still free",
)
PCI_ALIAS_DEVICES = MetricFamily(
    "hypervisor_pci_alias_devices",
    "gauge",
    "Passthrough devices a flavor asking for the PCI alias could get on the hypervisor, as of the last "
    "successful background audit.",
    ("hypervisor", "alias"),
    meaning="devices a `pci_passthrough:alias` of the alias could be given (a device matching two "
    "aliases counts for each: sum per alias, not over aliases)",
)
PCI_ALIAS_DEVICES_FREE = MetricFamily(
    "hypervisor_pci_alias_devices_free",
    "gauge",
    "Of those, the free ones (without regard to NUMA affinity), from the last successful background audit "
    "and pending claims.",
    ("hypervisor", "alias"),
    meaning="of those, the free ones (NUMA affinity aside)",
)
GPU_VGPUS = MetricFamily(
    "hypervisor_gpu_vgpus",
    "gauge",
    "VGPU inventory of the physical GPU for its enabled mediated device type, as Nova reports it, as of the "
    "last successful background audit.",
    ("hypervisor", "gpu", "mdev_type"),
    meaning="a physical GPU's VGPU inventory (`gpu`: its PCI address), one Placement provider each",
)
GPU_VGPUS_USED = MetricFamily(
    "hypervisor_gpu_vgpus_used",
    "gauge",
    "Mediated devices of the GPU held by counted domains, as of the last successful background audit "
    "(pending claims name no GPU: they count in hypervisor_resource_claimed).",
    ("hypervisor", "gpu", "mdev_type"),
    meaning="held by counted domains",
)
GPU_VGPUS_FREE = MetricFamily(
    "hypervisor_gpu_vgpus_free",
    "gauge",
    "VGPUs of the GPU still free, as of the last successful background audit.",
    ("hypervisor", "gpu", "mdev_type"),
    meaning="`inventory - used`",
)
FLAVOR_PLACEMENT_LIMITED = MetricFamily(
    "hypervisor_flavor_placement_limited",
    "gauge",
    "1 where NUMA cells or PCI devices let fewer instances of the flavor fit than the whole-host amounts "
    "would, from the last successful background audit and pending claims.",
    ("hypervisor", "flavor", "constraint"),
    label_values={"constraint": ("numa", "pci")},
    meaning="value 1 where the flavor's NUMA fit (`numa`: cells, pinned CPUs, hugepages) or its "
    "devices (`pci`) hold its count below what the whole-host amounts allow",
)
HYPERVISOR_MAINTENANCE = MetricFamily(
    "hypervisor_maintenance",
    "gauge",
    "1 while the hypervisor is in maintenance (set by the configuration or the API): it is still "
    "audited and its allocations count, but no flavor fits there and the scheduler refuses it.",
    _HYPERVISOR,
    meaning="1 while the hypervisor is in maintenance (configuration or API), else 0: still audited, "
    "its allocations counted, but it offers nothing (schedulable instances 0, refused by placements, "
    "claims and evacuations); for every configured hypervisor, up or down",
)
MAINTENANCE_END = MetricFamily(
    "hypervisor_maintenance_end_timestamp_seconds",
    "gauge",
    "Unix time at which the maintenance of the hypervisor ends by itself; no series when it lasts "
    "until it is lifted.",
    _HYPERVISOR,
    "seconds",
    meaning="Unix time the maintenance ends by itself (`until`); no series while not in maintenance "
    "or when it lasts until lifted",
)
MAINTENANCE_START = MetricFamily(
    "hypervisor_maintenance_start_timestamp_seconds",
    "gauge",
    "Unix time at which the maintenance of the hypervisor started: the earliest start of its entries "
    "in effect (set through the API, or the configuration's first seen by the exporter).",
    _HYPERVISOR,
    "seconds",
    meaning="Unix time the maintenance started (the earliest entry in effect: its `PUT`, or when the "
    "exporter first saw the configuration's, kept across restarts); no series while not in maintenance",
    stability="experimental",
)

VCPU_WAIT = MetricFamily(
    "hypervisor_vcpu_wait_seconds_total",
    "counter",
    "Time the guests' vCPUs waited, runnable, for a physical CPU (libvirt's vcpu.<n>.delay, summed "
    "over running domains), counted from the hypervisor's first audit by this exporter, as of the last "
    "background audit; a domain that stops takes nothing back.",
    _HYPERVISOR,
    "seconds",
    meaning="time the guests' vCPUs spent runnable in the host's run queue instead of running (their "
    "steal time), summed over running domains; counted from the exporter's first audit of the "
    "hypervisor, never decreasing when domains stop (see [CPU contention](contention.md)); no series "
    "where the hypervisor does not report it (libvirt's test driver, libvirt before 7.2, no running "
    "domain yet)",
)

PROJECT_ALLOCATED = MetricFamily(
    "hypervisor_project_allocated",
    "gauge",
    "Allocated to the project's counted domains on the hypervisor, as of the last background audit: "
    "the largest projects by allocated memory (exposition.top_projects) over the hypervisors this "
    "exporter audits (its shard's, when sharded), the others summed "
    'as project_id="other"; domains without an owner are project_id="unknown".',
    ("hypervisor", "project_id", "project_name", "resource", "unit"),
    UNIT_LABEL,
    meaning="allocations of the project's counted domains, as the capacity counts them (summed over "
    "projects: the hypervisor's allocation); the owner is Nova's metadata, else the configured "
    "`ownership` element, else `unknown`; the fleet's `exposition.top_projects` largest projects by "
    'allocated memory each have series, the rest are summed as `project_id="other"`',
)
PROJECT_DOMAINS = MetricFamily(
    "hypervisor_project_domains",
    "gauge",
    "Counted domains of the project on the hypervisor, as of the last background audit (the same "
    "projects as hypervisor_project_allocated).",
    ("hypervisor", "project_id", "project_name"),
    meaning="counted domains of the project (the same projects and `other` as above)",
)
DOMAIN_ALLOCATED = MetricFamily(
    "hypervisor_domain_allocated",
    "gauge",
    "What the domain is allocated, in any state (the capacity counts it in the counted states only), "
    "as of the last background audit. Only with exposition.domains or --collector.domains.",
    ("hypervisor", "uuid", "resource", "unit"),
    UNIT_LABEL,
    meaning="opt-in (`exposition.domains`, `--collector.domains`): the domain's allocation whatever "
    "its state; join `hypervisor_domain_info` on `hypervisor, uuid` for its name, state and project",
)
DOMAIN_INFO = MetricFamily(
    "hypervisor_domain_info",
    "info",
    "The domain's name, state, Nova flavor and project as of the last background audit, value 1. "
    "Only with exposition.domains or --collector.domains.",
    ("hypervisor", "uuid"),
    info_labels=("name", "state", "flavor", "project_id", "project_name"),
    meaning="opt-in, value 1 (`flavor` empty for a domain Nova did not define)",
)

RESOURCE_AMOUNTS: tuple[MetricFamily, ...] = (
    RESOURCE_SIZE,
    RESOURCE_RESERVED,
    RESOURCE_LIMIT,
    RESOURCE_USED,
    RESOURCE_FREE,
    RESOURCE_ACTUAL_USAGE,
)
"""A resource's amounts, one series each where the amount is known."""

NUMA_CELL_AMOUNTS: tuple[MetricFamily, ...] = (
    NUMA_CELL_SIZE,
    NUMA_CELL_LIMIT,
    NUMA_CELL_USED,
    NUMA_CELL_FREE,
)
HUGEPAGE_COUNTS: tuple[MetricFamily, ...] = (
    HUGEPAGES,
    HUGEPAGES_RESERVED,
    HUGEPAGES_USED,
    HUGEPAGES_FREE,
    HUGEPAGES_KERNEL_FREE,
)

HYPERVISOR_FAMILIES: tuple[MetricFamily, ...] = (
    HYPERVISOR_UP,
    *RESOURCE_AMOUNTS,
    RESOURCE_ALLOCATION_RATIO,
    RESOURCE_ALLOCATED,
    RESOURCE_CLAIMED,
    SCHEDULABLE_INSTANCES,
    FLAVOR_BOTTLENECK,
    FLAVOR_PLACEMENT_LIMITED,
    DOMAINS,
    AUDIT_PROBLEMS,
    INVENTORY_REFUSED,
    AUDIT_DURATION,
    AUDIT_TIMESTAMP,
    AUDITS,
    AUDIT_DOMAIN_READS,
    CLAIMS_PENDING,
    HYPERVISOR_INFO,
    GROUP_INFO,
    *NUMA_CELL_AMOUNTS,
    *HUGEPAGE_COUNTS,
    PCI_POOL_DEVICES,
    PCI_POOL_DEVICES_FREE,
    PCI_ALIAS_DEVICES,
    PCI_ALIAS_DEVICES_FREE,
    GPU_VGPUS,
    GPU_VGPUS_USED,
    GPU_VGPUS_FREE,
    HYPERVISOR_MAINTENANCE,
    MAINTENANCE_START,
    MAINTENANCE_END,
    VCPU_WAIT,
    PROJECT_ALLOCATED,
    PROJECT_DOMAINS,
    DOMAIN_ALLOCATED,
    DOMAIN_INFO,
)
"""The families of the hypervisors, in the order they are rendered (/metrics and /probe)."""

EVACUATION_FEASIBLE = MetricFamily(
    "hypervisor_evacuation_feasible",
    "gauge",
    "1 if, were the hypervisor lost, every domain it holds could be scheduled again on the others this "
    "exporter audits (its shard's, when sharded; one by one, largest first, through the simulated Nova "
    "scheduler), as of the last background computation of the failure tolerance.",
    _HYPERVISOR,
    meaning="1 if every counted domain of the hypervisor could be scheduled again, one by one and "
    "largest first (memory, vCPUs, disk, name), on the other up hypervisors through the simulated "
    "scheduler, were the hypervisor lost; one series per hypervisor with fresh data, after the "
    "first computation (see [Failure tolerance](scheduling.md#failure-tolerance))",
)
EVACUATION_UNPLACED = MetricFamily(
    "hypervisor_evacuation_unplaced_domains",
    "gauge",
    "Domains of the hypervisor that would find no other hypervisor among those this exporter audits (its "
    "shard's, when sharded) were it lost, as of the last background computation of the failure tolerance.",
    _HYPERVISOR,
    meaning="how many of those domains would find no host (0 when feasible)",
)
HOST_FAILURES_TOLERATED = MetricFamily(
    "virtcap_fleet_host_failures_tolerated",
    "gauge",
    "How many of the hypervisors this exporter audits (its shard, when sharded: not the whole fleet) can be "
    "lost together, those with the most allocated memory first, with every domain scheduled again on the "
    "others it audits, as of the last background computation of the failure tolerance; at most "
    "virtcap_fleet_host_failures_bound.",
    (),
    meaning="how many hypervisors the fleet can lose together (the most allocated memory first) "
    "with every domain re-homed, up to the bound; with shards, of the exporter's shard only, re-homed "
    "within it",
)
HOST_FAILURES_BOUND = MetricFamily(
    "virtcap_fleet_host_failures_bound",
    "gauge",
    "The most hypervisors lost together that are simulated (scheduler.failure_tolerance.max_host_failures).",
    (),
    meaning="`scheduler.failure_tolerance.max_host_failures`",
)
TOLERANCE_TIMESTAMP = MetricFamily(
    "virtcap_failure_tolerance_timestamp_seconds",
    "gauge",
    "When the failure tolerance shown was computed in the background, from the audits as they were then.",
    (),
    "seconds",
    meaning="when the failure tolerance shown was computed (Unix time)",
)
TOLERANCE_DURATION = MetricFamily(
    "virtcap_failure_tolerance_duration_seconds",
    "gauge",
    "How long the last computation of the failure tolerance took, in its background thread.",
    (),
    "seconds",
    meaning="how long the last computation took (in the background)",
)
TOLERANCE_COMPUTATIONS = MetricFamily(
    "virtcap_failure_tolerance_computations_total",
    "counter",
    "Background computations of the failure tolerance: full (the whole fleet) or incremental (only what the "
    "hypervisors that changed can affect).",
    ("kind",),
    label_values={"kind": ("full", "incremental")},
    meaning="computations, whole fleet or only what a change affects",
)

FLEET_FAMILIES: tuple[MetricFamily, ...] = (
    EVACUATION_FEASIBLE,
    EVACUATION_UNPLACED,
    HOST_FAILURES_TOLERATED,
    HOST_FAILURES_BOUND,
    TOLERANCE_TIMESTAMP,
    TOLERANCE_DURATION,
    TOLERANCE_COMPUTATIONS,
)
"""The fleet's failure tolerance, computed in the background from every hypervisor's audit:
rendered after the hypervisors' families and only on /metrics; absent while it is off or before
its first computation."""

_STORAGE_POOL = ("pool",)
_SHARED = "as of the last background audit of the hypervisors that see it"

STORAGE_POOL_INFO = MetricFamily(
    "hypervisor_storage_pool_info",
    "info",
    "A hypervisor sees the shared storage pool (value 1), under the libvirt pool name `name`.",
    ("hypervisor", "pool"),
    info_labels=("name",),
    meaning="membership: the hypervisor has the shared pool `pool` active, under the libvirt name "
    "`name` (join on `pool` for the pool's families)",
)
STORAGE_POOL_SOURCE_INFO = MetricFamily(
    "hypervisor_storage_pool_source_info",
    "info",
    "Where a shared storage pool's data lives: its libvirt type, the servers hypervisors list for "
    "it, and what it is on them; value 1.",
    _STORAGE_POOL,
    info_labels=("type", "servers", "path"),
    meaning="value 1: the pool's libvirt `type` (`netfs`, `rbd`, `iscsi`, `gluster`...), `servers` "
    "(comma-separated) and `path` (the NFS export, the Ceph pool, the iSCSI target)",
)
STORAGE_POOL_HYPERVISORS = MetricFamily(
    "hypervisor_storage_pool_hypervisors",
    "gauge",
    "Hypervisors this exporter audits (its shard's, when sharded) that have the shared storage pool "
    "active, as of their last background audits.",
    _STORAGE_POOL,
    meaning="how many hypervisors have the pool active (with shards, of the exporter's shard: count "
    "the `hypervisor_storage_pool_info` series for the fleet's)",
)
STORAGE_POOL_CAPACITY = MetricFamily(
    "hypervisor_storage_pool_capacity_bytes",
    "gauge",
    f"Capacity of the shared storage pool, counted once for the fleet, {_SHARED}.",
    _STORAGE_POOL,
    "bytes",
    meaning="the pool's capacity as libvirt reports it, once per pool however many hypervisors see it",
)
STORAGE_POOL_USED = MetricFamily(
    "hypervisor_storage_pool_used_bytes",
    "gauge",
    f"Physically used in the shared storage pool (libvirt's pool allocation), {_SHARED}.",
    _STORAGE_POOL,
    "bytes",
    meaning="physically used (libvirt's pool allocation)",
)
STORAGE_POOL_PROVISIONED = MetricFamily(
    "hypervisor_storage_pool_provisioned_bytes",
    "gauge",
    f"Virtual capacities of the shared storage pool's volumes summed (what thin provisioning "
    f"promised), {_SHARED}.",
    _STORAGE_POOL,
    "bytes",
    meaning="the virtual capacities of its volumes summed: what thin provisioning promised",
)
STORAGE_POOL_PROVISIONED_RATIO = MetricFamily(
    "hypervisor_storage_pool_provisioned_ratio",
    "gauge",
    "Provisioned / capacity of the shared storage pool (thin-provisioning ratio; above 1 the "
    f"volumes were promised more than the pool holds), {_SHARED}.",
    _STORAGE_POOL,
    "ratio",
    meaning="`provisioned / capacity`, the thin-provisioning ratio (no series for a pool of no capacity)",
)
STORAGE_POOL_VOLUMES = MetricFamily(
    "hypervisor_storage_pool_volumes",
    "gauge",
    f"Volumes in the shared storage pool, {_SHARED}.",
    _STORAGE_POOL,
    meaning="volumes in the pool",
)

STORAGE_FAMILIES: tuple[MetricFamily, ...] = (
    STORAGE_POOL_INFO,
    STORAGE_POOL_SOURCE_INFO,
    STORAGE_POOL_HYPERVISORS,
    STORAGE_POOL_CAPACITY,
    STORAGE_POOL_USED,
    STORAGE_POOL_PROVISIONED,
    STORAGE_POOL_PROVISIONED_RATIO,
    STORAGE_POOL_VOLUMES,
)
"""Shared storage pools (netfs, rbd, iscsi...), once each for the fleet, matched across the
hypervisors that see them (virtcap.model.storage): rendered after the fleet's failure tolerance
and only on /metrics (a single target's /probe cannot tell which pools others share)."""

FLAVOR_SOURCES = ("configured", "discovered")
FLAVOR_INFO = MetricFamily(
    "virtcap_flavor_info",
    "info",
    "The flavors headroom is reported for, value 1: configured, or discovered in the Nova metadata of "
    "existing domains of the hypervisors this exporter audits (its shard's, when sharded) as of the last "
    "background audits.",
    ("flavor",),
    info_labels=("source",),
    label_values={"source": FLAVOR_SOURCES},
    meaning="value 1 per flavor of the headroom families: `configured`, or `discovered` in the Nova "
    "metadata of existing domains (`discover_flavors`); a discovered flavor goes when no domain carries "
    "it any more",
)

SHARD_ORDINAL = MetricFamily(
    "virtcap_shard_ordinal",
    "gauge",
    "The shard of the fleet this exporter audits and serves (--shard, sharding.shard), numbered from 0.",
    (),
    meaning="this exporter's shard, from 0 (`--shard`, `sharding.shard`; 0 when not sharded): it "
    "holds the hypervisors a consistent hash of their names assigns to it",
    stability="experimental",
)
TOTAL_SHARDS = MetricFamily(
    "virtcap_total_shards",
    "gauge",
    "How many exporters share the fleet, each auditing its own shard "
    "(--total-shards, sharding.total_shards).",
    (),
    meaning="how many shards the fleet is split into (`--total-shards`, `sharding.total_shards`; 1 when "
    "not sharded): `count(virtcap_shard_ordinal) < max(virtcap_total_shards)` says a shard is missing",
    stability="experimental",
)

EXPORTER_FAMILIES: tuple[MetricFamily, ...] = (
    BUILD_INFO,
    SHARD_ORDINAL,
    TOTAL_SHARDS,
    CLAIMS,
    CLAIMS_DATABASE_UP,
    TASK_FAILURES,
    TASKS_DEAD,
    FLAVOR_INFO,
)
"""The exporter's own families, rendered after the hypervisors' and only on /metrics."""

CATALOGUE: tuple[MetricFamily, ...] = (
    HYPERVISOR_FAMILIES
    + FLEET_FAMILIES
    + PACKING_FAMILIES
    + RECLAIM_FAMILIES
    + PLACEMENT_FAMILIES
    + STORAGE_FAMILIES
    + EXPORTER_FAMILIES
)
BY_NAME: Mapping[str, MetricFamily] = {family.name: family for family in CATALOGUE}
if len(BY_NAME) != len(CATALOGUE):
    raise ValueError("a family is catalogued twice")


# The metrics page's table, generated between these two lines.
TABLE_START = (
    "<!-- generated by `python -m virtcap.exposition.catalogue docs/metrics.md`: edit the catalogue -->"
)
TABLE_END = "<!-- end of the generated table -->"
TABLE_HEADER = ("| metric | type | labels | stability | meaning |", "|---|---|---|---|---|")


def label_cell(family: MetricFamily) -> str:
    """`hypervisor, outcome (`success`, `failure`, `timeout`)`: a label's fixed values after it."""
    cells = []
    for label in family.all_labels:
        values = family.label_values.get(label)
        cells.append(f"{label} ({', '.join(f'`{v}`' for v in values)})" if values else label)
    return ", ".join(cells) or "(none)"


def markdown_table(families: Sequence[MetricFamily] = CATALOGUE) -> str:
    rows = [f"| `{f.name}` | {f.type} | {label_cell(f)} | {f.stability} | {f.meaning} |" for f in families]
    return "\n".join([*TABLE_HEADER, *rows]) + "\n"


_TABLE = re.compile(
    rf"(^{re.escape(TABLE_START)}\n)(.*?)(^{re.escape(TABLE_END)}$)", re.MULTILINE | re.DOTALL
)


def generated_block(text: str) -> str:
    """The generated table of a document, between its marker lines."""
    found = _TABLE.search(text)
    if found is None:
        raise ValueError(f"no generated table: expected the lines {TABLE_START} ... {TABLE_END}")
    return found.group(2)


def with_table(text: str) -> str:
    """The document with its generated table replaced by the catalogue's."""
    generated_block(text)
    return _TABLE.sub(lambda found: found.group(1) + markdown_table() + found.group(3), text, count=1)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table, or with a path write it into that document between its markers."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stdout.write(markdown_table())
        return 0
    for name in args:
        path = Path(name)
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
