"""What a Nova instance consumes: its flavor, extra specs and image turned into resource amounts,
as Nova's scheduler asks Placement for them (docs/accounting.md, "What a domain is allocated").

Pure. Nova validates extra specs in its API before an instance exists, so a definition it wrote
holds valid ones; where the metadata was edited by hand, what Nova would ignore (an unknown class,
an amount that is not a whole number) is ignored here too, and a CPU mask that cannot be read
counts every vCPU as shared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from virtcap.model.facts import NovaFlavor, NovaInstance
from virtcap.model.pci import NUMA_POLICIES
from virtcap.model.resources import (
    CUSTOM_CLASS,
    CUSTOM_PREFIX,
    DEVICE_CLASSES,
    STANDARD_CLASSES,
    Resource,
    ResourceRequest,
    placement_units,
    resource_class,
)
from virtcap.units import parse_cpu_set

RESOURCE_SPEC = re.compile(r"resources([a-zA-Z0-9_-]{1,64})?:(.*)")
"""`resources:CLASS` and `resources<suffix>:CLASS`: the unsuffixed group and Placement's granular
groups, which all land on one hypervisor here (no nested providers), so their amounts add up."""

_STANDARD_NAMES = frozenset(resource.placement_class for resource in STANDARD_CLASSES + DEVICE_CLASSES)
"""Placement's standard classes virtcap accounts: `resources:VGPU=1` counts like `resources:VCPU`."""


def nova_request(instance: NovaInstance) -> ResourceRequest:
    """What one instance asks Placement for, in virtcap's units (cpus, bytes, counts), group by
    group (see `_placement_groups`)."""
    return ResourceRequest(
        tuple(
            {
                resource: amount * resource.placement_unit
                for name, amount in group.items()
                if amount > 0 and (resource := resource_class(name))
            }
            for group in _placement_groups(instance).values()
        )
    )


def flavor_request(
    name: str, vcpus: int, memory_bytes: int, disk_bytes: int, extra_specs: Mapping[str, str]
) -> ResourceRequest:
    """What one instance of a flavor (booted from an image, without swap or ephemeral disk) asks
    Placement for: its extra specs read as Nova's scheduler reads them (`hw:cpu_policy: dedicated`
    makes its vCPUs PCPU, `resources:CLASS` adds or replaces classes, ...), its memory and disk
    rounded up to Placement's MiB and GiB. Configured flavors with extra specs and claims carrying
    extra specs ask for this."""
    flavor = NovaFlavor(
        name=name,
        vcpus=vcpus,
        memory_mib=placement_units(Resource.MEMORY, memory_bytes),
        root_gib=placement_units(Resource.DISK, disk_bytes),
        ephemeral_gib=0,
        swap_mib=0,
        extra_specs=extra_specs,
    )
    return nova_request(NovaInstance(flavor))


def nova_allocation(instance: NovaInstance) -> dict[Resource, int]:
    """What one instance is allocated on its hypervisor: its request's groups summed. Computed for
    every Nova guest of every audit, so without building the groups as objects."""
    total: dict[Resource, int] = {}
    for group in _placement_groups(instance).values():
        for name, amount in group.items():
            if amount > 0:
                resource = resource_class(name)
                total[resource] = total.get(resource, 0) + amount * resource.placement_unit
    return total


def _placement_groups(instance: NovaInstance) -> dict[str | None, dict[str, int]]:
    """Placement amounts per request group (None: the unsuffixed one), as
    `ResourceRequest.from_request_spec` builds them: the extra specs' `resources[suffix]:` amounts
    per group; then the CPU policy's PCPU (and a mixed instance's VCPU), which replace those of
    the unsuffixed group only; then, in the unsuffixed group, the flavor's own VCPU, memory and
    disk for the classes no group asks for."""
    flavor = instance.flavor
    specs = flavor.extra_specs
    groups = _extra_spec_groups(specs) if specs else {}
    unsuffixed = groups.setdefault(None, {})
    policy = specs.get("hw:cpu_policy") or instance.image_properties.get("hw_cpu_policy")
    if policy in ("dedicated", "mixed"):
        if policy == "dedicated":
            pcpus = flavor.vcpus
        else:
            pcpus = _mixed_dedicated_count(instance)
            unsuffixed["VCPU"] = flavor.vcpus - pcpus
        if specs.get("hw:emulator_threads_policy") == "isolate":
            pcpus += 1
        unsuffixed["PCPU"] = pcpus
    asked = {name for group in groups.values() for name in group}
    if "VCPU" not in asked and "PCPU" not in asked:
        unsuffixed["VCPU"] = flavor.vcpus
    if "MEMORY_MB" not in asked:
        unsuffixed["MEMORY_MB"] = flavor.memory_mib
    if "DISK_GB" not in asked:
        swap_gib = -(-flavor.swap_mib // 1024)
        root_gib = 0 if instance.boot_from_volume else flavor.root_gib
        unsuffixed["DISK_GB"] = flavor.ephemeral_gib + swap_gib + root_gib
    return groups


def _extra_spec_groups(specs: Mapping[str, str]) -> dict[str | None, dict[str, int]]:
    """Amounts of the `resources[suffix]:CLASS` extra specs, per request group (None: the
    unsuffixed one). Within a group a later key overwrites; classes virtcap does not account
    (SRIOV_NET_VF, PGPU, ... until their issue) and amounts Nova would reject are skipped, as
    Nova skips them with a warning."""
    groups: dict[str | None, dict[str, int]] = {}
    for key, value in specs.items():
        match = RESOURCE_SPEC.fullmatch(key)
        if match is None:
            continue
        suffix, name = match.groups()
        if name not in _STANDARD_NAMES and not name.startswith(CUSTOM_PREFIX):
            continue
        try:
            resource_class(name)
            amount = int(value)
        except ValueError:
            continue
        if amount >= 0:
            groups.setdefault(suffix, {})[name] = amount
    return groups


def _mixed_dedicated_count(instance: NovaInstance) -> int:
    """How many vCPUs of a mixed instance are on dedicated host CPUs: `hw:cpu_dedicated_mask`,
    else the realtime mask (`hw_cpu_realtime_mask` of the image ahead of the flavor's
    `hw:cpu_realtime_mask`, every vCPU when neither is set) when `hw:cpu_realtime` is on. A mask
    starting with `^` names the vCPUs left out of all of them. A mask that cannot be read counts
    none (Nova's API would have refused the flavor)."""
    flavor = instance.flavor
    specs = flavor.extra_specs
    mask = specs.get("hw:cpu_dedicated_mask")
    if not mask and _is_true(specs.get("hw:cpu_realtime", "")):
        mask = instance.image_properties.get("hw_cpu_realtime_mask") or specs.get("hw:cpu_realtime_mask")
        if not mask:
            return flavor.vcpus
    if not mask:
        return 0
    if mask.strip().startswith("^"):
        mask = f"0-{flavor.vcpus - 1},{mask}"
    try:
        return len(parse_cpu_set(mask))
    except ValueError:
        return 0


def _is_true(text: str) -> bool:
    """oslo's bool_from_string: the spellings Nova reads as true."""
    return text.strip().lower() in ("1", "t", "true", "on", "y", "yes")


_POLICY_VALUES = {
    "hw:cpu_policy": ("shared", "dedicated", "mixed"),
    "hw:cpu_thread_policy": ("prefer", "isolate", "require"),
    "hw:emulator_threads_policy": ("share", "isolate"),
    "hw:pci_numa_affinity_policy": NUMA_POLICIES,
}
_BOOLEANS = ("1", "0", "t", "f", "true", "false", "on", "off", "y", "n", "yes", "no")


def extra_spec_problems(vcpus: int, specs: Mapping[str, str]) -> list[str]:
    """What Nova's API would refuse in a flavor's extra specs, among those that decide its
    allocation: one line each, naming the key. Keys of other namespaces are Nova's business."""
    problems = []
    for key, allowed in _POLICY_VALUES.items():
        if key in specs and specs[key] not in allowed:
            problems.append(f"{key}: expected one of {', '.join(allowed)}, got {specs[key]!r}")
    if specs.get("hw:cpu_realtime", "").strip().lower() not in ("", *_BOOLEANS):
        problems.append(f"hw:cpu_realtime: expected true or false, got {specs['hw:cpu_realtime']!r}")
    for key, value in specs.items():
        match = RESOURCE_SPEC.fullmatch(key)
        if match is None:
            continue
        name = match.group(2)
        if name not in _STANDARD_NAMES and not name.startswith(CUSTOM_PREFIX):
            problems.append(
                f"{key}: virtcap accounts {', '.join(sorted(_STANDARD_NAMES))} and CUSTOM_* classes"
            )
        elif name.startswith(CUSTOM_PREFIX) and not CUSTOM_CLASS.fullmatch(name):
            problems.append(f"{key}: expected CUSTOM_ and then capital letters, digits and _")
        if not value.strip().isdigit():
            problems.append(f"{key}: expected a whole number of at least 0, got {value!r}")
    if specs.get("hw:cpu_policy") == "mixed":
        problems.extend(_mixed_problems(vcpus, specs))
    return problems


def _mixed_problems(vcpus: int, specs: Mapping[str, str]) -> list[str]:
    realtime = _is_true(specs.get("hw:cpu_realtime", ""))
    key = "hw:cpu_dedicated_mask" if "hw:cpu_dedicated_mask" in specs else "hw:cpu_realtime_mask"
    mask = specs.get(key)
    if not mask or (key == "hw:cpu_realtime_mask" and not realtime):
        return ["hw:cpu_policy: mixed needs hw:cpu_dedicated_mask (or hw:cpu_realtime with its mask)"]
    if mask.strip().startswith("^"):
        mask = f"0-{vcpus - 1},{mask}"
    try:
        dedicated = parse_cpu_set(mask)
    except ValueError as error:
        return [f"{key}: {error}"]
    if not dedicated <= set(range(vcpus)):
        return [f"{key}: names vCPUs the flavor does not have (it has {vcpus})"]
    if not dedicated or len(dedicated) == vcpus:
        return [f"{key}: a mixed flavor needs both dedicated and shared vCPUs"]
    return []
