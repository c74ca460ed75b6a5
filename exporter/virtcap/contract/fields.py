"""Field types more than one resource of the API uses: cpu counts, times, availability zones.

Sizes and durations, described by patterns of their own, are quantities.py's."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from virtcap.config.schema import MAX_NAME_CHARS

MAX_CPUS = 1_000_000
"""The most cpus (VCPU, PCPU) one claim, or one flavor of a dry run, asks for."""
DATE_TIME = {"type": "string", "format": "date-time"}
"""The JSON Schema of a time as the documents write it (virtcap.units.format_utc)."""

ZoneName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
]
"""An availability zone, spelt as the configuration's group names are."""
