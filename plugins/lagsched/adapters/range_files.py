"""A batch's reads: the claimed offset ranges read from Kafka in Spark tasks, as the table's data files.

This is the part of a slot's batch that runs inside Spark tasks (docs/lake.md, step 3 "write").
`RangeWriter` (on the driver) spreads a batch's ranges over at most one task per core; a task
reads its ranges with one confluent-kafka consumer, builds Arrow columns and hands them to the
table's data files (`adapters.data_files`); it returns what it wrote (`WrittenFile`), nothing else.
It knows no claim, no MySQL and no Redis, and it commits nothing: the driver builds Iceberg data
files from the returned files' footers and commits them conditionally (`adapters.sink`).

Reading, as the Spark Kafka source did before:

* read committed (`READER_CONFIG`): records of aborted transactions and transaction markers are
  never seen; a range never ends past the last stable offset (the planner ends it there);
* a start that retention deleted meanwhile fails the read (``auto.offset.reset=error``), so no
  record is skipped silently: the write raises `RecordsDeletedError`, and the slot plans the batch
  again, where the deleted range becomes a recorded retention gap;
* a range may end on an offset no record carries (a transaction marker, a record compacted
  away, an aborted record): a partition's read ends when the consumer's position reaches the end,
  told by the first record at or past it or by the end-of-partition event, never by the last
  record's offset; a record before the next wanted offset (a re-fetch) is dropped, offsets out of
  order fail the read;
* a partition that makes no progress for ``stall_s`` (Kafka unreachable, a truncated log) fails
  the task as unreachable; the driver then rides the outage through like any other.

Columns are built with ``map`` over the consumer's C methods and numpy, never a Python object per
record beyond the consumer's own ``Message``. A task that fails deletes the files it wrote and
reports the failure as a value (`TaskResult`), so the driver can name it and decide whether the
outage is worth riding through; a task killed outright leaves orphans that the table care removes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.adapters.data_files import (
    HOUR_US,
    DataFolder,
    FileSettings,
    PartitionFiles,
    WrittenFile,
    delete_written,
)
from lagsched.adapters.gc_pause import cyclic_gc_paused
from lagsched.adapters.typed_files import RoutedPartitionFiles, RoutedTables
from lagsched.core.arrow_types import HEADERS_TYPE
from lagsched.core.errors import KafkaOffsetsError, LagschedError, RegistryUnreachable
from lagsched.core.offsets import OffsetRange, spread

__all__ = [
    "READER_CONFIG",
    "RangeWriter",
    "TaskResult",
    "headers_array",
    "reader_config",
    "warm_task",
    "write_ranges",
    "write_task",
]

log = logging.getLogger(__name__)

#: What every reader sets over the Kafka Connection's extra: the reads' guarantees.
READER_CONFIG: Mapping[str, Any] = {
    # assign() joins no group, but the Python client refuses a consumer without one; nothing is
    # ever committed to it (the claim table holds the offsets).
    "group.id": "lagsched.reader",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # The end of a partition is how a read learns that its range ended on an offset with no
    # record (a marker, a compacted record) when nothing follows it yet.
    "enable.partition.eof": True,
    # A start below the log start (retention deleted it since the plan) is an error, never a jump.
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
}
#: Reader tuning, under the Connection's extra (a deployment may set its own).
READER_DEFAULTS: Mapping[str, Any] = {
    # librdkafka pre-fetches up to this many records a partition; its default (100,000, a whole
    # batch's range) fetched 22-30% more records than 100,000-record ranges hold, every one parsed
    # and thrown away, and cost 3.2-4.2 us a record in all against 2.5-3.4 us at 20,000 (2.5% more
    # fetched); 10,000 idled the fetcher.
    "queued.min.messages": 20_000,
    # librdkafka 2.x backs off this long when its pre-fetch queue is full; the default (1 s) idles
    # the fetcher long after the task has drained the queue.
    "fetch.queue.backoff.ms": 10,
    "check.crcs": False,
}
#: Records taken from the consumer per call: one C call per this many records.
CONSUME_BATCH = 20_000


def reader_config(kafka_config: Mapping[str, Any], rack: str | None = None) -> dict[str, Any]:
    """The consumer settings of a task: the Kafka Connection's extra with `READER_DEFAULTS` under it
    and `READER_CONFIG` over it; ``client.rack`` when ``rack`` is given, so brokers running the
    ``RackAwareReplicaSelector`` serve the reads from the replica in that rack (KIP-392, docs/rack.md).

    >>> c = reader_config({"bootstrap.servers": "b:9092", "isolation.level": "read_uncommitted"}, "a")
    >>> c["bootstrap.servers"], c["isolation.level"], c["client.rack"], c["auto.offset.reset"]
    ('b:9092', 'read_committed', 'a', 'error')
    """
    config = {**READER_DEFAULTS, **kafka_config, **READER_CONFIG}
    if rack is not None:
        config["client.rack"] = rack
    return config


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a task did: the files it wrote, the records it read per partition, or why it failed.

    A failed task deleted its files (``files`` is empty). ``unreachable``: the failure was Kafka
    not answering (a retry may help), not a refused setting or a bug. ``deleted``: records of its
    ranges were deleted (retention) after the batch was planned.
    """

    files: tuple[WrittenFile, ...] = ()
    records: Mapping[tuple[str, int], int] = field(default_factory=dict)
    error: str | None = None
    unreachable: bool = False
    deleted: bool = False
    read_s: float = 0.0


class RangeReadError(RuntimeError):
    """A range could not be read to its end; ``unreachable`` says whether Kafka stopped answering,
    ``deleted`` whether the broker no longer has the offsets asked for (retention deleted them)."""

    def __init__(self, message: str, *, unreachable: bool = False, deleted: bool = False) -> None:
        super().__init__(message)
        self.unreachable, self.deleted = unreachable, deleted


class RecordsDeletedError(LagschedError):
    """Records of a batch's ranges were deleted (retention) between its plan and its read. Nothing
    was written; planned again, the batch reads from the new log start and records the gap."""


@dataclass(slots=True)
class _Progress:
    """One range being read: the next offset wanted, whether its end was reached."""

    range: OffsetRange
    next: int
    records: int = 0
    done: bool = False


def write_ranges(
    ranges: Sequence[OffsetRange],
    kafka_config: Mapping[str, Any],
    settings: FileSettings,
    *,
    routed: RoutedTables | None = None,
    stall_s: float = 60.0,
    consumer_factory: Callable[[Mapping[str, Any]], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TaskResult:
    """Read ``ranges`` with one consumer and write them as data files; never raises.

    ``kafka_config`` is the consumer's whole config (`reader_config`). Each range must be of its
    own partition. A range with nothing to read is done at once. A range of a topic in
    ``routed.routes`` goes to its typed table and the dead-letter table (`adapters.typed_files`).
    """
    started = clock()
    writers: dict[tuple[str, int], PartitionFiles | RoutedPartitionFiles] = {}
    folder: DataFolder | None = None
    try:
        folder = DataFolder(settings.data_location, settings.s3_endpoint)
        routes = routed.routes if routed is not None else {}
        for r in ranges:
            route = routes.get(r.topic)
            writers[(r.topic, r.partition)] = (
                PartitionFiles(folder, r.topic, r.partition, settings)
                if route is None or routed is None
                else RoutedPartitionFiles(route, r.partition, routed)
            )
        records = _read(ranges, kafka_config, writers, stall_s=stall_s, consumer_factory=consumer_factory, clock=clock)
        for w in writers.values():
            w.close()
    except BaseException as exc:
        if folder is not None:
            folder.delete(uri for w in writers.values() for uri in w.abandon())
        if not isinstance(exc, Exception):
            raise
        return TaskResult(
            error=f"{type(exc).__name__}: {exc}",
            unreachable=getattr(exc, "unreachable", False),
            deleted=getattr(exc, "deleted", False),
            read_s=clock() - started,
        )
    files = tuple(f for w in writers.values() for f in w.written)
    return TaskResult(files=files, records=records, read_s=clock() - started)


class RangeWriter:
    """The driver's side of the writing: a batch's ranges spread over Spark tasks, their files back.

    One task per core at most (Spark's default parallelism, or ``tasks``), the ranges spread by
    record count (`lagsched.core.offsets.spread`); each task reads its ranges with one consumer
    (`write_ranges`). Spark still schedules the tasks, so a slot on a standalone, YARN or Kubernetes
    cluster spreads them over its executors, which need lagsched and its Python libraries.
    """

    def __init__(
        self,
        spark: Any,
        kafka_config: Mapping[str, Any],
        *,
        rack: str | None = None,
        tasks: int | None = None,
        stall_s: float = 60.0,
    ) -> None:
        """``kafka_config``: the Kafka Connection's client settings, which the tasks' consumers take
        with lagsched's read guarantees over them (`reader_config`), with ``client.rack`` = ``rack``
        when given (reads from a same-rack replica, docs/rack.md). ``stall_s``: a task whose
        partitions make no progress this long fails, as Kafka unreachable."""
        configured = kafka_config.get("isolation.level")
        wanted = READER_CONFIG["isolation.level"]
        if configured not in (None, wanted):
            log.warning("ignoring isolation.level=%s: lagsched reads %s only", configured, wanted)
        self._spark, self._config = spark, reader_config(kafka_config, rack)
        self._tasks, self._stall_s = tasks, stall_s

    def warm_up(self, *, typed: bool = False) -> float:
        """Start the Python workers a batch's tasks run in and warm them (`warm_task`), one task per
        core, so a slot's first batch reads at about its steady rate (``typed``: with the decoders of
        routed topics imported too). Spark reuses a Python worker
        between tasks (``spark.python.worker.reuse``) but stops one idle for a minute: a slot that
        stands by warms them again now and then. The slowest task's seconds."""
        context = self._spark.sparkContext
        tasks = self._tasks or context.defaultParallelism
        task = functools.partial(warm_task, kafka_config=self._config, typed=typed)
        return max(context.parallelize(range(tasks), tasks).mapPartitions(task).collect(), default=0.0)

    def write(
        self, ranges: Sequence[OffsetRange], settings: FileSettings, routed: RoutedTables | None = None
    ) -> list[WrittenFile]:
        """Read ``ranges`` and write them as data files in ``settings``' layout (those of routed
        topics in their typed and the dead-letter table's, ``routed``); the files.

        Raises:
            KafkaOffsetsError: a task's partitions stopped moving (Kafka unreachable): a slot rides
                that through. Nothing is left behind: the other tasks' files are deleted too.
            RecordsDeletedError: records of a range were deleted since the plan; nothing is left behind.
            LagschedError: a task failed otherwise (its message says how); nothing is left behind.
        """
        if not ranges:
            return []
        context = self._spark.sparkContext
        groups = spread(ranges, self._tasks or context.defaultParallelism)
        task = functools.partial(
            write_task, kafka_config=self._config, settings=settings, routed=routed, stall_s=self._stall_s
        )
        results: list[TaskResult] = context.parallelize(groups, len(groups)).mapPartitions(task).collect()
        files = [f for r in results for f in r.files]
        failed = [r for r in results if r.error is not None]
        if failed:
            delete_written((f.location for f in files), settings.s3_endpoint)
            message = f"{len(failed)} of {len(groups)} task(s) could not write their ranges; first: {failed[0].error}"
            if all(r.unreachable for r in failed):
                if any((r.error or "").startswith("RegistryUnreachable") for r in failed):
                    raise RegistryUnreachable(message)
                raise KafkaOffsetsError(message)
            if all(r.deleted or r.unreachable for r in failed):
                raise RecordsDeletedError(message)
            raise LagschedError(message)
        return files


def warm_task(_numbers: Iterable[int], kafka_config: Mapping[str, Any], typed: bool = False) -> Iterator[float]:
    """A warm-up task (`RangeWriter.warm_up`): what a first batch's task would do before its first
    record, in this Python worker: the imports (``typed``: the decoders' too), the columns' and
    files' code, a consumer that asks the brokers for metadata. The seconds it took."""
    started = time.monotonic()
    _keep_zip_directories()
    import pyarrow.parquet  # noqa: F401 - the data files' writer, imported once per worker
    from confluent_kafka import Consumer

    import lagsched.adapters.data_files

    if typed:
        import fastavro  # noqa: F401 - the careful path's decoder
        import polars  # noqa: F401 - the columnar Avro reader (~0.3 s to import)

        import lagsched.adapters.typed_files
        import lagsched.core.avro_decode
        import lagsched.core.json_decode  # noqa: F401

    headers_array([[("k", b"v")], None], HEADERS_TYPE)
    consumer = Consumer({**kafka_config, "logger": _client_log()})
    try:
        consumer.list_topics(timeout=10)
    except Exception as exc:  # noqa: BLE001 - a warm-up only: the batch's own read says what is wrong
        log.info("warm-up: the brokers did not answer (%s)", exc)
    finally:
        consumer.close()
    yield time.monotonic() - started


def write_task(
    groups: Iterable[Sequence[OffsetRange]],
    kafka_config: Mapping[str, Any],
    settings: FileSettings,
    stall_s: float,
    routed: RoutedTables | None = None,
) -> Iterator[TaskResult]:
    """A Spark task's function (``mapPartitions``): each group of ranges through `write_ranges`."""
    _keep_zip_directories()
    for group in groups:
        yield write_ranges(group, kafka_config, settings, routed=routed, stall_s=stall_s)


def _keep_zip_directories() -> None:
    """Stop zip importers from re-reading their archives at every task, in this (worker) process.

    PySpark's worker calls ``importlib.invalidate_caches()`` before each task; before Python 3.13
    every zip importer then re-reads its whole archive's directory, in Python: one per package
    imported from pyspark.zip and py4j's zip, ~0.2 s of CPU per task here (a tenth of a task's
    time in a profile of 100,000-record batches). Those archives do not change while a worker lives.
    """
    import sys
    import zipimport

    if sys.version_info < (3, 13):
        zipimport.zipimporter.invalidate_caches = lambda self: None  # type: ignore[method-assign]


def _read(
    ranges: Sequence[OffsetRange],
    kafka_config: Mapping[str, Any],
    writers: Mapping[tuple[str, int], PartitionFiles | RoutedPartitionFiles],
    *,
    stall_s: float,
    consumer_factory: Callable[[Mapping[str, Any]], Any] | None,
    clock: Callable[[], float],
) -> dict[tuple[str, int], int]:
    """Read every range to its end into its partition's writer; the records read per partition."""
    from confluent_kafka import Consumer, TopicPartition

    progress = {(r.topic, r.partition): _Progress(r, r.start, done=r.end <= r.start) for r in ranges}
    if len(progress) != len(ranges):
        raise ValueError("two ranges of one partition in one task")
    todo = [p for p in progress.values() if not p.done]
    if not todo:
        return {key: 0 for key in progress}
    consumer = (consumer_factory or Consumer)({**kafka_config, "logger": _client_log()})
    # Millions of Message, tuple and bytes objects, none in a cycle: the cyclic collector would run
    # over and over for nothing (a third of consume()'s time, docs/consumer-benchmark.md).
    with cyclic_gc_paused():
        try:
            consumer.assign([TopicPartition(p.range.topic, p.range.partition, p.next) for p in todo])
            _Reading(consumer, progress, writers).until_done(stall_s, clock)
        finally:
            consumer.close()
    return {key: p.records for key, p in progress.items()}


class _Reading:
    """One task's consumer loop: records to their partition's writer, each partition until its end."""

    def __init__(
        self, consumer: Any, progress: Mapping[tuple[str, int], _Progress], writers: Mapping[tuple[str, int], Any]
    ) -> None:
        self.consumer, self.progress, self.writers = consumer, progress, writers
        self.remaining = sum(1 for p in progress.values() if not p.done)
        topics = {key[0] for key in progress}
        self.one_topic = next(iter(topics)) if len(topics) == 1 else None
        #: The last retriable error Kafka reported since the last progress (named if the read stalls).
        self.transient: str | None = None

    def until_done(self, stall_s: float, clock: Callable[[], float]) -> None:
        last_progress = clock()
        while self.remaining:
            msgs = self.consumer.consume(num_messages=CONSUME_BATCH, timeout=0.5)
            # In order: an end-of-partition event follows the partition's records it comes after.
            moved = False
            for chunk in _chunks(msgs):
                moved |= self._records(chunk) if isinstance(chunk, list) else self._event(chunk)
            now = clock()
            if moved:
                last_progress, self.transient = now, None
            elif now - last_progress > stall_s:
                raise self._stalled(stall_s)

    def _records(self, msgs: list[Any]) -> bool:
        moved = False
        for topic, partition, run in _runs(msgs, self.one_topic):
            p = self.progress.get((topic, partition))
            if p is None or p.done:
                continue  # prefetched past the end of a partition already done
            moved = True
            if _take(p, run, self.writers[(topic, partition)]):
                self._finished(p)
        return moved

    def _event(self, msg: Any) -> bool:
        from confluent_kafka import KafkaError

        err = msg.error()
        if err.code() == KafkaError._PARTITION_EOF:
            p = self.progress.get((msg.topic(), msg.partition()))
            if p is None or p.done or msg.offset() < p.range.end:
                return False
            p.next, p.done = p.range.end, True  # what lies before the end has no record: a marker, a hole
            self._finished(p)
            return True
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            # auto.offset.reset=error: the offset asked for is below the log start now (retention).
            raise RangeReadError(f"reading {msg.topic() or 'Kafka'}[{msg.partition()}]: {err.str()}", deleted=True)
        if err.fatal() or not (err.retriable() or _is_transient(err)):
            raise RangeReadError(f"reading {msg.topic() or 'Kafka'}[{msg.partition()}]: {err.str()}")
        self.transient = err.str()
        return False

    def _finished(self, p: _Progress) -> None:
        from confluent_kafka import TopicPartition

        self.remaining -= 1
        self.consumer.pause([TopicPartition(p.range.topic, p.range.partition)])  # no more fetching past its end

    def _stalled(self, stall_s: float) -> RangeReadError:
        stuck = ", ".join(
            f"{p.range.topic}[{p.range.partition}] at {p.next} of [{p.range.start}, {p.range.end})"
            for p in self.progress.values()
            if not p.done
        )
        said = f"Kafka: {self.transient}" if self.transient else "Kafka sent nothing"
        return RangeReadError(f"no progress for {stall_s:.0f} s reading {stuck} ({said})", unreachable=True)


class _OncePerKind(logging.Filter):
    """Lets one line of each kind (librdkafka's facility, per client) through: a broker that refuses
    connections is otherwise logged every few milliseconds for as long as the task waits, and the
    task's own error names the outage anyway."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[Any, ...]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = tuple(record.args[:2]) if isinstance(record.args, tuple) else (record.msg,)
        if kind in self.seen:
            return False
        self.seen.add(kind)
        return True


def _client_log() -> logging.Logger:
    """The logger of a task's consumer (librdkafka's lines), repeats of a kind dropped for this task."""
    client = logging.getLogger("lagsched.reader.librdkafka")
    for f in list(client.filters):
        client.removeFilter(f)
    client.addFilter(_OncePerKind())
    return client


def _is_transient(err: Any) -> bool:
    from confluent_kafka import KafkaError

    transient = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE)
    return err.code() in transient


def headers_array(headers: list[list[tuple[str, bytes | None]] | None], kind: pa.ListType) -> pa.ListArray:
    """Kafka headers (None, or a list of (key, value) pairs per record) as an Arrow list of structs;
    a record without headers has null.

    Built flat (one list of keys, one of values, the offsets from the lengths), with C-level loops
    only: pyarrow's conversion of the nested Python lists took ~40x longer.

    >>> kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    >>> headers_array([[("a", b"1")], None, [], [("b", None), ("c", b"3")]], kind).to_pylist()
    ... # doctest: +NORMALIZE_WHITESPACE
    [[{'key': 'a', 'value': b'1'}], None, None,
     [{'key': 'b', 'value': None}, {'key': 'c', 'value': b'3'}]]
    """
    n = len(headers)
    # No headers is null, as Spark's Kafka source had it (Kafka cannot tell none from an empty list).
    nulls = headers.count(None) + headers.count([])
    lists: list[Any] = headers if not nulls else [h or () for h in headers]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, lists), dtype=np.int32, count=n), out=offsets[1:])
    pairs = list(itertools.chain.from_iterable(lists))
    element = kind.value_type
    values = pa.StructArray.from_arrays(
        [
            pa.array(list(map(itemgetter(0), pairs)), type=element.field("key").type),
            pa.array(list(map(itemgetter(1), pairs)), type=element.field("value").type),
        ],
        fields=list(element),
    )
    mask = pa.array([not h for h in headers]) if nulls else None
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=kind, mask=mask)


def _chunks(msgs: list[Any]) -> Iterator[list[Any] | Any]:
    """``msgs`` in order as lists of records and, between them, single error or end-of-partition events."""
    from confluent_kafka import Message

    if not msgs:
        return
    found = list(map(Message.error, msgs))
    if not any(found):  # nearly always: no event among the records
        yield msgs
        return
    errors = [i for i, e in enumerate(found) if e is not None]
    start = 0
    for i in errors:
        if i > start:
            yield msgs[start:i]
        yield msgs[i]
        start = i + 1
    if start < len(msgs):
        yield msgs[start:] if start else msgs


def _runs(msgs: list[Any], one_topic: str | None) -> Iterator[tuple[str, int, list[Any]]]:
    """Consecutive messages of one partition (librdkafka hands a fetch over partition by partition).

    ``one_topic``: the only topic the consumer reads, so runs differ by partition alone; None: the
    topic is compared too (two topics' partitions of one number may follow each other).
    """
    from confluent_kafka import Message

    n = len(msgs)
    partitions = np.fromiter(map(Message.partition, msgs), dtype=np.int32, count=n)
    change = partitions[1:] != partitions[:-1]
    if one_topic is None:
        topics = np.array(list(map(Message.topic, msgs)), dtype=object)
        change |= topics[1:] != topics[:-1]
    bounds = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    for lo, hi in itertools.pairwise(bounds):
        yield one_topic or msgs[lo].topic(), int(partitions[lo]), msgs[lo:hi] if (lo, hi) != (0, n) else msgs


def _take(p: _Progress, run: list[Any], writer: PartitionFiles | RoutedPartitionFiles) -> bool:
    """Add the records of ``run`` that belong to the range; True once the range is read to its end."""
    from confluent_kafka import Message

    n = len(run)
    offsets = np.fromiter(map(Message.offset, run), dtype=np.int64, count=n)
    if n > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        raise RangeReadError(f"{p.range.topic}[{p.range.partition}]: offsets out of order in one fetch")
    lo = int(np.searchsorted(offsets, p.next))  # anything before `next` was taken already
    hi = int(np.searchsorted(offsets, p.range.end))  # anything from the end on is not ours
    if hi > lo:
        part = run[lo:hi] if (lo, hi) != (0, n) else run
        m = hi - lo
        ts_us = np.fromiter(map(itemgetter(1), map(Message.timestamp, part)), dtype=np.int64, count=m) * 1000
        schema = writer.raw_schema
        batch = pa.RecordBatch.from_arrays(
            [
                # One value for the whole batch: a dictionary of one entry, as Parquet stores it anyway.
                pa.DictionaryArray.from_arrays(pa.array(np.zeros(m, dtype=np.int32)), pa.array([p.range.topic])),
                pa.array(np.full(m, p.range.partition, dtype=np.int32)),
                pa.array(offsets[lo:hi]),
                pa.array(ts_us).view(pa.timestamp("us", tz="UTC")),
                pa.array(list(map(Message.key, part)), type=pa.binary()),
                pa.array(list(map(Message.value, part)), type=pa.binary()),
                headers_array(list(map(Message.headers, part)), schema.field("headers").type),  # type: ignore[arg-type]
            ],
            schema=schema,
        )
        writer.add(batch, np.floor_divide(ts_us, HOUR_US))
        p.records += m
        p.next = int(offsets[hi - 1]) + 1
    if hi < n:  # a record at or past the end: every offset before it is decided
        p.next = p.range.end
    p.done = p.next >= p.range.end
    return p.done
