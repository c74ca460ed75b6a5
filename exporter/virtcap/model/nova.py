"""What a Nova instance consumes: its flavor, extra specs and image turned into resource amounts,
as Nova's scheduler asks Placement for them (ACCOUNTING.md, "What an instance consumes").

Pure. Nova validates extra specs in its API before an instance exists, so a definition it wrote
holds valid ones; where the metadata was edited by hand, what Nova would ignore (an unknown class,
an amount that is not a whole number) is ignored here too, and a CPU mask that cannot be read
counts every vCPU as shared.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from virtcap.model.facts import NovaInstance
from virtcap.model.resources import CUSTOM_PREFIX, STANDARD_CLASSES, Resource, resource_class
from virtcap.units import parse_cpu_set

RESOURCE_SPEC = re.compile(r"resources([a-zA-Z0-9_-]{1,64})?:(.*)")
"""`resources:CLASS` and `resources<suffix>:CLASS`: the unsuffixed group and Placement's granular
groups, which all land on one hypervisor here (no nested providers), so their amounts add up."""

_STANDARD_NAMES = frozenset(resource.placement_class for resource in STANDARD_CLASSES)


def nova_request(instance: NovaInstance) -> dict[Resource, int]:
    """The allocation of one instance, in virtcap's units (cpus, bytes, counts), as
    `ResourceRequest.from_request_spec` builds it: the extra specs' `resources:` amounts first,
    then the CPU policy's PCPU (and a mixed instance's VCPU), then the flavor's own VCPU, memory
    and disk for the classes still unset. Classes with a zero amount are left out."""
    flavor = instance.flavor
    specs = flavor.extra_specs
    placement: dict[str, int] = _extra_spec_amounts(specs)
    policy = specs.get("hw:cpu_policy") or instance.image_properties.get("hw_cpu_policy")
    if policy in ("dedicated", "mixed"):
        if policy == "dedicated":
            pcpus = flavor.vcpus
        else:
            pcpus = len(_mixed_dedicated_vcpus(instance))
            placement["VCPU"] = flavor.vcpus - pcpus
        if specs.get("hw:emulator_threads_policy") == "isolate":
            pcpus += 1
        placement["PCPU"] = pcpus
    if "VCPU" not in placement and "PCPU" not in placement:
        placement["VCPU"] = flavor.vcpus
    placement.setdefault("MEMORY_MB", flavor.memory_mib)
    if "DISK_GB" not in placement:
        swap_gib = -(-flavor.swap_mib // 1024)
        root_gib = 0 if instance.boot_from_volume else flavor.root_gib
        placement["DISK_GB"] = flavor.ephemeral_gib + swap_gib + root_gib
    return {
        resource: amount * resource.placement_unit
        for name, amount in placement.items()
        if amount > 0 and (resource := resource_class(name))
    }


def _extra_spec_amounts(specs: Mapping[str, str]) -> dict[str, int]:
    """Amounts of the `resources[suffix]:CLASS` extra specs, summed over groups. Within a group a
    later key overwrites; classes virtcap does not account (VGPU, SRIOV_NET_VF, ... until their
    issue) and amounts Nova would reject are skipped, as Nova skips them with a warning."""
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
    total: dict[str, int] = {}
    for group in groups.values():
        for name, amount in group.items():
            total[name] = total.get(name, 0) + amount
    return total


def _mixed_dedicated_vcpus(instance: NovaInstance) -> frozenset[int]:
    """The vCPUs of a mixed instance on dedicated host CPUs: `hw:cpu_dedicated_mask`, else the
    realtime mask (`hw_cpu_realtime_mask` of the image ahead of the flavor's `hw:cpu_realtime_mask`,
    every vCPU when neither is set) when `hw:cpu_realtime` is on. A mask starting with `^` names
    the vCPUs left out of all of them."""
    flavor = instance.flavor
    specs = flavor.extra_specs
    mask = specs.get("hw:cpu_dedicated_mask")
    if not mask and _is_true(specs.get("hw:cpu_realtime", "")):
        mask = instance.image_properties.get("hw_cpu_realtime_mask") or specs.get("hw:cpu_realtime_mask")
        if not mask:
            return frozenset(range(flavor.vcpus))
    if not mask:
        return frozenset()
    if mask.strip().startswith("^"):
        mask = f"0-{flavor.vcpus - 1},{mask}"
    try:
        return parse_cpu_set(mask)
    except ValueError:
        return frozenset()


def _is_true(text: str) -> bool:
    """oslo's bool_from_string: the spellings Nova reads as true."""
    return text.strip().lower() in ("1", "t", "true", "on", "y", "yes")
