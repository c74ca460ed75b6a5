"""Running `virtcap serve` as a real process for the tests, and reading its /metrics."""

from __future__ import annotations

import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from virtcap.demo import DEMO_DIR

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

# A prefix for the daemons the tests start: setpriv executes the command in its own place (the pid
# stays the daemon's) and has it killed if the test session dies without its finalizers (SIGKILL,
# a CI timeout), so that nothing a killed run started outlives it.
DIES_WITH_THE_TESTS = ["setpriv", "--pdeathsig=KILL", "--"]
WORKER_SECONDS = 180.0
"""How long a test waits for what the failure tolerance's worker computes (the evacuations, the
packing answers): it runs at SCHED_IDLE, on CPU time nothing else wants, and the suite's other
tests can want both CPUs for a minute or more. A bound, not a duration: a quiet machine answers in
seconds."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path
    ssl_context: ssl.SSLContext | None = None

    def get(
        self, path: str, timeout: float = 5.0, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        return self.request("GET", path, timeout=timeout, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float = 5.0,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.base_url + path, data=body, headers=headers or {}, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def samples(self, path: str = "/metrics") -> Samples:
        status, body = self.get(path)
        assert status == 200, body
        return parse_samples(body.decode())

    def threads(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no thread count")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still there after 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def parse_samples(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    wanted = set(labels.items())
    return {key: v for (metric, key), v in samples.items() if metric == name and wanted <= key}


MOST_INTERVAL = 0.5
"""The longest `wait_for` sleeps between two looks. A look is mostly a scrape, parsed: one every
50 ms for the minute a worker at SCHED_IDLE may take costs the CPU that worker waits for."""


def wait_for(
    condition: object, timeout: float, interval: float | None = None, what: str = "condition"
) -> float:
    """Seconds it took for `condition()` to hold; fails after `timeout`. Looks every `interval`,
    or by default every 50 ms at first, then less and less often, up to every MOST_INTERVAL (a
    test that must not miss a passing state gives its interval)."""
    started = time.monotonic()
    sleep = 0.05 if interval is None else interval
    while True:
        if condition():  # type: ignore[operator]
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        time.sleep(sleep)
        if interval is None:
            sleep = min(sleep * 1.25, MOST_INTERVAL)


@contextmanager
def running_server(
    args: list[str],
    log_dir: Path,
    ssl_context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    open_files_soft_limit: int | None = None,
) -> Iterator[Server]:
    """`virtcap serve` on a free loopback port; `open_files_soft_limit` starts it with that soft
    RLIMIT_NOFILE (the hard limit unchanged), as a default systemd or login session would."""
    port = free_port()
    log = log_dir / f"virtcap-{port}.log"
    command = [
        *DIES_WITH_THE_TESTS,
        sys.executable, "-m", "virtcap", "serve", "--web.listen-address", f"127.0.0.1:{port}", *args,
    ]  # fmt: skip

    def limit_open_files() -> None:
        if open_files_soft_limit is not None:
            _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files_soft_limit, hard))

    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=os.environ.copy(),
            preexec_fn=limit_open_files,  # noqa: PLW1509  (only setrlimit: safe in the child)
        )
    scheme = "https" if ssl_context is not None else "http"
    server = Server(process, f"{scheme}://127.0.0.1:{port}", log, ssl_context)
    try:
        wait_for(lambda: _answers(server, "/-/ready", headers), 30, what="readiness")
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise AssertionError(
                    f"virtcap did not stop on SIGTERM: {server.log_text()[-2000:]}"
                ) from None


def _answers(server: Server, path: str, headers: dict[str, str] | None) -> bool:
    if server.process.poll() is not None:
        raise AssertionError(f"virtcap exited with {server.process.returncode}: {server.log_text()[-3000:]}")
    try:
        status, _ = server.get(path, timeout=1.0, headers=headers)
    except OSError:
        return False
    return status == 200


def write_fleet_config(
    directory: Path, demo_hosts: Iterable[str], others: Iterable[tuple[str, str]] = (), audit: str = ""
) -> Path:
    """virtcap.yaml in `directory`: demo hosts by name (test driver), other (name, uri) pairs, the
    `audit` section's keys as YAML flow text, and a claims database of the directory's own."""
    hypervisors = [(name, f"test://{DEMO_DIR / (name + '.xml')}") for name in demo_hosts] + list(others)
    entries = "\n".join(f'  - {{name: {name}, uri: "{uri}"}}' for name, uri in hypervisors)
    path = directory / "virtcap.yaml"
    path.write_text(
        f"audit: {{{audit}}}\nclaims: {{database: {directory / 'claims.sqlite'}}}\nhypervisors:\n{entries}\n"
    )
    return path
