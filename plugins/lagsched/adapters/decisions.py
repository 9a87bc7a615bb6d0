"""The ``scaling_decisions`` table: the one module that reads and writes it.

A decision row is written together with the ``topics.linker_workers`` change it records, in one
transaction (`lagsched.adapters.worker_changes`), so the table never claims a change that did not
happen.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lagsched.adapters.mysql import epoch_from_db, to_db
from lagsched.adapters.transactions import transaction
from lagsched.core.decisions import DecisionRow
from lagsched.core.evaluator import Decision
from lagsched.core.names import validate_cluster_name, validate_topic_name

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "decisions_of",
    "delete_old_decisions",
    "insert_decision",
    "last_change_times",
    "last_decisions",
    "mark_announced",
    "recent_decisions",
]

_COLUMNS = (
    "decision_id, evaluation_id, decided_at, topic_id, cluster, topic, previous_linker_workers, linker_workers,"
    " lag_records, time_lag_s, slope, fit_r2, policy, rule, reason, announced_at"
)


def decisions_of(conn: Connection, evaluation_id: str) -> dict[str, DecisionRow]:
    """The decisions one evaluation recorded, by topic id (a retry finds what it applied)."""
    with transaction(conn) as cur:
        cur.execute(f"SELECT {_COLUMNS} FROM scaling_decisions WHERE evaluation_id = %s", (evaluation_id,))  # noqa: S608 - fixed column list
        rows = cur.fetchall()
    return {row.topic_id: row for row in map(_row, rows)}


def _row(r: Sequence[Any]) -> DecisionRow:
    return DecisionRow(
        decision_id=int(r[0]), evaluation_id=str(r[1]), decided_at=epoch_from_db(r[2]), topic_id=str(r[3]),
        cluster=str(r[4]), topic=str(r[5]), previous_linker_workers=int(r[6]), linker_workers=int(r[7]),
        lag=int(r[8]), time_lag_s=float(r[9]), slope=float(r[10]), fit_r2=float(r[11]), policy=str(r[12]),
        rule=str(r[13]), reason=str(r[14]), announced_at=None if r[15] is None else epoch_from_db(r[15]),
    )  # fmt: skip


def last_change_times(conn: Connection, topic_ids: Sequence[str]) -> dict[str, float]:
    """When each topic's ``linker_workers`` last changed (topics never changed are absent)."""
    if not topic_ids:
        return {}
    marks = ", ".join(["%s"] * len(topic_ids))
    with transaction(conn) as cur:
        cur.execute(
            f"SELECT topic_id, MAX(decided_at) FROM scaling_decisions WHERE topic_id IN ({marks})"  # noqa: S608 - placeholders only
            " GROUP BY topic_id",
            tuple(topic_ids),
        )
        rows = cur.fetchall()
    return {str(t): epoch_from_db(at) for t, at in rows if at is not None}


def insert_decision(cur: Cursor, *, cluster: str, evaluation_id: str, topic_id: str, d: Decision) -> DecisionRow:
    """INSERT one ``scaling_decisions`` row inside the caller's transaction; returns the row as written.

    Only `lagsched.adapters.worker_changes` calls it, in the transaction that moves the count.
    """
    cur.execute(
        "INSERT INTO scaling_decisions (evaluation_id, decided_at, topic_id, cluster, topic, previous_linker_workers,"
        " linker_workers, lag_records, time_lag_s, slope, fit_r2, policy, rule, reason)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            evaluation_id, to_db(d.decided_at), topic_id, cluster, d.topic, d.previous_linker_workers,
            d.linker_workers, d.lag, d.time_lag_s, d.slope, d.fit_r2, d.policy, d.rule, d.reason[:1000],
        ),
    )  # fmt: skip
    return DecisionRow(
        decision_id=int(cur.lastrowid), evaluation_id=evaluation_id, decided_at=d.decided_at, topic_id=topic_id,
        cluster=cluster, topic=d.topic, previous_linker_workers=d.previous_linker_workers,
        linker_workers=d.linker_workers, lag=d.lag, time_lag_s=d.time_lag_s, slope=d.slope, fit_r2=d.fit_r2,
        policy=d.policy, rule=d.rule, reason=d.reason[:1000], announced_at=None,
    )  # fmt: skip


def last_decisions(conn: Connection, topic_ids: Sequence[str]) -> dict[str, DecisionRow]:
    """Each topic's newest decision (topics never changed are absent).

    The evaluator reads its rule: a topic whose last change was an ``override`` that is no longer
    active gets its next change recorded as ``override_expired``.
    """
    if not topic_ids:
        return {}
    marks = ", ".join(["%s"] * len(topic_ids))
    with transaction(conn) as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM scaling_decisions d WHERE topic_id IN ({marks})"  # noqa: S608 - placeholders only
            " AND decision_id = (SELECT MAX(decision_id) FROM scaling_decisions x WHERE x.topic_id = d.topic_id)",
            tuple(topic_ids),
        )
        rows = cur.fetchall()
    return {row.topic_id: row for row in map(_row, rows)}


def recent_decisions(
    conn: Connection, cluster: str, *, topic: str | None = None, since: float | None = None, limit: int = 50
) -> list[DecisionRow]:
    """The cluster's newest decisions (of one topic when given), newest first: the lagsched page,
    ``lagsched status`` and the demo's summary.

    ``since`` keeps only decisions at or after that time (epoch seconds).
    """
    if not 1 <= limit <= 10_000:
        raise ValueError(f"limit={limit}; use 1 to 10000")
    where = ["cluster = %s"]
    params: list[Any] = [validate_cluster_name(cluster)]
    if topic is not None:
        where.append("topic = %s")
        params.append(validate_topic_name(topic))
    if since is not None:
        where.append("decided_at >= %s")
        params.append(to_db(since))
    with transaction(conn) as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM scaling_decisions WHERE {' AND '.join(where)}"  # noqa: S608 - fixed clauses, values as parameters
            " ORDER BY decided_at DESC, decision_id DESC LIMIT %s",
            (*params, limit),
        )
        rows = cur.fetchall()
    return [_row(r) for r in rows]


def delete_old_decisions(
    conn: Connection, before: datetime, *, batch_rows: int = 5000, keep: Collection[int] = ()
) -> int:
    """Delete the decisions made before ``before`` (aware); returns how many went.

    Kept whatever their age: each topic's newest decision, by id (`last_decisions`, whose rule the
    evaluator reads) and by time (`last_change_times`, its cooldown), and the ids in ``keep``
    (the decisions that applied overrides still active). A row is deleted only when a newer row
    of its topic exists (higher id, same or later time), so the newest one always remains.

    Works in batches of at most ``batch_rows``: a batch's ids are read without locking, then
    deleted by primary key in a transaction of their own, so a large backlog never holds many
    locks for long. MySQL refuses a DELETE whose subquery reads the table it deletes from
    (error 1093), hence the two statements.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    cutoff, kept = to_db(before), set(keep)
    deleted, after = 0, 0
    while True:
        with transaction(conn) as cur:
            cur.execute(
                "SELECT d.decision_id FROM scaling_decisions d WHERE d.decision_id > %s AND d.decided_at < %s"
                " AND EXISTS (SELECT 1 FROM scaling_decisions n WHERE n.topic_id = d.topic_id"
                " AND n.decision_id > d.decision_id AND n.decided_at >= d.decided_at)"
                " ORDER BY d.decision_id LIMIT %s",
                (after, cutoff, int(batch_rows)),
            )
            ids = [int(r[0]) for r in cur.fetchall()]
        if not ids:
            return deleted
        after = ids[-1]
        doomed = [i for i in ids if i not in kept]
        if doomed:
            marks = ", ".join(["%s"] * len(doomed))
            with transaction(conn) as cur:
                cur.execute(
                    f"DELETE FROM scaling_decisions WHERE decision_id IN ({marks}) AND decided_at < %s",  # noqa: S608 - placeholders only
                    (*doomed, cutoff),
                )
                deleted += int(cur.rowcount)
        if len(ids) < batch_rows:
            return deleted


def mark_announced(conn: Connection, decision_id: int, at: datetime) -> None:
    """Stamp a decision as published (a retry publishes only unstamped ones)."""
    with transaction(conn) as cur:
        cur.execute(
            "UPDATE scaling_decisions SET announced_at = %s WHERE decision_id = %s AND announced_at IS NULL",
            (to_db(at), decision_id),
        )
