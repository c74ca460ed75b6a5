"""A scenario in the model's terms, checked and resolved (names, flavors and captures already
looked up by whoever read the file): what it adds, removes, drains and changes, and the demand
it places, in the order `apply_scenario` (hosts.py) and `place_demand` (placement.py) take them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource

MAX_ADDED_HYPERVISORS = 10_000
"""The most hypervisors one scenario adds, all entries together."""
MAX_DEMAND_INSTANCES = 100_000
"""The most instances one scenario's demand asks for, all entries together."""

GroupKey = tuple[str, str]
"""(kind, name) of a configured group: ("availability_zone", "az-1"), ("rack", "r2")."""


@dataclass(frozen=True, slots=True)
class HostSelection:
    """Some hypervisors of the fleet: by name, by group, or all of them."""

    names: frozenset[str] = frozenset()
    groups: frozenset[GroupKey] = frozenset()
    every: bool = False

    def __bool__(self) -> bool:
        return self.every or bool(self.names) or bool(self.groups)

    def holds(self, name: str, groups: tuple[GroupKey, ...]) -> bool:
        return self.every or name in self.names or any(group in self.groups for group in groups)


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """New ratios, reserved amounts or CPU sets for some hypervisors; what it does not name stays."""

    hosts: HostSelection
    allocation_ratios: Mapping[Resource, float] = field(default_factory=dict)
    reserved: Mapping[Resource, int] = field(default_factory=dict)
    cpu_sets: Mapping[str, frozenset[int] | None] = field(default_factory=dict)
    """`cpu_shared_set` and/or `cpu_dedicated_set`, where the change sets them (None: unset)."""


@dataclass(frozen=True, slots=True)
class AddedHypervisors:
    """`count` new hypervisors alike, named `<prefix>-<n>` from 1: `template`'s hardware (a SKU's
    facts or a capture's, without domains), `policy`, in `groups`."""

    count: int
    prefix: str
    template: HostFacts
    policy: HostPolicy
    groups: tuple[GroupKey, ...] = ()

    @property
    def availability_zone(self) -> str | None:
        return next((name for kind, name in self.groups if kind == "availability_zone"), None)

    def names(self, count: int | None = None) -> list[str]:
        return [
            f"{self.prefix}-{number}" for number in range(1, (self.count if count is None else count) + 1)
        ]


@dataclass(frozen=True, slots=True)
class DemandItem:
    """`count` instances of one flavor (configured, discovered or described), one request for as
    many as fit, in the scenario's order."""

    label: str
    demand: Demand
    count: int


@dataclass(frozen=True, slots=True)
class Scenario:
    policy: tuple[PolicyChange, ...] = ()
    remove: HostSelection = HostSelection()
    drain: HostSelection = HostSelection()
    add: tuple[AddedHypervisors, ...] = ()
    demand: tuple[DemandItem, ...] = ()
    reserve_host_failures: int | None = None
    """The failures sellable headroom keeps room for; None: the configuration's."""
