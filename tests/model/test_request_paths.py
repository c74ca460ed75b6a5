"""The request loop's two paths give one answer: `schedule` takes the fast path
(model/scheduler/claims_request.py) for a demand whose fit the claims alone decide, and
`general_schedule` forces the general loop (every candidate filtered and weighed at every step).
Their results must be equal to the last bit: every step's host, weight, raw values and parts,
the rejections of the last instance tried, and the hosts' final states."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.factories import GIB
from tests.support.fleets import LARGER, MULTIPLIERS, STACK, larger_fleet, state
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import (
    SPREAD,
    HostState,
    Multipliers,
    ScheduleResult,
    general_schedule,
    request_hosts,
    schedule,
)
from virtcap.model.scheduler.claims_request import claims_decide

FLAVORS = st.sampled_from(
    [
        Demand({Resource.VCPU: 2, Resource.MEMORY: 8 * GIB, Resource.DISK: 40 * GIB}),
        Demand({Resource.VCPU: 4, Resource.MEMORY: 4 * GIB}),
        Demand({Resource.VCPU: 1, Resource.MEMORY: 16 * GIB, Resource.DISK: 10 * GIB}),
        Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 20 * GIB}),
        Demand({Resource.MEMORY: 3 * GIB}),
    ]
)


def assert_same(found: ScheduleResult, expected: ScheduleResult) -> None:
    assert found.fitted == expected.fitted
    assert found.steps == expected.steps
    # `==` of floats: -0.0 equals 0.0; the weights' bits are compared too
    assert [step.weighed.weight.hex() for step in found.steps] == [
        step.weighed.weight.hex() for step in expected.steps
    ]
    assert dict(found.rejections) == dict(expected.rejections)
    assert found.no_valid_host == expected.no_valid_host
    assert found.states == expected.states


def zoned(hosts: list[HostState], zones: list[str | None]) -> list[HostState]:
    return [replace(host, availability_zone=zones[index % len(zones)]) for index, host in enumerate(hosts)]


@settings(max_examples=300, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(
    LARGER,
    FLAVORS,
    MULTIPLIERS,
    st.integers(1, 40),
    st.sampled_from([[None], ["a", "b"], ["a", None]]),
    st.sampled_from([None, "a"]),
    st.lists(st.integers(0, 11), max_size=3),
    st.booleans(),
)
def test_the_fast_path_is_the_general_loop_to_the_bit(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    demand: Demand,
    multipliers: Multipliers,
    count: int,
    zones: list[str | None],
    zone: str | None,
    ignored: list[int],
    forced: bool,
) -> None:
    fleet = zoned(larger_fleet(hosts), zones)
    asked = replace(demand, availability_zone=zone)
    assert claims_decide(asked)
    ignore_hosts = [f"H{number}" for number in ignored]  # matched without regard to case
    force_hosts = [fleet[-1].name] if forced else []
    options = {"ignore_hosts": ignore_hosts, "force_hosts": force_hosts, "multipliers": multipliers}
    fast = schedule(fleet, asked, count, **options)  # type: ignore[arg-type]
    general = general_schedule(fleet, asked, count, **options)  # type: ignore[arg-type]
    event("placed" if general.placed else "not placed")
    assert_same(fast, general)


@settings(max_examples=100, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(LARGER, FLAVORS, MULTIPLIERS)
def test_a_request_for_as_many_as_fit_lands_where_the_general_loop_places_it(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    demand: Demand,
    multipliers: Multipliers,
) -> None:
    fleet = larger_fleet(hosts)
    found = request_hosts(fleet, demand, multipliers)
    general = general_schedule(fleet, demand, len(found) + 1, multipliers=multipliers)
    assert not general.placed
    assert tuple(step.host for step in general.steps) == found


def test_larger_random_fleets_agree_step_by_step() -> None:
    """Seeded fleets of 30 hosts of few shapes (ties broken by name only), requests that fill them."""
    shapes = [(8, 32, 200), (16, 64, 400), (4, 16, 100), (16, 32, 100), (32, 128, 80)]
    rng = random.Random(27)
    for _ in range(6):
        fleet = larger_fleet(
            [
                (
                    rng.choice(shapes),
                    [rng.choice([(1, 2, 20), (2, 4, 40), (4, 8, 80)]) for _ in range(rng.randrange(4))],
                    rng.random() > 0.1,
                )
                for _ in range(30)
            ]
        )
        demand = Demand({Resource.VCPU: rng.choice([1, 2, 4]), Resource.MEMORY: rng.choice([2, 4, 8]) * GIB})
        for multipliers in (SPREAD, STACK, Multipliers(ram=2.5, cpu=-1.0, disk=0.0)):
            fits = len(request_hosts(fleet, demand, multipliers))
            for count in (1, fits // 2 or 1, fits, fits + 1):
                assert_same(
                    schedule(fleet, demand, count, multipliers=multipliers),
                    general_schedule(fleet, demand, count, multipliers=multipliers),
                )


def test_a_full_host_weighed_ahead_of_the_last_one_chosen_is_refused_at_its_claim() -> None:
    # stacking: h0 (the smaller, weighing more) takes two and is full; the third goes to h1, and
    # h0, still weighed ahead of it, is refused at its claim, as the general loop finds it
    hosts = [state("h0", cpus=8, memory_gib=16), state("h1", cpus=8, memory_gib=32)]
    demand = Demand({Resource.VCPU: 1, Resource.MEMORY: 8 * GIB})
    fast = schedule(hosts, demand, 3, multipliers=STACK)
    assert fast.hosts == ("h0", "h0", "h1")
    assert set(fast.rejections) == {"h0"}
    assert_same(fast, general_schedule(hosts, demand, 3, multipliers=STACK))


def test_anti_affinity_and_cells_take_the_general_loop() -> None:
    hosts = [state("h0"), state("h1"), state("h2")]
    demand = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB})
    spread = schedule(hosts, demand, 3, anti_affinity=True)
    assert sorted(spread.hosts) == ["h0", "h1", "h2"]
    assert_same(spread, general_schedule(hosts, demand, 3, anti_affinity=True))
