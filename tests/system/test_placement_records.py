"""The Placement reconciliation's domain records (service/placement.py's `DomainRecords`): made
again only for the domains whose facts changed since the audit before, and the same tuple where
none did, so that a round reads a thousand hypervisors' unchanged audits in milliseconds."""

from __future__ import annotations

from dataclasses import replace

from tests.support.factories import GIB, domain, host
from virtcap.config import parse_config
from virtcap.fleet.snapshot import HypervisorSnapshot
from virtcap.model.facts import DomainFacts, NovaFlavor, NovaInstance
from virtcap.model.placement_drift import domain_record
from virtcap.model.policy import HostPolicy
from virtcap.service.placement import DomainRecords

CONFIG = parse_config("hypervisors:\n  - {name: hv1, uri: 'test:///default'}\n", "x.yaml")
HYPERVISOR = CONFIG.hypervisors[0]
SMALL = NovaFlavor("m1.small", 1, 2048, 20, 0, 0)


def guests() -> tuple[DomainFacts, ...]:
    """New objects at every call, equal from one call to the next: what a full audit reads."""
    plain = tuple(
        replace(domain(f"plain-{index}", vcpus=index + 1, memory=GIB), uuid=f"uuid-plain-{index}")
        for index in range(3)
    )
    nova = tuple(
        replace(domain(f"nova-{index}", nova=NovaInstance(SMALL)), uuid=f"UUID-NOVA-{index}")
        for index in range(3)
    )
    return plain + nova


def audited(domains: tuple[DomainFacts, ...]) -> HypervisorSnapshot:
    return HypervisorSnapshot.audited(HYPERVISOR, host(domains=domains), {})


def fresh(snapshot: HypervisorSnapshot, policy: HostPolicy) -> tuple[object, ...]:
    assert snapshot.facts is not None
    return tuple(domain_record(domain, "hv1", policy) for domain in snapshot.facts.domains)


def test_records_are_made_again_only_for_the_domains_that_changed() -> None:
    policy = HYPERVISOR.policy
    first = DomainRecords.of("hv1", audited(guests()), policy, None)
    assert first.records == fresh(first.snapshot, policy)
    assert DomainRecords.of("hv1", first.snapshot, policy, first) is first

    # a full audit: every domain a new object, none changed
    again = DomainRecords.of("hv1", audited(guests()), policy, first)
    assert again.records is first.records

    # one domain resized, one gone, one new: only the resized and the new one are made again
    resized = replace(guests()[1], vcpus=8)
    new = replace(domain("new", vcpus=2), uuid="uuid-new")
    changed_domains = (guests()[0], resized, *guests()[3:], new)
    changed = DomainRecords.of("hv1", audited(changed_domains), policy, again)
    assert changed.records == fresh(changed.snapshot, policy)
    before = {record.uuid: record for record in again.records}
    remade = {record.uuid for record in changed.records if record is not before.get(record.uuid)}
    assert remade == {"uuid-plain-1", "uuid-new"}
    assert "uuid-plain-2" not in {record.uuid for record in changed.records}


def test_another_policy_makes_every_record_again() -> None:
    policy = HYPERVISOR.policy
    first = DomainRecords.of("hv1", audited(guests()), policy, None)
    pinned = replace(policy, cpu_dedicated_set=frozenset({0, 1}))
    domains = tuple(
        replace(guest, vcpu_pins=(frozenset({0}),) * guest.vcpus) if guest.nova is None else guest
        for guest in guests()
    )
    other = DomainRecords.of("hv1", audited(domains), pinned, first)
    assert other.records == fresh(other.snapshot, pinned)
    assert all(now is not was for now, was in zip(other.records, first.records, strict=True))
