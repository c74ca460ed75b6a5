"""The bundled demo fleet: committed as generated, and shaped as promised."""

from __future__ import annotations

import asyncio
from pathlib import Path

from virtcap.audit.oneshot import audit_fleet_once
from virtcap.demo import DEMO_DIR, demo_config
from virtcap.demo.generate import captured_hosts, demo_hosts, main
from virtcap.model.facts import DomainState
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import fleet_tolerance, host_state


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


def test_compute_04_alone_cannot_be_lost_though_the_sums_say_the_fleet_can_lose_any_host() -> None:
    """The sum-based bound (sum(used) - (sum(limit) - max(limit)), the recording rule) passes for
    every resource, yet compute-04's database (256 GiB) finds no host: no other host has that much
    memory free, though together they have more than compute-04 holds. Every other host's domains
    find one: compute-06's Windows guests on compute-01's licences, the pinned guests of compute-08
    and compute-09 on the spare, compute-10, the spare's on compute-09."""
    config = demo_config()
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    up = {s.name: s for s in snapshots if s.facts is not None and s.capacity is not None}
    capacity = {name: s.capacity for name, s in up.items() if s.capacity is not None}
    policies = {h.name: h.policy for h in config.hypervisors}
    states = [host_state(name, s.facts, policies[name]) for name, s in up.items() if s.facts is not None]

    bound = {}
    for resource in {resource for c in capacity.values() for resource in c.resources}:
        offered = [c.resources[resource] for c in capacity.values() if resource in c.resources]
        limits = [r.limit or 0 for r in offered]
        bound[resource] = sum(r.used for r in offered) - (sum(limits) - max(limits))
    assert bound[Resource.MEMORY] == -16.5 * GIB
    assert bound[Resource.VCPU] == -87
    assert all(value <= 0 for value in bound.values()), bound

    tolerance = fleet_tolerance(states, multipliers=config.multipliers)
    infeasible = {name: e for name, e in tolerance.evacuations.items() if not e.feasible}
    assert set(infeasible) == {"compute-04"}
    (database,) = infeasible["compute-04"].unplaced
    assert database.guest == "compute-04-db-01"
    assert len(infeasible["compute-04"].placements) == 168
    assert database.rejections["compute-01"].reasons == ("Free memory 108032.00 MiB < requested 262144 MiB",)
    free = {
        name: c.resources[Resource.MEMORY].free or 0 for name, c in capacity.items() if name != "compute-04"
    }
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
    assert hosts("compute-10")["compute-10-viz-01"] == "compute-09"
