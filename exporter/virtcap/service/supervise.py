"""Long-lived background tasks that cannot die silently.

Every loop the exporter runs for its whole life (one audit loop per hypervisor, the renderer of
/metrics, the expiry of claims) runs under a Supervisor: when one raises, the error is logged with
the task's context, counted, and the task starts again after a backoff that doubles up to a
ceiling. While a task waits for its restart it is dead, and /-/healthy says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
HEALTHY_AFTER_SECONDS = 60.0
"""A task that ran this long since its last restart starts again from the first backoff."""


@dataclass
class _Supervised:
    name: str
    kind: str
    factory: Callable[[], Coroutine[Any, Any, None]]
    context: Mapping[str, str]
    on_failure: Callable[[BaseException], None] | None
    runner: asyncio.Task[None] | None = None
    dead_since: float | None = None
    last_error: str = ""
    backoff: float = FIRST_BACKOFF_SECONDS


@dataclass
class Supervisor:
    changed: Callable[[], None] | None = None
    """Told whenever a task dies or restarts, so that /metrics shows it."""
    failures: Counter[str] = field(default_factory=Counter)
    """Failures by kind of task (audit, render, expire-claims): virtcap_task_failures_total."""
    _tasks: dict[str, _Supervised] = field(default_factory=dict)

    def start(
        self,
        name: str,
        kind: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        context: Mapping[str, str] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Run `factory()` until stopped. `on_failure` is told of each crash before the backoff,
        so that what the task stood for can be shown as failed (a hypervisor marked down)."""
        if name in self._tasks:
            raise RuntimeError(f"task {name} is already supervised")
        self.failures.setdefault(kind, 0)
        task = _Supervised(name, kind, factory, dict(context or {}), on_failure)
        task.runner = asyncio.create_task(self._keep_running(task), name=name)
        self._tasks[name] = task

    async def stop(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is None or task.runner is None:
            return
        task.runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task.runner

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(name) for name in list(self._tasks)))

    def supervises(self, name: str) -> bool:
        return name in self._tasks

    def dead(self) -> dict[str, str]:
        """Tasks waiting for a restart after a crash, with their last error."""
        return {task.name: task.last_error for task in self._tasks.values() if task.dead_since is not None}

    def dead_by_kind(self) -> Counter[str]:
        return Counter(task.kind for task in self._tasks.values() if task.dead_since is not None)

    async def _keep_running(self, task: _Supervised) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await task.factory()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any crash: logged, counted, restarted
                failure: BaseException = error
            else:
                failure = RuntimeError("the task returned, but it is meant to run until stopped")
            if loop.time() - started >= HEALTHY_AFTER_SECONDS:
                task.backoff = FIRST_BACKOFF_SECONDS
            task.dead_since = loop.time()
            task.last_error = f"{type(failure).__name__}: {failure}"
            self.failures[task.kind] += 1
            log.error(
                "background task failed; restarting",
                exc_info=failure,
                extra={"task": task.name, **task.context, "restart_in": f"{task.backoff:g}s"},
            )
            if task.on_failure is not None:
                _report(task, task.on_failure, failure)
            if self.changed is not None:
                _report(task, self.changed)
            await asyncio.sleep(task.backoff)
            task.backoff = min(task.backoff * 2, MAX_BACKOFF_SECONDS)
            task.dead_since = None
            if self.changed is not None:
                _report(task, self.changed)


def _report(task: _Supervised, callback: Callable[..., None], *args: object) -> None:
    try:
        callback(*args)
    except Exception:  # reporting a crash must never stop the restart
        log.exception("could not report a failed task", extra={"task": task.name})
