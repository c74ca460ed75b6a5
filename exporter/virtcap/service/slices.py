"""Work the event loop must do itself (it reads or writes what the loop owns: the store, the
trackers' state), cut into slices so that a scrape never waits long behind it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

SLICE_SECONDS = 0.0002
"""How long such work runs on the event loop before it lets a scrape in. A scrape needs several
turns of the loop (its request read, its handler, its body written), and waits for a slice at
each: at 0.5 ms, a scrape that met a render's views waited 2 to 3 ms more (1,000 hypervisors)."""

_T = TypeVar("_T")
_R = TypeVar("_R")


async def in_slices(items: Iterable[_T], work: Callable[[_T], _R]) -> list[_R]:
    """`work` on each item (an iterator's made as they are taken, in the slices too), on the
    event loop, yielding to it whenever a slice has run for
    SLICE_SECONDS. Not in a thread: a thread running Python holds the interpreter lock for up to
    its switch interval each time the loop needs it, and a scrape waits that long several times;
    here a scrape waits for one slice at each turn of the loop it needs."""
    results = []
    started = time.perf_counter()
    for item in items:
        results.append(work(item))
        if time.perf_counter() - started > SLICE_SECONDS:
            await asyncio.sleep(0)
            started = time.perf_counter()
    return results
