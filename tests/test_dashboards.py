"""The Grafana dashboards of the mixin: generated from Jsonnet, linted like Grafana's dashboard-linter
(and held to the fleet variable), and every panel's query proven against a real Prometheus that
scraped the demo."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.mixin import (
    ALERTS_FILE,
    DASHBOARDS_DIRECTORY,
    FLEET_LABEL,
    ROOT,
    RULES_FILE,
    groupings,
    jsonnet_dashboards,
    vector_selectors,
)
from tests.prometheus import FLEET, Prometheus, running_prometheus, scrape_config
from tests.serving import running_server, wait_for

GENERATED = DASHBOARDS_DIRECTORY
PROVISIONING = ROOT / "deploy/grafana/provisioning"
UIDS = {
    "virtcap-fleet.json": "virtcap-fleet",
    "virtcap-hypervisor.json": "virtcap-hypervisor",
    "virtcap-flavors.json": "virtcap-flavors",
    "virtcap-exporter.json": "virtcap-exporter",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What the query proof substitutes for Grafana's variables: the fleet its Prometheus labels the demo
# with, every hypervisor and flavor, the demo's availability zone az-1 (one group at a time), and a
# rate window of several scrapes (the test scrapes every second).
SUBSTITUTIONS = {
    "$fleet": FLEET,
    "$hypervisor": ".*",
    "$flavor": ".*",
    "$kind": "availability_zone",
    "$group": "az-1",
    "$__rate_interval": "10s",
}
FLEET_MATCHER = f'{FLEET_LABEL}="$fleet"'
# Targets (dashboard, panel, query) allowed to return nothing on the healthy demo, each with why.
# Only the query named is excused, never its whole panel: the panel's other queries must still
# return data. Each one must be empty on the demo (else it has no business here) and is proven to
# return EXPECTED_WHERE_MEASURED from a synthetic fleet that has the series.
BUSY_CPUS_UNKNOWN = (
    "busy host CPUs are unknown, no series, where the driver measures no host CPU time: "
    "libvirt's test driver, which the demo runs on"
)
FLEET_BUSY_CPUS = 'resource:hypervisor_resource_actual_usage:sum{fleet="$fleet", resource="vcpu"}'
HYPERVISOR_BUSY_CPUS = (
    'hypervisor_resource_actual_usage{job="virtcap", fleet="$fleet", hypervisor=~"$hypervisor", '
    'resource="vcpu"}'
)
VCPU_WAIT_UNKNOWN = (
    "vCPU wait is unknown, no series, where the hypervisor reports no vCPU delay: libvirt's test "
    "driver, which the demo runs on (and libvirt before 7.2)"
)
FLEET_CONTENDED = (
    'topk by (fleet) (10, hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio{fleet="$fleet"})'
)
HYPERVISOR_WAIT_PER_VCPU = (
    'sum by (fleet, hypervisor) (rate(hypervisor_vcpu_wait_seconds_total{job="virtcap", fleet="$fleet", '
    'hypervisor=~"$hypervisor"}[$__rate_interval])) / (sum by (fleet, hypervisor) '
    '(hypervisor_resource_allocated{job="virtcap", fleet="$fleet", hypervisor=~"$hypervisor", '
    'resource=~"vcpu|pcpu", state="running"}) > 0)'
)
HYPERVISOR_VCPUS_WAITING = (
    'sum by (fleet, hypervisor) (rate(hypervisor_vcpu_wait_seconds_total{job="virtcap", fleet="$fleet", '
    'hypervisor=~"$hypervisor"}[$__rate_interval]))'
)
NO_MAINTENANCE_END = (
    "no hypervisor of the demo is in a maintenance with an end (the series exists only for one that "
    "ends by itself)"
)
HYPERVISOR_MAINTENANCE_END = (
    'hypervisor_maintenance_end_timestamp_seconds{job="virtcap", fleet="$fleet", '
    'hypervisor=~"$hypervisor"} * 1000'
)
MAY_BE_EMPTY: dict[tuple[str, str, str], str] = {
    ("virtcap-hypervisor.json", "Hypervisor", HYPERVISOR_MAINTENANCE_END): NO_MAINTENANCE_END,
    ("virtcap-fleet.json", "vcpu: limit, used and actual usage", FLEET_BUSY_CPUS): BUSY_CPUS_UNKNOWN,
    (
        "virtcap-hypervisor.json",
        "vCPU: busy host CPUs against allocation",
        HYPERVISOR_BUSY_CPUS,
    ): BUSY_CPUS_UNKNOWN,
    ("virtcap-fleet.json", "Most contended hypervisors", FLEET_CONTENDED): VCPU_WAIT_UNKNOWN,
    ("virtcap-hypervisor.json", "vCPU wait per running vCPU", HYPERVISOR_WAIT_PER_VCPU): VCPU_WAIT_UNKNOWN,
    ("virtcap-hypervisor.json", "vCPUs waiting for a CPU", HYPERVISOR_VCPUS_WAITING): VCPU_WAIT_UNKNOWN,
}
# The synthetic fleet: two KVM hosts whose driver measures CPU time and reports vCPU delays, as
# their /metrics would expose them once scraped (job, instance and fleet added), with the memory
# and shut off series a vCPU query must not pick; and the same hosts in another fleet, which no
# query of the demo's fleet may pick. Values: a constant, or a promtool series expression.
_MEASURED = 'job="virtcap",instance="virtcap:10463",fleet="%s",hypervisor="%s",resource="%s",unit="%s"'
_HOST = 'job="virtcap",instance="virtcap:10463",fleet="%s",hypervisor="%s"'
MEASURED_SERIES: dict[str, float | str] = {
    "hypervisor_resource_actual_usage{%s}" % (_MEASURED % (FLEET, "kvm-01", "vcpu", "cpus")): 3.5,
    "hypervisor_resource_actual_usage{%s}" % (_MEASURED % (FLEET, "kvm-02", "vcpu", "cpus")): 6,
    "hypervisor_resource_actual_usage{%s}" % (_MEASURED % (FLEET, "kvm-01", "memory", "bytes")): 2**30,
    "hypervisor_resource_actual_usage{%s}" % (_MEASURED % ("other", "kvm-01", "vcpu", "cpus")): 40,
    # 8 running vCPUs each; kvm-01 waits 1 s a second (1 vCPU waiting, 12.5%), kvm-02 2 s (25%)
    "hypervisor_vcpu_wait_seconds_total{%s}" % (_HOST % (FLEET, "kvm-01")): "0+1",
    "hypervisor_vcpu_wait_seconds_total{%s}" % (_HOST % (FLEET, "kvm-02")): "0+2",
    "hypervisor_vcpu_wait_seconds_total{%s}" % (_HOST % ("other", "kvm-01")): "0+20",
    'hypervisor_resource_allocated{%s,state="running"}' % (_MEASURED % (FLEET, "kvm-01", "vcpu", "cpus")): 8,
    'hypervisor_resource_allocated{%s,state="shutoff"}' % (_MEASURED % (FLEET, "kvm-01", "vcpu", "cpus")): 64,
    'hypervisor_resource_allocated{%s,state="running"}' % (_MEASURED % (FLEET, "kvm-02", "pcpu", "cpus")): 8,
    'hypervisor_resource_allocated{%s,state="running"}'
    % (_MEASURED % ("other", "kvm-01", "vcpu", "cpus")): 8,
    # kvm-01 in maintenance until 2027-01-15T08:00:00Z
    "hypervisor_maintenance_end_timestamp_seconds{%s}" % (_HOST % (FLEET, "kvm-01")): 1_800_000_000,
    "hypervisor_maintenance_end_timestamp_seconds{%s}" % (_HOST % ("other", "kvm-01")): 1_700_000_000,
}
EXPECTED_WHERE_MEASURED: dict[str, dict[str, float]] = {
    FLEET_BUSY_CPUS: {
        f'resource:hypervisor_resource_actual_usage:sum{{fleet="{FLEET}",resource="vcpu",unit="cpus"}}': 9.5
    },
    HYPERVISOR_BUSY_CPUS: {
        "hypervisor_resource_actual_usage{%s}" % (_MEASURED % (FLEET, "kvm-01", "vcpu", "cpus")): 3.5,
        "hypervisor_resource_actual_usage{%s}" % (_MEASURED % (FLEET, "kvm-02", "vcpu", "cpus")): 6,
    },
    FLEET_CONTENDED: {
        "hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio{%s}" % (_HOST % (FLEET, "kvm-01")): 0.125,
        "hypervisor:hypervisor_vcpu_wait_per_running_vcpu:ratio{%s}" % (_HOST % (FLEET, "kvm-02")): 0.25,
    },
    HYPERVISOR_WAIT_PER_VCPU: {
        f'{{fleet="{FLEET}",hypervisor="kvm-01"}}': 0.125,
        f'{{fleet="{FLEET}",hypervisor="kvm-02"}}': 0.25,
    },
    HYPERVISOR_MAINTENANCE_END: {"{%s}" % (_HOST % (FLEET, "kvm-01")): 1_800_000_000_000},
    HYPERVISOR_VCPUS_WAITING: {
        f'{{fleet="{FLEET}",hypervisor="kvm-01"}}': 1,
        f'{{fleet="{FLEET}",hypervisor="kvm-02"}}': 2,
    },
}


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(GENERATED.glob("*.json"))}


def test_committed_dashboards_are_what_the_jsonnet_generates(tmp_path: Path) -> None:
    jsonnet_dashboards(tmp_path)
    generated = {path.name: path.read_text() for path in tmp_path.glob("*.json")}
    committed = {path.name: path.read_text() for path in GENERATED.glob("*.json")}
    assert generated == committed, "mixin/generated/dashboards is out of date: run `make generate`"


def _overlaps(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


@pytest.mark.parametrize("name", sorted(UIDS))
def test_dashboard_lint(name: str) -> None:
    dashboard = dashboards()[name]
    assert dashboard["uid"] == UIDS[name]
    assert dashboard["editable"] is False
    assert dashboard["refresh"] == "30s"
    assert any(link.get("tags") == ["virtcap"] for link in dashboard["links"])
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert (datasource["type"], datasource["query"], datasource["label"]) == (
        "datasource",
        "prometheus",
        "Data source",
    )
    if "hypervisor" in variables:
        assert variables["hypervisor"]["multi"] and variables["hypervisor"]["includeAll"]
    # one fleet at a time, from a series every audited hypervisor has
    fleet = variables["fleet"]
    assert fleet["query"]["query"] == f'label_values(hypervisor_up{{job="virtcap"}}, {FLEET_LABEL})'
    assert not fleet["multi"] and not fleet["includeAll"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE
            if variable is not fleet:
                assert FLEET_MATCHER in variable["query"]["query"], variable["name"]
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for i, panel in enumerate(panels):
        where = f"{name} panel {panel['id']} {panel.get('title')!r}"
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, where
        for other in panels[i + 1 :]:
            assert not _overlaps(panel["gridPos"], other["gridPos"]), (where, other["title"])
        if panel["type"] == "row":  # a heading across the dashboard: no query, unit or data source
            assert panel["title"] and panel["gridPos"]["w"] == 24 and "targets" not in panel, where
            continue
        assert panel["title"] and panel["description"], where
        assert panel["datasource"] == DATASOURCE, where
        assert panel["fieldConfig"]["defaults"].get("unit"), where
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, where
            for function in re.findall(r"\b(rate|irate|increase)\(", target["expr"]):
                assert "[$__rate_interval]" in target["expr"], (where, function)
            assert_keeps_the_fleet(target["expr"], FLEET_LABEL, where)


def assert_keeps_the_fleet(expression: str, label: str, where: str) -> None:
    """Every series the query reads is of the selected fleet, and every aggregation keeps the
    fleet label: two fleets federated into one Prometheus are never summed together."""
    selectors = vector_selectors(expression)
    assert selectors, (where, expression)
    for selector in selectors:
        assert f'{label}="$fleet"' in selector, (where, selector)
    for grouping in groupings(expression):
        assert grouping.keeps(label), (where, grouping, expression)


def test_the_fleet_label_of_the_dashboards_is_configurable(tmp_path: Path) -> None:
    jsonnet_dashboards(tmp_path, {"fleetLabel": "cluster"})
    for path in sorted(tmp_path.glob("*.json")):
        dashboard = json.loads(path.read_text())
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["fleet"]["query"]["query"].endswith(", cluster)")
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                assert_keeps_the_fleet(target["expr"], "cluster", f"{path.name} {panel['title']}")
                assert f'{FLEET_LABEL}="' not in target["expr"], target["expr"]


def test_the_provisioning_points_at_the_dashboards_and_the_datasource_they_use() -> None:
    datasources = yaml.safe_load((PROVISIONING / "datasources/virtcap.yaml").read_text())
    assert datasources["apiVersion"] == 1
    (prometheus,) = datasources["datasources"]
    assert prometheus["type"] == "prometheus"
    for dashboard in dashboards().values():
        default = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")["current"]
        assert default["value"] == prometheus["uid"]
    providers = yaml.safe_load((PROVISIONING / "dashboards/virtcap.yaml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith(
        "/var/lib/grafana/dashboards"
    )


def substitute(expression: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expression = expression.replace(variable, value)
    assert "$" not in expression, expression
    return expression


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus with the project's rules, scraping `virtcap serve --demo` every second."""
    directory = tmp_path_factory.mktemp("query-proof")
    rules = [RULES_FILE, ALERTS_FILE]
    with running_server(["--demo"], directory) as server:
        target = server.base_url.removeprefix("http://")
        with running_prometheus(scrape_config(target, rule_files=rules), directory) as running:
            wait_for(lambda: running.query("up == 1"), 30, interval=0.25, what="a first scrape")
            time.sleep(6)  # enough scrapes for the rates, and a few rule evaluations
            yield running


def panel_targets() -> list[tuple[str, str, str]]:
    return [
        (name, panel["title"], target["expr"])
        for name, dashboard in dashboards().items()
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])  # rows have none
    ]


@pytest.mark.parametrize(("dashboard", "panel", "expression"), panel_targets())
def test_every_panel_query_returns_data_on_the_demo(
    prometheus: Prometheus, dashboard: str, panel: str, expression: str
) -> None:
    result = prometheus.query(substitute(expression))
    if (dashboard, panel, expression) in MAY_BE_EMPTY:
        assert not result, f"{dashboard} / {panel}: {expression} has data now, drop it from MAY_BE_EMPTY"
        return
    assert result, f"{dashboard} / {panel}: no data for {expression}"


def test_every_query_excused_on_the_demo_is_a_panel_query() -> None:
    assert set(MAY_BE_EMPTY) <= set(panel_targets()), set(MAY_BE_EMPTY) - set(panel_targets())
    assert {expression for _, _, expression in MAY_BE_EMPTY} == set(EXPECTED_WHERE_MEASURED)


def test_queries_excused_on_the_demo_return_data_where_measured(tmp_path: Path) -> None:
    """promtool evaluates each excused query, with the project's recording rules, over the synthetic
    fleet that has busy CPUs and vCPU delays, and compares what it returns with
    EXPECTED_WHERE_MEASURED."""
    cases = [
        {
            "expr": substitute(expression),
            "eval_time": "5m",
            "exp_samples": [{"labels": labels, "value": value} for labels, value in expected.items()],
        }
        for expression, expected in EXPECTED_WHERE_MEASURED.items()
    ]
    assert all(case["exp_samples"] for case in cases)
    unit_test = {
        "rule_files": [str(RULES_FILE)],
        "evaluation_interval": "1m",
        "tests": [
            {
                # scraped every second, as the demo in the query proof: the substituted
                # $__rate_interval holds several samples
                "interval": "1s",
                "input_series": [
                    {"series": series, "values": f"{value}x400"} for series, value in MEASURED_SERIES.items()
                ],
                "promql_expr_test": cases,
            }
        ],
    }
    path = tmp_path / "busy-cpus.test.yaml"
    path.write_text(json.dumps(unit_test))  # JSON is YAML
    result = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_variable_query_has_values_on_the_demo(prometheus: Prometheus, name: str) -> None:
    for variable in dashboards()[name]["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["query"]
        values = prometheus.api(f"label/{match.group(2)}/values", **{"match[]": substitute(match.group(1))})
        assert values, variable["name"]
        if variable["name"] == "fleet":
            assert values == [FLEET]
