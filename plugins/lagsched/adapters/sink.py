"""Write one batch of Kafka records into the Parquet sink, so that a rewrite is never a duplicate.

Layout (docs/consumer.md)::

    <sink>/topic=<topic>/date=<YYYY-MM-DD>/<partition:05d>-<start:020d>-<end:020d>.parquet

with columns ``partition, offset, timestamp, key, value, headers`` (``topic`` and ``date``, the UTC
date of the record timestamp, come from the path, Hive style). Each file holds the records of one
partition's recorded batch ``[start, end)`` that fall on that date.

How a batch lands: Spark writes it under ``<sink>/_tmp/<uuid>/`` (readers skip ``_`` paths), one
file per (topic, date, partition) because each Kafka partition is one Spark input partition; then
each file is renamed to its final name with the Hadoop FileSystem API, so the same code serves a
local folder, HDFS or an object store. A final name that already exists is left alone and the new
copy deleted: the name is the range, Kafka records are immutable by offset, so it holds the same
records (a redo after a crash, or a stale holder's late write). Renames are atomic on local
filesystems and HDFS; on S3 a rename is a copy, still never visible half-written.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lagsched.adapters.spark import read_offset_ranges
from lagsched.core.batches import file_name
from lagsched.core.offsets import OffsetRange

__all__ = ["BatchRead", "SinkWrite", "to_sink_rows", "write_batch"]

log = logging.getLogger(__name__)

#: The partition column Spark splits the temporary output by; the files keep ``partition`` itself.
_SPLIT = "kafka_partition"
TMP_DIR = "_tmp"


@dataclass(frozen=True, slots=True)
class BatchRead:
    """One partition's part of a batch: read ``[read_start, batch[1])``, name files by ``batch``."""

    topic: str
    partition: int
    batch: tuple[int, int]
    read_start: int


@dataclass(frozen=True, slots=True)
class SinkWrite:
    """What one batch wrote: files renamed into place, and files that were already there."""

    files: int
    already_there: int
    read_write_s: float
    rename_s: float


def to_sink_rows(df: DataFrame) -> DataFrame:
    """Kafka source rows -> the sink's columns, plus ``topic``/``date``/split columns for the layout."""
    return df.select(
        "topic",
        F.to_date("timestamp").alias("date"),  # the session time zone is UTC (adapters.spark.session)
        F.col("partition").alias(_SPLIT),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
    )


def write_batch(
    spark: SparkSession, kafka_config: Mapping[str, Any], reads: Sequence[BatchRead], sink: str
) -> SinkWrite:
    """Read ``reads`` from Kafka and land them in ``sink``; returns once every file is in place."""
    todo = [r for r in reads if r.batch[1] > r.read_start]
    if not todo:
        return SinkWrite(0, 0, 0.0, 0.0)
    names = {(r.topic, r.partition): r.batch for r in todo}
    ranges = [OffsetRange(r.topic, r.partition, r.read_start, r.batch[1]) for r in todo]
    tmp = f"{sink.rstrip('/')}/{TMP_DIR}/{uuid.uuid4().hex}"
    started = time.monotonic()
    df = to_sink_rows(read_offset_ranges(spark, kafka_config, ranges, include_headers=True))
    df.write.partitionBy("topic", "date", _SPLIT).parquet(tmp)
    written = time.monotonic()
    files, kept = _move_into_place(spark, tmp, sink, names)
    return SinkWrite(files, kept, written - started, time.monotonic() - written)


def _move_into_place(
    spark: SparkSession, tmp: str, sink: str, names: Mapping[tuple[str, int], tuple[int, int]]
) -> tuple[int, int]:
    jvm: Any = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    tmp_path = jvm.org.apache.hadoop.fs.Path(tmp)
    fs = tmp_path.getFileSystem(conf)
    moved = kept = 0
    by_dir: dict[str, list[Any]] = {}
    files = fs.listFiles(tmp_path, True)
    while files.hasNext():
        status = files.next()
        path = status.getPath()
        if path.getName().endswith(".parquet"):
            by_dir.setdefault(path.getParent().toString(), []).append(path)
    for paths in by_dir.values():
        # .../topic=T/date=D/kafka_partition=P/part-0000i-....parquet; Spark's file names sort in
        # task order, which is offset order within a partition, so an index is stable across redos.
        paths.sort(key=lambda p: p.getName())
        split_dir = paths[0].getParent()
        date_dir = split_dir.getParent()
        topic_dir = date_dir.getParent()
        topic = _unescape(topic_dir.getName().removeprefix("topic="))
        partition = int(split_dir.getName().removeprefix(f"{_SPLIT}="))
        target_dir = jvm.org.apache.hadoop.fs.Path(f"{sink.rstrip('/')}/{topic_dir.getName()}/{date_dir.getName()}")
        fs.mkdirs(target_dir)
        for index, path in enumerate(paths):
            target = jvm.org.apache.hadoop.fs.Path(target_dir, file_name(partition, names[(topic, partition)], index))
            if fs.exists(target):
                kept += 1  # identical by construction: same range of immutable records
                continue
            if not fs.rename(path, target):
                if fs.exists(target):  # another writer of the same range won the race: same content
                    kept += 1
                    continue
                raise OSError(f"could not move {path} to {target}")
            moved += 1
    fs.delete(tmp_path, True)
    if kept:
        log.info("%d file(s) of this batch were already in the sink (a redo): kept the existing copies", kept)
    return moved, kept


def _unescape(value: str) -> str:
    # Spark escapes special characters in partition values as %XX; topic names never need it
    # ([a-zA-Z0-9._-]), so this only guards against a surprise.
    if "%" in value:
        from urllib.parse import unquote

        return unquote(value)
    return value
