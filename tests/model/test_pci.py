"""model/pci.py: device_spec matching, Nova's pools and free counts, alias requests."""

from __future__ import annotations

import pytest

from virtcap.config import ConfigError, parse_config
from virtcap.model.facts import PciDevice
from virtcap.model.pci import (
    AddressGlob,
    AddressPatterns,
    PciAlias,
    PciAliasError,
    PciDeviceSpec,
    PciRequestError,
    PciSpecError,
    allowing_spec,
    device_pools,
    parse_alias_request,
    support_requests,
)

PF = PciDevice("0000:3b:00.0", "8086", "1572", 0, "type-PF", None, "0x020000")
VF1 = PciDevice("0000:3b:02.0", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000")
VF2 = PciDevice("0000:3b:02.1", "8086", "154c", 0, "type-VF", "0000:3b:00.0", "0x020000")
GPU = PciDevice("0000:af:00.0", "10de", "1eb8", 1, "type-PCI", None, "0x030200")
GPU2 = PciDevice("0000:d8:00.0", "10de", "1eb8", 1, "type-PCI", None, "0x030200")
HOST = (GPU2, VF2, PF, GPU, VF1)
PFS = frozenset({PF.address})


def spec(**entry: object) -> PciDeviceSpec:
    return PciDeviceSpec.from_entry(entry)


def test_glob_addresses_are_normalized_and_padded() -> None:
    assert AddressGlob.parse("3b:2.1") == AddressGlob("*", "3b", "02", "1")
    assert AddressGlob.parse("*:3B:02.*") == AddressGlob("*", "3b", "02", "*")
    assert AddressGlob.parse("0:3b:00.0") == AddressGlob("0000", "3b", "00", "0")
    assert AddressGlob.parse(":3b:") == AddressGlob("*", "3b", "*", "*")
    for bad in ("1:2:3:4.0", "3b:02.8", "3b:20.0", "zz:00.0", "10000:00:00.0"):
        with pytest.raises(PciSpecError):
            AddressGlob.parse(bad)


def test_vendor_product_and_address_matching() -> None:
    assert spec(vendor_id="8086", product_id="154c").matches(VF1, PFS)
    assert not spec(vendor_id="8086", product_id="154c").matches(PF, PFS)
    assert spec(address="*:3b:02.*").matches(VF2, PFS)
    assert not spec(address="*:3b:02.*").matches(PF, PFS)
    assert spec(address={"bus": "3", "function": "[01]"}).matches(VF2, PFS)  # matched at the start
    assert not spec(address={"function": "[2-7]"}).matches(VF2, PFS)
    assert spec(vendor_id="10DE").matches(GPU, PFS)


def test_a_spec_naming_a_physical_function_allows_its_virtual_functions() -> None:
    named = spec(address="0000:3b:00.0")
    assert named.single_address() == "0000:3b:00.0"
    assert named.matches(PF, PFS) and named.matches(VF1, PFS) and named.matches(VF2, PFS)
    assert not named.matches(VF1, frozenset())  # not a PF of this host: its own address only
    assert spec(address="*:3b:00.0").single_address() is None
    patterns = spec(address={"domain": "0000", "bus": "3b", "slot": "00", "function": "0"})
    assert patterns.matches(VF1, PFS)
    assert isinstance(patterns.address, AddressPatterns)


def test_refusals() -> None:
    for entry, words in (
        ({"devname": "eth0"}, "devname is not supported"),
        ({"vendor_id": "1ffff"}, "above the maximum"),
        ({"product_id": "xyz"}, "neither \\* nor a hex number"),
        ({"address": 5}, "expected a string"),
        ({"address": {"bus": "("}}, "not a regular expression"),
        ({"address": {"bus": "3b", "fn": "1"}}, "unknown keys fn"),
        ({"colour": "blue"}, "unknown keys colour"),
        ({"remote_managed": "maybe"}, "expected true or false"),
    ):
        with pytest.raises(PciSpecError, match=words):
            PciDeviceSpec.from_entry(entry)


def test_the_first_matching_spec_decides_the_tags() -> None:
    specs = (
        spec(vendor_id="8086", physical_network="net1"),
        spec(address="*:3b:*.*", physical_network="net2"),
    )
    assert allowing_spec(VF1, specs, PFS) == specs[0]
    assert allowing_spec(GPU, specs, PFS) is None


def test_pools_by_physical_function_and_device_with_free_counts() -> None:
    specs = (spec(vendor_id="8086", physical_network="physnet1"), spec(vendor_id="10de"))
    pools = device_pools(HOST, specs, held=())
    assert [(p.address, p.dev_type, p.count, p.free) for p in pools] == [
        ("0000:af:00.0", "type-PCI", 1, 1),
        ("0000:d8:00.0", "type-PCI", 1, 1),
        ("0000:3b:00.0", "type-PF", 1, 1),
        ("0000:3b:00.0", "type-VF", 2, 2),
    ]
    vfs = pools[3]
    assert vfs.tags == (("physical_network", "physnet1"), ("remote_managed", "false"))
    assert vfs.devices == ("0000:3b:02.0", "0000:3b:02.1")
    assert pools[0].tags == ()


def test_held_relatives_are_unavailable() -> None:
    specs = (spec(vendor_id="8086"),)
    by_vf = {(p.dev_type, p.free) for p in device_pools(HOST, specs, held=[VF1.address])}
    assert by_vf == {("type-PF", 0), ("type-VF", 1)}
    by_pf = {(p.dev_type, p.free) for p in device_pools(HOST, specs, held=[PF.address])}
    assert by_pf == {("type-PF", 0), ("type-VF", 0)}
    # A PF no spec allows is not tracked: holding a VF leaves nothing else unavailable.
    only_vfs = device_pools(HOST, (spec(product_id="154c"),), held=[VF1.address])
    assert [(p.dev_type, p.count, p.free) for p in only_vfs] == [("type-VF", 2, 1)]


ALIASES = {
    "vf": PciAlias("vf", "8086", "154c", "type-VF"),
    "pf": PciAlias("pf", "8086", "1572", "type-PF"),
    "pf-any": PciAlias("pf-any", "8086", "1572"),
    "gpu": PciAlias("gpu", "10DE", "1eb8", numa_policy="required"),
}


def test_support_requests() -> None:
    pools = device_pools(HOST, (spec(),), held=[GPU.address])
    assert support_requests(pools, ALIASES, "vf:2")
    assert not support_requests(pools, ALIASES, "vf:3")
    assert support_requests(pools, ALIASES, "gpu:1")
    assert not support_requests(pools, ALIASES, "gpu:1, gpu:1")  # one request takes from the next
    assert support_requests(pools, ALIASES, "pf:1,vf:2")  # counts only: the filter ignores relatives
    assert not support_requests(pools, ALIASES, "pf-any:1")  # PFs serve only aliases asking for them
    assert support_requests(pools, ALIASES, "gpu:0")
    # As in Nova, even a count of 0 needs a free pool that matches.
    assert not support_requests(
        device_pools(HOST, (spec(),), held=[GPU.address, GPU2.address]), ALIASES, "gpu:0"
    )
    with pytest.raises(PciRequestError, match="not defined"):
        support_requests(pools, ALIASES, "nic:1")


def test_alias_requests_and_aliases_are_checked() -> None:
    assert parse_alias_request("a:2, b :1") == [("a", 2), ("b", 1)]
    for bad in ("a", "a:b", "a:1:2", "a:-1"):
        with pytest.raises(PciRequestError):
            parse_alias_request(bad)
    for fields, words in (
        ({"vendor_id": "808"}, "vendor_id"),
        ({"device_type": "type-VDPA"}, "device_type"),
        ({"numa_policy": "strict"}, "numa_policy"),
    ):
        with pytest.raises(PciAliasError, match=words):
            PciAlias(**({"name": "a", "vendor_id": "8086", "product_id": "154c"} | fields))


def test_configuration_device_spec_per_hypervisor_and_aliases() -> None:
    config = parse_config(
        """
defaults:
  pci_device_spec: [{vendor_id: 8086, physical_network: net1}, {address: {bus: "3b"}}]
hypervisors:
  - {name: a, uri: "test:///default"}
  - {name: b, uri: "test:///default", pci_device_spec: [{address: "*:af:00.*", remote_managed: false}]}
pci:
  alias:
    - {name: gpu, vendor_id: 10DE, product_id: 1eb8, device_type: type-PCI}
    - {name: vf, vendor_id: 8086, product_id: 154c, numa_policy: required}
""",
        "inline",
    )
    inherited, own = (h.policy.pci_device_spec for h in config.hypervisors)
    assert inherited == (
        PciDeviceSpec(vendor_id="8086", physical_network="net1"),
        PciDeviceSpec(address=AddressPatterns(bus="3b")),
    )
    assert own == (PciDeviceSpec(address=AddressGlob("*", "af", "00", "*"), remote_managed=False),)
    assert config.pci_aliases == {
        "gpu": PciAlias("gpu", "10de", "1eb8", "type-PCI"),
        "vf": PciAlias("vf", "8086", "154c", None, "required"),
    }
    assert parse_config("{}", "inline").pci_aliases == {}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            "defaults: {pci_device_spec: [{vendor_id: '0x15'}]}",
            r"inline: defaults\.pci_device_spec\[0\]\.vendor_id: expected 4 hex digits",
        ),
        (
            "defaults: {pci_device_spec: [{devname: eth0}]}",
            r"inline: defaults\.pci_device_spec\[0\]: devname is not supported",
        ),
        (
            "hypervisors: [{name: a, uri: 'test:///default', pci_device_spec: [{address: '3b:02.9'}]}]",
            r"inline: hypervisors\[0\]\.pci_device_spec\[0\]\.address: function '9' is above the maximum 7",
        ),
        (
            "defaults: {pci_device_spec: [{address: {bus: '('}}]}",
            r"inline: defaults\.pci_device_spec\[0\]\.address: address bus: '\(' is not a regular expression",
        ),
        (
            "defaults: {pci_device_spec: [{colour: red}]}",
            r"inline: defaults\.pci_device_spec\[0\]\.colour: unknown key 'colour'",
        ),
        (
            "pci: {alias: [{name: a, vendor_id: 8086, product_id: 154c, device_type: type-X}]}",
            r"inline: pci\.alias\[0\]\.device_type: expected one of: 'type-PCI', 'type-PF' or 'type-VF'",
        ),
        (
            "pci: {alias: [{name: a, vendor_id: 8086, product_id: 154c, numa_policy: strict}]}",
            r"inline: pci\.alias\[0\]\.numa_policy: expected one of: 'required', 'legacy'",
        ),
        (
            "pci: {alias: [{name: a, vendor_id: 8086, product_id: 0154}]}",  # YAML's octal 108
            r"inline: pci\.alias\[0\]\.product_id: expected 4 hex digits \(quoted when they start with 0\)",
        ),
        (
            "pci: {alias: [{name: a, vendor_id: '8086', product_id: 154c}, {name: a, vendor_id: '8086', "
            "product_id: 154d}]}",
            r"inline: pci\.alias: the alias name 'a' is used twice; expected unique names",
        ),
        ("pci: {alias: [{name: a, product_id: 154c}]}", r"inline: pci\.alias\[0\]\.vendor_id: required key"),
    ],
)
def test_configuration_errors_are_one_line_each(document: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(document, "inline")
    assert "\n" not in str(caught.value)
