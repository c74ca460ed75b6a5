"""The answers before a scenario, computed in a process of their own (service/scenarios.py's
`compute_scenario`, parallel): the same answers as computed in the caller's process."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from virtcap.contract.placements import parse_placement_body
from virtcap.contract.scenarios import parse_scenario
from virtcap.demo import demo_config
from virtcap.fleet.packing import FleetPacking, PackingSettings
from virtcap.fleet.scenario import fleet_answers
from virtcap.fleet.scheduling import FleetEntry, planned_hosts
from virtcap.model.resources import Resource
from virtcap.service.dryrun import dry_run
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.scenarios import compute_scenario, resolve_scenario, scenario_settings

SCENARIO = {
    "add_hypervisors": [
        {"count": 2, "name_prefix": "new", "sku": {"cpus": 32, "memory": "256GiB", "disk": "2TiB"}}
    ],
    "drain": {"hypervisors": ["compute-02"]},
    "demand": [{"flavor": "m1.large", "count": 30}],
    "reserve_host_failures": 1,
}


def test_the_answers_before_are_the_same_from_a_process_of_their_own(tmp_path: Path) -> None:
    config = demo_config()
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    config = with_discovered_flavors(config, [(s.name, s.facts) for s in snapshots if s.facts is not None])
    hosts = planned_hosts([FleetEntry.of(snapshot) for snapshot in snapshots], [])
    flavors = config.flavor_demands
    scenario = resolve_scenario(parse_scenario(SCENARIO), config, hosts, flavors, base=tmp_path)
    settings = scenario_settings(config, flavors)
    here = compute_scenario(hosts, scenario, settings, None, parallel=False)
    apart = compute_scenario(hosts, scenario, settings, None, parallel=True)
    assert apart.model_dump(exclude={"seconds"}) == here.model_dump(exclude={"seconds"})
    assert here.before != here.after  # the scenario changed something the answers show
    assert here.placed[0].count == 30


def test_the_answers_are_the_exporters_packing_answers() -> None:
    """The scenario's answers on a fleet are those the exporter's packing worker gives it
    (FleetPacking: stranded capacity summed, the fleet's compaction, the sellable instances in
    the fleet and per zone)."""
    config = demo_config()
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    config = with_discovered_flavors(config, [(s.name, s.facts) for s in snapshots if s.facts is not None])
    states = [host.state() for host in planned_hosts([FleetEntry.of(snapshot) for snapshot in snapshots], [])]
    settings = scenario_settings(config, config.flavor_demands)
    found = fleet_answers(states, settings, 1)
    packing = FleetPacking().apply(
        states, PackingSettings(dict(config.flavor_demands), {}, 1), config.multipliers
    )
    summed: dict[Resource, int] = {}
    for stranded in packing.stranded.values():
        for resource, amount in stranded.amounts.items():
            summed[resource] = summed.get(resource, 0) + amount
    assert found.stranded == summed
    assert found.compaction == packing.compaction
    assert found.sellable == packing.sellable
    assert found.sellable_by_zone == packing.sellable_by_zone


@pytest.mark.parametrize(("flavor", "count"), [("m1.large", 12), ("m1.small", 40), ("d1.pinned", 3)])
def test_a_demand_lands_where_virtcap_place_puts_it(flavor: str, count: int) -> None:
    """`virtcap place`'s dry run (service/dryrun.py) and the scenario's demand, on one audit of the
    demo fleet: the same hypervisors, as many instances on each."""
    config = demo_config()
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    config = with_discovered_flavors(config, [(s.name, s.facts) for s in snapshots if s.facts is not None])
    entries = [FleetEntry.of(snapshot) for snapshot in snapshots]
    placed = dry_run(config, parse_placement_body({"flavor": flavor, "count": count}), entries)
    hosts = planned_hosts(entries, [])
    scenario = resolve_scenario(
        parse_scenario({"demand": [{"flavor": flavor, "count": count}]}),
        config,
        hosts,
        config.flavor_demands,
        base=None,
    )
    answer = compute_scenario(
        hosts, scenario, scenario_settings(config, config.flavor_demands), None, parallel=False
    )
    assert placed.placed, "the demo takes that many"
    assert answer.placed[0].hypervisors == dict(Counter(placed.placed))
    assert not answer.unplaced
