"""The ``scaling_overrides`` table: manual overrides of a topic's ``linker_workers``.

An override pins a topic's worker count for a while (Tinybird's Black Friday case). Creating one
(`create_override`) is one transaction that validates the request, records the override,
replaces any active override of the same topic, sets ``topics.linker_workers`` and records the
change as a ``scaling_decisions`` row with rule ``override``; so no override exists that was not
applied, and no change exists without its decision. Announcing it on Redis is the caller's part
(`lagsched.workflows.overrides.apply_override`).

Active means: not cancelled and ``expires_at`` after the given time. Nothing runs at expiry: the
evaluator simply no longer finds the override (`active_overrides`) and decides normally again.

All datetimes are aware UTC; the table stores them as UTC wall time.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lagsched.adapters.decisions import insert_decision
from lagsched.adapters.topics import delete_in_batches, lock_cluster, set_linker_workers, transaction
from lagsched.core.errors import ConfigError
from lagsched.core.evaluator import Decision
from lagsched.core.names import validate_cluster_name
from lagsched.core.overrides import check_duration, format_duration, validate_override

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "OverrideRow",
    "active_overrides",
    "cancel_override",
    "create_override",
    "delete_ended_overrides",
    "evaluation_id_of",
    "get_override",
    "is_overridden",
    "list_overrides",
]

_COLUMNS = (
    "id, cluster, topic_id, topic, linker_workers, previous_workers, reason, created_by, created_at, expires_at,"
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
        previous_workers: the count it replaced.
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
    previous_workers: int = 0
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
            "previous_workers": self.previous_workers,
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
    """Validate, record and apply an override of `topic`'s ``linker_workers``; one transaction.

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
    now = _aware(now)
    validate_cluster_name(cluster)
    check_duration(duration_s)
    if request_id is not None and not 1 <= len(request_id) <= 250:
        raise ValueError(f"request_id must be 1 to 250 characters, got {len(request_id)}")
    with transaction(conn) as cur:
        if request_id is not None:
            cur.execute(f"SELECT {_COLUMNS} FROM scaling_overrides WHERE request_id = %s", (request_id,))  # noqa: S608 - fixed column list
            found = cur.fetchone()
            if found is not None:
                return _row(found)
        # Locking the cluster's rows serializes this with topic syncs and other overrides.
        rows = [r for r in lock_cluster(cur, cluster) if r.enabled]
        row = next((r for r in rows if r.name == topic), None)
        if row is None:
            close = difflib.get_close_matches(topic, [r.name for r in rows], n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            allowed = f"must be an enabled topic of cluster {cluster!r}{hint}; run the topic sync if it is new"
            raise ConfigError(
                f"invalid override: topic = {topic!r}: {allowed}", field="topic", value=topic, allowed=allowed
            )
        validate_override(
            topic=topic,
            linker_workers=linker_workers,
            partitions=row.partition_count,
            duration_s=duration_s,
            reason=reason,
            created_by=created_by,
        )
        reason, created_by = reason.strip(), created_by.strip()
        expires = now + timedelta(seconds=duration_s)
        cur.execute(
            "INSERT INTO scaling_overrides (cluster, topic_id, topic, linker_workers, previous_workers, reason,"
            " created_by, created_at, expires_at, request_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (cluster, row.topic_id, topic, linker_workers, row.linker_workers, reason, created_by, _to_db(now),
             _to_db(expires), request_id),
        )  # fmt: skip
        override_id = int(cur.lastrowid)
        cur.execute(
            "UPDATE scaling_overrides SET cancelled_at = %s, cancelled_by = %s"
            " WHERE topic_id = %s AND id <> %s AND cancelled_at IS NULL AND expires_at > %s",
            (_to_db(now), f"replaced by override {override_id}", row.topic_id, override_id, _to_db(now)),
        )
        # Under the lock the compare-and-set cannot lose; an unchanged count is still recorded,
        # so the history shows who pinned it and why.
        if row.linker_workers != linker_workers:
            set_linker_workers(cur, row.topic_id, row.linker_workers, linker_workers)
        until = expires.strftime("%Y-%m-%d %H:%M:%S UTC")
        decision = Decision(
            topic=topic,
            old_workers=row.linker_workers,
            new_workers=linker_workers,
            lag=lag,
            time_lag_s=time_lag_s,
            slope=0.0,
            fit_r2=0.0,
            policy="manual",
            rule="override",
            reason=f"{reason} (override {override_id} by {created_by} for {format_duration(duration_s)}, "
            f"{linker_workers} workers until {until})",
            at=now.timestamp(),
        )
        decision_id = insert_decision(
            cur, cluster=cluster, evaluation_id=evaluation_id_of(override_id), topic_id=row.topic_id, d=decision
        )
        cur.execute("UPDATE scaling_overrides SET decision_id = %s WHERE id = %s", (decision_id, override_id))
        cur.execute(f"SELECT {_COLUMNS} FROM scaling_overrides WHERE id = %s", (override_id,))  # noqa: S608 - fixed column list
        created = cur.fetchone()
        assert created is not None  # inserted above, in this transaction
        return _row(created)


def active_overrides(conn: Connection, cluster: str | None, now: datetime) -> list[OverrideRow]:
    """The overrides active at `now` (not cancelled, not expired) of `cluster` (all when None),
    at most one per topic (the newest), by topic name."""
    where = ["cancelled_at IS NULL", "expires_at > %s"]
    args: list[Any] = [_to_db(_aware(now))]
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
        args.append(_to_db(_aware(since)))
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
    at = _to_db(_aware(now))
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
    cutoff = _to_db(_aware(before))
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
        (topic_id, _to_db(_aware(at))),
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
        created_at=_from_db(created),
        expires_at=_from_db(expires),
        previous_workers=int(previous),
        cancelled_at=None if cancelled is None else _from_db(cancelled),
        cancelled_by=None if cancelled_by is None else str(cancelled_by),
        request_id=None if request_id is None else str(request_id),
        decision_id=None if decision_id is None else int(decision_id),
    )


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError(f"a naive datetime is ambiguous; pass an aware UTC datetime, got {at!r}")
    return at.astimezone(UTC)


def _to_db(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(tzinfo=None)


def _from_db(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)
