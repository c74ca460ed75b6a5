"""The CPU priorities of the exporter's threads and workers: what must answer now (the event
loop, the audits, a scraper on the same machine) takes the CPU from what can answer later.

Linux sets a scheduling policy and a nice value per thread, not per process: a process is
lowered thread by thread (`/proc/self/task`), and threads started afterwards inherit the value of
the one that starts them."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

NICENESS = 19
"""Where SCHED_IDLE is refused, the lowest priority a nice value gives."""


def yield_the_cpu() -> None:
    """Linux's SCHED_IDLE: the worker runs only on a CPU nothing else wants, and a scrape or an
    audit that wakes up takes the CPU from it at once (a worker at a mere nice value keeps it for
    the rest of its time slice, each time), so that a scrape is as fast while it computes; its
    answer may come later on a busy machine, never a scrape.

    Linux sets a thread's policy, not a process's: every thread the worker has is set, those its
    imports started as well (OpenBLAS starts its pool as numpy is imported, and that thread ran at
    normal priority beside the scrapes); threads started after inherit it."""
    for thread in _threads():
        _idle(thread)


def lower_priority_by(increment: int) -> None:
    """Every thread of this process `increment` nice levels lower (up to 19): a nice value too
    belongs to a thread on Linux, and `os.nice` sets only the caller's."""
    for thread in _threads():
        _lower(thread, increment)


def _threads() -> list[int]:
    """This process's threads (Linux); where that cannot be read, the calling one (0)."""
    try:
        return [int(task.name) for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return [0]


def idle_this_thread() -> None:
    """The calling thread alone at SCHED_IDLE (see `yield_the_cpu`); where that is refused, at the
    lowest nice value."""
    _idle(threading.get_native_id())


def _idle(thread: int) -> None:
    try:
        os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, refused by a container's seccomp policy, or ended
        _lower(thread, NICENESS)


def _lower(thread: int, increment: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # ended meanwhile, refused, or not Linux
        niceness = min(os.getpriority(os.PRIO_PROCESS, thread) + increment, 19)
        os.setpriority(os.PRIO_PROCESS, thread, niceness)
