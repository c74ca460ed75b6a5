"""`virtcap plan scenario FILE`: the fleet's answers before and after a what-if scenario (hardware
added, removed or drained, policies changed, demand placed), on one audit of the fleet (--config,
--demo) or on a running exporter (--url, `POST /api/v1/plans/scenarios`, captures refused there).
`--solve-for add_hypervisors`: the fewest copies of the scenario's one added kind that fit all its
demand keeping the reserve ("what do we buy").

Exit 0 with an answer (demand left unplaced is an answer too), 2 when the scenario is wrong (here
or as the exporter's 400: one line per problem, naming the file and the key), 1 when the exporter
cannot be reached or refuses otherwise (401, 403, 503).
"""

from __future__ import annotations

import argparse
import json
import sys
from http import HTTPStatus
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from virtcap.commands.arguments import EXIT_USAGE
from virtcap.commands.client import (
    EXIT_REFUSED,
    Exporter,
    ExporterRefusedError,
    ExporterUnreachableError,
    add_answer_source,
)
from virtcap.config import load_config
from virtcap.config.yamlfile import ConfigError, load_yaml_file
from virtcap.contract.scenarios import MAX_SCENARIO_BYTES, ScenarioAnswer, ScenarioError, parse_scenario
from virtcap.demo import demo_config
from virtcap.exposition.plan_table import render_scenario
from virtcap.service.planner import PLAN_GRACE_SECONDS
from virtcap.service.scenarios import SCENARIO_TIME_LIMIT_SECONDS, SOLVE_FOR, scenario_locally

SCENARIOS_PATH = "/api/v1/plans/scenarios"


def add_parser(plans: Any) -> None:
    scenario = plans.add_parser(
        "scenario",
        help="the fleet's answers before and after a what-if scenario (docs/scenarios.md)",
        description="Apply a what-if scenario (hypervisors added, removed or drained, policies changed, "
        "demand placed through the simulated scheduler) to the fleet and compare every answer before "
        "and after. Exit 0 with an answer, 2 when the scenario is wrong, 1 when the exporter (--url) "
        "cannot be reached or refuses.",
    )
    scenario.add_argument("file", metavar="FILE", help="the scenario (YAML; docs/scenarios.md)")
    scenario.add_argument(
        "--solve-for",
        choices=SOLVE_FOR,
        help="find the fewest copies of the scenario's one add_hypervisors entry that fit all its "
        "demand keeping the reserve",
    )
    add_answer_source(scenario, SCENARIOS_PATH)


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        raw = load_yaml_file(path, MAX_SCENARIO_BYTES)
        document = parse_scenario(raw, str(path))
        if args.url is not None:
            answer, code = _ask(Exporter(args.url, args.user, args.ca_file), raw, args.solve_for, path)
            if answer is None:
                return code
        else:
            config = demo_config() if args.demo else load_config(args.config)
            answer = scenario_locally(config, document, path.parent, args.solve_for)
    except ConfigError as error:  # the file (unreadable, not YAML, too large) or --config's
        print(f"virtcap: plan scenario: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ScenarioError as error:  # the parser's lines name the file, the resolution's do not
        for line in str(error).splitlines():
            named = line if line.startswith(f"{path}:") else f"{path}: {line}"
            print(f"virtcap: plan scenario: {named}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        sys.stdout.write(answer.as_json())
    else:
        sys.stdout.write(render_scenario(answer))
    return 0


def _ask(
    exporter: Exporter, document: object, solve_for: str | None, path: Path
) -> tuple[ScenarioAnswer | None, int]:
    """The exporter's answer, or None and the exit code once why there is none has been printed."""
    url = exporter.endpoint(SCENARIOS_PATH) + (f"?solve_for={solve_for}" if solve_for else "")
    timeout = SCENARIO_TIME_LIMIT_SECONDS + PLAN_GRACE_SECONDS + 30  # its worker is stopped before
    body: dict[str, Any] = document if isinstance(document, dict) else {}
    try:
        text = exporter.send("POST", url, body, timeout=timeout)
        return ScenarioAnswer.model_validate_json(text), 0
    except (TypeError, ValueError) as error:  # YAML values JSON cannot carry (a date)
        if isinstance(error, ValidationError):
            print(
                f"virtcap: plan scenario: {url}: not a scenario's answer: {error.error_count()} problem(s)",
                file=sys.stderr,
            )
            return None, EXIT_REFUSED
        print(f"virtcap: plan scenario: {path}: cannot be sent as JSON: {error}", file=sys.stderr)
        return None, EXIT_USAGE
    except ExporterRefusedError as error:
        try:
            message = str(json.loads(error.text).get("error", error.text))
        except (json.JSONDecodeError, AttributeError):
            message = error.text.strip()
        if error.status == HTTPStatus.BAD_REQUEST:  # the scenario, as the exporter read it
            print(f"virtcap: plan scenario: {path}: {message}", file=sys.stderr)
            return None, EXIT_USAGE
        print(f"virtcap: plan scenario: {url}: HTTP {error.status}: {message}", file=sys.stderr)
    except ExporterUnreachableError as error:
        print(f"virtcap: plan scenario: cannot reach {error.url}: {error.reason}", file=sys.stderr)
    return None, EXIT_REFUSED
