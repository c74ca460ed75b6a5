"""Where instances fit within a hypervisor: its NUMA cells and PCI devices, beside the whole-host
classes.

Nova's scheduler first asks Placement for the whole-host classes (capacity.py), then its filters
test the host's NUMA cells (NUMATopologyFilter) and PCI devices (PciPassthroughFilter), and
nova-compute's claim repeats both tests (`_test_numa_topology`, `_test_pci`). VGPUs need no test
here: they are a Placement class, one provider per physical GPU (vgpu.py).

A flavor's count within the host is how many instances in a row pass those tests, each consuming
what it was given before the next is tried, each fitted with its own topology as nova-compute's
claim fits it: the NUMA fit picks the cells and the CPU pinning, then the devices are taken from
the pools near those cells. (The scheduler fits the later instances of one request with the
topology fitted before, its page size chosen: model/scheduler/request.py.)

Each refusal is a `HostFitRefusal` that names its test, so that the scheduler files it under
its filter without reading its words.

Pure: facts and policy in, cells and pools out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from virtcap.model.facts import HostFacts
from virtcap.model.numa.cells import HostCell, host_cells
from virtcap.model.numa.fitting import NumaFit, fit
from virtcap.model.numa.request import InstanceTopology, instance_topology
from virtcap.model.numa.usage import PinningConflictError, consume, how_many_fit
from virtcap.model.pci import (
    PCI_ALIAS_SPEC,
    PciAlias,
    PciPool,
    PciRequestError,
    apply_requests,
    device_pools,
    parse_alias_request,
)
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import MIB, Amounts, Resource, placement_units

Constraint = Literal["numa", "pci"]
"""What within the host limits a flavor below its whole-host count: its NUMA fit (cells, pinned
CPUs, hugepages, devices near the cells) or, for a flavor without a NUMA topology, its devices."""


@dataclass(frozen=True, slots=True)
class WithinHost:
    """What one instance of a flavor (or a claim carrying one) asks of a hypervisor's cells and
    devices, beside its Placement request."""

    topology: InstanceTopology | None = None
    """The NUMA topology Nova gives it (`hw:numa_nodes`, `hw:cpu_policy`, `hw:mem_page_size`,
    ...), None where it gets none."""
    pci_alias: str | None = None
    """Its `pci_passthrough:alias`: the devices it asks for by alias."""
    pci_numa_policy: str | None = None
    """Its `hw:pci_numa_affinity_policy`, which replaces the aliases' own."""

    @property
    def asks(self) -> bool:
        return self.topology is not None or self.pci_alias is not None


NOTHING_WITHIN = WithinHost()
PCI_NUMA_POLICY_SPEC = "hw:pci_numa_affinity_policy"


def within_host(vcpus: int, memory_bytes: int, extra_specs: Mapping[str, str]) -> WithinHost:
    """What a flavor's extra specs ask of the cells and devices; raises NumaSpecError (a
    ValueError, one line) where Nova refuses the flavor's NUMA request."""
    if not extra_specs:
        return NOTHING_WITHIN
    topology = instance_topology(vcpus, placement_units(Resource.MEMORY, memory_bytes), extra_specs)
    return WithinHost(
        topology, extra_specs.get(PCI_ALIAS_SPEC) or None, extra_specs.get(PCI_NUMA_POLICY_SPEC) or None
    )


@dataclass(frozen=True, slots=True)
class CellAmount:
    """One resource of a NUMA cell as Nova's NUMA fit checks it: what the cell has, what it may
    give (its NUMA limit), what guest cells placed on it use."""

    resource: Resource
    size: int
    limit: float
    used: int

    @property
    def free(self) -> float:
        return self.limit - self.used


def cell_amounts(
    cell: HostCell, cpu_allocation_ratio: float, ram_allocation_ratio: float
) -> tuple[CellAmount, ...]:
    """Shared CPUs against `cpus x cpu_allocation_ratio`, dedicated CPUs against themselves (a
    pinned CPU is never shared), memory in bytes against `memory x ram_allocation_ratio`: the
    limits Nova's NUMA topology filter passes to its fit."""
    memory = cell.memory_mib * MIB
    return (
        CellAmount(
            Resource.VCPU,
            len(cell.shared_cpus),
            len(cell.shared_cpus) * cpu_allocation_ratio,
            cell.shared_cpu_usage,
        ),
        CellAmount(Resource.PCPU, len(cell.dedicated_cpus), len(cell.dedicated_cpus), len(cell.pinned_cpus)),
        CellAmount(Resource.MEMORY, memory, memory * ram_allocation_ratio, cell.memory_usage_mib * MIB),
    )


@dataclass(frozen=True, slots=True)
class Demand:
    """What one instance of a flavor (or one claim) asks of a hypervisor: Placement's classes,
    and its share of the cells and devices."""

    request: Amounts
    within: WithinHost = NOTHING_WITHIN
    availability_zone: str | None = None
    """The zone its host must be in (Nova's `RequestSpec.availability_zone`); None: any host. Only
    the scheduler reads it (model/scheduler/filters.py); a host's own fit test does not."""


@dataclass(frozen=True, slots=True)
class HostFitRefusal:
    """Why one instance does not fit a hypervisor's cells or devices: the test that refuses it
    (`numa`: its NUMA fit, Nova's NUMATopologyFilter; `pci`: its devices alone, Nova's
    PciPassthroughFilter) and the reason, naming the cell or the alias."""

    constraint: Constraint
    reason: str

    @property
    def message(self) -> str:
        """The reason as reports show it, after its test: `NUMA: cell 0: ...`, `PCI: ...`."""
        return f"{self.constraint.upper()}: {self.reason}"


@dataclass(frozen=True, slots=True)
class AliasDevices:
    """The devices a flavor asking for one alias could be given on the hypervisor."""

    devices: int
    free: int


@dataclass(frozen=True, slots=True)
class CellsAndDevices:
    """A hypervisor's NUMA cells and PCI pools with what domains (and pending claims) use."""

    cells: tuple[HostCell, ...] = ()
    pci_pools: tuple[PciPool, ...] = ()
    pci_aliases: Mapping[str, PciAlias] = field(default_factory=dict)
    cpu_allocation_ratio: float = 1.0
    ram_allocation_ratio: float = 1.0

    def alias_devices(self) -> dict[str, AliasDevices]:
        """Per configured alias, the devices matching it and the free ones (NUMA aside); a PF pool
        counts only for an alias asking for `type-PF`, as Nova's filter has it."""
        found = {}
        for name, alias in self.pci_aliases.items():
            pools = [
                pool
                for pool in self.pci_pools
                if alias.matches(pool)
                and not pool.remote_managed
                and (pool.dev_type != "type-PF" or alias.device_type == "type-PF")
            ]
            found[name] = AliasDevices(sum(p.count for p in pools), sum(p.free for p in pools))
        return found

    def fit(self, within: WithinHost) -> NumaFit | None:
        """Where one instance goes (its NUMA fit), None where it has no NUMA topology."""
        if within.topology is None:
            return None
        try:
            return fit(
                self.cells,
                within.topology,
                cpu_allocation_ratio=self.cpu_allocation_ratio,
                ram_allocation_ratio=self.ram_allocation_ratio,
                pci_pools=self.pci_pools,
                pci_aliases=self.pci_aliases,
                pci_request=within.pci_alias,
                pci_numa_policy=within.pci_numa_policy,
            )
        except PciRequestError as error:  # the `socket` policy: it needs the host's sockets
            return NumaFit(reasons=(f"PCI: {error}",))

    def refusals(self, within: WithinHost) -> list[HostFitRefusal]:
        """Why one instance does not fit the cells and devices, naming the cell or the alias;
        empty when it fits. A NUMA topology decides alone: its fit places the devices too."""
        return self.numa_refusals(within) or self.device_refusals(within)

    def numa_refusals(self, within: WithinHost) -> list[HostFitRefusal]:
        """Why the NUMA fit of one instance fails (its cells, pinned CPUs, hugepages and the
        devices near its cells: Nova's NUMATopologyFilter); empty without a NUMA topology."""
        numa_fit = self.fit(within)
        if numa_fit is None or numa_fit.fits:
            return []
        return [HostFitRefusal("numa", why) for why in numa_fit.reasons]

    def device_refusals(self, within: WithinHost) -> list[HostFitRefusal]:
        """Why the devices of one instance without a NUMA topology are not free (Nova's
        PciPassthroughFilter); empty with a NUMA topology, whose fit takes the devices."""
        if within.topology is not None or within.pci_alias is None:
            return []
        if self._take_devices(within, None) is not None:
            return []
        free = self._free_by_alias(within.pci_alias)
        return [HostFitRefusal("pci", f"no free devices for {within.pci_alias}{free}")]

    def take(self, within: WithinHost) -> CellsAndDevices | None:
        """The cells and pools once one more instance is given its share, None where it does not
        fit. Nova's order: the NUMA fit chooses the cells, then the devices come from the pools
        those cells allow."""
        if not within.asks:
            return self
        cells = self.cells
        near: frozenset[int] | None = None
        numa_fit = self.fit(within)
        if numa_fit is not None:
            assert within.topology is not None
            if not numa_fit.fits:
                return None
            try:
                cells = consume(cells, within.topology, numa_fit)
            except PinningConflictError:
                return None
            near = frozenset(numa_fit.host_cells)
        pools = self.pci_pools
        if within.pci_alias is not None:
            taken = self._take_devices(within, near)
            if taken is None:
                return None
            pools = taken
        return replace(self, cells=cells, pci_pools=pools)

    def count(self, within: WithinHost, limit: int) -> int:
        """How many instances fit in a row, at most `limit` (the whole-host count): the count
        tests/conformance/test_numa.py compares with Nova's."""
        if not within.asks:
            return limit
        if within.topology is not None and within.pci_alias is None:
            # cells only: numa.how_many_fit, which counts independent cells without refitting
            return how_many_fit(
                self.cells,
                within.topology,
                cpu_allocation_ratio=self.cpu_allocation_ratio,
                ram_allocation_ratio=self.ram_allocation_ratio,
                limit=limit,
                pci_pools=self.pci_pools,
            )
        current: CellsAndDevices | None = self
        fitted = 0
        while fitted < limit and current is not None:
            current = current.take(within)
            if current is not None:
                fitted += 1
        return fitted

    def _take_devices(self, within: WithinHost, near: frozenset[int] | None) -> tuple[PciPool, ...] | None:
        """The pools once the devices are taken near `near` (anywhere without it), None where they
        do not fit (or the request cannot be read)."""
        assert within.pci_alias is not None
        try:
            return apply_requests(
                self.pci_pools,
                self.pci_aliases,
                within.pci_alias,
                cells=near,
                numa_policy=within.pci_numa_policy,
            )
        except PciRequestError:
            return None

    def _free_by_alias(self, request: str) -> str:
        """` (vf 3 free)`: the free devices of each alias the request names."""
        found = self.alias_devices()
        try:
            asked = {name for name, _count in parse_alias_request(request)}
        except PciRequestError:
            return ""
        known = [f"{name} {found[name].free} free" for name in sorted(asked) if name in found]
        return f" ({', '.join(known)})" if known else ""


def cells_and_devices(facts: HostFacts, policy: HostPolicy) -> CellsAndDevices:
    """The hypervisor's cells and pools with what its counted domains use: the cells they
    are on (numa.host_cells) and the devices they pass through, Nova's ratios for the cells' limits."""
    counted = policy.counted_states
    held = [
        address
        for domain in facts.domains
        if domain.state in counted
        for address in domain.placement.pci_addresses
    ]
    return CellsAndDevices(
        cells=host_cells(
            facts.numa_cells,
            facts.domains,
            cpu_shared_set=policy.cpu_shared_set,
            cpu_dedicated_set=policy.cpu_dedicated_set,
            online_cpus=facts.online_cpus,
            reserved_huge_pages=policy.reserved_huge_pages,
            counted_states=counted,
        ),
        pci_pools=device_pools(facts.pci_devices, policy.pci_device_spec, held),
        pci_aliases=policy.pci_aliases,
        cpu_allocation_ratio=policy.allocation_ratios.get(
            Resource.VCPU, Resource.VCPU.default_allocation_ratio
        ),
        ram_allocation_ratio=policy.allocation_ratios.get(
            Resource.MEMORY, Resource.MEMORY.default_allocation_ratio
        ),
    )


def with_pending(layout: CellsAndDevices, pending: Sequence[WithinHost]) -> CellsAndDevices:
    """The cells and pools once pending claims (oldest first) take their share. A claim that no
    longer fits within the host (its domain appeared elsewhere in the meantime, a guest took its
    cell) takes nothing there: its whole-host amounts still count."""
    for within in pending:
        layout = layout.take(within) or layout
    return layout


__all__ = [
    "NOTHING_WITHIN",
    "AliasDevices",
    "CellAmount",
    "CellsAndDevices",
    "Constraint",
    "Demand",
    "HostFitRefusal",
    "WithinHost",
    "cell_amounts",
    "cells_and_devices",
    "with_pending",
    "within_host",
]
