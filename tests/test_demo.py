"""The bundled demo fleet: committed as generated, and shaped as promised."""

from __future__ import annotations

import asyncio
from pathlib import Path

from virtcap.audit.oneshot import audit_fleet_once
from virtcap.demo import DEMO_DIR, demo_config
from virtcap.demo.generate import captured_hosts, demo_hosts, main
from virtcap.model.facts import DomainState
from virtcap.model.resources import Resource


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
