"""Topic registry sync from the real Kafka broker into the real MariaDB."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from lagsched.adapters.mysql import connect
from lagsched.adapters.topics import apply_sync
from lagsched.connections import MySQLParams
from lagsched.core.errors import TopicNameError
from lagsched.core.names import validate_topic_name
from lagsched.core.registry import BrokerTopic, plan_sync
from lagsched.workflows.topic_sync import SyncReport, sync_registry

CLUSTER = "local"


def topic_row(params: MySQLParams, name: str) -> tuple[Any, ...]:
    """The topic's enabled row, or its newest disabled one."""
    conn = connect(params)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT topic_id, partition_count, retention_ms, linker_workers, min_workers, max_workers, enabled"
            " FROM topics WHERE cluster = %s AND name = %s ORDER BY enabled DESC, created_at DESC LIMIT 1",
            (CLUSTER, name),
        )
        row = cur.fetchone()
    conn.close()
    assert row is not None, name
    return tuple(row)


def partition_rows(params: MySQLParams, topic_id: str) -> dict[int, Any]:
    conn = connect(params)
    with conn.cursor() as cur:
        cur.execute("SELECT partition_id, committed_offset FROM topic_partitions WHERE topic_id = %s", (topic_id,))
        out = {int(p): o for p, o in cur.fetchall()}
    conn.close()
    return out


def sync(params: MySQLParams, admin: AdminClient, *names: str) -> SyncReport:
    conn = connect(params)
    try:
        return sync_registry(conn, admin, CLUSTER, only=names)
    finally:
        conn.close()


def test_sync_registers_grows_keeps_settings_and_disables(
    mysql_db: MySQLParams, kafka_config: dict[str, Any], new_topic: Callable[..., str]
) -> None:
    admin = AdminClient(kafka_config)
    name = new_topic(3, config={"retention.ms": "3600000"})
    forever = new_topic(1, config={"retention.ms": "-1"})

    report = sync(mysql_db, admin, name, forever)
    assert set(report.added) == {name, forever}
    tid, partitions, retention, *_rest, enabled = topic_row(mysql_db, name)
    assert (partitions, retention, enabled) == (3, 3_600_000, 1)
    assert topic_row(mysql_db, name)[4:6] == (None, None)  # no per-topic limits: the Variable's apply
    assert topic_row(mysql_db, forever)[2] == -1  # infinite retention
    assert sorted(partition_rows(mysql_db, tid)) == [0, 1, 2]

    # Users tune workers and a pipeline commits an offset; a sync must keep both.
    conn = connect(mysql_db)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topics SET linker_workers = 3, min_workers = 2, max_workers = 6 WHERE topic_id = %s", (tid,)
        )
        cur.execute(
            "UPDATE topic_partitions SET committed_offset = 77 WHERE topic_id = %s AND partition_id = 1", (tid,)
        )
    conn.commit()
    conn.close()

    # Signal's scenario 1: partitions added on the broker appear as new rows.
    admin.create_partitions([NewPartitions(name, 5)])[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        report = sync(mysql_db, admin, name, forever)
        if report.partitions_added or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert report.partitions_added == {name: (3, 4)}
    assert report.added == () and report.topic_ids[name] == tid  # same id across syncs
    row = topic_row(mysql_db, name)
    assert row[0] == tid and row[1] == 5
    assert row[3:6] == (3, 2, 6)  # users' linker_workers/min/max kept
    assert partition_rows(mysql_db, tid) == {0: None, 1: 77, 2: None, 3: None, 4: None}

    # A second sync of an unchanged broker changes nothing.
    again = sync(mysql_db, admin, name, forever)
    assert (again.added, again.disabled, again.reenabled, dict(again.partitions_added)) == ((), (), (), {})


def wait_for(step: Callable[[], SyncReport], done: Callable[[SyncReport], bool]) -> SyncReport:
    deadline = time.monotonic() + 30
    while True:  # creation and deletion are asynchronous on the broker
        report = step()
        if done(report) or time.monotonic() > deadline:
            return report
        time.sleep(0.5)


def test_recreated_topic_is_a_new_topic_and_skips_nothing(mysql_db: MySQLParams, kafka_config: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    admin = AdminClient(kafka_config)
    name = f"reg-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    try:
        sync(mysql_db, admin, name)
        old = topic_row(mysql_db, name)[0]
        conn = connect(mysql_db)
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = 2 WHERE topic_id = %s", (old,))
            cur.execute(
                "UPDATE topic_partitions SET committed_offset = 500, claimed_by = 'slot-a', claim_epoch = 4,"
                " lease_expires_at = CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE topic_id = %s",
                (old,),
            )
        conn.commit()
        conn.close()

        # Deleted and created again between two syncs: the registry never saw it missing.
        admin.delete_topics([name])[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while True:  # the broker may still be finishing the deletion
            try:
                admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        producer = Producer(kafka_config)
        for i in range(300):
            producer.produce(name, value=b"v", partition=i % 2)
        producer.flush(30)

        report = wait_for(lambda: sync(mysql_db, admin, name), lambda r: bool(r.recreated))
        assert report.recreated == (name,) and report.added == () and report.reenabled == ()
        new = report.topic_ids[name]
        assert new != old
        row = topic_row(mysql_db, name)
        assert row[0] == new and row[3] == 2 and row[-1] == 1  # the name's worker settings carry over
        assert partition_rows(mysql_db, new) == {0: None, 1: None}  # offsets start over
        conn = connect(mysql_db)
        with conn.cursor() as cur:
            cur.execute("SELECT enabled FROM topics WHERE topic_id = %s", (old,))
            assert cur.fetchone() == (0,)
            cur.execute(
                "SELECT committed_offset, claimed_by, claim_epoch FROM topic_partitions WHERE topic_id = %s", (old,)
            )
            # History kept; the old holder is fenced: its epoch is gone, so it can store nothing.
            assert set(cur.fetchall()) == {(500, None, 5)}
        conn.close()
        again = sync(mysql_db, admin, name)
        assert (again.recreated, again.added, again.topic_ids[name]) == ((), (), new)
    finally:
        admin.delete_topics([name])


def test_deleted_topic_is_disabled_with_offsets_kept(mysql_db: MySQLParams, kafka_config: dict[str, Any]) -> None:
    admin = AdminClient(kafka_config)
    name = f"reg-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    try:
        sync(mysql_db, admin, name)
        tid = topic_row(mysql_db, name)[0]
        conn = connect(mysql_db)
        with conn.cursor() as cur:
            cur.execute("UPDATE topic_partitions SET committed_offset = 500 WHERE topic_id = %s", (tid,))
        conn.commit()
        conn.close()
        admin.delete_topics([name])[name].result(timeout=30)
        report = wait_for(lambda: sync(mysql_db, admin, name), lambda r: bool(r.disabled))
        assert report.disabled == (name,)
        assert topic_row(mysql_db, name)[-1] == 0
        assert partition_rows(mysql_db, tid) == {0: 500, 1: 500}  # offsets kept
    finally:
        admin.delete_topics([name])


def test_apply_sync_is_pure_database_work(mysql_db: MySQLParams) -> None:
    def apply(cluster: str, broker: list[BrokerTopic]) -> Any:
        return apply_sync(conn, cluster, partial(plan_sync, broker=broker))

    conn = connect(mysql_db)
    try:
        first = apply(CLUSTER, [BrokerTopic("a", 2, 1000, "A" * 22), BrokerTopic("b", 1, -1, "B" * 22)])
        assert first.plan.added == ("a", "b")
        # another cluster with the same topic name is another topic
        other = apply("other", [BrokerTopic("a", 2, -1, "C" * 22)])
        assert other.topic_ids["a"] != first.topic_ids["a"]
        gone = apply(CLUSTER, [BrokerTopic("a", 2, 1000, "A" * 22)])
        assert gone.plan.disabled_names == ("b",)
        assert apply("other", [BrokerTopic("a", 2, -1, "C" * 22)]).plan.disabled_names == ()
        # b only looked missing (the same Kafka topic id): it comes back with its row
        back = apply(CLUSTER, [BrokerTopic("a", 2, 1000, "A" * 22), BrokerTopic("b", 1, -1, "B" * 22)])
        assert back.plan.reenabled == ("b",) and back.topic_ids["b"] == first.topic_ids["b"]
        # an unchanged broker writes nothing
        same = apply(CLUSTER, [BrokerTopic("a", 2, 1000, "A" * 22), BrokerTopic("b", 1, -1, "B" * 22)])
        assert (same.plan.insert, same.plan.update, same.plan.disable) == ((), (), ())
    finally:
        conn.close()


@pytest.mark.parametrize("bad", ["", "has space", "semi;colon", "ü", "x" * 250, ".", "..", "a\n"])
def test_illegal_topic_names_are_refused(bad: str) -> None:
    with pytest.raises(TopicNameError, match="not legal"):
        validate_topic_name(bad)
    with pytest.raises(TopicNameError):
        BrokerTopic(bad, 1)


def test_a_trailing_newline_is_not_a_legal_name() -> None:
    with pytest.raises(TopicNameError):
        validate_topic_name("orders\n")


def test_legal_topic_names_pass() -> None:
    for good in ["orders", "a.b_c-d", "X" * 249, "0"]:
        assert validate_topic_name(good) == good
