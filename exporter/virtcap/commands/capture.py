"""`virtcap capture`: record what an audit reads from one hypervisor (read-only), to audit later
as replay:///FILE."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

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
from virtcap.audit.connection import redact_uri
from virtcap.commands.arguments import EXIT_USAGE, duration
from virtcap.units import format_bytes, parse_size


def add_parser(commands: Any) -> None:
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
        "--timeout", type=duration, default=DEFAULT_TIMEOUT_SECONDS, metavar="DURATION",
        help=f"give up on a hypervisor that has not answered everything by then "
        f"(default: {DEFAULT_TIMEOUT_SECONDS:g}s)",
    )  # fmt: skip
    capture.add_argument(
        "--rate-interval", dest="rate_interval", type=_rate_interval, default=DEFAULT_RATE_INTERVAL_SECONDS,
        metavar="DURATION",
        help=f"read the CPU time and vCPU counters twice this far apart and record their rates, which a "
        f"replay advances them at; 0 records none (default: {DEFAULT_RATE_INTERVAL_SECONDS:g}s)",
    )  # fmt: skip


def _rate_interval(text: str) -> float:
    seconds = 0.0 if text.strip() in {"0", "0s"} else duration(text)
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


def run(args: argparse.Namespace) -> int:
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
