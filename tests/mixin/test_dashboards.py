"""The Grafana dashboards of the mixin: generated from Jsonnet, linted like Grafana's dashboard-linter
(and held to the fleet variable), and every panel's query proven to have data on the demo, scraped
by a real Prometheus, its variables resolved as Grafana resolves them, without exception: the
Placement reconciliation's panels on the demo reconciled with a real Placement, drift planted."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dashboards import (
    DEMO_DEFAULTS,
    GENERATED,
    VARIABLE_REFERENCE,
    dashboards,
    interpolate,
    panel_targets,
)
from tests.support.files import ROOT
from tests.support.mixin import (
    ALERTS_FILE,
    FLEET_LABEL,
    RULES_FILE,
    groupings,
    jsonnet_dashboards,
    vector_selectors,
)
from tests.support.placement_loader import PlacementLoader, nova_inventories
from tests.support.placement_server import running_placement
from tests.support.prometheus import FLEET, Prometheus, running_prometheus, scrape_config
from tests.support.serving import WORKER_SECONDS, running_server, wait_for
from virtcap.demo import demo_config_text

PROVISIONING = ROOT / "deploy/grafana/provisioning"
NO_DATA_SECONDS = 30.0
"""How long a panel's query is asked again before its having no data fails the test."""
UIDS = {
    "virtcap-fleet.json": "virtcap-fleet",
    "virtcap-hypervisor.json": "virtcap-hypervisor",
    "virtcap-flavors.json": "virtcap-flavors",
    "virtcap-exporter.json": "virtcap-exporter",
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
FLEET_MATCHER = f'{FLEET_LABEL}="$fleet"'


def test_committed_dashboards_are_what_the_jsonnet_generates(tmp_path: Path) -> None:
    jsonnet_dashboards(tmp_path)
    generated = {path.name: path.read_text() for path in tmp_path.glob("*.json")}
    committed = {path.name: path.read_text() for path in GENERATED.glob("*.json")}
    assert generated == committed, "dashboards/*.json are out of date: run `make generate`"


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


_LABEL_VALUES = re.compile(
    r"label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[A-Za-z_]\w*)\s*\)", re.S
)
_QUERY_RESULT = re.compile(r"query_result\((?P<query>.+)\)", re.S)
_NUMBER = re.compile(r"\d+")


def regular_escape(value: str) -> str:
    """How Grafana's Prometheus data source writes a single-value variable's value into a query."""
    return value.replace("\\", "\\\\").replace("'", "\\\\'")


def regex_escape(value: str) -> str:
    """... and a value of a multi-value or include-All variable: a regex literal, in a PromQL string."""
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


@dataclass(frozen=True)
class Variable:
    """A dashboard variable resolved on the demo: its options as Grafana lists them."""

    options: tuple[str, ...]
    multi: bool
    include_all: bool
    all_value: str | None

    def choices(self) -> list[str]:
        """Its values as written into a query, Grafana's default first: All where the variable has
        it (its custom allValue, else the regex of every option), else the first option. A
        single-value variable keeps its default; a multi-value one is tried with each option."""
        if not (self.multi or self.include_all):
            return [regular_escape(self.options[0])]
        singles = [regex_escape(option) for option in self.options]
        if not self.include_all:
            return singles
        every = self.all_value if self.all_value is not None else "(" + "|".join(singles) + ")"
        return [every, *singles]


def referenced(expression: str) -> set[str]:
    return {
        next(name for name in match.groups() if name) for match in VARIABLE_REFERENCE.finditer(expression)
    }


def _sorted(options: list[str], sort: int) -> list[str]:
    """Grafana's variable sorts: 1/2 alphabetical, 3/4 numerical (the first number in each), 5/6
    alphabetical ignoring case, 7/8 natural; odd ascending, even descending; 0 as queried."""

    def numerical(option: str) -> int:
        found = _NUMBER.search(option)
        return int(found.group(0)) if found else -1

    def natural(option: str) -> list[Any]:
        return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", option)]

    keys: dict[int, Any] = {1: str, 3: numerical, 5: str.lower, 7: natural}
    if sort == 0:
        return options
    return sorted(options, key=keys[sort - (sort + 1) % 2], reverse=sort % 2 == 0)


def _options(prometheus: Prometheus, variable: dict[str, Any], values: dict[str, str]) -> tuple[str, ...]:
    """A query variable's options, its query run as Grafana's Prometheus data source runs it, then
    its regex and sort applied."""
    query = variable["query"]
    text = interpolate(query["query"] if isinstance(query, dict) else query, values).strip()
    if match := _LABEL_VALUES.fullmatch(text):
        selector = {"match[]": match["selector"]} if match["selector"] else {}
        found = [str(option) for option in prometheus.api(f"label/{match['label']}/values", **selector)]
    elif match := _QUERY_RESULT.fullmatch(text):
        found = []
        for sample in prometheus.query(match["query"]):
            labels = dict(sample["metric"])
            name = labels.pop("__name__", "")
            pairs = ", ".join(f'{key}="{label}"' for key, label in labels.items())
            timestamp, number = sample["value"]
            found.append(f"{name}{{{pairs}}} {number} {int(float(timestamp) * 1000)}")
    else:
        raise AssertionError(f"variable {variable['name']}: a query this test cannot run as Grafana: {text}")
    if variable.get("regex"):
        pattern = re.compile(variable["regex"].strip("/"))
        kept = []
        for option in found:
            if matched := pattern.search(option):
                named = matched.groupdict().get("value")
                kept.append(named if named is not None else matched.group(1) if pattern.groups else option)
        found = kept
    return tuple(dict.fromkeys(_sorted(found, variable.get("sort", 0))))


def resolve(prometheus: Prometheus, dashboard: dict[str, Any]) -> dict[str, Variable]:
    """Every variable of the dashboard in its order, each query run with the variables before it at
    their defaults, as Grafana resolves them on opening the dashboard."""
    variables: dict[str, Variable] = {}
    defaults: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "datasource":
            continue
        if variable["type"] == "query":
            options = _options(prometheus, variable, defaults)
        elif variable["type"] == "custom":
            options = tuple(option.strip() for option in variable["query"].split(","))
        else:
            options = (variable["query"],)  # a constant
        assert options, f"{dashboard['uid']}: variable {name} has no value on the demo"
        variables[name] = Variable(
            options, bool(variable.get("multi")), bool(variable.get("includeAll")), variable.get("allValue")
        )
        defaults[name] = variables[name].choices()[0]
    return variables


def assignments(expression: str, variables: dict[str, Variable]) -> Iterator[dict[str, str]]:
    """Every variable at its default, but the multi-value ones the query uses (the hypervisor and
    the flavor), which take each of their values in turn."""
    defaults = {name: variable.choices()[0] for name, variable in variables.items()}
    tried = sorted(
        name for name in referenced(expression) if name in variables and len(variables[name].choices()) > 1
    )
    for values in itertools.product(*(variables[name].choices() for name in tried)):
        yield defaults | dict(zip(tried, values, strict=True))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus with the project's rules, scraping `virtcap serve --demo` every second,
    once it has scraped two audits (busy CPUs are a rate between two) and evaluated its rules on
    them."""
    directory = tmp_path_factory.mktemp("query-proof")
    rules = [RULES_FILE, ALERTS_FILE]
    with running_server(["--demo"], directory) as server:
        target = server.base_url.removeprefix("http://")
        with running_prometheus(scrape_config(target, rule_files=rules), directory) as running:
            wait_for(lambda: running.query("up == 1"), 30, interval=0.25, what="a first scrape")
            audited_twice = (
                "count(changes(hypervisor_audit_timestamp_seconds[1m]) > 0"
                " and on (hypervisor) hypervisor_up == 1) == count(hypervisor_up == 1)"
            )
            wait_for(
                lambda: running.query(audited_twice), 60, interval=0.5, what="a second audit of each host"
            )
            # every packing answer scraped (they follow the tolerance, one step after the other)
            caught_up = "virtcap_packing_pending_answers == 0"
            wait_for(
                lambda: running.query(caught_up), WORKER_SECONDS, interval=0.5, what="every packing answer"
            )
            time.sleep(5)  # enough scrapes of it for the rates, and a few rule evaluations
            yield running


@pytest.fixture(scope="module")
def variables(prometheus: Prometheus) -> dict[str, dict[str, Variable]]:
    return {name: resolve(prometheus, dashboard) for name, dashboard in dashboards().items()}


@pytest.fixture(scope="module")
def placement_variables(placement_prometheus: Prometheus) -> dict[str, dict[str, Variable]]:
    return {name: resolve(placement_prometheus, dashboard) for name, dashboard in dashboards().items()}


# compute-02 of the demo as a real Placement holds it, every kind of drift planted: a stale
# inventory (totals nova-compute would not report), a leaked allocation (a consumer that runs
# nowhere), compute-02-vm0001 (m1.medium: 2 vCPUs) allocated 1 vCPU, and its other Nova instances
# allocated nothing. The demo's other hypervisors have no provider (unmatched).
PLACEMENT_PROVIDER = "compute-02"
LEAKED_CONSUMER = "00000000-0000-4000-8000-0000000000ff"
RESIZED_INSTANCE = "d0b97e03-b366-5b06-81c3-55bda0255815"
PLANTED = {
    f'hypervisor_placement_orphaned_consumers{{hypervisor="{PLACEMENT_PROVIDER}"}}': 1.0,
    f'hypervisor_placement_mismatched_allocations{{hypervisor="{PLACEMENT_PROVIDER}"}}': 1.0,
    f'count(hypervisor_placement_unallocated_domains{{hypervisor="{PLACEMENT_PROVIDER}"}} > 0)': 1.0,
    f'count(hypervisor_placement_inventory_drift{{hypervisor="{PLACEMENT_PROVIDER}", field="total"}} != 0)': (
        3.0
    ),
}
"""The planted drift seen: one leaked consumer, one resized instance, instances unallocated, and the
three totals stale (nova_inventories' VCPU, MEMORY_MB and DISK_GB)."""


def reads_placement(expression: str) -> bool:
    """A query of the Placement reconciliation's families, which the demo alone does not have."""
    return "_placement_" in expression


def _plant_drift(placement_url: str) -> None:
    PlacementLoader(placement_url).load(
        {
            "providers": [{"name": PLACEMENT_PROVIDER, "inventories": nova_inventories(64, 131072, 1000)}],
            "consumers": [
                {
                    "uuid": LEAKED_CONSUMER,
                    "allocations": {PLACEMENT_PROVIDER: {"VCPU": 1, "MEMORY_MB": 2048}},
                },
                {
                    "uuid": RESIZED_INSTANCE,
                    "allocations": {PLACEMENT_PROVIDER: {"VCPU": 1, "MEMORY_MB": 4096}},
                },
            ],
        }
    )


def demo_with_placement(placement_url: str) -> str:
    """demo.yaml as `virtcap serve --demo` loads it, reading Placement every second, compute-02
    matched to its provider by name (the test driver's hostname is not the demo's)."""
    text = demo_config_text()
    compute_02 = 'compute-02.xml"\n'
    assert text.count(compute_02) == 1
    text = text.replace(compute_02, f"{compute_02}    placement_provider: {PLACEMENT_PROVIDER}\n")
    return text + f"\nplacement: {{endpoint: '{placement_url}', timeout: 5s, interval: 1s}}\n"


@pytest.fixture(scope="module")
def placement_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus with the project's rules, scraping the demo fleet reconciled with a real
    Placement (tests/support/placement_server.py) where drift is planted, once it has scraped a
    successful reading: the Placement panels' queries are instant, no rate needs two."""
    directory = tmp_path_factory.mktemp("placement-query-proof")
    with running_placement(directory / "placement") as placement:
        _plant_drift(placement.base_url)
        config = directory / "demo-with-placement.yaml"
        config.write_text(demo_with_placement(placement.base_url))
        with running_server(["--config", str(config)], directory) as server:
            target = server.base_url.removeprefix("http://")
            with running_prometheus(
                scrape_config(target, rule_files=[RULES_FILE, ALERTS_FILE]), directory
            ) as running:
                read = (
                    "virtcap_placement_up == 1"
                    " and on (fleet) count by (fleet) (hypervisor_placement_inventory_drift) > 0"
                )
                wait_for(
                    lambda: running.query(read),
                    WORKER_SECONDS,
                    interval=0.25,
                    what="a reading of Placement scraped",
                )
                # what was planted, as the panels read it (one reading: the families agree)
                for query, expected in PLANTED.items():
                    found = [float(sample["value"][1]) for sample in running.query(query)]
                    assert found == [expected], (query, found)
                yield running


def _panel_cases() -> list[Any]:
    """Every panel query; the Placement ones last, so that their fixture (which needs the upstream
    virtualenv's Placement) starts once the demo's panels are done."""
    targets = panel_targets()
    return [target for target in targets if not reads_placement(target[2])] + [
        pytest.param(*target, marks=pytest.mark.upstream) for target in targets if reads_placement(target[2])
    ]


@pytest.mark.parametrize(("dashboard", "panel", "expression"), _panel_cases())
def test_every_panel_query_has_data_on_the_demo(
    request: pytest.FixtureRequest,
    dashboard: str,
    panel: str,
    expression: str,
) -> None:
    """With no exception: for some hypervisor and flavor, every query of every panel has data."""
    placement = reads_placement(expression)
    prometheus: Prometheus = request.getfixturevalue("placement_prometheus" if placement else "prometheus")
    resolved = request.getfixturevalue("placement_variables" if placement else "variables")[dashboard]
    # Asked again for a while: on a busy machine a scrape of the exporter can time out (its series
    # then stale until the next) or a round of Placement fail (its families gone until the next).
    deadline = time.monotonic() + NO_DATA_SECONDS
    while True:
        tried = 0
        for values in assignments(expression, resolved):
            tried += 1
            if prometheus.query(interpolate(expression, values)):
                return
        if time.monotonic() > deadline:
            pytest.fail(
                f"{dashboard} / {panel}: no data for {expression} (with any of {tried} sets of variables)"
            )
        time.sleep(1.0)


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_variable_has_values_on_the_demo(variables: dict[str, dict[str, Variable]], name: str) -> None:
    resolved = variables[name]
    assert {key: variable.choices()[0] for key, variable in resolved.items()}.items() <= DEMO_DEFAULTS.items()
    assert resolved["fleet"].options == (FLEET,)
    assert resolved["fleet"].choices() == [FLEET]
    if "hypervisor" in resolved:
        hypervisors = resolved["hypervisor"]
        assert "compute-01" in hypervisors.options and hypervisors.choices()[0] == ".*"
    if "flavor" in resolved:
        assert "m1\\\\.small" in resolved["flavor"].choices()  # a regex literal in a PromQL string


def test_grafanas_interpolation() -> None:
    """The escaping and the defaults this proof follows, as Grafana's Prometheus data source does."""
    multi = Variable(("m1.small", "a|b"), multi=True, include_all=True, all_value=None)
    assert multi.choices() == ["(m1\\\\.small|a\\\\|b)", "m1\\\\.small", "a\\\\|b"]
    assert Variable(("x",), multi=True, include_all=True, all_value=".*").choices() == [".*", "x"]
    assert Variable(("b", "a"), multi=False, include_all=False, all_value=None).choices() == ["b"]
    assert (
        interpolate('x{a="$a", b=~"${b}"}[$__rate_interval]', {"a": "1", "b": "2"}) == 'x{a="1", b=~"2"}[10s]'
    )
    assert _sorted(["b10", "a2", "b9"], 1) == ["a2", "b10", "b9"]
    assert _sorted(["b10", "a2", "b9"], 4) == ["b10", "b9", "a2"]
    assert _sorted(["b10", "a2", "b9"], 7) == ["a2", "b9", "b10"]
