"""The tests a host must pass to take an instance, in the order they are reported: `FILTERS`.

Each filter is a `HostFilter`: Nova's name for it, when the request loop runs it (`Stage`), and
its test, which gives the reasons a host refuses the instance (none: it passes). The first filter
that refuses a host is the one it is reported under, as a `Rejection` carrying the filter's name
and every reason the filter gave. The request loop (request.py) walks `FILTERS` in order: the
`REQUEST` stage once per request (the hosts the request leaves out, then Placement's allocation
candidates), the `INSTANCE` stage for each instance on the hosts as the instances before left
them. An evacuation walks the same filters (fleet_index.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Amounts, request_groups
from virtcap.model.scheduler.host_states import HostState

# Filter names, as Nova names its filters (Placement for the allocation candidates and claims).
IGNORE_HOSTS = "ignore_hosts"
FORCE_HOSTS = "force_hosts"
AVAILABILITY_ZONE = "AvailabilityZoneFilter"
COMPUTE = "ComputeFilter"
PLACEMENT = "Placement"
NUMA_TOPOLOGY = "NUMATopologyFilter"
PCI_PASSTHROUGH = "PciPassthroughFilter"
ANTI_AFFINITY = "ServerGroupAntiAffinityFilter"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a host did not take an instance: the first filter that refused it, with every reason it
    gave (a class's in Nova's claim-test wording: "Free memory 1024.00 MiB < requested 2048
    MiB")."""

    filter: str
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        return self.reasons[0] if self.reasons else ""


RequestKey = tuple[tuple[tuple[str, int], ...], ...]


def request_key(request: Amounts) -> RequestKey:
    """A request as a hashable value: its groups, each its classes and amounts."""
    return tuple(
        tuple(sorted((resource.placement_class, amount) for resource, amount in group.items()))
        for group in request_groups(request)
    )


def placement_reasons(state: HostState, demand: Demand) -> tuple[str, ...]:
    """claim_test's reasons of the classes and vGPUs only (what Placement's candidates test)."""
    return tuple(state.capacity.claim_test(Demand(demand.request)))


class CandidateMemo:
    """Placement's answer (the classes and vGPUs) per host state and request, kept for the
    requests that follow: states are immutable, so an answer holds for as long as its state
    object lives (the memo keeps it alive). One memo serves many requests and evacuations over
    the same states, where most hosts are asked about the same flavors again and again."""

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: dict[tuple[int, RequestKey], tuple[HostState, tuple[str, ...]]] = {}

    def reasons(self, state: HostState, demand: Demand, key: RequestKey) -> tuple[str, ...]:
        """`placement_reasons` of the state and the demand, whose request is `key`."""
        memo_key = (id(state), key)
        found = self._answers.get(memo_key)
        if found is not None and found[0] is state:
            return found[1]
        answer = placement_reasons(state, demand)
        self._answers[memo_key] = (state, answer)
        return answer


class Stage(Enum):
    """When the request loop runs a filter."""

    REQUEST = "request"
    """Once per request, on the hosts as they are: the hosts the request leaves out, then
    Placement's allocation candidates (asked once: a host that an instance before filled is
    still a candidate, refused at its claim)."""
    INSTANCE = "instance"
    """For each instance, on the hosts as the instances before left them."""


@dataclass(frozen=True, slots=True)
class FilterRequest:
    """What the filters test a host for: one instance of the demand, in its request."""

    demand: Demand
    key: RequestKey
    """The demand's request as Placement's memo keys it (`request_key`)."""
    memo: CandidateMemo | None = None
    ignore_hosts: frozenset[str] = frozenset()
    """The names of `ignore_hosts`, in lower case (Nova matches them without regard to case)."""
    forced_host: str | None = None
    """The first of `force_hosts`: Nova asks Placement for that one only."""
    anti_affinity: bool = False
    chosen: frozenset[str] = frozenset()
    """The hosts the instances of this request before took."""

    @classmethod
    def of(
        cls,
        demand: Demand,
        *,
        memo: CandidateMemo | None = None,
        ignore_hosts: Sequence[str] = (),
        force_hosts: Sequence[str] = (),
        anti_affinity: bool = False,
    ) -> FilterRequest:
        return cls(
            demand,
            request_key(demand.request),
            memo,
            frozenset(name.lower() for name in ignore_hosts),
            force_hosts[0] if force_hosts else None,
            anti_affinity,
        )


HostTest = Callable[[HostState, FilterRequest], Sequence[str]]
"""A filter's test: why the host refuses the instance, empty where it passes."""


@dataclass(frozen=True, slots=True)
class HostFilter:
    """One filter: Nova's name for it (the `Rejection.filter` of the hosts it refuses), when the
    request loop runs it, and its test."""

    name: str
    stage: Stage
    test: HostTest

    def rejection(self, state: HostState, request: FilterRequest) -> Rejection | None:
        reasons = self.test(state, request)
        return Rejection(self.name, tuple(reasons)) if reasons else None


def ignored(state: HostState, request: FilterRequest) -> Sequence[str]:
    """`ignore_hosts` names the host."""
    if state.name.lower() in request.ignore_hosts:
        return (f"{state.name} is in ignore_hosts",)
    return ()


def not_forced(state: HostState, request: FilterRequest) -> Sequence[str]:
    """`force_hosts` names another host first."""
    target = request.forced_host
    if target is None or state.name.lower() == target.lower():
        return ()
    return (f"not the forced host {target} (Nova asks Placement for the first of force_hosts only)",)


def out_of_zone(state: HostState, request: FilterRequest) -> Sequence[str]:
    """AvailabilityZoneFilter: the demand asks for another zone than the host's."""
    wanted = request.demand.availability_zone
    if wanted is None or state.availability_zone == wanted:
        return ()
    where = (
        f"in availability zone {state.availability_zone}"
        if state.availability_zone is not None
        else "in no availability zone"
    )
    return (f"hypervisor {state.name} is {where}, not in {wanted} as requested",)


def compute_down(state: HostState, request: FilterRequest) -> Sequence[str]:
    """ComputeFilter: the host is down, its data stale, or it is in maintenance (Nova's disabled
    compute service)."""
    if not state.up:
        return (f"hypervisor {state.name} is down",)
    if state.stale:
        return (f"the data of hypervisor {state.name} is stale",)
    if state.maintenance is not None:
        return (f"hypervisor {state.name} is in maintenance: {state.maintenance}",)
    return ()


def short_of_classes(state: HostState, request: FilterRequest) -> Sequence[str]:
    """Placement's allocation candidates: a requested class (or the vGPUs of one GPU) does not
    hold one instance."""
    if request.memo is not None:
        return request.memo.reasons(state, request.demand, request.key)
    return placement_reasons(state, request.demand)


def numa_misfit(state: HostState, request: FilterRequest) -> Sequence[str]:
    """NUMATopologyFilter: the demand's NUMA topology (with the devices near its cells) does not
    fit the host's cells."""
    refusals = state.capacity.within.numa_refusals(request.demand.within)
    return tuple(refusal.message for refusal in refusals)


def devices_taken(state: HostState, request: FilterRequest) -> Sequence[str]:
    """PciPassthroughFilter: the devices of a demand without a NUMA topology are not free."""
    refusals = state.capacity.within.device_refusals(request.demand.within)
    return tuple(refusal.message for refusal in refusals)


def same_request_there(state: HostState, request: FilterRequest) -> Sequence[str]:
    """ServerGroupAntiAffinityFilter, when asked: an instance of this request is on the host."""
    if request.anti_affinity and state.name in request.chosen:
        return (f"an instance of this request is already on {state.name}",)
    return ()


FILTERS: tuple[HostFilter, ...] = (
    HostFilter(IGNORE_HOSTS, Stage.REQUEST, ignored),
    HostFilter(FORCE_HOSTS, Stage.REQUEST, not_forced),
    HostFilter(AVAILABILITY_ZONE, Stage.REQUEST, out_of_zone),
    HostFilter(COMPUTE, Stage.REQUEST, compute_down),
    HostFilter(PLACEMENT, Stage.REQUEST, short_of_classes),
    HostFilter(NUMA_TOPOLOGY, Stage.INSTANCE, numa_misfit),
    HostFilter(PCI_PASSTHROUGH, Stage.INSTANCE, devices_taken),
    HostFilter(ANTI_AFFINITY, Stage.INSTANCE, same_request_there),
)
"""Every filter, in the order a host refused by several is reported under the first (the
package's docstring says why this order); the stages follow each other."""

REQUEST_FILTERS = tuple(host_filter for host_filter in FILTERS if host_filter.stage is Stage.REQUEST)
INSTANCE_FILTERS = tuple(host_filter for host_filter in FILTERS if host_filter.stage is Stage.INSTANCE)


def first_rejection(
    state: HostState, request: FilterRequest, filters: Sequence[HostFilter] = FILTERS
) -> tuple[HostFilter, Rejection] | None:
    """The first of the filters that refuses the host, and its rejection; None: it passes them."""
    for host_filter in filters:
        rejection = host_filter.rejection(state, request)
        if rejection is not None:
            return host_filter, rejection
    return None
