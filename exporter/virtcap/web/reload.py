"""SIGHUP: the configuration file read again while serving, the running one kept if it is bad."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from virtcap.claims.backends import database_description
from virtcap.config import Config, ConfigError
from virtcap.config.load import select_shard
from virtcap.service.reclaim import policy_of
from virtcap.web.exporter import Exporter
from virtcap.web.middleware import writer_hashes

# The lifecycle's logger, as before reloads had a module of their own: the lines keep their name.
log = logging.getLogger("virtcap.web.server")


class ConfigReloads:
    """SIGHUP: read the file again, off the event loop, one reload at a time.

    The file is parsed in a thread (a large or hostile file must not stall scrapes); a file that
    cannot be used, for any reason, is logged and the running configuration kept whole.
    """

    def __init__(self, exporter: Exporter, reload_config: Callable[[], Config]) -> None:
        self.exporter = exporter
        self.reload_config = reload_config
        self._wanted = asyncio.Event()
        self._task = asyncio.create_task(self._serve(), name="reload-config")

    def request(self) -> None:
        self._wanted.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _serve(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()  # signals during a reload: one more reload after it
            try:
                await self._reload()
            except Exception:  # never let a bad reload end reloading for good
                log.exception("configuration not reloaded")

    async def _reload(self) -> None:
        exporter = self.exporter
        try:
            config = await asyncio.to_thread(self.reload_config)
        except ConfigError as error:
            log.error("configuration not reloaded", extra={"error": str(error)})
            return
        running_shard = exporter.config.shard
        if config.shard != running_shard:
            # Prometheus scrapes each shard at its own address: a shard that became another one on
            # SIGHUP would leave two exporters serving the same hypervisors, or none some.
            log.warning(
                "sharding changed: takes effect at the next start",
                extra={"running": str(running_shard), "configured": str(config.shard)},
            )
            config = select_shard(config, running_shard)
        running = exporter.claims.settings
        if (config.claims.database, config.claims.password_file) != (running.database, running.password_file):
            log.warning(
                "claims.database changed: takes effect at the next start",
                extra={
                    "running": database_description(running),
                    "configured": database_description(config.claims),
                },
            )
        exporter.claims.settings = config.claims.model_copy(
            update={"database": running.database, "password_file": running.password_file}
        )
        exporter.config = config
        exporter.cache.stale_after = config.audit.staleness_bound
        exporter.cache.exposition = config.exposition
        if exporter.fleet.reclaim is not None:
            exporter.fleet.reclaim.policy = policy_of(config.reclaim)
        if exporter.tolerance is not None:
            exporter.tolerance.configure(
                config.failure_tolerance, config.multipliers, config.audit.staleness_bound
            )
        exporter.writers.replace_users(writer_hashes(config))
        await follow_placement(exporter)
        await exporter.fleet.apply(
            config.hypervisors, config.audit, config.flavor_demands, discover_flavors=config.discover_flavors
        )
        exporter.store.touch()
        log.info(
            "configuration reloaded",
            extra={
                "hypervisors": len(config.hypervisors),
                "configured": len(config.configured_hypervisors),
                "shard": config.shard.ordinal,
                "total_shards": config.shard.total,
            },
        )


PLACEMENT_TASK = "placement"


async def follow_placement(exporter: Exporter) -> None:
    """The Placement reconciliation as the running configuration wants it: where `placement:` is
    configured (from the start or by a reload) it runs, supervised, and its families are shown;
    where it is not (any more), neither, and a fleet without OpenStack has no trace of it."""
    task = exporter.placement
    if task is None:
        return
    task.configure(exporter.config)
    wanted = exporter.config.placement is not None
    exporter.cache.placement = wanted
    running = exporter.supervisor.supervises(PLACEMENT_TASK)
    if wanted and not running:
        exporter.supervisor.start(PLACEMENT_TASK, "placement", task.run)
    elif running and not wanted:
        await exporter.supervisor.stop(PLACEMENT_TASK)
        task.close()
