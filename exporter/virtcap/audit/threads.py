"""Running blocking libvirt calls off the event loop in daemon threads.

A libvirt call can hang for as long as the remote daemon does; asyncio cannot interrupt it. A
daemon thread lets the caller give up waiting (and the process exit) while the call is stuck;
callers keep at most one call in flight per hypervisor, which bounds the number of threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

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


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
    # The loop may have closed while the call was stuck: then nobody waits for it any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
