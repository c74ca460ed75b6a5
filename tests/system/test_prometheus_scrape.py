"""A real Prometheus scrapes `virtcap serve --demo`."""

from __future__ import annotations

from pathlib import Path

from tests.support.prometheus import running_prometheus, scrape_config
from tests.support.serving import running_server, wait_for


def test_prometheus_scrapes_the_demo(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        target = server.base_url.removeprefix("http://")
        with running_prometheus(scrape_config(target), tmp_path) as prometheus:
            wait_for(lambda: prometheus.query('up{job="virtcap"} == 1'), 30, interval=0.25, what="target up")
            wait_for(lambda: len(prometheus.query("hypervisor_up")) == 11, 10, interval=0.25, what="series")
            down = prometheus.query("hypervisor_up == 0")
            assert [r["metric"]["hypervisor"] for r in down] == ["compute-07"]
            over = prometheus.query('hypervisor_resource_free{resource="vcpu"} < 0')
            assert [r["metric"]["hypervisor"] for r in over] == ["compute-02"]
            targets = prometheus.api("targets")["activeTargets"]
            assert targets[0]["health"] == "up" and targets[0]["lastError"] == ""
