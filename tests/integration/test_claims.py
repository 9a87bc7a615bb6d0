"""The claim table against the real MariaDB, in every lock mode.

The soak (``LAGSCHED_CLAIM_SOAK_S`` seconds, default 60) runs 8 claimer processes per lock mode,
all three modes at once, each mode in its own database: they claim, commit, renew, stall past
their lease and release in loops. Two independent checkers (a process polling the table and a
post-run check of every claimer's log) must see no row held twice and no commit with a stale epoch.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched.adapters.claims import ClaimStore, server_lock_mode
from lagsched.adapters.mysql import connect
from lagsched.adapters.ownership import current_assignment, wants_for
from lagsched.bench.claims import (
    OFFSET_EPOCH,
    ClaimerSpec,
    RunResult,
    create_database,
    drop_database,
    hold_loop,
    run_claimers,
    seed_topics,
)
from lagsched.connections import MySQLParams, mysql_params
from lagsched.core.claims import LockMode
from lagsched.core.errors import StaleClaimError

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
        f"(log+poller, {poll.polls} polls), cas conflicts {h.cas_conflicts}, lock retries {h.transient_retries}"
    )
    assert h.double_claims == 0 and poll.double_claims == 0
    assert h.stale_commits == 0 and poll.stale_commits == 0
    # The soak did exercise the dangerous paths.
    assert h.claims > 100 * WORKERS and h.commits > 100 * WORKERS
    assert h.refused > 0, "no stall led to a refused commit: takeovers were not exercised"
    assert h.renews > 0 and h.releases > 0
    assert poll.polls > 10
    # Every claim is accounted for: each row's epoch is the number of claims logged for it, and its
    # committed offset is the highest one any claimer committed.
    from lagsched.bench.claims import read_events

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
    lease_s = 2.0
    topic = add_topic(mysql_db, 7, linker_workers=3)
    a, b, c = new_slot(), new_slot(), new_slot()
    view = current_assignment(conn, [a, b, c])
    wants = {s: wants_for(s, view) for s in (a, b, c)}
    assert sorted(w[topic] for w in wants.values()) == [2, 2, 3]  # fair share: floor/ceil of 7/3

    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    victim = ctx.Process(target=hold_loop, args=(mysql_db, mode, a, wants[a], lease_s, ready), daemon=True)
    victim.start()
    a_rows = {(t, p): e for t, p, e in ready.get(timeout=60)}
    assert len(a_rows) == wants[a][topic]

    store = ClaimStore(conn, LockMode(mode))
    held = {s: store.claim(s, wants[s], lease_s) for s in (b, c)}
    assert [len(held[s]) for s in (b, c)] == [wants[b][topic], wants[c][topic]]
    assert not {x.key for s in (b, c) for x in held[s]} & set(a_rows)

    os.kill(victim.pid or 0, signal.SIGKILL)
    victim.join(timeout=10)
    killed_at = time.monotonic()
    a_lease = {p: r[3] for p, r in rows(mysql_db, topic).items() if (topic, p) in a_rows}
    view = current_assignment(conn, [b, c])  # the live set without the dead slot
    assert view.recomputed
    new_wants = {s: wants_for(s, view) for s in (b, c)}
    assert sorted(w[topic] for w in new_wants.values()) == [3, 4]

    taken: dict[tuple[str, int], str] = {}
    while len(taken) < len(a_rows) and time.monotonic() - killed_at < lease_s + 10:
        for s in (b, c):
            for x in store.claim(s, new_wants[s], lease_s):
                assert x.key in a_rows, "only the dead slot's rows are free"
                assert x.claim_epoch == a_rows[x.key] + 1
                taken[x.key] = s
            store.renew(s, store.held(s), lease_s)  # b and c stay alive
        time.sleep(0.1)
    assert set(taken) == set(a_rows), f"dead slot's rows not re-claimed within lease + 10 s: {taken}"
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
    [ca] = store.claim(a, {topic: 1}, 0.5)
    assert ca.claim_epoch == 1 and ca.committed_offset is None
    store.commit_offset(a, topic, 0, ca.claim_epoch, 100)
    store.commit_offset(a, topic, 0, ca.claim_epoch, 100)  # the same offset again is fine
    assert store.claim(b, {topic: 1}, 5) == []  # a's lease is live
    time.sleep(0.6)
    with pytest.raises(StaleClaimError, match="lease ran out"):
        store.commit_offset(a, topic, 0, ca.claim_epoch, 150)
    [cb] = store.claim(b, {topic: 1}, 5)
    assert cb.claim_epoch == 2 and cb.committed_offset == 100
    with pytest.raises(StaleClaimError, match=f"held by {b} at epoch 2") as info:
        store.commit_offset(a, topic, 0, ca.claim_epoch, 200)
    assert (info.value.topic_id, info.value.partition_id, info.value.epoch) == (topic, 0, 1)
    assert store.renew(a, [ca], 5) == []
    assert store.release(a, [ca]) == []
    assert rows(mysql_db, topic)[0][:3] == (b, 2, 100)
    store.commit_offset(b, topic, 0, 2, 300)
    assert store.release(b, [cb]) == [cb]
    claimed_by, epoch, offset, lease, _picked = rows(mysql_db, topic)[0]
    assert (claimed_by, epoch, offset, lease) == (None, 2, 300, None)  # disown keeps the offset
    with pytest.raises(StaleClaimError, match="released"):
        store.commit_offset(b, topic, 0, 2, 400)


@pytest.mark.parametrize("mode", MODES)
def test_claims_oldest_first_and_tops_up_to_the_target(mysql_db: MySQLParams, conn: Any, mode: str) -> None:
    topic = add_topic(mysql_db, 6)
    s = new_slot()
    store = ClaimStore(conn, LockMode(mode))
    first = store.claim(s, {topic: 2}, 30)
    assert [x.partition_id for x in first] == [0, 1]  # never-picked rows first, then by partition
    assert store.claim(s, {topic: 2}, 30) == []  # already holds its target
    more = store.claim(s, {topic: 3}, 30)
    assert [x.partition_id for x in more] == [2]
    store.release(s, first + more)
    again = store.claim(s, {topic: 4}, 30)
    # 3, 4, 5 were never picked, so they come before the rows just released; then 0 (0 and 1 were
    # picked at the same instant, ties go by partition)
    assert [x.partition_id for x in again] == [0, 3, 4, 5]
    assert store.held(s) == again
    renewed = store.renew(s, again, 60)
    assert [x.key for x in renewed] == [x.key for x in again]
    assert all(r.lease_expires_at > x.lease_expires_at for r, x in zip(renewed, again, strict=True))


def test_lock_mode_comes_from_the_server(conn: Any) -> None:
    assert server_lock_mode(conn) is LockMode.SKIP_LOCKED  # the stack runs MariaDB 10.11
    assert server_lock_mode(conn, "optimistic") is LockMode.OPTIMISTIC


def test_lock_wait_timeout_is_retried_not_raised(mysql_db: MySQLParams, conn: Any) -> None:
    topic = add_topic(mysql_db, 1)
    s = new_slot()
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    conn.commit()
    sleeps: list[float] = []
    store = ClaimStore(conn, LockMode.SKIP_LOCKED, sleep=sleeps.append)
    [x] = store.claim(s, {topic: 1}, 30)
    blocker = connect(mysql_db)
    try:
        with blocker.cursor() as cur:
            cur.execute("SELECT * FROM topic_partitions WHERE topic_id = %s FOR UPDATE", (topic,))
        threading.Timer(1.5, blocker.rollback).start()  # let go after the first attempt timed out
        store.commit_offset(s, topic, 0, x.claim_epoch, 42)
    finally:
        time.sleep(1.6)
        blocker.close()
    assert store.transient_retries >= 1 and len(sleeps) == store.transient_retries
    assert rows(mysql_db, topic)[0][2] == 42


def test_stored_assignment_is_reused_and_sticky(mysql_db: MySQLParams, conn: Any) -> None:
    from lagsched.adapters.slots import slot_id_for
    from lagsched.core.balance import balanced_assign

    for p in (3, 5, 8, 13):
        add_topic(mysql_db, p, linker_workers=2)
    # Fixed ids: placements are then the same on every run.
    slots = [slot_id_for(f"sticky-{i}") for i in range(4)]
    first = current_assignment(conn, slots)
    assert first.recomputed and first.generation == 1
    assert first.assignment == balanced_assign(first.topics, slots)
    again = current_assignment(conn, slots)
    assert not again.recomputed and again.assignment == first.assignment
    gone = slots[0]
    after = current_assignment(conn, slots[1:])
    assert after.recomputed and after.generation == 2
    for topic, _ in first.assignment:
        now = after.assignment.owners_of(topic)
        assert gone not in now and len(set(now)) == 2
    # Sticky: the new assignment is computed from the stored one, not from scratch.
    assert after.assignment == balanced_assign(after.topics, slots[1:], first.assignment)
    # And it survives a reconnect: another process reads the same stored assignment.
    other = connect(mysql_db)
    try:
        assert current_assignment(other, slots[1:]).assignment == after.assignment
    finally:
        other.close()
