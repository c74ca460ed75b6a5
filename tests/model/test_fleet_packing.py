"""The packing answers as the failure-tolerance worker keeps them (fleet/packing.py): each
changed hypervisor's stranded capacity at once, the answers that read a whole fleet, group or
zone queued as steps when what they read changed, computed one at a time in the order queued,
and always what the model answers for the states as they are when computed."""

from __future__ import annotations

import random
from dataclasses import replace

from tests.support.factories import GIB
from tests.support.fleets import guest, state
from virtcap.fleet.packing import CompactionSummary, FleetPacking, PackingReport, PackingSettings, Step
from virtcap.model.host_fit import Demand
from virtcap.model.packing.compaction import compaction
from virtcap.model.packing.sellable import sellable_by_zone, sellable_count
from virtcap.model.packing.stranded import stranded_capacity
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, HostState

SMALL = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB})
LARGE = Demand({Resource.VCPU: 4, Resource.MEMORY: 8 * GIB})
FLAVORS = {"small": SMALL, "large": LARGE}
RACK = ("rack", "r1")


def fleet() -> list[HostState]:
    """Four hosts in two zones, a few domains each; a and b in rack r1."""
    hosts = [
        state("a", cpus=8, memory_gib=32, domains=(guest("a1", 8, 2), guest("a2", 4, 1))),
        state("b", cpus=8, memory_gib=32, domains=(guest("b1", 16, 4),)),
        state("c", cpus=8, memory_gib=32, domains=(guest("c1", 2, 1),)),
        state("d", cpus=16, memory_gib=64),
    ]
    return [replace(host, availability_zone="az-1" if host.name in "ab" else "az-2") for host in hosts]


def settings(flavors: dict[str, Demand] = FLAVORS) -> PackingSettings:
    return PackingSettings(flavors, {"a": (RACK,), "b": (RACK,)}, reserve_host_failures=1)


def with_domain(hosts: list[HostState], name: str) -> list[HostState]:
    """The same fleet (the same state objects) but for `name`, which runs one more domain."""
    domains = {
        "a": (guest("a1", 8, 2), guest("a2", 4, 1), guest("a3", 2)),
        "c": (guest("c1", 2, 1), guest("c2", 2)),
    }[name]
    rebuilt = state(name, cpus=8, memory_gib=32, domains=domains)
    zone = next(host.availability_zone for host in hosts if host.name == name)
    return [replace(rebuilt, availability_zone=zone) if host.name == name else host for host in hosts]


def with_claim(hosts: list[HostState], name: str) -> list[HostState]:
    return [host.consume(SMALL) if host.name == name else host for host in hosts]


def assert_as_the_model(report: PackingReport, hosts: list[HostState]) -> None:
    """Every answer is the model's for these states."""
    assert report.pending == 0
    for host in hosts:
        assert report.stranded[host.name] == stranded_capacity(host.capacity, FLAVORS)
    assert report.compaction is not None
    assert report.compaction.hypervisors == compaction(hosts).hypervisors
    rack = [host for host in hosts if host.name in "ab"]
    assert report.groups[RACK].hypervisors == compaction(rack).hypervisors
    assert_sold_as_the_model(report, hosts)


def assert_sold_as_the_model(report: PackingReport, hosts: list[HostState]) -> None:
    """Every sellable count is the model's for these states, in the fleet and in each zone."""
    for flavor, demand in FLAVORS.items():
        assert report.sellable[flavor] == sellable_count(hosts, demand, SPREAD, 1)
        for zone in ("az-1", "az-2"):
            members = [host for host in hosts if host.availability_zone == zone]
            expected = sellable_by_zone(members, {flavor: demand}, SPREAD, 1)[zone, flavor]
            assert report.sellable_by_zone[zone, flavor] == expected


def test_the_first_answers_are_the_models() -> None:
    hosts = fleet()
    report = FleetPacking().apply(hosts, settings(), SPREAD)
    assert set(report.solved) == {"a", "b", "c", "d"}
    assert report.duration_seconds is not None
    assert_as_the_model(report, hosts)


def test_an_update_solves_the_changed_stranded_capacity_at_once_and_queues_the_rest() -> None:
    packing, hosts = FleetPacking(), fleet()
    packing.apply(hosts, settings(), SPREAD)
    claimed = with_claim(hosts, "c")
    packing.update(claimed, settings(), SPREAD)
    report = packing.report()
    assert report.solved == ("c",)
    assert report.stranded["c"] == stranded_capacity(claimed[2].capacity, FLAVORS)
    # a pending claim: no compaction reads it; each flavor in the fleet and in c's zone does
    assert report.pending == 2 * len(FLAVORS)
    while packing.step():
        pass
    assert_as_the_model(packing.report(), claimed)


def test_a_new_domain_queues_the_compactions_that_read_it() -> None:
    packing, hosts = FleetPacking(), fleet()
    packing.apply(hosts, settings(), SPREAD)
    packing.update(with_domain(hosts, "c"), settings(), SPREAD)
    assert packing.report().pending == 1 + 2 * len(FLAVORS)  # the fleet's compaction, not rack r1's
    assert packing.queued[0] == Step("compaction")
    packing.step()
    assert packing.compactions_updated == 1  # c2 fits a hypervisor in use: no solve
    assert packing.report().compaction == CompactionSummary.of(compaction(with_domain(hosts, "c")))
    packing.update(with_domain(hosts, "a"), settings(), SPREAD)
    # a in r1 and in az-1 (c back as it was: its zone's steps stay queued)
    assert packing.report().pending == 2 + 3 * len(FLAVORS)
    while packing.step():
        pass
    assert_as_the_model(packing.report(), with_domain(hosts, "a"))


def test_a_domain_stopped_brings_the_compactions_up_to_date_where_the_bound_proves_them() -> None:
    packing, hosts = FleetPacking(), with_domain(fleet(), "a")
    packing.apply(hosts, settings(), SPREAD)
    stopped = fleet()  # a3 stopped: a, b and c still need two hypervisors of their zones
    packing.update(stopped, settings(), SPREAD)
    assert packing.queued[0] == Step("compaction")
    packing.step()
    assert packing.compactions_updated == 1
    while packing.step():
        pass
    assert packing.compactions_updated == 2  # and rack r1's
    assert_as_the_model(packing.report(), stopped)


def test_steps_keep_their_place_and_read_the_states_as_they_are_when_computed() -> None:
    """A change while steps are queued queues nothing twice: every answer is brought up to date
    however often the fleet changes, and each is the model's for the states at its step."""
    packing, hosts = FleetPacking(), fleet()
    packing.apply(hosts, settings(), SPREAD)
    first = with_claim(hosts, "a")
    packing.update(first, settings(), SPREAD)
    computed, *rest = packing.queued
    assert computed == Step("sellable", flavor="small")  # the fleet's answers first
    assert packing.step()
    second = with_claim(first, "b")  # same zone, same steps
    packing.update(second, settings(), SPREAD)
    # the step computed comes back, last; the others keep their place; none is queued twice
    assert packing.queued == (*rest, computed)
    steps = 0
    while packing.step():
        steps += 1
    assert steps == len(rest) + 1
    assert_as_the_model(packing.report(), second)


def test_nothing_changed_queues_nothing() -> None:
    packing, hosts = FleetPacking(), fleet()
    first = packing.apply(hosts, settings(), SPREAD)
    packing.update(hosts, settings(), SPREAD)
    again = packing.report()
    assert again.pending == 0 and again.solved == ()
    assert again == replace(first, computed_at=again.computed_at)


def test_answers_of_flavors_groups_and_zones_that_are_gone_are_forgotten() -> None:
    packing, hosts = FleetPacking(), fleet()
    packing.apply(hosts, settings(), SPREAD)
    fewer = PackingSettings({"small": SMALL}, {}, reserve_host_failures=1)
    packing.update(hosts, fewer, SPREAD)
    report = packing.report()
    assert set(report.sellable) == {"small"} and report.groups == {}
    assert {flavor for _zone, flavor in report.sellable_by_zone} == {"small"}
    assert report.pending == 0  # the stranded capacity was solved again: other flavors
    assert set(report.solved) == {"a", "b", "c", "d"}


def test_another_reserve_computes_every_sellable_count_again_and_no_compaction() -> None:
    packing, hosts = FleetPacking(), fleet()
    packing.apply(hosts, settings(), SPREAD)
    packing.update(hosts, replace(settings(), reserve_host_failures=0), SPREAD)
    assert packing.report().pending == 3 * len(FLAVORS)  # the fleet and two zones
    while packing.step():
        pass
    report = packing.report()
    for flavor, demand in FLAVORS.items():
        assert report.sellable[flavor] == sellable_count(hosts, demand, SPREAD, 0)


def test_sellable_counts_followed_from_the_last_placements_are_counted_anew() -> None:
    """A larger fleet changed one hypervisor at a time (a domain started, a claim, a domain
    stopped): each flavor's sellable count, its placement followed from the last request on the
    same hosts, is the count computed from nothing, in the fleet and in each zone."""
    rng = random.Random(41)
    names = [f"h{number:02d}" for number in range(30)]
    shapes = {name: rng.choice([(8, 32), (16, 64), (16, 32)]) for name in names}
    domains = {
        name: [
            guest(f"{name}-{index}", rng.choice([2, 4, 8]), rng.choice([1, 2]))
            for index in range(rng.randrange(4))
        ]
        for name in names
    }

    def built(name: str) -> HostState:
        cpus, memory = shapes[name]
        zone = "az-1" if name < "h15" else "az-2"
        return replace(
            state(name, cpus=cpus, memory_gib=memory, domains=tuple(domains[name])), availability_zone=zone
        )

    hosts = [built(name) for name in names]
    packing = FleetPacking()
    packing.apply(hosts, settings(), SPREAD)
    for change in range(6):
        name = rng.choice(names)
        number = names.index(name)
        if change % 3 == 0:
            domains[name].append(guest(f"{name}-new{change}", 2, 1))
            hosts[number] = built(name)
        elif change % 3 == 1:
            hosts[number] = hosts[number].consume(LARGE)
        else:
            domains[name] = domains[name][1:]
            hosts[number] = built(name)
        assert_sold_as_the_model(packing.apply(list(hosts), settings(), SPREAD), hosts)
