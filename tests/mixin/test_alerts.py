"""The mixin's rules and alerts: generated files up to date, promtool-checked and unit-tested,
linted like mixtool does, the fleet label kept by every aggregation, the Alertmanager example valid,
and the alerts firing on the demo where meant."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.claims_client import call
from tests.support.demo import GROUP_HEADROOM, GROUP_TOTALS
from tests.support.files import ROOT
from tests.support.jsonnet import JsonnetError, evaluate, evaluate_snippet
from tests.support.mixin import (
    ALERTS_DIRECTORY,
    ALERTS_FILE,
    ALERTS_SOURCE,
    DASHBOARDS_DIRECTORY,
    FLEET_LABEL,
    FOR_KEYS,
    MIXIN,
    RULES_FILE,
    RULES_SOURCE,
    RUNBOOK,
    UNIT_TESTS,
    groupings,
    jsonnet,
)
from tests.support.prometheus import FLEET, Prometheus, running_prometheus, scrape_config
from tests.support.serving import running_server, wait_for
from virtcap.model.resources import GIB

GENERATED = {ALERTS_SOURCE: ALERTS_FILE, RULES_SOURCE: RULES_FILE}
SEVERITIES = {"critical", "warning", "info"}
ALERTMANAGER = ROOT / "deploy/alertmanager/alertmanager.yml"


def tool(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, check=False, cwd=ROOT)


def rules_of(text: str) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return rules_of(ALERTS_FILE.read_text())


def unit_test_files() -> list[Path]:
    return sorted(UNIT_TESTS.glob("*.test.yaml"))


def test_committed_rule_files_are_what_the_mixin_generates() -> None:
    for source, target in GENERATED.items():
        assert jsonnet(source) == target.read_text(), f"{target.name} is out of date: run `make generate`"


def test_the_mixin_exposes_what_monitoring_mixins_do() -> None:
    """One root mixin.libsonnet with prometheusAlerts, prometheusRules, grafanaDashboards and
    _config, as kubernetes-mixin's and node-mixin's, and a jsonnetfile.json without dependencies to
    fetch (it builds offline); the alerts' and dashboards' sources at the top level, beside the
    files generated from them."""
    code = "local m = import 'mixin.libsonnet'; std.sort(std.objectFieldsAll(m))"
    fields = json.loads(evaluate_snippet(code, [MIXIN]))
    assert fields == ["_config", "grafanaDashboards", "prometheusAlerts", "prometheusRules"]
    assert json.loads((MIXIN / "jsonnetfile.json").read_text())["dependencies"] == []
    for part in ("config.libsonnet", "lib"):
        assert (MIXIN / part).exists(), part
    for part in ("alerting", "recording", "tests"):
        assert (ALERTS_DIRECTORY / part).is_dir(), part
    assert list(DASHBOARDS_DIRECTORY.glob("*.libsonnet")) and list(DASHBOARDS_DIRECTORY.glob("*.json"))


def test_promtool_checks_both_files() -> None:
    result = tool("promtool", "check", "rules", str(ALERTS_FILE), str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_every_alert() -> None:
    files = unit_test_files()
    assert files
    result = tool("promtool", "test", "rules", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {name for path in files for name in re.findall(r"alertname: (\w+)", path.read_text())}
    assert tested == {rule["alert"] for rule in alert_rules()}


def test_every_unit_test_series_and_alert_carries_the_fleet_label() -> None:
    for path in unit_test_files():
        for test in yaml.safe_load(path.read_text())["tests"]:
            for series in test["input_series"]:
                assert f'{FLEET_LABEL}="' in series["series"], (path.name, series)
            for case in test.get("alert_rule_test", []):
                for alert in case["exp_alerts"]:
                    assert FLEET_LABEL in alert["exp_labels"], (path.name, case)
            for case in test.get("promql_expr_test", []):
                for sample in case["exp_samples"]:
                    assert f'{FLEET_LABEL}="' in sample["labels"], (path.name, case)


def test_every_aggregation_and_vector_match_keeps_the_fleet_label() -> None:
    expressions = [rule["expr"] for rule in rules_of(RULES_FILE.read_text()) + alert_rules()]
    found = [grouping for expression in expressions for grouping in groupings(expression)]
    assert {g.operator for g in found} >= {"sum", "max", "count", "on"}
    for expression in expressions:
        for grouping in groupings(expression):
            assert grouping.keeps(FLEET_LABEL), (grouping, expression)


def test_the_fleet_label_is_configurable() -> None:
    """Rendered with another fleetLabel, every aggregation and vector match keeps that one."""
    for source in GENERATED:
        for rule in rules_of(jsonnet(source, {"fleetLabel": "cluster"})):
            for grouping in groupings(rule["expr"]):
                assert grouping.keeps("cluster") and FLEET_LABEL not in grouping.labels, rule["expr"]


def test_the_alertmanager_example_is_valid() -> None:
    result = tool("amtool", "check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr
    route = yaml.safe_load(ALERTMANAGER.read_text())
    # two fleets' alerts of hypervisors with the same name are two notifications, and a failing
    # audit in one fleet inhibits nothing in another
    assert FLEET_LABEL in route["route"]["group_by"]
    assert all(FLEET_LABEL in rule["equal"] for rule in route["inhibit_rules"])
    # a group alert per kind and group (an aggregate and a rack may share a name), a pool alert per
    # pool; the overdue maintenance reminder (info) is not dropped with the other info alerts
    assert {"kind", "group", "pool"} <= set(route["route"]["group_by"])
    routes = route["route"]["routes"]
    reminder = next(
        i
        for i, r in enumerate(routes)
        if r["receiver"] != "blackhole" and 'alertname="HypervisorMaintenanceOverdue"' in r["matchers"]
    )
    dropped = next(i for i, r in enumerate(routes) if r["receiver"] == "blackhole")
    assert reminder < dropped


def test_every_alert_has_a_configurable_for_and_severity() -> None:
    """Every alert's `for` and severity come from _config by key (FOR_KEYS lists them all)."""
    short = jsonnet(ALERTS_SOURCE, {"for": dict.fromkeys(FOR_KEYS, "0s")})
    assert {rule["for"] for rule in rules_of(short)} == {"0s"}
    info = jsonnet(ALERTS_SOURCE, {"severity": dict.fromkeys(FOR_KEYS, "info")})
    assert {rule["labels"]["severity"] for rule in rules_of(info)} == {"info"}


def test_flavor_headroom_is_for_configured_flavors_unless_configured_otherwise() -> None:
    """Discovered flavors are left out (not configured ones selected: an exporter without
    virtcap_flavor_info still has every flavor alerted on); flavorHeadroomDiscovered takes them in."""

    def flavor_alert(config: dict[str, Any] | None = None) -> str:
        (rule,) = [
            r for r in rules_of(jsonnet(ALERTS_SOURCE, config)) if r["alert"] == "HypervisorFlavorHeadroomLow"
        ]
        return str(rule["expr"])

    assert "unless on (fleet, flavor)" in flavor_alert() and 'source="discovered"' in flavor_alert()
    assert "virtcap_flavor_info" not in flavor_alert({"flavorHeadroomDiscovered": True})


def _github_anchors(markdown: str) -> set[str]:
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


def test_alerts_follow_the_mixin_conventions() -> None:
    anchors = _github_anchors(RUNBOOK.read_text())
    runbook_path = "/" + RUNBOOK.relative_to(ROOT).as_posix()
    rules = alert_rules()
    assert len(rules) == 27
    for rule in rules:
        name = rule["alert"]
        # CamelCase words, or an acronym before one, as kubernetes-mixin's KubeCPUOvercommit
        # (HypervisorCPUContention is the name)
        assert re.fullmatch(r"(?:[A-Z][a-z0-9]+|[A-Z]{2,4}(?=[A-Z][a-z]))+", name) and len(name) <= 40, name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert annotations["summary"].endswith(".") and "{{" not in annotations["summary"], name
        assert "{{" in annotations["description"] and "$labels" in annotations["description"] + name, name
        document, anchor = annotations["runbook_url"].split("#", 1)
        assert document.endswith(runbook_path), (name, document)
        assert anchor == name.lower() and anchor in anchors, name


def test_recording_rules_are_named_level_metric_operations() -> None:
    document = yaml.safe_load(RULES_FILE.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            assert re.fullmatch(r"[a-z_]*:[a-z_]+:[a-z_]+", rule["record"]), rule["record"]


# On the demo fleet, with every `for` shortened to nothing (through _config, not in the shipped
# files), exactly these alerts fire: the ones demo.yaml means to trip.
EXPECTED_ON_DEMO = {
    ("HypervisorResourceOvercommitted", (("hypervisor", "compute-02"), ("resource", "vcpu"))),
    ("HypervisorResourceNearlyExhausted", (("hypervisor", "compute-03"), ("resource", "memory"))),
    ("HypervisorMemoryPressure", (("hypervisor", "compute-03"), ("resource", "memory"))),
    # the one hypervisor whose domains would not all find a host, though the fleet's sums say they
    # would; and the groups it is in that hold more than one hypervisor in service: its zone and
    # its rack (r1: compute-01 and compute-04, compute-05 being in maintenance)
    ("HypervisorFleetCannotTolerateHostFailure", (("hypervisor", "compute-04"),)),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "az-1"), ("kind", "availability_zone"))),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "r1"), ("kind", "rack"))),
    ("HypervisorFlavorHeadroomLow", (("flavor", "p1.8xlarge"),)),
    (
        "HypervisorHugepagesExhausted",
        (("cell", "0"), ("hypervisor", "compute-08"), ("page_size_bytes", "2097152")),
    ),
    ("HypervisorVgpuHeadroomLow", (("mdev_type", "nvidia-232"),)),
    # az-2's NFS export: 150 GiB of volumes on 100 GiB
    ("HypervisorStoragePoolOverProvisioned", (("pool", "netfs://nfs1.demo/export/nova"),)),
    # (no HypervisorMaintenanceOverdue: compute-05's maintenance has an end, which the hypervisor
    # dashboard shows; alerts/tests holds the reminder's own unit tests)
    ("HypervisorAuditFailing", (("hypervisor", "compute-07"),)),
}


def _key(alert: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = alert["labels"]
    keys = (
        "alias",
        "cell",
        "flavor",
        "group",
        "hypervisor",
        "kind",
        "mdev_type",
        "page_size_bytes",
        "pool",
        "resource",
    )
    shown = tuple((k, labels[k]) for k in keys if k in labels)
    return labels["alertname"], shown


def test_the_demo_trips_exactly_the_alerts_it_is_meant_to(tmp_path: Path) -> None:
    # and a maintenance overdue at once, as a `for` of nothing made it before it counted from the start
    short = {"for": dict.fromkeys(FOR_KEYS, "0s"), "maintenanceOverdueSeconds": 0}
    rules = tmp_path / "rules-with-short-for"
    rules.mkdir()
    (rules / "alerts.yaml").write_text(jsonnet(ALERTS_SOURCE, short))
    (rules / "rules.yaml").write_text(jsonnet(RULES_SOURCE, short))
    with running_server(["--demo"], tmp_path) as server:
        target = server.base_url.removeprefix("http://")
        config = scrape_config(target, rule_files=[rules / "rules.yaml", rules / "alerts.yaml"])
        with running_prometheus(config, tmp_path) as prometheus:

            def firing() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
                alerts = prometheus.api("alerts")["alerts"]
                return {_key(a) for a in alerts if a["state"] == "firing"}

            wait_for(lambda: firing() >= EXPECTED_ON_DEMO, 30, interval=0.5, what="the demo's alerts")
            time.sleep(3.0)  # a few more evaluations: nothing else joins
            assert firing() == EXPECTED_ON_DEMO
            overcommitted = [
                a
                for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "HypervisorResourceOvercommitted"
            ]
            assert overcommitted[0]["labels"] == {
                "alertname": "HypervisorResourceOvercommitted",
                "hypervisor": "compute-02",
                "fleet": FLEET,
                "resource": "vcpu",
                "severity": "warning",
                "unit": "cpus",
            }
            assert overcommitted[0]["annotations"]["description"].startswith(
                "compute-02 has allocated (with pending claims) 110.9% of its vcpu limit"
            )
            (evacuation,) = [
                a
                for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "HypervisorFleetCannotTolerateHostFailure"
            ]
            assert evacuation["annotations"]["description"].startswith(
                "If compute-04 failed, 1 of its domains would find no host"
            )
            # ... though by the fleet's sums it can lose any host (demo.yaml): the others in
            # service have 734.5 GiB of memory free for compute-04's 592 (tests/support/demo.py)
            shortfall = {
                r["metric"]["resource"]: float(r["value"][1])
                for r in prometheus.query("resource:hypervisor_failover_shortfall:sum")
            }
            assert all(value <= 0 for value in shortfall.values()), shortfall
            assert (shortfall["memory"], shortfall["vcpu"]) == (-142.5 * 2**30, -246)
            # within az-1 the sums say it too: 1390 GiB used - (2055 - 767.5)
            zone = {
                r["metric"]["resource"]: float(r["value"][1])
                for r in prometheus.query(
                    'group_resource:hypervisor_failover_shortfall:sum{kind="availability_zone", group="az-1"}'
                )
            }
            assert (zone["memory"], zone["vcpu"]) == (102.5 * 2**30, 25)
            _assert_group_rules(prometheus)


def _assert_group_rules(prometheus: Prometheus) -> None:
    """The per-group recording rules on the demo: tests/support/demo.py's hand-computed totals (of
    the hypervisors in service, each once per group it is in) and flavor headroom (per kind whose
    groups do not overlap: zones and racks)."""

    def values(rule: str) -> dict[tuple[str, ...], float]:
        found: dict[tuple[str, ...], float] = {}
        for sample in prometheus.query(rule):
            labels = sample["metric"]
            key = (labels["kind"], labels["group"], labels.get("resource") or labels["flavor"])
            found[key] = float(sample["value"][1])
        return found

    expected_totals = {
        (kind, group, resource): numbers
        for (kind, group), totals in GROUP_TOTALS.items()
        for resource, numbers in totals.items()
    }
    parts = ("limit", "used", "free")
    rules = {part: values(f"group_resource:hypervisor_resource_{part}:sum") for part in parts}
    for (kind, group, resource), numbers in expected_totals.items():
        scale = GIB if resource == "memory" else 1
        got = tuple(rules[part].get((kind, group, resource), 0.0) / scale for part in parts)
        assert got == numbers, (kind, group, resource)
    headroom = values("group_flavor:hypervisor_schedulable_instances:sum")
    for (kind, group), flavors in GROUP_HEADROOM.items():
        if kind in {"availability_zone", "rack"}:
            for flavor, count in flavors.items():
                assert headroom[kind, group, flavor] == count, (kind, group, flavor)
    assert {key[:2] for key in headroom} == {key for key in GROUP_HEADROOM if key[0] != "aggregate"}


# Issue 16's acceptance: a host put into maintenance through the API leaves the fleet's capacity
# and the host-failure alerts within one audit interval (the demo's: 15 s), and comes back when
# released. compute-04 is the host the fleet alert is about; while it is out, compute-06's domains
# no longer all find a host in az-1 (compute-04 took 12 of them), so the alerts move: compute-06
# fires, in its zone az-1, its rack r2 and its aggregate windows; rack r1 (compute-01 and the two
# hosts in maintenance) has none left.
HOST_FAILURE = {"HypervisorFleetCannotTolerateHostFailure", "HypervisorGroupCannotTolerateHostFailure"}
IN_SERVICE = {
    ("HypervisorFleetCannotTolerateHostFailure", (("hypervisor", "compute-04"),)),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "az-1"), ("kind", "availability_zone"))),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "r1"), ("kind", "rack"))),
}
COMPUTE_04_OUT = {
    ("HypervisorFleetCannotTolerateHostFailure", (("hypervisor", "compute-06"),)),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "az-1"), ("kind", "availability_zone"))),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "r2"), ("kind", "rack"))),
    ("HypervisorGroupCannotTolerateHostFailure", (("group", "windows"), ("kind", "aggregate"))),
}
AUDIT_INTERVAL = 15.0
"""demo.yaml's audit.interval."""


def test_a_host_in_maintenance_through_the_api_leaves_fleet_capacity_and_the_alerts(tmp_path: Path) -> None:
    short = {"for": dict.fromkeys(FOR_KEYS, "0s")}
    rules = tmp_path / "rules-with-short-for"
    rules.mkdir()
    (rules / "alerts.yaml").write_text(jsonnet(ALERTS_SOURCE, short))
    (rules / "rules.yaml").write_text(jsonnet(RULES_SOURCE, short))
    writer = {"Authorization": "Basic " + base64.b64encode(b"demo:demo").decode()}
    path = "/api/v1/hypervisors/compute-04/maintenance"
    with running_server(["--demo"], tmp_path) as server:
        target = server.base_url.removeprefix("http://")
        config = scrape_config(target, rule_files=[rules / "rules.yaml", rules / "alerts.yaml"])
        with running_prometheus(config, tmp_path) as prometheus:

            def fleet(resource: str) -> float | None:
                found = prometheus.query(f'resource:hypervisor_resource_limit:sum{{resource="{resource}"}}')
                return float(found[0]["value"][1]) if found else None

            def failing() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
                alerts = prometheus.api("alerts")["alerts"]
                return {
                    _key(a)
                    for a in alerts
                    if a["state"] == "firing" and a["labels"]["alertname"] in HOST_FAILURE
                }

            def state() -> tuple[float | None, float | None, set[tuple[str, tuple[tuple[str, str], ...]]]]:
                return fleet("memory"), fleet("vcpu"), failing()

            # the fleet in service (compute-05 is in maintenance by the configuration): 2624 GiB of
            # memory and 1040 vCPUs (tests/support/demo.py's GROUP_TOTALS, az-1 + az-2)
            in_service = (2624 * GIB, 1040.0, IN_SERVICE)
            wait_for(lambda: state() == in_service, 30, interval=0.5, what="the demo's fleet in service")

            started = time.monotonic()
            status, held = call(server, "PUT", path, {"reason": "acceptance"}, writer)
            assert status == 200 and held["in_maintenance"] is True, held
            # compute-04 out: 767.5 GiB and 256 vCPUs fewer
            without = ((2624 - 767.5) * GIB, 1040.0 - 256, COMPUTE_04_OUT)
            wait_for(lambda: state() == without, AUDIT_INTERVAL, interval=0.25, what="compute-04 out")
            assert time.monotonic() - started < AUDIT_INTERVAL

            started = time.monotonic()
            status, released = call(server, "DELETE", path, headers=writer)
            assert status == 200 and released["in_maintenance"] is False, released
            wait_for(lambda: state() == in_service, AUDIT_INTERVAL, interval=0.25, what="compute-04 back")
            assert time.monotonic() - started < AUDIT_INTERVAL


def test_the_runway_window_and_warning_are_configurable() -> None:
    """runwayWindow is the trend's range in both runway rules, runwayWarning (a Prometheus
    duration, compound ones too) the alert's threshold in seconds; a threshold that is not a
    duration fails the rendering rather than alerting on a wrong number."""
    config = {"runwayWindow": "30d", "runwayWarning": "1w2d12h"}
    runways = [r for r in rules_of(jsonnet(RULES_SOURCE, config)) if r["record"].endswith(":runway_seconds")]
    assert len(runways) == 2 and all("[30d])" in r["expr"] for r in runways)
    (runway,) = [
        r for r in rules_of(jsonnet(ALERTS_SOURCE, config)) if r["alert"] == "HypervisorFlavorRunwayShort"
    ]
    assert f"runway_seconds < {9 * 86400 + 12 * 3600}\n" in runway["expr"]
    assert "the last 30d" in runway["annotations"]["description"]
    with pytest.raises(JsonnetError) as failed:
        evaluate(ALERTS_SOURCE, {"manifest": "false", "config": '{"runwayWarning": "two weeks"}'})
    assert "two weeks" in str(failed.value)
