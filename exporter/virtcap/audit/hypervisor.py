"""The audit: one hypervisor's libvirt connection in, plain facts out.

Everything here blocks on libvirt and runs in a worker thread. A domain that cannot be read is
reported among the problems and left out; it never fails the audit of its host.

An audit joins what the host reads (virtcap.audit.host_readings: the node, its layout read once per
connection, its memory, CPU times, storage, free hugepages and mediated devices) and what its
domains read (virtcap.audit.domains: the domain list and each domain's facts, kept between full
audits where the connection keeps a DomainCache).
"""

from __future__ import annotations

import time

import libvirt

from virtcap.audit.connection import AuditError
from virtcap.audit.domain_cache import DomainCache
from virtcap.audit.domains import read_all_domains, read_domains_with_cache, read_vcpu_statistics
from virtcap.audit.host_readings import (
    TEST_DRIVER,
    HostLayout,
    busy_cpus,
    read_cpu_times,
    read_host_layout,
    read_host_readings,
    read_memory_in_use,
    read_online_cpus,
    read_storage,
    with_free_hugepages,
    with_mediated_devices,
)
from virtcap.audit.libvirt_api import VirConnect
from virtcap.audit.parsed_definitions import ParsedDefinitions
from virtcap.audit.volumes import VolumeIndex
from virtcap.config import DiskSource
from virtcap.model.contention import advance_vcpu_wait
from virtcap.model.facts import CpuTimes, HostFacts, VcpuWait
from virtcap.model.ownership import OwnershipMetadata

MIB = 1024**2


def audit_host(
    conn: VirConnect,
    uri: str,
    disk: DiskSource | None,
    previous_cpu: CpuTimes | None = None,
    cpu_window: float = 0.0,
    *,
    layout: HostLayout | None = None,
    previous_vcpu_wait: VcpuWait | None = None,
    ownership: OwnershipMetadata | None = None,
    cache: DomainCache | None = None,
    definitions: ParsedDefinitions | None = None,
) -> HostFacts:
    """Read everything capacity accounting needs from one hypervisor.

    Host CPU busy time is a rate: it needs a previous sample (`previous_cpu`, from the last
    audit) or, for a one-shot audit, a second sample taken `cpu_window` seconds after the first.
    `layout` is the connection's (read_host_layout), read here when not given. The vCPU wait
    counter goes on from `previous_vcpu_wait`, the last audit's (virtcap.model.contention).
    `ownership` is where domains' metadata names their project, when the configuration says so.
    `cache` is the connection's (virtcap.audit.domain_cache), kept by its owner from one audit to
    the next: with it, audits between full ones read again only the domains that changed. Without
    it, every audit is full. `definitions` (virtcap.audit.parsed_definitions), kept by the same
    owner across connections, spares a full audit the parsing of the XML that did not change.
    """
    started = time.monotonic()
    problems: list[str] = []
    try:
        _model, memory_mib, cpus, *_ = conn.getInfo()
        hypervisor_type = conn.getType()
        readings = read_host_readings(conn, cache)
    except libvirt.libvirtError as error:
        raise AuditError(f"cannot read node information: {error.get_error_message()}") from None
    sampling = cpu_window > 0 and previous_cpu is None
    window_started = time.monotonic()
    if sampling:
        previous_cpu = read_cpu_times(conn)
    if layout is None:
        layout = read_host_layout(conn)
    if sampling:  # the layout was read within the window: only the rest of it is waited for
        time.sleep(max(0.0, cpu_window - (time.monotonic() - window_started)))
    storage = read_storage(conn, uri, disk, problems)
    # The test driver answers virDomainGetBlockInfo with made-up constants (about 1 TiB for any
    # disk): only its storage pools' volumes are real data.
    block_info_is_real = hypervisor_type != TEST_DRIVER
    if cache is None:
        volumes = VolumeIndex(conn, block_info_is_real=block_info_is_real)
        domains, reads = read_all_domains(conn, volumes, ownership, problems, definitions=definitions)
        full = True
    else:
        try:
            domains, volumes, reads, full = read_domains_with_cache(
                cache, conn, block_info_is_real, ownership, problems, definitions=definitions
            )
        except BaseException:
            cache.valid = False  # the changes it took may be lost: the next audit is full
            raise
    memory_in_use, memory_source = read_memory_in_use(conn, uri, domains)
    cells = with_free_hugepages(conn, layout.numa_cells, problems)
    pci_devices, mediated_devices = with_mediated_devices(conn, layout.pci_devices, problems)
    cpu_times = read_cpu_times(conn)
    # the test driver's vCPU statistics are made-up constants
    delays, domain_cpu_ns = (
        (None, None) if hypervisor_type == TEST_DRIVER else read_vcpu_statistics(conn, problems)
    )
    vcpu_wait = advance_vcpu_wait(previous_vcpu_wait, delays, {d.uuid for d in domains})
    shared_pools = volumes.shared_pools()
    return HostFacts(
        hostname=readings.hostname,
        hypervisor_type=hypervisor_type,
        hypervisor_version=readings.hypervisor_version,
        libvirt_version=readings.libvirt_version,
        cpus=cpus,
        online_cpus=read_online_cpus(conn),
        memory_bytes=memory_mib * MIB,
        storage=storage,
        memory_in_use_bytes=memory_in_use,
        memory_in_use_source=memory_source,
        cpu_times=cpu_times,
        busy_cpus=busy_cpus(previous_cpu, cpu_times),
        domains=tuple(sorted(domains, key=lambda d: d.name)),
        audited_at=time.time(),
        audit_duration_seconds=time.monotonic() - started,
        # libvirt lists domains in no stable order: sorted, reports compare equal from audit to audit
        problems=tuple(
            sorted(
                problems + list(layout.problems) + volumes.problems + [p for d in domains for p in d.problems]
            )
        ),
        numa_cells=cells,
        pci_devices=pci_devices,
        mediated_devices=mediated_devices,
        vcpu_wait=vcpu_wait,
        domain_cpu_ns=domain_cpu_ns,
        shared_pools=shared_pools,
        domain_reads=reads,
        full_audit=full,
    )
