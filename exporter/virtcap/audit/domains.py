"""The domains of one hypervisor as the audit reads them: the domain list, each domain's
definition and facts (its disks sized from the storage volume index), and the vCPU delays of the
running ones.

Domains are the bulk of an audit: a definition each, and the volumes of the storage pools. Where
the connection keeps a DomainCache (virtcap.audit.domain_cache: incremental audits), an audit
between full ones reads again only the domains that changed, and keeps the volume index.

Blocks on libvirt: runs in the audit's worker thread. A domain that cannot be read is reported
among the problems and left out; it never fails the audit of its host.
"""

from __future__ import annotations

import libvirt

from virtcap.audit.capture_format import VCPU_STATS
from virtcap.audit.connection import AuditError
from virtcap.audit.domain_cache import CachedDomain, DomainCache
from virtcap.audit.domain_states import ACTIVE_STATES, state_from_libvirt
from virtcap.audit.domain_xml import (
    DiskReference,
    DomainDefinition,
    DomainXMLError,
    parse_domain_xml,
)
from virtcap.audit.libvirt_api import VirConnect, VirDomain
from virtcap.audit.parsed_definitions import ParsedDefinitions
from virtcap.audit.volumes import VolumeIndex, is_local_disk
from virtcap.model.contention import VcpuDelays
from virtcap.model.facts import DiskFacts, DomainFacts
from virtcap.model.ownership import OwnershipMetadata

_NOT_REPORTED = (
    libvirt.VIR_ERR_NO_SUPPORT,
    libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED,
    libvirt.VIR_ERR_INVALID_ARG,
)


class DomainUnreadableError(Exception):
    """One domain could not be read: reported among the host's problems, never guessed at."""


def read_vcpu_statistics(
    conn: VirConnect, problems: list[str]
) -> tuple[VcpuDelays | None, dict[str, int] | None]:
    """From one call for every running domain: per (domain UUID, vCPU), how long the vCPU waited
    for a physical CPU (libvirt's `vcpu.<n>.delay`, nanoseconds), None where the hypervisor does
    not report it; and per domain UUID, the CPU time its vCPUs used (`vcpu.<n>.time` summed,
    nanoseconds: reclaimable capacity's idle detection), None where the call failed.

    libvirt reads the delay from the kernel's schedstat of each vCPU thread (libvirt 7.2 and later
    on QEMU). `vcpu.<n>.wait` is not used: it is the same run-queue wait read from the kernel's
    scheduler statistics, which most kernels leave off (`kernel.sched_schedstats`), and libvirt then
    reports 0, which cannot be told from a host without contention. A reading where running domains
    report no delay at all is None: the hypervisor cannot tell, which is not "no wait".
    """
    try:
        listed = conn.getAllDomainStats(*VCPU_STATS)
    except libvirt.libvirtError as error:
        if error.get_error_code() not in _NOT_REPORTED:
            problems.append(
                f"cannot read the vCPU statistics: {error.get_error_message()}; vCPU wait not counted"
            )
        return None, None
    delays: dict[tuple[str, int], int] = {}
    cpu_ns: dict[str, int] = {}
    for domain, stats in listed:
        try:
            uuid = domain.UUIDString()
        except libvirt.libvirtError:
            continue
        for key, value in stats.items():
            number, _, suffix = key.removeprefix("vcpu.").partition(".")
            if not key.startswith("vcpu.") or not number.isdigit():
                continue
            if suffix == "delay":
                delays[(uuid, int(number))] = int(value)
            elif suffix == "time":
                cpu_ns[uuid] = cpu_ns.get(uuid, 0) + int(value)
    if listed and not delays:
        return None, cpu_ns
    return delays, cpu_ns


def _list_domains(conn: VirConnect) -> list[tuple[VirDomain, int | None]]:
    """Every domain with its state code, in one call where the driver can.

    libvirt-python releases the GIL around every call, and a thread coming back from one waits
    up to the interpreter's switch interval (5 ms) whenever another thread is busy in Python: with
    hundreds of hypervisors audited at once, the number of calls per domain, not their cost, sets
    the pace. One bulk state query replaces a virDomainGetInfo per domain; drivers without it
    (None) get the per-domain call.
    """
    try:
        return [
            (domain, int(stats["state.state"]) if "state.state" in stats else None)
            for domain, stats in conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0)
        ]
    except libvirt.libvirtError as error:
        if error.get_error_code() not in (libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED):
            raise AuditError(f"cannot list domains: {error.get_error_message()}") from None
    try:
        return [(domain, None) for domain in conn.listAllDomains(0)]
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot list domains: {error.get_error_message()}") from None


def read_all_domains(
    conn: VirConnect,
    volumes: VolumeIndex,
    ownership: OwnershipMetadata | None,
    problems: list[str],
    *,
    definitions: ParsedDefinitions | None = None,
) -> tuple[list[DomainFacts], int]:
    """Every domain read: a full audit without a cache. Also the number of definitions read.
    `definitions`, where given, parses again only the XML that changed since it last parsed it."""
    domains = []
    reads = 0
    listed: set[str] = set()
    for domain, state_code in _list_domains(conn):
        reads += 1
        uuid = _uuid(domain)
        listed.add(uuid)
        read = _read_or_report(domain, uuid, state_code, ownership, problems, definitions=definitions)
        if read is not None:
            domains.append(_as_before(definitions, uuid, _domain_facts(domain, *read, volumes, {})))
    if definitions is not None:
        definitions.keep_only(listed)
    return domains, reads


def _as_before(definitions: ParsedDefinitions | None, uuid: str, facts: DomainFacts) -> DomainFacts:
    """The same facts object as the audit before where the domain is found as it was
    (`ParsedDefinitions.as_before`)."""
    return definitions.as_before(uuid, facts) if definitions is not None else facts


def _uuid(domain: VirDomain) -> str:
    """The domain's UUID, local to the client (no round trip); "" if libvirt cannot tell it."""
    try:
        return domain.UUIDString()
    except libvirt.libvirtError:
        return ""


def read_domains_with_cache(
    cache: DomainCache,
    conn: VirConnect,
    block_info_is_real: bool,
    ownership: OwnershipMetadata | None,
    problems: list[str],
    *,
    definitions: ParsedDefinitions | None = None,
) -> tuple[list[DomainFacts], VolumeIndex, int, bool]:
    """The domains, reading again only those that changed since the cache's last audit, unless
    this audit is a full one. Also the volume index used, the definitions read, and whether the
    audit was full. See virtcap.audit.domain_cache for why what is kept is still exact.
    `definitions` as for `read_all_domains`."""
    # Taken before the listing: a change told after this is read by the next audit.
    changes = cache.changes.take()
    full = cache.next_is_full() or changes.unknown
    listed = _list_domains(conn)
    if any(state_code is None for _domain, state_code in listed):
        full = True  # no bulk state query: nothing cheap tells a state change
    volumes, volumes_fresh = _volumes_for(
        cache, conn, block_info_is_real, full=full, pools_changed=changes.pools
    )
    reads = 0
    # Per listed domain: its UUID, and what was read of it now (None: kept from the cache).
    present: list[tuple[VirDomain, str, tuple[int, DomainDefinition] | None]] = []
    for domain, state_code in listed:
        uuid = _uuid(domain)
        kept = cache.domains.get(uuid)
        if full or not uuid or kept is None or state_code != kept.state_code or uuid in changes.domains:
            reads += 1
            definition_read = _read_or_report(
                domain, uuid, state_code, ownership, problems, definitions=definitions
            )
            if definition_read is not None:
                present.append((domain, uuid, definition_read))
        else:
            present.append((domain, uuid, None))
    # A domain read again may name a volume created since the index was read (libvirt tells of no
    # volume's creation): the index is read again, and the kept domains' disks looked up in it.
    if not volumes_fresh and any(
        volumes.lacks(reference) for *_, read in present if read for reference in read[1].disks
    ):
        volumes = cache.new_volumes(VolumeIndex(conn, block_info_is_real=block_info_is_real))
    domains: list[DomainFacts] = []
    kept_domains: dict[str, CachedDomain] = {}
    for domain, uuid, read in present:
        if read is not None:
            blocks: dict[str, int | str] = {}
            facts = _as_before(definitions, uuid, _domain_facts(domain, *read, volumes, blocks))
            entry = CachedDomain(*read, facts, cache.volumes_generation, blocks)
        else:
            entry = cache.domains[uuid]
            if entry.volumes_generation != cache.volumes_generation:
                # Looked up in another index: rebuilt from the kept definition, without a round
                # trip but a virDomainGetBlockInfo for a disk that has left the pools.
                rebuilt = _domain_facts(
                    domain, entry.state_code, entry.definition, volumes, entry.block_capacities
                )
                entry.facts = _as_before(definitions, uuid, rebuilt)
                entry.volumes_generation = cache.volumes_generation
        if uuid:
            kept_domains[uuid] = entry
        domains.append(entry.facts)
    cache.domains = kept_domains
    if definitions is not None:
        definitions.keep_only({uuid for _domain, uuid, _read in present})
    cache.audits += 1
    cache.valid = True
    return domains, volumes, reads, full


def _volumes_for(
    cache: DomainCache, conn: VirConnect, block_info_is_real: bool, *, full: bool, pools_changed: bool
) -> tuple[VolumeIndex, bool]:
    """The cache's volume index where it may be kept, else a new one (and True)."""
    volumes = cache.volumes
    if (
        full
        or volumes is None
        or not cache.pool_events
        or pools_changed
        or not volumes.reusable()
        or not volumes.refresh_shared()  # a call per shared pool: their sizes move without events
    ):
        return cache.new_volumes(VolumeIndex(conn, block_info_is_real=block_info_is_real)), True
    return volumes, False


def _read_or_report(
    domain: VirDomain,
    uuid: str,
    state_code: int | None,
    ownership: OwnershipMetadata | None,
    problems: list[str],
    *,
    definitions: ParsedDefinitions | None,
) -> tuple[int, DomainDefinition] | None:
    """`_read_definition`, an unreadable domain reported among `problems` (left out of the
    accounting, never a failure of its host); None for that, and for a domain gone while read."""
    try:
        return _read_definition(domain, uuid, state_code, ownership, definitions)
    except DomainUnreadableError as unreadable:
        problems.append(str(unreadable))
        return None


def _read_definition(
    domain: VirDomain,
    uuid: str,
    state_code: int | None,
    ownership: OwnershipMetadata | None,
    definitions: ParsedDefinitions | None,
) -> tuple[int, DomainDefinition] | None:
    """The domain's state code and parsed definition; None when it vanished while being read
    (undefined between list and read)."""
    try:
        if state_code is None:
            state_code = int(domain.info()[0])
        xml = domain.XMLDesc(0)
        if definitions is None:
            return state_code, parse_domain_xml(xml, ownership)
        return state_code, definitions.parse(uuid, xml, ownership)
    except libvirt.libvirtError as error:
        if error.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise DomainUnreadableError(
            f"{_label(domain)}: {error.get_error_message()}; left out of the accounting"
        ) from None
    except DomainXMLError as error:
        raise DomainUnreadableError(f"{_label(domain)}: {error}; left out of the accounting") from None


def _domain_facts(
    domain: VirDomain,
    state_code: int,
    definition: DomainDefinition,
    volumes: VolumeIndex,
    block_capacities: dict[str, int | str],
) -> DomainFacts:
    """A domain's facts from its definition; its disks' sizes from the volume index, or from
    virDomainGetBlockInfo for a disk outside the pools, unless `block_capacities` has them."""
    label = f"domain {definition.name}"
    state = state_from_libvirt(state_code)
    active = state_code in ACTIVE_STATES
    problems = list(definition.problems)
    disks = tuple(
        _disk_facts(domain, reference, volumes, problems, label, block_capacities=block_capacities)
        for reference in definition.disks
    )
    return DomainFacts(
        name=definition.name,
        uuid=definition.uuid,
        state=state,
        vcpus=definition.vcpus,
        memory_bytes=definition.memory_bytes,
        # The live definition's <currentMemory> is the balloon target, what virDomainGetInfo
        # reports: read from the XML, it costs no call of its own.
        current_memory_bytes=definition.current_memory_bytes if active else None,
        hugepages=definition.hugepages,
        vcpu_pins=definition.vcpu_pins,
        disks=disks,
        nova=definition.nova,
        problems=tuple(problems),
        layout=definition.layout,
        owner=definition.owner,
    )


def _label(domain: VirDomain) -> str:
    try:
        return f"domain {domain.name()}"
    except libvirt.libvirtError:
        return "domain ?"


def _disk_facts(
    domain: VirDomain,
    reference: DiskReference,
    volumes: VolumeIndex,
    problems: list[str],
    label: str,
    *,
    block_capacities: dict[str, int | str],
) -> DiskFacts:
    if not is_local_disk(reference):
        return DiskFacts(reference.target, reference.source, local=False, capacity_bytes=None)
    if reference.kind == "volume":
        volume = volumes.by_pool_volume(reference.pool or "", reference.volume or "")
    else:
        volume = volumes.by_path(reference.path or "")
    if volume is not None:
        return DiskFacts(
            reference.target, reference.source, local=not volume.shared, capacity_bytes=volume.capacity
        )
    if not volumes.block_info_is_real:
        problems.append(f"{label}: disk {reference.target} ({reference.source}): not in any storage pool")
        return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=None)
    if reference.target not in block_capacities:
        try:
            block_capacities[reference.target] = int(domain.blockInfo(reference.target)[0])
        except libvirt.libvirtError as error:
            block_capacities[reference.target] = str(error.get_error_message())
    capacity = block_capacities[reference.target]
    if isinstance(capacity, str):
        problems.append(f"{label}: disk {reference.target} ({reference.source}): {capacity}")
        return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=None)
    return DiskFacts(reference.target, reference.source, local=True, capacity_bytes=capacity)
