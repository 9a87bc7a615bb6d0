"""The benchmark's opponent: a tuned plain confluent-kafka consumer in Python writing with pyarrow.

It reads every record of a topic, from each partition's log start to the last stable offset seen when
it starts, and writes the consumer job's sink layout (docs/consumer.md)::

    <sink>/topic=<topic>/date=<YYYY-MM-DD>/<partition:05d>-<start:020d>-<end:020d>.parquet

with the job's columns (partition, offset, timestamp, key, value, headers), each file written under
``<sink>/_tmp/`` and renamed into place, at most ``max_records`` records of one partition per file
(the job's ``--max-records``), so both write the same files.

What is tuned, so that the comparison is not against a strawman:

* the consumer ``assign``s the partitions (no group join) and takes ``consume(num_messages=...)``
  batches of ``consume_batch`` messages; librdkafka fetches and decodes on its own threads with
  large fetches (``max.partition.fetch.bytes`` 8 MiB, ``fetch.max.bytes`` 64 MiB) and a deep
  pre-fetch queue (``queued.min.messages``, ``queued.max.messages.kbytes``), so the Python thread
  never waits on the network while there is data;
* no per-row dicts: each column of a batch is pulled out with ``map`` over the C method
  (``map(Message.value, msgs)``, no attribute lookup per row) into numpy or Arrow arrays in bulk;
  runs of one partition and date are found with numpy and become zero-copy slices;
* Parquet is written on a writer thread (pyarrow's encoder and snappy release the GIL), so
  encoding and compression overlap with the next ``consume``; snappy, as Spark writes by default;
  dictionary encoding only for the columns it helps (partition, header keys).

Phases are timed where they run: ``read_s`` is the time inside ``consume()``, ``convert_s`` the
time building Arrow data, ``write_s`` the writer thread's time in ``write_table`` and the rename
(overlapping with the other two), ``wait_s`` the time the main thread waited for the writer.
"""

from __future__ import annotations

import gc
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "HEADERS_TYPE",
    "SCHEMA",
    "PartitionFiles",
    "RawResult",
    "RawSettings",
    "batch_arrays",
    "consume_topic",
    "consumer_config",
    "day_name",
    "runs",
]

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
#: The job's file schema (contract: partition int, offset bigint, timestamp UTC, key, value, headers).
SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)
_MS_PER_DAY = 86_400_000
_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True, slots=True)
class RawSettings:
    """How the raw consumer reads and writes; the defaults are the tuned values."""

    #: Records of one partition per file at most (the job's ``--max-records``).
    max_records: int
    consume_batch: int = 20_000
    compression: str = "snappy"
    #: Files queued for the writer thread at most (bounds memory: each is up to max_records rows).
    write_queue: int = 2
    #: librdkafka settings layered over `consumer_config`'s.
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: Turns a file's rows before they are written (the Avro section decodes the values: `avro_columns`).
    transform: Callable[[pa.Table], pa.Table] | None = None


@dataclass(frozen=True, slots=True)
class RawResult:
    """What one raw read did and where its time went (seconds)."""

    records: int
    files: int
    wall_s: float
    setup_s: float
    read_s: float
    convert_s: float
    write_s: float
    wait_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else 0.0


def consumer_config(bootstrap: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings for reading a backlog as fast as one Python thread can take it.

    >>> consumer_config({"bootstrap.servers": "b:9092"})["max.partition.fetch.bytes"]
    8388608
    """
    config: dict[str, Any] = {
        **bootstrap,
        # assign() needs no group, but the Python client refuses a consumer without group.id; nothing
        # is committed to it.
        "group.id": "lagsched-bench-raw",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        # What the job reads (adapters/spark.py): committed records only. librdkafka's default too,
        # but the comparison must not hang on a default; its watermark query then gives the LSO.
        "isolation.level": "read_committed",
        # Bigger fetches: fewer round trips per record (defaults 1 MiB per partition, 50 MiB total).
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "fetch.max.bytes": 64 * 1024 * 1024,
        # A deep pre-fetch queue so consume() finds records waiting (defaults 100k and 64 MiB).
        "queued.min.messages": 1_000_000,
        "queued.max.messages.kbytes": 512 * 1024,
        # librdkafka 2.x backs off this long when the queue is full; the default (1 s) idles the
        # fetcher long after the Python thread has drained the queue.
        "fetch.queue.backoff.ms": 10,
        "check.crcs": False,
    }
    config.update(overrides or {})
    return config


def runs(partitions: np.ndarray[Any, Any], days: np.ndarray[Any, Any]) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive rows with the same partition and day.

    librdkafka hands over a fetch's records partition by partition, so a consume() batch is a few
    long runs; finding them with numpy keeps the per-row work out of Python.

    >>> runs(np.array([0, 0, 1, 1, 0]), np.array([5, 5, 5, 6, 6]))
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    >>> runs(np.array([], dtype=np.int32), np.array([], dtype=np.int64))
    []
    """
    n = len(partitions)
    if n == 0:
        return []
    cuts = np.flatnonzero((partitions[1:] != partitions[:-1]) | (days[1:] != days[:-1])) + 1
    bounds = [0, *cuts.tolist(), n]
    return list(itertools.pairwise(bounds))


def batch_arrays(msgs: list[Any]) -> tuple[pa.RecordBatch, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """One consume() batch as Arrow columns, plus its partitions and UTC days as numpy arrays."""
    from confluent_kafka import Message

    n = len(msgs)
    parts = np.fromiter(map(Message.partition, msgs), dtype=np.int32, count=n)
    offsets = np.fromiter(map(Message.offset, msgs), dtype=np.int64, count=n)
    ts_ms = np.fromiter(map(itemgetter(1), map(Message.timestamp, msgs)), dtype=np.int64, count=n)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(parts),
            pa.array(offsets),
            pa.array(ts_ms * 1000, type=pa.int64()).view(pa.timestamp("us", tz="UTC")),
            pa.array(list(map(Message.key, msgs)), type=pa.binary()),
            pa.array(list(map(Message.value, msgs)), type=pa.binary()),
            pa.array(list(map(Message.headers, msgs)), type=HEADERS_TYPE),
        ],
        schema=SCHEMA,
    )
    return batch, parts, ts_ms // _MS_PER_DAY


class PartitionFiles:
    """Cuts one topic's records into the job's files, as they arrive.

    Per partition, slices of consume() batches wait until `max_records` records are there (or the
    partition is read to its end) and then become files named by their range, like the job's
    batches; a file never spans two UTC dates (the date is a directory). Offsets must arrive in
    order with no gap (a benchmark that loses records is wrong); records at or past a partition's
    end are dropped.
    """

    def __init__(self, topic: str, starts: Mapping[int, int], ends: Mapping[int, int], max_records: int) -> None:
        if max_records < 1:
            raise ValueError(f"max_records={max_records}; must be >= 1")
        self.topic = topic
        self.max_records = max_records
        self.next_offset = {p: starts[p] for p in ends if ends[p] > starts[p]}
        self.ends = {p: ends[p] for p in self.next_offset}
        self.records = 0
        self._pending: dict[int, list[pa.RecordBatch]] = {p: [] for p in self.next_offset}
        self._counts = dict.fromkeys(self.next_offset, 0)

    @property
    def done(self) -> bool:
        """Every partition read to its end (and handed over as files)."""
        return not self.ends

    def add(
        self, batch: pa.RecordBatch, partitions: np.ndarray[Any, Any], days: np.ndarray[Any, Any]
    ) -> list[tuple[str, pa.Table]]:
        """Take a batch (`batch_arrays`); the files now complete, as (path in the sink, table)."""
        out: list[tuple[str, pa.Table]] = []
        offsets = batch.column(1).to_numpy()
        # Within a run of one partition, each offset follows the previous one (checked in bulk).
        broken = np.flatnonzero((partitions[1:] == partitions[:-1]) & (np.diff(offsets) != 1))
        if len(broken):
            i = int(broken[0])
            raise RuntimeError(f"{self.topic}[{partitions[i]}] jumped from offset {offsets[i] + 1} to {offsets[i + 1]}")
        for lo, hi in runs(partitions, days):
            p = int(partitions[lo])
            if p not in self.ends:
                if p in self.next_offset:
                    continue  # already complete: records past the end seen at the start
                raise RuntimeError(f"{self.topic}[{p}] was not assigned")
            if int(offsets[lo]) != self.next_offset[p]:
                raise RuntimeError(f"{self.topic}[{p}] jumped from offset {self.next_offset[p]} to {offsets[lo]}")
            keep = min(hi, lo + self.ends[p] - self.next_offset[p])
            self.next_offset[p] = int(offsets[keep - 1]) + 1
            self._pending[p].append(batch.slice(lo, keep - lo))
            self._counts[p] += keep - lo
            self.records += keep - lo
            while self._counts[p] >= self.max_records:
                out += self._flush(p, self.max_records)
            if self.next_offset[p] >= self.ends[p]:
                if self._counts[p]:
                    out += self._flush(p, self._counts[p])
                del self.ends[p]
        return out

    def _flush(self, partition: int, rows: int) -> list[tuple[str, pa.Table]]:
        table = pa.Table.from_batches(self._pending[partition], schema=SCHEMA)
        head, rest = table.slice(0, rows), table.slice(rows)
        self._pending[partition] = rest.to_batches()
        self._counts[partition] -= rows
        days = np.concatenate([c.cast(pa.int64()).to_numpy() for c in head.column("timestamp").chunks])
        days //= _US_PER_DAY
        offsets = head.column("offset")
        batch_range = (offsets[0].as_py(), offsets[-1].as_py() + 1)
        files: list[tuple[str, pa.Table]] = []
        per_date: dict[str, int] = {}
        for lo, hi in runs(np.zeros(len(days), dtype=np.int32), days):
            date = day_name(int(days[lo]))
            index = per_date[date] = per_date.get(date, -1) + 1
            path = f"topic={self.topic}/date={date}/{file_name(partition, batch_range, index)}"
            files.append((path, head.slice(lo, hi - lo)))
        return files


class _Writer:
    """Writes (table, final path) pairs on one thread, through ``<sink>/_tmp`` and a rename."""

    def __init__(self, sink: Path, settings: RawSettings) -> None:
        self._tmp = sink / "_tmp"
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._settings = settings
        self._queue: queue.Queue[tuple[pa.Table, Path] | None] = queue.Queue(maxsize=settings.write_queue)
        self._error: BaseException | None = None
        self.write_s = 0.0
        self.wait_s = 0.0
        self.files = 0
        self._thread = threading.Thread(target=self._run, name="raw-writer", daemon=True)
        self._thread.start()

    def put(self, table: pa.Table, path: Path) -> None:
        if self._error is not None:
            raise RuntimeError(f"writing {path.name} failed") from self._error
        started = time.perf_counter()
        self._queue.put((table, path))
        self.wait_s += time.perf_counter() - started

    def close(self) -> None:
        started = time.perf_counter()
        self._queue.put(None)
        self._thread.join()
        self.wait_s += time.perf_counter() - started
        if self._error is not None:
            raise RuntimeError("writing a file failed") from self._error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain, so put() never blocks forever after a failure
            table, path = item
            started = time.perf_counter()
            try:
                if self._settings.transform is not None:
                    table = self._settings.transform(table)
                tmp = self._tmp / f"{path.name}.{os.getpid()}.{threading.get_ident()}"
                pq.write_table(
                    table,
                    tmp,
                    compression=self._settings.compression,
                    use_dictionary=["partition", "headers.list.element.key"],
                    row_group_size=1024 * 1024,
                )
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, path)
                self.files += 1
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread by put/close
                self._error = exc
            self.write_s += time.perf_counter() - started


def day_name(day: int) -> str:
    """The date of a day number since the Unix epoch (UTC).

    >>> day_name(0), day_name(20_000)
    ('1970-01-01', '2024-10-04')
    """
    return time.strftime("%Y-%m-%d", time.gmtime(day * 86_400))


def consume_topic(
    bootstrap: Mapping[str, Any],
    topic: str,
    sink: str | Path,
    settings: RawSettings,
    *,
    timeout_s: float = 600.0,
    progress: Callable[[int], None] | None = None,
) -> RawResult:
    """Read every record of `topic` (log start to the last stable offset at start) into `sink`.

    Raises `RuntimeError` if a partition is not read to its end within `timeout_s` or if the
    consumer reports an error: a benchmark that loses records is wrong.
    """
    from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

    started = time.perf_counter()
    sink = Path(sink)
    # Every record becomes a Message, a tuple, bytes objects: millions of allocations that trigger
    # the cyclic garbage collector over and over although none of them can form a cycle. Off for the
    # read, it took a third off consume() (measured: 2.0 -> 1.3 us per record on 500k records).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    consumer = Consumer(consumer_config(bootstrap, settings.overrides))
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        if meta.error is not None:
            raise RuntimeError(f"topic {topic}: {meta.error}")
        bounds = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in sorted(meta.partitions)
        }
        files = PartitionFiles(
            topic, {p: lo for p, (lo, _hi) in bounds.items()}, {p: hi for p, (_lo, hi) in bounds.items()},
            settings.max_records,
        )  # fmt: skip
        consumer.assign([TopicPartition(topic, p, files.next_offset[p]) for p in files.ends])
        writer = _Writer(sink, settings)
        setup_s = time.perf_counter() - started
        read_s = convert_s = 0.0
        deadline = time.monotonic() + timeout_s
        while not files.done:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"raw consumer: {topic} not read to its end within {timeout_s:.0f} s: "
                    f"at {files.next_offset}, ends {files.ends}"
                )
            t0 = time.perf_counter()
            msgs = consumer.consume(num_messages=settings.consume_batch, timeout=1.0)
            t1 = time.perf_counter()
            read_s += t1 - t0
            if not msgs:
                continue
            if any(map(Message.error, msgs)):
                errors = [e for e in map(Message.error, msgs) if e is not None]
                fatal = [e for e in errors if e.code() != KafkaError._PARTITION_EOF]
                if fatal:
                    raise RuntimeError(f"raw consumer: {topic}: {fatal[0]}")
                msgs = [m for m in msgs if m.error() is None]
            for path, table in files.add(*batch_arrays(msgs)):
                writer.put(table, sink / path)
            convert_s += time.perf_counter() - t1
            if progress is not None:
                progress(files.records)
        put_wait_s = writer.wait_s
        writer.close()
    finally:
        consumer.close()
        if gc_was_enabled:
            gc.enable()
    return RawResult(
        records=files.records,
        files=writer.files,
        wall_s=time.perf_counter() - started,
        setup_s=setup_s,
        read_s=read_s,
        convert_s=convert_s - put_wait_s,
        write_s=writer.write_s,
        wait_s=writer.wait_s,
    )


def avro_columns(writer_schema: str) -> Callable[[pa.Table], pa.Table]:
    """A `RawSettings.transform` that decodes the ``value`` column (Avro in Confluent's wire format,
    one writer schema) into its columns with the fastest decoder there is here: lagsched's columnar
    one (a block read by polars, `lagsched.core.avro_decode`), as a hand-written consumer would use it."""
    from lagsched.core.avro_decode import AvroDecoder
    from lagsched.core.wire_format import frame_column

    decoder = AvroDecoder(writer_schema)

    def transform(table: pa.Table) -> pa.Table:
        frames = frame_column(table.column("value").combine_chunks())
        decoded = decoder.decode(frames.data, frames.starts, frames.ends)
        if decoded.dead or len(decoded.rows) != table.num_rows:
            raise RuntimeError(f"{len(decoded.dead)} value(s) did not decode")
        out = table.drop_columns(["value"])
        for name in decoded.table.column_names:
            out = out.append_column(name, decoded.table.column(name))
        return out

    return transform


def file_name(partition: int, batch: tuple[int, int], index: int = 0) -> str:
    """The raw consumer's file of one partition's batch (within one date directory).

    Named by the recorded range, never by what was actually read, so a redo writes the same names.

    >>> file_name(3, (100, 600))
    '00003-00000000000000000100-00000000000000000600.parquet'
    >>> file_name(3, (100, 600), 1)
    '00003-00000000000000000100-00000000000000000600-1.parquet'
    """
    suffix = f"-{index}" if index else ""
    return f"{partition:05d}-{batch[0]:020d}-{batch[1]:020d}{suffix}.parquet"
