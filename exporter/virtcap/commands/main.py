"""The `virtcap` console script: one parser over every subcommand's, and the dispatch to its `run`."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NoReturn

from virtcap import __version__
from virtcap.commands.arguments import EXIT_USAGE
from virtcap.config import ConfigError

_SUBCOMMANDS = ("audit", "serve", "capture", "place", "plan", "claim", "maintenance")
"""In the order `virtcap --help` lists them; each is the module of its name in this package,
with its `add_parser` and `run`."""


def _subcommand(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `only` alone: a command line that names its
    subcommand first imports that one's module and no other (the web server's for `serve` alone,
    say). The suite runs hundreds of commands, and most of a short one's CPU was imports."""
    parser = argparse.ArgumentParser(
        prog="virtcap", description="Capacity and overcommit monitor for libvirt/KVM fleets."
    )
    parser.add_argument("--version", action="version", version=f"virtcap {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMANDS:
        if only is None or name == only:
            _subcommand(name).add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    named = arguments[0] if arguments and arguments[0] in _SUBCOMMANDS else None
    args = build_parser(named).parse_args(arguments)
    handler: Callable[[argparse.Namespace], int] = _subcommand(args.command).run
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
