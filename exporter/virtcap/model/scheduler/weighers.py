"""Nova's RAM, CPU and disk weighers: the hosts that pass the filters, weighed and ordered.

Each weigher's raw values (`HostState.raw_weights`) are clipped below at 0, normalized over the
hosts (`nova.weights.normalize`, minval 0), times the weigher's multiplier, and summed in the
order of `WEIGHERS`; the best host first, ties by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from virtcap.model.scheduler.host_states import HostState, WeigherValues

WEIGHERS = ("ram", "cpu", "disk")
"""Nova's RAMWeigher, CPUWeigher and DiskWeigher, summed in this order."""


@dataclass(frozen=True, slots=True)
class Multipliers:
    """`[filter_scheduler] ram_weight_multiplier`, `cpu_weight_multiplier`,
    `disk_weight_multiplier`: 1.0 spreads (Nova's default), a negative one stacks."""

    ram: float = 1.0
    cpu: float = 1.0
    disk: float = 1.0

    def of(self, weigher: str) -> float:
        value: float = getattr(self, weigher)
        return value


SPREAD = Multipliers()


@dataclass(frozen=True, slots=True)
class Weighed:
    """A host's weight at one step: per weigher its raw value and its share of the weight
    (normalized value x multiplier); their sum is the weight."""

    host: str
    weight: float
    raw: Mapping[str, float]
    parts: Mapping[str, float]


def normalize(values: Sequence[float], minval: float | None = 0.0) -> list[float]:
    """`nova.weights.normalize` with the weighers' minval and no maxval: (v - minval) / (max -
    minval), all 0 when max equals minval (with minval None, the smallest value)."""
    if not values:
        return []
    top = float(max(values))
    bottom = float(min(values) if minval is None else minval)
    if top == bottom:
        return [0.0] * len(values)
    return [(value - bottom) / (top - bottom) for value in values]


def weigh(hosts: Sequence[HostState], multipliers: Multipliers = SPREAD) -> list[Weighed]:
    """The hosts weighed as Nova's weight handler weighs them, best first, ties by name: each
    weigher's raw values clipped below at 0, normalized over the hosts, times its multiplier,
    summed. One host alone weighs 0, as in Nova."""
    raws = [host.raw_weights() for host in hosts]
    if len(hosts) <= 1:
        return [
            Weighed(host.name, 0.0, raw, dict.fromkeys(WEIGHERS, 0.0))
            for host, raw in zip(hosts, raws, strict=True)
        ]
    parts: list[dict[str, float]] = [{} for _ in hosts]
    for weigher in WEIGHERS:
        normalized = normalize([max(raw[weigher], 0.0) for raw in raws])
        multiplier = multipliers.of(weigher)
        for index, value in enumerate(normalized):
            parts[index][weigher] = multiplier * value
    weighed = []
    for host, raw, part in zip(hosts, raws, parts, strict=True):
        total = 0.0
        for weigher in WEIGHERS:
            total += part[weigher]
        weighed.append(Weighed(host.name, total, raw, part))
    return sorted(weighed, key=lambda w: (-w.weight, w.host))


def clipped_values(state: HostState) -> WeigherValues:
    """A host's raw weigher values clipped below at 0, as `weigh` normalizes them."""
    raw = state.raw_weights()
    return (max(raw["ram"], 0.0), max(raw["cpu"], 0.0), max(raw["disk"], 0.0))


def weight_of(values: WeigherValues, tops: Sequence[float], multipliers: Multipliers) -> float:
    """One host's weight among two or more whose largest clipped values are `tops`, computed
    exactly as `weigh` computes it (each normalized value times its multiplier, summed in order),
    so that a choice made from it is the same to the last bit."""
    ram, cpu, disk = values
    t_ram, t_cpu, t_disk = tops
    return (
        0.0
        + multipliers.ram * (ram / t_ram if t_ram != 0.0 else 0.0)
        + multipliers.cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
        + multipliers.disk * (disk / t_disk if t_disk != 0.0 else 0.0)
    )
