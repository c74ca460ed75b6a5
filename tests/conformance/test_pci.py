"""PCI passthrough: virtcap's model/pci.py against Nova's devspec, whitelist, stats and alias
requests, on generated hosts.

Each host has SR-IOV NICs (a PF and its VFs, on NUMA node 0, 1 or none; VFs sometimes of the
PF's own product), GPUs and plain devices; random `[pci] device_spec` entries by vendor, product,
address globs, a PF's address (which allows its VFs) and address regular expressions, with tags,
and now and then one Nova refuses; some devices held by domains (never a PF with one of its
VFs, which Nova's claims refuse). Compared with the oracle's `pci` op: which devices each spec
matches (or that both refuse it), which spec allows each device, the free pools in Nova's order
with their tags and devices, and `support_requests` for alias requests.
"""

from __future__ import annotations

import random
from typing import Any

from tests.conformance.upstream import Oracle, agree, generator
from virtcap.model.facts import PciDevice
from virtcap.model.pci import (
    PciAlias,
    PciDeviceSpec,
    PciSpecError,
    allowing_spec,
    device_pools,
    support_requests,
)

HOSTS = 200
NIC_PRODUCTS = (("8086", "1572", "154c"), ("15b3", "1017", "1018"), ("8086", "158b", "158b"))
"""(vendor, PF product, VF product): the last with VFs of the PF's own product."""
PLAIN = (("10de", "1eb8", "0x030200"), ("8086", "0d5c", "0x0b4000"), ("1af4", "1041", "0x020000"))
ALIASES = (
    {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"},
    {"name": "vf-any", "vendor_id": "8086", "product_id": "154c"},
    {"name": "mlx", "vendor_id": "15B3", "product_id": "1018", "numa_policy": "required"},
    {"name": "pf", "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"},
    {"name": "pf-any", "vendor_id": "8086", "product_id": "1572"},
    {"name": "same", "vendor_id": "8086", "product_id": "158b"},
    {"name": "same-pf", "vendor_id": "8086", "product_id": "158b", "device_type": "type-PF"},
    {"name": "gpu", "vendor_id": "10de", "product_id": "1eb8", "device_type": "type-PCI"},
    {"name": "gpu-any", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "preferred"},
    {"name": "qat", "vendor_id": "8086", "product_id": "0d5c"},
)
VIRTCAP_ALIASES = {
    entry["name"]: PciAlias(
        entry["name"],
        entry["vendor_id"],
        entry["product_id"],
        entry.get("device_type"),
        entry.get("numa_policy", "legacy"),
    )
    for entry in ALIASES
}


def _numa(rng: random.Random) -> int | None:
    return rng.choice((0, 0, 1, 1, None))


def generated_host(rng: random.Random) -> list[PciDevice]:
    devices = []
    buses = rng.sample(range(0x10, 0xF0), 6)
    for bus in buses[: rng.randint(0, 3)]:
        vendor, pf_product, vf_product = rng.choice(NIC_PRODUCTS)
        numa = _numa(rng)
        for function in range(rng.randint(1, 2)):
            pf = f"0000:{bus:02x}:00.{function}"
            devices.append(PciDevice(pf, vendor, pf_product, numa, "type-PF", None, "0x020000"))
            for index in range(rng.randint(0, 6)):
                slot, vf_function = 2 + function * 2 + index // 8, index % 8
                address = f"0000:{bus:02x}:{slot:02x}.{vf_function}"
                devices.append(PciDevice(address, vendor, vf_product, numa, "type-VF", pf, "0x020000"))
    for bus in buses[3 : 3 + rng.randint(0, 3)]:
        vendor, product, class_code = rng.choice(PLAIN)
        domain = rng.choice(("0000", "0000", "0001"))
        devices.append(
            PciDevice(f"{domain}:{bus:02x}:00.0", vendor, product, _numa(rng), "type-PCI", None, class_code)
        )
    rng.shuffle(devices)
    return devices


def _glob(rng: random.Random, address: str) -> str:
    head, _, function = address.partition(".")
    domain, bus, slot = head.split(":")
    fields = [rng.choice((field, field, "*", "")) for field in (domain, bus, slot)]
    if rng.random() < 0.3:
        fields = fields[rng.randint(1, 2) :]  # a shorter address: the missing fields are *
    text = ":".join(fields)
    choice = rng.random()
    if choice < 0.4:
        text += f".{function}"
    elif choice < 0.6:
        text += ".*"
    elif choice < 0.7:
        text = text.upper()
    return text


ODD_ADDRESSES = (
    "3b:02.8", "3b:20.0", "1:2:3:4.0", "3b:zz.0", "10000:00:00.0", " 3b : 02 . 1", "0x3b:02.1", "3b:02.",
    "3b:2", "::.", "*:*:*:*", "3b:02. ", "-1:00.0", "+3b:02.0", "3B:0_2.1", "*.*", ".1", "0000:3b:00.0 ",
)  # fmt: skip
"""Spellings Nova reads (or refuses) by Python's int(): spaces, 0x, signs, underscores."""


def generated_spec(rng: random.Random, devices: list[PciDevice]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    device = rng.choice(devices) if devices else PciDevice("0000:3b:00.0", "8086", "1572", 0, "type-PF")
    kind = rng.random()
    if kind < 0.2:
        entry["vendor_id"] = device.vendor_id
    elif kind < 0.4:
        entry["vendor_id"] = device.vendor_id.upper() if rng.random() < 0.3 else device.vendor_id
        entry["product_id"] = device.product_id
    elif kind < 0.6:
        entry["address"] = _glob(rng, device.address)
    elif kind < 0.72:
        pfs = [d for d in devices if d.dev_type == "type-PF"]
        entry["address"] = (rng.choice(pfs) if pfs else device).address
    elif kind < 0.85:
        head, _, function = device.address.partition(".")
        domain, bus, slot = head.split(":")
        patterns = {
            "domain": rng.choice((domain, ".*", "000")),
            "bus": rng.choice((bus, bus[:1], "[0-9a-f]+")),
            "slot": rng.choice((slot, "0[0-3]")),
            "function": rng.choice((function, "[0-3]", "[4-7]")),
        }
        entry["address"] = {k: v for k, v in patterns.items() if rng.random() < 0.7}
    elif kind < 0.95:
        entry["address"] = rng.choice(("*:*:*.*", "*:*:00.*", "*", ":", "0000:"))
        if rng.random() < 0.5:
            entry["product_id"] = device.product_id
    else:
        entry["address"] = rng.choice(ODD_ADDRESSES)
    if rng.random() < 0.4:
        entry["physical_network"] = rng.choice(("physnet1", "physnet2"))
    if rng.random() < 0.2:
        entry["remote_managed"] = "false"
    if rng.random() < 0.1:
        entry["resource_class"] = "CUSTOM_NIC"
        entry["traits"] = "CUSTOM_FAST"
    return entry


def generated_held(rng: random.Random, devices: list[PciDevice]) -> list[str]:
    held: set[str] = set()
    for device in rng.sample(devices, rng.randint(0, len(devices) // 2)):
        relatives = {device.parent_address} | {
            d.address for d in devices if d.parent_address == device.address
        }
        if not relatives & held:
            held.add(device.address)
    return sorted(held)


COUNTS = (0, 1, 1, 1, 2, 2, 3, 5)


def generated_requests(rng: random.Random, devices: list[PciDevice]) -> list[str]:
    """Mostly aliases of devices the host has, so that both answers come up."""
    present = {(d.vendor_id, d.product_id) for d in devices}
    names = [entry["name"] for entry in ALIASES]
    likely = [e["name"] for e in ALIASES if (e["vendor_id"].lower(), e["product_id"]) in present] or names
    return [
        ",".join(
            f"{rng.choice(likely if rng.random() < 0.85 else names)}:{rng.choice(COUNTS)}"
            for _ in range(rng.choice((1, 1, 2, 3)))
        )
        for _ in range(6)
    ]


def _device_dict(device: PciDevice) -> dict[str, Any]:
    """The dict Nova's libvirt driver reports for a device."""
    return {
        "dev_id": "pci_" + device.address.replace(":", "_").replace(".", "_"),
        "address": device.address,
        "vendor_id": device.vendor_id,
        "product_id": device.product_id,
        "numa_node": device.numa_node,
        "label": f"label_{device.vendor_id}_{device.product_id}",
        "dev_type": device.dev_type,
        "parent_addr": device.parent_address,
    }


POOL_KEYS = ("vendor_id", "product_id", "numa_node", "dev_type", "address", "count", "devices")


def _upstream_pool(pool: dict[str, Any]) -> tuple[Any, ...]:
    tags = tuple(sorted((k, v) for k, v in pool.items() if k not in POOL_KEYS))
    return (pool["vendor_id"], pool["product_id"], pool["numa_node"], pool["dev_type"], pool["address"], tags,
            pool["count"], tuple(pool["devices"]))  # fmt: skip


Case = tuple[list[PciDevice], list[dict[str, Any]], list[str], list[str]]


def _compare(case: Case, answer: dict[str, Any], mismatches: list[str], kinds: dict[str, int]) -> None:
    """Compares one host's answers, counting each comparison in `kinds`."""
    devices, entries, held, requests = case
    physical_functions = frozenset(d.address for d in devices if d.dev_type == "type-PF")
    specs: list[PciDeviceSpec] = []
    for entry, upstream in zip(entries, answer["matches"], strict=True):
        try:
            spec = PciDeviceSpec.from_entry(entry)
        except PciSpecError as error:
            kinds["refused spec"] += 1
            if "error" not in upstream:
                mismatches.append(f"spec {entry}: virtcap refuses it ({error}), Nova matches {upstream}")
            continue
        kinds["spec"] += 1
        specs.append(spec)
        if "error" in upstream:
            mismatches.append(f"spec {entry}: Nova refuses it ({upstream['error']}), virtcap accepts it")
            continue
        mine = sorted(d.address for d in devices if spec.matches(d, physical_functions))
        if mine != sorted(upstream["addresses"]):
            mismatches.append(f"spec {entry}: virtcap matches {mine}, Nova {sorted(upstream['addresses'])}")
    if len(specs) != len(entries):
        return  # Nova refuses the whole device_spec
    for device in devices:
        kinds["device"] += 1
        chosen = allowing_spec(device, specs, physical_functions)
        mine_index = None if chosen is None else specs.index(chosen)
        if mine_index != answer["assignable"].get(device.address):
            mismatches.append(
                f"device {device.address} under {entries}: virtcap's spec {mine_index}, "
                f"Nova's {answer['assignable'].get(device.address)}"
            )
    pools = device_pools(devices, specs, held)
    mine_pools = [
        (p.vendor_id, p.product_id, p.numa_node, p.dev_type, p.address, p.tags, p.free, p.free_devices)
        for p in pools
        if p.free
    ]
    upstream_pools = [_upstream_pool(pool) for pool in answer["pools"]]
    kinds["pool list"] += 1
    if mine_pools != upstream_pools:
        mismatches.append(
            f"pools of {[_device_dict(d) for d in devices]} under {entries}, held {held}: "
            f"virtcap {mine_pools}, Nova {upstream_pools}"
        )
    for request in requests:
        kinds["request"] += 1
        mine_support = support_requests(pools, VIRTCAP_ALIASES, request)
        nova_support = answer["support"][request]
        kinds["supported"] += nova_support
        if mine_support != nova_support:
            mismatches.append(
                f"{request!r} on pools {upstream_pools}: virtcap {mine_support}, Nova {nova_support}"
            )


def test_device_spec_pools_and_alias_requests_agree_with_nova(oracle: Oracle) -> None:
    rng = generator("pci")
    cases: list[Case] = []
    for _ in range(HOSTS):
        devices = generated_host(rng)
        entries = [generated_spec(rng, devices) for _ in range(rng.randint(1, 4))]
        cases.append((devices, entries, generated_held(rng, devices), generated_requests(rng, devices)))
    answers = oracle.ask(
        [
            {
                "op": "pci",
                "devices": [_device_dict(device) for device in devices],
                "specs": entries,
                "held": held,
                "aliases": list(ALIASES),
                "requests": requests,
            }
            for devices, entries, held, requests in cases
        ]
    )
    mismatches: list[str] = []
    kinds = dict.fromkeys(("spec", "refused spec", "device", "pool list", "request", "supported"), 0)
    for case, answer in zip(cases, answers, strict=True):
        _compare(case, answer, mismatches, kinds)
    compared = sum(kinds.values()) - kinds["supported"]
    agree("PCI answers", mismatches, compared)
    # The generator must reach every kind of question, and both answers of the filter.
    assert all(kinds.values()) and kinds["supported"] < kinds["request"], kinds
    print(f"compared with Nova: {kinds}")
