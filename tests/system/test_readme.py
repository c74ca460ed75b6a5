"""The configuration page's full example (docs/configuration.md) is a configuration virtcap loads:
what it shows is what works."""

from __future__ import annotations

from pathlib import Path

from tests.support.files import ROOT
from virtcap.config import parse_config
from virtcap.model.resources import GIB, Resource

CONFIGURATION_PAGE = ROOT / "docs/configuration.md"
SECTION = "# Configuration"
HASH_PLACEHOLDER = "$2y$10$..."
SECRET_FILE = "/run/secrets/placement"
DEMO_WRITER_HASH = "$2y$10$j12pP.HB4PVH4kNqWQdeQeu6enhJM69HaFtSsQZaD6WS.8v67DD8i"


def configuration_example() -> str:
    text = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_configuration_example_loads_as_documented(tmp_path: Path) -> None:
    # the example elides the writer's bcrypt hash: any valid one stands for it; its Placement
    # secret's file is one of the test's (it must be readable when the file is loaded)
    secret = tmp_path / "placement-secret"
    secret.write_text("not a real secret\n")
    example = configuration_example()
    assert SECRET_FILE in example
    config = parse_config(
        example.replace(HASH_PLACEHOLDER, DEMO_WRITER_HASH).replace(SECRET_FILE, str(secret)),
        "docs/configuration.md",
    )
    assert config.placement is not None and config.placement.auth.type == "application_credential"
    assert {h.name: h.placement_provider for h in config.hypervisors}[
        "compute-02"
    ] == "compute-02.dc1.example"
    numa_host = next(h for h in config.hypervisors if h.name == "compute-03")
    assert numa_host.policy.reserved_huge_pages == {(0, 1024 * 1024): 2, (1, 2048): 64}
    assert [spec.physical_network for spec in numa_host.policy.pci_device_spec] == ["physnet1", None]
    assert [t.type_id for t in numa_host.policy.enabled_mdev_types] == ["nvidia-35", "nvidia-36"]
    assert set(numa_host.policy.pci_aliases) == {"sriov-vf"}
    flavors = {flavor.name: flavor for flavor in config.flavors}
    pinned = flavors["p1.large"]
    assert pinned.request == {Resource.PCPU: 8, Resource.MEMORY: 16 * GIB}
    assert pinned.within.topology is not None and pinned.within.topology.pinned
    assert pinned.within.pci_alias == "sriov-vf:1"
    assert flavors["g1.vgpu"].request[Resource.VGPU] == 1
