"""The stack is real: exact broker offsets, SKIP LOCKED claims, Redis pub/sub, and Spark tasks reading exact
offset ranges with the slots' reader."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from lagsched.adapters.mysql import connect
from lagsched.core.offsets import OffsetRange

RECORDS = 10_000
PARTITIONS = 4


@pytest.fixture
def loaded_topic(new_topic: Any, kafka_config: dict[str, Any]) -> str:
    """A 4-partition topic holding 10,000 records, record i in partition i % 4 with value 'v<i>'."""
    topic = new_topic(PARTITIONS)
    # Idempotence keeps each partition in send order even when a first request to a just-created
    # topic fails and is retried; without it CI once saw partition 1 start at v7153.
    producer = Producer({**kafka_config, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
        if i % 2000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return topic


def test_admin_list_offsets_gives_exact_high_watermarks(loaded_topic: str, kafka_config: dict[str, Any]) -> None:
    admin = AdminClient(kafka_config)
    parts = [TopicPartition(loaded_topic, p) for p in range(PARTITIONS)]
    latest = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts}, request_timeout=15)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts}, request_timeout=15)
    assert {tp.partition: f.result().offset for tp, f in latest.items()} == {p: 2500 for p in range(PARTITIONS)}
    assert {tp.partition: f.result().offset for tp, f in earliest.items()} == {p: 0 for p in range(PARTITIONS)}


def test_consume_and_consumer_group_offsets(loaded_topic: str, kafka_config: dict[str, Any]) -> None:
    group = f"lagsched-smoke-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(loaded_topic, 1, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 100 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    assert seen[:3] == [b"v1", b"v5", b"v9"]  # partition 1 holds i = 1, 5, 9, ...
    consumer.commit(offsets=[TopicPartition(loaded_topic, 1, 100)], asynchronous=False)
    consumer.close()

    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient(kafka_config)
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(loaded_topic, 1)])]
    result = admin.list_consumer_group_offsets(request)[group].result(timeout=15)
    assert [(tp.partition, tp.offset) for tp in result.topic_partitions] == [(1, 100)]


def test_spark_tasks_read_exact_offset_ranges(
    loaded_topic: str, kafka_config: dict[str, Any], spark: Any, tmp_path: Any
) -> None:
    import pyarrow.parquet as pq

    from lagsched.adapters.data_files import CREATED_SCHEMA, FileSettings
    from lagsched.adapters.range_files import RangeWriter

    ranges = [OffsetRange(loaded_topic, 0, 100, 600), OffsetRange(loaded_topic, 2, 100, 600)]
    settings = FileSettings.of(tmp_path.as_uri(), CREATED_SCHEMA, {})
    files = RangeWriter(spark, kafka_config, tasks=2).write(ranges, settings)
    assert sorted((f.partition, f.first, f.last, f.records) for f in files) == [(0, 100, 599, 500), (2, 100, 599, 500)]
    table = pq.read_table(next(f.location.removeprefix("file://") for f in files if f.partition == 0))
    # Partition 0 offset 100 is record 400 (i = 4 * offset + partition).
    assert table["offset"].to_pylist() == list(range(100, 600))
    assert table["value"][0].as_py() == b"v400"


def test_two_connections_claim_disjoint_rows_with_skip_locked(mysql_db: Any) -> None:
    setup = connect(mysql_db)
    with setup.cursor() as cur:
        cur.execute("CREATE TABLE queue (id INT PRIMARY KEY, owner VARCHAR(8) NULL)")
        cur.executemany("INSERT INTO queue (id) VALUES (%s)", [(i,) for i in range(10)])
    setup.commit()

    first, second = connect(mysql_db), connect(mysql_db)
    claim = "SELECT id FROM queue WHERE owner IS NULL ORDER BY id LIMIT 4 FOR UPDATE SKIP LOCKED"
    with first.cursor() as a, second.cursor() as b:
        a.execute(claim)  # first's transaction stays open, holding its rows
        got_a = [r[0] for r in a.fetchall()]
        b.execute(claim)
        got_b = [r[0] for r in b.fetchall()]
    assert got_a == [0, 1, 2, 3]
    assert got_b == [4, 5, 6, 7]
    first.rollback()
    second.rollback()
    for conn in (setup, first, second):
        conn.close()


def test_redis_pubsub_round_trip(redis_client: Any) -> None:
    channel = f"lagsched:test:{uuid.uuid4().hex[:8]}"
    pubsub = redis_client.pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    received: list[str] = []

    def listen() -> None:
        msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=10)
        if msg is not None:
            received.append(msg["data"])

    listener = threading.Thread(target=listen)
    listener.start()
    assert redis_client.publish(channel, "linker_workers:orders:3") == 1
    listener.join(timeout=15)
    pubsub.close()
    assert received == ["linker_workers:orders:3"]
