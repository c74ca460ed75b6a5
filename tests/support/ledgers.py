"""Claim requests and hypervisors for the claims engine's tests, on a real ClaimLedger or a
PostgreSQL one."""

from __future__ import annotations

from collections.abc import Mapping

from tests.support.factories import GIB
from tests.support.fleets import DEFAULTS
from virtcap.claims.ledger import (
    ClaimRequest,
)
from virtcap.config import Hypervisor
from virtcap.model.resources import Resource

SMALL = {Resource.VCPU: 2, Resource.MEMORY: 4 * GIB, Resource.DISK: 10 * GIB}


def hypervisor(name: str) -> Hypervisor:
    return Hypervisor(name, "test:///default", DEFAULTS, None)


def request(hypervisor: str, amounts: Mapping[Resource, int] = SMALL, count: int = 1) -> ClaimRequest:
    return ClaimRequest(hypervisor, dict(amounts), 60.0, None, "test", count=count)


def shapes(*hosts: tuple[int, int, int]) -> list[tuple[int, int, int, list[tuple[int, int, int]], bool]]:
    return [(cpus, memory, disk, [], True) for cpus, memory, disk in hosts]
