"""`virtcap serve`: audit the fleet continuously and serve it to Prometheus; the `--web.*`,
`--collector.*` and sharding flags, which win over the configuration's keys."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from virtcap.commands.arguments import add_fleet_source, duration, fleet_config
from virtcap.config import Config, ConfigError, load_config
from virtcap.config.load import select_shard
from virtcap.logs import LEVELS, setup_logging
from virtcap.model.sharding import MAX_SHARDS, Shard
from virtcap.web.access import WebConfigSource
from virtcap.web.connections import ConnectionLimits
from virtcap.web.server import DEFAULT_PORT, parse_listen_address, serve

# The demo accepts claims from the well-known writer demo/demo: not for other machines to reach.
DEMO_LISTEN_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"


def add_parser(commands: Any) -> None:
    serve = commands.add_parser("serve", help="audit the fleet continuously and serve it to Prometheus")
    add_fleet_source(serve)
    serve.add_argument(
        "--web.listen-address",
        dest="listen_address",
        metavar="HOST:PORT",
        help=f"address to listen on (default: :{DEFAULT_PORT}; with --demo, {DEMO_LISTEN_ADDRESS})",
    )
    serve.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="exporter-toolkit web configuration: TLS, client certificates, basic auth",
    )
    defaults = ConnectionLimits()
    serve.add_argument(
        "--web.max-connections",
        dest="max_connections",
        type=_positive_int,
        default=defaults.max_connections,
        metavar="N",
        help=f"most client connections at once; at the limit the longest-idle one is closed "
        f"(default: {defaults.max_connections})",
    )
    for flag, field_name, meaning in (
        ("--web.read-timeout", "read_timeout", "a request's head must arrive within it"),
        ("--web.idle-timeout", "idle_timeout", "keep-alive connections idle this long are closed"),
    ):
        default = getattr(defaults, field_name)
        serve.add_argument(
            flag, dest=field_name, type=duration, default=default, metavar="DURATION",
            help=f"{meaning} (default: {default:g}s)",
        )  # fmt: skip
    serve.add_argument(
        "--collector.domains",
        dest="collector_domains",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-domain allocation and info series, one per domain and resource "
        "(default: the configuration's exposition.domains, off)",
    )
    serve.add_argument(
        "--shard",
        metavar="N",
        help="audit and serve only the hypervisors a consistent hash of their names assigns to "
        "shard N, numbered from 0 (default: the configuration's sharding.shard, 0)",
    )
    serve.add_argument(
        "--total-shards",
        dest="total_shards",
        metavar="M",
        help="how many exporters share the fleet, each with its own --shard "
        "(default: the configuration's sharding.total_shards, 1)",
    )
    serve.add_argument("--log.level", dest="log_level", choices=tuple(LEVELS), default="info")
    serve.add_argument("--log.format", dest="log_format", choices=("logfmt", "json"), default="logfmt")


def _positive_int(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 1_000_000:  # noqa: PLR2004  (the bound the message states)
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000000, got {text!r}")
    return int(text)


def listen_address(args: argparse.Namespace) -> str:
    if args.listen_address is not None:
        return str(args.listen_address)
    return DEMO_LISTEN_ADDRESS if args.demo else f":{DEFAULT_PORT}"


def with_collectors(config: Config, args: argparse.Namespace) -> Config:
    """The configuration with the `--collector.*` flags given, which win over its `exposition`."""
    if args.collector_domains is None:
        return config
    exposition = config.exposition.model_copy(update={"domains": bool(args.collector_domains)})
    return dataclasses.replace(config, exposition=exposition)


def _shard_flag(flag: str, text: str, lowest: int, highest: int) -> int:
    if not text.isdigit() or not lowest <= int(text) <= highest:
        raise ConfigError(f"{flag}: expected a whole number from {lowest} to {highest}, got {text!r}")
    return int(text)


def with_shard_flags(config: Config, args: argparse.Namespace) -> Config:
    """The configuration with `--shard` and `--total-shards`, each overriding its `sharding` key."""
    if args.shard is None and args.total_shards is None:
        return config
    total = config.shard.total
    if args.total_shards is not None:
        total = _shard_flag("--total-shards", args.total_shards, 1, MAX_SHARDS)
    ordinal = config.shard.ordinal
    if args.shard is not None:
        ordinal = _shard_flag("--shard", args.shard, 0, MAX_SHARDS - 1)
    if ordinal >= total:
        if args.shard is not None:
            if args.total_shards is not None:
                total_from = "--total-shards"
            elif config.shard.sharded:
                total_from = f"{config.source}'s sharding.total_shards"
            else:
                total_from = "the default; give --total-shards too"
            raise ConfigError(
                f"--shard: expected a shard from 0 to {total - 1} of {total} total shards ({total_from}), "
                f"numbered from 0; got {ordinal}"
            )
        raise ConfigError(
            f"--total-shards: expected more than {ordinal} total shards "
            f"({config.source}'s sharding.shard is {ordinal}, numbered from 0); got {total}"
        )
    return select_shard(config, Shard(ordinal, total))


def run(args: argparse.Namespace) -> int:
    config = with_shard_flags(with_collectors(fleet_config(args), args), args)
    web_config = WebConfigSource(args.web_config_file)
    address = listen_address(args)
    parse_listen_address(address)
    setup_logging(args.log_level, args.log_format)

    def reload_config() -> Config:
        """The file read again, with the same flags winning over it."""
        return with_shard_flags(with_collectors(load_config(args.config), args), args)

    limits = ConnectionLimits(args.max_connections, args.read_timeout, args.idle_timeout)
    return asyncio.run(serve(config, address, web_config, None if args.demo else reload_config, limits))
