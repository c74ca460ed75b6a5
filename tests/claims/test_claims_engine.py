"""Claims on a real ClaimLedger (its SQLite database, its snapshot store, audits of generated
facts) against the scheduling engine: `any` lands where the engine says, a count is all or
nothing, concurrent claims never overcommit together, and a feasible evacuation replayed as
claims is accepted."""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.factories import GIB
from tests.support.fleets import DEFAULTS, LARGER, MULTIPLIERS, STACK, fleet_facts, larger_fleet
from tests.support.ledgers import SMALL, hypervisor, request, shapes
from virtcap.claims.ledger import (
    ANY_HYPERVISOR,
    Claim,
    ClaimDatabase,
    ClaimLedger,
    ClaimRejectedError,
    pending_claims,
)
from virtcap.claims.maintenance_ledger import UnknownHypervisorError
from virtcap.config import ClaimSettings
from virtcap.fleet.scheduling import FleetEntry, schedule_fleet
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.capacity import host_capacity
from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import SPREAD, Multipliers, evacuation, fleet_tolerance


@asynccontextmanager
async def running_ledger(
    directory: Path, facts: Mapping[str, HostFacts], down: Sequence[str] = ()
) -> AsyncIterator[ClaimLedger]:
    """A ledger whose store has one good audit of each host (just now), the `down` ones then
    failing: what the exporter's auditors record."""
    store = SnapshotStore()
    store.track(sorted(facts))
    settings = ClaimSettings(database=str(directory / "claims.sqlite"))
    ledger = ClaimLedger(settings, store, ClaimDatabase(settings.database))
    await ledger.start()
    try:
        for name, host in facts.items():
            await ledger.record_audit(hypervisor(name), replace(host, audited_at=time.time()), {})
        for name in down:
            store.record(HypervisorSnapshot.failed(hypervisor(name), "connection refused"), "failure")
        yield ledger
    finally:
        await ledger.stop()


# Three empty hosts: h0 the largest, h2 the smallest. 2 vCPUs, 4 GiB, 10 GiB fit 15 times on h0
# (64 GiB less the 512 MiB reserved: 15 by memory; 8 cpus x 4.0 = 32 vCPUs: 16; 200 GiB: 20),
# 7 on h1 (memory) and 3 on h2 (memory and disk): 25 in all.
FLEET = shapes((8, 64, 200), (4, 32, 100), (2, 16, 30))


def dry_run_hosts(ledger: ClaimLedger, count: int, multipliers: Multipliers) -> tuple[str, ...]:
    """Where the engine places `count` instances of SMALL on the ledger's fleet now, as
    `POST /api/v1/placements` asks it (last good audits, pending claims)."""
    fleet_now = [
        FleetEntry(state.name, state.last_good, state.up, False, None)
        for state in ledger.store.hypervisors.values()
    ]
    scheduled = schedule_fleet(
        fleet_now, ledger.claims.values(), Demand(SMALL), count, multipliers=multipliers
    )
    return scheduled.result.hosts


@pytest.mark.parametrize(("multipliers", "first"), [(SPREAD, "h0"), (STACK, "h2")])
def test_any_lands_where_the_engine_places_it(tmp_path: Path, multipliers: Multipliers, first: str) -> None:
    async def run() -> None:
        async with running_ledger(tmp_path, fleet_facts(FLEET)) as ledger:
            for count in (1, 3, 5, 2):
                expected = dry_run_hosts(ledger, count, multipliers)
                claim = await ledger.create(request(ANY_HYPERVISOR, count=count), multipliers=multipliers)
                assert claim.hypervisors == expected and claim.count == count
                if count == 1 and len(ledger.claims) == 1:
                    assert claim.hypervisor == first  # spread: the largest host; stack: the smallest

    asyncio.run(run())


def test_a_count_is_all_or_nothing_and_says_why(tmp_path: Path) -> None:
    async def run() -> None:
        async with running_ledger(tmp_path, fleet_facts(FLEET)) as ledger:
            with pytest.raises(ClaimRejectedError) as refused:
                await ledger.create(request(ANY_HYPERVISOR, count=26))
            assert (refused.value.requested, refused.value.fitted) == (26, 25)
            assert set(refused.value.reasons) == set(refused.value.rejections) == {"h0", "h1", "h2"}
            for name, rejection in refused.value.rejections.items():
                assert rejection.filter == "Placement" and rejection.reasons, name
            assert ledger.claims == {} and ledger.pending() == {}
            assert ledger.outcomes["rejected"] == 1
            for state in ledger.store.hypervisors.values():
                assert state.latest is not None and state.latest.capacity is not None
                assert state.latest.capacity.resources[Resource.VCPU].claimed == 0

            expected = dry_run_hosts(ledger, 25, SPREAD)
            claim = await ledger.create(request(ANY_HYPERVISOR, count=25))
            assert claim.hypervisors == expected
            assert ledger.pending() == {"h0": 15, "h1": 7, "h2": 3}
            for name, count in ledger.pending().items():
                held = ledger.store.hypervisors[name].latest
                assert held is not None and held.capacity is not None
                assert held.capacity.resources[Resource.VCPU].claimed == 2 * count
                assert held.capacity.resources[Resource.MEMORY].claimed == 4 * GIB * count
            with pytest.raises(ClaimRejectedError):
                await ledger.create(request(ANY_HYPERVISOR))
            # deleted, every instance goes at once
            await ledger.delete(claim.id, "builder")
            assert ledger.pending() == {}
            for state in ledger.store.hypervisors.values():
                assert state.latest is not None and state.latest.capacity is not None
                assert state.latest.capacity.resources[Resource.VCPU].claimed == 0

    asyncio.run(run())


def test_a_named_count_is_held_on_its_hypervisor_all_or_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        async with running_ledger(tmp_path, fleet_facts(FLEET), down=["h2"]) as ledger:
            with pytest.raises(ClaimRejectedError) as refused:
                await ledger.create(request("h1", count=8))
            assert (refused.value.requested, refused.value.fitted) == (8, 7)
            # the claim test of h1 once the 7 that fit are taken: memory is what runs out
            assert refused.value.reasons == {"h1": ["Free memory 3584.00 MiB < requested 4096 MiB"]}
            assert refused.value.rejections["h1"].filter == "Placement"
            assert ledger.claims == {}
            claim = await ledger.create(request("h1", count=7))
            assert claim.hypervisors == ("h1",) * 7
            with pytest.raises(ClaimRejectedError, match="does not fit on h1"):
                await ledger.create(request("h1"))
            with pytest.raises(ClaimRejectedError) as down:
                await ledger.create(request("h2"))
            assert down.value.rejections["h2"].filter == "ComputeFilter"
            assert down.value.reasons == {
                "h2": ["hypervisor h2 is not up: there is no current capacity to claim against"]
            }
            with pytest.raises(UnknownHypervisorError):
                await ledger.create(request("h9"))

    asyncio.run(run())


def test_a_count_expires_and_restarts_as_one_claim(tmp_path: Path) -> None:
    async def run() -> None:
        facts = fleet_facts(FLEET)
        async with running_ledger(tmp_path, facts) as ledger:
            kept = await ledger.create(request(ANY_HYPERVISOR, count=9))
            short = await ledger.create(replace(request(ANY_HYPERVISOR, count=4), ttl=0.05))
            assert ledger.pending().total() == 13
        async with running_ledger(tmp_path, facts) as ledger:
            await asyncio.sleep(0.1)
            await ledger.expire()
            assert list(ledger.claims.values()) == [kept]
            assert short.id not in ledger.claims and ledger.outcomes["expired"] == 1
            assert ledger.pending().total() == 9
            assert ledger.pending() == {name: kept.hypervisors.count(name) for name in set(kept.hypervisors)}

    asyncio.run(run())


def _overcommitted(facts: Mapping[str, HostFacts], claims: Sequence[Claim]) -> list[str]:
    """Every class a claim asks for that the claims together take beyond a host's limit."""
    problems = []
    for name, host in facts.items():
        pending = pending_claims(claims, name)
        if not pending.claims:
            continue
        capacity = host_capacity(host, DEFAULTS, None, pending.amounts, pending.claims)
        for resource in pending.amounts:
            free = capacity.resources[resource].free
            if free is not None and free < 0:
                problems.append(f"{name}: {resource.label} free {free}")
    return problems


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_concurrent_count_claims_never_overcommit_together(rng: random.Random) -> None:
    facts = fleet_facts(FLEET)
    total = 25  # how many fit in all (see FLEET)
    asked = [
        (rng.choice([ANY_HYPERVISOR, ANY_HYPERVISOR, "h0", "h1", "h2"]), rng.randint(1, 6)) for _ in range(40)
    ]

    async def run(directory: Path) -> list[Claim]:
        async with running_ledger(directory, facts) as ledger:

            async def one(name: str, count: int) -> Claim | None:
                await asyncio.sleep(rng.random() / 1000)
                try:
                    return await ledger.create(request(name, count=count))
                except ClaimRejectedError:
                    return None

            made = await asyncio.gather(*(one(name, count) for name, count in asked))
            held = [claim for claim in made if claim is not None]
            assert sorted(ledger.claims) == sorted(claim.id for claim in held)
            # a claim of one instance on any is refused only when no instance fits anywhere
            try:
                await ledger.create(request(ANY_HYPERVISOR))
            except ClaimRejectedError:
                assert sum(claim.count for claim in ledger.claims.values()) > total - 6
            return list(ledger.claims.values())

    with tempfile.TemporaryDirectory() as directory:
        held = asyncio.run(run(Path(directory)))
    instances = sum(claim.count for claim in held)
    event(f"{len(held)} claims, {instances} instances held")
    assert instances <= total
    assert _overcommitted(facts, held) == []


def test_the_overcommit_check_sees_an_overcommit() -> None:
    """The check above can fail: 16 instances on h0, where 15 fit (by memory)."""
    facts = fleet_facts(FLEET)
    too_many = [Claim("x", "h0", SMALL, 1.0, 2.0, None, "", hypervisors=("h0",) * 16)]
    assert _overcommitted(facts, too_many) == ["h0: memory free -536870912"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LARGER, MULTIPLIERS, st.data())
def test_a_feasible_evacuation_replayed_as_claims_is_accepted(
    shapes: list[tuple[tuple[int, int, int], list[tuple[int, int, int]], bool]],
    multipliers: Multipliers,
    data: st.DataObject,
) -> None:
    """Each domain of a host whose evacuation is feasible, claimed with its demand on the host the
    evacuation chose, in the evacuation's order, is accepted by the ledger; and claimed on `any`
    with the host down, it lands on that same host."""
    flat = [(*shape, domains, up) for shape, domains, up in shapes]
    hosts = larger_fleet(shapes)
    facts = fleet_facts(flat)
    down = [state.name for state in hosts if not state.up]
    tolerance = fleet_tolerance(hosts, multipliers=multipliers, bound=1)
    feasible = sorted(name for name, result in tolerance.evacuations.items() if result.feasible)
    event(f"{len(feasible)} of {len(hosts)} hosts can be evacuated")
    # a host with domains to re-home, where there is one
    feasible = [name for name in feasible if tolerance.evacuations[name].placements] or feasible
    if not feasible:
        return
    failed = data.draw(st.sampled_from(feasible))
    result = evacuation(hosts, failed, multipliers)
    assert result == tolerance.evacuations[failed]
    source = next(state for state in hosts if state.name == failed)
    guests = {guest.name: guest for guest in source.guests}
    event(f"{len(result.placements)} domains to re-home")

    async def replay(directory: Path, on_any: bool) -> list[str]:
        gone = [*down, failed] if on_any and failed not in down else down
        async with running_ledger(directory, facts, down=gone) as ledger:
            landed = []
            for domain, host in result.placements:
                amounts = guests[domain].demand.request
                name = ANY_HYPERVISOR if on_any else host
                claim = await ledger.create(request(name, amounts), multipliers=multipliers)
                landed.append(claim.hypervisor)
            return landed

    expected = [host for _domain, host in result.placements]
    for on_any in (False, True):
        with tempfile.TemporaryDirectory() as directory:
            assert asyncio.run(replay(Path(directory), on_any)) == expected


def test_any_refuses_hypervisors_whose_data_is_stale_or_down(tmp_path: Path) -> None:
    async def run() -> None:
        async with running_ledger(tmp_path, fleet_facts(FLEET), down=["h0"]) as ledger:
            await asyncio.sleep(0.01)
            with pytest.raises(ClaimRejectedError) as refused:
                # every audit is older than 1 ms by now
                await ledger.create(request(ANY_HYPERVISOR), stale_after=0.001)
            assert {name: r.filter for name, r in refused.value.rejections.items()} == {
                "h0": "ComputeFilter",
                "h1": "ComputeFilter",
                "h2": "ComputeFilter",
            }
            assert refused.value.reasons == {
                "h0": ["hypervisor h0 is down"],
                "h1": ["the data of hypervisor h1 is stale"],
                "h2": ["the data of hypervisor h2 is stale"],
            }
            # fresh enough, h0 still down: the spread goes to the largest host up
            assert (await ledger.create(request(ANY_HYPERVISOR), stale_after=60.0)).hypervisor == "h1"
            # a named claim is tested against its last audit whatever its age, as before
            assert (await ledger.create(request("h2"), stale_after=0.001)).hypervisor == "h2"

    asyncio.run(run())
