"""The claims API's sizes and durations: virtcap.units' parsers, with a JSON Schema of what they read.

The schemas are generated from the parsers' own definitions (their regular expressions, suffixes,
length and value bounds), so that the OpenAPI description accepts every spelling the API
accepts. Python reads `\\d` and `\\s` as any Unicode decimal digit and space; a JSON Schema
pattern is ECMA-262's, where `\\d` is 0-9 only, so the patterns spell those characters out, as
this Python's Unicode database has them.

What a pattern cannot say is arithmetic: that a fraction makes whole bytes (1.5KiB does, 1.3KiB
does not), that a spelled size is at most 2^63-1 bytes, that the parts of a duration add up to at
most a year. The descriptions say it, and the API refuses such values with a 400.
"""

from __future__ import annotations

import array
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from typing_extensions import TypeAliasType

from virtcap.config import Duration as ParsedDuration
from virtcap.config import Size as ParsedSize
from virtcap.units import IEC_MULTIPLIERS, MAX_DURATION, MAX_QUANTITY_CHARS, MAX_SIZE

_UNICODE = 0x110000
_BMP = 0x10000
_UTF32_BYTES = 4


@cache
def _unicode() -> tuple[frozenset[str], frozenset[str]]:
    """What Python's `\\d` and `\\s` match: every decimal digit and every space of this Python's
    Unicode database (str.isdecimal() and str.isspace(), which the parsers' conversions follow)."""
    codes = array.array("I", range(_UNICODE))
    assert codes.itemsize == _UTF32_BYTES
    everything = codes.tobytes().decode(f"utf-32-{sys.byteorder[0]}e", "surrogatepass")
    return frozenset(re.findall(r"\d", everything)), frozenset(re.findall(r"\s", everything))


def _class(characters: Iterable[str], negated: bool = False) -> str:
    """A character class both Python's and ECMA-262's (u flag) engines read alike: ranges of
    BMP characters as \\uXXXX escapes, the others as themselves."""
    runs: list[list[int]] = []
    for code in sorted(map(ord, characters)):
        if runs and runs[-1][1] == code - 1 and code != _BMP:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    body = "".join(_char(first) if first == last else f"{_char(first)}-{_char(last)}" for first, last in runs)
    return f"[^{body}]" if negated else f"[{body}]"


def _char(code: int) -> str:
    return f"\\u{code:04x}" if code < _BMP else chr(code)


def _stripped(body: str) -> str:
    """A quantity as units.py reads it: the spaces str.strip() removes around it (the characters
    `\\s` matches), then `body`, at most MAX_QUANTITY_CHARS characters long."""
    spaces = _unicode()[1]
    space, not_space = _class(spaces), _class(spaces, negated=True)
    # Past the leading spaces, the last character that is not a space is within the bound.
    within = f"(?=[\\s\\S]{{0,{MAX_QUANTITY_CHARS - 1}}}{not_space}{space}*$)"
    return f"^{space}*{within}{body}{space}*$"


@cache
def size_pattern() -> str:
    """units._SIZE, `(\\d+(?:\\.\\d+)?)\\s*([A-Za-z]*)` with a suffix of IEC_MULTIPLIERS."""
    digits, spaces = _unicode()
    digit, space = _class(digits), _class(spaces)
    suffixes = "|".join(suffix for suffix in IEC_MULTIPLIERS if suffix)
    return _stripped(f"{digit}+(?:\\.{digit}+)?{space}*(?:{suffixes})?")


@cache
def not_zero() -> str:
    """A digit other than 0, of any of Unicode's scripts: a size or duration that has one is not 0."""
    return _class(digit for digit in _unicode()[0] if unicodedata.decimal(digit) != 0)


@cache
def duration_pattern() -> str:
    """units._DURATION, `(?:\\d+(?:\\.\\d+)?(?:ms|s|m|h))+`, with a digit other than 0 somewhere:
    the duration is above 0."""
    digit = _class(_unicode()[0])
    return _stripped(f"(?=[\\s\\S]*{not_zero()})(?:{digit}+(?:\\.{digit}+)?(?:ms|s|m|h))+")


@dataclass(frozen=True)
class _Described:
    """The JSON Schema of an annotated type, built when one is asked for (as WithJsonSchema's, but
    later): spelling out Unicode's digits and spaces scans every character, which a server that is
    never asked for its description need not do."""

    build: Callable[[], dict[str, Any]]

    def __get_pydantic_json_schema__(
        self, _core_schema: CoreSchema, _handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return self.build()


def size_schema() -> dict[str, Any]:
    return {
        "description": (
            "Bytes: a whole number, or a string of a number and an IEC suffix (B, KiB, MiB, GiB, TiB) "
            "such as 4GiB, 512 MiB or 1.5GiB. Spaces around the string are ignored; without them it "
            f"is at most {MAX_QUANTITY_CHARS} characters. A fraction must make whole bytes and a size is "
            f"at most 2^63-1 bytes ({MAX_SIZE}): the pattern cannot check these two, the API does (400). "
            "A JSON number with a fraction or an exponent (1.0, 1e3) is not a size, whole or not, "
            "although JSON Schema counts 1.0 as an integer. Digits and spaces are any of Unicode's, as "
            "Python reads them: the pattern is for ECMA-262's u flag."
        ),
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": MAX_SIZE},
            {"type": "string", "pattern": size_pattern()},
        ],
    }


def duration_schema() -> dict[str, Any]:
    return {
        "description": (
            "Seconds above 0: a number, or a string of parts of a number and a unit (ms, s, m, h) such "
            "as 30s, 15m or 1h30m. Spaces around the string are ignored; without them it is at most "
            f"{MAX_QUANTITY_CHARS} characters. A duration is at most one year ({MAX_DURATION:.0f} s): the "
            "pattern cannot add up the parts of a string, the API does (400). Digits and spaces are any "
            "of Unicode's, as Python reads them: the pattern is for ECMA-262's u flag."
        ),
        "anyOf": [
            {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DURATION},
            {"type": "string", "pattern": duration_pattern()},
        ],
    }


Size = TypeAliasType("Size", Annotated[ParsedSize, _Described(size_schema)])
"""The configuration's Size (virtcap.units.parse_size), described: `Size` in the OpenAPI document."""
Duration = TypeAliasType("Duration", Annotated[ParsedDuration, _Described(duration_schema)])
"""The configuration's Duration (parse_duration), described: `Duration` in the OpenAPI document."""
