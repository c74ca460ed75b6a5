import math
import time

import pytest

from virtcap.units import (
    brief_repr,
    format_bytes,
    format_cpu_set,
    parse_cpu_set,
    parse_duration,
    parse_ratio,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512MiB", 512 * 1024**2),
        ("512 MiB", 512 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("1.5GiB", 1536 * 1024**2),
        ("1TiB", 1024**4),
        ("4KiB", 4096),
        ("100", 100),
        ("0", 0),
        (0, 0),
        (123456, 123456),
    ],
)
def test_sizes(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["512MB", "two GiB", "-1", -5, "1.5", "GiB", "", True, 1.5, "0.3KiB"])
def test_bad_sizes_say_what_was_expected(text: object) -> None:
    with pytest.raises(ValueError, match=r"expected"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1m30s", 90.0), ("500ms", 0.5), (10, 10.0), (2.5, 2.5)],
)
def test_durations(text: object, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["30", "soon", "1d", "0s", -1, "30 s x", "", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match=r"expected"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0-3,^2,8", {0, 1, 3, 8}),
        ("^2,0-3", {0, 1, 3}),
        ("4", {4}),
        (7, {7}),
        ("0-7,^2-5", {0, 1, 6, 7}),
        (" 1 , 3 ", {1, 3}),
        ("0-3,", {0, 1, 2, 3}),  # empty elements are skipped, as Nova's parse_cpu_spec does
        ("1,,2", {1, 2}),
    ],
)
def test_nova_cpu_sets(spec: object, expected: set[int]) -> None:
    assert parse_cpu_set(spec) == frozenset(expected)


@pytest.mark.parametrize("spec", ["", " ,", "a-b", "3-1", "0-3,^0-3", "^", "-1", None])
def test_bad_cpu_sets(spec: object) -> None:
    with pytest.raises(ValueError):
        parse_cpu_set(spec)


def test_cpu_set_round_trip() -> None:
    assert format_cpu_set(frozenset({0, 1, 2, 3, 8, 10, 11})) == "0-3,8,10-11"
    assert parse_cpu_set(format_cpu_set(frozenset({5, 6, 9}))) == {5, 6, 9}


def test_format_bytes() -> None:
    assert format_bytes(512 * 1024**2) == "512.0 MiB"
    assert format_bytes(-3 * 1024**3) == "-3.0 GiB"
    assert format_bytes(12) == "12 B"


# Issue 12, item 6: every quantity has a sane ceiling, checked before it can cost time or memory.

HUGE = 10**400  # a 401-digit number, as YAML gives for a 401-digit scalar


def _short(value: object) -> str:
    return repr(value)[:24]


def test_the_size_ceiling_is_2_63_minus_1_bytes_exactly() -> None:
    assert parse_size(2**63 - 1) == parse_size("9223372036854775807") == 2**63 - 1
    # Exactly: as a float this rounds up to 2^63, past what SQLite's INTEGER holds.
    assert parse_size("9223372036854775807.0") == 2**63 - 1
    assert parse_size("8388607TiB") == 8388607 * 1024**4
    with pytest.raises(ValueError, match=r"at most 9223372036854775807 bytes"):
        parse_size(2**63)


@pytest.mark.parametrize(
    "value",
    [2**63, HUGE, str(HUGE), f"{HUGE}GiB", "8388608TiB", "9223372036854775808", f"{HUGE}.5KiB"],
    ids=_short,
)
def test_sizes_beyond_2_63_bytes_are_refused_with_the_ceiling(value: object) -> None:
    with pytest.raises(ValueError, match=r"expected a size of at most 9223372036854775807 bytes") as caught:
        parse_size(value)
    assert len(str(caught.value)) < 200


def test_the_duration_ceiling_is_one_year() -> None:
    assert parse_duration("8760h") == parse_duration(365 * 86400) == 365 * 86400.0
    with pytest.raises(ValueError, match=r"at most 1 year \(8760h\)"):
        parse_duration("8760h1s")


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, "8761h", 365 * 86400 + 1, HUGE, -HUGE, 1e300, f"{HUGE}s"],
    ids=_short,
)
def test_durations_that_are_not_finite_or_beyond_a_year_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"expected a duration greater than 0 and at most 1 year \(8760h\)"):
        parse_duration(value)


def test_the_ratio_ceiling_is_1000() -> None:
    assert [parse_ratio(value) for value in (4, 1.5, "16.0", 1000)] == [4.0, 1.5, 16.0, 1000.0]
    with pytest.raises(ValueError, match=r"at most 1000, got 1000.5"):
        parse_ratio(1000.5)


@pytest.mark.parametrize(
    "value", [math.inf, math.nan, -math.inf, 1e300, 1000.5, "1e309", "1e300", HUGE, -HUGE], ids=_short
)
def test_ratios_must_be_finite_and_at_most_1000(value: object) -> None:
    expected = r"expected a finite number of at least 0 \(Nova's default\) and at most 1000, got"
    with pytest.raises(ValueError, match=expected):
        parse_ratio(value)


@pytest.mark.parametrize("value", [-0.5, -1.0, -5], ids=_short)
def test_negative_ratios_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a number of at least 0 \(0: Nova's default\), got"):
        parse_ratio(value)


def test_a_ratio_of_zero_is_accepted_as_novas_default() -> None:
    assert parse_ratio(0) == parse_ratio(0.0) == parse_ratio("0.0") == 0.0


@pytest.mark.parametrize("value", [True, None, "lots", [4.0]], ids=_short)
def test_ratios_are_numbers(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a number, got"):
        parse_ratio(value)


def test_the_cpu_number_ceiling_is_65535() -> None:
    assert parse_cpu_set("0-65535") == frozenset(range(65536))
    assert parse_cpu_set(65535) == {65535}
    with pytest.raises(ValueError, match=r"from 0 to 65535"):
        parse_cpu_set("65535-65536")


@pytest.mark.parametrize("spec", ["0-65536", "65536", 65536, HUGE, "0-70000", "0-3,^5-70000"], ids=_short)
def test_cpu_numbers_beyond_65535_are_refused_before_any_range_is_built(spec: object) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"expected CPU numbers from 0 to 65535, got") as caught:
        parse_cpu_set(spec)
    # 0-200000000 used to take 10 s and 3.2 GB before being accepted (see test_config.py).
    assert time.monotonic() - started < 2
    assert len(str(caught.value)) < 200


def test_repeated_cpu_ranges_cost_no_more_than_one() -> None:
    started = time.monotonic()
    assert parse_cpu_set(",".join(["0-65535"] * 5000 + ["^1-65535"] * 5000)) == {0}
    # Each range used to be expanded in full: 655 million set insertions here.
    assert time.monotonic() - started < 2


class _Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("x" * 100_000, "'xxxx"),
        (10**5000, "<a number of about 5001 digits>"),
        ([[list(range(1000))] * 1000] * 1000, "[[[0, 1, 2, 3, ...]"),
        ({str(i): i for i in range(10_000)}, "{'0': 0,"),
        (_Hostile(), "<_Hostile"),
        (math.inf, "inf"),
    ],
    ids=["long string", "5001 digits", "a billion items", "big dict", "hostile repr", "inf"],
)
def test_brief_repr_is_short_and_cheap_whatever_the_value(value: object, shown: str) -> None:
    text = brief_repr(value)
    assert text.startswith(shown)
    assert len(text) <= 60
