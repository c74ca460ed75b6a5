"""The mixin's Grafana dashboards as the tests read them: their panels' queries, with the
dashboard variables substituted as Grafana does."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.mixin import (
    DASHBOARDS_DIRECTORY,
)
from tests.support.prometheus import FLEET

GENERATED = DASHBOARDS_DIRECTORY


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(GENERATED.glob("*.json"))}


# Every panel's query against a real Prometheus that scraped the demo, its variables as Grafana sets them.
# Grafana's own variables the dashboards use: the rate window Grafana gives a scrape interval of a
# second, the test's (at least four scrapes).
BUILTINS = {"__rate_interval": "10s"}


VARIABLE_REFERENCE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]")


def interpolate(expression: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = next(name for name in match.groups() if name)
        found = values.get(name, BUILTINS.get(name))
        assert found is not None, f"no value for ${name} in {expression}"
        return found

    return VARIABLE_REFERENCE.sub(value, expression)


DEMO_DEFAULTS = {
    "fleet": FLEET,
    "hypervisor": ".*",
    "flavor": ".*",
    "kind": "aggregate",
    "group": "gpu",
}
"""The variables' values Grafana opens the demo's dashboards with (every hypervisor and flavor, the
first kind of group and its first group, alphabetically), for the tests that compare two Prometheus
servers without resolving them (tests/system/test_federation.py)."""


def substitute(expression: str) -> str:
    return interpolate(expression, DEMO_DEFAULTS)


def panel_targets() -> list[tuple[str, str, str]]:
    return [
        (name, panel["title"], target["expr"])
        for name, dashboard in dashboards().items()
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])  # rows have none
    ]
