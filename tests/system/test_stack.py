"""The compose stack without a Docker engine: the compose files validated by docker-compose, and
the same Prometheus, Alertmanager and rule files run with the Debian binaries against
`virtcap serve --demo`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.files import ROOT
from tests.support.mixin import (
    ALERTS_FILE,
    ALERTS_SOURCE,
    DASHBOARDS_DIRECTORY,
    FLEET_LABEL,
    FOR_KEYS,
    RULES_FILE,
    RULES_SOURCE,
    jsonnet,
)
from tests.support.prometheus import running_prometheus
from tests.support.serving import DIES_WITH_THE_TESTS, free_port, running_server, stop_process, wait_for
from virtcap.config import parse_config

COMPOSE = ROOT / "docker-compose.yml"
OVERRIDE = ROOT / "docker-compose.libvirt.yml"
PROMETHEUS_CONFIG = ROOT / "deploy/prometheus/prometheus.yml"
ALERTMANAGER_CONFIG = ROOT / "deploy/alertmanager/alertmanager.yml"
PUBLISH_ADDRESS = "VIRTCAP_PUBLISH_ADDRESS"


def compose(
    *files: Path, profiles: tuple[str, ...] = (), environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` of the files, without the caller's VIRTCAP_PUBLISH_ADDRESS unless
    `environment` sets it."""
    if shutil.which("docker-compose") is None:
        pytest.fail("the Debian package docker-compose is needed (`make test` installs it)")
    arguments = [argument for path in files for argument in ("-f", str(path))]
    arguments += [argument for profile in profiles for argument in ("--profile", profile)]
    variables = {name: value for name, value in os.environ.items() if name != PUBLISH_ADDRESS}
    return subprocess.run(
        ["docker-compose", *arguments, "config"],
        capture_output=True, text=True, check=False, cwd=ROOT, env=variables | (environment or {}),
    )  # fmt: skip


def test_docker_compose_config_accepts_the_stack_and_the_libvirt_override() -> None:
    for files in ((COMPOSE,), (COMPOSE, OVERRIDE)):
        result = compose(*files)
        assert result.returncode == 0, result.stderr


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Target to source of a service's bind mounts, in either syntax docker-compose prints."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts[volume["target"]] = Path(volume["source"])
        else:
            source, target = volume.split(":")[:2]
            if source.startswith("/"):
                mounts[target] = Path(source)
    return mounts


def test_every_image_is_pinned_and_every_mounted_file_exists() -> None:
    for files in ((COMPOSE,), (COMPOSE, OVERRIDE)):
        stack = yaml.safe_load(compose(*files).stdout)
        for name, service in stack["services"].items():
            image = service["image"]
            # PostgreSQL's versions have two parts (15.14): its minor release is the pin
            pinned = r"[\w./-]+:v?\d+\.\d+\.\d+" if name != "postgres" else r"postgres:\d+\.\d+"
            assert re.fullmatch(pinned, image), (name, image)
            assert "healthcheck" in service, name
            for dependency in service.get("depends_on", {}).values():
                assert dependency["condition"] == "service_healthy", name
            for source in bind_mounts(service).values():
                if source.is_relative_to(ROOT):
                    assert source.exists(), (name, source)


def published_ports(service: dict[str, Any]) -> list[tuple[str, int]]:
    """(host address, port) of each port a service publishes, in either syntax docker-compose
    prints; no address is every interface."""
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.append((port.get("host_ip", "0.0.0.0"), int(port["published"])))
        else:
            mapping = str(port).split("/")[0].split(":")
            address = mapping[0] if len(mapping) == 3 else "0.0.0.0"
            ports.append((address, int(mapping[-2])))
    return ports


STACKS = (((COMPOSE,), ()), ((COMPOSE, OVERRIDE), ()), ((COMPOSE,), ("ha",)), ((COMPOSE, OVERRIDE), ("ha",)))


@pytest.mark.parametrize(("files", "profiles"), STACKS)
def test_every_port_is_published_on_loopback_unless_widened(
    files: tuple[Path, ...], profiles: tuple[str, ...]
) -> None:
    """The demo's claims writer (demo/demo) and Grafana's default password are not on the network
    by default; VIRTCAP_PUBLISH_ADDRESS widens every published port at once."""
    for address in (None, "0.0.0.0", "192.0.2.7"):
        widened = {PUBLISH_ADDRESS: address} if address else None
        result = compose(*files, profiles=profiles, environment=widened)
        assert result.returncode == 0, result.stderr
        services = yaml.safe_load(result.stdout)["services"]
        ports = {name: published_ports(service) for name, service in services.items()}
        assert ports["virtcap"] and ports["grafana"] and ports["prometheus"] and ports["alertmanager"]
        if profiles:
            assert ports["virtcap-ha-1"] and ports["virtcap-ha-2"]
        for name, published in ports.items():
            for host_address, _ in published:
                assert host_address == (address or "127.0.0.1"), (name, published, address)


def test_the_ha_profile_runs_two_replicas_on_one_postgresql_ledger() -> None:
    result = compose(COMPOSE, profiles=("ha",))
    assert result.returncode == 0, result.stderr
    stack = yaml.safe_load(result.stdout)
    services = stack["services"]
    postgres = services["postgres"]
    assert postgres["profiles"] == ["ha"]
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    secret = "virtcap-postgres-password"
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == f"/run/secrets/{secret}"
    # the password is a file of the host's, ignored by git, never a value in the repository
    secret_file = Path(stack["secrets"][secret]["file"])
    assert secret_file.is_relative_to(ROOT)
    ignored = (secret_file.parent / ".gitignore").read_text().splitlines()
    assert secret_file.name in ignored
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    replicas = [service for name, service in services.items() if name.startswith("virtcap-ha-")]
    assert len(replicas) == 2
    configs = set()
    for replica in replicas:
        assert replica["profiles"] == ["ha"] and "healthcheck" in replica
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert [entry["source"] for entry in replica["secrets"]] == [secret]
        configs.add(bind_mounts(replica)["/etc/virtcap/virtcap.yaml"])
    assert len({published_ports(replica)[0][1] for replica in replicas}) == 2
    # one configuration: the same fleet, the same ledger, its password the secret
    (config_file,) = configs
    installed = "/usr/local/lib/python3.11/site-packages/virtcap/"
    text = config_file.read_text().replace(installed, f"{ROOT}/exporter/virtcap/")
    config = parse_config(text, str(config_file))
    assert config.claims.shared and config.claims.password_file == f"/run/secrets/{secret}"
    assert "@postgres:5432/" in config.claims.database
    for hypervisor in config.hypervisors:
        assert Path(hypervisor.uri.removeprefix("test://")).exists(), hypervisor.uri


def test_the_image_has_libpq_for_a_postgresql_ledger() -> None:
    runtime = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    assert re.search(r"apt-get install [^\n]*\blibpq5\b", runtime), runtime


def test_the_stack_passes_the_exporter_its_listen_address() -> None:
    """`serve --demo` alone listens on 127.0.0.1, out of reach of the published port."""
    demo = yaml.safe_load(compose(COMPOSE).stdout)["services"]["virtcap"]["command"]
    assert demo == ["serve", "--demo", "--web.listen-address", ":10463"], demo
    real = yaml.safe_load(compose(COMPOSE, OVERRIDE).stdout)["services"]["virtcap"]["command"]
    assert "--demo" not in real, real  # a configuration's default is every interface already


def test_prometheus_is_given_the_committed_rule_files() -> None:
    prometheus = yaml.safe_load(compose(COMPOSE).stdout)["services"]["prometheus"]
    mounts = bind_mounts(prometheus)
    rule_files = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["rule_files"]
    assert sorted(mounts[path] for path in rule_files) == sorted([ALERTS_FILE, RULES_FILE])


def test_grafana_is_provisioned_with_the_dashboards_and_their_datasource() -> None:
    stack = yaml.safe_load(compose(COMPOSE).stdout)
    grafana = stack["services"]["grafana"]
    mounts = bind_mounts(grafana)
    provider = yaml.safe_load((mounts["/etc/grafana/provisioning"] / "dashboards/virtcap.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert mounts[path] == DASHBOARDS_DIRECTORY and list(mounts[path].glob("*.json"))
    datasource = yaml.safe_load(
        (mounts["/etc/grafana/provisioning"] / "datasources/virtcap.yaml").read_text()
    )
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    for dashboard in mounts[path].glob("*.json"):
        variables = json.loads(dashboard.read_text())["templating"]["list"]
        assert next(v for v in variables if v["name"] == "datasource")["current"]["value"] == uid
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(path) and (mounts[path] / Path(home).name).exists()
    assert "GRAFANA_ADMIN_PASSWORD" in COMPOSE.read_text()


def test_the_image_runs_unprivileged_with_a_healthcheck() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.count("\nFROM ") + dockerfile.startswith("FROM ") >= 2  # multi-stage
    assert re.search(r"^USER virtcap$", dockerfile, re.M)
    assert "HEALTHCHECK" in dockerfile and "/-/healthy" in dockerfile
    # the demo alone would listen on 127.0.0.1, which the published port does not reach
    assert 'CMD ["serve", "--demo", "--web.listen-address", ":10463"]' in dockerfile
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert all(re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", image) for image in froms), froms


def _alertmanager_alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        alerts: list[dict[str, Any]] = json.load(response)
        return alerts


def test_the_stack_end_to_end_with_the_debian_binaries() -> None:
    """virtcap serve --demo, prometheus with deploy/prometheus/prometheus.yml (targets and rule
    paths rewritten to this machine; `for` shortened through the mixin's _config so the test does
    not wait 15 minutes), and prometheus-alertmanager with deploy/alertmanager/alertmanager.yml."""
    alertmanager_binary = shutil.which("prometheus-alertmanager")
    if alertmanager_binary is None:
        pytest.fail("the Debian package prometheus-alertmanager is needed (`make test` installs it)")
    scratch = Path(tempfile.mkdtemp(prefix="virtcap-stack-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        short = {"for": dict.fromkeys(FOR_KEYS, "0s")}
        (scratch / "prometheus_rules.yaml").write_text(jsonnet(RULES_SOURCE, short))
        (scratch / "prometheus_alerts.yaml").write_text(jsonnet(ALERTS_SOURCE, short))

        alertmanager_port = free_port()
        alertmanager_url = f"http://127.0.0.1:{alertmanager_port}"
        with (scratch / "alertmanager.log").open("wb") as log:
            alertmanager = subprocess.Popen(
                [
                    *DIES_WITH_THE_TESTS,
                    alertmanager_binary,
                    f"--config.file={ALERTMANAGER_CONFIG}",
                    f"--storage.path={scratch / 'alertmanager'}",
                    f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                    "--cluster.listen-address=",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        processes.append(alertmanager)
        wait_for(lambda: _healthy(alertmanager_url), 30, interval=0.2, what="alertmanager")

        with running_server(["--demo"], scratch) as server:
            prometheus_port = free_port()
            config = PROMETHEUS_CONFIG.read_text()
            # the fleet label the stack's Prometheus gives virtcap's target (virtcap has none)
            jobs = {job["job_name"]: job for job in yaml.safe_load(config)["scrape_configs"]}
            fleet = jobs["virtcap"]["static_configs"][0]["labels"][FLEET_LABEL]
            rewritten = (
                config.replace("virtcap:10463", server.base_url.removeprefix("http://"))
                .replace("alertmanager:9093", f"127.0.0.1:{alertmanager_port}")
                .replace("localhost:9090", f"127.0.0.1:{prometheus_port}")
                .replace("/etc/prometheus/rules", str(scratch))
                .replace("scrape_interval: 15s", "scrape_interval: 1s")
                .replace("evaluation_interval: 15s", "evaluation_interval: 1s")
            )
            assert rewritten.count(str(scratch)) == 2
            with running_prometheus(rewritten, scratch, port=prometheus_port) as prometheus:

                def targets_up() -> bool:
                    targets = prometheus.api("targets")["activeTargets"]
                    return {t["labels"]["job"] for t in targets if t["health"] == "up"} == {
                        "virtcap",
                        "prometheus",
                    }

                wait_for(targets_up, 30, interval=0.25, what="every target up")
                wait_for(
                    lambda: prometheus.query("resource:hypervisor_resource_limit:sum"),
                    20,
                    what="recording rules",
                )
                used = prometheus.query("resource:hypervisor_resource_used:sum")
                assert {r["metric"][FLEET_LABEL] for r in used} == {fleet}
                assert {r["metric"]["resource"] for r in used} == {
                    "vcpu",
                    "pcpu",
                    "memory",
                    "disk",
                    "custom_windows_licence",  # the demo's custom class, on compute-06
                    "vgpu",  # the demo's vGPUs, on compute-09
                }

                def overcommit_in_alertmanager() -> list[dict[str, Any]]:
                    return [
                        a
                        for a in _alertmanager_alerts(alertmanager_url)
                        if a["labels"]["alertname"] == "HypervisorResourceOvercommitted"
                    ]

                wait_for(
                    overcommit_in_alertmanager, 30, interval=0.5, what="the overcommit alert in Alertmanager"
                )
                (alert,) = overcommit_in_alertmanager()
                assert alert["labels"] == {
                    "alertname": "HypervisorResourceOvercommitted",
                    FLEET_LABEL: fleet,
                    "hypervisor": "compute-02",
                    "resource": "vcpu",
                    "severity": "warning",
                    "unit": "cpus",
                }
                assert alert["status"]["state"] == "active"
                assert alert["annotations"]["runbook_url"].endswith("#hypervisorresourceovercommitted")
    finally:
        for process in processes:
            stop_process(process)
        shutil.rmtree(scratch)
    assert all(process.poll() is not None for process in processes)
    assert not scratch.exists()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/healthy", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False
