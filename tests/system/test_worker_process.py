"""The exporter's worker processes (service/worker_process.py, service/tolerance_worker.py): real
child processes, stopped and continued (SIGSTOP, SIGCONT) and orphaned as an operator, a debugger
or a crash would."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

PAUSED_WRITER = """
import random, threading
from hashlib import sha256
from virtcap.service.tolerance_worker import AnswerWriter, frame_pipes
_, answers = frame_pipes()
writer = AnswerWriter(answers)
def frames(seed):
    rng = random.Random(seed)
    for _ in range(40):
        body = rng.randbytes(rng.randrange(1, 2_000_000))
        writer.send(len(body).to_bytes(8, "big") + sha256(body).digest() + body)
other = threading.Thread(target=frames, args=(1,))
other.start()
frames(2)
other.join()
"""


def state(pid: int) -> str:
    """The process's state letter (T: stopped, Z: a zombie); "" once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return text.rsplit(")", 1)[1].split()[0]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_failure_tolerance_workers_frames_survive_being_stopped_and_continued() -> None:
    """A write that a stop interrupts returns after part of its bytes: the worker's frames (two
    threads, one pipe, the frames larger than the pipe holds) arrive whole however often it is
    stopped meanwhile. Written through Python's buffered writer, they arrived corrupted."""
    child = subprocess.Popen([sys.executable, "-c", PAUSED_WRITER], stdout=subprocess.PIPE)
    assert child.stdout is not None
    done = threading.Event()

    def stop_again_and_again() -> None:
        while not done.is_set():
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(0.002)
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(0.003)

    stopper = threading.Thread(target=stop_again_and_again)
    stopper.start()
    try:
        for _ in range(80):
            size = int.from_bytes(child.stdout.read(8), "big")
            digest = child.stdout.read(32)
            assert hashlib.sha256(child.stdout.read(size)).digest() == digest, "a frame was corrupted"
        assert child.stdout.read() == b""
    finally:
        done.set()
        stopper.join()
        child.kill()
        child.wait()


def test_a_worker_dies_with_the_process_that_started_it_even_stopped() -> None:
    """An exporter killed in the middle of a computation leaves no worker computing for nobody,
    nor one stopped for good."""
    worker_code = (
        "import os, time\n"
        "from virtcap.service.planner import lower_priority\n"
        "lower_priority()\n"  # what the planner's and the Placement reader's workers run first
        "print(os.getpid(), flush=True)\n"
        "time.sleep(600)\n"
    )
    exporter_code = (
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {worker_code!r}])\n"
        "time.sleep(600)\n"
    )
    exporter = subprocess.Popen([sys.executable, "-c", exporter_code], stdout=subprocess.PIPE)
    try:
        assert exporter.stdout is not None
        worker = int(exporter.stdout.readline())  # printed once its parent-death signal is set
        os.kill(worker, signal.SIGSTOP)
        wait_for(lambda: state(worker) == "T", 10, "not stopped")
        exporter.kill()
        exporter.wait()
        wait_for(lambda: state(worker) in ("", "Z"), 10, "a stopped worker outlived its exporter")
    finally:
        exporter.kill()
        exporter.wait()


def test_the_failure_tolerances_worker_starts_without_the_configurations_machinery() -> None:
    """The worker is sent hosts, never a configuration file: it imports neither the configuration
    (pydantic's models, YAML) nor anything above the fleet. Each exporter starts one, and those
    imports were a quarter of its start."""
    probe = (
        "import sys, virtcap.service.tolerance_worker; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml', 'aiohttp')"
        " or m.startswith(('virtcap.config', 'virtcap.web', 'virtcap.commands'))))"
    )
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_a_workers_priority_is_lowered_in_every_thread_it_has() -> None:
    """A nice value belongs to a thread on Linux: the threads a worker's imports started before
    (OpenBLAS's, with numpy) are lowered with it, and those started after inherit it."""
    code = (
        "import os, threading, time\n"
        "from pathlib import Path\n"
        "from virtcap.service.priority import lower_priority_by\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "before = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "lower_priority_by(3)\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "tasks = [int(task.name) for task in Path('/proc/self/task').iterdir()]\n"
        "lowered = {os.getpriority(os.PRIO_PROCESS, t) for t in tasks}\n"
        "print(len(tasks), lowered == {min(before + 3, 19)})\n"  # a suite run at nice 17 stops at 19
    )
    command = [sys.executable, "-c", code]
    answer = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    threads, lowered = answer.stdout.split()
    assert int(threads) >= 3  # the two started, and the main one
    assert lowered == "True"
