"""What the claim ledger needs from where its claims are stored, whichever database that is.

Two backends: SQLite (claims/database.py), one exporter's own file, and PostgreSQL
(claims/postgres.py), one ledger shared by replicas. The ledger changes the stored claims and
maintenance only within `transaction`: for SQLite the ledger's own lock is all there is to it;
for PostgreSQL the transaction also holds a ledger-wide lock and hands the ledger what the other
replicas changed first, so that the fit test runs on every claim held and its write commits with it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from virtcap.fleet.claim_records import Claim
from virtcap.model.facts import DomainState
from virtcap.model.maintenance import Maintenance
from virtcap.model.reclaim import DomainHistory
from virtcap.model.resources import Resource, resource_class

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class StorageError(Exception):
    """The database refused or could not be reached: nothing it was asked to change changed (or,
    for an error at commit, nobody is told it did)."""


@dataclass(frozen=True, slots=True)
class LedgerState:
    """Every stored claim, every maintenance entry set through the API, and when the configuration's
    maintenance of each hypervisor was first seen in effect."""

    claims: list[Claim] = field(default_factory=list)
    maintenance: dict[str, Maintenance] = field(default_factory=dict)
    configured_since: dict[str, float] = field(default_factory=dict)


class Writes(Protocol):
    """The changes a transaction makes."""

    async def insert(self, claim: Claim) -> None: ...

    async def delete(self, ids: Iterable[str]) -> None: ...

    async def put_maintenance(self, hypervisor: str, entry: Maintenance) -> None: ...

    async def delete_maintenance(self, hypervisors: Iterable[str]) -> None: ...

    async def put_configured_since(self, since: dict[str, float]) -> None:
        """When the configuration's maintenance of these hypervisors was first seen (a row
        already there is kept: another replica saw it first)."""

    async def delete_configured_since(self, hypervisors: Iterable[str]) -> None: ...


Work = Callable[["LedgerState | None", Writes], Awaitable[_T]]
"""A transaction's work: given what others changed since this exporter last saw the ledger (None:
nothing, or nobody else writes to it), which it adopts before anything else, it decides and
writes; an exception rolls everything back."""


class ClaimStorage(Protocol):
    description: str
    """Where the claims are, fit for logs and pages (never a password)."""
    shared: bool
    """Other exporters write to the same ledger: its changes are followed (`changes`)."""

    on_change: Callable[[], None] | None
    """Called when `up` changes (the ledger re-renders /metrics)."""

    @property
    def up(self) -> bool:
        """The last exchange with the database succeeded."""

    async def start(self) -> LedgerState | None:
        """Create or migrate the schema and read everything; None when a shared database cannot
        be reached yet (the exporter serves meanwhile, and `changes` opens it later). Raises
        ConfigError for what no retry fixes (a newer schema, a file that cannot be created)."""

    async def transaction(self, work: Work[_T]) -> _T:
        """Run `work` in one transaction. Raises StorageError."""

    async def wait(self) -> None:
        """Until the ledger may have changed (shared databases only): another exporter's notice,
        or a few seconds passed."""

    async def changes(self) -> LedgerState | None:
        """What the ledger is now if it changed since last seen (shared databases only); None
        when it did not or cannot be reached."""

    async def domain_history(self) -> list[DomainHistory]:
        """What is remembered of every domain (reclaimable capacity). Raises StorageError."""

    async def write_domain_history(
        self, changed: Iterable[DomainHistory], forgotten: Iterable[tuple[str, str]]
    ) -> None:
        """Store `changed` and forget the (hypervisor, uuid) `forgotten`, together, outside the
        claims' transactions. Raises StorageError."""

    async def close(self) -> None: ...


HISTORY_COLUMNS = "hypervisor, uuid, state, state_since, cpu_time_ns, cpu_sampled_at, idle_since"
"""The domain_history table's columns, in both databases."""
HistoryRow = tuple[str, str, str, float, int | None, float | None, float | None]


def history_rows(histories: Iterable[DomainHistory]) -> list[HistoryRow]:
    return [
        (h.hypervisor, h.uuid, h.state.value, h.state_since, h.cpu_time_ns, h.cpu_sampled_at, h.idle_since)
        for h in histories
    ]


def history_from_rows(rows: Iterable[HistoryRow]) -> list[DomainHistory]:
    """Rows of HISTORY_COLUMNS; a state a later virtcap wrote is skipped (its domain starts over)."""
    known = {state.value: state for state in DomainState}
    return [
        DomainHistory(hypervisor, uuid, known[state], state_since, cpu_time_ns, cpu_sampled_at, idle_since)
        for hypervisor, uuid, state, state_since, cpu_time_ns, cpu_sampled_at, idle_since in rows
        if state in known
    ]


def assemble_claims(
    claim_rows: Iterable[tuple[str, str, float, float, str | None, str, str | None, str | None]],
    amount_rows: Iterable[tuple[str, str, int]],
    spec_rows: Iterable[tuple[str, str, str]],
    instance_rows: Iterable[tuple[str, str]],
) -> list[Claim]:
    """Claims from their rows: claims (id, hypervisor, created_at, expires_at, domain_uuid, owner,
    flavor, created_by), amounts per Placement class in whole units, extra specs, and instances in order."""
    amounts: dict[str, dict[Resource, int]] = {}
    for claim_id, name, amount in amount_rows:
        try:
            resource = resource_class(name)
        except ValueError:  # a class a later virtcap wrote: kept in the database, not counted here
            log.warning("claim amount of an unknown class ignored", extra={"claim": claim_id, "class": name})
            continue
        amounts.setdefault(claim_id, {})[resource] = amount * resource.placement_unit
    extra_specs: dict[str, dict[str, str]] = {}
    for claim_id, key, value in spec_rows:
        extra_specs.setdefault(claim_id, {})[key] = value
    instances: dict[str, list[str]] = {}
    for claim_id, hypervisor in instance_rows:
        instances.setdefault(claim_id, []).append(hypervisor)
    return [
        Claim(
            id=claim_id,
            # a claim without instance rows (a row inserted by hand) is one instance
            hypervisor=instances[claim_id][0] if claim_id in instances else hypervisor,
            hypervisors=tuple(instances.get(claim_id, ())),
            amounts=amounts.get(claim_id, {}),
            created_at=created_at,
            expires_at=expires_at,
            domain_uuid=domain_uuid,
            owner=owner,
            flavor=flavor,
            extra_specs=extra_specs.get(claim_id, {}),
            created_by=created_by,
        )
        for claim_id, hypervisor, created_at, expires_at, domain_uuid, owner, flavor, created_by in claim_rows
    ]
