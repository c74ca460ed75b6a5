"""libvirt's event loop: its own default implementation, run by one dedicated thread.

libvirt needs an event loop for keepalive, close callbacks and domain lifecycle events. Running
it on the asyncio loop (libvirtaio) deadlocks: an audit thread calls into libvirt, which takes the
connection's lock and then asks the event loop to update a watch, waiting for the asyncio thread;
meanwhile the asyncio thread dispatches an event of that connection (a reset peer, a keepalive)
and waits for the same lock. Nothing then runs, not even SIGTERM's handler.

Here no such cycle can form, by construction:
- the event thread runs only libvirt's own loop (virEventRunDefaultImpl), whose watch and timer
  functions lock a mutex private to the loop and wake its poll() through a pipe, so a caller in
  any thread never waits for the event thread to run;
- the callbacks libvirt invokes on the event thread only hand work to asyncio with
  call_soon_threadsafe, which never blocks;
- the asyncio loop never calls libvirt: every libvirt call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

import libvirt

log = logging.getLogger(__name__)

_ERROR_PAUSE_SECONDS = 0.1
_started = threading.Lock()
_thread: threading.Thread | None = None


def start_libvirt_event_thread() -> threading.Thread:
    """Register libvirt's default event loop and run it in a daemon thread; call before the first
    connection is opened. libvirt keeps one event implementation for the life of the process, so
    later calls return the thread already running."""
    global _thread  # noqa: PLW0603  (one event loop per process: libvirt's own rule)
    with _started:
        if _thread is None:
            libvirt.virEventRegisterDefaultImpl()
            _thread = threading.Thread(target=_run_forever, name="libvirt-events", daemon=True)
            _thread.start()
        return _thread


def _run_forever() -> None:
    while True:
        try:
            libvirt.virEventRunDefaultImpl()
        except libvirt.libvirtError as error:  # one failed iteration; the loop itself goes on
            log.warning("libvirt event loop iteration failed", extra={"error": error.get_error_message()})
            time.sleep(_ERROR_PAUSE_SECONDS)


def hand_to_loop(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    """Run `callback(*args)` on the asyncio loop, from a libvirt callback on the event thread.

    Never blocks. A loop that has closed (shutdown) has nobody left to tell.
    """
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
