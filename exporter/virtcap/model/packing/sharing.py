"""A packing of the linear model as hypervisors and counts: the added-up program's solution
shared out among the copies of each type (`spread`), the packing the one-copy-per-hypervisor
program starts from. Linear tests only (each class's free amount in Placement's unit, each
shape's count in a row): the validation tests the cells and devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from virtcap.model.packing.shapes import Shape
from virtcap.model.resources import Resource, placement_units
from virtcap.model.scheduler import HostState


@dataclass(slots=True)
class HostType:
    """Identical empty hypervisors: their states (the fullest first, so that the ones kept are
    those most domains stay on), one of them, and per shape how many it takes in a row."""

    states: list[HostState]
    fits: list[int]
    free: dict[Resource, int]
    """Per class with a limit, what is free in Placement's unit."""

    @property
    def first(self) -> HostState:
        return self.states[0]


Counts = dict[str, dict[int, int]]
"""Per hypervisor used, how many domains of each shape (by index) it holds."""


def spread(
    shapes: Sequence[Shape], types: Sequence[HostType], used: Sequence[int], holds: Sequence[dict[int, int]]
) -> Counts:
    """The added-up solution shared out: each type's domains dealt round the copies it uses (the
    fullest hypervisors first), so that each holds about the average, which fits; a domain a copy
    has no room for goes to the first copy used that has, else to a new one of a type that takes
    it. Linear tests only: the validation tests the cells and devices."""
    rooms: dict[str, dict[Resource, int]] = {}
    counts: Counts = {}
    kinds: dict[str, int] = {}
    spare: list[list[HostState]] = [list(host_type.states) for host_type in types]

    def open_copy(type_index: int) -> str:
        state = spare[type_index].pop(0)
        rooms[state.name] = dict(types[type_index].free)
        counts[state.name] = {}
        kinds[state.name] = type_index
        return state.name

    def fits(name: str, index: int) -> bool:
        host_type = types[kinds[name]]
        if counts[name].get(index, 0) >= host_type.fits[index]:
            return False
        room = rooms[name]
        return all(
            room[resource] >= placement_units(resource, amount)
            for resource, amount in shapes[index].demand.request.items()
            if resource in room and amount > 0
        )

    def put(name: str, index: int) -> None:
        counts[name][index] = counts[name].get(index, 0) + 1
        room = rooms[name]
        for resource, amount in shapes[index].demand.request.items():
            if resource in room and amount > 0:
                room[resource] -= placement_units(resource, amount)

    overflow: list[int] = []
    for type_index, host_type in enumerate(types):
        names = [open_copy(type_index) for _ in range(min(used[type_index], len(host_type.states)))]
        turn = 0
        for index in range(len(shapes)):
            for _ in range(holds[type_index].get(index, 0) if names else 0):
                name = names[turn % len(names)]
                turn += 1
                if fits(name, index):
                    put(name, index)
                else:
                    overflow.append(index)
            if not names:
                overflow.extend([index] * holds[type_index].get(index, 0))
    placed = [sum(count.get(index, 0) for count in counts.values()) for index in range(len(shapes))]
    for index, shape in enumerate(shapes):
        overflow.extend([index] * max(shape.count - placed[index] - overflow.count(index), 0))
    for index in sorted(overflow):
        target = next((name for name in counts if fits(name, index)), None)
        if target is None:
            choices = [t for t in range(len(types)) if spare[t] and types[t].fits[index] > 0]
            if not choices:
                continue  # the validation places it, or reports it unplaced
            target = open_copy(max(choices, key=lambda t: (types[t].fits[index], -t)))
        put(target, index)
    return {name: held for name, held in counts.items() if held}


__all__ = ["Counts", "HostType", "spread"]
