"""SIGHUP: a reload never stalls scrapes, keeps the running configuration whole when the file
cannot be used, and applies every section it can, claims included."""

from __future__ import annotations

import signal
import statistics
import threading
import time
from pathlib import Path

from tests.support.claims_client import HASH, WRITER, claim
from tests.support.serving import Server, running_server, value, wait_for
from virtcap.demo import DEMO_DIR


def config_text(directory: Path, max_ttl: str) -> str:
    return f"""
audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  default_ttl: 1m
  max_ttl: {max_ttl}
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
  - {{name: compute-01, uri: "test://{DEMO_DIR / "compute-01.xml"}"}}
"""


def reload(server: Server, config: Path, text: str, logged: str) -> None:
    before = server.log_text().count(logged)
    config.write_text(text)
    server.process.send_signal(signal.SIGHUP)
    wait_for(lambda: server.log_text().count(logged) > before, 10, what=logged)


def test_a_reload_applies_the_claims_section(tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    config.write_text(config_text(tmp_path, max_ttl="1h"))
    with running_server(["--config", str(config)], tmp_path) as server:
        status, refused = claim(server, hypervisor="compute-01", vcpu=1, ttl="2h")
        assert status == 400 and "max_ttl" in refused["error"], refused
        reload(server, config, config_text(tmp_path, max_ttl="3h"), "configuration reloaded")
        status, created = claim(server, hypervisor="compute-01", vcpu=1, ttl="2h")
        assert status == 201, created


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        aliases = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    return "\n".join(lines) + f"\nhypervisors: *a{levels - 1}\n"


def test_a_hostile_file_on_reload_neither_stalls_scrapes_nor_changes_anything(tmp_path: Path) -> None:
    """A YAML alias bomb sent by SIGHUP was parsed on the event loop: /metrics stalled for seconds."""
    config = tmp_path / "virtcap.yaml"
    good = config_text(tmp_path, max_ttl="1h")
    config.write_text(good)
    with running_server(["--config", str(config)], tmp_path) as server:
        latencies: list[float] = []
        stop = threading.Event()

        def scrape() -> None:
            while not stop.is_set():
                started = time.monotonic()
                status, _ = server.get("/metrics", timeout=10)
                latencies.append(time.monotonic() - started)
                assert status == 200
                time.sleep(0.01)

        def scraped_a_few_more() -> None:
            # A refusal can be quicker than one scrape on a loaded machine: the scrapes measured
            # must surround each reload, not merely happen to overlap it.
            wanted = len(latencies) + 4
            wait_for(lambda: len(latencies) >= wanted, 30, what="scrapes")

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        try:
            scraped_a_few_more()
            for hostile in (billion_laughs(), b"\xff\xfe not UTF-8", "hypervisors: [{name: x}]"):
                before = server.log_text().count("configuration not reloaded")
                if isinstance(hostile, bytes):
                    config.write_bytes(hostile)
                else:
                    config.write_text(hostile)
                server.process.send_signal(signal.SIGHUP)
                wait_for(
                    lambda: server.log_text().count("configuration not reloaded") > before,  # noqa: B023
                    15,
                    what="the reload refused",
                )
                scraped_a_few_more()
        finally:
            stop.set()
            scraper.join(timeout=15)
        assert len(latencies) > 10
        assert statistics.quantiles(latencies, n=100)[98] < 0.5, sorted(latencies)[-5:]
        assert max(latencies) < 2.0, sorted(latencies)[-5:]
        assert value(server.samples(), "hypervisor_up", hypervisor="compute-01") == 1.0
        assert "Traceback" not in server.log_text()
        # the process is still whole: a good file reloads as before
        reload(server, config, good, "configuration reloaded")


def test_a_reload_puts_a_hypervisor_into_maintenance_and_out_again(tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    plain = config_text(tmp_path, max_ttl="1h")
    config.write_text(plain)
    held = plain.replace('compute-01.xml"}', 'compute-01.xml", maintenance: {reason: "BIOS update"}}')
    assert held != plain
    with running_server(["--config", str(config)], tmp_path) as server:

        def maintenance() -> float | None:
            return value(server.samples(), "hypervisor_maintenance", hypervisor="compute-01")

        assert maintenance() == 0
        reload(server, config, held, "configuration reloaded")
        wait_for(lambda: maintenance() == 1, 10, what="in maintenance after the reload")
        status, refused = claim(server, hypervisor="compute-01", vcpu=1)
        assert status == 409 and "in maintenance: BIOS update (set by the configuration)" in refused["error"]
        reload(server, config, plain, "configuration reloaded")
        wait_for(lambda: maintenance() == 0, 10, what="out of maintenance after the reload")
        wait_for(
            lambda: claim(server, hypervisor="compute-01", vcpu=1)[0] == 201, 10, what="a claim fits again"
        )
