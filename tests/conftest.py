"""Shared fixtures: a real libvirtd with the QEMU driver, started for the session if none runs."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a running system libvirtd: the one already there, or one this session starts
    (with its virtlogd) and stops at the end."""
    _give_dev_kvm_to_its_group()
    if _answers(SYSTEM_URI):
        yield SYSTEM_URI
        return
    missing = [tool for tool in ("libvirtd", "virtlogd", "qemu-system-x86_64") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(f"a real libvirtd is needed (run as root, `make test` installs it); missing: {missing}")
    logs = tmp_path_factory.mktemp("libvirtd-logs")
    started: list[subprocess.Popen[bytes]] = []
    for daemon in ("virtlogd", "libvirtd"):
        log = (logs / f"{daemon}.log").open("wb")
        started.append(subprocess.Popen([daemon], stdout=log, stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 30
        while not _answers(SYSTEM_URI):
            if time.monotonic() > deadline or any(p.poll() is not None for p in started):
                pytest.fail(f"libvirtd did not come up: {(logs / 'libvirtd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield SYSTEM_URI
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
