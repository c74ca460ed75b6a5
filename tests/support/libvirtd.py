"""A private libvirtd with the QEMU driver, for the test session (conftest.py starts it once, on
the first test that asks; once per worker under pytest-xdist, each in a temporary folder of its own).

The daemon runs in libvirt's session (unprivileged) mode with every directory it uses (socket,
configuration, state, cache, logs) in a temporary folder of its own: a system libvirtd, if the
machine has one, is never reached, paused or killed, and what it holds cannot leak into the
tests. Under root it runs as `nobody`, because libvirtd started by root is always the system
daemon, whose paths (/run/libvirt, /var/lib/libvirt, /run/libvirtd.pid) cannot be moved.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt
import pytest

UNPRIVILEGED_USER = "nobody"
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A fresh daemon probes QEMU for its capabilities once (about 5 s, much longer on a loaded machine)
# and caches them; the tests' own timeouts are a few seconds and must never pay for it.
WARM_UP_SECONDS = 300
START_SECONDS = 60


def answers(uri: str) -> bool:
    try:
        libvirt.openReadOnly(uri).close()
    except libvirt.libvirtError:
        return False
    return True


def _bounded(call: Callable[[], object], seconds: float, what: str) -> None:
    """libvirt calls have no timeout of their own: a daemon that never answers fails the session
    instead of hanging it."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # handed to the test thread
            failure.append(error)

    worker = threading.Thread(target=run, name=what, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{what} took longer than {seconds} s")
    if failure:
        raise failure[0]


@dataclass
class Libvirtd:
    """A private libvirtd in session mode, and the means to misbehave it."""

    directory: Path
    log: Path
    owner: tuple[int, int]
    process: subprocess.Popen[bytes] | None = None
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.directory / "run" / "libvirt-sock"

    @property
    def uri(self) -> str:
        # An explicit socket: the client never spawns a daemon of its own (it would for a bare
        # qemu:///session), and virtcap still counts the URI as local (no host).
        return f"qemu+unix:///session?socket={self.socket}"

    @property
    def pid(self) -> int:
        assert self.process is not None and self.process.poll() is None, "libvirtd is not running"
        return self.process.pid

    def owned_directory(self, prefix: str) -> Path:
        """A folder the daemon (and the QEMU it starts, as the same user) can write to."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.directory / "scratch"))
        os.chown(path, *self.owner)
        path.chmod(0o755)
        return path

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "libvirtd is already running"
        binary = shutil.which("libvirtd", path=SEARCH_PATH)
        assert binary is not None
        # setpriv executes libvirtd in its own place (the pid of the Popen is the daemon's), as the
        # unprivileged user under root, and has it killed, paused or not, if the test session dies
        # without its finalizers (SIGKILL, a CI timeout).
        command = ["setpriv", "--pdeathsig=KILL"]
        if os.geteuid() == 0:
            uid, gid = self.owner
            command += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        command += ["--", binary, "--config", str(self.directory / "config" / "libvirt" / "libvirtd.conf")]
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.environment,
                cwd=self.directory,
            )
        deadline = time.monotonic() + START_SECONDS
        while not answers(self.uri):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                pytest.fail(f"the private libvirtd did not come up: {self.log_tail()}")
            time.sleep(0.1)

    def ensure_running(self) -> None:
        """Running and not stopped, whatever a failed test left behind."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        else:
            self.resume()

    def warm_up(self) -> None:
        def probe() -> None:
            conn: Any = libvirt.open(self.uri)
            try:
                conn.getCapabilities()
                conn.getDomainCapabilities(None, "x86_64", None, "qemu", 0)
            finally:
                conn.close()

        _bounded(probe, WARM_UP_SECONDS, "the QEMU capability probe of the private libvirtd")

    def destroy_guests(self) -> None:
        """Guests outlive the daemon (QEMU is not its child): none may outlive the session."""

        def destroy_all() -> None:
            conn: Any = libvirt.open(self.uri)
            try:
                for domain in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
                    with contextlib.suppress(libvirt.libvirtError):
                        domain.destroy()
            finally:
                conn.close()

        _bounded(destroy_all, 60, "stopping the guests left in the private libvirtd")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def daemon_owner() -> tuple[int, int]:
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    user = pwd.getpwnam(UNPRIVILEGED_USER)
    return user.pw_uid, user.pw_gid


@contextlib.contextmanager
def running_daemon(
    directory: Path, log: Path, owner: tuple[int, int], environment: dict[str, str]
) -> Iterator[Libvirtd]:
    """A daemon of the `prepare`d folder, started and its QEMU capabilities probed; on the way out,
    whatever happened, its guests destroyed and the daemon stopped. The folder stays the caller's."""
    daemon = Libvirtd(directory, log, owner)
    daemon.environment = environment
    try:
        daemon.start()
        daemon.warm_up()
        yield daemon
    finally:
        try:
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.resume()
                daemon.destroy_guests()
        finally:
            daemon.stop()


def prepare(directory: Path, owner: tuple[int, int], qemu_conf: str = "") -> dict[str, str]:
    """The daemon's folders and configuration; its environment.

    `qemu_conf`: lines added to the daemon's qemu.conf (`hugetlbfs_mount = "..."`), for a daemon
    of a test's own that needs more than the session's."""
    config = directory / "config" / "libvirt"
    for path in (config, directory / "cache", directory / "run", directory / "home", directory / "scratch"):
        path.mkdir(parents=True)
    (config / "libvirtd.conf").write_text(
        f'unix_sock_dir = "{directory / "run"}"\nlog_outputs = "3:stderr"\n'
    )
    # QEMU's output into files: the default hands it to a virtlogd that the session daemon would
    # spawn on its own, outside the tests' control.
    extra = qemu_conf if not qemu_conf or qemu_conf.endswith("\n") else qemu_conf + "\n"
    (config / "qemu.conf").write_text('stdio_handler = "file"\n' + extra)
    for path in [directory, *directory.rglob("*")]:
        os.chown(path, *owner)
    directory.chmod(0o755)
    return {
        "PATH": SEARCH_PATH,
        "LANG": "C.UTF-8",
        "HOME": str(directory / "home"),
        "XDG_CONFIG_HOME": str(directory / "config"),
        "XDG_CACHE_HOME": str(directory / "cache"),
        "XDG_RUNTIME_DIR": str(directory / "run"),
        "XDG_DATA_HOME": str(directory / "home"),
    }
