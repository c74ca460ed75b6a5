"""CPU contention: how long guests' vCPUs waited for a physical CPU, as a counter that never goes back.

libvirt reports, per running domain and vCPU, `vcpu.<n>.delay`: the time the vCPU's thread spent
runnable in the host's run queue instead of running (the kernel's `run_delay`, what the guest
sees as steal time). Each value starts from 0 with its QEMU process and is gone when the domain
stops. Summed over the running domains, the total would fall every time a domain stops, and
Prometheus' rate() would read that fall as a counter reset and count the whole remaining sum as
new wait: a false spike. Instead, each reading adds only what every vCPU waited since it was
last read, so the counter grows by real wait and by nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from virtcap.model.facts import VcpuWait

VcpuDelays = Mapping[tuple[str, int], int]
"""One reading: per (domain UUID, vCPU number), its cumulative delay in nanoseconds."""


def advance_vcpu_wait(
    previous: VcpuWait | None, reading: VcpuDelays | None, defined: Set[str]
) -> VcpuWait | None:
    """The counter after `reading`, the running domains' delays now; `defined` holds the UUIDs of
    every domain the hypervisor still has, running or not.

    - The first reading is the baseline (0): what vCPUs waited before counting began is unknown
      to the counter, as a process's counters start at 0 when it starts.
    - A vCPU read before adds what it waited since; one whose delay went down belongs to a new
      QEMU process (the domain was restarted in between) and adds its whole delay, as does a vCPU
      not read before (a domain started since, or a vCPU plugged in).
    - A vCPU not in this reading keeps its last value while its domain is defined (a stopped
      domain, or one libvirt skipped this time), so that it neither counts twice nor is lost; it
      is forgotten with its domain. What a domain waited between its last reading and its stop is
      not counted: at most one audit interval of it.
    - No reading (None: the hypervisor cannot tell, or the call failed) leaves the counter as it
      was; an empty reading before any counting (no running domain yet) starts nothing, since it
      cannot tell whether the hypervisor reports delays at all.
    """
    if reading is None:
        return previous
    if previous is None:
        return VcpuWait(total_ns=0, last_ns=dict(reading)) if reading else None
    added = 0
    for key, delay in reading.items():
        before = previous.last_ns.get(key)
        added += delay if before is None or delay < before else delay - before
    kept = {key: value for key, value in previous.last_ns.items() if key[0] in defined and key not in reading}
    return VcpuWait(total_ns=previous.total_ns + added, last_ns={**kept, **reading})
