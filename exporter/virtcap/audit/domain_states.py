"""libvirt's domain states (virDomainState), read into what capacity accounting tells apart."""

from __future__ import annotations

import libvirt

from virtcap.model.facts import DomainState

# BLOCKED is a running guest waiting on a resource.
_LIBVIRT_STATES: dict[int, DomainState] = {
    libvirt.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTOFF: DomainState.SHUTOFF,
}

ACTIVE_STATES: frozenset[int] = frozenset(
    {
        libvirt.VIR_DOMAIN_RUNNING,
        libvirt.VIR_DOMAIN_BLOCKED,
        libvirt.VIR_DOMAIN_PAUSED,
        libvirt.VIR_DOMAIN_SHUTDOWN,
        libvirt.VIR_DOMAIN_PMSUSPENDED,
    }
)
"""The states whose guests hold memory: RUNNING, BLOCKED, PAUSED, SHUTDOWN (being shut down) and
PMSUSPENDED. SHUTOFF and CRASHED ones have no process, NOSTATE tells nothing."""


def state_from_libvirt(code: int) -> DomainState:
    """NOSTATE, SHUTDOWN (being shut down), CRASHED and PMSUSPENDED count as `other`."""
    return _LIBVIRT_STATES.get(code, DomainState.OTHER)
