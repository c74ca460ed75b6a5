"""Maintenance: a hypervisor taken out of service by its operator, as Nova's disabled compute
service is. It is still audited and its allocations still count; it offers nothing (no flavor
fits there, the scheduler refuses it with the reason, claims on it are refused).

Two sources put a hypervisor into maintenance, and either one is enough: its configuration
(`maintenance:` of its entry) and the HTTP API (persisted with the claims). An entry may end by
itself (`until`); past that time it no longer counts, whoever set it. Pure: entries and a clock
in, what is in effect out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from virtcap.units import format_utc

MaintenanceSource = Literal["config", "api"]
NO_REASON = "no reason given"


@dataclass(frozen=True, slots=True)
class Maintenance:
    """One entry putting a hypervisor into maintenance."""

    source: MaintenanceSource
    reason: str | None = None
    """What the operator said; None when the configuration says only `maintenance: true`."""
    until: float | None = None
    """When it ends by itself (seconds since the epoch); None: when it is lifted."""
    since: float | None = None
    """When it started: set through the API, or the configuration's first seen in effect by the
    claims ledger (kept in its database); None where no ledger keeps it (`virtcap audit`)."""
    set_by: str | None = None
    """The writer who set it through the API."""

    def active(self, now: float) -> bool:
        return self.until is None or now < self.until

    def describe(self) -> str:
        """`kernel upgrade (until 2026-11-23T10:00:00Z)`."""
        text = self.reason or NO_REASON
        return f"{text} (until {format_utc(self.until)})" if self.until is not None else text


def in_effect(entries: Iterable[Maintenance | None], now: float) -> tuple[Maintenance, ...]:
    """The entries that count at `now`, the configuration's first."""
    kept = [entry for entry in entries if entry is not None and entry.active(now)]
    return tuple(sorted(kept, key=lambda entry: entry.source != "config"))


def maintenance_reason(entries: Iterable[Maintenance]) -> str | None:
    """Why the hypervisor offers nothing, every entry in effect (the configuration's first); None
    when it is not in maintenance."""
    found = [f"{entry.describe()} (set by the {_SOURCES[entry.source]})" for entry in entries]
    return "; ".join(found) if found else None


def maintenance_end(entries: Iterable[Maintenance]) -> float | None:
    """When the maintenance ends by itself: the last end of entries that all have one; None when
    one of them lasts until it is lifted, or when there is none."""
    ends = [entry.until for entry in entries]
    if not ends or any(end is None for end in ends):
        return None
    return max(end for end in ends if end is not None)


def maintenance_start(entries: Iterable[Maintenance]) -> float | None:
    """When the maintenance started: the earliest start of the entries in effect; None when none
    of them has one, or when there is none."""
    starts = [entry.since for entry in entries if entry.since is not None]
    return min(starts) if starts else None


_SOURCES: dict[MaintenanceSource, str] = {"config": "configuration", "api": "API"}
