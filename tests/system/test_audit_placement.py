"""`virtcap audit --placement`, the real command line against test-driver hypervisors and a real
Placement loaded with every kind of drift (tests/support/placement_fleet.py): each planted consumer
by UUID in its hypervisor's right section of the tables, the JSON's `placement` the API's document;
exit 2 naming the key without `placement:`, exit 1 in one line when Placement cannot be read."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.placement_fleet import EXPECTED, LEAKED, UUIDS, plant, write_fleet
from tests.support.placement_loader import PlacementLoader
from tests.support.placement_server import PlacementServer, running_placement
from tests.support.serving import free_port

SECTIONS = ("inventory drift", "orphaned consumers", "unallocated domains", "mismatched allocations")


@pytest.fixture(scope="module")
def placement(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlacementServer]:
    with running_placement(tmp_path_factory.mktemp("placement")) as server:
        plant(PlacementLoader(server.base_url))
        yield server


def audit(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def sections(output: str) -> dict[tuple[str, str], str]:
    """The Placement part of the tables, per (hypervisor, section heading's first words): its lines."""
    found: dict[tuple[str, str], str] = {}
    placement = output[output.index("\nPlacement (") :]
    hypervisor = section = ""
    for line in placement.splitlines()[1:]:
        if line and not line.startswith(" "):
            hypervisor, section = line.split(":", 1)[0], "heading"
        elif line.startswith("  ") and not line.startswith("    "):
            section = next((name for name in SECTIONS if line.strip().startswith(name)), line.strip())
        found[hypervisor, section] = found.get((hypervisor, section), "") + line + "\n"
    return found


@pytest.mark.upstream
def test_every_planted_consumer_is_in_its_section(placement: PlacementServer, tmp_path: Path) -> None:
    config = str(write_fleet(tmp_path, placement.base_url))
    result = audit("--config", config, "--placement")
    assert result.returncode == 0, result.stderr
    found = sections(result.stdout)
    assert "hv1-node" in found["hv1", "heading"] and "hv2-node" in found["hv2", "heading"]
    assert LEAKED in found["hv1", "orphaned consumers"]
    assert UUIDS["b"] in found["hv1", "unallocated domains"]
    assert UUIDS["c"] in found["hv1", "mismatched allocations"]
    assert "reserved" in found["hv1", "inventory drift"] and "memory" in found["hv1", "inventory drift"]
    assert "total" in found["hv2", "inventory drift"] and "vcpu" in found["hv2", "inventory drift"]
    [excused] = [text for (name, section), text in found.items() if name == "hv1" and "migrations" in section]
    assert UUIDS["m"] in excused
    # no planted consumer anywhere else
    for uuid, where in (
        (LEAKED, "orphaned consumers"),
        (UUIDS["b"], "unallocated domains"),
        (UUIDS["c"], "mismatched allocations"),
    ):
        assert [key for key, text in found.items() if uuid in text] == [("hv1", where)]
    assert not any(UUIDS["a"] in text for text in found.values())

    as_json = audit("--config", config, "--placement", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert {entry["name"] for entry in document["hypervisors"]} == {"hv1", "hv2"}
    drift = {entry.pop("hypervisor"): entry for entry in document["placement"]["hypervisors"]}
    assert drift == EXPECTED and document["placement"]["up"] is True


def test_without_a_placement_section_exit_2_names_the_key(tmp_path: Path) -> None:
    for arguments in (["--config", str(write_fleet(tmp_path, None))], ["--demo"]):
        result = audit(*arguments, "--placement")
        assert result.returncode == 2, result
        assert "placement:" in result.stderr and "Traceback" not in result.stderr
        assert result.stdout == ""  # refused before auditing anything


def test_placement_unreachable_is_one_line_and_exit_1_after_the_audit(tmp_path: Path) -> None:
    config = str(write_fleet(tmp_path, f"http://127.0.0.1:{free_port()}"))
    for arguments in ([], ["--format", "json"]):
        result = audit("--config", config, "--placement", *arguments)
        assert result.returncode == 1, result
        [line] = result.stderr.splitlines()
        assert line.startswith("virtcap: placement: not read: ")
        assert "hv1" in result.stdout  # the audit is printed all the same
    document = json.loads(result.stdout)
    assert document["placement"]["up"] is False and document["placement"]["hypervisors"] == []
