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
import time
from pathlib import Path

import pytest

from virtcap.claims.ledger import ClaimDatabase, ClaimLedger
from virtcap.config import ClaimSettings
from virtcap.fleet.store import SnapshotStore
from virtcap.service.supervise import Supervisor
from virtcap.web import render
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


def _threads_named(prefix: str) -> dict[int, str]:
    found = (
        (thread.native_id, thread.name) for thread in threading.enumerate() if thread.name.startswith(prefix)
    )
    return {native_id: name for native_id, name in found if native_id is not None}


def test_bodies_are_compressed_at_idle_priority_and_rendered_at_the_loops(tmp_path: Path) -> None:
    """Compression holds no interpreter lock, only a CPU, which it gives up at once to the event
    loop serving a scrape (SCHED_IDLE); the render itself, which holds the lock the loop needs,
    runs at the loop's priority, so that it hands the lock back as soon as it is asked for."""

    async def scenario() -> None:
        store = SnapshotStore()
        settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
        cache = MetricsCache(store, 60.0, claims, Supervisor())
        cache.gzip_asked_at = time.monotonic()  # a gzip scraper came: each render compresses
        renderers, compressors = set(_threads_named("render")), set(_threads_named("compress"))
        rendering = asyncio.create_task(cache.run())
        try:
            async with asyncio.timeout(30):
                await cache.rendered.wait()
            assert gzip.decompress(await cache.gzipped()) == cache.body
            # the cache's threads, while it lives (its executors end them with it)
            (renderer,) = set(_threads_named("render")) - renderers
            (compressor,) = set(_threads_named("compress")) - compressors
            loop_thread = threading.get_native_id()
            assert os.sched_getscheduler(compressor) == os.SCHED_IDLE
            assert os.sched_getscheduler(renderer) == os.sched_getscheduler(loop_thread)
            assert os.getpriority(os.PRIO_PROCESS, renderer) == os.getpriority(os.PRIO_PROCESS, loop_thread)
        finally:
            rendering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rendering

    asyncio.run(scenario())


def test_a_compressor_left_no_cpu_holds_back_no_render_and_no_gzip_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine too busy to leave the idle compressor a CPU, a render compresses its body in its
    own thread after a while and shows the two together, so that a gzip scrape is still served at
    once; it queues no second idle compression behind the first, and until it shows the new body,
    scrapes are served the body before with its compression."""
    monkeypatch.setattr(render, "COMPRESSION_WAIT_SECONDS", 0.2)
    compressor_free = threading.Event()
    idle_compressed: list[bytes] = []
    real_gzip = render._gzip

    def slow_gzip(body: bytes) -> bytes:
        if threading.current_thread().name.startswith("compress"):
            compressor_free.wait(30)  # the idle compressor gets no CPU until the test lets it
            idle_compressed.append(body)
        return real_gzip(body)

    monkeypatch.setattr(render, "_gzip", slow_gzip)

    async def scenario() -> None:
        store = SnapshotStore()
        settings = ClaimSettings(database=str(tmp_path / "claims.sqlite"))
        claims = ClaimLedger(settings, store, ClaimDatabase(settings.database))
        cache = MetricsCache(store, 60.0, claims, Supervisor())
        cache.gzip_asked_at = time.monotonic()
        rendering = asyncio.create_task(cache.run())
        try:
            async with asyncio.timeout(30):
                await cache.rendered.wait()
                for _ in range(3):  # renders go on, each body shown with its compression
                    shown = cache.body
                    store.touch()
                    while cache.body is shown:
                        # the idle compression is awaited: the body before, with its compression
                        scrape = asyncio.create_task(cache.gzipped())
                        await asyncio.sleep(0)
                        assert scrape.done()
                        assert gzip.decompress(scrape.result()) == cache.body
                        await asyncio.sleep(0.01)
                    scrape = asyncio.create_task(cache.gzipped())
                    await asyncio.sleep(0)
                    assert scrape.done()  # compressed by the render: no scrape waits for it
                    assert gzip.decompress(scrape.result()) == cache.body
            compressor_free.set()
            async with asyncio.timeout(30):
                while not idle_compressed:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            assert len(idle_compressed) == 1  # the first render's; none queued behind it meanwhile
        finally:
            compressor_free.set()
            rendering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rendering

    asyncio.run(scenario())
