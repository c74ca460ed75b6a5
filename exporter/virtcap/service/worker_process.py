"""What every worker process of the exporter does as it starts (the failure tolerance's, the
Placement reader's, the planner's and a scenario's second process)."""

from __future__ import annotations

import contextlib
import ctypes
import signal
from pathlib import Path

from virtcap.service.garbage import freeze_survivors
from virtcap.service.priority import yield_the_cpu

_PR_SET_PDEATHSIG = 1


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
