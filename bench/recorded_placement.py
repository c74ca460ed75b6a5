"""Placement's answers, recorded once and served again at a fraction of the CPU: so that the
benchmark measures what reading Placement costs the exporter, not what computing the answers costs
a Placement sharing its two CPUs (a cloud runs Placement on machines of its own).

`record(base_url, paths)` asks a real Placement each path once (as the reader asks it: its
microversion, noauth2's token) and keeps the answers; `python bench/recorded_placement.py FILE
PORT` serves them (404 for any other path) until killed.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MICROVERSION = "placement 1.39"
TOKEN = "admin"


def record(base_url: str, paths: list[str]) -> dict[str, str]:
    """Each path's JSON answer from a real Placement, as text."""
    answers = {}
    for path in paths:
        request = urllib.request.Request(
            base_url + path,
            headers={
                "OpenStack-API-Version": MICROVERSION,
                "X-Auth-Token": TOKEN,
                "Accept": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answers[path] = response.read().decode()
    return answers


def reader_paths(base_url: str, described: list[str]) -> list[str]:
    """What a round of the reader asks: the provider list, each provider's inventories and
    allocations, and the consumers it describes."""
    listed: Any = json.loads(record(base_url, ["/resource_providers"])["/resource_providers"])
    paths = ["/resource_providers"]
    for provider in listed["resource_providers"]:
        uuid = provider["uuid"]
        paths += [f"/resource_providers/{uuid}/inventories", f"/resource_providers/{uuid}/allocations"]
    return paths + [f"/allocations/{consumer}" for consumer in described]


def serve(answers: dict[str, bytes], port: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body are two writes: with Nagle's algorithm the body waited for the
        # client's delayed acknowledgement of the headers, 40 ms a request (a round of 2,000
        # requests, four at a time, then lasted the whole 30 s interval)
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            body = answers.get(self.path)
            self.send_response(HTTPStatus.OK if body is not None else HTTPStatus.NOT_FOUND)
            body = body if body is not None else b'{"errors": [{"status": 404, "title": "Not Found"}]}'
            self.send_header("Content-Type", "application/json")
            self.send_header("OpenStack-API-Version", MICROVERSION)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    recorded = json.loads(Path(sys.argv[1]).read_text())
    serve({path: text.encode() for path, text in recorded.items()}, int(sys.argv[2]))
