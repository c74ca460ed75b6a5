"""Dry-run placement: `scheduler.weighers` in the configuration, `POST /api/v1/placements` on a
running exporter and `virtcap place` on one audit, against the demo and a small fleet reasoned
by hand."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.support.claims_client import HASH, WRITER, auth, call
from tests.support.demo import compute_05_maintenance
from tests.support.serving import running_server
from virtcap.config import ConfigError, load_config, parse_config
from virtcap.contract.placements import parse_placement_body
from virtcap.demo import demo_config
from virtcap.demo.fleetgen import HostSpec, write_fleet
from virtcap.model.scheduler import Multipliers
from virtcap.service.dryrun import place_locally

# --- configuration -----------------------------------------------------------------------------


def test_the_weighers_default_to_novas_spread() -> None:
    assert parse_config("{}\n", "x").multipliers == Multipliers(1.0, 1.0, 1.0)


def test_the_weighers_take_any_finite_multiplier_negative_ones_stack() -> None:
    config = parse_config("scheduler: {weighers: {ram: -1, cpu: 2.5, disk: '0'}}\n", "x")
    assert config.multipliers == Multipliers(ram=-1.0, cpu=2.5, disk=0.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{ram: .nan}", "x: scheduler.weighers.ram: expected a finite number from -1000 to 1000, got nan"),
        ("{cpu: -.inf}", "x: scheduler.weighers.cpu: expected a finite number from -1000 to 1000, got -inf"),
        ("{disk: 1001}", "x: scheduler.weighers.disk: expected a finite number from -1000 to 1000, got 1001"),
        ("{ram: true}", "x: scheduler.weighers.ram: expected a number, got True"),
        ("{ram: [1]}", "x: scheduler.weighers.ram: expected a number, got [1]"),
        ("{ram: lots}", "x: scheduler.weighers.ram: expected a number, got 'lots'"),
        ("{io: 1}", "x: scheduler.weighers.io: unknown key 'io'; expected one of: ram, cpu, disk"),
    ],
)
def test_a_bad_multiplier_is_one_clear_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"scheduler: {{weighers: {text}}}\n", "x")
    assert str(raised.value) == expected


def test_an_unknown_scheduler_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^x: scheduler\.filters: unknown key 'filters'"):
        parse_config("scheduler: {filters: []}\n", "x")


# --- the demo ----------------------------------------------------------------------------------

DEMO_HOSTS = [f"compute-{n:02d}" for n in range(1, 12)]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtcap", "place", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_batch_that_does_not_fit_the_demo_names_every_host_and_its_reason() -> None:
    started = time.time()
    run = _cli("--demo", "--flavor", "p1.8xlarge", "--count", "2", "--format", "json")
    assert run.returncode == 1, run.stderr
    answer = json.loads(run.stdout)
    assert (answer["requested"], answer["fitted"], answer["unplaced"], answer["placed"]) == (2, 0, 2, [])
    assert answer["no_valid_host"] == "No valid host was found. There are not enough hosts available."
    rejections = answer["rejections"]
    assert sorted(rejections) == DEMO_HOSTS
    assert rejections["compute-07"]["filter"] == "ComputeFilter"
    assert rejections["compute-07"]["reasons"][0].startswith("hypervisor compute-07 is down")
    assert rejections["compute-08"]["filter"] == "NUMATopologyFilter"
    assert rejections["compute-08"]["reasons"] == [
        "NUMA: cell 0: 6 free dedicated CPUs < 8 requested",
        "NUMA: cell 1: no large page size holds 16384 MiB "
        "(free: 9437184 x 4 KiB, 6144 x 2048 KiB, 14 x 1048576 KiB)",
    ]
    # the spare has 6 dedicated CPUs a cell, and no large page in the one with room for 8 pinned
    assert rejections["compute-10"] == {
        "filter": "NUMATopologyFilter",
        "reasons": [
            "NUMA: cell 0: 6 dedicated CPUs < 8 requested",
            "NUMA: cell 1: 6 dedicated CPUs < 8 requested",
            "NUMA: cell 2: 6 dedicated CPUs < 8 requested",
            "NUMA: cell 3: no large page size holds 16384 MiB "
            "(free: 13631488 x 4 KiB, 0 x 2048 KiB, 0 x 1048576 KiB)",
        ],
    }
    assert rejections["compute-05"]["filter"] == "ComputeFilter"
    (reason,) = rejections["compute-05"]["reasons"]
    maintenance = reason.removeprefix("hypervisor compute-05 is in maintenance: ")
    assert maintenance in compute_05_maintenance(started, time.time())
    for name in ("compute-01", "compute-02", "compute-04", "compute-06", "compute-11"):
        assert rejections[name]["reasons"] == [
            "Requested pcpu 8 PCPU: no inventory of PCPU on this hypervisor"
        ]


def test_a_forced_host_that_is_down_takes_nothing() -> None:
    run = _cli("--demo", "--flavor", "m1.small", "--force-host", "compute-07", "--format", "json")
    assert run.returncode == 1, run.stderr
    answer = json.loads(run.stdout)
    assert answer["fitted"] == 0
    assert answer["no_valid_host"] == "No valid host was found. There are not enough hosts available."
    assert answer["rejections"]["compute-07"]["filter"] == "ComputeFilter"
    assert {answer["rejections"][name]["filter"] for name in DEMO_HOSTS if name != "compute-07"} == {
        "force_hosts"
    }


def test_a_forced_host_that_does_not_exist_lists_every_hypervisor_as_not_forced() -> None:
    run = _cli("--demo", "--flavor", "m1.large", "--force-host", "compute-99", "--format", "json")
    assert run.returncode == 1, run.stderr
    answer = json.loads(run.stdout)
    assert (answer["fitted"], answer["no_valid_host"]) == (0, "No such host - host: compute-99")
    # the audited hypervisors as the one that is not (compute-07): none is the forced host
    reasons = ["not the forced host compute-99 (Nova asks Placement for the first of force_hosts only)"]
    assert answer["rejections"] == {
        name: {"filter": "force_hosts", "reasons": reasons} for name in DEMO_HOSTS
    }
    table = _cli("--demo", "--flavor", "m1.large", "--force-host", "compute-99")
    assert all(f"{name} " in table.stdout for name in DEMO_HOSTS), table.stdout


def test_the_table_says_how_many_do_not_fit_and_why_each_host_refused() -> None:
    run = _cli("--demo", "--flavor", "m1.large", "--count", "40")
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert (
        lines[0]
        == "NoValidHost: 38 of 40 instance(s) would fit, 2 would not; nothing is placed (all or nothing)."
    )
    assert (
        "  the 38 that fit would go to: compute-01 x4, compute-03 x1, compute-04 x3, compute-06 x3,"
        " compute-10 x22, compute-11 x5" in lines
    )
    refused = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  compute-")}
    assert sorted(refused) == DEMO_HOSTS
    assert refused["compute-07"] == refused["compute-05"] == "ComputeFilter"  # down, in maintenance
    assert any(
        "compute-01  Placement      claim refused: Free disk 0.00 GiB < requested 20 GiB" in x for x in lines
    )


# --- a small fleet, reasoned by hand -----------------------------------------------------------
#
# `big`: 16 CPUs, 64 GiB; `small`: 16 CPUs, 32 GiB; 100 GiB of disk each, nothing on either.
# 512 MiB reserved for the host, ratios 4 / 1 / 1. m1 asks for 2 vCPUs, 8 GiB, 10 GiB. Raw values
# (free RAM MiB, vCPUs x 4 - used, free disk MiB) are normalized by the largest, then summed:
#
# Spread (multipliers 1):
#   1. big 65024/64/102400, small 32256/64/102400: big 1+1+1 = 3 > small .496+1+1: big
#   2. big 56832/62/92160: big 1+.969+.9 = 2.869 > small .568+1+1 = 2.568: big
#   3. big 48640/60/81920: big 1+.9375+.8 = 2.738 > small .663+1+1 = 2.663: big
#   4. big 40448/58/71680: big 1+.906+.7 = 2.606 < small .797+1+1 = 2.797: small
#   5. small 24064/62/92160: big 1+.935+.778 = 2.713 > small .595+1+1 = 2.595: big
#
# Stack (every multiplier -1): small (-2.496 > -3) takes 3, leaving 7680 MiB: it still weighs
# best at the fourth and fifth steps but refuses them at its claim (8192 > 7680), so big takes
# them.

SPREAD_5 = ["big", "big", "big", "small", "big"]
STACK_5 = ["small", "small", "small", "big", "big"]


def _fleet_config(directory: Path, scheduler: str = "") -> Path:
    paths = write_fleet(
        [HostSpec("big", 16, 64, 100, 0), HostSpec("small", 16, 32, 100, 0)], directory / "nodes"
    )
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""
audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  writers: {{{WRITER[0]}: "{HASH}"}}
{scheduler}
defaults:
  allocation_ratios: {{vcpu: 4.0, memory: 1.0, disk: 1.0}}
  reserved: {{vcpu: 0, memory: 512MiB, disk: 0}}
hypervisors:
  - {{name: big, uri: "test://{paths["big"]}"}}
  - {{name: small, uri: "test://{paths["small"]}"}}
flavors:
  - {{name: m1, vcpu: 2, memory: 8GiB, disk: 10GiB}}
"""
    )
    return config


def _local(config: Path, **body: Any) -> dict[str, Any]:
    answer = place_locally(load_config(config), parse_placement_body({"flavor": "m1", **body}))
    document: dict[str, Any] = answer.model_dump(mode="json")
    return document


def test_a_batch_that_fits_lands_where_the_spread_weighers_say(tmp_path: Path) -> None:
    answer = _local(_fleet_config(tmp_path), count=5)
    assert (answer["fitted"], answer["unplaced"], answer["no_valid_host"]) == (5, 0, None)
    assert answer["placed"] == SPREAD_5
    first = answer["steps"][0]
    assert first["hypervisor"] == "big"
    assert first["candidates"] == 2
    # RAM: 65024 MiB is the largest free (1.0); CPU and disk equal on both (1.0 each)
    assert first["weights"] == {"ram": 1.0, "cpu": 1.0, "disk": 1.0}
    assert first["weight"] == 3.0
    fourth = answer["steps"][3]
    assert fourth["hypervisor"] == "small"
    assert fourth["weights"] == {"ram": pytest.approx(32256 / 40448), "cpu": 1.0, "disk": 1.0}
    second = answer["steps"][1]
    assert second["weights"] == {"ram": 1.0, "cpu": 62 / 64, "disk": pytest.approx(0.9)}


def test_stack_multipliers_from_the_configuration_change_the_choice(tmp_path: Path) -> None:
    stack = "scheduler: {weighers: {ram: -1.0, cpu: -1.0, disk: -1.0}}"
    answer = _local(_fleet_config(tmp_path, stack), count=5)
    assert answer["placed"] == STACK_5
    assert answer["rejections"]["small"]["filter"] == "Placement"
    assert answer["rejections"]["small"]["reasons"][0].startswith("claim refused: Free memory")


def test_all_or_nothing_and_anti_affinity(tmp_path: Path) -> None:
    config = _fleet_config(tmp_path)
    # 7 on big (63.5 GiB) and 3 on small (31.5 GiB): the eleventh finds no host
    answer = _local(config, count=11)
    assert (answer["fitted"], answer["unplaced"], answer["placed"]) == (10, 1, [])
    assert {r["filter"] for r in answer["rejections"].values()} == {"Placement"}
    apart = _local(config, count=3, anti_affinity=True)
    assert (apart["fitted"], apart["placed"]) == (2, [])
    assert apart["rejections"] == {
        "big": {
            "filter": "ServerGroupAntiAffinityFilter",
            "reasons": ["an instance of this request is already on big"],
        },
        "small": {
            "filter": "ServerGroupAntiAffinityFilter",
            "reasons": ["an instance of this request is already on small"],
        },
    }
    ignored = _local(config, count=2, ignore_hosts=["BIG"])
    assert ignored["placed"] == ["small", "small"]
    assert ignored["rejections"]["big"]["filter"] == "ignore_hosts"
    forced = _local(config, count=1, force_hosts=["small"])
    assert forced["placed"] == ["small"]
    missing = _local(config, count=1, force_hosts=["nowhere"])
    assert missing["no_valid_host"] == "No such host - host: nowhere"


# --- the API, and the CLI against it ------------------------------------------------------------


def _place(server: Any, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return call(server, "POST", "/api/v1/placements", body, headers)


def test_the_api_and_the_cli_agree_and_pending_claims_count(tmp_path: Path) -> None:
    config = _fleet_config(tmp_path)
    local = _cli("--config", str(config), "--flavor", "m1", "--count", "5", "--format", "json")
    assert local.returncode == 0, local.stderr
    with running_server(["--config", str(config)], tmp_path) as server:
        # read access: no writer's credentials needed, nothing held
        status, answer = _place(server, {"flavor": "m1", "count": 5})
        assert status == 200, answer
        assert answer == json.loads(local.stdout)
        assert answer["placed"] == SPREAD_5
        remote = _cli("--url", server.base_url, "--flavor", "m1", "--count", "5", "--format", "json")
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout) == answer
        status, claims = call(server, "GET", "/api/v1/claims")
        assert claims == {"claims": []}
        # while a claim, a write, needs a writer
        status, refused = call(server, "POST", "/api/v1/claims", {"hypervisor": "big", "memory": "1GiB"})
        assert status == 401, refused
        # a pending claim of 40 GiB on big leaves it 24064 MiB free: small (32256) takes the
        # first; then the RAM is equal and big's untouched CPUs and disk take the second
        status, held = call(
            server, "POST", "/api/v1/claims", {"hypervisor": "big", "memory": "40GiB"}, auth()
        )
        assert status == 201, held
        status, answer = _place(server, {"flavor": "m1", "count": 2})
        assert status == 200, answer
        assert answer["placed"] == ["small", "big"]
        assert answer["steps"][0]["weights"] == {"ram": 1.0, "cpu": 1.0, "disk": 1.0}
        status, answer = _place(
            server, {"flavor": {"vcpu": 2, "memory": "8GiB", "disk": "10GiB"}, "count": 6}
        )
        # big: 23.5 GiB left (2), small: 31.5 GiB (3)
        assert (status, answer["fitted"], answer["placed"]) == (200, 5, [])
        table = _cli("--url", server.base_url, "--vcpu", "2", "--memory", "8GiB", "--count", "6")
        assert table.returncode == 1
        assert table.stdout.startswith("NoValidHost: 5 of 6 instance(s) would fit, 1 would not")


BAD_BODIES: list[tuple[Any, str]] = [
    ([], "the body must be a JSON object"),
    ({"flavor": "m9"}, "flavor: unknown flavor 'm9'; expected one of: m1"),
    ({"flavor": "m1", "count": 0}, "count: "),
    ({"flavor": "m1", "count": 1001}, "count: "),
    ({"flavor": "m1", "count": 2.0}, "count: "),
    ({"flavor": "m1", "colour": "red"}, "colour: "),
    ({"count": 1}, "flavor: "),
    ({"flavor": {"vcpu": 2}}, "flavor"),
    ({"flavor": {"vcpu": 0, "memory": "1GiB"}}, "flavor"),
    (
        {"flavor": {"vcpu": 2, "memory": "1GiB", "extra_specs": {"hw:cpu_policy": "sometimes"}}},
        "hw:cpu_policy",
    ),
    (
        {"flavor": {"vcpu": 2, "memory": "1GiB", "extra_specs": {"pci_passthrough:alias": "gpu:1"}}},
        "flavor.extra_specs.pci_passthrough:alias: unknown alias 'gpu'",
    ),
    ({"flavor": "m1", "anti_affinity": "yes"}, "anti_affinity: "),
    ({"flavor": "m1", "ignore_hosts": "big"}, "ignore_hosts: "),
]


def test_bad_bodies_get_a_400_of_one_line(tmp_path: Path) -> None:
    config = _fleet_config(tmp_path)
    with running_server(["--config", str(config)], tmp_path) as server:
        for body, error in BAD_BODIES:
            status, answer = _place(server, body)
            assert status == 400, (body, answer)
            assert error in answer["error"], (body, answer)
            assert "\n" not in answer["error"]
        status, answer = call(server, "POST", "/api/v1/placements", b"{not json")
        assert status == 400, answer


def test_a_placement_needs_a_reader_not_a_writer(tmp_path: Path) -> None:
    config = _fleet_config(tmp_path)
    reader = ("prometheus", "r3ader-pass")
    hashed = bcrypt.hashpw(reader[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    web_file = tmp_path / "web.yml"
    web_file.write_text(f"basic_auth_users:\n  {reader[0]}: '{hashed}'\n")
    args = ["--config", str(config), "--web.config.file", str(web_file)]
    with running_server(args, tmp_path, headers=auth(*reader)) as server:
        body = {"flavor": "m1", "count": 1}
        status, _ = _place(server, body)
        assert status == 401
        status, _ = _place(server, body, auth())  # a writer is not a reader
        assert status == 401
        status, answer = _place(server, body, auth(*reader))
        assert (status, answer["placed"]) == (200, ["big"])


def test_the_cli_refuses_a_flavor_beside_its_amounts() -> None:
    run = _cli("--demo", "--flavor", "m1.large", "--vcpu", "2")
    assert run.returncode == 2
    assert run.stderr.startswith("virtcap: place: --flavor names a configured flavor")
    run = _cli("--demo", "--memory", "2GiB")
    assert run.returncode == 2
    run = _cli("--demo", "--flavor", "m1.large", "--count", "0")
    assert (run.returncode, run.stderr.startswith("virtcap: place: count: ")) == (2, True), run.stderr


def test_the_demo_config_has_flavors_to_place() -> None:
    assert {"m1.large", "p1.8xlarge"} <= {flavor.name for flavor in demo_config().flavors}
