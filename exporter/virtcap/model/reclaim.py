"""Reclaimable capacity: domains that hold an allocation but do not use it.

A domain is reclaimable as `shutoff` when it has been shut off for at least `shutoff_after`, and
as `idle` when it has been running with its CPU use below `idle_cpu_below` of its vCPUs for at
least `idle_for`. Both need history that one audit cannot give; the history per domain is one
small record (DomainHistory), advanced at each audit and kept in the claims database so that a
restart or a failover goes on from it:

- the state and since when the domain has been in it (a change of state starts it again);
- the last CPU-time sample (libvirt's `vcpu.<n>.time` summed over the vCPUs, nanoseconds) and
  when it was taken, so that the next sample gives the average use over the interval between;
- since when every interval measured so far has stayed below the threshold (None: the last one
  did not, or nothing was measured yet).

Each interval's use is the CPU time it added divided by its length and by the domain's vCPUs: a
rolling summary in constant space instead of every sample. An interval that spans an exporter
restart is one long interval, its average use deciding for all of it. CPU time that went down
belongs to a new QEMU process (the domain was not_idle in between): that sample starts the
measuring again rather than counting a negative use. Times are wall-clock seconds (epoch): they
outlive the process and are compared across replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from virtcap.model.facts import DomainFacts, DomainState
from virtcap.model.resources import Resource

NANOSECONDS = 1e9


class ReclaimReason(StrEnum):
    SHUTOFF = "shutoff"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class ReclaimPolicy:
    """The configuration's `reclaim` section, as the model reads it (seconds and a fraction)."""

    shutoff_after: float
    idle_cpu_below: float
    """A fraction of the domain's vCPUs: 0.05 is 5% of each vCPU on average."""
    idle_for: float


@dataclass(frozen=True, slots=True)
class DomainSample:
    """What one audit tells of one domain."""

    uuid: str
    state: DomainState
    vcpus: int
    cpu_time_ns: int | None
    """Its vCPUs' CPU time summed (running domains); None where the hypervisor does not report it."""
    at: float
    """Wall-clock seconds (epoch) of the audit."""


@dataclass(frozen=True, slots=True)
class DomainHistory:
    """What is remembered of one domain of one hypervisor between audits (and across restarts)."""

    hypervisor: str
    uuid: str
    state: DomainState
    state_since: float
    cpu_time_ns: int | None = None
    cpu_sampled_at: float | None = None
    idle_since: float | None = None
    """Since when its CPU use has stayed below the threshold; None: not idle, or not measured yet."""


@dataclass(frozen=True, slots=True)
class Reclaimable:
    reason: ReclaimReason
    since: float
    """Since when it has been shut off, or idle (wall-clock seconds)."""


@dataclass(frozen=True, slots=True)
class ReclaimableDomain:
    hypervisor: str
    domain: DomainFacts
    reclaimable: Reclaimable
    allocation: Mapping[Resource, int]
    """What it holds, as the capacity counts it (model/capacity.domain_allocation)."""


def advance_history(
    previous: DomainHistory | None, sample: DomainSample, hypervisor: str, idle_cpu_below: float
) -> DomainHistory:
    """The history of a domain after `sample` (the first one: `previous` None)."""
    if previous is None or previous.state != sample.state:
        return DomainHistory(
            hypervisor=hypervisor,
            uuid=sample.uuid,
            state=sample.state,
            state_since=sample.at,
            cpu_time_ns=sample.cpu_time_ns,
            cpu_sampled_at=sample.at if sample.cpu_time_ns is not None else None,
        )
    if sample.cpu_time_ns is None:
        return previous  # nothing measured: what is known so far stands
    not_idle = replace(previous, cpu_time_ns=sample.cpu_time_ns, cpu_sampled_at=sample.at, idle_since=None)
    if previous.cpu_time_ns is None or previous.cpu_sampled_at is None:
        return not_idle
    elapsed = sample.at - previous.cpu_sampled_at
    used = sample.cpu_time_ns - previous.cpu_time_ns
    if used < 0 or elapsed <= 0 or sample.vcpus <= 0:
        # A new QEMU process, or a clock that went back: measure again from this sample.
        return not_idle
    use = used / NANOSECONDS / elapsed / sample.vcpus
    if use >= idle_cpu_below:
        return not_idle
    idle_since = previous.idle_since if previous.idle_since is not None else previous.cpu_sampled_at
    return replace(not_idle, idle_since=idle_since)


def reclaimable_from(history: DomainHistory, policy: ReclaimPolicy) -> tuple[float, Reclaimable] | None:
    """From when the domain is reclaimable, and why, as long as its history stays as it is (None:
    it is not, however long: running and not idle, or in any other state). What an audit does not
    change, time alone does not undo: a reclaimable domain stays so until its next audit."""
    if history.state == DomainState.SHUTOFF:
        since = history.state_since
        return since + policy.shutoff_after, Reclaimable(ReclaimReason.SHUTOFF, since)
    if history.state == DomainState.RUNNING and history.idle_since is not None:
        return history.idle_since + policy.idle_for, Reclaimable(ReclaimReason.IDLE, history.idle_since)
    return None


def reclaimable(history: DomainHistory, now: float, policy: ReclaimPolicy) -> Reclaimable | None:
    """Why the domain's allocation is reclaimable at `now`, and since when; None where it is not."""
    pending = reclaimable_from(history, policy)
    if pending is None or now < pending[0]:
        return None
    return pending[1]


def advance_hypervisor(
    previous: dict[str, DomainHistory],
    samples: list[DomainSample],
    hypervisor: str,
    idle_cpu_below: float,
) -> dict[str, DomainHistory]:
    """Every domain's history after one audit of `hypervisor`, by UUID: the domains the audit no
    longer sees are forgotten."""
    return {
        sample.uuid: advance_history(previous.get(sample.uuid), sample, hypervisor, idle_cpu_below)
        for sample in samples
    }
