"""Topic registry sync from the real Kafka broker into the real MariaDB."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from lagsched.adapters.mysql import connect
from lagsched.adapters.registry import (
    BrokerTopic,
    SyncReport,
    apply_sync,
    sync_registry,
    validate_topic_name,
)
from lagsched.connections import MySQLParams
from lagsched.core.errors import TopicNameError

CLUSTER = "local"


def topic_row(params: MySQLParams, name: str) -> tuple[Any, ...]:
    conn = connect(params)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT topic_id, partition_count, retention_ms, linker_workers, min_workers, max_workers, enabled"
            " FROM topics WHERE cluster = %s AND name = %s",
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


def test_deleted_topic_is_disabled_with_offsets_kept_and_comes_back(
    mysql_db: MySQLParams, kafka_config: dict[str, Any]
) -> None:
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
        deadline = time.monotonic() + 30
        while True:  # deletion is asynchronous on the broker
            report = sync(mysql_db, admin, name)
            if report.disabled or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert report.disabled == (name,)
        assert topic_row(mysql_db, name)[-1] == 0
        assert partition_rows(mysql_db, tid) == {0: 500, 1: 500}  # offsets kept

        admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while True:
            report = sync(mysql_db, admin, name)
            if report.reenabled or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert report.reenabled == (name,) and report.topic_ids[name] == tid
        assert topic_row(mysql_db, name)[-1] == 1
        assert partition_rows(mysql_db, tid) == {0: 500, 1: 500}
    finally:
        admin.delete_topics([name])


def test_apply_sync_is_pure_database_work(mysql_db: MySQLParams) -> None:
    conn = connect(mysql_db)
    try:
        first = apply_sync(conn, CLUSTER, [BrokerTopic("a", 2, 1000), BrokerTopic("b", 1)])
        assert first.added == ("a", "b")
        # another cluster with the same topic name is another topic
        other = apply_sync(conn, "other", [BrokerTopic("a", 2)])
        assert other.topic_ids["a"] != first.topic_ids["a"]
        gone = apply_sync(conn, CLUSTER, [BrokerTopic("a", 2, 1000)])
        assert gone.disabled == ("b",)
        assert apply_sync(conn, "other", [BrokerTopic("a", 2)]).disabled == ()
    finally:
        conn.close()


@pytest.mark.parametrize("bad", ["", "has space", "semi;colon", "ü", "x" * 250, ".", ".."])
def test_illegal_topic_names_are_refused(bad: str) -> None:
    with pytest.raises(TopicNameError, match="not legal"):
        validate_topic_name(bad)
    with pytest.raises(TopicNameError):
        BrokerTopic(bad, 1)


def test_legal_topic_names_pass() -> None:
    for good in ["orders", "a.b_c-d", "X" * 249, "0"]:
        assert validate_topic_name(good) == good
