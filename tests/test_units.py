import pytest

from virtcap.units import format_bytes, format_cpu_set, parse_cpu_set, parse_duration, parse_size


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
    ],
)
def test_nova_cpu_sets(spec: object, expected: set[int]) -> None:
    assert parse_cpu_set(spec) == frozenset(expected)


@pytest.mark.parametrize("spec", ["", "a-b", "3-1", "0-3,^0-3", "1,,2", "-1", None])
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
