"""The consumer harness: run real `lagsched/jobs/consume.py` slots with spark-submit, and check the sink.

Each test gets its own MySQL database (so its own Iceberg catalog), Redis DB
(``LAGSCHED_TEST_REDIS_DB``), cluster name and warehouse folder, so the slots of one test never see
another's. The table is read back with pyiceberg through the same catalog, never with Spark.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB

REPO = Path(__file__).resolve().parents[2]
JOB = Path(CONSUME_JOB)
#: Test runs are short: the C1 compiler alone and the serial GC start a JVM on half the CPU, which
#: matters when three slots and the services share two cores. Production runs keep the defaults.
TEST_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: The lake table's columns (docs/lake.md).
TABLE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def produce(
    kafka_config: dict[str, Any], topic: str, count: int, *, start: int = 0, partitions: int | None = None
) -> None:
    """``count`` records with key ``k<i>``, value ``v<i>`` padded to ~100 bytes and header ``i``.

    Record i goes to partition ``i % partitions`` when ``partitions`` is given, else by key hash.
    Idempotent producer: a retried request cannot reorder or duplicate records.
    """
    from confluent_kafka import Producer

    producer = Producer({**kafka_config, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    for i in range(start, start + count):
        kwargs: dict[str, Any] = {} if partitions is None else {"partition": i % partitions}
        producer.produce(topic, key=f"k{i}".encode(), value=value_of(i), headers=[("i", str(i).encode())], **kwargs)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def value_of(i: int) -> bytes:
    return f"v{i}:".encode().ljust(100, b".")


@dataclass
class Slot:
    """A running slot process (its own process group, so a kill reaches Spark's JVM too)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    stats: Path

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"slot {self.name} did not exit within {timeout} s; log tail:\n{self.tail()}"
            ) from None

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def driver_pid(self) -> int:
        """The job's Python driver: the child spark-submit's JVM started (client mode)."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid and str(JOB).encode() in cmdline:
                return int(stat.parent.name)
        raise AssertionError(f"slot {self.name}: no Python driver under spark-submit {self.proc.pid}")

    def terminate(self) -> None:
        """SIGTERM to the driver, as a graceful stop: it finishes its batch, commits and releases."""
        os.kill(self.driver_pid(), signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def batches(self) -> list[dict[str, Any]]:
        if not self.stats.exists():
            return []
        rows = [json.loads(line) for line in self.stats.read_text().splitlines() if line.strip()]
        return [r for r in rows if r.get("event") == "batch"]


@dataclass
class ConsumerHarness:
    """Registers topics, starts slots, and reads the table back with pyiceberg (never Spark)."""

    mysql: Any  # MySQLParams of the test's database
    kafka_config: dict[str, Any]
    redis_db: int
    cluster: str
    workdir: Path
    slots: list[Slot] = field(default_factory=list)

    #: The warehouse URI; None: ``file://<workdir>/warehouse``.
    warehouse_uri: str | None = None

    @property
    def warehouse(self) -> str:
        return self.warehouse_uri or f"file://{self.workdir / 'warehouse'}"

    @property
    def lake(self) -> Any:
        from lagsched.core.lake import LakeTable

        return LakeTable.of(
            self.cluster, {"warehouse": self.warehouse, "s3_endpoint": os.environ.get("LAGSCHED_S3_ENDPOINT")}
            if self.warehouse.startswith("s3a://") else {"warehouse": self.warehouse},
            default_warehouse=self.warehouse,
        )  # fmt: skip

    def env(self) -> dict[str, str]:
        from lagsched.connections import redis_params

        r = redis_params()
        env = dict(os.environ)
        env["AIRFLOW_CONN_LAGSCHED_MYSQL"] = json.dumps(
            {
                "conn_type": "mysql",
                "host": self.mysql.host,
                "port": self.mysql.port,
                "login": self.mysql.user,
                "password": self.mysql.password,
                "schema": self.mysql.database,
            }
        )
        env["AIRFLOW_CONN_LAGSCHED_REDIS"] = json.dumps(
            {
                "conn_type": "redis",
                "host": r.host,
                "port": r.port,
                "password": r.password,
                "extra": {"db": self.redis_db},
            }
        )
        env["PYTHONPATH"] = str(REPO / "plugins")
        return env

    def register(self, topic: str, *, linker_workers: int = 1) -> str:
        """Sync ``topic`` into the registry and set its workers; returns its topic id."""
        from confluent_kafka.admin import AdminClient

        from lagsched.adapters.mysql import connect
        from lagsched.workflows.topic_sync import sync_registry

        conn = connect(self.mysql)
        try:
            sync_registry(conn, AdminClient(self.kafka_config), self.cluster, only=[topic])
            with conn.cursor() as cur:
                cur.execute("UPDATE topics SET linker_workers = %s WHERE cluster = %s AND name = %s AND enabled",
                            (linker_workers, self.cluster, topic))  # fmt: skip
                cur.execute(
                    "SELECT topic_id FROM topics WHERE cluster = %s AND name = %s AND enabled", (self.cluster, topic)
                )
                row = cur.fetchone()
            conn.commit()
        finally:
            conn.close()
        assert row is not None, f"{topic} was not registered"
        return str(row[0])

    #: Record the slots' JVM class-data archive here (`record_class_archive`) instead of mapping the
    #: one at `class_archive_path` (when it exists).
    record_classes_to: Path | None = None

    def start(self, name: str, *args: str, master: str = "local[2]", env: dict[str, str] | None = None) -> Slot:
        """Start a slot; ``env`` replaces the harness's environment (e.g. a broken Connection)."""
        from lagsched.adapters.spark import submit_command

        log = self.workdir / f"{name}.{len(self.slots)}.log"
        stats = self.workdir / f"{name}.stats"
        self.spark_local.mkdir(exist_ok=True)
        argv = [
            "--slot", name, "--cluster", self.cluster, "--stats-file", str(stats), *self._lake_args(),
            "--min-interval-s", "0", "--min-records", "1", "--commit-interval-s", "0",
            "--heartbeat-s", "1", "--lease-s", "6", *args,
        ]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(
                submit_command(
                    str(JOB),
                    argv,
                    master=master,
                    java_options=(*TEST_JVM, f"-Djava.io.tmpdir={self.spark_local}"),
                    class_archive=str(self.record_classes_to or class_archive_path()),
                    record_classes=self.record_classes_to is not None,
                ),
                env={**(self.env() if env is None else env), "SPARK_LOCAL_DIRS": str(self.spark_local)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.workdir,
            )
        slot = Slot(name, proc, log, stats)
        self.slots.append(slot)
        return slot

    def run(self, name: str, *args: str, timeout: float = 180, master: str = "local[2]") -> Slot:
        slot = self.start(name, *args, master=master)
        code = slot.wait(timeout)
        assert code == 0, f"slot {name} exited {code}; log tail:\n{slot.tail()}"
        return slot

    def _lake_args(self) -> list[str]:
        lake = self.lake
        args = ["--warehouse", lake.warehouse]
        if lake.s3_endpoint:
            args += ["--s3-endpoint", lake.s3_endpoint]
        return args

    def sink_table(self, columns: tuple[str, ...] = TABLE_COLUMNS) -> Any:
        """The table's rows as pyiceberg reads them, every column by default (empty before any slot
        created the table)."""
        from pyiceberg.exceptions import NoSuchTableError

        from lagsched.adapters.lake_reader import read_rows

        try:
            return read_rows(self.lake, self.mysql, columns=columns)
        except NoSuchTableError:
            import pyarrow as pa

            return pa.table({c: [] for c in columns})

    def table_stats(self) -> Any:
        from lagsched.adapters.lake_reader import table_stats

        return table_stats(self.lake, self.mysql)

    def committed(self, topic_id: str) -> dict[int, int | None]:
        from lagsched.adapters.mysql import connect

        conn = connect(self.mysql)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT partition_id, committed_offset FROM topic_partitions WHERE topic_id = %s", (topic_id,)
                )
                return {int(p): None if o is None else int(o) for p, o in cur.fetchall()}
        finally:
            conn.close()

    def _by_partition(self, sql: str, topic_id: str) -> dict[int, Any]:
        from lagsched.adapters.mysql import connect

        conn = connect(self.mysql)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, (topic_id,))
                return {int(r[0]): r[1] if len(r) == 2 else tuple(r[1:]) for r in cur.fetchall()}
        finally:
            conn.close()

    def holders(self, topic_id: str) -> dict[int, str | None]:
        """Partition -> slot holding it under a live lease (None: free)."""
        return self._by_partition(
            "SELECT partition_id, CASE WHEN lease_expires_at > CURRENT_TIMESTAMP(6) THEN claimed_by END"
            " FROM topic_partitions WHERE topic_id = %s",
            topic_id,
        )

    def slot_id(self, name: str) -> str:
        """The id a slot started as ``--slot name`` runs under."""
        from lagsched.adapters.slots import slot_id_for

        return slot_id_for(name)

    def live_slots(self) -> list[str]:
        """The cluster's live set in the test's Redis DB, as the slots see it."""
        from datetime import UTC, datetime

        from lagsched.adapters.redis_store import redis_client
        from lagsched.adapters.slots import SlotRegistry
        from lagsched.connections import redis_params

        client = redis_client(redis_params(), db=self.redis_db)
        try:
            return SlotRegistry(client, cluster=self.cluster).live_slots(datetime.now(UTC), 3.0)
        finally:
            client.close()

    def pending(self, topic_id: str) -> dict[int, tuple[int, int]]:
        """Partition -> batch recorded but not committed."""
        return self._by_partition(
            "SELECT partition_id, pending_start, pending_end FROM topic_partitions"
            " WHERE topic_id = %s AND pending_end IS NOT NULL",
            topic_id,
        )

    @property
    def spark_local(self) -> Path:
        """The slots' scratch space (Spark's local dirs and the JVM's temporary files): each Spark
        start copies its 56 MB of jars there, and a killed slot cannot delete them. Under
        /tmp every killed slot of every run left them behind (860 MB a suite run); here they go with
        the harness."""
        return self.workdir / "spark-local"

    def stop_all(self) -> None:
        for slot in self.slots:
            slot.kill()
        shutil.rmtree(self.spark_local, ignore_errors=True)


def register_catalog(spark: Any, lake: Any, mysql: Any) -> None:
    """Make ``lake``'s catalog (in ``mysql``'s database) known to a running Spark session.

    Catalogs are looked up by name when first used, so a test registers one of its own at run time;
    S3A reads the session's Hadoop configuration, set here too for ``s3a://`` warehouses.
    """
    from lagsched.adapters.sink import catalog_conf, jdbc_url

    conf = catalog_conf(
        lake,
        jdbc_url=jdbc_url(mysql.host, mysql.port, mysql.database, tls=mysql.tls),
        user=mysql.user,
        password=mysql.password,
    )
    for key, value in conf.items():
        if key.startswith(f"spark.sql.catalog.{lake.catalog}"):
            spark.conf.set(key, value)
        elif key.startswith("spark.hadoop."):
            spark._jsc.hadoopConfiguration().set(key.removeprefix("spark.hadoop."), value)


def offsets_by_topic(table: Any) -> dict[str, list[tuple[int, int]]]:
    """(partition, offset) pairs per topic, duplicates kept."""
    out: dict[str, list[tuple[int, int]]] = {}
    for t, p, o in zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                       table.column("offset").to_pylist(), strict=True):  # fmt: skip
        out.setdefault(str(t), []).append((int(p), int(o)))
    return out


def assert_exactly_once(table: Any, topic: str, latest: dict[int, int]) -> None:
    """Every offset ``[0, latest[p])`` of each partition is in ``table`` once, and nothing else."""
    seen = offsets_by_topic(table).get(topic, [])
    dupes = len(seen) - len(set(seen))
    expected = {(p, o) for p, end in latest.items() for o in range(end)}
    missing = expected - set(seen)
    extra = set(seen) - expected
    assert dupes == 0 and not missing and not extra, (
        f"{topic}: {dupes} duplicate(s), {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
        f"{len(extra)} unexpected (e.g. {sorted(extra)[:5]})"
    )


def latest_offsets(kafka_config: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(kafka_config)
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    return {tp.partition: f.result().offset for tp, f in admin.list_offsets(req, request_timeout=15).items()}


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.5) -> float:
    """Wait for ``predicate``; returns the seconds it took, or fails naming ``what``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - start


__all__: Sequence[str] = [
    "ConsumerHarness",
    "Slot",
    "assert_exactly_once",
    "latest_offsets",
    "offsets_by_topic",
    "produce",
    "register_catalog",
    "value_of",
    "wait_until",
]


@functools.cache  # the same for the whole session; every slot start asks for it
def class_archive_path() -> Path:
    """Where the slots' JVM class-data archive is kept: with the stack's data, where the stack's
    Airflow keeps its operator's (`lagsched.adapters.class_archive`), under a name of the JDK,
    pyspark and jars it holds classes of."""
    from lagsched.adapters.class_archive import archive_file, spark_java
    from lagsched.environment import lake_jars
    from lagsched_dev.stack.config import load

    directory = str(load().home / "spark-classes")
    java = spark_java(os.environ)
    jars = lake_jars()
    return Path(archive_file(directory, job=JOB.stem, java=java, jars=jars, spark_home=os.environ.get("SPARK_HOME")))


def record_class_archive(harness: ConsumerHarness, kafka_config: dict[str, Any], topic: str, path: Path) -> None:
    """Run one slot over `topic` (100 records) until idle, recording the classes it loaded into
    `path`; the JVM writes the archive to a file of its own, moved into place once complete."""
    produce(kafka_config, topic, 100)
    harness.register(topic)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    harness.record_classes_to = partial
    try:
        harness.run("class-archive", "--exit-when-idle", timeout=300)
        if partial.is_file():
            partial.replace(path)
        else:  # a JVM without class-data sharing: the slots start as they would without the archive
            warnings.warn(f"the slot's JVM wrote no class archive; log tail:\n{harness.slots[-1].tail()}", stacklevel=1)
    finally:
        partial.unlink(missing_ok=True)
