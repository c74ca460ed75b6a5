"""docs/scenarios.md's examples (docs/examples/scenarios/) parse, run on the demo fleet and still say
what the page says of them, so that the page cannot rot; and `virtcap plan scenario` names the
file in every error, those found once the document is read against the fleet too."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.support.files import ROOT
from virtcap.contract.scenarios import ScenarioAnswer
from virtcap.demo import demo_config
from virtcap.service.scenarios import read_scenario_file, scenario_locally

EXAMPLES = ROOT / "docs" / "examples" / "scenarios"
PAGE = ROOT / "docs" / "scenarios.md"
EXIT_USAGE = 2


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


@cache
def answer(name: str, solve_for: str | None = None) -> ScenarioAnswer:
    """The example run as `virtcap plan scenario FILE --demo [--solve-for ...]` runs it."""
    path = EXAMPLES / name
    return scenario_locally(demo_config(), read_scenario_file(path), path.parent, solve_for)


def test_there_are_examples_and_the_page_shows_each() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert len(examples()) >= 3
    for path in examples():
        assert f"virtcap plan scenario docs/examples/scenarios/{path.name} --demo" in page, path.name


@pytest.mark.parametrize("path", examples(), ids=lambda path: path.stem)
def test_each_example_runs_on_the_demo_and_everything_finds_a_host(path: Path) -> None:
    found = answer(path.name)
    assert found.unplaced == []
    assert all(move.destination is not None for move in found.displaced)
    assert found.after.hypervisors == (found.before.hypervisors + len(found.added) - len(found.removed))


def test_buying_for_a_customer_places_the_demand_on_the_new_hypervisors_and_four_are_needed() -> None:
    found = answer("buy-for-customer.yaml")
    assert found.added == [f"new-az1-{n}" for n in range(1, 5)]
    assert all(set(entry.hypervisors) <= set(found.added) for entry in found.placed)
    assert found.after.failures_tolerated > found.before.failures_tolerated
    solved = answer("buy-for-customer.yaml", "add_hypervisors")
    count = solved.solved_add_hypervisors
    assert count == len(found.added)
    assert solved.tries[str(count)] is True
    assert solved.tries[str(count - 1)] is False


def test_retiring_a_rack_rehomes_it_on_the_replacements() -> None:
    found = answer("retire-rack.yaml")
    assert found.removed == ["compute-01", "compute-04", "compute-05"]
    assert found.displaced
    assert found.after.failures_tolerated > found.before.failures_tolerated


def test_draining_a_host_keeps_it_in_the_fleet_out_of_service() -> None:
    found = answer("drain-host.yaml")
    assert found.drained == ["compute-06"]
    assert found.after.eligible == found.before.eligible - 1
    assert found.after.schedulable["w1.medium"] < found.before.schedulable["w1.medium"]


def test_raising_the_cpu_ratio_sells_more_in_its_zone_and_strands_vcpus() -> None:
    found = answer("raise-cpu-ratio.yaml")
    before, after = found.before.sellable_by_zone, found.after.sellable_by_zone
    assert after["az-2"]["m1.small"] > before["az-2"]["m1.small"]
    assert after["az-1"] == before["az-1"]
    assert found.after.stranded["vcpu"] > found.before.stranded["vcpu"]


def test_a_scenario_naming_what_the_fleet_lacks_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "missing-rack.yaml"
    path.write_text("drain:\n  groups: {rack: [r9]}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "virtcap", "plan", "scenario", str(path), "--demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stdout == ""
    assert f"{path}: drain.groups.rack:" in done.stderr
    assert "Traceback" not in done.stderr
