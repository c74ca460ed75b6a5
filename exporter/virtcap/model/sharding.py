"""Which shard of a sharded deployment audits a hypervisor: a consistent hash of its name.

Several exporters split one fleet as kube-state-metrics splits a cluster (`--shard N
--total-shards M`, shards numbered from 0): each audits and serves the hypervisors assigned to
it and connects to no other. The assignment is Lamping and Veach's jump consistent hash ("A
Fast, Minimal Memory, Consistent Hash Algorithm", 2014) of a stable 64-bit hash of the name, not
`hash % M`: going from M to M+1 shards moves about 1/(M+1) of the hypervisors, all of them onto
the new shard, where a modulo would move nearly all of them (and every exporter would drop and
reconnect most of its fleet).

The name's hash is BLAKE2b with an 8-byte digest of its UTF-8 bytes, read big-endian: the same
on every machine, Python version and process (Python's own `hash()` of a string is salted per
process, so two exporters would disagree).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["MAX_SHARDS", "UNSHARDED", "Shard", "jump_consistent_hash", "name_key", "shard_of"]

MAX_SHARDS = 1024
"""Total shards at most: a thousand exporters is far beyond what a fleet needs, and a bound keeps
a mistaken value (a port number, a timestamp) from being taken for a shard count."""

_MULTIPLIER = 2862933555777941757
"""The 64-bit linear congruential generator of the paper, stepped once per candidate bucket."""
_MASK_64 = (1 << 64) - 1


def name_key(name: str) -> int:
    """A hypervisor name's stable 64-bit hash."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")


def jump_consistent_hash(key: int, buckets: int) -> int:
    """The bucket in [0, buckets) of a 64-bit key: as the number of buckets grows by one, a key
    either stays in its bucket or moves to the new one, each with the expected probability."""
    if buckets < 1:
        raise ValueError(f"expected at least one bucket, got {buckets}")
    key &= _MASK_64
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * _MULTIPLIER + 1) & _MASK_64
        # The next bucket the key would jump to, as the paper computes it in double precision.
        candidate = int((bucket + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return bucket


def shard_of(name: str, total_shards: int) -> int:
    """The shard (from 0) that audits the hypervisor called `name` among `total_shards`."""
    return jump_consistent_hash(name_key(name), total_shards)


@dataclass(frozen=True, slots=True)
class Shard:
    """One exporter's part of the fleet: shard `ordinal` of `total` (kube-state-metrics' numbering)."""

    ordinal: int = 0
    total: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.total <= MAX_SHARDS:
            raise ValueError(f"expected total shards from 1 to {MAX_SHARDS}, got {self.total}")
        if not 0 <= self.ordinal < self.total:
            raise ValueError(f"expected a shard from 0 to {self.total - 1}, got {self.ordinal}")

    @property
    def sharded(self) -> bool:
        return self.total > 1

    def holds(self, name: str) -> bool:
        """Whether this shard audits the hypervisor called `name`."""
        return self.total == 1 or shard_of(name, self.total) == self.ordinal

    def __str__(self) -> str:
        return f"shard {self.ordinal} of {self.total} (0 to {self.total - 1})"


UNSHARDED = Shard()
"""One exporter for the whole fleet: shard 0 of 1."""
