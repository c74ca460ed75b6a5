"""What the handlers of a running exporter share: one Exporter, reachable from every request."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from virtcap.claims.ledger import ClaimLedger
from virtcap.config import Config
from virtcap.fleet.store import SnapshotStore
from virtcap.service.auditor import FleetAuditor
from virtcap.service.consolidation import ConsolidationPlanner
from virtcap.service.placement import PlacementTask
from virtcap.service.supervise import Supervisor
from virtcap.service.tolerance_task import ToleranceTracker
from virtcap.web.access import WebConfigSource
from virtcap.web.auth import BasicAuth
from virtcap.web.connections import ConnectionGuard
from virtcap.web.render import MetricsCache


@dataclass
class Exporter:
    config: Config
    store: SnapshotStore
    supervisor: Supervisor
    fleet: FleetAuditor
    cache: MetricsCache
    claims: ClaimLedger
    web: WebConfigSource
    """The web config, followed while serving: TLS, readers (basic_auth_users), headers, rate limit."""
    writers: BasicAuth
    """Who may create and delete claims (claims.writers): always required, whatever the readers."""
    connections: ConnectionGuard | None = None
    tolerance: ToleranceTracker | None = None
    """The fleet's failure tolerance, computed in the background (None where nothing runs it)."""
    placement: PlacementTask | None = None
    """The Placement reconciliation, running while `placement:` is configured (reload.py)."""
    planner: ConsolidationPlanner = field(default_factory=ConsolidationPlanner)
    """Consolidation plans on request, in a worker process started on the first (stopped with
    the exporter)."""


EXPORTER = web.AppKey("exporter", Exporter)


def exporter_of(request: web.Request) -> Exporter:
    return request.app[EXPORTER]
