"""A test-driver fleet of two hypervisors running Nova instances, and a real Placement (tests/support/
placement_server.py) loaded to disagree with it in every way the reconciliation tells, on purpose:
for the tests that run the real `virtcap serve` and `virtcap audit --placement` against both.

hv1 (16 CPUs, 64 GiB) runs a, b, c and d of m1.small (1 vCPU, 2 GiB, no disk); d is live-migrating
to hv2 (the same CPUs and memory), which shows it too. Placement holds: hv1's memory reserved
4 GiB (Nova's default is 512 MiB), hv2's VCPU total 12 (a stale 16); a's allocation as its flavor
asks, none for b, c's with 2 vCPUs (a resize not confirmed), a leaked consumer's, and d's
migration: its record (m) on hv1, its own allocation on hv2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.placement_loader import PROJECT_ID, USER_ID, PlacementLoader, nova_inventories

GIB = 1024**3
MIB = 1024**2
UUIDS = {name: f"00000000-0000-4000-8000-00000000000{index}" for index, name in enumerate("abcdm", start=1)}
LEAKED = "00000000-0000-4000-8000-0000000000ff"
SMALL_ALLOCATION = {"VCPU": 1, "MEMORY_MB": 2048}
GUESTS = {"hv1": ("a", "b", "c", "d"), "hv2": ("d",)}
PROVIDERS = {"hv1": "hv1-node", "hv2": "hv2-node"}
PLANTED_RESERVED_MB = 4096
NOVA_RESERVED_MB = 512
PLANTED_VCPU_TOTAL = 12

EXPECTED: dict[str, Any] = {
    "hv1": {
        "provider": "hv1-node",
        "inventory_drift": {
            "memory": {"reserved": {"drift": (PLANTED_RESERVED_MB - NOVA_RESERVED_MB) * MIB, "unit": "bytes"}}
        },
        "orphaned": [
            {
                "uuid": LEAKED,
                "consumer_type": "INSTANCE",
                "amounts": {
                    "vcpu": {"amount": 1, "unit": "cpus"},
                    "memory": {"amount": 2 * GIB, "unit": "bytes"},
                },
            }
        ],
        "unallocated": [
            {
                "uuid": UUIDS["b"],
                "name": "b",
                "expected": {
                    "vcpu": {"amount": 1, "unit": "cpus"},
                    "memory": {"amount": 2 * GIB, "unit": "bytes"},
                },
            }
        ],
        "mismatched": [
            {
                "uuid": UUIDS["c"],
                "name": "c",
                "allocated": {
                    "vcpu": {"amount": 2, "unit": "cpus"},
                    "memory": {"amount": 2 * GIB, "unit": "bytes"},
                },
                "expected": {
                    "vcpu": {"amount": 1, "unit": "cpus"},
                    "memory": {"amount": 2 * GIB, "unit": "bytes"},
                },
            }
        ],
        # Placement: a, c (2 vCPUs), the leak and d's record; the domains a to d, 1 vCPU and 2 GiB each
        "usage_drift": {"vcpu": {"amount": (1 + 2 + 1 + 1) - 4, "unit": "cpus"}},
        "migrations": [UUIDS["m"]],
    },
    "hv2": {
        "provider": "hv2-node",
        "inventory_drift": {
            "vcpu": {
                "total": {"drift": PLANTED_VCPU_TOTAL - 16, "unit": "cpus"},
                "max_unit": {"drift": PLANTED_VCPU_TOTAL - 16, "unit": "cpus"},
            }
        },
        "orphaned": [],
        "unallocated": [],
        "mismatched": [],
        "usage_drift": {},
        "migrations": [],
    },
}
"""What `GET /api/v1/placement/drift` answers per hypervisor, worked out from what is planted."""


def _domain(name: str) -> str:
    nova = (
        "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>"
        '<nova:flavor name="m1.small"><nova:memory>2048</nova:memory><nova:disk>0</nova:disk>'
        "<nova:swap>0</nova:swap><nova:ephemeral>0</nova:ephemeral><nova:vcpus>1</nova:vcpus></nova:flavor>"
        f"<nova:owner><nova:user uuid='{USER_ID}'>u</nova:user>"
        f"<nova:project uuid='{PROJECT_ID}'>demo</nova:project></nova:owner></nova:instance>"
    )
    return f"""  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>{name}</name><uuid>{UUIDS[name]}</uuid>
    <memory unit='MiB'>2048</memory><currentMemory unit='MiB'>2048</currentMemory>
    <vcpu placement='static'>1</vcpu>
    <metadata>{nova}</metadata>
    <os><type arch='x86_64'>hvm</type></os>
    <test:runstate>1</test:runstate>
  </domain>
"""


def write_fleet(directory: Path, placement_url: str | None, placement_keys: str = "") -> Path:
    """The node files of hv1 and hv2, and virtcap.yaml auditing them every second (reading
    Placement at `placement_url` every second, if given, with `placement_keys` as YAML flow text)."""
    entries = []
    for hypervisor, guests in GUESTS.items():
        node = directory / f"{hypervisor}.xml"
        node.write_text(
            "<node>\n  <cpu><mhz>2600</mhz><model>Xeon</model><active>16</active><nodes>1</nodes>"
            "<sockets>2</sockets><cores>8</cores><threads>1</threads></cpu>\n"
            f"  <memory>{64 * 1024 * 1024}</memory>\n"
            + "".join(_domain(name) for name in guests)
            + "</node>\n"
        )
        entries.append(
            f"  - {{name: {hypervisor}, uri: 'test://{node}', placement_provider: {PROVIDERS[hypervisor]}}}"
        )
    placement = (
        f"placement: {{endpoint: '{placement_url}', timeout: 3s, interval: 1s{placement_keys}}}\n"
        if placement_url is not None
        else ""
    )
    path = directory / "virtcap.yaml"
    path.write_text(
        f"audit: {{interval: 1s}}\nclaims: {{database: {directory / 'claims.sqlite'}}}\n{placement}"
        "hypervisors:\n" + "\n".join(entries) + "\n"
    )
    return path


def plant(loader: PlacementLoader) -> None:
    """The providers and allocations of the module's docstring."""

    def inventories(vcpus: int, reserved_mb: int) -> dict[str, Any]:
        found = nova_inventories(vcpus, 64 * 1024, 1, reserved_host_memory_mb=reserved_mb)
        del found["DISK_GB"]  # the test driver's hosts have no storage for instance disks
        return found

    loader.load(
        {
            "providers": [
                {"name": "hv1-node", "inventories": inventories(16, PLANTED_RESERVED_MB)},
                {"name": "hv2-node", "inventories": inventories(PLANTED_VCPU_TOTAL, NOVA_RESERVED_MB)},
            ],
            "consumers": [
                {"uuid": UUIDS["a"], "allocations": {"hv1-node": SMALL_ALLOCATION}},
                {"uuid": UUIDS["c"], "allocations": {"hv1-node": {**SMALL_ALLOCATION, "VCPU": 2}}},
                {"uuid": LEAKED, "allocations": {"hv1-node": SMALL_ALLOCATION}},
            ],
        }
    )
    loader.migrate(UUIDS["d"], UUIDS["m"], "hv1-node", "hv2-node", SMALL_ALLOCATION)
