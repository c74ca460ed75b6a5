"""Hostile libvirt peers on loopback: TCP listeners that misbehave in the ways real ones do.

- reset: accepts and closes at once with SO_LINGER 0, so the client gets a TCP reset (a libvirtd
  over max_clients, a firewall sending resets, another service on the port);
- garbage: answers whatever arrives with bytes that are no libvirt RPC;
- stall: answers with the first bytes of an RPC reply (a length header promising more), then
  nothing, ever;
- hang: accepts and says nothing, ever.

Each peer serves its connections from one thread; every connection it holds is closed when the
context ends.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

KINDS = ("reset", "garbage", "stall", "hang")
_LINGER_ZERO = struct.pack("ii", 1, 0)


class HostilePeer:
    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(kind)
        self.kind = kind
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._stalled: set[socket.socket] = set()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name=f"peer-{kind}", daemon=True)
        self._thread.start()

    @property
    def uri(self) -> str:
        return f"qemu+tcp://127.0.0.1:{self.port}/system"

    def close(self) -> None:
        os.write(self._stop_write, b"x")
        self._thread.join(timeout=5)
        for connection in self._held:
            connection.close()
        self.listener.close()
        os.close(self._stop_read)
        os.close(self._stop_write)

    def _serve(self) -> None:
        while True:
            sockets = [self.listener, *self._held]
            readable, _, _ = select.select([self._stop_read, *(s.fileno() for s in sockets)], [], [], 1.0)
            if self._stop_read in readable:
                return
            for ready in [s for s in sockets if s.fileno() in readable]:
                if ready is self.listener:
                    self._accept()
                else:
                    self._answer(ready)

    def _accept(self) -> None:
        try:
            connection, _ = self.listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        if self.kind == "reset":
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
            connection.close()
            return
        connection.setblocking(False)
        self._held.append(connection)

    def _answer(self, connection: socket.socket) -> None:
        try:
            data = connection.recv(65536)
        except (BlockingIOError, ConnectionError):
            data = b"?"
        if not data:
            self._held.remove(connection)
            self._stalled.discard(connection)
            connection.close()
            return
        try:
            if self.kind == "garbage":
                connection.send(os.urandom(48) + b"\xff" * 16)
            elif self.kind == "stall" and connection not in self._stalled:
                # A reply length of 1 MiB, then silence: the client waits for the rest.
                connection.send(struct.pack(">I", 1 << 20) + b"\x20\x00\x80\x86")
                self._stalled.add(connection)
        except (BlockingIOError, ConnectionError):
            pass


@contextmanager
def hostile_peers(counts: dict[str, int]) -> Iterator[list[HostilePeer]]:
    with ExitStack() as stack:
        peers = []
        for kind, count in counts.items():
            for _ in range(count):
                peer = HostilePeer(kind)
                stack.callback(peer.close)
                peers.append(peer)
        yield peers
