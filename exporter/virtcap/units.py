"""The human-written quantities of the configuration: sizes, durations, ratios and Nova CPU sets.

Every parser raises ValueError with a message that says what was expected, so that the
configuration loader can show it next to the file and key it came from. Each quantity has a
ceiling, stated in its message: a value beyond it means nothing for a hypervisor, and checking
it first keeps hostile input from costing time or memory (a CPU range is never built before
its bounds are known to be sane).
"""

from __future__ import annotations

import math
import re
import reprlib
from datetime import UTC, datetime
from fractions import Fraction

IEC_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}

MAX_SIZE = 2**63 - 1
"""Sizes go into SQLite INTEGER columns, which hold at most this."""
MAX_DURATION = 365 * 24 * 3600.0
"""One year: no interval, timeout or claim lifetime is meaningful beyond it."""
MAX_RATIO = 1000.0
"""Nova accepts any positive allocation ratio; past 1000 a ratio can only be a mistake."""
MAX_CPU = 65535
"""The highest host CPU number: far above the CPUs any Linux host has today."""
MAX_QUANTITY_CHARS = 64
"""A size or duration spelled longer than this is beyond its ceiling (or padded absurdly)."""

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

SIZE_EXPECTED = "expected a size in bytes or with an IEC suffix (KiB, MiB, GiB, TiB), such as 512MiB"
SIZE_BOUND = f"expected a size of at most {MAX_SIZE} bytes (2^63-1, about 8 EiB)"
DURATION_EXPECTED = "expected a duration such as 30s, 5m, 1h or 1m30s"
DURATION_BOUND = "expected a duration greater than 0 and at most 1 year (8760h)"
RATIO_BOUND = f"expected a finite number of at least 0 (Nova's default) and at most {MAX_RATIO:g}"
CPU_SET_EXPECTED = "expected a CPU set such as '0-3,^2,8'"

BRIEF_CHARS = 60
_BIG_INT_BITS = 190  # about 57 decimal digits: longer numbers are described, not printed


class _BriefRepr(reprlib.Repr):
    """reprlib bounds the work on containers; this also bounds whole numbers, whose decimal
    spelling costs quadratic time and which Python refuses to print past 4300 digits."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _BIG_INT_BITS:
            return f"<a number of about {int(x.bit_length() * math.log10(2)) + 1} digits>"
        return super().repr_int(x, level)


_brief = _BriefRepr()
_brief.maxlevel = 3
_brief.maxdict = _brief.maxlist = _brief.maxtuple = _brief.maxset = _brief.maxfrozenset = 4
_brief.maxstring = _brief.maxother = _brief.maxlong = BRIEF_CHARS


def brief_repr(value: object, limit: int = BRIEF_CHARS) -> str:
    """repr() for messages: at most `limit` characters, in time bounded whatever the value."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = _brief.repr_int(value, _brief.maxlevel)
    elif isinstance(value, str):
        text = repr(value[:limit])  # the start, unlike reprlib's middle cut, keeps one "..."
    else:
        try:
            text = _brief.repr(value)
        except Exception:  # a hostile __repr__ must not turn a message into a traceback
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_size(value: object) -> int:
    """Bytes from `4GiB`, `512 MiB`, `1.5GiB` or a plain whole number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{SIZE_EXPECTED}, got {brief_repr(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a size of at least 0 bytes, got {brief_repr(value)}")
        if value > MAX_SIZE:
            raise ValueError(f"{SIZE_BOUND}, got {brief_repr(value)}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{SIZE_EXPECTED}, got {brief_repr(value)}")
    text = value.strip()
    match = _SIZE.fullmatch(text)  # linear: digits, dot, spaces and letters cannot overlap
    if match is None or match.group(2) not in IEC_MULTIPLIERS:
        raise ValueError(f"{SIZE_EXPECTED}, got {brief_repr(value)}")
    if len(text) > MAX_QUANTITY_CHARS:  # before Fraction(), whose cost grows with the digits
        raise ValueError(f"{SIZE_BOUND}, got {brief_repr(value)}")
    number, suffix = match.groups()
    # Exact arithmetic: a float would round 9223372036854775807.0 up past the ceiling.
    scaled = Fraction(number) * IEC_MULTIPLIERS[suffix]
    if scaled.denominator != 1:
        raise ValueError(f"expected a whole number of bytes, got {brief_repr(value)}")
    if scaled > MAX_SIZE:
        raise ValueError(f"{SIZE_BOUND}, got {brief_repr(value)}")
    return int(scaled)


def parse_duration(value: object) -> float:
    """Seconds from `30s`, `5m`, `1h`, `500ms`, `1m30s` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{DURATION_EXPECTED}, got {brief_repr(value)}")
    if isinstance(value, int) and not 0 < value <= MAX_DURATION:
        # Compared as an int: float() of a 400-digit number raises OverflowError.
        raise ValueError(f"{DURATION_BOUND}, got {brief_repr(value)}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        # Anchored, the match is linear; findall alone would retry from every digit of "1111...".
        if _DURATION.fullmatch(text) is None:
            raise ValueError(f"{DURATION_EXPECTED}, got {brief_repr(value)}")
        if len(text) > MAX_QUANTITY_CHARS:
            raise ValueError(f"{DURATION_BOUND}, got {brief_repr(value)}")
        parts = _DURATION_PART.findall(text)
        seconds = sum(float(number) * _DURATION_SECONDS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{DURATION_EXPECTED}, got {brief_repr(value)}")
    if not 0 < seconds <= MAX_DURATION:  # also false for NaN
        raise ValueError(f"{DURATION_BOUND}, got {brief_repr(value)}")
    return seconds


def parse_ratio(value: object) -> float:
    """An allocation ratio: a finite number from 0 to MAX_RATIO; 0 means Nova's default for the
    class, as Nova reads an allocation ratio of 0.0."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {brief_repr(value)}")
    if isinstance(value, int) and not -MAX_RATIO <= value <= MAX_RATIO:
        # Compared as an int: float() of a 400-digit number raises OverflowError.
        raise ValueError(f"{RATIO_BOUND}, got {brief_repr(value)}")
    if isinstance(value, str):
        try:
            ratio = float(value) if len(value) <= MAX_QUANTITY_CHARS else math.nan
        except ValueError:
            raise ValueError(f"expected a number, got {brief_repr(value)}") from None
    else:
        ratio = float(value)
    if not math.isfinite(ratio) or ratio > MAX_RATIO:
        raise ValueError(f"{RATIO_BOUND}, got {brief_repr(value)}")
    if ratio < 0:
        raise ValueError(f"expected a number of at least 0 (0: Nova's default), got {brief_repr(value)}")
    return ratio


def parse_cpu_set(spec: object) -> frozenset[int]:
    """Host CPU numbers from Nova's syntax: `0-3,^2,8` is {0, 1, 3, 8}.

    Exclusions apply after every inclusion, whatever their position, and empty elements are
    skipped, as in Nova; a set that names no CPU is refused, as Nova refuses it. CPU numbers
    are at most MAX_CPU, checked before any range is built; overlapping ranges are merged
    first, so the work is bounded by the length of the spec plus MAX_CPU, however it repeats.
    """
    if isinstance(spec, int) and not isinstance(spec, bool):
        if not 0 <= spec <= MAX_CPU:
            raise ValueError(f"expected CPU numbers from 0 to {MAX_CPU}, got {brief_repr(spec)}")
        spec = str(spec)
    if not isinstance(spec, str):
        raise ValueError(f"{CPU_SET_EXPECTED}, got {brief_repr(spec)}")
    included: list[tuple[int, int]] = []
    excluded: list[tuple[int, int]] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:  # Nova's parse_cpu_spec skips empty elements: "0-3," and "1,,2" are valid
            continue
        target = included
        if item.startswith("^"):
            target = excluded
            item = item[1:].strip()
        target.append(_cpu_span(item, spec))
    cpus = frozenset(_cpus(included) - _cpus(excluded))
    if not cpus:
        raise ValueError(f"the CPU set {brief_repr(spec)} contains no CPU")
    return cpus


def _cpu_span(item: str, spec: str) -> tuple[int, int]:
    low, dash, high = item.partition("-")
    try:
        first = int(low)
        last = int(high) if dash else first
    except ValueError:
        raise ValueError(f"{CPU_SET_EXPECTED}, got {brief_repr(spec)}") from None
    if first < 0 or last < first:
        raise ValueError(f"invalid CPU range {brief_repr(item)} in {brief_repr(spec)}")
    if last > MAX_CPU:
        within = f" in {brief_repr(spec)}" if item != spec.strip() else ""
        raise ValueError(f"expected CPU numbers from 0 to {MAX_CPU}, got {brief_repr(item)}{within}")
    return first, last


def _cpus(spans: list[tuple[int, int]]) -> set[int]:
    """The union of inclusive spans, each CPU added once whatever the overlaps."""
    cpus: set[int] = set()
    end = -1  # every CPU up to here is already in
    for first, last in sorted(spans):
        if last > end:
            cpus.update(range(max(first, end + 1), last + 1))
            end = last
    return cpus


def format_cpu_set(cpus: frozenset[int]) -> str:
    """The shortest Nova-syntax spelling of a CPU set, for messages and reports."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in spans)


def format_bytes(value: float) -> str:
    """`4.0 GiB`: the largest IEC unit that keeps the number at or above 1."""
    magnitude = abs(value)
    for suffix in ("TiB", "GiB", "MiB", "KiB"):
        if magnitude >= IEC_MULTIPLIERS[suffix]:
            return f"{value / IEC_MULTIPLIERS[suffix]:.1f} {suffix}"
    return f"{value:.0f} B"


def format_utc(timestamp: float) -> str:
    """`2024-05-01T12:00:00Z`: UTC, to the second."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
