"""Offset ranges and the JSON options Spark's Kafka batch source takes for them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
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


def spark_kafka_options(ranges: Iterable[OffsetRange]) -> dict[str, str]:
    """``assign``, ``startingOffsets`` and ``endingOffsets`` for exactly these ranges.

    >>> spark_kafka_options([OffsetRange("t", 0, 100, 600)])["endingOffsets"]
    '{"t": {"0": 600}}'
    """
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for r in sorted(ranges):
        if str(r.partition) in starting[r.topic]:
            raise ValueError(f"{r.topic}[{r.partition}] appears twice")
        assign[r.topic].append(r.partition)
        starting[r.topic][str(r.partition)] = r.start
        ending[r.topic][str(r.partition)] = r.end
    if not assign:
        raise ValueError("no offset ranges given")
    return {
        "assign": json.dumps(dict(assign)),
        "startingOffsets": json.dumps(dict(starting)),
        "endingOffsets": json.dumps(dict(ending)),
    }
