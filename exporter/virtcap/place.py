"""`virtcap place`: a dry-run placement, on one audit of the fleet (--config, --demo) or on a
running exporter (--url, `POST /api/v1/placements`). The same body and answer either way.

Exit 0 when every instance fits, 1 when not (NoValidHost), 2 when the request cannot be answered
(a bad flag or body, a configuration error, an exporter that cannot be reached or refuses).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from pydantic import ValidationError

from virtcap.audit.oneshot import audit_fleet_once
from virtcap.claims.cli import PASSWORD_VARIABLE, extra_spec_argument
from virtcap.config import Config, load_config
from virtcap.demo import demo_config
from virtcap.dryrun import FleetEntry, PlacementError, dry_run, render_answer
from virtcap.service.flavors import with_discovered_flavors
from virtcap.web.models import PlacementAnswer, PlacementBody, placement_body_error

EXIT_NOT_PLACED = 1
EXIT_USAGE = 2


def add_place_command(commands: Any) -> None:
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
    source = place.add_mutually_exclusive_group()
    source.add_argument(
        "--config",
        metavar="FILE",
        help="audit the fleet of this configuration once (default: the local qemu:///system)",
    )
    source.add_argument("--demo", action="store_true", help="audit the bundled demo fleet once")
    source.add_argument("--url", help="ask a running exporter instead (POST /api/v1/placements)")
    place.add_argument(
        "--user", help=f"with --url: basic auth user; the password is read from ${PASSWORD_VARIABLE}"
    )
    place.add_argument("--ca-file", help="with --url: CA certificate to verify an HTTPS exporter with")
    place.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default: table)"
    )


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


def parse_body(document: dict[str, Any]) -> PlacementBody:
    """PlacementBody, its errors in one line as the API gives them."""
    try:
        return PlacementBody.model_validate(document)
    except ValidationError as error:
        raise PlacementError(placement_body_error(error)) from None
    except (ValueError, ArithmeticError, TypeError) as error:  # a parser that let its own error out
        raise PlacementError(f"the body is not a valid placement: {error}") from None


def place_locally(config: Config, body: PlacementBody) -> PlacementAnswer:
    """One audit of the fleet (no pending claims: there is no ledger), then the engine."""
    snapshots = asyncio.run(audit_fleet_once(config))
    # a flavor by name: a configured one, or one discovered in the fleet's Nova metadata
    audited = [(snapshot.name, snapshot.facts) for snapshot in snapshots if snapshot.facts is not None]
    config = with_discovered_flavors(config, audited)
    return dry_run(config, body, [FleetEntry.of(snapshot) for snapshot in snapshots])


def run_place(args: argparse.Namespace) -> int:
    try:
        document = placement_body(args)
        if args.url is not None:
            answer = _ask(args, document)
            if answer is None:
                return EXIT_USAGE
        else:
            body = parse_body(document)
            config = demo_config() if args.demo else load_config(args.config)
            answer = place_locally(config, body)
    except PlacementError as error:
        print(f"virtcap: place: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        sys.stdout.write(answer.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(render_answer(answer))
    return 0 if answer.placed else EXIT_NOT_PLACED


def _ask(args: argparse.Namespace, body: dict[str, Any]) -> PlacementAnswer | None:
    url = args.url.rstrip("/") + "/api/v1/placements"
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if args.user:
        password = os.environ.get(PASSWORD_VARIABLE, "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{args.user}:{password}".encode()).decode()
    context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return PlacementAnswer.model_validate_json(response.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            message = json.loads(text).get("error", text)
        except (json.JSONDecodeError, AttributeError):
            message = text.strip()
        print(f"virtcap: place: {url}: HTTP {error.code}: {message}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as error:
        print(f"virtcap: place: cannot reach {args.url}: {getattr(error, 'reason', error)}", file=sys.stderr)
    except ValidationError as error:
        print(
            f"virtcap: place: {url}: not a placement answer: {error.error_count()} problem(s)",
            file=sys.stderr,
        )
    return None
