"""`placement:` follows the running configuration: a real `virtcap serve` without it has no trace
of Placement; a reload (SIGHUP) that adds it starts the reconciliation against a real Placement
and shows its families; one that removes it stops both."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.placement_loader import PlacementLoader, nova_inventories
from tests.support.placement_server import running_placement
from tests.support.serving import running_server, series, value, wait_for, write_fleet_config

pytestmark = pytest.mark.upstream


def _placement_series(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    names = {name for name, labels in samples if "placement" in name}
    names |= {name for name, labels in samples if ("kind", "placement") in labels}
    return names


def test_a_reload_starts_and_stops_the_reconciliation(tmp_path: Path) -> None:
    with running_placement(tmp_path / "placement") as placement:
        PlacementLoader(placement.base_url).load(
            {"providers": [{"name": "node-01", "inventories": nova_inventories(4, 8192, 100)}]}
        )
        config = write_fleet_config(tmp_path, ["compute-01", "compute-02"])
        config.write_text(
            config.read_text().replace('compute-01.xml"}', 'compute-01.xml", placement_provider: node-01}')
        )
        assert "placement_provider: node-01" in config.read_text()
        without = config.read_text()
        with running_server(["--config", str(config)], tmp_path) as server:
            assert _placement_series(server.samples()) == set()
            assert server.get("/api/v1/placement/drift")[0] == 404

            config.write_text(
                f"placement: {{endpoint: '{placement.base_url}', timeout: 3s, interval: 1s}}\n{without}"
            )
            server.process.send_signal(signal.SIGHUP)
            wait_for(lambda: value(server.samples(), "virtcap_placement_up") == 1, 30, what="Placement read")
            assert server.get("/api/v1/placement/drift")[0] == 200
            samples = server.samples()
            # compute-01 matched by its configured provider; compute-02's hostname names none
            assert value(samples, "virtcap_placement_unmatched_hypervisors") == 1
            assert {
                dict(labels)["hypervisor"]
                for labels in series(samples, "hypervisor_placement_orphaned_consumers")
            } == {"compute-01"}

            config.write_text(without)
            server.process.send_signal(signal.SIGHUP)
            wait_for(
                lambda: value(server.samples(), "virtcap_placement_up") is None,
                30,
                what="Placement forgotten",
            )
            assert server.get("/api/v1/placement/drift")[0] == 404
            left = _placement_series(server.samples())
            # the supervisor's count of failures of the task it ran stays, as for any task kind
            assert left <= {"virtcap_task_failures_total"}
        assert "Traceback" not in server.log_text()
