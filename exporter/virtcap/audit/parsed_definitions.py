"""Each domain's definition as last parsed, and the facts last read of it, kept by the
hypervisor's auditor across audits and reconnects, so that a full audit parses again only the
definitions whose XML changed, and gives the same facts object for a domain found as it was.

A full audit reads every domain's XML again (every `resync_every` audits, after every reconnect,
and at every audit of a hypervisor whose events cannot be registered, such as the test driver's
in-process connections). Reading the XML is a round trip that releases the interpreter lock;
parsing it is Python that holds it, and with hundreds of audits at once it is most of what
competes with the event loop and the renders for the lock. The parse is a pure function of the
XML text and the ownership setting, so a definition is kept with a digest of the text it came
from and given again for the same text: exact, whatever changed on the host meanwhile.

The facts: a full audit builds every domain's facts anew, and what reads the audits after it
(the Placement reconciliation's records, each hypervisor's view) tells a domain that did not
change by comparing it with the one before. Equal objects that are also the same one compare at
the cost of a pointer; a thousand hypervisors' 50,000 new ones compared field by field held the
interpreter lock for a tenth of a second at every round, beside the scrapes. So the audit
compares each domain once, in its own thread, and gives the object kept where they are equal
(as an incremental audit gives the facts of a domain it did not read again).

Only the audit thread of the one hypervisor touches it (at most one audit of a hypervisor runs at
a time).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from virtcap.audit.domain_xml import DomainDefinition, parse_domain_xml
from virtcap.model.facts import DomainFacts
from virtcap.model.ownership import OwnershipMetadata

DIGEST_BYTES = 16


class ParsedDefinitions:
    """Per domain UUID: the digest of the XML last parsed for it, and what it parsed to."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[bytes, OwnershipMetadata | None, DomainDefinition]] = {}
        self._facts: dict[str, DomainFacts] = {}
        self.parsed = 0
        """Definitions parsed (not given again), for the tests and the benchmarks."""

    def __len__(self) -> int:
        return len(self._kept)

    def parse(self, uuid: str, xml: str, ownership: OwnershipMetadata | None) -> DomainDefinition:
        """`parse_domain_xml(xml, ownership)`, given again when this domain's XML is the one last
        parsed for it. XML that does not parse raises as `parse_domain_xml` does, and is not kept."""
        if not uuid:
            self.parsed += 1
            return parse_domain_xml(xml, ownership)
        digest = hashlib.blake2b(xml.encode(), digest_size=DIGEST_BYTES).digest()
        kept = self._kept.get(uuid)
        if kept is not None and kept[0] == digest and kept[1] == ownership:
            return kept[2]
        self.parsed += 1
        definition = parse_domain_xml(xml, ownership)
        self._kept[uuid] = (digest, ownership, definition)
        return definition

    def as_before(self, uuid: str, facts: DomainFacts) -> DomainFacts:
        """The facts last given for this domain where they equal `facts` (the same object as
        before), else `facts`, kept for the next audit."""
        if not uuid:
            return facts
        kept = self._facts.get(uuid)
        if kept is not None and kept == facts:
            return kept
        self._facts[uuid] = facts
        return facts

    def keep_only(self, uuids: Collection[str]) -> None:
        """Forget the domains no longer listed on the hypervisor (`uuids`: every one listed)."""
        for uuid in [uuid for uuid in self._kept if uuid not in uuids]:
            del self._kept[uuid]
        for uuid in [uuid for uuid in self._facts if uuid not in uuids]:
            del self._facts[uuid]
