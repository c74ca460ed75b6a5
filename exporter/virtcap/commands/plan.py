"""`virtcap plan`: what could be done to the fleet, as dry runs. `virtcap plan consolidate`: which
hypervisors live migrations could empty, and the moves, on one audit of the fleet (--config,
--demo) or on a running exporter (--url, `POST /api/v1/plans/consolidation`). The same body and
answer either way.

Exit 0 with a plan (emptying none is a plan too), 2 when the options are wrong (a bad flag, an
unknown hypervisor or zone, more kept free than there are: here or as the exporter's 400, one line
naming the flag), 1 when the exporter cannot be reached or refuses otherwise (401, 403, 503).
"""

from __future__ import annotations

import argparse
import json
import sys
from http import HTTPStatus
from typing import Any

from pydantic import ValidationError

from virtcap.commands import plan_reclaim, plan_runway, plan_scenario
from virtcap.commands.arguments import EXIT_USAGE
from virtcap.commands.client import (
    EXIT_REFUSED,
    Exporter,
    ExporterRefusedError,
    ExporterUnreachableError,
    add_answer_source,
)
from virtcap.config import load_config
from virtcap.contract.plans import ConsolidationAnswer, PlanError, parse_consolidation_body
from virtcap.demo import demo_config
from virtcap.exposition.plan_table import render_consolidation_plan
from virtcap.service.consolidation import plan_locally
from virtcap.service.planner import PLAN_GRACE_SECONDS, PLAN_TIME_LIMIT_SECONDS

CONSOLIDATION_PATH = "/api/v1/plans/consolidation"
_FLAGS = {
    "max_moves": "--max-moves",
    "keep_free": "--keep-free",
    "availability_zone": "--availability-zone",
    "exclude_hosts": "--exclude-host",
}
"""The body's keys by the flags that set them: an error names the flag."""


def add_parser(commands: Any) -> None:
    plan = commands.add_parser(
        "plan",
        help="dry-run plans for the fleet (nothing is held or moved)",
        description="Plans for the fleet, computed with Nova's scheduler simulated; virtcap never "
        "moves a domain.",
    )
    plans = plan.add_subparsers(dest="plan", required=True, metavar="PLAN")
    consolidate = plans.add_parser(
        "consolidate",
        help="which hypervisors live migrations could empty, and the moves",
        description="Which hypervisors live migrations could empty (as OpenStack Watcher's workload "
        "consolidation would), and the moves in order, each feasible at its step under the "
        "scheduler's filters and claim test. Exit 0 with a plan, 2 when the options are wrong, "
        "1 when the exporter (--url) cannot be reached or refuses.",
    )
    consolidate.add_argument(
        "--max-moves", metavar="N", help="at most N live migrations (whole hypervisors; default: no bound)"
    )
    consolidate.add_argument(
        "--keep-free",
        metavar="K",
        default="0",
        help="empty K hypervisors fewer than the plan could, as failover room (default: 0)",
    )
    consolidate.add_argument(
        "--availability-zone", metavar="ZONE", help="only this availability zone's hypervisors"
    )
    consolidate.add_argument(
        "--exclude-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a hypervisor neither emptied nor filled (repeat for more)",
    )
    add_answer_source(consolidate, CONSOLIDATION_PATH)
    plan_runway.add_parser(plans)
    plan_reclaim.add_parser(plans)
    plan_scenario.add_parser(plans)


def consolidation_body(args: argparse.Namespace) -> dict[str, Any]:
    """The API's body from the flags (checked by ConsolidationBody, here or by the exporter)."""
    body: dict[str, Any] = {
        "keep_free": _whole_number(args.keep_free, "--keep-free"),
        "exclude_hosts": list(args.exclude_host),
    }
    if args.max_moves is not None:
        body["max_moves"] = _whole_number(args.max_moves, "--max-moves")
    if args.availability_zone is not None:
        body["availability_zone"] = args.availability_zone
    return body


def _whole_number(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise PlanError(f"{flag}: expected a whole number, got {text!r}") from None


def flag_message(message: str) -> str:
    """The body's keys in a message named by their flags (`max_moves: ...` is `--max-moves: ...`)."""
    return "; ".join(_flag_part(part) for part in message.split("; "))


def _flag_part(part: str) -> str:
    for key, flag in _FLAGS.items():
        if part.startswith(key) and part[len(key) : len(key) + 1] in (":", "["):
            rest = part[len(key) :]
            if rest.startswith("["):  # exclude_hosts[2]: the flag given third
                rest = rest[rest.find("]") + 1 :]
            return flag + rest
    return part


def run(args: argparse.Namespace) -> int:
    if args.plan == "runway":
        return plan_runway.run(args)
    if args.plan == "reclaim":
        return plan_reclaim.run(args)
    if args.plan == "scenario":
        return plan_scenario.run(args)
    if args.plan != "consolidate":  # argparse allows only the plans above
        raise AssertionError(args.plan)
    try:
        document = consolidation_body(args)
        if args.url is not None:
            answer, code = _ask(Exporter(args.url, args.user, args.ca_file), document)
            if answer is None:
                return code
        else:
            body = parse_consolidation_body(document)
            config = demo_config() if args.demo else load_config(args.config)
            answer = plan_locally(config, body)
    except PlanError as error:
        print(f"virtcap: plan consolidate: {flag_message(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        sys.stdout.write(answer.as_json())
    else:
        sys.stdout.write(render_consolidation_plan(answer))
    return 0


def _ask(exporter: Exporter, body: dict[str, Any]) -> tuple[ConsolidationAnswer | None, int]:
    """The exporter's answer, or None and the exit code once why there is none has been printed."""
    url = exporter.endpoint(CONSOLIDATION_PATH)
    timeout = PLAN_TIME_LIMIT_SECONDS + PLAN_GRACE_SECONDS + 30  # its worker is stopped before
    try:
        return ConsolidationAnswer.model_validate_json(exporter.send("POST", url, body, timeout=timeout)), 0
    except ExporterRefusedError as error:
        try:
            message = str(json.loads(error.text).get("error", error.text))
        except (json.JSONDecodeError, AttributeError):
            message = error.text.strip()
        if (
            error.status == HTTPStatus.BAD_REQUEST
        ):  # the options, as the exporter checked them: named by their flags
            print(f"virtcap: plan consolidate: {flag_message(message)}", file=sys.stderr)
            return None, EXIT_USAGE
        print(f"virtcap: plan consolidate: {url}: HTTP {error.status}: {message}", file=sys.stderr)
    except ExporterUnreachableError as error:
        print(f"virtcap: plan consolidate: cannot reach {error.url}: {error.reason}", file=sys.stderr)
    except ValidationError as error:
        print(
            f"virtcap: plan consolidate: {url}: not a consolidation plan: {error.error_count()} problem(s)",
            file=sys.stderr,
        )
    return None, EXIT_REFUSED
