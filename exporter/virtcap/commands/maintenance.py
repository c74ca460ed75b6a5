"""`virtcap maintenance set|lift|list`: the maintenance API of a running exporter, for operators,
with the same client and credentials as `virtcap claim` (a writer's, for `set` and `lift`)."""

from __future__ import annotations

import argparse
import math
import time
import urllib.parse
from typing import Any

from virtcap.commands.client import add_server_arguments, call_api
from virtcap.units import format_utc, parse_duration

MAX_DURATION_SECONDS = 10 * 366 * 86400
"""`--for` at most ten years: a maintenance meant to last longer has no end."""


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not 0 < seconds <= MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a duration above 0 and within ten years such as 4h, got {text!r}"
        )
    return seconds


def add_parser(commands: Any) -> None:
    maintenance = commands.add_parser(
        "maintenance", help="put hypervisors into maintenance, lift it, or list it, on a running exporter"
    )
    actions = maintenance.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = actions.add_parser("set", help="take a hypervisor out of service (PUT its maintenance)")
    lift = actions.add_parser("lift", help="lift the maintenance set through the API (DELETE it)")
    list_ = actions.add_parser("list", help="the hypervisors in maintenance now")
    for parser in (set_, lift, list_):
        add_server_arguments(parser)
    for parser in (set_, lift):
        parser.add_argument("hypervisor", help="a configured hypervisor")
    set_.add_argument("--reason", required=True, help="why, in one line (shown to those refused)")
    end = set_.add_mutually_exclusive_group()
    end.add_argument(
        "--until",
        metavar="TIME",
        help="when it ends by itself, such as 2026-11-23T18:00:00Z (default: when lifted)",
    )
    end.add_argument(
        "--for", dest="duration", type=_duration, metavar="DURATION", help="how long from now, such as 4h"
    )


def run(args: argparse.Namespace) -> int:
    """Prints the server's JSON answer; exit 0 on success, 1 when the server refused."""
    base = args.url.rstrip("/") + "/api/v1"
    if args.action == "list":
        return call_api(args, "GET", f"{base}/maintenance")
    url = f"{base}/hypervisors/{urllib.parse.quote(args.hypervisor, safe='')}/maintenance"
    if args.action == "lift":
        return call_api(args, "DELETE", url)
    body: dict[str, Any] = {"reason": args.reason}
    if args.duration is not None:
        body["until"] = format_utc(math.ceil(time.time() + args.duration))  # whole seconds, not before
    elif args.until is not None:
        body["until"] = args.until  # checked by the exporter, which names what it expects
    return call_api(args, "PUT", url, body)
