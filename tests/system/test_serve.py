"""`virtcap serve` as a process, against test-driver fleets."""

from __future__ import annotations

import gzip
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import FIXTURES
from tests.support.serving import parse_samples, running_server, series, stop_process, value, wait_for
from virtcap.config import parse_config
from virtcap.demo import DEMO_DIR
from virtcap.web.server import DEFAULT_PORT

MIXED = FIXTURES / "mixed-node.xml"
REQUIRED_FAMILIES = {
    "hypervisor_up": {"hypervisor"},
    "hypervisor_resource_size": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_reserved": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_limit": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_used": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_free": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_actual_usage": {"hypervisor", "resource", "unit"},
    "hypervisor_resource_allocation_ratio": {"hypervisor", "resource"},
    "hypervisor_resource_allocated": {"hypervisor", "resource", "unit", "state"},
    "hypervisor_resource_claimed": {"hypervisor", "resource", "unit"},
    "hypervisor_schedulable_instances": {"hypervisor", "flavor"},
    "hypervisor_domains": {"hypervisor", "state"},
    "hypervisor_audit_duration_seconds": {"hypervisor"},
    "hypervisor_audit_timestamp_seconds": {"hypervisor"},
    "hypervisor_info": {
        "hypervisor",
        "hostname",
        "hypervisor_type",
        "hypervisor_version",
        "libvirt_version",
        "cpu_model",
        "arch",
    },
    "virtcap_build_info": {"version"},
}


def test_demo_exposes_every_family_with_its_labels(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        wait_for(lambda: series(server.samples(), "hypervisor_info"), 10, what="hypervisor_info")
        samples = server.samples()
        for family, labels in REQUIRED_FAMILIES.items():
            found = [dict(key) for name, key in samples if name == family]
            assert found, f"{family} missing"
            assert all(set(f) == labels for f in found), (family, found[0])
        assert value(samples, "hypervisor_up", hypervisor="compute-07") == 0.0
        assert not series(samples, "hypervisor_resource_limit", hypervisor="compute-07")
        assert (
            value(samples, "hypervisor_resource_free", hypervisor="compute-02", resource="vcpu", unit="cpus")
            == -7
        )

        # the same render gzipped: between two equal plain scrapes (a re-audit, such as the one
        # newly discovered flavors start, may land between any two)
        for _ in range(50):
            before = server.samples()
            status, body = server.get("/metrics", headers={"Accept-Encoding": "gzip"})
            if server.samples() == before:
                break
        assert status == 200 and parse_samples(gzip.decompress(body).decode()) == before

        status, page = server.get("/")
        assert status == 200 and b"/metrics" in page and b"compute-07" in page
        assert server.get("/-/healthy")[0] == 200


def test_promtool_has_no_remark_on_the_demos_metrics(tmp_path: Path) -> None:
    """`promtool check metrics` lints names, types, units and help texts: any remark at all fails."""
    with running_server(["--demo"], tmp_path) as server:
        wait_for(lambda: series(server.samples(), "hypervisor_info"), 10, what="hypervisor_info")
        status, body = server.get("/metrics")
    assert status == 200
    checked = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, check=False, timeout=60
    )
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, b"")


def test_probe_serves_one_target_and_refuses_unknown_ones(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        status, body = server.get("/probe?target=compute-05")
        assert status == 200
        samples = parse_samples(body.decode())
        hypervisors = {dict(key).get("hypervisor") for _, key in samples} - {None}
        assert hypervisors == {"compute-05"}
        assert (
            value(samples, "hypervisor_resource_size", hypervisor="compute-05", resource="pcpu", unit="cpus")
            == 2
        )
        status, body = server.get("/probe?target=compute-99")
        assert status == 400 and b"unknown target" in body
        assert server.get("/probe")[0] == 400
        assert server.get("/nothing-here")[0] == 404


def test_bad_requests_get_4xx(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        for path in (
            "/probe?target=",
            "/probe?target=%00",
            "/probe?target=" + "x" * 5000,
            "/probe?target=a&target=b",
        ):
            status, _ = server.get(path)
            assert 400 <= status < 500, path
        assert server.request("POST", "/metrics")[0] == 405


def test_a_hypervisor_removed_by_a_reload_loses_its_series(tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    both = f"""
audit: {{interval: 1h}}
claims: {{database: {tmp_path / "claims.sqlite"}}}
hypervisors:
  - {{name: mixed, uri: "test://{MIXED}"}}
  - {{name: other, uri: "test://{DEMO_DIR / "compute-01.xml"}"}}
"""
    config.write_text(both)
    with running_server(["--config", str(config)], tmp_path) as server:
        assert series(server.samples(), "hypervisor_resource_limit", hypervisor="other")
        config.write_text(both.replace("  - {name: other", "  # - {name: other"))
        server.process.send_signal(signal.SIGHUP)
        wait_for(
            lambda: not [k for _, k in server.samples() if ("hypervisor", "other") in k],
            5,
            what="the removed hypervisor's series to disappear",
        )
        assert value(server.samples(), "hypervisor_up", hypervisor="mixed") == 1.0
        # a broken config on reload is logged and changes nothing
        config.write_text("hypervisors: [{name: x}]")
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration not reloaded" in server.log_text(), 5, what="the reload error")
        assert value(server.samples(), "hypervisor_up", hypervisor="mixed") == 1.0


def test_sigterm_stops_gracefully(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=20) == 0
        assert "shutting down" in server.log_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--web.listen-address", "nonsense"], "--web.listen-address: expected HOST:PORT"),
        (["--web.config.file", "/nonexistent/web.yml"], "/nonexistent/web.yml: cannot read"),
        (["--log.level", "loud"], "invalid choice: 'loud'"),
    ],
)
def test_startup_errors_exit_2_without_a_traceback(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "serve", "--demo", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        taken = server.base_url.rsplit(":", 1)[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "virtcap",
                "serve",
                "--demo",
                "--web.listen-address",
                f"127.0.0.1:{taken}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 2
        assert "cannot listen on" in result.stderr and "Traceback" not in result.stderr


def test_the_demo_without_an_address_listens_on_loopback_only(tmp_path: Path) -> None:
    """The demo takes claims from the well-known writer demo/demo: no other machine may reach it.

    127.0.0.2 stands in for the machine's other addresses: a socket bound to every interface
    answers there, one bound to 127.0.0.1 does not.
    """
    log = tmp_path / "virtcap.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "virtcap", "serve", "--demo"], stdout=output, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: process.poll() is not None or "listening" in log.read_text(), 30, what="listening or exit"
        )
        text = log.read_text()
        if process.poll() is not None:
            # Another program holds the default port: the refusal still names the address tried.
            assert f"cannot listen on 127.0.0.1:{DEFAULT_PORT}" in text, text
            return
        assert f"http://127.0.0.1:{DEFAULT_PORT}" in text, text
        socket.create_connection(("127.0.0.1", DEFAULT_PORT), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", DEFAULT_PORT), timeout=5).close()
    finally:
        stop_process(process)


def test_demo_config_keeps_its_promises() -> None:
    # the staleness bound defaults to three intervals
    config = parse_config("audit: {interval: 20s}", "inline")
    assert config.audit.staleness_bound == 60
