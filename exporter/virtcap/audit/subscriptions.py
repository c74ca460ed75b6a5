"""The libvirt callbacks on a connection: its closing, and its domains' lifecycle events.

libvirt's event thread (see virtcap.audit.events) runs the callbacks. They only hand the news to
the asyncio loop with `hand_to_loop`: they never block and never call libvirt. Registering and
deregistering them are libvirt calls, made by the worker thread that opens or releases the
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import libvirt

from virtcap.audit.events import hand_to_loop
from virtcap.audit.libvirt_api import VirConnect, VirDomain


@dataclass(frozen=True, slots=True)
class Subscription:
    """The callbacks registered on one connection. Each holds a reference to the connection:
    until they are deregistered, the connection cannot be freed."""

    conn: VirConnect
    lifecycle_callback: int | None
    """The lifecycle callback's id, or None where the driver has no lifecycle events."""

    def cancel(self) -> None:
        """Deregister the callbacks; blocks. On a broken connection the daemon cannot be told,
        but libvirt drops its own reference to each callback (and so to the connection) before it
        tries."""
        if self.lifecycle_callback is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.domainEventDeregisterAny(self.lifecycle_callback)
        with contextlib.suppress(libvirt.libvirtError):
            self.conn.unregisterCloseCallback()


class ConnectionEvents:
    """Subscribes connections to their closing, told as `on_closed(reason)`, and to their domains'
    lifecycle events (a domain defined, started, undefined...), told as `on_lifecycle()`: both run
    on the asyncio loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_closed: Callable[[int], None],
        on_lifecycle: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._on_closed = on_closed
        self._on_lifecycle = on_lifecycle

    def subscribe(self, conn: VirConnect) -> Subscription:
        """Register the close and lifecycle callbacks on `conn`; blocks. Drivers without them
        simply go without."""
        with contextlib.suppress(libvirt.libvirtError):
            conn.registerCloseCallback(self._closed, None)
        try:
            callback: int | None = conn.domainEventRegisterAny(
                None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._lifecycle, None
            )
        except libvirt.libvirtError:
            callback = None
        return Subscription(conn, callback)

    # libvirt's event thread runs these two: they only hand the news to the asyncio loop.

    def _closed(self, _conn: VirConnect, reason: int, _opaque: object) -> None:
        hand_to_loop(self._loop, self._on_closed, reason)

    def _lifecycle(
        self, _conn: VirConnect, _domain: VirDomain, _event: int, _detail: int, _opaque: object
    ) -> None:
        hand_to_loop(self._loop, self._on_lifecycle)
