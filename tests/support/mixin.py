"""The monitoring mixin: where its sources and generated files are (alerts/ and dashboards/ at the
top level, what they share in mixin/), the alerts' configurable `for` durations, Jsonnet to render
it (go-jsonnet: tests/support/jsonnet.py), and a reader of the aggregations, joins and vector
selectors of its PromQL (to hold every one of them to the fleet label)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.files import ROOT
from tests.support.jsonnet import as_files, evaluate
from tests.support.yaml_doc import manifest_yaml_doc

MIXIN = ROOT / "mixin"
"""mixin.libsonnet, its settings and the helper library the alerts and dashboards share."""
ALERTS_DIRECTORY = ROOT / "alerts"
ALERTS_SOURCE = ALERTS_DIRECTORY / "prometheus_alerts.jsonnet"
RULES_SOURCE = ALERTS_DIRECTORY / "prometheus_rules.jsonnet"
ALERTS_FILE = ALERTS_DIRECTORY / "prometheus_alerts.yaml"
RULES_FILE = ALERTS_DIRECTORY / "prometheus_rules.yaml"
UNIT_TESTS = ALERTS_DIRECTORY / "tests"
DASHBOARDS_DIRECTORY = ROOT / "dashboards"
"""The generated dashboards (*.json) beside their Jsonnet sources."""
DASHBOARDS_SOURCE = DASHBOARDS_DIRECTORY / "dashboards.jsonnet"
RUNBOOK = ROOT / "docs" / "runbook.md"
"""The section each alert's runbook_url points at."""
FLEET_LABEL = "fleet"
"""The mixin's default `_config.fleetLabel`."""
FOR_KEYS = (
    "overcommitted",
    "nearlyExhausted",
    "memoryPressure",
    "fleetHostFailure",
    "flavorHeadroom",
    "hugepagesExhausted",
    "pciDeviceHeadroom",
    "vgpuHeadroom",
    "forecast",
    "auditFailing",
    "auditStale",
    "inventoryRefused",
    "exporterDown",
    "groupHostFailure",
    "maintenanceOverdue",
    "cpuContention",
    "storagePoolOverProvisioned",
    "shardMissing",
    "shardsDisagree",
    "claimsDatabaseDown",
    "strandedCapacity",
    "flavorSellable",
    "runway",
    "placementOrphaned",
    "placementUnallocated",
    "placementInventoryDrift",
    "placementDown",
)


def _tla(config: dict[str, Any] | None) -> dict[str, str]:
    return {} if config is None else {"config": json.dumps(config)}


def jsonnet(source: Path, config: dict[str, Any] | None = None) -> str:
    """One of the mixin's YAML entry files (ALERTS_SOURCE, RULES_SOURCE) rendered, `config` merged
    into its _config: its document as JSON, written as YAML as jsonnet would (yaml_doc.py). No -J:
    the mixin imports only its own files, by relative path."""
    rendered = _rendered(source, tuple(_tla(config).items()))
    return manifest_yaml_doc(json.loads(rendered)) + "\n"


@functools.cache
def _rendered(source: Path, tla_codes: tuple[tuple[str, str], ...]) -> str:
    # Remembered for the test process: the same rendering is asked for by several tests, and the
    # sources do not change while the tests run.
    return evaluate(source, {"manifest": "false", **dict(tla_codes)})


def jsonnet_dashboards(directory: Path, config: dict[str, Any] | None = None) -> None:
    """The dashboards rendered into `directory`, one JSON file each, as `make generate` does."""
    as_files(directory, DASHBOARDS_SOURCE, _tla(config))


AGGREGATORS = (
    "count_values",
    "limit_ratio",
    "bottomk",
    "quantile",
    "stddev",
    "stdvar",
    "limitk",
    "count",
    "group",
    "topk",
    "avg",
    "max",
    "min",
    "sum",
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_AGGREGATION = re.compile(
    r"(?<![\w:])(" + "|".join(AGGREGATORS) + r")\s*(?:(by|without)\s*\(([^)]*)\)\s*)?\("
)
_MODIFIER_AFTER = re.compile(r"\s*(by|without)\s*\(([^)]*)\)")
_JOIN = re.compile(r"(?<![\w:])(on|ignoring)\s*\(([^)]*)\)")
_LABEL_LISTS = re.compile(r"(?<![\w:])(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_BRACES = re.compile(r"\{[^}]*\}")
_NAME = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}


def _labels(text: str | None) -> tuple[str, ...]:
    return tuple(label.strip() for label in (text or "").split(",") if label.strip())


def _closing(text: str, opening: int) -> int:
    depth = 0
    for index in range(opening, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses: {text}")


@dataclass(frozen=True)
class Grouping:
    """An aggregation (`sum by (...)`) or a vector match (`on (...)`) and its label list."""

    operator: str
    modifier: str | None
    """by, without, on or ignoring; None for an aggregation over everything."""
    labels: tuple[str, ...]

    def keeps(self, label: str) -> bool:
        if self.modifier in ("by", "on"):
            return label in self.labels
        return self.modifier in ("without", "ignoring") and label not in self.labels


def groupings(expression: str) -> list[Grouping]:
    """Every aggregation of the expression, its modifier before or after its argument, and every
    vector matching clause."""
    text = _STRING.sub('""', expression)
    found = []
    for match in _AGGREGATION.finditer(text):
        operator, modifier, labels = match.groups()
        if modifier is None:
            after = _MODIFIER_AFTER.match(text, _closing(text, match.end() - 1) + 1)
            if after is not None:
                modifier, labels = after.groups()
        found.append(Grouping(operator, modifier, _labels(labels)))
    found += [Grouping(match[1], match[1], _labels(match[2])) for match in _JOIN.finditer(text)]
    return found


def vector_selectors(expression: str) -> list[str]:
    """Every vector selector of the expression, as written (`name{matchers}`, `{matchers}` or a
    bare `name`): names that are not followed by a parenthesis (a function or aggregation) nor
    keywords, with the matchers that follow them."""
    braces: list[str] = []

    def hold(match: re.Match[str]) -> str:
        braces.append(match[0])
        return f"\0{len(braces) - 1}\0"

    text = _BRACES.sub(hold, _RANGES.sub("", _LABEL_LISTS.sub(" ", expression)))
    selectors = []
    consumed: set[int] = set()
    for match in _NAME.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match[0].lower() in _KEYWORDS:
            continue
        held = re.match(r"\0(\d+)\0", rest)
        if held is None:
            selectors.append(match[0])
        else:
            consumed.add(int(held[1]))
            selectors.append(match[0] + braces[int(held[1])])
    selectors += [braces[index] for index in range(len(braces)) if index not in consumed]
    return selectors
