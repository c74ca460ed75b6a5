"""A private PostgreSQL cluster for the tests: initdb into a temporary folder, the server on a unix
socket in that folder and on a free port of 127.0.0.1, stopped at the end.

Under root it runs as `nobody` (initdb refuses root), through setpriv as tests/support/libvirtd.py runs
libvirtd, which also has the server killed should the test session die without its finalizers.
The server runs in the foreground (not through pg_ctl, whose server is no child that setpriv's
death signal reaches). Local (socket) connections are trusted, for the tests' own setup; TCP ones
need the password (scram-sha-256), as the exporters' do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.libvirtd import daemon_owner
from tests.support.serving import free_port

USER = "virtcap"
PASSWORD = "not-a-real-secret-3x"
START_SECONDS = 30.0


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian keeps them off PATH), or where PATH
    finds initdb."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    directory: Path
    bin: Path
    owner: tuple[int, int]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def sockets(self) -> Path:
        return self.directory / "run"

    @property
    def log(self) -> Path:
        return self.directory / "postgres.log"

    def url(self, database: str) -> str:
        """What an exporter is given: no password (PGPASSWORD or a password file brings it)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def _as_owner(self, *command: str) -> list[str]:
        prefix = ["setpriv", "--pdeathsig=KILL"]
        if os.geteuid() == 0:
            uid, gid = self.owner
            prefix += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        return [*prefix, "--", *command]

    def _environment(self) -> dict[str, str]:
        return {"PATH": f"{self.bin}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.directory)}

    def init(self) -> None:
        password_file = self.directory / "initdb-password"
        password_file.write_text(PASSWORD + "\n")
        self.sockets.mkdir()
        for path in (self.directory, password_file, self.sockets):
            os.chown(path, *self.owner)
        self.directory.chmod(0o755)
        subprocess.run(
            self._as_owner(
                str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, f"--pwfile={password_file}",
                "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-sync",
            ),
            check=True, cwd=self.directory, env=self._environment(), capture_output=True, timeout=120,
        )  # fmt: skip
        password_file.unlink()

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "PostgreSQL is already running"
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                self._as_owner(
                    str(self.bin / "postgres"), "-D", str(self.data), "-k", str(self.sockets),
                    "-p", str(self.port), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                    "-c", "max_connections=50",
                ),
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, cwd=self.directory,
                env=self._environment(),
            )  # fmt: skip
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"PostgreSQL did not start: {self.log_tail()}")
            try:
                with self.connect("postgres"):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"PostgreSQL did not come up: {self.log_tail()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """A fast shutdown (SIGINT): connections are ended, as when a database is restarted."""
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()  # should a test have failed while it was paused
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def processes(self) -> list[int]:
        """The server and its backends (each connection's own process)."""
        assert self.process is not None
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.process.pid:
                    children.append(int(stat.parent.name))
        return [self.process.pid, *children]

    def pause(self) -> None:
        """Every process of the server stopped: connections stay open and nothing answers, as
        when a database host hangs or its network drops packets."""
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def connect(self, database: str) -> psycopg.Connection[Any]:
        """A superuser's connection through the socket (trusted), in autocommit."""
        return psycopg.connect(
            host=str(self.sockets),
            port=self.port,
            user=USER,
            dbname=database,
            autocommit=True,
            connect_timeout=5,
        )

    def create_database(self) -> str:
        """A database of its own for one test: the order of the tests does not matter."""
        name = f"claims_{uuid.uuid4().hex[:12]}"
        with self.connect("postgres") as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else "(no log)"


def require_binaries() -> Path:
    found = binaries()
    missing = [tool for tool in ("setpriv",) if not shutil.which(tool)]
    if found is None or not (found / "postgres").exists() or missing:
        pytest.fail(
            "a real PostgreSQL is needed (scripts/install-system-deps.sh installs it); "
            f"found binaries in {found}, missing: {missing}"
        )
    return found


@contextlib.contextmanager
def running_postgres() -> Iterator[Postgres]:
    """A cluster of its own, in /tmp (its user must reach the folder; a socket path is short)."""
    directory = Path(tempfile.mkdtemp(prefix="virtcap-pg-", dir="/tmp"))
    cluster = Postgres(directory, require_binaries(), daemon_owner())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
