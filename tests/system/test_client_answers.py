"""The one HTTP client of `virtcap claim`, `virtcap maintenance` and `virtcap place --url`, against
whatever answers at the URL it is given: a plain HTTP server standing in for a proxy's page or
another service."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


class _Answer(http.server.BaseHTTPRequestHandler):
    body = b""
    content_type = "text/html"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def answering(body: bytes) -> Iterator[str]:
    handler = type("Handler", (_Answer,), {"body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def virtcap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtcap", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "body", [b"<html><body>Sign in</body></html>", b"\xff\xfe not even text", b'{"truncated": ']
)
def test_a_success_that_is_not_json_is_one_line_and_exit_1(body: bytes) -> None:
    with answering(body) as url:
        done = virtcap("claim", "list", "--url", url)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "not JSON" in done.stderr
    assert done.stdout == ""


def test_an_empty_success_prints_nothing_and_exits_0() -> None:
    with answering(b"") as url:
        done = virtcap("claim", "list", "--url", url)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_json_success_is_printed_indented() -> None:
    with answering(b'{"claims": []}') as url:
        done = virtcap("claim", "list", "--url", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{\n  "claims": []\n}\n'
