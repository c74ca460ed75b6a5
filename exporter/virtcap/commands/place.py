"""`virtcap place`: a dry-run placement, on one audit of the fleet (--config, --demo) or on a
running exporter (--url, `POST /api/v1/placements`). The same body and answer either way.

Exit 0 when every instance fits, 1 when not (NoValidHost), 2 when the request cannot be answered
(a bad flag or body, a configuration error, an exporter that cannot be reached or refuses).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from pydantic import ValidationError

from virtcap.commands.arguments import EXIT_USAGE, extra_spec_argument
from virtcap.commands.client import (
    Exporter,
    ExporterRefusedError,
    ExporterUnreachableError,
    add_answer_source,
)
from virtcap.config import load_config
from virtcap.contract.placements import PlacementAnswer, PlacementError, parse_placement_body
from virtcap.demo import demo_config
from virtcap.exposition.dryrun_table import render_dry_run
from virtcap.service.dryrun import place_locally

EXIT_NOT_PLACED = 1


def add_parser(commands: Any) -> None:
    place = commands.add_parser(
        "place",
        help="where a batch of instances would land now (Nova's scheduler simulated; nothing is held)",
        description="Where COUNT instances of a flavor would land if Nova's scheduler placed them now, "
        "one by one, all or nothing; and why each hypervisor refused the instance that found no host. "
        "Exit 0 when all fit, 1 when not, 2 when the request cannot be answered.",
    )
    place.add_argument("--flavor", help="a configured flavor, or one discovered in the fleet's Nova metadata")
    place.add_argument("--vcpu", type=int, help="a flavor made up for the request: its vCPUs")
    place.add_argument("--memory", help="its memory, such as 8GiB")
    place.add_argument("--disk", help="its root disk, such as 80GiB (default: 0)")
    place.add_argument(
        "--extra-spec",
        action="append",
        type=extra_spec_argument,
        default=[],
        metavar="KEY=VALUE",
        help="a Nova extra spec of that flavor, such as hw:cpu_policy=dedicated; repeat it for more",
    )
    place.add_argument("--count", type=int, default=1, help="how many instances (1 to 1000; default: 1)")
    place.add_argument(
        "--ignore-host", action="append", default=[], metavar="HOST", help="never this hypervisor (repeat)"
    )
    place.add_argument(
        "--force-host",
        action="append",
        default=[],
        metavar="HOST",
        help="only this hypervisor (the first given)",
    )
    place.add_argument("--anti-affinity", action="store_true", help="at most one instance per hypervisor")
    place.add_argument(
        "--availability-zone",
        metavar="ZONE",
        help="only hypervisors of this availability zone (config groups)",
    )
    add_answer_source(place, "/api/v1/placements")


def placement_body(args: argparse.Namespace) -> dict[str, Any]:
    """The API's body from the flags (checked by PlacementBody, here or by the exporter)."""
    inline = args.vcpu is not None or args.memory is not None or args.disk is not None or args.extra_spec
    if args.flavor is not None and inline:
        raise PlacementError(
            "--flavor names a configured flavor: "
            "expected no --vcpu, --memory, --disk or --extra-spec beside it"
        )
    flavor: str | dict[str, Any]
    if args.flavor is not None:
        flavor = args.flavor
    else:
        if args.vcpu is None or args.memory is None:
            raise PlacementError("expected --flavor NAME, or --vcpu N and --memory SIZE (and --disk SIZE)")
        keys = Counter(key for key, _ in args.extra_spec)
        twice = sorted(key for key, count in keys.items() if count > 1)
        if twice:
            raise PlacementError(f"--extra-spec: {', '.join(twice)} given more than once")
        flavor = {"vcpu": args.vcpu, "memory": args.memory}
        if args.disk is not None:
            flavor["disk"] = args.disk
        if args.extra_spec:
            flavor["extra_specs"] = dict(args.extra_spec)
    body: dict[str, Any] = {
        "flavor": flavor,
        "count": args.count,
        "ignore_hosts": list(args.ignore_host),
        "force_hosts": list(args.force_host),
        "anti_affinity": bool(args.anti_affinity),
    }
    if args.availability_zone is not None:
        body["availability_zone"] = args.availability_zone
    return body


def run(args: argparse.Namespace) -> int:
    try:
        document = placement_body(args)
        if args.url is not None:
            answer = _ask(Exporter(args.url, args.user, args.ca_file), document)
            if answer is None:
                return EXIT_USAGE
        else:
            body = parse_placement_body(document)
            config = demo_config() if args.demo else load_config(args.config)
            answer = place_locally(config, body)
    except PlacementError as error:
        print(f"virtcap: place: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        sys.stdout.write(answer.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render_dry_run(answer))
    return 0 if answer.placed else EXIT_NOT_PLACED


def _ask(exporter: Exporter, body: dict[str, Any]) -> PlacementAnswer | None:
    """The exporter's answer, or None once why there is none has been printed."""
    url = exporter.endpoint("/api/v1/placements")
    try:
        return PlacementAnswer.model_validate_json(exporter.send("POST", url, body, timeout=60))
    except ExporterRefusedError as error:
        try:
            message = json.loads(error.text).get("error", error.text)
        except (json.JSONDecodeError, AttributeError):
            message = error.text.strip()
        print(f"virtcap: place: {url}: HTTP {error.status}: {message}", file=sys.stderr)
    except ExporterUnreachableError as error:
        print(f"virtcap: place: cannot reach {error.url}: {error.reason}", file=sys.stderr)
    except ValidationError as error:
        print(
            f"virtcap: place: {url}: not a placement answer: {error.error_count()} problem(s)",
            file=sys.stderr,
        )
    return None
