"""The hourly announcements of each table (docs/completeness.md): which tables, and whether an hour is done.

`list_hour_tables` finds, per cluster, the tables whose hours are announced (the registry's topics
through the cluster's routes; only tables that exist). `check_hour` reads a table's watermark from
MySQL and, once the hour is complete, what the hour holds from the table's metadata. The Airflow
task (`lagsched.airflow.hour_tasks`) turns a complete hour into the table asset's event.
`restatements` finds the hours that late records landed in during an interval: each table's
restatement event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lagsched.adapters.lake_hours import HourStats, hour_stats
from lagsched.adapters.late_records import late_hours
from lagsched.adapters.topics import load_topics
from lagsched.adapters.watermarks import topic_watermarks
from lagsched.core.clusters import ClusterConfig
from lagsched.core.completeness import HOUR_MS, HourTable, hour_complete, hour_key, least_watermark
from lagsched.core.hour_tables import hour_tables
from lagsched.core.lake import LakeTable

__all__ = ["HourCheck", "Restatement", "check_hour", "list_hour_tables", "restatements"]


def list_hour_tables(
    clusters: Sequence[ClusterConfig], *, conn: Any, exists: Callable[[ClusterConfig, str], bool]
) -> list[HourTable]:
    """Every table of ``clusters`` whose hours are announced; ``exists(cluster, "namespace.table")``
    says whether the table was created (a typed table is, on its topic's first records)."""
    out: list[HourTable] = []
    for cluster in clusters:
        lake = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse="")
        rows = load_topics(conn, cluster.name)
        names = [t.name for t in rows]
        for table in hour_tables(
            cluster.name,
            catalog=lake.catalog,
            namespace=lake.namespace,
            shared_table=lake.table,
            routed=cluster.routes_for(names),
            allowed_lateness_s=cluster.allowed_lateness_s,
            log_append_time={t.name for t in rows if t.log_append_time},
        ):
            if exists(cluster, f"{table.namespace}.{table.table}"):
                out.append(table)
    return out


@dataclass(frozen=True, slots=True)
class HourCheck:
    """Where a table stands for one hour.

    Attributes:
        complete: the watermark is past the hour's end plus the allowed lateness.
        watermark_ms: the table's watermark (None: some partition is known by neither rule).
        needed_ms: the watermark the hour waits for.
        stats: the hour's rows and offsets (only when complete).
    """

    table: HourTable
    hour_start_ms: int
    complete: bool
    watermark_ms: int | None
    needed_ms: int
    stats: HourStats | None = None

    def event_extra(self) -> dict[str, Any]:
        """The asset event's extra (docs/completeness.md lists the fields)."""
        assert self.stats is not None and self.watermark_ms is not None
        return {
            "table": self.table.identifier,
            "cluster": self.table.cluster,
            "hour": hour_key(self.hour_start_ms),
            "snapshot_id": self.stats.snapshot_id,
            "rows": self.stats.rows,
            "offsets": self.stats.offsets,
            "watermark_ms": self.watermark_ms,
            "valid_through": _iso(self.watermark_ms),
            "allowed_lateness_s": self.table.allowed_lateness_s,
            "restated": False,
        }

    def describe(self) -> str:
        hour = hour_key(self.hour_start_ms)
        if self.complete:
            return f"{self.table.identifier} {hour}: complete, {self.stats.rows if self.stats else 0} row(s)"
        seen = (
            "unknown (a partition not yet committed or measured)"
            if self.watermark_ms is None
            else _iso(self.watermark_ms)
        )
        return (
            f"{self.table.identifier} {hour}: waiting for the watermark to reach {_iso(self.needed_ms)}; it is {seen}"
        )


def check_hour(table: HourTable, hour_start_ms: int, *, conn: Any, load_table: Callable[[HourTable], Any]) -> HourCheck:
    """Whether the hour is complete for ``table`` and, if so, what it holds (``load_table`` gives the
    pyiceberg table, read only then)."""
    lateness_ms = table.allowed_lateness_s * 1000
    needed = hour_start_ms + HOUR_MS + lateness_ms
    marks = topic_watermarks(conn, table.cluster, table.topics)
    watermark = least_watermark(marks.get(t) for t in table.topics)
    if not hour_complete(hour_start_ms, watermark, lateness_ms):
        return HourCheck(table, hour_start_ms, False, watermark, needed)
    # The table is read after the watermark: every record the watermark counts is in it by then
    # (an offset, and its timestamp, is stored only after its table commit).
    return HourCheck(table, hour_start_ms, True, watermark, needed, hour_stats(load_table(table), hour_start_ms))


@dataclass(frozen=True, slots=True)
class Restatement:
    """The hours of one table that late records landed in during ``[since, until)`` (recorded by
    MySQL's clock), with what each hour holds now: one event on the table's restatements asset."""

    cluster: str
    table: str
    since: datetime
    until: datetime
    hours: dict[str, dict[str, Any]]

    def event_extra(self) -> dict[str, Any]:
        """The restatement event's extra (docs/completeness.md lists the fields)."""
        return {
            "table": self.table,
            "cluster": self.cluster,
            "restated": True,
            "recorded_from": self.since.isoformat(),
            "recorded_until": self.until.isoformat(),
            "hours": self.hours,
        }


def restatements(
    clusters: Sequence[str], since: datetime, until: datetime, *, conn: Any, load_table: Callable[[str, str], Any]
) -> list[Restatement]:
    """Each table with late records recorded in ``[since, until)``: its hours (Airflow's partition
    keys) with the late records and, from the table's metadata now (``load_table(cluster,
    "catalog.namespace.table")``), the hour's snapshot, rows and offsets. The same interval gives
    the same hours (a retried run restates the same set)."""
    out: list[Restatement] = []
    for cluster in clusters:
        by_table: dict[str, list[Any]] = {}
        for late in late_hours(conn, cluster, since, until):
            by_table.setdefault(late.table, []).append(late)
        for table, lates in sorted(by_table.items()):
            loaded = load_table(cluster, table)
            hours: dict[str, dict[str, Any]] = {}
            for late in lates:
                stats = hour_stats(loaded, late.hour_start_ms)
                hours[hour_key(late.hour_start_ms)] = {
                    "late_records": late.records,
                    "topics": list(late.topics),
                    "snapshot_id": stats.snapshot_id,
                    "rows": stats.rows,
                    "offsets": stats.offsets,
                }
            out.append(Restatement(cluster, table, since, until, hours))
    return out


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
