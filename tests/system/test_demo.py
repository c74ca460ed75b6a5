"""The bundled demo fleet: committed as generated, and shaped as promised."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.demo import GROUP_HEADROOM, GROUP_TOTALS, Totals, compute_05_maintenance
from tests.support.serving import parse_samples, series, value
from virtcap.config import Config
from virtcap.demo import DEMO_DIR, demo_config
from virtcap.demo.fleetgen import project_id
from virtcap.demo.generate import captured_hosts, demo_hosts, main
from virtcap.exposition.families import render, views
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import SimulatedHost, one_shot_tolerance, scheduler_host
from virtcap.model.capacity import HostCapacity
from virtcap.model.facts import DomainState
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import fleet_tolerance
from virtcap.service.oneshot import audit_fleet_once
from virtcap.units import format_utc


def test_committed_node_files_and_captures_are_what_the_generator_writes(tmp_path: Path) -> None:
    main(["generate", str(tmp_path)])
    generated = sorted(p.name for pattern in ("*.xml", "*.json") for p in tmp_path.glob(pattern))
    committed = sorted(p.name for pattern in ("*.xml", "*.json") for p in DEMO_DIR.glob(pattern))
    assert generated == committed
    assert {f"{host.name}.json" for host in captured_hosts()} <= set(generated)
    for name in generated:
        assert (tmp_path / name).read_bytes() == (DEMO_DIR / name).read_bytes(), (
            f"{name} is out of date: run `python -m virtcap.demo.generate`"
        )


def test_the_demo_has_what_the_dashboards_and_alerts_need() -> None:
    hosts = demo_hosts()
    assert len(hosts) >= 6
    assert all(20 <= len(host.domains) <= 200 for host in hosts)
    assert any(d.flavor is not None for host in hosts for d in host.domains)
    assert any(d.flavor is None for host in hosts for d in host.domains)

    snapshots = asyncio.run(audit_fleet_once(demo_config(), cpu_window=0.0))
    up = [s for s in snapshots if s.capacity is not None]
    captured = captured_hosts()
    assert len(up) == len(hosts) + len(captured)
    assert len(snapshots) == len(up) + 1  # and one unreachable host
    assert all(s.facts is not None and s.facts.problems == () for s in up)
    states = {state for s in up for state, count in s.capacity.domains_by_state.items() if count}  # type: ignore[union-attr]
    assert states == set(DomainState)

    def ratio(resource: Resource) -> list[float]:
        return [s.capacity.resources[resource].utilization or 0.0 for s in up]  # type: ignore[union-attr]

    assert max(ratio(Resource.VCPU)) > 1.0  # a host allocated past its vCPU limit
    assert any(0.9 < u <= 1.0 for u in ratio(Resource.MEMORY))  # a host near its memory limit
    assert any(s.capacity.resources[Resource.PCPU].used > 0 for s in up)  # type: ignore[union-attr]


def _demo_audit() -> tuple[Config, list[HypervisorSnapshot]]:
    config = demo_config()
    return config, asyncio.run(audit_fleet_once(config, cpu_window=0.0))


def test_compute_04_alone_cannot_be_lost_though_the_sums_say_the_fleet_can_lose_any_host() -> None:
    """The fleet's sum-based bound (sum(used) - (sum(limit) - max(limit)) over the hypervisors in
    service, the recording rule) passes for every resource, yet compute-04's database (256 GiB)
    finds no host: no host of its zone has that much memory free. Within availability zone az-1
    even the sums say so. Every other host's domains find one in its zone: compute-06's Windows
    guests on compute-01's licences, the pinned guests of compute-08 and compute-09 and those of
    compute-05 (in maintenance) on az-1's spare, compute-10, the spare's on compute-09, and
    compute-02's and compute-03's on az-2's spare, compute-11 (compute-10 has more room, in the
    other zone)."""
    config, snapshots = _demo_audit()
    up = {s.name: s for s in snapshots if s.facts is not None and s.capacity is not None}
    capacity = {name: s.capacity for name, s in up.items() if s.capacity is not None}
    in_service = {name: c for name, c in capacity.items() if c.maintenance is None}
    assert set(capacity) - set(in_service) == {"compute-05"}

    def bound(hosts: dict[str, HostCapacity], resource: Resource) -> int:
        offered = [c.resources[resource] for c in hosts.values() if resource in c.resources]
        limits = [r.limit or 0 for r in offered]
        return sum(r.used for r in offered) - (sum(limits) - max(limits))

    resources = {resource for c in in_service.values() for resource in c.resources}
    # memory, in GiB: used 1714 (az-1 1390 + az-2 324, GROUP_TOTALS below) - (limit 2624 - 767.5)
    assert bound(in_service, Resource.MEMORY) == -142.5 * GIB
    # vCPUs: used 538 - (limit 1040 - 256)
    assert bound(in_service, Resource.VCPU) == -246
    assert all(bound(in_service, resource) <= 0 for resource in resources)
    # within az-1 (in service: compute-01, -04, -06, -08, -09, -10): memory 1390 - (2055 - 767.5)
    az_1 = {n: c for n, c in in_service.items() if n in MEMBERS["availability_zone", "az-1"]}
    assert bound(az_1, Resource.MEMORY) == 102.5 * GIB
    assert bound(az_1, Resource.VCPU) == 25  # 361 - (592 - 256)

    states = [scheduler_host(SimulatedHost(name, snapshot, up=True)) for name, snapshot in up.items()]
    tolerance = fleet_tolerance(states, multipliers=config.multipliers)
    infeasible = {name: e for name, e in tolerance.evacuations.items() if not e.feasible}
    assert set(infeasible) == {"compute-04"}
    (database,) = infeasible["compute-04"].unplaced
    assert database.guest == "compute-04-db-01"
    assert len(infeasible["compute-04"].placements) == 168
    assert database.rejections["compute-01"].reasons == ("Free memory 108032.00 MiB < requested 262144 MiB",)
    assert dict(database.refused_by) == {"Placement": 5, "AvailabilityZoneFilter": 3, "ComputeFilter": 1}
    assert database.rejections["compute-11"].reasons == (
        "hypervisor compute-11 is in availability zone az-2, not in az-1 as requested",
    )
    free = {
        name: c.resources[Resource.MEMORY].free or 0 for name, c in in_service.items() if name != "compute-04"
    }
    # compute-11 (181.5 GiB free) would not hold it either, were it in az-1
    assert max(free.values()) == free["compute-10"] == 216 * GIB < 256 * GIB
    assert sum(free.values()) > capacity["compute-04"].resources[Resource.MEMORY].used == 592 * GIB

    def hosts(failed: str) -> dict[str, str]:
        return dict(tolerance.evacuations[failed].placements)

    edge = up["compute-06"].facts
    assert edge is not None
    windows = [
        d.name
        for d in edge.domains
        if d.nova and "resources:CUSTOM_WINDOWS_LICENCE" in d.nova.flavor.extra_specs
    ]
    assert len(windows) == 6 and {hosts("compute-06")[name] for name in windows} == {"compute-01"}
    pinned = ("db-01", "db-02", "nfv-01", "nfv-02")
    assert {hosts("compute-08")[f"compute-08-{name}"] for name in pinned} == {"compute-10"}
    assert set(hosts("compute-09").values()) == {"compute-10"}
    assert set(hosts("compute-05").values()) == {"compute-10"}
    assert hosts("compute-10")["compute-10-viz-01"] == "compute-09"
    assert set(hosts("compute-02").values()) == set(hosts("compute-03").values()) == {"compute-11"}
    assert set(hosts("compute-11").values()) == {"compute-03"}
    # no evacuation places a domain on the host in maintenance
    assert all(host != "compute-05" for e in tolerance.evacuations.values() for _, host in e.placements)


# The demo's groups (demo.yaml): two availability zones, each with its spare; three aggregates,
# compute-09 and compute-10 in two (gpu and pinned); three racks. compute-05 is in maintenance
# (by the configuration) and compute-07 is down: neither counts in a group's capacity, as the
# mixin's recording rules leave them out.
MEMBERS = {
    ("availability_zone", "az-1"): {
        "compute-01",
        "compute-04",
        "compute-05",
        "compute-06",
        "compute-08",
        "compute-09",
        "compute-10",
    },
    ("availability_zone", "az-2"): {"compute-02", "compute-03", "compute-07", "compute-11"},
    ("aggregate", "windows"): {"compute-01", "compute-06"},
    ("aggregate", "pinned"): {"compute-05", "compute-08", "compute-09", "compute-10"},
    ("aggregate", "gpu"): {"compute-09", "compute-10"},
    ("rack", "r1"): {"compute-01", "compute-04", "compute-05"},
    ("rack", "r2"): {"compute-06", "compute-08", "compute-09", "compute-10"},
    ("rack", "r3"): {"compute-02", "compute-03", "compute-07", "compute-11"},
}


def _in(unit: str, amount: int) -> float:
    return amount / GIB if unit == "memory" else amount


def test_each_groups_totals_count_its_members_in_service_once() -> None:
    config, snapshots = _demo_audit()
    memberships = {(kind, group) for h in config.hypervisors for kind, group in h.groups}
    assert memberships == set(MEMBERS)
    for key, members in MEMBERS.items():
        assert {h.name for h in config.hypervisors if key in h.groups} == members, key
    capacity = {
        s.name: s.capacity for s in snapshots if s.capacity is not None and s.capacity.maintenance is None
    }

    def totals(names: set[str]) -> Totals:
        found: Totals = {}
        for resource in (Resource.VCPU, Resource.PCPU, Resource.MEMORY):
            amounts = [capacity[n].resources[resource] for n in names if n in capacity]
            found[resource.label] = tuple(
                _in(resource.label, sum(getattr(r, part) or 0 for r in amounts))
                for part in ("limit", "used", "free")
            )
        return found

    for key, members in MEMBERS.items():
        assert totals(members) == GROUP_TOTALS[key], key
    # the fleet: each hypervisor once, though compute-09 and compute-10 are in two aggregates
    fleet = totals(set(capacity))
    assert (
        fleet["memory"]
        == (2624, 1714, 910)
        == tuple(
            a + b
            for a, b in zip(
                GROUP_TOTALS["availability_zone", "az-1"]["memory"],
                GROUP_TOTALS["availability_zone", "az-2"]["memory"],
                strict=True,
            )
        )
    )
    overlapping = (
        GROUP_TOTALS["aggregate", "pinned"]["memory"][0] + GROUP_TOTALS["aggregate", "gpu"]["memory"][0]
    )
    assert overlapping == 944 == 592 + 352  # compute-09 and compute-10 (352 GiB) in both


def test_each_groups_flavor_headroom_and_the_hosts_it_cannot_lose() -> None:
    config, snapshots = _demo_audit()
    schedulable = {s.name: s.capacity.schedulable for s in snapshots if s.capacity is not None}
    assert set(schedulable["compute-05"].values()) == {0}  # in maintenance: offers nothing
    for key, members in MEMBERS.items():
        headroom = {
            flavor: sum(schedulable[n][flavor] for n in members if n in schedulable)
            for flavor in GROUP_HEADROOM[key]
        }
        assert headroom == GROUP_HEADROOM[key], key
        assert sum(schedulable[n]["p1.8xlarge"] for n in members if n in schedulable) == 0, key
    report = one_shot_tolerance(snapshots, config.multipliers, 3)
    assert report is not None
    infeasible = {name for name, e in report.evacuations.items() if not e.feasible}
    # the per-group host-failure alert: a group with a member whose evacuation fails
    assert {key for key, members in MEMBERS.items() if members & infeasible} == {
        ("availability_zone", "az-1"),
        ("rack", "r1"),
    }


def test_the_demo_maintenance_ends_ahead_of_whenever_the_demo_runs() -> None:
    """At midnight UTC a week after the day the demo is loaded: in 2030 as today."""
    for now in (time.time(), 1_900_000_000.0):  # today, and 2030-03-17T17:46:40Z
        (entry,) = [h.maintenance for h in demo_config(now).hypervisors if h.maintenance is not None]
        assert entry.until is not None and 6 * 86400 < entry.until - now <= 7 * 86400
        assert entry.until % 86400 == 0


def test_compute_05_is_in_maintenance_and_offers_nothing() -> None:
    config, snapshots = _demo_audit()
    by_name = {s.name: s for s in snapshots}
    held = {
        name for name, s in by_name.items() if s.capacity is not None and s.capacity.maintenance is not None
    }
    assert held == {"compute-05"}
    compute_05 = by_name["compute-05"].capacity
    assert compute_05 is not None
    (end,) = [h.maintenance.until for h in config.hypervisors if h.maintenance is not None]
    assert end is not None and end > time.time()
    assert compute_05.maintenance == f"kernel upgrade (until {format_utc(end)}) (set by the configuration)"
    # still audited, its allocations shown: 3 vCPUs, 1 pinned CPU and 8 GiB for its 4 running guests
    assert (compute_05.resources[Resource.VCPU].used, compute_05.resources[Resource.PCPU].used) == (3, 1)
    assert compute_05.resources[Resource.MEMORY].used == 8 * GIB
    started = time.time()
    placed = subprocess.run(
        [sys.executable, "-m", "virtcap", "place", "--demo", "--flavor", "m1.small", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer = json.loads(placed.stdout)
    assert answer["placed"] and "compute-05" not in answer["placed"]
    rejection = answer["rejections"]["compute-05"]
    assert rejection["filter"] == "ComputeFilter"
    (reason,) = rejection["reasons"]
    maintenance = reason.removeprefix("hypervisor compute-05 is in maintenance: ")
    assert maintenance in compute_05_maintenance(started, time.time())


def test_az_2s_nfs_export_is_one_shared_pool() -> None:
    """compute-02, -03 and -11 mount one NFS export (compute-03 under another name, with a trailing
    slash): one pool, its 150 GiB of volumes on the 100 GiB the test driver gives every pool."""
    config, snapshots = _demo_audit()
    store = SnapshotStore()
    store.track([h.name for h in config.hypervisors])
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
    samples = parse_samples(render(views(store, time.time(), 600), {}).decode())
    key = "netfs://nfs1.demo/export/nova"
    assert series(samples, "hypervisor_storage_pool_info") == {
        frozenset({("hypervisor", "compute-02"), ("pool", key), ("name", "nova-nfs")}): 1.0,
        frozenset({("hypervisor", "compute-03"), ("pool", key), ("name", "instances-nfs")}): 1.0,
        frozenset({("hypervisor", "compute-11"), ("pool", key), ("name", "nova-nfs")}): 1.0,
    }
    assert value(samples, "hypervisor_storage_pool_hypervisors", pool=key) == 3
    assert value(samples, "hypervisor_storage_pool_capacity_bytes", pool=key) == 100 * GIB
    assert value(samples, "hypervisor_storage_pool_provisioned_bytes", pool=key) == (20 + 50 + 80) * GIB
    assert value(samples, "hypervisor_storage_pool_used_bytes", pool=key) == (4 + 18 + 8) * GIB
    assert value(samples, "hypervisor_storage_pool_provisioned_ratio", pool=key) == 1.5
    assert value(samples, "hypervisor_storage_pool_volumes", pool=key) == 3
    assert len(series(samples, "hypervisor_storage_pool_capacity_bytes")) == 1


# The demo's projects, fleet-wide (the audit's `projects`; compute-05's in maintenance count: its
# guests still hold what they hold). Memory in GiB, per hypervisor:
#   analytics    524 = compute-03's 24 Nova instances 172 (16 m1.large, 2 m1.xlarge, 6 m1.small:
#                      128 + 32 + 12) + compute-04's database 256 + compute-08's two rp1.xlarge 96
#   web-shop     472 = the Nova instances of compute-01 80, compute-02 94, compute-04 106 (53
#                      m1.small), compute-06's Windows guests 104, compute-08's floating guests 76
#                      (m1.large 8 + m1.medium 4 + 2 r1.large 64) and compute-10's 12
#   edge-cdn     244 = compute-06's other 24 instances (its 348 held less the Windows guests' 104)
#   batch        230 = compute-04's 115 plain domains, their owner element's project
#   unknown      126 = the plain domains of compute-01 70, compute-02 48 and compute-05 8
#   ml-training   92 = compute-09's 2 g1.xlarge 56 and 2 g1.large 24, compute-10's g1.large 12
#   telco         24 = compute-08's p1.xlarge 8 and rp1.large 16
#   platform      10 = compute-11's 20 service guests of 512 MiB, their owner element's project
# 1722 in all: the fleet's 1714 in service and compute-05's 8.
PROJECTS = {
    # name: (domains, memory GiB, vCPUs, pinned CPUs)
    "analytics": (27, 524, 118, 8),  # 24 + 1 + 2 domains; vCPUs 86 + 32; pCPUs 2 x 4
    "web-shop": (125, 472, 176, 0),  # 33 + 27 + 53 + 6 + 4 + 2; vCPUs 40 + 47 + 53 + 16 + 14 + 6
    "edge-cdn": (24, 244, 50, 0),
    "batch": (115, 230, 115, 0),  # m1.small's: one vCPU and 2 GiB each
    "unknown": (44, 126, 62, 1),  # 27 + 13 + 4; vCPUs 35 + 24 + 3; compute-05's pinned guest
    "ml-training": (5, 92, 0, 14),  # pCPUs 4 + 4 + 2 + 2 + 2
    "telco": (2, 24, 0, 6),  # pCPUs 4 + 2
    "platform": (20, 10, 20, 0),
}
TOP_PROJECTS = 5
"""demo.yaml's exposition.top_projects: the five largest by memory have series of their own, the
other three (ml-training, telco, platform) are summed as `other`."""


def test_the_demos_projects_from_nova_an_owner_element_and_neither() -> None:
    config, snapshots = _demo_audit()
    assert config.exposition.top_projects == TOP_PROJECTS
    report = json.loads(
        subprocess.run(
            [sys.executable, "-m", "virtcap", "audit", "--demo", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    found = {
        p["project_name"]: (
            p["domains"],
            p["allocated"].get("memory", 0) / GIB,
            p["allocated"].get("vcpu", 0),
            p["allocated"].get("pcpu", 0),
        )
        for p in report["projects"]
    }
    assert found == PROJECTS
    assert sum(memory for _, memory, _, _ in PROJECTS.values()) == 1722 == 1714 + 8
    # Nova's owner ids, the owner element's id attribute, and virtcap's own `unknown`
    ids = {p["project_name"]: p["project_id"] for p in report["projects"]}
    assert ids["analytics"] == project_id("analytics") and ids["batch"] == project_id("batch")
    assert ids["unknown"] == "unknown"

    store = SnapshotStore()
    store.track([h.name for h in config.hypervisors])
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
    body = render(views(store, time.time(), 600), {}, exposition=config.exposition).decode()
    shown: dict[str, float] = {}
    for labels, amount in series(
        parse_samples(body), "hypervisor_project_allocated", resource="memory"
    ).items():
        name = dict(labels)["project_name"]
        shown[name] = shown.get(name, 0) + amount / GIB
    largest = sorted(PROJECTS, key=lambda name: -PROJECTS[name][1])[:TOP_PROJECTS]
    assert largest == ["analytics", "web-shop", "edge-cdn", "batch", "unknown"]
    # the other three as one: 92 + 24 + 10
    assert shown == {name: PROJECTS[name][1] for name in largest} | {"other": 126}
