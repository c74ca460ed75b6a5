"""A host an evacuation or a request placed instances on, followed from its claims
(`ConsumedHost`): what is left of each class, the weighers' values and whether it still passes,
without building its `HostState` at each step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler.fleet_index import FleetIndex, RequestNumber
from virtcap.model.scheduler.fleet_refusals import HostRefusal
from virtcap.model.scheduler.host_states import HostState, WeigherLevels, WeigherValues, raw_weigher_values


class ConsumedHost:
    """A host an evacuation (or a request, see claims_request.py) placed domains on, as it is
    now: its state in the fleet, the demands placed on it in order and what they claim. Its
    `HostState` is built only when asked for (the tests of a demand that asks for cells, devices
    or vGPUs, `schedule`, the evacuation's result): the weighers' values and the tests of the
    other demands come from the claims."""

    __slots__ = (
        "claimed",
        "cpus",
        "demands",
        "disk",
        "keys",
        "left",
        "memory",
        "number",
        "passing",
        "refusals",
        "rooms",
        "state",
    )

    def __init__(
        self, number: int, rooms: Mapping[Resource, tuple[int, int]], left: dict[Resource, int]
    ) -> None:
        self.number = number
        self.rooms = rooms
        self.demands: list[Demand] = []
        self.keys: list[RequestNumber] = []
        self.claimed: dict[Resource, int] = {}
        self.memory = self.cpus = self.disk = 0
        """What the weighers read of the claims: memory and disk bytes, vCPUs (shared and
        dedicated)."""
        self.left = dict(left)
        """Per class with a limit, what is free in Placement's unit (`placement_free`)."""
        self.passing: dict[RequestNumber, bool] = {}
        """Whether it passes for each request, as it is now."""
        self.refusals: dict[RequestNumber, HostRefusal | None] = {}
        """Why it refuses each request a domain found no host for, as it is now."""
        self.state: HostState | None = None

    def add(self, demand: Demand, key: RequestNumber, amounts: Sequence[tuple[Resource, int]]) -> None:
        """Place the demand (of this key, claiming these `amounts`: `FleetIndex.amounts`)."""
        for resource, amount in amounts:
            claimed = self.claimed[resource] = self.claimed.get(resource, 0) + amount
            room = self.rooms.get(resource)
            if room is not None:
                self.left[resource] = room[0] - placement_units(resource, room[1] + claimed)
            if resource is Resource.MEMORY:
                self.memory = claimed
            elif resource is Resource.VCPU or resource is Resource.PCPU:
                self.cpus += amount
            elif resource is Resource.DISK:
                self.disk = claimed
        self.demands.append(demand)
        self.keys.append(key)
        self.passing = {}
        self.refusals = {}
        self.state = None

    def current(self, fleet: FleetIndex) -> HostState:
        if self.state is None:
            self.state = fleet.built(self.number, self.demands, tuple(self.keys))
        return self.state

    def raw(self, levels: WeigherLevels) -> WeigherValues:
        """The weighers' raw values, as its `HostState` would give them (`raw_weigher_values`)."""
        return raw_weigher_values(levels, self.memory, self.cpus, self.disk)

    def clipped(self, levels: WeigherLevels) -> WeigherValues:
        ram, cpu, disk = self.raw(levels)
        return (max(ram, 0.0), max(cpu, 0.0), max(disk, 0.0))

    def rejection(self, fleet: FleetIndex, demand: Demand, key: RequestNumber) -> HostRefusal | None:
        """`FleetIndex.rejection` of the host as it is now."""
        if key in self.refusals:
            return self.refusals[key]
        found = self.refusals[key] = fleet.rejection(self.current(fleet), demand, key)
        return found

    def passes(self, fleet: FleetIndex, demand: Demand, key: RequestNumber) -> bool:
        found = self.passing.get(key)
        if found is None:
            needs = fleet.needs(key, demand)
            if needs is None:
                found = fleet.passes(self.current(fleet), demand, key)
            else:
                found = self.number in fleet.passing[key]
                left = self.left
                for resource, need in needs:
                    room = left.get(resource)  # None: no limit
                    if found and room is not None and need > room:
                        found = False
            self.passing[key] = found
        return found
