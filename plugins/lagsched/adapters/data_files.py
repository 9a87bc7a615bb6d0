"""The lake table's data files as a batch's tasks write them: the table's schema with its field ids, its write
properties, and Parquet files of one Kafka partition and one hour each, in Iceberg's own layout.

Used inside Spark tasks (`adapters.range_files`), so it knows no Kafka, no claim, no MySQL and no
Redis. One file holds records of one Kafka partition and one hour of their timestamps (the table is
partitioned by ``topic, hours(timestamp)``), in offset order, so each file's ``partition`` and
``offset`` bounds are exact, which the commit's conflict check relies on (docs/lake.md). The Parquet
schema carries the table's field ids, so Iceberg reads the files by id with no name mapping;
options come from the table's write properties (`FileSettings.of`). Files are written to a new name
each (no rename, on S3 one upload), and only the driver's commit makes them part of the table.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lagsched.core.arrow_types import HEADERS_TYPE
from lagsched.core.iceberg_types import arrow_type
from lagsched.environment import aws_region

__all__ = [
    "COLUMNS",
    "CREATED_SCHEMA",
    "HOUR_US",
    "DataFolder",
    "FileSettings",
    "PartitionFiles",
    "WrittenFile",
    "arrow_schema",
    "delete_written",
    "hour_name",
    "max_timestamps",
]

log = logging.getLogger(__name__)

#: The table's columns in the order a task builds them (docs/lake.md, "The table").
COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
#: Microseconds in an hour: a record's ``hours(timestamp)`` partition is its microseconds // this.
HOUR_US = 3_600_000_000

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
            ("headers", HEADERS_TYPE),
        ]
    )
    if arrow.names != expected.names or any(not a.type.equals(b.type) for a, b in zip(arrow, expected, strict=True)):
        raise ValueError(
            f"the table's schema is not lagsched's ({', '.join(COLUMNS)}): {arrow}; "
            "point the cluster's sink at a table lagsched created"
        )
    return arrow


#: The topic column as the tasks build it: one value per file, so a dictionary of one entry (Parquet
#: stores it as a plain string column, dictionary-encoded).
TOPIC_TYPE = pa.dictionary(pa.int32(), pa.string())


def _arrow_field(name: str, kind: Any, field_id: int, required: bool) -> pa.Field:
    metadata = {"PARQUET:field_id": str(field_id)}
    return pa.field(name, arrow_type(kind, field_ids=True), nullable=not required, metadata=metadata)


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
        dictionary_columns: the columns (Parquet paths) written with a dictionary.
        topic_in_path: the table is partitioned by topic as well as by hour (the shared table and
            the dead-letter table); a typed table holds one topic and is partitioned by hour only.
        hour_column: the timestamp column the hour partition is of.
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
    dictionary_columns: tuple[str, ...] = ("topic", "partition", "headers.list.element.key")
    topic_in_path: bool = True
    hour_column: str = "timestamp"

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
            schema=arrow_schema(schema_json),
            statistics=stats,
            **_write_properties(location, properties, s3_endpoint),
        )

    @classmethod
    def of_rows(
        cls,
        location: str,
        schema: pa.Schema,
        properties: Mapping[str, str],
        *,
        coordinates: tuple[str, str, str, str, str],
        topic_in_path: bool,
        s3_endpoint: str | None = None,
    ) -> FileSettings:
        """For the files of a typed or the dead-letter table, written without field ids (the table
        reads them through its name mapping, `lagsched.core.iceberg_types.name_mapping`): `schema`
        is the files' columns, `coordinates` the names of the topic, partition, offset, timestamp and
        headers columns (the statistics the commit's conflict check needs, and the dictionaries).

        >>> import pyarrow as pa
        >>> s = FileSettings.of_rows("s3a://b/w/kafka/orders", pa.schema([("o", pa.int64())]), {},
        ...     coordinates=("t", "p", "o", "ts", "h"), topic_in_path=False)
        >>> s.data_location, s.hour_column, s.statistics
        ('s3a://b/w/kafka/orders/data', 'ts', ('t', 'p', 'o', 'ts'))
        >>> s.dictionary_columns
        ('t', 'p', 'h.list.element.key')
        """
        topic, partition, offset, timestamp, headers = coordinates
        return cls(
            schema=schema,
            statistics=(topic, partition, offset, timestamp),
            dictionary_columns=(topic, partition, f"{headers}.list.element.key"),
            topic_in_path=topic_in_path,
            hour_column=timestamp,
            **_write_properties(location, properties, s3_endpoint),
        )


def _write_properties(location: str, properties: Mapping[str, str], s3_endpoint: str | None) -> dict[str, Any]:
    """`FileSettings`' fields that a table's write properties give (Iceberg's defaults where unset)."""
    codec = properties.get("write.parquet.compression-codec", "zstd").lower()
    if codec not in _CODECS:
        raise ValueError(f"write.parquet.compression-codec={codec!r}: lagsched writes {', '.join(_CODECS)}")
    level = properties.get("write.parquet.compression-level")
    return {
        "data_location": properties.get("write.data.path") or f"{location.rstrip('/')}/data",
        "compression": _CODECS[codec],
        "compression_level": int(level) if level else None,
        "dictionary_page_bytes": int(properties.get("write.parquet.dict-size-bytes", 2 * 1024 * 1024)),
        "data_page_bytes": int(properties.get("write.parquet.page-size-bytes", 1024 * 1024)),
        "row_group_bytes": int(properties.get("write.parquet.row-group-size-bytes", 128 * 1024 * 1024)),
        "target_file_bytes": int(properties.get("write.target-file-size-bytes", 512 * 1024 * 1024)),
        "s3_endpoint": s3_endpoint,
    }


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """One data file a task wrote: records of one Kafka partition, one hour of timestamps.

    ``hour`` is the ``hours(timestamp)`` partition value (hours since the epoch, UTC); ``first``
    and ``last`` are the lowest and highest offsets in the file. ``table``: the typed or dead-letter
    table it is for (its identifier), None for the cluster's shared table; ``schema_id``: the writer
    schema of its rows (a typed table's; -1 for tombstones); ``key_schema_id``: of its keys (-1:
    keys of no writer schema; None: not a typed table's file); ``max_timestamp_ms``: the largest
    record timestamp in it (Kafka's milliseconds: the partition's watermark, docs/completeness.md).
    """

    location: str
    topic: str
    partition: int
    hour: int
    records: int
    size_bytes: int
    first: int
    last: int
    table: str | None = None
    schema_id: int | None = None
    key_schema_id: int | None = None
    max_timestamp_ms: int | None = None


def max_timestamps(files: Iterable[WrittenFile]) -> dict[tuple[str, int], int]:
    """The largest record timestamp (ms) of ``files`` per (topic, partition): what `commit_offset`
    stores with the offset (the watermark, docs/completeness.md)."""
    latest: dict[tuple[str, int], int] = {}
    for f in files:
        if f.max_timestamp_ms is not None:
            key = (f.topic, f.partition)
            latest[key] = max(latest.get(key, f.max_timestamp_ms), f.max_timestamp_ms)
    return latest


# -------------------------------------------------------------------------------- file system


class DataFolder:
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
            options: dict[str, Any] = {"region": aws_region()}
            if s3_endpoint:
                endpoint = urlsplit(s3_endpoint)
                options.update(endpoint_override=endpoint.netloc, scheme=endpoint.scheme or "https")
            self.fs, path = fs.S3FileSystem(**options), f"{parts.netloc}{parts.path}"
        elif parts.scheme == "hdfs":
            self.fs, path = fs.FileSystem.from_uri(self.uri)
        else:
            raise ValueError(f"cannot write data files to {location}: lagsched writes file://, s3a://, hdfs:// tables")
        self.path = path.rstrip("/")
        # An object store has no folders: creating one is a request per file that leaves a marker object.
        self.has_folders = parts.scheme not in ("s3", "s3a")

    def make_parent(self, path: str) -> None:
        """Create the folder a file is about to be written in, where the file system has folders."""
        if self.has_folders:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

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


def delete_written(locations: Iterable[str], s3_endpoint: str | None) -> None:
    """Delete files of any tables that nobody will commit (a failed or voided batch's), one file
    system client per folder: the one way data files are deleted, by a task or by the slot."""
    folders: dict[str, DataFolder] = {}
    for uri in locations:
        parent = uri.rsplit("/", 1)[0]
        folder = folders.get(parent)
        if folder is None:
            folder = folders[parent] = DataFolder(parent, s3_endpoint)
        folder.delete([uri])


def hour_name(hour: int) -> str:
    """Iceberg's human form of an ``hours`` partition value, as in its partition paths.

    >>> hour_name(0), hour_name(494_570), hour_name(-1)
    ('1970-01-01-00', '2026-06-03-02', '1969-12-31-23')
    """
    return time.strftime("%Y-%m-%d-%H", time.gmtime(hour * 3600))


class PartitionFiles:
    """The files of one Kafka partition in one task: one open file per hour, row groups buffered."""

    def __init__(
        self,
        folder: DataFolder,
        topic: str,
        partition: int,
        settings: FileSettings,
        *,
        table: str | None = None,
        schema_id: int | None = None,
        key_schema_id: int | None = None,
    ) -> None:
        self._folder, self.topic, self.partition, self._settings = folder, topic, partition, settings
        self.table, self.schema_id, self.key_schema_id = table, schema_id, key_schema_id
        self.folder_uri = folder.uri
        self._kafka_topic_dir = f"topic={quote_plus(topic)}/" if settings.topic_in_path else ""
        self._open: dict[int, _OpenFile] = {}
        self.written: list[WrittenFile] = []

    @property
    def raw_schema(self) -> pa.Schema:
        """The columns the tasks build records in (`adapters.range_files`): the files'."""
        return self._settings.schema

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
            hour_dir = f"{self._settings.hour_column}_hour={hour_name(hour)}"
            uri = (
                f"{self._folder.uri}/{self._kafka_topic_dir}{hour_dir}/{self.partition:05d}-{uuid.uuid4().hex}.parquet"
            )
            f = self._open[hour] = _OpenFile(self._folder, uri, self._settings)
        return f

    def _close(self, hour: int) -> None:
        f = self._open.pop(hour)
        done = f.close()
        if done is not None:
            records, size, first, last = done
            self.written.append(
                WrittenFile(
                    f.uri, self.topic, self.partition, hour, records, size, first, last, self.table,
                    schema_id=self.schema_id, key_schema_id=self.key_schema_id,
                    max_timestamp_ms=f.max_timestamp_ms,
                )
            )  # fmt: skip


class _OpenFile:
    """One Parquet file being written: batches buffered up to a row group, then written."""

    def __init__(self, folder: DataFolder, uri: str, settings: FileSettings) -> None:
        self._folder, self.path, self.uri, self._settings = folder, folder.path_of(uri), uri, settings
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._stream: Any = None
        self._writer: pq.ParquetWriter | None = None
        self.records = 0
        self.bytes_written = 0
        self._first: int | None = None
        self._last = -1
        self._max_timestamp_us: int | None = None

    @property
    def max_timestamp_ms(self) -> int | None:
        """The largest record timestamp written, in Kafka's milliseconds (None: no timestamp)."""
        return None if self._max_timestamp_us is None else self._max_timestamp_us // 1000

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        offsets = batch.column(2)
        if self._first is None:
            self._first = offsets[0].as_py()
        self._last = offsets[-1].as_py()
        latest = pc.max(batch.column(self._settings.hour_column).cast(pa.int64())).as_py()
        if latest is not None and (self._max_timestamp_us is None or latest > self._max_timestamp_us):
            self._max_timestamp_us = latest
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
            self._folder.make_parent(self.path)
            self._stream = self._folder.fs.open_output_stream(self.path)
            self._writer = pq.ParquetWriter(
                self._stream,
                s.schema,
                compression=s.compression,
                compression_level=s.compression_level,
                use_dictionary=list(s.dictionary_columns),
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
