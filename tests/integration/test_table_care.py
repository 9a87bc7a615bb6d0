"""Table care on the real stack: `lagsched/jobs/table_care.py` (spark-submit) over an Iceberg table the sink wrote.

The table gets many small files in closed hours and a few in an hour still open, plus orphan files;
one run must compact the closed hours to the target (files per partition within 1.5 x what their
bytes need), leave the open hour alone, keep every row once, expire snapshots and delete only old
orphans, while a pyiceberg reader scanning the table over and over sees every record once each time.
A closed hour holding a target-sized file and a small late one (which Iceberg's bin-pack leaves as
two files) is rewritten whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from consumer_support import REPO, TEST_JVM, class_archive_path, register_catalog

from lagsched.adapters.lake_reader import read_rows
from lagsched.adapters.lake_sink import LakeSink
from lagsched.adapters.range_files import RangeWriter
from lagsched.adapters.sink import BatchRead, ensure_table
from lagsched.core.lake import LakeTable
from lagsched.jobs import TABLE_CARE_JOB
from lagsched.workflows.batch import write_batch

pytestmark = pytest.mark.integration

JOB = Path(TABLE_CARE_JOB)
HOUR_MS = 3_600_000


def produce_hours(kafka_config: dict[str, Any], topic: str, hours: list[int], per_hour: int) -> None:
    """``per_hour`` records into partitions 0 and 1 for each hour (epoch hour numbers), timestamps inside it."""
    from confluent_kafka import Producer

    producer = Producer({**kafka_config, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for hour in hours:
        for i in range(per_hour):
            producer.produce(
                topic, value=f"{hour}:{i}".encode().ljust(200, b"."), partition=i % 2,
                timestamp=hour * HOUR_MS + i * 1000,
            )  # fmt: skip
    assert producer.flush(60) == 0


class Scanner(threading.Thread):
    """Scans the whole table with pyiceberg over and over; each scan's (start, end, rows, distinct)."""

    def __init__(self, lake: LakeTable, mysql: Any) -> None:
        super().__init__(name="scanner", daemon=True)
        self.lake, self.mysql = lake, mysql
        self.stop_event = threading.Event()
        self.scans: list[tuple[float, float, int, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                t0 = time.time()
                table = read_rows(self.lake, self.mysql)
                keys = set(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
                self.scans.append((t0, time.time(), table.num_rows, len(keys)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc


@pytest.fixture
def lake_with_small_files(
    spark: Any, empty_mysql_db: Any, kafka_config: dict[str, Any], new_topic: Callable[..., str], tmp_path: Path
) -> tuple[LakeTable, str, int, int]:
    """A table holding 2 closed hours and 1 open hour of one topic, 6 small files per hour and partition.

    The open hour is the current one (Kafka refuses timestamps more than an hour ahead); the run acts
    as of two hours from now with partitions closed only 3 hours after they end, so the two hours
    before the last are closed and the current one is not.

    Returns the table, the topic, the open hour, and the records.
    """
    catalog = f"t_{uuid.uuid4().hex[:8]}"
    lake = LakeTable.of(
        "care", {"catalog": catalog, "warehouse": (tmp_path / "warehouse").as_uri()}, default_warehouse=""
    )
    register_catalog(spark, lake, empty_mysql_db)
    now_hour = int(time.time() // 3600)
    open_hour = now_hour
    hours = [now_hour - 3, now_hour - 2, open_hour]
    topic = new_topic(2)
    produce_hours(kafka_config, topic, hours, per_hour=600)
    sink, writer = LakeSink(spark, lake, conn=None, slot_id="test"), RangeWriter(spark, kafka_config)
    per_partition = 900  # 3 hours x 300 records a partition, in batches of 50: 6 batches per hour
    for start in range(0, per_partition, 50):
        reads = [BatchRead(topic, p, (start, start + 50), start) for p in (0, 1)]
        write_batch(sink, writer, reads, sink.mark())
    return lake, topic, open_hour, 2 * per_partition


def run_job(mysql: Any, lake: LakeTable, *args: str) -> dict[str, Any]:
    from lagsched.adapters.spark import submit_command

    env = dict(os.environ)
    env["AIRFLOW_CONN_LAGSCHED_MYSQL"] = json.dumps(
        {"conn_type": "mysql", "host": mysql.host, "port": mysql.port, "login": mysql.user,
         "password": mysql.password, "schema": mysql.database}
    )  # fmt: skip
    env["PYTHONPATH"] = str(REPO / "plugins")
    argv = ["--cluster", "care", "--catalog", lake.catalog, "--warehouse", lake.warehouse, *args]
    command = submit_command(str(JOB), argv, java_options=TEST_JVM, class_archive=str(class_archive_path()))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def data_files(spark: Any, lake: LakeTable) -> dict[int, int]:
    """Live data files per hour partition."""
    rows = spark.sql(f"SELECT partition.timestamp_hour AS h, count(*) AS n FROM {lake.identifier}.files GROUP BY 1")
    return {int(r["h"]): int(r["n"]) for r in rows.collect()}


def test_one_run_compacts_closed_hours_expires_snapshots_and_deletes_old_orphans_while_readers_see_every_record_once(
    spark: Any, empty_mysql_db: Any, lake_with_small_files: tuple[LakeTable, str, int, int]
) -> None:
    lake, _topic, open_hour, records = lake_with_small_files
    before = data_files(spark, lake)
    assert all(n == 12 for n in before.values()), before  # 6 batches x 2 partitions per hour
    data_dir = Path(lake.warehouse.removeprefix("file://")) / "kafka" / "care" / "data"
    # Ages against the 26 h bound: 48 h (deleted), 25 h (kept: the run's `now` is 2 h ahead, but the
    # bound counts from the real clock) and new (kept).
    orphans = {age: data_dir / f"orphan-{age}h.parquet" for age in (48, 25, 0)}
    for age, orphan in orphans.items():
        orphan.write_bytes(b"not referenced by any snapshot")
        os.utime(orphan, (time.time() - age * 3600, time.time() - age * 3600))

    scanner = Scanner(lake, empty_mysql_db)
    scanner.start()
    now = datetime.now(UTC) + timedelta(hours=2)
    settings = {
        "closed_after_minutes": 180, "snapshot_max_age_hours": 1, "snapshots_to_keep": 2, "orphan_min_age_hours": 26,
    }  # fmt: skip
    try:
        summary = run_job(empty_mysql_db, lake, "--now", now.isoformat(), "--settings", json.dumps(settings))
    finally:
        scanner.stop_event.set()
        scanner.join(timeout=120)
    assert scanner.error is None, scanner.error

    compaction = summary["compaction"]
    after = data_files(spark, lake)
    closed = {h: n for h, n in after.items() if h != open_hour}
    assert all(n == 1 for n in closed.values()), after  # each closed hour: far below the target, one file
    assert after[open_hour] == before[open_hour], "the open hour was compacted"
    assert compaction["max_files_per_partition_before"] == 12.0
    assert compaction["max_files_per_partition_after"] <= 1.5
    assert (compaction["files_before"], compaction["files_after"]) == (36, 12 + 2)
    assert compaction["rewritten_files"] == 24 and compaction["rewritten_whole"] == []
    assert compaction["bytes_before"] > 0 and compaction["bytes_after"] > 0 and compaction["seconds"] > 0
    table = read_rows(lake, empty_mysql_db)
    keys = set(zip(*(table.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
    assert table.num_rows == len(keys) == records
    expire = summary["expire_snapshots"]
    assert expire["snapshots_left"] == 2 and expire["snapshots_before"] > 2  # everything older than 1 h, but 2
    # Partial progress commits each hour's file group on its own (2 groups, max-commits 10): the kept
    # snapshots are those two commits, and the first still holds the second hour's small files.
    assert expire["deleted_data_files"] == 12
    assert {age: f.exists() for age, f in orphans.items()} == {48: False, 25: True, 0: True}
    assert summary["orphans"]["deleted"] == 1

    # Every scan saw every record once, also those that ran while the rewrite was committing.
    assert scanner.scans and all(rows == distinct == records for _, _, rows, distinct in scanner.scans), scanner.scans
    overlapping = [s for s in scanner.scans if s[0] < compaction["finished_unix"] and s[1] > compaction["started_unix"]]
    assert len(overlapping) >= 3, (compaction, scanner.scans[:3])
    print("\ntable care:", json.dumps({"scans": len(scanner.scans), "during_compaction": len(overlapping), **summary}))


def test_a_malformed_settings_variable_fails_the_run_naming_the_field_and_changes_nothing(
    spark: Any, empty_mysql_db: Any, lake_with_small_files: tuple[LakeTable, str, int, int]
) -> None:
    from lagsched.adapters.spark import submit_command

    lake, _topic, _open, _records = lake_with_small_files
    before = data_files(spark, lake)
    env = dict(os.environ, PYTHONPATH=str(REPO / "plugins"))
    argv = ["--cluster", "care", "--catalog", lake.catalog, "--settings", '{"target_file_mb": 0}']
    done = subprocess.run(
        submit_command(str(JOB), argv, java_options=TEST_JVM, class_archive=str(class_archive_path())),
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    # spark-submit hands the Python driver's stderr to its own stdout.
    output = (done.stdout + done.stderr).splitlines()
    failed = [ln for ln in output if ln.startswith("lagsched table care: FAILED")]
    assert failed and "target_file_mb = 0" in failed[-1], output[-20:]
    assert data_files(spark, lake) == before


def write_rows(spark: Any, lake: LakeTable, topic: str, hour: int, offsets: range) -> None:
    """One data file of ``offsets`` (partition 0) in ``hour``, written by Spark through the catalog.

    Values are 896 random bytes (hashes), so the file's size follows the row count (no compression).
    """
    from pyspark.sql import functions as F

    value = "unhex(concat_ws('', transform(sequence(1, 28), i -> sha2(cast(id * 100 + i AS STRING), 256))))"
    df = spark.range(offsets.start, offsets.stop).select(
        F.lit(topic).alias("topic"),
        F.lit(0).cast("int").alias("partition"),
        F.col("id").alias("offset"),
        F.timestamp_seconds(F.lit(hour * 3600) + F.col("id") % 3600).alias("timestamp"),
        F.lit(None).cast("binary").alias("key"),
        F.expr(value).alias("value"),
        F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
    )
    df.coalesce(1).writeTo(lake.identifier).append()


def test_a_closed_hour_the_bin_pack_leaves_at_two_files_is_rewritten_whole(
    spark: Any, empty_mysql_db: Any, tmp_path: Path
) -> None:
    catalog = f"t_{uuid.uuid4().hex[:8]}"
    lake = LakeTable.of(
        "care", {"catalog": catalog, "warehouse": (tmp_path / "warehouse").as_uri()}, default_warehouse=""
    )
    register_catalog(spark, lake, empty_mysql_db)
    ensure_table(spark, lake)
    hour = int(time.time() // 3600) - 5
    # Hour A: a file near the 1 MiB target (0.75-1.8 x: the bin-pack never picks it) and a small late
    # one: two files where one would do. Hour B: three small files, the bin-pack's own case.
    write_rows(spark, lake, "a", hour, range(0, 950))
    write_rows(spark, lake, "a", hour, range(950, 970))
    for start in (0, 10, 20):
        write_rows(spark, lake, "b", hour, range(start, start + 10))
    files = spark.sql(f"SELECT partition.topic AS topic, file_size_in_bytes AS size FROM {lake.identifier}.files")
    sizes = {(r["topic"], r["size"]) for r in files.collect()}
    assert any(t == "a" and 0.75 * 2**20 < size < 2**20 for t, size in sizes), sizes

    summary = run_job(empty_mysql_db, lake, "--settings", json.dumps({"target_file_mb": 1}))

    compaction = summary["compaction"]
    assert compaction["max_files_per_partition_before"] == 3.0
    assert compaction["rewritten_whole"] == [f"a@{datetime.fromtimestamp(hour * 3600, UTC):%Y-%m-%dT%H}"]
    assert (compaction["files_before"], compaction["files_after"]) == (5, 2)
    assert compaction["max_files_per_partition_after"] == 1.0
    rows = spark.sql(f"SELECT topic, count(*) AS n, count(DISTINCT offset) AS d FROM {lake.identifier} GROUP BY 1")
    assert {(r["topic"], r["n"], r["d"]) for r in rows.collect()} == {("a", 970, 970), ("b", 30, 30)}
    print("\ntable care, whole rewrite:", json.dumps(compaction))


def test_a_table_no_slot_has_written_yet_is_skipped_not_failed(spark: Any, empty_mysql_db: Any, tmp_path: Path) -> None:
    # A new deployment's first hourly run comes before its slots' first batch: nothing to do, no error.
    from lagsched.adapters.table_care import care_for_table
    from lagsched.core.table_care import parse_table_care

    lake = LakeTable.of(
        "care", {"catalog": f"t_{uuid.uuid4().hex[:8]}", "warehouse": (tmp_path / "warehouse").as_uri()},
        default_warehouse="",
    )  # fmt: skip
    register_catalog(spark, lake, empty_mysql_db)
    out = care_for_table(spark, lake, parse_table_care(None), datetime.now(UTC))
    assert out["table"] == lake.identifier
    assert out["skipped"] == "the table does not exist yet: no slot has written to it"
    assert "compaction" not in out
    assert not spark.catalog.tableExists(lake.identifier)  # care created nothing
