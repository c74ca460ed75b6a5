"""A real OpenStack Placement over HTTP, for the tests of the Placement reader (issue 29).

Placement 16 from the upstream virtualenv (scripts/upstream-venv.sh) is served by gunicorn (its
wheel installs no `placement-api` script; gunicorn is installed there beside it) as a child process
on 127.0.0.1, on a port the kernel picks, with its database in a SQLite file of the test's folder,
its schema migrated as it starts. With `auth_strategy = noauth2` a request carries
`X-Auth-Token: admin` (a token is required: without one Placement answers 401, so a client's
"no authentication" must still send this static token); with a Keystone (tests/support/
keystone_server.py) its keystonemiddleware validates Keystone's tokens.

`PlacementServer` can be made to misbehave: killed, hung (SIGSTOP) and resumed; `MisbehavingProxy`
stands in front of it on a port of its own and answers 500 or HTML instead, when told to.
"""

from __future__ import annotations

import contextlib
import enum
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.serving import DIES_WITH_THE_TESTS
from tests.support.tls import client_context

if TYPE_CHECKING:
    from tests.support.keystone_server import Keystone

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_VENV = Path(os.environ.get("VIRTCAP_UPSTREAM_VENV", ROOT / ".venv-upstream"))
STAMP = ".virtcap-upstream-complete"
"""Written by scripts/upstream-venv.sh once everything is installed."""

MICROVERSION = "1.39"
"""The newest microversion of Placement 16; 1.38 made `consumer_type` part of an allocation."""
NOAUTH_TOKEN = "admin"
"""noauth2 takes the token for a user (and project) name; `admin` is given the admin role."""
START_SECONDS = 60.0
"""Gunicorn, Placement's imports and its schema migrations on SQLite take about 2.5 s unloaded."""


class PlacementHarnessError(AssertionError):
    """The upstream virtualenv is missing, or Placement did not start or refused a request."""


def upstream_gunicorn() -> Path:
    gunicorn = UPSTREAM_VENV / "bin" / "gunicorn"
    if not (UPSTREAM_VENV / STAMP).is_file() or not gunicorn.exists():
        raise PlacementHarnessError(
            f"the upstream virtualenv {UPSTREAM_VENV} is missing, incomplete or without gunicorn: "
            "`make upstream-venv` (or scripts/upstream-venv.sh) installs it from PyPI"
        )
    return gunicorn


@dataclass(frozen=True)
class ServerTls:
    """The certificate `name` a server presents, from a folder of tests/support/tls.py's making."""

    pki: Path
    name: str

    @property
    def certificate(self) -> Path:
        return self.pki / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        return self.pki / f"{self.name}.key"

    @property
    def ca(self) -> Path:
        return self.pki / "ca.crt"

    def client_context(self) -> ssl.SSLContext:
        return client_context(self.pki)


@dataclass
class GunicornProcess:
    """A gunicorn master and its worker, in a process group of their own."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def kill(self) -> None:
        """Stopped: every process of the group killed at once; returns once connections are
        refused (the worker's listening socket outlives the master for a moment)."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.base_url:
            _wait_until_refused(self.base_url)

    def hang(self) -> None:
        """Placement hung: the group stopped; the kernel still accepts connections, none is
        answered until `resume`."""
        _signal_group(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        _signal_group(self.process.pid, signal.SIGCONT)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_until_refused(base_url: str) -> None:
    address = urllib.parse.urlsplit(base_url)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            socket.create_connection((address.hostname, address.port), timeout=1).close()
        except ConnectionRefusedError:
            return
        except OSError:
            pass
        time.sleep(0.05)
    raise PlacementHarnessError(f"{base_url} still accepts connections after its processes were killed")


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


PlacementServer = GunicornProcess
"""What `running_placement` yields: its base URL, and kill, hang and resume."""


def gunicorn_settings(
    directory: Path, wsgi_app: str, environment: dict[str, str], port: int = 0, tls: ServerTls | None = None
) -> Path:
    """gunicorn.conf.py, read from the working directory: the command line stays bare, since
    Keystone's application parses the process's arguments as its own. Port 0: the kernel picks
    a free one, read back from gunicorn's log (no race). With `tls`, HTTPS only."""
    settings = directory / "gunicorn.conf.py"
    settings.write_text(
        f"wsgi_app = {wsgi_app!r}\n"
        f"bind = ['127.0.0.1:{port}']\n"
        # Threads, so that a reader's concurrent requests are served side by side.
        "workers = 1\nthreads = 4\n"
        # A worker hung by the tests is not replaced while it is stopped for less than this.
        "timeout = 300\n"
        # Otherwise every gunicorn of the machine shares one socket in the home folder.
        "control_socket_disable = True\n"
        f"raw_env = {[f'{key}={value}' for key, value in environment.items()]!r}\n"
        + (f"certfile = {str(tls.certificate)!r}\nkeyfile = {str(tls.key)!r}\n" if tls is not None else "")
    )
    return settings


@contextmanager
def running_gunicorn(
    gunicorn: Path,
    directory: Path,
    wsgi_app: str,
    environment: dict[str, str],
    ready_path: str,
    port: int = 0,
    tls: ServerTls | None = None,
) -> Iterator[GunicornProcess]:
    """Serves `wsgi_app` until the context exits, then kills it; waits until `ready_path`
    answers 200 (at most START_SECONDS), failing with the log's tail if it does not."""
    gunicorn_settings(directory, wsgi_app, environment, port, tls)
    log = directory / "gunicorn.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*DIES_WITH_THE_TESTS, str(gunicorn)],
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **environment, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""},
            start_new_session=True,
        )
    server = GunicornProcess(process, "", log)
    try:
        context = tls.client_context() if tls is not None else None
        server.base_url = _wait_until_answering(server, ready_path, context)
        yield server
    finally:
        server.resume()  # a stopped group would not die of SIGKILL before SIGCONT otherwise
        server.kill()


def _wait_until_answering(server: GunicornProcess, ready_path: str, context: ssl.SSLContext | None) -> str:
    deadline = time.monotonic() + START_SECONDS
    base_url = ""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise PlacementHarnessError(f"gunicorn exited ({server.process.returncode}): {_tail(server)}")
        if not base_url:
            found = re.search(r"Listening at: (https?://127\.0\.0\.1:\d+)", server.log_text())
            base_url = found.group(1) if found else ""
        elif _answers(base_url + ready_path, context):
            return base_url
        time.sleep(0.05)
    raise PlacementHarnessError(f"gunicorn did not answer within {START_SECONDS:g} s: {_tail(server)}")


def _answers(url: str, context: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def _tail(server: GunicornProcess) -> str:
    return server.log_text()[-4000:]


def placement_conf(directory: Path, keystone: Keystone | None) -> str:
    lines = [
        "[DEFAULT]",
        "debug = false",
        "[placement_database]",
        f"connection = sqlite:///{directory / 'placement.sqlite'}",
        "sync_on_startup = true",
        "[api]",
        f"auth_strategy = {'noauth2' if keystone is None else 'keystone'}",
    ]
    if keystone is not None:
        lines += ["[keystone_authtoken]", *keystone.authtoken_options()]
    return "\n".join(lines) + "\n"


@contextmanager
def running_placement(
    directory: Path, keystone: Keystone | None = None, port: int = 0, tls: ServerTls | None = None
) -> Iterator[PlacementServer]:
    """A real Placement on the database in `directory` (empty the first time), with noauth2
    unless given a Keystone, over HTTPS with `tls`; killed when the context exits. Given the
    `port` a Placement killed before served on, the same directory brings it back at the same
    address with its data."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "placement.conf").write_text(placement_conf(directory, keystone))
    with running_gunicorn(
        upstream_gunicorn(),
        directory,
        "placement.wsgi.api:application",
        {"OS_PLACEMENT_CONFIG_DIR": str(directory)},
        ready_path="/",  # the version document, answered without a token
        port=port,
        tls=tls,
    ) as server:
        yield server


class Misbehaviour(enum.Enum):
    FORWARD = "forward"
    """Every request passed to Placement and its answer returned as it is."""
    SERVER_ERROR = "server_error"
    """500 with an HTML page, as a proxy in front of a broken Placement answers."""
    HTML = "html"
    """200 with an HTML page (a login portal, a misrouted endpoint): not Placement's JSON."""


ERROR_PAGE = b"<html><body><h1>500 Internal Server Error</h1></body></html>\n"
PORTAL_PAGE = b"<!DOCTYPE html><html><body><form>Sign in</form></body></html>\n"


class MisbehavingProxy:
    """A proxy in this process, on a port of its own, in front of a Placement: it forwards until
    told to misbehave, and can be switched back (to see a reader recover)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.misbehaviour = Misbehaviour.FORWARD
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, answer = proxy.answer(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _handle  # noqa: N815  (http.server's names)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if self.misbehaviour is Misbehaviour.SERVER_ERROR:
            return 500, [("Content-Type", "text/html")], ERROR_PAGE
        if self.misbehaviour is Misbehaviour.HTML:
            return 200, [("Content-Type", "text/html; charset=utf-8")], PORTAL_PAGE
        return self.forward(method, path, headers, body)

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """The request passed to Placement, its answer as it is (502 if Placement is gone)."""
        kept = {name: value for name, value in headers.items() if name.lower() not in HOP_BY_HOP}
        request = urllib.request.Request(self.upstream + path, data=body or None, headers=kept, method=method)
        try:
            with _DIRECT.open(request, timeout=30) as response:
                return response.status, _end_to_end(response.headers.items()), response.read()
        except urllib.error.HTTPError as error:
            return error.code, _end_to_end(error.headers.items()), error.read()
        except OSError:
            return 502, [("Content-Type", "text/plain")], b"Placement unreachable\n"

    def __enter__(self) -> MisbehavingProxy:
        threading.Thread(target=self._server.serve_forever, name="placement-proxy", daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""To the Placement behind the proxy straight, whatever proxy a test sets in the environment."""
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def _end_to_end(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() not in HOP_BY_HOP]


def json_request(
    base_url: str,
    method: str,
    path: str,
    body: object = None,
    token: str = NOAUTH_TOKEN,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """One request to Placement at MICROVERSION; its status and decoded JSON (None if empty)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {
        "X-Auth-Token": token,
        "OpenStack-API-Version": f"placement {MICROVERSION}",
        "Accept": "application/json",
    }
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(base_url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, _decoded(raw)


def _decoded(raw: bytes) -> Any:
    """JSON decoded; None for an empty body, the text itself for anything else (an HTML page)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
