"""Property tests of the configuration (issue 12, item 6): whatever value sits at whatever key,
the file either loads or is refused by ConfigError with one short line per problem that starts
with the file's name and names the key, and neither takes long.
"""

from __future__ import annotations

import copy
import math
import time
from datetime import timedelta
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from virtcap.config import ConfigError, parse_config

SOURCE = "fleet.yaml"
MAX_LINE = 500
MAX_SECONDS = 2.0  # a parse takes milliseconds; findings took 10 s and more

BASE: dict[str, Any] = {
    "audit": {"interval": "30s", "timeout": "10s", "concurrency": 8},
    "claims": {"database": ":memory:", "default_ttl": "15m", "max_ttl": "1h"},
    "defaults": {"allocation_ratios": {"vcpu": 4.0}, "reserved": {"memory": "512MiB"}},
    "hypervisors": [{"name": "compute-01", "uri": "test:///default"}],
    "flavors": [{"name": "m1.small", "vcpu": 1, "memory": "2GiB"}],
}

KEYS: list[tuple[str | int, ...]] = [
    ("audit", "interval"),
    ("audit", "timeout"),
    ("audit", "concurrency"),
    ("audit", "stale_after"),
    ("audit", "keepalive_interval"),
    ("audit", "keepalive_count"),
    ("audit", "incremental"),
    ("audit", "resync_every"),
    ("claims", "database"),
    ("claims", "default_ttl"),
    ("claims", "max_ttl"),
    ("defaults", "allocation_ratios", "vcpu"),
    ("defaults", "allocation_ratios", "memory"),
    ("defaults", "allocation_ratios", "disk"),
    ("defaults", "allocation_ratios", "pcpu"),
    ("defaults", "reserved", "vcpu"),
    ("defaults", "reserved", "memory"),
    ("defaults", "reserved", "disk"),
    ("defaults", "cpu_shared_set"),
    ("defaults", "cpu_dedicated_set"),
    ("defaults", "disk", "pool"),
    ("defaults", "disk", "path"),
    ("defaults", "count_inactive_domains"),
    ("hypervisors", 0, "name"),
    ("hypervisors", 0, "uri"),
    ("hypervisors", 0, "allocation_ratios", "memory"),
    ("hypervisors", 0, "cpu_dedicated_set"),
    ("hypervisors", 0, "reserved", "disk"),
    ("flavors", 0, "name"),
    ("flavors", 0, "vcpu"),
    ("flavors", 0, "pcpu"),
    ("flavors", 0, "memory"),
    ("flavors", 0, "disk"),
]

# Long values are built by repetition: hypothesis would refuse to draw them character by character.
huge_digits = st.builds(lambda digit, count: digit * count, st.sampled_from("19"), st.integers(1, 5000))
long_text = st.builds(lambda text, count: text * count, st.text(min_size=1, max_size=3), st.integers(1, 3000))
numbers = (
    st.floats()
    | st.integers()
    | st.sampled_from([math.inf, -math.inf, math.nan, 1e300, 1e-300, 1000.0, 1000.5, 2**63 - 1, 2**63])
    # Python prints no number past 4300 digits: YAML itself can still give one (hexadecimal).
    | st.integers(1, 4000).map(lambda count: 10**count - 1)
    | st.integers(1, 4000).map(lambda count: -(10**count))
)
cpu_numbers = st.integers(-2, 70_000) | st.sampled_from([65535, 65536, 200_000_000, 10**30])
cpu_items = st.builds(
    lambda excluded, first, last, ranged: (
        ("^" if excluded else "") + (f"{first}-{last}" if ranged else f"{first}")
    ),
    st.booleans(),
    cpu_numbers,
    cpu_numbers,
    st.booleans(),
)
cpu_sets = st.lists(cpu_items, min_size=1, max_size=6).map(",".join)
sizes = st.builds(
    lambda number, suffix: f"{number}{suffix}",
    st.integers(0, 10**25).map(str) | huge_digits | st.decimals(0, 10**22, places=3).map(str),
    st.sampled_from(["", "B", "KiB", "MiB", "GiB", "TiB", " GiB", "MB", "kib", "EiB"]),
)
durations = st.lists(
    st.builds(
        lambda number, unit: f"{number}{unit}",
        st.integers(0, 10**12).map(str) | huge_digits | st.floats(0, 1e12).map(lambda x: f"{x:.3f}"),
        st.sampled_from(["ms", "s", "m", "h", "d", ""]),
    ),
    min_size=1,
    max_size=3,
).map("".join)
texts = st.text(max_size=40) | long_text
values = (
    numbers
    | cpu_sets
    | sizes
    | durations
    | texts
    | huge_digits
    | st.booleans()
    | st.none()
    | st.lists(st.integers() | st.text(max_size=5), max_size=4)
    | st.dictionaries(st.text(max_size=8), st.integers(), max_size=3)
)


def _document_with(key: tuple[str | int, ...], value: object) -> str:
    document = copy.deepcopy(BASE)
    parent: Any = document
    for part in key[:-1]:
        parent = parent.setdefault(part, {}) if isinstance(part, str) else parent[part]
    parent[key[-1]] = value
    return yaml.safe_dump(document, width=math.inf, allow_unicode=False)


def _dotted(key: tuple[str | int, ...]) -> str:
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _meaningless_anywhere(value: object) -> bool:
    """Values no key may hold: infinities and NaN, numbers past 2^63 (every numeric key has a
    lower ceiling), and strings longer than any name, URI or path."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) >= 2**63
    return isinstance(value, str) and len(value) > 4096


def _refusal(text: str) -> list[str] | None:
    """None when the text loads; else the lines of the ConfigError, each checked for shape."""
    started = time.monotonic()
    try:
        parse_config(text, SOURCE)
    except ConfigError as error:
        lines = str(error).splitlines()
    else:
        return None
    finally:
        assert time.monotonic() - started < MAX_SECONDS
    assert 1 <= len(lines) <= 21  # twenty problems, then one line that counts the rest
    for line in lines:
        assert line.startswith((f"{SOURCE}: ", f"{SOURCE}:")), line
        assert len(line) < MAX_LINE, line
    return lines


@settings(max_examples=200, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), value=values)
@example(key=("defaults", "allocation_ratios", "vcpu"), value=math.inf)
@example(key=("claims", "default_ttl"), value=math.nan)
@example(key=("defaults", "cpu_shared_set"), value="0-200000000")
@example(key=("defaults", "reserved", "memory"), value=int("9" * 400))
@example(key=("audit", "interval"), value="x" * 5000)
def test_any_value_at_any_key_loads_or_is_refused_in_lines_that_name_it(
    key: tuple[str | int, ...], value: object
) -> None:
    lines = _refusal(_document_with(key, value))
    if lines is None:
        assert not _meaningless_anywhere(value), "accepted"
        return
    # The problem is at the key or, for checks across keys, at the section that holds it
    # ("claims: default_ttl is longer than max_ttl", "flavors[0]: a flavor requests ...").
    section, name = _dotted(key[:-1]), str(key[-1])
    assert f": {section}" in lines[0] or f"{SOURCE}: {name}" in lines[0], lines[0]
    assert name in lines[0] or _dotted(key) in lines[0], lines[0]


@settings(max_examples=200, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(KEYS), raw=st.text(max_size=60) | huge_digits | long_text | cpu_sets | durations)
@example(key=("audit", "interval"), raw="2024-13-01")
@example(key=("audit", "concurrency"), raw="0x" + "f" * 4000)
@example(key=("defaults", "allocation_ratios", "vcpu"), raw="1e309")
@example(key=("defaults", "cpu_shared_set"), raw="&a [*a]")
@example(key=("hypervisors", 0, "uri"), raw="\0")
def test_any_text_in_place_of_a_value_loads_or_is_refused_in_short_lines(
    key: tuple[str | int, ...], raw: str
) -> None:
    # The text goes in unquoted: YAML then reads it as it likes (number, date, alias, broken syntax).
    placeholder = "__VALUE__"
    _refusal(_document_with(key, placeholder).replace(placeholder, raw, 1))


@settings(max_examples=100, deadline=timedelta(seconds=5))
@given(text=st.text(st.characters(exclude_categories=[]), max_size=200))  # surrogates included
@example(text="audit: {interval: [")
@example(text="audit: {interval: \ud800}")
@example(text="a: &a [lol, lol]\nb: &b [*a, *a, *a, *a]\n")
def test_any_text_as_the_whole_file_loads_or_is_refused_in_short_lines(text: str) -> None:
    _refusal(text)
