"""A zone part's lower bound, kept with its compaction: after domains stopped on one hypervisor,
only its part is bounded again, and mostly without a program, from the prices that proved its
configuration bound last time (configurations.py's `priced_bound`)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

EPSILON = 1e-6
"""Below this, a solver's fractional value is a rounding error."""


def ceil_bound(value: float) -> int:
    """The integer bound a fractional one proves (none, 0, for -inf)."""
    return 0 if not math.isfinite(value) else max(math.ceil(value - EPSILON), 0)


@dataclass(frozen=True, slots=True)
class Certificate:
    """The round of column generation that proved a part's configuration bound, by shape key:
    the same hypervisors, with fewer domains of any shape, are bounded by the same prices (see
    `priced_bound`), without pricing anything again."""

    prices: Mapping[Hashable, float]
    """Each shape with a positive price, its price."""
    caps: Mapping[Hashable, int]
    """Each priced shape whose count limited its pricing (a hypervisor of some kind holds that
    many of it in a row, or more): that count, above which the prices prove nothing."""
    penalty: float

    def bound(self, counts: Mapping[Hashable, int]) -> int | None:
        """The bound these prices prove for these domains per shape; None where a count is
        above its cap."""
        total = -self.penalty
        for key, price in self.prices.items():
            count = counts.get(key, 0)
            cap = self.caps.get(key)
            if cap is not None and count > cap:
                return None
            total += price * count
        return ceil_bound(total)


@dataclass(frozen=True, slots=True)
class PartBound:
    """A zone part's hypervisors (zone_parts), a proven lower bound on its compaction, its domains
    per shape key, and the prices that proved its configuration bound (when it was priced and
    no domain was stuck)."""

    hosts: tuple[str, ...]
    value: int
    counts: Mapping[Hashable, int]
    certificate: Certificate | None = None


__all__ = ["EPSILON", "Certificate", "PartBound", "ceil_bound"]
