"""The failure-tolerance worker: a child process of the exporter that schedules, so that a
computation of tens of seconds (and the garbage collections of its millions of short-lived
objects) never holds the exporter's interpreter lock while it serves a scrape or reads an audit.

`main` (started as WORKER_COMMAND) reads requests on its standard input and answers on its
standard output, one frame each way per computation: an 8-byte big-endian length, then a
pickle. A request with packing settings gets a second answer once the packing answers are
computed (fleet/packing.py), so that the tolerance is published without waiting for them.
Requests and answers carry one pickle per hypervisor inside the frame, so that neither side holds
its lock for the whole fleet's (un)pickling at once. Only the exporter that started it
writes to it (a private pipe), so trusting its pickles is trusting ourselves. It keeps the
simulation between requests (see FleetSimulation) and ends when its standard input closes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import BinaryIO

from virtcap.fleet.packing import PackingReport
from virtcap.fleet.tolerance import FleetSimulation, HostEvacuation, SimulationRequest, ToleranceReport
from virtcap.model.scheduler import HostState

log = logging.getLogger(__name__)

HEADER = struct.Struct(">Q")
WORKER_COMMAND = (sys.executable, "-c", "from virtcap.service.tolerance_worker import main; main()")
"""Not `-m`: a module run as `__main__` would unpickle the requests' classes as another module's."""
NICENESS = 19
"""Where SCHED_IDLE is refused, the lowest priority a nice value gives."""


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
    """The second answer to a request with packing settings."""

    report: PackingReport | None
    """None with an error: the packing failed, the tolerance stands (and the worker goes on)."""
    error: str | None = None


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


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None  # the exporter is gone, or stopped us
    (size,) = HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return body


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    simulation, reports = FleetSimulation(), ReportEncoder()
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
            answer = _frame(EncodedReport(None, {}, f"{type(error).__name__}: {error}"))
            answers.write(answer)
            answers.flush()
            return
        answers.write(answer)
        answers.flush()
        if request.packing is not None:
            answers.write(_frame(pack(simulation, request)))
            answers.flush()


def pack(simulation: FleetSimulation, request: SimulationRequest) -> EncodedPacking:
    """The packing answers, or why not: a failure there (a solver's) leaves the tolerance as
    computed, and the next request computes the packing again from scratch."""
    try:
        return EncodedPacking(simulation.pack(request))
    except Exception as error:
        log.exception("packing not computed")
        simulation.forget_packing()
        return EncodedPacking(None, f"{type(error).__name__}: {error}")


def yield_the_cpu() -> None:
    """Linux's SCHED_IDLE: the worker runs only on a CPU nothing else wants, and a scrape or an
    audit that wakes up takes the CPU from it at once, so that a scrape is as fast while it
    computes; its answer may come later on a busy machine, never a scrape."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused by a container's seccomp policy
        os.nice(NICENESS)


def main() -> None:
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # the frames own standard output: a stray print must not corrupt them
    yield_the_cpu()
    # Interrupted or its pipe closed: the exporter is going away.
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        serve(requests, answers)
