"""`placement:` follows the running configuration: a real `virtcap serve` without it has no trace
of Placement; a reload (SIGHUP) that adds it starts the reconciliation against a real Placement
and shows its families; one that removes it stops both."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.placement_loader import PlacementLoader, nova_inventories
from tests.support.placement_server import running_placement
from tests.support.serving import WORKER_SECONDS, running_server, series, value, wait_for, write_fleet_config

pytestmark = pytest.mark.upstream


def _placement_series(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    names = {name for name, labels in samples if "placement" in name}
    names |= {name for name, labels in samples if ("kind", "placement") in labels}
    return names


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        # ppid, the 4th field, the 2nd after the command's name; multiprocessing's resource
        # tracker, which any spawned worker starts and which stays, is not one
        if int(fields[1]) == pid and b"resource_tracker" not in command:
            found.add(int(stat.parent.name))
    return found


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

            # the failure tolerance's worker process, for one, runs before
            wait_for(
                lambda: (
                    (
                        value(server.samples(), "virtcap_failure_tolerance_computations_total", kind="full")
                        or 0
                    )
                    >= 1
                ),
                30,
                what="the failure tolerance computed",
            )
            others = _children(server.process.pid)
            config.write_text(
                f"placement: {{endpoint: '{placement.base_url}', timeout: 3s, interval: 1s}}\n{without}"
            )
            server.process.send_signal(signal.SIGHUP)
            wait_for(
                lambda: value(server.samples(), "virtcap_placement_up") == 1,
                WORKER_SECONDS,
                what="Placement read",
            )
            assert server.get("/api/v1/placement/drift")[0] == 200
            # the reader's worker process: a child of the exporter's, gone once placement: is
            workers = _children(server.process.pid) - others
            assert workers
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
            wait_for(lambda: not workers & _children(server.process.pid), 10, what="the worker gone")
            left = _placement_series(server.samples())
            # the supervisor's count of failures of the task it ran stays, as for any task kind
            assert left <= {"virtcap_task_failures_total"}
        assert "Traceback" not in server.log_text()
