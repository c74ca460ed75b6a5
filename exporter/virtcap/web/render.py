"""The /metrics exposition, rendered in a thread whenever a snapshot changes and kept for scrapes.

Scrapes never wait for libvirt or for a render: every scrape is served the cached bytes, gzipped
with the render once a scraper has asked for gzip (as Prometheus does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import gzip
import time
from collections.abc import Callable, Mapping

from virtcap.claims.ledger import ClaimLedger
from virtcap.config.schema import ExpositionSection
from virtcap.exposition.families import PlacementShown, TaskHealth
from virtcap.exposition.fragments import FragmentCache
from virtcap.exposition.kept_views import KeptViews
from virtcap.fleet.store import SnapshotStore
from virtcap.model.reclaim import ReclaimableDomain
from virtcap.model.sharding import UNSHARDED
from virtcap.service.priority import idle_this_thread
from virtcap.service.reclaim import ReclaimTracker
from virtcap.service.slices import in_slices
from virtcap.service.supervise import Supervisor

GZIP_LEVEL = 6
"""zlib's default."""
GZIP_KEPT_SECONDS = 600.0
"""How long after the last scrape that asked for gzip the renders still compress their bodies:
longer than any scrape interval, so that a Prometheus scraping gzip keeps them at it, and one
`curl --compressed` does not have every render compress for ever."""
COMPRESSION_WAIT_SECONDS = 5.0
"""How long a render waits for its body's compression at idle priority: 50 to 90 ms for a thousand
hypervisors on a CPU nothing else wants, 1 to 2.4 s where the audits of a thousand test-driver
hypervisors keep the exporter's CPU busy (bench/reconciliation.py's served part). Past it (a machine
too busy to leave the idle compressor a CPU), the render's thread compresses the body at the
render's priority. Meanwhile scrapes are served the body before, so that a busy exporter shows a
new audit a few seconds late rather than a gzip scrape compressing the body itself (70 to 190 ms of
its wait, as it did when the body was shown without its compression)."""
RENDER_GAP_SECONDS = 0.5
"""At most two renders a second (fewer for a fleet that takes long to render): a large fleet
changes all the time, and scrapes need not see every change."""


class MetricsCache:
    """The fleet's exposition, rendered once per change and served to every scrape."""

    def __init__(
        self, store: SnapshotStore, stale_after: float, claims: ClaimLedger, supervisor: Supervisor
    ) -> None:
        self.store = store
        self.claims = claims
        self.supervisor = supervisor
        self.stale_after = stale_after
        self.body = b""
        self.version = -1
        """The store version the body shows."""
        self._gzipping: tuple[bytes, asyncio.Future[bytes]] | None = None
        """The body being gzipped or gzipped last, and its compression."""
        self.gzip_asked_at: float | None = None
        """When a scrape last asked for gzip (monotonic): within `gzip_kept_seconds`, each render
        compresses its body too, before it is shown."""
        self.gzip_kept_seconds = GZIP_KEPT_SECONDS
        self._fragments = FragmentCache()
        self._views = KeptViews()
        self.exposition = ExpositionSection()
        """`exposition`: the project and domain series; set by whoever configures the exporter."""
        self.shard = UNSHARDED
        """This exporter's shard, exported as kube-state-metrics exports its own."""
        self.reclaim: ReclaimTracker | None = None
        """Where the reclaimable domains come from (None: no such series)."""
        self.placement = False
        """`placement:` is configured: its families are shown (the store's last reading)."""
        self.flavor_sources: Callable[[], Mapping[str, str]] | None = None
        """Each flavor of the headroom families and its source, as of now (read on the event loop)."""
        # Its own thread: renders never queue behind other work of the default pool, and the
        # fragment cache is rendered by one thread at a time.
        self._renderer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="render")
        # Compression holds no interpreter lock, only a CPU: at SCHED_IDLE it gives that CPU up at
        # once to the event loop serving a scrape (at a mere nice value it kept it for the rest of
        # its slice, 3 to 7 ms, on Linux 6.18).
        self._compressor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="compress", initializer=idle_this_thread
        )
        self._compressing: asyncio.Future[bytes] | None = None
        self.rendered = asyncio.Event()

    async def gzipped(self) -> bytes:
        """The body gzipped, once per render for every scrape that asks (Prometheus does).

        Compressing the exposition of a thousand hypervisors (8 MiB) takes 50 to 100 ms. Made when
        the first scrape of a body asked for it, it was the wait of that scrape (the p99 of a
        scraper asking for gzip ten times a second), and it grew with the body. So once a scrape
        has asked, each render has its body compressed (`_compressed`), and the two are shown
        together: a gzip scrape is then served at once, as a plain one is (while such scrapes keep
        coming: `gzip_kept_seconds`). Otherwise (the first gzip scrape after a while without one),
        the body is compressed in a thread, off the event loop, once for every scrape that waits
        for it; a scrape that goes away meanwhile does not cancel it for the others."""
        self.gzip_asked_at = time.monotonic()
        body = self.body
        if self._gzipping is None or self._gzipping[0] is not body:
            compressing = asyncio.ensure_future(asyncio.to_thread(_gzip, body))
            self._gzipping = (body, compressing)
        return await asyncio.shield(self._gzipping[1])

    def gzip_wanted(self) -> bool:
        """Whether a scrape asked for gzip within `gzip_kept_seconds`."""
        asked = self.gzip_asked_at
        return asked is not None and time.monotonic() - asked < self.gzip_kept_seconds

    @property
    def projects(self) -> Mapping[str, str]:
        """The projects with series of their own in the last render (a /probe shows the same)."""
        return self._fragments.projects

    async def run(self) -> None:
        while True:
            self.store.changed.clear()
            version = self.store.version
            started = time.monotonic()
            now = time.time()
            # What the loop owns is read on the loop, in slices: a thousand hypervisors' views
            # and reclaimable domains took tens of milliseconds, which a scrape must not wait
            # (now mostly kept from the last render: KeptViews, ReclaimTracker.reclaimable_on).
            view = functools.partial(
                self._views.view,
                now=now,
                stale_after=self.stale_after,
                pending_claims=self.claims.pending(),
                maintenance=self.claims.maintenance_now(),
            )
            snapshot = tuple(await in_slices(list(self.store.hypervisors.values()), view))
            self._views.forget_unasked()
            tasks = TaskHealth(dict(self.supervisor.failures), self.supervisor.dead_by_kind())
            flavors = self.flavor_sources() if self.flavor_sources is not None else None
            reclaimable = await self._reclaimable(now)
            render = functools.partial(
                self._fragments.render,
                snapshot,
                dict(self.claims.outcomes),
                tasks,
                self.store.tolerance,
                exposition=self.exposition,
                flavors=flavors,
                database_up=self.claims.database.up,
                shard=self.shard,
                reclaimable=reclaimable,
                placement=PlacementShown(self.store.placement) if self.placement else None,
            )
            loop = asyncio.get_running_loop()
            body = await loop.run_in_executor(self._renderer, render)
            # the gap below is the render's own time: a wait for the idle compressor is no CPU spent
            spent = time.monotonic() - started
            # scrapes meanwhile are served the body before, with its compression
            gzipping = None
            if self.gzip_wanted():
                compressed, compressing_spent = await self._compressed(body)
                gzipping = (body, compressed)
                spent += compressing_spent
            self.body, self.version, self._gzipping = body, version, gzipping
            self.rendered.set()
            # Rendering a large fleet takes a while: never spend more than a third of the time on it.
            await self._pause(version, max(RENDER_GAP_SECONDS, 2 * spent))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._until_next_stale()):
                    await self.store.changed.wait()

    async def _compressed(self, body: bytes) -> tuple[asyncio.Future[bytes], float]:
        """`body` gzipped (done), to be shown with it: by the idle compressor, or by the render's
        thread where that compressor is still at an earlier body (never more than one queued) or
        has not finished within `COMPRESSION_WAIT_SECONDS`. Either way the body is shown only with
        its compression, so that no gzip scrape compresses it (only the first after a while without
        any: `gzip_kept_seconds`). With the seconds the render's thread spent on it."""
        loop = asyncio.get_running_loop()
        if self._compressing is None or self._compressing.done():
            compressing = loop.run_in_executor(self._compressor, _gzip, body)
            self._compressing = compressing
            done, _pending = await asyncio.wait((compressing,), timeout=COMPRESSION_WAIT_SECONDS)
            if done:
                compressing.result()  # a compression that failed fails the render, not the scrapes
                return compressing, 0.0
        # At the render's priority the compression takes its share of a busy CPU, as the render did.
        started = time.monotonic()
        compressing = loop.run_in_executor(self._renderer, _gzip, body)
        await compressing
        return compressing, time.monotonic() - started

    async def _reclaimable(self, now: float) -> list[ReclaimableDomain]:
        tracker = self.reclaim
        if tracker is None:
            return []
        decided = await in_slices(tracker.hypervisors(), lambda name: tracker.reclaimable_on(name, now))
        return [found for domains in decided for found in domains]

    async def _pause(self, rendered_version: int, gap: float) -> None:
        """The gap between renders, cut short by the first complete picture of the fleet: /-/ready
        waits for it, and a small fleet is audited well within one gap."""
        ready_since = self.store.ready_since
        if ready_since is not None and rendered_version < ready_since:
            return
        if ready_since is not None:
            await asyncio.sleep(gap)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(gap):
                await self.store.all_audited.wait()

    def _until_next_stale(self) -> float | None:
        return self.store.until_next_stale(self.stale_after, time.time())


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, compresslevel=GZIP_LEVEL)
