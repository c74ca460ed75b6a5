"""Who holds the capacity: each hypervisor's allocations summed per project, and the fleet's
largest projects. Pure: facts in, sums out.

A domain belongs to the project Nova's owner metadata names (`<nova:owner><nova:project>`), else
to the one the configured metadata element names (`ownership`: an OwnershipMetadata, which
virtcap.audit.domain_xml reads), else to UNKNOWN. Only counted domains are summed, with the
allocation the capacity counts for them (virtcap.model.capacity.domain_allocation): a
hypervisor's projects add up to its allocated amounts, neither more nor less.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from virtcap.model.capacity import domain_allocation
from virtcap.model.facts import DomainFacts, HostFacts
from virtcap.model.policy import HostPolicy
from virtcap.model.resources import Resource, display_order

UNKNOWN = "unknown"
"""The project id and name of domains no metadata gives an owner."""
OTHER = "other"
"""The project id and name of the projects beyond the largest ones, summed."""


@dataclass(frozen=True, slots=True)
class OwnershipMetadata:
    """Where domains that Nova did not define say whose they are: an element below `<metadata>`,
    each step of `path` in `namespace`, as `<x:owner xmlns:x="NAMESPACE"><x:project id="ID">NAME
    </x:project></x:owner>` for the path ("owner", "project"). The project id is the attribute
    `id_attribute`, or the element's text where the attribute is absent; the name is the text."""

    namespace: str
    path: tuple[str, ...] = ("project",)
    id_attribute: str = "id"


@dataclass(frozen=True, slots=True)
class ProjectUsage:
    """What one project's counted domains are allocated (on one hypervisor, or the fleet)."""

    project_id: str
    project_name: str
    domains: int
    allocated: Mapping[Resource, int]

    @property
    def memory(self) -> int:
        return self.allocated.get(Resource.MEMORY, 0)


def domain_project(domain: DomainFacts) -> tuple[str, str]:
    """(project id, project name) of a domain: Nova's owner, the configured metadata's, or UNKNOWN."""
    owner = domain.nova.owner if domain.nova is not None else None
    if owner is not None and owner.project_id:
        return owner.project_id, owner.project_name
    if domain.owner is not None:
        return domain.owner.project_id, domain.owner.project_name
    return UNKNOWN, UNKNOWN


def host_projects(facts: HostFacts, policy: HostPolicy) -> tuple[ProjectUsage, ...]:
    """Per (project id, name) the counted domains and their allocations, by id then name."""
    counted = policy.counted_states
    sums: dict[tuple[str, str], dict[Resource, int]] = {}
    domains: dict[tuple[str, str], int] = {}
    for domain in facts.domains:
        if domain.state not in counted:
            continue
        key = domain_project(domain)
        total = sums.setdefault(key, {})
        for resource, amount in domain_allocation(domain, policy.cpu_dedicated_set).items():
            total[resource] = total.get(resource, 0) + amount
        domains[key] = domains.get(key, 0) + 1
    return tuple(
        ProjectUsage(key[0], key[1], domains[key], {r: sums[key][r] for r in display_order(sums[key])})
        for key in sorted(sums)
    )


def fleet_projects(usages: Iterable[ProjectUsage]) -> list[ProjectUsage]:
    """The projects of many hypervisors merged by id, the most allocated memory first (then by
    id). A project Nova recorded under several names (renamed between boots) is shown under the
    name holding the most memory."""
    merged: dict[str, dict[Resource, int]] = {}
    domains: dict[str, int] = {}
    names: dict[str, dict[str, int]] = {}
    for usage in usages:
        total = merged.setdefault(usage.project_id, {})
        for resource, amount in usage.allocated.items():
            total[resource] = total.get(resource, 0) + amount
        domains[usage.project_id] = domains.get(usage.project_id, 0) + usage.domains
        weights = names.setdefault(usage.project_id, {})
        weights[usage.project_name] = weights.get(usage.project_name, 0) + usage.memory
    projects = [
        ProjectUsage(
            project_id,
            min(names[project_id].items(), key=lambda item: (-item[1], item[0]))[0],
            domains[project_id],
            {r: total[r] for r in display_order(total)},
        )
        for project_id, total in merged.items()
    ]
    return sorted(projects, key=lambda project: (-project.memory, project.project_id))


def largest_projects(usages: Iterable[ProjectUsage], limit: int) -> dict[str, str]:
    """The `limit` projects with the most allocated memory among these usages, id to the name
    shown: the ones that get series of their own."""
    return {project.project_id: project.project_name for project in fleet_projects(usages)[:limit]}


def shown_projects(usages: Iterable[ProjectUsage], shown: Mapping[str, str]) -> list[ProjectUsage]:
    """One hypervisor's projects as the exposition shows them: each project in `shown` under its
    shown name, every other one summed into OTHER. Each (id, name) once, so that no two samples
    share a series and a sum over projects is the hypervisor's allocation."""
    merged: dict[tuple[str, str], dict[Resource, int]] = {}
    domains: dict[tuple[str, str], int] = {}
    for usage in usages:
        name = shown.get(usage.project_id)
        key = (usage.project_id, name) if name is not None else (OTHER, OTHER)
        total = merged.setdefault(key, {})
        for resource, amount in usage.allocated.items():
            total[resource] = total.get(resource, 0) + amount
        domains[key] = domains.get(key, 0) + usage.domains
    return [
        ProjectUsage(key[0], key[1], domains[key], {r: merged[key][r] for r in display_order(merged[key])})
        for key in sorted(merged, key=lambda key: (key == (OTHER, OTHER), key))
    ]


class ProjectRanking:
    """The fleet's allocated memory per project, kept up to date hypervisor by hypervisor: a fleet
    of a thousand hypervisors changes a few at a time, and ranking its projects again from every
    hypervisor's at each render would cost the whole fleet each time. `largest` is what
    `largest_projects` gives for the hypervisors' usages together."""

    def __init__(self) -> None:
        self._by_hypervisor: dict[str, tuple[ProjectUsage, ...]] = {}
        self._memory: dict[str, int] = {}
        self._names: dict[str, dict[str, list[int]]] = {}
        """Per project id, per name: [memory, how many hypervisors' usages carry it]."""

    def update(self, hypervisor: str, usages: tuple[ProjectUsage, ...]) -> None:
        kept = self._by_hypervisor.get(hypervisor)
        if kept is usages:
            return
        if kept is not None:
            self._count(kept, -1)
        self._count(usages, 1)
        self._by_hypervisor[hypervisor] = usages

    def keep_only(self, hypervisors: set[str]) -> None:
        """Forget the hypervisors no longer shown."""
        for gone in [name for name in self._by_hypervisor if name not in hypervisors]:
            self._count(self._by_hypervisor.pop(gone), -1)

    def largest(self, limit: int) -> dict[str, str]:
        ranked = heapq.nsmallest(
            limit, self._memory, key=lambda project_id: (-self._memory[project_id], project_id)
        )
        return {
            project_id: min(self._names[project_id].items(), key=lambda item: (-item[1][0], item[0]))[0]
            for project_id in ranked
        }

    def _count(self, usages: tuple[ProjectUsage, ...], sign: int) -> None:
        for usage in usages:
            project_id = usage.project_id
            self._memory[project_id] = self._memory.get(project_id, 0) + sign * usage.memory
            names = self._names.setdefault(project_id, {})
            weight = names.setdefault(usage.project_name, [0, 0])
            weight[0] += sign * usage.memory
            weight[1] += sign
            if not weight[1]:
                del names[usage.project_name]
            if not names:
                del self._names[project_id], self._memory[project_id]
