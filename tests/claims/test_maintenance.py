"""Maintenance: a hypervisor taken out of service by its configuration or through the API is still
audited and shown, but offers nothing, at once and with its reason, until it is lifted or its end
passes; the API's survives a restart."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client.core import Metric

from tests.support.claims_client import WRITER, auth, call, claim, write_config
from tests.support.factories import GIB, domain, host
from tests.support.serving import Server, parse_samples, running_server, value, wait_for
from virtcap.claims.database import SCHEMA_VERSION, ClaimDatabase
from virtcap.config import ConfigError, parse_config
from virtcap.demo import DEMO_DIR, demo_config
from virtcap.exposition import fragments
from virtcap.exposition.families import HypervisorView, build_families, render, views
from virtcap.exposition.fragments import FragmentCache
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.snapshot import NO_CLAIMS, HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import (
    LocalSimulation,
    SimulatedHost,
    ToleranceReport,
    scheduler_host,
    scheduling_key,
)
from virtcap.model.capacity import host_capacity
from virtcap.model.host_fit import Demand
from virtcap.model.maintenance import Maintenance, in_effect, maintenance_end, maintenance_reason
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource
from virtcap.model.scheduler import COMPUTE, SPREAD, Rejection, fleet_tolerance, host_state, schedule
from virtcap.service.oneshot import audit_fleet_once

PATH = "/api/v1/hypervisors/{}/maintenance"
SMALL = Demand({Resource.VCPU: 1, Resource.MEMORY: 2 * GIB, Resource.DISK: 10 * GIB})


# --- the configuration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("maintenance: true", Maintenance("config")),
        ("maintenance: false", None),
        ("maintenance: {reason: disk replacement}", Maintenance("config", "disk replacement")),
        (
            "maintenance: {reason: kernel, until: 2026-11-23T18:00:00Z}",
            Maintenance("config", "kernel", datetime(2026, 11, 23, 18, tzinfo=UTC).timestamp()),
        ),
        (
            'maintenance: {until: "2026-11-23T19:00:00+01:00"}',
            Maintenance("config", None, datetime(2026, 11, 23, 18, tzinfo=UTC).timestamp()),
        ),
    ],
)
def test_the_configuration_puts_a_hypervisor_into_maintenance(
    text: str, expected: Maintenance | None
) -> None:
    config = parse_config(f'hypervisors:\n  - {{name: a, uri: "test:///default", {text}}}\n', "x.yaml")
    assert config.hypervisors[0].maintenance == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "maintenance: {until: 2026-11-23}",
            "x.yaml: hypervisors[0].maintenance.until: expected an RFC 3339 time with a time zone, "
            "such as 2026-11-23T18:00:00Z, got 2026-11-23, a date without a time",
        ),
        (
            "maintenance: {until: 2026-11-23T18:00:00}",
            "x.yaml: hypervisors[0].maintenance.until: expected an RFC 3339 time with a time zone, "
            "such as 2026-11-23T18:00:00Z, got 2026-11-23T18:00:00, without a time zone",
        ),
        ("maintenance: {until: soon}", "x.yaml: hypervisors[0].maintenance.until: expected an RFC 3339 time"),
        (
            'maintenance: {reason: ""}',
            "x.yaml: hypervisors[0].maintenance.reason: expected a reason of 1 to 500 printable characters",
        ),
        ("maintenance: {reason: 3}", "x.yaml: hypervisors[0].maintenance.reason: expected a reason as text"),
        (
            "maintenance: {why: x}",
            "x.yaml: hypervisors[0].maintenance.why: unknown key 'why'; expected one of: reason, until",
        ),
        (
            "maintenance: yes please",
            "x.yaml: hypervisors[0].maintenance: expected true, false or a mapping of reason and until",
        ),
    ],
)
def test_a_bad_maintenance_is_refused_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f'hypervisors:\n  - {{name: a, uri: "test:///default", {text}}}\n', "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)


def test_maintenance_is_per_hypervisor_never_in_defaults(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("defaults: {maintenance: true}\n")
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"virtcap: configuration error: {path}: defaults.maintenance: unknown key 'maintenance'; "
        "expected one of: "
    )


# --- what is in effect


def test_either_source_is_enough_and_an_end_that_passed_ends_it() -> None:
    configured = Maintenance("config", None, until=100.0)
    api = Maintenance("api", "disks", since=10.0, set_by="builder")
    assert in_effect((api, configured), 50.0) == (configured, api)  # the configuration's first
    assert in_effect((api, configured), 100.0) == (api,)
    assert in_effect((None, Maintenance("api", "x", until=5.0)), 5.0) == ()
    assert maintenance_reason((configured, api)) == (
        "no reason given (until 1970-01-01T00:01:40Z) (set by the configuration); disks (set by the API)"
    )
    assert maintenance_reason(()) is None
    assert maintenance_end((configured,)) == 100.0
    assert maintenance_end((configured, api)) is None  # the API's lasts until lifted
    assert maintenance_end((configured, replace(api, until=200.0))) == 200.0


# --- capacity and the scheduler


def test_a_hypervisor_in_maintenance_offers_nothing_and_keeps_its_amounts() -> None:
    facts = host(domains=(domain("a", vcpus=2, memory=4 * GIB),))
    flavors = {"m1.small": SMALL}
    normal = host_capacity(facts, HostPolicy(), flavors)
    held = host_capacity(facts, HostPolicy(), flavors, maintenance="disks (set by the API)")
    # 64 GiB less 512 MiB reserved less 4 GiB used: 29 of 2 GiB
    assert normal.schedulable == {"m1.small": 29} and normal.maintenance is None
    assert held.schedulable == {"m1.small": 0}
    assert held.refusals == {"m1.small": ("in maintenance: disks (set by the API)",)}
    assert held.bottlenecks == {"m1.small": None} and held.limited_within == {}
    # totals, reserved, limits, usage and free amounts stay what the hypervisor has and holds
    assert held.resources == normal.resources
    assert held.domains_by_state == normal.domains_by_state and held.within == normal.within


def test_the_scheduler_refuses_a_hypervisor_in_maintenance_with_its_reason() -> None:
    policy = HostPolicy()
    roomy = host_state("roomy", host(memory=256 * GIB), policy, maintenance="rack move (set by the API)")
    tight = host_state("tight", host(memory=8 * GIB), policy)
    refused = Rejection(COMPUTE, ("hypervisor roomy is in maintenance: rack move (set by the API)",))
    result = schedule([roomy, tight], SMALL, 1)
    assert result.hosts == ("tight",) and result.rejections["roomy"] == refused
    forced = schedule([roomy, tight], SMALL, 1, force_hosts=("roomy",))
    assert not forced.placed and forced.rejections["roomy"] == refused
    assert schedule([roomy, tight], SMALL, 1).hosts == schedule([tight], SMALL, 1).hosts


def test_an_evacuation_takes_nothing_there_and_its_own_domains_can_still_be_drained() -> None:
    policy = HostPolicy()
    eight = tuple(domain(f"vm{n}", memory=8 * GIB) for n in range(2))

    def fleet(maintenance: str | None) -> list[Any]:
        roomy = host(memory=256 * GIB, domains=(domain("kept", memory=8 * GIB),))
        return [
            host_state("failing", host(memory=32 * GIB, domains=eight), policy),
            host_state("held", roomy, policy, maintenance=maintenance),
            host_state("spare", host(memory=32 * GIB), policy),
        ]

    before = fleet_tolerance(fleet(None))
    assert {target for _vm, target in before.evacuations["failing"].placements} == {"held"}  # the roomiest
    during = fleet_tolerance(fleet("firmware (set by the API)"))
    assert {target for _vm, target in during.evacuations["failing"].placements} == {"spare"}
    # it can be drained: its domain finds a host (the one with the most free memory and CPUs)
    assert during.evacuations["held"].feasible and during.evacuations["held"].placements == (
        ("kept", "spare"),
    )


# --- the failure tolerance of a real audit


@pytest.fixture(scope="module")
def audited() -> tuple[HypervisorSnapshot, ...]:
    return tuple(asyncio.run(audit_fleet_once(demo_config(), cpu_window=0.0)))


def _placements(report: ToleranceReport) -> dict[str, tuple[tuple[str, str], ...]]:
    return {name: found.placements for name, found in report.evacuations.items()}


def test_the_simulation_leaves_a_hypervisor_in_maintenance_out_at_once_and_takes_it_back(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    hosts = [SimulatedHost(s.name, s, up=True) for s in audited if s.up]
    simulation = LocalSimulation()
    first = simulation.compute(hosts, SPREAD, 3)
    assert first is not None
    targets = [target for found in first.evacuations.values() for _vm, target in found.placements]
    busiest = max(set(targets), key=targets.count)  # the hypervisor evacuations use most
    entry = (Maintenance("api", "firmware"),)
    held = [
        replace(h, audit=h.audit.with_claims(NO_CLAIMS, entry)) if h.name == busiest else h for h in hosts
    ]
    before = next(h for h in hosts if h.name == busiest)
    after = next(h for h in held if h.name == busiest)
    assert scheduling_key(scheduler_host(before)) != scheduling_key(scheduler_host(after))
    report = simulation.compute(held, SPREAD, 3)
    assert report is not None and report.incremental  # the change alone is computed again
    assert busiest in report.evacuations  # its own evacuation is still computed
    for name, found in report.evacuations.items():
        assert all(target != busiest for _vm, target in found.placements), name
    full = LocalSimulation().compute(held, SPREAD, 3)
    assert full is not None and _placements(full) == _placements(report)
    back = simulation.compute(hosts, SPREAD, 3)
    assert back is not None and _placements(back) == _placements(first)


def test_every_hypervisor_shows_its_maintenance_and_only_a_changed_one_is_rendered_again(
    audited: tuple[HypervisorSnapshot, ...],
) -> None:
    store = SnapshotStore()
    store.track([snapshot.name for snapshot in audited])
    for snapshot in audited:
        store.record(snapshot, "success" if snapshot.up else "failure")
    cache = FragmentCache()
    now = time.time()
    cache.render(views(store, now, 600))
    rendered: list[str] = []
    whole_fleet = build_families

    def counting(hypervisors: tuple[HypervisorView, ...], *args: Any, **kwargs: Any) -> list[Metric]:
        rendered.extend(view.name for view in hypervisors)
        return whole_fleet(hypervisors, *args, **kwargs)

    down = next(snapshot.name for snapshot in audited if not snapshot.up)
    ending = (Maintenance("api", "x", until=2e9),)
    held = {"compute-01": ending, down: (Maintenance("config"),)}
    # an audited hypervisor is in maintenance as its capacity says, whatever the ledger's map
    # says (the two change together); one that is down, as the map says
    audit = store.hypervisors["compute-01"].last_good
    assert audit is not None
    store.replace_good("compute-01", audit, audit.with_claims(NO_CLAIMS, ending))
    fleet = views(store, now, 600, None, {"compute-02": ending, down: held[down]})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fragments, "build_families", counting)
        body = cache.render(fleet)
    assert sorted(rendered) == sorted(["compute-01", down])
    assert body == render(fleet)
    samples = parse_samples(body.decode())
    configured = {s.name for s in audited if s.capacity is not None and s.capacity.maintenance is not None}
    assert configured == {"compute-05"}  # the demo's own, by its configuration
    for snapshot in audited:
        expected = 1 if snapshot.name in held or snapshot.name in configured else 0
        assert value(samples, "hypervisor_maintenance", hypervisor=snapshot.name) == expected
    assert value(samples, "hypervisor_maintenance_end_timestamp_seconds", hypervisor="compute-01") == 2e9
    assert value(samples, "hypervisor_maintenance_end_timestamp_seconds", hypervisor=down) is None


# --- the database


def _in_database(path: Path, work: Any) -> Any:
    async def run() -> Any:
        database = ClaimDatabase(str(path))
        await database.open()
        try:
            return await work(database)
        finally:
            await database.close()

    return asyncio.run(run())


def test_the_apis_maintenance_is_stored_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    entry = Maintenance("api", "disks", until=2e9, since=1e9, set_by="builder")
    other = Maintenance("api", "rack", since=1e9, set_by="ops")

    async def write(database: ClaimDatabase) -> None:
        await database.put_maintenance("a", replace(entry, reason="first"))
        await database.put_maintenance("a", entry)  # replaced, not added
        await database.put_maintenance("b", other)
        await database.put_maintenance("c", other)
        await database.delete_maintenance(["c"])

    _in_database(path, write)
    assert _in_database(path, ClaimDatabase.maintenance) == {"a": entry, "b": other}


def _version_4(path: Path) -> None:
    """A file as virtcap wrote it with schema version 4: claims, no maintenance."""
    old = sqlite3.connect(path)
    old.executescript(
        """CREATE TABLE claims (
            id TEXT PRIMARY KEY, hypervisor TEXT NOT NULL,
            created_at REAL NOT NULL, expires_at REAL NOT NULL, domain_uuid TEXT, owner TEXT NOT NULL,
            flavor TEXT);
        CREATE TABLE claim_amounts (
            claim_id TEXT NOT NULL, resource_class TEXT NOT NULL, amount INTEGER NOT NULL,
            PRIMARY KEY (claim_id, resource_class));
        CREATE TABLE claim_extra_specs (
            claim_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (claim_id, key));
        CREATE TABLE claim_instances (
            claim_id TEXT NOT NULL, instance INTEGER NOT NULL, hypervisor TEXT NOT NULL,
            PRIMARY KEY (claim_id, instance));
        INSERT INTO claims VALUES ('a', 'h', 1.0, 9.0, NULL, 'ci', NULL);
        INSERT INTO claim_amounts VALUES ('a', 'VCPU', 2);
        INSERT INTO claim_instances VALUES ('a', 0, 'h');
        PRAGMA user_version = 4;"""
    )
    old.commit()
    old.close()


def test_a_database_of_schema_version_4_gains_maintenance_in_place(tmp_path: Path) -> None:
    path = tmp_path / "claims.sqlite"
    _version_4(path)
    entry = Maintenance("api", "disks", since=1e9, set_by="builder")

    async def migrate(database: ClaimDatabase) -> dict[str, Maintenance]:
        await database.put_maintenance("h", entry)
        return await database.maintenance()

    assert _in_database(path, migrate) == {"h": entry}
    assert SCHEMA_VERSION == 7
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION

    async def claims(database: ClaimDatabase) -> list[Claim]:
        return await database.open()  # a second open: already version 7, nothing to migrate

    held = _in_database(path, claims)
    assert held == [Claim("a", "h", {Resource.VCPU: 2}, 1.0, 9.0, None, "ci")]


# --- through the API of a running exporter (audits every hour: nothing here waits for one)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as running:
        yield running


def metric(server: Server, name: str, **labels: str) -> float | None:
    return value(server.samples(), name, **labels)


def eventually(server: Server, name: str, expected: float | None, **labels: str) -> None:
    """/metrics is re-rendered within half a second of a change: well within 3 s, never an audit."""
    wait_for(lambda: metric(server, name, **labels) == expected, 3, what=f"{name}{labels} == {expected}")


def maintain(server: Server, name: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return call(server, "PUT", PATH.format(name), body, auth() if headers is None else headers)


def test_the_api_takes_a_hypervisor_out_at_once_and_gives_it_back(server: Server) -> None:
    big = {"hypervisor": "big", "flavor": "m1.small"}
    assert metric(server, "hypervisor_maintenance", hypervisor="big") == 0
    fits = metric(server, "hypervisor_schedulable_instances", **big)
    assert fits is not None and fits > 0
    total = metric(server, "hypervisor_resource_size", hypervisor="big", resource="memory", unit="bytes")
    used = metric(server, "hypervisor_resource_used", hypervisor="big", resource="memory", unit="bytes")
    audits = metric(server, "virtcap_audits_total", hypervisor="big", outcome="success")
    assert call(server, "POST", "/api/v1/placements", {"flavor": "m1.small"})[1]["placed"] == ["big"]

    status, held = maintain(server, "big", {"reason": "disk replacement"})
    assert status == 200, held
    assert held["hypervisor"] == "big" and held["in_maintenance"] is True
    assert held["reason"] == "disk replacement (set by the API)" and held["until"] is None
    (entry,) = held["entries"]
    assert (entry["source"], entry["reason"], entry["set_by"], entry["until"]) == (
        "api",
        "disk replacement",
        WRITER[0],
        None,
    )
    assert maintain(server, "big", {"reason": "disk replacement"}) == (200, held)  # again: the same
    assert call(server, "GET", PATH.format("big")) == (200, held)
    assert call(server, "GET", "/api/v1/maintenance") == (200, {"hypervisors": [held]})

    eventually(server, "hypervisor_maintenance", 1, hypervisor="big")
    eventually(server, "hypervisor_schedulable_instances", 0, **big)
    assert metric(server, "hypervisor_maintenance_end_timestamp_seconds", hypervisor="big") is None
    assert (
        metric(server, "hypervisor_resource_size", hypervisor="big", resource="memory", unit="bytes") == total
    )
    assert (
        metric(server, "hypervisor_resource_used", hypervisor="big", resource="memory", unit="bytes") == used
    )
    assert metric(server, "hypervisor_maintenance", hypervisor="small") == 0
    assert metric(server, "virtcap_audits_total", hypervisor="big", outcome="success") == audits  # no audit

    placed = call(server, "POST", "/api/v1/placements", {"flavor": "m1.small"})[1]
    assert placed["placed"] and placed["placed"] != ["big"]
    assert placed["rejections"]["big"] == {
        "filter": "ComputeFilter",
        "reasons": ["hypervisor big is in maintenance: disk replacement (set by the API)"],
    }
    status, refused = claim(server, hypervisor="big", vcpu=1)
    assert status == 409
    assert refused["error"] == (
        "the claim does not fit on big: hypervisor big is in maintenance: disk replacement (set by the API)"
    )
    assert refused["reasons"] == {
        "big": ["hypervisor big is in maintenance: disk replacement (set by the API)"]
    }
    status, elsewhere = claim(server, hypervisor="any", vcpu=1, ttl="1m")
    assert status == 201 and elsewhere["hypervisor"] != "big"
    assert call(server, "DELETE", f"/api/v1/claims/{elsewhere['id']}", headers=auth())[0] == 200
    capacity = call(server, "GET", "/api/v1/capacity")[1]
    document = next(h for h in capacity["hypervisors"] if h["name"] == "big")
    assert document["maintenance"] == {key: item for key, item in held.items() if key != "hypervisor"}
    # the configured flavor and those discovered on its domains: none fits
    assert "m1.small" in document["schedulable"] and set(document["schedulable"].values()) == {0}
    refused = ["in maintenance: disk replacement (set by the API)"]
    assert document["refusals"] == {flavor: refused for flavor in document["schedulable"]}

    status, lifted = call(server, "DELETE", PATH.format("big"), headers=auth())
    assert status == 200, lifted
    assert lifted == {
        "hypervisor": "big",
        "in_maintenance": False,
        "reason": None,
        "until": None,
        "entries": [],
    }
    assert call(server, "DELETE", PATH.format("big"), headers=auth()) == (200, lifted)  # nothing left to lift
    assert call(server, "GET", "/api/v1/maintenance") == (200, {"hypervisors": []})
    eventually(server, "hypervisor_maintenance", 0, hypervisor="big")
    eventually(server, "hypervisor_schedulable_instances", fits, **big)
    assert call(server, "POST", "/api/v1/placements", {"flavor": "m1.small"})[1]["placed"] == ["big"]
    assert metric(server, "virtcap_audits_total", hypervisor="big", outcome="success") == audits


def test_changes_need_a_writer_and_a_reader_is_told_403(tmp_path: Path) -> None:
    reader = ("prometheus", "r3ader-pass")
    hashed = bcrypt.hashpw(reader[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users:\n  {reader[0]}: '{hashed}'\n")
    args = ["--config", str(write_config(tmp_path)), "--web.config.file", str(web_file)]
    body = {"reason": "disks"}
    with running_server(args, tmp_path, headers=auth(*reader)) as server:
        assert maintain(server, "big", body, {})[0] == 401
        assert maintain(server, "big", body, auth(password="wrong"))[0] == 401
        assert maintain(server, "big", body, auth(*reader))[0] == 403
        assert call(server, "DELETE", PATH.format("big"), headers=auth(*reader))[0] == 403
        assert call(server, "GET", PATH.format("big"))[0] == 401  # reads are the readers'
        status, answer = call(server, "GET", PATH.format("big"), headers=auth(*reader))
        assert status == 200 and answer["in_maintenance"] is False
        assert maintain(server, "big", body)[0] == 200
        assert call(server, "GET", PATH.format("big"), headers=auth(*reader))[1]["in_maintenance"] is True


BAD_BODIES = [
    ({}, "reason: required key is missing"),
    ({"reason": ""}, "reason: expected a reason of 1 to 500 printable characters on one line"),
    ({"reason": "two\nlines"}, "reason: expected a reason of 1 to 500 printable characters on one line"),
    ({"reason": "x" * 501}, "reason: expected a reason of 1 to 500"),
    ({"reason": ["x"]}, "reason: expected a reason as text"),
    ({"reason": "x", "until": "tomorrow"}, "until: expected an RFC 3339 time with a time zone"),
    ({"reason": "x", "until": "2030-01-01T00:00:00"}, "until: expected an RFC 3339 time with a time zone"),
    ({"reason": "x", "until": 1900000000}, "until: expected an RFC 3339 time with a time zone as a string"),
    ({"reason": "x", "until": "2001-01-01T00:00:00Z"}, "until: the time has passed already"),
    ({"reason": "x", "colour": "red"}, "unknown key 'colour'"),
    ([1], "the body must be a JSON object"),
    (b"{not json", "the body is not JSON"),
    (b'{"reason": "x", "until": NaN}', "NaN is not a JSON value"),
]


def test_bad_input_gets_400_and_an_unknown_hypervisor_404_and_nothing_changes(server: Server) -> None:
    for body, message in BAD_BODIES:
        status, answer = maintain(server, "big", body)
        assert status == 400, (body, answer)
        assert message in answer["error"] and "\n" not in answer["error"], (body, answer)
    for method in ("GET", "PUT", "DELETE"):
        status, answer = call(server, method, PATH.format("nowhere"), {"reason": "x"}, auth())
        assert (
            status == 404 and answer["error"] == "unknown hypervisor 'nowhere': not a configured hypervisor"
        )
    assert call(server, "GET", "/api/v1/maintenance") == (200, {"hypervisors": []})
    assert call(server, "PATCH", PATH.format("big"), {"reason": "x"}, auth())[0] == 405
    assert "Traceback" not in server.log_text()


def test_the_apis_maintenance_survives_a_restart_and_ends_by_itself(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    until = "2099-01-01T00:00:00Z"
    with running_server(["--config", str(config)], tmp_path) as server:
        status, held = maintain(server, "small", {"reason": "rack move", "until": until})
        assert status == 200 and held["until"] == until
        eventually(server, "hypervisor_maintenance_end_timestamp_seconds", 4070908800.0, hypervisor="small")
        server.process.send_signal(signal.SIGKILL)  # acknowledged: committed first
        server.process.wait(timeout=10)
    with running_server(["--config", str(config)], tmp_path) as restarted:
        assert call(restarted, "GET", PATH.format("small")) == (200, held)
        eventually(restarted, "hypervisor_maintenance", 1, hypervisor="small")
        eventually(restarted, "hypervisor_schedulable_instances", 0, hypervisor="small", flavor="m1.small")
        # an end in a second: the exporter's clock ends it, without an audit or a request
        soon = datetime.fromtimestamp(time.time() + 2, UTC).isoformat(timespec="seconds")
        assert maintain(restarted, "small", {"reason": "rack move", "until": soon})[0] == 200
        wait_for(
            lambda: metric(restarted, "hypervisor_maintenance", hypervisor="small") == 0, 8, what="the end"
        )
        assert metric(restarted, "hypervisor_maintenance_end_timestamp_seconds", hypervisor="small") is None
        assert metric(restarted, "hypervisor_schedulable_instances", hypervisor="small", flavor="m1.small")
        assert call(restarted, "GET", "/api/v1/maintenance") == (200, {"hypervisors": []})
    rows = sqlite3.connect(tmp_path / "claims.sqlite").execute("SELECT count(*) FROM maintenance")
    assert rows.fetchone() == (0,)


def test_the_api_cannot_lift_the_configurations_maintenance(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(
        config.read_text().replace('compute-05.xml"}', 'compute-05.xml", maintenance: {reason: "PSU swap"}}')
    )
    with running_server(["--config", str(config)], tmp_path) as server:
        assert metric(server, "hypervisor_maintenance", hypervisor="small") == 1
        assert metric(server, "hypervisor_schedulable_instances", hypervisor="small", flavor="m1.small") == 0
        status, refused = call(server, "DELETE", PATH.format("small"), headers=auth())
        assert status == 409
        assert refused["error"] == (
            "hypervisor small is in maintenance by its configuration (PSU swap): the API cannot lift it; "
            "remove `maintenance` from its entry in the configuration file and reload"
        )
        status, both = maintain(server, "small", {"reason": "and firmware"})
        assert status == 200
        assert [entry["source"] for entry in both["entries"]] == ["config", "api"]
        assert both["reason"] == "PSU swap (set by the configuration); and firmware (set by the API)"
        assert call(server, "DELETE", PATH.format("small"), headers=auth())[0] == 409  # nothing changed
        assert call(server, "GET", PATH.format("small")) == (200, both)


def test_virtcap_audit_and_place_leave_a_configured_maintenance_out(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace('compute-04.xml"}', 'compute-04.xml", maintenance: true}'))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "virtcap", *args, "--config", str(config)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    table = run("audit")
    assert table.returncode == 0, table.stderr
    assert "big: up, domains: " in table.stdout
    assert "  IN MAINTENANCE, offers nothing: no reason given (set by the configuration)" in table.stdout
    document = json.loads(run("audit", "--format", "json").stdout)
    big = next(h for h in document["hypervisors"] if h["name"] == "big")
    assert big["maintenance"]["in_maintenance"] is True
    assert "m1.small" in big["schedulable"] and set(big["schedulable"].values()) == {0}
    placed = json.loads(run("place", "--flavor", "m1.small", "--format", "json").stdout)
    assert placed["placed"] and "big" not in placed["placed"]
    assert placed["rejections"]["big"]["filter"] == "ComputeFilter"


# --- when the maintenance started, and the maintenance command


START = "hypervisor_maintenance_start_timestamp_seconds"


def test_the_start_of_a_maintenance_is_exported_and_survives_restarts(tmp_path: Path) -> None:
    """The API's starts at its PUT; the configuration's when the exporter first saw it, kept in the
    claims database, so that a restart (a gap in the series) does not start it again."""
    extra = f'  - {{name: kept, uri: "test://{DEMO_DIR / "compute-05.xml"}", maintenance: {{reason: PSU}}}}\n'
    config = write_config(tmp_path, extra_hypervisors=extra)
    before = time.time()
    with running_server(["--config", str(config)], tmp_path) as server:
        wait_for(lambda: metric(server, START, hypervisor="kept") is not None, 5, what="the start")
        configured = metric(server, START, hypervisor="kept")
        assert configured is not None and before - 1 <= configured <= time.time()
        (entry,) = call(server, "GET", PATH.format("kept"))[1]["entries"]
        assert entry["source"] == "config" and entry["since"] is not None and entry["set_by"] is None
        assert metric(server, START, hypervisor="big") is None  # in service: no series
        status, held = maintain(server, "big", {"reason": "disks"})
        assert status == 200, held
        since = datetime.fromisoformat(held["entries"][0]["since"]).timestamp()
        # the document says it to the second
        wait_for(
            lambda: abs((metric(server, START, hypervisor="big") or 0) - since) < 1, 3, what="the API's start"
        )
        api_start = metric(server, START, hypervisor="big")
        # the database keeps the configuration's start (the next expiry tick stores it)
        database = tmp_path / "claims.sqlite"
        wait_for(
            lambda: (
                sqlite3.connect(database).execute("SELECT count(*) FROM maintenance_configured").fetchone()
                == (1,)
            ),
            5,
            what="the configuration's start stored",
        )
    time.sleep(1.1)  # a start taken again at the restart would differ by a second or more
    with running_server(["--config", str(config)], tmp_path) as restarted:
        wait_for(lambda: metric(restarted, START, hypervisor="kept") is not None, 5, what="the start")
        assert metric(restarted, START, hypervisor="kept") == configured
        assert metric(restarted, START, hypervisor="big") == api_start
        # out of the configuration's maintenance: its start is forgotten, and a new one starts anew
        config.write_text(config.read_text().replace(", maintenance: {reason: PSU}", ""))
        restarted.process.send_signal(signal.SIGHUP)
        eventually(restarted, "hypervisor_maintenance", 0, hypervisor="kept")
        assert metric(restarted, START, hypervisor="kept") is None
        wait_for(
            lambda: (
                sqlite3.connect(tmp_path / "claims.sqlite")
                .execute("SELECT count(*) FROM maintenance_configured")
                .fetchone()
                == (0,)
            ),
            5,
            what="the configuration's start forgotten",
        )


def maintenance_cli(
    server: Server, *args: str, user: str | None = WRITER[0]
) -> subprocess.CompletedProcess[str]:
    credentials = ["--user", user] if user is not None else []
    return subprocess.run(
        [sys.executable, "-m", "virtcap", "maintenance", *args, "--url", server.base_url, *credentials],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "VIRTCAP_PASSWORD": WRITER[1]},
    )


def test_the_maintenance_command_sets_lists_and_lifts(server: Server) -> None:
    before = time.time()
    set_ = maintenance_cli(server, "set", "big", "--reason", "kernel upgrade", "--for", "2h")
    assert set_.returncode == 0, set_.stderr
    document = json.loads(set_.stdout)
    assert document["in_maintenance"] is True and document["entries"][0]["set_by"] == WRITER[0]
    until = datetime.fromisoformat(document["until"]).timestamp()
    assert before + 7200 <= until <= time.time() + 7201
    listed = maintenance_cli(server, "list", user=None)  # a read: no credentials needed
    assert listed.returncode == 0, listed.stderr
    assert [entry["hypervisor"] for entry in json.loads(listed.stdout)["hypervisors"]] == ["big"]
    eventually(server, "hypervisor_maintenance", 1, hypervisor="big")

    unauthorized = maintenance_cli(server, "lift", "big", user=None)
    assert unauthorized.returncode == 1 and "401" in unauthorized.stderr
    unknown = maintenance_cli(server, "set", "nowhere", "--reason", "x")
    assert unknown.returncode == 1 and "unknown hypervisor" in unknown.stderr
    past = maintenance_cli(server, "set", "big", "--reason", "x", "--until", "2001-01-01T00:00:00Z")
    assert past.returncode == 1 and "until" in past.stderr
    usage = maintenance_cli(server, "set", "big", "--reason", "x", "--for", "soon")
    assert usage.returncode == 2 and "--for" in usage.stderr

    lifted = maintenance_cli(server, "lift", "big")
    assert lifted.returncode == 0, lifted.stderr
    assert json.loads(lifted.stdout)["in_maintenance"] is False
    eventually(server, "hypervisor_maintenance", 0, hypervisor="big")
