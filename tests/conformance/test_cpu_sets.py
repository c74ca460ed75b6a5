"""CPU sets: virtcap's parser against `nova.virt.hardware`, on generated specs.

Nova's authority for a configured set is `get_cpu_shared_set()` (the same rules hold for
`cpu_dedicated_set`): `parse_cpu_spec` on the text, an empty text read as unset, and a set that
names no CPU refused. virtcap's `parse_cpu_set` answers for a non-empty text and its
configuration for the empty one.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.conformance.upstream import Oracle, agree, generator
from virtcap.config import ConfigError, parse_config
from virtcap.units import MAX_CPU, parse_cpu_set

# Spellings that are not plain numbers, ranges or exclusions: Python's int() reads some of them
# (signs, underscores, other scripts' digits) in Nova as in virtcap, the rest are refused by both.
ODD_ELEMENTS = (
    "a", "1-", "-1", "-", " - ", "^", "^^1", "1-2-3", "1--3", "3-1", "+3", "+1-+2", "1_0", "0x1",
    "1.5", "1 0", "^ 2", " ^2 - 3 ", "\u0663", "\uff11", "1\u00a0", "\t2\n", "^-1", "0-", "--",
)  # fmt: skip


def _number(rng: random.Random) -> int:
    if rng.random() < 0.05:
        return rng.randint(0, MAX_CPU)  # Nova has no ceiling; virtcap's is MAX_CPU
    return rng.randint(0, 40)


def _element(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        text = str(_number(rng))
    elif kind < 0.65:
        low = _number(rng)
        high = low + rng.randint(-2, 12)
        text = f"{low}-{high}" if rng.random() < 0.8 else f"{low} - {high}"
    elif kind < 0.85:
        low = _number(rng)
        text = f"^{low}" if rng.random() < 0.6 else f"^{low}-{low + rng.randint(0, 4)}"
    else:
        text = rng.choice(ODD_ELEMENTS)
    return rng.choice(("", "", "", " ", "  ")) + text + rng.choice(("", "", "", " "))


def generated_specs(name: str, count: int, empty_elements: bool) -> list[str]:
    """Specs of 1 to 6 elements; with `empty_elements`, each has at least one empty element."""
    rng = generator(name)
    specs = []
    for _ in range(count):
        elements = [_element(rng) for _ in range(rng.randint(1, 6))]
        if empty_elements:
            for _ in range(rng.randint(1, 3)):
                elements.insert(rng.randint(0, len(elements)), rng.choice(("", " ", "\t")))
        specs.append(",".join(elements))
    return specs


def _virtcap(spec: str) -> dict[str, Any]:
    try:
        return {"cpus": sorted(parse_cpu_set(spec))}
    except ValueError as error:
        return {"error": str(error)}


def _same(nova: dict[str, Any], virtcap: dict[str, Any]) -> bool:
    """The same set, or both refusing (each in its own words)."""
    return ("error" in nova and "error" in virtcap) or nova.get("cpus") == virtcap.get("cpus", ())


def _compare(oracle: Oracle, specs: list[str]) -> list[str]:
    answers = oracle.ask([{"op": "cpu_spec", "spec": spec} for spec in specs])
    mismatches = []
    for spec, answer in zip(specs, answers, strict=True):
        nova, virtcap = answer["config"], _virtcap(spec)
        if not _same(nova, virtcap):
            mismatches.append(f"{spec!r}: Nova {json.dumps(nova)}, virtcap {json.dumps(virtcap)}")
    return mismatches


HAND_PICKED = [
    "0-3,^2,8", "0-3, ^2, 8", "4-7,^5-6", "^2,0-3", "1,^1", "3-1", "0", "0-0", "2-3,^2-3", " 5 ",
    "0-65535,^1-65535", "1-2-3", "1--3", "^", "1.5", "+3", "1_0", " ", "\u0663",
]  # fmt: skip


def test_hand_picked_cpu_specs_parse_as_nova_parses_them(oracle: Oracle) -> None:
    mismatches = _compare(oracle, HAND_PICKED)
    agree("CPU specs", mismatches, len(HAND_PICKED))


def test_generated_cpu_specs_parse_as_nova_parses_them(oracle: Oracle) -> None:
    """Numbers above MAX_CPU are left out: Nova reads them (and then refuses to start, since no
    such CPU is online), virtcap refuses them at once by design."""
    specs = [s for s in generated_specs("plain", 600, empty_elements=False) if _within_ceiling(s)]
    mismatches = _compare(oracle, specs)
    agree("CPU specs", mismatches, len(specs))


def test_empty_elements_are_skipped_as_nova_skips_them(oracle: Oracle) -> None:
    """Issue 13, difference 7: `0-3,`, `1,,2` and `, 4` are valid sets to Nova."""
    specs = ["0-3,", "1,,2", ", 4", " ,0-1, ,", *generated_specs("empty", 200, empty_elements=True)]
    specs = [s for s in specs if _within_ceiling(s)]
    mismatches = _compare(oracle, specs)
    agree("CPU specs", mismatches, len(specs))


@pytest.mark.parametrize("key", ["cpu_shared_set", "cpu_dedicated_set"])
def test_configured_cpu_sets_mean_what_they_mean_to_nova(oracle: Oracle, key: str) -> None:
    """Issue 13, difference 7: the empty text is an unset option to Nova. Through virtcap's
    configuration, for a sample of specs: the same set, unset, or a refused configuration."""
    specs = ["", " ", "0-3,", "1,^1", "0-3,^2", *generated_specs(f"config-{key}", 60, empty_elements=False)]
    specs = [s for s in specs if _within_ceiling(s)]
    answers = oracle.ask([{"op": "cpu_spec", "spec": spec} for spec in specs])
    mismatches = []
    for spec, answer in zip(specs, answers, strict=True):
        nova = answer["config"]
        virtcap = _configured(key, spec)
        if not (_same(nova, virtcap) or ("unset" in nova and "unset" in virtcap)):
            mismatches.append(f"{key}: {spec!r}: Nova {json.dumps(nova)}, virtcap {json.dumps(virtcap)}")
    agree("configured CPU sets", mismatches, len(specs))


def _configured(key: str, spec: str) -> dict[str, Any]:
    text = f'hypervisors:\n  - {{name: h, uri: "test:///default", {key}: {json.dumps(spec)}}}\n'
    try:
        policy = parse_config(text, "conformance").hypervisors[0].policy
    except ConfigError as error:
        return {"error": str(error)}
    cpus = getattr(policy, key)
    return {"unset": True} if cpus is None else {"cpus": sorted(cpus)}


def _within_ceiling(spec: str) -> bool:
    digits = "".join(c if c.isdigit() and c.isascii() else " " for c in spec)
    return all(int(number) <= MAX_CPU for number in digits.split())
