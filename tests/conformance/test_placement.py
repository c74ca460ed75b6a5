"""Capacity, usage and fit: virtcap's model against a real Placement, on generated hosts.

Each case is a hypervisor (CPUs, memory, the storage for instance disks), its configuration
(allocation ratios, reserved amounts, CPU sets), the domains it runs, the claims it holds and one
flavor. virtcap answers with `host_capacity` and `claim_test`; the oracle gives Placement the
inventory Nova reports for that host (docs/accounting.md's table, in Placement's units), writes the
domains and claims as allocations, and then allocates the flavor in a row until Placement
refuses. Compared, per resource class: whether the inventory is accepted, the limit (Placement's
capacity), used, free; and for the flavor: the claim answer (the first allocation) and how many
fit (how many allocations Placement accepts in a row).

Some cases also declare CUSTOM_* inventories (the configuration's `inventories`, with total,
reserved, min_unit, max_unit, step_size, allocation_ratio; a field left out takes each side's
default), held by Nova guests through `resources[suffix]:CUSTOM_*` extra specs (the allocation
Placement is given is the one Nova's scheduler asks for, from the oracle), by the claim, and
requested by the flavor through the configuration's `extra_specs` (now and then partly in the
granular group `resources1:`, and then Placement's allocation candidates for the groups, as
Nova's scheduler asks, must find the host exactly when virtcap says the flavor fits), now and
then in amounts that break min_unit, step_size or max_unit, or of a class the host has no
inventory of. For those classes the inventory as Placement holds it is compared too (total,
reserved, min_unit, max_unit, step_size, allocation_ratio), a requested class the host has none of
must have no inventory in virtcap either, and where Placement refuses the first allocation,
virtcap must refuse the class Placement names for the same kind of reason: capacity, a constraint
(min_unit, max_unit, step_size) or no inventory (none declared, or one Placement refused). A
second generated test puts custom classes in every case, on roomy hosts where they, not the
standard classes, mostly decide what fits.

A flavor with a granular group fits only where Placement's candidates for its groups find the
host: Placement holds each group to min_unit, max_unit and step_size on its own, and so does
virtcap's count, while a claim is one allocation, held to them as a whole.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pytest

from tests.conformance.upstream import GIB, MIB, PLACEMENT_CLASS, UNIT, Oracle, agree, generator
from tests.support.factories import domain, host, local_disk
from virtcap.config import parse_config
from virtcap.model.capacity import HostCapacity, ResourceCapacity, amounts, claim_test, host_capacity
from virtcap.model.facts import DomainState, NovaFlavor, NovaInstance
from virtcap.model.resources import Resource
from virtcap.units import format_cpu_set

MOST_ATTEMPTS = 40
"""A flavor is allocated at most this many times in a row: "at least 40 fit" is then the answer."""

FLAVOR = "f"

CUSTOM_NAMES = ("CUSTOM_FPGA", "CUSTOM_LICENCE_WIN", "CUSTOM_NVME_GB", "CUSTOM_GPU_SLICE")
"""The custom classes generated cases draw from: one or two declared, now and then another one
requested that the host has no inventory of."""


@dataclass(frozen=True)
class CustomInventory:
    """A CUSTOM_* inventory as the configuration declares it, in whole units of the class. A field
    left None is left out of the configuration (virtcap's default) and out of what Placement is
    given (Placement's default), as Nova's provider configuration leaves it to Placement."""

    total: int
    reserved: int | None = None
    min_unit: int | None = None
    max_unit: int | None = None
    step_size: int | None = None
    allocation_ratio: float | None = None

    def fields(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class Domain:
    vcpus: int
    dedicated: bool
    memory_mib: int
    disk_gib: int
    state: DomainState
    extra_specs: dict[str, str] = field(default_factory=dict)
    """`resources[suffix]:CUSTOM_*` extra specs: the domain is then a Nova guest of a flavor with
    these (and `hw:cpu_policy=dedicated` when it is dedicated); a plain domain when empty."""

    def nova_specs(self) -> dict[str, str]:
        return ({"hw:cpu_policy": "dedicated"} if self.dedicated else {}) | self.extra_specs

    def nova_question(self) -> dict[str, Any]:
        """What Nova's scheduler asks Placement for, for this guest's flavor."""
        return {
            "op": "flavor",
            "vcpus": self.vcpus,
            "memory_mb": self.memory_mib,
            "root_gb": self.disk_gib,
            "ephemeral_gb": 0,
            "swap": 0,
            "extra_specs": self.nova_specs(),
        }


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
    custom: dict[str, CustomInventory] = field(default_factory=dict)
    """The hypervisor's declared CUSTOM_* inventories (`inventories`)."""
    granular: dict[str, int] = field(default_factory=dict)
    """Of a custom class the flavor requests, the part it asks for in the granular group
    `resources1:` (the rest in the unsuffixed `resources:`)."""

    def describe(self) -> str:
        fields = asdict(self)
        for key in ("cpu_shared_set", "cpu_dedicated_set"):
            if fields[key] is not None:
                fields[key] = format_cpu_set(fields[key])
        fields["domains"] = [
            {**asdict(d), "state": d.state.value} for d in self.domains
        ]  # fmt: skip
        return json.dumps(fields, separators=(",", ":"))

    # Nova's inventory of this host, per docs/accounting.md (test_inventory.py checks it against
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
        standard = {
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
        return standard | {name: inventory.fields() for name, inventory in self.custom.items()}

    def usage(self, nova: Mapping[int, dict[str, int]] | None = None) -> list[dict[str, int]]:
        """The existing allocations: each domain's (a Nova guest's as Nova's scheduler makes it:
        `nova`, by domain index), then the claim's."""
        allocations = [
            (nova or {})[index]
            if d.extra_specs
            else {
                "PCPU" if d.dedicated else "VCPU": d.vcpus,
                "MEMORY_MB": d.memory_mib,
                "DISK_GB": d.disk_gib,
            }
            for index, d in enumerate(self.domains)
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
        if self.custom:
            entry["inventories"] = {name: inventory.fields() for name, inventory in self.custom.items()}
        flavor: dict[str, Any] = {
            "name": FLAVOR,
            "vcpu": self.flavor.get("VCPU", 0),
            "pcpu": self.flavor.get("PCPU", 0),
            "memory": f"{self.flavor.get('MEMORY_MB', 0)}MiB",
            "disk": f"{self.flavor.get('DISK_GB', 0)}GiB",
        }
        specs = self.flavor_specs()
        if specs:  # Nova's way, the only one with custom classes: dedicated CPUs by the CPU policy
            assert not (flavor["vcpu"] and flavor["pcpu"]), "one CPU class per flavor with extra specs"
            if flavor["pcpu"]:
                flavor["vcpu"], flavor["pcpu"] = flavor["pcpu"], 0
                specs["hw:cpu_policy"] = "dedicated"
            flavor["extra_specs"] = specs
        return json.dumps({"hypervisors": [entry], "flavors": [flavor]})

    def request_groups(self) -> dict[str, dict[str, int]]:
        """The flavor's request groups as Nova's scheduler asks for them: "" the unsuffixed one."""
        unsuffixed = {name: amount - self.granular.get(name, 0) for name, amount in self.flavor.items()}
        granular = {name: amount for name, amount in self.granular.items() if amount}
        return {"": unsuffixed, "1": granular} if granular else {"": unsuffixed}

    def flavor_specs(self) -> dict[str, str]:
        """The `resources[1]:CUSTOM_*` extra specs of the flavor's custom classes."""
        return {
            f"resources{suffix}:{name}": str(amount)
            for suffix, group in self.request_groups().items()
            for name, amount in group.items()
            if name.startswith("CUSTOM_") and amount
        }

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
                nova=NovaInstance(
                    NovaFlavor(f"flavor{index}", d.vcpus, d.memory_mib, d.disk_gib, 0, 0, d.nova_specs())
                )
                if d.extra_specs
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
        ) | _custom_amounts(self.claimed)
        capacity = host_capacity(facts, policy, config.flavor_demands, claimed)
        return capacity, claim_test(capacity.resources, config.flavor_demands[FLAVOR].request)


def _custom_amounts(placement: Mapping[str, int]) -> dict[Resource, int]:
    """The CUSTOM_* amounts of a claim, keyed as virtcap keys them: plain counts."""
    return {
        Resource.custom_class(name): amount
        for name, amount in placement.items()
        if name.startswith("CUSTOM_")
    }


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
    """The capacity of each class with reserved at most total: the classes domains and claims may
    hold (Placement refuses most inventories with reserved above total, and takes the others with
    a capacity of 0)."""
    return {
        name: int((fields["total"] - fields.get("reserved", 0)) * fields.get("allocation_ratio", 1.0))
        for name, fields in case.inventory().items()
        if fields.get("reserved", 0) <= fields["total"]
    }


def with_custom_classes(rng: random.Random, case: Case, share: float = 0.5) -> Case:
    """A `share` of the cases with one or two CUSTOM_* inventories, held by some of the domains
    (made Nova guests with `resources[suffix]:` extra specs) and now and then by the claim, and
    mostly requested by the flavor; the others as they are. Drawn from their own generator in
    generated_cases, so that the standard part of every case is the same with or without them."""
    if rng.random() >= share:
        return case
    names = rng.sample(CUSTOM_NAMES, rng.randint(1, 2))
    case = replace(case, custom={name: _custom_inventory(rng) for name in names})
    capacity = {name: amount for name, amount in _capacities(case).items() if name in case.custom}
    # Existing allocations only of classes Placement holds an inventory of: it could hold no other.
    domains = tuple(
        replace(d, extra_specs=_guest_specs(rng, capacity)) if capacity and rng.random() < 0.5 else d
        for d in case.domains
    )
    claimed = dict(case.claimed)
    if capacity and rng.random() < 0.35:
        for name in rng.sample(sorted(capacity), rng.randint(1, len(capacity))):
            claimed[name] = rng.randint(1, max(1, capacity[name] // 8))
    flavor = dict(case.flavor)
    for name, inventory in case.custom.items():
        if rng.random() < 0.75:
            flavor[name] = _custom_request(rng, inventory, capacity.get(name, 0))
    if rng.random() < 0.1:  # a class the host has no inventory of
        flavor[rng.choice([n for n in CUSTOM_NAMES if n not in case.custom])] = rng.randint(1, 4)
    # Now and then a class asked for partly in a granular group.
    granular = {
        name: rng.randint(1, amount - 1)
        for name, amount in flavor.items()
        if name.startswith("CUSTOM_") and amount > 1 and rng.random() < 0.25
    }
    return replace(case, domains=domains, claimed=claimed, flavor=flavor, granular=granular)


def _custom_inventory(rng: random.Random) -> CustomInventory:
    """Any inventory Placement and virtcap's configuration both take, and now and then reserved
    above the total, which Placement refuses unless int((total - reserved) x allocation_ratio) is
    still 0. Placement also takes max_unit below min_unit (no allocation then fits), which
    virtcap's configuration refuses: never generated. Some take no allocation at all (min_unit to
    max_unit holds no multiple of step_size), as Placement allows. A field left None is left out
    on both sides: each takes its default."""
    total = rng.choice((rng.randint(1, 8), rng.randint(1, 64), rng.randint(100, 5000)))
    draw = rng.random()
    reserved = (
        None if draw < 0.35
        else 0 if draw < 0.45
        else rng.randint(0, total) if draw < 0.75
        else total if draw < 0.8
        else rng.randint(0, max(total // 10, 1)) if draw < 0.9
        else total + rng.randint(1, 3)
    )  # fmt: skip
    min_unit = rng.choice((None, None, 1, rng.randint(1, min(total, 4)), rng.randint(1, total + 2)))
    step_size = rng.choice((None, None, 1, 2, rng.randint(1, 4), rng.choice((3, 5, 8))))
    low = min_unit or 1
    max_unit = rng.choice(
        (None, None, total, total, low, rng.randint(low, max(low, total)), total + rng.randint(1, 8))
    )
    ratio = rng.choice((None, 1.0, 1.0, 2.0, 0.5, 1.5, 16.0, round(rng.uniform(0.1, 4), 3)))
    return CustomInventory(total, reserved, min_unit, max_unit and max(max_unit, low), step_size, ratio)


def _guest_specs(rng: random.Random, capacity: dict[str, int]) -> dict[str, str]:
    """A Nova guest's extra specs for one or both classes: in the unsuffixed group, in a granular
    group, or split between the two (which add up on one provider)."""
    specs: dict[str, str] = {}
    for name in rng.sample(sorted(capacity), rng.randint(1, len(capacity))):
        amount = rng.randint(1, max(1, capacity[name] // 4))
        layout = rng.random()
        if layout < 0.4:
            specs[f"resources:{name}"] = str(amount)
        elif layout < 0.7:
            specs[f"resources{rng.choice(('1', '2', '_accel'))}:{name}"] = str(amount)
        else:
            first = rng.randint(1, amount)
            specs[f"resources:{name}"] = str(first)
            specs[f"resources{rng.choice(('1', '_accel'))}:{name}"] = str(amount - first + 1)
    return specs


def _custom_request(rng: random.Random, inventory: CustomInventory, capacity: int) -> int:
    """Mostly an amount Placement's constraints allow, a twentieth to a quarter of the capacity;
    now and then one below min_unit, off step_size, above max_unit, or anything."""
    min_unit, step = inventory.min_unit or 1, inventory.step_size or 1
    # Without a declared max_unit, "above max_unit" is above the total: Placement's default takes it.
    max_unit = inventory.max_unit if inventory.max_unit is not None else inventory.total
    lowest = -(-min_unit // step) * step
    kind = rng.choice(("allowed",) * 8 + ("below min_unit", "off step", "above max_unit", "any"))
    if kind == "allowed" and lowest <= max_unit:
        high = min(max_unit, max(capacity // 4, lowest))
        low = min(max(capacity // 20, lowest), high)
        return rng.randint(min(-(-low // step), high // step), high // step) * step
    if kind == "below min_unit" and min_unit > 1:
        return rng.randint(1, min_unit - 1)
    if kind == "off step" and step > 1:
        return rng.randint(0, max_unit // step) * step + rng.randint(1, step - 1)
    if kind == "above max_unit":
        return max_unit + rng.choice((1, step, rng.randint(1, 10)))
    return rng.randint(1, max_unit + 2 * step)


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


def _question(case: Case, attempts: int, nova: Mapping[int, dict[str, int]]) -> dict[str, Any]:
    question = {
        "op": "placement",
        "inventory": case.inventory(),
        "usage": case.usage(nova),
        "request": case.flavor,
        "attempts": attempts,
    }
    return question | {"request_groups": case.request_groups()} if case.granular else question


def _nova_allocations(oracle: Oracle, cases: list[Case]) -> list[dict[int, dict[str, int]]]:
    """Per case, what Nova's scheduler allocates each of its Nova guests, by domain index."""
    guests = [
        (c, d) for c, case in enumerate(cases) for d, domain in enumerate(case.domains) if domain.extra_specs
    ]
    answers = oracle.ask([cases[c].domains[d].nova_question() for c, d in guests])
    allocations: list[dict[int, dict[str, int]]] = [{} for _ in cases]
    for (c, d), answer in zip(guests, answers, strict=True):
        assert "error" not in answer, (
            f"Nova refuses domain {d} of case {cases[c].describe()}: {answer['error']}"
        )
        allocations[c][d] = answer["resources"]
    return allocations


def compare(oracle: Oracle, cases: list[Case]) -> tuple[list[str], int]:
    """Every difference between virtcap and Placement over the cases, and how many comparisons."""
    answers_of_virtcap = [case.virtcap() for case in cases]
    nova = _nova_allocations(oracle, cases)
    questions = [
        _question(case, min(capacity.schedulable[FLAVOR] + 2, MOST_ATTEMPTS), guests)
        for case, (capacity, _reasons), guests in zip(cases, answers_of_virtcap, nova, strict=True)
    ]
    mismatches: list[str] = []
    compared = 0
    for index, (case, (capacity, reasons), answer) in enumerate(
        zip(cases, answers_of_virtcap, oracle.ask(questions), strict=True)
    ):
        comparison = Comparison()
        _compare_case(case, capacity, reasons, answer, comparison)
        compared += comparison.compared
        mismatches.extend(f"case {index}: {line}; case {case.describe()}" for line in comparison.found)
    return mismatches, compared


@dataclass
class Comparison:
    """The comparisons of one case: how many, and the differences."""

    compared: int = 0
    found: list[str] = field(default_factory=list)

    def check(self, what: str, virtcap: object, placement: object) -> None:
        self.differ(what, virtcap != placement, f"virtcap {virtcap}, Placement {placement}")

    def differ(self, what: str, differs: bool, detail: str) -> None:
        self.compared += 1
        if differs:
            self.found.append(f"{what}: {detail}")


def _compare_case(
    case: Case, capacity: HostCapacity, reasons: list[str], answer: dict[str, Any], out: Comparison
) -> None:
    if answer["load_error"]:
        out.differ("the oracle could not write the existing allocations", True, answer["load_error"])
        return
    _compare_standard(case, capacity, answer, out)
    _compare_custom(case, capacity, answer, out)
    accepted = answer["accepted"]
    first = accepted >= 1
    out.check("the claim fits", not reasons, first)
    out.check("Placement's candidates and its first allocation agree", answer["candidate"], first)
    count = capacity.schedulable[FLAVOR]
    if "grouped_candidate" in answer:  # the flavor has a granular group
        # Nova's scheduler asks Placement for each group: the flavor fits where it finds the host
        out.check(
            "the scheduler finds the host for the flavor's groups", count > 0, answer["grouped_candidate"]
        )
    refusal = answer["refusal"]
    if answer.get("grouped_candidate") is False:
        out.check("how many fit", count, 0)
    elif refusal is None:  # every attempt accepted: at least that many fit
        out.differ("how many fit", count < accepted, f"virtcap {count}, Placement at least {accepted}")
    else:
        out.check("how many fit", count, accepted)
    if not first:
        _compare_refusal(refusal, capacity, reasons, out)


def _compare_standard(case: Case, capacity: HostCapacity, answer: dict[str, Any], out: Comparison) -> None:
    totals = case.totals()
    for resource, name in PLACEMENT_CLASS.items():
        unit = UNIT[resource]
        own = capacity.resources[resource]
        refused = bool(getattr(own, "refused", None))
        status = answer["inventory_status"].get(name)
        if status is None:  # Nova reports no inventory of a class whose total is 0
            out.check(f"{name} limit of a class Nova does not report (total 0)", own.limit or 0, 0)
            continue
        out.check(f"{name} inventory refused", refused, status == 400)
        if status != 201:
            out.check(f"{name} limit of a refused inventory", own.limit or 0, 0)
            continue
        out.check(f"{name} total", own.total, totals[name] * unit)
        out.check(f"{name} reserved", own.reserved, case.inventory()[name]["reserved"] * unit)
        out.check(f"{name} limit", own.limit, answer["capacity"][name] * unit)
        out.check(f"{name} used", own.used, answer["usages"].get(name, 0) * unit)
        free = (answer["capacity"][name] - answer["usages"].get(name, 0)) * unit
        out.check(f"{name} free", own.free, free)
        out.check(f"{name} max_unit", getattr(own, "max_unit", "absent"), totals[name] * unit)


def _compare_custom(case: Case, capacity: HostCapacity, answer: dict[str, Any], out: Comparison) -> None:
    """The declared custom classes against the inventories Placement holds: a custom class is a
    plain count, virtcap's amounts are Placement's."""
    for name in sorted(case.custom):
        own = capacity.resources.get(Resource.custom_class(name))
        status = answer["inventory_status"].get(name)
        if own is None:
            out.check(f"{name} is declared, yet virtcap has no such class; Placement's status", None, status)
            continue
        out.check(f"{name} inventory refused", own.refused is not None, status == 400)
        if status != 201:
            out.check(f"{name} limit of a refused inventory", own.limit, 0)
            continue
        held = answer["inventories"][name]
        for key in ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio"):
            out.check(f"{name} {key}", getattr(own, key), held[key])
        out.check(f"{name} limit", own.limit, answer["capacity"][name])
        out.check(f"{name} used", own.used, answer["usages"].get(name, 0))
        out.check(f"{name} free", own.free, answer["capacity"][name] - answer["usages"].get(name, 0))
    for name in sorted(set(case.flavor) - set(case.custom)):
        if name.startswith("CUSTOM_"):  # requested, of no inventory on the host
            out.check(f"{name} has an inventory", Resource.custom_class(name) in capacity.resources, False)


def _compare_refusal(
    refusal: dict[str, Any], capacity: HostCapacity, reasons: list[str], out: Comparison
) -> None:
    """Placement refused the first allocation: virtcap must refuse the class Placement names for
    the same kind of reason."""
    kind = refusal["kind"]
    if refusal["class"] is None or kind is None:
        out.differ("Placement's refusal", True, f"names no class or no reason the oracle knows: {refusal}")
        return
    for name in refusal["class"].split(", "):  # "no inventory" of any requested class names them all
        if name.startswith("CUSTOM_"):
            resource = Resource.custom_class(name)
            kinds = _kinds(resource, capacity.resources.get(resource), reasons)
            out.check(f"the refusal of {name} ({reasons})", sorted(kinds), [kind])
        elif kind in WORDS:
            # Issue 13, difference 10: a refusal says why, as Placement does: capacity or max_unit.
            standard = next(r for r, placement in PLACEMENT_CLASS.items() if placement == name)
            word = WORDS[kind]
            out.differ(
                "the refusal",
                not any(standard.label in reason and word in reason for reason in reasons),
                f"Placement refuses {name} ({kind}), virtcap says {reasons} "
                f"(expected a reason about {standard.label} with {word!r})",
            )


WORDS = {"capacity": "Free", "constraints": "max_unit"}
"""What virtcap's refusal of a class says, for each reason Placement gives (issue 13, 10)."""

CONSTRAINTS = ("max_unit", "min_unit", "step_size")


def _kinds(resource: Resource, own: ResourceCapacity | None, reasons: list[str]) -> set[str]:
    """The kind of each of virtcap's reasons about one class, in the oracle's terms (REFUSALS):
    its free capacity, a constraint (min_unit, max_unit, step_size), or no inventory (none
    declared, or one Placement refuses: virtcap then gives the reason it refuses it)."""
    kinds = set()
    refused = own.refused if own is not None else None
    for reason in reasons:
        if reason.startswith(f"Free {resource.label} "):
            kinds.add("capacity")
        elif reason.startswith(f"Requested {resource.label} "):
            if "no inventory of" in reason or (refused is not None and reason.endswith(f": {refused}")):
                kinds.add("no inventory")
            elif any(f" {word} " in reason for word in CONSTRAINTS):
                kinds.add("constraints")
            else:
                kinds.add(f"unclassified: {reason}")
    return kinds


def generated_cases(name: str, count: int) -> list[Case]:
    rng, custom = generator(name), generator(f"{name}:custom")
    return [with_custom_classes(custom, generated_case(rng)) for _ in range(count)]


STATES = tuple(DomainState)


def generated_custom_case(rng: random.Random) -> Case:
    """A roomy host with a few small domains and a flavor of a few vCPUs and 1 GiB besides its
    custom classes: what fits is then mostly up to the custom classes, and seldom 40 or more."""
    domains = tuple(
        Domain(rng.randint(1, 4), False, rng.randint(512, 4096), rng.randint(0, 40), rng.choice(STATES))
        for _ in range(rng.randint(0, 6))
    )
    case = Case(
        cpus=rng.randint(16, 32),
        memory_mib=rng.randint(65536, 262144),
        disk_bytes=rng.randint(500, 4000) * GIB,
        domains=domains,
        flavor={"VCPU": rng.randint(2, 8), "MEMORY_MB": 1024},
    )
    return with_custom_classes(rng, case, share=1.0)


def test_generated_hosts_have_placements_capacity_usage_and_fit(oracle: Oracle) -> None:
    cases = generated_cases("hosts", 80)
    mismatches, compared = compare(oracle, cases)
    agree("comparisons", mismatches, compared)


def test_generated_custom_classes_have_placements_capacity_usage_and_fit(oracle: Oracle) -> None:
    """Every case with custom classes, on hosts where the standard classes seldom decide."""
    rng = generator("custom-hosts")
    cases = [generated_custom_case(rng) for _ in range(25)]
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


# Custom classes: one case per rule of Placement's.

SMALL_FLAVOR = {"VCPU": 1, "MEMORY_MB": 512}


def _small_host(**fields: Any) -> Case:
    return Case(cpus=8, memory_mib=16384, disk_bytes=100 * GIB, **fields)


def _fpga_guest(specs: dict[str, str]) -> Domain:
    return Domain(1, False, 1024, 10, DomainState.RUNNING, specs)


CUSTOM_CASES = {
    "unsuffixed and granular groups add up; reserved and max_unit below total": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(8, reserved=1, max_unit=4, step_size=1, allocation_ratio=1.0)},
        domains=(_fpga_guest({"resources:CUSTOM_FPGA": "2", "resources1:CUSTOM_FPGA": "1"}),),
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 2},
    ),
    "a request above max_unit is refused": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(8, max_unit=2)}, flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 3}
    ),
    "a request below min_unit is refused": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(8, min_unit=2, max_unit=8)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 1},
    ),
    "a request off step_size is refused": _small_host(
        custom={"CUSTOM_NVME_GB": CustomInventory(1600, step_size=100, max_unit=800)},
        flavor=SMALL_FLAVOR | {"CUSTOM_NVME_GB": 250},
    ),
    "on step_size, several fit": _small_host(
        custom={"CUSTOM_NVME_GB": CustomInventory(1600, step_size=100, max_unit=800)},
        flavor=SMALL_FLAVOR | {"CUSTOM_NVME_GB": 300},
    ),
    "min_unit above the capacity: refused for capacity": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(4, reserved=1, min_unit=4, max_unit=8)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 4},
    ),
    "a fractional allocation ratio truncates the capacity": _small_host(
        custom={"CUSTOM_LICENCE_WIN": CustomInventory(10, reserved=3, max_unit=10, allocation_ratio=1.5)},
        flavor=SMALL_FLAVOR | {"CUSTOM_LICENCE_WIN": 3},
    ),
    "reserved equal to the total: accepted, capacity 0": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(2, reserved=2, max_unit=2)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 1},
    ),
    "reserved above total, the ratio 1: refused": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(2, reserved=3, max_unit=2)},
        flavor={"VCPU": 4, "MEMORY_MB": 512},
    ),
    "a class the host has no inventory of": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(2, max_unit=2)}, flavor=SMALL_FLAVOR | {"CUSTOM_GPU_SLICE": 1}
    ),
    "a claim holds custom units": _small_host(
        custom={"CUSTOM_LICENCE_WIN": CustomInventory(4, max_unit=4)},
        claimed={"CUSTOM_LICENCE_WIN": 3},
        flavor=SMALL_FLAVOR | {"CUSTOM_LICENCE_WIN": 1},
    ),
    "guests over a capacity lowered after the fact: free below 0": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(4, reserved=1, max_unit=4, allocation_ratio=0.5)},
        domains=(
            _fpga_guest({"resources:CUSTOM_FPGA": "2"}),
            _fpga_guest({"resources_accel:CUSTOM_FPGA": "2"}),
        ),
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 1},
    ),
    "a flavor's granular group adds to its unsuffixed one": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(16, max_unit=8, step_size=2)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 6},
        granular={"CUSTOM_FPGA": 2},
    ),
    "defaults left out on both sides, max_unit declared": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(4, max_unit=4)}, flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 2}
    ),
    "max_unit left out: Placement's default, above the total": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(4, allocation_ratio=2.0)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 6},
    ),
    "reserved above total, a request of it refused as no inventory": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(2, reserved=3, max_unit=2)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 1},
    ),
    "reserved above total, yet capacity int(-0.5) = 0: accepted": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(4, reserved=5, max_unit=4, allocation_ratio=0.5)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 1},
    ),
    "reserved VCPU above total, yet capacity int(-0.5) = 0: accepted": Case(
        cpus=4,
        memory_mib=16384,
        disk_bytes=10 * GIB,
        reserved_host_cpus=5,
        cpu_ratio=0.5,
        flavor={"VCPU": 1, "MEMORY_MB": 512},
    ),
    "granular groups held to step_size each: 1 + 1 on a step of 2 finds no candidate": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(8, max_unit=8, step_size=2)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 2},
        granular={"CUSTOM_FPGA": 1},
    ),
    "granular groups held to min_unit each: 2 + 1 under a min_unit of 2 finds no candidate": _small_host(
        custom={"CUSTOM_FPGA": CustomInventory(8, min_unit=2, max_unit=8)},
        flavor=SMALL_FLAVOR | {"CUSTOM_FPGA": 3},
        granular={"CUSTOM_FPGA": 1},
    ),
}


@pytest.mark.parametrize("case", CUSTOM_CASES.values(), ids=CUSTOM_CASES.keys())
def test_custom_class_cases(oracle: Oracle, case: Case) -> None:
    mismatches, compared = compare(oracle, [case])
    agree("comparisons", mismatches, compared)
