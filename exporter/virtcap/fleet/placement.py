"""What the last reading of Placement found (service/placement.py reads it, model/placement_drift.py
compares): kept in the store beside the audits, shown on /metrics and by the API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from virtcap.model.placement_drift import Drift


@dataclass(frozen=True, slots=True)
class PlacementReport:
    up: bool
    """The last reading succeeded: Placement answered every request of its round."""
    drifts: Mapping[str, Drift] | None
    """Per hypervisor matched to a provider, its reconciliation, as of `last_success_at`; None
    while Placement is not read successfully (its families then disappear, never stale)."""
    unmatched: tuple[str, ...] = ()
    """Audited hypervisors no provider matched (by name or `placement_provider`)."""
    error: str | None = None
    """Why the last reading failed, in one line."""
    read_at: float = 0.0
    """When the last reading ended (Unix time), whether or not it succeeded."""
    last_success_at: float | None = None
    duration_seconds: float = 0.0
    """How long the last reading took (its requests and the comparison)."""
    requests: int = 0
    """Requests the last reading made."""
    requests_total: Mapping[str, int] = field(default_factory=dict)
    """Requests since the exporter started, by outcome (`ok`, `error`)."""
