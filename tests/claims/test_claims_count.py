"""Claims of `count` instances and claims on `any`, through the HTTP API of a running exporter on
test-driver hypervisors: `any` lands where `POST /api/v1/placements` says for the same request
(spread and stack multipliers), a count is all or nothing, every instance counts on its
hypervisor in /metrics and /api/v1/capacity, and concurrent claims never overcommit."""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.claims_client import WRITER, auth, call, claim, write_config
from tests.support.serving import Server, running_server, value, wait_for
from virtcap.commands.main import main

GIB = 1024**3
STACK = "scheduler: {weighers: {ram: -1.0, cpu: -1.0, disk: -1.0}}"
FLAVOR = {"vcpu": 2, "memory": "4GiB", "disk": "10GiB"}
"""12 instances fit: 7 on big (its 70 GiB of free disk), 5 on small (its 21.5 GiB of free
memory), none on mixed (its vCPUs are overcommitted already)."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(write_config(tmp_path))], tmp_path) as running:
        yield running


def metric(server: Server, name: str, **labels: str) -> float | None:
    return value(server.samples(), name, **labels)


def placed(server: Server, count: int) -> list[str]:
    """Where the dry run places `count` instances of FLAVOR now (empty if not all fit)."""
    status, answer = call(server, "POST", "/api/v1/placements", {"flavor": FLAVOR, "count": count})
    assert status == 200, answer
    return list(answer["placed"])


def claimed(server: Server, hypervisor: str, resource: str) -> int:
    status, capacity = call(server, "GET", "/api/v1/capacity")
    assert status == 200
    found = next(h for h in capacity["hypervisors"] if h["name"] == hypervisor)
    return int(found["resources"][resource]["claimed"])


@pytest.mark.parametrize(("sections", "first"), [("", "big"), (STACK, "small")])
def test_any_lands_where_the_dry_run_places_it(tmp_path: Path, sections: str, first: str) -> None:
    config = write_config(tmp_path, sections=sections)
    with running_server(["--config", str(config)], tmp_path) as server:
        # spread: big has the most free RAM, CPU and disk; stack: small the least (mixed fits none)
        assert placed(server, 1) == [first]
        status, one = claim(server, hypervisor="any", **FLAVOR)
        assert status == 201, one
        assert (one["hypervisor"], one["hypervisors"], one["count"]) == (first, [first], 1)
        # the next batch sees the claim, as the dry run does
        expected = placed(server, 4)
        assert len(expected) == 4
        status, four = claim(server, hypervisor="any", count=4, **FLAVOR)
        assert status == 201, four
        assert four["hypervisors"] == expected and four["hypervisor"] == expected[0]
        # a configured flavor is placed as the dry run places it by name
        status, answer = call(server, "POST", "/api/v1/placements", {"flavor": "m1.small", "count": 3})
        assert status == 200 and len(answer["placed"]) == 3
        status, small = claim(server, hypervisor="any", flavor="m1.small", count=3)
        assert status == 201, small
        assert small["hypervisors"] == answer["placed"]


def test_a_count_is_all_or_nothing_and_every_instance_counts_on_its_hypervisor(server: Server) -> None:
    assert len(placed(server, 12)) == 12 and placed(server, 13) == []
    status, refused = claim(server, hypervisor="any", count=13, **FLAVOR)
    assert status == 409, refused
    assert (refused["requested"], refused["fitted"]) == (13, 12)
    assert "no valid host for all 13 instances: 12 would fit" in refused["error"]
    assert set(refused["reasons"]) == set(refused["rejections"]) == {"mixed", "big", "small"}
    # big is out of disk, small of memory, after the 12 that fit; mixed never fitted
    assert refused["reasons"]["big"] == ["Free disk 0.00 GiB < requested 10 GiB"]
    assert refused["rejections"]["big"] == {
        "filter": "Placement",
        "reasons": ["claim refused: Free disk 0.00 GiB < requested 10 GiB"],
    }
    assert any("memory" in reason for reason in refused["reasons"]["small"])
    assert refused["rejections"]["mixed"]["filter"] == "Placement"
    assert call(server, "GET", "/api/v1/claims") == (200, {"claims": []})
    assert claimed(server, "big", "vcpu") == claimed(server, "small", "vcpu") == 0

    expected = placed(server, 12)
    status, held = claim(server, hypervisor="any", count=12, **FLAVOR)
    assert status == 201, held
    assert held["hypervisors"] == expected and Counter(expected) == {"big": 7, "small": 5}
    assert (held["vcpu"], held["memory"], held["disk"]) == (2, 4 * GIB, 10 * GIB)  # per instance
    assert claimed(server, "big", "vcpu") == 14 and claimed(server, "small", "memory") == 20 * GIB
    wait_for(
        lambda: metric(server, "virtcap_claims_pending", hypervisor="big") == 7, 3, what="7 pending on big"
    )
    assert metric(server, "virtcap_claims_pending", hypervisor="small") == 5
    assert metric(server, "virtcap_claims_pending", hypervisor="mixed") == 0
    assert metric(server, "hypervisor_resource_claimed", hypervisor="big", resource="disk", unit="bytes") == (
        70 * GIB
    )
    assert claim(server, hypervisor="any", **FLAVOR)[0] == 409
    assert claim(server, hypervisor="big", **FLAVOR)[0] == 409

    # deleted: every instance is released at once
    assert call(server, "DELETE", f"/api/v1/claims/{held['id']}", headers=auth()) == (200, held)
    assert claimed(server, "big", "vcpu") == claimed(server, "small", "memory") == 0
    wait_for(lambda: metric(server, "virtcap_claims_pending", hypervisor="big") == 0, 3, what="none pending")
    assert placed(server, 12) == expected


def test_a_named_count_is_held_on_its_hypervisor_all_or_nothing(server: Server) -> None:
    # small: 44 vCPUs free, 14 instances of 3
    status, refused = claim(server, hypervisor="small", vcpu=3, count=15)
    assert status == 409, refused
    assert refused["error"] == "14 of 15 instances fit on small; nothing is held (all or nothing)"
    assert refused["reasons"] == {"small": ["Free vcpu 2.00 VCPU < requested 3 VCPU"]}
    assert claimed(server, "small", "vcpu") == 0
    status, held = claim(server, hypervisor="small", vcpu=3, count=14)
    assert status == 201, held
    assert held["hypervisors"] == ["small"] * 14 and held["hypervisor"] == "small"
    assert claimed(server, "small", "vcpu") == 42
    assert call(server, "GET", f"/api/v1/claims/{held['id']}") == (200, held)


def test_concurrent_count_claims_never_overcommit(server: Server) -> None:
    """30 builds race for batches of 1 to 4 instances of FLAVOR on any and on big: at most 12
    instances are held in all, at most 7 on big, and no class a claim asks for goes below 0."""

    def one(number: int) -> tuple[int, Any]:
        where = "big" if number % 3 == 0 else "any"
        return claim(server, hypervisor=where, count=1 + number % 4, **FLAVOR)

    with concurrent.futures.ThreadPoolExecutor(max_workers=15) as pool:
        answers = list(pool.map(one, range(30)))
    assert {status for status, _ in answers} <= {201, 409}
    held = [answer for status, answer in answers if status == 201]
    instances = Counter(name for answer in held for name in answer["hypervisors"])
    assert sum(instances.values()) <= 12 and instances["big"] <= 7 and instances["mixed"] == 0
    assert sum(instances.values()) >= 12 - 3  # what is left is less than the smallest batch refused
    status, capacity = call(server, "GET", "/api/v1/capacity")
    assert status == 200
    for hypervisor in capacity["hypervisors"]:
        if instances[hypervisor["name"]]:
            for resource in ("vcpu", "memory", "disk"):
                assert hypervisor["resources"][resource]["free"] >= 0, (hypervisor["name"], resource)
    assert claimed(server, "big", "vcpu") == 2 * instances["big"]
    assert claimed(server, "small", "vcpu") == 2 * instances["small"]


def test_the_cli_claims_a_count(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    os.environ["VIRTCAP_PASSWORD"] = WRITER[1]
    try:
        common = ["claim", "create", "--url", server.base_url, "--user", WRITER[0], "--hypervisor", "any"]
        code = main([*common, "--vcpu", "2", "--memory", "4GiB", "--disk", "10GiB", "--count", "3"])
        assert code == 0
        created = json.loads(capsys.readouterr().out)
        assert created["count"] == 3 and len(created["hypervisors"]) == 3
        assert main([*common, "--vcpu", "2", "--memory", "4GiB", "--disk", "10GiB", "--count", "10"]) == 1
        refused = json.loads(capsys.readouterr().err)
        assert (refused["requested"], refused["fitted"]) == (10, 9)
        with pytest.raises(SystemExit) as usage:
            main([*common, "--vcpu", "1", "--count", "0"])
        assert usage.value.code == 2
        assert "expected a whole number of instances of at least 1, got '0'" in capsys.readouterr().err
    finally:
        del os.environ["VIRTCAP_PASSWORD"]
