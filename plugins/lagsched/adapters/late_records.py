"""The late records' append log in MySQL, ``late_records`` (docs/completeness.md, "Late records").

A record is late when its hour of its table was complete before the commit that landed it. The
slot logs them (`log_late`) inside the transaction that moves the partition's offset
(`ClaimStore.commit_offset`), so a row exists exactly when its offset moved. Two readers: the
totals per table (the page, ``lagsched status``, ``/metrics``) and the restatements of
``lagsched_hours`` (`late_hours`: the hours with late records recorded in an interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lagsched.adapters.mysql import to_db
from lagsched.adapters.transactions import transaction

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = ["LateHour", "LateRecords", "late_hours", "late_totals", "log_late"]

_INSERT = (
    "INSERT INTO late_records (topic_id, partition_id, table_name, hour_start_ms, records, committed_offset)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


@dataclass(frozen=True, slots=True)
class LateRecords:
    """Records of one partition that one commit landed in an hour already complete.

    Attributes:
        table: the table they landed in (``catalog.namespace.table``).
        hour_start_ms: the start of their hour.
        records: how many.
    """

    table: str
    hour_start_ms: int
    records: int


@dataclass(frozen=True, slots=True)
class LateHour:
    """One hour of one table that late records were recorded for in an interval."""

    table: str
    hour_start_ms: int
    records: int
    topics: tuple[str, ...]


def log_late(cur: Cursor, topic_id: str, partition_id: int, offset: int, late: Sequence[LateRecords]) -> None:
    """Append ``late``, landed below the partition's new committed ``offset``, in the caller's transaction."""
    if late:
        cur.executemany(_INSERT, [(topic_id, partition_id, r.table, r.hour_start_ms, r.records, offset) for r in late])


def late_totals(conn: Connection, cluster: str) -> dict[str, int]:
    """The late records of each of the cluster's tables, ever (a counter: the log only grows)."""
    with transaction(conn) as cur:
        cur.execute(
            "SELECT lr.table_name, SUM(lr.records) FROM late_records lr JOIN topics t ON t.topic_id = lr.topic_id"
            " WHERE t.cluster = %s GROUP BY lr.table_name",
            (cluster,),
        )
        return {str(table): int(n) for table, n in cur.fetchall()}


def late_hours(conn: Connection, cluster: str, since: datetime, until: datetime) -> list[LateHour]:
    """The hours of the cluster's tables with late records recorded in ``[since, until)`` (MySQL's
    clock; aware times), by table and hour."""
    with transaction(conn) as cur:
        cur.execute(
            "SELECT lr.table_name, lr.hour_start_ms, SUM(lr.records), GROUP_CONCAT(DISTINCT t.name ORDER BY t.name)"
            " FROM late_records lr JOIN topics t ON t.topic_id = lr.topic_id"
            " WHERE t.cluster = %s AND lr.recorded_at >= %s AND lr.recorded_at < %s"
            " GROUP BY lr.table_name, lr.hour_start_ms ORDER BY lr.table_name, lr.hour_start_ms",
            (cluster, to_db(since), to_db(until)),
        )
        return [
            LateHour(str(table), int(hour), int(n), tuple(str(names).split(",")))
            for table, hour, n, names in cur.fetchall()
        ]
