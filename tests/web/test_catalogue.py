"""The metric catalogue: the metrics page's table (docs/metrics.md) is generated from it, and a real
rendering of the demo fleet holds to it (every family catalogued, with its type, help and labels)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.files import ROOT
from virtcap.config.schema import ExpositionSection
from virtcap.demo import demo_config
from virtcap.exposition import catalogue
from virtcap.exposition.catalogue import CATALOGUE
from virtcap.exposition.families import PlacementShown, TaskHealth, render, views
from virtcap.exposition.fragments import FragmentCache
from virtcap.exposition.metric_family import UNIT_LABEL, MetricFamily
from virtcap.fleet.placement import PlacementReport
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.fleet.tolerance import one_shot_tolerance
from virtcap.model.facts import DomainState
from virtcap.model.maintenance import Maintenance
from virtcap.model.placement_drift import Drift, HeldConsumer, Mismatch, domain_record
from virtcap.model.reclaim import ReclaimPolicy
from virtcap.model.resources import GIB, MIB, Resource
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.reclaim import ReclaimTracker

METRICS_PAGE = ROOT / "docs/metrics.md"
NOT_IN_THE_DEMO_YET = frozenset(
    {
        # No demo host reports vCPU delays, and none can: libvirt's test driver has no vCPU
        # statistics and the demo's captures are frozen (a counter that never moves would show no
        # contention). tests/audit/test_contention_libvirtd.py renders it from a real libvirtd.
        catalogue.VCPU_WAIT.name,
    }
)
UNITS = {"cpus", "bytes", "integer"}


@dataclass(frozen=True)
class Rendered:
    """One family of the text format: its `# HELP` and `# TYPE` lines and its samples' labels."""

    name: str
    help: str
    type: str
    samples: Sequence[tuple[str, Mapping[str, str]]]


def _unescape_help(text: str) -> str:
    return re.sub(r"\\(.)", lambda found: {"n": "\n"}.get(found.group(1), found.group(1)), text)


def parse_exposition(text: str) -> list[Rendered]:
    """The families in rendered order, read from the HELP and TYPE lines as Prometheus reads them."""
    result = []
    for chunk in re.split(r"^(?=# HELP )", text, flags=re.MULTILINE):
        if not chunk:
            continue
        help_line, type_line, _ = chunk.split("\n", 2)
        _, _, name, help_text = help_line.split(" ", 3)
        _, _, type_name, type_ = type_line.split(" ")
        assert type_name == name, chunk[:200]
        (parsed,) = text_string_to_metric_families(chunk)
        samples = [(sample.name, sample.labels) for sample in parsed.samples]
        result.append(Rendered(name, _unescape_help(help_text), type_, samples))
    return result


@dataclass(frozen=True)
class Demo:
    exposition: str
    units: Mapping[str, str]
    """Each resource's unit by its label, from the capacity."""


@pytest.fixture(scope="module")
def demo() -> Demo:
    config = demo_config()
    store = SnapshotStore()
    store.track([h.name for h in config.hypervisors])
    units = {}
    snapshots = asyncio.run(audit_fleet_once(config, cpu_window=0.0))
    for snapshot in snapshots:
        store.record(snapshot, "success" if snapshot.up else "failure")
        if snapshot.capacity is not None:
            units.update({str(resource): resource.unit for resource in snapshot.capacity.resources})
    tolerance = one_shot_tolerance(snapshots, config.multipliers, 3, flavors=config.flavor_demands)
    # a pending claim and a maintenance with a start and an end (of the hypervisor that is down: its audits'
    # capacity does not say): the series only they make
    down = next(snapshot.name for snapshot in snapshots if not snapshot.up)
    maintenance = {down: (Maintenance("api", "demo", until=time.time() + 3600, since=time.time()),)}
    fleet = views(store, time.time(), 600, {config.hypervisors[0].name: 1}, maintenance)
    tasks = TaskHealth(dict.fromkeys(catalogue.TASK_KINDS, 1), dict.fromkeys(catalogue.TASK_KINDS, 0))
    # the per-domain series too, which are opt-in
    everything = ExpositionSection(domains=True)
    flavors = {"m1.small": "configured", "g1.large": "discovered"}
    # the demo's shut-off domains, seen shut off 10 s before, with a window of 1 s: reclaimable
    tracker = ReclaimTracker(ReclaimPolicy(shutoff_after=1.0, idle_cpu_below=0.05, idle_for=1.0))
    for snapshot in snapshots:
        if snapshot.facts is not None and snapshot.hypervisor is not None:
            tracker.record(snapshot.name, snapshot.facts, snapshot.hypervisor.policy, now=0.0)
    reclaimable = tracker.reclaimable_domains(now=10.0)
    placement = PlacementShown(placement_reading(snapshots))
    body = render(
        fleet,
        {"created": 2},
        tasks,
        tolerance,
        exposition=everything,
        flavors=flavors,
        database_up=True,
        reclaimable=reclaimable,
        placement=placement,
    )
    cached = FragmentCache().render(
        fleet,
        {"created": 2},
        tasks,
        tolerance,
        exposition=everything,
        flavors=flavors,
        database_up=True,
        reclaimable=reclaimable,
        placement=placement,
    )
    assert cached == body
    return Demo(body.decode(), units)


def placement_reading(snapshots: Sequence[HypervisorSnapshot]) -> PlacementReport:
    """A reading of Placement with a drift of each kind on the first hypervisor with domains."""
    audited = next(
        s for s in snapshots if s.facts is not None and s.facts.domains and s.hypervisor is not None
    )
    assert audited.facts is not None and audited.hypervisor is not None
    first, second = (
        domain_record(d, audited.name, audited.hypervisor.policy) for d in audited.facts.domains[:2]
    )
    drift = Drift(
        hypervisor=audited.name,
        provider=audited.facts.hostname,
        inventory={(Resource.VCPU, "total"): 0.0, (Resource.MEMORY, "reserved"): 512.0 * MIB},
        orphaned=(
            HeldConsumer("00000000-0000-4000-8000-0000000000ff", {Resource.VCPU: 1, Resource.MEMORY: GIB}),
        ),
        unallocated=(first,),
        mismatched=(Mismatch(second.uuid, second.name, {Resource.VCPU: 1}, second.expected),),
        usage={Resource.VCPU: 1, Resource.MEMORY: 0},
    )
    now = time.time()
    return PlacementReport(
        up=True,
        drifts={audited.name: drift},
        unmatched=("compute-11",),
        read_at=now,
        last_success_at=now,
        duration_seconds=0.5,
        requests=3,
        requests_total={"ok": 3, "error": 0},
    )


def test_the_rendered_demo_fleet_holds_to_the_catalogue(demo: Demo) -> None:
    rendered = parse_exposition(demo.exposition)
    assert [family.name for family in rendered] == [family.name for family in CATALOGUE]
    for family, entry in zip(rendered, CATALOGUE, strict=True):
        assert family.type == entry.text_type, family.name
        assert family.help == entry.help, family.name
        assert family.samples or family.name in NOT_IN_THE_DEMO_YET, (
            f"the demo fleet renders no series of {family.name}"
        )
        for sample_name, labels in family.samples:
            assert sample_name == entry.name  # no _created or other extra series
            assert set(labels) == set(entry.all_labels), (entry.name, labels)
            for label, values in entry.label_values.items():
                assert labels[label] in values, (entry.name, labels)
            if "state" in labels:
                assert labels["state"] in {state.value for state in DomainState}
            if "resource" in labels:
                assert labels["resource"] in demo.units, (entry.name, labels)
            if entry.unit == UNIT_LABEL:
                assert labels["unit"] in UNITS
                assert labels["unit"] == demo.units[labels["resource"]], (entry.name, labels)


def test_each_families_unit_is_in_its_name_or_its_unit_label() -> None:
    unit_suffix = re.compile(r"_(seconds|bytes|cpus|ratio|celsius|volts|amperes|joules|grams|meters)$")
    for family in CATALOGUE:
        base = family.name.removesuffix("_total").removesuffix("_info")
        if family.unit == UNIT_LABEL:
            assert "unit" in family.labels and not unit_suffix.search(base), family.name
        elif family.unit:
            assert base.endswith(f"_{family.unit}") and "unit" not in family.labels, family.name
        else:
            assert not unit_suffix.search(base) and "unit" not in family.all_labels, family.name


def metrics_table_section() -> str:
    """The metrics page up to its first section: the table and what introduces it."""
    text = METRICS_PAGE.read_text(encoding="utf-8")
    return text[: text.index("\n## ")]


def test_the_metrics_page_table_is_the_catalogues() -> None:
    assert catalogue.generated_block(metrics_table_section()) == catalogue.markdown_table(), (
        "docs/metrics.md's table is out of date: run `python -m virtcap.exposition.catalogue docs/metrics.md`"
    )


def test_the_metrics_page_documents_every_family_and_no_other() -> None:
    """Read back as a reader would: names, types, label names and stability of the table's rows."""
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (\w+) \| ([^|]+) \| (stable|experimental) \|",
        metrics_table_section(),
        re.MULTILINE,
    )
    documented = {
        name: (type_, re.sub(r"\s*\([^)]*\)", "", labels).strip(), stability)
        for name, type_, labels, stability in rows
    }
    assert len(documented) == len(rows), "a family is documented twice"
    assert documented == {
        family.name: (family.type, ", ".join(family.all_labels), family.stability) for family in CATALOGUE
    }


def test_the_generator_rewrites_only_the_table(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    before, after = "# Title\n\nprose\n\n", "\nmore prose\n"
    document.write_text(f"{before}{catalogue.TABLE_START}\n| stale |\n{catalogue.TABLE_END}\n{after}")
    assert catalogue.main([str(document)]) == 0
    assert document.read_text() == (
        f"{before}{catalogue.TABLE_START}\n{catalogue.markdown_table()}{catalogue.TABLE_END}\n{after}"
    )
    with pytest.raises(ValueError, match="no generated table"):
        catalogue.with_table("no markers")


def test_an_entry_is_checked_when_it_is_written() -> None:
    with pytest.raises(ValueError, match="_total"):
        MetricFamily("virtcap_things", "counter", "Things.", ())
    with pytest.raises(ValueError, match="_info"):
        MetricFamily("virtcap_identity", "info", "Identity.", ())
    with pytest.raises(ValueError, match="only a counter"):
        MetricFamily("virtcap_resource_total", "gauge", "A size named like a counter.", ())
    with pytest.raises(ValueError, match="unit"):
        MetricFamily("virtcap_wait", "gauge", "Wait.", (), "seconds")
    with pytest.raises(ValueError, match="unit"):
        MetricFamily("virtcap_amount", "gauge", "Amount.", ("resource",), UNIT_LABEL)
    with pytest.raises(ValueError, match="no label"):
        MetricFamily("virtcap_x", "gauge", "X.", ("a",), label_values={"b": ("1",)})
    with pytest.raises(TypeError, match="not a counter"):
        catalogue.HYPERVISOR_UP.counter()
