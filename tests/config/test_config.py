import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.serving import running_server, value, wait_for
from virtcap.config import ConfigError, load_config, parse_config, yamlfile
from virtcap.config.yamlfile import load_yaml_text
from virtcap.demo import DEMO_DIR
from virtcap.model.resources import Resource

GIB = 1024**3
MIB = 1024**2

FULL = """
audit: {interval: 30s, timeout: 10s, concurrency: 32}
defaults:
  allocation_ratios: {vcpu: 4.0, memory: 1.0, disk: 1.0}
  reserved: {vcpu: 0, memory: 512MiB, disk: 0}
  cpu_shared_set: "0-15"
  cpu_dedicated_set: "16-31"
  disk: {pool: default}
  count_inactive_domains: true
hypervisors:
  - {name: compute-01, uri: "qemu+tls://compute-01/system", allocation_ratios: {vcpu: 8.0}}
  - name: compute-02
    uri: "qemu+ssh://root@compute-02/system"
    reserved: {memory: 2GiB}
    cpu_shared_set: "0-7"
    disk: {path: /var/lib/nova/instances}
    count_inactive_domains: false
flavors:
  - {name: m1.small, vcpu: 1, memory: 2GiB, disk: 20GiB}
  - {name: d1.pinned, pcpu: 2, memory: 4GiB}
"""


def test_the_contract_example_loads_and_merges_key_by_key() -> None:
    config = parse_config(FULL, "fleet.yaml")
    assert (config.audit.interval, config.audit.timeout, config.audit.concurrency) == (30.0, 10.0, 32)
    first, second = config.hypervisors
    assert first.policy.allocation_ratios[Resource.VCPU] == 8.0
    assert first.policy.allocation_ratios[Resource.MEMORY] == 1.0
    assert first.policy.reserved[Resource.MEMORY] == 512 * MIB
    assert first.policy.cpu_shared_set == frozenset(range(16))
    assert first.policy.cpu_dedicated_set == frozenset(range(16, 32))
    assert first.disk is not None and first.disk.pool == "default"
    assert second.policy.allocation_ratios[Resource.VCPU] == 4.0
    assert second.policy.reserved[Resource.MEMORY] == 2 * GIB
    assert second.policy.cpu_shared_set == frozenset(range(8))
    assert second.policy.cpu_dedicated_set == frozenset(range(16, 32))
    assert second.disk is not None and second.disk.path == "/var/lib/nova/instances"
    assert second.policy.count_inactive_domains is False
    assert config.flavor_demands["m1.small"].request == {
        Resource.VCPU: 1,
        Resource.PCPU: 0,
        Resource.MEMORY: 2 * GIB,
        Resource.DISK: 20 * GIB,
    }
    assert config.flavor_demands["d1.pinned"].request[Resource.PCPU] == 2


def test_no_config_audits_the_local_hypervisor_with_nova_defaults() -> None:
    config = load_config(None)
    (local,) = config.hypervisors
    assert local.uri == "qemu:///system"
    assert local.policy.allocation_ratios == {
        Resource.VCPU: 4.0,
        Resource.PCPU: 1.0,
        Resource.MEMORY: 1.0,
        Resource.DISK: 1.0,
    }
    assert local.policy.reserved[Resource.MEMORY] == 512 * MIB
    assert local.policy.count_inactive_domains is True


def test_an_empty_file_is_the_defaults() -> None:
    assert parse_config("", "empty.yaml").hypervisors[0].uri == "qemu:///system"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "defaults: {allocation_ratio: {vcpu: 2}}",
            "x.yaml: defaults.allocation_ratio: unknown key 'allocation_ratio'; expected one of: "
            "allocation_ratios, reserved, cpu_shared_set, cpu_dedicated_set, disk, count_inactive_domains",
        ),
        (
            "defaults: {allocation_ratios: {vcpu: -1.0}}",
            "x.yaml: defaults.allocation_ratios.vcpu: "
            "expected a number of at least 0 (0: Nova's default), got -1.0",
        ),
        (
            "defaults: {allocation_ratios: {gpu: 2.0}}",
            "x.yaml: defaults.allocation_ratios.gpu: unknown resource 'gpu'; "
            "expected one of: vcpu, memory, disk, pcpu",
        ),
        (
            "defaults: {reserved: {memory: 512MB}}",
            "x.yaml: defaults.reserved.memory: expected a size in bytes or with an IEC suffix "
            "(KiB, MiB, GiB, TiB), such as 512MiB, got '512MB'",
        ),
        (
            "hypervisors: [{name: a, uri: 'test:///default', reserved: {disk: lots}}]",
            "x.yaml: hypervisors[0].reserved.disk: expected a size in bytes or with an IEC suffix "
            "(KiB, MiB, GiB, TiB), such as 512MiB, got 'lots'",
        ),
        (
            "audit: {interval: soon}",
            "x.yaml: audit.interval: expected a duration such as 30s, 5m, 1h or 1m30s",
        ),
        ("audit: {concurrency: 0}", "x.yaml: audit.concurrency: expected a number at least 1, got 0"),
        ("hypervisors: [{name: a}]", "x.yaml: hypervisors[0].uri: required key is missing"),
        (
            "hypervisors: [{name: a, uri: u}, {name: a, uri: v}]",
            "x.yaml: (top level): hypervisors: the name 'a' is used twice",
        ),
        (
            "defaults: {cpu_shared_set: '0-7', cpu_dedicated_set: '4-11'}",
            "x.yaml: defaults.cpu_dedicated_set: overlaps cpu_shared_set on CPUs 4-7; "
            "expected two disjoint sets",
        ),
        (
            "defaults: {cpu_dedicated_set: '4-11', reserved: {vcpu: 2}}",
            "x.yaml: defaults.reserved.vcpu: cannot be combined with cpu_shared_set/cpu_dedicated_set",
        ),
        (
            "defaults: {allocation_ratios: {pcpu: 2.0}}",
            "x.yaml: defaults.allocation_ratios: the pcpu allocation ratio is fixed at 1.0",
        ),
        (
            "defaults: {disk: {pool: a, path: /b}}",
            "x.yaml: defaults.disk: expected exactly one of 'pool'",
        ),
        (
            "flavors: [{name: f, memory: 1GiB}]",
            "x.yaml: flavors[0]: a flavor requests at least one vcpu or pcpu",
        ),
        (
            "defaults: {count_inactive_domains: maybe}",
            "x.yaml: defaults.count_inactive_domains: expected true or false",
        ),
        ("[1, 2]", "x.yaml: expected a mapping of sections"),
        ("audit: {interval: [", "x.yaml:1:20: invalid YAML"),
    ],
)
def test_errors_name_the_file_the_key_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_missing_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^/nonexistent/virtcap\.yaml: cannot read: No such file"):
        load_config("/nonexistent/virtcap.yaml")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("defaults: {allocation_ratioz: {vcpu: 2}}", "unknown key 'allocation_ratioz'"),
        ("defaults: {allocation_ratios: {vcpu: -2}}", "expected a number of at least 0"),
        ("defaults: {allocation_ratios: {gpu: 1}}", "unknown resource 'gpu'"),
        ("defaults: {reserved: {memory: 1.5GB}}", "expected a size"),
    ],
)
def test_the_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"virtcap: configuration error: {path}: ")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


# Issue 12, item 6: configuration that is meaningless, slow or memory-hungry is refused with one
# line per problem naming the file and the key and what was expected, in bounded time and memory.

HUGE = "1" + "0" * 400  # a 401-digit number


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "defaults: {allocation_ratios: {vcpu: .inf}}",
            "x.yaml: defaults.allocation_ratios.vcpu: "
            "expected a finite number of at least 0 (Nova's default) and at most 1000, got inf",
        ),
        (
            "defaults: {allocation_ratios: {vcpu: 1e309}}",
            "x.yaml: defaults.allocation_ratios.vcpu: "
            "expected a finite number of at least 0 (Nova's default) and at most 1000, got '1e309'",
        ),
        (
            "defaults: {allocation_ratios: {memory: 1e300}}",
            "x.yaml: defaults.allocation_ratios.memory: "
            "expected a finite number of at least 0 (Nova's default) and at most 1000, got '1e300'",
        ),
        (
            "hypervisors: [{name: a, uri: u, allocation_ratios: {disk: 1.0e+300}}]",
            "x.yaml: hypervisors[0].allocation_ratios.disk: "
            "expected a finite number of at least 0 (Nova's default) and at most 1000, got 1e+300",
        ),
        (
            "defaults: {allocation_ratios: {vcpu: .nan}}",
            "x.yaml: defaults.allocation_ratios.vcpu: expected a finite number of at least 0",
        ),
        (
            f"defaults: {{reserved: {{memory: {HUGE}}}}}",
            "x.yaml: defaults.reserved.memory: expected a size of at most 9223372036854775807 bytes "
            "(2^63-1, about 8 EiB), got <a number of about 401 digits>",
        ),
        (
            f"flavors: [{{name: f, vcpu: 1, memory: '{HUGE}GiB'}}]",
            "x.yaml: flavors[0].memory: expected a size of at most 9223372036854775807 bytes",
        ),
        (
            "audit: {interval: .nan}",
            "x.yaml: audit.interval: expected a duration greater than 0 and at most 1 year (8760h), got nan",
        ),
        (
            "audit: {timeout: .inf}",
            "x.yaml: audit.timeout: expected a duration greater than 0 and at most 1 year (8760h), got inf",
        ),
        (
            f"audit: {{stale_after: {HUGE}}}",
            "x.yaml: audit.stale_after: expected a duration greater than 0 and at most 1 year (8760h)",
        ),
        (
            "claims: {default_ttl: .nan}",
            "x.yaml: claims.default_ttl: "
            "expected a duration greater than 0 and at most 1 year (8760h), got nan",
        ),
        (
            "claims: {max_ttl: 8761h}",
            "x.yaml: claims.max_ttl: "
            "expected a duration greater than 0 and at most 1 year (8760h), got '8761h'",
        ),
        (
            "audit: {concurrency: 100000}",
            "x.yaml: audit.concurrency: expected a number at most 1024, got 100000",
        ),
        ("audit: {concurrency: .inf}", "x.yaml: audit.concurrency: expected a number at most 1024, got inf"),
        (
            f"audit: {{keepalive_count: {HUGE}}}",
            "x.yaml: audit.keepalive_count: "
            "expected a number at most 100, got <a number of about 401 digits>",
        ),
        (
            "audit: {resync_every: 1001}",
            "x.yaml: audit.resync_every: expected a number at most 1000, got 1001",
        ),
        ("audit: {resync_every: 0}", "x.yaml: audit.resync_every: expected a number at least 1, got 0"),
        ("audit: {resync_every: 2.5}", "x.yaml: audit.resync_every: expected a whole number, got 2.5"),
        ("audit: {incremental: often}", "x.yaml: audit.incremental: expected true or false, got 'often'"),
        (
            "defaults: {reserved: {vcpu: 70000}}",
            "x.yaml: defaults.reserved.vcpu: expected a number at most 65536",
        ),
        (
            "flavors: [{name: f, pcpu: 2000000, memory: 1GiB}]",
            "x.yaml: flavors[0].pcpu: expected a number at most 1000000, got 2000000",
        ),
        (
            "defaults: {cpu_dedicated_set: '0-200000000'}",
            "x.yaml: defaults.cpu_dedicated_set: expected CPU numbers from 0 to 65535, got '0-200000000'",
        ),
        (
            f"hypervisors: [{{name: {'a' * 300}, uri: u}}]",
            "x.yaml: hypervisors[0].name: expected at most 255 characters, got 'aaaa",
        ),
        (
            f"hypervisors: [{{name: a, uri: {'u' * 2000}}}]",
            "x.yaml: hypervisors[0].uri: expected at most 1024 characters, got 'uuuu",
        ),
        (
            f"claims: {{database: /{'d' * 4096}}}",
            "x.yaml:1:20: claims.database: a value of 4097 characters; expected at most 4096",
        ),
        (
            f"defaults: {{disk: {{pool: {'p' * 256}}}}}",
            "x.yaml: defaults.disk.pool: expected at most 255 characters, got 'pppp",
        ),
        (
            f"defaults: {{disk: {{path: /{'x' * 5000}}}}}",
            "x.yaml:1:25: defaults.disk.path: a value of 5001 characters; expected at most 4096",
        ),
    ],
    ids=lambda value: value[:48],
)
def test_meaningless_values_are_refused_with_their_ceiling(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)
    assert len(str(caught.value).splitlines()) == 1
    assert len(str(caught.value)) < 300


def test_values_at_their_ceiling_are_accepted_as_before() -> None:
    config = parse_config(
        """
        audit: {interval: 8760h, concurrency: 1024, keepalive_count: 100, resync_every: 1000}
        claims: {max_ttl: 8760h}
        defaults:
          allocation_ratios: {vcpu: 1000, memory: 1.5}
          reserved: {memory: 9223372036854775807, disk: 1.5GiB}
          cpu_shared_set: '0-65535'
        hypervisors: [{name: a, uri: 'test:///default'}]
        """,
        "x.yaml",
    )
    (hypervisor,) = config.hypervisors
    assert hypervisor.policy.allocation_ratios[Resource.VCPU] == 1000.0
    assert hypervisor.policy.reserved[Resource.MEMORY] == 2**63 - 1
    assert hypervisor.policy.reserved[Resource.DISK] == 1536 * MIB
    assert hypervisor.policy.cpu_shared_set == frozenset(range(65536))
    assert config.claims.max_ttl == config.audit.interval == 365 * 86400.0
    assert config.audit.resync_every == 1000
    # One past each ceiling is refused.
    with pytest.raises(ConfigError, match=r"at most 1000, got 1000.5$"):
        parse_config("defaults: {allocation_ratios: {vcpu: 1000.5}}", "x.yaml")


def test_a_huge_cpu_range_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"^x\.yaml: defaults\.cpu_shared_set: expected CPU numbers from 0 to 65535"
    ):
        parse_config("defaults: {cpu_shared_set: '0-3,^4-70000'}", "x.yaml")
    assert time.monotonic() - started < 2


def test_identical_cpu_sets_are_one_set_and_distinct_ones_have_a_budget() -> None:
    hypervisors = "".join(f"  - {{name: h{i}, uri: u, cpu_shared_set: '0-65535'}}\n" for i in range(500))
    config = parse_config(f"hypervisors:\n{hypervisors}", "x.yaml")
    # One frozenset for all: 500 copies of 65536 CPUs would take about 2 GB.
    assert len({id(h.policy.cpu_shared_set) for h in config.hypervisors}) == 1

    distinct = "".join(f"  - {{name: h{i}, uri: u, cpu_shared_set: '{i}-65535'}}\n" for i in range(500))
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        parse_config(f"hypervisors:\n{distinct}", "x.yaml")
    assert time.monotonic() - started < 10
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(
        "x.yaml: hypervisors[4].cpu_shared_set: the CPU sets of this configuration name more than 262144 CPUs"
    )
    assert len(lines) == 21  # twenty problems, then how many more
    assert lines[-1] == "x.yaml: and 476 more problems"


def _billion_laughs(levels: int, width: int, target: str) -> str:
    """Each anchor a list of `width` aliases of the previous one: width**levels values in all."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join([*lines, f"{target}: *l{levels - 1}"])


def test_aliases_work_but_an_alias_bomb_is_refused_before_it_expands() -> None:
    ordinary = """
    defaults:
      allocation_ratios: &ratios {vcpu: 8.0, memory: 1.5}
    hypervisors:
      - &compute {name: compute-01, uri: 'test:///default', allocation_ratios: *ratios}
      - <<: *compute
        name: compute-02
    """
    first, second = parse_config(ordinary, "x.yaml").hypervisors
    assert first.policy.allocation_ratios == second.policy.allocation_ratios
    assert (second.name, second.uri) == ("compute-02", "test:///default")

    # 10^6 values from 400 bytes: the old message embedded all of them (a 7 MB line).
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        parse_config(_billion_laughs(6, 10, "audit"), "x.yaml")
    assert time.monotonic() - started < 2
    (line,) = str(caught.value).splitlines()
    # Refused where the count passes the budget: the fifth anchor, at its eighth alias.
    assert line.startswith(
        "x.yaml:5:45: l4[7]: the document holds more than 100000 values (each alias counted as a copy"
    )
    assert len(line) < 300


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "audit: &a {interval: *a}",
            "x.yaml:1:22: audit.interval: the alias *a refers to a value that contains it",
        ),
        ("audit: " + "[" * 100_000 + "]" * 100_000, "x.yaml:1:71: audit[0][0][0]"),
        (
            "audit: {interval: 2024-13-01}",
            "x.yaml:1:19: audit.interval: cannot read this value: month must be in",
        ),
        ("audit: {interval: 30s}\n---\naudit: {interval: 1m}", "x.yaml:2:1: expected a single document"),
        ("audit: {interval: \0}", "x.yaml:1:19: invalid YAML: unacceptable character #x0000"),
        ("audit: {interval: \udc80}", "x.yaml:1:19: invalid YAML: unacceptable character #xdc80"),
        ('defaults: {"a\\nb": 1}', "x.yaml: defaults.'a\\nb': unknown key 'a\\nb'"),
        (
            f"hypervisors:\n- name: a\n  uri: u\n  ? {'k' * 4000}\n  : 1",
            "x.yaml: hypervisors[0].'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...: unknown key 'kkkk",
        ),
    ],
    ids=[
        "recursive alias",
        "deep nesting",
        "bad date",
        "two documents",
        "NUL",
        "lone surrogate",
        "newline in key",
        "long key",
    ],
)
def test_hostile_yaml_is_one_short_line(text: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert time.monotonic() - started < 2
    (line,) = str(caught.value).splitlines()
    assert line.startswith(message), line
    assert len(line) < 300


@pytest.fixture(
    params=[
        pytest.param(
            yamlfile._FAST_LOADER,
            id="libyaml",
            marks=pytest.mark.skipif(yamlfile._FAST_LOADER is None, reason="PyYAML without libyaml"),
        ),
        pytest.param(None, id="PyYAML's parser"),
    ]
)
def yaml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the two parsers virtcap may read YAML with, the one PyYAML writes in Python alone too."""
    monkeypatch.setattr(yamlfile, "_FAST_LOADER", request.param)


@pytest.mark.usefixtures("yaml_parser")
@pytest.mark.parametrize(
    ("text", "where"),
    [
        # libyaml 0.2.6 refuses the 1001st `[` while scanning ahead, before any event reaches virtcap
        ("audit: " + "[" * 100_000 + "]" * 100_000, "1:71: audit[0][0][0]"),
        ("audit:\n" + "- " * 2000 + "x", "2:127: audit[0][0][0]"),
        ("audit:\n" + "- " * 40 + "[" * 1000 + "]" * 1000, "2:104: audit[0][0][0]"),
        ("audit: " + "{a: " * 1000 + "1" + "}" * 1000, "1:260: audit.a.a.a"),
    ],
    ids=["flow", "block", "block then flow", "flow mappings"],
)
def test_deep_nesting_is_refused_by_virtcap_whatever_parser_reads_it(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"x.yaml:{where}"), line
    assert line.endswith(": values nest more than 64 levels deep; expected at most that"), line
    assert len(line) < 300


@pytest.mark.usefixtures("yaml_parser")
def test_values_nest_64_levels_deep_and_no_more() -> None:
    deepest = load_yaml_text("[" * 64 + "]" * 64, "x.yaml")
    for _ in range(63):
        assert isinstance(deepest, list)
        (deepest,) = deepest
    assert deepest == []
    with pytest.raises(
        ConfigError, match=r"^x\.yaml:1:65: \[0\]\[0\].*: values nest more than 64 levels deep"
    ):
        load_yaml_text("[" * 65 + "]" * 65, "x.yaml")


@pytest.mark.usefixtures("yaml_parser")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "defaults:\n  allocation_ratios: {vcpu: 4, vcpu: 16}\n",
            "x.yaml:2:32: defaults.allocation_ratios: duplicate key vcpu: "
            "first at column 23, again at column 32 of line 2; expected each key once",
        ),
        (
            "hypervisors:\n  - {name: a, uri: u}\naudit: {interval: 30s}\nhypervisors: []\n",
            "x.yaml:4:1: duplicate key hypervisors: first on line 1, again on line 4; expected each key once",
        ),
        (
            "hypervisors:\n  - name: a\n    uri: u\n    name: b\n",
            "x.yaml:4:5: hypervisors[0]: duplicate key name: first on line 2, again on line 4; "
            "expected each key once",
        ),
        # compared as YAML reads them: a quoted key is the same string, `yes` is `true`
        (
            "defaults: {reserved: {memory: 1GiB, 'memory': 2GiB}}",
            "x.yaml:1:37: defaults.reserved: duplicate key memory: first at column 23, again at column 37",
        ),
        ("flags: {yes: 1, true: 2}", "x.yaml:1:17: flags: duplicate key true: first at column 9"),
        (
            "audit: {&k interval: 30s, *k : 1m}",
            "x.yaml:1:9: audit: duplicate key interval: once as written on line 1, once more by an alias",
        ),
    ],
    ids=["flow mapping", "section", "block mapping", "quoted", "yes is true", "alias"],
)
def test_a_key_given_twice_is_refused_with_both_places(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    assert str(caught.value).startswith(message), str(caught.value)


def test_merged_keys_are_overridden_by_the_mappings_own() -> None:
    """`<<: *defaults` then a key of its own is no duplicate: YAML's merge means exactly that, at
    every level of merges."""
    text = """
ratios: &ratios {vcpu: 4.0, memory: 1.5}
middle: &middle {<<: *ratios, vcpu: 8.0}
defaults:
  allocation_ratios: {<<: *middle, memory: 1.0}
"""
    assert load_yaml_text(text, "x.yaml") == {
        "ratios": {"vcpu": 4.0, "memory": 1.5},
        "middle": {"vcpu": 8.0, "memory": 1.5},
        "defaults": {"allocation_ratios": {"vcpu": 8.0, "memory": 1.0}},
    }


def test_a_reload_with_a_key_given_twice_keeps_the_running_configuration(tmp_path: Path) -> None:
    config = tmp_path / "virtcap.yaml"
    good = f"""audit: {{interval: 1h}}
claims: {{database: {tmp_path / "claims.sqlite"}}}
hypervisors:
  - {{name: compute-01, uri: "test://{DEMO_DIR / "compute-01.xml"}"}}
"""
    config.write_text(good)
    with running_server(["--config", str(config)], tmp_path) as server:
        assert value(server.samples(), "hypervisor_up", hypervisor="compute-01") == 1.0
        config.write_text(good + "hypervisors: []\n")
        server.process.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration not reloaded" in server.log_text(), 10, what="the reload refused")
        # the message a start with this file exits 2 with
        started = subprocess.run(
            [sys.executable, "-m", "virtcap", "audit", "--config", str(config)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert started.returncode == 2
        (line,) = started.stderr.splitlines()
        message = line.removeprefix("virtcap: configuration error: ")
        assert message == (
            f"{config}:5:1: duplicate key hypervisors: first on line 3, again on line 5; "
            "expected each key once"
        )
        assert message in server.log_text()
        assert value(server.samples(), "hypervisor_up", hypervisor="compute-01") == 1.0


def test_many_problems_are_twenty_lines_and_a_count() -> None:
    hypervisors = "".join(
        f"  - {{name: h{i}, uri: u, allocation_ratios: {{vcpu: .inf}}}}\n" for i in range(1000)
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(f"hypervisors:\n{hypervisors}", "x.yaml")
    lines = str(caught.value).splitlines()
    assert len(lines) == 21
    assert lines[19].startswith("x.yaml: hypervisors[19].allocation_ratios.vcpu: expected a finite number")
    assert lines[20] == "x.yaml: and 980 more problems"


def test_a_large_overlap_of_cpu_sets_is_shown_briefly() -> None:
    evens = ",".join(str(cpu) for cpu in range(0, 1600, 2))
    with pytest.raises(ConfigError) as caught:
        parse_config(f"defaults: {{cpu_shared_set: '0-65535', cpu_dedicated_set: '{evens}'}}", "x.yaml")
    (line,) = str(caught.value).splitlines()
    assert line.startswith("x.yaml: defaults.cpu_dedicated_set: overlaps cpu_shared_set on CPUs 0,2,4,6,")
    assert line.endswith("...; expected two disjoint sets")
    assert len(line) < 300


def test_a_file_over_1_mib_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("# a comment\n" * (1024 * 1024 // 12 + 1))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}: the file is larger than 1 MiB; expected a configuration file of at most 1048576 bytes"
    )


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_bytes(b"audit:\n  interval: 30s\n  timeout: caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"{path}:3:15: not UTF-8 text: byte 0xe9 cannot start or continue a character; "
        "expected a UTF-8 encoded YAML file"
    )


ADDRESS_SPACE = 1024**3
"""The CLI runs under this RLIMIT_AS: the findings used to need gigabytes (or all there is)."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (
            "defaults: {allocation_ratios: {vcpu: .inf}}",
            ": defaults.allocation_ratios.vcpu: expected a finite",
        ),
        (
            "claims: {default_ttl: .nan}",
            ": claims.default_ttl: expected a duration greater than 0 and at most",
        ),
        ("defaults: {cpu_shared_set: '0-200000000'}", ": defaults.cpu_shared_set: expected CPU numbers from"),
        (_billion_laughs(9, 9, "audit"), ":6:10: l5[0]: the document holds more than 100000 values"),
        (b"audit: {interval: 30s}\nclaims: {database: /var/lib/\xff}\n", ":2:29: not UTF-8 text: byte 0xff"),
        (50 * 1024**2, ": the file is larger than 1 MiB; expected a configuration file of at most"),
        ("/dev/zero", ": the file is larger than 1 MiB; expected a configuration file of at most"),
    ],
    ids=["infinite ratio", "NaN ttl", "huge CPU range", "alias bomb", "not UTF-8", "50 MB file", "/dev/zero"],
)
def test_the_cli_refuses_hostile_configuration_in_one_line_bounded_time_and_memory(
    tmp_path: Path, content: str | bytes | int, needle: str
) -> None:
    path = tmp_path / "virtcap.yaml"
    if isinstance(content, int):
        with path.open("wb") as sparse:
            sparse.truncate(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content.startswith("/dev/"):
        path = Path(content)
    else:
        path.write_text(content)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        preexec_fn=_limit_memory,
    )
    # Most of this is the interpreter starting; each finding used to take 10 s or more, or never end.
    assert time.monotonic() - started < 10
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"virtcap: configuration error: {path}")
    assert needle in line, line
    assert len(line) < 300


def test_a_ratio_of_zero_is_novas_default_and_empty_cpu_sets_are_unset() -> None:
    """Issue 13, differences 7 and 8: Nova reads an allocation ratio of 0.0 as its default for the
    class, skips empty elements of a CPU set and reads an empty set as unset."""
    config = parse_config(
        """
defaults: {allocation_ratios: {vcpu: 8.0, memory: 1.5}}
hypervisors:
  - {name: a, uri: "test:///default", allocation_ratios: {vcpu: 0.0, memory: 0, disk: 0, pcpu: 0}}
  - {name: b, uri: "test:///default", cpu_shared_set: "0-3,", cpu_dedicated_set: "4,,5"}
  - {name: c, uri: "test:///default", cpu_shared_set: "", cpu_dedicated_set: ""}
""",
        "x.yaml",
    )
    a, b, c = config.hypervisors
    assert a.policy.allocation_ratios == {
        Resource.VCPU: 4.0,
        Resource.PCPU: 1.0,
        Resource.MEMORY: 1.0,
        Resource.DISK: 1.0,
    }
    assert b.policy.cpu_shared_set == frozenset(range(4))
    assert b.policy.cpu_dedicated_set == frozenset({4, 5})
    assert (c.policy.cpu_shared_set, c.policy.cpu_dedicated_set) == (None, None)
    with pytest.raises(ConfigError, match="contains no CPU"):
        parse_config('defaults: {cpu_shared_set: " , "}', "x.yaml")


def test_flavor_extra_specs_ask_for_what_nova_would() -> None:
    config = parse_config(
        """
flavors:
  - {name: plain, vcpu: 2, memory: 1GiB, disk: 10GiB}
  - name: pinned-fpga
    vcpu: 4
    memory: 1000MiB
    disk: 10GiB
    extra_specs:
      "hw:cpu_policy": dedicated
      "hw:emulator_threads_policy": isolate
      "resources1:CUSTOM_FPGA": "1"
""",
        "inline",
    )
    requests = {name: demand.request for name, demand in config.flavor_demands.items()}
    fpga = Resource.custom_class("CUSTOM_FPGA")
    assert requests["pinned-fpga"] == {
        Resource.PCPU: 5,
        Resource.MEMORY: 1000 * MIB,
        Resource.DISK: 10 * GIB,
        fpga: 1,
    }
    assert requests["plain"][Resource.VCPU] == 2


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            "hypervisors: [{name: a, uri: 'test:///default', inventories: {VCPU: {total: 1}}}]",
            "hypervisors[0].inventories: expected custom resource class names",
        ),
        (
            "defaults: {inventories: {CUSTOM_X: {total: 2, min_unit: 2, max_unit: 1}}}",
            "defaults.inventories.CUSTOM_X: max_unit 1 is below min_unit 2",
        ),
        (
            "defaults: {inventories: {CUSTOM_X: {total: 0}}}",
            "defaults.inventories.CUSTOM_X.total: expected a number at least 1",
        ),
        (
            "flavors: [{name: f, vcpu: 1, pcpu: 1, memory: 1GiB, extra_specs: {'hw:cpu_policy': dedicated}}]",
            "flavors[0]: a flavor with extra_specs asks for dedicated CPUs as Nova does",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: {'hw:cpu_policy': dedicted}}]",
            "flavors[0]: extra_specs: hw:cpu_policy: expected one of shared, dedicated, mixed, "
            "got 'dedicted'",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: {'hw:cpu_policy': mixed}}]",
            "flavors[0]: extra_specs: hw:cpu_policy: mixed needs hw:cpu_dedicated_mask",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: "
            "{'hw:cpu_policy': mixed, 'hw:cpu_dedicated_mask': '0-9'}}]",
            "flavors[0]: extra_specs: hw:cpu_dedicated_mask: names vCPUs the flavor does not have (it has 4)",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: {'resources:VCPU': two}}]",
            "flavors[0]: extra_specs: resources:VCPU: expected a whole number of at least 0, got 'two'",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: {'resources:CUSTOM_fpga': '1'}}]",
            "flavors[0]: extra_specs: resources:CUSTOM_fpga: expected CUSTOM_ and then capital letters",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: {'resources:SRIOV_NET_VF': '1'}}]",
            "flavors[0]: extra_specs: resources:SRIOV_NET_VF: virtcap accounts DISK_GB, MEMORY_MB, PCPU, "
            "VCPU, VGPU",
        ),
        (
            "flavors: [{name: f, vcpu: 4, memory: 1GiB, extra_specs: "
            "{'resources:VCPU': '0', 'resources:MEMORY_MB': '0', 'resources:DISK_GB': '0'}}]",
            "flavors[0].extra_specs: the flavor asks for nothing",
        ),
    ],
)
def test_inventories_and_extra_specs_are_validated(document: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(document, "inline")
    assert f"inline: {expected}" in str(error.value)


def test_reserved_huge_pages_in_novas_vocabulary() -> None:
    config = parse_config(
        """
defaults:
  reserved_huge_pages: [{node: 0, size: 2048, count: 64}, {node: 1, size: 1GiB, count: 1}]
hypervisors:
  - {name: a, uri: "test:///default"}
  - {name: b, uri: "test:///default", reserved_huge_pages: [{node: 1, size: "2MiB", count: 3}]}
""",
        "inline",
    )
    inherited, own = (h.policy.reserved_huge_pages for h in config.hypervisors)
    assert inherited == {(0, 2048): 64, (1, 1048576): 1}
    assert own == {(1, 2048): 3}  # a hypervisor's list replaces that of defaults, as in nova.conf
    with pytest.raises(
        ConfigError, match=r"reserved_huge_pages\[0\]\.size: expected a page size in whole KiB"
    ):
        parse_config("defaults: {reserved_huge_pages: [{node: 0, size: 3000B, count: 1}]}", "inline")
    with pytest.raises(ConfigError, match=r"reserved_huge_pages\[0\]\.count: required key is missing"):
        parse_config("defaults: {reserved_huge_pages: [{node: 0, size: 2048}]}", "inline")


def test_a_flavors_pci_alias_request_names_configured_aliases() -> None:
    aliases = "pci: {alias: [{name: gpu, vendor_id: '10de', product_id: '20b7'}]}\n"
    flavor = "flavors: [{name: f, vcpu: 1, memory: 1GiB, extra_specs: {'pci_passthrough:alias': '%s'}}]\n"
    config = parse_config(aliases + flavor % "gpu:2", "inline")
    assert set(config.pci_aliases) == {"gpu"}
    with pytest.raises(ConfigError) as unknown:
        parse_config(aliases + flavor % "gpu:1,nic:2", "inline")
    assert str(unknown.value) == (
        "inline: flavors[0].extra_specs.pci_passthrough:alias: unknown alias 'nic'; expected one of: gpu"
    )
    with pytest.raises(ConfigError, match=r"pci_passthrough:alias: the count of 'gpu' is not a whole number"):
        parse_config(aliases + flavor % "gpu:two", "inline")
    with pytest.raises(ConfigError, match=r"expected one of: none \(pci.alias is empty\)"):
        parse_config(flavor % "gpu:1", "inline")


def test_a_flavor_pci_numa_affinity_policy_is_one_nova_knows(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "flavors:\n  - {name: v, vcpu: 1, memory: 1GiB,"
        ' extra_specs: {"hw:pci_numa_affinity_policy": bogus}}\n'
    )
    with pytest.raises(ConfigError, match=r"hw:pci_numa_affinity_policy: expected one of required, legacy"):
        load_config(bad)


def test_incremental_audits_are_the_default_with_a_full_one_every_ten() -> None:
    audit = parse_config("", "x.yaml").audit
    assert (audit.incremental, audit.resync_every) == (True, 10)
    audit = parse_config("audit: {incremental: false, resync_every: 1}", "x.yaml").audit
    assert (audit.incremental, audit.resync_every) == (False, 1)


def test_the_failover_reserve_of_the_sellable_headroom_is_one_host_by_default() -> None:
    assert parse_config("", "x.yaml").failure_tolerance.reserve_host_failures == 1
    for reserve in (0, 2, 16):
        text = f"scheduler: {{failure_tolerance: {{reserve_host_failures: {reserve}}}}}"
        assert parse_config(text, "x.yaml").failure_tolerance.reserve_host_failures == reserve


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("-1", "expected a number at least 0, got -1"),
        ("17", "expected a number at most 16, got 17"),
        ("1.5", "expected a whole number, got 1.5"),
        ("2.0", "expected a whole number, got 2.0"),
        ("true", "expected a whole number, got True"),
        ("'2'", "expected a whole number, got '2'"),
    ],
)
def test_a_failover_reserve_that_is_not_a_count_of_hosts_is_refused(value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"scheduler: {{failure_tolerance: {{reserve_host_failures: {value}}}}}", "x.yaml")
    message = str(caught.value)
    assert message == f"x.yaml: scheduler.failure_tolerance.reserve_host_failures: {expected}", message


def test_the_cli_refuses_a_negative_failover_reserve_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("scheduler:\n  failure_tolerance:\n    reserve_host_failures: -1\n")
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"virtcap: configuration error: {path}: ")
    assert "scheduler.failure_tolerance.reserve_host_failures" in line
    assert "Traceback" not in result.stderr
