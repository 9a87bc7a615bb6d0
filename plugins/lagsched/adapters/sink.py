"""Write one batch of Kafka records into the cluster's Apache Iceberg table, exactly once (docs/lake.md).

A batch lands in one Iceberg commit (one snapshot) that also records its offset ranges in the
snapshot summary (``lagsched.ranges``). The commit is **conditional**: it fails if any data file
holding records of the same ranges was committed since the mark taken before the ranges were
recorded in MySQL (``IcebergSink.mark``, before ``begin_batch``). Iceberg checks that inside its
own compare-and-swap of the table's metadata, on every retry, so two holders of one range (a stale
holder that woke up, two slots redoing the same recorded batch) can never both land it, whatever
the timing. A redo first looks whether the range is already in the table as of the mark (its
holder died between the table commit and the MySQL commit) and then only commits the offset.

How the data files are written without committing them: Spark tasks read the ranges with
confluent-kafka and write Parquet files with pyarrow in the table's schema (`adapters.range_files`),
returning only the files they wrote. The driver builds Iceberg data files from their Parquet footers
(Iceberg's own metrics) and commits them with Iceberg's ``OverwriteFiles`` API (adding files only,
so the snapshot's operation is ``append``) with the conflict check above. Files of a failed commit
are deleted at once; files of a crashed process are orphans, removed by the table care.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.data_files import HOUR_US, FileSettings, WrittenFile, delete_written
from lagsched.adapters.late_records import LateRecords
from lagsched.adapters.transactions import transaction
from lagsched.core.errors import LagschedError
from lagsched.core.lake import RANGES_PROPERTY, TABLE_PROPERTIES, LakeTable, encode_ranges
from lagsched.core.times import Clock

__all__ = [
    "DEAD_LETTERS",
    "KEY_SCHEMA_IDS_PROPERTY",
    "NAME_MAPPING",
    "SCHEMA_IDS_PROPERTY",
    "SHARED",
    "TYPED",
    "BatchRead",
    "IcebergSink",
    "SinkConflictError",
    "TableCommit",
    "TableShape",
    "catalog_conf",
    "ensure_table",
]

log = logging.getLogger(__name__)

#: The table's columns, in order (docs/lake.md).
COLUMNS_DDL = (
    "topic STRING NOT NULL, `partition` INT NOT NULL, `offset` BIGINT NOT NULL, `timestamp` TIMESTAMP, "
    "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)
PARTITIONING = "topic, hours(`timestamp`)"
#: Snapshot summary key naming the batch (a UUID) that committed it.
BATCH_PROPERTY = "lagsched.batch"
#: Snapshot summary key of a typed table's commit: its rows per writer schema id (``{"12": 900}``; -1: tombstones).
SCHEMA_IDS_PROPERTY = "lagsched.schema-ids"
#: The same for the key writer schemas, where the route decodes keys (``avro``, ``json_schema``, ``json``).
KEY_SCHEMA_IDS_PROPERTY = "lagsched.key-schema-ids"


@dataclass(frozen=True, slots=True)
class TableShape:
    """What a lagsched table's columns and partitions are called: the shared table's (`SHARED`),
    the dead-letter table's (`DEAD_LETTERS`, the same names) or a typed table's (`TYPED`, the
    Kafka columns with a ``_`` before them, partitioned by hour only: it holds one topic).

    ``name_mapped``: its files carry no Parquet field ids; the table reads them through its name
    mapping (`lagsched.core.iceberg_types.name_mapping`)."""

    topic: str = "topic"
    partition: str = "partition"
    offset: str = "offset"
    timestamp: str = "timestamp"
    topic_partitioned: bool = True
    name_mapped: bool = False

    @property
    def spec(self) -> list[tuple[str, str]]:
        """The partition fields (source column, transform) lagsched creates the table with."""
        hour = [(self.timestamp, "hour")]
        return [(self.topic, "identity"), *hour] if self.topic_partitioned else hour


SHARED = TableShape()
DEAD_LETTERS = TableShape(name_mapped=True)
TYPED = TableShape(
    "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", topic_partitioned=False, name_mapped=True
)
#: The table property holding a table's name mapping (Iceberg's).
NAME_MAPPING = "schema.name-mapping.default"


@dataclass(frozen=True, slots=True)
class BatchRead:
    """One partition's part of a batch: read ``[read_start, batch[1])``; ``batch`` is the recorded range.

    ``redo``: the range was recorded by an earlier holder (or run) and may already be in the table.
    """

    topic: str
    partition: int
    batch: tuple[int, int]
    read_start: int
    redo: bool = False


@dataclass(frozen=True, slots=True)
class TableCommit:
    """One batch's table commit: its snapshot, files, rows and how long it took (footers included);
    ``late``: its late records per (topic, partition), to log with the offsets (docs/completeness.md)."""

    snapshot_id: int | None
    files: int
    records: int
    seconds: float
    late: Mapping[tuple[str, int], tuple[LateRecords, ...]] = field(default_factory=dict)


class SinkConflictError(LagschedError):
    """The table already received records of these ranges since the batch was recorded: another holder
    committed them (this one was stale, or two redid the same range). Nothing of this batch was committed."""

    def __init__(self, message: str, ranges: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        super().__init__(message)
        self.ranges = dict(ranges)


def catalog_conf(lake: LakeTable, *, jdbc_url: str, user: str, password: str) -> dict[str, str]:
    """Spark settings for the lake's Iceberg JDBC catalog (in the lagsched MySQL database).

    The password goes into the session's conf, never onto a command line; Spark redacts conf keys
    matching ``password`` in its UI and event logs. The table cache is off: a slot must see the
    snapshots other slots commit (its redo check reads the table as of a snapshot id).
    """
    prefix = f"spark.sql.catalog.{lake.catalog}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": jdbc_url,
        f"{prefix}.jdbc.user": user,
        f"{prefix}.jdbc.password": password,
        # V1 has the iceberg_type column (views); MySQL key lengths fixed upstream (apache/iceberg#6338).
        f"{prefix}.jdbc.schema-version": "V1",
        f"{prefix}.warehouse": lake.warehouse,
        f"{prefix}.cache-enabled": "false",
    }
    if lake.scheme == "s3a":
        from lagsched.adapters.s3a import s3a_spark_conf

        conf.update(s3a_spark_conf(lake.s3_endpoint))
    return conf


# Iceberg's JDBC catalog tables in their V1 form (JdbcUtil, Iceberg 1.10). The catalog creates them
# itself, V0 first and then ALTERs in the V1 column; two slots starting at once on a fresh database
# both ALTER and one fails ("Duplicate column name 'iceberg_type'"). Created here first, race-free.
_CATALOG_TABLES = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables ("
    " catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL,"
    " table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000),"
    " previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5),"
    " PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties ("
    " catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL,"
    " property_key VARCHAR(255), property_value VARCHAR(1000),"
    " PRIMARY KEY (catalog_name, namespace, property_key))",
)
_DUPLICATE_COLUMN = 1060


def ensure_catalog_tables(conn: Any) -> None:
    """Create the JDBC catalog's tables (V1) if missing, before any Spark session opens the catalog.

    A V0 table of an older deployment gets the V1 column; another process adding it at the same
    moment is fine (MySQL's duplicate-column error is the race lost, not a failure).
    """
    import pymysql

    with transaction(conn) as cur:
        for ddl in _CATALOG_TABLES:
            cur.execute(ddl)
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.columns"
            " WHERE table_schema = DATABASE() AND table_name = 'iceberg_tables' AND column_name = 'iceberg_type'"
        )
        (has_type,) = cur.fetchone() or (0,)  # COUNT(*) always has its row
        if not has_type:
            try:
                cur.execute("ALTER TABLE iceberg_tables ADD COLUMN iceberg_type VARCHAR(5)")
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != _DUPLICATE_COLUMN:
                    raise


def jdbc_url(host: str, port: int, database: str, *, tls: Iterable[tuple[str, str | bool]] = ()) -> str:
    """The catalog's JDBC URL (MariaDB's driver speaks to MySQL 8 as well).

    ``nullDatabaseMeansCurrent``: the catalog looks for its tables with a null database in JDBC's
    metadata calls, which would otherwise find ``iceberg_tables`` of *any* database on the server,
    skip creating them in this one and then fail to read them.

    ``tls``: the MySQL Connection's ``ssl`` extra (`lagsched.connections.MySQLParams.tls`). The
    driver then checks the server's certificate against ``ca`` (``sslMode=verify-ca``, or
    ``verify-full`` with ``check_hostname``). It cannot present a PEM client certificate: a
    server that requires one (``REQUIRE X509``) refuses the catalog's connections.
    """
    url = f"jdbc:mariadb://{host}:{port}/{database}?nullDatabaseMeansCurrent=true"
    options = dict(tls)
    if options:
        mode = "verify-full" if options.get("check_hostname") else "verify-ca"
        url += f"&sslMode={mode}&serverSslCert={quote(str(options['ca']), safe='/')}"
    return url


def ensure_table(spark: SparkSession, lake: LakeTable) -> None:
    """Create the namespace and the table if they do not exist.

    Several slots starting at once race on both: Iceberg checks for existence and then inserts, so
    the loser's insert fails, and how it fails depends on the catalog and the JDBC driver (a named
    AlreadyExists, or a bare duplicate-key SQL error). So a failed create is judged by looking
    again: if the object exists now, another slot made it and all is well.
    """
    namespace = f"{lake.catalog}.{lake.namespace}"
    props = ", ".join(f"'{k}'='{v}'" for k, v in TABLE_PROPERTIES.items())
    steps = (
        (f"CREATE NAMESPACE IF NOT EXISTS {namespace}", f"DESCRIBE NAMESPACE {namespace}"),
        (
            f"CREATE TABLE IF NOT EXISTS {lake.identifier} ({COLUMNS_DDL}) USING iceberg "
            f"PARTITIONED BY ({PARTITIONING}) TBLPROPERTIES ({props})",
            f"DESCRIBE TABLE {lake.identifier}",
        ),
    )
    for create, look in steps:
        try:
            spark.sql(create)
        except Exception as exc:  # noqa: BLE001 - any failure: the look below decides
            try:
                spark.sql(look).collect()
            except Exception:  # noqa: BLE001 - not there: the create's own error is the one to see
                raise exc from None
            log.info("lost the race to create it; another slot did: %s", create.split(" (")[0])


class _JavaClasses:
    """The JVM classes a commit uses, looked up once: each step of ``jvm.org.apache...`` is a round
    trip to the JVM (~0.2 ms), a call on a held class one (~0.06 ms)."""

    def __init__(self, jvm: Any) -> None:
        parquet = jvm.org.apache.iceberg.shaded.org.apache.parquet
        self.HadoopReadOptions = parquet.HadoopReadOptions
        self.ParquetFileReader = parquet.hadoop.ParquetFileReader
        self.HadoopInputFile = parquet.hadoop.util.HadoopInputFile
        self.Path = jvm.org.apache.hadoop.fs.Path
        self.FileStatus = jvm.org.apache.hadoop.fs.FileStatus
        self.ParquetUtil = jvm.org.apache.iceberg.parquet.ParquetUtil
        self.MetricsConfig = jvm.org.apache.iceberg.MetricsConfig
        self.PartitionData = jvm.org.apache.iceberg.PartitionData
        self.DataFiles = jvm.org.apache.iceberg.DataFiles
        self.Stream = jvm.java.util.stream.Stream
        self.Integer = jvm.java.lang.Integer


class IcebergSink:
    """The committer: the table's side of a slot's batches (see the module doc), in one Spark session.

    ``mark`` before the batch's ranges are recorded; ``present`` for redone ranges; the tasks write
    the files (`adapters.range_files.RangeWriter`, in `file_settings`' layout); ``commit`` lands them.
    """

    def __init__(
        self,
        spark: SparkSession,
        lake: LakeTable,
        *,
        properties: Mapping[str, str] | None = None,
        identifier: str | None = None,
        shape: TableShape = SHARED,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``identifier``: a typed or the dead-letter table (``shape``), which `adapters.lake_sink`
        creates; None: the cluster's shared table, created here if missing. ``clock`` times each
        commit (`TableCommit.seconds`): the slot's own."""
        self._spark, self._lake, self._clock = spark, lake, clock
        self.identifier = identifier or lake.identifier
        self.shape = shape
        #: Extra snapshot summary entries of every commit (the slot and cluster).
        self._properties = dict(properties or {})
        jvm: Any = spark._jvm
        self._jvm = jvm
        self._expressions = jvm.org.apache.iceberg.expressions.Expressions
        self._java = _JavaClasses(jvm)
        self._read_options: Any = None
        self._spec_checked: int | None = None
        self._loaded: Any = None
        self._mapping: tuple[str, Any] | None = None
        if identifier is None:
            ensure_table(spark, lake)

    @property
    def lake(self) -> LakeTable:
        return self._lake

    def _table(self) -> Any:
        """The table as the catalog has it now.

        Loaded once, then refreshed: a refresh reads the metadata location from the catalog's row
        and parses the metadata file only when it moved (another slot's commit). Loading it anew
        parsed the whole metadata file (every snapshot since the last expiry) each time, three
        times a batch.
        """
        if self._loaded is None:
            self._loaded = self._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                self._spark._jsparkSession, self.identifier
            )
        self._loaded.refresh()
        return self._loaded

    def loaded(self) -> Any:
        """The table as this sink last loaded or refreshed it (loaded now if never)."""
        return self._loaded if self._loaded is not None else self._table()

    def place(self) -> tuple[str, dict[str, str]]:
        """The table's location and properties, as of this sink's last look at it."""
        table = self.loaded()
        return str(table.location()), dict(table.properties())

    def mark(self) -> int | None:
        """The table's current snapshot id (None while empty): take it before ``begin_batch``."""
        snapshot = self._table().currentSnapshot()
        return None if snapshot is None else int(snapshot.snapshotId())

    def present(self, reads: Sequence[BatchRead], since: int | None) -> frozenset[tuple[str, int]]:
        """Which of the recorded ranges the table holds records of as of snapshot ``since``: a redo
        of those commits only its offset (the earlier holder landed it, then died)."""
        if since is None or not reads:
            return frozenset()
        shape = self.shape
        table = self._spark.read.option("snapshot-id", str(since)).table(self.identifier)
        found = table.where(_any_of(_range_condition(r, shape) for r in reads)).groupBy(shape.topic, shape.partition)
        return frozenset((str(row[0]), int(row[1])) for row in found.count().collect())

    def file_settings(self) -> FileSettings:
        """How the tasks write this table's data files: its location, schema and write properties as of
        this slot's last look at the table (its mark or commit). Not refreshed for each batch: with
        several slots on one table each refresh finds another slot's commit and parses the whole
        metadata file (0.2 s at 13 MB, bench/results/commit_scale.json), and the write properties
        rarely change; a change reaches the batches written after the next commit."""
        table = self.loaded()
        return FileSettings.of(
            str(table.location()),
            str(self._jvm.org.apache.iceberg.SchemaParser.toJson(table.schema())),
            dict(table.properties()),
            s3_endpoint=self._lake.s3_endpoint,
        )

    def commit(
        self,
        written: Sequence[WrittenFile],
        ranges: Mapping[tuple[str, int], tuple[int, int]],
        since: int | None,
        *,
        summary: Mapping[str, str] | None = None,
    ) -> TableCommit:
        """Commit ``written`` in one snapshot that records ``ranges``, unless another holder committed
        records of those ranges since snapshot ``since`` (docs/lake.md, "Exactly once").

        ``summary``: more snapshot summary entries of this commit (a typed table's writer schemas).

        Raises:
            SinkConflictError: another holder did; nothing was committed and the files are deleted.
            Anything else (the catalog unreachable): the commit's outcome is unknown; the files stay
            (an orphan for the table care, or committed), and the redo's check decides.
        """
        started = self._clock.monotonic()
        table = self._table()
        try:
            files = self._data_files(table, written)
        except BaseException:
            self.delete(f.location for f in written)
            raise
        snapshot_id = self._commit(
            table, files, ranges, since, batch_id=f"lagsched-{uuid.uuid4().hex}", summary=summary or {}
        )
        seconds = self._clock.monotonic() - started
        return TableCommit(snapshot_id, len(files), sum(f.records for f in written), seconds)

    def _data_files(self, table: Any, written: Sequence[WrittenFile]) -> list[Any]:
        """Iceberg ``DataFile``s of the written files, their metrics (bounds, counts, sizes) from
        their Parquet footers as Iceberg computes them for its own writers.

        The footers are read through parquet's reader with options built once: Iceberg's
        ``ParquetUtil.fileMetrics`` builds a fresh Hadoop configuration per file (parsing
        core-default.xml again), 10-17 ms a file here, against ~2 ms this way.
        """
        j = self._java
        spec = table.spec()
        if self._spec_checked != spec.specId():
            _check_spec(spec, table.schema(), self._jvm, self.shape)
            self._spec_checked = spec.specId()
        mapping = self._name_mapping(table) if self.shape.name_mapped else None
        conf = self._spark._jsc.hadoopConfiguration()
        if self._read_options is None:
            self._read_options = j.HadoopReadOptions.builder(conf).build()
        options = self._read_options
        metrics_config = j.MetricsConfig.forTable(table)
        partition_type = spec.partitionType()
        files = []
        for f in written:
            status = j.FileStatus(f.size_bytes, False, 1, 0, 0, j.Path(f.location))
            reader = j.ParquetFileReader.open(j.HadoopInputFile.fromStatus(status, conf), options)
            try:
                footer = reader.getFooter()
            finally:
                reader.close()
            metrics = (
                j.ParquetUtil.footerMetrics(footer, j.Stream.empty(), metrics_config)
                if mapping is None
                else j.ParquetUtil.footerMetrics(footer, j.Stream.empty(), metrics_config, mapping)
            )
            if int(metrics.recordCount()) != f.records:
                raise LagschedError(
                    f"{f.location}: its footer says {metrics.recordCount()} records, the task wrote {f.records}"
                )
            partition = j.PartitionData(partition_type)
            if self.shape.topic_partitioned:
                partition.set(0, f.topic)
            partition.set(1 if self.shape.topic_partitioned else 0, j.Integer(f.hour))
            files.append(
                j.DataFiles.builder(spec)
                .withPath(f.location)
                .withFileSizeInBytes(f.size_bytes)
                .withFormat("PARQUET")
                .withPartition(partition)
                .withMetrics(metrics)
                .build()
            )
        return files

    def _name_mapping(self, table: Any) -> Any:
        """The table's name mapping (parsed once per value): how its files' columns are its fields."""
        text = str(table.properties().get(NAME_MAPPING) or "")
        if not text:
            raise LagschedError(
                f"{self.identifier} has no {NAME_MAPPING}: its files, without field ids, cannot be read"
            )
        if self._mapping is None or self._mapping[0] != text:
            self._mapping = (text, self._jvm.org.apache.iceberg.mapping.NameMappingParser.fromJson(text))
        return self._mapping[1]

    def delete(self, locations: Iterable[str]) -> None:
        """Delete data files that will never be committed (a batch voided before its commit), as
        the tasks that wrote them do (`data_files.delete_written`); one that cannot be deleted is an
        orphan the table care removes."""
        delete_written(locations, self._lake.s3_endpoint)

    def _commit(
        self,
        table: Any,
        files: Sequence[Any],
        ranges: Mapping[tuple[str, int], tuple[int, int]],
        since: int | None,
        *,
        batch_id: str,
        summary: Mapping[str, str],
    ) -> int | None:
        update = table.newOverwrite()
        for f in files:
            update.addFile(f)
        if since is not None:
            update.validateFromSnapshot(since)
        update.conflictDetectionFilter(self._ranges_filter(ranges)).validateNoConflictingData()
        update.set(RANGES_PROPERTY, encode_ranges(ranges))
        update.set(BATCH_PROPERTY, batch_id)
        for key, value in {**self._properties, **summary}.items():
            update.set(key, value)
        try:
            update.commit()
        except Exception as exc:
            if "ValidationException" not in str(exc):
                raise  # files of an unknown commit state stay: the table care removes orphans
            io = table.io()
            for f in files:
                io.deleteFile(f.location())
            raise SinkConflictError(
                f"{self.identifier}: records of this batch's ranges were committed by another holder "
                f"since snapshot {since}; nothing of this batch was committed",
                ranges,
            ) from None
        finally:
            # The update holds the table's whole metadata as of its commit (~3.4 KB of heap a snapshot),
            # and py4j keeps it alive until its Python proxy is collected, which a reference cycle in
            # py4j puts off to Python's cycle collector: dozens of copies were seen alive at once in
            # the commit benchmark (bench/results/commit_scale.json). Released here, once it is done.
            update._detach()
        return _snapshot_of(table, batch_id)

    def _ranges_filter(self, ranges: Mapping[tuple[str, int], tuple[int, int]]) -> Any:
        e, shape = self._expressions, self.shape
        both = getattr(e, "and")
        either = getattr(e, "or")
        out = None
        for (topic, partition), (start, end) in sorted(ranges.items()):
            one = both(
                e.equal(shape.topic, topic),
                both(
                    e.equal(shape.partition, partition),
                    both(e.greaterThanOrEqual(shape.offset, start), e.lessThan(shape.offset, end)),
                ),
            )
            out = one if out is None else either(out, one)
        return out


def _range_condition(read: BatchRead, shape: TableShape = SHARED) -> Column:
    start, end = read.batch
    return (
        (F.col(shape.topic) == F.lit(read.topic))
        & (F.col(shape.partition) == F.lit(read.partition))
        & (F.col(shape.offset) >= F.lit(start))
        & (F.col(shape.offset) < F.lit(end))
    )


def _any_of(conditions: Iterable[Column]) -> Column:
    out: Column | None = None
    for c in conditions:
        out = c if out is None else (out | c)
    return out if out is not None else F.lit(False)


def _check_spec(spec: Any, schema: Any, jvm: Any, shape: TableShape = SHARED) -> None:
    """The table is partitioned as lagsched creates it (`TableShape.spec`: ``topic`` (identity), then
    ``hours(timestamp)``), and Iceberg's hour transform is what the tasks compute
    (`adapters.range_files`: floor division of the microseconds, before the epoch too)."""
    fields = [(str(schema.findColumnName(f.sourceId())), str(f.transform())) for f in _iterate(spec.fields())]
    if fields != shape.spec:
        raise LagschedError(
            f"the table is partitioned by {fields}, not by {shape.spec} as lagsched creates it; "
            "point the cluster's sink at a table lagsched created"
        )
    hour_field = spec.fields().get(len(fields) - 1)
    to_hour = hour_field.transform().bind(schema.findField(hour_field.sourceId()).type())
    for micros in (0, 1, -1, HOUR_US - 1, HOUR_US, -HOUR_US, -HOUR_US - 1, 1_780_000_000_000_000):
        if int(to_hour.apply(jvm.java.lang.Long(micros))) != micros // HOUR_US:
            raise LagschedError(f"Iceberg's hour of {micros} us is {to_hour.apply(micros)}, not {micros // HOUR_US}")


def _iterate(java_collection: Any) -> Iterable[Any]:
    it = java_collection.iterator()
    while it.hasNext():
        yield it.next()


def _snapshot_of(table: Any, batch_id: str, look_back: int = 100) -> int | None:
    """The id of the snapshot whose summary names ``batch_id``: ours, or one of the next few others
    committed right after it (slots commit concurrently)."""
    table.refresh()
    snapshot = table.currentSnapshot()
    for _ in range(look_back):
        if snapshot is None:
            return None
        if snapshot.summary().get(BATCH_PROPERTY) == batch_id:
            return int(snapshot.snapshotId())
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    return None
