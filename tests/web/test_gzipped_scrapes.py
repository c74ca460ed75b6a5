"""/metrics gzipped (as Prometheus asks for it): compressed once per render for every scrape that
asks, in a thread, so that the event loop goes on meanwhile; a scrape that goes away does not
cancel it for the others."""

from __future__ import annotations

import asyncio
import gzip
import random
from pathlib import Path

from virtcap.claims.ledger import ClaimDatabase, ClaimLedger
from virtcap.config import ClaimSettings
from virtcap.fleet.store import SnapshotStore
from virtcap.service.supervise import Supervisor
from virtcap.web.render import MetricsCache


def _exposition(seed: int, lines: int = 200_000) -> bytes:
    """A large body that does not compress to nothing (8 MiB, as 1,000 hypervisors render)."""
    rng = random.Random(seed)
    return "".join(
        f'hypervisor_resource_free{{hypervisor="h{rng.randrange(1000)}",resource="memory"}} {rng.random()}\n'
        for _ in range(lines)
    ).encode()


def test_one_compression_per_body_off_the_event_loop(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = SnapshotStore()
        settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
        cache = MetricsCache(store, 60.0, claims, Supervisor())
        cache.body = _exposition(1)

        first = asyncio.create_task(cache.gzipped())
        others = [asyncio.create_task(cache.gzipped()) for _ in range(3)]
        await asyncio.sleep(0)
        # the loop ran the other tasks' first steps while the body was being compressed
        assert not first.done()
        first.cancel()  # this scrape goes away: the others still get the compression
        results = await asyncio.gather(*others)
        assert gzip.decompress(results[0]) == cache.body
        assert all(result is results[0] for result in results)  # compressed once
        assert await cache.gzipped() is results[0]

        cache.body = _exposition(2)  # a new render
        assert gzip.decompress(await cache.gzipped()) == cache.body

    asyncio.run(scenario())
