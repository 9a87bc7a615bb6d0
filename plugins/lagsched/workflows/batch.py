"""One batch of a slot, the driver's side: plan, mark, record, write, commit, offsets (docs/lake.md).

`Batches.plan` reads the claimed partitions' log start and last stable offset (LSO) and plans each
(`lagsched.core.batches.plan_partition`): reads are read committed, so a batch never ends past the
LSO and an open transaction holds its own partition there, not the others; the rate cap
(``max_rate``) cuts the new reads to its budget. `Batches.run` then lands the plan exactly once:

1. **mark**: each table's current snapshot (`LakeSink.mark`: the shared table, and the typed and
   dead-letter tables of routed topics), before anything is recorded;
2. **record**: retention gaps (`adapters.gaps`), and each range under its claim's epoch
   (`ClaimStore.begin_batch`, fenced: only while this slot holds the row);
3. **write**: Spark tasks read the ranges from Kafka and write the data files
   (`adapters.range_files.RangeWriter`); before the ranges are recorded, typed tables are created
   and evolved for the batch's writer schemas (`LakeSink.prepare`); a redone range the tables
   already hold is skipped (`LakeSink.present`);
4. **commit** the files in one snapshot per table that records the ranges, refused if another
   holder committed them to that table since the mark (`LakeSink.commit`, `SinkConflictError`);
5. **offsets**: each partition's new offset under the epoch (`ClaimStore.commit_offset`), which
   also clears its recorded range; then mirrored into the Kafka consumer group (`OffsetMirror`).

No offset moves before its records are in the table; a crash anywhere leaves the range recorded
for whoever holds the row next. This module knows nothing of the live set, standby or budgets:
that is the slot's life (`workflows.slot`).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any

from lagsched.adapters.claims import ClaimStore
from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.data_files import WrittenFile, max_timestamps
from lagsched.adapters.gaps import RetentionGap, record_gap
from lagsched.adapters.kafka_admin import MIRROR_BACKOFFS_S, kafka_topic_ids, mirror_group_offsets, read_offsets
from lagsched.adapters.lake_sink import LakeSink, Marks, SchemaRefused
from lagsched.adapters.late_records import LateRecords
from lagsched.adapters.range_files import RangeWriter, RecordsDeletedError
from lagsched.adapters.sink import BatchRead, SinkConflictError
from lagsched.core.batches import OffsetAheadError, PartitionPlan, fair_shares, next_batch_at, plan_partition
from lagsched.core.cadence import Uncommitted
from lagsched.core.claims import ClaimLostError, PartitionRow
from lagsched.core.errors import KafkaOffsetsError, LagschedError
from lagsched.core.offsets import OffsetRange
from lagsched.core.registry import TopicRow
from lagsched.core.times import Clock
from lagsched.workflows.slot_settings import ConsumerSettings

__all__ = ["BatchPlan", "BatchResult", "BatchWrite", "Batches", "OffsetMirror", "StatsLines", "write_batch"]

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass
class BatchPlan:
    """What the next batch reads from each held partition (``plans``), with the claims it holds."""

    plans: dict[Key, PartitionPlan]
    claims: dict[Key, PartitionRow]
    #: Held partitions not planned because something is wrong with them (never "caught up").
    skipped: int = 0
    #: The rate cap cut the reads short: the batch is as large as the cap lets it be, so it is due
    #: by size whatever ``min_records`` says (the cap's pacing decides when it starts).
    full: bool = False


@dataclass(slots=True)
class BatchResult:
    """What one batch did: whether it landed (the table refused it, or it did), its rows, and the
    claims found lost on the way."""

    landed: bool = False
    records: int = 0
    lost: list[str] = field(default_factory=list)
    #: A writer schema was refused for its table: the batches are to be read again (not caught up).
    read_again: bool = False


@dataclass(frozen=True, slots=True)
class BatchWrite:
    """Steps 3 and 4 of a batch (`write_batch`).

    Attributes:
        files: data files committed.
        already_there: redone ranges found in the table already (committed by an earlier holder).
        write_s: the tasks' read from Kafka and write of the data files.
        commit_s: the table commit (footers and conflict check included).
        snapshot_id: the snapshot of the commit, or None when nothing was committed.
        records: rows committed.
        max_timestamps: the largest record timestamp (ms) committed per (topic, partition).
        late: the late records committed per (topic, partition) (docs/completeness.md).
    """

    files: int
    already_there: int
    write_s: float
    commit_s: float
    snapshot_id: int | None = None
    records: int = 0
    max_timestamps: Mapping[tuple[str, int], int] = field(default_factory=dict)
    late: Mapping[tuple[str, int], tuple[LateRecords, ...]] = field(default_factory=dict)


def _not_counted(outcome: str) -> None:
    del outcome


def write_batch(
    sink: LakeSink,
    writer: RangeWriter,
    reads: Sequence[BatchRead],
    since: Marks | None,
    *,
    count: Callable[[str], None] = _not_counted,
    clock: Clock = SYSTEM_CLOCK,
) -> BatchWrite:
    """Write ``reads`` and commit them in one snapshot as of mark ``since`` (steps 3 and 4).

    ``clock`` times the write (the slot's); ``count`` is told each table commit's outcome (``ok``,
    ``refused``, ``error``; `lagsched.adapters.alert_figures.TableCommitCounter`), for the alert on
    failing commits.

    A redone range every table it lands in already holds (as of ``since``) is not written again;
    one that some of them hold is committed to the others only (`LakeSink.present`). A range whose
    records are all aborted or compacted away writes no file; a batch of only such ranges commits
    nothing, and its offsets still move.

    Raises:
        SinkConflictError: another holder committed records of these ranges since ``since``;
            nothing of this batch was committed (its files are deleted).
        KafkaOffsetsError: Kafka stopped answering during the read (a slot rides that through).
        SchemaRefused: a writer schema met in the batch was refused for its table now: nothing was
            committed; read again, its records go to the dead-letter table.
        LagschedError: a task failed otherwise; nothing was committed or left behind.
    """
    todo = [r for r in reads if r.batch[1] > r.read_start]
    present = sink.present([r for r in todo if r.redo], since)
    there = len(present.skip)
    if there:
        log.info(
            "%d redone range(s) were committed to %s already (by an earlier holder): committing only the offsets",
            there, sink.lake.identifier,
        )  # fmt: skip
    todo = [r for r in todo if (r.topic, r.partition) not in present.skip]
    if not todo:
        return BatchWrite(0, there, 0.0, 0.0)
    started = clock.monotonic()
    ranges = [OffsetRange(r.topic, r.partition, r.read_start, r.batch[1]) for r in todo]
    files = writer.write(ranges, sink.file_settings(), sink.routed())
    written = clock.monotonic() - started
    if not sink.prepare(files):
        sink.delete(f.location for f in files)
        raise SchemaRefused("a writer schema was refused for its table; reading the batch again")
    files, held = present.lacking(files)
    sink.delete(f.location for f in held)  # a table that holds a redone range already gets none again
    if not files:
        return BatchWrite(0, there, written, 0.0)
    try:
        commit = sink.commit(files, {(r.topic, r.partition): r.batch for r in todo}, since)
    except SinkConflictError:
        count("refused")
        raise
    except Exception:
        count("error")
        raise
    count("ok")
    return BatchWrite(
        commit.files,
        there,
        written,
        commit.seconds,
        commit.snapshot_id,
        commit.records,
        max_timestamps(files),
        commit.late,
    )


class StatsLines:
    """The run's ``--stats-file``: one JSON line per event (a batch, a conflict, a stop; the tests and
    benchmarks read them), each naming the slot; ``out`` None writes nothing."""

    def __init__(self, out: IO[str] | None, slot_id: str) -> None:
        self._out, self._slot = out, slot_id

    def emit(self, event: str, **fields: Any) -> None:
        if self._out is not None:
            self._out.write(json.dumps({"event": event, **fields, "slot": self._slot}) + "\n")
            self._out.flush()


class OffsetMirror:
    """Copies committed offsets into the Kafka consumer group ``group`` for tools that read it.

    The claim table holds the offsets; a mirror that fails is only kept and sent with the next
    offsets, when idle and at the end of the run, since a partition that gets no more records would
    otherwise keep a stale mirror for good. ``group`` None: no mirror.
    """

    def __init__(self, admin: Any, group: str | None) -> None:
        self._admin, self._group = admin, group
        self._unmirrored: dict[Key, int] = {}

    def send(self, committed: Mapping[Key, int], *, retry: bool = True) -> None:
        """Copy ``committed`` and whatever an earlier mirror failed to send (one try if not ``retry``)."""
        if self._group is None:
            return
        self._unmirrored.update(committed)  # a later commit of a partition replaces an unsent one
        if not self._unmirrored:
            return
        try:
            mirror_group_offsets(
                self._admin, self._group, self._unmirrored, backoffs_s=MIRROR_BACKOFFS_S if retry else ()
            )
        except KafkaOffsetsError as exc:
            log.warning("%s (the claim table has the offsets; the mirror is tried again)", exc)
            return
        self._unmirrored.clear()


class Batches:
    """Plans and runs a slot's batches (see the module doc); one per slot run."""

    def __init__(
        self,
        settings: ConsumerSettings,
        *,
        conn: Any,
        store: ClaimStore,
        admin: Any,
        sink: LakeSink,
        writer: RangeWriter,
        mirror: OffsetMirror,
        stats: StatsLines,
        clock: Clock = SYSTEM_CLOCK,
        count_commit: Callable[[str], None] = _not_counted,
    ) -> None:
        self.s = settings
        self.count_commit = count_commit
        self.conn, self.store, self.admin = conn, store, admin
        self.sink, self.writer, self.mirror = sink, writer, mirror
        self.stats, self.clock = stats, clock
        #: When the rate cap (``max_rate``) lets the next batch start.
        self.rate_ready_at = float("-inf")
        self._said: set[tuple[str, str | None, str]] = set()  # topic id mismatches already logged
        self._count = 0
        self._commits = 0
        #: Whether no commit was made since the slot started or joined: the first commits at once.
        self._fresh = True
        #: Batches written but not yet committed to the table (the commit cadence, `core.cadence`),
        #: each file with its partition key.
        self.waiting: Uncommitted[Key, tuple[Key, WrittenFile]] = Uncommitted()
        #: When the tasks' Python workers were last warmed (`warm_up`).
        self.warmed_at = float("-inf")
        #: The next batch's tasks run from here while the driver commits the last ones.
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lagsched-read")

    def warm_up(self) -> None:
        """Warm the Spark tasks' Python workers (`RangeWriter.warm_up`) before a first batch; a
        failure only costs the first batch its warmth."""
        try:
            seconds = self.writer.warm_up(typed=self.sink.has_routes)
        except Exception as exc:  # noqa: BLE001 - the first batch starts its workers itself then
            log.warning("could not warm the Spark tasks' Python workers (%s); the first batch starts them", exc)
            return
        self.warmed_at = self.clock.monotonic()
        self.stats.emit("warm", seconds=round(seconds, 3))

    def close(self) -> None:
        """Stop the reading thread (nothing is in flight between batches)."""
        self._reader.shutdown(wait=True)

    # ------------------------------------------------------------------ planning

    def plan(self, held: Sequence[PartitionRow], topics: Mapping[str, TopicRow]) -> BatchPlan:
        """The next batch of the ``held`` rows, from their stored offsets and Kafka's offsets now."""
        if not held:
            return BatchPlan({}, {})
        pending = self.store.pending(self.s.slot_id)
        counts = {topics[c.topic_id].name: topics[c.topic_id].partition_count for c in held}
        # which of them land in typed tables of their own, and which need no allowed lateness
        self.sink.learn(counts, log_append_time=[t.name for t in topics.values() if t.log_append_time])
        try:
            ids = kafka_topic_ids(self.admin, counts)
            for name in list(counts):
                row = next(t for t in topics.values() if t.name == name)
                if row.kafka_topic_id is not None and ids.get(name) != row.kafka_topic_id:
                    del counts[name]
                    mismatch = (name, ids.get(name), row.kafka_topic_id)
                    if mismatch in self._said:
                        continue
                    self._said.add(mismatch)
                    log.error(
                        "topic %s: Kafka's topic id is %s, the registry's %s: it was deleted or re-created; "
                        "not reading it until the topic sync registers the new one",
                        name, ids.get(name), row.kafka_topic_id,
                    )  # fmt: skip
            broker = read_offsets(self.admin, counts)
        except KafkaOffsetsError as exc:
            raise LagschedError(f"Kafka did not report the claimed partitions' offsets: {exc}") from exc
        offsets = {(o.topic, o.partition): o for per_topic in broker.values() for o in per_topic}
        plans: dict[Key, PartitionPlan] = {}
        replan: dict[Key, Callable[..., Any]] = {}
        skipped = 0
        stray = [k for k in self.waiting.ranges if k in pending]
        if stray:
            # Recorded by an earlier attempt whose commit failed: the redo decides, not these files.
            log.warning("%d partition(s) have a recorded range to redo: dropping their written batches", len(stray))
            self.forget(stray)
        for c in held:
            name = topics[c.topic_id].name
            if name not in counts:
                skipped += 1
                continue  # its topic id did not match: said above
            o = offsets.get((name, c.partition_id))
            if o is None:
                log.warning("%s[%d] is claimed but the broker does not report it; skipped", name, c.partition_id)
                skipped += 1
                continue
            waiting_end = self.waiting.end_of(c.key)
            plan_for = functools.partial(
                plan_partition,
                # Batches written and waiting for their commit: the next one reads on after them.
                committed=c.committed_offset if waiting_end is None else waiting_end,
                pending=pending.get(c.key),
                log_start=o.log_start,
                latest=o.latest,
                start_from=self.s.start_from,
                high_watermark=o.high_watermark,
            )
            try:
                plan = plan_for(max_records=self.s.max_records)
            except OffsetAheadError as exc:
                log.error("%s[%d] skipped: %s", name, c.partition_id, exc)
                skipped += 1
                continue
            if plan is not None:
                plans[c.key] = plan
                replan[c.key] = plan_for
        full = self._cap(plans, replan)
        return BatchPlan(plans, {c.key: c for c in held}, skipped, full)

    def _cap(self, plans: dict[Key, PartitionPlan], replan: Mapping[Key, Callable[..., Any]]) -> bool:
        """Cut ``plans`` to the rate cap: new reads of at most ``max_rate x max(min_interval_s, 1)``
        records together, shared fairly (`fair_shares`); redos keep their recorded ranges. True if
        the cap cut anything."""
        if self.s.max_rate is None:
            return False
        budget = math.floor(self.s.max_rate * max(self.s.min_interval_s, 1.0))
        waiting = {k: p.records for k, p in plans.items() if p.reads and not p.redo}
        if sum(waiting.values()) <= budget:
            return False
        for key, share in fair_shares(waiting, budget).items():
            if share < waiting[key]:
                plans[key] = replan[key](max_records=share)
        return True

    # ------------------------------------------------------------------ one batch

    def run(self, batch: BatchPlan, topics: Mapping[str, TopicRow]) -> BatchResult:
        """Land ``batch`` exactly once (the module doc's five steps)."""
        t0 = self.clock.monotonic()
        slot = self.s.slot_id
        result = BatchResult()
        reads: list[BatchRead] = []
        started: dict[Key, PartitionRow] = {}
        # 1. Before any range is recorded (docs/lake.md, "Exactly once"): the tables its topics land in.
        since = self.sink.mark({topics[key[0]].name for key in batch.plans})
        for key, plan in sorted(batch.plans.items()):  # 2. record
            claim = batch.claims[key]
            name = topics[key[0]].name
            if plan.gap is not None:
                gap = RetentionGap(key[0], key[1], plan.gap.start, plan.gap.end)
                if record_gap(self.conn, gap, slot):
                    log.error(
                        "RETENTION GAP: %s[%d] offsets [%d, %d) (%d records) were deleted before they were "
                        "consumed; recorded in retention_gaps; reading on at %d",
                        name, key[1], gap.from_offset, gap.to_offset, gap.records, plan.read_start,
                    )  # fmt: skip
            if plan.batch is None:
                started[key] = claim
                continue
            try:
                started[key] = self.store.begin_batch(slot, claim, *plan.batch)
            except ClaimLostError as exc:
                self._lost(result, exc)
                continue
            reads.append(BatchRead(name, key[1], plan.batch, plan.read_start, redo=plan.redo))
        t_read = self.clock.monotonic()
        try:
            # 3. write, 4. commit
            wrote = write_batch(self.sink, self.writer, reads, since, count=self.count_commit, clock=self.clock)
        except SinkConflictError as exc:
            self._conflict(result, exc, started)
            return result
        except (SchemaRefused, RecordsDeletedError) as exc:
            self._read_again(exc, len(started))
            return result
        t_written = self.clock.monotonic()
        committed: dict[Key, int] = {}
        offsets = 0
        for key, claim in started.items():  # 5. offsets
            plan = batch.plans[key]
            named = (topics[key[0]].name, key[1])
            try:
                self.store.commit_offset(
                    slot, claim, plan.commit_to, wrote.max_timestamps.get(named), wrote.late.get(named, ())
                )
            except ClaimLostError as exc:
                self._lost(result, exc)
                continue
            committed[named] = plan.commit_to
            offsets += plan.records
        t_committed = self.clock.monotonic()
        self.rate_ready_at = next_batch_at(t0, offsets, max_rate=self.s.max_rate)
        self.mirror.send(committed)
        # Records are what the table received: a range's offsets also cover transaction markers,
        # aborted records and compacted-away records, none of which is a record of the lake.
        result.landed, result.records = True, wrote.records
        self._count += 1
        done = self.clock.monotonic()
        log.info(
            "batch %d: %d records of %d partition(s) in %.2f s (read+write %.2f s, table commit %.2f s, "
            "%d file(s) in snapshot %s, %d range(s) already in the table)",
            self._count, wrote.records, len(reads), done - t0, wrote.write_s, wrote.commit_s,
            wrote.files, wrote.snapshot_id, wrote.already_there,
        )  # fmt: skip
        self.stats.emit(
            "batch",
            n=self._count,
            records=wrote.records,
            offsets=offsets,
            partitions=len(reads),
            read_s=round(wrote.write_s, 4),
            table_commit_s=round(wrote.commit_s, 4),
            files=wrote.files,
            snapshot_id=wrote.snapshot_id,
            already_there=wrote.already_there,
            plan_s=round(t_read - t0, 4),
            commit_s=round(t_committed - t_written, 4),
            wall_s=round(done - t0, 4),
            t_end=self.clock.now().timestamp(),
        )
        return result

    # ------------------------------------------------------------------ batches on the commit cadence

    @staticmethod
    def streams(batch: BatchPlan) -> bool:
        """Whether ``batch`` goes on the commit cadence (`stream`): only new reads, no redo, gap or
        pinned start, which go through `run` (after the waiting batches are committed)."""
        return bool(batch.plans) and all(
            p.batch is not None and p.reads and not p.redo and p.gap is None for p in batch.plans.values()
        )

    def stream(self, batch: BatchPlan, topics: Mapping[str, TopicRow]) -> BatchResult:
        """Write ``batch`` (new reads only, `streams`) and keep its files waiting for the commit
        cadence; while its tasks read, commit the batches already waiting if they are due.

        Nothing is recorded in MySQL for a waiting batch: its ranges are recorded, under the
        mark, by the commit that lands them (`_commit_waiting`), so a crash before that commit
        leaves only orphan files and the offsets where they were (docs/lake.md, "The commit cadence").
        """
        t0 = self.clock.monotonic()
        result = BatchResult()
        reads = {
            key: OffsetRange(topics[key[0]].name, key[1], plan.read_start, plan.batch[1])
            for key, plan in sorted(batch.plans.items())
            if plan.batch is not None
        }
        settings, routed = self.sink.file_settings(), self.sink.routed()
        writing: Future[list[WrittenFile]] = self._reader.submit(
            self.writer.write, list(reads.values()), settings, routed
        )
        commit: _CommitFigures | None = None
        voided: set[Key] = set()
        if self._commit_reason(t0) is not None:
            try:
                commit = self._commit_waiting(batch.claims, topics, result, voided)
            except BaseException:
                self._void(writing)  # planned after the batches this commit failed to land
                raise
        if commit is not None and commit.refused:
            self._void(writing)  # read on from ranges the table refused; how its write ended is moot
            return result
        try:
            files = writing.result()
        except RecordsDeletedError as exc:
            log.warning("%s: records were deleted by retention since this batch was planned; planning it again", exc)
            self.stats.emit("deleted", partitions=len(reads))
            return result
        key_of = {(r.topic, r.partition): k for k, r in reads.items()}
        keyed = [(key_of[(f.topic, f.partition)], f) for f in files]
        kept = [(k, f) for k, f in keyed if k not in voided]
        if voided:
            self.sink.delete(f.location for k, f in keyed if k in voided)  # rows lost by the commit
        records = sum(f.records for _k, f in kept)
        self.waiting.add(
            {k: (r.start, r.end) for k, r in reads.items() if k not in voided},
            files=kept,
            records=records,
            size_bytes=sum(f.size_bytes for _k, f in kept),
            now=t0,
        )
        written = self.clock.monotonic()
        offsets = sum(r.end - r.start for k, r in reads.items() if k not in voided)
        self.rate_ready_at = next_batch_at(t0, offsets, max_rate=self.s.max_rate)
        result.landed, result.records = True, records
        self._count += 1
        log.info(
            "batch %d: %d records of %d partition(s) written in %.2f s, waiting for the commit "
            "(%d batch(es), %d records)%s",
            self._count, records, len(reads), written - t0, self.waiting.reads, self.waiting.records,
            "" if commit is None else f"; earlier ones committed meanwhile ({commit.table_s + commit.offsets_s:.2f} s)",
        )  # fmt: skip
        self.stats.emit(
            "batch",
            n=self._count,
            records=records,
            offsets=offsets,
            partitions=len(reads),
            read_s=round(written - t0, 4),
            table_commit_s=round(0.0 if commit is None else commit.table_s, 4),
            files=len(kept),
            snapshot_id=None if commit is None else commit.snapshot_id,
            already_there=0,
            plan_s=0.0,
            commit_s=round(0.0 if commit is None else commit.offsets_s, 4),
            wall_s=round(written - t0, 4),
            t_end=self.clock.now().timestamp(),
            waiting_records=self.waiting.records,
        )
        return result

    def commit_if_due(self, claims: dict[Key, PartitionRow], topics: Mapping[str, TopicRow]) -> BatchResult:
        """Commit the waiting batches if the cadence says so now (`CommitCadence.due`)."""
        if self._commit_reason(self.clock.monotonic()) is None:
            return BatchResult()
        return self.flush(claims, topics)

    def flush(self, claims: dict[Key, PartitionRow], topics: Mapping[str, TopicRow]) -> BatchResult:
        """Commit every waiting batch now (before a redo, a hand-back, a stop). ``claims`` (this
        slot's rows) are updated in place to the committed offsets."""
        result = BatchResult()
        if self.waiting:
            self._commit_waiting(claims, topics, result, set())
        return result

    def wait_s(self) -> float | None:
        """Seconds until the waiting batches are due (0 when they are now); None when none waits."""
        now = self.clock.monotonic()
        if self._commit_reason(now) is not None:
            return 0.0
        return self.s.cadence.wait_s(self.waiting, now)

    def joined(self) -> None:
        """The slot goes live again after standing by: its next commit is a first one (`_commit_reason`)."""
        self._fresh = True

    def _commit_reason(self, now: float) -> str | None:
        """Why the waiting batches are to be committed now, or None. The first batch a slot writes
        after it started or joined commits as soon as it is written, as it is read at once: a slot
        that just started, or a standby that joined (a scale-up), shows in the table and in the lag
        within a batch, not an interval later."""
        if self.waiting and self._fresh:
            return "first"
        return self.s.cadence.due(self.waiting, now)

    def forget(self, keys: Sequence[Key]) -> None:
        """Drop the waiting batches of ``keys`` (rows handed back or lost): nothing of them was
        recorded or committed, so the next holder reads them again; their files are deleted."""
        gone = self.waiting.drop(set(keys), _key_of)
        if gone:
            self.sink.delete(f.location for _k, f in gone)

    def _void(self, writing: Future[list[WrittenFile]]) -> None:
        """Wait for a batch being written and delete its files: it read on after batches whose commit
        failed, from offsets that were never committed."""
        try:
            files = writing.result()
        except Exception:  # noqa: BLE001 - a failed write leaves nothing behind (RangeWriter.write)
            return
        self.sink.delete(f.location for f in files)

    def _commit_waiting(
        self,
        claims: dict[Key, PartitionRow],
        topics: Mapping[str, TopicRow],
        result: BatchResult,
        voided: set[Key],
    ) -> _CommitFigures:
        """Land the waiting batches in one table commit (docs/lake.md, "Exactly once"): mark, record
        each partition's waiting range under its epoch, commit the files conditionally, commit the
        offsets. Rows lost on the way go into ``voided`` (and ``result.lost``), their files deleted.
        Nothing waits afterwards, whatever happened.

        A refusal (`SinkConflictError`) is handled (`_conflict`) and returned as ``refused``: the
        recorded ranges are redone. Anything else is raised: files not yet handed to the table
        commit are deleted, the others are left (an unknown commit: the redo's check decides).
        """
        waiting = self.waiting
        t0 = self.clock.monotonic()
        reason = self._commit_reason(t0) or "flush"
        waited = None if waiting.since is None else t0 - waiting.since
        batches, ranges = waiting.reads, dict(waiting.ranges)
        handed_to_table = False
        try:
            # A refused schema voids every range: nothing is recorded, and no file is committed.
            since, started = (
                (None, {})
                if self._schema_refused(waiting, result, voided)
                else self._record(ranges, claims, result, voided, {topics[k[0]].name for k in ranges})
            )
            files = [f for k, f in waiting.files if k in started]
            self.sink.delete(f.location for k, f in waiting.files if k not in started)
            t_table = self.clock.monotonic()
            landed = None
            if files:
                handed_to_table = True
                named = {(topics[k[0]].name, k[1]): ranges[k] for k in started}
                try:
                    landed = self.sink.commit(files, named, since)
                except SinkConflictError as exc:
                    self.count_commit("refused")
                    self._conflict(result, exc, started)
                    return _CommitFigures(refused=True)
                except Exception:
                    self.count_commit("error")
                    raise
                self.count_commit("ok")
            t_offsets = self.clock.monotonic()
            committed = self._commit_offsets(
                started, claims, ranges, files, {} if landed is None else landed.late,
                topics=topics, result=result, voided=voided,
            )  # fmt: skip
            done = self.clock.monotonic()
            self.mirror.send(committed)
        except BaseException:
            if not handed_to_table:
                self.sink.delete(f.location for _k, f in waiting.files)
            raise
        finally:
            waiting.clear()
        self._commits += 1
        self._fresh = False
        figures = _CommitFigures(
            table_s=0.0 if landed is None else landed.seconds,
            offsets_s=done - t_offsets,
            snapshot_id=None if landed is None else landed.snapshot_id,
        )
        rows = 0 if landed is None else landed.records
        log.info(
            "commit %d (%s): %d records of %d batch(es), %d partition(s) in snapshot %s; table %.2f s, offsets "
            "%.2f s; the oldest waited %.1f s",
            self._commits, reason, rows, batches, len(started), figures.snapshot_id, figures.table_s,
            figures.offsets_s, waited or 0.0,
        )  # fmt: skip
        self.stats.emit(
            "commit",
            n=self._commits,
            reason=reason,
            records=rows,
            batches=batches,
            partitions=len(started),
            files=len(files),
            snapshot_id=figures.snapshot_id,
            mark_s=round(t_table - t0, 4),
            table_commit_s=round(figures.table_s, 4),
            commit_s=round(figures.offsets_s, 4),
            waited_s=None if waited is None else round(waited, 3),
            # How old the oldest record's batch was when it became visible in the table.
            freshness_s=None if waited is None else round(done - t0 + waited, 3),
            t_end=self.clock.now().timestamp(),
        )
        return figures

    def _read_again(self, exc: Exception, partitions: int) -> None:
        """A batch ``run`` committed nothing of: its ranges stay recorded and the next plan redoes
        them, with the schema's decision known to the tasks (`SchemaRefused`), or from the new log
        start after retention deleted records of a range since the plan (`RecordsDeletedError`; the
        deleted part is recorded as a gap, `plan_partition`)."""
        if isinstance(exc, SchemaRefused):
            log.warning("%s", exc)
            self.stats.emit("schema_refused", partitions=partitions)
            return
        log.warning("%s: records were deleted by retention since this batch was planned; planning it again", exc)
        self.stats.emit("deleted", partitions=partitions)

    def _schema_refused(
        self, waiting: Uncommitted[Key, tuple[Key, WrittenFile]], result: BatchResult, voided: set[Key]
    ) -> bool:
        """Make the tables ready for the waiting files (`LakeSink.prepare`); True if a writer schema
        of theirs was refused: every waiting range is voided (nothing is recorded, the files are
        deleted), so they are read again, with the decision (``result.read_again``)."""
        if self.sink.prepare([f for _k, f in waiting.files]):
            return False
        voided.update(waiting.ranges)
        result.read_again = True
        log.warning("a writer schema was refused for its table: reading %d batch(es) again", waiting.reads)
        self.stats.emit("schema_refused", partitions=len(waiting.ranges))
        return True

    def _commit_offsets(
        self,
        started: Mapping[Key, PartitionRow],
        claims: dict[Key, PartitionRow],
        ranges: Mapping[Key, tuple[int, int]],
        files: Sequence[WrittenFile],
        late: Mapping[tuple[str, int], Sequence[LateRecords]],
        *,
        topics: Mapping[str, TopicRow],
        result: BatchResult,
        voided: set[Key],
    ) -> dict[tuple[str, int], int]:
        """Step 5: each started range's end as its offset, with its records' largest timestamp (the
        watermark) and its late records; rows lost go into ``voided``. The offsets committed, by
        (topic name, partition)."""
        committed: dict[tuple[str, int], int] = {}
        latest = max_timestamps(files)
        for key, claim in started.items():
            name = topics[key[0]].name
            try:
                claims[key] = self.store.commit_offset(
                    self.s.slot_id, claim, ranges[key][1], latest.get((name, key[1])), late.get((name, key[1]), ())
                )
            except ClaimLostError as exc:
                self._lost(result, exc)
                voided.add(key)
                continue
            committed[(name, key[1])] = ranges[key][1]
        return committed

    def _record(
        self,
        ranges: Mapping[Key, tuple[int, int]],
        claims: Mapping[Key, PartitionRow],
        result: BatchResult,
        voided: set[Key],
        topic_names: set[str],
    ) -> tuple[Marks, dict[Key, PartitionRow]]:
        """The mark (of the tables the ranges' topics, ``topic_names``, land in), then each waiting
        range recorded under its claim's epoch (`ClaimStore.begin_batch`); rows not held or lost go
        into ``voided``. The mark and the claims as recorded."""
        for key in [k for k in ranges if k not in claims]:
            log.warning("%s[%d]: written but no longer held; its batches are dropped", key[0], key[1])
            voided.add(key)
        since = self.sink.mark(topic_names)  # before any range is recorded (docs/lake.md)
        started: dict[Key, PartitionRow] = {}
        for key, (start, end) in sorted(ranges.items()):
            if key in voided:
                continue
            try:
                started[key] = self.store.begin_batch(self.s.slot_id, claims[key], start, end)
            except ClaimLostError as exc:
                self._lost(result, exc)
                voided.add(key)
        return since, started

    def _conflict(self, result: BatchResult, exc: SinkConflictError, started: Mapping[Key, PartitionRow]) -> None:
        """The table refused the batch: another holder committed its ranges. Rows this slot no longer
        holds are lost claims (it was stale); rows it still holds are redone at the next boundary."""
        held = {c.key for c in self.store.held(self.s.slot_id)}
        lost = sorted(key for key in started if key not in held)
        log.warning("%s; %d of its %d partition(s) are no longer this slot's", exc, len(lost), len(started))
        for key in lost:
            result.lost.append(
                f"{key[0]}[{key[1]}]: another holder committed its recorded range to the table and took the row"
            )
        self.stats.emit("conflict", partitions=len(started), lost=len(lost))

    def _lost(self, result: BatchResult, exc: ClaimLostError) -> None:
        log.error("%s", exc)
        result.lost.append(str(exc))


@dataclass(frozen=True, slots=True)
class _CommitFigures:
    """One commit of waiting batches: its times and snapshot, or that the table refused it."""

    table_s: float = 0.0
    offsets_s: float = 0.0
    snapshot_id: int | None = None
    refused: bool = False


def _key_of(item: tuple[Key, WrittenFile]) -> Key:
    return item[0]
