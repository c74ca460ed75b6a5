"""`virtcap claim create|list|delete`: the claims API of a running exporter, for operators."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from virtcap.commands.arguments import EXIT_USAGE, extra_spec_argument
from virtcap.commands.client import add_server_arguments, call_api
from virtcap.model.resources import STANDARD_CLASSES

_STANDARD = tuple(resource.label for resource in STANDARD_CLASSES)
"""The claim body's own fields for the standard classes; any class goes in its `resources`."""


def _resource(text: str) -> tuple[str, int]:
    """`CLASS=N`: the class is checked by the exporter, which names the classes there are."""
    name, sep, amount = text.partition("=")
    if not sep or not name or not amount.isascii() or not amount.isdigit():
        raise argparse.ArgumentTypeError(f"expected CLASS=N such as CUSTOM_FPGA=1, got {text!r}")
    return name, int(amount)


def _count(text: str) -> int:
    """A whole number of instances, at least 1; the exporter checks the upper bound."""
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of instances of at least 1, got {text!r}")
    return int(text)


def add_parser(commands: Any) -> None:
    claim = commands.add_parser("claim", help="create, list or delete claims on a running exporter")
    actions = claim.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="claim capacity for a build in flight")
    list_ = actions.add_parser("list", help="the pending claims")
    delete = actions.add_parser("delete", help="release a claim")
    for parser in (create, list_, delete):
        add_server_arguments(parser)
    create.add_argument("--hypervisor", required=True, help="a configured hypervisor, or 'any'")
    create.add_argument("--vcpu", type=int, help="shared cpus (VCPU)")
    create.add_argument("--pcpu", type=int, help="dedicated cpus (PCPU)")
    create.add_argument("--memory", help="bytes or with an IEC suffix, such as 4GiB")
    create.add_argument("--disk", help="bytes or with an IEC suffix, such as 40GiB")
    create.add_argument(
        "--resource",
        action="append",
        type=_resource,
        default=[],
        metavar="CLASS=N",
        help="any class by Placement's name, in Placement's unit, such as CUSTOM_FPGA=1 or "
        "MEMORY_MB=4096; repeat it for more classes",
    )
    create.add_argument(
        "--flavor",
        help="a configured flavor, or one discovered in the fleet's Nova metadata: the claim asks for "
        "what one instance of it asks for",
    )
    create.add_argument(
        "--extra-spec",
        action="append",
        type=extra_spec_argument,
        default=[],
        metavar="KEY=VALUE",
        help="a Nova flavor extra spec for a flavor of --vcpu, --memory and --disk, such as "
        "hw:cpu_policy=dedicated; repeat it for more specs",
    )
    create.add_argument(
        "--count",
        type=_count,
        help="how many instances, all or nothing, held together in one claim (default: 1); with "
        "--hypervisor any the exporter's scheduler places each",
    )
    create.add_argument("--ttl", help="how long to hold the claim, such as 15m (default: the exporter's)")
    create.add_argument(
        "--domain-uuid", help="the UUID the domain will have: its appearance releases the claim"
    )
    create.add_argument("--owner", default="", help="free text: who or what holds the claim")
    create.add_argument(
        "--availability-zone",
        metavar="ZONE",
        help="only hypervisors of this availability zone (config groups)",
    )
    delete.add_argument("claim_id")


def run(args: argparse.Namespace) -> int:
    """Prints the server's JSON answer; exit 0 on success, 1 when the server refused."""
    base = args.url.rstrip("/") + "/api/v1/claims"
    if args.action == "create":
        body: dict[str, Any] = {"hypervisor": args.hypervisor}
        # only the classes asked for: a class is named once, here or in --resource
        body.update({name: getattr(args, name) for name in _STANDARD if getattr(args, name) is not None})
        named = Counter(name for name, _ in args.resource)
        twice = sorted(name for name, count in named.items() if count > 1)
        if twice:
            print(f"virtcap: --resource: {', '.join(twice)} given more than once", file=sys.stderr)
            return EXIT_USAGE
        if args.resource:
            body["resources"] = dict(args.resource)
        keys = Counter(key for key, _ in args.extra_spec)
        twice = sorted(key for key, count in keys.items() if count > 1)
        if twice:
            print(f"virtcap: --extra-spec: {', '.join(twice)} given more than once", file=sys.stderr)
            return EXIT_USAGE
        if args.extra_spec:
            body["extra_specs"] = dict(args.extra_spec)
        if args.flavor is not None:
            body["flavor"] = args.flavor
        if args.count is not None:
            body["count"] = args.count
        body["owner"] = args.owner
        if args.ttl:
            body["ttl"] = args.ttl
        if args.domain_uuid:
            body["domain_uuid"] = args.domain_uuid
        if args.availability_zone:
            body["availability_zone"] = args.availability_zone
        return call_api(args, "POST", base, body)
    if args.action == "delete":
        return call_api(args, "DELETE", f"{base}/{args.claim_id}")
    return call_api(args, "GET", base)
