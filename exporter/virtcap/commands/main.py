"""The `virtcap` console script: one parser over every subcommand's, and the dispatch to its `run`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from virtcap import __version__
from virtcap.commands import audit, capture, claim, maintenance, place, plan, serve
from virtcap.commands.arguments import EXIT_USAGE
from virtcap.config import ConfigError

_SUBCOMMANDS = {
    "audit": audit,
    "serve": serve,
    "capture": capture,
    "place": place,
    "plan": plan,
    "claim": claim,
    "maintenance": maintenance,
}
"""In the order `virtcap --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="virtcap", description="Capacity and overcommit monitor for libvirt/KVM fleets."
    )
    parser.add_argument("--version", action="version", version=f"virtcap {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _SUBCOMMANDS.values():
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = _SUBCOMMANDS[args.command].run
    try:
        return handler(args)
    except ConfigError as error:
        for line in str(error).splitlines():
            print(f"virtcap: configuration error: {line}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`virtcap audit | head`)
        sys.stderr.close()
        return 0


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
