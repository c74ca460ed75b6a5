"""The failure-tolerance worker: a child process of the exporter that schedules, so that a
computation of tens of seconds (and the garbage collections of its millions of short-lived
objects) never holds the exporter's interpreter lock while it serves a scrape or reads an audit.

`main` (started as WORKER_COMMAND) reads requests on its standard input and answers on its
standard output, frames each way: an 8-byte big-endian length, then a pickle. Each request gets
its tolerance report; one with packing settings then gets the packing answers as far as they are
at once (each changed hypervisor's stranded capacity). The packing answers that read the whole
fleet (fleet/packing.py's steps) are computed by a thread of their own, one frame after each, so
that a request never waits for them: while a step runs, a request shares the interpreter with it
(about half as fast), rather than waiting for its end.
Requests and answers carry one pickle per hypervisor inside the frame, so that neither side holds
its lock for the whole fleet's (un)pickling at once. Only the exporter that started it
writes to it (a private pipe), so trusting its pickles is trusting ourselves. It keeps the
simulation between requests (see FleetSimulation) and ends when its standard input closes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import struct
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from io import FileIO

from virtcap.fleet.packing import PackingReport
from virtcap.fleet.tolerance import FleetSimulation, HostEvacuation, SimulationRequest, ToleranceReport
from virtcap.model.packing.stranded import StrandedCapacity
from virtcap.model.scheduler import HostState
from virtcap.service.priority import yield_the_cpu
from virtcap.service.worker_process import start_worker

log = logging.getLogger(__name__)

HEADER = struct.Struct(">Q")
WORKER_COMMAND = (sys.executable, "-c", "from virtcap.service.tolerance_worker import main; main()")
"""Not `-m`: a module run as `__main__` would unpickle the requests' classes as another module's."""


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    request: SimulationRequest
    """With `changed` empty: the states travel in `states`, one pickle each."""
    states: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class EncodedReport:
    report: ToleranceReport | None
    """With `evacuations` empty (they travel in `evacuations`); None with an error."""
    evacuations: Mapping[str, bytes]
    """One pickle per hypervisor whose evacuation differs from the one sent before."""
    error: str | None = None
    names: tuple[str, ...] = ()
    """Every hypervisor of the report, in order."""


@dataclass(frozen=True, slots=True)
class EncodedPacking:
    """The packing answers after a request with packing settings, or after a step."""

    report: PackingReport | None
    """With `stranded` empty (it travels in `stranded`); None with an error: the packing
    failed, the tolerance stands (and the worker goes on)."""
    stranded: Mapping[str, bytes] = field(default_factory=dict)
    """One pickle per hypervisor whose stranded capacity differs from the one sent before."""
    names: tuple[str, ...] = ()
    """Every hypervisor of the report's stranded capacity, in order."""
    error: str | None = None


class PackingEncoder:
    """The worker's side of the packing answers: a hypervisor's stranded capacity is sent only
    when it is another object than the one sent before (FleetPacking keeps a hypervisor's
    until it solves it again: a step changes none, an update the changed hypervisors' only), so
    that neither side pickles nor unpickles the others'."""

    def __init__(self) -> None:
        self._sent: dict[str, StrandedCapacity] = {}

    def encode(self, report: PackingReport) -> bytes:
        sent, now = self._sent, report.stranded
        changed = {name: pickle_one(found) for name, found in now.items() if sent.get(name) is not found}
        self._sent = dict(now)
        return _frame(EncodedPacking(replace(report, stranded={}), changed, tuple(now)))

    def failed(self, error: Exception) -> bytes:
        self._sent = {}  # the next answers start from scratch, and are sent whole
        return _frame(EncodedPacking(None, error=f"{type(error).__name__}: {error}"))


class PackingDecoder:
    """The exporter's side: the stranded capacity of the last answers, completed by each new one."""

    def __init__(self) -> None:
        self._stranded: dict[str, StrandedCapacity] = {}

    def complete(self, encoded: EncodedPacking, loaded: Mapping[str, StrandedCapacity]) -> PackingReport:
        """The answers, given the stranded capacity they sent unpickled."""
        if encoded.report is None:
            self._stranded = {}
            raise RuntimeError(f"the packing answers were not computed: {encoded.error}")
        known = self._stranded
        known.update(loaded)
        missing = [name for name in encoded.names if name not in known]
        if missing:
            raise RuntimeError(
                f"the failure-tolerance worker sent no stranded capacity of {', '.join(missing[:5])}"
            )
        self._stranded = {name: known[name] for name in encoded.names}
        return replace(encoded.report, stranded=dict(self._stranded))


def encode_request(request: SimulationRequest) -> bytes:
    states = {name: pickle_one(state) for name, state in request.changed.items()}
    return request_frame(request, states)


def pickle_one(value: object) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def request_frame(request: SimulationRequest, states: Mapping[str, bytes]) -> bytes:
    """The frame of a request whose changed states are already pickled, one each."""
    return _frame(EncodedRequest(replace(request, changed={}), states))


def decode_request(encoded: EncodedRequest) -> SimulationRequest:
    changed: dict[str, HostState] = {name: pickle.loads(data) for name, data in encoded.states.items()}
    return replace(encoded.request, changed=changed)


class ReportEncoder:
    """The worker's side of the reports: an evacuation is sent only when it differs from the one
    sent before, since an incremental computation leaves most of them as they were, and the
    exporter then unpickles only what changed."""

    def __init__(self) -> None:
        self._sent: dict[str, bytes] = {}

    def encode(self, report: ToleranceReport) -> bytes:
        pickled = {
            name: pickle.dumps(found, pickle.HIGHEST_PROTOCOL) for name, found in report.evacuations.items()
        }
        changed = {name: data for name, data in pickled.items() if self._sent.get(name) != data}
        self._sent = pickled
        return _frame(EncodedReport(replace(report, evacuations={}), changed, names=tuple(pickled)))


class ReportDecoder:
    """The exporter's side: the evacuations of the last report, completed by each new one."""

    def __init__(self) -> None:
        self._evacuations: dict[str, HostEvacuation] = {}

    def decode(self, encoded: EncodedReport) -> ToleranceReport:
        loaded = {name: pickle.loads(data) for name, data in encoded.evacuations.items()}
        return self.complete(encoded, loaded)

    def complete(self, encoded: EncodedReport, loaded: Mapping[str, HostEvacuation]) -> ToleranceReport:
        """The report, given the evacuations it sent unpickled (which a caller may do a few at a
        time)."""
        if encoded.report is None:
            raise RuntimeError(f"the failure-tolerance worker failed: {encoded.error}")
        known = self._evacuations
        known.update(loaded)
        missing = [name for name in encoded.names if name not in known]
        if missing:
            raise RuntimeError(f"the failure-tolerance worker sent no evacuation of {', '.join(missing[:5])}")
        evacuations = {name: known[name] for name in encoded.names}
        self._evacuations = dict(evacuations)  # a published report's own copy; this one goes on
        return replace(encoded.report, evacuations=evacuations)


def _frame(message: object) -> bytes:
    body = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def _read_frame(stream: FileIO) -> bytes | None:
    header = _read_exactly(stream, HEADER.size)
    if header is None:
        return None  # the exporter is gone, or stopped us
    (size,) = HEADER.unpack(header)
    return _read_exactly(stream, size)


def _read_exactly(stream: FileIO, size: int) -> bytes | None:
    """`size` bytes, read as the pipe gives them; None at its end."""
    received = bytearray(size)
    view = memoryview(received)
    while view:
        count = stream.readinto(view)
        if not count:
            return None
        view = view[count:]
    return bytes(received)


def _write_all(stream: FileIO, data: bytes) -> None:
    """Every byte, however the pipe takes them. Not through a buffered writer: a write that a
    stop interrupts (SIGSTOP then SIGCONT: a debugger, job control, an operator's `kill -STOP`)
    returns after part of its bytes, and Python's buffered writer then corrupts the frame (frames
    written by two threads and read by asyncio arrive corrupted within seconds of such pauses;
    written so, none: tests/system/test_worker_process.py)."""
    view = memoryview(data)
    while view:
        view = view[stream.write(view) :]


class AnswerWriter:
    """The answers' pipe, shared by the thread that answers requests and the one that computes
    packing steps: one frame at a time."""

    def __init__(self, answers: FileIO) -> None:
        self._answers = answers
        self._lock = threading.Lock()
        self._packing = PackingEncoder()

    def send(self, frame: bytes) -> None:
        with self._lock:
            _write_all(self._answers, frame)

    def send_packing(self, simulation: FleetSimulation, compute: Callable[[], PackingReport | None]) -> None:
        """The packing answers `compute` returns (None: nothing to send), or why not: a failure
        there (a solver's) leaves the tolerance as computed, and the next request computes the
        packing again from scratch."""
        try:
            report = compute()
        except Exception as error:
            log.exception("packing not computed")
            simulation.forget_packing()
            with self._lock:
                frame = self._packing.failed(error)
            self.send(frame)
            return
        if report is None:
            return
        with self._lock:  # encoded in the order sent: each frame is the difference to the one before
            _write_all(self._answers, self._packing.encode(report))


def serve(requests: FileIO, answers: FileIO) -> None:
    simulation, reports, writer = FleetSimulation(), ReportEncoder(), AnswerWriter(answers)
    steps = threading.Thread(
        target=compute_steps, args=(simulation, writer), name="packing-steps", daemon=True
    )
    steps.start()
    while True:
        body = _read_frame(requests)
        if body is None:
            return
        encoded = pickle.loads(body)
        if not isinstance(encoded, EncodedRequest):
            raise TypeError(f"expected a request, got {type(encoded).__name__}")
        request = decode_request(encoded)
        try:
            answer = reports.encode(simulation.apply(request))
        except Exception as error:  # told to the exporter, whose supervisor restarts us
            log.exception("failure tolerance not computed")
            writer.send(_frame(EncodedReport(None, {}, f"{type(error).__name__}: {error}")))
            return
        writer.send(answer)
        if request.packing is not None:
            writer.send_packing(simulation, functools.partial(simulation.update_packing, request))


STEPS_FAILED_EXIT = 3
"""The worker's exit code when its packing thread failed: the exporter starts another."""


def compute_steps(
    simulation: FleetSimulation, writer: AnswerWriter, on_failure: Callable[[], None] | None = None
) -> None:
    """The packing steps, one after the other while any is queued, each answer sent (the thread
    of `serve`'s, until the process ends: the exporter gone, its pipe broken). Anything else that
    stops it (an answer that cannot be encoded or written) ends the whole worker (`on_failure`,
    by default): a worker whose packing answers stopped for good would go on answering the
    tolerance alone, and the packing would never be shown again; a new worker computes it afresh."""
    try:
        with contextlib.suppress(BrokenPipeError, ValueError):  # ValueError: the pipe closed at exit
            while True:
                simulation.wait_for_packing_step()
                writer.send_packing(simulation, simulation.packing_step)
    except Exception:
        log.exception("the packing answers stopped: the worker ends, to be started again")
        (on_failure or _end_worker)()


def _end_worker() -> None:
    logging.shutdown()
    os._exit(STEPS_FAILED_EXIT)  # from a thread: the main one is blocked reading the next request


def frame_pipes() -> tuple[FileIO, FileIO]:
    """Standard input and output unbuffered: each frame read and written whole, by
    `_read_exactly` and `_write_all`."""
    requests = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    answers = open(sys.stdout.fileno(), "wb", buffering=0, closefd=False)  # noqa: SIM115
    return requests, answers


def main() -> None:
    requests, answers = frame_pipes()
    sys.stdout = sys.stderr  # the frames own standard output: a stray print must not corrupt them
    start_worker()
    yield_the_cpu()
    # Interrupted or its pipe closed: the exporter is going away.
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        serve(requests, answers)
