"""The configuration as the rest of the exporter uses it: one complete policy per hypervisor.

The file is written as layers (Nova's defaults < the file's `defaults` < each hypervisor's own
keys, merged key by key) so that a fleet is described once; everything downstream wants the
result of that merge, frozen, with no optional keys left. The checks that need the merged
policy (disjoint CPU sets, reserved CPUs next to CPU sets) are made here, in the same
one-line `file: key: what was expected` form as the schema's (see virtcap.config.errors).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from virtcap.config.errors import clip, explain_validation_error
from virtcap.config.placement import SECRET_NAMES, PlacementSection
from virtcap.config.schema import (
    AVAILABILITY_ZONE,
    AllocationRatios,
    AuditSettings,
    ClaimSettings,
    ConfigFile,
    DiskSource,
    ExpositionSection,
    FailureToleranceSettings,
    FlavorSection,
    HostGroupSection,
    HypervisorSection,
    PolicySection,
    ReclaimSettings,
    Reserved,
    ShardingSection,
    validate_document,
)
from virtcap.config.yamlfile import ConfigError, load_yaml_file, load_yaml_text
from virtcap.model.capacity import amounts
from virtcap.model.host_fit import NOTHING_WITHIN, Demand, WithinHost, within_host
from virtcap.model.maintenance import Maintenance
from virtcap.model.nova import flavor_request
from virtcap.model.ownership import OwnershipMetadata
from virtcap.model.pci import PCI_ALIAS_SPEC, PciAlias, alias_request_problem
from virtcap.model.policy import NOVA_ALLOCATION_RATIOS, NOVA_RESERVED, HostPolicy, Inventory
from virtcap.model.resources import Amounts, Resource, resource_by_label
from virtcap.model.scheduler import SPREAD, Multipliers
from virtcap.model.sharding import UNSHARDED, Shard, shard_of
from virtcap.units import format_cpu_set

__all__ = [
    "DEFAULT_DISK",
    "LOCAL_URI",
    "Config",
    "Flavor",
    "GroupKey",
    "Hypervisor",
    "build_config",
    "configure_new_hypervisor",
    "load_config",
    "parse_config",
    "select_shard",
]

LOCAL_URI = "qemu:///system"
_T = TypeVar("_T")
GroupKey = tuple[str, str]
"""A group: its kind and its name (`("aggregate", "gpu")`)."""


@dataclass(frozen=True, slots=True)
class Hypervisor:
    name: str
    uri: str
    policy: HostPolicy
    disk: DiskSource | None
    maintenance: Maintenance | None = None
    """`maintenance:` of its entry, whether or not its end has passed."""
    groups: tuple[GroupKey, ...] = ()
    """The groups it is in, sorted by kind and name: one entry per membership."""

    @property
    def availability_zone(self) -> str | None:
        """Its availability zone, None where it is in none (Nova's default zone)."""
        return next((name for kind, name in self.groups if kind == AVAILABILITY_ZONE), None)

    ownership: OwnershipMetadata | None = None
    """Where its domains' metadata names their project (`ownership`), besides Nova's own."""
    placement_provider: str | None = None
    """Its root provider in Placement (name or UUID) where not its hostname (`placement`)."""


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    request: Amounts
    within: WithinHost = NOTHING_WITHIN
    """What its extra specs ask of a hypervisor's NUMA cells and PCI devices."""
    extra_specs: Mapping[str, str] = field(default_factory=dict)

    @property
    def demand(self) -> Demand:
        return Demand(self.request, self.within)


@dataclass(frozen=True, slots=True)
class PolicyLayers:
    """What a hypervisor's policy is merged from beside its own keys: `defaults` and the groups'
    policies (`host_groups`), kept so that a hypervisor the file does not list (a scenario's
    added ones) is configured exactly as if it were listed (`configure_new_hypervisor`)."""

    defaults: PolicySection = field(default_factory=PolicySection)
    groups: Mapping[GroupKey, HostGroupSection] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Config:
    source: str
    audit: AuditSettings
    hypervisors: tuple[Hypervisor, ...]
    flavors: tuple[Flavor, ...]
    claims: ClaimSettings = field(default_factory=ClaimSettings)
    pci_aliases: Mapping[str, PciAlias] = field(default_factory=dict)
    """Nova's `[pci] alias`, by name: what `pci_passthrough:alias` in a flavor asks for."""
    multipliers: Multipliers = SPREAD
    """`scheduler.weighers`: the RAM, CPU and disk weighers' multipliers of a dry-run placement."""
    failure_tolerance: FailureToleranceSettings = field(default_factory=FailureToleranceSettings)
    """`scheduler.failure_tolerance`: the background simulation of hypervisors lost."""
    exposition: ExpositionSection = field(default_factory=ExpositionSection)
    discover_flavors: bool = True
    """Nova flavors of existing domains join `flavors` (virtcap.service.flavors); the configured
    ones win on the same name."""
    shard: Shard = UNSHARDED
    """This exporter's part of the fleet (`sharding`, `--shard`, `--total-shards`): `hypervisors`
    holds only the hypervisors assigned to it."""
    every_hypervisor: tuple[Hypervisor, ...] | None = None
    """Every hypervisor of the configuration, whichever shard audits it (None: `hypervisors`)."""
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    """`reclaim`: when a shut-off or idle domain's allocation counts as reclaimable."""
    policy_layers: PolicyLayers = field(default_factory=PolicyLayers)
    placement: PlacementSection | None = None
    """`placement`: the Placement to reconcile with; None: none (the default)."""

    @property
    def configured_hypervisors(self) -> tuple[Hypervisor, ...]:
        """Every hypervisor of the configuration, those of the other shards too, in its order."""
        return self.hypervisors if self.every_hypervisor is None else self.every_hypervisor

    def shard_elsewhere(self, name: str) -> int | None:
        """The shard that audits the configured hypervisor `name` where it is not this one's."""
        if not self.shard.sharded or any(h.name == name for h in self.hypervisors):
            return None
        if not any(h.name == name for h in self.configured_hypervisors):
            return None
        return shard_of(name, self.shard.total)

    def not_here(self, name: str) -> str:
        """Why `name` is not one of this exporter's hypervisors, for an answer or a log line."""
        elsewhere = self.shard_elsewhere(name)
        if elsewhere is None:
            return "not a configured hypervisor"
        return (
            f"audited by shard {elsewhere} of {self.shard.total}, not by this exporter "
            f"(shard {self.shard.ordinal}): ask that shard's exporter"
        )

    @property
    def flavor_demands(self) -> dict[str, Demand]:
        return {flavor.name: flavor.demand for flavor in self.flavors}


DEFAULT_DISK = DiskSource(pool="default")


def load_config(path: Path | str | None) -> Config:
    """The configuration in `path`, or Nova's defaults for the local hypervisor when None."""
    if path is None:
        return build_config(ConfigFile(), source="(built-in defaults)")
    return _config_from_document(load_yaml_file(path), source=str(path))


def select_shard(config: Config, shard: Shard) -> Config:
    """The configuration as shard `shard` audits it: only the hypervisors assigned to it, so that
    everything downstream (audits, connections, discovered flavors, failure tolerance, claims on
    `any`) covers the shard and no other."""
    every = config.configured_hypervisors
    held = tuple(hypervisor for hypervisor in every if shard.holds(hypervisor.name))
    return replace(config, hypervisors=held, shard=shard, every_hypervisor=every)


def _file_shard(section: ShardingSection, source: str) -> Shard:
    if section.shard >= section.total_shards:
        raise ConfigError(
            f"{source}: sharding.shard: expected a shard from 0 to total_shards - 1 "
            f"({section.total_shards - 1}), numbered from 0; got {section.shard}"
        )
    return Shard(section.shard, section.total_shards)


def parse_config(text: str, source: str) -> Config:
    return _config_from_document(load_yaml_text(text, source), source)


def _config_from_document(raw: object, source: str) -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections (audit, defaults, hypervisors, flavors)")
    try:
        parsed = validate_document(raw)
    except ValidationError as error:
        raise ConfigError(explain_validation_error(error, source, ConfigFile)) from None
    return build_config(parsed, source)


def build_config(parsed: ConfigFile, source: str) -> Config:
    entries = parsed.hypervisors
    if entries is None:
        entries = [HypervisorSection(name=socket.gethostname() or "localhost", uri=LOCAL_URI)]
    aliases = {entry.name: entry.alias() for entry in parsed.pci.alias}
    group_policies = {(section.kind, section.name): section for section in parsed.host_groups}
    ownership = (
        OwnershipMetadata(
            namespace=parsed.ownership.metadata_namespace,
            path=tuple(parsed.ownership.element.split("/")),
            id_attribute=parsed.ownership.id_attribute,
        )
        if parsed.ownership is not None
        else None
    )
    hypervisors = []
    disjoint: set[tuple[int, int]] = set()
    for index, entry in enumerate(entries):
        where = f"hypervisors[{index}]" if parsed.hypervisors is not None else "defaults"
        groups = _memberships(parsed.defaults, entry)
        policies = [group_policies[group] for group in groups if group in group_policies]
        policy, disk = _merge_policy(parsed.defaults, entry, source, where, disjoint, groups=policies)
        policy = replace(policy, pci_aliases=aliases)
        maintenance = None
        if entry.maintenance is not None:
            maintenance = Maintenance("config", entry.maintenance.reason, entry.maintenance.until)
        hypervisors.append(
            Hypervisor(
                name=entry.name,
                uri=entry.uri,
                policy=policy,
                disk=disk,
                maintenance=maintenance,
                groups=groups,
                ownership=ownership,
                placement_provider=entry.placement_provider,
            )
        )
    flavors = tuple(
        Flavor(
            name=section.name,
            request=_flavor_request(section),
            within=_flavor_within(section, f"{source}: flavors[{index}].extra_specs"),
            extra_specs=section.extra_specs,
        )
        for index, section in enumerate(parsed.flavors)
    )
    for index, flavor in enumerate(flavors):
        if not any(amount > 0 for amount in flavor.request.values()):
            raise ConfigError(
                f"{source}: flavors[{index}].extra_specs: the flavor asks for nothing "
                "(its resources: amounts are all 0); expected at least one amount above 0"
            )
    for index, section in enumerate(parsed.flavors):
        _check_alias_request(section, aliases, f"{source}: flavors[{index}].extra_specs")
    if parsed.placement is not None:
        _check_secrets(parsed.placement, source)
    shard = _file_shard(parsed.sharding, source)
    config = Config(
        source=source,
        audit=parsed.audit,
        hypervisors=tuple(hypervisors),
        flavors=flavors,
        claims=parsed.claims,
        pci_aliases=aliases,
        multipliers=Multipliers(**parsed.scheduler.weighers.model_dump()),
        failure_tolerance=parsed.scheduler.failure_tolerance,
        exposition=parsed.exposition,
        discover_flavors=parsed.discover_flavors,
        reclaim=parsed.reclaim,
        policy_layers=PolicyLayers(parsed.defaults, group_policies),
        placement=parsed.placement,
    )
    return select_shard(config, shard) if shard.sharded else config


def _check_secrets(section: PlacementSection, source: str) -> None:
    """Each secret the Placement reader will read is there now: a file it can read, a variable
    that is set (read again when the reader starts; never kept in the configuration)."""
    auth = section.auth
    for name in SECRET_NAMES:
        path = getattr(auth, f"{name}_file")
        if path is not None:
            try:
                with Path(path).open("rb") as secret:
                    secret.read(1)
            except OSError as error:
                raise ConfigError(
                    f"{source}: placement.auth.{name}_file: cannot read {clip(path, 120)}: "
                    f"{error.strerror or error}"
                ) from None
        variable = getattr(auth, f"{name}_env")
        if variable is not None and not os.environ.get(variable):
            raise ConfigError(
                f"{source}: placement.auth.{name}_env: ${clip(variable, 60)} is not set; "
                f"expected the {name} in it"
            )


def configure_new_hypervisor(config: Config, name: str, own: PolicySection, where: str) -> Hypervisor:
    """A hypervisor the file does not list, configured as if its entry (`own`, the keys of a
    `hypervisors` entry but `name`, `uri` and `maintenance`) were: over `defaults` and its groups'
    policies, with the file's PCI aliases. Raises ConfigError naming `where` (`file: key: why`)."""
    layers = config.policy_layers
    groups = _memberships(layers.defaults, own)
    policies = [layers.groups[group] for group in groups if group in layers.groups]
    policy, disk = _merge_policy(layers.defaults, own, config.source, where, set(), groups=policies)
    return Hypervisor(
        name=name,
        uri="",
        policy=replace(policy, pci_aliases=config.pci_aliases),
        disk=disk,
        groups=groups,
    )


def _flavor_within(flavor: FlavorSection, where: str) -> WithinHost:
    """The NUMA topology and devices a flavor's extra specs ask for: Nova refuses a flavor whose
    NUMA request it cannot meet anywhere (`hw:numa_cpus.0` naming a vCPU beyond the flavor's, a
    page size it cannot read, ...) before any instance of it exists."""
    try:
        return within_host(flavor.vcpu, flavor.memory, flavor.extra_specs)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def _check_alias_request(flavor: FlavorSection, aliases: Mapping[str, PciAlias], where: str) -> None:
    """A flavor's `pci_passthrough:alias` must be readable and name configured aliases, as Nova's
    API requires of a flavor before any instance of it exists."""
    spec = flavor.extra_specs.get(PCI_ALIAS_SPEC)
    problem = None if spec is None else alias_request_problem(spec, aliases)
    if problem is not None:
        raise ConfigError(f"{where}.{PCI_ALIAS_SPEC}: {problem}")


def _memberships(defaults: PolicySection, own: PolicySection) -> tuple[GroupKey, ...]:
    """The hypervisor's groups: per kind its own list where it names the kind, else that of
    `defaults` (as every other key of a hypervisor replaces the one of `defaults`)."""
    kinds = {**(defaults.groups or {}), **(own.groups or {})}
    return tuple(sorted((kind, name) for kind, names in kinds.items() for name in names))


def _group_layer(policies: Sequence[HostGroupSection]) -> tuple[dict[Resource, Any], dict[Resource, Any]]:
    """The ratios and reserved amounts the hypervisor's groups set: where several set one, the
    smallest ratio (Nova's aggregate filters took the minimum of a host's aggregates' ratios,
    `validate_num_values` with `based_on=min`) and the largest reserved amount (the most
    conservative). A ratio of 0 is Nova's default for the class before it is compared."""
    ratios: dict[Resource, Any] = {}
    reserved: dict[Resource, Any] = {}
    for section in policies:
        if section.allocation_ratios is not None:
            for resource, set_ratio in _set_fields(section.allocation_ratios).items():
                ratio = set_ratio or NOVA_ALLOCATION_RATIOS[resource]
                ratios[resource] = min(ratio, ratios.get(resource, ratio))
        if section.reserved is not None:
            for resource, amount in _set_fields(section.reserved).items():
                reserved[resource] = max(amount, reserved.get(resource, amount))
    return ratios, reserved


def _merge_policy(
    defaults: PolicySection,
    own: PolicySection,
    source: str,
    where: str,
    disjoint: set[tuple[int, int]],
    *,
    groups: Sequence[HostGroupSection] = (),
) -> tuple[HostPolicy, DiskSource | None]:
    """`disjoint` holds the pairs of CPU sets (by identity) already found disjoint: hypervisors
    that share their sets are then checked once, not once each. The policies of the hypervisor's
    `groups` come between `defaults` and its own keys."""
    ratios = dict(NOVA_ALLOCATION_RATIOS)
    reserved = dict(NOVA_RESERVED)
    if defaults.allocation_ratios is not None:
        ratios.update(_set_fields(defaults.allocation_ratios))
    if defaults.reserved is not None:
        reserved.update(_set_fields(defaults.reserved))
    group_ratios, group_reserved = _group_layer(groups)
    ratios.update(group_ratios)
    reserved.update(group_reserved)
    if own.allocation_ratios is not None:
        ratios.update(_set_fields(own.allocation_ratios))
    if own.reserved is not None:
        reserved.update(_set_fields(own.reserved))
    # A ratio of 0.0 is Nova's "use the default" (its initial allocation ratio for the class).
    ratios = {resource: ratio or NOVA_ALLOCATION_RATIOS[resource] for resource, ratio in ratios.items()}
    shared = _override(defaults.cpu_shared_set, own.cpu_shared_set)
    dedicated = _override(defaults.cpu_dedicated_set, own.cpu_dedicated_set)
    if shared is not None and dedicated is not None and (id(shared), id(dedicated)) not in disjoint:
        if not shared.isdisjoint(dedicated):
            overlap = format_cpu_set(shared & dedicated)
            raise ConfigError(
                f"{source}: {where}.cpu_dedicated_set: overlaps cpu_shared_set on CPUs "
                f"{clip(overlap, 60)}; expected two disjoint sets"
            )
        disjoint.add((id(shared), id(dedicated)))
    if reserved[Resource.VCPU] and (shared is not None or dedicated is not None):
        raise ConfigError(
            f"{source}: {where}.reserved.vcpu: cannot be combined with cpu_shared_set/cpu_dedicated_set "
            "(host CPUs in neither set are not offered); expected 0"
        )
    inactive = _override(defaults.count_inactive_domains, own.count_inactive_domains)
    policy = HostPolicy(
        allocation_ratios=ratios,
        reserved=reserved,
        cpu_shared_set=shared,
        cpu_dedicated_set=dedicated,
        count_inactive_domains=True if inactive is None else inactive,
        inventories=_inventories(defaults, own),
        reserved_huge_pages={
            (entry.node, entry.size): entry.count
            for entry in _override(defaults.reserved_huge_pages, own.reserved_huge_pages) or ()
        },
        pci_device_spec=tuple(
            entry.spec() for entry in _override(defaults.pci_device_spec, own.pci_device_spec) or ()
        ),
        enabled_mdev_types=devices.enabled() if (devices := _override(defaults.devices, own.devices)) else (),
    )
    return policy, _override(defaults.disk, own.disk) or DEFAULT_DISK


def _flavor_request(flavor: FlavorSection) -> Amounts:
    """A flavor with extra specs asks for what Nova's scheduler would ask Placement for; one
    without asks for its amounts as written."""
    if not flavor.extra_specs:
        return amounts(vcpu=flavor.vcpu, pcpu=flavor.pcpu, memory=flavor.memory, disk=flavor.disk)
    return flavor_request(flavor.name, flavor.vcpu, flavor.memory, flavor.disk, flavor.extra_specs)


def _inventories(defaults: PolicySection, own: PolicySection) -> dict[Resource, Inventory]:
    declared = {**(defaults.inventories or {}), **(own.inventories or {})}
    return {
        Resource.custom_class(name): Inventory(**section.model_dump()) for name, section in declared.items()
    }


def _override(default: _T | None, own: _T | None) -> _T | None:
    return own if own is not None else default


def _set_fields(section: AllocationRatios | Reserved) -> dict[Resource, Any]:
    return {resource_by_label(key): value for key, value in section.model_dump(exclude_none=True).items()}
