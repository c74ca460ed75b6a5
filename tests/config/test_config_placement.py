"""The `placement:` section: off by default; where Placement is and how virtcap authenticates, each
secret from a file or a variable that must be there when the configuration is read."""

import subprocess
import sys
from pathlib import Path

import pytest

from virtcap.config import ConfigError, parse_config


def test_there_is_no_placement_by_default() -> None:
    config = parse_config("", "x.yaml")
    assert config.placement is None
    assert config.hypervisors[0].placement_provider is None


def test_a_noauth_placement_needs_only_its_endpoint() -> None:
    config = parse_config("placement: {endpoint: 'http://127.0.0.1:8778'}", "x.yaml")
    assert config.placement is not None
    assert (config.placement.auth.type, config.placement.timeout, config.placement.interval) == (
        "none",
        10.0,
        None,
    )


def test_a_password_is_read_from_a_file_and_a_provider_named_per_hypervisor(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    text = f"""
placement:
  auth: {{type: password, auth_url: 'http://keystone:5000/v3', username: virtcap, project_name: service,
          password_file: {secret}}}
  interval: 5m
hypervisors:
  - {{name: hv1, uri: 'test:///default', placement_provider: hv1.example.org}}
"""
    config = parse_config(text, "x.yaml")
    assert config.placement is not None and config.placement.interval == 300.0
    assert config.hypervisors[0].placement_provider == "hv1.example.org"
    assert "s3cret" not in repr(config)  # the secret is read by the reader, never kept here


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("placement: {}", "placement", "expected endpoint"),
        ("placement: {endpoint: 'ftp://x'}", "placement.endpoint", "expected"),
        ("placement: {endpoint: 'http://x', auth: {type: kerberos}}", "placement.auth.type", "expected"),
        (
            "placement: {endpoint: 'http://x', auth: {type: password, auth_url: 'http://k/v3', username: u, "
            "project_name: p}}",
            "placement.auth",
            "auth.type password needs its password",
        ),
        (
            "placement: {auth: {type: token, project_name: p, token_env: T}}",
            "placement.auth",
            "auth.type token needs auth_url",
        ),
        ("placement: {endpoint: 'http://x', auth: {password_env: P}}", "placement.auth", "password_file"),
        ("placement: {endpoint: 'http://x', timeout: 0}", "placement.timeout", "expected"),
        ("placement: {endpoint: 'http://x', refresh: 1m}", "placement.refresh", "unknown key"),
    ],
)
def test_bad_values_name_the_key_and_what_was_expected(text: str, key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    message = str(caught.value)
    assert message.startswith(f"x.yaml: {key}: "), message
    assert expected in message, message


def test_a_secret_that_is_not_there_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    auth = "type: application_credential, auth_url: 'http://k/v3', application_credential_id: abc"
    with pytest.raises(ConfigError) as caught:
        parse_config(
            f"placement: {{auth: {{{auth}, application_credential_secret_file: {missing}}}}}", "x.yaml"
        )
    assert str(caught.value).startswith(
        "x.yaml: placement.auth.application_credential_secret_file: cannot read"
    )
    unset = "VIRTCAP_TEST_UNSET_SECRET"
    monkeypatch.delenv(unset, raising=False)
    with pytest.raises(ConfigError) as caught:
        parse_config(f"placement: {{auth: {{{auth}, application_credential_secret_env: {unset}}}}}", "x.yaml")
    assert str(caught.value).startswith("x.yaml: placement.auth.application_credential_secret_env:")


def test_the_cli_refuses_an_unreadable_secret_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text(
        "placement:\n  auth: {type: token, auth_url: 'http://k/v3', project_name: p, "
        f"token_file: {tmp_path / 'absent'}}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "placement.auth.token_file" in line
    assert "Traceback" not in result.stderr
