"""The best host of a step of an evacuation, found without weighing every host: each weigher's
largest values among the hosts that pass (`weigher_tops`), then the host `weigh` would put first,
by a threshold walk down the weighers' rankings (`threshold_best`) or from the hosts sorted by
weight for a normalization met before (`first_in_order`). The hosts are a fleet's indices (name
order); the values, their clipped weigher values."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from virtcap.model.scheduler.host_states import WeigherValues
from virtcap.model.scheduler.weighers import Multipliers

WeigherTops = tuple[tuple[float, int, float], ...]
"""Per weigher, the largest clipped value among the hosts that pass, a host holding it, and the
largest of the others (-1.0 where there is none; a holder of -1: not known)."""

Ranking = tuple[list[int], list[int], list[int]]
"""Per weigher, the hosts by their clipped value, largest first (ties by index)."""


def weigher_tops(
    ranking: Ranking,
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    passing_again: Collection[int],
    clipped: Sequence[WeigherValues],
    *,
    starts: list[int] | None = None,
) -> WeigherTops:
    """Per weigher, among the hosts that pass (the ranked ones but for those skipped or gone, and
    those passing again), the largest clipped value, a host that holds it, and the largest of
    the others (-1.0 where there is none).

    `starts`, per weigher, is where in its ranking the hosts neither skipped nor gone begin, moved
    on here: an evacuation only adds hosts to skip (those it consumes, mostly the top of the
    rankings), so it keeps one per request and the walk does not step over them again."""
    tops: list[tuple[float, int, float]] = []
    for part in range(3):
        ranked = ranking[part]
        length = len(ranked)
        position = starts[part] if starts is not None else 0
        while position < length and (ranked[position] in skip or ranked[position] in gone):
            position += 1
        if starts is not None:
            starts[part] = position
        first, holder, second = -1.0, -1, -1.0
        if position < length:
            holder = ranked[position]
            first = clipped[holder][part]
            position += 1
            while position < length and (ranked[position] in skip or ranked[position] in gone):
                position += 1
            if position < length:
                second = clipped[ranked[position]][part]
        tops.append((first, holder, second))
    if not passing_again:
        return tuple(tops)
    (f_ram, h_ram, s_ram), (f_cpu, h_cpu, s_cpu), (f_disk, h_disk, s_disk) = tops
    for number in passing_again:  # the three weighers in one pass: this runs at every step
        ram, cpu, disk = clipped[number]
        if ram > f_ram:
            f_ram, h_ram, s_ram = ram, number, f_ram
        elif ram > s_ram:
            s_ram = ram
        if cpu > f_cpu:
            f_cpu, h_cpu, s_cpu = cpu, number, f_cpu
        elif cpu > s_cpu:
            s_cpu = cpu
        if disk > f_disk:
            f_disk, h_disk, s_disk = disk, number, f_disk
        elif disk > s_disk:
            s_disk = disk
    return ((f_ram, h_ram, s_ram), (f_cpu, h_cpu, s_cpu), (f_disk, h_disk, s_disk))


def threshold_best(
    ranking: Ranking,
    *,
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    passing_again: Collection[int],
    clipped: Sequence[WeigherValues],
    tops: WeigherTops,
    multipliers: Multipliers,
) -> tuple[int, float]:
    """The host `weigh` puts first among those that pass (two at least), and its weight, computed
    exactly as `weigh` computes it (each normalized value times its multiplier, summed in order),
    so that the choice is the same to the last bit; ties go to the lowest index (name).

    Fagin's threshold algorithm: the ranked hosts that are neither skipped nor gone (they have
    the values they were ranked by) are walked down every weigher's ranking at once (up it for a
    negative multiplier), each one seen weighed exactly; a host not seen yet comes after the
    walk's position in every ranking, so (normalizing, multiplying and adding, correctly rounded,
    are monotone) it weighs at most the threshold, the weight of the values at those positions
    computed the same way. The walk stops once the best seen weighs more than the threshold: no
    unseen host can beat it or tie with it. Skipped hosts are stepped over without counting:
    an evacuation skips the hosts it consumed, the top of the rankings, and their old values
    would hold the threshold up. The hosts passing again (consumed by this evacuation, their
    values changed) are weighed first."""
    m_ram, m_cpu, m_disk = multipliers.ram, multipliers.cpu, multipliers.disk
    t_ram, t_cpu, t_disk = tops[0][0], tops[1][0], tops[2][0]

    def weight_of_values(ram: float, cpu: float, disk: float) -> float:
        # as `weighers.weight_of`
        return (
            0.0
            + m_ram * (ram / t_ram if t_ram != 0.0 else 0.0)
            + m_cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
            + m_disk * (disk / t_disk if t_disk != 0.0 else 0.0)
        )

    best, best_weight = -1, 0.0
    for number in passing_again:
        weight = weight_of_values(*clipped[number])
        if best < 0 or weight > best_weight or (weight == best_weight and number < best):
            best, best_weight = number, weight
    walks = [
        ranking[part] if multiplier >= 0 else ranking[part][::-1]
        for part, multiplier in enumerate((m_ram, m_cpu, m_disk))
    ]
    length = len(walks[0])
    positions = [0, 0, 0]
    seen: set[int] = set()
    at = [0.0, 0.0, 0.0]
    while True:
        for part in range(3):
            walk, position = walks[part], positions[part]
            while position < length and (walk[position] in skip or walk[position] in gone):
                position += 1
            if position == length:
                # every host of this ranking that is neither skipped nor gone has been seen
                return best, best_weight
            number = walk[position]
            positions[part] = position + 1
            values = clipped[number]
            at[part] = values[part]
            if number in seen:
                continue
            seen.add(number)
            weight = weight_of_values(*values)
            if best < 0 or weight > best_weight or (weight == best_weight and number < best):
                best, best_weight = number, weight
        if best >= 0 and best_weight > weight_of_values(at[0], at[1], at[2]):
            return best, best_weight


def first_in_order(
    order: Sequence[tuple[float, int]],
    *,
    skip: Mapping[int, object] | set[int],
    gone: set[int],
    passing_again: Collection[int],
    clipped: Sequence[WeigherValues],
    tops: WeigherTops,
    multipliers: Multipliers,
    start: list[int],
) -> tuple[int, float]:
    """`threshold_best` from the hosts that pass in the fleet sorted by their weight under these tops (see
    `FleetIndex.sorted_by_weight`): the first neither skipped nor gone, against those passing
    again. `start` is where in the order the hosts not skipped begin, moved on here (as in
    `weigher_tops`)."""
    best, best_weight = -1, 0.0
    position, length = start[0], len(order)
    while position < length and (order[position][1] in skip or order[position][1] in gone):
        position += 1
    start[0] = position
    if position < length:
        negated, best = order[position]
        best_weight = -negated
    m_ram, m_cpu, m_disk = multipliers.ram, multipliers.cpu, multipliers.disk
    t_ram, t_cpu, t_disk = tops[0][0], tops[1][0], tops[2][0]
    for number in passing_again:
        ram, cpu, disk = clipped[number]
        # as `weighers.weight_of`, inline: this runs for every consumed host at every step
        weight = (
            0.0
            + m_ram * (ram / t_ram if t_ram != 0.0 else 0.0)
            + m_cpu * (cpu / t_cpu if t_cpu != 0.0 else 0.0)
            + m_disk * (disk / t_disk if t_disk != 0.0 else 0.0)
        )
        if best < 0 or weight > best_weight or (weight == best_weight and number < best):
            best, best_weight = number, weight
    return best, best_weight
