"""The `reclaim:` section: when a shut-off or idle domain's allocation counts as reclaimable."""

import subprocess
import sys
from pathlib import Path

import pytest

from virtcap.config import ConfigError, parse_config

WEEK = 7 * 24 * 3600.0


def test_the_windows_are_a_week_and_idle_is_under_5_percent_by_default() -> None:
    reclaim = parse_config("", "x.yaml").reclaim
    assert (reclaim.shutoff_after, reclaim.idle_cpu_below, reclaim.idle_for) == (WEEK, 0.05, WEEK)


def test_the_windows_go_down_to_seconds_and_below() -> None:
    text = "reclaim: {shutoff_after: 2s, idle_cpu_below: 0.5, idle_for: 1m30s}"
    reclaim = parse_config(text, "x.yaml").reclaim
    assert (reclaim.shutoff_after, reclaim.idle_cpu_below, reclaim.idle_for) == (2.0, 0.5, 90.0)
    assert parse_config("reclaim: {idle_for: 500ms}", "x.yaml").reclaim.idle_for == 0.5


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("reclaim: {shutoff_after: 0}", "reclaim.shutoff_after", "expected a duration"),
        ("reclaim: {shutoff_after: soon}", "reclaim.shutoff_after", "expected a duration"),
        ("reclaim: {idle_for: -1}", "reclaim.idle_for", "expected a duration"),
        ("reclaim: {idle_for: 9000h}", "reclaim.idle_for", "expected a duration"),
        ("reclaim: {idle_cpu_below: 0}", "reclaim.idle_cpu_below", "expected a number greater than 0"),
        ("reclaim: {idle_cpu_below: 1.5}", "reclaim.idle_cpu_below", "expected a number at most 1"),
        ("reclaim: {idle_cpu_below: .nan}", "reclaim.idle_cpu_below", "expected a number"),
        ("reclaim: {idle_cpu_below: lots}", "reclaim.idle_cpu_below", "expected a number"),
        ("reclaim: {idle_after: 1h}", "reclaim.idle_after", "unknown key"),
        ("reclaim: 7", "reclaim", "expected"),
    ],
)
def test_bad_values_name_the_key_and_what_was_expected(text: str, key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "x.yaml")
    message = str(caught.value)
    assert message.startswith(f"x.yaml: {key}: {expected}"), message


def test_the_cli_refuses_a_bad_window_with_exit_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "virtcap.yaml"
    path.write_text("reclaim:\n  idle_for: 0s\n")
    result = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"virtcap: configuration error: {path}:")
    assert "reclaim.idle_for" in line
    assert "Traceback" not in result.stderr
