"""Shared fixtures: the private libvirtd (tests/support/libvirtd.py) and PostgreSQL cluster
(tests/support/postgres.py), for the tests that ask for them.

Session fixtures are per worker under pytest-xdist (`make unit`): each worker that needs a daemon
starts its own, in a folder of its own (mkdtemp) and on a free port, so that none collide."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import virtcap.audit.connection  # noqa: F401  (silences libvirt's own printing of errors)
from tests.support.libvirtd import SEARCH_PATH, Libvirtd, daemon_owner, prepare, running_daemon
from tests.support.postgres import Postgres, running_postgres


@pytest.fixture(scope="session")
def libvirtd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Libvirtd]:
    """The session's private libvirtd, its QEMU capabilities already probed."""
    missing = [
        tool
        for tool in ("libvirtd", "qemu-system-x86_64", "setpriv")
        if not shutil.which(tool, path=SEARCH_PATH)
    ]
    if missing:
        pytest.fail(f"a real libvirtd is needed (`make test` installs it); missing: {missing}")
    owner = daemon_owner()
    # In /tmp, not in pytest's folder: the daemon's user must reach it, and a UNIX socket path
    # is limited to 108 bytes.
    directory = Path(tempfile.mkdtemp(prefix="virtcap-libvirtd-", dir="/tmp"))
    log = tmp_path_factory.mktemp("libvirtd") / "libvirtd.log"
    try:
        with running_daemon(directory, log, owner, prepare(directory, owner)) as daemon:
            yield daemon
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _libvirtd_for_marked_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test marked `libvirtd` gets the private daemon, up and not paused, and leaves it so
    for the next one even when it failed halfway through killing or pausing it."""
    if request.node.get_closest_marker("libvirtd") is None:
        yield
        return
    daemon: Libvirtd = request.getfixturevalue("libvirtd")
    daemon.ensure_running()
    yield
    daemon.ensure_running()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The marker follows the fixture, so that `-m "not libvirtd"` leaves out every test that needs it.
    for item in items:
        if "libvirtd" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.libvirtd)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The session's private PostgreSQL cluster (tests/support/postgres.py)."""
    with running_postgres() as cluster:
        yield cluster


@pytest.fixture
def claims_url(postgres: Postgres) -> str:
    """A PostgreSQL URL of an empty database of the test's own, in the session's cluster."""
    return postgres.url(postgres.create_database())
