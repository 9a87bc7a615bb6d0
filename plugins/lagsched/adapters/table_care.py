"""One table care run over a cluster's Iceberg table (docs/table-care.md), in a Spark session with the catalog.

In order: compact the small files of closed time partitions (``rewrite_data_files``), expire old
snapshots, delete orphan files, and rewrite the manifests when they pile up. Each step is Iceberg's
own (a commit of its own, so a reader sees the table before or after it, never between), logged
with its figures; `care_for_table` returns them all.

Compaction is two passes over the closed hours (of each topic in the shared and the dead-letter
table; a typed table's hours hold one topic): Iceberg's bin-pack over the closed hours, then a whole rewrite of the few
closed partitions the bin-pack leaves above `MAX_FILES_PER_TARGET` files per file their bytes need
(a target-sized file next to a small late one: the bin-pack only picks files outside 0.75-1.8 x the
target, and only groups of two or more).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.sink import DEAD_LETTERS, SHARED, TYPED, TableShape
from lagsched.core.lake import LakeTable
from lagsched.core.names import validate_topic_name
from lagsched.core.table_care import (
    MAX_FILES_PER_TARGET,
    TableCareSettings,
    closed_before,
    files_per_target,
    orphan_cutoff,
    partitions_over,
)
from lagsched.core.times import Clock

__all__ = ["FileCensus", "care_for_table", "file_census"]

log = logging.getLogger(__name__)

#: Partitions rewritten whole per ``rewrite_data_files`` call in the second pass (bounds the filter's size).
_WHOLE_PER_CALL = 50
_HOUR_S = 3600


@dataclass(frozen=True, slots=True)
class FileCensus:
    """The live data files of the current snapshot, and how far closed partitions are from the target.

    Attributes:
        files: data files.
        bytes: their total size.
        median_file_bytes: the median size (0 when empty).
        max_files_per_partition: over closed partitions, files / ceil(partition bytes / target); 0 if none.
        closed_partitions: (topic, hour) partitions before the closed edge (a typed table's topic: "").
        closed: each closed partition's file sizes, by (topic, hour since the epoch).
    """

    files: int
    bytes: int
    median_file_bytes: int
    max_files_per_partition: float
    closed_partitions: int
    closed: Mapping[tuple[str, int], Sequence[int]] = field(default_factory=dict)


def file_census(
    spark: Any, lake: LakeTable, target_bytes: int, closed_edge: datetime, shape: TableShape = SHARED
) -> FileCensus:
    """Count the table's data files (Iceberg's ``files`` metadata table) and judge its closed partitions."""
    # Identifiers only (validated names, `core.lake`; the shape's column names); no value is spliced into the SQL.
    topic = f"partition.{shape.topic}" if shape.topic_partitioned else "''"
    rows = spark.sql(
        f"SELECT {topic} AS topic, partition.{shape.timestamp}_hour AS hour, file_size_in_bytes AS size "  # noqa: S608
        f"FROM {lake.identifier}.files WHERE content = 0"
    ).collect()
    sizes = sorted(int(r["size"]) for r in rows)
    edge_hour = int(closed_edge.timestamp() // _HOUR_S)
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in rows:
        if r["hour"] is not None and int(r["hour"]) < edge_hour:
            groups[(str(r["topic"]), int(r["hour"]))].append(int(r["size"]))
    return FileCensus(
        files=len(sizes),
        bytes=sum(sizes),
        median_file_bytes=sizes[len(sizes) // 2] if sizes else 0,
        max_files_per_partition=round(
            max((files_per_target(s, target_bytes) for s in groups.values()), default=0.0), 3
        ),
        closed_partitions=len(groups),
        closed=dict(sorted(groups.items())),
    )


def _sql_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _hour_condition(topic: str, hour: int, shape: TableShape) -> str:
    start = datetime.fromtimestamp(hour * _HOUR_S, UTC)
    at = f"`{shape.timestamp}`"
    hour_range = (
        f"{at} >= TIMESTAMP '{_sql_time(start)}' AND {at} < TIMESTAMP '{_sql_time(start + timedelta(hours=1))}'"
    )
    if not shape.topic_partitioned:
        return f"({hour_range})"
    return f"({shape.topic} = '{validate_topic_name(topic)}' AND {hour_range})"


def _rewrite(spark: Any, system: str, table_arg: str, where: str, target: int, *, whole: bool) -> dict[str, int]:
    """One ``rewrite_data_files`` call (bin-pack) over the files ``where`` selects; its counts.

    Options: ``target-file-size-bytes`` the settings' target; ``min-input-files`` 2, so any closed
    partition with two or more small files is merged (Iceberg's default, 5, would leave up to four);
    ``partial-progress.enabled`` commits file groups as they finish (a failure keeps the groups done,
    and each commit is small); ``rewrite-all`` only for ``whole`` (the second pass), which rewrites
    every selected file, target-sized ones too.
    """
    options = {"target-file-size-bytes": str(target), "min-input-files": "2", "partial-progress.enabled": "true"}
    if whole:
        options["rewrite-all"] = "true"
    pairs = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
    row = spark.sql(
        f"CALL {system}.rewrite_data_files(table => '{table_arg}', where => \"{where}\", options => map({pairs}))"
    ).collect()[0]
    return {
        "rewritten_files": int(row["rewritten_data_files_count"]),
        "added_files": int(row["added_data_files_count"]),
        "rewritten_bytes": int(row["rewritten_bytes_count"]),
    }


def _partition_name(topic: str, hour: int) -> str:
    """``topic@2026-06-01T13``; a typed table's hours (no topic): ``2026-06-01T13``."""
    name = f"{datetime.fromtimestamp(hour * _HOUR_S, UTC):%Y-%m-%dT%H}"
    return f"{topic}@{name}" if topic else name


def _compact(
    spark: Any, lake: LakeTable, target: int, edge: datetime, *, clock: Clock, shape: TableShape
) -> dict[str, Any]:
    """Bin-pack the closed partitions, then rewrite whole the ones still above `MAX_FILES_PER_TARGET`."""
    table_arg, system = f"{lake.namespace}.{lake.table}", f"{lake.catalog}.system"
    before = file_census(spark, lake, target, edge, shape)
    started, began = clock.now().timestamp(), clock.monotonic()
    closed = f"`{shape.timestamp}` < TIMESTAMP '{_sql_time(edge)}'"
    done = _rewrite(spark, system, table_arg, closed, target, whole=False)
    packed = file_census(spark, lake, target, edge, shape)
    left = partitions_over(packed.closed, target)
    for i in range(0, len(left), _WHOLE_PER_CALL):
        where = " OR ".join(_hour_condition(t, h, shape) for t, h in left[i : i + _WHOLE_PER_CALL])
        for key, value in _rewrite(spark, system, table_arg, where, target, whole=True).items():
            done[key] += value
    seconds = clock.monotonic() - began
    finished = clock.now().timestamp()
    after = file_census(spark, lake, target, edge, shape) if left else packed
    return {
        "files_before": before.files,
        "files_after": after.files,
        "bytes_before": before.bytes,
        "bytes_after": after.bytes,
        **done,
        "rewritten_whole": [_partition_name(t, h) for t, h in left],
        "median_file_bytes_before": before.median_file_bytes,
        "median_file_bytes_after": after.median_file_bytes,
        "max_files_per_partition_before": before.max_files_per_partition,
        "max_files_per_partition_after": after.max_files_per_partition,
        "closed_partitions": after.closed_partitions,
        "target_file_bytes": target,
        "started_unix": round(started, 3),
        "finished_unix": round(finished, 3),
        "seconds": round(seconds, 3),
    }


def care_for_table(
    spark: Any,
    lake: LakeTable,
    settings: TableCareSettings,
    now: datetime,
    *,
    clock: Clock = SYSTEM_CLOCK,
    shape: TableShape = SHARED,
) -> dict[str, Any]:
    """Run every step on ``lake``'s table as of ``now``; the figures of each (JSON-ready).

    ``shape``: the table's columns and partitions (a typed table's hours hold one topic, its
    timestamp is ``_kafka_timestamp``); the compaction works on its closed hours.

    ``clock`` gives the real time, which bounds the orphans' age whatever ``now`` says (`orphan_cutoff`),
    and times the compaction.
    A table no slot has written yet (a new cluster, a new deployment's first hourly run) has nothing
    to care for: the result says ``skipped`` and why, and nothing is created.
    """
    table_arg = f"{lake.namespace}.{lake.table}"
    system = f"{lake.catalog}.system"
    edge = closed_before(now, settings.closed_after_minutes)
    out: dict[str, Any] = {"table": lake.identifier, "now": now.isoformat(), "closed_before": edge.isoformat()}
    if not spark.catalog.tableExists(lake.identifier):
        log.info("%s does not exist yet (no slot has written to it): nothing to care for", lake.identifier)
        return {**out, "skipped": "the table does not exist yet: no slot has written to it"}

    out["compaction"] = _compact(spark, lake, settings.target_file_bytes, edge, clock=clock, shape=shape)
    log.info("compacted %s: %s", lake.identifier, out["compaction"])
    if out["compaction"]["max_files_per_partition_after"] > MAX_FILES_PER_TARGET:
        # Slots committed late records into a closed hour during the run: the next run merges them.
        log.warning(
            "%s: a closed partition is still above %s files per target file", lake.identifier, MAX_FILES_PER_TARGET
        )

    began = clock.monotonic()
    snapshots_before = _count(spark, f"{lake.identifier}.snapshots")
    expire_before = now - timedelta(hours=settings.snapshot_max_age_hours)
    expired = spark.sql(
        f"CALL {system}.expire_snapshots(table => '{table_arg}', "
        f"older_than => TIMESTAMP '{_sql_time(expire_before)}', retain_last => {settings.snapshots_to_keep})"
    ).collect()[0]
    out["expire_snapshots"] = {
        "older_than": expire_before.isoformat(),
        "snapshots_before": snapshots_before,
        "snapshots_left": _count(spark, f"{lake.identifier}.snapshots"),
        "deleted_data_files": int(expired["deleted_data_files_count"]),
        "deleted_manifest_files": int(expired["deleted_manifest_files_count"]),
        "deleted_manifest_lists": int(expired["deleted_manifest_lists_count"]),
        "seconds": round(clock.monotonic() - began, 3),
    }
    log.info("expired snapshots of %s: %s", lake.identifier, out["expire_snapshots"])

    began = clock.monotonic()
    out["orphans"] = _delete_orphans(spark, lake, orphan_cutoff(now, clock.now(), settings.orphan_min_age_hours))
    out["orphans"]["seconds"] = round(clock.monotonic() - began, 3)
    log.info("orphan files of %s: %s", lake.identifier, out["orphans"])

    began = clock.monotonic()
    manifests = _count(spark, f"{lake.identifier}.manifests")
    rewrote = manifests > settings.max_manifests
    if rewrote:
        spark.sql(f"CALL {system}.rewrite_manifests(table => '{table_arg}')").collect()
    out["manifests"] = {
        "before": manifests,
        "after": _count(spark, f"{lake.identifier}.manifests") if rewrote else manifests,
        "rewritten": rewrote,
        "seconds": round(clock.monotonic() - began, 3),
    }
    log.info("manifests of %s: %s", lake.identifier, out["manifests"])
    return out


def cluster_tables(spark: Any, lake: LakeTable, cluster: str) -> list[tuple[LakeTable, TableShape]]:
    """The cluster's other tables, each with its shape: its dead-letter table (laid out as the
    shared table) and the typed tables its slots created (table property ``lagsched.cluster``)."""
    from lagsched.adapters.lake_sink import CLUSTER_PROPERTY, dead_letter_table

    def table(identifier: str) -> LakeTable:
        _catalog, namespace, name = identifier.split(".")
        return replace(lake, namespace=namespace, table=name)

    out = [(table(dead_letter_table(lake)), DEAD_LETTERS)]
    for ns_row in spark.sql(f"SHOW NAMESPACES IN {lake.catalog}").collect():
        namespace = str(ns_row[0])
        for row in spark.sql(f"SHOW TABLES IN {lake.catalog}.{namespace}").collect():
            identifier = f"{lake.catalog}.{namespace}.{row['tableName']}"
            if identifier in (lake.identifier, dead_letter_table(lake)):
                continue
            try:
                props = {str(r[0]): str(r[1]) for r in spark.sql(f"SHOW TBLPROPERTIES {identifier}").collect()}
            except Exception as exc:  # noqa: BLE001 - another table's broken metadata must not stop this care
                # e.g. a table whose metadata file was deleted behind the catalog's back: nothing
                # can be done to it here, and it must not keep the cluster's own tables from care.
                log.warning("%s cannot be read (%s); it is skipped", identifier, str(exc).splitlines()[0][:300])
                continue
            if props.get(CLUSTER_PROPERTY) == cluster:
                out.append((table(identifier), TYPED))
    return out


def _count(spark: Any, metadata_table: str) -> int:
    return int(spark.table(metadata_table).count())


def _delete_orphans(spark: Any, lake: LakeTable, older_than: datetime) -> dict[str, Any]:
    """Files under the table's location that no kept snapshot references and older than ``older_than``.

    Through Iceberg's action rather than the ``remove_orphan_files`` procedure: the procedure refuses
    an age under 24 hours outright, the action takes the bound the settings give (at least an hour,
    `lagsched.core.table_care`), which a test can also move with ``now``.
    """
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, lake.identifier)
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
    result = actions.deleteOrphanFiles(table).olderThan(int(older_than.timestamp() * 1000)).execute()
    deleted = [str(p) for p in result.orphanFileLocations()]
    return {"older_than": older_than.isoformat(), "deleted": len(deleted), "examples": deleted[:3]}
