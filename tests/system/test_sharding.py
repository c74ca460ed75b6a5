"""Sharding: the consistent hash that assigns hypervisors to shards, the configuration and flags
that choose a shard, and real `virtcap serve` shards that together serve every hypervisor once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.claims_client import call, claim
from tests.support.claims_client import write_config as write_claims_config
from tests.support.serving import Samples, Server, running_server, series, value, wait_for, write_fleet_config
from virtcap.commands.main import main
from virtcap.config import ConfigError, parse_config
from virtcap.demo import DEMO_DIR
from virtcap.model.sharding import MAX_SHARDS, UNSHARDED, Shard, jump_consistent_hash, name_key, shard_of

NAMES = [f"compute-{index:05d}" for index in range(10_000)]
"""Hypervisor names as fleets spell them: a common prefix and a number, the worst case for a weak
hash (consecutive names differ in a few bits)."""

MOVED_TOLERANCE = 0.02
"""|moved share - 1/(M+1)| at most: four standard deviations of a binomial share over 10,000 names
(sqrt(0.25 / 10,000) = 0.005 at its widest); the names are fixed, so the test is deterministic."""


# --- the assignment, pure ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "buckets", "bucket"),
    [
        (1, 1, 0),
        (42, 57, 43),
        (0xDEAD10CC, 1, 0),
        (0xDEAD10CC, 666, 361),
        (256, 1024, 520),
        (2**64 - 1, 128, 92),
    ],
)
def test_jump_hash_gives_the_buckets_of_the_published_implementations(
    key: int, buckets: int, bucket: int
) -> None:
    """The test vectors the reference implementations of Lamping and Veach's algorithm share: two
    exporters built from other code agree on the bucket of a key."""
    assert jump_consistent_hash(key, buckets) == bucket


def test_names_hash_with_blake2b_not_pythons_salted_hash() -> None:
    """The same shards in every process: Python's hash() of a string changes with PYTHONHASHSEED."""
    # BLAKE2b with an 8-byte digest, big-endian: `b2sum -l 64` prints the same digest
    assert name_key("compute-01") == 0x245EACEF035852A7
    assert shard_of("compute-01", 2) == 1 and shard_of("compute-03", 2) == 0
    script = (
        "from virtcap.model.sharding import shard_of; print([shard_of(f'compute-{i}', 7) for i in range(50)])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "random")
    }
    assert outputs == {f"{[shard_of(f'compute-{i}', 7) for i in range(50)]}\n"}


@pytest.mark.parametrize("total", range(1, 17))
def test_every_name_is_in_exactly_one_shard_and_shards_are_even(total: int) -> None:
    shards = [shard_of(name, total) for name in NAMES]
    assert all(0 <= shard < total for shard in shards)
    held = [sum(Shard(ordinal, total).holds(name) for ordinal in range(total)) for name in NAMES[:2000]]
    assert set(held) == {1}
    counts = Counter(shards)
    expected = len(NAMES) / total
    # within 5 standard deviations of a binomial count (sqrt(n p (1 - p)) <= 50 here)
    assert all(abs(counts[ordinal] - expected) <= 5 * 50 for ordinal in range(total)), counts


@pytest.mark.parametrize("total", range(1, 16))
def test_one_more_shard_moves_about_one_in_m_plus_1_names_all_onto_the_new_shard(total: int) -> None:
    before = [shard_of(name, total) for name in NAMES]
    after = [shard_of(name, total + 1) for name in NAMES]
    moved = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    assert {new for _old, new in moved} <= {total}
    share = len(moved) / len(NAMES)
    assert abs(share - 1 / (total + 1)) <= MOVED_TOLERANCE, (share, 1 / (total + 1))


def test_a_modulo_would_move_most_names() -> None:
    """What the consistent hash saves: with `key % M`, 3 -> 4 shards moves three names in four."""
    moved = sum(name_key(name) % 3 != name_key(name) % 4 for name in NAMES) / len(NAMES)
    consistent = sum(shard_of(name, 3) != shard_of(name, 4) for name in NAMES) / len(NAMES)
    assert moved > 0.7 and consistent < 0.3


def test_a_shard_is_below_the_total_and_the_total_bounded() -> None:
    assert Shard(0, 1) == UNSHARDED and not UNSHARDED.sharded
    assert str(Shard(2, 3)) == "shard 2 of 3 (0 to 2)"
    for ordinal, total in ((3, 3), (-1, 2), (0, 0), (0, MAX_SHARDS + 1)):
        with pytest.raises(ValueError, match="expected"):
            Shard(ordinal, total)


# --- configuration and flags ------------------------------------------------------------------


def fleet_text(count: int, sharding: str = "") -> str:
    entries = "\n".join(f'  - {{name: hv-{index:02d}, uri: "test:///default"}}' for index in range(count))
    return f"{sharding}\nhypervisors:\n{entries}\n"


def test_the_file_chooses_a_shard_and_keeps_the_whole_fleet_known() -> None:
    config = parse_config(fleet_text(40, "sharding: {shard: 1, total_shards: 3}"), "fleet.yaml")
    assert config.shard == Shard(1, 3)
    assert [h.name for h in config.hypervisors] == [
        f"hv-{index:02d}" for index in range(40) if shard_of(f"hv-{index:02d}", 3) == 1
    ]
    assert len(config.configured_hypervisors) == 40
    outside = next(h.name for h in config.configured_hypervisors if h not in config.hypervisors)
    assert config.shard_elsewhere(outside) == shard_of(outside, 3)
    assert "audited by shard" in config.not_here(outside)
    assert config.not_here("nowhere") == "not a configured hypervisor"
    unsharded = parse_config(fleet_text(40), "fleet.yaml")
    assert unsharded.shard == UNSHARDED and len(unsharded.hypervisors) == 40


@pytest.mark.parametrize(
    ("sharding", "message"),
    [
        (
            "sharding: {shard: 3, total_shards: 3}",
            "fleet.yaml: sharding.shard: expected a shard from 0 to total_shards - 1 (2), "
            "numbered from 0; got 3",
        ),
        ("sharding: {shard: -1}", "fleet.yaml: sharding.shard: expected a number at least 0, got -1"),
        (
            "sharding: {total_shards: 0}",
            "fleet.yaml: sharding.total_shards: expected a number at least 1, got 0",
        ),
        (
            "sharding: {total_shards: 5000}",
            f"fleet.yaml: sharding.total_shards: expected a number at most {MAX_SHARDS}, got 5000",
        ),
        (
            "sharding: {shards: 2}",
            "fleet.yaml: sharding.shards: unknown key 'shards'; expected one of: shard, total_shards",
        ),
        ("sharding: {shard: one}", "fleet.yaml: sharding.shard: expected a whole number, got 'one'"),
    ],
)
def test_bad_sharding_keys_name_the_file_the_key_and_what_was_expected(sharding: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(fleet_text(3, sharding), "fleet.yaml")
    assert str(error.value) == message


OF_3 = "from 0 to 2 of 3 total shards"


@pytest.mark.parametrize(
    ("sharding", "flags", "message"),
    [
        ("", ["--shard", "3", "--total-shards", "3"],
         f"--shard: expected a shard {OF_3} (--total-shards), numbered from 0; got 3"),
        ("", ["--shard", "1"],
         "--shard: expected a shard from 0 to 0 of 1 total shards (the default; give --total-shards too), "
         "numbered from 0; got 1"),
        ("", ["--shard", "x", "--total-shards", "2"],
         "--shard: expected a whole number from 0 to 1023, got 'x'"),
        ("", ["--total-shards", "0"], "--total-shards: expected a whole number from 1 to 1024, got '0'"),
        ("", ["--total-shards", "-2"], "--total-shards: expected a whole number from 1 to 1024, got '-2'"),
        ("sharding: {total_shards: 3}", ["--shard", "5"],
         f"--shard: expected a shard {OF_3} (FILE's sharding.total_shards), numbered from 0; got 5"),
        ("sharding: {shard: 2, total_shards: 3}", ["--total-shards", "2"],
         "--total-shards: expected more than 2 total shards (FILE's sharding.shard is 2, "
         "numbered from 0); got 2"),
    ],
)  # fmt: skip
def test_bad_flags_exit_2_with_one_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sharding: str, flags: list[str], message: str
) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text(fleet_text(3, sharding))
    assert main(["serve", "--config", str(config), *flags]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [f"virtcap: configuration error: {message.replace('FILE', str(config))}"]


# --- real shards ------------------------------------------------------------------------------

COMPARED = (
    "hypervisor_up",
    "hypervisor_schedulable_instances",
    "hypervisor_resource_size",
    "hypervisor_resource_reserved",
    "hypervisor_resource_limit",
    "hypervisor_resource_used",
    "hypervisor_resource_free",
    "hypervisor_resource_allocated",
    "hypervisor_domains",
    "hypervisor_info",
)
"""Families whose every value depends on one hypervisor alone: the union of the shards' equals
one exporter's, value for value."""


def hypervisor_series(samples: Samples) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        key: v
        for key, v in samples.items()
        if key[0].startswith("hypervisor_") and "hypervisor" in dict(key[1])
    }


def served_hypervisors(samples: Samples) -> set[str]:
    return {dict(labels)["hypervisor"] for (_name, labels) in hypervisor_series(samples)}


def test_three_shards_serve_every_hypervisor_exactly_once(tmp_path: Path) -> None:
    demo_files = ["compute-01", "compute-02", "compute-03", "compute-04", "compute-06"]
    fleet = [(f"hv-{index:02d}", f"test://{DEMO_DIR / demo_files[index % 5]}.xml") for index in range(24)]
    config = write_fleet_config(tmp_path, (), fleet, audit="interval: 1h")
    # The flavors of the headroom families configured, not discovered: a shard discovers the
    # flavors of its own hypervisors' domains only (see the README's "Scaling out").
    config.write_text(
        config.read_text()
        + "discover_flavors: false\nflavors: [{name: m1.large, vcpu: 4, memory: 8GiB, disk: 40GiB}]\n"
    )
    names = {name for name, _uri in fleet}
    with ExitStack() as stack:
        shards = [
            stack.enter_context(
                running_server(
                    ["--config", str(config), "--shard", str(ordinal), "--total-shards", "3"], tmp_path
                )
            )
            for ordinal in range(3)
        ]
        whole = stack.enter_context(running_server(["--config", str(config)], tmp_path))
        # the failure tolerance, computed after the first audits, and the packing answers after it
        for server in (*shards, whole):
            wait_for(lambda: series(server.samples(), "hypervisor_evacuation_feasible"), 20)  # noqa: B023
            wait_for(lambda: value(server.samples(), "virtcap_packing_pending_answers") == 0, 30)  # noqa: B023
        everything = whole.samples()
        served = [shard.samples() for shard in shards]
        for ordinal, (shard, samples) in enumerate(zip(shards, served, strict=True)):
            mine = {name for name in names if shard_of(name, 3) == ordinal}
            assert mine and served_hypervisors(samples) == mine
            assert value(samples, "virtcap_shard_ordinal") == ordinal
            assert value(samples, "virtcap_total_shards") == 3
            status, ready = shard.get("/-/ready")
            assert status == 200
            assert (
                f"shard {ordinal} of 3 (0 to 2): {len(mine)} of 24 configured hypervisors" in ready.decode()
            )
            assert f"{len(mine)} of 24 configured hypervisors" in shard.get("/")[1].decode()
            other = min(names - mine)
            status, refused = shard.get(f"/probe?target={other}")
            assert status == 400 and f"audited by shard {shard_of(other, 3)} of 3" in refused.decode()
            # the other shards' hypervisors are not audited (nor connected to) at all
            audited = {dict(labels)["hypervisor"] for labels in series(samples, "virtcap_audits_total")}
            assert audited == mine
        keys = [key for samples in served for key in hypervisor_series(samples)]
        assert len(keys) == len(set(keys)), "a series served by two shards"
        assert set(keys) == set(hypervisor_series(everything))
        union = {key: v for samples in served for key, v in samples.items() if key[0] in COMPARED}
        assert union == {key: v for key, v in everything.items() if key[0] in COMPARED}
        assert value(everything, "virtcap_shard_ordinal") == 0
        assert value(everything, "virtcap_total_shards") == 1
        assert whole.get("/-/ready")[1].decode() == "Ready\nnot sharded: 24 hypervisors\n"


def test_a_reload_keeps_the_shard_and_assigns_new_hypervisors(tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    uri = f"test://{DEMO_DIR / 'compute-01.xml'}"

    def text(count: int, shard: int) -> str:
        entries = "\n".join(f'  - {{name: hv-{index:02d}, uri: "{uri}"}}' for index in range(count))
        return (
            f"audit: {{interval: 1h}}\nclaims: {{database: {tmp_path / 'claims.sqlite'}}}\n"
            f"sharding: {{shard: {shard}, total_shards: 2}}\nhypervisors:\n{entries}\n"
        )

    def reload_with(server: Server, new_text: str, logged: str) -> None:
        before = server.log_text().count(logged)
        config.write_text(new_text)
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: server.log_text().count(logged) > before, 10, what=logged)

    config.write_text(text(10, 0))
    with running_server(["--config", str(config)], tmp_path) as server:
        first = {f"hv-{index:02d}" for index in range(10) if shard_of(f"hv-{index:02d}", 2) == 0}
        assert served_hypervisors(server.samples()) == first
        reload_with(server, text(20, 1), "sharding changed: takes effect at the next start")
        wait_for(lambda: "configuration reloaded" in server.log_text(), 10)
        grown = {f"hv-{index:02d}" for index in range(20) if shard_of(f"hv-{index:02d}", 2) == 0}
        assert grown > first
        wait_for(
            lambda: served_hypervisors(server.samples()) == grown, 20, what="the new hypervisors of shard 0"
        )
        assert value(server.samples(), "virtcap_shard_ordinal") == 0
        assert "shard 0 of 2" in server.get("/-/ready")[1].decode()
        assert len(series(server.samples(), "hypervisor_up")) == len(grown)


def test_claims_belong_to_the_shard_of_their_hypervisor(tmp_path: Path) -> None:
    """Of mixed, big and small, shard 2 of 3 holds small alone: a claim on `any` lands there (one
    exporter for all three places it on big, tests/claims/test_claims.py), and the others' hypervisors
    are refused with the shard that holds them."""
    assert (shard_of("mixed", 3), shard_of("big", 3), shard_of("small", 3)) == (1, 1, 2)
    config = write_claims_config(tmp_path)
    with running_server(["--config", str(config), "--shard", "2", "--total-shards", "3"], tmp_path) as server:
        status, placed = claim(server, hypervisor="any", vcpu=2, memory="4GiB", disk="10GiB")
        assert status == 201 and placed["hypervisors"] == ["small"], placed
        status, refused = claim(server, hypervisor="big", vcpu=1)
        assert status == 400
        assert refused["error"] == (
            "hypervisor: 'big' is audited by shard 1 of 3, not by this exporter (shard 2): "
            "ask that shard's exporter"
        )
        status, unknown = call(server, "GET", "/api/v1/hypervisors/big/maintenance")
        assert status == 404 and "audited by shard 1 of 3" in unknown["error"], unknown
        status, _ = call(server, "GET", "/api/v1/hypervisors/small/maintenance")
        assert status == 200
