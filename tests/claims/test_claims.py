"""Claims through the HTTP API of a running exporter, on test-driver hypervisors."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from resource import RLIMIT_FSIZE, prlimit
from typing import Any

import pytest

from tests.support.claims_client import HASH, WRITER, auth, call, claim, write_config
from tests.support.serving import Server, running_server, value, wait_for
from virtcap.demo import DEMO_DIR

GIB = 1024**3
NOVA_1_UUID = "00000000-0000-0000-0000-000000000002"  # a domain of mixed-node.xml


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as running:
        yield running


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the tests whose every claim is refused: they leave it as they found it
    (each checks that no claim was made)."""
    directory = tmp_path_factory.mktemp("refusing")
    with running_server(["--config", str(write_config(directory))], directory) as running:
        yield running


def metric(server: Server, name: str, **labels: str) -> float | None:
    return value(server.samples(), name, **labels)


def fresh_metric(server: Server, name: str, expected: float, **labels: str) -> None:
    """/metrics is re-rendered within half a second of a change (the bound leaves a busy machine
    room)."""
    wait_for(lambda: metric(server, name, **labels) == expected, 10, what=f"{name}{labels} == {expected}")


def test_a_claim_counts_in_used_until_deleted(server: Server) -> None:
    vcpu = {"hypervisor": "big", "resource": "vcpu", "unit": "cpus"}
    memory = {"hypervisor": "big", "resource": "memory", "unit": "bytes"}
    used_before = metric(server, "hypervisor_resource_used", **vcpu)
    assert used_before == 200
    status, created = claim(
        server, hypervisor="big", vcpu=4, memory="8GiB", disk="20GiB", ttl="5m", owner="ci"
    )
    assert status == 201, created
    assert created["hypervisor"] == "big" and created["vcpu"] == 4 and created["memory"] == 8 * GIB
    assert created["owner"] == "ci" and created["expires_at"] > created["created_at"]
    fresh_metric(server, "hypervisor_resource_used", 204, **vcpu)
    assert metric(server, "hypervisor_resource_claimed", **vcpu) == 4
    assert metric(server, "hypervisor_resource_claimed", **memory) == 8 * GIB
    assert metric(server, "hypervisor_resource_free", **vcpu) == 256 - 204
    assert metric(server, "virtcap_claims_pending", hypervisor="big") == 1
    assert metric(server, "virtcap_claims_total", outcome="created") == 1

    assert call(server, "GET", "/api/v1/claims") == (200, {"claims": [created]})
    assert call(server, "GET", f"/api/v1/claims/{created['id']}") == (200, created)
    capacity = call(server, "GET", "/api/v1/capacity")[1]
    big = next(h for h in capacity["hypervisors"] if h["name"] == "big")
    assert big["resources"]["vcpu"]["claimed"] == 4 and big["resources"]["vcpu"]["used"] == 204

    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth()) == (200, created)
    assert call(server, "GET", f"/api/v1/claims/{created['id']}")[0] == 404
    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth())[0] == 404
    fresh_metric(server, "hypervisor_resource_used", 200, **vcpu)
    assert metric(server, "virtcap_claims_total", outcome="deleted") == 1


def test_a_claim_that_does_not_fit_gets_409_with_every_reason(server: Server) -> None:
    # mixed: vcpu limit 4 with 12 used (free -8); pcpu 2 of 2 used; memory free 31.5 - 16 GiB
    status, answer = claim(server, hypervisor="mixed", vcpu=1, pcpu=1, memory="16GiB")
    assert status == 409
    assert answer["reasons"] == {
        "mixed": [
            "Free vcpu -8.00 VCPU < requested 1 VCPU",
            "Free pcpu 0.00 PCPU < requested 1 PCPU",
            "Free memory 13824.00 MiB < requested 16384 MiB",
        ]
    }
    assert metric(server, "virtcap_claims_pending", hypervisor="mixed") == 0
    fresh_metric(server, "virtcap_claims_total", 1, outcome="rejected")


def test_any_places_where_the_scheduler_does_or_refuses(server: Server) -> None:
    # Nova's weighers with the default multipliers (spread): "big" has the most free RAM, CPU and
    # disk (see tests/claims/test_claims_count.py for the dry run's answer against the claim's)
    status, placed = claim(server, hypervisor="any", vcpu=2, memory="4GiB", disk="10GiB")
    assert status == 201
    assert placed["hypervisor"] == "big" and placed["hypervisors"] == ["big"] and placed["count"] == 1
    status, refused = claim(server, hypervisor="any", vcpu=1, memory="1TiB")
    assert status == 409
    assert set(refused["reasons"]) == {"mixed", "big", "small"}
    assert any("memory" in reason for reason in refused["reasons"]["big"])
    assert refused["rejections"]["big"]["filter"] == "Placement"
    assert (refused["requested"], refused["fitted"]) == (1, 0)


DEEP = b"[" * 5000
BEYOND_SQLITE = 2**63  # SQLite stores integers up to 2^63-1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"hypervisor": "nowhere", "vcpu": 1}, "unknown hypervisor 'nowhere'"),
        ({"hypervisor": "big", "vcpu": -1}, "vcpu: expected a number at least 0"),
        ({"hypervisor": "big", "memory": "-4GiB"}, "memory: expected a size"),
        ({"hypervisor": "big", "memory": "lots"}, "memory: expected a size"),
        ({"hypervisor": "big", "disk": 1.5}, "disk: expected a size"),
        ({"hypervisor": "big", "vcpu": 1, "colour": "red"}, "unknown key 'colour'"),
        ({"hypervisor": "big"}, "asks for at least one of vcpu, pcpu, memory, disk"),
        ({"vcpu": 1}, "hypervisor: required key is missing"),
        ({"hypervisor": "big", "vcpu": 1, "ttl": "2h"}, "ttl: at most 3600s"),
        ({"hypervisor": "big", "vcpu": 1, "ttl": "soon"}, "ttl: expected a duration"),
        ({"hypervisor": "big", "vcpu": 1, "domain_uuid": "not-a-uuid"}, "domain_uuid"),
        ({"hypervisor": "big", "vcpu": True}, "vcpu"),
        ([1, 2], "the body must be a JSON object"),
        (b"{not json", "the body is not JSON"),
        (b'{"hypervisor": "big\xff", "vcpu": 1}', "the body is not JSON"),
        # Python's json reads these, JSON has no such values: a NaN ttl made a 500
        (b'{"hypervisor": "big", "vcpu": 1, "ttl": NaN}', "NaN is not a JSON value"),
        (b'{"hypervisor": "big", "vcpu": 1, "ttl": Infinity}', "Infinity is not a JSON value"),
        (b'{"hypervisor": "big", "vcpu": 1, "ttl": -Infinity}', "-Infinity is not a JSON value"),
        (b'{"hypervisor": "big", "vcpu": 1, "ttl": 1e400}', "1e400 is out of range"),
        (b'{"hypervisor": "big", "vcpu": 1, "ttl": 1' + b"0" * 400 + b"}", ""),
        (DEEP, "nested too deeply"),
        (b'{"hypervisor": "big", "vcpu": 1, "owner": ' + b"[" * 20 + b"]" * 20 + b"}", "nested too deeply"),
        # sizes that do not fit are refused as such, not answered "does not fit" (409)
        ({"hypervisor": "big", "memory": 99999999999999999999999}, "memory"),
        ({"hypervisor": "big", "memory": BEYOND_SQLITE}, "memory"),
        ({"hypervisor": "big", "disk": f"{BEYOND_SQLITE // 1024**4}TiB"}, "disk"),
    ],
)
def test_bad_input_gets_400_with_a_clear_message(refusing: Server, body: Any, message: str) -> None:
    status, answer = call(refusing, "POST", "/api/v1/claims", body, auth())
    assert status == 400, answer
    assert answer["error"], answer
    assert message in answer["error"], answer
    assert call(refusing, "GET", "/api/v1/claims")[1] == {"claims": []}


def test_a_body_over_the_limit_gets_413(refusing: Server) -> None:
    body = b'{"hypervisor": "big", "owner": "' + b"x" * 20000 + b'"}'
    status, answer = call(refusing, "POST", "/api/v1/claims", body, auth())
    assert status == 413, answer
    assert "the body is larger than 16384 bytes" in answer["error"]
    assert call(refusing, "GET", "/api/v1/claims")[1] == {"claims": []}


def test_sizes_beyond_what_sqlite_stores_are_refused_even_where_nothing_limits_them(tmp_path: Path) -> None:
    # Without its storage the disk has no limit: any disk claim fits, and 2^63 bytes reached
    # SQLite, whose OverflowError made a 500.
    unlimited = (
        f'  - {{name: nopool, uri: "test://{DEMO_DIR / "compute-05.xml"}", disk: {{pool: nowhere}}}}\n'
    )
    config = write_config(tmp_path, extra_hypervisors=unlimited)
    with running_server(["--config", str(config)], tmp_path) as server:
        status, answer = claim(server, hypervisor="nopool", disk=BEYOND_SQLITE)
        assert status == 400 and "disk" in answer["error"], answer
        status, largest = claim(server, hypervisor="nopool", disk=BEYOND_SQLITE - 1)
        assert status == 201, largest
        # held in whole GiB, as Placement counts disk: the bytes asked for, rounded up
        held = call(server, "GET", f"/api/v1/claims/{largest['id']}")[1]["disk"]
        assert held == -(-(BEYOND_SQLITE - 1) // GIB) * GIB


def test_changes_need_a_writer(server: Server) -> None:
    body = {"hypervisor": "big", "vcpu": 1}
    assert call(server, "POST", "/api/v1/claims", body)[0] == 401
    assert call(server, "POST", "/api/v1/claims", body, auth(password="wrong"))[0] == 401
    assert call(server, "POST", "/api/v1/claims", body, auth(user="nobody"))[0] == 401
    status, created = claim(server, **body)
    assert status == 201
    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}")[0] == 401
    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", auth(password="wrong"))[0] == 401
    assert (
        call(server, "GET", "/api/v1/claims")[0] == 200
    )  # reads are open unless the web config says otherwise


def test_without_writers_no_change_is_possible(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text().replace(f'  writers: {{{WRITER[0]}: "{HASH}"}}\n', ""))
    with running_server(["--config", str(config)], tmp_path) as server:
        assert claim(server, hypervisor="big", vcpu=1)[0] == 401


def test_the_last_resources_go_to_exactly_as_many_claims_as_fit(server: Server) -> None:
    # small: 64 - 20 = 44 vCPUs free (its pinned Nova guest's flavor asks for a PCPU instead).
    # 41 builds race for 3 each: exactly 14 fit, and 2 vCPUs are left.
    free = metric(server, "hypervisor_resource_free", hypervisor="small", resource="vcpu", unit="cpus")
    assert free == 44
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(lambda _: claim(server, hypervisor="small", vcpu=3)[0], range(41)))
    assert statuses.count(201) == 14
    assert statuses.count(409) == 27
    fresh_metric(server, "hypervisor_resource_free", 2, hypervisor="small", resource="vcpu", unit="cpus")


def test_a_claim_is_reconciled_when_its_domain_appears(tmp_path: Path) -> None:
    # nova-1 exists on "mixed": the next audit finds the claimed UUID there and releases the claim
    with running_server(["--config", str(write_config(tmp_path, interval="1s"))], tmp_path) as server:
        memory = {"hypervisor": "mixed", "resource": "memory", "unit": "bytes"}
        assert metric(server, "hypervisor_resource_used", **memory) == 18 * GIB
        status, on_mixed = claim(server, hypervisor="mixed", memory="1GiB", domain_uuid=NOVA_1_UUID.upper())
        assert status == 201, on_mixed
        assert on_mixed["domain_uuid"] == NOVA_1_UUID
        # the same UUID claimed on another hypervisor is not released by nova-1 on "mixed"
        status, on_big = claim(server, hypervisor="big", vcpu=3, domain_uuid=NOVA_1_UUID)
        assert status == 201
        wait_for(
            lambda: call(server, "GET", f"/api/v1/claims/{on_mixed['id']}")[0] == 404, 5, what="reconciled"
        )
        fresh_metric(server, "virtcap_claims_total", 1, outcome="reconciled")
        # the domain carries the allocation now: nothing is counted twice
        fresh_metric(server, "hypervisor_resource_used", 18 * GIB, **memory)
        time.sleep(2.5)  # two more audits of "big"
        assert call(server, "GET", f"/api/v1/claims/{on_big['id']}")[0] == 200


def test_a_claim_expires(server: Server) -> None:
    status, created = claim(server, hypervisor="big", vcpu=1, ttl="1s")
    assert status == 201
    wait_for(lambda: call(server, "GET", f"/api/v1/claims/{created['id']}")[0] == 404, 4, what="expiry")
    fresh_metric(server, "virtcap_claims_total", 1, outcome="expired")
    fresh_metric(server, "hypervisor_resource_claimed", 0, hypervisor="big", resource="vcpu", unit="cpus")


def test_acknowledged_claims_survive_sigkill(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    acknowledged: list[str] = []
    with running_server(["--config", str(config)], tmp_path) as server:
        stop = time.monotonic() + 1.5

        def burst() -> None:
            while time.monotonic() < stop:
                try:
                    status, answer = claim(server, hypervisor="big", memory="1MiB")
                except OSError:
                    return  # the server died under us
                if status == 201:
                    acknowledged.append(answer["id"])

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(burst) for _ in range(8)]
            time.sleep(1.0)
            server.process.send_signal(signal.SIGKILL)
            for future in futures:
                future.result()
        server.process.wait()
    assert len(acknowledged) > 20
    with running_server(["--config", str(config)], tmp_path) as restarted:
        held = {c["id"] for c in call(restarted, "GET", "/api/v1/claims")[1]["claims"]}
        assert set(acknowledged) <= held
        fresh_metric(restarted, "virtcap_claims_pending", len(held), hypervisor="big")


def test_the_cli_talks_to_the_api(server: Server) -> None:
    def cli(*args: str, password: str = WRITER[1]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "virtcap", "claim", *args, "--url", server.base_url],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            # PYTHONPATH kept: the package under test may come from it rather than the install
            env={"VIRTCAP_PASSWORD": password, "PATH": "/usr/bin:/bin"}
            | {name: value for name, value in os.environ.items() if name == "PYTHONPATH"},
        )

    created = cli("create", "--user", WRITER[0], "--hypervisor", "big", "--vcpu", "2", "--memory", "2GiB")
    assert created.returncode == 0, created.stderr
    claim_id = json.loads(created.stdout)["id"]
    listed = cli("list")
    assert listed.returncode == 0 and claim_id in listed.stdout
    refused = cli("create", "--user", WRITER[0], "--hypervisor", "mixed", "--vcpu", "1")
    assert refused.returncode == 1 and "Free vcpu -8.00 VCPU < requested 1 VCPU" in refused.stderr
    elsewhere = cli(
        "create", "--user", WRITER[0], "--hypervisor", "any", "--vcpu", "1", "--availability-zone", "az-9"
    )
    assert (
        elsewhere.returncode == 1
        and "hypervisor big is in no availability zone, not in az-9" in elsewhere.stderr
    )
    unauthorized = cli("delete", claim_id, "--user", WRITER[0], password="wrong")
    assert unauthorized.returncode == 1 and "401" in unauthorized.stderr
    deleted = cli("delete", claim_id, "--user", WRITER[0])
    assert deleted.returncode == 0 and claim_id in deleted.stdout


def test_capacity_is_the_audit_json_from_the_live_snapshot(server: Server, tmp_path: Path) -> None:
    (tmp_path / "again").mkdir()
    config = write_config(tmp_path / "again")
    one_shot = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(config), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    expected = json.loads(one_shot.stdout)

    def flavors_fitted(document: dict[str, Any]) -> list[list[str]]:
        return [sorted(hypervisor["schedulable"]) for hypervisor in document["hypervisors"]]

    # a flavor discovered on one hypervisor is fitted on those audited before it at their next audit
    wait_for(
        lambda: flavors_fitted(call(server, "GET", "/api/v1/capacity")[1]) == flavors_fitted(expected),
        30,
        what="every discovered flavor fitted on every hypervisor",
    )
    # the failure tolerance (each hypervisor's evacuation) is computed in the background
    wait_for(
        lambda: call(server, "GET", "/api/v1/capacity")[1]["failure_tolerance"] is not None,
        30,
        what="the failure tolerance in the capacity document",
    )
    status, live = call(server, "GET", "/api/v1/capacity")
    assert status == 200
    tolerance = {key: value for key, value in live["failure_tolerance"].items() if key != "computed_at"}
    want = {key: value for key, value in expected["failure_tolerance"].items() if key != "computed_at"}
    del tolerance["duration_seconds"], want["duration_seconds"]
    assert tolerance == want

    def without_actual(document: dict[str, Any]) -> list[dict[str, Any]]:
        hypervisors = []
        for hypervisor in document["hypervisors"]:
            copy = json.loads(json.dumps(hypervisor))
            for resource in copy["resources"].values():
                resource.pop("actual")  # host CPU busy needs two samples: the one-shot takes them itself
            hypervisors.append(copy)
        return hypervisors

    for got, want in zip(without_actual(live), without_actual(expected), strict=True):
        for key in sorted(set(got) | set(want)):
            assert got.get(key) == want.get(key), (got["name"], key, got.get(key), want.get(key))


def claims_in_database(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as connection:
        return {row[0] for row in connection.execute("SELECT id FROM claims")}


@contextmanager
def file_size_limit(process: subprocess.Popen[bytes], limit: int) -> Iterator[None]:
    """Every write of the process past `limit` bytes of a file fails (EFBIG), as on a full disk.

    Only the soft limit changes: raising it back needs no privilege."""
    soft, hard = prlimit(process.pid, RLIMIT_FSIZE)
    prlimit(process.pid, RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        prlimit(process.pid, RLIMIT_FSIZE, (soft, hard))


def fill_write_ahead_log(server: Server, directory: Path) -> tuple[list[str], int]:
    """Claims until the write-ahead log is well past the server's log file. The log takes every
    write of the database: a file size limit at its size makes the database full while the
    server's log goes on. The held claims and the limit."""
    wal = directory / "claims.sqlite-wal"
    held: list[str] = []
    # at least one claim: the audits' domain history may have grown the log past the mark already
    while not held or not wal.exists() or wal.stat().st_size < server.log.stat().st_size + 64 * 1024:
        status, answer = claim(server, hypervisor="big", memory="1MiB")
        assert status == 201, answer
        held.append(answer["id"])
        assert len(held) < 100
    return held, wal.stat().st_size


def test_a_full_database_gets_503_and_nothing_changes(tmp_path: Path) -> None:
    database = tmp_path / "claims.sqlite"
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as server:
        held, limit = fill_write_ahead_log(server, tmp_path)
        memory = {"hypervisor": "big", "resource": "memory", "unit": "bytes"}
        fresh_metric(server, "hypervisor_resource_claimed", len(held) * 1024**2, **memory)
        fresh_metric(server, "virtcap_claims_total", len(held), outcome="created")

        with file_size_limit(server.process, limit):
            status, answer = call(server, "POST", "/api/v1/claims", {"hypervisor": "big", "vcpu": 2}, auth())
            assert status == 503, answer
            assert "the claims database refuses writes" in answer["error"]
            status, answer = call(server, "DELETE", f"/api/v1/claims/{held[0]}", headers=auth())
            assert status == 503, answer
            assert {c["id"] for c in call(server, "GET", "/api/v1/claims")[1]["claims"]} == set(held)
            time.sleep(1.0)  # past the next render
            assert metric(server, "hypervisor_resource_claimed", **memory) == len(held) * 1024**2
            assert metric(server, "virtcap_claims_total", outcome="created") == len(held)
            assert metric(server, "virtcap_claims_total", outcome="deleted") == 0
            assert "claim not created: the claims database refuses writes" in server.log_text()
        assert claims_in_database(database) == set(held)

        # nothing to repair once the disk has room again
        status, created = claim(server, hypervisor="big", vcpu=2)
        assert status == 201, created
        assert call(server, "DELETE", f"/api/v1/claims/{held[0]}", headers=auth())[0] == 200
        assert claims_in_database(database) == {*held[1:], created["id"]}


def test_503_says_when_to_retry(tmp_path: Path) -> None:
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as server:
        _, limit = fill_write_ahead_log(server, tmp_path)
        with file_size_limit(server.process, limit):
            request = urllib.request.Request(
                server.base_url + "/api/v1/claims",
                data=json.dumps({"hypervisor": "big", "vcpu": 1}).encode(),
                method="POST",
                headers={"Content-Type": "application/json", **auth()},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 503
            assert int(refused.value.headers["Retry-After"]) > 0
            assert refused.value.headers["Content-Type"].startswith("application/json")


def test_audits_go_on_while_the_database_refuses_to_release_a_reconciled_claim(tmp_path: Path) -> None:
    database = tmp_path / "claims.sqlite"
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as server:
        # audited once at start, not again for an hour: this claim waits for the next run (made
        # once that first audit is recorded: one still under way would reconcile it here)
        success = {"hypervisor": "mixed", "outcome": "success"}
        wait_for(lambda: metric(server, "virtcap_audits_total", **success) == 1, 30, what="mixed audited")
        status, on_mixed = claim(server, hypervisor="mixed", memory="1GiB", domain_uuid=NOVA_1_UUID)
        assert status == 201, on_mixed
        status, on_big = claim(server, hypervisor="big", vcpu=3)
        assert status == 201, on_big
    # Another process holds the write lock: every write of the next exporter fails with "database
    # is locked" after SQLite's busy timeout, the domains' history and the reconciled claim's row.
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        with running_server(["--config", str(write_config(tmp_path, interval="1s"))], tmp_path) as server:
            # reconciled all the same: the domain carries the allocation, nothing counts twice
            assert call(server, "GET", f"/api/v1/claims/{on_mixed['id']}")[0] == 404
            memory = {"hypervisor": "mixed", "resource": "memory", "unit": "bytes"}
            fresh_metric(server, "hypervisor_resource_used", 18 * GIB, **memory)
            fresh_metric(server, "virtcap_claims_total", 1, outcome="reconciled")
            assert call(server, "GET", f"/api/v1/claims/{on_big['id']}")[0] == 200
            # its row's delete, tried by the expiry of claims, waits for the busy timeout and fails
            refused = "the database refuses the delete"
            wait_for(lambda: refused in server.log_text(), 15, what="delete refused")
            # and the audits of that hypervisor go on
            audits = metric(server, "virtcap_audits_total", **success) or 0
            wait_for(
                lambda: (metric(server, "virtcap_audits_total", **success) or 0) >= audits + 2,
                15,
                what="two more audits of mixed",
            )
            assert metric(server, "hypervisor_up", hypervisor="mixed") == 1
            assert on_mixed["id"] in claims_in_database(database)

            holder.execute("ROLLBACK")
            # the row goes once the database accepts writes (tried again by the expiry of claims)
            wait_for(lambda: on_mixed["id"] not in claims_in_database(database), 15, what="row deleted")
            assert claims_in_database(database) == {on_big["id"]}
