"""Compaction: the fewest eligible hypervisors holding every counted domain, checked against hand
answers and an independent brute force that places domains through the engine's own filters."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest

from tests.support.factories import GIB, host
from tests.support.fleets import FLAT, state
from tests.support.hosts import numa_cell, with_cells
from virtcap.model.host_fit import Demand, within_host
from virtcap.model.packing.compaction import compaction, eligible, lower_bound, zone_parts
from virtcap.model.packing.shapes import DomainRef, domain_shapes
from virtcap.model.resources import Resource
from virtcap.model.scheduler import Guest, HostState, host_state
from virtcap.model.scheduler.filters import FilterRequest, first_rejection


def demand(vcpus: int, memory_gib: int, disk_gib: int = 0, zone: str | None = None) -> Demand:
    request = {Resource.VCPU: vcpus, Resource.MEMORY: memory_gib * GIB}
    if disk_gib:
        request[Resource.DISK] = disk_gib * GIB
    return Demand(request, availability_zone=zone)


def holding(hypervisor: HostState, *demands: Demand) -> HostState:
    """The (empty) hypervisor with these domains counted on it, as its guests."""
    guests = tuple(Guest(f"{hypervisor.name}-d{index}", d) for index, d in enumerate(demands))
    return replace(hypervisor, guests=guests)


def test_half_full_hypervisors_pair_up() -> None:
    hosts = [holding(state(f"h{n}", cpus=8, memory_gib=16), demand(2, 8)) for n in range(4)]
    result = compaction(hosts)
    assert (result.hypervisors, result.lower_bound, result.optimal) == (2, 2, True)
    assert len(result.assignment) == 4 and set(result.assignment.values()) == set(result.kept)
    assert not result.repaired and not result.unplaced


def test_domains_stay_where_they_are_when_they_can() -> None:
    """The kept hypervisors are the fullest, and their domains do not move."""
    hosts = [
        holding(state("a", cpus=8, memory_gib=16), demand(1, 4)),
        holding(state("b", cpus=8, memory_gib=16), demand(1, 4), demand(1, 4)),
    ]
    result = compaction(hosts)
    assert result.kept == ("b",)
    assert result.assignment[DomainRef("b", "b-d0")] == "b"


def test_availability_zones_keep_domains_apart() -> None:
    hosts = [
        holding(
            replace(state(f"h{n}", cpus=8, memory_gib=16), availability_zone=zone), demand(1, 2, zone=zone)
        )
        for n, zone in enumerate(("az1", "az1", "az2", "az2"))
    ]
    result = compaction(hosts)
    assert result.hypervisors == 2 and result.lower_bound == 2 and result.optimal
    zone_of = {h.name: h.availability_zone for h in hosts}
    for domain, target in result.assignment.items():
        assert zone_of[target] == zone_of[domain.hypervisor]


def test_a_domain_of_no_zone_may_go_anywhere() -> None:
    hosts = [
        holding(
            replace(state("z", cpus=8, memory_gib=16), availability_zone="az1"), demand(1, 2, zone="az1")
        ),
        holding(state("free", cpus=8, memory_gib=16), demand(1, 2)),
    ]
    assert compaction(hosts).kept == ("z",)


def test_hypervisors_down_stale_or_in_maintenance_neither_count_nor_take() -> None:
    hosts = [
        holding(state("up", cpus=8, memory_gib=16), demand(1, 4)),
        holding(state("down", cpus=8, memory_gib=16, up=False), demand(1, 4)),
        replace(state("stale", cpus=64, memory_gib=512), stale=True),
    ]
    maintained = state("kept-out", cpus=64, memory_gib=512)
    maintained = replace(maintained, capacity=replace(maintained.capacity, maintenance="drained"))
    result = compaction([*hosts, maintained])
    assert (result.eligible, result.hypervisors, result.kept) == (1, 1, ("up",))
    assert set(result.assignment) == {DomainRef("up", "up-d0")}


def test_any_subset_of_states_is_a_groups_compaction() -> None:
    hosts = [holding(state(f"h{n}", cpus=8, memory_gib=16), demand(2, 6)) for n in range(6)]
    assert compaction(hosts).hypervisors == 3
    assert compaction(hosts[:4]).hypervisors == 2
    assert compaction([]).hypervisors == 0


def test_shapes_group_identical_requests() -> None:
    hosts = [holding(state(f"h{n}"), demand(1, 2), demand(2, 4), demand(1, 2)) for n in range(3)]
    shapes = domain_shapes(hosts)
    assert [shape.count for shape in shapes] == [3, 6]  # largest first
    assert compaction(hosts).shapes == 2


def two_cells(name: str) -> HostState:
    """Two NUMA cells of 8 CPUs and 16 GiB each: 32 GiB of memory for Placement."""
    cells = (numa_cell(0, range(8), 16), numa_cell(1, range(8, 16), 16))
    return host_state(name, with_cells(host(cpus=16, memory=32 * GIB), cells), FLAT)


def one_cell(vcpus: int, memory_gib: int) -> Demand:
    memory = memory_gib * GIB
    return Demand(
        {Resource.VCPU: vcpus, Resource.MEMORY: memory}, within_host(vcpus, memory, {"hw:numa_nodes": "1"})
    )


def test_the_cells_refuse_what_the_linear_model_lets_in_and_the_validation_repairs_it() -> None:
    """Two shapes of 10 GiB on one guest cell: each alone fits twice (a cell each), and 30 GiB of
    the 32 hold three, but no cell holds two: the third needs a second hypervisor."""
    hosts = [
        holding(two_cells("a"), one_cell(2, 10), one_cell(2, 10)),
        holding(two_cells("b"), one_cell(1, 10)),
    ]
    result = compaction(hosts)
    assert result.hypervisors == 2 and result.lower_bound == 1 and not result.optimal
    assert len(result.repaired) == 1
    assert replay(hosts, result.assignment)


def replay(hosts: Sequence[HostState], assignment: dict[DomainRef, str] | object) -> bool:
    """Every hypervisor, as built, takes the domains assigned to it one after the other through
    the filters (the states here are built empty, their domains only as guests)."""
    assert isinstance(assignment, dict)
    by_name = {h.name: h for h in hosts}
    demands = {DomainRef(h.name, g.name): g.demand for h in hosts for g in h.guests}
    for target in set(assignment.values()):
        current = by_name[target]
        for domain in (d for d, t in assignment.items() if t == target):
            if first_rejection(current, FilterRequest.of(demands[domain])) is not None:
                return False
            current = current.consume(demands[domain])
    return True


# The brute force: for each size, every subset of the eligible hypervisors, and a search placing
# every domain (largest first) on one of them through the filters, each as the ones before left it.


def brute_force(hosts: Sequence[HostState]) -> int:
    candidates = [h for h in hosts if h.up and not h.stale and h.capacity.maintenance is None]
    domains = sorted(
        (g.demand for h in candidates for g in h.guests),
        key=lambda d: (-d.request.get(Resource.MEMORY, 0), -d.request.get(Resource.VCPU, 0), repr(d)),
    )
    for size in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            if place_all(list(subset), domains, 0, 0):
                return size
    raise AssertionError("the domains fit on no subset: the fleet was built wrong")


def place_all(states: list[HostState], domains: list[Demand], at: int, lowest: int) -> bool:
    if at == len(domains):
        return True
    wanted = domains[at]
    # a domain identical to the one before goes no lower than it: the same placements, once
    start = lowest if at > 0 and domains[at - 1] == wanted else 0
    for index in range(start, len(states)):
        current = states[index]
        if first_rejection(current, FilterRequest.of(wanted)) is None:
            states[index] = current.consume(wanted)
            if place_all(states, domains, at + 1, index):
                states[index] = current
                return True
            states[index] = current
    return False


SIZES = ((4, 8, 100), (8, 16, 200), (8, 32, 100), (16, 32, 400))
DOMAIN_SIZES = ((1, 2, 10), (2, 4, 20), (4, 8, 40), (1, 6, 0), (2, 2, 80), (3, 12, 20))


def random_fleet(seed: int, cells: bool = False) -> list[HostState]:
    """Up to 8 hypervisors of a few sizes (some in zones, some down), each with domains that fit
    it; with `cells`, some hypervisors of two NUMA cells and domains on one guest cell."""
    rng = random.Random(seed)
    hosts = []
    for index in range(rng.randint(1, 8)):
        zone = rng.choice((None, None, "az1", "az2"))
        if cells and rng.random() < 0.5:
            hypervisor = two_cells(f"h{index}")
        else:
            cpus, memory, disk = rng.choice(SIZES)
            hypervisor = state(f"h{index}", cpus=cpus, memory_gib=memory, disk_gib=disk)
        hypervisor = replace(hypervisor, availability_zone=zone, up=rng.random() > 0.1)
        current, guests = hypervisor, []
        for number in range(rng.randint(0, 4)):
            vcpus, memory, disk = rng.choice(DOMAIN_SIZES)
            wanted = demand(vcpus, memory, disk, zone)
            if cells and rng.random() < 0.5:
                wanted = replace(one_cell(vcpus, memory), availability_zone=zone)
            if first_rejection(current, FilterRequest.of(wanted)) is None:
                current = current.consume(wanted)
                guests.append(Guest(f"h{index}-d{number}", wanted))
        hosts.append(replace(hypervisor, guests=tuple(guests)))
    return hosts


@pytest.mark.parametrize("seed", range(80))
def test_the_compaction_of_small_fleets_is_the_brute_forces(seed: int) -> None:
    """Placement's classes and zones only: the linear model is exact, so the answer is optimal."""
    hosts = random_fleet(seed)
    result = compaction(hosts)
    best = brute_force(hosts)
    assert result.hypervisors == best
    assert result.lower_bound <= best and result.optimal
    assert lower_bound(hosts).value <= best  # the configuration bound included
    assert not result.unplaced and replay(hosts, result.assignment)


@pytest.mark.parametrize("seed", range(40))
def test_with_numa_cells_the_answer_is_feasible_and_bounded(seed: int) -> None:
    """The cells make the linear model optimistic: the answer is validated (never below the
    optimum), the bound never above it, and an answer said optimal is the brute force's."""
    hosts = random_fleet(seed, cells=True)
    result = compaction(hosts)
    best = brute_force(hosts)
    assert result.lower_bound <= best <= result.hypervisors
    assert not result.optimal or result.hypervisors == best
    assert lower_bound(hosts).value <= best
    assert not result.unplaced and replay(hosts, result.assignment)


def test_the_answer_is_deterministic() -> None:
    hosts = random_fleet(7)
    assert compaction(hosts) == compaction(hosts)


CROWDED_SIZES = (*SIZES, (12, 24, 300), (6, 20, 150))
CROWDED_DOMAIN_SIZES = (*DOMAIN_SIZES, (3, 5, 30), (5, 7, 50), (2, 9, 15))


def crowded_fleet(seed: int, hypervisors: int = 40, most: int = 6) -> list[HostState]:
    """Hypervisors of six sizes, each with up to `most` domains of nine: a program whose search
    takes thousands of nodes (seed 0: about 5,500, some 8 s on 2 CPUs)."""
    rng = random.Random(seed)
    hosts = []
    for index in range(hypervisors):
        cpus, memory, disk = rng.choice(CROWDED_SIZES)
        hypervisor = state(f"h{index}", cpus=cpus, memory_gib=memory, disk_gib=disk)
        wanted = (demand(*rng.choice(CROWDED_DOMAIN_SIZES)) for _ in range(rng.randint(0, most)))
        hosts.append(filled(hypervisor, wanted))
    return hosts


def filled(hypervisor: HostState, wanted: Iterable[Demand]) -> HostState:
    """The (empty) hypervisor with each of the demands that passes its filters, as the ones
    before left it, counted on it (`<name>-d<number>`, numbered among all those wanted)."""
    current, guests = hypervisor, []
    for number, demanded in enumerate(wanted):
        if first_rejection(current, FilterRequest.of(demanded)) is None:
            current = current.consume(demanded)
            guests.append(Guest(f"{hypervisor.name}-d{number}", demanded))
    return replace(hypervisor, guests=tuple(guests))


def test_the_node_limit_not_the_time_limit_ends_the_search() -> None:
    """Where the node limit stops the search, the answer is the same whatever the time budget
    above what those nodes take (about 1 s of a CPU here; the shorter budget leaves room for a
    machine many times slower, or as busy): a slower machine gives the same answer."""
    hosts = crowded_fleet(0)
    short = compaction(hosts, time_limit_seconds=30.0, max_nodes=200)
    long = compaction(hosts, time_limit_seconds=120.0, max_nodes=200)
    assert not short.time_limited and not long.time_limited
    assert not short.optimal  # the node limit stopped it before it proved its packing optimal
    assert short == long
    assert not short.unplaced and replay(hosts, short.assignment)


# Zones: when no domain can leave its zone, each zone is solved alone and the answers added up.


def in_zones(hosts: Sequence[HostState], count: int = 2) -> list[HostState]:
    """The hypervisors dealt round `count` zones, each domain held to its hypervisor's zone (as
    `host_state` builds them)."""
    zoned = []
    for index, hypervisor in enumerate(hosts):
        zone = f"az{index % count + 1}"
        guests = tuple(
            replace(guest, demand=replace(guest.demand, availability_zone=zone))
            for guest in hypervisor.guests
        )
        zoned.append(replace(hypervisor, availability_zone=zone, guests=guests))
    return zoned


def nowhere() -> HostState:
    """An empty hypervisor in no zone: it takes none of the zones' domains, but its presence makes
    the fleet one program again."""
    return state("nowhere", cpus=1, memory_gib=1)


@pytest.mark.parametrize("seed", range(40))
def test_a_fleet_in_zones_solved_zone_by_zone_is_the_whole_programs_answer(seed: int) -> None:
    hosts = in_zones(random_fleet(seed))
    whole_fleet = [*hosts, nowhere()]
    assert len(zone_parts(eligible(whole_fleet))) == 1
    result, whole = compaction(hosts), compaction(whole_fleet)
    best = brute_force(hosts)
    assert (result.hypervisors, result.optimal) == (whole.hypervisors, whole.optimal) == (best, True)
    assert result.lower_bound == best and result.eligible == whole.eligible - 1
    assert not result.unplaced and replay(hosts, result.assignment)


def test_each_zone_is_a_compaction_of_its_own() -> None:
    """Two zones of crowded hypervisors, each program stopped by its node limit: the fleet's answer
    is the zones' put together, each zone's kept hypervisors holding exactly its domains."""
    hosts = in_zones(crowded_fleet(0))
    result = compaction(hosts, time_limit_seconds=120.0, max_nodes=200)
    parts = zone_parts(eligible(hosts))
    answers = [compaction(part, time_limit_seconds=60.0, max_nodes=200) for part in parts]
    assert len(parts) == 2 and not result.time_limited
    assert result.hypervisors == sum(answer.hypervisors for answer in answers) == len(result.kept)
    assert result.lower_bound == sum(answer.lower_bound for answer in answers)
    assert result.optimal == all(answer.optimal for answer in answers)
    assert result.shapes == sum(answer.shapes for answer in answers)
    assert result.eligible == len(hosts)
    assert result.kept == tuple(h.name for h in hosts if any(h.name in answer.kept for answer in answers))
    for part, answer in zip(parts, answers, strict=True):
        names = {h.name for h in part}
        held = {domain: target for domain, target in result.assignment.items() if target in names}
        assert held == answer.assignment
        assert {domain.hypervisor for domain in held} <= names
    assert len(result.assignment) == sum(len(h.guests) for h in hosts)
    assert not result.unplaced and replay(hosts, result.assignment)


def test_a_domain_of_no_zone_on_a_hypervisor_in_a_zone_may_leave_it() -> None:
    """Every hypervisor is in a zone, but a domain held to none may go to the other zone: the
    fleet is not split."""
    hosts = [
        holding(replace(state("a", cpus=8, memory_gib=16), availability_zone="az1"), demand(1, 2)),
        holding(
            replace(state("b", cpus=8, memory_gib=16), availability_zone="az2"), demand(1, 2, zone="az2")
        ),
    ]
    assert len(zone_parts(hosts)) == 1
    result = compaction(hosts)
    assert (result.kept, result.optimal) == (("b",), True)


def test_zones_no_domain_is_held_to_are_no_part_of_the_program() -> None:
    """Hypervisors in zones, their domains in none: no filter reads the zones, so the answer is
    the one without them (the same types, the same program)."""
    hosts = crowded_fleet(1)
    apart = [replace(h, availability_zone=f"az{index % 2 + 1}") for index, h in enumerate(hosts)]
    assert compaction(apart, max_nodes=200) == compaction(hosts, max_nodes=200)


@pytest.mark.parametrize("seed", range(6))
def test_on_a_fleet_beyond_its_limits_no_domain_left_unplaced_fits_anywhere(seed: int) -> None:
    """Hypervisors holding more than they have (as one whose memory shrank, or overcommitted
    by hand): the validation leaves domains unplaced, and each of them fits on no hypervisor as
    the assignment leaves it (so none was given up on while one could still take it)."""
    rng = random.Random(seed)
    hosts = []
    for index in range(12):
        cpus, memory, disk = rng.choice(CROWDED_SIZES)
        hypervisor = state(f"h{index}", cpus=cpus, memory_gib=memory // 2, disk_gib=disk)
        wanted = [demand(*rng.choice(CROWDED_DOMAIN_SIZES)) for _ in range(rng.randint(3, 9))]
        hosts.append(holding(hypervisor, *wanted))
    result = compaction(hosts)
    assert result.unplaced, "the fleet was meant to be beyond its limits"
    assert replay(hosts, result.assignment)
    demands = {DomainRef(h.name, g.name): g.demand for h in hosts for g in h.guests}
    final: dict[str, HostState] = {}
    for hypervisor in hosts:
        name, current = hypervisor.name, hypervisor
        for domain in sorted(d for d, target in result.assignment.items() if target == name):
            current = current.consume(demands[domain])
        final[name] = current
    for domain in result.unplaced:
        request = FilterRequest.of(demands[domain])
        assert all(first_rejection(current, request) is not None for current in final.values()), domain
