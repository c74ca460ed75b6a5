"""The vCPU wait counter (model/contention.py): real wait only, never a step back when domains go.
On a real QEMU host: tests/audit/test_contention_libvirtd.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from virtcap.audit.connection import open_read_only
from virtcap.audit.hypervisor import audit_host
from virtcap.model.contention import VcpuDelays, advance_vcpu_wait
from virtcap.model.facts import VcpuWait

S = 1_000_000_000


def test_the_first_reading_is_the_baseline() -> None:
    counter = advance_vcpu_wait(None, {("a", 0): 50 * S, ("a", 1): 70 * S}, {"a"})
    assert counter == VcpuWait(0, {("a", 0): 50 * S, ("a", 1): 70 * S})


def test_nothing_is_counted_before_a_running_domain_tells_whether_delays_are_reported() -> None:
    assert advance_vcpu_wait(None, {}, {"a"}) is None
    assert advance_vcpu_wait(None, None, {"a"}) is None


def test_a_reading_that_could_not_be_made_leaves_the_counter_as_it_was() -> None:
    counter = VcpuWait(3 * S, {("a", 0): 10 * S})
    assert advance_vcpu_wait(counter, None, {"a"}) is counter


def test_each_vcpu_adds_what_it_waited_since_the_last_reading() -> None:
    counter = advance_vcpu_wait(None, {("a", 0): 10 * S, ("b", 0): 20 * S}, {"a", "b"})
    counter = advance_vcpu_wait(counter, {("a", 0): 12 * S, ("b", 0): 25 * S}, {"a", "b"})
    assert counter is not None and counter.total_ns == 7 * S


def test_a_domain_that_stops_takes_nothing_back_and_counts_again_when_it_restarts() -> None:
    counter = advance_vcpu_wait(None, {("a", 0): 10 * S, ("b", 0): 20 * S}, {"a", "b"})
    # b stops: its 20 s stay out of the counter, which does not fall; its last value is kept
    counter = advance_vcpu_wait(counter, {("a", 0): 11 * S}, {"a", "b"})
    assert counter is not None and counter.total_ns == 1 * S
    assert counter.last_ns[("b", 0)] == 20 * S
    # b starts again: a new QEMU process, its delay from 0; all 2 s of it are new wait
    counter = advance_vcpu_wait(counter, {("a", 0): 11 * S, ("b", 0): 2 * S}, {"a", "b"})
    assert counter is not None and counter.total_ns == 3 * S


def test_a_domain_started_since_adds_its_whole_delay_and_an_undefined_one_is_forgotten() -> None:
    counter = advance_vcpu_wait(None, {("a", 0): 10 * S}, {"a"})
    counter = advance_vcpu_wait(counter, {("c", 0): 1 * S, ("c", 1): 2 * S}, {"c"})
    assert counter == VcpuWait(3 * S, {("c", 0): 1 * S, ("c", 1): 2 * S})


def test_with_no_domain_running_the_counter_stays() -> None:
    counter = advance_vcpu_wait(None, {("a", 0): 10 * S}, {"a"})
    assert advance_vcpu_wait(counter, {}, {"a"}) == VcpuWait(0, {("a", 0): 10 * S})
    assert advance_vcpu_wait(counter, {}, set()) == VcpuWait(0, {})


def test_the_test_driver_reports_no_vcpu_wait() -> None:
    """Its running domains' statistics are made up: no series, rather than a made-up wait."""
    conn = open_read_only("test:///default")
    try:
        first = audit_host(conn, "test:///default", None)
        assert first.domains and first.vcpu_wait is None
        assert audit_host(conn, "test:///default", None, previous_vcpu_wait=first.vcpu_wait).vcpu_wait is None
    finally:
        conn.close()


_KEYS = st.tuples(st.sampled_from("abc"), st.integers(0, 2))
_READINGS = st.lists(st.dictionaries(_KEYS, st.integers(0, 10**12), max_size=9), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(readings=_READINGS, defined=st.lists(st.sets(st.sampled_from("abc")), min_size=12, max_size=12))
def test_the_counter_never_goes_back_and_counts_only_what_the_readings_add(
    readings: list[VcpuDelays], defined: list[set[str]]
) -> None:
    """Whatever domains come, go or restart, the counter never decreases, and it grows by no more
    than the readings' own growth: a vCPU adds at most its current delay."""
    counter: VcpuWait | None = None
    for reading, still_defined in zip(readings, defined, strict=False):
        before = 0 if counter is None else counter.total_ns
        counter = advance_vcpu_wait(counter, reading, still_defined | {uuid for uuid, _ in reading})
        after = 0 if counter is None else counter.total_ns
        assert before <= after <= before + sum(reading.values())
