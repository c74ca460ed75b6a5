"""Shared fixtures: a real libvirtd with the QEMU driver, started for the session if none runs."""

from __future__ import annotations

import grp
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import libvirt
import pytest

import virtcap.audit  # noqa: F401  (silences libvirt's own printing of errors)

SYSTEM_URI = "qemu:///system"


def _answers(uri: str) -> bool:
    try:
        libvirt.openReadOnly(uri).close()
    except libvirt.libvirtError:
        return False
    return True


def _give_dev_kvm_to_its_group() -> None:
    """Set /dev/kvm to root:kvm 0660, as Debian's udev rules do on a normal host.

    Some sandboxes leave it root-only: then root (libvirtd) can open it but the QEMU user cannot,
    libvirt sees its cached QEMU capabilities as stale on every call, and each domain definition
    re-probes QEMU for half a minute. The guests run under TCG (`type='qemu'`) either way.
    """
    device = Path("/dev/kvm")
    if os.geteuid() != 0 or not device.exists():
        return
    status = device.stat()
    try:
        kvm_group = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return
    if status.st_mode & 0o777 != 0o660 or status.st_gid != kvm_group:
        shutil.chown(device, group="kvm")
        device.chmod(0o660)


PID_FILE = Path("/run/libvirtd.pid")


@dataclass
class Libvirtd:
    """The system libvirtd the tests talk to, and the means to misbehave it."""

    uri: str
    logs: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return int(PID_FILE.read_text().strip())

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        for process in self.started:
            if process.pid == pid:
                process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def start(self, daemon: str = "libvirtd") -> None:
        log = (self.logs / f"{daemon}.log").open("ab")
        self.started.append(subprocess.Popen([daemon], stdout=log, stderr=subprocess.STDOUT))
        if daemon == "libvirtd":
            deadline = time.monotonic() + 30
            while not _answers(self.uri):
                if time.monotonic() > deadline or self.started[-1].poll() is not None:
                    pytest.fail(
                        f"libvirtd did not come up: {(self.logs / 'libvirtd.log').read_text()[-2000:]}"
                    )
                time.sleep(0.2)

    def stop_started(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Libvirtd]:
    """A running system libvirtd: the one already there, or one this session starts (with its
    virtlogd) and stops at the end."""
    _give_dev_kvm_to_its_group()
    daemon = Libvirtd(SYSTEM_URI, tmp_path_factory.mktemp("libvirtd-logs"))
    if not _answers(SYSTEM_URI):
        missing = [
            tool for tool in ("libvirtd", "virtlogd", "qemu-system-x86_64") if shutil.which(tool) is None
        ]
        if missing or os.geteuid() != 0:
            pytest.fail(
                f"a real libvirtd is needed (run as root, `make test` installs it); missing: {missing}"
            )
        daemon.start("virtlogd")
        daemon.start("libvirtd")
    try:
        yield daemon
    finally:
        daemon.stop_started()
