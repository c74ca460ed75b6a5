"""The conformance suite's side of the upstream oracle (oracle.py, run in the upstream virtualenv).

Upstream Nova and Placement are installed by scripts/upstream-venv.sh into their own virtualenv,
never into the project's: the oracle runs there as a child process answering JSON questions, and
the tests compare its answers with virtcap's.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest

from tests.support.serving import DIES_WITH_THE_TESTS
from virtcap.model.resources import Resource

MIB = 1024**2
GIB = 1024**3
PLACEMENT_CLASS = {
    Resource.VCPU: "VCPU",
    Resource.PCPU: "PCPU",
    Resource.MEMORY: "MEMORY_MB",
    Resource.DISK: "DISK_GB",
}
"""Placement's name of each of virtcap's resources."""
UNIT = {Resource.VCPU: 1, Resource.PCPU: 1, Resource.MEMORY: MIB, Resource.DISK: GIB}
"""virtcap's amounts are cpus and bytes; Placement's are cpus, MiB and GiB (written out here, not
taken from virtcap, so that the comparison does not trust what it checks)."""

ROOT = Path(__file__).resolve().parents[2]
ORACLE = Path(__file__).with_name("oracle.py")
UPSTREAM_VENV = Path(os.environ.get("VIRTCAP_UPSTREAM_VENV", ROOT / ".venv-upstream"))
STAMP = ".virtcap-upstream-complete"
"""Written by scripts/upstream-venv.sh once everything is installed."""

START_SECONDS = 60.0
"""Importing Nova and starting Placement (schema migrations on SQLite) takes 2 s unloaded."""
SECONDS_PER_QUESTION = 2.0
"""A Placement question takes about 0.3 s (a dozen requests and the allocations in a row, some 15 ms
each), an inventory or a CPU set a few ms: room for a machine several times slower."""


SEED = os.environ.get("VIRTCAP_CONFORMANCE_SEED", "issue-13")
"""Every generated case derives from this seed and the test's name: a failure is reproduced by
running the same test again (with the same seed). Set it to explore cases never seen before."""


def generator(name: str) -> random.Random:
    return random.Random(f"{SEED}:{name}")


def agree(what: str, mismatches: Sequence[str], compared: int) -> None:
    """Fails with every difference found (the first 20 shown), and the seed that finds them."""
    if not mismatches:
        return
    shown = "\n".join(f"  - {line}" for line in mismatches[:20])
    more = f"\n  ... and {len(mismatches) - 20} more" if len(mismatches) > 20 else ""
    pytest.fail(
        f"{len(mismatches)} of {compared} {what} differ from upstream "
        f"(VIRTCAP_CONFORMANCE_SEED={SEED!r}):\n{shown}{more}",
        pytrace=False,
    )


class OracleError(AssertionError):
    """The oracle is missing, died, stalled or could not answer."""


class Oracle:
    """A running oracle: questions go in as JSON lines, answers come back in order."""

    def __init__(self, process: subprocess.Popen[str], log: Path) -> None:
        self.process = process
        self.log = log
        self._lines: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        threading.Thread(target=self._read, args=(process.stdout,), name="oracle-reader", daemon=True).start()
        self._lock = threading.Lock()

    def _read(self, stream: TextIO) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    def ask(self, questions: Sequence[dict[str, Any]], seconds: float | None = None) -> list[dict[str, Any]]:
        """The answers to a batch of questions, in order; any answer that is an error fails."""
        if not questions:
            return []
        limit = seconds if seconds is not None else START_SECONDS + SECONDS_PER_QUESTION * len(questions)
        with self._lock:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(json.dumps(list(questions)) + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                raise OracleError(f"the oracle has exited; its log: {self.tail()}") from None
            try:
                line = self._lines.get(timeout=limit)
            except queue.Empty:
                raise OracleError(
                    f"the oracle gave no answer within {limit:g} s; its log: {self.tail()}"
                ) from None
        if line is None:
            raise OracleError(f"the oracle has exited; its log: {self.tail()}")
        answers: list[dict[str, Any]] = json.loads(line)
        for question, answer in zip(questions, answers, strict=True):
            if "oracle_error" in answer:
                raise OracleError(
                    f"the oracle could not answer {json.dumps(question)}: {answer['oracle_error']}"
                )
        return answers

    def ask_one(self, question: dict[str, Any]) -> dict[str, Any]:
        return self.ask([question])[0]

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(none)"


def upstream_python() -> Path:
    """The upstream virtualenv's interpreter; fails with how to make it when it is not complete."""
    python = UPSTREAM_VENV / "bin" / "python"
    if not (UPSTREAM_VENV / STAMP).is_file() or not python.exists():
        raise OracleError(
            f"the upstream virtualenv {UPSTREAM_VENV} is missing or incomplete: "
            "`make upstream-venv` (or scripts/upstream-venv.sh) installs Nova and Placement from PyPI"
        )
    return python


@contextmanager
def running_oracle(log: Path) -> Iterator[Oracle]:
    python = upstream_python()
    with log.open("w") as errors:
        process = subprocess.Popen(
            [*DIES_WITH_THE_TESTS, str(python), str(ORACLE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            cwd=ORACLE.parent,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""},
        )
    oracle = Oracle(process, log)
    try:
        if oracle.ask_one({"op": "ping"}) != {"pong": True}:
            raise OracleError(f"the oracle did not answer a ping; its log: {oracle.tail()}")
        yield oracle
    finally:
        assert process.stdin is not None
        process.stdin.close()  # the oracle ends at the end of its input
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
