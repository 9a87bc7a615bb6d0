"""What MySQL knows of each partition's time: the watermarks of topics and tables (docs/completeness.md).

Two writers, one reader:

* a slot's `ClaimStore.commit_offset` moves ``topic_partitions.max_timestamp_ms`` with the offset;
* the lag monitor stores each partition's end as it read it (`record_ends`, ``partition_ends``);
* `topic_watermarks` reads a watermark per topic, the rule of `lagsched.core.completeness` as one
  aggregate query (one row per topic, whatever the partition count: a slot runs it at every commit).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from lagsched.adapters.transactions import transaction
from lagsched.core.completeness import PartitionTime, least_watermark, table_watermark

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = ["PartitionEnd", "partition_times", "record_ends", "topic_watermarks", "watermark_around_commit"]

#: (topic id, partition, end offset, observed at ms, caught up at ms or None): the lag monitor's
#: reading of one partition. The end is the offset the pipeline must have committed (none committed
#: counts as 0) to hold every record appended before the time; ``caught up`` is that time when it
#: had already (no lag).
PartitionEnd = tuple[str, int, int, int, int | None]

_FROM = (
    " FROM topics t JOIN topic_partitions tp ON tp.topic_id = t.topic_id"
    " LEFT JOIN partition_ends pe ON pe.topic_id = tp.topic_id AND pe.partition_id = tp.partition_id"
    " WHERE t.cluster = %s AND t.enabled AND tp.partition_id < t.partition_count"
)
# `PartitionTime.watermark_ms` in SQL; -1 stands for "unknown" (GREATEST is NULL if any argument is).
_WATERMARK = (
    "GREATEST(COALESCE(tp.max_timestamp_ms, -1), COALESCE(pe.caught_up_ms, -1),"
    " CASE WHEN pe.end_offset IS NOT NULL AND COALESCE(tp.committed_offset, 0) >= pe.end_offset"
    " THEN pe.observed_ms ELSE -1 END)"
)
# Whether the stored reading (end_offset) is reached by the partition's committed offset now.
_REACHED = (
    "(SELECT COALESCE(tp.committed_offset, 0) FROM topic_partitions tp"
    " WHERE tp.topic_id = partition_ends.topic_id AND tp.partition_id = partition_ends.partition_id) >= end_offset"
)

_RECORD_ENDS = (
    "INSERT INTO partition_ends (topic_id, partition_id, end_offset, observed_ms, caught_up_ms)"  # noqa: S608 - constants
    " VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE"
    " caught_up_ms = GREATEST(COALESCE(caught_up_ms, -1), COALESCE(VALUES(caught_up_ms), -1),"
    f" CASE WHEN {_REACHED} THEN observed_ms ELSE -1 END),"
    f" observed_ms = CASE WHEN {_REACHED} THEN VALUES(observed_ms) ELSE observed_ms END,"
    f" end_offset = CASE WHEN {_REACHED} THEN VALUES(end_offset) ELSE end_offset END"
)


def record_ends(conn: Connection, ends: Sequence[PartitionEnd]) -> None:
    """Store the lag monitor's readings. A stored reading is replaced only once the committed offset
    has reached it, and is then credited to ``caught_up_ms`` in the same statement: no credit is lost
    to a reading the partition has not reached yet (a busy partition's)."""
    if not ends:
        return
    with transaction(conn) as cur:
        # executemany folds an INSERT ... VALUES into multi-row statements: one round trip per ~1 MB.
        # The assignments run left to right, each seeing the ones before: caught_up_ms and
        # observed_ms read the old end_offset, which changes last.
        cur.executemany(_RECORD_ENDS, list(ends))


def topic_watermarks(
    conn: Connection, cluster: str, topics: Iterable[str], *, excluding: Iterable[tuple[str, int]] = ()
) -> dict[str, int | None]:
    """Each topic's watermark (ms; None: some partition of it is known by neither rule).

    ``excluding``: (topic, partition) left out (a commit in flight combines them itself, with
    `partition_times`). A topic not registered, or with every partition excluded, is absent.
    """
    names = sorted(set(topics))
    if not names:
        return {}
    skip = sorted(set(excluding))
    sql = (
        f"SELECT t.name, MIN({_WATERMARK}){_FROM} AND t.name IN ({', '.join(['%s'] * len(names))})"
        + (f" AND (t.name, tp.partition_id) NOT IN ({', '.join(['(%s, %s)'] * len(skip))})" if skip else "")
        + " GROUP BY t.name"
    )
    params: list[object] = [cluster, *names, *(v for key in skip for v in key)]
    with transaction(conn) as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return {str(name): (None if least is None or int(least) < 0 else int(least)) for name, least in rows}


def partition_times(
    conn: Connection, cluster: str, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], PartitionTime]:
    """What is stored of the given (topic, partition)s."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    sql = (
        "SELECT t.name, tp.partition_id, tp.committed_offset, tp.max_timestamp_ms, pe.end_offset, pe.observed_ms,"
        " pe.caught_up_ms"
        f"{_FROM} AND (t.name, tp.partition_id) IN ({', '.join(['(%s, %s)'] * len(wanted))})"
    )
    with transaction(conn) as cur:
        cur.execute(sql, [cluster, *(v for key in wanted for v in key)])
        rows = cur.fetchall()
    return {(str(r[0]), int(r[1])): PartitionTime(*(None if v is None else int(v) for v in r[2:])) for r in rows}


def watermark_around_commit(
    conn: Connection, cluster: str, topics: Iterable[str], committing: Mapping[tuple[str, int], tuple[int, int | None]]
) -> tuple[int | None, int | None]:
    """The watermark of the table ``topics`` land in before and once ``committing`` (topic,
    partition) -> (new committed offset, largest timestamp committed) is stored: the first says
    which of the commit's hours were complete already (late records), the second is the commit's
    ``valid-through-ts``."""
    names = set(topics)
    mine = {k: v for k, v in committing.items() if k[0] in names}
    others = list(topic_watermarks(conn, cluster, names, excluding=mine).values())
    stored = partition_times(conn, cluster, mine)
    before, after = [], []
    for key, (offset, latest) in mine.items():
        was = stored.get(key, PartitionTime(None, None))
        before.append(was)
        grown = was.max_timestamp_ms if latest is None else max(latest, was.max_timestamp_ms or latest)
        after.append(PartitionTime(offset, grown, was.end_offset, was.observed_ms, was.caught_up_ms))
    return (
        least_watermark([*others, *([table_watermark(before)] if before else [])]),
        least_watermark([*others, *([table_watermark(after)] if after else [])]),
    )
