"""The machine's hugepage pools are kernel-wide: tests that change them or measure what a guest
takes from them hold this lock meanwhile, so that the suite's workers (pytest-xdist processes) do
not move each other's counts."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

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


@contextmanager
def more_hugepages(count_file: Path, pages: int) -> Iterator[int]:
    """`pages` more hugepages in the pool of `count_file` (an `nr_hugepages`), as many as the kernel
    found (it may find fewer), given back at the end relative to the count then: whatever else
    changed it meanwhile (a process other than the suite's) stays changed. Skips the test where the
    pool cannot be written."""
    previous = int(count_file.read_text())
    try:
        count_file.write_text(f"{previous + pages}\n")
    except OSError as error:
        pytest.skip(f"cannot reserve hugepages in {count_file}: {error.strerror}")
    taken = max(0, int(count_file.read_text()) - previous)
    try:
        yield taken
    finally:
        count_file.write_text(f"{max(0, int(count_file.read_text()) - taken)}\n")
