"""The flavors headroom is reported for: the configured ones, and (unless `discover_flavors: false`)
those discovered in the Nova metadata of the fleet's domains (virtcap.model.discovery).

Discovered flavors are fleet-wide: the union over every hypervisor's last successful audit (a
hypervisor that is down keeps its flavors until it is removed from the configuration). A flavor
disappears when no domain of any hypervisor carries it any more. A configured flavor wins over a
discovered one of the same name; discovered names with several definitions across the fleet are
resolved as virtcap.model.discovery says, reported in the capacity report and logged once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping

from virtcap.config import Config, Flavor
from virtcap.model.discovery import (
    NO_DISCOVERY,
    DiscoveredFlavor,
    FlavorDiscovery,
    FlavorKey,
    HostFlavor,
    definition_text,
    discover,
    flavor_demand,
    host_flavors,
)
from virtcap.model.facts import HostFacts, NovaFlavor
from virtcap.model.host_fit import Demand

log = logging.getLogger(__name__)


def discovered_flavor(found: DiscoveredFlavor) -> Flavor:
    """A discovered flavor as a configured one is used: by claims and placements naming it."""
    demand = flavor_demand(found.flavor)
    return Flavor(
        name=found.flavor.name,
        request=demand.request,
        within=demand.within,
        extra_specs=dict(found.flavor.extra_specs),
    )


def merged_flavors(configured: Iterable[Flavor], discovery: FlavorDiscovery) -> tuple[Flavor, ...]:
    """The configured flavors, then the discovered ones no configured flavor names, by name."""
    configured = tuple(configured)
    names = {flavor.name for flavor in configured}
    return configured + tuple(
        discovered_flavor(found) for name, found in sorted(discovery.flavors.items()) if name not in names
    )


def with_discovered_flavors(config: Config, facts: Iterable[tuple[str, HostFacts]]) -> Config:
    """The configuration with the flavors discovered in these audits (`virtcap audit`, `virtcap
    place`): as configured where `discover_flavors` is off."""
    if not config.discover_flavors:
        return config
    discovery = discover((name, host_flavors(found)) for name, found in facts)
    return dataclasses.replace(config, flavors=merged_flavors(config.flavors, discovery))


class FlavorCatalog:
    """The running exporter's discovered flavors, kept per hypervisor, and a fleet-wide tally of
    the domains carrying each definition, which every audit's `demands` reads. The tally moves by
    one hypervisor's difference at each `record`, so that an audit cycle of the fleet costs what
    its hypervisors' flavors cost, not a discovery of the whole fleet per hypervisor recorded (a
    cycle's first audits each bring new flavors). The full discovery (which hypervisors carry
    which definition) is made only where it is shown: a conflict to log, the API, the report.
    Only the event loop touches it."""

    def __init__(self) -> None:
        self.discover = False
        """`discover_flavors`, as the running configuration says (set by whoever applies it)."""
        self._per_hypervisor: dict[str, dict[FlavorKey, HostFlavor]] = {}
        self._domains: dict[FlavorKey, int] = {}
        """Per definition, the domains of the fleet carrying it (none at 0: removed)."""
        self._definitions: dict[FlavorKey, NovaFlavor] = {}
        self._taken: dict[str, NovaFlavor] | None = {}
        """Per name, the definition taken (the one most domains carry); None: to be chosen again."""
        self._conflicting: frozenset[str] = frozenset()
        """The names with several definitions, as of `_taken`."""
        self._discovery: FlavorDiscovery | None = NO_DISCOVERY
        """None: to be made again."""
        self.discoveries = 0
        """Full discoveries made: what the tally spares is seen here (tests, benchmarks)."""
        self._merged: tuple[Mapping[str, Demand], Mapping[str, Demand]] | None = None
        """The configured demands last merged, and the result."""
        self._conflicts_logged: set[str] = set()
        self._effective: tuple[Config, FlavorDiscovery, Config] | None = None
        """The configuration last given to `effective`, the discovery then, and the result."""
        self._last: Mapping[str, Demand] | None = None
        """The demands last given out, kept across changes of the discovery to tell a change."""
        self.on_change: Callable[[Mapping[str, Demand]], None] | None = None
        """Told each new set of demands that differs from the last: the hypervisors fitted with
        the last one are audited again, so that a flavor found on one is fitted on all."""

    def record(self, hypervisor: str, facts: HostFacts) -> None:
        found = host_flavors(facts)
        kept = self._per_hypervisor.get(hypervisor)
        if kept != found:
            self._count(kept, -1)
            self._count(found, 1)
            self._per_hypervisor[hypervisor] = found

    def track(self, names: Iterable[str]) -> None:
        """Forget the hypervisors no longer configured, and their flavors."""
        wanted = set(names)
        for name in [name for name in self._per_hypervisor if name not in wanted]:
            self._count(self._per_hypervisor.pop(name), -1)

    def _count(self, found: Mapping[FlavorKey, HostFlavor] | None, sign: int) -> None:
        """One hypervisor's definitions added to the tally (1) or taken out of it (-1)."""
        if not found:
            return
        for key, host_flavor in found.items():
            domains = self._domains.get(key, 0) + sign * host_flavor.domains
            if domains > 0:
                self._domains[key] = domains
                self._definitions[key] = host_flavor.flavor
            else:
                self._domains.pop(key, None)
                self._definitions.pop(key, None)
        self._taken = None
        self._discovery = None

    def _taken_flavors(self) -> dict[str, NovaFlavor]:
        """Per name (in order), the definition most domains carry, ties to the smallest, as
        `discover` takes it."""
        if self._taken is None:
            by_name: dict[str, list[FlavorKey]] = {}
            for key in self._domains:
                by_name.setdefault(key[0], []).append(key)
            self._taken = {
                name: self._definitions[min(keys, key=lambda key: (-self._domains[key], key))]
                for name, keys in sorted(by_name.items())
            }
            self._conflicting = frozenset(name for name, keys in by_name.items() if len(keys) > 1)
            self._merged = None
        return self._taken

    @property
    def discovery(self) -> FlavorDiscovery:
        """The flavors found in the fleet (whether or not they are used: see `discover`)."""
        if self._discovery is None:
            self._discovery = discover(sorted(self._per_hypervisor.items()))
            self.discoveries += 1
            self._log_conflicts(self._discovery)
        return self._discovery

    def demands(self, configured: Mapping[str, Demand]) -> Mapping[str, Demand]:
        """What each flavor headroom is reported for asks: the configured ones, then the
        discovered ones they do not name."""
        if not self.discover:
            return configured
        taken = self._taken_flavors()
        if not self._conflicting <= self._conflicts_logged:
            self.discovery  # noqa: B018  (made to log the new conflicts with their hypervisors)
        self._conflicts_logged &= self._conflicting
        if self._merged is not None and self._merged[0] is configured:
            return self._merged[1]
        fresh = dict(configured)
        for name, flavor in taken.items():
            if name not in fresh:
                fresh[name] = flavor_demand(flavor)
        last = self._last
        # the same flavors as before: the same object, so whoever was fitted with it needs nothing
        merged: Mapping[str, Demand] = last if last is not None and last == fresh else fresh
        changed = last is not None and merged is not last
        self._merged, self._last = (configured, merged), merged
        if changed and self.on_change is not None:
            self.on_change(merged)
        return merged

    def effective(self, config: Config) -> Config:
        """The configuration with the discovered flavors, for claims and placements naming one."""
        if not self.discover:
            return config
        discovery = self.discovery
        kept = self._effective
        if kept is not None and kept[0] is config and kept[1] is discovery:
            return kept[2]
        effective = dataclasses.replace(config, flavors=merged_flavors(config.flavors, discovery))
        self._effective = (config, discovery, effective)
        return effective

    def sources(self, configured: Iterable[Flavor]) -> dict[str, str]:
        """Each flavor headroom is reported for, by name, and where it comes from."""
        found = {flavor.name: "configured" for flavor in configured}
        if self.discover:
            for name in self._taken_flavors():
                found.setdefault(name, "discovered")
        return dict(sorted(found.items()))

    def _log_conflicts(self, discovery: FlavorDiscovery) -> None:
        for name, definitions in discovery.conflicts.items():
            if name in self._conflicts_logged:
                continue
            self._conflicts_logged.add(name)
            log.warning(
                "flavor defined differently across the fleet: the definition most domains carry is used",
                extra={
                    "flavor": name,
                    "definitions": "; ".join(definition_text(found) for found in definitions),
                },
            )
        self._conflicts_logged &= set(discovery.conflicts)
