"""What a metric family is (name, type, help, labels, unit, stability): the catalogue's entries
(exposition/catalogue.py and the packing's, exposition/packing_catalogue.py) are instances."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

MetricType = Literal["gauge", "counter", "info"]
Stability = Literal["stable", "experimental"]
"""`experimental`: added in the last two issues, and its name, labels or meaning may still change
before 1.0 without the deprecation a `stable` family gets (CHANGELOG.md lists every change)."""

UNIT_LABEL = "unit label"
"""The `unit` of a family whose series each say their unit in a `unit` label (`cpus`, `bytes`,
`integer`), as the amounts of a resource do."""


@dataclass(frozen=True, eq=False)
class MetricFamily:
    """One family as Prometheus sees it in the text format. Compared and hashed by identity: each
    entry is a single module-level object."""

    name: str
    """As queried and as the `# HELP` line spells it: counters end in `_total`, info families in
    `_info` (prometheus-client adds those suffixes to the names its families are built with)."""
    type: MetricType
    """`info` is rendered as a gauge of value 1 in the text format."""
    help: str
    labels: tuple[str, ...]
    """The family's labels, in order."""
    unit: str = ""
    """What the values are in: a unit the name ends with (`seconds`), UNIT_LABEL where each series
    carries it in its `unit` label, or empty for a plain number (a count, a flag, a ratio)."""
    info_labels: tuple[str, ...] = ()
    """An info family's value: the labels each series adds to `labels`."""
    label_values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The fixed set of values a label takes, where it has one worth documenting."""
    meaning: str = ""
    """The documentation's description (Markdown), more than the help text says."""
    stability: Stability = "stable"
    """Whether dashboards and alerts of your own may rely on the family as it is (docs/metrics.md)."""

    def __post_init__(self) -> None:
        suffix = {"counter": "_total", "info": "_info"}.get(self.type, "")
        if not self.name.endswith(suffix):
            raise ValueError(f"a {self.type} is named ...{suffix}: {self.name}")
        if self.type != "counter" and self.name.endswith("_total"):
            # Prometheus and OpenMetrics keep the suffix for counters: `rate()` reads it as one
            raise ValueError(f"only a counter is named ..._total: {self.name}")
        if self.info_labels and self.type != "info":
            raise ValueError(f"only an info family has info labels: {self.name}")
        if self.unit == UNIT_LABEL and "unit" not in self.labels:
            raise ValueError(f"{self.name} says its unit in a label it lacks")
        if self.unit not in ("", UNIT_LABEL) and not self.name.removesuffix(suffix).endswith(f"_{self.unit}"):
            raise ValueError(f"{self.name} does not end with its unit, {self.unit}")
        unknown = set(self.label_values) - set(self.all_labels)
        if unknown:
            raise ValueError(f"{self.name} has no label {sorted(unknown)}")

    @property
    def all_labels(self) -> tuple[str, ...]:
        """Every label of a series: an info family's value keys too."""
        return self.labels + self.info_labels

    @property
    def text_type(self) -> str:
        """The type on the `# TYPE` line of the text format, which has no info type."""
        return "gauge" if self.type == "info" else self.type

    def gauge(self) -> GaugeMetricFamily:
        self._expect("gauge")
        return GaugeMetricFamily(self.name, self.help, labels=self.labels)

    def counter(self) -> CounterMetricFamily:
        self._expect("counter")
        return CounterMetricFamily(self.name, self.help, labels=self.labels)

    def info(self) -> InfoMetricFamily:
        self._expect("info")
        return InfoMetricFamily(self.name.removesuffix("_info"), self.help, labels=self.labels)

    def _expect(self, kind: MetricType) -> None:
        if self.type != kind:
            raise TypeError(f"{self.name} is a {self.type}, not a {kind}")
