"""Running blocking libvirt calls off the event loop in daemon threads.

A libvirt call can hang for as long as the remote daemon does; asyncio cannot interrupt it. A
daemon thread lets the caller give up waiting (and the process exit) while the call is stuck;
callers keep at most one call in flight per hypervisor (a SerialCaller each), which bounds the
number of threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def run_in_daemon_thread(function: Callable[[], _T], name: str) -> asyncio.Future[_T]:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def deliver(result: _T | None, error: BaseException | None) -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result = function()
        except BaseException as error:  # handed to the awaiting coroutine
            _call_soon(loop, deliver, None, error)
        else:
            _call_soon(loop, deliver, result, None)

    threading.Thread(target=work, name=name, daemon=True).start()
    return future


class SerialCaller:
    """Blocking calls one at a time, each in a daemon thread and awaited at most a timeout.

    A call that outlives its timeout goes on in its thread, which nothing can interrupt: the caller
    is `stuck` until it returns, and must start no other call meanwhile. However long libvirt
    hangs, a caller then holds one thread at most.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        """The name of the calls' threads."""
        self._in_flight: asyncio.Future[Any] | None = None

    @property
    def stuck(self) -> bool:
        """The last call has not returned: it timed out, or its caller stopped waiting for it."""
        return self._in_flight is not None and not self._in_flight.done()

    async def call(self, function: Callable[[], _T], timeout: float) -> _T:
        """`function()`'s result, or its error; TimeoutError after `timeout` seconds, the call then
        left to finish in its thread."""
        if self.stuck:
            raise RuntimeError(f"{self.name}: a call is still stuck")
        call = run_in_daemon_thread(function, name=self.name)
        call.add_done_callback(_consume_outcome)
        self._in_flight = call
        async with asyncio.timeout(timeout):
            return await asyncio.shield(call)


def _consume_outcome(future: asyncio.Future[Any]) -> None:
    """A call that finished after its timeout has nobody awaiting it; retrieve its error."""
    if not future.cancelled():
        future.exception()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    # The loop may have closed while the call was stuck: then nobody waits for it any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
