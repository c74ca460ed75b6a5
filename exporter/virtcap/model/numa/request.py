"""The NUMA topology Nova gives an instance of a flavor (and image), or why Nova refuses it
(nova.virt.hardware numa_get_constraints).

An instance has a NUMA topology (`InstanceTopology`) when its flavor or image asks for guest
cells (`hw:numa_nodes`), pinned CPUs (`hw:cpu_policy` dedicated or mixed, `resources:PCPU`), a
page size (`hw:mem_page_size`) or persistent memory (`hw:pmem`); otherwise Nova gives it none and
the NUMA accounting ignores it. `instance_topology` raises NumaSpecError where Nova refuses the
request; image properties are read as strings (Nova's `ImageMeta.from_dict` has already typed
them: `hw_numa_nodes` an integer, `hw_numa_cpus.N` a CPU list). Not read (Nova's answer may then
differ): an image's `traits_required`, memory encryption.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEDICATED",
    "ISOLATE",
    "KIB_PER_MIB",
    "MIXED",
    "PAGE_ANY",
    "PAGE_LARGE",
    "PAGE_SMALL",
    "PREFER",
    "REQUIRE",
    "SHARED",
    "FittedCell",
    "InstanceCell",
    "InstanceTopology",
    "NumaSpecError",
    "instance_topology",
]

KIB_PER_MIB = 1024
PAGE_SMALL = -1
PAGE_LARGE = -2
PAGE_ANY = -3
"""`hw:mem_page_size` small, large and any, as Nova encodes them beside sizes in KiB."""
_PAGE_WORDS = {"small": PAGE_SMALL, "large": PAGE_LARGE, "any": PAGE_ANY}
SHARED, DEDICATED, MIXED = "shared", "dedicated", "mixed"
CPU_POLICIES = (DEDICATED, SHARED, MIXED)
PREFER, ISOLATE, REQUIRE = "prefer", "isolate", "require"
THREAD_POLICIES = (PREFER, ISOLATE, REQUIRE)
EMULATOR_POLICIES = ("share", "isolate")
_PINNED_POLICIES = (DEDICATED, MIXED)
NUMA_NODES_MAX = 128
"""How many `hw:numa_cpus.N` / `hw:numa_mem.N` entries Nova reads at most."""
_TRUE = frozenset({"1", "t", "true", "on", "y", "yes"})
_VCPU_RESOURCE = re.compile(r"resources([1-9][0-9]*)?:VCPU")
_PCPU_RESOURCE = re.compile(r"resources([1-9][0-9]*)?:PCPU")
_HYPERTHREADING_TRAIT = re.compile(r"trait([1-9][0-9]*)?:HW_CPU_HYPERTHREADING")
_PREFIX_EXPONENT = {prefix: exponent for exponent, prefix in enumerate("KMGTPEZYRQ", start=1)}
_SIZE = re.compile(r"(^[-+]?\d*\.?\d+)([KMGTPEZYRQ]i?)?(b|bit|B)$")
"""oslo's string_to_bytes in its default (IEC) unit system: `2MB`, `2MiB`, `1Gb` (bits)."""


class NumaSpecError(ValueError):
    """A flavor or image NUMA request Nova refuses; the message is one line."""


@dataclass(frozen=True, slots=True)
class InstanceCell:
    """One guest cell: its floating and pinned vCPUs and its memory."""

    id: int
    shared_vcpus: frozenset[int]
    dedicated_vcpus: frozenset[int]
    memory_mib: int

    @property
    def vcpus(self) -> frozenset[int]:
        return self.shared_vcpus | self.dedicated_vcpus


@dataclass(frozen=True, slots=True)
class FittedCell:
    """A guest cell as a fit left Nova's InstanceNUMACell: the page size it chose, the host
    cell's id it took, its pinning and the CPUs reserved for the emulator threads. A tuple and a
    frozenset, not a dict: a topology stays hashable, as a WithinHost keying requests must be."""

    page_size: int | None
    id: int
    pinning: tuple[tuple[int, int], ...] = ()
    reserved: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class InstanceTopology:
    """The NUMA topology Nova gives an instance; the policies apply to every cell."""

    cells: tuple[InstanceCell, ...]
    cpu_policy: str | None = None
    """`shared`, `dedicated`, `mixed` or None (unset: floating)."""
    cpu_thread_policy: str | None = None
    page_size: int | None = None
    """KiB, PAGE_SMALL, PAGE_LARGE, PAGE_ANY, or None (or 0) for no page size."""
    emulator_threads_policy: str | None = None
    fitted: tuple[FittedCell, ...] = ()
    """Per guest cell, what an earlier fit left in Nova's guest cell object, which the next fit
    starts from (see fitting.refitted); empty for the topology as the flavor asks for it."""

    @property
    def pinned(self) -> bool:
        return self.cpu_policy in _PINNED_POLICIES

    @property
    def emulator_threads_isolated(self) -> bool:
        return self.emulator_threads_policy == "isolate"


def _true(text: str | None) -> bool:
    return text is not None and str(text).strip().lower() in _TRUE


def _guest_cpu_spec(text: str) -> set[int]:
    """vCPU numbers in Nova's CPU list syntax (`0-3,^2`); may be empty, as Nova allows."""
    wanted: set[int] = set()
    rejected: set[int] = set()
    for raw in text.split(","):
        rule = raw.strip()
        if not rule:
            continue
        first, dash, last = rule.partition("-")
        try:
            if dash:
                reject = first[:1] == "^"
                low, high = int((first[1:] if reject else first).strip()), int(last.strip())
                if low > high:
                    raise ValueError
                (rejected if reject else wanted).update(range(low, high + 1))
            elif rule[0] == "^":
                rejected.add(int(rule[1:].strip()))
            else:
                wanted.add(int(rule))
        except ValueError:
            raise NumaSpecError(f"{text!r} is not a CPU list (such as 0-3,^2)") from None
    return wanted - rejected


def _page_size(text: str) -> int | float:
    """A `hw:mem_page_size` value as Nova reads it: a word, KiB, or a size with a unit (oslo's
    string_to_bytes, IEC: `2MB` and `2MiB` are 2048 KiB, `1Gb` is in bits)."""
    if text in _PAGE_WORDS:
        return _PAGE_WORDS[text]
    if text.isdigit():
        return int(text)
    match = _SIZE.match(text)
    if match is None:
        raise NumaSpecError(
            f"hw:mem_page_size {text!r}: expected small, large, any, a size in KiB or 2MB/1GB"
        )
    number, prefix, unit = match.groups()
    magnitude = float(number) / (8 if unit in ("b", "bit") else 1)
    size_bytes = math.ceil(magnitude * 1024 ** _PREFIX_EXPONENT[prefix[:1]] if prefix else magnitude)
    size_kib = size_bytes / KIB_PER_MIB
    return int(size_kib) if size_kib == int(size_kib) else size_kib


def _flavor_and_image(
    key: str, extra_specs: Mapping[str, str], image: Mapping[str, str]
) -> tuple[str | None, str | None]:
    return extra_specs.get(f"hw:{key}"), image.get(f"hw_{key}")


def _cpu_policy(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> str | None:
    flavor_policy, image_policy = _flavor_and_image("cpu_policy", extra_specs, image)
    for source, policy in (("flavor", flavor_policy), ("image", image_policy)):
        if policy and policy not in CPU_POLICIES:
            raise NumaSpecError(f"{source} cpu_policy {policy!r}: expected one of {', '.join(CPU_POLICIES)}")
    if flavor_policy == DEDICATED:
        return DEDICATED
    if flavor_policy == MIXED:
        if image_policy == DEDICATED:
            raise NumaSpecError("the image's hw_cpu_policy=dedicated conflicts with the flavor's mixed")
        return MIXED
    if flavor_policy == SHARED:
        if image_policy in (MIXED, DEDICATED):
            raise NumaSpecError(
                f"the image's hw_cpu_policy={image_policy} conflicts with the flavor's shared"
            )
        return SHARED
    return image_policy if image_policy in CPU_POLICIES else None


def _thread_policy(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> str | None:
    flavor_policy, image_policy = _flavor_and_image("cpu_thread_policy", extra_specs, image)
    for source, policy in (("flavor", flavor_policy), ("image", image_policy)):
        if policy and policy not in THREAD_POLICIES:
            raise NumaSpecError(
                f"{source} cpu_thread_policy {policy!r}: expected one of {', '.join(THREAD_POLICIES)}"
            )
    if flavor_policy in (None, PREFER):
        return flavor_policy or image_policy
    if image_policy and image_policy != flavor_policy:
        raise NumaSpecError(f"the image's hw_cpu_thread_policy conflicts with the flavor's {flavor_policy}")
    return flavor_policy


def _emulator_policy(extra_specs: Mapping[str, str]) -> str | None:
    policy = extra_specs.get("hw:emulator_threads_policy")
    if not policy:
        return None
    if policy not in EMULATOR_POLICIES:
        raise NumaSpecError(f"hw:emulator_threads_policy {policy!r}: expected share or isolate")
    return policy


def _mask(vcpus: int, mask: str) -> set[int]:
    return _guest_cpu_spec(f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask)


def _realtime_cpus(vcpus: int, extra_specs: Mapping[str, str], image: Mapping[str, str]) -> set[int] | None:
    if not _true(extra_specs.get("hw:cpu_realtime")):
        return None
    flavor_mask, image_mask = _flavor_and_image("cpu_realtime_mask", extra_specs, image)
    mask = image_mask or flavor_mask
    every = set(range(vcpus))
    realtime = _mask(vcpus, mask) if mask else set(every)
    if not realtime:
        raise NumaSpecError("hw:cpu_realtime_mask leaves no realtime vCPU")
    emulator = _emulator_policy(extra_specs)
    if realtime == every and not emulator:
        raise NumaSpecError("hw:cpu_realtime_mask must leave a vCPU out, or set hw:emulator_threads_policy")
    if not realtime <= every:
        raise NumaSpecError("hw:cpu_realtime_mask names vCPUs the flavor does not have")
    return realtime


def _dedicated_mask(vcpus: int, extra_specs: Mapping[str, str]) -> set[int] | None:
    mask = extra_specs.get("hw:cpu_dedicated_mask")
    if not mask:
        return None
    dedicated = _mask(vcpus, mask)
    every = set(range(vcpus))
    if not dedicated or not every - dedicated:
        raise NumaSpecError("hw:cpu_dedicated_mask must leave some vCPUs shared and some dedicated")
    if not dedicated <= every:
        raise NumaSpecError("hw:cpu_dedicated_mask names vCPUs the flavor does not have")
    return dedicated


def _requested_cpus(extra_specs: Mapping[str, str]) -> tuple[int, int]:
    shared = dedicated = 0
    for key, value in extra_specs.items():
        for pattern, is_dedicated in ((_VCPU_RESOURCE, False), (_PCPU_RESOURCE, True)):
            if pattern.match(key):
                try:
                    amount = int(value)
                except ValueError:
                    continue  # refused elsewhere (the flavor's resources), not by the NUMA constraints
                if is_dedicated:
                    dedicated += amount
                else:
                    shared += amount
    return shared, dedicated


def _node_count(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> int | None:
    flavor_nodes, image_nodes = _flavor_and_image("numa_nodes", extra_specs, image)
    if flavor_nodes and image_nodes:
        raise NumaSpecError("hw:numa_nodes is set by both the flavor and the image")
    nodes = flavor_nodes or image_nodes
    if nodes is None:
        return None
    try:
        int_like = str(int(nodes)) == str(nodes)
    except ValueError:
        int_like = False
    if not int_like or int(nodes) < 1:
        raise NumaSpecError(f"hw:numa_nodes {nodes!r}: expected a whole number of at least 1")
    return int(nodes) if nodes else None


def _page_size_request(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> int | float | None:
    flavor_size, image_size = _flavor_and_image("mem_page_size", extra_specs, image)
    if not flavor_size and image_size:
        raise NumaSpecError("the image's hw_mem_page_size needs the flavor's hw:mem_page_size")
    if not flavor_size:
        return None
    size = _page_size(flavor_size)
    if image_size and size in (PAGE_ANY, PAGE_LARGE):
        return _page_size(image_size)
    if image_size:
        raise NumaSpecError(f"the image's hw_mem_page_size is refused by the flavor's {flavor_size}")
    return size


def _locked_memory(extra_specs: Mapping[str, str], image: Mapping[str, str]) -> None:
    flavor_lock, image_lock = _flavor_and_image("locked_memory", extra_specs, image)
    flavor_size, image_size = _flavor_and_image("mem_page_size", extra_specs, image)
    locked: bool | None = None
    if flavor_lock is not None:
        locked = _true(flavor_lock)
        if image_lock is not None and locked != _true(image_lock):
            raise NumaSpecError("hw:locked_memory differs between the flavor and the image")
    elif image_lock is not None:
        locked = _true(image_lock)
    if locked and not (flavor_size or image_size):
        raise NumaSpecError("hw:locked_memory needs hw:mem_page_size")


def _per_cell(extra_specs: Mapping[str, str], image: Mapping[str, str], key: str) -> list[str] | None:
    flavor_list: list[str] = []
    for index in range(NUMA_NODES_MAX):
        value = extra_specs.get(f"hw:{key}.{index}")
        if value is None:
            break
        flavor_list.append(value)
    image_list: list[str] = []
    for index in range(NUMA_NODES_MAX):
        value = image.get(f"hw_{key}.{index}")
        if value is None:
            break
        image_list.append(value)
    if flavor_list and image_list:
        raise NumaSpecError(f"hw_{key} is set by both the flavor and the image")
    return flavor_list or image_list or None


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise NumaSpecError(f"{what} {text!r}: expected a whole number of MiB") from None


def instance_topology(
    vcpus: int,
    memory_mib: int,
    extra_specs: Mapping[str, str],
    image_properties: Mapping[str, str] | None = None,
) -> InstanceTopology | None:
    """The NUMA topology Nova gives an instance of the flavor and image, None where it gives
    none; raises NumaSpecError (one line) where Nova refuses the request."""
    image = image_properties or {}
    cpu_policy = _cpu_policy(extra_specs, image)
    thread_policy = _thread_policy(extra_specs, image)
    realtime = _realtime_cpus(vcpus, extra_specs, image)
    dedicated = _dedicated_mask(vcpus, extra_specs)
    emulator = _emulator_policy(extra_specs)
    requested_shared, requested_dedicated = _requested_cpus(extra_specs)
    if cpu_policy and (requested_shared or requested_dedicated):
        raise NumaSpecError("resources:VCPU or resources:PCPU cannot be combined with hw:cpu_policy")
    if requested_shared and requested_dedicated:
        raise NumaSpecError("resources:VCPU and resources:PCPU cannot both be requested")
    if requested_dedicated:
        wanted = vcpus + 1 if emulator == "isolate" else vcpus
        if requested_dedicated != wanted:
            raise NumaSpecError(f"resources:PCPU must be {wanted} for this flavor, got {requested_dedicated}")
        cpu_policy = DEDICATED
    if requested_shared:
        cpu_policy = SHARED
    trait = next((v for k, v in extra_specs.items() if _HYPERTHREADING_TRAIT.match(k)), None)
    if thread_policy and trait:
        raise NumaSpecError("trait:HW_CPU_HYPERTHREADING cannot be combined with hw:cpu_thread_policy")
    if trait == "forbidden":
        thread_policy = ISOLATE
    elif trait == "required":
        thread_policy = REQUIRE
    if cpu_policy in (SHARED, None):
        if thread_policy:
            raise NumaSpecError("hw:cpu_thread_policy needs hw:cpu_policy dedicated or mixed")
        if emulator == "isolate":
            raise NumaSpecError("hw:emulator_threads_policy=isolate needs hw:cpu_policy dedicated or mixed")
        if dedicated:
            raise NumaSpecError("hw:cpu_dedicated_mask needs hw:cpu_policy=mixed")
        if realtime:
            raise NumaSpecError("hw:cpu_realtime needs hw:cpu_policy dedicated or mixed")
    elif cpu_policy == DEDICATED:
        if dedicated:
            raise NumaSpecError("hw:cpu_dedicated_mask needs hw:cpu_policy=mixed")
    else:
        if (realtime and dedicated) or not (realtime or dedicated):
            raise NumaSpecError(
                "hw:cpu_policy=mixed needs either hw:cpu_dedicated_mask or hw:cpu_realtime_mask"
            )
        dedicated = dedicated or realtime
    nodes = _node_count(extra_specs, image)
    page_size = _page_size_request(extra_specs, image)
    persistent_memory = [
        label.strip() for label in extra_specs.get("hw:pmem", "").split(",") if label.strip()
    ]
    _locked_memory(extra_specs, image)
    pinned = set(range(vcpus)) if cpu_policy == DEDICATED else dedicated or set()
    if not (nodes or page_size or persistent_memory or cpu_policy in _PINNED_POLICIES):
        return None
    cells = _cells(vcpus, memory_mib, nodes or 1, pinned, extra_specs=extra_specs, image=image)
    # A size with a unit that is not a whole number of KiB asks for a topology, but the cells
    # hold its whole KiB only (Nova's integer field), so that `100B` asks for no page size at all.
    cell_page_size = None if page_size is None else int(page_size)
    return InstanceTopology(cells, cpu_policy, thread_policy, cell_page_size, emulator)


def _cells(
    vcpus: int,
    memory_mib: int,
    nodes: int,
    pinned: set[int],
    *,
    extra_specs: Mapping[str, str],
    image: Mapping[str, str],
) -> tuple[InstanceCell, ...]:
    cpu_texts = _per_cell(extra_specs, image, "numa_cpus")
    cpu_lists = None if cpu_texts is None else [_guest_cpu_spec(text) for text in cpu_texts]
    mem_texts = _per_cell(extra_specs, image, "numa_mem")
    mem_list = None if mem_texts is None else [_whole(text, "hw:numa_mem") for text in mem_texts]
    if cpu_lists is None and mem_list is None:
        if vcpus % nodes or memory_mib % nodes:
            raise NumaSpecError(f"{vcpus} vCPUs and {memory_mib} MiB do not split evenly into {nodes} cells")
        per_cell = vcpus // nodes
        return tuple(
            _cell(node, set(range(node * per_cell, (node + 1) * per_cell)), memory_mib // nodes, pinned)
            for node in range(nodes)
        )
    if cpu_lists is None or mem_list is None or len(cpu_lists) != nodes or len(mem_list) != nodes:
        raise NumaSpecError("hw:numa_cpus.N and hw:numa_mem.N must be given for every cell")
    unassigned = set(range(vcpus))
    cells = []
    for node, (cpus, memory) in enumerate(zip(cpu_lists, mem_list, strict=True)):
        for cpu in cpus:
            if cpu > vcpus - 1:
                raise NumaSpecError(f"hw:numa_cpus.{node} names vCPU {cpu}; the flavor has {vcpus}")
            if cpu not in unassigned:
                raise NumaSpecError(f"hw:numa_cpus.{node} names vCPU {cpu} a second time")
            unassigned.remove(cpu)
        cells.append(_cell(node, cpus, memory, pinned))
    if unassigned:
        raise NumaSpecError(f"hw:numa_cpus.N leaves vCPUs {sorted(unassigned)} in no cell")
    if sum(mem_list) != memory_mib:
        raise NumaSpecError(f"hw:numa_mem.N add up to {sum(mem_list)} MiB, not the flavor's {memory_mib}")
    return tuple(cells)


def _cell(node: int, cpus: set[int], memory_mib: int, pinned: set[int]) -> InstanceCell:
    return InstanceCell(node, frozenset(cpus - pinned), frozenset(cpus & pinned), memory_mib)
