"""Read-only queries of the status read model (the lagsched page, ``lagsched status``, metrics).

Every statement here is a SELECT: the tables' writers stay in their repository modules
(``topics.py``, ``claims.py``, ``decisions.py``, ``gaps.py``); this module only joins what they
wrote into the shapes the status views need, in a few queries per page load instead of one per
topic or slot. Lease liveness is judged by the database's clock, as the claim protocol does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lagsched.adapters.mysql import epoch_from_db, from_db
from lagsched.adapters.transactions import roll_back, transaction
from lagsched.core.claims import PartitionRow
from lagsched.core.names import validate_cluster_name
from lagsched.core.status import GapView, PartitionLine

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = [
    "clusters",
    "overrides_if_migrated",
    "partition_lines",
    "retention_gaps",
]


def overrides_if_migrated(conn: Connection, cluster: str, now: datetime) -> list[Any] | None:
    """`lagsched.adapters.overrides.active_overrides`, or None while its table does not exist yet.

    The page must keep working on a database where migration V006 has not been applied.
    """
    import pymysql

    from lagsched.adapters.overrides import active_overrides

    try:
        return list(active_overrides(conn, cluster, now))
    except pymysql.err.ProgrammingError as exc:
        roll_back(conn)
        if exc.args and exc.args[0] == 1146:  # no such table
            return None
        raise


def clusters(conn: Connection) -> list[str]:
    """Registry clusters with at least one enabled topic, sorted."""
    with transaction(conn) as cur:
        cur.execute("SELECT DISTINCT cluster FROM topics WHERE enabled ORDER BY cluster")
        return [str(r[0]) for r in cur.fetchall()]


def partition_lines(conn: Connection, cluster: str) -> list[PartitionLine]:
    """The line of every partition row of the cluster's enabled topics, by topic name then partition
    (one query; each lease judged by the database's time of that query)."""
    with transaction(conn) as cur:
        cur.execute(
            "SELECT t.name, p.topic_id, p.partition_id, p.committed_offset, p.claimed_by, p.lease_expires_at,"
            " p.pending_start, p.pending_end, CURRENT_TIMESTAMP(6)"
            " FROM topics AS t JOIN topic_partitions AS p ON p.topic_id = t.topic_id"
            " WHERE t.cluster = %s AND t.enabled AND p.partition_id < t.partition_count"
            " ORDER BY t.name, p.partition_id",
            (validate_cluster_name(cluster),),
        )
        rows = cur.fetchall()
    lines = []
    for name, topic_id, pid, committed, holder, lease, start, end, now in rows:
        row = PartitionRow(
            str(topic_id),
            int(pid),
            committed_offset=None if committed is None else int(committed),
            claimed_by=None if holder is None else str(holder),
            lease_expires_at=None if lease is None else from_db(lease),
            pending_start=None if start is None else int(start),
            pending_end=None if end is None else int(end),
        )
        lines.append(PartitionLine(str(name), row, live=row.holder_at(from_db(now)) is not None))
    return lines


def retention_gaps(conn: Connection, cluster: str, *, limit: int = 100) -> list[GapView]:
    """The cluster's newest recorded retention gaps (enabled topics), newest first."""
    if not 1 <= limit <= 10_000:
        raise ValueError(f"limit={limit}; use 1 to 10000")
    with transaction(conn) as cur:
        cur.execute(
            "SELECT t.name, g.partition_id, g.from_offset, g.to_offset, g.records, g.slot_id, g.detected_at"
            " FROM retention_gaps AS g JOIN topics AS t ON t.topic_id = g.topic_id"
            " WHERE t.cluster = %s AND t.enabled ORDER BY g.detected_at DESC, t.name, g.partition_id LIMIT %s",
            (validate_cluster_name(cluster), limit),
        )
        rows: Sequence[Any] = cur.fetchall()
    return [
        GapView(str(n), int(p), int(a), int(b), int(rec), str(s), epoch_from_db(at))
        for n, p, a, b, rec, s, at in rows  # detected_at is NOT NULL
    ]
