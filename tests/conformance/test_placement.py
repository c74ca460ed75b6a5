"""Capacity, usage and fit: virtcap's model against a real Placement, on generated hosts.

Each case is a hypervisor (CPUs, memory, the storage for instance disks), its configuration
(allocation ratios, reserved amounts, CPU sets), the domains it runs, the claims it holds and one
flavor. virtcap answers with `host_capacity` and `claim_test`; the oracle gives Placement the
inventory Nova reports for that host (ACCOUNTING.md's table, in Placement's units), writes the
domains and claims as allocations, and then allocates the flavor in a row until Placement
refuses. Compared, per resource class: whether the inventory is accepted, the limit (Placement's
capacity), used, free; and for the flavor: the claim answer (the first allocation) and how many
fit (how many allocations Placement accepts in a row).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pytest

from tests.conformance.upstream import GIB, MIB, PLACEMENT_CLASS, UNIT, Oracle, agree, generator
from tests.factories import domain, host, local_disk
from virtcap.config import parse_config
from virtcap.model.capacity import HostCapacity, amounts, claim_test, host_capacity
from virtcap.model.facts import DomainState
from virtcap.units import format_cpu_set

MOST_ATTEMPTS = 40
"""A flavor is allocated at most this many times in a row: "at least 40 fit" is then the answer."""

FLAVOR = "f"


@dataclass(frozen=True)
class Domain:
    vcpus: int
    dedicated: bool
    memory_mib: int
    disk_gib: int
    state: DomainState


@dataclass(frozen=True)
class Case:
    """One hypervisor, its configuration, domains and claims, and a flavor; all in Nova's units."""

    cpus: int
    memory_mib: int
    disk_bytes: int
    cpu_ratio: float = 4.0
    ram_ratio: float = 1.0
    disk_ratio: float = 1.0
    reserved_host_cpus: int = 0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_mb: int = 0
    cpu_shared_set: frozenset[int] | None = None
    cpu_dedicated_set: frozenset[int] | None = None
    domains: tuple[Domain, ...] = ()
    claimed: dict[str, int] = field(default_factory=dict)
    """Placement class to amount: one pending claim."""
    flavor: dict[str, int] = field(default_factory=dict)
    """Placement class to amount."""

    def describe(self) -> str:
        fields = asdict(self)
        for key in ("cpu_shared_set", "cpu_dedicated_set"):
            if fields[key] is not None:
                fields[key] = format_cpu_set(fields[key])
        fields["domains"] = [
            {**asdict(d), "state": d.state.value} for d in self.domains
        ]  # fmt: skip
        return json.dumps(fields, separators=(",", ":"))

    # Nova's inventory of this host, per ACCOUNTING.md (test_inventory.py checks it against
    # Nova's libvirt driver itself).

    def totals(self) -> dict[str, int]:
        if self.cpu_shared_set is not None:
            vcpus = len(self.cpu_shared_set)
        elif self.cpu_dedicated_set is not None:
            vcpus = 0
        else:
            vcpus = self.cpus
        return {
            "VCPU": vcpus,
            "PCPU": len(self.cpu_dedicated_set or ()),
            "MEMORY_MB": self.memory_mib,
            "DISK_GB": self.disk_bytes // GIB,
        }

    def inventory(self) -> dict[str, dict[str, Any]]:
        reserved = {
            "VCPU": self.reserved_host_cpus,
            "PCPU": 0,
            "MEMORY_MB": self.reserved_host_memory_mb,
            "DISK_GB": math.ceil(self.reserved_host_disk_mb / 1024),
        }
        ratios = {
            "VCPU": self.cpu_ratio,
            "PCPU": 1.0,
            "MEMORY_MB": self.ram_ratio,
            "DISK_GB": self.disk_ratio,
        }
        return {
            name: {
                "total": total,
                "reserved": reserved[name],
                "min_unit": 1,
                "max_unit": total,
                "step_size": 1,
                "allocation_ratio": ratios[name],
            }
            for name, total in self.totals().items()
            if total > 0  # Nova reports no inventory of a class it has none of
        }

    def usage(self) -> list[dict[str, int]]:
        allocations = [
            {"PCPU" if d.dedicated else "VCPU": d.vcpus, "MEMORY_MB": d.memory_mib, "DISK_GB": d.disk_gib}
            for d in self.domains
        ]
        return [*allocations, self.claimed] if self.claimed else allocations

    # virtcap's view of the same host

    def config_text(self) -> str:
        entry: dict[str, Any] = {
            "name": "h",
            "uri": "test:///default",
            "allocation_ratios": {"vcpu": self.cpu_ratio, "memory": self.ram_ratio, "disk": self.disk_ratio},
            "reserved": {
                "vcpu": self.reserved_host_cpus,
                "memory": f"{self.reserved_host_memory_mb}MiB",
                "disk": f"{self.reserved_host_disk_mb}MiB",
            },
        }
        for key in ("cpu_shared_set", "cpu_dedicated_set"):
            cpus = getattr(self, key)
            if cpus is not None:
                entry[key] = format_cpu_set(cpus)
        flavor = {
            "name": FLAVOR,
            "vcpu": self.flavor.get("VCPU", 0),
            "pcpu": self.flavor.get("PCPU", 0),
            "memory": f"{self.flavor.get('MEMORY_MB', 0)}MiB",
            "disk": f"{self.flavor.get('DISK_GB', 0)}GiB",
        }
        return json.dumps({"hypervisors": [entry], "flavors": [flavor]})

    def virtcap(self) -> tuple[HostCapacity, list[str]]:
        config = parse_config(self.config_text(), "conformance")
        policy = config.hypervisors[0].policy
        dedicated = sorted(self.cpu_dedicated_set or ())
        domains = tuple(
            domain(
                name=f"vm{index}",
                state=d.state,
                vcpus=d.vcpus,
                memory=d.memory_mib * MIB,
                disks=(local_disk(d.disk_gib * GIB),) if d.disk_gib else (),
                pins=tuple(frozenset({dedicated[i % len(dedicated)]}) for i in range(d.vcpus))
                if d.dedicated
                else None,
            )
            for index, d in enumerate(self.domains)
        )
        facts = host(cpus=self.cpus, memory=self.memory_mib * MIB, disk=self.disk_bytes, domains=domains)
        claimed = amounts(
            vcpu=self.claimed.get("VCPU", 0),
            pcpu=self.claimed.get("PCPU", 0),
            memory=self.claimed.get("MEMORY_MB", 0) * MIB,
            disk=self.claimed.get("DISK_GB", 0) * GIB,
        )
        capacity = host_capacity(facts, policy, config.flavor_requests, claimed)
        return capacity, claim_test(capacity.resources, config.flavor_requests[FLAVOR])


def generated_case(rng: random.Random) -> Case:
    cpus = rng.randint(1, 48)
    shared: frozenset[int] | None = None
    dedicated: frozenset[int] | None = None
    reserved_cpus = 0
    layout = rng.random()
    if layout < 0.25 and cpus > 1:
        dedicated = frozenset(rng.sample(range(cpus), rng.randint(1, cpus - 1)))
        rest = sorted(set(range(cpus)) - dedicated)
        if rest and rng.random() < 0.6:
            shared = frozenset(rng.sample(rest, rng.randint(1, len(rest))))
    elif layout < 0.35:
        shared = frozenset(rng.sample(range(cpus), rng.randint(1, cpus)))
    elif rng.random() < 0.5:
        reserved_cpus = rng.randint(0, cpus + 1)  # above the total now and then
    memory_mib = rng.choice((rng.randint(1024, 16384), rng.randint(16384, 262144)))
    disk_bytes = rng.choice((rng.randint(GIB, 100 * GIB), rng.randint(100 * GIB, 4096 * GIB)))
    case = Case(
        cpus=cpus,
        memory_mib=memory_mib,
        disk_bytes=disk_bytes,
        cpu_ratio=rng.choice((1.0, 2.0, 4.0, 16.0, 0.5, 1.5, 3.3, round(rng.uniform(0.1, 20), 3))),
        ram_ratio=rng.choice((1.0, 1.0, 1.1, 1.5, 0.9, 1.33, round(rng.uniform(0.5, 3), 4))),
        disk_ratio=rng.choice((1.0, 1.0, 1.1, 2.0, 0.75, round(rng.uniform(0.5, 3), 4))),
        reserved_host_cpus=reserved_cpus,
        reserved_host_memory_mb=rng.choice((0, 512, 512, 4096, rng.randint(0, memory_mib + 2048))),
        reserved_host_disk_mb=rng.choice(
            (0, 0, 1024, 1536, rng.randint(0, 20480), rng.randint(0, 2 * disk_bytes // MIB))
        ),
        cpu_shared_set=shared,
        cpu_dedicated_set=dedicated,
    )
    capacity = _capacities(case)
    offered = set(capacity)
    # A host is loaded to about `load` of its capacity, now and then well past it (a ratio lowered
    # after the fact); its domains are one to a few tenths of the host each.
    load = rng.choice((0.0, 0.0, 0.2, 0.5, 0.8, 1.2))
    domains: list[Domain] = []
    cpu_classes = sorted(offered & {"VCPU", "PCPU"})
    while cpu_classes and load and len(domains) < 12:
        cpu_class = rng.choice(cpu_classes)
        share = rng.uniform(0.05, 0.3)
        domains.append(
            Domain(
                vcpus=max(1, round(capacity.get(cpu_class, 1) * share)),
                dedicated=cpu_class == "PCPU",
                memory_mib=max(64, round(capacity.get("MEMORY_MB", 0) * share))
                if "MEMORY_MB" in offered
                else 0,
                disk_gib=round(capacity.get("DISK_GB", 0) * share) if "DISK_GB" in offered else 0,
                state=rng.choice(tuple(DomainState)),
            )
        )
        used = sum(d.memory_mib for d in domains) / max(capacity.get("MEMORY_MB", 1), 1)
        if used >= load or rng.random() < 0.1:
            break
    claimed: dict[str, int] = {}
    if rng.random() < 0.3:
        claimed = {name: max(1, capacity.get(name, 1) // 10) for name in offered}
    return replace(case, domains=tuple(domains), claimed=claimed, flavor=_flavor(rng, case, capacity))


def _capacities(case: Case) -> dict[str, int]:
    """The capacity of each class Placement holds an inventory of (it refuses reserved > total)."""
    return {
        name: int((fields["total"] - fields["reserved"]) * fields["allocation_ratio"])
        for name, fields in case.inventory().items()
        if fields["reserved"] <= fields["total"]
    }


def _flavor(rng: random.Random, case: Case, capacity: dict[str, int]) -> dict[str, int]:
    """Mostly a twentieth to a quarter of each class's capacity, up to its total; now and then
    anything up to a little over the total (some fit only because max_unit is the total, some
    exceed it), or a class the host does not offer."""
    totals = case.totals()
    flavor: dict[str, int] = {}
    cpu_classes = sorted(set(capacity) & {"VCPU", "PCPU"}) if rng.random() < 0.9 else ["VCPU", "PCPU"]
    tame = rng.random() < 0.7
    for name in [rng.choice(cpu_classes or ["VCPU"]), "MEMORY_MB", "DISK_GB"]:
        if name in ("MEMORY_MB", "DISK_GB") and rng.random() < 0.15:
            continue
        total = max(totals[name], 1)
        room = max(capacity.get(name, 1), 1)
        if tame or rng.random() < 0.5:
            high = max(1, min(room // 4, total))
            flavor[name] = rng.randint(max(1, min(room // 20, high)), high)
        else:
            flavor[name] = rng.randint(1, total + max(total // 10, 2))
    return flavor


def _question(case: Case, attempts: int) -> dict[str, Any]:
    return {
        "op": "placement",
        "inventory": case.inventory(),
        "usage": case.usage(),
        "request": case.flavor,
        "attempts": attempts,
    }


def compare(oracle: Oracle, cases: list[Case]) -> tuple[list[str], int]:
    """Every difference between virtcap and Placement over the cases, and how many comparisons."""
    answers_of_virtcap = [case.virtcap() for case in cases]
    questions = [
        _question(case, min(capacity.schedulable[FLAVOR] + 2, MOST_ATTEMPTS))
        for case, (capacity, _reasons) in zip(cases, answers_of_virtcap, strict=True)
    ]
    mismatches: list[str] = []
    compared = 0
    for index, (case, (capacity, reasons), answer) in enumerate(
        zip(cases, answers_of_virtcap, oracle.ask(questions), strict=True)
    ):
        found: list[str] = []
        compared += _compare_case(case, capacity, reasons, answer, found)
        mismatches.extend(f"case {index}: {line}; case {case.describe()}" for line in found)
    return mismatches, compared


def _compare_case(
    case: Case, capacity: HostCapacity, reasons: list[str], answer: dict[str, Any], found: list[str]
) -> int:
    compared = 0

    def check(what: str, virtcap: object, placement: object) -> None:
        nonlocal compared
        compared += 1
        if virtcap != placement:
            found.append(f"{what}: virtcap {virtcap}, Placement {placement}")

    if answer["load_error"]:
        found.append(f"the oracle could not write the existing allocations: {answer['load_error']}")
        return 1
    totals = case.totals()
    for resource, name in PLACEMENT_CLASS.items():
        unit = UNIT[resource]
        own = capacity.resources[resource]
        refused = bool(getattr(own, "refused", None))
        status = answer["inventory_status"].get(name)
        if status is None:  # Nova reports no inventory of a class whose total is 0
            check(f"{name} limit of a class Nova does not report (total 0)", own.limit or 0, 0)
            continue
        check(f"{name} inventory refused", refused, status == 400)
        if status != 201:
            check(f"{name} limit of a refused inventory", own.limit or 0, 0)
            continue
        check(f"{name} total", own.total, totals[name] * unit)
        check(f"{name} reserved", own.reserved, case.inventory()[name]["reserved"] * unit)
        check(f"{name} limit", own.limit, answer["capacity"][name] * unit)
        check(f"{name} used", own.used, answer["usages"].get(name, 0) * unit)
        check(f"{name} free", own.free, (answer["capacity"][name] - answer["usages"].get(name, 0)) * unit)
        max_unit = getattr(own, "max_unit", "absent")
        check(f"{name} max_unit", max_unit, totals[name] * unit)
    accepted = answer["accepted"]
    first = accepted >= 1
    check("the claim fits", not reasons, first)
    check("Placement's candidates and its first allocation agree", answer["candidate"], first)
    count = capacity.schedulable[FLAVOR]
    refusal = answer["refusal"]
    if refusal is None:  # every attempt accepted: at least that many fit
        compared += 1
        if count < accepted:
            found.append(f"how many fit: virtcap {count}, Placement at least {accepted}")
    else:
        check("how many fit", count, accepted)
    if not first and refusal["kind"] in WORDS:
        # Issue 13, difference 10: a refusal says why, as Placement does: capacity or max_unit.
        resource = next(r for r, name in PLACEMENT_CLASS.items() if name == refusal["class"])
        word = WORDS[refusal["kind"]]
        compared += 1
        if not any(resource.label in reason and word in reason for reason in reasons):
            found.append(
                f"the refusal: Placement refuses {refusal['class']} ({refusal['kind']}), "
                f"virtcap says {reasons} (expected a reason about {resource.label} with {word!r})"
            )
    return compared


WORDS = {"capacity": "Free", "constraints": "max_unit"}
"""What virtcap's refusal of a class says, for each reason Placement gives (issue 13, 10)."""


def generated_cases(name: str, count: int) -> list[Case]:
    rng = generator(name)
    return [generated_case(rng) for _ in range(count)]


def test_generated_hosts_have_placements_capacity_usage_and_fit(oracle: Oracle) -> None:
    cases = generated_cases("hosts", 80)
    mismatches, compared = compare(oracle, cases)
    agree("comparisons", mismatches, compared)


# The issue's own cases, one per difference it found in the fit: each guards its fix.

ISSUE_CASES = {
    "difference 1: a request above total - reserved fits up to max_unit = total": Case(
        cpus=8, memory_mib=65536, disk_bytes=1000 * GIB, reserved_host_cpus=2,
        flavor={"VCPU": 8, "MEMORY_MB": 1024},
    ),
    "difference 2: a claim above max_unit is refused": Case(
        cpus=8, memory_mib=65536, disk_bytes=1000 * GIB, flavor={"VCPU": 9, "MEMORY_MB": 1024}
    ),
    "difference 3: capacity is truncated in MiB": Case(
        cpus=8, memory_mib=16384, disk_bytes=1000 * GIB, ram_ratio=1.1, flavor={"VCPU": 1, "MEMORY_MB": 4096}
    ),
    "difference 3: capacity is truncated in GiB, the total floored to GiB": Case(
        cpus=8, memory_mib=16384, disk_bytes=100 * GIB + 5 * MIB, disk_ratio=1.1,
        flavor={"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 10},
    ),
    "difference 4: reserved disk is rounded up to whole GiB": Case(
        cpus=8, memory_mib=16384, disk_bytes=20 * GIB, reserved_host_disk_mb=1536,
        flavor={"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 9},
    ),
    "difference 9: reserved above total: Placement refuses the inventory": Case(
        cpus=4, memory_mib=16384, disk_bytes=10 * GIB, reserved_host_cpus=6,
        flavor={"VCPU": 1, "MEMORY_MB": 512},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", ISSUE_CASES.values(), ids=ISSUE_CASES.keys())
def test_issue_13_cases(oracle: Oracle, case: Case) -> None:
    mismatches, compared = compare(oracle, [case])
    agree("comparisons", mismatches, compared)
