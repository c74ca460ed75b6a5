"""What-if scenarios for people: `virtcap plan scenario FILE` (one audit of the fleet) and
`POST /api/v1/plans/scenarios` (the exporter's snapshots and pending claims). The document
(virtcap.contract.scenarios) is resolved against the configuration and the fleet here (names,
groups, flavors, captures, the added hypervisors' policies), then computed by
virtcap.fleet.scenario, in the exporter's planner process (service/consolidation.py) when served.
Nothing is held, moved or changed; the exporter's own state is only read."""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path

import libvirt

from virtcap.audit.capture_format import CaptureFileError, load_capture
from virtcap.audit.connection import AuditError
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.replay import ReplayConnection
from virtcap.config import Config, ConfigError, DiskSource, configure_new_hypervisor
from virtcap.config.yamlfile import load_yaml_file
from virtcap.contract.scenarios import (
    MAX_SCENARIO_BYTES,
    AddedHypervisorsSection,
    CompactionAnswer,
    DemandSection,
    DisplacedAnswer,
    FleetAnswersModel,
    HostsSection,
    PlacedAnswer,
    PolicyChangeSection,
    Refused,
    ScenarioAnswer,
    ScenarioDocument,
    ScenarioError,
    UnplacedAnswer,
    parse_scenario,
)
from virtcap.fleet.claim_records import Claim
from virtcap.fleet.scenario import (
    FleetAnswers,
    ScenarioOutcome,
    ScenarioSettings,
    SoldAnswers,
    SoldUnit,
    SolveError,
    fleet_answers,
    run_scenario,
    scenario_reserve,
    sold_answers,
    sold_from,
    sold_unit,
    sold_units,
    solve_for_added,
)
from virtcap.fleet.scheduling import FleetEntry, planned_hosts
from virtcap.model.facts import HostFacts
from virtcap.model.host_fit import Demand
from virtcap.model.pci import PCI_ALIAS_SPEC, alias_request_problem
from virtcap.model.resources import resource_by_label
from virtcap.model.scenario.hosts import PlannedHost
from virtcap.model.scenario.placement import Refusals
from virtcap.model.scenario.sku import sku_facts
from virtcap.model.scenario.spec import (
    AddedHypervisors,
    DemandItem,
    GroupKey,
    HostSelection,
    PolicyChange,
    Scenario,
)
from virtcap.model.scheduler import HostState
from virtcap.service.flavors import with_discovered_flavors
from virtcap.service.oneshot import audit_fleet_once
from virtcap.service.planner import Job, Planner, one_worker, pool_processes
from virtcap.service.slices import in_slices
from virtcap.service.tolerance_worker import pickle_one
from virtcap.service.worker_process import start_worker
from virtcap.units import brief_repr, format_bytes

SOLVE_FOR = ("add_hypervisors",)
"""What `--solve-for` can solve for."""


def read_scenario_file(path: Path | str) -> ScenarioDocument:
    """The scenario file, read (at most MAX_SCENARIO_BYTES) and validated; ScenarioError naming the
    file and the key."""
    try:
        raw = load_yaml_file(path, MAX_SCENARIO_BYTES)
    except ConfigError as error:
        raise ScenarioError(str(error)) from None
    return parse_scenario(raw, str(path))


class _Resolver:
    """The document's names looked up in the configuration and the fleet, each error as `key: why`."""

    def __init__(
        self,
        config: Config,
        hosts: Sequence[PlannedHost],
        flavors: Mapping[str, Demand],
        base: Path | None,
    ) -> None:
        self.config = config
        self.hosts = hosts
        self.flavors = flavors
        self.base = base
        self.configured = {h.name for h in config.configured_hypervisors}
        self.groups: set[GroupKey] = {g for h in config.hypervisors for g in h.groups}
        self.groups.update(g for host in hosts for g in host.groups)

    def selection(self, section: HostsSection | PolicyChangeSection | None, key: str) -> HostSelection:
        if section is None:
            return HostSelection()
        for index, name in enumerate(section.hypervisors):
            if name not in self.configured:
                raise ScenarioError(f"{key}.hypervisors[{index}]: unknown hypervisor {brief_repr(name)}")
            if not any(h.name == name for h in self.config.hypervisors):
                raise ScenarioError(f"{key}.hypervisors[{index}]: {self.config.not_here(name)}")
        groups = frozenset((kind, name) for kind, names in (section.groups or {}).items() for name in names)
        for kind, name in sorted(groups - self.groups):
            raise ScenarioError(f"{key}.groups.{kind}: no hypervisor is in the {kind} {brief_repr(name)}")
        every = isinstance(section, PolicyChangeSection) and section.all
        return HostSelection(frozenset(section.hypervisors), groups, every)

    def policy_change(self, section: PolicyChangeSection, index: int) -> PolicyChange:
        key = f"policy[{index}]"
        ratios = section.allocation_ratios.model_dump(exclude_none=True) if section.allocation_ratios else {}
        reserved = section.reserved.model_dump(exclude_none=True) if section.reserved else {}
        cpu_sets: dict[str, frozenset[int] | None] = {
            name: getattr(section, name)
            for name in ("cpu_shared_set", "cpu_dedicated_set")
            if name in section.model_fields_set
        }
        return PolicyChange(
            self.selection(section, key),
            {resource_by_label(label): value for label, value in ratios.items()},
            {resource_by_label(label): value for label, value in reserved.items()},
            cpu_sets,
        )

    def added(self, section: AddedHypervisorsSection, index: int) -> AddedHypervisors:
        key = f"add_hypervisors[{index}]"
        prefix = section.name_prefix or f"added-{index + 1}"
        taken = self.configured | {host.name for host in self.hosts}
        clash = next((n for n in (f"{prefix}-{k}" for k in range(1, section.count + 1)) if n in taken), None)
        if clash is not None:
            raise ScenarioError(f"{key}.name_prefix: {clash} is a hypervisor of the fleet already")
        try:
            hypervisor = configure_new_hypervisor(self.config, prefix, section, key)
        except ConfigError as error:
            raise ScenarioError(str(error).removeprefix(f"{self.config.source}: ")) from None
        if section.sku is not None:
            template = sku_facts(prefix, section.sku.sku())
        else:
            template = self._capture(section, key, hypervisor.disk)
        return AddedHypervisors(section.count, prefix, template, hypervisor.policy, hypervisor.groups)

    def _capture(self, section: AddedHypervisorsSection, key: str, disk: DiskSource | None) -> HostFacts:
        if self.base is None:
            raise ScenarioError(
                f"{key}.capture: not through the API (the exporter reads no file a request names); "
                "describe the hardware with sku, or run virtcap plan scenario with --config"
            )
        path = Path(section.capture or "")
        path = path if path.is_absolute() else self.base / path
        try:
            connection = ReplayConnection(load_capture(path))
            facts = audit_host(connection, f"replay://{path}", disk, cpu_window=0.0)
        except (CaptureFileError, AuditError, libvirt.libvirtError, OSError, ValueError) as error:
            raise ScenarioError(f"{key}.capture: {error}") from None
        return replace(facts, domains=())

    def demand(self, index: int, section: DemandSection) -> DemandItem:
        key = f"demand[{index}]"
        flavor = section.flavor
        if isinstance(flavor, str):
            found = self.flavors.get(flavor)
            if found is None:
                known = ", ".join(sorted(self.flavors)) or "none"
                raise ScenarioError(
                    f"{key}.flavor: unknown flavor {brief_repr(flavor)}; expected one of: {known}"
                )
            demand, label = found, flavor
        else:
            spec = flavor.extra_specs.get(PCI_ALIAS_SPEC)
            problem = None if spec is None else alias_request_problem(spec, self.config.pci_aliases)
            if problem is not None:
                raise ScenarioError(f"{key}.flavor.extra_specs.{PCI_ALIAS_SPEC}: {problem}")
            demand = flavor.demand()
            label = f"{flavor.vcpu} vCPU, {format_bytes(flavor.memory)}, {format_bytes(flavor.disk)} disk"
        if section.availability_zone is not None:
            zone = section.availability_zone
            if ("availability_zone", zone) not in self.groups:
                raise ScenarioError(f"{key}.availability_zone: unknown availability zone {brief_repr(zone)}")
            demand = replace(demand, availability_zone=zone)
        return DemandItem(label, demand, section.count)


def resolve_scenario(
    document: ScenarioDocument,
    config: Config,
    hosts: Sequence[PlannedHost],
    flavors: Mapping[str, Demand],
    *,
    base: Path | None,
) -> Scenario:
    """The document in the model's terms; ScenarioError (`key: why`) where it names what the
    configuration or the fleet does not have. `base`: the scenario file's directory, where relative
    capture paths are read from (None: through the API, where captures are refused)."""
    resolver = _Resolver(config, hosts, flavors, base)
    return Scenario(
        policy=tuple(resolver.policy_change(section, i) for i, section in enumerate(document.policy)),
        remove=resolver.selection(document.remove_hypervisors, "remove_hypervisors"),
        drain=resolver.selection(document.drain, "drain"),
        add=tuple(resolver.added(section, i) for i, section in enumerate(document.add_hypervisors)),
        demand=tuple(resolver.demand(i, section) for i, section in enumerate(document.demand)),
        reserve_host_failures=document.reserve_host_failures,
    )


def scenario_settings(config: Config, flavors: Mapping[str, Demand]) -> ScenarioSettings:
    tolerance = config.failure_tolerance
    return ScenarioSettings(
        flavors=dict(flavors),
        multipliers=config.multipliers,
        reserve_host_failures=tolerance.reserve_host_failures,
        failure_bound=max(tolerance.max_host_failures, tolerance.reserve_host_failures),
    )


def compute_scenario(
    hosts: Sequence[PlannedHost],
    scenario: Scenario,
    settings: ScenarioSettings,
    solve_for: str | None,
    *,
    parallel: bool | None = None,
) -> ScenarioAnswer:
    """The answer (blocking, CPU-bound: in a worker process or a command). ScenarioError where the
    scenario does not apply (a policy change that makes a hypervisor's CPU sets overlap) or the
    search finds no count.

    The answers before do not depend on the scenario (but for its reserve): with `parallel`, they
    are computed in a process of their own (spawned, killed with this one) while this one places
    the scenario, searches and answers after; the sellable instances after go to that process
    too, behind them (the answers after take longer than those before: the fleet is larger), so
    that both sides take about the time of one on a machine of two CPUs. By default (None), for
    fleets of PARALLEL_FROM_HYPERVISORS and more."""
    reserve = scenario_reserve(scenario, settings)
    with _BeforeAnswers(hosts, settings, reserve, parallel=parallel) as before:
        try:
            if solve_for == "add_hypervisors":
                outcome = solve_for_added(
                    hosts, scenario, settings, before=before.result, sold_elsewhere=before.sold_after
                )
            else:
                outcome = run_scenario(
                    hosts, scenario, settings, before=before.result, sold_elsewhere=before.sold_after
                )
        except (SolveError, ValueError) as error:
            raise ScenarioError(str(error)) from None
    return scenario_answer(outcome)


def _answers_before(pickled: bytes, settings: ScenarioSettings, reserve: int) -> FleetAnswers:
    """In the process of the answers before: the fleet as given."""
    hosts: list[PlannedHost] = pickle.loads(pickled)
    return fleet_answers([host.state() for host in hosts], settings, reserve)


_AFTER: list[HostState] = []
"""In the second process: the fleet after the scenario, loaded once for its sellable counts."""


def _load_after(pickled: bytes) -> None:
    _AFTER[:] = pickle.loads(pickled)


def _sold_unit_apart(settings: ScenarioSettings, reserve: int, unit: SoldUnit) -> int:
    """In the second process: one sellable count of the fleet after (`_load_after` first)."""
    if not _AFTER:
        raise RuntimeError("the fleet after was not loaded")
    return sold_unit(_AFTER, settings, reserve, unit)


PARALLEL_FROM_HYPERVISORS = 100
"""Below this, the answers before take less than starting a process (a second or two) saves."""


class _SharedCounts:
    """The sellable counts of the fleet after, count by count: the second process takes the
    largest left (the fleet's first) as soon as it is done with the answers before and after each
    count it finishes; this one the smallest left once it reads them. Whichever side is free first
    helps the other (a zoned fleet's answers before take longer than the rest of those after; a
    fleet in one zone's, less). A count the second process fails is computed here."""

    def __init__(
        self, pool: ProcessPoolExecutor, states: Sequence[HostState], settings: ScenarioSettings, reserve: int
    ) -> None:
        self._pool = pool
        self._states = states
        self._settings = settings
        self._reserve = reserve
        self._lock = threading.Lock()
        self._units = sold_units(states, settings)
        self._counts: dict[SoldUnit, int] = {}
        self._failed: list[SoldUnit] = []
        self._apart = 0
        """Counts handed to the second process and not answered yet."""
        self._settled = threading.Condition(self._lock)

    def start(self, before: Future[FleetAnswers]) -> None:
        """The answers before are done (a callback of their future, in the pool's thread)."""
        if before.cancelled() or before.exception() is not None:
            return  # computed here instead
        try:
            self._pool.submit(_load_after, pickle.dumps(list(self._states), pickle.HIGHEST_PROTOCOL))
        except (BrokenProcessPool, RuntimeError):  # shut down: computed here
            return
        self._next()

    def _next(self) -> None:
        with self._lock:
            if not self._units:
                return
            unit = self._units.pop(0)
            self._apart += 1
        try:
            future = self._pool.submit(_sold_unit_apart, self._settings, self._reserve, unit)
        except (BrokenProcessPool, RuntimeError):
            self._answered(unit, None)
            return
        future.add_done_callback(lambda done: self._answered(unit, done))

    def _answered(self, unit: SoldUnit, done: Future[int] | None) -> None:
        count = None
        if done is not None and not done.cancelled() and done.exception() is None:
            count = done.result()
        with self._lock:
            self._apart -= 1
            if count is None:
                self._failed.append(unit)
            else:
                self._counts[unit] = count
            self._settled.notify_all()
        if count is not None:
            self._next()

    def read(self) -> SoldAnswers:
        while True:
            with self._lock:
                unit = self._units.pop() if self._units else (self._failed.pop() if self._failed else None)
                if unit is None:
                    while self._apart and not self._failed:
                        self._settled.wait()
                    if not self._failed:
                        return sold_from(self._counts)
                    continue
            count = sold_unit(self._states, self._settings, self._reserve, unit)
            with self._lock:
                self._counts[unit] = count


class _BeforeAnswers:
    """The answers before, computed beside the rest (`parallel`) or when first asked for."""

    def __init__(
        self, hosts: Sequence[PlannedHost], settings: ScenarioSettings, reserve: int, *, parallel: bool | None
    ) -> None:
        self._hosts = hosts
        self._settings = settings
        self._reserve = reserve
        self._parallel = parallel
        self._pool: ProcessPoolExecutor | None = None
        self._future: Future[FleetAnswers] | None = None

    def __enter__(self) -> _BeforeAnswers:
        parallel = self._parallel
        if parallel or (parallel is None and len(self._hosts) >= PARALLEL_FROM_HYPERVISORS):
            self._pool = one_worker(start_worker)
            pickled = pickle.dumps(list(self._hosts), pickle.HIGHEST_PROTOCOL)
            self._future = self._pool.submit(_answers_before, pickled, self._settings, self._reserve)
        return self

    def sold_after(self, states: Sequence[HostState], reserve: int) -> Callable[[], SoldAnswers]:
        """The sellable instances after, shared between the second process, from the moment it is
        done with the answers before, and this one, once it is done with the rest of the answers
        after (`_SharedCounts`); computed here alone without a second process."""
        if self._pool is None or self._future is None:
            return lambda: sold_answers(states, self._settings, reserve)
        shared = _SharedCounts(self._pool, states, self._settings, reserve)
        self._future.add_done_callback(shared.start)
        return shared.read

    def result(self) -> FleetAnswers:
        if self._future is not None:
            try:
                return self._future.result()
            except BrokenProcessPool:  # it could not start, or died: the same answers here
                pass
        return fleet_answers([host.state() for host in self._hosts], self._settings, self._reserve)

    def __exit__(self, *_: object) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            for process in pool_processes(pool):
                process.kill()  # an answer no longer wanted (an error after): not waited for
            pool.shutdown(wait=True, cancel_futures=True)


def scenario_answer(outcome: ScenarioOutcome) -> ScenarioAnswer:
    applied = outcome.applied
    return ScenarioAnswer(
        before=_answers(outcome.before),
        after=_answers(outcome.after),
        placed=[
            PlacedAnswer(
                flavor=item.label, count=sum(item.hypervisors.values()), hypervisors=dict(item.hypervisors)
            )
            for item in outcome.placed
        ],
        unplaced=[
            UnplacedAnswer(flavor=item.label, count=item.count, reasons=_refused(item.refusals))
            for item in outcome.unplaced
        ],
        displaced=[
            DisplacedAnswer(
                domain=move.domain,
                uuid=move.uuid,
                source=move.source,
                destination=move.destination,
                reasons=_refused(move.refusals) if move.refusals is not None else None,
            )
            for move in outcome.moves
        ],
        added=list(applied.added),
        removed=list(applied.removed),
        drained=list(applied.drained),
        reserve_host_failures=outcome.reserve_host_failures,
        solved_add_hypervisors=outcome.added_count,
        tries={str(count): fitted for count, fitted in outcome.tries},
        seconds=round(outcome.seconds, 3),
    )


def _refused(refusals: Refusals) -> Refused:
    return Refused(refused_by=dict(refusals.refused_by), example=refusals.example)


def _answers(found: FleetAnswers) -> FleetAnswersModel:
    def by_zone(counts: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
        zones: dict[str, dict[str, int]] = {}
        for (zone, flavor), count in sorted(counts.items()):
            zones.setdefault(zone, {})[flavor] = count
        return zones

    compaction = found.compaction
    return FleetAnswersModel(
        hypervisors=found.hypervisors,
        eligible=found.eligible,
        schedulable=dict(found.schedulable),
        schedulable_by_zone=by_zone(found.schedulable_by_zone),
        sellable=dict(found.sellable),
        sellable_by_zone=by_zone(found.sellable_by_zone),
        failures_tolerated=found.failures_tolerated,
        failure_bound=found.failure_bound,
        stranded={resource.label: amount for resource, amount in found.stranded.items()},
        compaction=CompactionAnswer(
            hypervisors=compaction.hypervisors,
            lower_bound=compaction.lower_bound,
            optimal=compaction.optimal,
            freeable=compaction.freeable,
        )
        if compaction is not None
        else None,
    )


def scenario_locally(
    config: Config, document: ScenarioDocument, base: Path, solve_for: str | None
) -> ScenarioAnswer:
    """One audit of the fleet (no pending claims: there is no ledger), the scenario resolved against
    it, then computed. Runs its own event loop: for `virtcap plan scenario`."""
    snapshots = asyncio.run(audit_fleet_once(config))
    audited = [(s.name, s.facts) for s in snapshots if s.facts is not None]
    effective = with_discovered_flavors(config, audited)
    hosts = planned_hosts([FleetEntry.of(snapshot) for snapshot in snapshots], [])
    flavors = effective.flavor_demands
    scenario = resolve_scenario(document, effective, hosts, flavors, base=base)
    return compute_scenario(hosts, scenario, scenario_settings(effective, flavors), solve_for)


SCENARIO_TIME_LIMIT_SECONDS = 600.0
"""How long a scenario may take in the exporter's planner before its worker is stopped: the
benchmark's 1,000 x 50 fleet takes about a minute, a search for the hypervisors to add a few."""


def _scenario_in_worker(
    pickled: Sequence[bytes], scenario: Scenario, settings: ScenarioSettings, solve_for: str | None
) -> tuple[bool, str]:
    """In the planner's worker process: (True, the answer's JSON) or (False, why it does not apply)."""
    hosts = [pickle.loads(one) for one in pickled]
    try:
        return True, compute_scenario(hosts, scenario, settings, solve_for).as_json()
    except ScenarioError as error:
        return False, str(error)


async def plan_scenario(
    planner: Planner,
    fleet: Sequence[FleetEntry],
    claims: Sequence[Claim],
    config: Config,
    flavors: Mapping[str, Demand],
    *,
    document: ScenarioDocument,
    solve_for: str | None,
) -> str:
    """The answer's JSON for the exporter's fleet with its pending claims (`config`: with the
    discovered flavors, `flavors` their demands). Raises ScenarioError (400), PlannerBusyError or
    PlannerFailedError (503). On the event loop: the hypervisors are taken and pickled a slice at
    a time, the scenario computed in the planner's worker."""
    hosts: list[PlannedHost] = []
    pickled = await in_slices(fleet, lambda entry: _pickled_host(entry, claims, hosts))
    scenario = resolve_scenario(document, config, hosts, flavors, base=None)
    settings = scenario_settings(config, flavors)
    chunks = [one for entry in pickled for one in entry]

    async def prepared() -> Job:
        return _scenario_in_worker, (chunks, scenario, settings, solve_for)

    answered, text = await planner.submit(prepared, SCENARIO_TIME_LIMIT_SECONDS, "the scenario")
    if not answered:
        raise ScenarioError(text)
    return text


def _pickled_host(entry: FleetEntry, claims: Sequence[Claim], hosts: list[PlannedHost]) -> list[bytes]:
    found = planned_hosts([entry], claims)
    hosts.extend(found)
    return [pickle_one(host) for host in found]
