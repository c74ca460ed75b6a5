"""Scrapes under load: 10,000 at 200 concurrent connections without one error, in plain HTTP and
over TLS with basic auth."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections import Counter
from pathlib import Path

import aiohttp
import bcrypt

from tests.support.serving import running_server
from tests.support.tls import client_context, make_ca, make_cert

SCRAPES = 10_000
CONNECTIONS = 200


async def scrape_many(base_url: str, context: ssl.SSLContext | None, headers: dict[str, str]) -> Counter[str]:
    """Outcomes by status (or error type)."""
    outcomes: Counter[str] = Counter()
    remaining = iter(range(SCRAPES))
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=context if context is not None else False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:

        async def worker() -> None:
            for _ in remaining:
                try:
                    async with session.get(f"{base_url}/metrics") as response:
                        body = await response.read()
                        ok = response.status == 200 and b"hypervisor_up" in body
                        outcomes["ok" if ok else str(response.status)] += 1
                except (aiohttp.ClientError, TimeoutError) as error:
                    outcomes[type(error).__name__] += 1

        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return outcomes


def test_ten_thousand_scrapes_at_200_connections(tmp_path: Path) -> None:
    with running_server(["--demo"], tmp_path) as server:
        outcomes = asyncio.run(scrape_many(server.base_url, None, {}))
    assert outcomes == Counter({"ok": SCRAPES})


def test_ten_thousand_scrapes_over_tls_with_basic_auth(tmp_path: Path) -> None:
    make_ca(tmp_path, "ca")
    make_cert(tmp_path, "server", "ca", san="IP:127.0.0.1")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=10)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config: {{cert_file: {tmp_path}/server.crt, key_file: {tmp_path}/server.key}}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    headers = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
    context = client_context(tmp_path)
    with running_server(
        ["--demo", "--web.config.file", str(web)], tmp_path, ssl_context=context, headers=headers
    ) as server:
        outcomes = asyncio.run(scrape_many(server.base_url, context, headers))
    assert outcomes == Counter({"ok": SCRAPES})
