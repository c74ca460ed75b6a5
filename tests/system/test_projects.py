"""Usage per project and owner, opt-in per-domain series, and flavors discovered in Nova metadata:
on test-driver fleets whose domains carry Nova owners, an owner in the operator's own metadata
element, or none."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.factories import domain, host
from tests.support.serving import Samples, parse_samples, running_server, series, value
from virtcap.audit.domain_xml import NOVA_NAMESPACE, parse_domain_xml
from virtcap.audit.events import start_libvirt_event_thread
from virtcap.commands.main import build_parser, main
from virtcap.commands.serve import with_collectors
from virtcap.config import AuditSettings, Config, ConfigError, Flavor, Hypervisor, parse_config
from virtcap.config.schema import ExpositionSection
from virtcap.demo.fleetgen import RUNNING, SHUTOFF, DomainSpec, FlavorSpec, HostSpec, node_xml
from virtcap.exposition.families import HypervisorView, render, views
from virtcap.exposition.fragments import FragmentCache
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.discovery import discover, flavor_demand, host_flavors
from virtcap.model.facts import DomainState, HostFacts, NovaFlavor, NovaInstance, NovaOwner, ProjectOwner
from virtcap.model.host_fit import Demand
from virtcap.model.ownership import (
    OTHER,
    UNKNOWN,
    OwnershipMetadata,
    ProjectRanking,
    ProjectUsage,
    domain_project,
    largest_projects,
)
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import GIB, MIB, Resource
from virtcap.service.auditor import FleetAuditor
from virtcap.service.flavors import FlavorCatalog
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.supervise import Supervisor

OWNER_NAMESPACE = "http://example.org/xmlns/owner/1.0"
ALPHA = "0b6d9b3102595a2ab2fcb598ba39d6f0"
UUIDS = {
    "nova-on": "00000000-0000-4000-8000-0000000000a1",
    "nova-off": "00000000-0000-4000-8000-0000000000a2",
    "plain-owned": "00000000-0000-4000-8000-0000000000b1",
    "plain": "00000000-0000-4000-8000-0000000000c1",
}
LARGE = FlavorSpec("m1.large", 4, 8192, 80)
ODD = FlavorSpec(
    "x1.odd", 2, 4096, 40, ephemeral_gib=10, swap_mib=1024, extra_specs=(("hw:cpu_policy", "shared"),)
)


def owned_host(domains: tuple[str, ...] = tuple(UUIDS)) -> HostSpec:
    """A Nova instance of project alpha running, another shut off, a plain domain whose owner is in
    the operator's metadata element (project beta), and one with no owner at all."""
    specs = {
        "nova-on": DomainSpec("nova-on", UUIDS["nova-on"], RUNNING, 4, 8192, 8192, flavor=LARGE),
        "nova-off": DomainSpec("nova-off", UUIDS["nova-off"], SHUTOFF, 2, 4096, 4096, flavor=ODD),
        "plain-owned": DomainSpec("plain-owned", UUIDS["plain-owned"], RUNNING, 2, 2048, 2048),
        "plain": DomainSpec("plain", UUIDS["plain"], RUNNING, 1, 1024, 1024),
    }
    return HostSpec(
        "h1", cpus=16, memory_gib=64, pool_gib=500, pool_used_gib=0, domains=[specs[n] for n in domains]
    )


def write_owned_host(path: Path, domains: tuple[str, ...] = tuple(UUIDS)) -> Path:
    """The node file of `owned_host`, with Nova's owner in the Nova domains' metadata and the
    operator's owner element in `plain-owned`'s."""
    text = node_xml(owned_host(domains))
    nova_owner = (
        f"<nova:owner><nova:user uuid='u1'>ursula</nova:user>"
        f"<nova:project uuid='{ALPHA}'>alpha</nova:project></nova:owner>"
    )
    text = text.replace("</nova:flavor></nova:instance>", f"</nova:flavor>{nova_owner}</nova:instance>")
    beta = (
        f"<metadata><x:owner xmlns:x='{OWNER_NAMESPACE}'><x:project id='beta-id'>beta</x:project>"
        "</x:owner></metadata>"
    )
    marker = f"<name>plain-owned</name><uuid>{UUIDS['plain-owned']}</uuid>"
    text = text.replace(marker, marker + beta)
    assert NOVA_NAMESPACE in text
    path.write_text(text, encoding="utf-8")
    return path


def owned_config(path: Path, extra: str = "") -> Config:
    return parse_config(
        f"""
hypervisors:
  - {{name: h1, uri: "test://{path}"}}
ownership: {{metadata_namespace: "{OWNER_NAMESPACE}", element: owner/project}}
flavors:
  - {{name: m1.large, vcpu: 4, memory: 16GiB, disk: 80GiB}}
{extra}
""",
        "inline",
    )


def audited(config: Config) -> list[HypervisorSnapshot]:
    return asyncio.run(audit_fleet_once(config, cpu_window=0.0))


def exposition_of(
    snapshots: list[HypervisorSnapshot], exposition: ExpositionSection | None = None
) -> Samples:
    store = SnapshotStore()
    store.track([snapshot.name for snapshot in snapshots])
    for snapshot in snapshots:
        store.record(snapshot, "success")
    body = render(views(store, time.time(), 600), {}, exposition=exposition or ExpositionSection())
    return parse_samples(body.decode())


def projects_of(samples: Samples, resource: str) -> dict[tuple[str, str, str], float]:
    return {
        (labels["hypervisor"], labels["project_id"], labels["project_name"]): amount
        for key, amount in series(samples, "hypervisor_project_allocated", resource=resource).items()
        if (labels := dict(key))
    }


def test_allocations_are_summed_per_project_nova_configured_metadata_and_unknown(tmp_path: Path) -> None:
    (snapshot,) = audited(owned_config(write_owned_host(tmp_path / "h1.xml")))
    samples = exposition_of([snapshot])
    # nova-on (m1.large: 4 vCPUs, 8 GiB, 80 GiB) and the shut off nova-off (x1.odd: 2 vCPUs, 4 GiB,
    # 40 + 10 GiB and 1 GiB of swap), both counted (count_inactive_domains defaults to true)
    assert projects_of(samples, "memory") == {
        ("h1", ALPHA, "alpha"): 12 * GIB,
        ("h1", "beta-id", "beta"): 2 * GIB,
        ("h1", UNKNOWN, UNKNOWN): 1 * GIB,
    }
    assert projects_of(samples, "vcpu") == {
        ("h1", ALPHA, "alpha"): 6,
        ("h1", "beta-id", "beta"): 2,
        ("h1", UNKNOWN, UNKNOWN): 1,
    }
    assert projects_of(samples, "disk")[("h1", ALPHA, "alpha")] == (80 + 40 + 10 + 1) * GIB
    assert (
        value(samples, "hypervisor_project_domains", hypervisor="h1", project_id=ALPHA, project_name="alpha")
        == 2
    )
    # summed over projects: the hypervisor's counted allocation, no more, no less
    for resource in ("vcpu", "memory", "disk"):
        allocated = sum(
            series(samples, "hypervisor_resource_allocated", hypervisor="h1", resource=resource).values()
        )
        assert sum(projects_of(samples, resource).values()) == allocated
    document = fleet_document([snapshot])
    assert [p["project_id"] for p in document["projects"]] == [ALPHA, "beta-id", UNKNOWN]
    assert document["projects"][0] == {
        "project_id": ALPHA,
        "project_name": "alpha",
        "domains": 2,
        "allocated": {"vcpu": 6, "memory": 12 * GIB, "disk": 131 * GIB},
    }
    assert document["hypervisors"][0]["projects"] == document["projects"]
    assert "projects (counted domains" in render_tables([snapshot])


def test_without_ownership_configured_a_plain_domain_is_unknown_and_uncounted_states_are_left_out(
    tmp_path: Path,
) -> None:
    path = write_owned_host(tmp_path / "h1.xml")
    config = parse_config(
        f'hypervisors: [{{name: h1, uri: "test://{path}", count_inactive_domains: false}}]', "inline"
    )
    (snapshot,) = audited(config)
    samples = exposition_of([snapshot])
    # nova-off is shut off and not counted: alpha holds nova-on only
    assert projects_of(samples, "memory") == {
        ("h1", ALPHA, "alpha"): 8 * GIB,
        ("h1", UNKNOWN, UNKNOWN): 3 * GIB,
    }
    assert (
        value(
            samples, "hypervisor_project_domains", hypervisor="h1", project_id=UNKNOWN, project_name=UNKNOWN
        )
        == 2
    )


def owned(name: str, project: str, memory_gib: int, state: DomainState = DomainState.RUNNING) -> NovaInstance:
    flavor = NovaFlavor(
        name=f"f{memory_gib}", vcpus=1, memory_mib=memory_gib * 1024, root_gib=0, ephemeral_gib=0, swap_mib=0
    )
    return NovaInstance(flavor, owner=NovaOwner(project, f"{project}-name", "u", "user"))


def snapshot_of(name: str, *projects: tuple[str, int]) -> HypervisorSnapshot:
    """A hypervisor whose domains each belong to a project (UNKNOWN: none) with that much memory."""
    domains = tuple(
        domain(f"{name}-{index}", memory=gib * GIB)
        if project == UNKNOWN
        else domain(f"{name}-{index}", nova=owned(f"{name}-{index}", project, gib))
        for index, (project, gib) in enumerate(projects)
    )
    hypervisor = Hypervisor(name=name, uri="test:///default", policy=HostPolicy(), disk=None)
    return HypervisorSnapshot.audited(hypervisor, host(memory=256 * GIB, domains=domains), {})


def view_of(snapshot: HypervisorSnapshot) -> HypervisorView:
    return HypervisorView(snapshot.name, True, snapshot, snapshot.taken_at, 0.0, None, {})


def test_the_largest_projects_fleet_wide_get_series_and_the_rest_is_one_other_per_hypervisor() -> None:
    a = snapshot_of("a", ("p1", 8), ("p2", 4), (UNKNOWN, 1))
    b = snapshot_of("b", ("p3", 6), ("p2", 4))
    top2 = ExpositionSection(top_projects=2)
    fleet = [view_of(a), view_of(b)]
    samples = parse_samples(render(fleet, exposition=top2).decode())
    # fleet-wide: p1 8 GiB and p2 8 GiB (a tie: by id), p3 6 GiB, unknown 1 GiB
    assert projects_of(samples, "memory") == {
        ("a", "p1", "p1-name"): 8 * GIB,
        ("a", "p2", "p2-name"): 4 * GIB,
        ("a", OTHER, OTHER): 1 * GIB,
        ("b", "p2", "p2-name"): 4 * GIB,
        ("b", OTHER, OTHER): 6 * GIB,
    }
    assert (
        value(samples, "hypervisor_project_domains", hypervisor="b", project_id=OTHER, project_name=OTHER)
        == 1
    )
    for name in ("a", "b"):
        allocated = sum(
            series(samples, "hypervisor_resource_allocated", hypervisor=name, resource="memory").values()
        )
        assert (
            sum(amount for (h, _, _), amount in projects_of(samples, "memory").items() if h == name)
            == allocated
        )

    cache = FragmentCache()
    assert cache.render(fleet, exposition=top2) == render(fleet, exposition=top2)
    # p3 grows past the others on b alone: a's fragment must be rendered again (its p2 is now other)
    grown = [view_of(a), view_of(snapshot_of("b", ("p3", 20), ("p2", 4)))]
    assert cache.render(grown, exposition=top2) == render(grown, exposition=top2)
    regrouped = projects_of(parse_samples(cache.render(grown, exposition=top2).decode()), "memory")
    assert regrouped[("a", OTHER, OTHER)] == 5 * GIB
    assert cache.projects == {"p3": "p3-name", "p1": "p1-name"}

    off = parse_samples(render(fleet, exposition=ExpositionSection(top_projects=0)).decode())
    assert not series(off, "hypervisor_project_allocated")
    everyone = projects_of(parse_samples(render(fleet).decode()), "memory")
    assert (("a", UNKNOWN, UNKNOWN)) in everyone and all(project != OTHER for _, project, _ in everyone)


def test_a_project_recorded_under_two_names_is_one_series_under_the_name_holding_most() -> None:
    renamed = replace(owned("x", "p1", 2), owner=NovaOwner("p1", "old-name", "u", "user"))
    facts = host(domains=(domain("x", nova=renamed), domain("y", nova=owned("y", "p1", 6))))
    snapshot = HypervisorSnapshot.audited(Hypervisor("a", "test:///default", HostPolicy(), None), facts, {})
    samples = parse_samples(render([view_of(snapshot)]).decode())
    assert projects_of(samples, "memory") == {("a", "p1", "p1-name"): 8 * GIB}


def test_per_domain_series_are_opt_in_and_vanish_with_their_domain(tmp_path: Path) -> None:
    path = write_owned_host(tmp_path / "h1.xml")
    config = owned_config(path)
    (snapshot,) = audited(config)
    assert not series(exposition_of([snapshot]), "hypervisor_domain_allocated")
    assert not series(exposition_of([snapshot]), "hypervisor_domain_info")

    samples = exposition_of([snapshot], ExpositionSection(domains=True))
    info = {dict(key)["uuid"]: dict(key) for key in series(samples, "hypervisor_domain_info")}
    assert info[UUIDS["nova-off"]] == {
        "hypervisor": "h1",
        "uuid": UUIDS["nova-off"],
        "name": "nova-off",
        "state": "shutoff",
        "flavor": "x1.odd",
        "project_id": ALPHA,
        "project_name": "alpha",
    }
    assert info[UUIDS["plain-owned"]]["project_name"] == "beta"
    assert info[UUIDS["plain"]]["flavor"] == ""
    assert info[UUIDS["plain"]]["project_id"] == UNKNOWN
    memory = {"hypervisor": "h1", "resource": "memory", "unit": "bytes"}
    assert value(samples, "hypervisor_domain_allocated", uuid=UUIDS["nova-off"], **memory) == 4096 * MIB
    # what the capacity allocates, domain by domain, in every state
    for resource in ("vcpu", "memory", "disk"):
        per_domain = sum(series(samples, "hypervisor_domain_allocated", resource=resource).values())
        by_state = sum(series(samples, "hypervisor_resource_allocated", resource=resource).values())
        assert per_domain == by_state

    # the domain is undefined: its series go with it at the next audit
    write_owned_host(path, ("nova-on", "plain-owned", "plain"))
    (after,) = audited(config)
    gone = exposition_of([after], ExpositionSection(domains=True))
    assert not series(gone, "hypervisor_domain_info", uuid=UUIDS["nova-off"])
    assert not series(gone, "hypervisor_domain_allocated", uuid=UUIDS["nova-off"])
    assert len(series(gone, "hypervisor_domain_info")) == 3


def test_the_domains_collector_flag_wins_over_the_configuration(tmp_path: Path) -> None:
    config = owned_config(
        write_owned_host(tmp_path / "h1.xml"), "exposition: {domains: true, top_projects: 5}"
    )
    assert config.exposition == ExpositionSection(domains=True, top_projects=5)
    parser = build_parser()
    assert with_collectors(config, parser.parse_args(["serve"])).exposition.domains is True
    turned_off = with_collectors(config, parser.parse_args(["serve", "--no-collector.domains"]))
    assert turned_off.exposition == ExpositionSection(domains=False, top_projects=5)
    plain = owned_config(tmp_path / "h1.xml")
    assert plain.exposition.domains is False
    assert (
        with_collectors(plain, parser.parse_args(["serve", "--collector.domains"])).exposition.domains is True
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "ownership: {element: project}",
            "x.yaml: ownership.metadata_namespace: required key is missing",
        ),
        (
            "ownership: {metadata_namespace: 'http://x/ y'}",
            "x.yaml: ownership.metadata_namespace: expected a namespace URI without spaces or braces, "
            "got 'http://x/ y'",
        ),
        (
            "ownership: {metadata_namespace: 'http://x/', element: 'owner//project'}",
            "x.yaml: ownership.element: expected an element's name, or a path of names joined by /",
        ),
        (
            "ownership: {metadata_namespace: 'http://x/', id_attribute: 'a b'}",
            "x.yaml: ownership.id_attribute: expected an attribute's name",
        ),
        ("exposition: {top_projects: -1}", "x.yaml: exposition.top_projects: expected a number at least 0"),
        ("exposition: {top_projects: 1001}", "x.yaml: exposition.top_projects: "),
        ("exposition: {domain: true}", "x.yaml: exposition.domain: unknown key 'domain'"),
        ("exposition: {domains: sometimes}", "x.yaml: exposition.domains: expected true or false"),
        ("discover_flavors: perhaps", "x.yaml: discover_flavors: expected true or false"),
    ],
)
def test_configuration_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_cli_exits_2_on_a_bad_exposition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("exposition: {top_projects: lots}\n")
    assert main(["audit", "--config", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"virtcap: configuration error: {path}: exposition.top_projects: ")


def test_discovered_flavors_join_the_configured_which_win_on_the_same_name(tmp_path: Path) -> None:
    path = write_owned_host(tmp_path / "h1.xml")
    (snapshot,) = audited(owned_config(path))
    assert snapshot.capacity is not None
    assert list(snapshot.capacity.schedulable) == ["m1.large", "x1.odd"]
    # the configured m1.large asks 16 GiB, the domains' m1.large 8 GiB: the configured one counts
    assert snapshot.flavors["m1.large"].request[Resource.MEMORY] == 16 * GIB
    # x1.odd as Nova would schedule one more: root + ephemeral + swap rounded up to GiB
    odd = snapshot.flavors["x1.odd"].request
    assert dict(odd) == {Resource.VCPU: 2, Resource.MEMORY: 4096 * MIB, Resource.DISK: 51 * GIB}

    (opted_out,) = audited(owned_config(path, "discover_flavors: false"))
    assert opted_out.capacity is not None
    assert list(opted_out.capacity.schedulable) == ["m1.large"]

    assert snapshot.facts is not None
    discovery = discover([("h1", host_flavors(snapshot.facts))])
    document = fleet_document([snapshot], discovery=discovery, configured_flavors=["m1.large"])
    by_name = {found["name"]: found for found in document["discovered_flavors"]}
    assert by_name["m1.large"]["configured"] is True
    assert by_name["x1.odd"] == {
        "name": "x1.odd",
        "vcpus": 2,
        "memory_bytes": 4096 * MIB,
        "root_disk_bytes": 40 * GIB,
        "ephemeral_disk_bytes": 10 * GIB,
        "swap_bytes": 1024 * MIB,
        "extra_specs": {"hw:cpu_policy": "shared"},
        "domains": 1,
        "hypervisors": ["h1"],
        "configured": False,
        "other_definitions": [],
    }


def test_a_name_defined_differently_takes_the_definition_most_domains_carry_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    small = NovaFlavor("c1", 2, 2048, 20, 0, 0)
    big = replace(small, vcpus=4, memory_mib=8192)
    one = host(domains=(domain("a", nova=NovaInstance(small)), domain("b", nova=NovaInstance(small))))
    two = host(
        domains=(
            domain("c", nova=NovaInstance(big)),
            domain("d", nova=NovaInstance(NovaFlavor("d1", 1, 512, 1, 0, 0))),
        )
    )
    catalog = FlavorCatalog()
    catalog.discover = True
    catalog.record("one", one)
    catalog.record("two", two)
    configured: dict[str, Demand] = {}
    with caplog.at_level(logging.WARNING, logger="virtcap.service.flavors"):
        demands = catalog.demands(configured)
    assert sorted(demands) == ["c1", "d1"]
    assert demands["c1"].request[Resource.VCPU] == 2
    conflicts = catalog.discovery.conflicts["c1"]
    assert [(found.flavor.vcpus, found.domains, found.hypervisors) for found in conflicts] == [
        (2, 2, ("one",)),
        (4, 1, ("two",)),
    ]
    assert [record.getMessage() for record in caplog.records] == [
        "flavor defined differently across the fleet: the definition most domains carry is used"
    ]
    text = render_tables([], discovery=catalog.discovery)
    assert "c1:" in text and "4 vCPUs, 8192 MiB" in text and "2 domain(s) on one" in text

    # the only domain of d1 goes, then its hypervisor: each flavor disappears with its last domain
    catalog.record("two", host(domains=(domain("c", nova=NovaInstance(big)),)))
    assert sorted(catalog.demands(configured)) == ["c1"]
    catalog.track(["two"])
    assert catalog.demands(configured)["c1"].request[Resource.VCPU] == 4
    assert not catalog.discovery.conflicts
    small_configured = Flavor("c1", {Resource.VCPU: 1})
    assert catalog.sources([small_configured]) == {"c1": "configured"}
    catalog.record("one", one)
    assert catalog.sources([]) == {"c1": "discovered"}
    catalog.discover = False
    assert catalog.demands(configured) == {}
    assert catalog.sources([small_configured]) == {"c1": "configured"}


def test_the_catalogs_tally_takes_what_a_discovery_of_the_whole_fleet_takes() -> None:
    """Hypervisors recorded, re-recorded with other flavors and removed at random: after each
    step the demands and sources are those of a discovery of the fleet as it then is."""
    rng = random.Random(13)
    definitions = [
        NovaFlavor(name, vcpus, 1024 * vcpus, 10 * vcpus, 0, 0, specs)
        for name in ("m1.small", "m1.large", "r1.huge")
        for vcpus in (1, 2, 4)
        for specs in ({}, {"hw:cpu_policy": "dedicated"})
    ]
    catalog = FlavorCatalog()
    catalog.discover = True
    fleet: dict[str, HostFacts] = {}
    configured: dict[str, Demand] = {}
    for step in range(400):
        if fleet and rng.random() < 0.1:
            del fleet[rng.choice(sorted(fleet))]
            catalog.track(fleet)
        else:
            name = f"h{rng.randrange(15)}"
            fleet[name] = host(
                domains=tuple(
                    domain(f"{name}-{step}-{number}", nova=NovaInstance(rng.choice(definitions)))
                    for number in range(rng.randrange(4))
                )
            )
            catalog.record(name, fleet[name])
        expected = discover((name, host_flavors(facts)) for name, facts in sorted(fleet.items()))
        assert catalog.demands(configured) == {
            name: flavor_demand(found.flavor) for name, found in expected.flavors.items()
        }
        assert catalog.sources([]) == dict.fromkeys(sorted(expected.flavors), "discovered")
        assert catalog.discovery == expected


def test_an_audit_cycle_makes_no_discovery_of_the_whole_fleet_but_to_tell_a_new_conflict() -> None:
    """Recording a hypervisor moves a tally: a cycle of a fleet whose audits each bring flavors
    costs no discovery per hypervisor (that made the first cycle quadratic in the fleet)."""
    small = NovaFlavor("m1.small", 1, 2048, 20, 0, 0)
    large = NovaFlavor("m1.large", 4, 8192, 80, 0, 0)
    catalog = FlavorCatalog()
    catalog.discover = True
    configured: dict[str, Demand] = {}
    for number in range(300):
        carried = (small, large)[: 1 + number % 2]
        domains = tuple(domain(f"{number}-{flavor.name}", nova=NovaInstance(flavor)) for flavor in carried)
        catalog.record(f"h{number}", host(domains=domains))
        catalog.demands(configured)  # as each audit asks
    assert sorted(catalog.demands(configured)) == ["m1.large", "m1.small"]
    assert catalog.discoveries == 0
    # a definition of the same name that differs: one discovery, to log it with its hypervisors
    catalog.record("odd", host(domains=(domain("odd", nova=NovaInstance(replace(large, vcpus=8))),)))
    catalog.demands(configured)
    for number in range(300, 400):
        catalog.record(f"h{number}", host(domains=(domain(f"{number}", nova=NovaInstance(small)),)))
        catalog.demands(configured)
    assert catalog.discoveries == 1
    assert catalog.demands(configured)["m1.large"].request[Resource.VCPU] == 4


def test_claims_and_placements_name_a_discovered_flavor(tmp_path: Path) -> None:
    path = write_owned_host(tmp_path / "h1.xml")
    config = tmp_path / "virtcap.yaml"
    config.write_text(
        f"""
hypervisors:
  - {{name: h1, uri: "test://{path}"}}
ownership: {{metadata_namespace: "{OWNER_NAMESPACE}", element: owner/project}}
claims: {{database: "{tmp_path / "claims.sqlite"}"}}
audit: {{interval: 1s}}
defaults: {{allocation_ratios: {{disk: 4.0}}}}   # the test driver's pools hold 100 GiB whatever the file says
"""
    )
    with running_server(["--config", str(config), "--collector.domains"], tmp_path) as server:
        status, body = server.request(
            "POST",
            "/api/v1/placements",
            json.dumps({"flavor": "x1.odd", "count": 2}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert status == 200, body
        assert json.loads(body)["placed"] == ["h1", "h1"], body
        status, body = server.request(
            "POST",
            "/api/v1/placements",
            json.dumps({"flavor": "nope"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert status == 400
        assert "m1.large, x1.odd" in json.loads(body)["error"]
        status, body = server.get("/api/v1/capacity")
        document = json.loads(body)
        assert [p["project_name"] for p in document["projects"]] == ["alpha", "beta", UNKNOWN]
        assert [f["name"] for f in document["discovered_flavors"]] == ["m1.large", "x1.odd"]
        status, body = server.get("/metrics")
        samples = parse_samples(body.decode())
        assert (
            value(samples, "hypervisor_schedulable_instances", hypervisor="h1", flavor="x1.odd") is not None
        )
        assert len(series(samples, "hypervisor_domain_info", hypervisor="h1")) == 4
        assert series(samples, "virtcap_flavor_info") == {
            frozenset({("flavor", "m1.large"), ("source", "discovered")}): 1.0,
            frozenset({("flavor", "x1.odd"), ("source", "discovered")}): 1.0,
        }
        assert projects_of(samples, "memory")[("h1", "beta-id", "beta")] == 2 * GIB


def test_virtcap_place_finds_a_discovered_flavor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_owned_host(tmp_path / "h1.xml")
    config = tmp_path / "virtcap.yaml"
    # the test driver's pools hold 100 GiB whatever the file says: the disk ratio makes room
    host_entry = f'hypervisors: [{{name: h1, uri: "test://{path}", allocation_ratios: {{disk: 4.0}}}}]\n'
    config.write_text(host_entry)
    assert main(["place", "--config", str(config), "--flavor", "x1.odd"]) == 0
    assert "h1" in capsys.readouterr().out
    config.write_text(host_entry + "discover_flavors: false\n")
    assert main(["place", "--config", str(config), "--flavor", "x1.odd"]) == 2
    assert "unknown flavor 'x1.odd'" in capsys.readouterr().err


def test_the_owner_element_its_id_fallback_and_nova_first() -> None:
    source = OwnershipMetadata(OWNER_NAMESPACE, ("owner", "project"), "id")

    def definition(metadata: str) -> str:
        return f"<domain><name>d</name><memory>1024</memory><metadata>{metadata}</metadata></domain>"

    named_only = f"<x:owner xmlns:x='{OWNER_NAMESPACE}'><x:project> gamma </x:project></x:owner>"
    assert parse_domain_xml(definition(named_only), source).owner == ProjectOwner("gamma", "gamma")
    assert parse_domain_xml(definition(named_only)).owner is None  # not configured: not read
    elsewhere = named_only.replace(OWNER_NAMESPACE, "http://example.org/other")
    assert parse_domain_xml(definition(elsewhere), source).owner is None
    empty = f"<x:owner xmlns:x='{OWNER_NAMESPACE}'><x:project/></x:owner>"
    assert parse_domain_xml(definition(empty), source).owner is None
    nova = (
        f"<nova:instance xmlns:nova='{NOVA_NAMESPACE}'><nova:flavor name='f'><nova:vcpus>1</nova:vcpus>"
        f"<nova:memory>512</nova:memory></nova:flavor><nova:owner><nova:project uuid='{ALPHA}'>alpha"
        "</nova:project></nova:owner></nova:instance>"
    )
    both = parse_domain_xml(definition(nova + named_only), source)
    assert both.owner == ProjectOwner("gamma", "gamma")
    facts = replace(domain("d"), nova=both.nova, owner=both.owner)
    assert domain_project(facts) == (ALPHA, "alpha")
    assert domain_project(replace(facts, nova=None)) == ("gamma", "gamma")
    assert domain_project(replace(facts, nova=None, owner=None)) == (UNKNOWN, UNKNOWN)


def test_the_incremental_ranking_is_the_ranking_of_the_whole_fleet() -> None:
    rng = random.Random(3)
    ranking = ProjectRanking()
    fleet: dict[str, tuple[ProjectUsage, ...]] = {}
    for _step in range(400):
        name = f"h{rng.randrange(8)}"
        if rng.random() < 0.1:
            fleet.pop(name, None)
        else:
            fleet[name] = tuple(
                ProjectUsage(
                    f"p{rng.randrange(12)}", rng.choice("ab"), 1, {Resource.MEMORY: rng.randrange(4) * GIB}
                )
                for _ in range(rng.randrange(4))
            )
        for hypervisor, usages in fleet.items():
            ranking.update(hypervisor, usages)
        ranking.keep_only(set(fleet))
        limit = rng.randrange(6)
        whole = largest_projects([usage for usages in fleet.values() for usage in usages], limit)
        assert ranking.largest(limit) == whole


def test_a_flavor_discovered_on_one_hypervisor_is_fitted_on_those_audited_before_it(tmp_path: Path) -> None:
    """One audit at a time, then none for an hour: the first hypervisor audited knows only its own
    flavors, and is audited again as soon as the second one brings others."""
    first = write_owned_host(tmp_path / "h1.xml")
    tiny = HostSpec(
        "h2",
        cpus=8,
        memory_gib=32,
        pool_gib=100,
        pool_used_gib=0,
        domains=[
            DomainSpec(
                "t",
                "00000000-0000-4000-8000-0000000000d1",
                RUNNING,
                1,
                512,
                512,
                flavor=FlavorSpec("z1.tiny", 1, 512, 1),
            )
        ],
    )
    second = tmp_path / "h2.xml"
    second.write_text(node_xml(tiny), encoding="utf-8")
    hypervisors = tuple(
        Hypervisor(name, f"test://{path}", HostPolicy(), None)
        for name, path in (("h1", first), ("h2", second))
    )

    async def scenario() -> dict[str, list[str]]:
        start_libvirt_event_thread()
        store = SnapshotStore()
        supervisor = Supervisor(changed=store.touch)
        fleet = FleetAuditor(store, supervisor)
        settings = AuditSettings(interval=3600, timeout=10, concurrency=1)
        await fleet.apply(hypervisors, settings, {}, discover_flavors=True)

        def fitted() -> dict[str, list[str]]:
            return {
                name: sorted(state.last_good.flavors) if state.last_good is not None else []
                for name, state in store.hypervisors.items()
            }

        everywhere = {name: ["m1.large", "x1.odd", "z1.tiny"] for name in ("h1", "h2")}
        deadline = time.monotonic() + 15
        while fitted() != everywhere and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await fleet.stop()
        await supervisor.stop_all()
        return fitted()

    assert asyncio.run(scenario()) == {name: ["m1.large", "x1.odd", "z1.tiny"] for name in ("h1", "h2")}
