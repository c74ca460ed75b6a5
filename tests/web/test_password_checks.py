"""Password checks under a batch, against a real `virtcap serve`: one writer's requests sent at once
are checked once and never turned away as busy; a flood of different wrong passwords still is,
without holding up a scraper whose credentials are already verified."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from collections.abc import Iterator

import aiohttp
import bcrypt
import pytest

from tests.support.claims_client import HASH, WRITER, write_config
from tests.support.serving import Server, running_server

BATCH = 200
READER = ("prometheus", "scrape-me")
SLOW_COST = 11
"""The writer's: slow enough that a batch arrives while its first check still runs, so that
without a single check per credentials the batch outruns the bound and is answered 503 (with it
the batch costs one check), and that a flood keeps the bcrypt threads busy while the scraper
scrapes. The reader's is the tests' usual low cost: it is verified once."""


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("password-checks")
    config = write_config(directory)
    slow = bcrypt.hashpw(WRITER[1].encode(), bcrypt.gensalt(rounds=SLOW_COST)).decode()
    config.write_text(config.read_text().replace(HASH, slow))
    reader = bcrypt.hashpw(READER[1].encode(), bcrypt.gensalt(rounds=4)).decode()
    web = directory / "web.yml"
    web.write_text(f"basic_auth_users:\n  {READER[0]}: '{reader}'\n")
    args = ["--config", str(config), "--web.config.file", str(web)]
    with running_server(args, directory, headers=basic(*READER)) as running:
        yield running


async def post_claims(base_url: str, headers: list[dict[str, str]]) -> list[int]:
    claim = json.dumps({"hypervisor": "big", "vcpu": 1}).encode()
    headers = [{**header, "Content-Type": "application/json"} for header in headers]
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def post(header: dict[str, str]) -> int:
            async with session.post(f"{base_url}/api/v1/claims", data=claim, headers=header) as response:
                await response.read()
                return response.status

        return await asyncio.gather(*(post(header) for header in headers))


def free_vcpus(server: Server) -> tuple[int, int]:
    """big's free vCPUs and those claimed."""
    status, body = server.get("/api/v1/capacity", headers=basic(*READER))
    assert status == 200, body
    [big] = [entry for entry in json.loads(body)["hypervisors"] if entry["name"] == "big"]
    vcpu = big["resources"]["vcpu"]
    return vcpu["free"], vcpu["claimed"]


def test_one_writers_batch_is_never_turned_away_as_busy_and_never_overfills(server: Server) -> None:
    free, claimed = free_vcpus(server)
    assert 0 < free < BATCH  # the batch fills the hypervisor: some of it must be refused
    statuses = Counter(asyncio.run(post_claims(server.base_url, [basic(*WRITER)] * BATCH)))
    assert set(statuses) <= {201, 409}, statuses
    assert statuses[201] == free, statuses  # every claim that fits, and not one more
    assert free_vcpus(server) == (0, claimed + free)


def test_a_flood_of_wrong_passwords_is_refused_and_a_verified_scraper_is_not_held_up(
    server: Server,
) -> None:
    scraper = basic(*READER)
    status, _ = server.get("/metrics", headers=scraper)  # verified (again, if the cache was reset)
    assert status == 200

    async def flood_and_scrape() -> tuple[Counter[int], list[int], int]:
        wrong = [basic(WRITER[0], f"wrong-{n}") for n in range(BATCH)]
        flood = asyncio.create_task(post_claims(server.base_url, wrong))
        await asyncio.sleep(0.3)  # the flood has filled the bcrypt pool
        scrapes = []
        for _ in range(5):
            status, body = await asyncio.to_thread(server.get, "/metrics", 5.0, scraper)
            assert b"hypervisor_up" in body
            scrapes.append(status)
        flood_done = flood.done()
        return Counter(await flood), scrapes, flood_done

    statuses, scrapes, flood_done = asyncio.run(flood_and_scrape())
    assert set(statuses) <= {401, 503}, statuses
    assert statuses[503] > 0, statuses  # the bound on bcrypt work still holds
    assert scrapes == [200] * 5
    assert not flood_done  # the scrapes were answered while the flood was still being checked
