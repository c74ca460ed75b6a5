"""A compaction brought up to date after domains started, stopped or were resized
(model/packing/compaction_update.py): where it gives an answer, it is the optimum a new solve
finds (the brute force's), with a packing that replays through the filters; everything it cannot
show so is left to a solve."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.model.test_compaction import DOMAIN_SIZES, brute_force, demand, random_fleet, replay
from virtcap.model.packing.compaction import Compaction, compaction
from virtcap.model.packing.compaction_update import compaction_update
from virtcap.model.resources import GIB, Resource
from virtcap.model.scheduler import Guest, HostState
from virtcap.model.scheduler.filters import FilterRequest, first_rejection


def started(hosts: list[HostState], rng: random.Random, count: int) -> list[HostState]:
    """Up to `count` domains more, each on a hypervisor up whose filters pass it as it is."""
    hosts = list(hosts)
    for number in range(count):
        index = rng.randrange(len(hosts))
        hypervisor = hosts[index]
        vcpus, memory, disk = rng.choice(DOMAIN_SIZES)
        wanted = demand(vcpus, memory, disk, hypervisor.availability_zone)
        current = hypervisor
        for guest in hypervisor.guests:
            current = current.consume(guest.demand)
        if hypervisor.up and first_rejection(current, FilterRequest.of(wanted)) is None:
            hosts[index] = replace(hypervisor, guests=(*hypervisor.guests, Guest(f"new-{number}", wanted)))
    return hosts


def stopped(hosts: list[HostState], rng: random.Random, count: int) -> list[HostState]:
    """Up to `count` domains fewer, each picked at random among those of hypervisors up; with
    a chance in three, a domain resized (to one vCPU and 1 GiB less memory, as an operator
    shrinking it would) rather than stopped."""
    hosts = list(hosts)
    for _ in range(count):
        holding = [i for i, host in enumerate(hosts) if host.up and host.guests]
        if not holding:
            break
        index = rng.choice(holding)
        hypervisor = hosts[index]
        guests = list(hypervisor.guests)
        gone = guests.pop(rng.randrange(len(guests)))
        request = gone.demand.request
        if rng.random() < 1 / 3 and request[Resource.VCPU] > 1 and request[Resource.MEMORY] > GIB:
            smaller = {**request, Resource.VCPU: request[Resource.VCPU] - 1}
            smaller[Resource.MEMORY] -= GIB
            guests.append(replace(gone, demand=replace(gone.demand, request=smaller)))
        hosts[index] = replace(hypervisor, guests=tuple(guests))
    return hosts


@pytest.mark.parametrize("change", [started, stopped])
@pytest.mark.parametrize("seed", range(60))
def test_an_update_is_the_optimum_a_solve_finds(
    seed: int, change: Callable[[list[HostState], random.Random, int], list[HostState]]
) -> None:
    rng = random.Random(seed)
    before = random_fleet(seed)
    previous = compaction(before)
    after = change(before, rng, rng.randint(1, 3))
    updated = compaction_update(previous, before, after)
    if updated is None:
        return
    best, solved = brute_force(after), compaction(after)
    assert updated.hypervisors == best == solved.hypervisors
    assert updated.optimal and updated.lower_bound <= best
    assert not updated.unplaced and replay(after, updated.assignment)
    assert set(updated.assignment) == set(solved.assignment)  # every counted domain, and no other
    assert set(updated.held) == set(updated.kept) == set(updated.assignment.values())


def test_updates_after_domains_stopped_are_made() -> None:
    """Stopping domains on small fleets mostly leaves the packing optimal under the new bound (a
    hypervisor the packing empties included): the update answers, without a solve."""
    answered = emptied = solved = 0
    for seed in range(60):
        rng = random.Random(seed)
        before = random_fleet(seed)
        previous = compaction(before)
        found = compaction_update(previous, before, stopped(before, rng, 1))
        if found is None:
            solved += previous.optimal  # the bound did not prove the packing: left to a solve
        elif found is not previous:
            answered += 1
            emptied += found.hypervisors < previous.hypervisors
    assert answered >= 20 and emptied >= 1 and solved >= 1


def test_updates_are_made_and_chain() -> None:
    """On fleets with room, most domains started fit a hypervisor in use: the update answers, and
    an update of an update too."""
    answered = 0
    for seed in range(40):
        rng = random.Random(seed)
        before = random_fleet(seed)
        previous: Compaction | None = compaction(before)
        for _ in range(3):
            assert previous is not None
            after = started(before, rng, 1)
            found = compaction_update(previous, before, after)
            if found is None:
                break
            answered += 1
            assert found.hypervisors == brute_force(after)
            assert replay(after, found.assignment)
            previous, before = found, after
    assert answered >= 20


def test_what_it_cannot_show_is_left_to_a_solve() -> None:
    before = random_fleet(3)
    while not any(host.guests and host.up for host in before):
        before = random_fleet(len(before) + 100)
    previous = compaction(before)
    assert previous.optimal
    index = next(i for i, host in enumerate(before) if host.guests and host.up)
    hypervisor = before[index]

    def with_host(changed: HostState) -> list[HostState]:
        return [changed if i == index else host for i, host in enumerate(before)]

    # two domains of one name on a hypervisor: which one stopped cannot be told
    twice = replace(hypervisor, guests=(*hypervisor.guests, hypervisor.guests[0]))
    assert compaction_update(previous, before, with_host(twice)) is None
    # a hypervisor down: it takes no domain any more
    assert compaction_update(previous, before, with_host(replace(hypervisor, up=False))) is None
    # a last answer not proven optimal
    assert compaction_update(replace(previous, optimal=False), before, before) is None
    # nothing it reads changed: the answer as it was
    assert compaction_update(previous, before, list(before)) is previous


def test_a_domain_no_hypervisor_in_use_takes_is_left_to_a_solve() -> None:
    seed = 5
    while True:
        before = random_fleet(seed)
        previous = compaction(before)
        # an answer the update would start from: None is then the huge domain's doing
        if any(host.up for host in before) and previous.optimal and previous.held:
            break
        seed += 200
    index = next(i for i, host in enumerate(before) if host.up)
    huge = Guest("huge", demand(10_000, 10_000))
    after = [
        replace(host, guests=(*host.guests, huge)) if i == index else host for i, host in enumerate(before)
    ]
    assert compaction_update(previous, before, after) is None
