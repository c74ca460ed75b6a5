"""Placement's answers, recorded once and served again at a fraction of the CPU: so that the
benchmark measures what reading Placement costs the exporter, not what computing the answers costs
a Placement sharing its two CPUs (a cloud runs Placement on machines of its own).

`record(base_url, paths)` asks a real Placement each path once (as the reader asks it: its
microversion, noauth2's token) and keeps the answers; `python bench/recorded_placement.py FILE
PORT` serves them (404 for any other path) until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from http import HTTPStatus
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
    """Each answer sent as a whole HTTP/1.1 response built once (keep-alive, 404 for any other
    path): a request costs the server tens of microseconds, where http.server's handler took
    hundreds, which on the benchmark's two CPUs competed with the exporter it measures."""
    responses = {path.encode(): _response(HTTPStatus.OK, body) for path, body in answers.items()}
    missing = _response(HTTPStatus.NOT_FOUND, b'{"errors": [{"status": 404, "title": "Not Found"}]}')

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                writer.write(responses.get(path, missing))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(client, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _response(status: HTTPStatus, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"OpenStack-API-Version: {MICROVERSION}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


if __name__ == "__main__":
    recorded = json.loads(Path(sys.argv[1]).read_text())
    serve({path: text.encode() for path, text in recorded.items()}, int(sys.argv[2]))
