"""Metric families from snapshots: names, labels, values, disappearance and staleness."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric

from tests.support.factories import host, storageless_fleet
from tests.support.files import FIXTURES
from tests.support.serving import Samples, parse_samples, series, value
from virtcap.config import parse_config
from virtcap.demo import demo_config
from virtcap.exposition import fragments as fragments_module
from virtcap.exposition.catalogue import HYPERVISOR_FAMILIES
from virtcap.exposition.families import (
    HypervisorView,
    PlacementShown,
    build_families,
    hypervisor_view,
    render,
    views,
)
from virtcap.exposition.fragments import FragmentCache
from virtcap.exposition.kept_views import KeptViews
from virtcap.exposition.placement_families import drift_families, placement_families
from virtcap.exposition.report import fleet_document, render_tables
from virtcap.fleet.packing import PackingReport
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import HostEvacuation, ToleranceReport
from virtcap.model.capacity import ResourceCapacity
from virtcap.model.facts import CpuIdentity, DomainState, PciDevice
from virtcap.model.maintenance import Maintenance
from virtcap.model.packing.stranded import StrandedCapacity
from virtcap.model.pci import PciDeviceSpec
from virtcap.model.placement_drift import Drift, HeldConsumer
from virtcap.model.resources import MIB, Resource
from virtcap.service.oneshot import audit_fleet_once

MIXED = FIXTURES / "mixed-node.xml"
GIB = 1024**3

CONFIG = f"""
hypervisors:
  - {{name: mixed, uri: "test://{MIXED}", cpu_shared_set: "0", cpu_dedicated_set: "2,4"}}
  - {{name: default, uri: "test:///default", allocation_ratios: {{memory: 1.5}}}}
flavors:
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 20GiB}}
"""


@pytest.fixture(scope="module")
def store() -> SnapshotStore:
    async def fill() -> SnapshotStore:
        config = parse_config(CONFIG, "inline")
        store = SnapshotStore()
        store.track([h.name for h in config.hypervisors])
        for snapshot in await audit_fleet_once(config, cpu_window=0.0):
            store.record(snapshot, "success")
        store.set_identity("mixed", CpuIdentity(model="EPYC", arch="x86_64"))
        return store

    return asyncio.run(fill())


def exposition(store: SnapshotStore, stale_after: float = 60.0) -> Samples:
    return parse_samples(render(views(store, time.time(), stale_after), {}).decode())


def test_every_family_with_its_labels(store: SnapshotStore) -> None:
    samples = exposition(store)
    assert value(samples, "hypervisor_up", hypervisor="mixed") == 1.0
    labels = {"hypervisor": "mixed", "resource": "vcpu", "unit": "cpus"}
    assert value(samples, "hypervisor_resource_size", **labels) == 1
    assert value(samples, "hypervisor_resource_reserved", **labels) == 0
    assert value(samples, "hypervisor_resource_limit", **labels) == 4
    assert value(samples, "hypervisor_resource_used", **labels) == 12
    assert value(samples, "hypervisor_resource_free", **labels) == -8
    assert value(samples, "hypervisor_resource_claimed", **labels) == 0
    assert value(samples, "hypervisor_resource_allocation_ratio", hypervisor="mixed", resource="vcpu") == 4.0
    assert value(samples, "hypervisor_resource_allocated", **labels, state="paused") == 4
    memory = {"hypervisor": "mixed", "resource": "memory", "unit": "bytes"}
    assert value(samples, "hypervisor_resource_actual_usage", **memory) == 14 * GIB
    assert (
        value(samples, "hypervisor_resource_used", hypervisor="mixed", resource="disk", unit="bytes")
        == 161 * GIB
    )
    assert value(samples, "hypervisor_schedulable_instances", hypervisor="mixed", flavor="m1.small") == 0
    assert value(samples, "hypervisor_domains", hypervisor="mixed", state="running") == 3
    assert value(samples, "hypervisor_audit_problems", hypervisor="mixed") == 2
    assert value(samples, "virtcap_audits_total", hypervisor="mixed", outcome="success") == 1
    assert value(samples, "virtcap_build_info", version=__import__("virtcap").__version__) == 1
    assert (value(samples, "hypervisor_audit_timestamp_seconds", hypervisor="mixed") or 0) > 0
    assert value(samples, "hypervisor_audit_duration_seconds", hypervisor="mixed") is not None
    info = series(samples, "hypervisor_info", hypervisor="mixed")
    assert len(info) == 1
    (labels_of_info,) = info
    assert dict(labels_of_info) == {
        "hypervisor": "mixed",
        "hostname": "vm",
        "hypervisor_type": "TEST",
        "hypervisor_version": "0.0.2",
        "libvirt_version": dict(labels_of_info)["libvirt_version"],
        "cpu_model": "EPYC",
        "arch": "x86_64",
    }
    # used = allocated over counted states + claimed; free = limit - used, for every series
    unlimited = []
    for (name, key), used in list(samples.items()):
        if name != "hypervisor_resource_used":
            continue
        labels = dict(key)
        allocated = sum(series(samples, "hypervisor_resource_allocated", **labels).values())
        claimed = value(samples, "hypervisor_resource_claimed", **labels) or 0
        assert used == allocated + claimed
        limit = value(samples, "hypervisor_resource_limit", **labels)
        if limit is None:  # the total could not be read: nothing to subtract from
            unlimited.append((labels["hypervisor"], labels["resource"]))
            assert value(samples, "hypervisor_resource_free", **labels) is None
            continue
        assert value(samples, "hypervisor_resource_free", **labels) == limit - used
    assert unlimited == [("default", "disk")]  # test:///default has no pool named `default`


def test_unknown_amounts_have_no_series_and_allocations_still_do(tmp_path: Path) -> None:
    # The storage of instance disks is not found and the test driver measures no CPU time: no
    # series at all for what is unknown, never a 0 that reads as "full" or "idle".
    store = SnapshotStore()
    store.track(["fresh"])
    (snapshot,) = asyncio.run(audit_fleet_once(storageless_fleet(tmp_path), cpu_window=0.01))
    store.record(snapshot, "success")
    samples = exposition(store)
    disk = {"hypervisor": "fresh", "resource": "disk", "unit": "bytes"}
    for family in ("size", "reserved", "limit", "free", "actual_usage"):
        assert value(samples, f"hypervisor_resource_{family}", **disk) is None, family
    assert value(samples, "hypervisor_resource_used", **disk) == 540 * GIB
    assert value(samples, "hypervisor_resource_claimed", **disk) == 0
    assert series(samples, "hypervisor_resource_allocated", **disk) == {
        frozenset({**disk, "state": "running"}.items()): 40 * GIB,
        frozenset({**disk, "state": "paused"}.items()): 0,
        frozenset({**disk, "state": "shutoff"}.items()): 500 * GIB,
        frozenset({**disk, "state": "other"}.items()): 0,
    }
    vcpu = {"hypervisor": "fresh", "resource": "vcpu", "unit": "cpus"}
    assert value(samples, "hypervisor_resource_actual_usage", **vcpu) is None
    assert value(samples, "hypervisor_resource_limit", **vcpu) == 32
    # memory (28.5 GiB free) decides; 100 TiB of disk asked for limits nothing
    assert value(samples, "hypervisor_schedulable_instances", hypervisor="fresh", flavor="d1.huge") == 28
    assert series(samples, "hypervisor_flavor_bottleneck", hypervisor="fresh") == {
        frozenset({"hypervisor": "fresh", "flavor": flavor, "resource": "memory"}.items()): 1
        for flavor in ("m1.small", "d1.huge")
    }


def test_no_label_is_owned_by_the_target_or_a_total() -> None:
    forbidden = {"cluster", "region", "job", "instance"}
    store = SnapshotStore()
    store.track(["x"])
    text = render(views(store, time.time(), 60)).decode()
    for family_line in text.splitlines():
        assert not any(f'{label}="' in family_line for label in forbidden)
        assert '="total"' not in family_line


def test_a_removed_hypervisor_loses_its_series(store: SnapshotStore) -> None:
    assert series(exposition(store), "hypervisor_up", hypervisor="default")
    kept = store.hypervisors["default"]
    store.track(["mixed"])
    try:
        samples = exposition(store)
        assert not [key for key in samples if ("hypervisor", "default") in key[1]]
        assert series(samples, "hypervisor_up", hypervisor="mixed")
    finally:
        store.track(["mixed", "default"])
        store.hypervisors["default"] = kept


def test_a_failing_hypervisor_keeps_up_0_and_drops_stale_data(store: SnapshotStore) -> None:
    state = store.hypervisors["default"]
    good, latest = state.last_good, state.latest
    assert good is not None
    failure = HypervisorSnapshot(
        name="default", up=False, error="boom", facts=None, capacity=None, taken_at=time.time()
    )
    store.record(failure, "failure")
    try:
        fresh = exposition(store, stale_after=3600)
        assert value(fresh, "hypervisor_up", hypervisor="default") == 0.0
        assert series(
            fresh, "hypervisor_resource_limit", hypervisor="default"
        )  # last good data, not stale yet
        assert value(fresh, "hypervisor_audit_timestamp_seconds", hypervisor="default") == good.taken_at
        assert value(fresh, "virtcap_audits_total", hypervisor="default", outcome="failure") == 1
        stale = parse_samples(render(views(store, good.taken_at + 100, 60)).decode())
        assert value(stale, "hypervisor_up", hypervisor="default") == 0.0
        assert not series(stale, "hypervisor_resource_limit", hypervisor="default")
        assert not series(stale, "hypervisor_info", hypervisor="default")
    finally:
        state.latest = latest


def demo_store() -> SnapshotStore:
    """The demo fleet audited once, as `virtcap serve` keeps it."""
    store = SnapshotStore()
    config = demo_config()
    store.track([h.name for h in config.hypervisors])
    for snapshot in asyncio.run(audit_fleet_once(config, cpu_window=0.0)):
        store.record(snapshot, "success" if snapshot.up else "failure")
    return store


def test_kept_views_are_the_views_made_afresh_through_every_kind_of_change() -> None:
    """A render takes every hypervisor's view: the one kept from the last render where nothing
    it shows changed (the same object), a new one otherwise, always what `hypervisor_view` makes."""
    store = demo_store()
    kept = KeptViews()
    now = time.time()

    def taken(at: float = now, pending: dict[str, int] | None = None, maintenance: Any = None) -> list[str]:
        """The views taken; the hypervisors whose view was made again."""
        remade = []
        for state in store.hypervisors.values():
            before = kept._made.get(state.name)
            view = kept.view(state, at, 600, pending or {}, maintenance)
            fresh = hypervisor_view(state, at, 600, pending or {}, maintenance)
            assert view == fresh and view.data is fresh.data, state.name
            if before is None or before.view is not view:
                remade.append(state.name)
        kept.forget_unasked()
        return remade

    names = list(store.hypervisors)
    first = names[0]
    assert taken() == names
    assert taken() == []
    store.record(store.hypervisors[first].latest, "failure")  # type: ignore[arg-type]
    assert taken() == [first]  # one more audit counted
    store.count_domain_reads(first, 7)
    assert taken() == [first]
    store.set_identity(first, CpuIdentity(model="EPYC", arch="x86_64"))
    assert taken() == [first]
    good = store.hypervisors[first].last_good
    assert good is not None
    store.replace_good(first, good, replace(good, taken_at=good.taken_at + 1))
    assert taken() == [first]
    assert taken(pending={first: 2}) == [first]
    assert taken(pending={first: 2}) == []
    up = [name for name in names if store.hypervisors[name].last_good is not None]
    assert set(taken(at=now + 3600)) == set(up)  # stale: shown without data
    taken(at=now + 3600, maintenance={})  # the claims ledger's entries: none
    in_maintenance = {first: (Maintenance("api", "disk swap"),)}
    assert taken(at=now + 3600, maintenance=in_maintenance) == [first]  # what stale ones show
    store.track(names[1:])
    assert taken(at=now + 3600, maintenance=in_maintenance) == []
    assert first not in kept._made


def test_the_fragment_cache_renders_what_a_whole_render_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept per-hypervisor fragments, joined, are byte for byte the whole fleet rendered at once,
    through every kind of change; and only what changed is rendered again."""
    store = demo_store()
    rendered: list[str] = []
    whole_fleet = build_families

    def counting(hypervisors: tuple[HypervisorView, ...], *options: Any) -> list[Metric]:
        rendered.extend(view.name for view in hypervisors)
        return whole_fleet(hypervisors, *options)

    monkeypatch.setattr(fragments_module, "build_families", counting)
    cache = FragmentCache()
    now = time.time()

    def same_as_whole(pending: dict[str, int] | None = None, at: float = now) -> list[str]:
        rendered.clear()
        fleet = views(store, at, 600, pending)
        body = cache.render(fleet, {"created": 3})
        changed = list(rendered)
        assert body == render(fleet, {"created": 3})
        return changed

    names = list(store.hypervisors)
    assert same_as_whole() == names
    assert b'hypervisor_resource_limit{hypervisor="compute-06"' in cache.render(views(store, now, 600))
    assert same_as_whole() == []
    first, second = names[0], names[1]
    store.set_identity(first, CpuIdentity(model="EPYC", arch="x86_64"))
    assert same_as_whole() == [first]
    assert same_as_whole(pending={second: 2}) == [second]
    failed = HypervisorSnapshot(name=second, up=False, error="boom", facts=None, capacity=None, taken_at=now)
    store.record(failed, "failure")
    assert same_as_whole() == [second]
    store.track(names[1:])
    assert same_as_whole() == []
    store.track(names)
    assert same_as_whole() == [first]
    audited = [name for name in names if store.hypervisors[name].last_good is not None]
    assert same_as_whole(at=now + 3600) == audited  # their data turned stale


def test_the_fragment_cache_renders_the_tolerance_and_packing_as_a_whole_render_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The failure tolerance's and the packing answers' per-hypervisor families, kept between
    renders, are byte for byte a whole render's; a hypervisor's are rendered again when what they
    show changes, and none for a packing answer that leaves them as they were."""
    store = demo_store()
    rendered: list[tuple[str, str]] = []
    for name in ("hypervisors_evacuations", "hypervisors_stranded"):
        original = getattr(fragments_module, name)

        def counting(shown: Any, _name: str = name, _original: Any = original) -> list[Metric]:
            shown = list(shown)
            rendered.extend((_name, hypervisor) for hypervisor, _ in shown)
            return _original(shown)  # type: ignore[no-any-return]

        monkeypatch.setattr(fragments_module, name, counting)
    cache = FragmentCache()
    now = time.time()
    names = list(store.hypervisors)
    memory = {Resource.MEMORY: 2 * GIB}

    def same_as_whole(tolerance: ToleranceReport | None) -> list[tuple[str, str]]:
        fleet = views(store, now, 600)
        rendered.clear()
        body = cache.render(fleet, {"created": 3}, tolerance=tolerance)
        changed = list(rendered)
        assert body == render(fleet, {"created": 3}, tolerance=tolerance)
        return changed

    evacuations = {name: HostEvacuation(True, ()) for name in names}
    stranded = {
        name: StrandedCapacity(memory, {Resource.MEMORY: frozenset({Resource.VCPU})}) for name in names
    }
    packing = PackingReport(stranded, None, {}, {}, {}, 1, now, 1.0)
    tolerance = ToleranceReport(evacuations, 1, 2, now, 1.0, False, {"full": 1}, packing)
    shown = [name for name in names if store.hypervisors[name].last_good is not None]
    assert same_as_whole(None) == []
    assert same_as_whole(tolerance) == [("hypervisors_evacuations", name) for name in shown] + [
        ("hypervisors_stranded", name) for name in shown
    ]
    assert same_as_whole(tolerance) == []
    answered = replace(packing, sellable={"m1.small": 7}, computed_at=now + 1)  # a step's answer
    assert same_as_whole(replace(tolerance, packing=answered)) == []
    refused = {**evacuations, shown[0]: HostEvacuation(False, ())}
    evacuated = replace(tolerance, evacuations=refused, packing=answered)
    assert same_as_whole(evacuated) == [("hypervisors_evacuations", shown[0])]
    changed = {**stranded, shown[1]: StrandedCapacity({Resource.MEMORY: GIB}, {})}
    again = replace(tolerance, evacuations=refused, packing=replace(answered, stranded=changed))
    assert same_as_whole(again) == [("hypervisors_stranded", shown[1])]
    store.track([name for name in names if name != shown[2]])  # its series go, the others' stay kept
    assert same_as_whole(again) == []


def test_a_refused_inventory_is_loud_in_the_exposition_and_the_report() -> None:
    """Reserved memory above the host's 32 GiB, and a CPU set naming an offline CPU (the test
    driver's CPU map has only 0, 2 and 4 online): Placement would hold no such inventory, so the
    hypervisor offers nothing of it, and says so."""
    config = parse_config(
        f"""
hypervisors:
  - {{name: starved, uri: "test://{MIXED}", cpu_shared_set: "0", reserved: {{memory: 64GiB}}}}
  - {{name: offline, uri: "test://{MIXED}", cpu_shared_set: "0-1"}}
flavors:
  - {{name: m1.small, vcpu: 1, memory: 2GiB, disk: 20GiB}}
""",
        "inline",
    )
    store = SnapshotStore()
    store.track([h.name for h in config.hypervisors])
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    for snapshot in snapshots:
        store.record(snapshot, "success")
    samples = exposition(store)

    def refused(hypervisor: str) -> dict[str, float]:
        found = series(samples, "hypervisor_resource_inventory_refused", hypervisor=hypervisor)
        return {dict(labels)["resource"]: flag for labels, flag in found.items()}

    assert refused("starved") == {"vcpu": 0, "pcpu": 0, "memory": 1, "disk": 0}
    assert refused("offline") == {"vcpu": 1, "pcpu": 1, "memory": 1, "disk": 1}
    assert (
        value(samples, "hypervisor_resource_limit", hypervisor="starved", resource="memory", unit="bytes")
        == 0
    )
    for hypervisor in ("starved", "offline"):
        assert (
            value(samples, "hypervisor_schedulable_instances", hypervisor=hypervisor, flavor="m1.small") == 0
        )
        assert (value(samples, "hypervisor_audit_problems", hypervisor=hypervisor) or 0) >= 1
    document = {h["name"]: h for h in fleet_document(snapshots)["hypervisors"]}
    assert document["starved"]["resources"]["memory"]["refused"] == (
        "reserved memory exceeds its total: Placement refuses the inventory"
    )
    assert document["starved"]["resources"]["vcpu"]["refused"] is None
    offline_reason = "cpu_shared_set names CPUs that are not online (1): Nova refuses the configuration"
    assert offline_reason in document["offline"]["problems"]
    assert f"! {offline_reason}" in render_tables(snapshots)


def test_custom_classes_are_in_every_resource_family_and_the_report(tmp_path: Path) -> None:
    """The resources are the capacity's, not a fixed list: a CUSTOM_* class beside the standard
    ones has its series in every hypervisor_resource_* family (a plain count, unit `integer`),
    after the standard classes, and its entry in the report."""
    (snapshot,) = asyncio.run(audit_fleet_once(storageless_fleet(tmp_path), cpu_window=0.0))
    assert snapshot.capacity is not None
    fpga = Resource.custom_class("CUSTOM_FPGA")
    custom = ResourceCapacity(
        resource=fpga,
        total=4,
        reserved=1,
        allocation_ratio=1.0,
        allocated_by_state={**dict.fromkeys(DomainState, 0), DomainState.RUNNING: 2},
        counted_states=frozenset(DomainState),
        claimed=1,
        min_unit=1,
        step_size=1,
    )
    capacity = replace(
        snapshot.capacity,
        resources={fpga: custom, **snapshot.capacity.resources},  # display order is not insertion order
        bottlenecks={**snapshot.capacity.bottlenecks, "m1.small": fpga},
    )
    snapshot = replace(snapshot, capacity=capacity)
    store = SnapshotStore()
    store.track(["fresh"])
    store.record(snapshot, "success")
    samples = exposition(store)
    fpga_series = {"hypervisor": "fresh", "resource": "custom_fpga", "unit": "integer"}
    amounts = {"size": 4, "reserved": 1, "limit": 3, "used": 3, "free": 0, "claimed": 1}
    for family, amount in amounts.items():
        assert value(samples, f"hypervisor_resource_{family}", **fpga_series) == amount, family
    assert value(samples, "hypervisor_resource_actual_usage", **fpga_series) is None  # unknown
    assert value(samples, "hypervisor_resource_allocated", **fpga_series, state="running") == 2
    ratio = value(samples, "hypervisor_resource_allocation_ratio", hypervisor="fresh", resource="custom_fpga")
    assert ratio == 1.0
    refused = value(
        samples, "hypervisor_resource_inventory_refused", hypervisor="fresh", resource="custom_fpga"
    )
    assert refused == 0
    bottleneck = {"hypervisor": "fresh", "flavor": "m1.small", "resource": "custom_fpga"}
    assert value(samples, "hypervisor_flavor_bottleneck", **bottleneck) == 1
    # the audit's families (the stranded ones come with a packing computation, none here)
    resource_families = {f.name for f in HYPERVISOR_FAMILIES if f.name.startswith("hypervisor_resource_")}
    with_fpga = {name for name, labels in samples if ("resource", "custom_fpga") in labels}
    assert with_fpga == resource_families - {"hypervisor_resource_actual_usage"} | {
        "hypervisor_flavor_bottleneck"
    }
    limits = series(samples, "hypervisor_resource_limit", hypervisor="fresh")
    order = [dict(labels)["resource"] for labels in limits]
    assert order[-1] == "custom_fpga"

    (document,) = fleet_document([snapshot])["hypervisors"]
    assert list(document["resources"]) == ["vcpu", "pcpu", "memory", "disk", "custom_fpga"]
    assert document["resources"]["custom_fpga"] == {
        "unit": "integer",
        "placement_class": "CUSTOM_FPGA",
        "total": 4,
        "reserved": 1,
        "min_unit": 1,
        "max_unit": 4,
        "step_size": 1,
        "allocation_ratio": 1.0,
        "limit": 3,
        "used": 3,
        "free": 0,
        "claimed": 1,
        "actual": None,
        "utilization": 1.0,
        "effective_overcommit": 1.0,
        "used_by_state": {"running": 2, "paused": 0, "shutoff": 0, "other": 0},
        "counted_states": ["other", "paused", "running", "shutoff"],
        "refused": None,
    }
    memory = document["resources"]["memory"]
    assert memory["placement_class"] == "MEMORY_MB"
    assert memory["max_unit"] == memory["total"]
    assert memory["min_unit"] == memory["step_size"] == MIB  # Placement's 1 MiB, in bytes
    assert document["resources"]["disk"]["max_unit"] is None  # its total is unknown
    assert document["bottlenecks"]["m1.small"] == "custom_fpga"
    rows = [line.split()[0] for line in render_tables([snapshot]).splitlines()[2:7]]
    assert rows == ["vcpu", "pcpu", "memory", "disk", "custom_fpga"]


def test_pci_pools_the_labels_cannot_tell_apart_share_one_series() -> None:
    """Two pools of one PF's VFs, one tagged with a physical network spelt empty (Nova accepts
    it in nova.conf; virtcap's configuration refuses it, so the spec is built here): its labels
    match the untagged pool's, so one series each family, their devices added up, never two
    samples of the same series (Prometheus would refuse the scrape)."""
    config = parse_config('hypervisors: [{name: sriov, uri: "test:///default"}]', "test")
    specs = (
        PciDeviceSpec.from_entry({"address": "0000:3b:02.0", "physical_network": ""}),
        PciDeviceSpec.from_entry({"vendor_id": "8086", "product_id": "154c"}),
    )
    hypervisor = replace(
        config.hypervisors[0], policy=replace(config.hypervisors[0].policy, pci_device_spec=specs)
    )
    pf = PciDevice("0000:3b:00.0", "8086", "1572", 0, "type-PF", None, "0x020000")
    vfs = tuple(
        PciDevice(f"0000:3b:02.{index}", "8086", "154c", 0, "type-VF", pf.address, "0x020000")
        for index in range(3)
    )
    facts = replace(host(), pci_devices=(pf, *vfs))
    snapshot = HypervisorSnapshot.audited(hypervisor, facts, {})
    assert snapshot.capacity is not None and len(snapshot.capacity.within.pci_pools) == 2
    view = HypervisorView("sriov", True, snapshot, time.time(), 0.1, None, {})
    text = render([view]).decode()
    for family in ("hypervisor_pci_pool_devices", "hypervisor_pci_pool_devices_free"):
        (line,) = [line for line in text.splitlines() if line.startswith(family + "{")]
        assert line.endswith(" 3.0"), line


def _drift(hypervisor: str, orphans: int) -> Drift:
    held = tuple(HeldConsumer(f"leak-{index}", {Resource.VCPU: 1}) for index in range(orphans))
    return Drift(
        hypervisor,
        f"{hypervisor}-node",
        {(Resource.VCPU, "total"): 0.0},
        held,
        (),
        (),
        {Resource.VCPU: orphans},
    )


def test_the_placement_families_are_rendered_once_a_reading_and_never_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fragment cache keeps the Placement families' text while the reading and the shown
    hypervisors stay the same: byte for byte what a whole render gives, rendered again only when
    a new reading or a hypervisor turning stale changes them, and then only for the hypervisors
    whose drift changed."""
    store = SnapshotStore()
    config = demo_config()
    store.track([h.name for h in config.hypervisors])
    for snapshot in asyncio.run(audit_fleet_once(config, cpu_window=0.0)):
        store.record(snapshot, "success" if snapshot.up else "failure")
    audited = [name for name, state in store.hypervisors.items() if state.last_good is not None]
    built: list[int] = []

    def counting(report: PlacementReport | None, shown: Any) -> list[Metric]:
        built.append(1)
        return placement_families(report, shown)

    drifted: list[str] = []

    def counting_drifts(name: str, drift: Drift) -> list[Metric]:
        drifted.append(name)
        return drift_families(name, drift)

    monkeypatch.setattr(fragments_module, "placement_families", counting)
    monkeypatch.setattr(fragments_module, "drift_families", counting_drifts)
    cache = FragmentCache()
    now = time.time()

    def rendered(report: PlacementReport, at: float = now) -> Samples:
        fleet = views(store, at, 600)
        body = cache.render(fleet, {}, placement=PlacementShown(report))
        assert body == render(fleet, {}, placement=PlacementShown(report))
        return parse_samples(body.decode())

    first = PlacementReport(up=True, drifts={name: _drift(name, 1) for name in audited}, last_success_at=now)
    assert value(rendered(first), "hypervisor_placement_orphaned_consumers", hypervisor=audited[0]) == 1
    built.clear()
    rendered(first)
    assert built == []  # the cache kept its text
    assert sorted(drifted) == sorted(audited)
    drifted.clear()
    # a new reading (new objects, as the worker sends them) where one hypervisor's drift changed
    one_more = replace(first, drifts={name: _drift(name, 2 if name == audited[1] else 1) for name in audited})
    found = rendered(one_more)
    assert drifted == [audited[1]]
    assert value(found, "hypervisor_placement_orphaned_consumers", hypervisor=audited[1]) == 2
    assert value(found, "hypervisor_placement_orphaned_consumers", hypervisor=audited[0]) == 1
    second = replace(first, drifts={name: _drift(name, 3) for name in audited})
    assert value(rendered(second), "hypervisor_placement_orphaned_consumers", hypervisor=audited[0]) == 3
    later = rendered(second, at=now + 3600)  # every hypervisor's data stale: none of its series
    assert series(later, "hypervisor_placement_orphaned_consumers") == {}
    failed = PlacementReport(up=False, drifts=None, error="down", last_success_at=now)
    assert series(rendered(failed), "hypervisor_placement_orphaned_consumers") == {}
    assert value(rendered(failed), "virtcap_placement_up") == 0
