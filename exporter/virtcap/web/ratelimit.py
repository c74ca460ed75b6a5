"""exporter-toolkit's `rate_limit`: one token bucket over all requests, as there (not per client).

It knows nothing of files or HTTP, so that a reload can keep the bucket, and the tokens it holds,
when the limit did not change, and so that its arithmetic can be read without the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimit:
    interval: float
    """Seconds for one token to come back."""
    burst: int


class TokenBucket:
    """exporter-toolkit's rate limit: `burst` requests at once, then one more per `interval`."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._updated = time.monotonic()

    def allow(self) -> bool:
        now = time.monotonic()
        elapsed, self._updated = now - self._updated, now
        self._tokens = min(float(self.limit.burst), self._tokens + elapsed / self.limit.interval)
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
