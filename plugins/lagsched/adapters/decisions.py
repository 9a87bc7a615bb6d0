"""The ``scaling_decisions`` table: the one module that reads and writes it.

A decision row is written together with the ``topics.linker_workers`` change it records, in one
transaction (`lagsched.adapters.worker_changes`), so the table never claims a change that did not
happen.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lagsched.adapters.mysql import to_db
from lagsched.adapters.transactions import transaction
from lagsched.core.evaluator import Decision

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "DecisionRow",
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
    " rule, policy, reason, announced_at"
)


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """One ``scaling_decisions`` row (times in seconds since the epoch, UTC).

    Attributes:
        decision_id: row id.
        evaluation_id: the evaluation run that made it (the Airflow run id).
        decided_at: when it was decided.
        topic_id: registry id of the topic.
        cluster: registry cluster.
        topic: the topic's name at decision time.
        previous_linker_workers: the topic's ``linker_workers`` before.
        linker_workers: the ``linker_workers`` it set.
        rule: the rule that fired.
        policy: the policy that decided.
        reason: the reason in words.
        announced_at: when it was published on ``lagsched:scaling``; None until then.
    """

    decision_id: int
    evaluation_id: str
    decided_at: float
    topic_id: str
    cluster: str
    topic: str
    previous_linker_workers: int
    linker_workers: int
    rule: str
    policy: str
    reason: str
    announced_at: float | None


def decisions_of(conn: Connection, evaluation_id: str) -> dict[str, DecisionRow]:
    """The decisions one evaluation recorded, by topic id (a retry finds what it applied)."""
    with transaction(conn) as cur:
        cur.execute(f"SELECT {_COLUMNS} FROM scaling_decisions WHERE evaluation_id = %s", (evaluation_id,))  # noqa: S608 - fixed column list
        rows = cur.fetchall()
    return {row.topic_id: row for row in map(_row, rows)}


def _row(r: Sequence[Any]) -> DecisionRow:
    return DecisionRow(
        int(r[0]), str(r[1]), _epoch(r[2]), str(r[3]), str(r[4]), str(r[5]), int(r[6]), int(r[7]),
        str(r[8]), str(r[9]), str(r[10]), None if r[11] is None else _epoch(r[11]),
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
    return {str(t): _epoch(at) for t, at in rows if at is not None}


def insert_decision(cur: Cursor, *, cluster: str, evaluation_id: str, topic_id: str, d: Decision) -> int:
    """INSERT one ``scaling_decisions`` row inside the caller's transaction; returns its id.

    Only `lagsched.adapters.worker_changes` calls it, in the transaction that moves the count.
    """
    cur.execute(
        "INSERT INTO scaling_decisions (evaluation_id, decided_at, topic_id, cluster, topic, previous_linker_workers,"
        " linker_workers, lag_records, time_lag_s, slope, fit_r2, policy, rule, reason)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            evaluation_id, to_db(d.at), topic_id, cluster, d.topic, d.previous_linker_workers, d.linker_workers,
            d.lag, d.time_lag_s, d.slope, d.fit_r2, d.policy, d.rule, d.reason[:1000],
        ),
    )  # fmt: skip
    return int(cur.lastrowid)


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


def recent_decisions(conn: Connection, cluster: str, limit: int = 50) -> list[DecisionRow]:
    """The cluster's newest decisions, newest first (for the CLI and the page)."""
    with transaction(conn) as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM scaling_decisions WHERE cluster = %s"  # noqa: S608 - fixed column list
            " ORDER BY decided_at DESC, decision_id DESC LIMIT %s",
            (cluster, int(limit)),
        )
        rows = cur.fetchall()
    return [_row(r) for r in rows]


def delete_old_decisions(conn: Connection, before: float, *, batch_rows: int = 5000, keep: Collection[int] = ()) -> int:
    """Delete the decisions made before ``before`` (epoch seconds); returns how many went.

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


def mark_announced(conn: Connection, decision_id: int, at: float) -> None:
    """Stamp a decision as published (a retry publishes only unstamped ones)."""
    with transaction(conn) as cur:
        cur.execute(
            "UPDATE scaling_decisions SET announced_at = %s WHERE decision_id = %s AND announced_at IS NULL",
            (to_db(at), decision_id),
        )


def _epoch(value: datetime) -> float:
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.timestamp()
