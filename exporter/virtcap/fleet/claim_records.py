"""A claim as the ledger holds it, the database stores it and the fleet's scheduling counts it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from virtcap.model.resources import Amounts

MAX_CLAIM_COUNT = 1000
"""The most instances one claim holds: as many as one dry-run placement asks for."""


@dataclass(frozen=True, slots=True)
class Claim:
    """`count` instances of the same demand, held together: each instance's `amounts` (and extra
    specs) on its hypervisor, all released together."""

    id: str
    hypervisor: str
    """Where the first instance is held: the only hypervisor of a claim of one instance."""
    amounts: Amounts
    """What one instance holds."""
    created_at: float
    expires_at: float
    domain_uuid: str | None
    owner: str
    flavor: str | None = None
    """The configured flavor the claim was made for, if it named one."""
    extra_specs: Mapping[str, str] = field(default_factory=dict)
    """A flavor's extra specs: where within the hypervisor (NUMA cells, devices) the claim is held."""
    hypervisors: tuple[str, ...] = ()
    """Per instance, in the order they were placed, its hypervisor; empty when given means one
    instance on `hypervisor` (and is made so)."""
    created_by: str | None = None
    """The writer who created it; None for a claim made before claims recorded their writer
    (schema version 5 and earlier), which any writer may delete."""

    def __post_init__(self) -> None:
        if not self.hypervisors:
            object.__setattr__(self, "hypervisors", (self.hypervisor,))
        elif self.hypervisors[0] != self.hypervisor:
            raise ValueError(
                f"a claim's first instance is on its hypervisor {self.hypervisor!r}, "
                f"not {self.hypervisors[0]!r}"
            )

    @property
    def count(self) -> int:
        """How many instances the claim holds."""
        return len(self.hypervisors)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    hypervisor: str
    amounts: Amounts
    """What one instance asks for."""
    ttl: float
    domain_uuid: str | None
    owner: str
    flavor: str | None = None
    extra_specs: Mapping[str, str] = field(default_factory=dict)
    count: int = 1
    """How many instances, all or nothing."""
    availability_zone: str | None = None
    """Only hypervisors of this zone take them (Nova's requested zone); None: any."""
    created_by: str | None = None
    """The authenticated writer asking: the only one, with `claims.admins`, who may delete it."""
