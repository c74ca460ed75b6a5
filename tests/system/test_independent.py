"""`virtcap audit --format json` against an independent computation of docs/accounting.md's formulas,
on random fleets it has never seen (a new seed every run; set VIRTCAP_FLEET_SEED to replay one).

The expectation is computed from the generator's specs, the ground truth, with no virtcap code
beyond writing the node files.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from virtcap.demo import demo_config, hostgen
from virtcap.demo.fleetgen import (
    BLOCKED,
    CRASHED,
    PAUSED,
    PMSUSPENDED,
    RUNNING,
    SHUTDOWN,
    SHUTOFF,
    DomainSpec,
    FlavorSpec,
    HostSpec,
    random_domain,
    write_fleet,
)
from virtcap.demo.generate import captured_hosts, demo_hosts
from virtcap.model.resources import Resource

GIB = 1024**3
MIB = 1024**2
TEST_DRIVER_ONLINE_CPUS = {0, 2, 4}  # whatever the node file says
TEST_DRIVER_POOL_BYTES = 100 * GIB  # likewise
STATE_GROUPS = {RUNNING: "running", BLOCKED: "running", PAUSED: "paused", SHUTOFF: "shutoff"}
ALL_STATES = (RUNNING, BLOCKED, PAUSED, SHUTDOWN, SHUTOFF, CRASHED, PMSUSPENDED)
FLAVORS = {
    "tiny": {"vcpu": 1, "pcpu": 0, "memory": 512 * MIB, "disk": 1 * GIB},
    "std": {"vcpu": 2, "pcpu": 0, "memory": 4 * GIB, "disk": 20 * GIB},
    "huge": {"vcpu": 24, "pcpu": 0, "memory": 96 * GIB, "disk": 0},
    "pinned": {"vcpu": 0, "pcpu": 1, "memory": 1 * GIB, "disk": 5 * GIB},
}
DOMAIN_FLAVORS = (
    FlavorSpec("a", 1, 1024, 2),
    FlavorSpec("b", 2, 3072, 5),
    FlavorSpec("c", 4, 6144, 10, ephemeral_gib=1, swap_mib=512),
    FlavorSpec("d", 8, 12288, 3),
)


def random_policy(rng: random.Random) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "allocation_ratios": {
            "vcpu": rng.choice([1.0, 1.5, 2.0, 4.0, 16.0, 3.3]),
            "memory": rng.choice([0.9, 1.0, 1.5, 1.1]),
            "disk": rng.choice([1.0, 1.2, 2.5]),
        },
        "reserved": {"memory": f"{rng.choice([0, 512, 2048, 4096])}MiB", "disk": f"{rng.choice([0, 10])}GiB"},
        "count_inactive_domains": rng.random() < 0.7,
    }
    if rng.random() < 0.4:
        policy["cpu_dedicated_set"] = "2,4"
        if rng.random() < 0.7:
            policy["cpu_shared_set"] = "0"
    else:
        policy["reserved"]["vcpu"] = rng.choice([0, 0, 2])
    if rng.random() < 0.4:
        inventory: dict[str, float] = {"total": rng.randint(1, 12), "reserved": rng.choice([0, 0, 1, 20])}
        if rng.random() < 0.5:
            inventory["allocation_ratio"] = rng.choice([1.0, 1.5, 2.0])
        policy["inventories"] = {"CUSTOM_LICENCE": inventory}
    return policy


def random_host(rng: random.Random, name: str) -> HostSpec:
    domains: list[DomainSpec] = []
    for index in range(rng.randint(0, 40)):
        domain = random_domain(
            rng,
            name,
            index,
            rng.choice(ALL_STATES),
            nova_share=0.5,
            local_share=0.6,
            flavors=DOMAIN_FLAVORS,
        )
        roll = rng.random()
        if roll < 0.1:
            domain = replace(domain, pins=tuple(rng.choice((2, 4)) for _ in range(domain.vcpus)))
            if domain.flavor is not None:  # Nova pins a guest because its flavor says so
                dedicated = replace(domain.flavor, extra_specs=(("hw:cpu_policy", "dedicated"),))
                domain = replace(domain, flavor=dedicated)
        elif roll < 0.2:
            domain = replace(domain, pins=tuple(rng.choice((0, 2)) for _ in range(domain.vcpus)))
        if rng.random() < 0.1:
            domain = replace(domain, hugepages=True)
        if domain.flavor is not None and rng.random() < 0.3:
            licensed = (*domain.flavor.extra_specs, ("resources:CUSTOM_LICENCE", str(rng.randint(1, 2))))
            domain = replace(domain, flavor=replace(domain.flavor, extra_specs=licensed))
        domains.append(domain)
    return HostSpec(
        name=name,
        cpus=rng.choice([4, 8, 16, 48, 96]),
        memory_gib=rng.choice([8, 32, 64, 256]),
        pool_gib=100,
        pool_used_gib=0,
        domains=domains,
    )


def expected_host(
    host: HostSpec, policy: dict[str, Any], flavors: dict[str, dict[str, int]] = FLAVORS
) -> dict[str, Any]:
    """docs/accounting.md, written out again from the specs."""
    ratios = {"vcpu": 4.0, "pcpu": 1.0, "memory": 1.0, "disk": 1.0} | policy["allocation_ratios"]
    reserved = {
        "vcpu": policy["reserved"].get("vcpu", 0),
        "pcpu": 0,
        "memory": int(policy["reserved"]["memory"].removesuffix("MiB")) * MIB,
        "disk": int(policy["reserved"]["disk"].removesuffix("GiB")) * GIB,
    }
    shared = {0} if "cpu_shared_set" in policy else None
    dedicated = {2, 4} if "cpu_dedicated_set" in policy else None
    if shared is not None:
        vcpu_total = len(shared)
    elif dedicated is not None:
        vcpu_total = 0
    else:
        vcpu_total = host.cpus
    totals = {
        "vcpu": vcpu_total,
        "pcpu": len(dedicated) if dedicated else 0,
        "memory": host.memory_gib * GIB,
        "disk": TEST_DRIVER_POOL_BYTES,
    }
    units = {"vcpu": 1, "pcpu": 1, "memory": MIB, "disk": GIB}
    max_units = dict(totals)
    for name, inventory in policy.get("inventories", {}).items():  # custom classes: plain counts
        label = name.lower()
        totals[label] = inventory["total"]
        reserved[label] = inventory.get("reserved", 0)
        ratios[label] = inventory.get("allocation_ratio", 1.0)
        max_units[label] = inventory.get("max_unit", 2**31 - 1)  # Placement's default
        units[label] = 1
    counted = {"running", "paused", "other"} | ({"shutoff"} if policy["count_inactive_domains"] else set())
    domains, by_state = _usage(host, dedicated, totals)
    for label in by_state.keys() - totals.keys():  # used where the host has no inventory of it
        totals[label] = reserved[label] = max_units[label] = 0
        ratios[label], units[label] = 1.0, 1
    # A CPU set naming an offline CPU: Nova refuses its configuration, nothing is offered at all.
    named = (shared or set()) | (dedicated or set())
    everything_refused = bool(named - TEST_DRIVER_ONLINE_CPUS)
    resources = {}
    for resource, total in totals.items():
        refused = everything_refused or (total > 0 and reserved[resource] > total)
        usable = 0 if refused else max(total - reserved[resource], 0)
        # Placement's capacity, truncated in its own unit (cpus, MiB, GiB)
        limit = int(usable // units[resource] * ratios[resource]) * units[resource]
        used = sum(amount for state, amount in by_state[resource].items() if state in counted)
        resources[resource] = {
            "total": total,
            "reserved": reserved[resource],
            "allocation_ratio": ratios[resource],
            "limit": limit,
            "used": used,
            "free": limit - used,
            "used_by_state": by_state[resource],
            "max_unit": 0 if refused else max_units[resource],
        }
    schedulable = {}
    for name, request in flavors.items():
        asked = {r: amount for r, amount in request.items() if amount > 0}
        if any(r not in resources or amount > resources[r]["max_unit"] for r, amount in asked.items()):
            schedulable[name] = 0
        else:
            schedulable[name] = max(
                min(math.floor(resources[r]["free"] / amount) for r, amount in asked.items()), 0
            )
    for numbers in resources.values():
        del numbers["max_unit"]
    return {"domains": domains, "resources": resources, "schedulable": schedulable}


def _usage(
    host: HostSpec, dedicated: set[int] | None, totals: dict[str, int]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Domains per state, and what they are allocated per resource and state."""
    states = ("running", "paused", "shutoff", "other")
    by_state = {r: dict.fromkeys(states, 0) for r in totals}
    domains = dict.fromkeys(states, 0)
    for domain in host.domains:
        group = STATE_GROUPS.get(domain.state, "other")
        domains[group] += 1
        flavor = domain.flavor
        if flavor is not None:
            cpus, memory = flavor.vcpus, flavor.memory_mib * MIB
            disk = (flavor.root_gib + flavor.ephemeral_gib + math.ceil(flavor.swap_mib / 1024)) * GIB
        else:
            cpus, memory = domain.vcpus, domain.memory_mib * MIB
            disk = sum(d.capacity_gib * GIB for d in domain.disks if d.kind in ("file", "volume"))
        if flavor is not None:  # Nova's scheduler: the flavor's CPU policy, whatever the pins
            pcpus = ("hw:cpu_policy", "dedicated") in flavor.extra_specs
        else:
            pcpus = dedicated is not None and domain.pins is not None and set(domain.pins) <= dedicated
        by_state["pcpu" if pcpus else "vcpu"][group] += cpus
        by_state["memory"][group] += memory  # hugepage-backed memory too, as Nova allocates it
        by_state["disk"][group] += disk
        for key, value in flavor.extra_specs if flavor is not None else ():
            if key.startswith("resources:CUSTOM_"):
                label = key.removeprefix("resources:").lower()
                by_state.setdefault(label, dict.fromkeys(states, 0))[group] += int(value)
    return domains, by_state


def run_audit_json(config: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(config), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def compare(
    actual: dict[str, Any], expected: dict[str, Any], where: str, unchecked: Collection[str] = ()
) -> None:
    """`unchecked`: flavors discovered in the fleet that the expected document does not compute."""
    assert actual["up"], f"{where}: {actual['error']}"
    assert actual["domains"] == expected["domains"], where
    fitted = {name: count for name, count in actual["schedulable"].items() if name not in unchecked}
    assert fitted == expected["schedulable"], where
    assert set(actual["resources"]) == set(expected["resources"]), where
    for resource, numbers in expected["resources"].items():
        got = actual["resources"][resource]
        for key, value in numbers.items():
            assert got[key] == value, f"{where}: {resource}.{key}: got {got[key]}, expected {value}"


def compare_captured(actual: dict[str, Any], host: hostgen.HostSpec) -> None:
    """A captured demo host's whole-host amounts from its spec: its pinned guests (those placed
    in a cell) take dedicated CPUs, the others shared ones; every guest counts, stopped or not."""
    where = host.name
    assert actual["up"], f"{where}: {actual['error']}"
    stopped = sum(1 for guest in host.guests if guest.state == hostgen.SHUTOFF)
    assert actual["domains"] == {
        "running": len(host.guests) - stopped,
        "paused": 0,
        "shutoff": stopped,
        "other": 0,
    }, where
    resources = actual["resources"]
    assert resources["pcpu"]["used"] == sum(g.vcpus for g in host.guests if g.cell is not None), where
    assert resources["vcpu"]["used"] == sum(g.vcpus for g in host.guests if g.cell is None), where
    assert resources["memory"]["used"] == sum(g.memory_mib for g in host.guests) * MIB, where
    assert resources["memory"]["total"] == host.sockets * host.memory_gib * GIB, where


@pytest.mark.parametrize("fleet", range(3))
def test_audit_json_matches_an_independent_computation(tmp_path: Path, fleet: int) -> None:
    seed = int(os.environ.get("VIRTCAP_FLEET_SEED", random.SystemRandom().randrange(2**32))) + fleet
    rng = random.Random(seed)
    hosts = [random_host(rng, f"host-{i:02d}") for i in range(rng.randint(2, 6))]
    paths = write_fleet(hosts, tmp_path / "nodes")
    policies = {host.name: random_policy(rng) for host in hosts}
    config = {
        "hypervisors": [
            {"name": h.name, "uri": f"test://{paths[h.name]}", **policies[h.name]} for h in hosts
        ],
        "flavors": [
            {"name": name, **{k: v for k, v in request.items() if v}} for name, request in FLAVORS.items()
        ],
    }
    config_path = tmp_path / "virtcap.yaml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    document = run_audit_json(config_path)
    assert [h["name"] for h in document["hypervisors"]] == [h.name for h in hosts]
    # the Nova flavors the domains carry are fitted too (discover_flavors): per name the definition
    # most domains carry (ties: the smallest), asking as an image-booted instance would: root +
    # ephemeral + swap rounded up to GiB of local disk; those with extra specs are left unchecked
    carried: dict[tuple[Any, ...], int] = {}
    for host in hosts:
        for domain in host.domains:
            if (f := domain.flavor) is not None:
                key = (
                    f.name,
                    f.vcpus,
                    f.memory_mib,
                    f.root_gib,
                    f.ephemeral_gib,
                    f.swap_mib,
                    tuple(sorted(f.extra_specs)),
                )
                carried[key] = carried.get(key, 0) + 1
    chosen: dict[str, tuple[Any, ...]] = {}
    for key, _count in sorted(carried.items(), key=lambda item: (item[0][0], -item[1], item[0])):
        chosen.setdefault(key[0], key)
    plain = {name: key for name, key in chosen.items() if not key[6]}
    flavors = FLAVORS | {
        name: {
            "vcpu": vcpus,
            "pcpu": 0,
            "memory": memory * MIB,
            "disk": (root + ephemeral + -(-swap // 1024)) * GIB,
        }
        for name, (_, vcpus, memory, root, ephemeral, swap, _specs) in plain.items()
    }
    unchecked = set(chosen) - set(plain)
    for host, actual in zip(hosts, document["hypervisors"], strict=True):
        where = f"seed {seed} {host.name}"
        compare(actual, expected_host(host, policies[host.name], flavors), where, unchecked)


def test_the_demo_matches_the_independent_computation() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--demo", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    document = json.loads(result.stdout)
    hosts = {host.name: host for host in demo_hosts()}
    config = demo_config()
    flavors = {f.name: {r.label: amount for r, amount in f.request.items()} for f in config.flavors}
    # flavors discovered in the demo's Nova metadata (the captures' pinned and GPU flavors among
    # them) are fitted too; test_audit_json_matches_an_independent_computation checks those
    discovered = {f["name"] for f in document["discovered_flavors"] if not f["configured"]}
    assert discovered == {
        "g1.large",
        "g1.xlarge",
        "p1.xlarge",
        "r1.8xlarge",
        "r1.large",
        "rp1.large",
        "rp1.xlarge",
    }
    captured = {host.name: host for host in captured_hosts()}
    for entry in document["hypervisors"]:
        if entry["name"] in captured:
            compare_captured(entry, captured[entry["name"]])
            continue
        if entry["name"] not in hosts:
            assert entry["up"] is False and entry["error"]
            continue
        hypervisor = next(h for h in config.hypervisors if h.name == entry["name"])
        policy: dict[str, Any] = {
            "allocation_ratios": {r.label: v for r, v in hypervisor.policy.allocation_ratios.items()},
            "reserved": {
                "vcpu": hypervisor.policy.reserved[Resource.VCPU],
                "memory": f"{hypervisor.policy.reserved[Resource.MEMORY] // MIB}MiB",
                "disk": f"{hypervisor.policy.reserved[Resource.DISK] // GIB}GiB",
            },
            "count_inactive_domains": hypervisor.policy.count_inactive_domains,
            "inventories": {
                r.placement_class: {
                    "total": i.total,
                    "reserved": i.reserved,
                    "allocation_ratio": i.allocation_ratio,
                }
                for r, i in hypervisor.policy.inventories.items()
            },
        }
        if hypervisor.policy.cpu_shared_set is not None:
            assert hypervisor.policy.cpu_shared_set == {0}
            policy["cpu_shared_set"] = "0"
        if hypervisor.policy.cpu_dedicated_set is not None:
            assert hypervisor.policy.cpu_dedicated_set == {2, 4}
            policy["cpu_dedicated_set"] = "2,4"
        expected = expected_host(hosts[entry["name"]], policy, flavors)
        if hypervisor.maintenance is not None:  # it offers nothing, whatever it has free
            expected["schedulable"] = dict.fromkeys(expected["schedulable"], 0)
        compare(entry, expected, entry["name"], discovered)
