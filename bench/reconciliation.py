"""The Placement reconciliation at fleet scale (`--only placement`, issue 29): a real Placement 16
(tests/support/placement_server.py, from the upstream virtualenv) holding 1,000 root providers
named after the hypervisors, each with Nova's inventories and 50 consumers (the domains libvirt
shows there), and a few leaked consumers; the same 1,000 test-driver hypervisors audited.

1. In process: `PlacementTask.read_once` (the first round, which describes the leaked consumers,
   and the next two), against the real Placement and against its answers recorded
   (bench/recorded_placement.py: what reading costs when Placement runs on machines of its own),
   then the reader (`PlacementReader.read_trees`) and `reconcile_fleet` alone: wall time, requests
   to Placement (per provider), CPU of this process (the exporter's side) and of Placement's
   processes, peak RSS growth; against the audit interval. Then one render of
   /metrics (`FragmentCache.render`) with the placement families and without.
2. `virtcap serve` on the same fleet with `placement:` and without, audits and Placement rounds
   every 30 s: /metrics scraped back to back and ten times a second, plain and gzipped, from a CPU
   the exporter and Placement do not use, p50/p99/max (as bench/scale.py measures them).

Loading Placement (providers and inventories through its API, allocations partly through a bulk
`POST /allocations` and the rest written into its database as that request writes them) is not
timed into any figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from consolidation import _reset_peak, _status_mib
from harness import (
    SCRAPERS,
    Scraper,
    Table,
    cell,
    free_port,
    get,
    latency_figures,
    make_hosts,
    metric_value,
    off_the_scrapers_cpu,
    print_table,
    process,
    threads_of,
    virtcap,
    wait,
    write_config,
)
from recorded_placement import reader_paths, record
from serving import FITTING, ROOMY
from virtcap.audit.placement import PlacementReader
from virtcap.config import Config, parse_config
from virtcap.exposition.families import PlacementShown, TaskHealth, views
from virtcap.exposition.fragments import FragmentCache
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.fleet.store import SnapshotStore
from virtcap.model.placement_drift import HypervisorView, domain_record, reconcile_fleet
from virtcap.model.resources import Resource
from virtcap.service.oneshot import audit_hypervisor_blocking
from virtcap.service.placement import PlacementTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.placement_loader import PROJECT_ID, USER_ID, PlacementLoader
from tests.support.placement_server import (
    PlacementHarnessError,
    PlacementServer,
    running_placement,
    upstream_gunicorn,
)

NOVA_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
"""What nova-compute reports for a libvirt host without devices: what Placement is loaded with."""
LEAKED_EVERY = 50
"""One leaked consumer (no domain of its UUID anywhere) on every 50th provider."""
UP = "virtcap_placement_up"
REQUESTS_OK = 'virtcap_placement_requests_total{outcome="ok"}'
DURATION = "virtcap_placement_read_duration_seconds"

_T = TypeVar("_T")


def placement_reconciliation(scratch: Path, runs: int, hypervisors: int, domains: int, quick: bool) -> None:
    try:
        upstream_gunicorn()
    except PlacementHarnessError as error:
        print_table("Placement reconciliation", ("result",), [(f"not measured: {error}",)])
        return
    paths = make_hosts(
        scratch / f"placement-{hypervisors}x{domains}", hypervisors, domains, size=ROOMY, flavors=FITTING
    )
    uris = {name: f"test://{path}" for name, path in paths.items()}
    with running_placement(scratch / "placement-server") as server:
        config = parse_config(
            fleet_config(scratch, uris, server.base_url, interval=None).read_text(), "bench-placement"
        )
        began = time.monotonic()
        store = audited_store(config)
        audited = time.monotonic() - began
        began = time.monotonic()
        database = scratch / "placement-server" / "placement.sqlite"
        consumers, leaked = load_placement(server, database, store, config)
        loaded = time.monotonic() - began
        # As if Placement ran on machines of its own, as it does in a cloud: its answers recorded
        # and served again at a fraction of its CPU (and the real one at idle priority, apart).
        leaks = [leaked_uuid(index) for index in range(len(uris)) if index % LEAKED_EVERY == 0]
        answers = scratch / "placement-answers.json"
        answers.write_text(json.dumps(record(server.base_url, reader_paths(server.base_url, leaks))))
        with recorded_placement(answers) as (recorded, recorded_pid):
            replayed = parse_config(
                fleet_config(scratch, uris, recorded, interval=None).read_text(), "bench-placement-recorded"
            )
            in_process(
                config,
                store,
                runs,
                (server.process.pid, replayed, recorded_pid),
                (audited, loaded, consumers, leaked),
            )
            at_idle_priority(list(group_members(server.process.pid)))
            # another machine's in a cloud: here beside the exporter, never on the scraper's CPU
            off_the_scrapers_cpu([*group_members(server.process.pid), recorded_pid])
            endpoints = [
                ("without placement:", None, None),
                ("with placement: (recorded answers)", recorded, None),
                # the same families in every scrape, no round in the window: what the rounds cost
                ("with placement: (recorded answers, scraped between rounds)", recorded, BETWEEN_ROUNDS),
                ("with placement: (a real Placement at idle priority)", server.base_url, None),
            ]
            served(scratch, uris, endpoints, runs, quick)


BETWEEN_ROUNDS = "between rounds"
"""An endpoint's rounds spaced so that the scrapers run between two of them: the first round
(at start, before the audits) reads few hypervisors, so the scrapes wait for the second, which
reads the whole fleet, and end before the third."""


def leaked_uuid(index: int) -> str:
    return f"{index:08d}-0000-4000-8000-00000000dead"


@contextmanager
def recorded_placement(answers: Path) -> Iterator[tuple[str, int]]:
    """bench/recorded_placement.py serving `answers`, at idle priority; its URL and process."""
    port = free_port()
    script = Path(__file__).with_name("recorded_placement.py")
    with process([sys.executable, str(script), str(answers), str(port)]) as child:
        wait(lambda: get(port, "/resource_providers") == 200, 60)
        at_idle_priority([child.pid])
        yield f"http://127.0.0.1:{port}", child.pid


def fleet_config(
    scratch: Path,
    uris: dict[str, str],
    endpoint: str | None,
    interval: str | None,
    *,
    placement_interval: str | None = None,
) -> Path:
    """The fleet's configuration: each hypervisor's provider named after it, room for the test
    driver's 100 GiB pools (bench/serving.py's disk ratio; the pool named, so that disk has a total
    and Placement a DISK_GB inventory), `placement:` when given an endpoint."""
    path = write_config(scratch, uris, **({"interval": interval} if interval else {}), concurrency=32)
    document = json.loads(path.read_text())
    if interval is None:
        del document["audit"]["interval"]  # the default, which the round is held to
    document["defaults"] = {"allocation_ratios": {"disk": 60.0}, "disk": {"pool": "default"}}
    for hypervisor in document["hypervisors"]:
        hypervisor["placement_provider"] = hypervisor["name"]
    if endpoint is not None:
        document["placement"] = {"endpoint": endpoint}
        if placement_interval is not None:
            document["placement"]["interval"] = placement_interval
    every = f"-{placement_interval}" if placement_interval else ""
    path = scratch / f"placement-{len(uris)}-{'with' if endpoint else 'without'}{every}.yaml"
    path.write_text(json.dumps(document))
    return path


def audited_store(config: Config) -> SnapshotStore:
    """Every hypervisor audited once in this process, as `virtcap serve` keeps its last audit."""
    store = SnapshotStore()
    store.track([hypervisor.name for hypervisor in config.hypervisors])
    for hypervisor in config.hypervisors:
        facts = audit_hypervisor_blocking(hypervisor, cpu_window=0.0)
        store.record(HypervisorSnapshot.audited(hypervisor, facts, config.flavor_demands), "ok")
    return store


def load_placement(
    server: PlacementServer, database: Path, store: SnapshotStore, config: Config
) -> tuple[int, int]:
    """Placement as Nova would have filled it for the audited fleet: per hypervisor a root provider
    with the inventories Nova reports (through the API) and an allocation per domain of what its
    flavor asks, and a leaked consumer on every LEAKED_EVERY-th. The first hypervisor's consumers
    and the leaked ones go through the API (a bulk `POST /allocations`); the others are written
    into Placement's database as that request writes them, since the API takes about 30 ms a
    consumer on this machine (25 minutes for 50,000). The consumers and leaked consumers loaded."""
    loader = PlacementLoader(server.base_url)
    policies = {hypervisor.name: hypervisor.policy for hypervisor in config.hypervisors}
    through_api: dict[str, Any] = {}
    written: dict[str, Any] = {}
    leaked = 0
    for index, (name, state) in enumerate(store.hypervisors.items()):
        good = state.last_good
        assert good is not None and good.facts is not None and good.capacity is not None, name
        uuid = loader.create_provider(name)
        inventories = {}
        for resource, capacity in good.capacity.resources.items():
            unit = resource.placement_unit
            if resource.placement_class not in NOVA_CLASSES or not capacity.total:
                continue
            inventories[resource.placement_class] = {
                "total": capacity.total // unit,
                "reserved": -(-(capacity.reserved or 0) // unit),
                "max_unit": (capacity.max_unit or capacity.total) // unit,
                "allocation_ratio": capacity.allocation_ratio,
            }
        body = {"resource_provider_generation": 0, "inventories": inventories}
        loader.call("PUT", f"/resource_providers/{uuid}/inventories", body)
        for domain in good.facts.domains:
            record = domain_record(domain, name, policies[name])
            (through_api if index == 0 else written)[record.uuid] = allocation(
                uuid, record.expected, record.project_id
            )
        if index % LEAKED_EVERY == 0:
            leak = leaked_uuid(index)
            through_api[leak] = allocation(uuid, {Resource.VCPU: 1}, None)
            leaked += 1
    loader.call("POST", "/allocations", through_api, expect=(204,))
    write_allocations(database, written)
    return len(through_api) + len(written) - leaked, leaked


def write_allocations(database: Path, consumers: Mapping[str, Any]) -> None:
    """Consumers with their allocations, as Placement's `POST /allocations` writes them (new
    consumers of generation 1, their projects and users, `used` per class), in one transaction.
    The API request before created the consumer type INSTANCE and the user."""
    now = "2026-01-01 00:00:00.000000"
    with sqlite3.connect(database, timeout=60) as db:
        classes = dict(db.execute("SELECT name, id FROM resource_classes"))
        providers = dict(db.execute("SELECT uuid, id FROM resource_providers"))
        (instance,) = db.execute("SELECT id FROM consumer_types WHERE name = 'INSTANCE'").fetchone()
        projects = {entry["project_id"] for entry in consumers.values()}
        db.executemany(
            "INSERT OR IGNORE INTO projects (created_at, external_id) VALUES (?, ?)",
            [(now, project) for project in sorted(projects)],
        )
        project_ids = dict(db.execute("SELECT external_id, id FROM projects"))
        (user,) = db.execute("SELECT id FROM users WHERE external_id = ?", (USER_ID,)).fetchone()
        db.executemany(
            "INSERT INTO consumers (created_at, uuid, project_id, user_id, generation, consumer_type_id)"
            " VALUES (?, ?, ?, ?, 1, ?)",
            [
                (now, uuid, project_ids[entry["project_id"]], user, instance)
                for uuid, entry in consumers.items()
            ],
        )
        db.executemany(
            "INSERT INTO allocations (created_at, resource_provider_id, consumer_id, resource_class_id, used)"
            " VALUES (?, ?, ?, ?, ?)",
            [
                (now, providers[provider], uuid, classes[name], amount)
                for uuid, entry in consumers.items()
                for provider, held in entry["allocations"].items()
                for name, amount in held["resources"].items()
            ],
        )


def allocation(provider: str, expected: Mapping[Resource, int], project: str | None) -> dict[str, Any]:
    """One consumer's entry of a bulk `POST /allocations`: new (generation null), an instance."""
    resources = {
        resource.placement_class: math.ceil(amount / resource.placement_unit)
        for resource, amount in expected.items()
        if resource.placement_class in NOVA_CLASSES and amount > 0
    }
    return {
        "allocations": {provider: {"resources": resources}},
        "project_id": project or PROJECT_ID,
        "user_id": USER_ID,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }


def in_process(
    config: Config,
    store: SnapshotStore,
    runs: int,
    placements: tuple[int, Config, int],
    built: tuple[float, float, int, int],
) -> None:
    """`placements`: the real Placement's process group, and the configuration reading the
    recorded answers instead, with their server's process."""
    audited, loaded, consumers, leaked = built
    placement_pid, replayed, recorded_pid = placements
    real_cpu = functools.partial(group_cpu_seconds, placement_pid)
    providers = len(config.hypervisors)
    interval = config.audit.interval
    figures: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):
        for where, section, cpu_of in (
            ("", config, real_cpu),
            (" (recorded answers)", replayed, functools.partial(process_cpu_seconds, recorded_pid)),
        ):
            task = PlacementTask(section, store)
            try:
                for label in ("first round", "next round", "next round again"):
                    step = f"PlacementTask.read_once{where}, {label}"
                    with measured(figures.setdefault(step, {}), cpu_of):
                        report = asyncio.run(task.read_once())
                    assert report.up and report.drifts is not None, report.error
                    figures[step].setdefault("requests", []).append(report.requests)
                    drifts = report.drifts
            finally:
                task.close()
        reader = PlacementReader(config.placement)  # type: ignore[arg-type]
        hosts = {name: state.last_good for name, state in store.hypervisors.items()}
        mapping = {name: name for name in hosts}
        alone = figures.setdefault("reader alone (read_trees, nothing described)", {})
        try:
            with measured(alone, real_cpu):
                read = reader.read_trees(mapping)
        finally:
            reader.close()
        alone.setdefault("requests", []).append(read.total_requests)
        policies = {hypervisor.name: hypervisor.policy for hypervisor in config.hypervisors}
        fleet_views = [
            HypervisorView(
                name,
                read.trees[name],
                good.capacity,  # type: ignore[union-attr,arg-type]
                tuple(domain_record(d, name, policies[name]) for d in good.facts.domains),  # type: ignore[union-attr]
            )
            for name, good in hosts.items()
        ]
        with measured(figures.setdefault("reconcile_fleet alone", {}), real_cpu):
            reconcile_fleet(fleet_views)
    orphaned = sum(len(drift.orphaned) for drift in drifts.values())
    unallocated = sum(len(drift.unallocated) for drift in drifts.values())
    mismatched = sum(len(drift.mismatched) for drift in drifts.values())
    rows: Table = []
    for label, found in figures.items():
        requests = found.get("requests")
        rows.append(
            (
                label,
                cell(found["wall"], " s"),
                cell(requests, "", 0) if requests else "-",
                cell([count / providers for count in requests], "", 3) if requests else "-",
                cell(found["cpu"], " s"),
                cell(found["placement_cpu"], " s"),
                cell(found["rss"], " MiB", 0) if "rss" in found else "n/a",
                f"{statistics.median(found['wall']) / interval:.0%} of {interval:g} s",
            )
        )
    print_table(
        f"Placement reconciliation in process: {providers:,} providers x "
        f"{consumers // providers} consumers ({consumers:,}, and {leaked} leaked), {os.cpu_count()} CPUs "
        f"(fleet audited in {audited:.0f} s, Placement loaded in {loaded:.0f} s; found {orphaned} "
        f"orphaned, {unallocated} unallocated, {mismatched} mismatched)",
        (
            "step",
            "wall",
            "requests",
            "requests / provider",
            "CPU, this process",
            "CPU, Placement",
            "peak RSS growth",
            "of the audit interval",
        ),
        rows,
    )
    render_rows(store, runs)


@contextmanager
def measured(figures: dict[str, list[float]], placement_cpu: Callable[[], float]) -> Iterator[None]:
    """Wall time, this process's CPU, Placement's processes' CPU and the growth of this process's
    peak RSS (VmHWM reset first, where Linux allows) of the block."""
    peak_known = _reset_peak()
    rss_before = _status_mib("VmRSS")
    theirs = placement_cpu()
    cpu = time.process_time()
    began = time.perf_counter()
    yield
    figures.setdefault("wall", []).append(time.perf_counter() - began)
    figures.setdefault("cpu", []).append(time.process_time() - cpu)
    figures.setdefault("placement_cpu", []).append(placement_cpu() - theirs)
    peak = _status_mib("VmHWM")
    if peak_known and peak is not None and rss_before is not None:
        figures.setdefault("rss", []).append(peak - rss_before)


def at_idle_priority(pids: list[int]) -> None:
    """Every thread of these processes at SCHED_IDLE: they run on CPU time no other process wants."""
    for thread in threads_of(pids):
        with contextlib.suppress(OSError):  # ended meanwhile
            os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))


def group_members(group: int) -> dict[int, list[str]]:
    """The processes of a process group (gunicorn's master and worker), with their stat fields
    after the command's name."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp, the 5th field, the 3rd after the command's name
            members[int(stat.parent.name)] = fields
    return members


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(group: int) -> float:
    """User and system CPU of every process in a process group."""
    ticks = sum(int(fields[11]) + int(fields[12]) for fields in group_members(group).values())  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def render_rows(store: SnapshotStore, runs: int) -> None:
    """One render of the whole exposition in this process, as the exporter's render thread does
    it: the first (every hypervisor's fragment rendered) and again (fragments kept: what a
    Placement round alone costs each render), with the placement families and without."""
    rows: Table = []
    sizes: dict[str, int] = {}
    for label, shown in (("without placement:", None), ("with placement:", PlacementShown(store.placement))):
        first: list[float] = []
        again: list[float] = []
        for _ in range(runs):
            cache = FragmentCache()
            first.append(timed(lambda: render(cache, store, shown))[0])  # noqa: B023
            seconds, body = timed(lambda: render(cache, store, shown))  # noqa: B023
            again.append(seconds)
            sizes[label] = len(body)
        rows.append((label, cell(first, " s", 3), cell(again, " s", 3), f"{sizes[label] / 1024**2:.1f} MiB"))
    print_table(
        f"/metrics rendered in process ({len(store.hypervisors):,} hypervisors): "
        "what the placement families cost",
        ("exposition", "first render", "render again (fragments kept)", "body"),
        rows,
    )


def render(cache: FragmentCache, store: SnapshotStore, placement: PlacementShown | None) -> bytes:
    return cache.render(
        views(store, time.time(), 3600.0), {}, TaskHealth({}, {}), store.tolerance, placement=placement
    )


def timed(work: Callable[[], _T]) -> tuple[float, _T]:
    began = time.perf_counter()
    result = work()
    return time.perf_counter() - began, result


def served(
    scratch: Path,
    uris: dict[str, str],
    endpoints: list[tuple[str, str | None, str | None]],
    runs: int,
    quick: bool,
) -> None:
    """`virtcap serve` with `placement:` (each endpoint) and without: /metrics scraped for two audit
    intervals, back to back then ten times a second, plain and gzipped (`SCRAPERS`), so that rounds
    and audits run during the scrapes, each exporter from the same time past its start (past the
    first computations, and for a BETWEEN_ROUNDS endpoint, between its second round and its third),
    by a scraper on a CPU of its own (`virtcap(scraper_apart=True)`), as Prometheus on a machine of
    its own, and the exporter's workers (Placement's reader, the failure tolerance's) on the
    scraper's CPU, apart from the event loop's (`harness.WorkersApart`): on one CPU, a worker's
    idle-class turns of a whole scheduler tick delay the scrapes that land in them. Back to back,
    the scraper fills its CPU and the reader finishes no round within the window."""
    interval, window = (10.0, 20.0) if quick else (30.0, 60.0)
    # a BETWEEN_ROUNDS endpoint's interval: its scrapers run from 20 s past its second round (which
    # reads the whole fleet) to their end, 3 windows later, before its third round
    between = 4 * window + 20.0
    rows: Table = []
    configs = [
        fleet_config(
            scratch,
            uris,
            url,
            interval=f"{interval:g}s",
            placement_interval=f"{between:g}s" if every == BETWEEN_ROUNDS else every,
        )
        for _, url, every in endpoints
    ]
    everything: dict[str, dict[str, dict[str, list[float]]]] = {
        label: {scraped: {} for scraped, _, _ in SCRAPERS} for label, _, _ in endpoints
    }
    # each run takes every endpoint in turn: a machine that slows down or speeds up over the
    # benchmark then weighs on each alike, rather than on the endpoints measured last
    for _ in range(runs):
        for (label, url, _), config in zip(endpoints, configs, strict=True):
            found = everything[label]
            exporter = virtcap(config, scraper_apart=True, workers_apart=True)
            with exporter as (port, child, ready), Scraper(port) as scraper:
                # every exporter scraped from the same time past its start: the first audit cycle's
                # failure tolerance and packing answers computed alike before the window
                time.sleep(max(between + 20.0 - ready, 0.0))
                for scraped, period, gzipped in SCRAPERS:
                    figures = found[scraped]
                    before = metric_value(port, REQUESTS_OK) or 0.0
                    measured = scraper.scrapes_while(None, window, period, gzipped=gzipped)
                    after = metric_value(port, REQUESTS_OK) or 0.0
                    figures.setdefault("cycle", []).append(ready)
                    latency_figures(figures, measured)
                    figures.setdefault("scrapes", []).append(len(measured))
                    if url is not None:
                        assert metric_value(port, UP) == 1.0, "Placement was not read"
                        figures.setdefault("round", []).append(metric_value(port, DURATION) or 0.0)
                        figures.setdefault("requests", []).append(after - before)
                status = Path(f"/proc/{child.pid}/status").read_text()
                peak = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
                for figures in found.values():
                    figures.setdefault("rss", []).append(int(peak.split()[1]) / 1024)
    for label, found in everything.items():
        rows.extend(
            (
                f"{label} {scraped}",
                cell(figures["cycle"], " s", 1),
                cell(figures["round"], " s", 1) if "round" in figures else "-",
                cell(figures["requests"], "", 0) if "requests" in figures else "-",
                cell(figures["scrapes"], "", 0),
                cell(figures["p50"], " ms"),
                cell(figures["p99"], " ms"),
                cell(figures["max"], " ms"),
                cell(figures["rss"], " MiB", 0),
            )
            for scraped, figures in found.items()
        )
    print_table(
        f"virtcap serve, {len(uris):,} hypervisors: /metrics scraped from a CPU of its own (the exporter's "
        f"workers on it too, apart from the event loop's) for {window:g} s "
        f"from {between + 20:g} s past the start, back to back then ten times a second (plain, then gzipped "
        f"as Prometheus asks), audits and Placement rounds every {interval:g} s (between rounds: "
        f"every {between:g} s)",
        (
            "exporter, scrapes",
            "first audit cycle",
            "last Placement round",
            "requests to Placement meanwhile",
            "scrapes",
            "p50",
            "p99",
            "max",
            "peak RSS",
        ),
        rows,
    )
