"""An HA pair scraped as two targets of one job, as an operator opens the dashboards: every panel
query of the pair's fleet shows what it shows for a fleet of one exporter with the same series,
each hypervisor counted once (alerts/tests/ha_pair.test.yaml holds the rules and alerts to it)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.mixin import ALERTS_FILE, DASHBOARDS_DIRECTORY, FLEET_LABEL, RULES_FILE
from tests.support.prometheus import Prometheus, running_prometheus
from tests.support.serving import running_server, wait_for

PAIR = "pair"
SOLO = "solo"
# Grafana's variables: every hypervisor and flavor, the demo's zone az-1, a rate window of several
# scrapes (every second); $fleet is the pair's or the solo exporter's.
SUBSTITUTIONS = {
    "$hypervisor": ".*",
    "$flavor": ".*",
    "$kind": "availability_zone",
    "$group": "az-1",
    "$__rate_interval": "10s",
}
# Series of the scrapes, of each exporter itself, not of the hypervisors: a pair has two exporters,
# each scraped in its own time.
PER_EXPORTER = re.compile(r"\b(up|scrape_duration_seconds|scrape_samples_scraped)\{")
# The labels of the target, which tell the replicas (and the two fleets) apart.
TARGET_LABELS = {"job", "instance", FLEET_LABEL}


def _snapshot_server(metrics: bytes) -> ThreadingHTTPServer:
    """An exporter that always answers the same /metrics: a replica of an HA pair at rest."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(metrics)))
            self.end_headers()
            self.wfile.write(metrics)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _address(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"{host!s}:{port}"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """The demo's /metrics, taken once, served by three exporters: two replicas of one fleet in
    one job, and one exporter of another fleet; a real Prometheus with the mixin's rules."""
    directory = tmp_path_factory.mktemp("ha-pair")
    with running_server(["--demo"], directory) as demo:
        status, metrics = demo.get("/metrics")
        assert status == 200
    servers = [_snapshot_server(metrics) for _ in range(3)]
    try:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_FILE), str(ALERTS_FILE)],
            "scrape_configs": [
                {
                    "job_name": "virtcap",
                    "static_configs": [
                        {"targets": [_address(s) for s in servers[:2]], "labels": {FLEET_LABEL: PAIR}},
                        {"targets": [_address(servers[2])], "labels": {FLEET_LABEL: SOLO}},
                    ],
                }
            ],
        }
        with running_prometheus(json.dumps(config), directory) as running:
            wait_for(lambda: len(running.query("up == 1")) == 3, 30, interval=0.25, what="three scrapes")
            time.sleep(6)  # enough scrapes for the rates, and a few rule evaluations
            yield running
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def panel_queries() -> list[tuple[str, str, str]]:
    return [
        (path.name, panel["title"], target["expr"])
        for path in sorted(DASHBOARDS_DIRECTORY.glob("*.json"))
        for panel in json.loads(path.read_text())["panels"]
        for target in panel.get("targets", [])
        if not PER_EXPORTER.search(target["expr"])
    ]


def _shown(prometheus: Prometheus, expression: str, fleet: str, at: float) -> set[tuple[Any, ...]]:
    """What the panel shows of the fleet: each series's own labels (the target's left out) and
    value; a series listed once per replica is shown once either way."""
    for variable, value in {**SUBSTITUTIONS, "$fleet": fleet}.items():
        expression = expression.replace(variable, value)
    result = prometheus.api("query", query=expression, time=str(at))["result"]
    return {
        (
            tuple(sorted((k, v) for k, v in sample["metric"].items() if k not in TARGET_LABELS)),
            sample["value"][1],
        )
        for sample in result
    }


@pytest.mark.parametrize(("dashboard", "panel", "expression"), panel_queries())
def test_every_panel_shows_an_ha_pair_as_one_exporter(
    prometheus: Prometheus, dashboard: str, panel: str, expression: str
) -> None:
    at = time.time()
    solo = _shown(prometheus, expression, SOLO, at)
    assert _shown(prometheus, expression, PAIR, at) == solo, f"{dashboard} / {panel}: {expression}"


def test_the_pair_is_two_exporters_of_the_same_hypervisors(prometheus: Prometheus) -> None:
    at = time.time()
    exporters = 'sum by (fleet) (up{job="virtcap", fleet="$fleet"})'
    assert _shown(prometheus, exporters, PAIR, at) == {((), "2")}
    assert _shown(prometheus, exporters, SOLO, at) == {((), "1")}
    hypervisors = ':hypervisor_up:count{fleet="$fleet"}'
    ((labels, count),) = _shown(prometheus, hypervisors, SOLO, at)
    assert int(count) > 1 and _shown(prometheus, hypervisors, PAIR, at) == {(labels, count)}
