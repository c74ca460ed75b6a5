"""The `virtcap` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from virtcap import __version__
from virtcap.audit.capture import (
    DEFAULT_MAX_BYTES,
    DEFAULT_RATE_INTERVAL_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_FILE_BYTES,
    MAX_RATE_INTERVAL_SECONDS,
    CaptureError,
    CaptureTooLargeError,
    capture_uri,
    uri_problem,
    write_private,
)
from virtcap.audit.hypervisor import redact_uri
from virtcap.audit.oneshot import audit_fleet_once
from virtcap.claims.cli import add_claim_commands, run_claim
from virtcap.claims.maintenance_cli import add_maintenance_commands, run_maintenance
from virtcap.config import Config, ConfigError, load_config
from virtcap.config.load import select_shard
from virtcap.demo import demo_config
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.logs import LEVELS, setup_logging
from virtcap.model.discovery import discover, host_flavors
from virtcap.model.sharding import MAX_SHARDS, Shard
from virtcap.place import add_place_command, run_place
from virtcap.service.tolerance import one_shot_tolerance
from virtcap.units import format_bytes, parse_duration, parse_size
from virtcap.web.access import WebConfigSource
from virtcap.web.connections import ConnectionLimits
from virtcap.web.server import DEFAULT_PORT, parse_listen_address, serve

EXIT_USAGE = 2
# The demo accepts claims from the well-known writer demo/demo: not for other machines to reach.
DEMO_LISTEN_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="virtcap", description="Capacity and overcommit monitor for libvirt/KVM fleets."
    )
    parser.add_argument("--version", action="version", version=f"virtcap {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    audit = commands.add_parser("audit", help="audit the fleet once and print its capacity")
    _add_fleet_source(audit)
    audit.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )

    serve = commands.add_parser("serve", help="audit the fleet continuously and serve it to Prometheus")
    _add_fleet_source(serve)
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
            flag, dest=field_name, type=_duration, default=default, metavar="DURATION",
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

    capture = commands.add_parser(
        "capture",
        help="record what an audit reads from one hypervisor (read-only), to audit later as replay:///FILE",
    )
    capture.add_argument("--uri", required=True, help="the hypervisor's libvirt URI, such as qemu:///system")
    capture.add_argument(
        "--output", metavar="FILE", help="where to write the capture (default: standard output)"
    )
    capture.add_argument(
        "--max-size", dest="max_size", type=_capture_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
        help=f"refuse a capture larger than this (default: {format_bytes(DEFAULT_MAX_BYTES)}; "
        f"at most {format_bytes(MAX_FILE_BYTES)})",
    )  # fmt: skip
    capture.add_argument(
        "--timeout", type=_duration, default=DEFAULT_TIMEOUT_SECONDS, metavar="DURATION",
        help=f"give up on a hypervisor that has not answered everything by then "
        f"(default: {DEFAULT_TIMEOUT_SECONDS:g}s)",
    )  # fmt: skip
    capture.add_argument(
        "--rate-interval", dest="rate_interval", type=_rate_interval, default=DEFAULT_RATE_INTERVAL_SECONDS,
        metavar="DURATION",
        help=f"read the CPU time and vCPU counters twice this far apart and record their rates, which a "
        f"replay advances them at; 0 records none (default: {DEFAULT_RATE_INTERVAL_SECONDS:g}s)",
    )  # fmt: skip

    add_place_command(commands)
    add_claim_commands(commands)
    add_maintenance_commands(commands)
    return parser


def _positive_int(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 1_000_000:  # noqa: PLR2004  (the bound the message states)
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000000, got {text!r}")
    return int(text)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _rate_interval(text: str) -> float:
    seconds = 0.0 if text.strip() in {"0", "0s"} else _duration(text)
    if seconds > MAX_RATE_INTERVAL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected 0 or a duration of at most {MAX_RATE_INTERVAL_SECONDS:g}s, got {text!r}"
        )
    return seconds


def _capture_size(text: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not 0 < size <= MAX_FILE_BYTES:
        raise argparse.ArgumentTypeError(f"expected a size from 1 byte to {format_bytes(MAX_FILE_BYTES)}")
    return size


def _add_fleet_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--config", metavar="FILE", help="YAML configuration (default: the local qemu:///system)"
    )
    source.add_argument("--demo", action="store_true", help="use the bundled demo fleet")


def fleet_config(args: argparse.Namespace) -> Config:
    if args.demo:
        return demo_config()
    return load_config(args.config)


def run_audit(args: argparse.Namespace) -> int:
    config = fleet_config(args)
    snapshots = asyncio.run(audit_fleet_once(config))
    settings = config.failure_tolerance
    tolerance = (
        one_shot_tolerance(snapshots, config.multipliers, settings.max_host_failures)
        if settings.enabled
        else None
    )
    discovery = (
        discover((s.name, host_flavors(s.facts)) for s in snapshots if s.facts is not None)
        if config.discover_flavors
        else None
    )
    if args.format == "json":
        configured = [flavor.name for flavor in config.flavors]
        json.dump(fleet_document(snapshots, tolerance, discovery, configured), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_tables(snapshots, tolerance, discovery))
    return 0


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


def run_serve(args: argparse.Namespace) -> int:
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


def run_capture(args: argparse.Namespace) -> int:
    """Exit 2 for a URI that is not one, 1 when the hypervisor cannot be captured or written."""
    uri: str = args.uri
    problem = uri_problem(uri)
    if problem is not None:
        print(f"virtcap: capture: --uri: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        data = capture_uri(uri, args.max_size, args.timeout, args.rate_interval)
    except CaptureError as error:
        hint = " (--max-size)" if isinstance(error, CaptureTooLargeError) else ""
        print(f"virtcap: cannot capture {redact_uri(uri)}: {error}{hint}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    try:
        write_private(Path(args.output), data)
    except OSError as error:
        print(f"virtcap: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "audit":
            return run_audit(args)
        if args.command == "serve":
            return run_serve(args)
        if args.command == "claim":
            return run_claim(args)
        if args.command == "maintenance":
            return run_maintenance(args)
        if args.command == "capture":
            return run_capture(args)
        if args.command == "place":
            return run_place(args)
    except ConfigError as error:
        for line in str(error).splitlines():
            print(f"virtcap: configuration error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`virtcap audit | head`)
        sys.stderr.close()
        return 0
    return EXIT_USAGE


def run() -> NoReturn:
    """The console script: main(), then an exit that skips the interpreter's finalization.

    A libvirt call stuck in a daemon thread (a hung hypervisor) may hold libvirt's locks; if
    finalization then garbage-collects a connection, closing it would wait for those locks
    forever. Everything worth saving is flushed first.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
