"""MySQL transactions: the one module that opens, commits, rolls back and retries them.

Every repository module (topics, claims, decisions, overrides, gaps, status queries, worker changes)
runs its statements through `transaction` or `run_transaction`; none commits by hand. The few units
of work whose end is decided half-way (ownership's compare-and-write, a migration's steps, a
compare-and-set an override beat) end it with `commit`, `end_reads` or `roll_back`: no other module
calls the connection's ``commit()`` or ``rollback()``. The one retry
policy: a transaction that hit a deadlock (1213, InnoDB rolled it back) or a lock-wait timeout (1205)
is run again whole, with full-jitter backoff (`lagsched.core.claims.RetryPolicy`), a bounded number
of times; any other error is raised at once. Running it again is safe: nothing of it was written.
`retry_transient` is that loop; the claim store runs its calls through it too, a claim also
retrying a round that lost every race.
(`lagsched.adapters.ownership` keeps its own compare-and-write loop: a lost race there is not an
error, and its retry reads what the winner stored.)
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from lagsched.core.claims import RetryPolicy

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
    Cursor = pymysql.cursors.Cursor

__all__ = [
    "DEADLOCK",
    "LOCK_WAIT_TIMEOUT",
    "RetriesExhausted",
    "commit",
    "delete_in_batches",
    "end_reads",
    "is_transient",
    "retry_transient",
    "roll_back",
    "rollback_quietly",
    "run_transaction",
    "transaction",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: MySQL error codes worth retrying: the transaction was rolled back (deadlock) or its statement
#: gave up waiting for a row lock; running it again is safe because nothing was written.
LOCK_WAIT_TIMEOUT = 1205
DEADLOCK = 1213
_TRANSIENT = frozenset({LOCK_WAIT_TIMEOUT, DEADLOCK})


def is_transient(exc: BaseException) -> bool:
    """A deadlock or lock-wait timeout: the transaction can be run again."""
    import pymysql

    return isinstance(exc, pymysql.MySQLError) and bool(exc.args) and exc.args[0] in _TRANSIENT


@contextmanager
def transaction(conn: Connection) -> Iterator[Cursor]:
    """A cursor in one transaction: committed at the end, rolled back on any error.

    Reads end their transaction too, so a long-lived connection sees other writers' commits next
    time. A failed statement's rollback error (the connection broke) must not hide the
    statement's own error, so it is only logged.
    """
    try:
        with conn.cursor() as cur:
            yield cur
    except BaseException:
        rollback_quietly(conn)
        raise
    conn.commit()


def run_transaction(
    conn: Connection,
    op: Callable[[Cursor], T],
    *,
    what: str = "transaction",
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """``op(cursor)`` in one transaction, run again whole after a deadlock or lock-wait timeout.

    Raises the last transient error once ``retry.max_attempts`` attempts failed, and any other
    error at once (rolled back either way).
    """

    def attempt() -> T:
        with transaction(conn) as cur:
            return op(cur)

    return retry_transient(attempt, what=what, retry=retry, sleep=sleep, rng=rng)


class RetriesExhausted(Exception):
    """Every attempt `retry_transient` made with ``again`` failed or was asked to be made again."""


def retry_transient(
    attempt: Callable[[], T],
    *,
    what: str,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    again: Callable[[T], bool] | None = None,
    rejected: str = "no progress",
    on_retry: Callable[[BaseException | None], None] | None = None,
) -> T:
    """The one retry loop: ``attempt()`` made again after a deadlock or a lock-wait timeout (and,
    with ``again``, after a result ``again`` rejects, logged as ``rejected``), with full-jitter backoff, at most
    ``retry.max_attempts`` attempts in all. Any other error is raised at once.

    When the attempts are spent, the last transient error is raised; with ``again``,
    `RetriesExhausted` is raised instead whatever failed the last attempt, so the caller can report
    what the attempts did (a claim returns the rows it won). ``on_retry`` hears each failure
    retried (None for a rejected result) before the backoff.
    """
    policy = retry or RetryPolicy()
    jitter = rng or random.Random()
    for n in range(1, policy.max_attempts + 1):
        failure: BaseException | None = None
        try:
            result = attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            failure = exc
        else:
            if again is None or not again(result):
                return result
        if n == policy.max_attempts:
            break
        if on_retry is not None:
            on_retry(failure)
        log.info("%s: %s, retry %d of %d", what, failure or rejected, n, policy.max_attempts - 1)
        sleep(policy.backoff_s(n, jitter))
    if again is not None:
        raise RetriesExhausted(f"{what}: {policy.max_attempts} attempt(s) spent") from failure
    assert failure is not None  # without `again`, only a transient error leads here
    raise failure


def delete_in_batches(conn: Connection, sql: str, params: Sequence[Any], batch_rows: int) -> int:
    """Run ``sql`` (a ``DELETE ... LIMIT %s``; ``batch_rows`` is appended to ``params``) until it
    deletes fewer than ``batch_rows`` rows, each run its own transaction; returns the rows deleted.

    Short transactions: under the session's READ COMMITTED, InnoDB holds locks only on the rows a
    run deletes, so writers of the same table wait at most one batch.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    deleted = 0
    while True:
        gone = run_transaction(conn, lambda cur: int(cur.execute(sql, (*params, int(batch_rows)))), what="delete")
        deleted += gone
        if gone < batch_rows:
            return deleted


def commit(conn: Connection) -> None:
    """Commit the open transaction, where `transaction` cannot scope it: a unit of work that began
    in an earlier statement (a row locked, then written only if its compare held) or that keeps a
    cursor across several commits (a migration's steps). Raises the client's error.
    """
    conn.commit()


def end_reads(conn: Connection) -> None:
    """End a transaction that only read (and perhaps locked rows): it wrote nothing, so its commit
    only releases its locks and starts a fresh snapshot, should the session run REPEATABLE READ
    (ours run READ COMMITTED, where each statement sees the latest commits anyway).
    """
    conn.commit()


def roll_back(conn: Connection) -> None:
    """Undo the open transaction and release its locks, raising a failure: here the rollback is the
    point (a lost compare-and-set, a statement the caller recovers from), unlike `rollback_quietly`.
    Inside `transaction`, the work continues in a new transaction, which `transaction` commits.
    """
    conn.rollback()


def rollback_quietly(conn: Connection) -> None:
    """Roll back, logging (not raising) a failure: the error that led here is the one to see."""
    try:
        conn.rollback()
    except Exception as exc:  # noqa: BLE001 - the original error is the one worth raising
        log.debug("rollback after a failed statement failed too: %s", exc)
