"""The claim table over MySQL/MariaDB: claim, renew, commit an offset, release.

Protocol (docs/claims.md has the full argument):

* A slot *holds* a row while ``claimed_by`` is its id, ``claim_epoch`` is the epoch its claim set,
  and ``lease_expires_at`` is in the future. Every claim bumps ``claim_epoch`` (a fencing token).
* ``claim`` takes rows that are unclaimed or whose lease ran out, oldest ``last_picked_at`` first,
  up to the slot's target per topic minus what it already holds.
* ``commit_offset`` and ``renew`` are compare-and-set updates on (``claimed_by``, ``claim_epoch``,
  live lease): a slot that lost a row gets ``StaleClaimError`` and writes nothing.
* ``release`` (Hevo's "disown") clears the holder and the lease and keeps the committed offset.

Clock: every lease is judged by the database's clock (``CURRENT_TIMESTAMP(6)``, sessions in UTC),
never a worker's. Workers run on many hosts; one clock that every compare-and-set reads inside the
statement it guards means clock skew between hosts cannot make two slots think they both hold a row.
A claim reads the database's ``now`` once and derives the new expiry from it with the pure
``lease_expiry`` (so the arithmetic is unit-tested and the returned ``Claim`` carries the exact value
written); the guards of commit, renew and release use ``CURRENT_TIMESTAMP(6)`` in the statement.

Lock-wait timeouts (1205) and deadlocks (1213) roll back and retry the whole operation with
full-jitter backoff (tenacity); a claim that still cannot get through returns no rows, the other
operations raise ``ClaimContentionError``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pymysql
import pymysql.cursors
import tenacity

from lagsched.adapters.mysql import connect
from lagsched.connections import MySQLParams
from lagsched.core.claims import (
    Claim,
    LockMode,
    RetryPolicy,
    lease_expiry,
    rows_to_claim,
    select_lock_mode,
)
from lagsched.core.errors import LagschedError, StaleClaimError

__all__ = ["ClaimContentionError", "ClaimStore", "open_claim_store", "server_lock_mode"]

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    # pymysql's Connection is generic only to the type checker.
    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
Cursor = pymysql.cursors.Cursor
T = TypeVar("T")

#: MySQL error codes worth retrying: the transaction was rolled back (deadlock) or its statement
#: gave up waiting for a row lock; running it again is safe because nothing was written.
LOCK_WAIT_TIMEOUT = 1205
DEADLOCK = 1213
_TRANSIENT = frozenset({LOCK_WAIT_TIMEOUT, DEADLOCK})

_MAX_ID_LEN = 36  # CHAR(36) columns

_CLAIMABLE = "topic_id = %s AND (claimed_by IS NULL OR lease_expires_at <= %s)"
# FORCE INDEX: the optimiser sometimes prefers ix_topic_partitions_claim for the OR, which then
# needs a filesort over (and, with FOR UPDATE, locks on) every claimable row of the topic.
# Only constants are interpolated into SQL here and below; values always go as parameters.
_PICK = (
    "SELECT partition_id, committed_offset, claim_epoch FROM topic_partitions"  # noqa: S608
    " FORCE INDEX (ix_topic_partitions_pick)"
    f" WHERE {_CLAIMABLE} ORDER BY last_picked_at, partition_id LIMIT %s"
)
_LOCKING_SUFFIX = {
    LockMode.SKIP_LOCKED: " FOR UPDATE SKIP LOCKED",
    LockMode.FOR_UPDATE: " FOR UPDATE",
    LockMode.OPTIMISTIC: "",
}


class ClaimContentionError(LagschedError):
    """An operation on the claim table kept hitting lock-wait timeouts or deadlocks.

    Nothing was written. It means the table is overloaded (or a long transaction holds its rows);
    the operation can be retried later, and ``innodb_lock_wait_timeout`` and the retry policy bound
    how long it waited.
    """


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.MySQLError) and bool(exc.args) and exc.args[0] in _TRANSIENT


def _to_db(value: datetime) -> datetime:
    # pymysql formats datetimes without their offset; sessions run in UTC, so send naive UTC.
    if value.tzinfo is None:
        raise ValueError(f"{value!r} is naive; pass timezone-aware datetimes")
    return value.astimezone(UTC).replace(tzinfo=None)


def _from_db(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a TIMESTAMP from the database, got {value!r}")
    return value.replace(tzinfo=UTC)


def _check_id(kind: str, value: str) -> None:
    if not value or len(value) > _MAX_ID_LEN:
        raise ValueError(f"{kind}={value!r}; must be 1 to {_MAX_ID_LEN} characters (a UUID)")


def server_lock_mode(conn: Connection, setting: str = "auto") -> LockMode:
    """The lock mode for this server: ``setting``, or with ``auto`` the best its version allows."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    conn.commit()
    if row is None:
        raise RuntimeError("SELECT VERSION() returned nothing")
    return select_lock_mode(setting, str(row[0]))


class ClaimStore:
    """Claim, renew, commit and release rows of ``topic_partitions`` for worker slots.

    One store wraps one connection and is not thread-safe (pymysql connections are not); give every
    worker process or thread its own.

    Args:
        conn: from ``lagsched.adapters.mysql.connect`` (UTC, READ COMMITTED, autocommit off).
        mode: the lock mode (``server_lock_mode`` picks it from the server version).
        retry: retry budget for lock-wait timeouts, deadlocks and optimistic CAS losses.
        rng: jitter source; seed it for reproducible runs.
        sleep: how to wait between retries (tests pass a recorder).
    """

    def __init__(
        self,
        conn: Connection,
        mode: LockMode,
        *,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.conn = conn
        self.mode = LockMode(mode)
        self.retry = retry or RetryPolicy()
        self._rng = rng or random.Random()
        self._sleep = sleep
        #: Optimistic CAS updates that lost their race since the store was made (for benchmarks).
        self.cas_conflicts = 0
        #: Operations retried after a 1205/1213 since the store was made.
        self.transient_retries = 0

    # ------------------------------------------------------------------ plumbing

    def _run(self, what: str, op: Callable[[Cursor], T]) -> T:
        """Run ``op`` in one transaction, retrying it whole after a lock-wait timeout or deadlock."""

        def attempt() -> T:
            try:
                with self.conn.cursor() as cur:
                    result = op(cur)
                self.conn.commit()
                return result
            except BaseException:
                self.conn.rollback()
                raise

        def before_sleep(state: tenacity.RetryCallState) -> None:
            self.transient_retries += 1
            exc = state.outcome.exception() if state.outcome else None
            log.info("%s: %s, retry %d", what, exc, state.attempt_number)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_is_transient),
            stop=tenacity.stop_after_attempt(self.retry.max_attempts),
            wait=lambda state: self.retry.backoff_s(state.attempt_number, self._rng),
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            return retrying(attempt)
        except pymysql.MySQLError as exc:
            if _is_transient(exc):
                raise ClaimContentionError(
                    f"{what}: still hitting lock-wait timeouts or deadlocks after {self.retry.max_attempts} "
                    f"attempts ({exc}); nothing was written, try again later"
                ) from exc
            raise

    @staticmethod
    def _db_now(cur: Cursor) -> datetime:
        cur.execute("SELECT CURRENT_TIMESTAMP(6)")
        row = cur.fetchone()
        assert row is not None
        return _from_db(row[0])

    @staticmethod
    def _held_counts(cur: Cursor, slot_id: str, now: datetime) -> dict[str, int]:
        cur.execute(
            "SELECT topic_id, COUNT(*) FROM topic_partitions"
            " WHERE claimed_by = %s AND lease_expires_at > %s GROUP BY topic_id",
            (slot_id, _to_db(now)),
        )
        return {str(t): int(n) for t, n in cur.fetchall()}

    # ------------------------------------------------------------------ claim

    def claim(self, slot_id: str, wants: Mapping[str, int], lease_s: float) -> list[Claim]:
        """Claim rows so the slot holds ``wants[topic]`` rows of each topic (its fair share).

        Takes, per topic, ``wants[topic]`` minus the rows the slot already holds, from rows that
        are unclaimed or whose lease ran out, oldest ``last_picked_at`` first (never-picked rows
        first). May return fewer rows than asked when the others are held. Each row gets
        ``claimed_by = slot_id``, ``claim_epoch + 1``, a fresh lease and ``last_picked_at = now``.

        Returns:
            The newly claimed rows, sorted by (topic_id, partition_id); rows already held are not
            repeated (``held`` lists them).
        """
        _check_id("slot_id", slot_id)
        for topic_id, n in wants.items():
            _check_id("topic_id", topic_id)
            if n < 0:
                raise ValueError(f"wants[{topic_id!r}]={n}; must be >= 0")
        lease_expiry(datetime.now(UTC), lease_s)  # validates lease_s before any I/O
        if not any(wants.values()):
            return []
        try:
            if self.mode is LockMode.OPTIMISTIC:
                return self._claim_optimistic(slot_id, wants, lease_s)
            return self._run("claim", lambda cur: self._claim_locked(cur, slot_id, wants, lease_s))
        except ClaimContentionError as exc:
            # A claim that cannot get through is not an error for the caller: it holds what it
            # held, and the next round tries again.
            log.warning("slot %s claimed nothing: %s", slot_id, exc)
            return []

    def _claim_locked(self, cur: Cursor, slot_id: str, wants: Mapping[str, int], lease_s: float) -> list[Claim]:
        now = self._db_now(cur)
        expires = lease_expiry(now, lease_s)
        held = self._held_counts(cur, slot_id, now)
        pick = _PICK + _LOCKING_SUFFIX[self.mode]
        claims: list[Claim] = []
        # Topics in a fixed order, so two claimers of the same topics lock in the same order.
        for topic_id in sorted(wants):
            n = rows_to_claim(wants[topic_id], held.get(topic_id, 0))
            if n == 0:
                continue
            cur.execute(pick, (topic_id, _to_db(now), n))
            rows = cur.fetchall()
            if not rows:
                continue
            ids = [int(r[0]) for r in rows]
            marks = ", ".join(["%s"] * len(ids))
            cur.execute(
                "UPDATE topic_partitions SET claimed_by = %s, claim_epoch = claim_epoch + 1,"  # noqa: S608
                " lease_expires_at = %s, last_picked_at = %s"
                f" WHERE topic_id = %s AND partition_id IN ({marks})",
                (slot_id, _to_db(expires), _to_db(now), topic_id, *ids),
            )
            # The rows are locked by this transaction, so the epoch read is the one incremented.
            claims.extend(
                Claim(topic_id, int(p), None if off is None else int(off), int(epoch) + 1, expires)
                for p, off, epoch in rows
            )
        return sorted(claims, key=lambda c: c.key)

    def _claim_optimistic(self, slot_id: str, wants: Mapping[str, int], lease_s: float) -> list[Claim]:
        won: list[Claim] = []
        for attempt in range(1, self.retry.max_attempts + 1):
            got, lost = self._run("claim", lambda cur: self._cas_round(cur, slot_id, wants, lease_s))
            won.extend(got)
            if not lost or attempt == self.retry.max_attempts:
                break
            # Someone took rows we had read; back off with jitter so the losers spread out.
            self._sleep(self.retry.backoff_s(attempt, self._rng))
        return sorted(won, key=lambda c: c.key)

    def _cas_round(
        self, cur: Cursor, slot_id: str, wants: Mapping[str, int], lease_s: float
    ) -> tuple[list[Claim], int]:
        """One optimistic round: read candidates unlocked, then CAS each on its epoch.

        Each CAS commits on its own, so a won row is never locked while later ones are tried and a
        concurrent claimer waits at most one single-row update.
        """
        now = self._db_now(cur)
        expires = lease_expiry(now, lease_s)
        held = self._held_counts(cur, slot_id, now)
        self.conn.commit()
        won: list[Claim] = []
        short = 0
        for topic_id in sorted(wants):
            n = rows_to_claim(wants[topic_id], held.get(topic_id, 0))
            if n == 0:
                continue
            # Read twice what is needed, so one lost race moves on to the next-oldest row instead
            # of a full retry (Hevo: "retry with n different Topic Partitions").
            cur.execute(_PICK, (topic_id, _to_db(now), 2 * n))
            candidates = cur.fetchall()
            self.conn.commit()
            taken = lost = 0
            for p, off, epoch in candidates:
                if taken == n:
                    break
                cur.execute(
                    "UPDATE topic_partitions SET claimed_by = %s, claim_epoch = claim_epoch + 1,"
                    " lease_expires_at = %s, last_picked_at = %s"
                    " WHERE topic_id = %s AND partition_id = %s AND claim_epoch = %s"
                    " AND (claimed_by IS NULL OR lease_expires_at <= %s)",
                    (slot_id, _to_db(expires), _to_db(now), topic_id, p, epoch, _to_db(now)),
                )
                self.conn.commit()
                if cur.rowcount == 1:
                    won.append(Claim(topic_id, int(p), None if off is None else int(off), int(epoch) + 1, expires))
                    taken += 1
                else:
                    lost += 1
            self.cas_conflicts += lost
            # Retry only when races were lost: too few candidates and no race means nothing is free.
            if taken < n and lost:
                short += n - taken
        return won, short

    # ------------------------------------------------------------------ held rows

    def held(self, slot_id: str) -> list[Claim]:
        """Rows the slot holds now (live lease), e.g. for a restarted worker with a stable slot id."""
        _check_id("slot_id", slot_id)

        def op(cur: Cursor) -> list[Claim]:
            cur.execute(
                "SELECT topic_id, partition_id, committed_offset, claim_epoch, lease_expires_at"
                " FROM topic_partitions WHERE claimed_by = %s AND lease_expires_at > CURRENT_TIMESTAMP(6)"
                " ORDER BY topic_id, partition_id",
                (slot_id,),
            )
            return [
                Claim(str(t), int(p), None if o is None else int(o), int(e), _from_db(x))
                for t, p, o, e, x in cur.fetchall()
            ]

        return self._run("held", op)

    # ------------------------------------------------------------------ renew, commit, release

    def renew(self, slot_id: str, claims: Iterable[Claim], lease_s: float) -> list[Claim]:
        """Extend the leases of rows the slot still holds.

        Returns:
            The renewed claims with their new ``lease_expires_at``. A claim missing from the result
            was lost (taken over, released, or its lease had run out): stop consuming it.
        """
        _check_id("slot_id", slot_id)
        todo = list(claims)
        lease_expiry(datetime.now(UTC), lease_s)

        def op(cur: Cursor) -> list[Claim]:
            now = self._db_now(cur)
            expires = lease_expiry(now, lease_s)
            renewed: list[Claim] = []
            for c in todo:
                cur.execute(
                    "UPDATE topic_partitions SET lease_expires_at = %s"
                    " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s"
                    " AND lease_expires_at > CURRENT_TIMESTAMP(6)",
                    (_to_db(expires), c.topic_id, c.partition_id, slot_id, c.claim_epoch),
                )
                # rowcount counts changed rows; an unchanged expiry (same microsecond) is held too.
                if cur.rowcount == 1 or self._is_held(cur, slot_id, c, expires):
                    renewed.append(Claim(c.topic_id, c.partition_id, c.committed_offset, c.claim_epoch, expires))
                else:
                    log.warning("slot %s lost %s[%d] epoch %d", slot_id, c.topic_id, c.partition_id, c.claim_epoch)
            return renewed

        return self._run("renew", op)

    @staticmethod
    def _is_held(cur: Cursor, slot_id: str, c: Claim, expires: datetime) -> bool:
        cur.execute(
            "SELECT 1 FROM topic_partitions WHERE topic_id = %s AND partition_id = %s"
            " AND claimed_by = %s AND claim_epoch = %s AND lease_expires_at = %s",
            (c.topic_id, c.partition_id, slot_id, c.claim_epoch, _to_db(expires)),
        )
        return cur.fetchone() is not None

    def commit_offset(self, slot_id: str, topic_id: str, partition_id: int, epoch: int, offset: int) -> None:
        """Store ``offset`` as the next offset to consume, only while the slot still holds the row.

        Raises:
            StaleClaimError: the row is held by another slot or epoch, was released, or its lease
                ran out. Nothing was written.
        """
        _check_id("slot_id", slot_id)
        _check_id("topic_id", topic_id)
        if offset < 0:
            raise ValueError(f"offset={offset}; Kafka offsets are >= 0")

        def op(cur: Cursor) -> None:
            cur.execute(
                "UPDATE topic_partitions SET committed_offset = %s"
                " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s"
                " AND lease_expires_at > CURRENT_TIMESTAMP(6)",
                (offset, topic_id, partition_id, slot_id, epoch),
            )
            if cur.rowcount == 1:
                return
            # rowcount is 0 both when the guard failed and when the offset was already this
            # value (pymysql counts changed rows): tell them apart by reading the row.
            cur.execute(
                "SELECT claimed_by, claim_epoch, lease_expires_at, committed_offset, CURRENT_TIMESTAMP(6)"
                " FROM topic_partitions WHERE topic_id = %s AND partition_id = %s",
                (topic_id, partition_id),
            )
            row = cur.fetchone()
            if row is None:
                raise StaleClaimError(
                    f"commit of offset {offset} to {topic_id}[{partition_id}] refused: no such row",
                    topic_id=topic_id,
                    partition_id=partition_id,
                    epoch=epoch,
                )
            holder, cur_epoch, lease, committed, now = row
            live = lease is not None and lease > now
            if holder == slot_id and int(cur_epoch) == epoch and live and committed == offset:
                return  # an idempotent re-commit of the same offset
            reason = (
                f"held by {holder} at epoch {cur_epoch}"
                if holder is not None and int(cur_epoch) != epoch
                else "released"
                if holder is None
                else f"lease ran out at {lease}"
            )
            raise StaleClaimError(
                f"slot {slot_id} may not commit offset {offset} to {topic_id}[{partition_id}] with epoch "
                f"{epoch}: the row is {reason} (database time {now}); nothing was written. Stop "
                "consuming this partition and claim again.",
                topic_id=topic_id,
                partition_id=partition_id,
                epoch=epoch,
            )

        self._run("commit_offset", op)

    def release(self, slot_id: str, claims: Iterable[Claim]) -> list[Claim]:
        """Give rows back (Hevo's "disown"): clear holder and lease, keep offset and epoch.

        Only rows the slot still holds with the same epoch are released, lease live or not (an
        expired row nobody took is still safe to hand back).

        Returns:
            The claims actually released; the others had already been taken over or released.
        """
        _check_id("slot_id", slot_id)
        todo: Sequence[Claim] = list(claims)

        def op(cur: Cursor) -> list[Claim]:
            released: list[Claim] = []
            for c in sorted(todo, key=lambda c: c.key):
                # Setting claimed_by to NULL always changes the row, so rowcount is exact here.
                cur.execute(
                    "UPDATE topic_partitions SET claimed_by = NULL, lease_expires_at = NULL"
                    " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s",
                    (c.topic_id, c.partition_id, slot_id, c.claim_epoch),
                )
                if cur.rowcount == 1:
                    released.append(c)
            return released

        return self._run("release", op)


def open_claim_store(
    params: MySQLParams,
    lock_mode: str = "auto",
    *,
    retry: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> ClaimStore:
    """Connect and build a ``ClaimStore`` whose lock mode suits the server (or ``lock_mode``)."""
    conn = connect(params)
    return ClaimStore(conn, server_lock_mode(conn, lock_mode), retry=retry, rng=rng)
