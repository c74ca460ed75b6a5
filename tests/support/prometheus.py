"""A real Prometheus (the Debian package) for the tests, scraping what they point it at."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.serving import DIES_WITH_THE_TESTS, free_port, stop_process, wait_for


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as response:
            document = json.load(response)
        assert document["status"] == "success", document
        return document["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expression)["result"]
        return result


@contextmanager
def running_prometheus(
    config: str, directory: Path, port: int | None = None, flags: tuple[str, ...] = ()
) -> Iterator[Prometheus]:
    """A Prometheus on `directory / 'data'` (a backfilled history is read from there); `flags` are
    more of its command-line flags."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the Debian package prometheus is needed (`make test` installs it)")
    port = port or free_port()
    config_path = directory / "prometheus.yml"
    config_path.write_text(config)
    log = directory / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                *DIES_WITH_THE_TESTS,
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                *flags,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_for(lambda: _ready(prometheus), 30, what="prometheus readiness")
        yield prometheus
    finally:
        stop_process(process)


def _ready(prometheus: Prometheus) -> bool:
    if prometheus.process.poll() is not None:
        raise AssertionError(f"prometheus exited: {prometheus.log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"{prometheus.url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


FLEET = "demo"
"""The fleet label (the mixin's `_config.fleetLabel`) the tests' Prometheus gives its virtcap
target, as deploy/prometheus/prometheus.yml does: virtcap does not export it."""


def scrape_config(target: str, interval: str = "1s", rule_files: list[Path] | None = None) -> str:
    """A Prometheus configuration scraping one virtcap, its target labelled with FLEET (JSON is
    YAML)."""
    return json.dumps(
        {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files or []],
            "scrape_configs": [
                {"job_name": "virtcap", "static_configs": [{"targets": [target], "labels": {"fleet": FLEET}}]}
            ],
        }
    )
