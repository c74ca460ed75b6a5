"""Flavors discovered in the Nova metadata of existing domains: the flavors actually in use, so
that headroom is reported for them without listing them in the configuration. Pure.

Nova writes a domain's flavor into its metadata when it builds the domain (name, vCPUs, memory,
root, ephemeral and swap disks, extra specs). One name may come with several definitions across
the fleet: a flavor deleted and created again with other sizes under the same name (Nova keeps
each instance's own copy), or metadata edited by hand. Each name then takes the definition most
domains carry (ties: the smallest definition, compared as written), and the others are reported
as a conflict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from virtcap.model.facts import HostFacts, NovaFlavor, NovaInstance
from virtcap.model.host_fit import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.nova import nova_request
from virtcap.model.resources import MIB

MAX_FLAVOR_NAME = 255
"""Nova's bound on a flavor's name: a longer one is not Nova's, and would be a label value."""

FlavorKey = tuple[str, int, int, int, int, int, tuple[tuple[str, str], ...]]
"""A definition as a value: name, vcpus, memory MiB, root GiB, ephemeral GiB, swap MiB, extra specs."""


def flavor_key(flavor: NovaFlavor) -> FlavorKey:
    return (
        flavor.name,
        flavor.vcpus,
        flavor.memory_mib,
        flavor.root_gib,
        flavor.ephemeral_gib,
        flavor.swap_mib,
        tuple(sorted(flavor.extra_specs.items())),
    )


@dataclass(frozen=True, slots=True)
class HostFlavor:
    """One definition found on one hypervisor, and how many of its domains carry it."""

    flavor: NovaFlavor
    domains: int


def host_flavors(facts: HostFacts) -> dict[FlavorKey, HostFlavor]:
    """The flavor definitions of a hypervisor's Nova domains (every state: a stopped instance's
    flavor is still in use), by definition. Flavors without a name, or asking for neither vCPUs
    nor memory (which Nova's API refuses), are left out."""
    found: dict[FlavorKey, HostFlavor] = {}
    for domain in facts.domains:
        flavor = domain.nova.flavor if domain.nova is not None else None
        if (
            flavor is None
            or not 0 < len(flavor.name) <= MAX_FLAVOR_NAME
            or not (flavor.vcpus or flavor.memory_mib)
        ):
            continue
        key = flavor_key(flavor)
        kept = found.get(key)
        found[key] = HostFlavor(flavor, kept.domains + 1 if kept else 1)
    return found


@dataclass(frozen=True, slots=True)
class DiscoveredFlavor:
    """A definition as the fleet carries it: how many domains, on which hypervisors."""

    flavor: NovaFlavor
    domains: int
    hypervisors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FlavorDiscovery:
    flavors: Mapping[str, DiscoveredFlavor]
    """By name, the definition taken, names in order."""
    conflicts: Mapping[str, tuple[DiscoveredFlavor, ...]]
    """The names found with several definitions: every definition, the one taken first."""


NO_DISCOVERY = FlavorDiscovery({}, {})


def discover(per_hypervisor: Iterable[tuple[str, Mapping[FlavorKey, HostFlavor]]]) -> FlavorDiscovery:
    """The fleet's flavors from each hypervisor's definitions (see host_flavors)."""
    domains: dict[FlavorKey, int] = {}
    hosts: dict[FlavorKey, list[str]] = {}
    flavors: dict[FlavorKey, NovaFlavor] = {}
    for hypervisor, found in per_hypervisor:
        for key, host_flavor in found.items():
            domains[key] = domains.get(key, 0) + host_flavor.domains
            hosts.setdefault(key, []).append(hypervisor)
            flavors.setdefault(key, host_flavor.flavor)
    by_name: dict[str, list[FlavorKey]] = {}
    for key in sorted(domains, key=lambda key: (key[0], -domains[key], key)):
        by_name.setdefault(key[0], []).append(key)
    definitions = {
        name: tuple(DiscoveredFlavor(flavors[key], domains[key], tuple(sorted(hosts[key]))) for key in keys)
        for name, keys in by_name.items()
    }
    return FlavorDiscovery(
        flavors={name: found[0] for name, found in definitions.items()},
        conflicts={name: found for name, found in definitions.items() if len(found) > 1},
    )


def flavor_demand(flavor: NovaFlavor) -> Demand:
    """What one more instance of a discovered flavor asks for, as Nova would schedule it (booted
    from an image: its root disk local): the flavor's request groups, and the NUMA topology and
    devices its extra specs ask for (none where Nova would refuse them), as a domain of the
    flavor is scheduled again (virtcap.model.scheduler.domain_demand)."""
    within: WithinHost
    try:
        within = within_host(flavor.vcpus, flavor.memory_mib * MIB, flavor.extra_specs)
    except ValueError:
        within = NOTHING_WITHIN
    return Demand(nova_request(NovaInstance(flavor)), within)


def definition_text(found: DiscoveredFlavor) -> str:
    """`4 vCPUs, 8192 MiB, root 40 GiB, ephemeral 0 GiB, swap 0 MiB: 3 domain(s) on compute-01`."""
    flavor = found.flavor
    specs = f", {len(flavor.extra_specs)} extra spec(s)" if flavor.extra_specs else ""
    return (
        f"{flavor.vcpus} vCPUs, {flavor.memory_mib} MiB, root {flavor.root_gib} GiB, ephemeral "
        f"{flavor.ephemeral_gib} GiB, swap {flavor.swap_mib} MiB{specs}: {found.domains} domain(s) on "
        f"{', '.join(found.hypervisors)}"
    )
