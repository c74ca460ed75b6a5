"""What several subcommands share: the fleet to audit (`--config`, `--demo`), argument types, and
the exit code of a request that cannot be answered."""

from __future__ import annotations

import argparse

from virtcap.config import Config, load_config
from virtcap.demo import demo_config
from virtcap.units import parse_duration

EXIT_USAGE = 2


def add_fleet_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--config", metavar="FILE", help="YAML configuration (default: the local qemu:///system)"
    )
    source.add_argument("--demo", action="store_true", help="use the bundled demo fleet")


def fleet_config(args: argparse.Namespace) -> Config:
    if args.demo:
        return demo_config()
    return load_config(args.config)


def duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def extra_spec_argument(text: str) -> tuple[str, str]:
    """`KEY=VALUE`: the key and value are checked by the exporter, as Nova's API checks a flavor's."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE such as hw:cpu_policy=dedicated, got {text!r}")
    return key, value
