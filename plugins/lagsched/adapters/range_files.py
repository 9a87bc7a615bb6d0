"""A batch's data files: claimed offset ranges read from Kafka and written as the table's Parquet files.

This is the part of a slot's batch that runs inside Spark tasks (docs/lake.md, step 3 "write"). A
task gets a few offset ranges, reads them with one confluent-kafka consumer and writes Parquet data
files with pyarrow in the table's schema; it returns what it wrote (`WrittenFile`), nothing else.
It knows no claim, no MySQL and no Redis, and it commits nothing: the driver builds Iceberg data
files from the returned files' footers and commits them conditionally (`adapters.sink`).

Reading, as the Spark Kafka source did before:

* read committed (`READER_CONFIG`): records of aborted transactions and transaction markers are
  never seen; a range never ends past the last stable offset (the planner ends it there);
* a start that retention deleted meanwhile fails the read (``auto.offset.reset=error``), so no
  record is skipped silently;
* a range may end on an offset no record carries (a transaction marker, a record compacted
  away, an aborted record): a partition's read ends when the consumer's position reaches the end,
  told by the first record at or past it or by the end-of-partition event, never by the last
  record's offset;
* a partition that makes no progress for ``stall_s`` (Kafka unreachable, a truncated log) fails
  the task as unreachable; the driver then rides the outage through like any other.

Writing: one file holds records of one Kafka partition and one hour of their timestamps (the table
is partitioned by ``topic, hours(timestamp)``), so each file's ``partition`` and ``offset`` bounds
are exact, which the commit's conflict check relies on. Columns are built with ``map`` over the
consumer's C methods and numpy, never a Python object per record beyond the consumer's own
``Message``; the Parquet schema carries the table's field ids, so Iceberg reads the files by id
with no name mapping. Options come from the table's write properties (`FileSettings.of`).

A task that fails deletes the files it wrote and reports the failure as a value (`TaskResult`), so
the driver can name it and decide whether the outage is worth riding through; a task killed
outright leaves orphans that the table care removes.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any
from urllib.parse import quote_plus, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lagsched.core.errors import KafkaOffsetsError, LagschedError
from lagsched.core.offsets import OffsetRange, spread

__all__ = [
    "READER_CONFIG",
    "FileSettings",
    "RangeWriter",
    "TaskResult",
    "WrittenFile",
    "arrow_schema",
    "hour_name",
    "reader_config",
    "write_ranges",
    "write_task",
]

log = logging.getLogger(__name__)

#: The table's columns in the order a task builds them (docs/lake.md, "The table").
COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
#: Microseconds in an hour: a record's ``hours(timestamp)`` partition is its microseconds // this.
HOUR_US = 3_600_000_000

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


# ---------------------------------------------------------------------------------- the schema


def arrow_schema(iceberg_schema_json: str) -> pa.Schema:
    """The Arrow schema of the table's data files, with Iceberg's field ids, from the table's schema.

    The files' columns are lagsched's (`COLUMNS`, in order); a table whose schema has other
    columns or types was not made by lagsched and is refused.

    >>> s = arrow_schema(json.dumps({"type": "struct", "fields": [
    ...     {"id": 1, "name": "topic", "required": True, "type": "string"},
    ...     {"id": 2, "name": "partition", "required": True, "type": "int"},
    ...     {"id": 3, "name": "offset", "required": True, "type": "long"},
    ...     {"id": 4, "name": "timestamp", "required": False, "type": "timestamptz"},
    ...     {"id": 5, "name": "key", "required": False, "type": "binary"},
    ...     {"id": 6, "name": "value", "required": False, "type": "binary"},
    ...     {"id": 7, "name": "headers", "required": False, "type": {"type": "list", "element-id": 8,
    ...      "element-required": False, "element": {"type": "struct", "fields": [
    ...         {"id": 9, "name": "key", "required": False, "type": "string"},
    ...         {"id": 10, "name": "value", "required": False, "type": "binary"}]}}}]}))
    >>> s.field("offset").metadata, s.field("offset").nullable
    ({b'PARQUET:field_id': b'3'}, False)
    >>> s.field("headers").type.value_field.metadata
    {b'PARQUET:field_id': b'8'}
    """
    schema = json.loads(iceberg_schema_json)
    fields = [_arrow_field(f["name"], f["type"], f["id"], f["required"]) for f in schema["fields"]]
    if fields and fields[0].name == "topic" and fields[0].type == pa.string():
        fields[0] = fields[0].with_type(TOPIC_TYPE)
    arrow = pa.schema(fields)
    expected = pa.schema(
        [
            ("topic", TOPIC_TYPE),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ]
    )
    if arrow.names != expected.names or any(
        not a.type.equals(b.type) for a, b in zip(arrow, expected, strict=True)
    ):
        raise ValueError(
            f"the table's schema is not lagsched's ({', '.join(COLUMNS)}): {arrow}; "
            "point the cluster's sink at a table lagsched created"
        )
    return arrow


#: The topic column as the tasks build it: one value per file, so a dictionary of one entry (Parquet
#: stores it as a plain string column, dictionary-encoded).
TOPIC_TYPE = pa.dictionary(pa.int32(), pa.string())

_PRIMITIVES: Mapping[str, pa.DataType] = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "binary": pa.binary(),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp": pa.timestamp("us"),
}


def _arrow_field(name: str, kind: Any, field_id: int, required: bool) -> pa.Field:
    return pa.field(name, _arrow_type(kind), nullable=not required, metadata={"PARQUET:field_id": str(field_id)})


def _arrow_type(kind: Any) -> pa.DataType:
    if isinstance(kind, str):
        if kind not in _PRIMITIVES:
            raise ValueError(f"the table has a column of type {kind}, which lagsched never writes")
        return _PRIMITIVES[kind]
    if kind["type"] == "struct":
        return pa.struct([_arrow_field(f["name"], f["type"], f["id"], f["required"]) for f in kind["fields"]])
    if kind["type"] == "list":
        element = _arrow_field("element", kind["element"], kind["element-id"], kind["element-required"])
        return pa.list_(element)
    raise ValueError(f"the table has a column of type {kind['type']}, which lagsched never writes")


# ------------------------------------------------------------------------------- the settings


#: Iceberg's names of Parquet codecs -> pyarrow's.
_CODECS = {"snappy": "snappy", "zstd": "zstd", "gzip": "gzip", "lz4": "lz4", "brotli": "brotli", "uncompressed": "none"}


@dataclass(frozen=True, slots=True)
class FileSettings:
    """How a task writes the table's data files; built on the driver from the table (`of`).

    Attributes:
        data_location: the table's data folder (``write.data.path``, else ``<location>/data``);
            files go to ``<data_location>/topic=<topic>/timestamp_hour=<hour>/``, Iceberg's own layout.
        schema: the files' Arrow schema, with the table's field ids (`arrow_schema`).
        compression, compression_level: ``write.parquet.compression-codec`` and ``-level``.
        dictionary_page_bytes: ``write.parquet.dict-size-bytes``; dictionaries are used for the
            columns with few distinct values only (topic, partition, header keys): a dictionary of
            unique keys, values and offsets costs time and saves nothing.
        data_page_bytes: ``write.parquet.page-size-bytes``.
        row_group_bytes: ``write.parquet.row-group-size-bytes``: records of one file buffered in
            memory at most before they are written as a row group.
        target_file_bytes: ``write.target-file-size-bytes``: a file is closed once it is this big.
        statistics: the columns with Parquet statistics (``write.parquet.stats-enabled.column.<c>``
            turns them off for a column; the conflict check needs ``partition`` and ``offset``).
        s3_endpoint: an S3-compatible store's URL for ``s3a://`` and ``s3://`` tables.
    """

    data_location: str
    schema: pa.Schema
    compression: str = "snappy"
    compression_level: int | None = None
    dictionary_page_bytes: int = 64 * 1024
    data_page_bytes: int = 1024 * 1024
    row_group_bytes: int = 128 * 1024 * 1024
    target_file_bytes: int = 512 * 1024 * 1024
    statistics: tuple[str, ...] = ("topic", "partition", "offset", "timestamp")
    s3_endpoint: str | None = None

    @classmethod
    def of(
        cls, location: str, schema_json: str, properties: Mapping[str, str], *, s3_endpoint: str | None = None
    ) -> FileSettings:
        """From a table's location, schema (Iceberg JSON) and properties, Iceberg's defaults where unset.

        >>> s = FileSettings.of("file:/lake/t", CREATED_SCHEMA, {"write.parquet.compression-codec": "zstd",
        ...     "write.parquet.stats-enabled.column.timestamp": "false"})
        >>> s.data_location, s.compression, s.statistics
        ('file:/lake/t/data', 'zstd', ('topic', 'partition', 'offset'))
        """
        codec = properties.get("write.parquet.compression-codec", "zstd").lower()
        if codec not in _CODECS:
            raise ValueError(f"write.parquet.compression-codec={codec!r}: lagsched writes {', '.join(_CODECS)}")
        level = properties.get("write.parquet.compression-level")
        stats = tuple(
            c
            for c in ("topic", "partition", "offset", "timestamp")
            if properties.get(f"write.parquet.stats-enabled.column.{c}", "true").lower() != "false"
        )
        missing = {"partition", "offset"} - set(stats)
        if missing:
            raise ValueError(
                f"the table turns off Parquet statistics of {sorted(missing)}; the commit's conflict check needs them "
                "(unset write.parquet.stats-enabled.column.partition/offset)"
            )
        return cls(
            data_location=properties.get("write.data.path") or f"{location.rstrip('/')}/data",
            schema=arrow_schema(schema_json),
            compression=_CODECS[codec],
            compression_level=int(level) if level else None,
            dictionary_page_bytes=int(properties.get("write.parquet.dict-size-bytes", 2 * 1024 * 1024)),
            data_page_bytes=int(properties.get("write.parquet.page-size-bytes", 1024 * 1024)),
            row_group_bytes=int(properties.get("write.parquet.row-group-size-bytes", 128 * 1024 * 1024)),
            target_file_bytes=int(properties.get("write.target-file-size-bytes", 512 * 1024 * 1024)),
            statistics=stats,
            s3_endpoint=s3_endpoint,
        )


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """One data file a task wrote: records of one Kafka partition, one hour of timestamps.

    ``hour`` is the ``hours(timestamp)`` partition value (hours since the epoch, UTC); ``first``
    and ``last`` are the lowest and highest offsets in the file.
    """

    location: str
    topic: str
    partition: int
    hour: int
    records: int
    size_bytes: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class TaskResult:
    """What a task did: the files it wrote, the records it read per partition, or why it failed.

    A failed task deleted its files (``files`` is empty). ``unreachable``: the failure was Kafka
    not answering (a retry may help), not a refused setting or a bug.
    """

    files: tuple[WrittenFile, ...] = ()
    records: Mapping[tuple[str, int], int] = field(default_factory=dict)
    error: str | None = None
    unreachable: bool = False
    read_s: float = 0.0


class RangeReadError(RuntimeError):
    """A range could not be read to its end; ``unreachable`` says whether Kafka stopped answering."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


# -------------------------------------------------------------------------------- file system


class _DataFolder:
    """The table's data folder in a pyarrow file system: where files go, and how their URIs map to paths.

    S3 credentials come from the environment (``AWS_ACCESS_KEY_ID``...) or an instance profile,
    as for S3A: never from lagsched's settings.
    """

    def __init__(self, location: str, s3_endpoint: str | None) -> None:
        from pyarrow import fs

        self.uri = location.rstrip("/")
        parts = urlsplit(self.uri)
        if parts.scheme in ("", "file"):
            self.fs, path = fs.LocalFileSystem(), parts.path
        elif parts.scheme in ("s3", "s3a"):
            import os

            options: dict[str, Any] = {"region": os.environ.get("AWS_REGION", "us-east-1")}
            if s3_endpoint:
                endpoint = urlsplit(s3_endpoint)
                options.update(endpoint_override=endpoint.netloc, scheme=endpoint.scheme or "https")
            self.fs, path = fs.S3FileSystem(**options), f"{parts.netloc}{parts.path}"
        elif parts.scheme == "hdfs":
            self.fs, path = fs.FileSystem.from_uri(self.uri)
        else:
            raise ValueError(f"cannot write data files to {location}: lagsched writes file://, s3a://, hdfs:// tables")
        self.path = path.rstrip("/")

    def path_of(self, uri: str) -> str:
        """The file system path of a file's URI under the folder."""
        if not uri.startswith(self.uri + "/"):
            raise ValueError(f"{uri} is not under {self.uri}")
        return self.path + uri[len(self.uri) :]

    def delete(self, uris: Iterable[str]) -> None:
        """Delete files nobody will commit; one that cannot be deleted is an orphan the table care removes."""
        for uri in uris:
            try:
                self.fs.delete_file(self.path_of(uri))
            except Exception as exc:  # noqa: BLE001 - an orphan: the table care removes it
                log.warning("could not delete %s (%s); the table care removes it as an orphan", uri, exc)


def hour_name(hour: int) -> str:
    """Iceberg's human form of an ``hours`` partition value, as in its partition paths.

    >>> hour_name(0), hour_name(494_570), hour_name(-1)
    ('1970-01-01-00', '2026-06-03-02', '1969-12-31-23')
    """
    return time.strftime("%Y-%m-%d-%H", time.gmtime(hour * 3600))


class _PartitionWriter:
    """The files of one Kafka partition in one task: one open file per hour, row groups buffered."""

    def __init__(self, folder: _DataFolder, topic: str, partition: int, settings: FileSettings) -> None:
        self._folder, self.topic, self.partition, self._settings = folder, topic, partition, settings
        self._topic_dir = f"topic={quote_plus(topic)}"
        self._open: dict[int, _OpenFile] = {}
        self.written: list[WrittenFile] = []

    def add(self, batch: pa.RecordBatch, hours: np.ndarray[Any, Any]) -> None:
        """Records of this partition in offset order, with each record's hour."""
        if hours.min() == hours.max():  # nearly always: a batch's records are of one hour
            self._file(int(hours[0])).add(batch)
            return
        order = np.argsort(hours, kind="stable")  # keeps offset order within an hour
        sorted_hours = hours[order]
        cuts = np.flatnonzero(sorted_hours[1:] != sorted_hours[:-1]) + 1
        taken = batch.take(pa.array(order))
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(order)], strict=True):
            self._file(int(sorted_hours[lo])).add(taken.slice(lo, hi - lo))

    def close(self) -> None:
        for hour in sorted(self._open):
            self._close(hour)

    def abandon(self) -> list[str]:
        """Stop writing; the URIs of every file begun or written (to delete)."""
        uris = [f.uri for f in self._open.values()] + [f.location for f in self.written]
        for f in self._open.values():
            f.abandon()
        self._open.clear()
        return uris

    def _file(self, hour: int) -> _OpenFile:
        f = self._open.get(hour)
        if f is not None and f.bytes_written >= self._settings.target_file_bytes:
            self._close(hour)
            f = None
        if f is None:
            hour_dir = f"timestamp_hour={hour_name(hour)}"
            uri = f"{self._folder.uri}/{self._topic_dir}/{hour_dir}/{self.partition:05d}-{uuid.uuid4().hex}.parquet"
            f = self._open[hour] = _OpenFile(self._folder, uri, self._settings)
        return f

    def _close(self, hour: int) -> None:
        f = self._open.pop(hour)
        done = f.close()
        if done is not None:
            records, size, first, last = done
            self.written.append(WrittenFile(f.uri, self.topic, self.partition, hour, records, size, first, last))


class _OpenFile:
    """One Parquet file being written: batches buffered up to a row group, then written."""

    def __init__(self, folder: _DataFolder, uri: str, settings: FileSettings) -> None:
        self._fs, self.path, self.uri, self._settings = folder.fs, folder.path_of(uri), uri, settings
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._stream: Any = None
        self._writer: pq.ParquetWriter | None = None
        self.records = 0
        self.bytes_written = 0
        self._first: int | None = None
        self._last = -1

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        offsets = batch.column(2)
        if self._first is None:
            self._first = offsets[0].as_py()
        self._last = offsets[-1].as_py()
        self._buffer.append(batch)
        self._buffered += batch.nbytes
        self.records += batch.num_rows
        if self._buffered >= self._settings.row_group_bytes:
            self._flush()

    def close(self) -> tuple[int, int, int, int] | None:
        """Write what is buffered and the footer: (records, bytes, first offset, last offset)."""
        if self._buffer:
            self._flush()
        if self._writer is None:
            return None
        self._writer.close()
        size = self._stream.tell()
        self._stream.close()
        assert self._first is not None
        return self.records, size, self._first, self._last

    def abandon(self) -> None:
        for closing in (self._writer, self._stream):
            if closing is not None:
                with contextlib.suppress(Exception):  # the file is deleted next; a failed close changes nothing
                    closing.close()

    def _flush(self) -> None:
        if self._writer is None:
            s = self._settings
            parent = self.path.rsplit("/", 1)[0]
            self._fs.create_dir(parent, recursive=True)
            self._stream = self._fs.open_output_stream(self.path)
            self._writer = pq.ParquetWriter(
                self._stream,
                s.schema,
                compression=s.compression,
                compression_level=s.compression_level,
                use_dictionary=["topic", "partition", "headers.list.element.key"],
                dictionary_pagesize_limit=s.dictionary_page_bytes,
                data_page_size=s.data_page_bytes,
                write_statistics=list(s.statistics),
                # Iceberg reads Parquet's own types; the Arrow schema in the footer is not needed.
                store_schema=False,
            )
        table = pa.Table.from_batches(self._buffer, schema=self._settings.schema)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._buffer, self._buffered = [], 0
        self.bytes_written = self._stream.tell()


# ------------------------------------------------------------------------------------ reading


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
    stall_s: float = 60.0,
    consumer_factory: Callable[[Mapping[str, Any]], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TaskResult:
    """Read ``ranges`` with one consumer and write them as data files; never raises.

    ``kafka_config`` is the consumer's whole config (`reader_config`). Each range must be of its
    own partition. A range with nothing to read is done at once.
    """
    started = clock()
    writers: dict[tuple[str, int], _PartitionWriter] = {}
    folder: _DataFolder | None = None
    try:
        folder = _DataFolder(settings.data_location, settings.s3_endpoint)
        for r in ranges:
            writers[(r.topic, r.partition)] = _PartitionWriter(folder, r.topic, r.partition, settings)
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

    def write(self, ranges: Sequence[OffsetRange], settings: FileSettings) -> list[WrittenFile]:
        """Read ``ranges`` and write them as data files in ``settings``' layout; the files.

        Raises:
            KafkaOffsetsError: a task's partitions stopped moving (Kafka unreachable): a slot rides
                that through. Nothing is left behind: the other tasks' files are deleted too.
            LagschedError: a task failed otherwise (its message says how); nothing is left behind.
        """
        if not ranges:
            return []
        context = self._spark.sparkContext
        groups = spread(ranges, self._tasks or context.defaultParallelism)
        task = functools.partial(write_task, kafka_config=self._config, settings=settings, stall_s=self._stall_s)
        results: list[TaskResult] = context.parallelize(groups, len(groups)).mapPartitions(task).collect()
        files = [f for r in results for f in r.files]
        failed = [r for r in results if r.error is not None]
        if failed:
            _DataFolder(settings.data_location, settings.s3_endpoint).delete(f.location for f in files)
            message = f"{len(failed)} of {len(groups)} task(s) could not write their ranges; first: {failed[0].error}"
            if all(r.unreachable for r in failed):
                raise KafkaOffsetsError(message)
            raise LagschedError(message)
        return files


def write_task(
    groups: Iterable[Sequence[OffsetRange]], kafka_config: Mapping[str, Any], settings: FileSettings, stall_s: float
) -> Iterator[TaskResult]:
    """A Spark task's function (``mapPartitions``): each group of ranges through `write_ranges`."""
    _keep_zip_directories()
    for group in groups:
        yield write_ranges(group, kafka_config, settings, stall_s=stall_s)


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
    writers: Mapping[tuple[str, int], _PartitionWriter],
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
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([TopicPartition(p.range.topic, p.range.partition, p.next) for p in todo])
        _Reading(consumer, progress, writers).until_done(stall_s, clock)
    finally:
        try:
            consumer.close()
        finally:
            if gc_was_enabled:
                gc.enable()
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


def _take(p: _Progress, run: list[Any], writer: _PartitionWriter) -> bool:
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
        schema = writer._settings.schema
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


#: The schema of a table lagsched creates (`adapters.sink.COLUMNS_DDL`), with the field ids Iceberg
#: gives it at creation; the tasks take the table's own (`FileSettings.of`), this is for examples and tests.
CREATED_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"id": 1, "name": "topic", "required": True, "type": "string"},
            {"id": 2, "name": "partition", "required": True, "type": "int"},
            {"id": 3, "name": "offset", "required": True, "type": "long"},
            {"id": 4, "name": "timestamp", "required": False, "type": "timestamptz"},
            {"id": 5, "name": "key", "required": False, "type": "binary"},
            {"id": 6, "name": "value", "required": False, "type": "binary"},
            {
                "id": 7,
                "name": "headers",
                "required": False,
                "type": {
                    "type": "list",
                    "element-id": 8,
                    "element-required": False,
                    "element": {
                        "type": "struct",
                        "fields": [
                            {"id": 9, "name": "key", "required": False, "type": "string"},
                            {"id": 10, "name": "value", "required": False, "type": "binary"},
                        ],
                    },
                },
            },
        ],
    }
)
