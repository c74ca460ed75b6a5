"""The configuration bound (model/packing/configurations.py): never above the optimum the brute
force finds, at any round of its search; as strong as the optimum where the sum of a class is not
(the waste each hypervisor is left with); and, through it, a compaction proven without the
per-hypervisor program, and one brought up to date after a domain stopped."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable

import pytest

from tests.model.test_compaction import brute_force, demand, filled, holding, replay
from tests.model.test_compaction_update import stopped
from tests.support.fleets import state
from virtcap.model.packing.compaction import compaction, lower_bound
from virtcap.model.packing.compaction_update import compaction_update
from virtcap.model.packing.configurations import Item, Kind, priced_bound
from virtcap.model.packing.part_bound import Certificate
from virtcap.model.resources import Resource
from virtcap.model.scheduler import HostState

MEMORY = Resource.MEMORY


def bound(items: list[Item], kinds: list[Kind], **options: int) -> float:
    return priced_bound(items, kinds, deadline=time.perf_counter() + 60, **options).value


def test_the_waste_each_hypervisor_is_left_with_counts() -> None:
    """Three domains of 6 on hypervisors of 10: the class adds up to 2 hypervisors, but no
    hypervisor holds two of them."""
    items = [Item({MEMORY: 6}, 3)]
    kinds = [Kind({MEMORY: 10}, [10], copies=5)]
    assert math.ceil(bound(items, kinds) - 1e-6) == 3


def test_shapes_that_pair_up_are_priced_together() -> None:
    """Domains of 6 and of 4 pair up on hypervisors of 10 (and two of 4 share one): 4 of each
    need 4 hypervisors, which only a configuration holding both shows."""
    items = [Item({MEMORY: 6}, 4), Item({MEMORY: 4}, 4)]
    kinds = [Kind({MEMORY: 10}, [10, 10], copies=8)]
    assert math.ceil(bound(items, kinds) - 1e-6) == 4
    # one round prices only the configurations of one shape alone: still a bound, and a weaker one
    assert bound(items, kinds, max_rounds=1) <= bound(items, kinds)


def test_the_count_in_a_row_and_the_kept_hypervisors_count() -> None:
    """A hypervisor takes two of the shape in a row whatever its room; one of the kind must be
    used (it holds a domain no other takes)."""
    items = [Item({MEMORY: 1}, 6)]
    assert math.ceil(bound(items, [Kind({MEMORY: 10}, [2], copies=5)]) - 1e-6) == 3
    assert math.ceil(bound(items, [Kind({MEMORY: 10}, [10], copies=5, least=2)]) - 1e-6) == 2


def test_it_stops_once_it_proves_enough() -> None:
    items = [Item({MEMORY: 6}, 40), Item({MEMORY: 4}, 40), Item({MEMORY: 3}, 30)]
    kinds = [Kind({MEMORY: 10}, [10, 10, 10], copies=100)]
    full = bound(items, kinds)
    early = priced_bound(items, kinds, deadline=time.perf_counter() + 60, enough=full / 2).value
    assert full / 2 < early <= full


@pytest.mark.parametrize("seed", range(60))
def test_the_bound_is_never_above_the_optimum(seed: int) -> None:
    """At every round: the bound is sound whatever prices it was computed at."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 3))]
    items = [Item({MEMORY: size}, rng.randint(1, 4)) for size in sizes]
    rooms = [rng.randint(9, 14) for _ in range(rng.randint(1, 2))]
    kinds = [Kind({MEMORY: room}, [room] * len(items), copies=sum(i.count for i in items)) for room in rooms]
    best = _fewest(items, kinds)
    for rounds in (1, 2, 200):
        assert bound(items, kinds, max_rounds=rounds) <= best + 1e-9


def _fewest(items: list[Item], kinds: list[Kind]) -> int:
    """The fewest hypervisors holding every item (one class, any kind), by brute force."""
    sizes = sorted((item.needs[MEMORY] for item in items for _ in range(item.count)), reverse=True)
    for used in range(sum(kind.copies for kind in kinds) + 1):
        for chosen in _choices(kinds, used):
            if _fits(sizes, chosen, 0):
                return used
    raise AssertionError("the items fit on no hypervisors: the test built them wrong")


def _choices(kinds: list[Kind], used: int) -> list[list[int]]:
    """Each way to use `used` hypervisors of the kinds, as their rooms (kinds of one class)."""
    if not kinds:
        return [[]] if used == 0 else []
    first, rest = kinds[0], kinds[1:]
    return [
        [first.free[MEMORY]] * taken + others
        for taken in range(min(used, first.copies) + 1)
        for others in _choices(rest, used - taken)
    ]


def _fits(sizes: list[int], rooms: list[int], at: int) -> bool:
    if at == len(sizes):
        return True
    tried: set[int] = set()
    for index, room in enumerate(rooms):
        if room >= sizes[at] and room not in tried:
            tried.add(room)
            rooms[index] -= sizes[at]
            if _fits(sizes, rooms, at + 1):
                rooms[index] += sizes[at]
                return True
            rooms[index] += sizes[at]
    return False


def awkward_fleet(seed: int) -> list[HostState]:
    """Up to 6 hypervisors of 10 GiB, each with up to 3 domains of 3, 4, 6 or 7 GiB: sizes that
    leave each hypervisor room no domain fills, so that the sum of memory and the program added up
    over identical hypervisors fall short of the optimum on some of these fleets."""
    rng = random.Random(seed)
    hosts = []
    for index in range(rng.randint(3, 6)):
        wanted = (demand(1, rng.choice((3, 4, 6, 7))) for _ in range(rng.randint(0, 3)))
        hosts.append(filled(state(f"h{index}", cpus=16, memory_gib=10), wanted))
    return hosts


def test_on_fleets_that_waste_room_it_is_the_optimum() -> None:
    """Never above the brute force's optimum (sound), and reaching it on every one of these
    fleets: without the configurations, the bound falls short on several."""
    for seed in range(40):
        hosts = awkward_fleet(seed)
        assert lower_bound(hosts).value == brute_force(hosts), seed


def sixes(count: int, hypervisors: int) -> list[HostState]:
    """Hypervisors of 10 GiB taking domains of 6 GiB, one on each of the first `count`."""
    return [
        holding(state(f"h{n}", cpus=8, memory_gib=10), *([demand(1, 6)] if n < count else []))
        for n in range(hypervisors)
    ]


def test_the_program_is_not_needed_where_the_configurations_prove_the_packing() -> None:
    hosts = sixes(5, 6)
    result = compaction(hosts)
    assert (result.hypervisors, result.lower_bound, result.optimal) == (5, 5, True)
    assert result.relaxation_bound == 5  # the sum of memory says 3


def test_a_domain_stopped_is_brought_up_to_date_by_the_configurations() -> None:
    """The packing without the stopped domain uses one hypervisor fewer: the configuration bound
    proves it, where the sum of memory alone would leave it to a solve."""
    before = sixes(5, 6)
    previous = compaction(before)
    after = [holding(host) if host.name == "h2" else host for host in before]
    updated = compaction_update(previous, before, after)
    assert updated is not None and updated is not previous
    assert (updated.hypervisors, updated.lower_bound, updated.optimal) == (4, 4, True)
    assert updated.hypervisors == brute_force(after) and replay(after, updated.assignment)


def test_the_last_prices_bound_a_domain_stopped_without_pricing_again() -> None:
    """The same fleet: the part that lost a domain is bounded by the prices that proved it (the
    very certificate, carried), and an update of that update reads them again."""
    before = sixes(5, 6)
    previous = compaction(before)
    (part,) = previous.parts
    assert part.certificate is not None and part.value == 5
    after = [holding(host) if host.name == "h2" else host for host in before]
    updated = compaction_update(previous, before, after)
    assert updated is not None
    (bounded,) = updated.parts
    assert bounded.certificate is part.certificate and bounded.value == 4
    assert sum(bounded.counts.values()) == 4
    again = [holding(host) if host.name == "h3" else host for host in after]
    twice = compaction_update(updated, after, again)
    assert twice is not None and (twice.hypervisors, twice.lower_bound) == (3, 3)
    assert twice.parts[0].certificate is part.certificate


@pytest.mark.parametrize("seed", range(60))
def test_the_last_prices_never_bound_fewer_domains_above_the_optimum(seed: int) -> None:
    """Whatever domains stop (or shrink) on a fleet that wastes room, the bound the last prices
    prove for what is left is never above the brute force's optimum; where a count grows past its
    cap, they prove nothing."""
    rng = random.Random(seed)
    before = awkward_fleet(seed)
    for part in compaction(before).parts:
        if part.certificate is None:
            continue
        after = stopped(before, rng, rng.randint(1, 3))
        counts = lower_bound(after).parts[0].counts
        proven = part.certificate.bound(counts)
        assert proven is not None and proven <= brute_force(after), seed
        for key, cap in part.certificate.caps.items():
            assert part.certificate.bound({**counts, key: cap + 1}) is None


@pytest.mark.parametrize("seed", range(60))
def test_the_prices_of_any_round_bound_fewer_items(seed: int) -> None:
    """A round's prices and penalty (`priced_bound`) make its bound, and bound the same kinds
    with fewer of each item: never above the optimum then either."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 3))]
    items = [Item({MEMORY: size}, rng.randint(1, 4)) for size in sizes]
    rooms = [rng.randint(9, 14) for _ in range(rng.randint(1, 2))]
    kinds = [Kind({MEMORY: room}, [room] * len(items), copies=sum(i.count for i in items)) for room in rooms]
    for rounds in (1, 2, 200):
        priced = priced_bound(items, kinds, deadline=time.perf_counter() + 60, max_rounds=rounds)
        made = sum(price * item.count for price, item in zip(priced.prices, items, strict=True))
        assert priced.value == pytest.approx(made - priced.penalty)
        fewer = [Item(item.needs, rng.randint(0, item.count)) for item in items]
        prices: dict[Hashable, float] = {n: price for n, price in enumerate(priced.prices) if price > 0}
        proven = Certificate(prices, {}, priced.penalty).bound(dict(enumerate(i.count for i in fewer)))
        assert proven is not None and proven <= _fewest(fewer, kinds), (seed, rounds)
