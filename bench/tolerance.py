"""Failure tolerance computed in process (`--only tolerance`)."""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace

from harness import (
    Table,
    cell,
    print_table,
)
from virtcap.demo.fleetgen import RUNNING, random_domain
from virtcap.model.facts import (
    DiskFacts,
    DomainFacts,
    DomainState,
    HostFacts,
    NovaFlavor,
    NovaInstance,
    StorageFacts,
)
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, HostState, fleet_tolerance, fleet_tolerance_update, host_state

GIB = 1024**3


def tolerance_facts(rng: random.Random, name: str, domains: int) -> HostFacts:
    """A test-driver-like hypervisor: one of three sizes, `domains` domains of fleetgen's flavors
    (half of them Nova guests), about 620 GiB of memory allocated on 768, 1,024 or 1,536 GiB."""
    cpus, memory_gib = rng.choice(((64, 768), (96, 1024), (128, 1536)))
    guests = []
    for index in range(domains):
        spec = random_domain(rng, name, index, RUNNING)
        flavor = spec.flavor
        vcpus, memory_mib = spec.vcpus, spec.memory_mib
        disks = tuple(
            DiskFacts(
                target=d.target,
                source=f"/images/{name}-{index}-{d.target}",
                local=True,
                capacity_bytes=d.capacity_gib * GIB,
            )
            for d in spec.disks
            if d.kind in ("file", "volume")
        )
        nova = None
        if flavor is not None:
            nova = NovaInstance(
                NovaFlavor(
                    flavor.name,
                    flavor.vcpus,
                    flavor.memory_mib,
                    flavor.root_gib,
                    flavor.ephemeral_gib,
                    flavor.swap_mib,
                )
            )
        guests.append(
            DomainFacts(
                name=spec.name,
                uuid=spec.uuid,
                state=DomainState.RUNNING,
                vcpus=vcpus,
                memory_bytes=memory_mib * 1024**2,
                current_memory_bytes=None,
                hugepages=False,
                vcpu_pins=(None,) * vcpus,
                disks=disks,
                nova=nova,
            )
        )
    return HostFacts(
        hostname=name,
        hypervisor_type="QEMU",
        hypervisor_version="7.2.0",
        libvirt_version="9.0.0",
        cpus=cpus,
        online_cpus=None,
        memory_bytes=memory_gib * GIB,
        storage=StorageFacts("pool default", 8192 * GIB, 0),
        memory_in_use_bytes=None,
        memory_in_use_source=None,
        cpu_times=None,
        busy_cpus=None,
        domains=tuple(guests),
        audited_at=0.0,
        audit_duration_seconds=0.0,
    )


def tolerance_fleet(hypervisors: int, domains: int, seed: int = 5, *, full: bool = False) -> list[HostState]:
    """`full`: the same hypervisors with a quarter of their memory (192, 256 or 384 GiB for about
    620 GiB allocated), every one beyond its limit: no domain of any evacuation finds a host, and
    each lists why every other hypervisor refused it (the overcommitted fleet an operator looks
    at)."""
    rng = random.Random(seed)
    policy = HostPolicy()
    states = []
    for index in range(hypervisors):
        facts = tolerance_facts(rng, f"compute-{index:04d}", domains)
        if full:
            facts = replace(facts, memory_bytes=facts.memory_bytes // 4)
        states.append(host_state(f"compute-{index:04d}", facts, policy))
    return states


def full_fleet_tolerance(runs: int, hypervisors: int, domains: int) -> Table:
    """The full fleet's rows: its full computation, and one hypervisor changed (the first, then
    others: every evacuation has a domain that found no host, so each is computed again)."""
    hosts = tolerance_fleet(hypervisors, domains, full=True)
    full: list[float] = []
    result = None
    for _ in range(runs):
        began = time.perf_counter()
        result = fleet_tolerance(hosts, multipliers=SPREAD)
        full.append(time.perf_counter() - began)
    assert result is not None
    unplaced = sum(evacuated.unplaced_count for evacuated in result.evacuations.values())
    failed = sum(1 for evacuated in result.evacuations.values() if not evacuated.feasible)
    changed: list[float] = []
    for run in range(runs):
        smaller = tolerance_fleet_changed(hosts[run * 37 % len(hosts)])
        began = time.perf_counter()
        fleet_tolerance_update(result, smaller)
        changed.append(time.perf_counter() - began)
    label = f"full fleet ({failed:,} of {len(hosts):,} evacuations fail, {unplaced:,} domains find no host)"
    return [
        (f"{label}: full", cell(full, " s"), "< 30 s"),
        (f"{label}: one change", cell(changed, " s", 3), "< 2 s"),
    ]


def failure_tolerance(runs: int, hypervisors: int, domains: int) -> None:
    started = time.perf_counter()
    hosts = tolerance_fleet(hypervisors, domains)
    built = time.perf_counter() - started
    full: list[float] = []
    result = None
    for _ in range(runs):
        began = time.perf_counter()
        result = fleet_tolerance(hosts, multipliers=SPREAD)
        full.append(time.perf_counter() - began)
    assert result is not None
    # how many evacuations place a domain on each host: a change of a host none of them uses
    # keeps them all (typical: most hosts), one of the hosts they all use resumes them all from
    # the step that chose it (the worst)
    targets: dict[str, int] = dict.fromkeys((state.name for state in hosts), 0)
    for evacuated in result.evacuations.values():
        for name in {host for _, host in evacuated.placements}:
            targets[name] += 1
    unused = [name for name, count in targets.items() if count == 0]
    used = sorted((name for name in targets if targets[name] > 0), key=lambda name: (targets[name], name))
    median = used[len(used) // 2] if used else hosts[0].name
    busiest = max(targets, key=lambda name: (targets[name], name))
    by_name = {state.name: state for state in hosts}
    rows: Table = [
        ("full: every hypervisor's evacuation + the fleet's tolerated failures", cell(full, " s"), "< 30 s")
    ]
    for label, names in (
        (
            f"one change, typical: a hypervisor no evacuation uses ({len(unused):,} of {len(hosts):,})",
            unused,
        ),
        (
            f"one change: the median of the {len(used)} hypervisors some evacuation uses "
            f"({targets[median]} evacuations use it)",
            [median],
        ),
        (f"one change, worst: the hypervisor {targets[busiest]} evacuations use", [busiest]),
    ):
        changed = []
        for run in range(runs):
            state = by_name[names[run * 37 % len(names)]] if names else hosts[0]
            smaller = tolerance_fleet_changed(state)
            began = time.perf_counter()
            fleet_tolerance_update(result, smaller)
            changed.append(time.perf_counter() - began)
        rows.append((label, cell(changed, " s", 3), "< 2 s"))
    rows.extend(full_fleet_tolerance(runs, hypervisors, domains))
    infeasible = sum(1 for evacuated in result.evacuations.values() if not evacuated.feasible)
    print_table(
        f"Failure tolerance of {hypervisors:,} hypervisors x {domains} domains, {os.cpu_count()} CPUs, "
        f"one process (states built in {built:.1f} s; {infeasible} hypervisors cannot be evacuated, "
        f"{result.tolerated} failures tolerated of {result.bound})",
        ("computation", "time", "target"),
        rows,
    )


def tolerance_fleet_changed(state: HostState) -> HostState:
    """The hypervisor with one domain more (an m1.large claimed on it)."""
    large = Demand({Resource.VCPU: 4, Resource.MEMORY: 8 * GIB, Resource.DISK: 80 * GIB})
    return state.consume(large)
