"""libvirt's event loop on asyncio: libvirtaio, made safe for calls from worker threads.

libvirt needs an event loop for keepalive, close callbacks and domain lifecycle events.
libvirtaio runs it on the asyncio loop, but its handle and timer functions touch the loop
directly (`add_reader`, `ensure_future`), which is only safe from the loop's own thread, while
libvirt calls them from whichever thread opens a connection or sends a request: our audit
threads. The shim below runs each of them on the loop and waits for it when called from
another thread, so libvirt still gets its watch and timer numbers synchronously.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import libvirt
import libvirtaio

_T = TypeVar("_T")

# How often a waiting thread checks that the loop still runs.
_LOOP_POLL_SECONDS = 1.0


_registered: dict[str, Any] = {}


def register_libvirt_event_loop(loop: asyncio.AbstractEventLoop) -> libvirtaio.virEventAsyncIOImpl:
    """Register before the first connection is opened. libvirt takes one event loop per
    process, for the life of the process: a second call must pass the same asyncio loop."""
    if "impl" in _registered:
        if _registered["loop"] is not loop:
            raise RuntimeError("libvirt's event loop is already registered on another asyncio loop")
        impl: libvirtaio.virEventAsyncIOImpl = _registered["impl"]
        return impl
    impl = libvirtaio.virEventAsyncIOImpl(loop=loop)
    loop_thread = threading.get_ident()

    def on_loop(function: Callable[..., _T]) -> Callable[..., _T]:
        def call(*args: Any) -> _T:
            if threading.get_ident() == loop_thread:
                return function(*args)
            done: concurrent.futures.Future[_T] = concurrent.futures.Future()

            def run() -> None:
                if not done.set_running_or_notify_cancel():
                    return  # the calling thread gave up waiting and ran it itself
                try:
                    done.set_result(function(*args))
                except BaseException as error:  # handed back to libvirt's thread
                    done.set_exception(error)

            try:
                loop.call_soon_threadsafe(run)
            except RuntimeError:  # the loop is closed: nothing else can run it
                return function(*args)
            while True:
                try:
                    return done.result(timeout=_LOOP_POLL_SECONDS)
                except concurrent.futures.TimeoutError:
                    # A stopped loop (shutdown) will never run it: run it here instead.
                    if not loop.is_running() and done.cancel():
                        return function(*args)

        return call

    libvirt.virEventRegisterImpl(
        on_loop(impl._add_handle),
        on_loop(impl._update_handle),
        on_loop(impl._remove_handle),
        on_loop(impl._add_timeout),
        on_loop(impl._update_timeout),
        on_loop(impl._remove_timeout),
    )
    _registered.update(impl=impl, loop=loop)
    return impl
