"""/metrics gzipped (as Prometheus asks for it): compressed once per render for every scrape that
asks, in a thread, so that the event loop goes on meanwhile; a scrape that goes away does not
cancel it for the others; once a scrape has asked, with each render, so that none waits for it."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import random
import threading
from pathlib import Path

from virtcap.claims.ledger import ClaimDatabase, ClaimLedger
from virtcap.config import ClaimSettings
from virtcap.fleet.store import SnapshotStore
from virtcap.service.supervise import Supervisor
from virtcap.web.render import RENDER_NICENESS, MetricsCache


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


KEPT_SECONDS = 3.0
"""How long the renders compress after a gzip scrape, in the test (a render takes well under it)."""


def test_once_asked_each_render_comes_with_its_body_gzipped(tmp_path: Path) -> None:
    """A gzip scrape then waits for no compression: the render made it, in its thread, and shows
    the body only with it. Once no scrape has asked for a while, the renders stop compressing."""

    async def scenario() -> None:
        store = SnapshotStore()
        settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
        cache = MetricsCache(store, 60.0, claims, Supervisor())
        cache.gzip_kept_seconds = KEPT_SECONDS
        rendering = asyncio.create_task(cache.run())

        async def rendered_again() -> asyncio.Task[bytes]:
            """A new render shown, then a gzip scrape, let run until it waits (or is done)."""
            shown = cache.body
            store.touch()  # something shown changed: a render
            async with asyncio.timeout(30):
                while cache.body is shown:
                    await asyncio.sleep(0.01)
            scrape = asyncio.create_task(cache.gzipped())
            await asyncio.sleep(0)
            return scrape

        try:
            await cache.rendered.wait()
            assert not cache.gzip_wanted()
            assert gzip.decompress(await cache.gzipped()) == cache.body  # the first: compressed then
            assert cache.gzip_wanted()
            for _ in range(2):
                scrape = await rendered_again()
                assert scrape.done()  # served at once: no compression to wait for
                assert gzip.decompress(scrape.result()) == cache.body
            await asyncio.sleep(KEPT_SECONDS)
            assert not cache.gzip_wanted()
            scrape = await rendered_again()
            assert not scrape.done()  # the render no longer compressed: this scrape waits for it
            assert gzip.decompress(await scrape) == cache.body
        finally:
            rendering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rendering

    asyncio.run(scenario())


def test_renders_run_below_the_event_loops_priority(tmp_path: Path) -> None:
    """A render (its Python and its compression) leaves the CPU to the event loop and a scrape
    that come meanwhile: its thread runs RENDER_NICENESS nice levels below the loop's."""

    def render_threads() -> set[int]:
        found = (thread.native_id for thread in threading.enumerate() if thread.name.startswith("render"))
        return {native_id for native_id in found if native_id is not None}

    async def scenario() -> tuple[set[int], int]:
        store = SnapshotStore()
        settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
        cache = MetricsCache(store, 60.0, claims, Supervisor())
        before = render_threads()
        rendering = asyncio.create_task(cache.run())
        async with asyncio.timeout(30):
            await cache.rendered.wait()
        rendering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rendering
        return render_threads() - before, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    loop_niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    started, niceness_after = asyncio.run(scenario())
    assert niceness_after == loop_niceness  # the loop's own is left as it was
    assert len(started) == 1
    (render,) = started
    assert os.getpriority(os.PRIO_PROCESS, render) == min(loop_niceness + RENDER_NICENESS, 19)
