"""What every worker process of the exporter does as it starts (the failure tolerance's, the
Placement reader's, the planner's and a scenario's second process)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

from virtcap.service.garbage import freeze_survivors

_PR_SET_PDEATHSIG = 1
NICENESS = 19
"""Where SCHED_IDLE is refused, the lowest priority a nice value gives."""


def start_worker() -> None:
    """What a worker does first: it dies with the exporter (`die_with_parent`), and the
    survivors of its full garbage collections are frozen (service/garbage.py): the fleet it
    computes on lives as long as it does."""
    die_with_parent()
    freeze_survivors()


def die_with_parent() -> None:
    """Linux's parent-death signal: the worker is killed (SIGKILL) when the process that started
    it ends, rather than left computing for nobody (a planner worker killed past its time limit,
    an exporter killed in the middle of a computation). SIGKILL ends a stopped process too."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no parent-death signal
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def yield_the_cpu() -> None:
    """Linux's SCHED_IDLE: the worker runs only on a CPU nothing else wants, and a scrape or an
    audit that wakes up takes the CPU from it at once (a worker at a mere nice value keeps it for
    the rest of its time slice, each time), so that a scrape is as fast while it computes; its
    answer may come later on a busy machine, never a scrape.

    Linux sets a thread's policy, not a process's: every thread the worker has is set, those its
    imports started as well (OpenBLAS starts its pool as numpy is imported, and that thread ran at
    normal priority beside the scrapes); threads started after inherit it."""
    try:
        for thread in _threads():
            os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused by a container's seccomp policy
        lower_priority_by(NICENESS)


def lower_priority_by(increment: int) -> None:
    """Every thread of this process `increment` nice levels lower (up to 19): a nice value too
    belongs to a thread on Linux, and `os.nice` sets only the caller's."""
    for thread in _threads():
        with contextlib.suppress(OSError):  # ended meanwhile, or refused: as it was
            niceness = min(os.getpriority(os.PRIO_PROCESS, thread) + increment, 19)
            os.setpriority(os.PRIO_PROCESS, thread, niceness)


def _threads() -> list[int]:
    """This process's threads (Linux); where that cannot be read, the calling one (0)."""
    try:
        return [int(task.name) for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return [0]


def idle_worker() -> None:
    """A worker's start (`start_worker`), then at idle priority (`yield_the_cpu`)."""
    start_worker()
    yield_the_cpu()


def runnable(pid: int) -> bool:
    """Whether a thread of process `pid` is running or waiting for a CPU (Linux's state R); False
    where that cannot be read."""
    for path in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = path.read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
        if state == "R":
            return True
    return False
