"""Offset ranges, and how a batch's ranges are spread over its tasks."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if not 0 <= self.start <= self.end:
            raise ValueError(f"offset range must satisfy 0 <= start <= end, got [{self.start}, {self.end})")

    @property
    def count(self) -> int:
        return self.end - self.start


def spread(ranges: Sequence[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """``ranges`` in at most ``tasks`` groups of about as many records each, for a batch's tasks.

    Largest first, each to the group with the fewest records so far (longest processing time
    first: within 4/3 of the best split); a range is never cut (one Kafka partition's records stay in
    one task, so each data file holds one partition). Groups are in a stable order, ranges within
    a group sorted, and no group is empty.

    >>> spread([OffsetRange("t", p, 0, n) for p, n in enumerate([50, 10, 30, 30])], 2)
    ... # doctest: +NORMALIZE_WHITESPACE
    [[OffsetRange(topic='t', partition=0, start=0, end=50), OffsetRange(topic='t', partition=1, start=0, end=10)],
     [OffsetRange(topic='t', partition=2, start=0, end=30), OffsetRange(topic='t', partition=3, start=0, end=30)]]
    >>> spread([], 4)
    []
    """
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    groups: list[list[OffsetRange]] = [[] for _ in range(min(tasks, len(ranges)))]
    loads = [(0, i) for i in range(len(groups))]
    for r in sorted(ranges, key=lambda r: (-r.count, r)):
        load, i = heapq.heappop(loads)
        groups[i].append(r)
        heapq.heappush(loads, (load + r.count, i))
    return [sorted(g) for g in groups]
