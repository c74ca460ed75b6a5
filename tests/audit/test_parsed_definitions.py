"""Definitions kept across full audits and reconnects (virtcap.audit.parsed_definitions): a full
audit parses again only the XML that changed, finds what a fresh parse finds, and gives the same
facts object for a domain found as it was."""

from __future__ import annotations

from typing import Any

import libvirt
import pytest

from tests.support.files import FIXTURES
from virtcap.audit.domain_xml import DomainXMLError, parse_domain_xml
from virtcap.audit.hypervisor import audit_host
from virtcap.audit.parsed_definitions import ParsedDefinitions
from virtcap.config import DiskSource
from virtcap.model.facts import HostFacts
from virtcap.model.ownership import OwnershipMetadata

URI = f"test://{FIXTURES / 'mixed-node.xml'}"
DISK = DiskSource(pool="default")
STOPPED = "00000000-0000-0000-0000-000000000003"


def _audit(conn: Any, definitions: ParsedDefinitions | None) -> HostFacts:
    return audit_host(conn, URI, DISK, definitions=definitions)


def _by_uuid(facts: HostFacts) -> dict[str, Any]:
    return {domain.uuid: domain for domain in facts.domains}


def test_a_full_audit_parses_again_only_the_xml_that_changed() -> None:
    definitions = ParsedDefinitions()
    first: Any = libvirt.open(URI)
    try:
        before = _audit(first, definitions)
        parsed = definitions.parsed
        assert parsed == len(before.domains) == len(definitions) > 0
    finally:
        first.close()
    # a new connection, as the test driver's auditor opens at every audit: the same XML
    conn: Any = libvirt.open(URI)
    try:
        again = _audit(conn, definitions)
        assert definitions.parsed == parsed
        assert again.domains == before.domains
        assert all(now is was for now, was in zip(again.domains, before.domains, strict=True))
        # one domain's definition changed, another gone: only the changed one is parsed
        stopped = conn.lookupByUUIDString(STOPPED)
        xml = stopped.XMLDesc(0)
        assert "<vcpu placement='static'>2</vcpu>" in xml
        conn.defineXML(xml.replace("<vcpu placement='static'>2</vcpu>", "<vcpu placement='static'>6</vcpu>"))
        gone = next(domain for domain in again.domains if domain.uuid != STOPPED)
        undefined = conn.lookupByUUIDString(gone.uuid)
        if undefined.isActive():
            undefined.destroy()
        undefined.undefine()
        changed = _audit(conn, definitions)
        assert definitions.parsed == parsed + 1
        assert _by_uuid(changed)[STOPPED].vcpus == 6
        assert gone.uuid not in _by_uuid(changed)
        kept = _by_uuid(again)
        assert all((domain is kept[domain.uuid]) == (domain.uuid != STOPPED) for domain in changed.domains)
        assert len(definitions) == len(changed.domains) == len(before.domains) - 1
        # and it is what an audit that parses everything finds
        assert changed.domains == _audit(conn, None).domains
    finally:
        conn.close()


def test_the_same_xml_under_another_ownership_setting_is_parsed_again() -> None:
    conn: Any = libvirt.openReadOnly(URI)
    try:
        xml = conn.lookupByUUIDString(STOPPED).XMLDesc(0)
    finally:
        conn.close()
    definitions = ParsedDefinitions()
    ownership = OwnershipMetadata(namespace="https://example.org/owner")
    plain = definitions.parse(STOPPED, xml, None)
    assert definitions.parse(STOPPED, xml, None) is plain
    owned = definitions.parse(STOPPED, xml, ownership)
    assert definitions.parsed == 2
    assert owned == parse_domain_xml(xml, ownership)


def test_xml_that_does_not_parse_raises_and_is_not_kept() -> None:
    definitions = ParsedDefinitions()
    for _ in range(2):
        with pytest.raises(DomainXMLError):
            definitions.parse(STOPPED, "<domain><name>half", None)
    assert definitions.parsed == 2
    assert len(definitions) == 0
