"""A request for as many as fit followed from the last one (model/scheduler/claims_replay.py):
the same steps to the bit as taking them all again, on random fleets with hosts changed."""

from __future__ import annotations

import random
from datetime import timedelta

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.model.test_request_paths import FLAVORS
from tests.support.factories import GIB
from tests.support.fleets import LARGER, MULTIPLIERS, STACK, larger_fleet
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, CandidateMemo, HostState, Multipliers, request_hosts
from virtcap.model.scheduler.claims_replay import ClaimsTrace, Placements, replayed_request, traced_request
from virtcap.model.scheduler.fleet_index import FleetIndex
from virtcap.model.scheduler.host_states import consume_in_turn
from virtcap.model.scheduler.request import _candidates

Spec = list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]]


def trace(
    hosts: list[HostState], demand: Demand, multipliers: Multipliers, last: ClaimsTrace | None = None
) -> ClaimsTrace:
    memo = CandidateMemo()
    _, request, _, candidates = _candidates(hosts, demand, memo)
    fleet = FleetIndex(hosts, memo)
    numbers = [fleet.index[name] for name in candidates]
    if last is None:
        return traced_request(fleet, numbers, request.demand, multipliers)
    return replayed_request(fleet, numbers, request.demand, multipliers, last)


def bits(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=np.float64).tobytes()


def assert_same(found: ClaimsTrace, expected: ClaimsTrace) -> None:
    assert found.candidates == expected.candidates
    assert found.chosen.tolist() == expected.chosen.tolist()
    assert bits(found.weights) == bits(expected.weights)
    assert found.top_steps.tolist() == expected.top_steps.tolist()
    assert bits(found.top_values) == bits(expected.top_values)
    assert found.fitted.tolist() == expected.fitted.tolist()
    assert found.offsets.tolist() == expected.offsets.tolist()
    assert bits(found.values) == bits(expected.values)


def changed(hosts: list[HostState], spec: Spec, number: int, how: int, rng: random.Random) -> list[HostState]:
    """The fleet with one host changed (the others the same objects): a domain started, one
    stopped, a claim, down, or another shape."""
    shape, domains, up = spec[number]
    if how == 0:
        domains = [*domains, rng.choice([(1, 2, 20), (2, 4, 40), (4, 8, 80)])]
    elif how == 1 and domains:
        domains = domains[1:]
    elif how == 2:
        found = list(hosts)
        found[number] = consume_in_turn(
            hosts[number], (Demand({Resource.VCPU: 2, Resource.MEMORY: 4 * GIB}),)
        )
        return found
    elif how == 3:
        up = not up
    else:
        shape = rng.choice([(8, 32, 200), (16, 64, 400), (4, 16, 100)])
    new = [*spec[:number], (shape, domains, up), *spec[number + 1 :]]
    found = list(hosts)
    found[number] = larger_fleet(new)[number]
    spec[number] = (shape, domains, up)
    return found


@settings(max_examples=100, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    FLAVORS,
    MULTIPLIERS,
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 4)), min_size=1, max_size=3),
    st.randoms(),
)
def test_a_request_followed_from_the_last_is_the_request_taken_again(
    spec: Spec,
    demand: Demand,
    multipliers: Multipliers,
    changes: list[tuple[int, int]],
    rng: random.Random,
) -> None:
    hosts = larger_fleet(spec)
    try:
        last = trace(hosts, demand, multipliers)
    except ValueError:
        return  # a host takes instances without end: no request of as many as fit
    assert [hosts_by_name for hosts_by_name in last_names(last)] == list(
        request_hosts(hosts, demand, multipliers)
    )
    for number, how in changes:
        hosts = changed(hosts, spec, number % len(hosts), how, rng)
        try:
            expected = trace(hosts, demand, multipliers)
        except ValueError:
            return
        found = trace(hosts, demand, multipliers, last)
        assert_same(found, expected)
        last = found


def last_names(found: ClaimsTrace) -> list[str]:
    return [found.states[number].name for number in found.hosts]


def test_a_larger_fleet_changed_again_and_again_copies_most_steps() -> None:
    """Seeded fleets of 80 hosts, each change followed from the last trace (itself followed):
    the same steps as taken again, most of them copied from the runs of the last where the
    candidates are the same (a host that leaves or joins them starts the request again)."""
    rng = random.Random(29)
    shapes = [(8, 32, 200), (16, 64, 400), (4, 16, 100), (16, 32, 100), (32, 128, 800)]
    spec: Spec = [
        (
            rng.choice(shapes),
            [rng.choice([(1, 2, 20), (2, 4, 40), (4, 8, 80)]) for _ in range(rng.randrange(5))],
            True,
        )
        for _ in range(80)
    ]
    small = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 20 * GIB})
    followed = 0
    for multipliers in (SPREAD, STACK, Multipliers(ram=2.5, cpu=-1.0, disk=0.0)):
        hosts = larger_fleet(spec)
        last = trace(hosts, small, multipliers)
        for how in (0, 1, 2, 4, 0, 1):
            hosts = changed(hosts, spec, rng.randrange(80), how, rng)
            found = trace(hosts, small, multipliers, last)
            expected = trace(hosts, small, multipliers)
            assert_same(found, expected)
            if expected.candidates == last.candidates:
                followed += 1
                assert found.copied >= 0.8 * len(found.chosen)
            else:
                assert found.copied == 0
            last = found
    assert followed >= 12


def test_hosts_tied_at_a_weighers_largest_value_one_of_them_changed() -> None:
    """Empty hosts of one shape hold the weighers' largest values together: where one of them
    changed, choosing another lowers the largest values here and not in the last request (which
    the changed one held still), so the weights change at a step where the last request's did
    not. Seeded small fleets, mostly empty hosts of few shapes, one domain started."""
    small = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 20 * GIB})
    shapes = [(8, 32, 200), (16, 64, 400), (16, 64, 100), (32, 64, 400)]
    for seed in range(60):
        rng = random.Random(seed)
        count = rng.randrange(3, 12)
        spec: Spec = [
            (rng.choice(shapes), [] if rng.random() < 0.6 else [rng.choice([(1, 2, 20), (2, 4, 40)])], True)
            for _ in range(count)
        ]
        multipliers = rng.choice(
            [SPREAD, Multipliers(ram=2.5, cpu=-1.0, disk=0.0), Multipliers(disk=1.0, cpu=0.0)]
        )
        hosts = larger_fleet(spec)
        last = trace(hosts, small, multipliers)
        hosts = changed(hosts, spec, rng.randrange(count), 0, rng)
        assert_same(trace(hosts, small, multipliers, last), trace(hosts, small, multipliers))


def test_no_candidate_or_one_is_a_request_too() -> None:
    """No host fits the demand, or one does: a trace all the same (none or its steps), kept and
    followed by the next (taken again: one candidate weighs 0)."""
    hosts = larger_fleet([((4, 16, 100), [], True), ((8, 32, 200), [], True)])
    placements = Placements()
    for demand, steps in ((Demand({Resource.MEMORY: 64 * GIB}), 0), (Demand({Resource.MEMORY: 20 * GIB}), 1)):
        for _ in range(2):
            memo = CandidateMemo()
            _, request, _, candidates = _candidates(hosts, demand, memo)
            fleet = FleetIndex(hosts, memo)
            found = placements.follow(
                fleet, [fleet.index[name] for name in candidates], request.demand, SPREAD
            )
            assert len(found.chosen) == steps
            assert list(request_hosts(hosts, demand)) == [fleet.names[number] for number in found.hosts]
            assert found.copied == 0


def test_placements_follow_the_last_request_on_the_same_hosts() -> None:
    """The second request on the same hosts (one changed) is followed from the first; another
    demand, or other hosts, is not mistaken for it."""
    spec: Spec = [((16, 64, 400), [(2, 4, 40)] * (number % 3), True) for number in range(12)]
    hosts = larger_fleet(spec)
    small = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 20 * GIB})
    large = Demand({Resource.VCPU: 4, Resource.MEMORY: 8 * GIB, Resource.DISK: 80 * GIB})
    placements = Placements()

    def follow(fleet_hosts: list[HostState], demand: Demand) -> ClaimsTrace:
        memo = CandidateMemo()
        _, request, _, candidates = _candidates(fleet_hosts, demand, memo)
        fleet = FleetIndex(fleet_hosts, memo)
        return placements.follow(fleet, [fleet.index[name] for name in candidates], request.demand, SPREAD)

    assert follow(hosts, small).copied == 0
    assert follow(hosts, large).copied == 0
    assert follow(hosts[:-1], small).copied == 0  # other hosts
    rng = random.Random(3)
    changed_hosts = changed(hosts, spec, 4, 0, rng)
    found = follow(changed_hosts, small)
    assert found.copied > len(found.chosen) // 2
    assert_same(found, trace(changed_hosts, small, SPREAD))
