"""The topic registry's tables, ``topics`` and ``topic_partitions``: the one module that reads and
writes them (the claim columns of ``topic_partitions`` belong to `lagsched.adapters.claims`).

Every read ends its transaction (``commit``), so a long-lived connection sees other writers'
commits next time; every write is one transaction that is rolled back on any error.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lagsched.adapters.mysql import from_db
from lagsched.adapters.transactions import transaction
from lagsched.core.claims import PartitionRow
from lagsched.core.names import validate_cluster_name, validate_topic_name
from lagsched.core.registry import SyncPlan, TopicRow

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "AppliedSync",
    "TopicRow",
    "apply_sync",
    "load_topics",
    "load_topics_with_partitions",
    "set_linker_workers",
]

log = logging.getLogger(__name__)

_TOPIC_COLUMNS = (
    "topic_id, cluster, name, kafka_topic_id, partition_count, retention_ms, linker_workers,"
    " min_workers, max_workers, enabled, log_append_time"
)


def _topic(row: Sequence[Any]) -> TopicRow:
    tid, cluster, name, kid, count, retention, workers, low, high, enabled, appended = row
    return TopicRow(
        str(tid), str(cluster), str(name), None if kid is None else str(kid), int(count), int(retention),
        int(workers), None if low is None else int(low), None if high is None else int(high), bool(enabled),
        bool(appended),
    )  # fmt: skip


def load_topics(conn: Connection, cluster: str | None = None, *, enabled_only: bool = True) -> list[TopicRow]:
    """The registry's topics of `cluster` (every cluster when None), by name.

    Rows whose names Kafka would refuse (written by hand) are skipped with a warning, so one bad
    row cannot stop the monitor for every other topic.
    """
    where, args = [], []
    if cluster is not None:
        where.append("cluster = %s")
        args.append(validate_cluster_name(cluster))
    if enabled_only:
        where.append("enabled")
    sql = f"SELECT {_TOPIC_COLUMNS} FROM topics"  # noqa: S608 - fixed column list
    if where:
        sql += " WHERE " + " AND ".join(where)
    with transaction(conn) as cur:
        cur.execute(sql + " ORDER BY cluster, name, enabled DESC, created_at", tuple(args))
        rows = cur.fetchall()
    return [_topic(r) for r in rows if _has_legal_name(r)]


def _has_legal_name(row: Sequence[Any]) -> bool:
    # Rows written by hand can hold names Kafka would refuse: one such row must not stop every reader.
    try:
        validate_topic_name(str(row[2]))
    except ValueError:
        log.warning("skipping registry topic %s: illegal name %r", row[0], row[2])
        return False
    return True


def load_topics_with_partitions(
    conn: Connection, cluster: str
) -> tuple[datetime, list[tuple[TopicRow, tuple[PartitionRow, ...]]]]:
    """The database's time of the read, and `cluster`'s enabled topics by name (as `load_topics`),
    each with its partition rows in partition order; one query.

    Each `PartitionRow` loads ``committed_offset``, ``claimed_by`` and ``lease_expires_at`` (the
    rest stay None). Who holds a row is judged by the database's clock: ``row.holder_at(now)``
    with the time returned, read by the same statement as the rows.

    Each topic's partitions come packed in one text (``GROUP_CONCAT``, the holder in hex so no
    separator can occur in it): PyMySQL decodes every field in Python, and the lag monitor reads
    every partition each minute. 10,000 topics x 10 partitions took 0.82 s as one row per partition
    and 0.19 s packed. Packing the lease too (the row carries the column; the holder is judged in
    Python) costs about 0.1 s more per 100,000 partitions (parse and ``holder_at``, measured alone).
    A packed text longer than ``group_concat_max_len`` would be cut without an error, so the
    session's limit is raised and the rows parsed are checked against a count.
    """
    sql = (
        f"SELECT {', '.join('t.' + c.strip() for c in _TOPIC_COLUMNS.split(','))},"  # noqa: S608 - fixed columns
        " CURRENT_TIMESTAMP(6), COUNT(p.partition_id),"
        " GROUP_CONCAT(p.partition_id, ' ', IFNULL(p.committed_offset, '-'), ' ', IFNULL(HEX(p.claimed_by), '-'),"
        f" ' ', IFNULL(DATE_FORMAT(p.lease_expires_at, '{_PACKED_TIME}'), '-')"
        " ORDER BY p.partition_id SEPARATOR ',')"
        " FROM topics t LEFT JOIN topic_partitions p ON p.topic_id = t.topic_id"
        " WHERE t.cluster = %s AND t.enabled GROUP BY t.topic_id ORDER BY t.name"
    )
    with transaction(conn) as cur:
        cur.execute("SET SESSION group_concat_max_len = %s", (_PACKED_MAX_BYTES,))
        cur.execute(sql, (validate_cluster_name(cluster),))
        rows = cur.fetchall()
        if rows:
            now = from_db(rows[0][-3])
        else:  # no topic: no row brought the time
            cur.execute("SELECT CURRENT_TIMESTAMP(6)")
            now = from_db(cur.fetchall()[0][0])
    return now, [(_topic(r[:-3]), _unpack_partitions(str(r[0]), int(r[-2]), r[-1])) for r in rows if _has_legal_name(r)]


#: How the packed read spells a lease: ISO 8601 in UTC (the sessions' zone), one word.
_PACKED_TIME = "%%Y-%%m-%%dT%%H:%%i:%%s.%%f+00:00"


#: ``group_concat_max_len`` for the packed partitions: about 100 bytes a partition, so a topic of
#: up to ~600,000 partitions (Kafka's own limits are far lower); within MySQL's and MariaDB's
#: default ``max_allowed_packet`` (64 and 16 MiB) a reply of one such topic still fits.
_PACKED_MAX_BYTES = 16 * 1024 * 1024 - 1024


def _unpack_partitions(topic_id: str, count: int, packed: str | bytes | None) -> tuple[PartitionRow, ...]:
    if not count:
        return ()
    text = packed.decode() if isinstance(packed, bytes) else str(packed)
    items = text.split(",")
    if len(text) >= _PACKED_MAX_BYTES or len(items) != count:
        raise RuntimeError(
            f"topic {topic_id}: its {count} partition rows did not fit the packed text ({len(text):,} bytes)"
        )
    rows = []
    # A claim or renewal gives all its rows one expiry, so a topic's rows share a few: each is parsed once.
    leases: dict[str, datetime | None] = {"-": None}
    for item in items:
        pid, committed, holder, lease = item.split(" ")
        if lease not in leases:
            leases[lease] = datetime.fromisoformat(lease)
        rows.append(
            PartitionRow(
                topic_id,
                int(pid),
                committed_offset=None if committed == "-" else int(committed),
                claimed_by=None if holder == "-" else bytes.fromhex(holder).decode(),
                lease_expires_at=leases[lease],
            )
        )
    return tuple(rows)


def set_linker_workers(cur: Cursor, topic_id: str, old: int, new: int) -> bool:
    """Compare-and-set a topic's ``linker_workers`` inside the caller's transaction.

    Returns False (nothing changed) when the value is no longer `old` or the topic was disabled:
    of two evaluators that both saw `old`, only the first moves it.
    """
    cur.execute(
        "UPDATE topics SET linker_workers = %s WHERE topic_id = %s AND linker_workers = %s AND enabled",
        (new, topic_id, old),
    )
    return bool(cur.rowcount == 1)


def lock_cluster(cur: Cursor, cluster: str) -> list[TopicRow]:
    """Every row of `cluster`, enabled or not, locked until the transaction ends.

    Two syncs (two DAG runs) must not both register the same new topic.
    """
    cur.execute(
        f"SELECT {_TOPIC_COLUMNS} FROM topics WHERE cluster = %s ORDER BY topic_id FOR UPDATE",  # noqa: S608
        (validate_cluster_name(cluster),),
    )
    return [_topic(r) for r in cur.fetchall()]


@dataclass(frozen=True, slots=True)
class AppliedSync:
    """A sync as applied: the plan, the registry id of every enabled topic it covers, new partitions.

    Attributes:
        plan: what was decided (`lagsched.core.registry.plan_sync`).
        topic_ids: name -> registry id of every topic the sync left enabled.
        partitions_added: name -> partition ids that got new rows.
    """

    plan: SyncPlan
    topic_ids: Mapping[str, str]
    partitions_added: Mapping[str, tuple[int, ...]]


def apply_sync(conn: Connection, cluster: str, plan_for: Callable[[list[TopicRow]], SyncPlan]) -> AppliedSync:
    """Lock the cluster's rows, let ``plan_for(rows)`` decide what changes, apply it; one transaction.

    ``plan_for`` is the pure planner (`lagsched.core.registry.plan_sync` with the broker's view
    bound): planning under the lock is what makes two concurrent syncs agree.
    """
    with transaction(conn) as cur:
        rows = lock_cluster(cur, cluster)
        plan = plan_for(rows)
        # Disable first: a re-created topic's new row may take the name only once the old row gave it up.
        for topic_id in plan.disable:
            cur.execute("UPDATE topics SET enabled = FALSE WHERE topic_id = %s", (topic_id,))
        _fence_holders(cur, plan.disable)
        for u in plan.update:
            cur.execute(
                "UPDATE topics SET partition_count = %s, retention_ms = %s, log_append_time = %s, kafka_topic_id = %s,"
                " enabled = TRUE WHERE topic_id = %s",
                (u.topic.partitions, u.topic.retention_ms, u.topic.log_append_time,
                 u.topic.kafka_topic_id or u.row.kafka_topic_id, u.row.topic_id),
            )  # fmt: skip
        ids = {r.name: r.topic_id for r in plan.unchanged} | {u.topic.name: u.row.topic_id for u in plan.update}
        for n in plan.insert:
            ids[n.topic.name] = str(uuid.uuid4())
            cur.execute(
                "INSERT INTO topics (topic_id, cluster, name, kafka_topic_id, partition_count, retention_ms,"
                " log_append_time, linker_workers, min_workers, max_workers, enabled)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, TRUE)",
                (ids[n.topic.name], cluster, n.topic.name, n.topic.kafka_topic_id, n.topic.partitions,
                 n.topic.retention_ms, n.topic.log_append_time, n.linker_workers, n.min_workers, n.max_workers),
            )  # fmt: skip
        wanted = {ids[u.topic.name]: (u.topic.name, u.topic.partitions) for u in plan.update}
        wanted |= {ids[n.topic.name]: (n.topic.name, n.topic.partitions) for n in plan.insert}
        added = _add_partition_rows(cur, wanted)
    return AppliedSync(plan, ids, added)


def _fence_holders(cur: Cursor, topic_ids: Sequence[str]) -> None:
    # A worker still reading a disabled topic must not store an offset of it any more: clearing
    # the holder and bumping the epoch makes its next renew or commit a stale claim.
    for topic_id in topic_ids:
        cur.execute(
            "UPDATE topic_partitions SET claimed_by = NULL, lease_expires_at = NULL, claim_epoch = claim_epoch + 1"
            " WHERE topic_id = %s AND claimed_by IS NOT NULL",
            (topic_id,),
        )


def _add_partition_rows(cur: Cursor, wanted: Mapping[str, tuple[str, int]]) -> dict[str, tuple[int, ...]]:
    """Rows for partitions the broker has and the table lacks; name -> new partition ids."""
    if not wanted:
        return {}
    marks = ", ".join(["%s"] * len(wanted))
    cur.execute(
        f"SELECT topic_id, MAX(partition_id) + 1 FROM topic_partitions WHERE topic_id IN ({marks})"  # noqa: S608
        " GROUP BY topic_id",
        tuple(wanted),
    )
    have = {str(t): int(n) for t, n in cur.fetchall()}
    # Kafka only ever adds partitions, numbered on from the last. Rows beyond a smaller count (a
    # re-enabled topic) are kept; partition_count says which are real.
    added = {name: tuple(range(have.get(t, 0), n)) for t, (name, n) in wanted.items() if n > have.get(t, 0)}
    rows = [(t, p) for t, (name, _n) in wanted.items() for p in added.get(name, ())]
    if rows:
        cur.executemany("INSERT INTO topic_partitions (topic_id, partition_id) VALUES (%s, %s)", rows)
    return added
