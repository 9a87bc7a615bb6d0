"""One table care run over a cluster's Iceberg table (docs/table-care.md), in a Spark session with the catalog.

In order: compact the small files of closed time partitions (``rewrite_data_files``), expire old
snapshots, delete orphan files, and rewrite the manifests when they pile up. Each step is Iceberg's
own (a commit of its own, so a reader sees the table before or after it, never between), logged
with its figures; `care_for_table` returns them all.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lagsched.core.lake import LakeTable
from lagsched.core.table_care import TableCareSettings, closed_before

__all__ = ["FileCensus", "care_for_table", "file_census"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FileCensus:
    """The live data files of the current snapshot, and how far closed partitions are from the target.

    Attributes:
        files: data files.
        bytes: their total size.
        median_file_bytes: the median size (0 when empty).
        max_files_per_partition: over closed partitions, files / ceil(partition bytes / target); 0 if none.
        closed_partitions: (topic, hour) partitions before the closed edge.
    """

    files: int
    bytes: int
    median_file_bytes: int
    max_files_per_partition: float
    closed_partitions: int
    per_partition: dict[str, int] = field(default_factory=dict)


def file_census(spark: Any, lake: LakeTable, target_bytes: int, closed_edge: datetime) -> FileCensus:
    """Count the table's data files (Iceberg's ``files`` metadata table) and judge its closed partitions."""
    # Identifiers only (validated names, `core.lake`); no value is spliced into the SQL.
    rows = spark.sql(
        f"SELECT partition.topic AS topic, partition.timestamp_hour AS hour, file_size_in_bytes AS size "  # noqa: S608
        f"FROM {lake.identifier}.files WHERE content = 0"
    ).collect()
    sizes = sorted(int(r["size"]) for r in rows)
    edge_hour = int(closed_edge.timestamp() // 3600)
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in rows:
        if r["hour"] is not None and int(r["hour"]) < edge_hour:
            groups[(str(r["topic"]), int(r["hour"]))].append(int(r["size"]))
    ratios = [len(s) / max(1, math.ceil(sum(s) / target_bytes)) for s in groups.values()]
    return FileCensus(
        files=len(sizes),
        bytes=sum(sizes),
        median_file_bytes=sizes[len(sizes) // 2] if sizes else 0,
        max_files_per_partition=round(max(ratios, default=0.0), 3),
        closed_partitions=len(groups),
        per_partition={f"{t}@{h}": len(s) for (t, h), s in sorted(groups.items())},
    )


def _sql_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def care_for_table(spark: Any, lake: LakeTable, settings: TableCareSettings, now: datetime) -> dict[str, Any]:
    """Run every step on ``lake``'s table as of ``now``; the figures of each (JSON-ready)."""
    table_arg = f"{lake.namespace}.{lake.table}"
    system = f"{lake.catalog}.system"
    edge = closed_before(now, settings.closed_after_minutes)
    target = settings.target_file_bytes
    out: dict[str, Any] = {"table": lake.identifier, "now": now.isoformat(), "closed_before": edge.isoformat()}

    before = file_census(spark, lake, target, edge)
    started = time.time()
    rewritten = spark.sql(
        f"CALL {system}.rewrite_data_files(table => '{table_arg}', "
        f"where => \"`timestamp` < TIMESTAMP '{_sql_time(edge)}'\", "
        f"options => map('target-file-size-bytes', '{target}', 'min-input-files', '2', "
        f"'partial-progress.enabled', 'true'))"
    ).collect()[0]
    finished = time.time()
    after = file_census(spark, lake, target, edge)
    out["compaction"] = {
        "files_before": before.files,
        "files_after": after.files,
        "rewritten_files": int(rewritten["rewritten_data_files_count"]),
        "added_files": int(rewritten["added_data_files_count"]),
        "median_file_bytes_after": after.median_file_bytes,
        "max_files_per_partition_after": after.max_files_per_partition,
        "closed_partitions": after.closed_partitions,
        "target_file_bytes": target,
        "started_unix": round(started, 3),
        "finished_unix": round(finished, 3),
        "seconds": round(finished - started, 3),
    }
    log.info("compacted %s: %s", lake.identifier, out["compaction"])

    expire_before = now - timedelta(hours=settings.snapshot_max_age_hours)
    expired = spark.sql(
        f"CALL {system}.expire_snapshots(table => '{table_arg}', "
        f"older_than => TIMESTAMP '{_sql_time(expire_before)}', retain_last => {settings.snapshots_to_keep})"
    ).collect()[0]
    snapshots_left = _count(spark, f"{lake.identifier}.snapshots")
    out["expire_snapshots"] = {
        "older_than": expire_before.isoformat(),
        "deleted_data_files": int(expired["deleted_data_files_count"]),
        "deleted_manifest_files": int(expired["deleted_manifest_files_count"]),
        "snapshots_left": int(snapshots_left),
    }
    log.info("expired snapshots of %s: %s", lake.identifier, out["expire_snapshots"])

    out["orphans"] = _delete_orphans(spark, lake, now - timedelta(hours=settings.orphan_min_age_hours))
    log.info("orphan files of %s: %s", lake.identifier, out["orphans"])

    manifests = _count(spark, f"{lake.identifier}.manifests")
    rewrote = manifests > settings.max_manifests
    if rewrote:
        spark.sql(f"CALL {system}.rewrite_manifests(table => '{table_arg}')").collect()
    manifests_after = _count(spark, f"{lake.identifier}.manifests")
    out["manifests"] = {"before": manifests, "after": manifests_after, "rewritten": rewrote}
    log.info("manifests of %s: %s", lake.identifier, out["manifests"])
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
