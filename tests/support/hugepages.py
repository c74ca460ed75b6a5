"""The machine's hugepage pools are kernel-wide: tests that change them or measure what a guest
takes from them hold this lock meanwhile, so that the suite's workers (pytest-xdist processes) do
not move each other's counts."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = Path("/tmp/virtcap-tests-hugepages.lock")


@contextmanager
def hugepage_pools_held() -> Iterator[None]:
    """Held until the block ends, or the process does: the kernel releases a dead holder's lock."""
    with LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
