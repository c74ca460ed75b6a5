"""The YAML configuration: validated with pydantic, merged into one policy per hypervisor.

Nova's defaults < the file's `defaults` < each hypervisor's own keys, merged key by key.
Every error names the file, the key and what was expected, in one line per problem.

Everything is bounded, so that a hostile or mistaken file is refused quickly and cheaply: the
file itself (size, nesting, aliases: see virtcap.config.yamlfile), every quantity (see virtcap.units),
every whole number and string below, and the CPUs named by all CPU sets together.
"""

from __future__ import annotations

import re
import socket
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails

from virtcap.config.yamlfile import ConfigError, load_yaml_file, load_yaml_text
from virtcap.model.capacity import (
    NOVA_ALLOCATION_RATIOS,
    NOVA_RESERVED,
    Amounts,
    HostPolicy,
    Resource,
    amounts,
)
from virtcap.units import (
    MAX_CPU,
    brief_repr,
    format_cpu_set,
    parse_cpu_set,
    parse_duration,
    parse_ratio,
    parse_size,
)
from virtcap.web.auth import BcryptHash

__all__ = [  # ConfigError is defined in virtcap.config.yamlfile (below this module) and re-exported here
    "AuditSettings",
    "ClaimSettings",
    "Config",
    "ConfigError",
    "ConfigFile",
    "CpuSet",
    "DiskSource",
    "Duration",
    "Flavor",
    "Hypervisor",
    "Ratio",
    "Size",
    "build_config",
    "explain_validation_error",
    "load_config",
    "parse_config",
]

LOCAL_URI = "qemu:///system"
_T = TypeVar("_T")

MAX_CONCURRENCY = 1024
MAX_KEEPALIVE_COUNT = 100
MAX_HOST_CPUS = MAX_CPU + 1
MAX_FLAVOR_CPUS = 1_000_000
"""As for claims in the HTTP API."""
MAX_NAME_CHARS = 255
MAX_URI_CHARS = 1024
MAX_PATH_CHARS = 4096
MAX_CONFIG_CPUS = 2**18
"""CPUs named by all CPU sets together, each distinct spelling counted once: a set is a Python
frozenset of up to 65536 numbers, so a thousand hypervisors each with its own large set would
cost gigabytes."""
MAX_PROBLEMS_SHOWN = 20
_EXPLANATION_CHARS = 300


def _cpu_set(value: object, info: ValidationInfo) -> frozenset[int]:
    budget = info.context.get(_CpuBudget.KEY) if isinstance(info.context, dict) else None
    return budget.parse(value) if isinstance(budget, _CpuBudget) else parse_cpu_set(value)


@dataclass
class _CpuBudget:
    """The CPUs the CPU sets of one configuration may still name; repeated spellings share one set."""

    KEY = "cpu_budget"
    remaining: int = MAX_CONFIG_CPUS
    known: dict[object, frozenset[int]] = field(default_factory=dict)

    def parse(self, value: object) -> frozenset[int]:
        key = value if isinstance(value, str | int) and not isinstance(value, bool) else None
        if key is not None and key in self.known:
            return self.known[key]
        # Once spent, no more sets are built: a set is never empty, so each would overspend.
        cpus = parse_cpu_set(value) if self.remaining >= 0 else frozenset()
        self.remaining -= max(len(cpus), 1)
        if self.remaining < 0:
            raise ValueError(
                f"the CPU sets of this configuration name more than {MAX_CONFIG_CPUS} CPUs in all "
                "(each distinct set counted once); expected at most that"
            )
        if key is not None:
            self.known[key] = cpus
        return cpus


Size = Annotated[int, BeforeValidator(parse_size)]
Duration = Annotated[float, BeforeValidator(parse_duration)]
Ratio = Annotated[float, BeforeValidator(parse_ratio)]
# PlainValidator: pydantic would otherwise copy each set, validating up to 65536 numbers again.
CpuSet = Annotated[frozenset[int], PlainValidator(_cpu_set)]
Name = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSettings(_Section):
    interval: Duration = 30.0
    timeout: Duration = 10.0
    concurrency: int = Field(default=32, ge=1, le=MAX_CONCURRENCY)
    stale_after: Duration | None = None
    """How long the data of a failing hypervisor is still served (default: 3 intervals)."""
    keepalive_interval: Duration = 5.0
    keepalive_count: int = Field(default=3, ge=1, le=MAX_KEEPALIVE_COUNT)

    @property
    def staleness_bound(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval


class AllocationRatios(_Section):
    vcpu: Ratio | None = None
    memory: Ratio | None = None
    disk: Ratio | None = None
    pcpu: float | None = None

    @model_validator(mode="after")
    def _pcpu_is_fixed(self) -> Self:
        if self.pcpu is not None and self.pcpu not in (0.0, 1.0):
            raise ValueError(
                "the pcpu allocation ratio is fixed at 1.0: dedicated CPUs are never overcommitted"
            )
        return self


class Reserved(_Section):
    vcpu: int | None = Field(default=None, ge=0, le=MAX_HOST_CPUS)
    memory: Size | None = None
    disk: Size | None = None


class DiskSource(_Section):
    pool: str | None = Field(default=None, min_length=1, max_length=MAX_NAME_CHARS)
    path: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_CHARS)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.pool is None) == (self.path is None):
            raise ValueError(
                "expected exactly one of 'pool' (a libvirt storage pool) or 'path' (a local directory)"
            )
        if self.path is not None and not self.path.startswith("/"):
            raise ValueError(f"expected an absolute path, got {brief_repr(self.path)}")
        return self


class PolicySection(_Section):
    """The keys of `defaults`, each of which a hypervisor may override."""

    allocation_ratios: AllocationRatios | None = None
    reserved: Reserved | None = None
    cpu_shared_set: CpuSet | None = None
    cpu_dedicated_set: CpuSet | None = None
    disk: DiskSource | None = None
    count_inactive_domains: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _empty_cpu_sets_are_unset(cls, data: object) -> object:
        """Nova reads an empty CPU set option as unset."""
        if isinstance(data, dict):
            empty = [key for key in ("cpu_shared_set", "cpu_dedicated_set") if data.get(key) == ""]
            if empty:
                return {key: value for key, value in data.items() if key not in empty}
        return data


class HypervisorSection(PolicySection):
    name: Name
    uri: str = Field(min_length=1, max_length=MAX_URI_CHARS)


class FlavorSection(_Section):
    name: Name
    vcpu: int = Field(default=0, ge=0, le=MAX_FLAVOR_CPUS)
    pcpu: int = Field(default=0, ge=0, le=MAX_FLAVOR_CPUS)
    memory: Size
    disk: Size = 0

    @model_validator(mode="after")
    def _requests_cpus(self) -> Self:
        if self.vcpu == 0 and self.pcpu == 0:
            raise ValueError("a flavor requests at least one vcpu or pcpu")
        return self


class ClaimSettings(_Section):
    database: str = Field(default="/var/lib/virtcap/claims.sqlite", min_length=1, max_length=MAX_PATH_CHARS)
    default_ttl: Duration = 900.0
    max_ttl: Duration = 86400.0
    writers: dict[str, BcryptHash] = {}
    """User name to bcrypt hash: who may create and delete claims (read-only scrapes never can)."""

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if self.default_ttl > self.max_ttl:
            raise ValueError("default_ttl is longer than max_ttl")
        return self


class ConfigFile(_Section):
    audit: AuditSettings = AuditSettings()
    claims: ClaimSettings = ClaimSettings()
    defaults: PolicySection = PolicySection()
    hypervisors: list[HypervisorSection] | None = None
    flavors: list[FlavorSection] = []

    @model_validator(mode="after")
    def _unique_names(self) -> Self:
        for section, items in (("hypervisors", self.hypervisors or []), ("flavors", self.flavors)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{section}: the name {brief_repr(item.name)} is used twice")
                seen.add(item.name)
        return self


@dataclass(frozen=True, slots=True)
class Hypervisor:
    name: str
    uri: str
    policy: HostPolicy
    disk: DiskSource | None


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    request: Amounts


@dataclass(frozen=True, slots=True)
class Config:
    source: str
    audit: AuditSettings
    hypervisors: tuple[Hypervisor, ...]
    flavors: tuple[Flavor, ...]
    claims: ClaimSettings = field(default_factory=ClaimSettings)

    @property
    def flavor_requests(self) -> dict[str, Amounts]:
        return {flavor.name: flavor.request for flavor in self.flavors}


DEFAULT_DISK = DiskSource(pool="default")


def load_config(path: Path | str | None) -> Config:
    """The configuration in `path`, or Nova's defaults for the local hypervisor when None."""
    if path is None:
        return build_config(ConfigFile(), source="(built-in defaults)")
    return _config_from_document(load_yaml_file(path), source=str(path))


def parse_config(text: str, source: str) -> Config:
    return _config_from_document(load_yaml_text(text, source), source)


def _config_from_document(raw: object, source: str) -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections (audit, defaults, hypervisors, flavors)")
    try:
        parsed = ConfigFile.model_validate(raw, context={_CpuBudget.KEY: _CpuBudget()})
    except ValidationError as error:
        raise ConfigError(explain_validation_error(error, source, ConfigFile)) from None
    return build_config(parsed, source)


def explain_validation_error(error: ValidationError, source: str, root: type[BaseModel]) -> str:
    """One line per problem: `file: key: what was expected`, each of bounded length.

    Past MAX_PROBLEMS_SHOWN problems, one last line says how many more there are.
    """
    problems = error.errors(include_url=False)
    lines = [
        f"{source}: {_location(e['loc'])}: {_clip(_explain(e, root))}" for e in problems[:MAX_PROBLEMS_SHOWN]
    ]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"{source}: and {len(problems) - MAX_PROBLEMS_SHOWN} more problems")
    return "\n".join(lines)


def build_config(parsed: ConfigFile, source: str) -> Config:
    entries = parsed.hypervisors
    if entries is None:
        entries = [HypervisorSection(name=socket.gethostname() or "localhost", uri=LOCAL_URI)]
    hypervisors = []
    disjoint: set[tuple[int, int]] = set()
    for index, entry in enumerate(entries):
        where = f"hypervisors[{index}]" if parsed.hypervisors is not None else "defaults"
        policy, disk = _merge_policy(parsed.defaults, entry, source, where, disjoint)
        hypervisors.append(Hypervisor(name=entry.name, uri=entry.uri, policy=policy, disk=disk))
    flavors = tuple(
        Flavor(
            name=f.name,
            request=amounts(vcpu=f.vcpu, pcpu=f.pcpu, memory=f.memory, disk=f.disk),
        )
        for f in parsed.flavors
    )
    return Config(
        source=source,
        audit=parsed.audit,
        hypervisors=tuple(hypervisors),
        flavors=flavors,
        claims=parsed.claims,
    )


def _merge_policy(
    defaults: PolicySection, own: PolicySection, source: str, where: str, disjoint: set[tuple[int, int]]
) -> tuple[HostPolicy, DiskSource | None]:
    """`disjoint` holds the pairs of CPU sets (by identity) already found disjoint: hypervisors
    that share their sets are then checked once, not once each."""
    ratios = dict(NOVA_ALLOCATION_RATIOS)
    reserved = dict(NOVA_RESERVED)
    for layer in (defaults, own):
        if layer.allocation_ratios is not None:
            ratios.update(_set_fields(layer.allocation_ratios))
        if layer.reserved is not None:
            reserved.update(_set_fields(layer.reserved))
    # A ratio of 0.0 is Nova's "use the default" (its initial allocation ratio for the class).
    ratios = {resource: ratio or NOVA_ALLOCATION_RATIOS[resource] for resource, ratio in ratios.items()}
    shared = _override(defaults.cpu_shared_set, own.cpu_shared_set)
    dedicated = _override(defaults.cpu_dedicated_set, own.cpu_dedicated_set)
    if shared is not None and dedicated is not None and (id(shared), id(dedicated)) not in disjoint:
        if not shared.isdisjoint(dedicated):
            overlap = format_cpu_set(shared & dedicated)
            raise ConfigError(
                f"{source}: {where}.cpu_dedicated_set: overlaps cpu_shared_set on CPUs "
                f"{_clip(overlap, 60)}; expected two disjoint sets"
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
    )
    return policy, _override(defaults.disk, own.disk) or DEFAULT_DISK


def _override(default: _T | None, own: _T | None) -> _T | None:
    return own if own is not None else default


def _set_fields(section: AllocationRatios | Reserved) -> dict[Resource, Any]:
    return {Resource(key): value for key, value in section.model_dump(exclude_none=True).items()}


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if _PLAIN_KEY.fullmatch(part) else brief_repr(part, 40)
            text += f".{name}" if text else name
    return _clip(text or "(top level)", 120)


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:@$-]{1,40}")


def _clip(text: str, limit: int = _EXPLANATION_CHARS) -> str:
    """A message part cut to `limit` characters, newlines included, so one problem stays one line."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_RESOURCE_SECTIONS = {"allocation_ratios": AllocationRatios, "reserved": Reserved}


def _explain(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind = error["type"]
    given = brief_repr(error.get("input"))
    context = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = [p for p in error["loc"][:-1] if isinstance(p, str)]
        allowed = ", ".join(_fields_at(root, error["loc"][:-1]))
        noun = "resource" if parent and parent[-1] in _RESOURCE_SECTIONS else "key"
        return f"unknown {noun} {brief_repr(error['loc'][-1], 40)}; expected one of: {allowed}"
    if kind == "invalid_key":
        return f"expected keys that are strings, got {given}"
    if kind == "missing":
        return "required key is missing"
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        limit = context.get("gt", context.get("ge"))
        return f"expected a number {bound} {_number(limit)}, got {given}"
    if kind in ("less_than_equal", "finite_number", "int_parsing_size"):
        # Infinity, NaN and numbers too large to parse all break the key's ceiling: say which.
        ceiling = context.get("le", _ceiling(root, error["loc"]))
        if ceiling is not None:
            return f"expected a number at most {_number(ceiling)}, got {given}"
        return f"expected a finite number, got {given}"
    if kind in ("float_parsing", "float_type"):
        return f"expected a number, got {given}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"expected a whole number, got {given}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {given}"
    if kind in ("string_type", "string_too_short"):
        return f"expected a non-empty string, got {given}"
    if kind == "string_too_long":
        return f"expected at most {context.get('max_length')} characters, got {given}"
    if kind == "string_pattern_mismatch":
        return f"expected a name of letters, digits and . _ - : @, got {given}"
    if kind in ("list_type",):
        return f"expected a list, got {given}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {given}"
    if kind == "literal_error":
        return f"expected one of: {context.get('expected', '')}, got {given}"
    if kind == "value_error":
        return str(context.get("error", error["msg"]))
    return str(error["msg"])


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _ceiling(root: type[BaseModel], loc: tuple[int | str, ...]) -> object:
    """The `le` bound of the field at a location, if it has one."""
    names = [part for part in loc if isinstance(part, str)]
    if not names or names[-1] not in (model := _model_at(root, tuple(names[:-1]))).model_fields:
        return None
    for constraint in model.model_fields[names[-1]].metadata:
        if getattr(constraint, "le", None) is not None:
            return constraint.le
    return None


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The section model at a location, or BaseModel itself (no fields) where there is none."""
    model = root
    for part in loc:
        if isinstance(part, int):
            continue
        nested = _section_type(model.model_fields[part].annotation) if part in model.model_fields else None
        if nested is None:
            return BaseModel
        model = nested
    return model


def _fields_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at a location, found by walking the section models along it."""
    return list(_model_at(root, loc).model_fields)


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for argument in typing.get_args(annotation):
            found = _section_type(argument)
            if found is not None:
                return found
    return None
