"""Sellable headroom under a failover reserve (model/packing/sellable.py), checked through the
simulation: the instances placed by `schedule` itself, the tolerance by `fleet_tolerance` and by
the straightforward reference of tests/support/fleets.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.factories import GIB
from tests.support.fleets import LARGER, MULTIPLIERS, STACK, larger_fleet, reference_tolerated, state
from virtcap.model.host_fit import Demand
from virtcap.model.packing.sellable import (
    reserve_decisions,
    sellable_by_zone,
    sellable_count,
    sellable_instances,
)
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, Guest, HostState, Multipliers, fleet_tolerance, schedule

EIGHT_GIB = Demand({Resource.VCPU: 1, Resource.MEMORY: 8 * GIB})
"""Four fit a host of 32 GiB: small enough to count by hand."""


def empty_hosts(*names: str, zone: str | None = None) -> list[HostState]:
    """Hosts of 16 CPUs and 32 GiB (memory decides), nothing on them."""
    return [replace(state(name, cpus=16, memory_gib=32), availability_zone=zone) for name in names]


def placed(
    hosts: Sequence[HostState], demand: Demand, count: int, multipliers: Multipliers
) -> list[HostState] | None:
    """The fleet once one request of `count` instances is placed by `schedule`, each instance a
    guest of its host (kept in the host's zone, as a domain of it would be); None: they do not
    all fit."""
    result = schedule(hosts, demand, count, multipliers=multipliers)
    if not result.placed:
        return None
    on: dict[str, int] = {}
    for step in result.steps:
        on[step.host] = on.get(step.host, 0) + 1
    return [
        replace(
            host,
            guests=(
                *host.guests,
                *(
                    Guest(f"new-{host.name}-{n}", replace(demand, availability_zone=host.availability_zone))
                    for n in range(on.get(host.name, 0))
                ),
            ),
        )
        for host in result.states
    ]


def keeps(
    hosts: Sequence[HostState], demand: Demand, count: int, reserve: int, multipliers: Multipliers
) -> bool | None:
    """Whether `count` instances placed keep the fleet tolerating `reserve` failures, by
    `fleet_tolerance` and by the reference (which must agree); None: they do not fit."""
    after = placed(hosts, demand, count, multipliers)
    if after is None:
        return None
    tolerated = fleet_tolerance(after, multipliers=multipliers, bound=reserve).tolerated
    assert tolerated == reference_tolerated(after, reserve, multipliers)
    return tolerated >= reserve


def assert_sellable_is_the_edge(
    hosts: Sequence[HostState], demand: Demand, reserve: int, multipliers: Multipliers = SPREAD
) -> int:
    """`sellable_count`'s answer is what placing one by one gives: every count up to it keeps the
    tolerance placed through the simulation, and one more breaks it (or does not fit at all)."""
    sellable = sellable_count(hosts, demand, multipliers, reserve)
    if keeps(hosts, demand, 0, reserve, multipliers) is False:
        assert sellable == 0
        return sellable
    for count in range(sellable + 1):
        assert keeps(hosts, demand, count, reserve, multipliers) is True
    assert keeps(hosts, demand, sellable + 1, reserve, multipliers) in (False, None)
    return sellable


@pytest.mark.parametrize(("reserve", "expected"), [(0, 12), (1, 8), (2, 4)])
def test_three_hosts_sell_what_keeps_room_for_the_reserve(reserve: int, expected: int) -> None:
    # Spread lands the instances h0, h1, h2, h0...: with 8, h0 (3) goes to h1 (1 free) and h2
    # (2 free); with 9, 3 do not go into 1 + 1. Two lost: with 4, h0 (2) and h1 (1) go to h2
    # (3 free); with 5, 4 do not.
    hosts = empty_hosts("h0", "h1", "h2")
    assert assert_sellable_is_the_edge(hosts, EIGHT_GIB, reserve) == expected


def test_no_reserve_sells_every_instance_the_scheduler_places() -> None:
    hosts = empty_hosts("h0", "h1", "h2")
    sellable = sellable_count(hosts, EIGHT_GIB, SPREAD, 0)
    result = schedule(hosts, EIGHT_GIB, sellable + 1)
    assert (result.fitted, result.placed) == (sellable, False)


def test_a_reserve_above_the_fleet_sells_nothing() -> None:
    hosts = empty_hosts("h0", "h1", "h2")
    assert sellable_count(hosts, EIGHT_GIB, SPREAD, 4) == 0
    # three lost of three: an empty fleet loses them all (nothing to re-home), not one instance more
    assert assert_sellable_is_the_edge(hosts, EIGHT_GIB, 3) == 0
    assert sellable_instances(hosts, {"eight": EIGHT_GIB}, SPREAD, 16) == {"eight": 0}


def test_a_fleet_that_cannot_lose_a_host_now_sells_nothing() -> None:
    # h0 holds 4 (32 GiB), h1 3: h0's do not go into h1's 8 GiB
    crowded = placed(empty_hosts("h0", "h1"), EIGHT_GIB, 7, SPREAD)
    assert crowded is not None
    assert sellable_count(crowded, EIGHT_GIB, SPREAD, 1) == 0
    assert sellable_count(crowded, EIGHT_GIB, SPREAD, 0) == 1


def test_stacking_sells_by_the_same_rule() -> None:
    hosts = empty_hosts("h0", "h1", "h2")
    for reserve in (0, 1, 2):
        assert_sellable_is_the_edge(hosts, EIGHT_GIB, reserve, STACK)


def test_per_zone_failover_stays_in_the_zone() -> None:
    # zone a: the three hosts above (8 under one failure); zone b: two hosts, 4 (2 + 2: either
    # one's go to the other; 3 + 2 do not)
    zone_a = empty_hosts("a0", "a1", "a2", zone="a")
    zone_b = empty_hosts("b0", "b1", zone="b")
    hosts = [*zone_a, *zone_b, *empty_hosts("nowhere")]
    flavors = {"eight": EIGHT_GIB}
    assert sellable_by_zone(hosts, flavors, SPREAD, 1) == {("a", "eight"): 8, ("b", "eight"): 4}
    assert sellable_by_zone(hosts, flavors, SPREAD, 0) == {("a", "eight"): 12, ("b", "eight"): 8}
    for members, zone in ((zone_a, "a"), (zone_b, "b")):
        assert_sellable_is_the_edge(members, replace(EIGHT_GIB, availability_zone=zone), 1)
    # the fleet as a whole: each zone's domains stay in their zone when their host fails
    assert_sellable_is_the_edge(hosts, EIGHT_GIB, 1)


def test_each_flavor_is_sold_alone() -> None:
    hosts = empty_hosts("h0", "h1", "h2")
    sixteen = Demand({Resource.VCPU: 1, Resource.MEMORY: 16 * GIB})
    sold = sellable_instances(hosts, {"eight": EIGHT_GIB, "sixteen": sixteen}, SPREAD, 1)
    # sixteen: 2 per host; with 4 (2, 1, 1) h0's go to h1 and h2, with 5 (2, 2, 1) one does not
    assert sold == {"eight": 8, "sixteen": 4}


def test_a_negative_reserve_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        sellable_count(empty_hosts("h0"), EIGHT_GIB, SPREAD, -1)


FLAVORS = st.sampled_from(
    [
        Demand({Resource.VCPU: 2, Resource.MEMORY: 8 * GIB, Resource.DISK: 40 * GIB}),
        Demand({Resource.VCPU: 4, Resource.MEMORY: 4 * GIB}),
        Demand({Resource.VCPU: 1, Resource.MEMORY: 16 * GIB, Resource.DISK: 10 * GIB}),
    ]
)


@settings(max_examples=80, deadline=None)
@given(LARGER, FLAVORS, st.sampled_from([1, 2]), MULTIPLIERS)
def test_sellable_is_the_first_count_that_breaks_the_reserve_less_one(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    demand: Demand,
    reserve: int,
    multipliers: Multipliers,
) -> None:
    """Every count placed one by one, through `schedule` and the reference tolerance: the answer
    is the last before the first that breaks it (none broke: every one that fits), whatever the
    weighers (keeping the reserve is not monotone in the count with some of them)."""
    fleet = larger_fleet(hosts[:6])
    assert sellable_count(fleet, demand, multipliers, reserve) == first_break_less_one(
        fleet, demand, reserve, multipliers
    )


SMALL = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 10 * GIB})
"""Many of it fit each host: the lost host's evacuation moves more domains than there are
hosts, and the certificate's room test, not its count of untouched hosts, decides most counts."""

DENSE = st.lists(
    st.tuples(
        st.sampled_from([(16, 64, 400), (8, 32, 200)]),
        st.lists(st.sampled_from([(1, 2, 20), (2, 4, 40), (1, 2, 0), (4, 8, 10)]), max_size=10),
        st.just(True),
    ),
    min_size=2,
    max_size=5,
)


@settings(max_examples=30, deadline=None)
@given(DENSE, st.sampled_from([1, 2]), MULTIPLIERS)
def test_dense_fleets_sell_what_placing_one_by_one_keeps(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    reserve: int,
    multipliers: Multipliers,
) -> None:
    """Small instances on few hosts, each count placed through `schedule` and checked by the
    reference tolerance: the answer is the last before the first that breaks the reserve."""
    fleet = larger_fleet(hosts)
    assert sellable_count(fleet, SMALL, multipliers, reserve) == first_break_less_one(
        fleet, SMALL, reserve, multipliers
    )


def first_break_less_one(
    hosts: Sequence[HostState], demand: Demand, reserve: int, multipliers: Multipliers
) -> int:
    count = 0
    while True:
        kept = keeps(hosts, demand, count, reserve, multipliers)
        if kept is None:
            return count - 1
        if not kept:
            return max(count - 1, 0)
        count += 1


def test_keeping_the_reserve_is_not_monotone_in_the_count_and_the_answer_is_one_by_one() -> None:
    """Stacking, found by hypothesis: one instance placed breaks the reserve, two to four keep it.
    Placing one by one stops before the first: the answer is 0, not the edge at 4."""
    fleet = larger_fleet([((8, 32, 200), [(1, 2, 20)], True), ((16, 64, 400), [(8, 16, 160)], True)])
    demand = Demand({Resource.VCPU: 2, Resource.MEMORY: 8 * GIB, Resource.DISK: 40 * GIB})
    stacking = Multipliers(ram=-1.0, cpu=-1.0, disk=-2.0)
    assert [keeps(fleet, demand, count, 1, stacking) for count in range(6)] == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]
    assert first_break_less_one(fleet, demand, 1, stacking) == 0
    assert sellable_count(fleet, demand, stacking, 1) == 0


def assert_each_decision_holds(
    hosts: Sequence[HostState], demand: Demand, reserve: int, multipliers: Multipliers
) -> list[str]:
    """Every count `reserve_decisions` decides, whichever way, is what placing through `schedule`
    and the reference tolerance give; and every count it skips as within a certificate's slack is
    one the certificate, evaluated at every count, shows itself (the slack never reaches a count
    the certificate would not cover, whether or not that count keeps the reserve)."""
    if reserve > len(hosts):
        assert sellable_count(hosts, demand, multipliers, reserve) == 0
        return []
    decisions = list(reserve_decisions(hosts, demand, multipliers, reserve))
    for decision in decisions:
        assert keeps(hosts, demand, decision.instances, reserve, multipliers) is decision.kept
    every = {
        d.instances: d.by for d in reserve_decisions(hosts, demand, multipliers, reserve, skip_ahead=False)
    }
    assert "slack" not in every.values()
    for decision in decisions:
        if decision.by == "slack":
            assert every[decision.instances] == "certificate", decision
    return [decision.by for decision in decisions]


@settings(max_examples=40, deadline=None)
@given(DENSE, st.sampled_from([1, 2]), MULTIPLIERS)
def test_each_count_is_decided_as_placing_it_decides(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    reserve: int,
    multipliers: Multipliers,
) -> None:
    """The certificate, its slack, the evacuations up to the sold instances with the rest shown
    placed, and the whole evacuations: each count's answer, on dense fleets (where the room and
    slot tests decide most counts)."""
    assert_each_decision_holds(larger_fleet(hosts), SMALL, reserve, multipliers)


@settings(max_examples=40, deadline=None)
@given(LARGER, FLAVORS, st.sampled_from([1, 2]), MULTIPLIERS)
def test_each_count_is_decided_as_placing_it_decides_on_larger_fleets(
    hosts: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    demand: Demand,
    reserve: int,
    multipliers: Multipliers,
) -> None:
    assert_each_decision_holds(larger_fleet(hosts[:6]), demand, reserve, multipliers)


def test_the_counts_are_decided_every_way() -> None:
    """Three empty hosts (4 instances each): the certificate and its slack first; with 8, h0's 3
    go to h1 (1 free) and h2 (2 free): no host is left untouched for the last, so the
    evacuation decides, its sold instances shown placed by their slots; 9 break it. On a dense
    fleet, under one loss and two, the slots show most of the last counts."""
    by = assert_each_decision_holds(empty_hosts("h0", "h1", "h2"), EIGHT_GIB, 1, SPREAD)
    assert by[-2:] == ["rest", "evacuation"]
    assert {"certificate", "slack"} <= set(by)
    dense = larger_fleet(
        [
            ((16, 64, 400), [(1, 2, 20), (2, 4, 40)], True),
            ((16, 64, 400), [(4, 8, 10)], True),
            ((8, 32, 200), [], True),
            ((16, 64, 400), [(1, 2, 0)], True),
        ]
    )
    for reserve in (1, 2):
        by = assert_each_decision_holds(dense, SMALL, reserve, SPREAD)
        assert by[-1] == "evacuation"
        assert by.count("rest") > 1


def test_a_reserve_decided_count_by_count_is_at_least_one_host_of_the_fleet() -> None:
    with pytest.raises(ValueError, match="reserve of 1 to 3"):
        next(reserve_decisions(empty_hosts("h0", "h1", "h2"), EIGHT_GIB, SPREAD, 0))
