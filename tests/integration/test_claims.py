"""The claim table against the real MariaDB, in every lock mode.

The soak (``LAGSCHED_CLAIM_SOAK_S`` seconds, default 60) runs 8 claimer processes per lock mode,
all three modes at once, each mode in its own database: they claim, commit, renew, stall past
their lease and release in loops. Two independent checkers (a process polling the table and a
post-run check of every claimer's log) must see no row held twice and no commit with a stale epoch.

Everything else is deterministic: a lease "runs out" because the test sets ``lease_expires_at`` in
the past by the database's clock (the only clock leases are judged by), lock waits end when the
test lets go of the lock, and faults are injected at a named statement (``Hooked``, ``FaultOn``).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pymysql
import pytest

from lagsched.adapters.claims import ClaimStore, open_claim_store, server_lock_mode
from lagsched.adapters.mysql import connect
from lagsched.adapters.ownership import current_assignment, wants_for
from lagsched.connections import MySQLParams, mysql_params
from lagsched.core.claims import ClaimLostError, ClaimStatus, LockMode, RetryPolicy, StaleReason
from lagsched.core.errors import StaleClaimError
from lagsched_dev.bench.claims import (
    OFFSET_EPOCH,
    ClaimerSpec,
    RunResult,
    create_database,
    drop_database,
    hold_loop,
    run_claimers,
    seed_topics,
)

MODES = ["skip_locked", "optimistic", "for_update"]
SOAK_S = float(os.environ.get("LAGSCHED_CLAIM_SOAK_S", "60"))
WORKERS = 8
# Few rows, so eight claimers fight over them all the time.
SOAK_PARTITIONS = [1, 2, 3, 5, 8, 13]


@pytest.fixture
def conn(mysql_db: MySQLParams) -> Iterator[Any]:
    """A connection closed even when the test fails (an open one would block the database drop)."""
    c = connect(mysql_db)
    yield c
    c.close()


def new_slot() -> str:
    return str(uuid.uuid4())


def add_topic(params: MySQLParams, partitions: int, linker_workers: int = 1) -> str:
    tid = seed_topics(params, [partitions])[0]
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = %s WHERE topic_id = %s", (linker_workers, tid))
        conn.commit()
    finally:
        conn.close()
    return tid


def set_linker_workers(params: MySQLParams, topic_id: str, n: int) -> None:
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = %s WHERE topic_id = %s", (n, topic_id))
        conn.commit()
    finally:
        conn.close()


def expire(params: MySQLParams, topic_id: str, partition_id: int) -> datetime:
    """Make the row's lease run out now, by the database's clock; returns the expiry set."""
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE topic_partitions SET lease_expires_at = CURRENT_TIMESTAMP(6) - INTERVAL 1 SECOND"
                " WHERE topic_id = %s AND partition_id = %s",
                (topic_id, partition_id),
            )
            cur.execute(
                "SELECT lease_expires_at FROM topic_partitions WHERE topic_id = %s AND partition_id = %s",
                (topic_id, partition_id),
            )
            (expires,) = cur.fetchone() or (None,)
        conn.commit()
    finally:
        conn.close()
    assert isinstance(expires, datetime)
    return expires.replace(tzinfo=UTC)


def db_now(conn: Any) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_TIMESTAMP(6)")
        (now,) = cur.fetchone()
    conn.commit()
    assert isinstance(now, datetime)
    return now


def wait_for_db_clock(conn: Any, moment: datetime, bound_s: float) -> None:
    """Wait until the database's clock is past ``moment`` (naive UTC, as the table stores it)."""
    deadline = time.monotonic() + bound_s
    while (now := db_now(conn)) <= moment:
        assert time.monotonic() < deadline, f"database clock still at {now}, waiting for {moment}"
        time.sleep(min(0.05, (moment - now).total_seconds() + 0.001))


def wait_until_waiting_for_a_lock(conn: Any, connection_id: int, bound_s: float = 60) -> None:
    """Wait until that connection's locking read is blocked on a row lock."""
    deadline = time.monotonic() + bound_s
    while True:
        with conn.cursor() as cur:
            cur.execute("SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = %s", (connection_id,))
            row = cur.fetchone()
            cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_current_waits'")
            waits = int((cur.fetchone() or (None, 0))[1])
        conn.commit()
        if row is not None and row[0] and "FOR UPDATE" in row[0] and waits > 0:
            return
        assert time.monotonic() < deadline, "the claimer never blocked on a row lock"
        time.sleep(0.01)


Hook = Callable[[str, str], None]


def hooked(conn: Any, hook: Hook) -> Any:
    """``conn``, with every statement passed through ``hook(sql, "before"|"after")`` (a fault, a pause)."""
    return Hooked(conn, hook)


class Hooked:
    """A pymysql connection whose statements pass through ``hook(sql, "before"|"after")``."""

    def __init__(self, conn: Any, hook: Hook) -> None:
        self._conn = conn
        self._hook = hook

    def cursor(self) -> _HookedCursor:
        return _HookedCursor(self._conn.cursor(), self._hook)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _HookedCursor:
    def __init__(self, cur: Any, hook: Hook) -> None:
        self._cur = cur
        self._hook = hook

    def execute(self, sql: str, args: Any = None) -> int:
        self._hook(sql, "before")
        n = int(self._cur.execute(sql, args))
        self._hook(sql, "after")
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __enter__(self) -> _HookedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()


class FaultOn:
    """A hook that makes statements containing ``fragment`` fail with a deadlock (1213): the
    ``fail_calls``-th ones (counted from 1), or all of them with ``None``."""

    def __init__(self, fragment: str, fail_calls: set[int] | None) -> None:
        self.fragment = fragment
        self.fail_calls = fail_calls
        self.calls = 0

    def __call__(self, sql: str, when: str) -> None:
        if when != "before" or self.fragment not in sql:
            return
        self.calls += 1
        if self.fail_calls is None or self.calls in self.fail_calls:
            raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock (injected)")


def rows(params: MySQLParams, topic_id: str) -> dict[int, tuple[Any, ...]]:
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_id, claimed_by, claim_epoch, committed_offset, lease_expires_at, last_picked_at"
                " FROM topic_partitions WHERE topic_id = %s",
                (topic_id,),
            )
            return {int(r[0]): tuple(r[1:]) for r in cur.fetchall()}
    finally:
        conn.close()


# ----------------------------------------------------------------- the soak


def _soak(mode: str, results: dict[str, Any], tmp: Path) -> None:
    params = create_database(mysql_params(), prefix="lagsched_soak")
    try:
        topics = seed_topics(params, SOAK_PARTITIONS)
        log_dir = tmp / mode
        log_dir.mkdir()
        specs = [
            ClaimerSpec(
                params=params,
                mode=mode,
                slot_id=new_slot(),
                topics=tuple(topics),
                log_path=str(log_dir / f"w{i}.jsonl"),
                seconds=SOAK_S,
                batch=0,  # 1..4 rows at random
                lease_s=1.0,
                commits=2,
                stall_prob=0.02,  # sleep past the lease now and then: takeovers and refused commits
                stall_s=1.3,
                keep_prob=0.3,  # keep and renew instead of releasing
                seed=100 * MODES.index(mode) + i,
            )
            for i in range(WORKERS)
        ]
        result = run_claimers(specs, log_dir, poll_interval_s=0.02)
        conn = connect(params)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT topic_id, partition_id, claim_epoch, committed_offset FROM topic_partitions")
                final = {(str(t), int(p)): (int(e), o) for t, p, e, o in cur.fetchall()}
        finally:
            conn.close()
            results[mode] = (result, final, log_dir)
    except Exception as exc:  # noqa: BLE001 - handed to the test, which re-raises it
        results[mode] = exc
    finally:
        drop_database(params)


@pytest.fixture(scope="module")
def soaks(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """All three modes' soaks, run concurrently once for the module (each in its own database)."""
    tmp = tmp_path_factory.mktemp("soak")
    results: dict[str, Any] = {}
    threads = [threading.Thread(target=_soak, args=(m, results, tmp)) for m in MODES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield results


@pytest.mark.parametrize("mode", MODES)
def test_soak_never_holds_a_row_twice_nor_commits_stale(soaks: dict[str, Any], mode: str) -> None:
    outcome = soaks[mode]
    if isinstance(outcome, BaseException):
        raise outcome
    result, final, log_dir = outcome
    assert isinstance(result, RunResult)
    h, poll = result.history, result.poll
    print(
        f"\n[soak {mode}] {SOAK_S:.0f}s x {WORKERS} processes: rows claimed {h.claims} in {h.claim_calls} calls, "
        f"commits {h.commits}, refused stale commits {h.refused}, renews {h.renews}, releases {h.releases}, "
        f"double claims {h.double_claims}+{poll.double_claims}, stale commits {h.stale_commits}+{poll.stale_commits} "
        f"(log+poller, {poll.polls} polls), cas conflicts {h.cas_conflicts}, retries {h.retries}, "
        f"deadlocks {h.deadlocks}, refused by reason {h.refused_reasons}"
    )
    assert h.double_claims == 0 and poll.double_claims == 0
    assert h.stale_commits == 0 and poll.stale_commits == 0
    # Every transaction that waits for row locks takes them in key order: no deadlock, in any mode.
    assert h.deadlocks == 0
    # The soak did exercise the dangerous paths.
    assert h.claims > 100 * WORKERS and h.commits > 100 * WORKERS
    assert h.refused > 0, "no stall led to a refused commit: takeovers were not exercised"
    assert h.renews > 0 and h.releases > 0
    assert poll.polls > 10
    # Every claim is accounted for: each row's epoch is the number of claims logged for it, and its
    # committed offset is the highest one any claimer committed.
    from lagsched_dev.bench.claims import read_events

    claims_per_row: dict[tuple[str, int], int] = {}
    best_offset: dict[tuple[str, int], int] = {}
    for _slot, ev in read_events(sorted(Path(log_dir).glob("*.jsonl"))):
        key = (ev[1], ev[2]) if ev[0] in {"claim", "commit"} else None
        if ev[0] == "claim" and key:
            claims_per_row[key] = claims_per_row.get(key, 0) + 1
        if ev[0] == "commit" and key:
            best_offset[key] = max(best_offset.get(key, -1), ev[4])
    for key, (epoch, offset) in final.items():
        assert epoch == claims_per_row.get(key, 0), key
        assert (offset if offset is not None else -1) == best_offset.get(key, -1), key
        if offset is not None:
            assert offset // OFFSET_EPOCH <= epoch


# ----------------------------------------------------------------- a killed slot


@pytest.mark.parametrize("mode", MODES)
def test_killed_slot_rows_are_reclaimed_after_its_lease(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    lease_s = 2.0  # the victim's; the survivors hold theirs for a minute, so nothing else expires
    topic = add_topic(mysql_db, 7, linker_workers=3)
    a, b, c = new_slot(), new_slot(), new_slot()
    view = current_assignment(conn, "bench", [a, b, c])
    wants = {s: wants_for(s, view) for s in (a, b, c)}
    assert sorted(w[topic] for w in wants.values()) == [2, 2, 3]  # fair share: floor/ceil of 7/3

    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    victim = ctx.Process(target=hold_loop, args=(mysql_db, mode, a, wants[a], lease_s, ready), daemon=True)
    victim.start()
    a_rows = {(t, p): e for t, p, e in ready.get(timeout=60)}
    assert len(a_rows) == wants[a][topic]

    store = ClaimStore(conn, LockMode(mode))
    held = {s: store.claim(s, wants[s], 60) for s in (b, c)}
    assert [len(held[s].claims) for s in (b, c)] == [wants[b][topic], wants[c][topic]]
    assert not {x.key for s in (b, c) for x in held[s].claims} & set(a_rows)

    os.kill(victim.pid or 0, signal.SIGKILL)
    victim.join(timeout=10)
    a_lease = {p: r[3] for p, r in rows(mysql_db, topic).items() if (topic, p) in a_rows}
    view = current_assignment(conn, "bench", [b, c])  # the live set without the dead slot
    assert view.recomputed
    new_wants = {s: wants_for(s, view) for s in (b, c)}
    assert sorted(w[topic] for w in new_wants.values()) == [3, 4]
    # While the dead slot's lease runs, its rows are not free.
    early = {s: store.claim(s, new_wants[s], 60) for s in (b, c)}
    if db_now(conn) < min(a_lease.values()):
        assert all(r.new == () and r.status is ClaimStatus.NONE_FREE for r in early.values())
    # else the lease ran out during the early claims (a loaded machine): what they took counts below.
    wait_for_db_clock(conn, max(a_lease.values()), bound_s=lease_s + 30)

    taken: dict[tuple[str, int], str] = {}
    for s in (b, c):
        result = store.claim(s, new_wants[s], 60)
        assert result.status is ClaimStatus.COMPLETE
        for x in (*early[s].new, *result.new):
            assert x.key in a_rows, "only the dead slot's rows are free"
            assert x.claim_epoch == a_rows[x.key] + 1
            taken[x.key] = s
    assert set(taken) == set(a_rows)
    after = rows(mysql_db, topic)
    for (_t, p), s in taken.items():
        claimed_by, _epoch, _offset, _lease, last_picked = after[p]
        assert claimed_by == s
        # Never before the dead slot's lease ran out (database clock on both sides).
        assert last_picked >= a_lease[p]
    counts = sorted(sum(1 for r in after.values() if r[0] == s) for s in (b, c))
    assert counts == [3, 4]


# ----------------------------------------------------------------- fencing, one step at a time


@pytest.mark.parametrize("mode", MODES)
def test_a_slot_that_lost_its_row_cannot_commit_or_release(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 1)
    a, b = new_slot(), new_slot()
    store = ClaimStore(conn, LockMode(mode))
    got = store.claim(a, {topic: 1}, 30)
    [ca] = got.claims
    assert got.new == (ca,) and got.status is ClaimStatus.COMPLETE
    assert ca.claim_epoch == 1 and ca.committed_offset is None
    ca = store.commit_offset(a, ca, 100)
    assert ca.committed_offset == 100
    assert store.commit_offset(a, ca, 100) == ca  # the same offset again is fine
    none = store.claim(b, {topic: 1}, 30)  # a's lease is live
    assert none.claims == () and none.short == {topic: 1} and none.status is ClaimStatus.NONE_FREE

    ran_out = expire(mysql_db, topic, 0)  # a's lease runs out, by the database's clock
    ca = dataclasses.replace(ca, lease_expires_at=ran_out)  # as a knew it, had the time passed
    with pytest.raises(ClaimLostError, match="lease ran out") as info:
        store.commit_offset(a, ca, 150)
    assert info.value.reason is StaleReason.LEASE_EXPIRED and info.value.holder == a

    [cb] = store.claim(b, {topic: 1}, 30).claims
    assert cb.claim_epoch == 2 and cb.committed_offset == 100
    with pytest.raises(
        StaleClaimError, match=f"slot {b} claimed it under epoch 2 .*after the lease of epoch 1 ran out"
    ):
        store.commit_offset(a, ca, 200)
    with pytest.raises(ClaimLostError) as lost:
        store.commit_offset(a, ca, 200)
    assert (lost.value.reason, lost.value.holder, lost.value.current_epoch) == (StaleReason.TAKEN_OVER, b, 2)
    assert (lost.value.topic_id, lost.value.partition_id, lost.value.epoch) == (topic, 0, 1)
    assert "the row is" not in str(lost.value)  # the old "the row is lease ran out"
    assert store.renew(a, [ca], 5) == []
    assert store.release(a, [ca]) == []
    assert rows(mysql_db, topic)[0][:3] == (b, 2, 100)

    cb = store.commit_offset(b, cb, 300)
    assert store.release(b, [cb]) == [cb]
    claimed_by, epoch, offset, lease, _picked = rows(mysql_db, topic)[0]
    assert (claimed_by, epoch, offset, lease) == (None, 2, 300, None)  # disown keeps the offset
    with pytest.raises(ClaimLostError, match="this slot released it at epoch 2") as released:
        store.commit_offset(b, cb, 400)
    assert released.value.reason is StaleReason.RELEASED
    # a's claim was taken over, and that claim was then released: said as such, not "released".
    with pytest.raises(ClaimLostError, match=r"claimed it under epoch 2 .*, and that claim was released since") as gone:
        store.commit_offset(a, ca, 500)
    assert (gone.value.reason, gone.value.holder) == (StaleReason.TAKEN_OVER, None)
    assert rows(mysql_db, topic)[0][2] == 300


@pytest.mark.parametrize("mode", MODES)
def test_claims_oldest_first_and_tops_up_to_the_target(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 6)
    s = new_slot()
    store = ClaimStore(conn, LockMode(mode))
    first = store.claim(s, {topic: 2}, 30)
    assert [x.partition_id for x in first.new] == [0, 1]  # never-picked rows first, then by partition
    again = store.claim(s, {topic: 2}, 30)  # already holds its target
    assert again.new == () and again.claims == first.claims and again.status is ClaimStatus.COMPLETE
    more = store.claim(s, {topic: 3}, 30)
    assert [x.partition_id for x in more.new] == [2]
    assert [x.partition_id for x in more.claims] == [0, 1, 2]  # everything held, not only the new row
    assert store.release(s, more.claims) == list(more.claims)
    after = store.claim(s, {topic: 4}, 30)
    # 3, 4, 5 were never picked, so they come before the rows just released; then 0 (0 and 1 were
    # picked at the same instant, ties go by partition)
    assert [x.partition_id for x in after.new] == [0, 3, 4, 5]
    assert store.held(s) == list(after.claims)
    renewed = store.renew(s, after.claims, 60)
    assert [x.key for x in renewed] == [x.key for x in after.claims]
    assert all(r.lease_expires_at > x.lease_expires_at for r, x in zip(renewed, after.claims, strict=True))


# ----------------------------------------------------------------- what a worker gets back


@pytest.mark.parametrize("mode", MODES)
def test_claim_returns_the_whole_holding_and_flags_an_own_row_reclaimed(
    mysql_db: MySQLParams, conn: Any, mode: str
) -> None:
    topic, other = add_topic(mysql_db, 2), add_topic(mysql_db, 2)
    s = new_slot()
    store = ClaimStore(conn, LockMode(mode))
    [o0] = store.claim(s, {other: 1}, 60).claims
    first = store.claim(s, {topic: 2}, 60)
    assert {x.key for x in first.claims} == {o0.key, (topic, 0), (topic, 1)}  # other topics included
    assert [x.key for x in first.new] == [(topic, 0), (topic, 1)]
    stale = next(x for x in first.claims if x.key == (topic, 0))
    store.commit_offset(s, stale, 42)
    expire(mysql_db, topic, 0)  # the slot's own lease on p0 ran out; nobody took it

    second = store.claim(s, {topic: 2}, 60)
    [again] = second.new
    assert again.key == (topic, 0) and again.claim_epoch == stale.claim_epoch + 1 and again.committed_offset == 42
    assert second.is_new(again) and not second.is_new(stale)
    assert {(x.key, x.claim_epoch) for x in second.claims} == {(o0.key, 1), ((topic, 0), 2), ((topic, 1), 1)}
    with pytest.raises(ClaimLostError, match="this slot claimed it under epoch 2") as info:
        store.commit_offset(s, stale, 43)
    assert (info.value.reason, info.value.holder) == (StaleReason.TAKEN_OVER, s)


@pytest.mark.parametrize("mode", MODES)
def test_renew_and_commit_return_the_row_as_it_is_now(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    store = ClaimStore(conn, LockMode(mode))
    [c0, c1] = store.claim(s, {topic: 2}, 30).claims
    committed = store.commit_offset(s, c0, 500)
    assert committed == dataclasses.replace(c0, committed_offset=500)
    # Renewing the claims as they were at claim time still reports the offset committed since.
    [r0, r1] = store.renew(s, [c1, c0], 60)  # any order in, key order out
    assert (r0.key, r0.committed_offset, r1.committed_offset) == (c0.key, 500, None)
    assert r0.lease_expires_at == r1.lease_expires_at > c0.lease_expires_at
    assert store.held(s) == [r0, r1]
    # A commit presenting the copy from before the renewal still reports the lease the table has.
    assert store.commit_offset(s, c0, 600) == dataclasses.replace(r0, committed_offset=600)
    assert store.commit_offset(s, r1, 7) == dataclasses.replace(r1, committed_offset=7)
    assert [(c.committed_offset, c.lease_expires_at) for c in store.held(s)] == [
        (600, r0.lease_expires_at),
        (7, r1.lease_expires_at),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_rebalance_hands_rows_above_the_share_to_the_new_owner(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    from lagsched.adapters.slots import slot_id_for

    topic = add_topic(mysql_db, 8, linker_workers=1)
    slots = [slot_id_for(f"rebalance-{i}") for i in range(2)]
    view = current_assignment(conn, "bench", slots)
    [hot] = [s for s in slots if wants_for(s, view).get(topic) == 8]
    [cold] = [s for s in slots if s != hot]
    store = ClaimStore(conn, LockMode(mode))
    held = store.claim(hot, wants_for(hot, view), 60).claims
    held = tuple(store.commit_offset(hot, c, 1000 + c.partition_id) for c in held)
    assert store.rebalance(hot, wants_for(hot, view)) == []  # at its share: nothing to hand over

    set_linker_workers(mysql_db, topic, 2)  # the evaluator scales the hot topic up
    view = current_assignment(conn, "bench", slots)
    assert view.recomputed and wants_for(hot, view) == {topic: 4} and wants_for(cold, view) == {topic: 4}
    handed = store.rebalance(hot, wants_for(hot, view))
    assert [c.partition_id for c in handed] == [4, 5, 6, 7]  # keeps its lowest partitions
    assert store.rebalance(hot, wants_for(hot, view)) == []

    taken = store.claim(cold, wants_for(cold, view), 60)
    assert taken.status is ClaimStatus.COMPLETE
    # Moved within one call each, committed offsets intact.
    assert [(c.partition_id, c.committed_offset) for c in taken.new] == [(p, 1000 + p) for p in range(4, 8)]
    kept = store.claim(hot, wants_for(hot, view), 60)
    assert [c.partition_id for c in kept.claims] == [0, 1, 2, 3] and kept.new == ()
    # The old holder's late commit on a handed-over row is fenced, and says why.
    with pytest.raises(ClaimLostError, match=f"slot {cold} claimed it under epoch 2 .*so it had been released") as info:
        store.commit_offset(hot, held[5], 9999)
    assert info.value.reason is StaleReason.TAKEN_OVER
    assert rows(mysql_db, topic)[5][2] == 1005
    # A topic the slot no longer owns is handed over whole.
    assert [c.partition_id for c in store.rebalance(hot, {})] == [0, 1, 2, 3]
    assert store.held(hot) == []


@pytest.mark.parametrize("mode", MODES)
def test_short_claims_say_whether_rows_were_free(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 2)
    a, b = new_slot(), new_slot()
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    conn.commit()
    store = ClaimStore(conn, LockMode(mode), retry=RetryPolicy(max_attempts=2), sleep=lambda _s: None)
    store.claim(a, {topic: 1}, 60)
    blocker = connect(mysql_db)
    try:
        # Another transaction sits on the free row (a claimer between its read and its commit).
        with blocker.cursor() as cur:
            cur.execute("SELECT * FROM topic_partitions WHERE topic_id = %s AND partition_id = 1 FOR UPDATE", (topic,))
        busy = store.claim(b, {topic: 1}, 60)
    finally:
        blocker.rollback()
        blocker.close()
    assert busy.claims == () and busy.short == {topic: 1}
    assert busy.status is ClaimStatus.CONTENDED and busy.contended
    done = store.claim(b, {topic: 1}, 60)
    assert done.status is ClaimStatus.COMPLETE and [c.partition_id for c in done.new] == [1]
    assert store.claim(b, {topic: 2}, 60).status is ClaimStatus.NONE_FREE


# ----------------------------------------------------------------- optimistic claims never strand rows


def test_optimistic_claim_reports_a_row_committed_before_a_lock_wait_timeout(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    conn.commit()
    sleeps: list[float] = []
    store = ClaimStore(conn, LockMode.OPTIMISTIC, retry=RetryPolicy(max_attempts=2), sleep=sleeps.append)
    blocker = connect(mysql_db)
    try:
        with blocker.cursor() as cur:  # holds the second candidate for the whole claim
            cur.execute("SELECT * FROM topic_partitions WHERE topic_id = %s AND partition_id = 1 FOR UPDATE", (topic,))
        result = store.claim(s, {topic: 2}, 30)
    finally:
        blocker.rollback()
        blocker.close()
    # Partition 0 was committed before partition 1 timed out: the slot holds it, and is told so.
    assert rows(mysql_db, topic)[0][0] == s
    assert [c.partition_id for c in result.claims] == [0] and result.new == result.claims
    assert result.status is ClaimStatus.CONTENDED and result.short == {topic: 1}
    assert store.lock_wait_timeouts == 2 and len(sleeps) == 1  # two attempts in all, one backoff


def test_optimistic_claim_reports_a_row_committed_before_a_deadlock(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    cas = FaultOn("claim_epoch = claim_epoch + 1", fail_calls={2})  # the second row's CAS
    store = ClaimStore(hooked(conn, cas), LockMode.OPTIMISTIC, sleep=lambda _s: None)
    result = store.claim(s, {topic: 2}, 30)
    assert [c.partition_id for c in result.claims] == [0, 1] and result.new == result.claims
    assert all(c.claim_epoch == 1 for c in result.claims)
    assert result.status is ClaimStatus.COMPLETE and store.deadlocks == 1
    assert {p: r[0] for p, r in rows(mysql_db, topic).items()} == {0: s, 1: s}


def test_a_row_whose_lease_ran_out_during_the_claim_is_reported_as_lapsed(
    mysql_db: MySQLParams, conn: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim of several rounds can outlast its own lease: the row won in the first round is not
    held when the call returns, yet it took an epoch. The soak's accounting (one epoch per logged
    claim) found this under load; the result now says so instead of dropping the row silently."""
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    lease_s = 1.0
    cas = FaultOn("claim_epoch = claim_epoch + 1", fail_calls={2})  # the second row's CAS deadlocks
    watcher = connect(mysql_db)

    def backoff_past_the_lease(_seconds: float) -> None:
        won = rows(mysql_db, topic)[0]
        assert won[0] == s, "the first round should have won partition 0"
        wait_for_db_clock(watcher, won[3], bound_s=30)  # the backoff outlasts that row's lease

    try:
        store = ClaimStore(hooked(conn, cas), LockMode.OPTIMISTIC, sleep=backoff_past_the_lease)
        with caplog.at_level("WARNING", logger="lagsched.adapters.claims"):
            result = store.claim(s, {topic: 2}, lease_s)
    finally:
        watcher.close()
    assert [(c.partition_id, c.claim_epoch) for c in result.lapsed] == [(0, 1)]
    assert result.status is ClaimStatus.COMPLETE
    # The retry took both rows again: partition 0 under a second epoch, partition 1 under its first.
    assert sorted((c.partition_id, c.claim_epoch) for c in result.new) == [(0, 2), (1, 1)]
    assert result.new == result.claims
    # Every epoch a row went through is one this call reported, held or lapsed.
    assert {p: r[1] for p, r in rows(mysql_db, topic).items()} == {0: 2, 1: 1}
    assert "lost their 1.0 s lease before it returned" in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_one_retry_budget_bounds_every_attempt(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    always = FaultOn("claim_epoch = claim_epoch + 1", fail_calls=None)  # every claiming UPDATE deadlocks
    sleeps: list[float] = []
    store = ClaimStore(hooked(conn, always), LockMode(mode), retry=RetryPolicy(max_attempts=4), sleep=sleeps.append)
    result = store.claim(s, {topic: 2}, 30)
    assert result.claims == () and result.status is ClaimStatus.CONTENDED
    # Four attempts in all (the old nested loops made 4 x 4), three backoffs between them.
    assert always.calls == 4 and len(sleeps) == 3 and store.deadlocks == 4
    assert all(r[0] is None and r[1] == 0 for r in rows(mysql_db, topic).values())  # rolled back


def test_one_retry_budget_covers_lock_errors_and_lost_races(mysql_db: MySQLParams, conn: Any) -> None:
    """Each round first hits a deadlock, then loses every race. The old code ran tenacity (per round)
    inside its own loop of rounds: 2 sleeps per round, 7 in all under max_attempts=4."""
    topic = add_topic(mysql_db, 2)
    s = new_slot()
    rival = connect(mysql_db)
    calls = 0

    def deadlock_then_lose(sql: str, when: str) -> None:
        nonlocal calls
        if when != "before" or "claim_epoch = claim_epoch + 1" not in sql:
            return
        calls += 1
        if calls % 3 == 1:
            raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock (injected)")
        with rival.cursor() as cur:  # another claimer moves every row's epoch on first: the CAS loses
            cur.execute("UPDATE topic_partitions SET claim_epoch = claim_epoch + 1 WHERE topic_id = %s", (topic,))
        rival.commit()

    sleeps: list[float] = []
    store = ClaimStore(
        hooked(conn, deadlock_then_lose), LockMode.OPTIMISTIC, retry=RetryPolicy(max_attempts=4), sleep=sleeps.append
    )
    try:
        result = store.claim(s, {topic: 2}, 30)
    finally:
        rival.close()
    assert result.claims == () and result.status is ClaimStatus.CONTENDED
    assert len(sleeps) == 3 and store.retries == 3  # four attempts in all, whatever failed them
    assert calls == 6  # deadlock, lose, lose; deadlock, lose, lose


def test_a_deadlocked_locked_claim_is_retried_whole(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 3)
    s = new_slot()
    once = FaultOn("claim_epoch = claim_epoch + 1", fail_calls={1})
    store = ClaimStore(hooked(conn, once), LockMode.SKIP_LOCKED, sleep=lambda _s: None)
    result = store.claim(s, {topic: 3}, 30)
    assert [(c.partition_id, c.claim_epoch) for c in result.new] == [(0, 1), (1, 1), (2, 1)]
    assert store.deadlocks == 1 and store.retries == 1


# ----------------------------------------------------------------- lock order


def test_for_update_claim_and_release_do_not_deadlock(mysql_db: MySQLParams, conn: Any) -> None:
    """The cycle seen at 24 claimers: a release locking p0 then p1 (key order) against a plain
    FOR UPDATE claim locking p1 then p0 (claim order, p1 picked earlier). Claims now lock by key."""
    topic = add_topic(mysql_db, 2)
    r_slot, c_slot = new_slot(), new_slot()
    claims = ClaimStore(conn, LockMode.FOR_UPDATE).claim(r_slot, {topic: 2}, 60).claims
    with conn.cursor() as cur:
        # p1 comes first in claim order, and both leases have run out (the holder stalled).
        cur.execute(
            "UPDATE topic_partitions SET lease_expires_at = CURRENT_TIMESTAMP(6) - INTERVAL 1 SECOND,"
            " last_picked_at = last_picked_at - INTERVAL partition_id SECOND WHERE topic_id = %s",
            (topic,),
        )
    conn.commit()

    holds_p0, go_on = threading.Event(), threading.Event()

    def pause_after_first_release(sql: str, when: str) -> None:
        if (
            when == "after"
            and sql.startswith("UPDATE topic_partitions SET claimed_by = NULL")
            and not holds_p0.is_set()
        ):
            holds_p0.set()
            assert go_on.wait(60), "the claimer never blocked"

    r_conn, c_conn = connect(mysql_db), connect(mysql_db)
    releaser = ClaimStore(hooked(r_conn, pause_after_first_release), LockMode.FOR_UPDATE)
    claimer = ClaimStore(c_conn, LockMode.FOR_UPDATE)
    out: dict[str, Any] = {}
    try:
        with c_conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            (c_id,) = cur.fetchone() or (0,)
        c_conn.commit()
        r = threading.Thread(target=lambda: out.setdefault("released", releaser.release(r_slot, claims)))
        r.start()
        assert holds_p0.wait(60)
        c = threading.Thread(target=lambda: out.setdefault("claimed", claimer.claim(c_slot, {topic: 2}, 60)))
        c.start()
        wait_until_waiting_for_a_lock(conn, c_id)
        go_on.set()
        r.join(60)
        c.join(60)
    finally:
        go_on.set()
        r_conn.close()
        c_conn.close()
    assert out["released"] == list(claims)
    assert [x.partition_id for x in out["claimed"].new] == [0, 1]
    assert releaser.deadlocks == claimer.deadlocks == 0 and releaser.retries == claimer.retries == 0


def test_a_for_update_claimer_that_lost_what_it_waited_for_moves_on_at_once(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 4)
    c_slot = new_slot()
    rival, c_conn = connect(mysql_db), connect(mysql_db)
    claimer = ClaimStore(c_conn, LockMode.FOR_UPDATE, sleep=lambda _s: None)
    out: dict[str, Any] = {}
    try:
        with c_conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            (c_id,) = cur.fetchone() or (0,)
        c_conn.commit()
        with rival.cursor() as cur:  # another claimer has locked the two oldest rows
            cur.execute(
                "SELECT * FROM topic_partitions WHERE topic_id = %s AND partition_id IN (0, 1) FOR UPDATE", (topic,)
            )
        c = threading.Thread(target=lambda: out.setdefault("claimed", claimer.claim(c_slot, {topic: 1}, 60)))
        c.start()
        wait_until_waiting_for_a_lock(conn, c_id)  # queued behind the rival on its candidates (p0, p1)
        with rival.cursor() as cur:  # ... which the rival now claims
            cur.execute(
                "UPDATE topic_partitions SET claimed_by = %s, claim_epoch = claim_epoch + 1,"
                " lease_expires_at = CURRENT_TIMESTAMP(6) + INTERVAL 1 MINUTE"
                " WHERE topic_id = %s AND partition_id IN (0, 1)",
                (new_slot(), topic),
            )
        rival.commit()
        c.join(60)
    finally:
        rival.close()
        c_conn.close()
    # It moved on to the next rows in the same call, without a backoff.
    result = out["claimed"]
    assert [x.partition_id for x in result.new] == [2] and result.status is ClaimStatus.COMPLETE
    assert claimer.retries == 0 and claimer.deadlocks == 0


def test_lock_wait_timeout_is_retried_not_raised(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 1)
    s = new_slot()
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    conn.commit()
    blocker = connect(mysql_db)
    sleeps: list[float] = []

    def backoff(seconds: float) -> None:
        # The first attempt has timed out by now: let go of the row before the second.
        sleeps.append(seconds)
        blocker.rollback()

    store = ClaimStore(conn, LockMode.SKIP_LOCKED, sleep=backoff)
    [x] = store.claim(s, {topic: 1}, 30).claims
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT * FROM topic_partitions WHERE topic_id = %s FOR UPDATE", (topic,))
        committed = store.commit_offset(s, x, 42)
    finally:
        blocker.close()
    assert committed.committed_offset == 42
    assert store.lock_wait_timeouts == 1 and store.retries == 1 and len(sleeps) == 1
    assert rows(mysql_db, topic)[0][2] == 42


def test_store_closes_its_connection(mysql_db: MySQLParams) -> None:
    s = new_slot()
    with open_claim_store(mysql_db) as store:
        assert store.mode is LockMode.SKIP_LOCKED
        assert store.claim(s, {}, 30).claims == ()
    assert not store.conn.open
    store.close()  # twice is fine


def test_lock_mode_comes_from_the_server(conn: Any) -> None:
    assert server_lock_mode(conn) is LockMode.SKIP_LOCKED  # the stack runs MariaDB 10.11
    assert server_lock_mode(conn, "optimistic") is LockMode.OPTIMISTIC


def test_stored_assignment_is_reused_and_sticky(mysql_db: MySQLParams, conn: Any) -> None:
    from lagsched.adapters.slots import slot_id_for
    from lagsched.core.balance import balanced_assign

    for p in (3, 5, 8, 13):
        add_topic(mysql_db, p, linker_workers=2)
    # Fixed ids: placements are then the same on every run.
    slots = [slot_id_for(f"sticky-{i}") for i in range(4)]
    first = current_assignment(conn, "bench", slots)
    assert first.recomputed and first.generation == 1
    assert first.assignment == balanced_assign(first.topics, slots)
    again = current_assignment(conn, "bench", slots)
    assert not again.recomputed and again.assignment == first.assignment
    gone = slots[0]
    after = current_assignment(conn, "bench", slots[1:])
    assert after.recomputed and after.generation == 2
    for topic, _ in first.assignment:
        now = after.assignment.owners_of(topic)
        assert gone not in now and len(set(now)) == 2
    # Sticky: the new assignment is computed from the stored one, not from scratch.
    assert after.assignment == balanced_assign(after.topics, slots[1:], first.assignment)
    # And it survives a reconnect: another process reads the same stored assignment.
    other = connect(mysql_db)
    try:
        assert current_assignment(other, "bench", slots[1:]).assignment == after.assignment
    finally:
        other.close()


def test_a_recorded_batch_survives_its_holder_and_is_handed_to_the_next_one(mysql_db: MySQLParams, conn: Any) -> None:
    """begin_batch records [start, end) under the epoch; only its commit clears it; a stale holder
    cannot record one; the next holder sees it in ``pending`` and must redo exactly that range."""
    topic = add_topic(mysql_db, 2)
    a, b = new_slot(), new_slot()
    store = ClaimStore(conn, LockMode.SKIP_LOCKED)
    c0, c1 = store.claim(a, {topic: 2}, 30).claims
    assert store.pending(a) == {}
    c0 = store.begin_batch(a, c0, 0, 500)
    assert store.begin_batch(a, c0, 0, 500) == c0  # recording the same range again is a no-op
    with pytest.raises(ValueError, match=r"already has the batch \[0, 500\) recorded"):
        store.begin_batch(a, c0, 0, 600)
    c1 = store.commit_offset(a, store.begin_batch(a, c1, 7, 9), 9)
    assert store.pending(a) == {(topic, 0): (0, 500)}  # committed batches are closed
    with pytest.raises(ValueError, match="has committed offset 9, not None"):
        store.begin_batch(a, dataclasses.replace(c1, committed_offset=None), 0, 9)  # planned from a stale offset
    assert rows(mysql_db, topic)[1][2] == 9

    # a dies between its write and its commit: its lease runs out and b takes the row over.
    ran_out = expire(mysql_db, topic, 0)
    stale = dataclasses.replace(c0, lease_expires_at=ran_out)
    [taken] = store.claim(b, {topic: 1}, 30).claims
    assert taken.partition_id == 0 and taken.committed_offset is None
    assert store.pending(b) == {(topic, 0): (0, 500)}
    with pytest.raises(ClaimLostError, match="lost the claim") as lost:
        store.begin_batch(a, stale, 500, 700)  # the stale holder can record nothing more
    assert lost.value.reason is StaleReason.TAKEN_OVER
    with pytest.raises(ClaimLostError):
        store.commit_offset(a, stale, 500)  # nor commit its batch
    taken = store.begin_batch(b, taken, 0, 500)  # the redo, same range
    taken = store.commit_offset(b, taken, 500)
    assert store.pending(b) == {} and taken.committed_offset == 500


def test_a_batch_range_must_be_non_empty(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 1)
    store = ClaimStore(conn, LockMode.SKIP_LOCKED)
    slot = new_slot()
    [c] = store.claim(slot, {topic: 1}, 30).claims
    for start, end in [(5, 5), (6, 5), (-1, 3)]:
        with pytest.raises(ValueError, match="0 <= start < end"):
            store.begin_batch(slot, c, start, end)
    assert store.pending(slot) == {}
