"""A batch's write and conditional commit on the real stack: Kafka, Spark tasks writing with pyarrow,
Iceberg's commit, the JDBC catalog in MariaDB.

Each case drives a batch's steps 3 and 4 (`lagsched.workflows.batch.write_batch`: the tasks of
``RangeWriter``, then ``LakeSink.commit``) directly, as two holders of one range would, and
judges the table with pyiceberg (Iceberg's own reader, no Spark). The slot-level tests (kills, a
frozen holder, concurrent slots) are in test_consumer_failures.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import produce, register_catalog

from lagsched.adapters.lake_reader import load_table, read_rows, table_stats
from lagsched.adapters.lake_sink import LakeSink
from lagsched.adapters.range_files import RangeWriter, RecordsDeletedError
from lagsched.adapters.sink import BatchRead, SinkConflictError
from lagsched.core.lake import RANGES_PROPERTY, LakeTable, decode_ranges
from lagsched.workflows.batch import BatchWrite, write_batch

pytestmark = pytest.mark.integration


class Landing:
    """A table's committer and the tasks' writer, as a slot's batches use them."""

    def __init__(self, sink: LakeSink, writer: RangeWriter) -> None:
        self.sink, self.writer, self.lake = sink, writer, sink.lake

    def mark(self) -> int | None:
        return self.sink.mark()

    def write(self, reads: list[BatchRead], since: int | None) -> BatchWrite:
        return write_batch(self.sink, self.writer, reads, since)


@pytest.fixture(params=["file", "s3a"])
def lake_sink(
    request: pytest.FixtureRequest, spark: Any, empty_mysql_db: Any, kafka_config: dict[str, Any], tmp_path: Path
) -> Iterator[Landing]:
    """The cluster's sink (`LakeSink` without routes: the shared table's ``IcebergSink``) on a catalog
    of its own (this test's database) in the shared Spark session,
    its warehouse on the local disk or in the stack's S3 API server (S3Proxy, through S3A)."""
    catalog = f"t_{uuid.uuid4().hex[:8]}"
    if request.param == "s3a":
        sink = {"warehouse": f"s3a://lagsched/tests/{catalog}", "s3_endpoint": os.environ["LAGSCHED_S3_ENDPOINT"]}
    else:
        sink = {"warehouse": (tmp_path / "warehouse").as_uri()}
    lake = LakeTable.of("sink_test", {"catalog": catalog, **sink}, default_warehouse="")
    register_catalog(spark, lake, empty_mysql_db)
    # A cluster without routes: the shared table alone (what a batch lands through, `write_batch`).
    sink = LakeSink(spark, lake, conn=None, slot_id="test", properties={"lagsched.slot": "test"})
    yield Landing(sink, RangeWriter(spark, kafka_config))


def data_file_paths(sink: Landing, mysql: Any) -> list[str]:
    """Every Parquet file under the table's data folder, committed or not, as its file system lists it."""
    from pyarrow.fs import FileSelector

    table = load_table(sink.lake, mysql)
    scheme, netloc, path = table.io.parse_location(table.location() + "/data")
    fs = table.io._initialize_fs(scheme, netloc)
    return [i.path for i in fs.get_file_info(FileSelector(path, recursive=True)) if i.path.endswith(".parquet")]


def offsets(sink: Landing, mysql: Any) -> list[tuple[str, int, int]]:
    table = read_rows(sink.lake, mysql)
    columns = (table.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    return sorted(zip(*columns, strict=True))


@pytest.fixture
def topic(new_topic: Callable[..., str], kafka_config: dict[str, Any]) -> str:
    name = new_topic(2)
    produce(kafka_config, name, 400, partitions=2)  # offsets 0..199 in each partition
    return name


def test_a_batch_is_one_snapshot_that_records_its_ranges(lake_sink: Landing, empty_mysql_db: Any, topic: str) -> None:
    wrote = lake_sink.write([BatchRead(topic, 0, (0, 120), 0), BatchRead(topic, 1, (0, 80), 0)], lake_sink.mark())
    assert (wrote.records, wrote.already_there) == (200, 0)
    assert offsets(lake_sink, empty_mysql_db) == sorted(
        [(topic, 0, o) for o in range(120)] + [(topic, 1, o) for o in range(80)]
    )
    table = load_table(lake_sink.lake, empty_mysql_db)
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == wrote.snapshot_id
    assert snapshot.summary.operation.value == "append"
    summary = snapshot.summary.additional_properties
    assert decode_ranges(summary[RANGES_PROPERTY]) == {(topic, 0): (0, 120), (topic, 1): (0, 80)}
    assert summary["lagsched.slot"] == "test"
    stats = table_stats(lake_sink.lake, empty_mysql_db)
    assert (stats.records, stats.snapshots) == (200, 1)
    assert stats.ranges == {(topic, 0): [(0, 120)], (topic, 1): [(0, 80)]}


def test_a_second_commit_of_a_range_since_the_mark_is_refused_and_leaves_no_file(
    lake_sink: Landing, empty_mysql_db: Any, topic: str, tmp_path: Path
) -> None:
    lake_sink.write([BatchRead(topic, 0, (0, 50), 0)], lake_sink.mark())
    # Holder A takes its mark and records [50, 150); it freezes. Holder B redoes the range and commits.
    stale_mark = lake_sink.mark()
    lake_sink.write([BatchRead(topic, 0, (50, 150), 50, redo=True)], lake_sink.mark())
    files_before = sorted(data_file_paths(lake_sink, empty_mysql_db))
    # A wakes up and commits the same range: refused, and its data files are deleted.
    with pytest.raises(SinkConflictError) as refused:
        lake_sink.write([BatchRead(topic, 0, (50, 150), 50)], stale_mark)
    assert refused.value.ranges == {(topic, 0): (50, 150)}
    assert sorted(data_file_paths(lake_sink, empty_mysql_db)) == files_before
    assert offsets(lake_sink, empty_mysql_db) == [(topic, 0, o) for o in range(150)]
    # An overlapping range is refused as well (a record of it is in a file committed since the mark).
    with pytest.raises(SinkConflictError):
        lake_sink.write([BatchRead(topic, 0, (149, 160), 149)], stale_mark)


def test_a_redo_of_a_range_already_committed_writes_nothing(
    lake_sink: Landing, empty_mysql_db: Any, topic: str
) -> None:
    lake_sink.write([BatchRead(topic, 1, (0, 100), 0)], lake_sink.mark())
    # The holder died between the table commit and the MySQL commit; the next one redoes the range.
    redo = lake_sink.write(
        [BatchRead(topic, 1, (0, 100), 0, redo=True), BatchRead(topic, 0, (0, 10), 0)], lake_sink.mark()
    )
    assert redo.already_there == 1
    assert redo.records == 10  # only partition 0's new range was written
    expected = [(topic, 0, o) for o in range(10)] + [(topic, 1, o) for o in range(100)]
    assert offsets(lake_sink, empty_mysql_db) == sorted(expected)
    # A redo of a range that never reached the table writes it.
    again = lake_sink.write([BatchRead(topic, 1, (100, 200), 100, redo=True)], lake_sink.mark())
    assert (again.already_there, again.records) == (0, 100)


def test_other_partitions_committed_since_the_mark_do_not_conflict(
    lake_sink: Landing, empty_mysql_db: Any, topic: str
) -> None:
    mark = lake_sink.mark()
    lake_sink.write([BatchRead(topic, 0, (0, 200), 0)], mark)  # another slot's batch, after our mark
    mine = lake_sink.write([BatchRead(topic, 1, (0, 200), 0)], mark)
    assert mine.records == 200
    assert len(offsets(lake_sink, empty_mysql_db)) == 400


def test_the_catalog_tables_are_created_race_free_before_any_spark_session(mysql_db: Any) -> None:
    """Slots starting at once on a fresh database: each creates the JDBC catalog's tables (V1) first,
    so Iceberg's own V0-then-ALTER never runs twice ("Duplicate column name 'iceberg_type'")."""
    import threading

    from lagsched.adapters.mysql import connect
    from lagsched.adapters.sink import ensure_catalog_tables

    errors: list[BaseException] = []

    def start() -> None:
        conn = connect(mysql_db)
        try:
            ensure_catalog_tables(conn)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            conn.close()

    def at_once(processes: int) -> None:
        threads = [threading.Thread(target=start) for _ in range(processes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    def columns() -> set[str]:
        conn = connect(mysql_db)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = DATABASE() AND table_name = 'iceberg_tables'"
                )
                return {str(r[0]) for r in cur.fetchall()}
        finally:
            conn.close()

    at_once(4)
    assert errors == []
    assert "iceberg_type" in columns()
    # An older deployment's V0 table gets the V1 column, from two processes at once.
    conn = connect(mysql_db)
    with conn.cursor() as cur:
        cur.execute("ALTER TABLE iceberg_tables DROP COLUMN iceberg_type")
    conn.close()
    at_once(2)
    assert errors == []
    assert "iceberg_type" in columns()


def test_records_of_any_hour_and_shape_land_as_kafka_holds_them(
    lake_sink: Landing, empty_mysql_db: Any, new_topic: Callable[..., str], kafka_config: dict[str, Any], spark: Any
) -> None:
    import time

    from confluent_kafka import Producer

    topic = new_topic(1)
    hour_ms = 3_600_000
    # This hour: the log's retention (by its newest timestamp) keeps the records, old ones among them.
    t0 = int(time.time() * 1000) // hour_ms * hour_ms
    sent = [
        (b"k0", b"v0", [("h", b"1")], t0 - 1),  # the hour before
        (None, b"v1", None, t0),  # no key, no headers, on the hour
        (b"k2", None, [("a", None), ("b", b"")], t0 + 5),  # a tombstone; a header without a value
        (b"k3", bytes(range(256)) * 800, [("h", b"2")], 1),  # 200 KB; 1 ms after the epoch
    ]
    producer = Producer(kafka_config)
    for key, value, headers, ts in sent:
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0)
    assert producer.flush(30) == 0

    wrote = lake_sink.write([BatchRead(topic, 0, (0, 4), 0)], lake_sink.mark())
    assert (wrote.records, wrote.files) == (4, 3)  # one file per hour: t0 - 1, t0 (two records), the epoch's

    columns = ("offset", "timestamp", "key", "value", "headers")
    table = read_rows(lake_sink.lake, empty_mysql_db, columns=columns).sort_by("offset").to_pylist()
    # pyiceberg 0.12 reads a null list as [] (the files hold null: Spark's reader below says so).
    got = [(r["key"], r["value"], r["headers"] or None, int(r["timestamp"].timestamp() * 1000)) for r in table]
    expected = [(k, v, None if h is None else [{"key": a, "value": b} for a, b in h], ts) for k, v, h, ts in sent]
    assert got == expected
    # Spark's Iceberg reader reads the same files (by field id), pruned by the hour partition.
    one_hour = spark.sql(
        f"SELECT `offset` FROM {lake_sink.lake.identifier} "
        f"WHERE `timestamp` >= timestamp_millis({t0}) AND `timestamp` < timestamp_millis({t0 + hour_ms})"
    ).collect()
    assert sorted(r["offset"] for r in one_hour) == [1, 2]
    no_headers = spark.sql(f"SELECT `offset` FROM {lake_sink.lake.identifier} WHERE headers IS NULL").collect()
    assert [r["offset"] for r in no_headers] == [1]
    hours = spark.sql(f"SELECT partition.timestamp_hour AS h FROM {lake_sink.lake.identifier}.files").collect()
    assert sorted(r["h"] for r in hours) == [0, t0 // hour_ms - 1, t0 // hour_ms]


def test_a_read_that_cannot_finish_commits_nothing_and_leaves_no_file(
    lake_sink: Landing, empty_mysql_db: Any, topic: str, spark: Any, kafka_config: dict[str, Any]
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from lagsched.core.errors import KafkaOffsetsError, LagschedError

    lake_sink.write([BatchRead(topic, 0, (0, 10), 0)], lake_sink.mark())
    snapshot, files = lake_sink.mark(), sorted(data_file_paths(lake_sink, empty_mysql_db))
    # Kafka unreachable: the tasks wait `stall_s` for progress, then the batch fails as an outage.
    nowhere = Landing(lake_sink.sink, RangeWriter(spark, {"bootstrap.servers": "127.0.0.1:9"}, stall_s=3))
    with pytest.raises(KafkaOffsetsError, match=rf"no progress for 3 s reading {topic}\[[01]\] at (0|10) of "):
        nowhere.write([BatchRead(topic, 0, (10, 60), 10), BatchRead(topic, 1, (0, 50), 0)], snapshot)
    # Retention deleted the start of a range since it was planned: refused at once, never skipped,
    # and told apart (the slot plans such a batch again, and the plan records the gap).
    admin = AdminClient(kafka_config)
    for done in admin.delete_records([TopicPartition(topic, 1, 30)]).values():
        done.result(30)
    with pytest.raises(RecordsDeletedError, match=rf"reading {topic}\[1\]") as refused:
        lake_sink.write([BatchRead(topic, 0, (10, 60), 10), BatchRead(topic, 1, (0, 50), 0)], snapshot)
    assert isinstance(refused.value, LagschedError) and not isinstance(refused.value, KafkaOffsetsError)
    assert lake_sink.mark() == snapshot
    assert sorted(data_file_paths(lake_sink, empty_mysql_db)) == files  # partition 0's file was deleted too
    assert offsets(lake_sink, empty_mysql_db) == [(topic, 0, o) for o in range(10)]
