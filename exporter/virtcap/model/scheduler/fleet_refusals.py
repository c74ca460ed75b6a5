"""The hosts of a fleet that refuse a request, kept per request for the evacuations: the
rejections of a domain that finds no host are the fleet's, less the hosts lost, with those the
evacuation consumed as they are now; built only when read."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterator, Mapping, Sequence

from virtcap.model.scheduler.filters import Rejection

HostRefusal = tuple[Rejection, bool]
"""A host's rejection of a request, and whether the filters of each instance (NUMA, PCI) gave it
rather than those of the request: `schedule` lists those after the others."""


class RequestRefusals:
    """Per request, the hosts of a fleet that refuse one instance of it as they are (those that
    do not pass), each with `schedule`'s rejection and whether it was found at the filters
    (NUMA, PCI: `schedule` lists those after the others); by index (name order), with how many
    each filter refused. Never changed once built: the unplaced domains of a result keep the
    one they were found with, and a fleet whose host changes makes another (`with_host`)."""

    __slots__ = ("counts", "numbers", "rejections")

    def __init__(
        self, rejections: dict[int, HostRefusal], numbers: list[int], counts: dict[str, int]
    ) -> None:
        self.rejections = rejections
        self.numbers = numbers
        """The hosts of `rejections`, in index order."""
        self.counts = counts

    @classmethod
    def of(cls, rejections: dict[int, HostRefusal]) -> RequestRefusals:
        counts: dict[str, int] = {}
        for rejection, _ in rejections.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return cls(rejections, sorted(rejections), counts)

    def with_host(self, number: int, found: HostRefusal | None) -> RequestRefusals:
        """The same with one host's refusal as it is now (None: it passes)."""
        before = self.rejections.get(number)
        if before == found:
            return self
        rejections, counts, numbers = dict(self.rejections), dict(self.counts), self.numbers
        if before is not None:
            counts[before[0].filter] -= 1
            if found is None:
                del rejections[number]
                numbers = [other for other in numbers if other != number]
        if found is not None:
            counts[found[0].filter] = counts.get(found[0].filter, 0) + 1
            rejections[number] = found
            if before is None:
                numbers = list(numbers)
                bisect.insort(numbers, number)
        return RequestRefusals(rejections, numbers, counts)


class UnplacedRejections(Mapping[str, Rejection]):
    """`schedule`'s rejections of a domain that found no host in an evacuation, from what differs
    from the fleet: every host refuses it (none passes), the fleet's hosts as they are (the
    request's `RequestRefusals`) but for those lost (`gone`) and those the evacuation consumed
    (`moved`: their refusals as they are now). Built into the dictionary `schedule` gives (the
    same order too) only when read: most readers want only `refused_by` and `first`, which cost
    what the evacuation changed, not the fleet's size."""

    __slots__ = ("_built", "_gone", "_moved", "_names", "_refused")

    def __init__(
        self,
        names: Sequence[str],
        refused: RequestRefusals,
        gone: Collection[int],
        moved: dict[int, HostRefusal],
    ) -> None:
        self._names = names
        self._refused = refused
        self._gone = gone
        self._moved = moved
        self._built: dict[str, Rejection] | None = None

    def _dict(self) -> dict[str, Rejection]:
        built = self._built
        if built is None:
            gone, moved, refused = self._gone, self._moved, self._refused.rejections
            numbers = sorted(
                [number for number in self._refused.numbers if number not in gone and number not in moved]
                + list(moved)
            )
            early: dict[str, Rejection] = {}
            late: list[tuple[str, Rejection]] = []
            for number in numbers:
                rejection, at_filters = moved[number] if number in moved else refused[number]
                if at_filters:
                    late.append((self._names[number], rejection))
                else:
                    early[self._names[number]] = rejection
            early.update(late)
            built = self._built = early
        return built

    def __getitem__(self, name: str) -> Rejection:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnplacedRejections):
            other = other._dict()
        return self._dict() == other

    __hash__ = None  # type: ignore[assignment]  # a mapping, equal to a dict: not hashable either

    def __repr__(self) -> str:
        return repr(self._dict())

    def refused_by(self) -> dict[str, int]:
        """Per filter, how many hosts refused the domain: the fleet's counts, less the lost and
        consumed hosts' refusals as the fleet has them, plus the consumed hosts' as they are."""
        counts = dict(self._refused.counts)
        refused = self._refused.rejections
        for number in (*self._gone, *self._moved):
            found = refused.get(number)
            if found is not None:
                counts[found[0].filter] -= 1
        for rejection, _ in self._moved.values():
            counts[rejection.filter] = counts.get(rejection.filter, 0) + 1
        return {name: count for name, count in counts.items() if count > 0}

    def first(self) -> tuple[str, Rejection] | None:
        """The first host by name that refused the domain, and why (None: no host left)."""
        gone, moved = self._gone, self._moved
        best = min(moved) if moved else None
        for number in self._refused.numbers:  # stops past the lost and consumed ones at most
            if best is not None and number > best:
                break
            if number not in gone and number not in moved:
                best = number
                break
        if best is None:
            return None
        rejection, _ = moved[best] if best in moved else self._refused.rejections[best]
        return self._names[best], rejection
