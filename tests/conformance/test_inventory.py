"""The inventory: what Nova's libvirt driver reports to Placement against virtcap's totals.

Each case is a test-driver host (its memory) and a configuration (allocation ratios, reserved
amounts, CPU sets), given to both sides: Nova as its options, its libvirt driver connected to the
host (`_check_cpu_set_configuration`, then `update_provider_tree`); virtcap as its YAML
configuration, its audit reading the same host (`audit_host`, then `host_capacity`). Compared: a
configuration refused by both, or a host that offers nothing (a CPU set naming an offline CPU),
or per class: reported or not, total, reserved, allocation ratio, max_unit, and whether Placement
will refuse it (reserved > total).

The storage for instance disks: virtcap reads the host's `default` pool, Nova statvfs of its
instances_path; the oracle answers that statvfs with the pool's capacity (see oracle.py). The test
driver gives every pool a capacity of 100 GiB whatever the node file says, so the disk total does
not vary here (test_placement.py varies it).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt
import pytest

from tests.conformance.nodes import MAP_CPUS, ONLINE_CPUS, write_node
from tests.conformance.upstream import GIB, MIB, PLACEMENT_CLASS, UNIT, Oracle, agree, generator
from tests.support.libvirtd import Libvirtd
from virtcap.config import ConfigError, parse_config
from virtcap.model.capacity import HostCapacity, host_capacity
from virtcap.service.oneshot import audit_hypervisor_blocking
from virtcap.units import format_cpu_set

POOL_BYTES = 100 * GIB
"""What the node files say; the test driver ignores it (see above) and says the same."""
VIRTCAP_KEYS = {
    "cpu_allocation_ratio": ("allocation_ratios", "vcpu", ""),
    "ram_allocation_ratio": ("allocation_ratios", "memory", ""),
    "disk_allocation_ratio": ("allocation_ratios", "disk", ""),
    "reserved_host_cpus": ("reserved", "vcpu", ""),
    "reserved_host_memory_mb": ("reserved", "memory", "MiB"),
    "reserved_host_disk_mb": ("reserved", "disk", "MiB"),
}
"""Nova's option: virtcap's section, key and unit."""


@dataclass(frozen=True)
class HostCase:
    memory_kib: int
    options: dict[str, Any] = field(default_factory=dict)
    """Nova's options as nova.conf would set them; absent ones keep Nova's defaults."""
    cpus: int = 3

    def describe(self) -> str:
        return json.dumps({"memory_kib": self.memory_kib, "cpus": self.cpus, **self.options})

    def config_text(self, uri: str) -> str:
        entry: dict[str, Any] = {"name": "h", "uri": uri, "disk": {"pool": "default"}}
        for option, value in self.options.items():
            if option in ("cpu_shared_set", "cpu_dedicated_set"):
                entry[option] = value
            else:
                section, key, unit = VIRTCAP_KEYS[option]
                entry.setdefault(section, {})[key] = f"{value}{unit}" if unit else value
        return json.dumps({"hypervisors": [entry]})


def _cpu_set(rng: random.Random, offline: bool) -> str:
    """A set of online CPUs, with an offline one when `offline`."""
    cpus = set(rng.sample(sorted(ONLINE_CPUS), rng.randint(1, 2)))
    if offline:
        cpus.add(rng.choice(sorted(set(range(MAP_CPUS + 2)) - ONLINE_CPUS)))
    return format_cpu_set(frozenset(cpus))


def _ratio(rng: random.Random) -> float | None:
    return rng.choice((None, None, 0.0, 1.0, 1.5, 2.0, 16.0, 0.75, round(rng.uniform(0.1, 30), 3)))


def generated_host(rng: random.Random) -> HostCase:
    memory_kib = rng.randint(1024 * 1024, 512 * 1024 * 1024)
    options: dict[str, Any] = {
        "cpu_allocation_ratio": _ratio(rng),
        "ram_allocation_ratio": _ratio(rng),
        "disk_allocation_ratio": _ratio(rng),
        "reserved_host_memory_mb": rng.choice(
            (None, 0, 512, 4096, rng.randint(0, memory_kib * 6 // 5 // 1024))
        ),
        "reserved_host_disk_mb": rng.choice((None, 0, 1024, 1536, rng.randint(0, 2 * POOL_BYTES // MIB))),
    }
    layout = rng.random()
    offline = rng.random() < 0.15
    if layout < 0.2:
        options["cpu_shared_set"] = _cpu_set(rng, offline)
    elif layout < 0.4:
        options["cpu_dedicated_set"] = _cpu_set(rng, offline)
    elif layout < 0.6:
        dedicated = frozenset(rng.sample(sorted(ONLINE_CPUS), rng.randint(1, 2)))
        shared = frozenset(rng.sample(sorted(ONLINE_CPUS - dedicated), 1))
        if rng.random() < 0.1:
            shared = dedicated  # Nova refuses overlapping sets at start-up
        options["cpu_dedicated_set"] = format_cpu_set(dedicated)
        options["cpu_shared_set"] = format_cpu_set(shared)
    if "cpu_shared_set" not in options and "cpu_dedicated_set" not in options:
        options["reserved_host_cpus"] = rng.choice((None, 0, 1, 2, 3, 4))
    elif rng.random() < 0.1:
        options["reserved_host_cpus"] = 1  # Nova refuses it alongside the CPU sets at start-up
    return HostCase(memory_kib, {k: v for k, v in options.items() if v is not None})


def _virtcap(case: HostCase, uri: str) -> HostCapacity | str:
    """virtcap's capacity of the host, or why its configuration is refused."""
    try:
        hypervisor = parse_config(case.config_text(uri), "conformance").hypervisors[0]
    except ConfigError as error:
        return str(error)
    facts = audit_hypervisor_blocking(hypervisor, cpu_window=0.0)
    return host_capacity(facts, hypervisor.policy)


def _pool_capacity(uri: str) -> int:
    """The capacity of the host's `default` pool, as libvirt reports it."""
    conn = libvirt.openReadOnly(uri)
    try:
        capacity: int = conn.storagePoolLookupByName("default").info()[1]
    finally:
        conn.close()
    return capacity


def compare(oracle: Oracle, cases: list[HostCase], directory: Path) -> tuple[list[str], int]:
    uris = [
        write_node(directory / f"host{index}.xml", case.memory_kib, POOL_BYTES, cpus=case.cpus)
        for index, case in enumerate(cases)
    ]
    questions = [
        {
            "op": "inventory",
            "uri": uri,
            "instances_path": str(directory / "instances"),
            "filesystem_bytes": _pool_capacity(uri),
            "options": case.options,
        }
        for case, uri in zip(cases, uris, strict=True)
    ]
    mismatches: list[str] = []
    compared = 0
    for index, (case, uri, answer) in enumerate(zip(cases, uris, oracle.ask(questions), strict=True)):
        found: list[str] = []
        compared += _compare_host(_virtcap(case, uri), answer, found)
        mismatches.extend(f"host {index}: {line}; host {case.describe()}" for line in found)
    return mismatches, compared


def _compare_host(virtcap: HostCapacity | str, nova: dict[str, Any], found: list[str]) -> int:
    virtcap_refuses = virtcap if isinstance(virtcap, str) else None
    if nova.get("stage") == "config" or virtcap_refuses:
        if (nova.get("stage") == "config") != bool(virtcap_refuses):
            found.append(f"configuration refused: virtcap {virtcap_refuses}, Nova {nova.get('error')}")
        return 1
    assert isinstance(virtcap, HostCapacity)
    refused = {
        resource: getattr(virtcap.resources[resource], "refused", None) for resource in PLACEMENT_CLASS
    }
    if nova.get("stage") == "inventory":
        if not all(refused.values()):
            offered = [resource.label for resource, why in refused.items() if not why]
            found.append(f"Nova refuses to start ({nova['error']}), virtcap still offers {offered}")
        return 1
    inventory = nova["inventory"]
    compared = 0

    def check(what: str, own: object, theirs: object) -> None:
        nonlocal compared
        compared += 1
        if own != theirs:
            found.append(f"{what}: virtcap {own}, Nova {theirs}")

    for resource, name in PLACEMENT_CLASS.items():
        own = virtcap.resources[resource]
        unit = UNIT[resource]
        if name not in inventory:
            check(f"{name} total of a class Nova does not report", own.total or 0, 0)
            continue
        fields = inventory[name]
        check(f"{name} total", own.total, fields["total"] * unit)
        check(f"{name} reserved", own.reserved, fields["reserved"] * unit)
        check(f"{name} allocation ratio", own.allocation_ratio, fields["allocation_ratio"])
        # Placement refuses an inventory whose capacity is negative (its inventory handler checks
        # int((total - reserved) x allocation_ratio) < 0); test_placement.py asks it directly
        capacity = int((fields["total"] - fields["reserved"]) * fields["allocation_ratio"])
        check(f"{name} refused by Placement (negative capacity)", bool(refused[resource]), capacity < 0)
        if capacity >= 0:  # else Placement holds no inventory, nor its max_unit
            check(f"{name} max_unit", getattr(own, "max_unit", "absent"), fields["max_unit"] * unit)
    return compared


def test_generated_hosts_have_novas_inventory(oracle: Oracle, tmp_path: Path) -> None:
    rng = generator("inventory")
    cases = [generated_host(rng) for _ in range(60)]
    mismatches, compared = compare(oracle, cases, tmp_path)
    agree("inventory comparisons", mismatches, compared)


GIB_IN_KIB = 1024 * 1024
RATIO_OPTIONS = ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio")
ISSUE_HOSTS = {
    "difference 4: reserved disk in MiB is rounded up to GiB": HostCase(
        16 * GIB_IN_KIB, {"reserved_host_disk_mb": 1536}
    ),
    "difference 6: a CPU set naming an offline CPU: Nova refuses to start": HostCase(
        16 * GIB_IN_KIB, {"cpu_dedicated_set": "2-3"}
    ),
    "difference 8: an allocation ratio of 0 is the default": HostCase(
        16 * GIB_IN_KIB, dict.fromkeys(RATIO_OPTIONS, 0.0)
    ),
    "difference 9: reserved memory above the total": HostCase(
        GIB_IN_KIB, {"reserved_host_memory_mb": 2048}
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", ISSUE_HOSTS.values(), ids=ISSUE_HOSTS.keys())
def test_issue_13_hosts(oracle: Oracle, tmp_path: Path, case: HostCase) -> None:
    mismatches, compared = compare(oracle, [case], tmp_path)
    agree("inventory comparisons", mismatches, compared)


def test_on_a_real_qemu_host_vcpu_total_is_the_online_cpus(
    oracle: Oracle, libvirtd: Libvirtd, tmp_path: Path
) -> None:
    """Nova counts the online CPUs of virNodeGetCPUMap, virtcap the CPUs of virNodeGetInfo: on a
    real QEMU host both are the online CPUs. (libvirt's test driver answers a canned map of 8
    CPUs, 0, 2 and 4 online, whatever its node file says, which is why the generated hosts
    above have 3 CPUs.)"""
    instances = tmp_path / "instances"
    instances.mkdir()
    stat = os.statvfs(instances)
    answer = oracle.ask(
        [
            {
                "op": "inventory",
                "uri": libvirtd.uri,
                "instances_path": str(instances),
                "filesystem_bytes": stat.f_blocks * stat.f_frsize,
                "options": {},
            }
        ]
    )[0]
    assert "inventory" in answer, answer
    config = json.dumps(
        {"hypervisors": [{"name": "real", "uri": libvirtd.uri, "disk": {"path": str(instances)}}]}
    )
    hypervisor = parse_config(config, "conformance").hypervisors[0]
    facts = audit_hypervisor_blocking(hypervisor, cpu_window=0.0)
    assert facts.online_cpus is not None and len(facts.online_cpus) == facts.cpus
    found: list[str] = []
    compared = _compare_host(host_capacity(facts, hypervisor.policy), answer, found)
    agree("inventory comparisons on a real QEMU host", found, compared)
