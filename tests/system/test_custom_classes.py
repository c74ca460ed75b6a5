"""Adding a resource class end to end: a CUSTOM_* inventory declared on a hypervisor, consumed by
a Nova guest's `resources:CUSTOM_...` extra spec, shown in the exposition and the report, and
claimable through the API, with Placement's min_unit, max_unit and step_size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.claims_client import HASH, WRITER, call, claim
from tests.support.serving import running_server, value, wait_for
from virtcap.demo.fleetgen import RUNNING, DomainSpec, FlavorSpec, HostSpec, write_fleet

ACCELERATED = FlavorSpec(
    "a1.fpga", 2, 2048, 20, extra_specs=(("resources:CUSTOM_FPGA", "2"), ("resources1:CUSTOM_FPGA", "1"))
)


def _fleet(directory: Path) -> Path:
    guest = DomainSpec(
        name="accel-1",
        uuid="6f1c5a52-3b7e-4a39-9f8e-0c1d2e3f4a5b",
        state=RUNNING,
        vcpus=2,
        memory_mib=2048,
        current_memory_mib=2048,
        flavor=ACCELERATED,
    )
    paths = write_fleet([HostSpec("accel", 16, 64, 500, 10, domains=[guest])], directory / "fleet")
    config = directory / "virtcap.yaml"
    config.write_text(
        f"""
audit: {{interval: 1h}}
claims:
  database: {directory / "claims.sqlite"}
  writers: {{{WRITER[0]}: "{HASH}"}}
defaults:
  inventories:
    CUSTOM_LICENCE: {{total: 4}}
hypervisors:
  - name: accel
    uri: "test://{paths["accel"]}"
    inventories:
      CUSTOM_FPGA: {{total: 8, reserved: 1, max_unit: 4, step_size: 1, allocation_ratio: 1.0}}
  - name: plain
    uri: "test://{paths["accel"]}"
    inventories: {{}}
"""
    )
    return config


def test_a_custom_class_from_configuration_to_claim(tmp_path: Path) -> None:
    config = _fleet(tmp_path)
    fpga = {"hypervisor": "accel", "resource": "custom_fpga", "unit": "integer"}
    with running_server(["--config", str(config)], tmp_path) as server:
        samples = server.samples()
        assert value(samples, "hypervisor_resource_size", **fpga) == 8
        assert value(samples, "hypervisor_resource_reserved", **fpga) == 1
        assert value(samples, "hypervisor_resource_limit", **fpga) == 7
        assert value(samples, "hypervisor_resource_used", **fpga) == 3  # 2 + 1 of a granular group
        assert value(samples, "hypervisor_resource_free", **fpga) == 4
        licence = {"hypervisor": "plain", "resource": "custom_licence", "unit": "integer"}
        assert value(samples, "hypervisor_resource_size", **licence) == 4  # from defaults
        # the guest is on "plain" too, which has no FPGA: its usage shows, against nothing
        no_fpga = {"hypervisor": "plain", "resource": "custom_fpga", "unit": "integer"}
        assert (
            value(samples, "hypervisor_resource_size", **no_fpga),
            value(samples, "hypervisor_resource_free", **no_fpga),
        ) == (0, -3)

        status, refused = claim(server, hypervisor="accel", resources={"CUSTOM_FPGA": 5})
        assert status == 409
        assert refused["reasons"]["accel"] == [
            "Requested custom_fpga 5 CUSTOM_FPGA > max_unit 4 CUSTOM_FPGA: above max_unit"
        ]
        status, held = claim(server, hypervisor="accel", vcpu=1, resources={"CUSTOM_FPGA": 4})
        assert status == 201, held
        assert held["resources"] == {"VCPU": 1, "CUSTOM_FPGA": 4}
        wait_for(lambda: value(server.samples(), "hypervisor_resource_free", **fpga) == 0, 3, what="claimed")
        status, full = claim(server, hypervisor="accel", resources={"CUSTOM_FPGA": 1})
        assert status == 409
        assert full["reasons"]["accel"] == ["Free custom_fpga 0.00 CUSTOM_FPGA < requested 1 CUSTOM_FPGA"]
        status, anywhere = claim(server, hypervisor="any", resources={"CUSTOM_LICENCE": 1})
        assert status == 201 and anywhere["hypervisor"] in ("accel", "plain"), anywhere
        status, unknown = claim(server, hypervisor="accel", resources={"CUSTOM_NOWHERE": 1})
        assert status == 409
        assert unknown["reasons"]["accel"] == [
            "Requested custom_nowhere 1 CUSTOM_NOWHERE: no inventory of CUSTOM_NOWHERE on this hypervisor"
        ]
        assert call(server, "GET", "/api/v1/claims")[1]["claims"][0]["resources"] == held["resources"]

    report = subprocess.run(
        [sys.executable, "-m", "virtcap", "audit", "--config", str(config), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    hypervisors = {entry["name"]: entry for entry in json.loads(report.stdout)["hypervisors"]}
    custom = hypervisors["accel"]["resources"]["custom_fpga"]
    assert (custom["total"], custom["used"], custom["free"], custom["unit"]) == (8, 3, 4, "integer")
