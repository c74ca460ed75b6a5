"""The consolidation plan: which hypervisors live migrations could empty, and the moves.

Every plan is replayed move by move through tests/support/migrations.py, a check written from
Nova's and Placement's rules (capacities, both hypervisors holding a migrating domain, zones),
sharing no code with the planner. Hosts have allocation ratios of 1.0 and nothing reserved
(FLAT) unless a test says otherwise, so that a host's limit is its size.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.factories import GIB, domain, host, local_disk
from tests.support.fleets import DEFAULTS, FLAT, MULTIPLIERS, STACK
from tests.support.migrations import BrokenPlanError, replay_plan
from virtcap.model.packing.consolidation import (
    MAX_MOVES,
    ConsolidationOptionError,
    ConsolidationPlan,
    Move,
    consolidation_plan,
)
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, HostState, Multipliers, host_state

Domains = list[tuple[int, int]]
"""A host's domains: (vCPUs, GiB of memory) each."""


def hypervisor(
    name: str,
    domains: Domains,
    *,
    cpus: int = 16,
    memory_gib: int = 16,
    zone: str | None = None,
    up: bool = True,
    policy: HostPolicy = FLAT,
) -> HostState:
    """A host whose domains are named after it (so that names and UUIDs are the fleet's own)."""
    facts = host(
        cpus=cpus,
        memory=memory_gib * GIB,
        disk=1000 * GIB,
        domains=tuple(
            domain(f"{name}-d{n}", vcpus=vcpus, memory=memory * GIB, disks=(local_disk(10 * GIB),))
            for n, (vcpus, memory) in enumerate(domains)
        ),
    )
    return host_state(name, facts, policy, up=up, availability_zone=zone)


def checked(
    states: list[HostState],
    multipliers: Multipliers = SPREAD,
    **options: object,
) -> ConsolidationPlan:
    plan = consolidation_plan(states, multipliers, **options)  # type: ignore[arg-type]
    replay_plan(
        states,
        plan,
        exclude=options.get("exclude", frozenset()),  # type: ignore[arg-type]
        availability_zone=options.get("availability_zone"),  # type: ignore[arg-type]
        max_moves=options.get("max_moves"),  # type: ignore[arg-type]
    )
    return plan


def test_an_obvious_plan_empties_the_small_hosts_into_the_big_one() -> None:
    # a holds 4 GiB, b 6 GiB in two domains, c 4 GiB, each of 16: b takes a's and c's domains
    # (14 GiB in all), two moves, where emptying b would take two moves for one host
    states = [
        hypervisor("a", [(1, 4)]),
        hypervisor("b", [(1, 2), (1, 4)]),
        hypervisor("c", [(2, 4)]),
    ]
    plan = checked(states, STACK)
    assert plan.hypervisors_before == 3
    assert plan.hypervisors_after == 1
    # fewest and smallest domains first: a, then c (as many domains, more vCPUs)
    assert plan.emptied == ("a", "c")
    assert plan.unmovable == ()
    # emptied together, the larger domain first, as an evacuation
    assert [(m.domain, m.name, m.source, m.destination) for m in plan.moves] == [
        ("uuid-c-d0", "c-d0", "c", "b"),
        ("uuid-a-d0", "a-d0", "a", "b"),
    ]
    assert plan.moves[1].resources[Resource.MEMORY] == 4 * GIB


def test_fewer_moves_win_among_plans_emptying_as_many() -> None:
    # "one" (12 GiB) or "three" (3 x 4 GiB) could be emptied into "big" (2 of 24 GiB used), not
    # both; "three" could also be emptied into nothing else ("one" has 4 GiB free)
    states = [
        hypervisor("big", [(1, 1), (1, 1)], memory_gib=24),
        hypervisor("one", [(2, 12)]),
        hypervisor("three", [(1, 4), (1, 4), (1, 4)]),
    ]
    plan = checked(states, STACK)
    assert plan.emptied == ("one",)
    assert [move.name for move in plan.moves] == ["one-d0"]


def test_a_domain_with_no_room_elsewhere_is_unmovable_with_the_schedulers_reason() -> None:
    # "huge" holds 14 GiB: the others have 12 and 10 GiB free; "small" fits on "huge"
    states = [
        hypervisor("huge", [(1, 14)]),
        hypervisor("mid", [(1, 4)]),
        hypervisor("small", [(1, 6)]),
    ]
    plan = checked(states, SPREAD)
    assert plan.hypervisors_after == 2
    assert [(u.domain, u.name) for u in plan.unmovable] == [("uuid-huge-d0", "huge-d0")]
    (unmovable,) = plan.unmovable
    assert unmovable.source == "huge"
    assert "Placement" in unmovable.reason
    assert plan.as_json()["unmovable"] == [
        {"domain": "uuid-huge-d0", "name": "huge-d0", "from": "huge", "reason": unmovable.reason}
    ]


def test_no_move_relies_on_room_its_own_source_frees() -> None:
    # a and b hold 10 GiB each on 16: a swap would need the room the other frees; neither
    # domain fits beside the other, so nothing moves (a plan moving both would be refused)
    states = [hypervisor("a", [(1, 10)]), hypervisor("b", [(1, 10)])]
    plan = checked(states)
    assert plan.moves == ()
    assert plan.emptied == ()
    assert plan.hypervisors_after == 2


def test_the_checker_refuses_a_move_that_relies_on_room_freed_later() -> None:
    # c can take b's 8 GiB and then a's 8 GiB only once b's left it; the chain a -> b, b -> c
    # is refused in this order (b still holds its own while a's arrives)...
    states = [
        hypervisor("a", [(1, 8)]),
        hypervisor("b", [(1, 10)]),
        hypervisor("c", [(1, 6)]),
    ]
    a_to_b = Move(
        "uuid-a-d0", "a-d0", "a", "b", {Resource.VCPU: 1, Resource.MEMORY: 8 * GIB, Resource.DISK: 10 * GIB}
    )
    b_to_c = Move(
        "uuid-b-d0", "b-d0", "b", "c", {Resource.VCPU: 1, Resource.MEMORY: 10 * GIB, Resource.DISK: 10 * GIB}
    )
    relying = ConsolidationPlan(3, 1, ("a", "b"), (a_to_b, b_to_c), ())
    with pytest.raises(BrokenPlanError, match="MEMORY_MB"):
        replay_plan(states, relying)
    # ... and a plan that moves a domain off a hypervisor it keeps, or leaves one behind
    with pytest.raises(BrokenPlanError, match="does not empty"):
        replay_plan(states, ConsolidationPlan(3, 2, ("a",), (b_to_c,), ()))
    with pytest.raises(BrokenPlanError, match="still holds"):
        replay_plan(states, ConsolidationPlan(3, 2, ("b",), (), ()))
    over = replace(
        b_to_c, source="a", domain="uuid-a-d0", name="a-d0", destination="b", resources=a_to_b.resources
    )
    with pytest.raises(BrokenPlanError, match=r"MEMORY_MB 10240 \+ 8192 > 16384"):
        replay_plan(states, ConsolidationPlan(3, 2, ("a",), (over,), ()))


def test_the_checker_refuses_a_deliberately_broken_plan() -> None:
    states = [
        hypervisor("a", [(1, 4)]),
        hypervisor("b", [(1, 2), (1, 4)]),
        hypervisor("c", [(2, 4)], zone=None),
    ]
    plan = checked(states, STACK)
    assert plan.moves
    # the same plan with one domain's memory made too large for where it goes
    broken_move = replace(plan.moves[0], resources={**plan.moves[0].resources, Resource.MEMORY: 15 * GIB})
    broken = replace(plan, moves=(broken_move, *plan.moves[1:]))
    with pytest.raises(BrokenPlanError, match="resources"):
        replay_plan(states, broken)
    # the same moves to a destination with too little room
    full = [states[0], hypervisor("b", [(1, 2), (1, 4), (1, 9)]), states[2]]
    with pytest.raises(BrokenPlanError, match="MEMORY_MB"):
        replay_plan(full, plan)
    # moves dropped: the emptied hosts still hold domains
    with pytest.raises(BrokenPlanError, match="still holds"):
        replay_plan(states, replace(plan, moves=plan.moves[:-1]))


def test_domains_stay_in_their_zone_and_a_zone_can_be_asked_for() -> None:
    # az1's two hosts can be merged; az2's lone domain cannot go to az1 whatever its room
    states = [
        hypervisor("a1", [(1, 4)], zone="az1"),
        hypervisor("b1", [(1, 4)], zone="az1"),
        hypervisor("a2", [(1, 2)], zone="az2"),
        hypervisor("b2", [(1, 15)], zone="az2"),
    ]
    plan = checked(states, STACK)
    assert len(plan.emptied) == 1
    assert plan.emptied[0] in {"a1", "b1"}
    # neither of az2's domains fits beside the other
    assert sorted(u.source for u in plan.unmovable) == ["a2", "b2"]
    zoned = checked(states, STACK, availability_zone="az2")
    assert zoned.hypervisors_before == 2
    assert zoned.emptied == ()
    only_az1 = checked(states, STACK, availability_zone="az1")
    assert only_az1.hypervisors_before == 2
    assert only_az1.hypervisors_after == 1


def test_excluded_hosts_are_neither_emptied_nor_filled() -> None:
    states = [
        hypervisor("a", [(1, 4)]),
        hypervisor("b", [(1, 4)]),
        hypervisor("c", [(1, 4)]),
    ]
    plan = checked(states, STACK, exclude=frozenset({"c"}))
    assert plan.emptied == ("a",)
    assert {move.destination for move in plan.moves} == {"b"}
    # a and b excluded: c has nowhere to go
    none = checked(states, STACK, exclude=frozenset({"a", "b"}))
    assert none.emptied == ()
    assert [u.source for u in none.unmovable] == ["c"]


def test_keep_free_empties_fewer_and_max_moves_stops_before_exceeding() -> None:
    # five hosts of 2 GiB each, ten small domains over five hosts of 16 GiB: four can be emptied
    states = [hypervisor(f"h{n}", [(1, 1)] * (n + 1)) for n in range(5)]
    full = checked(states, STACK)
    assert full.hypervisors_after == 1
    assert full.emptied == ("h0", "h1", "h2", "h3")
    kept = checked(states, STACK, keep_free=1)
    assert kept.emptied == ("h0", "h1", "h2")
    assert len(kept.moves) == 1 + 2 + 3
    assert checked(states, STACK, keep_free=5).emptied == ()
    # h0 (1 move), h1 (2), h2 (3): 6 moves; a seventh would start h3 (4 more)
    budget = checked(states, STACK, max_moves=9)
    assert budget.emptied == ("h0", "h1", "h2")
    assert len(budget.moves) == 6
    assert checked(states, STACK, max_moves=0).moves == ()
    # the compaction's count reached: the plan stops there
    assert checked(states, STACK, target=3).emptied == ("h0", "h1")


def test_hosts_down_stale_or_in_maintenance_are_left_alone() -> None:
    down = hypervisor("down", [(1, 2)], up=False)
    kept = hypervisor("kept", [(1, 2)])
    serviced = replace(
        hypervisor("serviced", [(1, 2)]),
        capacity=replace(hypervisor("serviced", [(1, 2)]).capacity, maintenance="firmware"),
    )
    small = hypervisor("small", [(1, 2)])
    plan = checked([down, kept, serviced, small], STACK)
    assert plan.hypervisors_before == 2
    assert plan.emptied in (("kept",), ("small",))
    assert {move.destination for move in plan.moves} <= {"kept", "small"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"exclude": frozenset({"nowhere"})}, "nowhere"),
        ({"availability_zone": "az9"}, "az9"),
        ({"max_moves": -1}, "max_moves"),
        ({"max_moves": MAX_MOVES + 1}, "max_moves"),
        ({"keep_free": -1}, "keep_free"),
        ({"keep_free": 4}, "keep_free"),
        ({"target": -2}, "target"),
        ({"time_limit_seconds": 0.0}, "time_limit_seconds"),
    ],
)
def test_bad_options_raise_a_clear_value_error(options: dict[str, object], message: str) -> None:
    states = [
        hypervisor("a", [(1, 4)], zone="az1"),
        hypervisor("b", [(1, 4)], zone="az1"),
        hypervisor("c", []),
    ]
    with pytest.raises(ConsolidationOptionError, match=message) as raised:
        consolidation_plan(states, SPREAD, **options)  # type: ignore[arg-type]
    assert isinstance(raised.value, ValueError)


def test_the_json_answer_has_the_issues_shape() -> None:
    states = [hypervisor("a", [(1, 4)]), hypervisor("b", [(2, 4)])]
    answer = checked(states, STACK).as_json()
    assert set(answer) == {
        "hypervisors_before",
        "hypervisors_after",
        "emptied",
        "moves",
        "unmovable",
        "complete",
    }
    assert answer["moves"] == [
        {
            "domain": "uuid-a-d0",
            "name": "a-d0",
            "from": "a",
            "to": "b",
            "resources": {"vcpu": 1, "memory": 4 * GIB, "disk": 10 * GIB},
        }
    ]


# random small fleets: every plan replayed through the checker

ZONES = st.sampled_from([None, None, "az1", "az2"])
HOSTS = st.lists(
    st.tuples(
        st.sampled_from([(8, 16), (16, 32), (4, 8), (16, 64)]),  # CPUs, GiB
        st.lists(st.sampled_from([(1, 1), (2, 4), (4, 8), (1, 2), (8, 16), (2, 12)]), max_size=5),
        ZONES,
        st.sampled_from([True, True, True, True, False]),
    ),
    min_size=1,
    max_size=9,
)


def random_fleet(
    hosts: list[tuple[tuple[int, int], Domains, str | None, bool]], policy: HostPolicy
) -> list[HostState]:
    return [
        hypervisor(f"h{index}", domains, cpus=cpus, memory_gib=memory, zone=zone, up=up, policy=policy)
        for index, ((cpus, memory), domains, zone, up) in enumerate(hosts)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hosts=HOSTS,
    multipliers=MULTIPLIERS,
    flat=st.booleans(),
    keep_free=st.integers(0, 2),
    max_moves=st.none() | st.integers(0, 12),
    data=st.data(),
)
def test_random_plans_replay_through_novas_rules(
    hosts: list[tuple[tuple[int, int], Domains, str | None, bool]],
    multipliers: Multipliers,
    flat: bool,
    keep_free: int,
    max_moves: int | None,
    data: st.DataObject,
) -> None:
    states = random_fleet(hosts, FLAT if flat else DEFAULTS)
    names = [state.name for state in states]
    exclude = frozenset(data.draw(st.lists(st.sampled_from(names), max_size=2)))
    zones = sorted({state.availability_zone for state in states if state.availability_zone is not None})
    zone = data.draw(st.sampled_from([None, *zones]))
    scoped = [state for state in states if zone is None or state.availability_zone == zone]
    keep_free = min(keep_free, len(scoped))
    options = {"keep_free": keep_free, "max_moves": max_moves, "availability_zone": zone, "exclude": exclude}
    plan = checked(states, multipliers, **options)
    unbounded = checked(states, multipliers, availability_zone=zone, exclude=exclude)
    # keep_free and max_moves only take hypervisors off the end of the plan
    assert len(plan.emptied) <= max(len(unbounded.emptied) - keep_free, 0)
    assert plan.emptied == unbounded.emptied[: len(plan.emptied)]


def test_seeded_larger_fleets_replay_through_novas_rules() -> None:
    rng = random.Random(27)
    for _ in range(5):
        states = []
        for index in range(40):
            domains = [rng.choice([(1, 1), (2, 4), (4, 8), (2, 2)]) for _ in range(rng.randint(0, 6))]
            zone = rng.choice([None, "az1", "az2"])
            states.append(hypervisor(f"h{index:02d}", domains, memory_gib=rng.choice([16, 32]), zone=zone))
        for multipliers in (SPREAD, STACK):
            plan = checked(states, multipliers)
            assert plan.hypervisors_after < plan.hypervisors_before
