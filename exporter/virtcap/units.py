"""The human-written quantities of the configuration: sizes, durations and Nova CPU sets.

Every parser raises ValueError with a message that says what was expected, so that the
configuration loader can show it next to the file and key it came from.
"""

from __future__ import annotations

import re

IEC_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

SIZE_EXPECTED = "expected a size in bytes or with an IEC suffix (KiB, MiB, GiB, TiB), such as 512MiB"
DURATION_EXPECTED = "expected a duration such as 30s, 5m, 1h or 1m30s"


def parse_size(value: object) -> int:
    """Bytes from `4GiB`, `512 MiB`, `1.5GiB` or a plain whole number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{SIZE_EXPECTED}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a size of at least 0 bytes, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{SIZE_EXPECTED}, got {value!r}")
    match = _SIZE.match(value)
    if match is None or match.group(2) not in IEC_MULTIPLIERS:
        raise ValueError(f"{SIZE_EXPECTED}, got {value!r}")
    number, suffix = match.groups()
    scaled = (
        float(number) * IEC_MULTIPLIERS[suffix] if "." in number else int(number) * IEC_MULTIPLIERS[suffix]
    )
    if isinstance(scaled, float) and not scaled.is_integer():
        raise ValueError(f"expected a whole number of bytes, got {value!r}")
    return int(scaled)


def parse_duration(value: object) -> float:
    """Seconds from `30s`, `5m`, `1h`, `500ms`, `1m30s` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{DURATION_EXPECTED}, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise ValueError(f"{DURATION_EXPECTED}, got {value!r}")
        seconds = sum(float(number) * _DURATION_SECONDS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{DURATION_EXPECTED}, got {value!r}")
    if seconds <= 0:
        raise ValueError(f"expected a duration greater than 0, got {value!r}")
    return seconds


def parse_cpu_set(spec: object) -> frozenset[int]:
    """Host CPU numbers from Nova's syntax: `0-3,^2,8` is {0, 1, 3, 8}.

    Exclusions apply after every inclusion, whatever their position, as in Nova.
    """
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = str(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"expected a CPU set such as '0-3,^2,8', got {spec!r}")
    included: set[int] = set()
    excluded: set[int] = set()
    for raw in spec.split(","):
        item = raw.strip()
        target = included
        if item.startswith("^"):
            target = excluded
            item = item[1:].strip()
        target.update(_cpu_range(item, spec))
    cpus = frozenset(included - excluded)
    if not cpus:
        raise ValueError(f"the CPU set {spec!r} contains no CPU")
    return cpus


def _cpu_range(item: str, spec: str) -> range:
    low, dash, high = item.partition("-")
    try:
        first = int(low)
        last = int(high) if dash else first
    except ValueError:
        raise ValueError(f"expected a CPU set such as '0-3,^2,8', got {spec!r}") from None
    if first < 0 or last < first:
        raise ValueError(f"invalid CPU range {item!r} in {spec!r}")
    return range(first, last + 1)


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
