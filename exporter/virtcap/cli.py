"""The `virtcap` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from virtcap import __version__
from virtcap.config import Config, ConfigError, load_config
from virtcap.demo import demo_config
from virtcap.oneshot import audit_fleet_once
from virtcap.report import fleet_document, render_tables

EXIT_USAGE = 2


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
    return parser


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
    if args.format == "json":
        json.dump(fleet_document(snapshots), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_tables(snapshots))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "audit":
            return run_audit(args)
    except ConfigError as error:
        for line in str(error).splitlines():
            print(f"virtcap: configuration error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return EXIT_USAGE
