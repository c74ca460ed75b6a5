"""One hypervisor's libvirt connection: opened read-only (open_read_only, a replayed capture for a
replay URI), and kept open from one audit to the next (HypervisorConnection).

The audit thread alone uses the connection: it opens it on demand and, once it is broken (a call
failed, or the daemon closed it), releases it and opens another. The asyncio loop never calls
libvirt: it only flags the connection broken, and on stop hands its release to a worker thread
that it waits for at most CLOSE_WAIT_SECONDS.

An opened connection gets a keepalive, so that a hung daemon ends our calls, and the callbacks of
virtcap.audit.subscriptions; a released one loses its callbacks again, since each holds a
reference to the connection, which would otherwise never be freed.

Each opened connection also gets a DomainCache of its own (virtcap.audit.domain_cache), where
incremental audits are configured: what was read on the previous connection is never trusted on
the next one, whose first audit is thus full.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import libvirt

from virtcap.audit.capture_format import CaptureFileError
from virtcap.audit.domain_cache import DomainCache
from virtcap.audit.libvirt_api import VirConnect
from virtcap.audit.replay import is_replay_uri, open_replay
from virtcap.audit.subscriptions import ConnectionEvents, Subscription
from virtcap.audit.threads import run_in_daemon_thread
from virtcap.config import AuditSettings

CLOSE_WAIT_SECONDS = 2.0
IN_PROCESS_DRIVER = "TEST"


def _silence_libvirt(_context: object, _error: object) -> None:
    """libvirt prints every error to stderr by default; we report them ourselves."""


libvirt.registerErrorHandler(_silence_libvirt, None)


class AuditError(Exception):
    """The hypervisor could not be audited at all (connection or node information failed)."""


def open_read_only(uri: str) -> VirConnect:
    """A read-only connection: where libvirt's objects enter, typed from here on. A replay URI
    (`replay:///path/host.json`, see virtcap.audit.replay) opens the capture it names instead."""
    if is_replay_uri(uri):
        try:
            return open_replay(uri)
        except (ValueError, CaptureFileError) as error:
            raise AuditError(f"cannot replay {error}") from None
    try:
        return cast(VirConnect, libvirt.openReadOnly(uri))
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot connect: {error.get_error_message()}") from None


def runs_in_process(uri: str) -> bool:
    """The hypervisor is simulated inside this process (libvirt's test driver, `test:///...`, or
    a replayed capture): its audit has no round trip to wait for, it is all CPU of this process."""
    parts = urlsplit(uri)
    return is_replay_uri(uri) or (parts.scheme == "test" and not parts.netloc)


def is_local_uri(uri: str) -> bool:
    """A QEMU URI without a host talks to this machine's own libvirtd."""
    parts = urlsplit(uri)
    return parts.scheme in ("qemu", "qemu+unix") and not parts.hostname


def redact_uri(uri: str) -> str:
    """The URI without a password, for logs, labels and error messages."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


class HypervisorConnection:
    """Opens, keeps, replaces and closes the connection to `uri`.

    `on_closed(reason)` is told on the asyncio loop when the daemon closes the connection (it is
    then already flagged broken), `on_lifecycle()` when a domain changes.
    """

    def __init__(
        self,
        name: str,
        uri: str,
        settings: AuditSettings,
        on_closed: Callable[[int], None],
        on_lifecycle: Callable[[], None],
    ) -> None:
        self.name = name
        self.uri = uri
        self.settings = settings
        self._on_closed = on_closed
        self._events = ConnectionEvents(asyncio.get_running_loop(), self._closed, on_lifecycle)
        # The connection is used by one audit thread at a time; the loop only flags it broken.
        self._conn: VirConnect | None = None
        self._subscription: Subscription | None = None
        """The callbacks registered on `_conn`, deregistered with it."""
        self._cache: DomainCache | None = None
        """`_conn`'s, where incremental audits are configured and its events were registered."""
        self._broken = False

    @property
    def current(self) -> VirConnect | None:
        """The open connection, if any."""
        return self._conn

    @property
    def cache(self) -> DomainCache | None:
        """The open connection's domain cache, for the audit thread; None: every audit is full."""
        return self._cache

    def mark_broken(self) -> None:
        """A call on the connection failed: the next audit opens another."""
        self._broken = True

    # The audit thread runs these two.

    def get(self) -> tuple[VirConnect, bool]:
        """The connection to audit with, and whether it was opened just now. A broken one is
        released and replaced; AuditError when none can be opened."""
        if self._conn is not None and self._broken:
            old, self._conn, self._cache = self._conn, None, None
            subscription, self._subscription = self._subscription, None
            # Its callbacks hold a reference to it: deregistered, the old connection can be freed.
            threading.Thread(target=_release, args=(old, subscription), daemon=True).start()
        if self._conn is not None:
            return self._conn, False
        conn = open_read_only(self.uri)
        cache = None
        if conn.getType() != IN_PROCESS_DRIVER:  # nothing outside can change an in-process one
            self._keep_alive(conn)
            if self.settings.incremental:
                cache = DomainCache(self.settings.resync_every)
            self._subscription = self._events.subscribe(conn, cache.changes if cache else None)
            if cache is not None:
                cache.domain_events = self._subscription.domain_events
                cache.pool_events = self._subscription.pool_events
        self._conn, self._cache, self._broken = conn, cache, False
        return conn, True

    def discard(self) -> None:
        """Close the connection now instead of keeping it for the next audit."""
        conn, self._conn, self._cache = self._conn, None, None
        if conn is not None:
            _close_quietly(conn)

    def _keep_alive(self, conn: VirConnect) -> None:
        """So that a hung daemon ends our calls. Drivers without keepalive (the test driver) simply
        go without."""
        with contextlib.suppress(libvirt.libvirtError):
            # libvirt counts whole seconds and reads 0 as "no keepalive": never round down to it.
            interval = max(1, math.ceil(self.settings.keepalive_interval))
            conn.setKeepAlive(interval, self.settings.keepalive_count)

    # The asyncio loop runs these two.

    async def close(self, *, in_use: bool) -> None:
        """Release the connection, unless a call that timed out is still `in_use` of it."""
        conn, self._conn, self._cache = self._conn, None, None
        subscription, self._subscription = self._subscription, None
        if conn is not None and not in_use:
            # close() talks to the daemon: never let a hung one hold up the shutdown.
            closing = run_in_daemon_thread(lambda: _release(conn, subscription), name=f"close-{self.name}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_SECONDS):
                    await closing

    def _closed(self, reason: int) -> None:
        self._broken = True
        self._on_closed(reason)


def _close_quietly(conn: VirConnect) -> None:
    with contextlib.suppress(libvirt.libvirtError):
        conn.close()


def _release(conn: VirConnect, subscription: Subscription | None) -> None:
    """Deregister a connection's callbacks and close it; blocks."""
    if subscription is not None:
        subscription.cancel()
    _close_quietly(conn)
