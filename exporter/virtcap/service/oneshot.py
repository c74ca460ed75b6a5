"""One audit of the whole fleet, for `virtcap audit`: every hypervisor concurrently, each bounded
by the audit timeout, a failing one reported as down without holding up the others; and, for
`virtcap audit --placement`, one reading of Placement reconciled with those audits."""

from __future__ import annotations

import asyncio

from virtcap.audit.connection import AuditError, open_read_only, redact_uri
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.threads import run_in_daemon_thread
from virtcap.config import Config, Hypervisor
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.facts import HostFacts
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.placement import PlacementTask

CPU_SAMPLE_WINDOW = 0.5
"""Seconds between the two host CPU samples a one-shot audit needs to tell busy CPUs."""


def audit_hypervisor_blocking(hypervisor: Hypervisor, cpu_window: float) -> HostFacts:
    conn = open_read_only(hypervisor.uri)
    try:
        return audit_host(
            conn, hypervisor.uri, hypervisor.disk, cpu_window=cpu_window, ownership=hypervisor.ownership
        )
    finally:
        conn.close()


async def audit_fleet_once(config: Config, cpu_window: float = CPU_SAMPLE_WINDOW) -> list[HypervisorSnapshot]:
    slots = asyncio.Semaphore(config.audit.concurrency)

    async def audit_one(hypervisor: Hypervisor) -> HostFacts | HypervisorSnapshot:
        async with slots:
            call = run_in_daemon_thread(
                lambda: audit_hypervisor_blocking(hypervisor, cpu_window), name=f"audit-{hypervisor.name}"
            )
            try:
                async with asyncio.timeout(config.audit.timeout):
                    return await call
            except TimeoutError:
                return HypervisorSnapshot.failed(
                    hypervisor,
                    f"audit timed out after {config.audit.timeout:g}s ({redact_uri(hypervisor.uri)})",
                )
            except AuditError as error:
                return HypervisorSnapshot.failed(hypervisor, f"{error} ({redact_uri(hypervisor.uri)})")

    found = await asyncio.gather(*(audit_one(h) for h in config.hypervisors))
    # Every audit first: the flavors discovered anywhere in the fleet are fitted everywhere.
    audited = [
        (h.name, facts)
        for h, facts in zip(config.hypervisors, found, strict=True)
        if isinstance(facts, HostFacts)
    ]
    flavors = with_discovered_flavors(config, audited).flavor_demands
    return [
        HypervisorSnapshot.audited(hypervisor, facts, flavors) if isinstance(facts, HostFacts) else facts
        for hypervisor, facts in zip(config.hypervisors, found, strict=True)
    ]


async def reconcile_placement_once(config: Config, snapshots: list[HypervisorSnapshot]) -> PlacementReport:
    """One round of the exporter's Placement task (its bounds, its matching of providers), on a
    store holding these audits: the hypervisors that failed theirs are left out."""
    store = SnapshotStore()
    store.track([snapshot.name for snapshot in snapshots])
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
    task = PlacementTask(config, store)
    try:
        return await task.read_once()
    finally:
        task.close()
