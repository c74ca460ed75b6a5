"""Reclaimable domains (virtcap.model.reclaim): since when a domain has been shut off or idle, from
its state and CPU-time samples, with the history kept in constant space."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from virtcap.model.facts import DomainState
from virtcap.model.reclaim import (
    DomainHistory,
    DomainSample,
    Reclaimable,
    ReclaimPolicy,
    ReclaimReason,
    advance_history,
    advance_hypervisor,
    reclaimable,
)

T0 = 1_700_000_000.0
SECOND_NS = 1_000_000_000
POLICY = ReclaimPolicy(shutoff_after=100.0, idle_cpu_below=0.05, idle_for=60.0)


def running(at: float, cpu_seconds: float | None, vcpus: int = 2, uuid: str = "u1") -> DomainSample:
    cpu = None if cpu_seconds is None else round(cpu_seconds * SECOND_NS)
    return DomainSample(uuid=uuid, state=DomainState.RUNNING, vcpus=vcpus, cpu_time_ns=cpu, at=at)


def shutoff(at: float, uuid: str = "u1") -> DomainSample:
    return DomainSample(uuid=uuid, state=DomainState.SHUTOFF, vcpus=2, cpu_time_ns=None, at=at)


def replay(samples: list[DomainSample]) -> DomainHistory:
    history = None
    for sample in samples:
        history = advance_history(history, sample, "hv1", POLICY.idle_cpu_below)
    assert history is not None
    return history


def test_a_domain_shut_off_for_the_window_is_reclaimable_since_it_stopped() -> None:
    history = replay([running(T0, 5.0), shutoff(T0 + 10), shutoff(T0 + 50)])
    assert history.state_since == T0 + 10
    assert reclaimable(history, T0 + 109, POLICY) is None
    assert reclaimable(history, T0 + 110, POLICY) == Reclaimable(ReclaimReason.SHUTOFF, T0 + 10)


def test_starting_again_forgets_the_time_shut_off() -> None:
    history = replay([shutoff(T0), running(T0 + 200, 1.0)])
    assert (history.state, history.state_since) == (DomainState.RUNNING, T0 + 200)
    assert reclaimable(history, T0 + 200, POLICY) is None


def test_idle_is_use_below_the_fraction_of_the_vcpus_for_the_window() -> None:
    # 2 vCPUs, 0.05 each: idle below 0.1 CPU-seconds a second. 0.09 a second is idle.
    samples = [running(T0 + 10 * i, 0.9 * i) for i in range(8)]
    history = replay(samples)
    assert history.idle_since == T0  # the first measured interval began at the first sample
    assert reclaimable(history, T0 + 59, POLICY) is None
    assert reclaimable(history, T0 + 60, POLICY) == Reclaimable(ReclaimReason.IDLE, T0)


def test_one_busy_interval_starts_the_idle_window_again() -> None:
    cpu = [0.0, 0.1, 0.2, 5.2, 5.3, 5.4]  # the third interval uses 0.5 CPU of 2 vCPUs: busy
    history = replay([running(T0 + 10 * i, seconds) for i, seconds in enumerate(cpu)])
    assert history.idle_since == T0 + 30


def test_a_busy_domain_is_never_idle() -> None:
    history = replay([running(T0 + 10 * i, 2.0 * i) for i in range(20)])  # 0.1 of each vCPU
    assert history.idle_since is None
    assert reclaimable(history, T0 + 10_000, POLICY) is None


def test_a_first_sample_or_a_missing_one_decides_nothing() -> None:
    history = replay([running(T0, 0.0)])
    assert history.idle_since is None
    assert replay([running(T0, 0.0), running(T0 + 10, None)]) == history


def test_cpu_time_that_went_down_is_a_new_process_measured_again() -> None:
    history = replay([running(T0, 0.0), running(T0 + 10, 0.1), running(T0 + 20, 50.0), running(T0 + 30, 1.0)])
    assert history.idle_since is None
    assert history.cpu_time_ns == SECOND_NS
    later = advance_history(history, running(T0 + 40, 1.1), "hv1", POLICY.idle_cpu_below)
    assert later.idle_since == T0 + 30


def test_a_paused_domain_is_neither_shut_off_nor_idle() -> None:
    paused = DomainSample(uuid="u1", state=DomainState.PAUSED, vcpus=2, cpu_time_ns=None, at=T0)
    assert reclaimable(replay([paused]), T0 + 10**6, POLICY) is None


def test_domains_the_audit_no_longer_sees_are_forgotten() -> None:
    first = advance_hypervisor({}, [shutoff(T0, "a"), running(T0, 0.0, uuid="b")], "hv1", 0.05)
    second = advance_hypervisor(first, [shutoff(T0 + 10, "a")], "hv1", 0.05)
    assert set(second) == {"a"}
    assert second["a"].state_since == T0


@given(
    st.lists(st.tuples(st.floats(0.1, 100.0), st.floats(0.0, 10.0)), min_size=2, max_size=30),
    st.integers(1, 8),
)
def test_idle_since_is_the_start_of_the_last_run_of_quiet_intervals(
    steps: list[tuple[float, float]], vcpus: int
) -> None:
    """Checked against the definition: the earliest sample after which every interval stayed
    below the threshold."""
    at, cpu = T0, 0.0
    samples = [running(at, cpu, vcpus)]
    for elapsed, used in steps:
        at, cpu = at + elapsed, cpu + used
        samples.append(running(at, cpu, vcpus))
    history = replay(samples)
    quiet_since = None
    for before, after in itertools.pairwise(samples):
        assert before.cpu_time_ns is not None and after.cpu_time_ns is not None
        use = (after.cpu_time_ns - before.cpu_time_ns) / SECOND_NS / (after.at - before.at) / vcpus
        if use < POLICY.idle_cpu_below:
            quiet_since = before.at if quiet_since is None else quiet_since
        else:
            quiet_since = None
    assert history.idle_since == quiet_since
