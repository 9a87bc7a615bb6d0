"""The ``retention_gaps`` table: records a consumer found deleted by retention before it read them.

The one module that reads and writes it. A gap is recorded once per (topic, partition, first lost
offset): a redo of the same batch, by the same slot or the next holder, finds its row already there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lagsched.adapters.mysql import to_db
from lagsched.adapters.transactions import delete_in_batches, transaction

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = ["RetentionGap", "delete_old_gaps", "lost_records", "record_gap"]


@dataclass(frozen=True, slots=True)
class RetentionGap:
    """Records ``[from_offset, to_offset)`` of one partition, deleted before anyone read them."""

    topic_id: str
    partition_id: int
    from_offset: int
    to_offset: int

    def __post_init__(self) -> None:
        if not 0 <= self.from_offset < self.to_offset:
            raise ValueError(f"gap [{self.from_offset}, {self.to_offset}) must satisfy 0 <= from < to")

    @property
    def records(self) -> int:
        return self.to_offset - self.from_offset


def record_gap(conn: Connection, gap: RetentionGap, slot_id: str) -> bool:
    """Store ``gap``; False when it was already recorded (a redo of the same batch)."""
    with transaction(conn) as cur:
        cur.execute(
            "INSERT INTO retention_gaps (topic_id, partition_id, from_offset, to_offset, records, slot_id)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE topic_id = topic_id",
            (gap.topic_id, gap.partition_id, gap.from_offset, gap.to_offset, gap.records, slot_id),
        )
        # ON DUPLICATE KEY UPDATE that changes nothing reports 0 rows, a fresh insert 1.
        return cur.rowcount == 1


def lost_records(conn: Connection, topic_ids: Iterable[str]) -> dict[str, dict[int, int]]:
    """Records recorded lost to retention so far: topic id -> partition -> count (only non-zero)."""
    ids = sorted(set(topic_ids))
    if not ids:
        return {}
    marks = ", ".join(["%s"] * len(ids))
    out: dict[str, dict[int, int]] = {}
    with transaction(conn) as cur:
        cur.execute(
            "SELECT topic_id, partition_id, SUM(records) FROM retention_gaps"  # noqa: S608 - placeholders only
            f" WHERE topic_id IN ({marks}) GROUP BY topic_id, partition_id",
            tuple(ids),
        )
        for topic_id, partition_id, records in cur.fetchall():
            out.setdefault(str(topic_id), {})[int(partition_id)] = int(records)
    return out


def delete_old_gaps(conn: Connection, before: datetime, *, batch_rows: int = 5000) -> int:
    """Delete the gaps detected before ``before`` (aware); returns how many went.

    In batches of at most ``batch_rows`` rows (`delete_in_batches`), so slots recording new gaps
    meanwhile wait at most one short batch. `lost_records` then counts the gaps of the retained
    period only.
    """
    cutoff = to_db(before)
    return delete_in_batches(
        conn,
        "DELETE FROM retention_gaps WHERE detected_at < %s ORDER BY topic_id, partition_id, from_offset LIMIT %s",
        (cutoff,),
        batch_rows,
    )
