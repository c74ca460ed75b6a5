"""The request loop's fast path (`claims_request`), which `schedule` takes for a demand whose fit
the claims alone decide: it asks for no NUMA cells, devices nor vGPUs, and the request asks for
no anti-affinity. Then the instance filters (NUMATopologyFilter, PciPassthroughFilter,
ServerGroupAntiAffinityFilter) pass every candidate at every step, so each step weighs every
candidate, normalized over all of them (a full one too), and the best whose claim still succeeds
takes the instance: the same steps as the general loop, found without weighing every host at
every step.

How: the weighers' values live in arrays (index order is name order: `argmax` keeps the first of
equal weights, as `weigh` sorts ties by name), the weights are computed with `weight_of`'s
operations in its order (IEEE: the same bits as `weigh`), and after a step only the chosen
host's weight is computed again, unless its values held a weigher's largest, which is then found
again and every weight computed again. A host's claims, what is left of each class and its
values are followed as an evacuation follows them (`ConsumedHost`: the integers of its claims,
the values to the bit). tests/model/test_request_paths.py holds it to the general loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from virtcap.model.host_fit import Demand
from virtcap.model.resources import Resource
from virtcap.model.scheduler.consumed_host import ConsumedHost
from virtcap.model.scheduler.fleet_index import FleetIndex
from virtcap.model.scheduler.host_states import WeigherValues
from virtcap.model.scheduler.weighers import Multipliers, weight_of

FloatArray = npt.NDArray[np.float64]


def claims_decide(demand: Demand) -> bool:
    """Whether the claims alone decide where the demand's instances fit (`FleetIndex.needs`): it
    asks for no cells, devices nor vGPUs."""
    return not demand.within.asks and demand.request.get(Resource.VGPU, 0) <= 0


@dataclass(frozen=True, slots=True)
class ClaimsStep:
    """One instance placed by `claims_request`: the host (an index of the fleet), its weight, and
    with `traced`, its raw weigher values and the weighers' largest clipped values at that step
    (what `Weighed` shows)."""

    chosen: int
    weight: float
    raw: WeigherValues | None = None
    values: WeigherValues | None = None
    tops: WeigherValues | None = None


@dataclass(frozen=True, slots=True)
class ClaimsRequest:
    """The steps of one request and the hosts it consumed (by index of the fleet)."""

    steps: tuple[ClaimsStep, ...]
    consumed: dict[int, ConsumedHost]
    alone: bool
    """One candidate only: it weighs 0, as in `weigh`."""


@dataclass(slots=True)
class ClaimsRecord:
    """What a request's steps leave for claims_replay.py: the chosen host's clipped values after
    each step, and the weighers' largest values from the first step and from each step after
    which they changed."""

    values: list[WeigherValues] = field(default_factory=list)
    top_steps: list[int] = field(default_factory=lambda: [0])
    tops: list[WeigherValues] = field(default_factory=list)


def claims_request(
    fleet: FleetIndex,
    candidates: Sequence[int],
    demand: Demand,
    multipliers: Multipliers,
    *,
    count: int | None,
    traced: bool = False,
    record: ClaimsRecord | None = None,
) -> ClaimsRequest:
    """The steps of a request for `count` instances of the demand (None: as many as fit) on the
    `candidates` (indices of the fleet, in name order: the hosts the request's filters and
    Placement's allocation candidates passed), one instance at a time, stopping at the first that
    finds no host or at `count`. Raises ValueError for a demand the claims do not decide, and for
    a request of as many as fit where a candidate has no limit on any class the demand asks for
    (it would take instances without end). `record`: filled with what claims_replay.py keeps of
    the steps."""
    if not claims_decide(demand):
        raise ValueError("expected a demand whose claims alone decide its fit")
    key = fleet.key(demand)
    needs = fleet.needs(key, demand)
    amounts = fleet.amounts(key, demand)
    if needs is None:
        raise ValueError("expected a demand whose claims alone decide its fit")
    hosts = [ConsumedHost(number, fleet.rooms(number), fleet.room_left(number)) for number in candidates]
    if count is None:
        refuse_without_end(fleet, hosts, needs)
    steps: list[ClaimsStep] = []
    if not hosts or count == 0:
        return ClaimsRequest((), {}, len(hosts) == 1)
    values = np.array([fleet.clipped[number] for number in candidates], dtype=np.float64).reshape(-1, 3)
    columns: tuple[FloatArray, FloatArray, FloatArray] = (
        values[:, 0].copy(),
        values[:, 1].copy(),
        values[:, 2].copy(),
    )
    factors = (multipliers.ram, multipliers.cpu, multipliers.disk)
    alone = len(candidates) == 1  # one host weighs 0 (`weigh`)
    tops = [float(column.max()) for column in columns]
    if record is not None:
        record.tops.append((tops[0], tops[1], tops[2]))
    room = np.ones(len(candidates), dtype=bool)
    weights = _weights(columns, tops, factors, room, alone=alone)
    with_room = len(candidates)
    while with_room > 0 and (count is None or len(steps) < count):
        chosen = int(np.argmax(weights))
        host = hosts[chosen]
        if traced:
            now = (float(columns[0][chosen]), float(columns[1][chosen]), float(columns[2][chosen]))
            steps.append(_traced_step(fleet, host, float(weights[chosen]), now, tops))
        else:
            steps.append(ClaimsStep(host.number, float(weights[chosen])))
        host.add(demand, key, amounts)
        clipped = host.clipped(fleet.level(host.number))
        if record is not None:
            record.values.append(clipped)
        renormalize = _lowered(columns, tops, chosen, clipped)
        fits = all(need <= host.left.get(resource, need) for resource, need in needs)
        if not fits:
            room[chosen] = False
            with_room -= 1
        if renormalize:
            weights = _weights(columns, tops, factors, room, alone=alone)
            if record is not None:
                record.top_steps.append(len(steps))
                record.tops.append((tops[0], tops[1], tops[2]))
        elif not fits:
            weights[chosen] = -np.inf
        elif not alone:
            weights[chosen] = weight_of(clipped, tops, multipliers)
    consumed = {host.number: host for host in hosts if host.demands}
    return ClaimsRequest(tuple(steps), consumed, alone)


def refuse_without_end(
    fleet: FleetIndex, hosts: Sequence[ConsumedHost], needs: Sequence[tuple[Resource, int]]
) -> None:
    """Raises ValueError where a host would take instances without end: no limit on any class
    the demand asks for."""
    for host in hosts:
        if not any(resource in host.left for resource, _ in needs):
            raise ValueError(f"{fleet.names[host.number]}: the demand asks for no class with a limit")


def _traced_step(
    fleet: FleetIndex,
    host: ConsumedHost,
    weight: float,
    now: WeigherValues,
    tops: list[float],
) -> ClaimsStep:
    """The step with what `Weighed` shows: the host's raw values, its clipped ones and the tops."""
    return ClaimsStep(
        host.number, weight, host.raw(fleet.level(host.number)), now, (tops[0], tops[1], tops[2])
    )


def _lowered(
    columns: tuple[FloatArray, FloatArray, FloatArray], tops: list[float], chosen: int, clipped: WeigherValues
) -> bool:
    """The chosen host's values are now `clipped`: whether a weigher's largest value changed (it
    held one, found again in `tops`)."""
    lowered = False
    for part, column in enumerate(columns):
        before = float(column[chosen])
        column[chosen] = clipped[part]
        if before == tops[part] and clipped[part] < before:
            tops[part] = float(column.max())
            lowered = lowered or tops[part] != before
    return lowered


def _weights(
    columns: tuple[FloatArray, FloatArray, FloatArray],
    tops: Sequence[float],
    factors: tuple[float, float, float],
    room: npt.NDArray[np.bool_],
    *,
    alone: bool,
) -> FloatArray:
    """Every candidate's weight, as `weight_of` computes it (0 for one host alone), -inf where
    its claim would fail."""
    total: FloatArray = np.zeros(len(room), dtype=np.float64)
    if not alone:
        for column, top, factor in zip(columns, tops, factors, strict=True):
            part = factor * (column / top) if top != 0.0 else factor * np.zeros(len(room), dtype=np.float64)
            total = total + part
    total[~room] = -np.inf
    return total
