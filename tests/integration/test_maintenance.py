"""Maintenance's retention on real MariaDB and Redis: old history goes, what the readers need stays.

History is written through the real adapters at chosen times (decisions and overrides take their
time as a parameter; a gap's detection time is the server's clock, so the tests move it back),
then `maintain` runs at a fixed ``now`` with no cluster to measure (the retention and slot steps
are global). The evaluator's reads (`last_decisions`, `last_change_times`, `active_overrides`)
and the page's read model (`cluster_status`) are compared before and after.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched.adapters.decisions import insert_decision, last_change_times, last_decisions
from lagsched.adapters.gaps import RetentionGap, lost_records, record_gap
from lagsched.adapters.overrides import active_overrides, cancel_override, list_overrides
from lagsched.adapters.slots import SlotLock, SlotRacks, SlotRegistry, slot_id_for
from lagsched.adapters.topics import apply_sync
from lagsched.adapters.transactions import transaction
from lagsched.adapters.worker_changes import create_override
from lagsched.core.evaluator import Decision
from lagsched.core.registry import BrokerTopic, plan_sync
from lagsched.core.retention import DAY_S, RetentionSettings
from lagsched.workflows.maintenance import maintain
from lagsched.workflows.status import cluster_status

pytestmark = pytest.mark.integration


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def topics(db: Any, cluster: str, *names: str) -> dict[str, str]:
    """Register ``names`` (3 partitions each) in ``cluster``; name -> topic id."""
    applied = apply_sync(db, cluster, lambda rows: plan_sync(rows, [BrokerTopic(n, 3) for n in names]))
    return {n: applied.topic_ids[n] for n in names}


def decide(db: Any, cluster: str, topic: str, topic_id: str, when: float, rule: str = "scale_up_rising") -> int:
    """Record one decision of ``topic`` made at ``when``; its id."""
    d = Decision(topic, 1, 2, lag=100, time_lag_s=1.0, slope=1.0, fit_r2=0.9, policy="hevo", rule=rule,
                 reason=f"test decision at {when}", decided_at=when)  # fmt: skip
    with transaction(db) as cur:
        row = insert_decision(cur, cluster=cluster, evaluation_id=f"ev-{uuid.uuid4().hex}", topic_id=topic_id, d=d)
    return row.decision_id


def gap(db: Any, topic_id: str, partition: int, start: int, detected_at: float) -> None:
    """A retention gap of 10 records, detected at ``detected_at`` (moved back from the server's now)."""
    assert record_gap(db, RetentionGap(topic_id, partition, start, start + 10), slot_id_for("gap-finder"))
    with transaction(db) as cur:
        cur.execute(
            "UPDATE retention_gaps SET detected_at = %s WHERE topic_id = %s AND partition_id = %s AND from_offset = %s",
            (at(detected_at).replace(tzinfo=None), topic_id, partition, start),
        )


def override(db: Any, cluster: str, topic: str, when: float, duration_s: float) -> int:
    return create_override(
        db, cluster=cluster, topic=topic, linker_workers=2, duration_s=duration_s, reason="black friday",
        created_by="ops", now=at(when),
    ).id  # fmt: skip


def decision_ids(db: Any) -> set[int]:
    with transaction(db) as cur:
        cur.execute("SELECT decision_id FROM scaling_decisions")
        return {int(r[0]) for r in cur.fetchall()}


def gap_starts(db: Any) -> set[tuple[str, int, int]]:
    with transaction(db) as cur:
        cur.execute("SELECT topic_id, partition_id, from_offset FROM retention_gaps")
        return {(str(t), int(p), int(f)) for t, p, f in cur.fetchall()}


def run(db: Any, redis: Any, now: float, retention: RetentionSettings | None = None) -> Any:
    return maintain((), mysql=db, redis=redis, admins={}, now=at(now), retention=retention or RetentionSettings())


def test_old_history_goes_and_what_the_evaluator_and_the_page_read_stays(
    db: Any, redis_client: Any, cluster: str
) -> None:
    now = time.time()
    ids = topics(db, cluster, "orders", "idle", "payments", "audit")
    orders, idle = ids["orders"], ids["idle"]
    # Overrides: one expired 50 days ago, one cancelled 44 days ago, one ended 13 days ago, one active.
    expired = override(db, cluster, "orders", now - 50 * DAY_S, 3600)
    cancelled = override(db, cluster, "orders", now - 45 * DAY_S, 2 * DAY_S)
    assert cancel_override(db, cancelled, at(now - 44 * DAY_S), "ops")
    ended_young = override(db, cluster, "payments", now - 20 * DAY_S, 7 * DAY_S)
    active = override(db, cluster, "audit", now - 3600, DAY_S)
    old_orders = {decide(db, cluster, "orders", orders, now - d * DAY_S) for d in (40, 31)}
    young_orders = decide(db, cluster, "orders", orders, now - DAY_S)
    idle_only = decide(db, cluster, "idle", idle, now - 60 * DAY_S)  # old, but idle's newest
    gap(db, orders, 0, 0, now - 40 * DAY_S)
    gap(db, orders, 0, 100, now - 31 * DAY_S)
    gap(db, orders, 1, 0, now - 29 * DAY_S)
    gap(db, idle, 2, 0, now - 60)

    all_ids = list(ids.values())

    def evaluator_reads() -> tuple[Any, ...]:
        return last_decisions(db, all_ids), last_change_times(db, all_ids), active_overrides(db, cluster, at(now))

    evaluator_before = evaluator_reads()
    before = decision_ids(db)
    override_decisions = {o.id: o.decision_id for o in list_overrides(db, cluster, limit=10)}

    report = run(db, redis_client, now)

    # Deleted: the overrides that ended more than 30 days ago, their decisions (each older than 30
    # days and not its topic's newest), orders' two old decisions and the two old gaps.
    doomed = old_orders | {override_decisions[expired], override_decisions[cancelled]}
    assert report.rows_deleted == {"scaling_overrides": 2, "scaling_decisions": 4, "retention_gaps": 2}
    assert decision_ids(db) == before - doomed
    assert {young_orders, idle_only, override_decisions[ended_young], override_decisions[active]} <= decision_ids(db)
    assert {o.id for o in list_overrides(db, cluster, limit=10)} == {ended_young, active}
    assert gap_starts(db) == {(orders, 1, 0), (idle, 2, 0)}
    assert lost_records(db, all_ids) == {orders: {1: 10}, idle: {2: 10}}
    # The evaluator reads exactly what it read before: newest decision (rule) and time per topic, pins.
    assert evaluator_reads() == evaluator_before
    # The page's read model still works, and shows the retained history.
    st = cluster_status(db, redis_client, cluster, at(now))
    assert {d.decision_id for d in st.decisions} == decision_ids(db)
    assert [o["id"] for o in st.overrides] == [active]  # the active ones
    assert sorted((g.topic, g.partition, g.from_offset) for g in st.retention_gaps) == [
        ("idle", 2, 0),
        ("orders", 1, 0),
    ]
    assert report.as_dict()["rows_deleted"] == report.rows_deleted
    assert "scaling_decisions lost 4 row(s) (kept 30 days)" in report.table()

    # A second run at the same time finds nothing more to delete.
    assert set(run(db, redis_client, now).rows_deleted.values()) == {0}


def test_an_active_overrides_decision_stays_whatever_its_age(db: Any, redis_client: Any, cluster: str) -> None:
    now = time.time()
    ids = topics(db, cluster, "audit", "orders")
    # Pinned six days ago for seven days; the evaluator re-recorded the pin an hour ago.
    pinned = override(db, cluster, "audit", now - 6 * DAY_S, 7 * DAY_S)
    (pin,) = active_overrides(db, cluster, at(now))
    assert pin.id == pinned and pin.decision_id is not None
    newer = decide(db, cluster, "audit", ids["audit"], now - 3600, rule="override")
    old = decide(db, cluster, "orders", ids["orders"], now - 3 * DAY_S)
    decide(db, cluster, "orders", ids["orders"], now - 60)

    report = run(db, redis_client, now, RetentionSettings(decisions_days=1))

    assert report.rows_deleted["scaling_decisions"] == 1  # orders' old one; the pin's is kept though as old
    assert decision_ids(db) >= {pin.decision_id, newer} and old not in decision_ids(db)
    assert active_overrides(db, cluster, at(now)) == [pin]


def test_a_backlog_larger_than_a_batch_goes_in_several_batches(db: Any, redis_client: Any, cluster: str) -> None:
    now = time.time()
    ids = topics(db, cluster, "orders", "idle")
    orders = ids["orders"]
    backlog = 250  # two and a half batches of 100
    old = [decide(db, cluster, "orders", orders, now - 40 * DAY_S + i) for i in range(backlog)]
    newest = old.pop()  # the newest of orders, old as it is, stays
    young = decide(db, cluster, "idle", ids["idle"], now - 60)
    for i in range(backlog):
        gap(db, orders, i % 3, 10 * i, now - 31 * DAY_S)
    gap(db, orders, 0, 10 * backlog, now - 60)
    with transaction(db) as cur:  # a backlog of ended overrides, written as the adapter would
        cur.executemany(
            "INSERT INTO scaling_overrides (cluster, topic_id, topic, linker_workers, previous_linker_workers, reason,"
            " created_by, created_at, expires_at) VALUES (%s, %s, 'orders', 2, 1, 'r', 'ops', %s, %s)",
            [(cluster, orders, at(now - 50 * DAY_S).replace(tzinfo=None), at(now - 49 * DAY_S).replace(tzinfo=None))]
            * backlog,
        )

    report = run(db, redis_client, now, RetentionSettings(batch_rows=100))

    assert report.rows_deleted == {
        "scaling_overrides": backlog, "scaling_decisions": backlog - 1, "retention_gaps": backlog,
    }  # fmt: skip
    assert decision_ids(db) == {newest, young}
    assert gap_starts(db) == {(orders, 0, 10 * backlog)}
    assert list_overrides(db, cluster) == []


def test_dead_slots_leftovers_go_while_live_and_starting_slots_keep_theirs(
    db: Any, redis_client: Any, cluster: str
) -> None:
    now = time.time()
    registry, racks, lock = SlotRegistry(redis_client, cluster=cluster), SlotRacks(redis_client), SlotLock(redis_client)
    live, starting, silent, dead, left = (slot_id_for(f"{cluster}-{n}") for n in range(5))
    for slot in (live, starting, silent, dead, left):
        racks.announce(slot, f"rack-{slot[:4]}")
    registry.heartbeat(live, at(now), 15)
    assert lock.acquire(live, "host:1:live", 45) is None
    assert lock.acquire(starting, "host:2:starting", 45) is None  # locked, no heartbeat yet (Spark starting)
    registry.heartbeat(silent, at(now - 600), 15)  # silent 10 min: not pruned yet, so its entry stays too
    registry.heartbeat(dead, at(now - 7200), 15)  # silent 2 h: pruned, then its entry goes
    registry.heartbeat(left, at(now), 15)
    registry.leave(left)
    redis_client.delete(f"lagsched:slot:{dead}", f"lagsched:slot:{silent}")  # their TTLs ran out

    report = run(db, redis_client, now)

    assert (report.slots_pruned, report.slot_entries_deleted) == (1, 2)
    kept = {s: f"rack-{s[:4]}" for s in (live, starting, silent)}
    assert racks.racks([live, starting, silent, dead, left]) == {**kept, dead: None, left: None}
    # What else a slot leaves expires on its own: the heartbeat key and the lock carry TTLs.
    assert 0 < redis_client.ttl(f"lagsched:slot:{live}") <= 15
    assert 0 < redis_client.ttl(lock.key(live)) <= 45
    assert registry.live_slots(at(now), 15) == [live]
    assert "2 entry(ies) of dead slots deleted" in report.table()
