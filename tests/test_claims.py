"""Claims through the HTTP API of a running exporter, on test-driver hypervisors."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.serving import Server, running_server, value, wait_for
from virtcap.demo import DEMO_DIR

MIXED = Path(__file__).parent / "fixtures" / "mixed-node.xml"
GIB = 1024**3
WRITER = ("builder", "b3tter-than-nothing")
HASH = bcrypt.hashpw(WRITER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
NOVA_1_UUID = "00000000-0000-0000-0000-000000000002"  # a domain of mixed-node.xml


def auth(user: str = WRITER[0], password: str = WRITER[1]) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def call(
    server: Server, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    request = urllib.request.Request(
        server.base_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except json.JSONDecodeError:
            return error.code, text.decode()


def claim(server: Server, **body: Any) -> tuple[int, Any]:
    return call(server, "POST", "/api/v1/claims", body, auth())


def write_config(directory: Path, interval: str = "1h", database: str | None = None) -> Path:
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""
audit: {{interval: {interval}}}
claims:
  database: {database or directory / "claims.sqlite"}
  default_ttl: 10m
  max_ttl: 1h
  writers: {{{WRITER[0]}: "{HASH}"}}
hypervisors:
  - {{name: mixed, uri: "test://{MIXED}", cpu_shared_set: "0", cpu_dedicated_set: "2,4"}}
  - {{name: big, uri: "test://{DEMO_DIR / "compute-04.xml"}"}}
  - {{name: small, uri: "test://{DEMO_DIR / "compute-05.xml"}"}}
flavors:
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 10GiB}}
"""
    )
    return config


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as running:
        yield running


def metric(server: Server, name: str, **labels: str) -> float | None:
    return value(server.samples(), name, **labels)


def fresh_metric(server: Server, name: str, expected: float, **labels: str) -> None:
    """/metrics is re-rendered within half a second of a change."""
    wait_for(lambda: metric(server, name, **labels) == expected, 3, what=f"{name}{labels} == {expected}")


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
            "Free memory 15872.00 MiB < requested 16384 MiB",
        ]
    }
    assert metric(server, "virtcap_claims_pending", hypervisor="mixed") == 0
    fresh_metric(server, "virtcap_claims_total", 1, outcome="rejected")


def test_any_places_on_the_roomiest_hypervisor_or_refuses(server: Server) -> None:
    status, placed = claim(server, hypervisor="any", vcpu=2, memory="4GiB", disk="10GiB")
    assert status == 201
    # after it, "small" keeps the largest share of its scarcest resource; "mixed" does not fit at all
    assert placed["hypervisor"] == "small"
    status, refused = claim(server, hypervisor="any", vcpu=1, memory="1TiB")
    assert status == 409
    assert set(refused["reasons"]) == {"mixed", "big", "small"}
    assert any("memory" in reason for reason in refused["reasons"]["big"])


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
        (b'{"hypervisor": "big", "owner": "' + b"x" * 20000 + b'"}', "the body is larger than 16384 bytes"),
    ],
)
def test_bad_input_gets_400_with_a_clear_message(server: Server, body: Any, message: str) -> None:
    status, answer = call(server, "POST", "/api/v1/claims", body, auth())
    assert status == 400, answer
    assert message in answer["error"], answer


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
    # small: 64 - 21 = 43 vCPUs free. 41 builds race for 2 each: exactly 21 fit.
    free = metric(server, "hypervisor_resource_free", hypervisor="small", resource="vcpu", unit="cpus")
    assert free == 43
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(lambda _: claim(server, hypervisor="small", vcpu=2)[0], range(41)))
    assert statuses.count(201) == 21
    assert statuses.count(409) == 20
    fresh_metric(server, "hypervisor_resource_free", 1, hypervisor="small", resource="vcpu", unit="cpus")


def test_a_claim_is_reconciled_when_its_domain_appears(tmp_path: Path) -> None:
    # nova-1 exists on "mixed": the next audit finds the claimed UUID there and releases the claim
    with running_server(["--config", str(write_config(tmp_path, interval="1s"))], tmp_path) as server:
        memory = {"hypervisor": "mixed", "resource": "memory", "unit": "bytes"}
        assert metric(server, "hypervisor_resource_used", **memory) == 16 * GIB
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
        fresh_metric(server, "hypervisor_resource_used", 16 * GIB, **memory)
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
            env={"VIRTCAP_PASSWORD": password, "PATH": "/usr/bin:/bin"},
        )

    created = cli("create", "--user", WRITER[0], "--hypervisor", "big", "--vcpu", "2", "--memory", "2GiB")
    assert created.returncode == 0, created.stderr
    claim_id = json.loads(created.stdout)["id"]
    listed = cli("list")
    assert listed.returncode == 0 and claim_id in listed.stdout
    refused = cli("create", "--user", WRITER[0], "--hypervisor", "mixed", "--vcpu", "1")
    assert refused.returncode == 1 and "Free vcpu -8.00 VCPU < requested 1 VCPU" in refused.stderr
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
    status, live = call(server, "GET", "/api/v1/capacity")
    assert status == 200

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
