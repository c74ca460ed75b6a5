"""Claims carrying a flavor with extra specs, through the HTTP API of a running exporter: a pinned
flavor's claims take their cell's dedicated CPUs and hugepages on a replayed two-cell host, and
the next one is refused with the cells' reasons."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.claims_client import HASH, WRITER, auth, call, claim
from tests.support.serving import Server, running_server, value, wait_for
from virtcap.audit.capture_format import encode_capture
from virtcap.commands.main import main
from virtcap.demo.hostgen import PAGE_1G_KIB, FlavorSpec, GuestSpec, HostSpec, Hugepages, capture_document

GIB = 1024**3
PINNED_SPECS = {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "large"}

# Two sockets of 4 cores, 2 threads each: cell 0 holds CPUs 0-3 and 8-11, cell 1 CPUs 4-7 and 12-15.
# Core 0 of each socket (0, 8 and 4, 12) is shared, the other 12 CPUs dedicated, 6 a cell; 16 pages
# of 1 GiB a cell. A guest pinned to 3 CPUs of cell 1 in 4 of its pages leaves cell 0 6 dedicated
# CPUs and cell 1 3: p1.large (4 dedicated vCPUs, 4 GiB in large pages) fits once, in cell 0,
# though the host has 9 dedicated CPUs free, enough for two.
TWO_CELLS = HostSpec(
    name="two-cells",
    sockets=2,
    cores=4,
    threads=2,
    memory_gib=32,
    hugepages=(Hugepages(PAGE_1G_KIB, (16, 16)),),
    guests=(
        GuestSpec(
            name="pinned",
            vcpus=3,
            memory_mib=4096,
            cell=1,
            pins=(5, 13, 6),
            page_size_kib=PAGE_1G_KIB,
            flavor=FlavorSpec("p1.odd", 3, 4096, extra_specs=tuple(PINNED_SPECS.items())),
        ),
    ),
)


def write_placement_config(directory: Path) -> Path:
    capture = directory / "two-cells.json"
    capture.write_bytes(encode_capture(capture_document(TWO_CELLS)))
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""
audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  default_ttl: 10m
  max_ttl: 1h
  writers: {{{WRITER[0]}: "{HASH}"}}
pci: {{alias: [{{name: vf, vendor_id: '8086', product_id: '154c', device_type: type-VF}}]}}
hypervisors:
  - name: numa
    uri: "replay://{capture}"
    cpu_shared_set: "0,4,8,12"
    cpu_dedicated_set: "1-3,5-7,9-11,13-15"
flavors:
  - {{name: p1.large, vcpu: 4, memory: 4GiB, disk: 10GiB, extra_specs: {json.dumps(PINNED_SPECS)}}}
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 10GiB}}
"""
    )
    return config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_placement_config(tmp_path)


@pytest.fixture
def server(config: Path, tmp_path: Path) -> Iterator[Server]:
    with running_server(["--config", str(config)], tmp_path) as running:
        yield running


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the tests whose every claim is refused: they leave it as they found it."""
    directory = tmp_path_factory.mktemp("refusing")
    with running_server(["--config", str(write_placement_config(directory))], directory) as running:
        yield running


def metric(server: Server, name: str, **labels: str) -> float | None:
    return value(server.samples(), name, **labels)


def cell_used(server: Server, cell: int, resource: str, unit: str) -> float | None:
    labels = {"hypervisor": "numa", "cell": str(cell), "resource": resource, "unit": unit}
    return metric(server, "hypervisor_numa_cell_used", **labels)


def hugepages_used(server: Server, cell: int) -> float | None:
    labels = {"hypervisor": "numa", "cell": str(cell), "page_size_bytes": str(GIB)}
    return metric(server, "hypervisor_numa_cell_hugepages_used", **labels)


def schedulable(server: Server, flavor: str) -> float | None:
    return metric(server, "hypervisor_schedulable_instances", hypervisor="numa", flavor=flavor)


def numa_cell(server: Server, cell: int) -> tuple[int, int]:
    """The capacity document's dedicated CPUs and 1 GiB pages used in the cell."""
    status, capacity = call(server, "GET", "/api/v1/capacity")
    assert status == 200, capacity
    hypervisor = next(h for h in capacity["hypervisors"] if h["name"] == "numa")
    found = next(c for c in hypervisor["numa_cells"] if c["id"] == cell)
    pages = next(p for p in found["pages"] if p["size_bytes"] == GIB)
    return found["resources"]["pcpu"]["used"], pages["used"]


def assert_held_in_cell_0(server: Server, held: bool) -> None:
    """What a claim of p1.large holds in cell 0, or not, and how many more fit."""
    pcpus, pages, count = (4, 4, 0) if held else (0, 0, 1)
    wait_for(lambda: schedulable(server, "p1.large") == count, 3, what=f"p1.large schedulable == {count}")
    assert cell_used(server, 0, "pcpu", "cpus") == pcpus
    assert hugepages_used(server, 0) == pages
    assert cell_used(server, 1, "pcpu", "cpus") == 3 and hugepages_used(server, 1) == 4
    assert numa_cell(server, 0) == (pcpus, pages) and numa_cell(server, 1) == (3, 4)


def test_the_host_fits_one_p1_large_in_cell_0_though_it_has_cpus_for_two(server: Server) -> None:
    assert_held_in_cell_0(server, held=False)
    assert metric(server, "hypervisor_resource_free", hypervisor="numa", resource="pcpu", unit="cpus") == 9


@pytest.mark.parametrize(
    "body",
    [
        {"flavor": "p1.large"},
        {"vcpu": 4, "memory": "4GiB", "disk": "10GiB", "extra_specs": PINNED_SPECS},
    ],
    ids=["flavor", "extra-specs"],
)
def test_a_pinned_claim_takes_its_cell_and_the_next_is_refused_with_the_cells_reasons(
    server: Server, body: dict[str, Any]
) -> None:
    status, created = claim(server, hypervisor="numa", owner="ci", **body)
    assert status == 201, created
    assert (created["vcpu"], created["pcpu"], created["memory"], created["disk"]) == (0, 4, 4 * GIB, 10 * GIB)
    assert created["resources"] == {"PCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 10}
    assert created["flavor"] == body.get("flavor")
    assert created["extra_specs"] == PINNED_SPECS
    assert_held_in_cell_0(server, held=True)

    status, refused = claim(server, hypervisor="numa", **body)
    assert status == 409, refused
    reasons = refused["reasons"]["numa"]
    assert any(r.startswith("NUMA: cell 0: ") and "dedicated CPUs" in r for r in reasons), reasons
    assert any(r.startswith("NUMA: cell 1: ") for r in reasons), reasons
    assert not any(r.startswith("Free") for r in reasons), reasons  # the whole host has room
    status, anywhere = claim(server, hypervisor="any", **body)
    assert status == 409 and anywhere["reasons"]["numa"] == reasons

    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth()) == (200, created)
    assert_held_in_cell_0(server, held=False)
    status, again = claim(server, hypervisor="any", **body)
    assert status == 201 and again["hypervisor"] == "numa", again
    assert_held_in_cell_0(server, held=True)


def test_a_flavor_without_extra_specs_is_claimed_as_written(server: Server) -> None:
    status, created = claim(server, hypervisor="numa", flavor="m1.small")
    assert status == 201, created
    assert created["resources"] == {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 10}
    assert (created["flavor"], created["extra_specs"]) == ("m1.small", {})
    status, plain = claim(server, hypervisor="numa", vcpu=1)
    assert status == 201 and (plain["flavor"], plain["extra_specs"]) == (None, {})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"flavor": "p1.large", "vcpu": 4},
            "flavor: the flavor says what the claim asks for; expected none of vcpu beside it",
        ),
        (
            {"flavor": "p1.large", "extra_specs": PINNED_SPECS},
            "expected none of extra_specs beside it",
        ),
        ({"flavor": "p9"}, "flavor: unknown flavor 'p9'; expected one of: p1.large, m1.small"),
        (
            {"vcpu": 4, "pcpu": 1, "extra_specs": PINNED_SPECS},
            "extra_specs: the extra specs say what pcpu would",
        ),
        (
            {"vcpu": 4, "resources": {"CUSTOM_X": 1}, "extra_specs": PINNED_SPECS},
            "expected no resources beside them",
        ),
        ({"memory": "4GiB", "extra_specs": PINNED_SPECS}, "extra_specs: a flavor has at least one vCPU"),
        ({"vcpu": 4, "memory": "4GiB", "extra_specs": {"hw:numa_nodes": "0"}}, "extra_specs: hw:numa_nodes"),
        (
            {"vcpu": 4, "extra_specs": {"hw:cpu_policy": "pinned"}},
            "extra_specs: hw:cpu_policy: expected one of shared, dedicated, mixed, got 'pinned'",
        ),
        (
            {"vcpu": 1, "memory": "1GiB", "extra_specs": {"pci_passthrough:alias": "gpu:1"}},
            "extra_specs.pci_passthrough:alias: unknown alias 'gpu'; expected one of: vf",
        ),
        (
            {"vcpu": 1, "memory": "1GiB", "extra_specs": {"pci_passthrough:alias": "vf"}},
            "extra_specs.pci_passthrough:alias: 'vf' is not NAME:COUNT",
        ),
        (
            {"vcpu": 4, "memory": "4GiB", "extra_specs": {**PINNED_SPECS, "resources:MEMORY_MB": "2048"}},
            "extra_specs: resources:VCPU, resources:PCPU or resources:MEMORY_MB ask Placement for other",
        ),
        ({"vcpu": 1, "extra_specs": {"k" * 256: "v"}}, "extra_specs"),
    ],
)
def test_a_bad_flavor_or_extra_spec_gets_400_with_a_clear_message(
    refusing: Server, body: dict[str, Any], message: str
) -> None:
    status, answer = claim(refusing, hypervisor="numa", **body)
    assert status == 400, answer
    assert message in answer["error"], answer
    assert "\n" not in answer["error"]
    assert call(refusing, "GET", "/api/v1/claims")[1] == {"claims": []}


def test_flavor_and_extra_specs_survive_a_restart(config: Path, tmp_path: Path) -> None:
    with running_server(["--config", str(config)], tmp_path) as server:
        status, named = claim(server, hypervisor="numa", flavor="p1.large")
        assert status == 201, named
    with running_server(["--config", str(config)], tmp_path) as server:
        assert call(server, "GET", f"/api/v1/claims/{named['id']}") == (200, named)
        assert_held_in_cell_0(server, held=True)
        status, refused = claim(server, hypervisor="numa", vcpu=4, memory="4GiB", extra_specs=PINNED_SPECS)
        assert status == 409, refused


def test_virtcap_claim_create_names_a_flavor_or_extra_specs(
    server: Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VIRTCAP_PASSWORD", WRITER[1])
    common = ["claim", "create", "--url", server.base_url, "--user", WRITER[0], "--hypervisor", "numa"]
    assert main([*common, "--flavor", "p1.large"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert (created["flavor"], created["extra_specs"], created["pcpu"]) == ("p1.large", PINNED_SPECS, 4)
    assert call(server, "DELETE", f"/api/v1/claims/{created['id']}", headers=auth())[0] == 200

    specs = [arg for key, spec in PINNED_SPECS.items() for arg in ("--extra-spec", f"{key}={spec}")]
    assert main([*common, "--vcpu", "4", "--memory", "4GiB", *specs]) == 0
    created = json.loads(capsys.readouterr().out)
    assert (created["flavor"], created["extra_specs"], created["pcpu"]) == (None, PINNED_SPECS, 4)
    assert main([*common, "--vcpu", "4", "--memory", "4GiB", *specs]) == 1
    assert "NUMA: cell 0" in capsys.readouterr().err

    assert main([*common, "--flavor", "p1.large", "--vcpu", "1"]) == 1
    assert "expected none of vcpu beside it" in capsys.readouterr().err
    assert main([*common, "--vcpu", "1", "--extra-spec", "a=1", "--extra-spec", "a=2"]) == 2
    assert "--extra-spec: a given more than once" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*common, "--vcpu", "1", "--extra-spec", "hw:cpu_policy"])
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_isolated_emulator_threads_take_one_more_dedicated_cpu_in_the_cell(server: Server) -> None:
    specs = {**PINNED_SPECS, "hw:emulator_threads_policy": "isolate"}
    status, created = claim(server, hypervisor="numa", vcpu=2, memory="2GiB", extra_specs=specs)
    assert status == 201, created
    assert created["resources"] == {"PCPU": 3, "MEMORY_MB": 2048}
    wait_for(lambda: cell_used(server, 0, "pcpu", "cpus") == 3, 3, what="cell 0 pcpu used == 3")
    assert hugepages_used(server, 0) == 2
