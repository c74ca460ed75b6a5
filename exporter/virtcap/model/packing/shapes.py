"""Domains grouped by identical request: a shape is what many domains ask for alike (the same
Placement request, groups included, the same NUMA topology and devices, the same zone), so that a
packing model counts shapes, not domains: a fleet of 50,000 domains of a few flavors has tens of
shapes."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler import HostState
from virtcap.model.scheduler.filters import request_key


@dataclass(frozen=True, slots=True, order=True)
class DomainRef:
    """One counted domain: the hypervisor it is on and its name there (libvirt's names are
    unique per hypervisor only)."""

    hypervisor: str
    name: str


@dataclass(frozen=True, slots=True)
class Shape:
    """The domains that ask for the same `demand`, in the order their hypervisors were given."""

    demand: Demand
    members: tuple[DomainRef, ...]

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def size(self) -> tuple[int, int, int]:
        """Memory, vCPUs (shared and dedicated), disk: the order shapes are packed in, largest
        first (an evacuation's order)."""
        request = self.demand.request
        return (
            request.get(Resource.MEMORY, 0),
            request.get(Resource.VCPU, 0) + request.get(Resource.PCPU, 0),
            request.get(Resource.DISK, 0),
        )


def shape_key(demand: Demand) -> Hashable:
    """What makes two demands the same shape: the request by group, what it asks of the cells and
    devices, its zone."""
    return (request_key(demand.request), demand.within, demand.availability_zone)


def domain_shapes(states: Sequence[HostState]) -> tuple[Shape, ...]:
    """The shapes of the states' domains (their `guests`), largest first, then in the order the
    first domain of each was met: the same states give the same shapes in the same order."""
    demands: dict[Hashable, Demand] = {}
    members: dict[Hashable, list[DomainRef]] = {}
    for state in states:
        for guest in state.guests:
            key = shape_key(guest.demand)
            if key not in demands:
                demands[key] = guest.demand
                members[key] = []
            members[key].append(DomainRef(state.name, guest.name))
    shapes = [Shape(demands[key], tuple(members[key])) for key in demands]
    order = {id(shape): index for index, shape in enumerate(shapes)}
    shapes.sort(key=lambda shape: (tuple(-amount for amount in shape.size), order[id(shape)]))
    return tuple(shapes)


__all__ = ["DomainRef", "Shape", "domain_shapes", "shape_key"]
