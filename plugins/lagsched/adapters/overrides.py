"""The ``scaling_overrides`` table: manual overrides of a topic's ``linker_workers``.

An override pins a topic's worker count for a while (Tinybird's Black Friday case). Creating one
is `lagsched.adapters.worker_changes.create_override`: one transaction that uses this module's
`insert_override` and `link_decision` with the count's one write path, so no override exists that
was not applied, and no change exists without its decision.

Active means: not cancelled and ``expires_at`` after the given time. Nothing runs at expiry: the
evaluator simply no longer finds the override (`active_overrides`) and decides normally again.

All datetimes are aware UTC; the table stores them as UTC wall time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from lagsched.adapters.mysql import from_db, to_db
from lagsched.adapters.transactions import delete_in_batches, transaction
from lagsched.core.names import validate_cluster_name

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "OverrideRow",
    "active_overrides",
    "cancel_override",
    "delete_ended_overrides",
    "evaluation_id_of",
    "find_by_request",
    "get_override",
    "insert_override",
    "is_overridden",
    "link_decision",
    "list_overrides",
]

_COLUMNS = (
    "id, cluster, topic_id, topic, linker_workers, previous_linker_workers, reason, created_by, created_at, expires_at,"
    " cancelled_at, cancelled_by, request_id, decision_id"
)


@dataclass(frozen=True, slots=True)
class OverrideRow:
    """One ``scaling_overrides`` row.

    Attributes:
        id: row id (what ``lagsched override --cancel`` takes).
        cluster: registry cluster.
        topic_id: registry id of the topic.
        topic: the topic's name at creation.
        linker_workers: the count pinned while active.
        reason: why, in the user's words.
        created_by: who asked (Airflow user, or the CLI's OS user).
        created_at: when it was created (aware UTC).
        expires_at: when it stops pinning (aware UTC).
        previous_linker_workers: the count it replaced.
        cancelled_at: when it was cancelled or replaced by a newer override; None if never.
        cancelled_by: who cancelled it (or ``replaced by override <id>``).
        request_id: the creator's idempotency key (the Airflow run id), if any.
        decision_id: the ``scaling_decisions`` row that applied it.
    """

    id: int
    cluster: str
    topic_id: str
    topic: str
    linker_workers: int
    reason: str
    created_by: str
    created_at: datetime
    expires_at: datetime
    previous_linker_workers: int = 0
    cancelled_at: datetime | None = None
    cancelled_by: str | None = None
    request_id: str | None = None
    decision_id: int | None = None

    def is_active(self, now: datetime) -> bool:
        """True while not cancelled and not expired at `now`."""
        return self.cancelled_at is None and self.expires_at > now

    def status(self, now: datetime) -> str:
        """``active``, ``cancelled`` or ``expired`` at `now`."""
        if self.cancelled_at is not None and self.cancelled_at <= now:
            return "cancelled"
        return "active" if self.expires_at > now else "expired"

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        """JSON-ready (times in ISO 8601); with `now`, also ``status`` and ``remaining_s``."""
        out: dict[str, Any] = {
            "id": self.id,
            "cluster": self.cluster,
            "topic_id": self.topic_id,
            "topic": self.topic,
            "linker_workers": self.linker_workers,
            "previous_linker_workers": self.previous_linker_workers,
            "reason": self.reason,
            "created_by": self.created_by,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "cancelled_at": None if self.cancelled_at is None else self.cancelled_at.isoformat(),
            "cancelled_by": self.cancelled_by,
            "decision_id": self.decision_id,
        }
        if now is not None:
            out["status"] = self.status(now)
            out["remaining_s"] = max(0.0, (self.expires_at - now).total_seconds()) if self.is_active(now) else 0.0
        return out


def evaluation_id_of(override_id: int) -> str:
    """The ``scaling_decisions.evaluation_id`` of the decision that applied override `override_id`."""
    return f"override-{override_id}"


def find_by_request(cur: Cursor, request_id: str) -> OverrideRow | None:
    """The override a request id made, inside the caller's transaction (a retried task must not pin twice)."""
    cur.execute(f"SELECT {_COLUMNS} FROM scaling_overrides WHERE request_id = %s", (request_id,))  # noqa: S608 - fixed column list
    found = cur.fetchone()
    return None if found is None else _row(found)


def insert_override(
    cur: Cursor,
    *,
    cluster: str,
    topic_id: str,
    topic: str,
    linker_workers: int,
    previous_linker_workers: int,
    reason: str,
    created_by: str,
    now: datetime,
    duration_s: float,
    request_id: str | None,
) -> int:
    """INSERT one override inside the caller's transaction and cancel the topic's other active ones
    (``replaced by override <id>``); returns its id. The caller has validated the request."""
    cur.execute(
        "INSERT INTO scaling_overrides (cluster, topic_id, topic, linker_workers, previous_linker_workers, reason,"
        " created_by, created_at, expires_at, request_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (cluster, topic_id, topic, linker_workers, previous_linker_workers, reason, created_by, to_db(now),
         to_db(now + timedelta(seconds=duration_s)), request_id),
    )  # fmt: skip
    override_id = int(cur.lastrowid)
    cur.execute(
        "UPDATE scaling_overrides SET cancelled_at = %s, cancelled_by = %s"
        " WHERE topic_id = %s AND id <> %s AND cancelled_at IS NULL AND expires_at > %s",
        (to_db(now), f"replaced by override {override_id}", topic_id, override_id, to_db(now)),
    )
    return override_id


def link_decision(cur: Cursor, override_id: int, decision_id: int) -> OverrideRow:
    """Record which ``scaling_decisions`` row applied the override; returns the override as stored."""
    cur.execute("UPDATE scaling_overrides SET decision_id = %s WHERE id = %s", (decision_id, override_id))
    cur.execute(f"SELECT {_COLUMNS} FROM scaling_overrides WHERE id = %s", (override_id,))  # noqa: S608 - fixed column list
    stored = cur.fetchone()
    if stored is None:
        raise LookupError(f"override {override_id} is not in scaling_overrides")
    return _row(stored)


def active_overrides(conn: Connection, cluster: str | None, now: datetime) -> list[OverrideRow]:
    """The overrides active at `now` (not cancelled, not expired) of `cluster` (all when None),
    at most one per topic (the newest), by topic name."""
    where = ["cancelled_at IS NULL", "expires_at > %s"]
    args: list[Any] = [to_db(now)]
    if cluster is not None:
        where.insert(0, "cluster = %s")
        args.insert(0, validate_cluster_name(cluster))
    with transaction(conn) as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM scaling_overrides WHERE {' AND '.join(where)} ORDER BY id DESC",  # noqa: S608 - fixed clauses
            tuple(args),
        )
        rows = [_row(r) for r in cur.fetchall()]
    newest: dict[str, OverrideRow] = {}
    for r in rows:
        newest.setdefault(r.topic_id, r)
    return sorted(newest.values(), key=lambda r: (r.cluster, r.topic))


def list_overrides(
    conn: Connection, cluster: str | None = None, *, since: datetime | None = None, limit: int = 50
) -> list[OverrideRow]:
    """Overrides of `cluster` (all when None), active or not, created or still running after
    `since` (all when None), newest first, at most `limit`."""
    where: list[str] = []
    args: list[Any] = []
    if cluster is not None:
        where.append("cluster = %s")
        args.append(validate_cluster_name(cluster))
    if since is not None:
        where.append("expires_at > %s")
        args.append(to_db(since))
    sql = f"SELECT {_COLUMNS} FROM scaling_overrides"  # noqa: S608 - fixed column list
    if where:
        sql += " WHERE " + " AND ".join(where)
    with transaction(conn) as cur:
        cur.execute(sql + " ORDER BY id DESC LIMIT %s", (*args, int(limit)))
        return [_row(r) for r in cur.fetchall()]


def get_override(conn: Connection, override_id: int) -> OverrideRow | None:
    """The override with id `override_id`, None when there is none."""
    with transaction(conn) as cur:
        cur.execute(f"SELECT {_COLUMNS} FROM scaling_overrides WHERE id = %s", (int(override_id),))  # noqa: S608 - fixed column list
        found = cur.fetchone()
    return None if found is None else _row(found)


def cancel_override(conn: Connection, override_id: int, now: datetime, cancelled_by: str = "") -> bool:
    """End an active override at `now`; False when it does not exist or is no longer active.

    The worker count stays where it is until the next evaluation, which decides normally (its
    change, if any, is recorded with rule ``override_expired``).
    """
    at = to_db(now)
    with transaction(conn) as cur:
        cur.execute(
            "UPDATE scaling_overrides SET cancelled_at = %s, cancelled_by = %s"
            " WHERE id = %s AND cancelled_at IS NULL AND expires_at > %s",
            (at, cancelled_by.strip()[:255] or None, int(override_id), at),
        )
        return bool(cur.rowcount == 1)


def delete_ended_overrides(conn: Connection, before: datetime, *, batch_rows: int = 5000) -> int:
    """Delete the overrides that ended (expired, or were cancelled) before ``before``; returns how many.

    An active override (not cancelled, ``expires_at`` in the future) is never matched, whatever
    ``before`` is: ``before`` is a past time and an active override ends after now. In batches of
    at most ``batch_rows`` (`delete_in_batches`).
    """
    cutoff = to_db(before)
    return delete_in_batches(
        conn,
        "DELETE FROM scaling_overrides WHERE expires_at < %s OR cancelled_at < %s ORDER BY id LIMIT %s",
        (cutoff, cutoff),
        batch_rows,
    )


def is_overridden(cur: Cursor, topic_id: str, at: datetime) -> bool:
    """Whether `topic_id` has an override active at `at`, inside the caller's transaction.

    The evaluator's change calls it after locking the topic row: an override created since the
    evaluator read the overrides then wins, instead of being undone until the next evaluation.
    """
    cur.execute(
        "SELECT 1 FROM scaling_overrides WHERE topic_id = %s AND cancelled_at IS NULL AND expires_at > %s LIMIT 1",
        (topic_id, to_db(at)),
    )
    return cur.fetchone() is not None


def _row(r: Sequence[Any]) -> OverrideRow:
    (oid, cluster, topic_id, topic, workers, previous, reason, by, created, expires, cancelled, cancelled_by,
     request_id, decision_id) = r  # fmt: skip
    return OverrideRow(
        id=int(oid),
        cluster=str(cluster),
        topic_id=str(topic_id),
        topic=str(topic),
        linker_workers=int(workers),
        reason=str(reason),
        created_by=str(by),
        created_at=from_db(created),
        expires_at=from_db(expires),
        previous_linker_workers=int(previous),
        cancelled_at=None if cancelled is None else from_db(cancelled),
        cancelled_by=None if cancelled_by is None else str(cancelled_by),
        request_id=None if request_id is None else str(request_id),
        decision_id=None if decision_id is None else int(decision_id),
    )
