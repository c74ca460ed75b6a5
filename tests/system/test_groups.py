"""Host groups: membership from the configuration (availability zones, aggregates, racks), group
policies between `defaults` and a hypervisor's own keys, `hypervisor_group_info` and the report,
and evacuations that keep a domain within its host's availability zone."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from string import Template

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support.factories import GIB, MIB, host
from tests.support.fleets import (
    DEFAULTS,
    DOMAINS,
    FLAT,
    LARGER,
    MULTIPLIERS,
    fleet_facts,
    guest,
    reference_tolerated,
)
from tests.support.serving import parse_samples, series, value
from virtcap.claims.database import ClaimDatabase
from virtcap.claims.ledger import ANY_HYPERVISOR, ClaimLedger, ClaimRejectedError
from virtcap.config import ClaimSettings, ConfigError, Hypervisor, parse_config
from virtcap.contract.placements import PlacementBody
from virtcap.demo.fleetgen import RUNNING, DomainSpec, HostSpec, write_fleet
from virtcap.exposition.families import render, views
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.claim_records import ClaimRequest
from virtcap.fleet.scheduling import FleetEntry
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import LocalSimulation, SimulatedHost, scheduler_host, scheduling_key
from virtcap.model.facts import DomainFacts
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    AVAILABILITY_ZONE,
    PLACEMENT,
    SPREAD,
    HostState,
    Multipliers,
    evacuation,
    fleet_tolerance,
    fleet_tolerance_update,
    host_state,
    schedule,
)
from virtcap.model.scheduler.evacuations import reference_evacuation
from virtcap.service.dryrun import dry_run
from virtcap.service.oneshot import audit_fleet_once

# --- configuration ---------------------------------------------------------------------------------

POLICIES = Template("""
defaults:
  allocation_ratios: {vcpu: 16.0}
  groups: {availability_zone: az-1, rack: r1}
hypervisors:
  - {name: h1, uri: "$h1", groups: {aggregate: [gpu, ssd]}}
  - {name: h2, uri: "$h2", groups: {aggregate: ssd}}
  - name: h3
    uri: "$h3"
    groups: {availability_zone: az-2, aggregate: gpu, rack: r2}
    allocation_ratios: {vcpu: 5.0}
  - {name: h4, uri: "$h4", groups: {availability_zone: [], rack: [r2]}}
host_groups:
  - {kind: aggregate, name: gpu, allocation_ratios: {vcpu: 2.0}, reserved: {memory: 2GiB}}
  - kind: aggregate
    name: ssd
    allocation_ratios: {vcpu: 3.0, memory: 1.5}
    reserved: {memory: 1GiB, disk: 10GiB}
  - {kind: rack, name: r2, allocation_ratios: {vcpu: 8.0}}
  - {kind: rack, name: r9, allocation_ratios: {vcpu: 1.0}}
""")
"""Four hypervisors by their URIs; r9 has no member (a shard of the fleet may have none of a
group's hosts): its policy applies to nobody."""
ANY_URI = {name: "test:///default" for name in ("h1", "h2", "h3", "h4")}


def test_a_hypervisors_kinds_replace_those_of_defaults_kind_by_kind() -> None:
    config = parse_config(POLICIES.substitute(ANY_URI), "fleet.yaml")
    groups = {h.name: h.groups for h in config.hypervisors}
    assert groups == {
        "h1": (("aggregate", "gpu"), ("aggregate", "ssd"), ("availability_zone", "az-1"), ("rack", "r1")),
        "h2": (("aggregate", "ssd"), ("availability_zone", "az-1"), ("rack", "r1")),
        "h3": (("aggregate", "gpu"), ("availability_zone", "az-2"), ("rack", "r2")),
        # `availability_zone: []` leaves the zone of defaults out: Nova's default zone
        "h4": (("rack", "r2"),),
    }
    zones = {h.name: h.availability_zone for h in config.hypervisors}
    assert zones == {"h1": "az-1", "h2": "az-1", "h3": "az-2", "h4": None}


def test_group_policies_come_between_defaults_and_the_hypervisors_own_keys() -> None:
    by_name = {h.name: h.policy for h in parse_config(POLICIES.substitute(ANY_URI), "fleet.yaml").hypervisors}
    # h1 is in gpu (2.0) and ssd (3.0): the smallest ratio, as Nova's aggregate filters took;
    # reserved memory 2 GiB (gpu) against 1 GiB (ssd): the largest
    assert by_name["h1"].allocation_ratios[Resource.VCPU] == 2.0
    assert by_name["h1"].allocation_ratios[Resource.MEMORY] == 1.5  # ssd alone sets it
    assert by_name["h1"].reserved[Resource.MEMORY] == 2 * GIB
    assert by_name["h1"].reserved[Resource.DISK] == 10 * GIB
    # h2: ssd's policy over defaults' 16.0
    assert by_name["h2"].allocation_ratios[Resource.VCPU] == 3.0
    assert by_name["h2"].reserved[Resource.MEMORY] == 1 * GIB
    # h3: its own ratio wins over its groups' (gpu 2.0, r2 8.0); their reserved memory stays
    assert by_name["h3"].allocation_ratios[Resource.VCPU] == 5.0
    assert by_name["h3"].reserved[Resource.MEMORY] == 2 * GIB
    # h4: r2 only; nothing reserved by a group: Nova's 512 MiB
    assert by_name["h4"].allocation_ratios[Resource.VCPU] == 8.0
    assert by_name["h4"].reserved[Resource.MEMORY] == 512 * MIB
    assert by_name["h4"].allocation_ratios[Resource.MEMORY] == 1.0


def test_a_groups_ratio_of_0_is_novas_default_before_the_minimum_is_taken() -> None:
    config = parse_config(
        """
defaults: {allocation_ratios: {vcpu: 16.0}}
hypervisors: [{name: a, uri: "test:///default", groups: {aggregate: [x, y]}}]
host_groups:
  - {kind: aggregate, name: x, allocation_ratios: {vcpu: 0}}
  - {kind: aggregate, name: y, allocation_ratios: {vcpu: 6.0}}
""",
        "x.yaml",
    )
    (only,) = config.hypervisors
    assert only.policy.allocation_ratios[Resource.VCPU] == 4.0  # min(4.0 for 0, 6.0)


def test_without_a_hypervisors_list_the_local_one_takes_the_groups_of_defaults() -> None:
    config = parse_config("defaults: {groups: {availability_zone: az-1, aggregate: [a, b]}}", "x.yaml")
    (local,) = config.hypervisors
    assert local.groups == (("aggregate", "a"), ("aggregate", "b"), ("availability_zone", "az-1"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "defaults: {groups: {availability_zone: [az-1, az-2]}}",
            "x.yaml: defaults.groups: availability_zone: a hypervisor is in one availability zone at "
            "most, as in Nova; got 2: 'az-1, az-2'",
        ),
        (
            "hypervisors: [{name: a, uri: u, groups: {Rack: r1}}]",
            "x.yaml: hypervisors[0].groups: expected a group kind of lower-case letters, digits and _",
        ),
        (
            "hypervisors: [{name: a, uri: u, groups: {rack: 'r 1'}}]",
            "x.yaml: hypervisors[0].groups: rack: expected a group name of letters, digits and . _ - : @",
        ),
        (
            "defaults: {groups: {aggregate: [x, x]}}",
            "x.yaml: defaults.groups: aggregate: 'x' is listed twice; expected each group once",
        ),
        ("defaults: {groups: [rack]}", "x.yaml: defaults.groups: expected a mapping of group kind"),
        (
            "defaults: {groups: {" + ", ".join(f"k{n}: g" for n in range(17)) + "}}",
            "x.yaml: defaults.groups: expected at most 16 group kinds, got 17",
        ),
        (
            "defaults: {groups: {aggregate: [" + ", ".join(f"g{n}" for n in range(65)) + "]}}",
            "x.yaml: defaults.groups: aggregate: expected at most 64 groups, got 65",
        ),
        (
            "host_groups: [{kind: rack, name: r1}, {kind: rack, name: r1}]",
            "x.yaml: host_groups: the rack 'r1' has two entries; expected one per group",
        ),
        (
            "host_groups: [{kind: rack, name: r1, cpu_shared_set: '0-3'}]",
            "x.yaml: host_groups[0].cpu_shared_set: unknown key 'cpu_shared_set'; expected one of: "
            "kind, name, allocation_ratios, reserved",
        ),
        ("host_groups: [{kind: rack}]", "x.yaml: host_groups[0].name: required key is missing"),
        (
            "host_groups: [{kind: rack, name: r1, allocation_ratios: {vcpu: -1}}]",
            "x.yaml: host_groups[0].allocation_ratios.vcpu: expected a number of at least 0",
        ),
        (
            "host_groups: [{kind: 9lives, name: r1}]",
            "x.yaml: host_groups[0].kind: expected a group kind of lower-case letters",
        ),
    ],
)
def test_group_errors_name_the_file_the_key_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_cli_exits_2_on_two_availability_zones(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("hypervisors: [{name: a, uri: 'test:///default', groups: {availability_zone: [a, b]}}]")
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "hypervisors[0].groups: availability_zone: a hypervisor is in one availability zone" in line


# --- membership in /metrics, the document and the tables ------------------------------------------

MEMORY_GIB = {"h1": 64, "h2": 32, "h3": 128, "h4": 16}


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> tuple[HypervisorSnapshot, ...]:
    """Four test-driver hosts in the groups of POLICIES, each with one running 4 GiB domain."""
    directory = tmp_path_factory.mktemp("groups")
    specs = [
        HostSpec(
            name,
            cpus=16,
            memory_gib=memory,
            pool_gib=500,
            pool_used_gib=0,
            domains=[
                DomainSpec(f"{name}-vm", f"00000000-0000-4000-8000-00000000000{n}", RUNNING, 2, 4096, 4096)
            ],
        )
        for n, (name, memory) in enumerate(MEMORY_GIB.items(), start=1)
    ]
    paths = write_fleet(specs, directory)
    config = parse_config(
        POLICIES.substitute({name: f"test://{path}" for name, path in paths.items()}), "inline"
    )
    return tuple(asyncio.run(audit_fleet_once(config, cpu_window=0.0)))


def _store(snapshots: tuple[HypervisorSnapshot, ...]) -> SnapshotStore:
    store = SnapshotStore()
    store.track([s.name for s in snapshots])
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
    return store


def test_one_membership_series_per_group_and_fleet_totals_count_a_host_once(
    grouped: tuple[HypervisorSnapshot, ...],
) -> None:
    samples = parse_samples(render(views(_store(grouped), time.time(), 60.0), {}).decode())
    memberships = series(samples, "hypervisor_group_info")
    assert all(v == 1.0 for v in memberships.values())
    found = sorted((dict(k)["hypervisor"], dict(k)["kind"], dict(k)["group"]) for k in memberships)
    assert found == [
        ("h1", "aggregate", "gpu"),
        ("h1", "aggregate", "ssd"),
        ("h1", "availability_zone", "az-1"),
        ("h1", "rack", "r1"),
        ("h2", "aggregate", "ssd"),
        ("h2", "availability_zone", "az-1"),
        ("h2", "rack", "r1"),
        ("h3", "aggregate", "gpu"),
        ("h3", "availability_zone", "az-2"),
        ("h3", "rack", "r2"),
        ("h4", "rack", "r2"),
    ]
    # no other family carries a group label
    grouped_elsewhere = [
        name
        for name, labels in samples
        if name.startswith("hypervisor_")
        and name != "hypervisor_group_info"
        and {"kind", "group"} & dict(labels).keys()
    ]
    assert grouped_elsewhere == []
    memory = {"resource": "memory", "unit": "bytes"}
    totals = {
        dict(k)["hypervisor"]: v for k, v in series(samples, "hypervisor_resource_size", **memory).items()
    }
    assert totals == {name: gib * GIB for name, gib in MEMORY_GIB.items()}
    assert sum(totals.values()) == (64 + 32 + 128 + 16) * GIB  # h1 once, though in two aggregates
    # `sum by (kind, group) (total * on(hypervisor) group_left(kind, group) hypervisor_group_info)`
    per_group: dict[tuple[str, str], float] = {}
    for hypervisor, kind, group in found:
        per_group[kind, group] = per_group.get((kind, group), 0.0) + totals[hypervisor]
    assert per_group["aggregate", "gpu"] == (64 + 128) * GIB
    assert per_group["aggregate", "ssd"] == (64 + 32) * GIB
    assert per_group["availability_zone", "az-1"] == (64 + 32) * GIB
    assert per_group["rack", "r2"] == (128 + 16) * GIB
    # the group policies are what each host's limit shows: h1 at vcpu 2.0, h2 at 3.0
    vcpu = {"resource": "vcpu", "unit": "cpus"}
    assert value(samples, "hypervisor_resource_limit", hypervisor="h1", **vcpu) == 32
    assert value(samples, "hypervisor_resource_limit", hypervisor="h2", **vcpu) == 48
    assert value(samples, "hypervisor_resource_limit", hypervisor="h3", **vcpu) == 80
    assert value(samples, "hypervisor_resource_reserved", hypervisor="h1", **memory) == 2 * GIB


def test_a_down_hypervisor_keeps_its_membership(grouped: tuple[HypervisorSnapshot, ...]) -> None:
    h4 = next(s for s in grouped if s.name == "h4")
    assert h4.hypervisor is not None
    store = _store(grouped)
    store.record(HypervisorSnapshot.failed(h4.hypervisor, "connection refused"), "failure")
    samples = parse_samples(render(views(store, time.time() + 3600, 60.0), {}).decode())
    assert value(samples, "hypervisor_up", hypervisor="h4") == 0
    assert value(samples, "hypervisor_group_info", hypervisor="h4", kind="rack", group="r2") == 1


def test_the_document_and_the_tables_list_each_hypervisors_groups(
    grouped: tuple[HypervisorSnapshot, ...],
) -> None:
    document = fleet_document(grouped)
    by_name = {entry["name"]: entry for entry in document["hypervisors"]}
    assert by_name["h1"]["groups"] == {
        "aggregate": ["gpu", "ssd"],
        "availability_zone": ["az-1"],
        "rack": ["r1"],
    }
    assert by_name["h4"]["groups"] == {"rack": ["r2"]}
    json.dumps(document)
    tables = render_tables(grouped)
    assert "  groups: aggregate gpu, ssd; availability_zone az-1; rack r1" in tables
    assert "  groups: rack r2" in tables


# --- evacuation within the availability zone ------------------------------------------------------


def zoned(
    name: str, zone: str | None, memory_gib: int = 64, domains: tuple[DomainFacts, ...] = ()
) -> HostState:
    facts = host(cpus=64, memory=memory_gib * GIB, disk=1000 * GIB, domains=domains)
    return host_state(name, facts, FLAT, availability_zone=zone)


EIGHTS = tuple(guest(f"e{i}", 8) for i in range(5))


def test_a_domain_that_fits_only_outside_its_zone_cannot_be_evacuated() -> None:
    # a and b in az-1; c in az-2, empty. a's 32 GiB domain fits c (64 free), not b (24 free)
    hosts = [
        zoned("a", "az-1", domains=(guest("big", 32),)),
        zoned("b", "az-1", domains=EIGHTS),
        zoned("c", "az-2"),
    ]
    lost = evacuation(hosts, "a")
    assert not lost.feasible
    (big,) = lost.unplaced
    assert big.rejections["b"].filter == PLACEMENT
    assert big.rejections["c"].filter == AVAILABILITY_ZONE
    assert big.rejections["c"].reason == "hypervisor c is in availability zone az-2, not in az-1 as requested"
    assert dict(big.refused_by) == {PLACEMENT: 1, AVAILABILITY_ZONE: 1}
    assert lost == reference_evacuation(hosts, "a")
    # the same fleet without zones: c takes it
    flat = [
        replace(
            h,
            availability_zone=None,
            guests=tuple(replace(g, demand=replace(g.demand, availability_zone=None)) for g in h.guests),
        )
        for h in hosts
    ]
    assert evacuation(flat, "a").placements == (("big", "c"),)


def test_a_domain_stays_in_its_zone_where_it_fits_whatever_the_other_zone_has() -> None:
    # a and b in az-1 with room in b; c in az-2 with more room: spreading would choose c, the
    # zone keeps the domain on b. A host in no zone (d) sends its domains anywhere.
    hosts = [
        zoned("a", "az-1", domains=(guest("big", 32),)),
        zoned("b", "az-1", memory_gib=40),
        zoned("c", "az-2", memory_gib=128),
        zoned("d", None, domains=(guest("free", 16),)),
    ]
    assert evacuation(hosts, "a").placements == (("big", "b"),)
    assert evacuation(hosts, "d").placements == (("free", "c"),)
    # a host in no zone takes no domain of a zoned host, and a lone zone cannot lose its host
    alone = [zoned("a", "az-1", domains=(guest("big", 8),)), zoned("d", None, memory_gib=128)]
    result = evacuation(alone, "a")
    assert not result.feasible
    assert result.unplaced[0].rejections["d"].reason == (
        "hypervisor d is in no availability zone, not in az-1 as requested"
    )
    tolerance = fleet_tolerance(hosts, bound=2)
    assert tolerance.feasible("a") and tolerance.feasible("d")


def test_a_placement_for_a_zone_lands_only_there() -> None:
    hosts = [zoned("a", "az-1"), zoned("b", "az-2", memory_gib=128), zoned("c", None, memory_gib=256)]
    asked = Demand({Resource.VCPU: 1, Resource.MEMORY: 4 * GIB}, availability_zone="az-1")
    result = schedule(hosts, asked, 2)
    assert [step.host for step in result.steps] == ["a", "a"]
    assert schedule(hosts, replace(asked, availability_zone="az-3"), 1).rejections.keys() == {"a", "b", "c"}
    assert {
        r.filter for r in schedule(hosts, replace(asked, availability_zone="az-3"), 1).rejections.values()
    } == {AVAILABILITY_ZONE}
    anywhere = schedule(hosts, replace(asked, availability_zone=None), 1)
    assert anywhere.steps[0].host == "c"  # spreading: the most free memory


ZONES = st.lists(st.sampled_from([None, "az-1", "az-1", "az-2"]), min_size=12, max_size=12)


def zoned_fleet(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]], zones: list[str | None]
) -> list[HostState]:
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    return [
        host_state(name, facts[name], DEFAULTS, up=shape[2], availability_zone=zone)
        for (name, shape), zone in zip(zip(facts, shapes, strict=True), zones, strict=False)
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LARGER, ZONES, MULTIPLIERS, st.randoms(use_true_random=False))
def test_zoned_evacuations_and_tolerance_give_the_straightforward_answers(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    zones: list[str | None],
    multipliers: Multipliers,
    rng: random.Random,
) -> None:
    hosts = zoned_fleet(shapes, zones)
    rng.shuffle(hosts)
    expected = {state.name: reference_evacuation(hosts, state.name, multipliers) for state in hosts}
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=3)
    assert dict(tolerance.evacuations) == expected
    assert tolerance.tolerated == reference_tolerated(hosts, 3, multipliers)
    for state in hosts:  # a zoned host's domains land in its zone only
        for _domain, where in expected[state.name].placements:
            target = next(h for h in hosts if h.name == where)
            assert state.availability_zone is None or target.availability_zone == state.availability_zone


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    ZONES,
    MULTIPLIERS,
    st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from([None, "az-1", "az-2"]), DOMAINS),
        min_size=1,
        max_size=3,
    ),
)
def test_an_incremental_update_after_a_zone_change_is_full_recomputation(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    zones: list[str | None],
    multipliers: Multipliers,
    changes: list[tuple[int, str | None, tuple[int, int, int]]],
) -> None:
    hosts = zoned_fleet(shapes, zones)
    facts = fleet_facts([(*shape, domains, up) for shape, domains, up in shapes])
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=2)
    for index, zone, (vcpus, memory, disk) in changes:
        before = hosts[index % len(hosts)]
        more = (*facts[before.name].domains, guest(f"new{vcpus}{memory}", memory, vcpus, disk))
        after = host_state(
            before.name,
            replace(facts[before.name], domains=more),
            DEFAULTS,
            up=before.up,
            availability_zone=zone,
        )
        hosts = [after if state.name == after.name else state for state in hosts]
        tolerance = fleet_tolerance_update(tolerance, after)
        full = fleet_tolerance(hosts, multipliers=multipliers, bound=2)
        assert dict(tolerance.evacuations) == dict(full.evacuations)
        assert tolerance.tolerated == full.tolerated


def test_a_zone_change_is_a_change_the_simulation_computes_again(
    grouped: tuple[HypervisorSnapshot, ...],
) -> None:
    hosts = [SimulatedHost(s.name, s, up=True) for s in grouped if s.up]
    simulation = LocalSimulation()
    first = simulation.compute(hosts, SPREAD, 2)
    assert first is not None
    assert simulation.compute(hosts, SPREAD, 2) is None  # nothing changed
    h2 = next(h for h in hosts if h.name == "h2")
    assert h2.audit.hypervisor is not None
    moved = replace(h2.audit.hypervisor, groups=(("availability_zone", "az-2"),))
    again = [replace(h, audit=replace(h.audit, hypervisor=moved)) if h.name == "h2" else h for h in hosts]
    before = {h.name: scheduling_key(scheduler_host(h)) for h in hosts}
    after = {h.name: scheduling_key(scheduler_host(h)) for h in again}
    assert [name for name in before if before[name] != after[name]] == ["h2"]
    report = simulation.compute(again, SPREAD, 2)
    assert report is not None and report.incremental
    # h1's domain (az-1) may no longer go to h2: h1's only zone-mate left
    assert [where for _d, where in first.evacuations["h1"].placements] == ["h2"]
    assert not report.evacuations["h1"].feasible


# --- placements and claims for a zone -------------------------------------------------------------


def test_a_dry_run_for_a_zone_lands_only_in_it(grouped: tuple[HypervisorSnapshot, ...]) -> None:
    config = parse_config(POLICIES.substitute(ANY_URI), "x.yaml")
    body = PlacementBody.model_validate(
        {"flavor": {"vcpu": 1, "memory": "1GiB"}, "count": 3, "availability_zone": "az-1"}
    )
    fleet = [FleetEntry.of(snapshot) for snapshot in grouped]
    answer = dry_run(config, body, fleet)
    assert answer.placed and set(answer.placed) <= {"h1", "h2"}
    nowhere = dry_run(config, body.model_copy(update={"availability_zone": "az-9"}), fleet)
    assert not nowhere.placed
    assert {name: r.filter for name, r in nowhere.rejections.items()} == dict.fromkeys(
        MEMORY_GIB, AVAILABILITY_ZONE
    )
    with pytest.raises(ValidationError):
        PlacementBody.model_validate({"flavor": "m1.small", "availability_zone": "no spaces"})


SMALL = {Resource.VCPU: 2, Resource.MEMORY: 4 * GIB, Resource.DISK: 10 * GIB}


def test_a_claim_for_a_zone_lands_in_it_and_a_named_hypervisor_elsewhere_refuses_it(tmp_path: Path) -> None:
    zones = {"a": "az-1", "b": "az-2"}
    facts = {"a": host(cpus=8, memory=32 * GIB), "b": host(cpus=64, memory=512 * GIB)}

    async def run() -> None:
        store = SnapshotStore()
        store.track(sorted(facts))
        claims = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        ledger = ClaimLedger(claims, store, ClaimDatabase(claims.database))
        await ledger.start()
        try:
            for name, audited in facts.items():
                member = Hypervisor(
                    name, "test:///default", DEFAULTS, None, groups=(("availability_zone", zones[name]),)
                )
                await ledger.record_audit(member, replace(audited, audited_at=time.time()), {})
            zoned_claim = ClaimRequest(
                ANY_HYPERVISOR, SMALL, 60.0, None, "test", count=2, availability_zone="az-1"
            )
            assert (await ledger.create(zoned_claim)).hypervisors == (
                "a",
                "a",
            )  # b is larger: spread would take it
            anywhere = await ledger.create(replace(zoned_claim, count=1, availability_zone=None))
            assert anywhere.hypervisors == ("b",)
            with pytest.raises(ClaimRejectedError) as refused:
                await ledger.create(replace(zoned_claim, hypervisor="b", count=1))
            assert refused.value.rejections["b"].filter == AVAILABILITY_ZONE
            assert refused.value.reasons["b"] == [
                "hypervisor b is in availability zone az-2, not in az-1 as requested"
            ]
        finally:
            await ledger.stop()

    asyncio.run(run())


def test_virtcap_place_takes_an_availability_zone(tmp_path: Path) -> None:
    spec = HostSpec("solo", cpus=8, memory_gib=16, pool_gib=100, pool_used_gib=0)
    (path,) = write_fleet([spec], tmp_path).values()
    config = tmp_path / "virtcap.yaml"
    config.write_text(
        f'hypervisors: [{{name: solo, uri: "test://{path}", groups: {{availability_zone: az-1}}}}]'
    )
    base = [
        sys.executable,
        "-m",
        "virtcap",
        "place",
        "--config",
        str(config),
        "--vcpu",
        "1",
        "--memory",
        "1GiB",
    ]
    inside = subprocess.run(
        [*base, "--availability-zone", "az-1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert inside.returncode == 0, inside.stderr
    outside = subprocess.run(
        [*base, "--availability-zone", "az-2", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert outside.returncode == 1
    assert json.loads(outside.stdout)["rejections"]["solo"]["filter"] == AVAILABILITY_ZONE
