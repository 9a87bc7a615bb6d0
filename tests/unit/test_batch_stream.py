"""A slot's batches on the commit cadence, the driver's side (`Batches.stream`, `_commit_waiting`),
against in-memory stand-ins for the claim store, the table and the tasks: what is recorded, committed
and deleted, and in which order, at the points a real run hits only by chance (a refusal or a lost
row while the next batch writes, an unknown commit). The same paths on the real stack:
tests/integration/test_commit_cadence.py and test_consumer_failures.py."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lagsched.adapters.data_files import WrittenFile
from lagsched.adapters.sink import SinkConflictError, TableCommit
from lagsched.core.batches import PartitionPlan
from lagsched.core.claims import ClaimLostError, PartitionRow, StaleReason
from lagsched.core.offsets import OffsetRange
from lagsched.core.registry import TopicRow
from lagsched.core.times import Clock
from lagsched.workflows.batch import Batches, BatchPlan, OffsetMirror, StatsLines
from lagsched.workflows.slot_settings import ConsumerSettings

SLOT = str(uuid.uuid4())
TOPIC = TopicRow(
    topic_id="t-id", cluster="c", name="orders", kafka_topic_id=None, partition_count=2, retention_ms=-1,
    linker_workers=1, min_workers=None, max_workers=None, enabled=True,
)  # fmt: skip
TOPICS = {TOPIC.topic_id: TOPIC}


class Log(list[tuple[Any, ...]]):
    """Every call the stand-ins saw, in order."""


class Store:
    def __init__(self, log: Log, lose: set[int] | None = None) -> None:
        self.log, self.lose = log, lose or set()

    def begin_batch(self, slot: str, claim: PartitionRow, start: int, end: int) -> PartitionRow:
        if claim.partition_id in self.lose:
            raise ClaimLostError(
                f"orders[{claim.partition_id}]: lost", reason=StaleReason.TAKEN_OVER, topic_id=claim.topic_id,
                partition_id=claim.partition_id, epoch=1,
            )  # fmt: skip
        self.log.append(("record", claim.partition_id, start, end))
        return claim

    def commit_offset(
        self,
        slot: str,
        claim: PartitionRow,
        offset: int,
        max_timestamp_ms: int | None = None,
        late: Sequence[object] = (),
    ) -> PartitionRow:
        self.log.append(("offset", claim.partition_id, offset))
        return dataclasses.replace(claim, committed_offset=offset)

    def held(self, slot: str) -> list[PartitionRow]:
        return []


class Sink:
    def __init__(self, log: Log, outcome: BaseException | None = None) -> None:
        self.log, self.outcome = log, outcome
        self.lake = type("Lake", (), {"identifier": "lagsched.kafka.c"})()

    def mark(self, topics: Any = None) -> int:
        self.log.append(("mark", sorted(topics)))
        return 7

    def file_settings(self) -> object:
        return object()

    def routed(self) -> None:
        return None

    def prepare(self, files: Sequence[WrittenFile]) -> bool:
        return True

    def commit(
        self, files: Sequence[WrittenFile], ranges: Mapping[tuple[str, int], tuple[int, int]], since: int | None
    ) -> TableCommit:
        self.log.append(("table", sorted(f.location for f in files), dict(ranges), since))
        if self.outcome is not None:
            if isinstance(self.outcome, SinkConflictError):
                self.delete(f.location for f in files)  # as IcebergSink does on a refusal
            raise self.outcome
        return TableCommit(8, len(files), sum(f.records for f in files), 0.1)

    def delete(self, locations: Any) -> None:
        gone = sorted(locations)
        if gone:
            self.log.append(("delete", gone))


class Writer:
    """Writes one file per range, named by the write's number and the partition."""

    def __init__(self, log: Log) -> None:
        self.log, self.n = log, 0

    def write(self, ranges: Sequence[OffsetRange], settings: object, routed: object = None) -> list[WrittenFile]:
        self.n += 1
        self.log.append(("write", self.n, [(r.partition, r.start, r.end) for r in ranges]))
        return [
            WrittenFile(f"f{self.n}-p{r.partition}", r.topic, r.partition, 0, r.end - r.start, 100, r.start, r.end - 1)
            for r in ranges
        ]


def claims(offsets: Mapping[int, int]) -> dict[tuple[str, int], PartitionRow]:
    lease = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=1)
    return {
        (TOPIC.topic_id, p): PartitionRow(
            TOPIC.topic_id, p, committed_offset=o, claimed_by=SLOT, claim_epoch=1, lease_expires_at=lease
        )
        for p, o in offsets.items()
    }


def batch(ranges: Mapping[int, tuple[int, int]], held: Mapping[int, int]) -> BatchPlan:
    plans = {(TOPIC.topic_id, p): PartitionPlan((s, e), s, e) for p, (s, e) in ranges.items()}
    return BatchPlan(plans, claims(held))


def batches(log: Log, *, interval_s: float = 0.0, store: Store | None = None, sink: Sink | None = None) -> Batches:
    t = [100.0]
    clock = Clock(now=lambda: datetime(2026, 1, 1, tzinfo=UTC), monotonic=lambda: t[0])
    return Batches(
        ConsumerSettings(slot_id=SLOT, commit_interval_s=interval_s),
        conn=None, store=store or Store(log), admin=None, sink=sink or Sink(log),  # type: ignore[arg-type]
        writer=Writer(log), mirror=OffsetMirror(None, None), stats=StatsLines(None, SLOT), clock=clock,  # type: ignore[arg-type]
    )  # fmt: skip


def test_waiting_batches_land_as_one_union_per_partition_recorded_after_the_mark() -> None:
    log = Log()
    b = batches(log, interval_s=30)
    # A run's first batch commits at once (while the second one writes): a new slot shows at once.
    b.stream(batch({0: (0, 10), 1: (5, 8)}, {0: 0, 1: 5}), TOPICS)
    b.stream(batch({0: (10, 25)}, {0: 0, 1: 5}), TOPICS)
    # (the second write runs beside the commit: its place among the commit's steps is the thread's)
    assert [e[0] for e in log if e[0] != "write"] == ["mark", "record", "record", "table", "offset", "offset"]
    assert [e[1] for e in log if e[0] == "write"] == [1, 2]
    log.clear()
    b.stream(batch({0: (25, 30), 1: (8, 9)}, {0: 10, 1: 8}), TOPICS)
    assert [e[0] for e in log] == ["write"]  # nothing recorded while they wait
    assert b.waiting.ranges == {("t-id", 0): (10, 30), ("t-id", 1): (8, 9)}
    held = claims({0: 10, 1: 8})
    b.flush(held, TOPICS)
    assert log[1:] == [
        ("mark", ["orders"]),  # the tables of the ranges' topics only
        ("record", 0, 10, 30), ("record", 1, 8, 9),
        ("table", ["f2-p0", "f3-p0", "f3-p1"], {("orders", 0): (10, 30), ("orders", 1): (8, 9)}, 7),
        ("offset", 0, 30), ("offset", 1, 9),
    ]  # fmt: skip
    assert {k: c.committed_offset for k, c in held.items()} == {("t-id", 0): 30, ("t-id", 1): 9}
    assert not b.waiting
    b.close()


def test_a_standby_that_joins_again_commits_its_first_batch_at_once_then_keeps_the_cadence() -> None:
    """Measured (bench lifecycle): a standby's second join waited the whole interval (30 s) for its
    first commit, as only the slot's first commit ever was a first one."""
    log = Log()
    b = batches(log, interval_s=30)
    b.stream(batch({0: (0, 10)}, {0: 0}), TOPICS)
    b.stream(batch({0: (10, 20)}, {0: 0}), TOPICS)  # the first commits at once
    b.flush(claims({0: 10}), TOPICS)  # it stands by: what it wrote lands first
    log.clear()
    b.stream(batch({0: (20, 30)}, {0: 20}), TOPICS)
    b.stream(batch({0: (30, 40)}, {0: 20}), TOPICS)
    assert [e[0] for e in log] == ["write", "write"]  # without a join: the interval
    b.flush(claims({0: 20}), TOPICS)
    log.clear()
    b.joined()
    b.stream(batch({0: (40, 50)}, {0: 40}), TOPICS)
    b.stream(batch({0: (50, 60)}, {0: 40}), TOPICS)
    assert ("offset", 0, 50) in log  # the first batch after the join, committed during the next write
    log.clear()
    b.stream(batch({0: (60, 70)}, {0: 50}), TOPICS)
    assert [e[0] for e in log] == ["write"]  # and then the cadence again
    b.close()


def test_the_next_batch_writes_while_the_due_ones_commit_and_then_waits() -> None:
    log = Log()
    b = batches(log, interval_s=0)
    b.stream(batch({0: (0, 10)}, {0: 0}), TOPICS)
    b.stream(batch({0: (10, 20)}, {0: 0}), TOPICS)  # the first is due: committed during the second's write
    assert ("table", ["f1-p0"], {("orders", 0): (0, 10)}, 7) in log
    assert ("offset", 0, 10) in log
    assert b.waiting.ranges == {("t-id", 0): (10, 20)}
    b.close()


def test_a_refused_commit_voids_the_batch_written_meanwhile_and_leaves_nothing_waiting() -> None:
    log = Log()
    refusal = SinkConflictError("refused", {("orders", 0): (0, 10)})
    b = batches(log, interval_s=0, sink=Sink(log, refusal))
    b.stream(batch({0: (0, 10)}, {0: 0}), TOPICS)
    result = b.stream(batch({0: (10, 20)}, {0: 0}), TOPICS)
    assert not result.landed
    deleted = [e[1] for e in log if e[0] == "delete"]
    assert deleted == [["f1-p0"], ["f2-p0"]]  # the refused files, then the batch planned after them
    assert ("offset", 0, 10) not in log and not b.waiting
    b.close()


def test_an_unknown_commit_keeps_its_files_deletes_the_batch_written_meanwhile_and_raises() -> None:
    log = Log()
    b = batches(log, interval_s=0, sink=Sink(log, RuntimeError("catalog connection reset")))
    b.stream(batch({0: (0, 10)}, {0: 0}), TOPICS)
    with pytest.raises(RuntimeError, match="connection reset"):
        b.stream(batch({0: (10, 20)}, {0: 0}), TOPICS)
    # f1 may be in the table (the redo's check decides): never deleted; f2 read on from it: deleted.
    assert [e[1] for e in log if e[0] == "delete"] == [["f2-p0"]]
    assert not any(e[0] == "offset" for e in log) and not b.waiting
    b.close()


def test_a_row_lost_at_the_commit_is_left_out_its_files_deleted_and_the_rest_lands() -> None:
    log = Log()
    b = batches(log, interval_s=0, store=Store(log, lose={1}))
    b.stream(batch({0: (0, 10), 1: (0, 4)}, {0: 0, 1: 0}), TOPICS)
    result = b.stream(batch({0: (10, 20), 1: (4, 9)}, {0: 0, 1: 0}), TOPICS)
    assert result.lost == ["orders[1]: lost"]
    assert ("table", ["f1-p0"], {("orders", 0): (0, 10)}, 7) in log
    assert [e[1] for e in log if e[0] == "delete"] == [["f1-p1"], ["f2-p1"]]
    assert b.waiting.ranges == {("t-id", 0): (10, 20)}  # partition 0 reads on
    b.close()


def test_rows_handed_back_drop_their_waiting_batches_and_files() -> None:
    log = Log()
    b = batches(log, interval_s=30)
    b.stream(batch({0: (0, 10), 1: (0, 4)}, {0: 0, 1: 0}), TOPICS)
    b.forget([("t-id", 1)])
    assert b.waiting.ranges == {("t-id", 0): (0, 10)}
    assert [e for e in log if e[0] == "delete"] == [("delete", ["f1-p1"])]
    b.close()
