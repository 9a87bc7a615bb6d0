"""The one write path of ``topics.linker_workers``: the evaluator's changes and the overrides'.

Every change moves the count by compare-and-set and records its ``scaling_decisions`` row in the
same transaction, so no count changes without its decision and no decision claims a change that
did not happen. An override also records itself (``scaling_overrides``) in that transaction.
Announcing a change on Redis is the caller's part (`lagsched.workflows.scaling`,
`lagsched.workflows.overrides`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from lagsched.adapters.decisions import insert_decision
from lagsched.adapters.mysql import aware_utc
from lagsched.adapters.overrides import (
    OverrideRow,
    evaluation_id_of,
    find_by_request,
    insert_override,
    is_overridden,
    link_decision,
)
from lagsched.adapters.topics import lock_cluster, set_linker_workers
from lagsched.adapters.transactions import roll_back, run_transaction
from lagsched.core.decisions import DecisionRow
from lagsched.core.evaluator import Decision
from lagsched.core.names import validate_cluster_name
from lagsched.core.overrides import check_duration, override_decision, unknown_topic, validate_override

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = ["Applied", "apply_change", "create_override"]

Applied = Literal["applied", "conflict", "already_applied"]


def apply_change(
    conn: Connection, *, cluster: str, evaluation_id: str, topic_id: str, d: Decision, unless_overridden: bool = False
) -> tuple[Applied, DecisionRow | None]:
    """Set the topic's ``linker_workers`` from ``d.previous_linker_workers`` to ``d.linker_workers`` and record why.

    One transaction, run again after a deadlock or lock-wait timeout. Returns
    ``("applied", the row recorded)``; ``("conflict", None)`` when the value is no longer
    ``d.previous_linker_workers`` (another evaluator got there first: nothing written), or, with
    `unless_overridden`, when a manual override of the topic became active after the decision was
    made (the override wins; checked after the row is locked, so an override committed meanwhile
    is seen); or ``("already_applied", None)`` when this evaluation id already recorded a decision
    for the topic (a twin run of the same evaluation).
    """
    import pymysql

    def change(cur: Cursor) -> tuple[Applied, DecisionRow | None]:
        if not set_linker_workers(cur, topic_id, d.previous_linker_workers, d.linker_workers) or (
            unless_overridden and is_overridden(cur, topic_id, d.decided_at_datetime)
        ):
            roll_back(conn)  # the compare-and-set may have written: the override wins
            return "conflict", None
        return "applied", insert_decision(cur, cluster=cluster, evaluation_id=evaluation_id, topic_id=topic_id, d=d)

    try:
        return run_transaction(conn, change, what=f"linker_workers of topic {topic_id}")
    except pymysql.err.IntegrityError:
        return "already_applied", None


def create_override(
    conn: Connection,
    *,
    cluster: str,
    topic: str,
    linker_workers: int,
    duration_s: float,
    reason: str,
    created_by: str,
    now: datetime,
    request_id: str | None = None,
    lag: int = 0,
    time_lag_s: float = 0.0,
) -> OverrideRow:
    """Validate, record and apply an override of `topic`'s ``linker_workers``; one transaction (run again
    after a deadlock or lock-wait timeout).

    Replaces (cancels) any active override of the same topic, sets the topic's ``linker_workers``
    to `linker_workers` and records a ``scaling_decisions`` row with rule ``override`` (policy
    ``manual``), evaluation id `evaluation_id_of` (override id), and a reason quoting `reason`,
    `created_by` and the expiry. `lag` and `time_lag_s` (the newest measurement) go into that row.

    With a `request_id` already used, returns the override that request made and writes nothing
    (a retried task must not pin twice).

    Raises:
        ConfigError: a bad request; ``field`` names it (``topic``: not an enabled topic of
            `cluster`; ``linker_workers``: below 1 or above the partition count; ``duration``:
            not in (0, 7 days]; ``reason``/``created_by``: empty or too long). Nothing is written.
    """
    now = aware_utc(now)
    validate_cluster_name(cluster)
    check_duration(duration_s)
    if request_id is not None and not 1 <= len(request_id) <= 250:
        raise ValueError(f"request_id must be 1 to 250 characters, got {len(request_id)}")

    def record(cur: Cursor) -> OverrideRow:
        if request_id is not None and (done := find_by_request(cur, request_id)) is not None:
            return done
        # Locking the cluster's rows serializes this with topic syncs and other overrides.
        rows = [r for r in lock_cluster(cur, cluster) if r.enabled]
        row = next((r for r in rows if r.name == topic), None)
        if row is None:
            raise unknown_topic(topic, cluster, [r.name for r in rows])
        validate_override(
            topic=topic,
            linker_workers=linker_workers,
            partitions=row.partition_count,
            duration_s=duration_s,
            reason=reason,
            created_by=created_by,
        )
        why, by = reason.strip(), created_by.strip()
        override_id = insert_override(
            cur,
            cluster=cluster,
            topic_id=row.topic_id,
            topic=topic,
            linker_workers=linker_workers,
            previous_linker_workers=row.linker_workers,
            reason=why,
            created_by=by,
            now=now,
            duration_s=duration_s,
            request_id=request_id,
        )
        # Under the lock the compare-and-set cannot lose; an unchanged count is still recorded,
        # so the history shows who pinned it and why.
        if row.linker_workers != linker_workers:
            set_linker_workers(cur, row.topic_id, row.linker_workers, linker_workers)
        decision = override_decision(
            override_id=override_id,
            topic=topic,
            previous_linker_workers=row.linker_workers,
            linker_workers=linker_workers,
            reason=why,
            created_by=by,
            duration_s=duration_s,
            now=now,
            lag=lag,
            time_lag_s=time_lag_s,
        )
        recorded = insert_decision(
            cur, cluster=cluster, evaluation_id=evaluation_id_of(override_id), topic_id=row.topic_id, d=decision
        )
        return link_decision(cur, override_id, recorded.decision_id)

    return run_transaction(conn, record, what=f"override of {cluster}/{topic}")
