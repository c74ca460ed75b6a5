"""The interpreter's cycle collector in a process that keeps a large heap for its whole life: the
exporter (every hypervisor's last audits, the rendered exposition) and its workers (the fleet
they compute on).

A collection of CPython's older generations walks every container object in them with the
interpreter lock taken: on 1,000 hypervisors x 50 domains, 0.1 to 0.5 s during which no scrape is
answered, several times a minute while audits or a computation build new objects; and it finds
almost nothing, since reference counting frees nearly all of this heap's garbage (0 to 60 objects
a collection, measured on bench/packing.py's fleet). So whatever survives a collection of the
middle generation or the oldest is frozen (`gc.freeze`: collections leave it out), and a
collection walks only what was made since the last one. Freezing only the oldest generation's
survivors was not enough while a fleet is audited: a full collection every few seconds walked
what the audits had kept since the last one, 40 to 100 ms, the slowest scrapes of
bench/reconciliation.py's served part. Once every FULL_COLLECTION_SECONDS a full collection walks
everything again (the frozen objects put back first), which frees the reference cycles that died
among the frozen objects: what they hold is freed late, never lost. The youngest generation's
collections are unchanged.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Mapping

FULL_COLLECTION_SECONDS = 600.0
"""How often a full collection walks the whole heap, frozen objects included."""

_YOUNGEST = 0
"""Its collections walk only what was made since the last one, and are left as they are."""
_OLDEST = 2
"""CPython's oldest generation: what its collection walks is what pauses the process."""


class SurvivorFreezing:
    """Freezes the survivors of every collection of the two older generations, and makes one full
    collection every `every` seconds walk the whole heap again (`gc.callbacks`, so that it needs
    no task of its own in the event loop or in a worker's loop)."""

    def __init__(
        self, every: float = FULL_COLLECTION_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.clock = clock
        self._whole_since = clock()
        self._whole = False
        self.whole_collections = 0
        """How many collections walked the whole heap (frozen objects included)."""

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        """Collections as the interpreter makes them, the frozen objects back in the oldest generation."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.unfreeze()

    def _callback(self, phase: str, info: Mapping[str, int]) -> None:
        generation = info["generation"]
        if generation == _YOUNGEST:
            return
        if phase == "start":
            if generation == _OLDEST and self.clock() - self._whole_since >= self.every:
                gc.unfreeze()  # into the oldest generation, which this collection walks
                self._whole = True
            return
        if self._whole:
            self._whole = False
            self._whole_since = self.clock()
            self.whole_collections += 1
        gc.freeze()


@functools.cache
def freeze_survivors() -> SurvivorFreezing:
    """This process's `SurvivorFreezing`, installed once: for a process whose heap lives long
    (the exporter once it listens, a worker as it starts), never in one that imports virtcap as
    a library (a test, a one-shot command)."""
    freezing = SurvivorFreezing()
    freezing.install()
    return freezing
