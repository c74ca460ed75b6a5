import subprocess
import sys
from pathlib import Path

import pytest

from virtcap.config import ConfigError, load_config, parse_config
from virtcap.model import Resource

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
    assert config.flavor_requests["m1.small"] == {
        Resource.VCPU: 1,
        Resource.PCPU: 0,
        Resource.MEMORY: 2 * GIB,
        Resource.DISK: 20 * GIB,
    }
    assert config.flavor_requests["d1.pinned"][Resource.PCPU] == 2


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
            "x.yaml: defaults.allocation_ratios.vcpu: expected a number greater than 0, got -1.0",
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
        ("defaults: {allocation_ratios: {vcpu: -2}}", "expected a number greater than 0"),
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
