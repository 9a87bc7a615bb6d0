"""The claim table over MySQL/MariaDB: claim, renew, commit an offset, rebalance, release.

Protocol (docs/claims.md has the full argument):

* A slot *holds* a row while ``claimed_by`` is its id, ``claim_epoch`` is the epoch its claim set,
  and ``lease_expires_at`` is in the future. Every claim bumps ``claim_epoch`` (a fencing token).
* ``claim`` takes rows that are unclaimed or whose lease ran out, oldest ``last_picked_at`` first,
  up to the slot's target per topic minus what it already holds, and returns everything the slot
  holds afterwards (``ClaimResult``), with the new rows flagged and the reason for any shortfall.
* ``commit_offset`` and ``renew`` are compare-and-set updates on (``claimed_by``, ``claim_epoch``,
  live lease) that return the row as it is now; a commit by a slot that lost the row raises
  ``ClaimLostError`` (a ``StaleClaimError``) saying what happened to it, and writes nothing.
* ``rebalance`` hands over the rows above the slot's share; ``release`` (Hevo's "disown") hands
  over given rows. Both clear the holder and the lease and keep the committed offset.

Clock: every lease is judged by the database's clock (``CURRENT_TIMESTAMP(6)``, sessions in UTC),
never a worker's. Workers run on many hosts; one clock that every compare-and-set reads inside the
statement it guards means clock skew between hosts cannot make two slots think they both hold a row.
A claim reads the database's ``now`` once and derives the new expiry from it with the pure
``lease_expiry`` (so the arithmetic is unit-tested and the returned claim carries the exact value
written); the guards of commit, renew and release use ``CURRENT_TIMESTAMP(6)`` in the statement.

Rows: every row this module reads or returns is a `lagsched.core.claims.PartitionRow`. A claim (a row
the slot holds) loads ``committed_offset``, ``claimed_by`` (the slot), ``claim_epoch`` and
``lease_expires_at``; the row a lost claim is judged by adds ``last_picked_at``.

Retries: one budget per call (``RetryPolicy.max_attempts``), spent by lock-wait timeouts (1205),
deadlocks (1213) and, for a claim, by rounds that lost every race they ran; full-jitter backoff
between attempts (`lagsched.adapters.transactions.retry_transient`, the one retry loop). What a
claim returns is read from committed state, never rebuilt from an attempt that failed half-way,
so a row committed before an error is always reported.

Lock order: every transaction that can wait for a row lock takes its locks in ascending
(``topic_id``, ``partition_id``) order, so no two of them can wait for each other in a cycle. A
``skip_locked`` claim takes its rows in claim order instead, but it never waits, so it cannot close a
cycle either.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import pymysql
import pymysql.cursors

from lagsched.adapters.late_records import LateRecords, log_late
from lagsched.adapters.mysql import connect, from_db, to_db
from lagsched.adapters.transactions import (
    DEADLOCK,
    LOCK_WAIT_TIMEOUT,
    RetriesExhausted,
    is_transient,
    retry_transient,
    transaction,
)
from lagsched.connections import MySQLParams
from lagsched.core.claims import (
    ClaimResult,
    LockMode,
    PartitionRow,
    RetryPolicy,
    check_lease_s,
    claim_status,
    claim_terms,
    judge_claim,
    lease_expiry,
    lost_claim,
    rows_to_release,
    select_lock_mode,
    shortfall,
)
from lagsched.core.errors import LagschedError

__all__ = ["ClaimContentionError", "ClaimStore", "open_claim_store", "server_lock_mode"]

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    # pymysql's Connection is generic only to the type checker.
    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]
Cursor = pymysql.cursors.Cursor
T = TypeVar("T")


_MAX_ID_LEN = 36  # CHAR(36) columns

_CLAIMABLE = "(claimed_by IS NULL OR lease_expires_at <= %s)"
# FORCE INDEX: the optimiser sometimes prefers ix_topic_partitions_claim for the OR, which then
# needs a filesort over (and, with FOR UPDATE, locks on) every claimable row of the topic.
# Only constants are interpolated into SQL here and below; values always go as parameters.
_PICK = (
    "SELECT partition_id, committed_offset, claim_epoch FROM topic_partitions"  # noqa: S608
    " FORCE INDEX (ix_topic_partitions_pick)"
    f" WHERE topic_id = %s AND {_CLAIMABLE} ORDER BY last_picked_at, partition_id LIMIT %s"
)
_SET_CLAIMED = (
    "UPDATE topic_partitions SET claimed_by = %s, claim_epoch = claim_epoch + 1,"
    " lease_expires_at = %s, last_picked_at = %s"
)
_HOLDING = (
    "SELECT topic_id, partition_id, committed_offset, claim_epoch, lease_expires_at FROM topic_partitions"
    " WHERE claimed_by = %s AND lease_expires_at > CURRENT_TIMESTAMP(6) ORDER BY topic_id, partition_id"
)
# The database's clock and the slot's holding at that instant, in one round trip: a claim's first
# statement. The one-row derived table keeps `now` when the slot holds nothing. Sorted by the
# caller: an ORDER BY here costs a temporary table on every claim.
_NOW_AND_HOLDING = (
    "SELECT n.now, t.topic_id, t.partition_id, t.committed_offset, t.claim_epoch, t.lease_expires_at"
    " FROM (SELECT CURRENT_TIMESTAMP(6) AS now) AS n LEFT JOIN topic_partitions AS t"
    " ON t.claimed_by = %s AND t.lease_expires_at > n.now"
)
#: Picks a for_update claim makes in one transaction while others take every row it waited for.
_FOR_UPDATE_PICKS = 4
# _PICK among partitions above the given one: a for_update claim's pick after it lost every row it waited for.
_PICK_ABOVE = (
    "SELECT partition_id, committed_offset, claim_epoch FROM topic_partitions"  # noqa: S608
    " FORCE INDEX (ix_topic_partitions_pick)"
    f" WHERE topic_id = %s AND {_CLAIMABLE} AND partition_id > %s ORDER BY last_picked_at, partition_id LIMIT %s"
)
# A commit stores the next offset and closes the batch recorded by begin_batch.
_COMMIT = (
    "UPDATE topic_partitions SET committed_offset = %s, pending_start = NULL, pending_end = NULL,"
    # GREATEST is NULL when either is: the stored time only grows, and a NULL on either side keeps the other.
    " max_timestamp_ms = COALESCE(GREATEST(max_timestamp_ms, %s), max_timestamp_ms, %s)"
    " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s"
)
_RELEASE = (
    "UPDATE topic_partitions SET claimed_by = NULL, lease_expires_at = NULL"
    " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s"
)


def _only(sql: str, partitions: Sequence[int] | None) -> str:
    """``sql`` (a pick) limited to ``partitions`` (a rack target); its values follow the pick's
    WHERE values and precede LIMIT's. The index still serves the order; the IN only filters."""
    if partitions is None:
        return sql
    marks = ", ".join(["%s"] * len(partitions))
    return sql.replace(" ORDER BY ", f" AND partition_id IN ({marks}) ORDER BY ", 1)


class ClaimContentionError(LagschedError):
    """A renew, commit, release or rebalance kept hitting lock-wait timeouts or deadlocks.

    Nothing was written. It means the table is overloaded (or a long transaction holds its rows);
    the operation can be retried later, and ``innodb_lock_wait_timeout`` and the retry policy bound
    how long it waited. A claim never raises it: it reports ``ClaimStatus.CONTENDED`` instead.
    """


def _maybe_from_db(value: Any) -> datetime | None:
    return None if value is None else from_db(value)


def _offset(value: Any) -> int | None:
    return None if value is None else int(value)


def _held(  # noqa: PLR0917 - private, the columns in the order the reads select them
    slot_id: str, topic_id: Any, partition_id: Any, offset: Any, epoch: Any, lease: datetime
) -> PartitionRow:
    """A row ``slot_id`` holds, from the columns the store's reads of held rows load (not
    ``last_picked_at``, not the pending batch: those stay ``None``)."""
    return PartitionRow(
        str(topic_id),
        int(partition_id),
        committed_offset=_offset(offset),
        claimed_by=slot_id,
        claim_epoch=int(epoch),
        lease_expires_at=lease,
    )


def _check_id(kind: str, value: str) -> None:
    if not value or len(value) > _MAX_ID_LEN:
        raise ValueError(f"{kind}={value!r}; must be 1 to {_MAX_ID_LEN} characters (a UUID)")


def _check_wants(wants: Mapping[str, int]) -> None:
    for topic_id, n in wants.items():
        _check_id("topic_id", topic_id)
        if n < 0:
            raise ValueError(f"wants[{topic_id!r}]={n}; must be >= 0")


def server_lock_mode(conn: Connection, setting: str = "auto") -> LockMode:
    """The lock mode for this server: ``setting``, or with ``auto`` the best its version allows."""
    with transaction(conn) as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    if row is None:
        raise RuntimeError("SELECT VERSION() returned nothing")
    return select_lock_mode(setting, str(row[0]))


@dataclass(frozen=True, slots=True)
class _Pass:
    """One claim pass: what the slot held after it, and the races it ran."""

    holding: list[PartitionRow]
    won: int
    lost: int


class ClaimStore:
    """Claim, renew, commit, rebalance and release rows of ``topic_partitions`` for worker slots.

    One store wraps one connection and is not thread-safe (pymysql connections are not); give every
    worker process or thread its own. Close it (``close()``, or use it as a context manager).

    A worker's loop, with no book-keeping of its own::

        with open_claim_store(params) as store:
            while running:
                wants = wants_for(slot, current_assignment(conn, cluster, live_slots))
                store.rebalance(slot, wants)              # at a batch boundary: hand over the excess
                held = store.claim(slot, wants, lease_s)  # everything it holds now, new rows flagged
                for c in held.claims:
                    ...consume from c.committed_offset...
                    c = store.commit_offset(slot, c, next_offset)  # ClaimLostError: drop c

    Args:
        conn: from ``lagsched.adapters.mysql.connect`` (UTC, READ COMMITTED, autocommit off).
        mode: the lock mode (``server_lock_mode`` picks it from the server version).
        retry: the retry budget of every call: lock-wait timeouts, deadlocks and lost races.
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
        #: Candidate rows another claimer took first (optimistic CAS losses, and for_update rows
        #: gone by the time they were locked) since the store was made (for benchmarks).
        self.cas_conflicts = 0
        #: Attempts retried (after a 1205/1213, or a claim round that lost every race).
        self.retries = 0
        #: Deadlocks (1213) this store's transactions were chosen as the victim of.
        self.deadlocks = 0
        #: Lock-wait timeouts (1205) this store's statements hit.
        self.lock_wait_timeouts = 0

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self.conn.open:
            self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _transaction(self, op: Callable[[Cursor], T]) -> T:
        """Run ``op`` in one transaction (`lagsched.adapters.transactions`), counting what was transient."""
        try:
            with transaction(self.conn) as cur:
                return op(cur)
        except BaseException as exc:
            if is_transient(exc):
                self.deadlocks += exc.args[0] == DEADLOCK
                self.lock_wait_timeouts += exc.args[0] == LOCK_WAIT_TIMEOUT
            raise

    def _retrying(
        self,
        what: str,
        attempt: Callable[[], T],
        *,
        again: Callable[[T], bool] | None = None,
        rejected: str = "no progress",
    ) -> T:
        """``attempt`` under the one retry loop (`lagsched.adapters.transactions.retry_transient`),
        with this store's budget, jitter, sleep and retry count."""

        def count(_failure: BaseException | None) -> None:
            self.retries += 1

        return retry_transient(
            attempt, what=what, retry=self.retry, sleep=self._sleep, rng=self._rng, again=again, rejected=rejected,
            on_retry=count,
        )  # fmt: skip

    def _run(self, what: str, op: Callable[[Cursor], T]) -> T:
        """Run ``op`` in one transaction, retrying it whole after a lock-wait timeout or deadlock."""
        try:
            return self._retrying(what, lambda: self._transaction(op))
        except pymysql.MySQLError as exc:
            if is_transient(exc):
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
        return from_db(row[0])

    @staticmethod
    def _holding(cur: Cursor, slot_id: str) -> list[PartitionRow]:
        """Rows the slot holds now (the database's clock), by key."""
        cur.execute(_HOLDING, (slot_id,))
        return [_held(slot_id, t, p, o, e, from_db(x)) for t, p, o, e, x in cur.fetchall()]

    @staticmethod
    def _now_and_holding(cur: Cursor, slot_id: str) -> tuple[datetime, list[PartitionRow]]:
        """The database's current time, and the rows the slot holds then."""
        cur.execute(_NOW_AND_HOLDING, (slot_id,))
        rows = cur.fetchall()
        now = from_db(rows[0][0])
        holding = [_held(slot_id, t, p, o, e, from_db(x)) for _, t, p, o, e, x in rows if t is not None]
        return now, sorted(holding, key=lambda c: c.key)

    # ------------------------------------------------------------------ claim

    def claim(
        self,
        slot_id: str,
        wants: Mapping[str, int],
        lease_s: float,
        *,
        targets: Mapping[str, Collection[int]] | None = None,
    ) -> ClaimResult:
        """Claim rows so the slot holds ``wants[topic]`` rows of each topic (its fair share).

        Takes, per topic, ``wants[topic]`` minus the rows the slot already holds, from rows that
        are unclaimed or whose lease ran out, oldest ``last_picked_at`` first (never-picked rows
        first). Each row gets ``claimed_by = slot_id``, ``claim_epoch + 1``, a fresh lease and
        ``last_picked_at = now``. A lost race moves on to the next-oldest rows; a round that lost
        every race backs off and counts against the retry budget, as lock-wait timeouts and
        deadlocks do.

        Returns:
            ``ClaimResult``: ``claims`` = everything the slot holds now in every topic (rows held
            before, with their current offsets and leases, and the new ones), ``new`` = the rows this
            call claimed, ``short`` = rows still missing per topic, and ``status``: ``complete``,
            ``none_free`` (wait for leases or hand-overs) or ``contended`` (claim again soon).

        ``targets`` (rack-aware consumption, ``core.rack.rack_targets``): for a topic listed there,
        only the partitions of the slot's target are taken; the others are every other owner's
        targets, and they hand theirs over at their own boundary (``rebalance`` with the same
        targets), so the slot may stay short until then. Topics not listed take any free row.
        """
        _check_id("slot_id", slot_id)
        _check_wants(wants)
        only = {t: sorted(set(ps)) for t, ps in (targets or {}).items()}
        check_lease_s(lease_s)
        won: list[PartitionRow] = []  # every row this call claimed, recorded as soon as it is committed
        last: list[_Pass | None] = [None]

        def attempt() -> bool:
            """Passes until done; True asks for a backoff and another attempt."""
            while True:
                last[0] = None  # a pass that fails leaves no trustworthy holding behind
                done = self._claim_pass(slot_id, wants, lease_s, won, only)
                last[0] = done
                if done.lost == 0 or not shortfall(wants, done.holding):
                    return False
                if done.won == 0:
                    return True  # every race lost: back off before the next round
                # Some races won, some lost: go on to the next-oldest rows at once.

        try:
            self._retrying("claim", attempt, again=bool, rejected="lost every race")
            gave_up = False
        except RetriesExhausted:
            gave_up = True
        final = last[0]
        # After a failed pass, read what is committed: rows won before the failure are in it.
        holding = final.holding if final is not None else self.held(slot_id)
        held_now = {(c.key, c.claim_epoch) for c in holding}
        # A row won in an early pass whose lease ran out before a later pass (backoffs, a slow
        # database) is not the slot's any more: reported apart, so the epoch it took is accounted for.
        lapsed = tuple(c for c in won if (c.key, c.claim_epoch) not in held_now)
        if lapsed:
            log.warning(
                "slot %s: %d row(s) claimed in this call lost their %.1f s lease before it returned "
                "(%s); the lease is too short for this claim's latency",
                slot_id,
                len(lapsed),
                lease_s,
                ", ".join(f"{c.topic_id}[{c.partition_id}]@{c.claim_epoch}" for c in lapsed),
            )
        won_keys = {(c.key, c.claim_epoch) for c in won}
        short = shortfall(wants, holding)
        # Whether rows are free matters only for a short claim that did not give up.
        free_left = bool(short) and not gave_up and self._any_free(short, only)
        status = claim_status(short, free_left=free_left, gave_up=gave_up)
        if short:
            log.info("slot %s is short of %s: %s", slot_id, short, status)
        return ClaimResult(
            claims=tuple(holding),
            new=tuple(c for c in holding if (c.key, c.claim_epoch) in won_keys),
            lapsed=lapsed,
            short=short,
            status=status,
        )

    def _claim_pass(
        self,
        slot_id: str,
        wants: Mapping[str, int],
        lease_s: float,
        won: list[PartitionRow],
        only: Mapping[str, Sequence[int]],
    ) -> _Pass:
        if self.mode is LockMode.OPTIMISTIC:
            return self._optimistic_pass(slot_id, wants, lease_s, won, only)
        got: list[PartitionRow] = []
        done = self._transaction(lambda cur: self._locked_pass(cur, slot_id, wants, lease_s, got, only))
        won.extend(got)  # only now are they committed
        return done

    def _locked_pass(  # noqa: PLR0917 - private, called from one place
        self,
        cur: Cursor,
        slot_id: str,
        wants: Mapping[str, int],
        lease_s: float,
        got: list[PartitionRow],
        only: Mapping[str, Sequence[int]],
    ) -> _Pass:
        """One transaction: pick and lock the oldest claimable rows, claim them."""
        now, holding = self._now_and_holding(cur, slot_id)
        expires = lease_expiry(now, lease_s)
        lost = 0
        # Topics in a fixed order, so that locks are taken in (topic, partition) order throughout.
        for topic_id, n in shortfall(wants, holding).items():
            target = only.get(topic_id)
            if target is not None and not target:
                continue  # a target with nothing in it: nothing this slot may take
            if self.mode is LockMode.SKIP_LOCKED:
                # Rows in claim order; SKIP LOCKED passes over rows others hold and never waits.
                cur.execute(
                    _only(_PICK, target) + " FOR UPDATE SKIP LOCKED", (topic_id, to_db(now), *(target or ()), n)
                )
                rows = [(int(p), _offset(o), int(e)) for p, o, e in cur.fetchall()]
            else:
                rows, lost_here = self._lock_in_key_order(cur, topic_id, now, n, target)
                lost += lost_here
            if not rows:
                continue
            marks = ", ".join(["%s"] * len(rows))
            cur.execute(
                _SET_CLAIMED + f" WHERE topic_id = %s AND partition_id IN ({marks})",
                (slot_id, to_db(expires), to_db(now), topic_id, *(p for p, _, _ in rows)),
            )
            # The rows are locked by this transaction, so the epoch read is the one incremented.
            got.extend(_held(slot_id, topic_id, p, off, epoch + 1, expires) for p, off, epoch in rows)
        self.cas_conflicts += lost
        return _Pass(sorted(holding + got, key=lambda c: c.key), len(got), lost)

    @staticmethod
    def _lock_in_key_order(
        cur: Cursor, topic_id: str, now: datetime, n: int, target: Sequence[int] | None = None
    ) -> tuple[list[tuple[int, int | None, int]], int]:
        """``for_update``: choose the oldest claimable rows without locks, then lock them by key.

        Locking in the claim order (``last_picked_at``) would wait for rows in an order that a
        release or renew, which lock by key, can cross: the deadlock seen at 24 claimers. So the
        ``2n`` oldest candidates are read without locks, locked in key order with their claimable
        check repeated, and the ``n`` oldest still claimable are taken. Returns the rows taken and
        how many of the ``n`` were lost to other claimers in between.

        If others took every candidate while this claimer waited, it picks again at once, as plain
        FOR UPDATE's scan moves on past taken rows, but only among partitions above every candidate
        tried: under READ COMMITTED InnoDB drops the lock on a row that turned out not to match,
        except when the statement had waited for it (MariaDB 10.11, checked), so the claimer may
        still hold those, and a lower key would break the lock order. The next pass, a new
        transaction, starts from the oldest rows again, so nothing starves.
        """
        above = -1
        lost = 0
        for _ in range(_FOR_UPDATE_PICKS):
            cur.execute(_only(_PICK_ABOVE, target), (topic_id, to_db(now), above, *(target or ()), 2 * n))
            candidates = sorted(int(r[0]) for r in cur.fetchall())
            if not candidates:
                break
            marks = ", ".join(["%s"] * len(candidates))
            cur.execute(
                "SELECT partition_id, committed_offset, claim_epoch, last_picked_at"  # noqa: S608
                " FROM topic_partitions FORCE INDEX (PRIMARY)"
                f" WHERE topic_id = %s AND partition_id IN ({marks}) AND {_CLAIMABLE}"
                " ORDER BY partition_id FOR UPDATE",
                (topic_id, *candidates, to_db(now)),
            )
            locked = cur.fetchall()
            lost = min(n, len(candidates)) - min(n, len(locked))
            if locked:
                # Never-picked rows (NULL) first, as in the claim order of _PICK.
                oldest = sorted(locked, key=lambda r: (r[3] is not None, r[3] or datetime.min, int(r[0])))
                return [(int(p), _offset(o), int(e)) for p, o, e, _ in oldest[:n]], lost
            above = candidates[-1]
        return [], lost

    def _optimistic_pass(
        self,
        slot_id: str,
        wants: Mapping[str, int],
        lease_s: float,
        won: list[PartitionRow],
        only: Mapping[str, Sequence[int]],
    ) -> _Pass:
        """Read candidates unlocked, then compare-and-set each on its epoch, one commit per row.

        Each CAS commits on its own, so a won row is never locked while later ones are tried and a
        concurrent claimer waits at most one single-row update. A row is recorded in ``won`` right
        after its commit: an error on a later row cannot lose it.
        """

        now, holding = self._transaction(partial(self._now_and_holding, slot_id=slot_id))
        expires = lease_expiry(now, lease_s)
        got: list[PartitionRow] = []
        lost = conflicts = 0
        for topic_id, n in shortfall(wants, holding).items():
            target = only.get(topic_id)
            if target is not None and not target:
                continue
            # Read twice what is needed, so one lost race moves on to the next-oldest row instead
            # of a full retry (Hevo: "retry with n different Topic Partitions").
            candidates = self._transaction(
                partial(self._fetch, sql=_only(_PICK, target), args=(topic_id, to_db(now), *(target or ()), 2 * n))
            )
            taken = lost_here = 0
            for p, off, epoch in candidates:
                if taken == n:
                    break
                c = _held(slot_id, topic_id, p, off, int(epoch) + 1, expires)
                if self._transaction(partial(self._cas, slot_id=slot_id, claim=c, now=now)):
                    won.append(c)
                    got.append(c)
                    taken += 1
                else:
                    lost_here += 1
            conflicts += lost_here
            if taken < n:  # races lost in a topic still short are what call for another round
                lost += lost_here
        self.cas_conflicts += conflicts
        return _Pass(sorted(holding + got, key=lambda c: c.key), len(got), lost)

    @staticmethod
    def _fetch(cur: Cursor, *, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        cur.execute(sql, args)
        return list(cur.fetchall())

    @staticmethod
    def _cas(cur: Cursor, *, slot_id: str, claim: PartitionRow, now: datetime) -> bool:
        """Make ``claim`` (the row at its next epoch) true, if the row is still at the epoch before."""
        epoch, lease = claim_terms(claim)
        cur.execute(
            _SET_CLAIMED + f" WHERE topic_id = %s AND partition_id = %s AND claim_epoch = %s AND {_CLAIMABLE}",
            (slot_id, to_db(lease), to_db(now), claim.topic_id, claim.partition_id, epoch - 1, to_db(now)),
        )
        return cur.rowcount == 1

    def _any_free(self, topics: Iterable[str], only: Mapping[str, Sequence[int]] | None = None) -> bool:
        """Whether any row of ``topics`` (within ``only``'s targets) is claimable now (then a short
        claim is contention)."""

        def op(cur: Cursor) -> bool:
            for topic_id in sorted(topics):
                target = (only or {}).get(topic_id)
                if target is not None and not target:
                    continue
                marks = "" if target is None else f" AND partition_id IN ({', '.join(['%s'] * len(target))})"
                cur.execute(
                    "SELECT 1 FROM topic_partitions WHERE topic_id = %s"  # noqa: S608 - only placeholders
                    f" AND (claimed_by IS NULL OR lease_expires_at <= CURRENT_TIMESTAMP(6)){marks} LIMIT 1",
                    (topic_id, *(target or ())),
                )
                if cur.fetchone() is not None:
                    return True
            return False

        return self._run("claim", op)

    # ------------------------------------------------------------------ held rows

    def held(self, slot_id: str) -> list[PartitionRow]:
        """Rows the slot holds now (live lease), e.g. for a restarted worker with a stable slot id."""
        _check_id("slot_id", slot_id)
        return self._run("held", lambda cur: self._holding(cur, slot_id))

    # ------------------------------------------------------------------ renew, commit, release

    def renew(self, slot_id: str, claims: Iterable[PartitionRow], lease_s: float) -> list[PartitionRow]:
        """Extend the leases of rows the slot still holds.

        Returns:
            The renewed rows as the table has them now (committed offset and new
            ``lease_expires_at``), sorted by key. A claim missing from the result was lost (taken
            over, released, or its lease had run out): stop consuming it.
        """
        _check_id("slot_id", slot_id)
        # Key order: the order every waiting transaction locks rows in.
        todo = sorted({(c.key, c.claim_epoch): c for c in claims}.values(), key=lambda c: (c.key, c.claim_epoch))
        check_lease_s(lease_s)
        if not todo:
            return []

        def op(cur: Cursor) -> list[PartitionRow]:
            now = self._db_now(cur)
            expires = lease_expiry(now, lease_s)
            for c in todo:
                cur.execute(
                    "UPDATE topic_partitions SET lease_expires_at = %s"
                    " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s"
                    " AND lease_expires_at > CURRENT_TIMESTAMP(6)",
                    (to_db(expires), c.topic_id, c.partition_id, slot_id, c.claim_epoch),
                )
            # Read back rather than trust rowcount: it counts changed rows, and an expiry equal to
            # the old one (same microsecond) changes nothing yet is renewed.
            cur.execute(
                "SELECT topic_id, partition_id, committed_offset, claim_epoch, lease_expires_at"
                " FROM topic_partitions WHERE claimed_by = %s AND lease_expires_at = %s",
                (slot_id, to_db(expires)),
            )
            fresh: dict[tuple[tuple[str, int], int | None], PartitionRow] = {
                ((str(t), int(p)), int(e)): _held(slot_id, t, p, o, e, from_db(x)) for t, p, o, e, x in cur.fetchall()
            }
            renewed = [fresh[(c.key, c.claim_epoch)] for c in todo if (c.key, c.claim_epoch) in fresh]
            for c in todo:
                if (c.key, c.claim_epoch) not in fresh:
                    log.warning("slot %s lost %s[%d] epoch %d", slot_id, c.topic_id, c.partition_id, c.claim_epoch)
            return renewed

        return self._run("renew", op)

    def commit_offset(
        self,
        slot_id: str,
        claim: PartitionRow,
        offset: int,
        max_timestamp_ms: int | None = None,
        late: Sequence[LateRecords] = (),
    ) -> PartitionRow:
        """Store ``offset`` as the next offset to consume, only while the slot still holds the row.

        ``max_timestamp_ms``: the largest timestamp among the records committed up to ``offset`` in
        this commit (the partition's watermark, docs/completeness.md; None: none known, it stays).
        ``late``: the commit's records in hours already complete before it, logged in the same
        transaction (`lagsched.adapters.late_records`): once the offset moved, and only then.

        Returns:
            The claim as the table has it now: ``committed_offset = offset`` and the current lease.

        Raises:
            ClaimLostError: (a ``StaleClaimError``) the slot no longer holds the row under this
                epoch; ``reason`` says whether its lease ran out, it was released, or another claim
                took it over (``holder``, ``current_epoch``). Nothing was written.
        """
        _check_id("slot_id", slot_id)
        _check_id("topic_id", claim.topic_id)
        if offset < 0:
            raise ValueError(f"offset={offset}; Kafka offsets are >= 0")
        topic_id, partition_id = claim.topic_id, claim.partition_id
        epoch, lease = claim_terms(claim)

        def op(cur: Cursor) -> PartitionRow:
            # Fast path, the usual case: the caller presents the lease the table has (the claim as
            # last returned by claim, renew or commit), so on success that lease is the current one
            # and nothing needs reading back.
            cur.execute(
                _COMMIT + " AND lease_expires_at = %s AND lease_expires_at > CURRENT_TIMESTAMP(6)",
                (offset, max_timestamp_ms, max_timestamp_ms, topic_id, partition_id, slot_id, epoch, to_db(lease)),
            )
            if cur.rowcount == 1:
                log_late(cur, topic_id, partition_id, offset, late)
                return dataclasses.replace(claim, committed_offset=offset)
            # Otherwise lock the row and decide: held under an older copy of its lease, the same
            # offset again (rowcount counts changed rows), or lost.
            row, now = self._locked_row(cur, topic_id, partition_id)
            verdict = judge_claim(slot_id, claim, row, now)
            if verdict is None and row is not None and row.lease_expires_at is not None:
                cur.execute(
                    _COMMIT + " AND lease_expires_at > CURRENT_TIMESTAMP(6)",
                    (offset, max_timestamp_ms, max_timestamp_ms, topic_id, partition_id, slot_id, epoch),
                )
                if row.committed_offset == offset:  # rowcount counts changed rows: nothing changed, still held
                    return _held(slot_id, topic_id, partition_id, offset, epoch, row.lease_expires_at)
                if cur.rowcount == 1:
                    log_late(cur, topic_id, partition_id, offset, late)
                    return _held(slot_id, topic_id, partition_id, offset, epoch, row.lease_expires_at)
                # The lease ran out between the read and the write: judge the row again.
                row, now = self._locked_row(cur, topic_id, partition_id)
                verdict = judge_claim(slot_id, claim, row, now)
            if verdict is None:
                raise RuntimeError(f"commit to {topic_id}[{partition_id}] matched no row although it is held")
            raise lost_claim(
                slot_id,
                claim,
                verdict,
                f"Offset {offset} was not committed; stop consuming this partition, drop its output not yet "
                "committed, and claim again.",
            )

        return self._run("commit_offset", op)

    def begin_batch(self, slot_id: str, claim: PartitionRow, start: int, end: int) -> PartitionRow:
        """Record the batch ``[start, end)`` under the claim's epoch, before any of it is written.

        The exactly-once step (docs/consumer.md): a holder that dies between its write and its
        commit leaves the range recorded, and the next holder redoes exactly that range (see
        ``pending``), checking first what the table holds of it (`LakeSink.present`): its files are
        new ones, so nothing the dead holder left uncommitted can count twice. Recording the same
        range again (a redo, a retry) is accepted; a different range while one is recorded is a bug
        in the caller and raises.

        Returns:
            The claim as the table has it now (current lease).

        Raises:
            ClaimLostError: the slot no longer holds the row under this epoch; nothing was written,
                so nothing of the batch may be written either.
        """
        _check_id("slot_id", slot_id)
        _check_id("topic_id", claim.topic_id)
        if not 0 <= start < end:
            raise ValueError(f"batch [{start}, {end}) must satisfy 0 <= start < end")
        topic_id, partition_id = claim.topic_id, claim.partition_id
        epoch, _ = claim_terms(claim)

        def op(cur: Cursor) -> PartitionRow:
            row, now = self._locked_row(cur, topic_id, partition_id)
            verdict = judge_claim(slot_id, claim, row, now)
            if verdict is not None:
                raise lost_claim(
                    slot_id,
                    claim,
                    verdict,
                    f"The batch [{start}, {end}) was not started; stop consuming this partition.",
                )
            assert row is not None and row.lease_expires_at is not None  # held, so judged live
            committed = row.committed_offset
            if committed != claim.committed_offset:
                # Batches must follow the committed offset the caller planned from; a holder cannot
                # have moved it behind its own back, so this is a bug, not a race.
                raise ValueError(
                    f"{topic_id}[{partition_id}] has committed offset {committed}, not {claim.committed_offset} "
                    "as the claim says; plan from the claim as last returned"
                )
            cur.execute(
                "SELECT pending_start, pending_end FROM topic_partitions WHERE topic_id = %s AND partition_id = %s",
                (topic_id, partition_id),
            )
            recorded = cur.fetchone()
            if (
                recorded is not None
                and recorded[1] is not None
                and (int(recorded[0]), int(recorded[1])) != (start, end)
            ):
                raise ValueError(
                    f"{topic_id}[{partition_id}] already has the batch [{recorded[0]}, {recorded[1]}) recorded; "
                    f"redo that range before starting [{start}, {end})"
                )
            cur.execute(
                "UPDATE topic_partitions SET pending_start = %s, pending_end = %s"
                " WHERE topic_id = %s AND partition_id = %s AND claimed_by = %s AND claim_epoch = %s",
                (start, end, topic_id, partition_id, slot_id, epoch),
            )
            return _held(slot_id, topic_id, partition_id, claim.committed_offset, epoch, row.lease_expires_at)

        return self._run("begin_batch", op)

    def pending(self, slot_id: str) -> dict[tuple[str, int], tuple[int, int]]:
        """Batches recorded but not committed on rows the slot holds: key -> ``(start, end)``.

        Left by a holder that died (or was fenced) between ``begin_batch`` and ``commit_offset``,
        possibly this very slot in an earlier run. Redo them before anything new.
        """
        _check_id("slot_id", slot_id)

        def op(cur: Cursor) -> dict[tuple[str, int], tuple[int, int]]:
            cur.execute(
                "SELECT topic_id, partition_id, pending_start, pending_end FROM topic_partitions"
                " WHERE claimed_by = %s AND lease_expires_at > CURRENT_TIMESTAMP(6) AND pending_end IS NOT NULL",
                (slot_id,),
            )
            return {(str(t), int(p)): (int(s), int(e)) for t, p, s, e in cur.fetchall()}

        return self._run("pending", op)

    @classmethod
    def _locked_row(cls, cur: Cursor, topic_id: str, partition_id: int) -> tuple[PartitionRow | None, datetime]:
        """The row (``None`` if there is none), locked, with its claim columns, ``last_picked_at`` and
        committed offset, and the database's time it was read at."""
        cur.execute(
            "SELECT claimed_by, claim_epoch, lease_expires_at, last_picked_at, committed_offset,"
            " CURRENT_TIMESTAMP(6) FROM topic_partitions WHERE topic_id = %s AND partition_id = %s FOR UPDATE",
            (topic_id, partition_id),
        )
        found = cur.fetchone()
        if found is None:
            return None, cls._db_now(cur)
        holder, epoch, lease, picked, committed, now = found
        row = PartitionRow(
            topic_id,
            partition_id,
            committed_offset=_offset(committed),
            claimed_by=None if holder is None else str(holder),
            claim_epoch=int(epoch),
            lease_expires_at=_maybe_from_db(lease),
            last_picked_at=_maybe_from_db(picked),
        )
        return row, from_db(now)

    def release(self, slot_id: str, claims: Iterable[PartitionRow]) -> list[PartitionRow]:
        """Give rows back (Hevo's "disown"): clear holder and lease, keep offset and epoch.

        Only rows the slot still holds with the same epoch are released, lease live or not (an
        expired row nobody took is still safe to hand back).

        Returns:
            The claims actually released; the others had already been taken over or released.
        """
        _check_id("slot_id", slot_id)
        todo: Sequence[PartitionRow] = sorted(claims, key=lambda c: (c.key, c.claim_epoch))
        return self._run("release", lambda cur: self._release(cur, slot_id, todo))

    @staticmethod
    def _release(cur: Cursor, slot_id: str, todo: Sequence[PartitionRow]) -> list[PartitionRow]:
        released: list[PartitionRow] = []
        for c in todo:  # in key order, the order every waiting transaction locks rows in
            # Setting claimed_by to NULL always changes the row, so rowcount is exact here.
            cur.execute(_RELEASE, (c.topic_id, c.partition_id, slot_id, c.claim_epoch))
            if cur.rowcount == 1:
                released.append(c)
        return released

    def rebalance(
        self, slot_id: str, wants: Mapping[str, int], *, targets: Mapping[str, Collection[int]] | None = None
    ) -> list[PartitionRow]:
        """Hand over, now, the rows the slot holds above its share (``rows_to_release``).

        Call it at a batch boundary, after committing: the rows go back with their committed
        offsets, and the slots whose share grew claim them at their next ``claim``. A topic
        missing from ``wants`` (no longer owned) is handed over whole. With ``targets`` (rack-aware
        consumption) the rows outside the slot's target of a listed topic go too (``rows_to_release``).

        Returns:
            The rows released, as they were held (stop consuming them); sorted by key.
        """
        _check_id("slot_id", slot_id)
        _check_wants(wants)

        def op(cur: Cursor) -> list[PartitionRow]:
            give = rows_to_release(wants, self._holding(cur, slot_id), targets)
            return self._release(cur, slot_id, give)

        released = self._run("rebalance", op)
        if released:
            log.info("slot %s handed over %d rows above its share", slot_id, len(released))
        return released


def open_claim_store(
    params: MySQLParams,
    lock_mode: str = "auto",
    *,
    retry: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> ClaimStore:
    """Connect and build a ``ClaimStore`` whose lock mode suits the server (or ``lock_mode``).

    The store owns the connection: close it, or use it as a context manager.
    """
    conn = connect(params)
    try:
        return ClaimStore(conn, server_lock_mode(conn, lock_mode), retry=retry, rng=rng)
    except BaseException:
        conn.close()
        raise
