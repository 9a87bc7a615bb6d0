"""What a consumer reads next from each claimed partition, and when a batch is worth running.

Pure: offsets in, plans out (docs/consumer.md).

A partition's plan is one of:

* **redo** a batch recorded but never committed (its holder died or was fenced between writing and
  committing): exactly the recorded range, written to new files (each name holds a random UUID);
  what the old holder wrote but never committed is no part of the table, and a range its table
  commit did land is found there and not written again (docs/lake.md, "Exactly once");
* **read** a new batch from the committed offset, at most ``max_records`` long, up to the latest
  offset the broker reported: the last stable offset (LSO), since reads are read committed and a
  read-committed consumer cannot read past an open transaction;
* **commit only**: nothing to read, but the stored offset must move: past records retention
  deleted (a gap), or to pin where a never-consumed partition starts when it starts at the latest
  offset (otherwise "latest" would keep moving and records in between would be skipped);
* nothing, when the partition is caught up.

A batch's range is an offset range, not a record count: compacted topics (records removed) and
transactional topics (commit/abort markers, aborted records) have offsets without a record, so a
range holds at most ``end - start`` records; what was written is counted by the sink.

A start below the partition's log start is a **retention gap**: ``[start, log_start)`` is recorded
as lost and reading continues from the log start. The read never relies on Spark's
``failOnDataLoss=false``, which would skip silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

__all__ = [
    "Gap",
    "PartitionPlan",
    "StartFrom",
    "batch_is_due",
    "fair_shares",
    "next_batch_at",
    "plan_partition",
]

#: A partition key (any hashable: a (topic, partition) pair in the consumer).
K = TypeVar("K")


class StartFrom(StrEnum):
    """Where a partition nobody has consumed yet starts."""

    EARLIEST = "earliest"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets ``[start, end)`` deleted by retention before they were read."""

    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """What to do with one partition in the next batch.

    Attributes:
        batch: the range recorded before writing (``begin_batch``) and naming the files, or None
            for a commit-only plan.
        read_start: where reading starts: ``batch[0]``, or past a gap when retention deleted the
            start of a recorded batch.
        commit_to: the offset stored once the batch is safely written.
        gap: records deleted by retention before they were read, to record as lost.
        redo: the batch was recorded by an earlier holder (or run) and is being redone.
    """

    batch: tuple[int, int] | None
    read_start: int
    commit_to: int
    gap: Gap | None = None
    redo: bool = False

    @property
    def records(self) -> int:
        """Records to read (an upper bound: compacted or transactional topics have offset holes)."""
        return 0 if self.batch is None else self.batch[1] - self.read_start

    @property
    def reads(self) -> bool:
        return self.records > 0


class OffsetAheadError(ValueError):
    """The stored offset is past the broker's high watermark: the topic was truncated or re-created."""


def plan_partition(
    *,
    committed: int | None,
    pending: tuple[int, int] | None,
    log_start: int,
    latest: int,
    max_records: int,
    start_from: StartFrom = StartFrom.EARLIEST,
    high_watermark: int | None = None,
) -> PartitionPlan | None:
    """The next step for one partition, or None when it is caught up (or must wait).

    ``latest`` is the last stable offset (what a read-committed read can reach): no batch ends past
    it. ``high_watermark`` (None: ``latest``) bounds what is an error: a stored offset or recorded
    batch past the LSO but within the high watermark waits for the open transaction to end (it was
    stored by a read-uncommitted reader), only one past the high watermark is an anomaly.

    >>> plan_partition(committed=100, pending=None, log_start=0, latest=1_000, max_records=500)
    PartitionPlan(batch=(100, 600), read_start=100, commit_to=600, gap=None, redo=False)
    >>> plan_partition(committed=10, pending=None, log_start=50, latest=60, max_records=500).gap
    Gap(start=10, end=50)
    >>> plan_partition(committed=None, pending=(40, 90), log_start=0, latest=500, max_records=10).batch
    (40, 90)
    >>> plan_partition(committed=100, pending=None, log_start=0, latest=100, high_watermark=900, max_records=500)

    Raises:
        OffsetAheadError: the committed offset (or a recorded batch) lies past the high watermark;
            nothing may be read or committed until an operator looks (docs/consumer.md).
    """
    if max_records < 1:
        raise ValueError(f"max_records={max_records}; must be >= 1")
    high = latest if high_watermark is None else high_watermark
    if not 0 <= log_start <= latest <= high:
        raise ValueError(
            "broker offsets must satisfy 0 <= log_start <= latest (stable) <= high watermark, "
            f"got {log_start}, {latest}, {high}"
        )
    if pending is not None:
        start, end = pending
        if end > high:
            raise OffsetAheadError(
                f"the recorded batch [{start}, {end}) ends past the high watermark {high}: "
                "the topic was truncated or re-created"
            )
        if end > latest:
            return None  # redone once the open transaction before its end is decided
        read_start = max(start, log_start)
        gap = Gap(start, min(log_start, end)) if start < log_start else None
        return PartitionPlan((start, end), min(read_start, end), end, gap, redo=True)
    if committed is None:
        start = log_start if start_from is StartFrom.EARLIEST else latest
        if start_from is StartFrom.LATEST:
            return PartitionPlan(None, start, start)  # pin the start, read from there next time
    else:
        start = committed
    if start > high:
        raise OffsetAheadError(
            f"the committed offset {start} is past the high watermark {high}: the topic was truncated or re-created"
        )
    if start > latest:
        return None  # an open transaction holds the stable offset below it: wait for its end
    gap = Gap(start, log_start) if start < log_start else None
    read_start = max(start, log_start)
    end = min(latest, read_start + max_records)
    if end > read_start:
        return PartitionPlan((read_start, end), read_start, end, gap)
    if gap is not None or committed is None:
        return PartitionPlan(None, read_start, read_start, gap)  # move past the gap (or pin the start)
    return None


def batch_is_due(
    plans: Iterable[PartitionPlan], *, since_last_s: float, min_interval_s: float, min_records: int
) -> bool:
    """Whether to run a batch now.

    Redos and commit-only plans go at once (they fix state). Otherwise a batch waits until
    ``min_interval_s`` has passed since the last one or ``min_records`` records are waiting, so the
    sink does not fill with tiny files.

    >>> p = PartitionPlan((0, 10), 0, 10)
    >>> batch_is_due([p], since_last_s=1, min_interval_s=5, min_records=100)
    False
    >>> batch_is_due([p], since_last_s=6, min_interval_s=5, min_records=100)
    True
    """
    plans = list(plans)
    if not plans:
        return False
    if any(p.redo or not p.reads for p in plans):
        return True
    waiting = sum(p.records for p in plans)
    return since_last_s >= min_interval_s or waiting >= min_records


def fair_shares(waiting: Mapping[K, int], budget: int) -> dict[K, int]:
    """Records each partition may read so that together they read at most ``budget`` (at least one
    each): max-min fair, so a partition with little waiting takes only that and leaves the rest to
    the busy ones (a slot's rate cap, paced by `next_batch_at`). Partitions within budget keep
    what they have waiting.

    >>> fair_shares({"hot-0": 9_000, "hot-1": 9_000, "trickle": 40}, 6_000)
    {'hot-0': 2980, 'hot-1': 2980, 'trickle': 40}
    >>> fair_shares({"a": 10, "b": 20}, 100)
    {'a': 10, 'b': 20}
    """
    if budget < 0:
        raise ValueError(f"budget={budget}; must be >= 0")
    shares: dict[K, int] = {}
    left, count = budget, len(waiting)
    for key, wants in sorted(waiting.items(), key=lambda kv: kv[1]):
        share = max(1, min(wants, left // count)) if wants > 0 else 0
        shares[key] = share
        left, count = max(0, left - share), count - 1
    return {key: shares[key] for key in waiting}


def next_batch_at(started_at: float, records: int, *, max_rate: float | None) -> float:
    """When the next batch may start, so that a slot averages at most ``max_rate`` records/s: a batch
    of ``records`` that started at ``started_at`` takes ``records / max_rate`` seconds of the budget.

    >>> next_batch_at(100.0, 5_000, max_rate=1_000), next_batch_at(100.0, 5_000, max_rate=None)
    (105.0, 100.0)
    """
    if max_rate is None:
        return started_at
    if not max_rate > 0:
        raise ValueError(f"max_rate={max_rate}; must be > 0")
    return started_at + records / max_rate
