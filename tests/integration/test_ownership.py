"""The stored assignment on the real MariaDB: computed outside the row lock, one generation for all.

``current_assignment`` computes the balanced assignment holding no lock, then locks
the cluster's ``cluster_assignment_state`` row, checks nobody stored in the meantime and writes
the changed topics. These
tests pin the three things that make that safe: the lock is free while computing, concurrent
callers end on one stored generation, and a caller that lost the race recomputes from the winner's
assignment instead of overwriting it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pymysql
import pytest

from lagsched.adapters import ownership
from lagsched.adapters.mysql import connect
from lagsched.adapters.ownership import current_assignment, load_stored
from lagsched.adapters.slots import slot_id_for
from lagsched.connections import MySQLParams
from lagsched.core.balance import balanced_assign
from lagsched.core.rendezvous import Assignment, TopicSpec
from lagsched_dev.bench.claims import seed_topics


@pytest.fixture
def conn(mysql_db: MySQLParams) -> Iterator[Any]:
    c = connect(mysql_db)
    yield c
    c.close()


def _topics(params: MySQLParams, counts: Sequence[int], linker_workers: int = 2) -> list[str]:
    ids = seed_topics(params, counts)
    c = connect(params)
    try:
        with c.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = %s", (linker_workers,))
        c.commit()
    finally:
        c.close()
    return ids


def _slots(prefix: str, n: int) -> list[str]:
    return [slot_id_for(f"{prefix}-{i}") for i in range(n)]


def test_the_row_lock_is_free_while_the_assignment_is_computed(
    mysql_db: MySQLParams, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topics(mysql_db, [3, 5, 8, 13, 21])
    seen: list[int] = []
    probe = connect(mysql_db)
    with probe.cursor() as cur:  # the cluster's state row exists (its first writer makes it otherwise)
        cur.execute("INSERT INTO cluster_assignment_state (cluster) VALUES ('bench')")
    probe.commit()
    real = ownership.balanced_assign

    def computing(topics: Sequence[TopicSpec], slots: Sequence[str], previous: Assignment | None) -> Assignment:
        # Another slot tries to lock the state row while this one computes: NOWAIT fails at once
        # (error 1205/3572) if the row is held, rather than waiting.
        with probe.cursor() as cur:
            cur.execute("SELECT generation FROM cluster_assignment_state WHERE cluster = 'bench' FOR UPDATE NOWAIT")
            seen.append(int(cur.fetchone()[0]))
        probe.rollback()
        return real(topics, slots, previous)

    monkeypatch.setattr(ownership, "balanced_assign", computing)
    try:
        view = current_assignment(conn, "bench", _slots("lockfree", 4))
    finally:
        probe.close()
    assert view.recomputed and view.generation == 1 and seen == [0]
    assert view.lock_held_s >= 0.0 and view.attempts == 1


def test_concurrent_callers_agree_on_one_stored_generation(mysql_db: MySQLParams) -> None:
    _topics(mysql_db, [1, 2, 3, 5, 8, 13, 21, 34, 55, 89] * 3, linker_workers=3)
    slots = _slots("agree", 6)
    callers = 8
    barrier = threading.Barrier(callers)

    def call() -> ownership.OwnershipView:
        c = connect(mysql_db)
        try:
            barrier.wait(timeout=60)  # all start together, so their computations overlap
            return current_assignment(c, "bench", slots)
        finally:
            c.close()

    with ThreadPoolExecutor(max_workers=callers) as pool:
        futures = [pool.submit(call) for _ in range(callers)]
        views = [f.result(timeout=120) for f in futures]  # re-raises a caller's exception here
    assert len(views) == callers
    assert {v.generation for v in views} == {1}
    assert sum(v.recomputed for v in views) == 1
    assert all(v.assignment == views[0].assignment for v in views)
    check = connect(mysql_db)
    try:
        stored, generation, _ = load_stored(check, "bench")
    finally:
        check.close()
    assert generation == 1 and stored == views[0].assignment
    assert stored == balanced_assign(views[0].topics, slots)


def test_a_caller_that_lost_the_race_recomputes_from_the_winners_assignment(
    mysql_db: MySQLParams, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topics(mysql_db, [4, 6, 8, 10, 12, 14, 16], linker_workers=2)
    slots = _slots("race", 5)
    first = current_assignment(conn, "bench", slots)
    assert first.generation == 1

    # While this caller computes for "one slot left", another stores "one slot joined".
    rival = connect(mysql_db)
    joined = [*slots, slot_id_for("race-new")]
    left = slots[1:]
    real = ownership.balanced_assign
    rival_views: list[ownership.OwnershipView] = []

    def racing(topics: Sequence[TopicSpec], live: Sequence[str], previous: Assignment | None) -> Assignment:
        if not rival_views:
            monkeypatch.setattr(ownership, "balanced_assign", real)
            rival_views.append(current_assignment(rival, "bench", joined))
            monkeypatch.setattr(ownership, "balanced_assign", racing)
        return real(topics, live, previous)

    monkeypatch.setattr(ownership, "balanced_assign", racing)
    try:
        view = current_assignment(conn, "bench", left)
    finally:
        rival.close()
    [rival_view] = rival_views
    assert rival_view.generation == 2 and rival_view.recomputed
    # The loser noticed generation 2, and computed generation 3 from it, sticky.
    assert view.recomputed and view.generation == 3 and view.attempts == 2
    assert view.assignment == balanced_assign(view.topics, left, rival_view.assignment)
    stored, generation, _ = load_stored(conn, "bench")
    assert (stored, generation) == (view.assignment, 3)


def test_only_changed_topics_are_rewritten(mysql_db: MySQLParams, conn: Any) -> None:
    _topics(mysql_db, list(range(1, 41)), linker_workers=2)
    slots = _slots("diff", 8)
    first = current_assignment(conn, "bench", slots)
    after = current_assignment(conn, "bench", [*slots, slot_id_for("diff-new")])
    changed = {t for t, owners in after.assignment if first.assignment.owners_of(t) != owners}
    assert changed  # the new slot took something
    with conn.cursor() as cur:
        cur.execute("SELECT topic_id, generation FROM topic_owners")
        rows = cur.fetchall()
    conn.commit()
    generations = {str(t): int(g) for t, g in rows}
    assert {t for t, g in generations.items() if g == 2} == changed
    assert {t for t, g in generations.items() if g == 1} == {t for t, _ in first.assignment} - changed


def test_unchanged_inputs_read_without_locking_or_writing(mysql_db: MySQLParams, conn: Any) -> None:
    _topics(mysql_db, [5, 7, 9])
    slots = _slots("read", 3)
    first = current_assignment(conn, "bench", slots)
    blocker = connect(mysql_db)
    try:
        with blocker.cursor() as cur:  # somebody holds the state row lock for a while
            cur.execute("SELECT generation FROM cluster_assignment_state WHERE cluster = 'bench' FOR UPDATE")
        again = current_assignment(conn, "bench", list(reversed(slots)))
    finally:
        blocker.rollback()
        blocker.close()
    assert (again.generation, again.recomputed, again.lock_held_s, again.attempts) == (1, False, 0.0, 0)
    assert again.assignment == first.assignment


def test_a_database_error_falls_back_to_plain_hrw(
    mysql_db: MySQLParams, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topics(mysql_db, [5, 7])
    slots = _slots("fallback", 3)

    def broken(*args: object, **kwargs: object) -> int:
        raise pymysql.err.OperationalError(1290, "read only")

    monkeypatch.setattr(ownership, "_store_changes", broken)
    view = current_assignment(conn, "bench", slots)
    assert view.generation == -1 and not view.recomputed
    assert view.assignment == ownership.assign(view.topics, slots)
