"""The exporter's Placement reader in a worker process of its own (a `ProcessPoolExecutor` of one
worker, spawned on the first round): a round is thousands of requests whose HTTP and JSON take
seconds of CPU on a large fleet (audit/placement.py), which in the exporter's process would hold
the interpreter lock its scrapes need. The worker keeps its reader (its session, the consumers it
described) from round to round, and makes a new one when the `placement:` section changes. A
round past its bound has its worker killed; the next round starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from virtcap.audit.placement import PlacementError, PlacementRead, PlacementReader
from virtcap.config.placement import PlacementSection
from virtcap.service.planner import kill_workers

REAP_SECONDS = 1.0
"""How long a killed worker is waited for."""
_READERS: dict[PlacementSection, PlacementReader] = {}
"""The worker's reader, by the section it was made from: one at most (in the worker process only)."""


def read_round(
    section: PlacementSection, hypervisors: Mapping[str, str], local: Mapping[str, AbstractSet[str]]
) -> PlacementRead:
    """In the worker: one round of its reader (made anew for another section); the consumers
    described are those not a domain of their hypervisor (`local`: its domains' UUIDs)."""
    reader = _READERS.get(section)
    if reader is None:
        for replaced in _READERS.values():
            replaced.close()
        _READERS.clear()
        reader = _READERS[section] = PlacementReader(section)

    def foreign(hypervisor: str, consumer: str) -> bool:
        return consumer.lower() not in local.get(hypervisor, ())

    return reader.read_trees(hypervisors, foreign)


class PlacementWorker:
    """One worker process, one round at a time (the task's rounds never overlap)."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def read(
        self,
        section: PlacementSection,
        hypervisors: Mapping[str, str],
        local: Mapping[str, AbstractSet[str]],
        timeout: float,
    ) -> PlacementRead:
        """A round in the worker: its trees, PlacementError from the reader, TimeoutError past
        `timeout` (the worker killed)."""
        try:
            future = self._started().submit(read_round, section, hypervisors, local)
            async with asyncio.timeout(timeout):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            self.close()
            raise
        except BrokenProcessPool:
            self.close()
            raise PlacementError("the Placement reader's worker process died") from None

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawned, not forked: the exporter's threads (libvirt's, the executor's) hold locks
            # a forked child would inherit held
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def close(self) -> None:
        """The worker killed, whatever it is doing (a hung round included)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        kill_workers(pool)
        with contextlib.suppress(Exception):
            pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(REAP_SECONDS)  # killed: it exits at once, and is reaped rather than left a zombie
