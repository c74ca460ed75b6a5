"""The YAML configuration: validated with pydantic, merged into one policy per hypervisor.

Nova's defaults < the file's `defaults` < each hypervisor's own keys, merged key by key.
Every error names the file, the key and what was expected.
"""

from __future__ import annotations

import socket
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from virtcap.model import NOVA_ALLOCATION_RATIOS, NOVA_RESERVED, Amounts, HostPolicy, Resource, amounts
from virtcap.units import format_cpu_set, parse_cpu_set, parse_duration, parse_size

LOCAL_URI = "qemu:///system"
_T = TypeVar("_T")


class ConfigError(Exception):
    """A configuration problem, worded for the operator: `file: key: what was expected`."""


Size = Annotated[int, BeforeValidator(parse_size)]
Duration = Annotated[float, BeforeValidator(parse_duration)]
CpuSet = Annotated[frozenset[int], BeforeValidator(parse_cpu_set)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSettings(_Section):
    interval: Duration = 30.0
    timeout: Duration = 10.0
    concurrency: int = Field(default=32, ge=1)
    stale_after: Duration | None = None
    """How long the data of a failing hypervisor is still served (default: 3 intervals)."""
    keepalive_interval: Duration = 5.0
    keepalive_count: int = Field(default=3, ge=1)

    @property
    def staleness_bound(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval


class AllocationRatios(_Section):
    vcpu: float | None = Field(default=None, gt=0)
    memory: float | None = Field(default=None, gt=0)
    disk: float | None = Field(default=None, gt=0)
    pcpu: float | None = None

    @model_validator(mode="after")
    def _pcpu_is_fixed(self) -> Self:
        if self.pcpu is not None and self.pcpu != 1.0:
            raise ValueError(
                "the pcpu allocation ratio is fixed at 1.0: dedicated CPUs are never overcommitted"
            )
        return self


class Reserved(_Section):
    vcpu: int | None = Field(default=None, ge=0)
    memory: Size | None = None
    disk: Size | None = None


class DiskSource(_Section):
    pool: str | None = Field(default=None, min_length=1)
    path: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.pool is None) == (self.path is None):
            raise ValueError(
                "expected exactly one of 'pool' (a libvirt storage pool) or 'path' (a local directory)"
            )
        if self.path is not None and not self.path.startswith("/"):
            raise ValueError(f"expected an absolute path, got {self.path!r}")
        return self


class PolicySection(_Section):
    """The keys of `defaults`, each of which a hypervisor may override."""

    allocation_ratios: AllocationRatios | None = None
    reserved: Reserved | None = None
    cpu_shared_set: CpuSet | None = None
    cpu_dedicated_set: CpuSet | None = None
    disk: DiskSource | None = None
    count_inactive_domains: bool | None = None


class HypervisorSection(PolicySection):
    name: Name
    uri: str = Field(min_length=1)


class FlavorSection(_Section):
    name: Name
    vcpu: int = Field(default=0, ge=0)
    pcpu: int = Field(default=0, ge=0)
    memory: Size
    disk: Size = 0

    @model_validator(mode="after")
    def _requests_cpus(self) -> Self:
        if self.vcpu == 0 and self.pcpu == 0:
            raise ValueError("a flavor requests at least one vcpu or pcpu")
        return self


class ClaimSettings(_Section):
    database: str = Field(default="/var/lib/virtcap/claims.sqlite", min_length=1)
    default_ttl: Duration = 900.0
    max_ttl: Duration = 86400.0
    writers: dict[str, str] = {}
    """User name to bcrypt hash: who may create and delete claims (read-only scrapes never can)."""

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if self.default_ttl > self.max_ttl:
            raise ValueError("default_ttl is longer than max_ttl")
        for user, hashed in self.writers.items():
            if not hashed.startswith(("$2a$", "$2b$", "$2y$")):
                raise ValueError(f"writers.{user}: expected a bcrypt hash ($2y$...), not a password")
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
                    raise ValueError(f"{section}: the name {item.name!r} is used twice")
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
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None
    return parse_config(text, source=str(path))


def parse_config(text: str, source: str) -> Config:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"{source}{where}: invalid YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections (audit, defaults, hypervisors, flavors)")
    try:
        parsed = ConfigFile.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(explain_validation_error(error, source, ConfigFile)) from None
    return build_config(parsed, source)


def explain_validation_error(error: ValidationError, source: str, root: type[BaseModel]) -> str:
    """One line per problem: `file: key: what was expected`."""
    return "\n".join(f"{source}: {_location(e['loc'])}: {_explain(e, root)}" for e in error.errors())


def build_config(parsed: ConfigFile, source: str) -> Config:
    entries = parsed.hypervisors
    if entries is None:
        entries = [HypervisorSection(name=socket.gethostname() or "localhost", uri=LOCAL_URI)]
    hypervisors = []
    for index, entry in enumerate(entries):
        where = f"hypervisors[{index}]" if parsed.hypervisors is not None else "defaults"
        policy, disk = _merge_policy(parsed.defaults, entry, source, where)
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
    defaults: PolicySection, own: PolicySection, source: str, where: str
) -> tuple[HostPolicy, DiskSource | None]:
    ratios = dict(NOVA_ALLOCATION_RATIOS)
    reserved = dict(NOVA_RESERVED)
    for layer in (defaults, own):
        if layer.allocation_ratios is not None:
            ratios.update(_set_fields(layer.allocation_ratios))
        if layer.reserved is not None:
            reserved.update(_set_fields(layer.reserved))
    shared = _override(defaults.cpu_shared_set, own.cpu_shared_set)
    dedicated = _override(defaults.cpu_dedicated_set, own.cpu_dedicated_set)
    if shared is not None and dedicated is not None and shared & dedicated:
        overlap = format_cpu_set(shared & dedicated)
        raise ConfigError(
            f"{source}: {where}.cpu_dedicated_set: overlaps cpu_shared_set on CPUs {overlap}; "
            "expected two disjoint sets"
        )
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
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


_RESOURCE_SECTIONS = {"allocation_ratios": AllocationRatios, "reserved": Reserved}


def _explain(error: ErrorDetails, root: type[BaseModel]) -> str:
    kind, given = error["type"], error.get("input")
    context = error.get("ctx") or {}
    if kind == "extra_forbidden":
        parent = [p for p in error["loc"][:-1] if isinstance(p, str)]
        allowed = ", ".join(_fields_at(root, error["loc"][:-1]))
        noun = "resource" if parent and parent[-1] in _RESOURCE_SECTIONS else "key"
        return f"unknown {noun} {error['loc'][-1]!r}; expected one of: {allowed}"
    if kind == "missing":
        return "required key is missing"
    if kind in ("greater_than", "greater_than_equal"):
        bound = "greater than" if kind == "greater_than" else "at least"
        limit = context.get("gt", context.get("ge"))
        shown = f"{limit:g}" if isinstance(limit, int | float) else limit
        return f"expected a number {bound} {shown}, got {given!r}"
    if kind in ("float_parsing", "float_type"):
        return f"expected a number, got {given!r}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"expected a whole number, got {given!r}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {given!r}"
    if kind in ("string_type", "string_too_short"):
        return f"expected a non-empty string, got {given!r}"
    if kind == "string_pattern_mismatch":
        return f"expected a name of letters, digits and . _ - : @, got {given!r}"
    if kind in ("list_type",):
        return f"expected a list, got {given!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {given!r}"
    if kind == "literal_error":
        return f"expected one of: {context.get('expected', '')}, got {given!r}"
    if kind == "value_error":
        return str(context.get("error", error["msg"]))
    return str(error["msg"])


def _fields_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed at a location, found by walking the section models along it."""
    model = root
    for part in loc:
        if isinstance(part, int):
            continue
        if part not in model.model_fields:
            return []
        annotation = model.model_fields[part].annotation
        nested = _section_type(annotation)
        if nested is None:
            return []
        model = nested
    return list(model.model_fields)


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (typing.Union, list):
        for argument in typing.get_args(annotation):
            found = _section_type(argument)
            if found is not None:
                return found
    return None
