"""The Spark consumer on the real stack: exactly once into the Parquet sink, read back with pyarrow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from consumer_support import ConsumerHarness, assert_exactly_once, latest_offsets, produce, value_of


def test_one_slot_moves_every_record_once_with_key_value_and_headers(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    topic = new_topic(4)
    produce(kafka_config, topic, 6_000, partitions=4)
    topic_id = consumer.register(topic)
    slot = consumer.run("w1", "--exit-when-idle", "--max-records", "700")
    table = consumer.sink_table()
    assert_exactly_once(table, topic, latest_offsets(kafka_config, topic, 4))
    # Record i sits in partition i % 4 at offset i // 4.
    rows = table.to_pylist()
    for row in rows[:: max(1, len(rows) // 200)]:
        i = 4 * row["offset"] + row["partition"]
        assert (row["key"], row["value"], row["headers"]) == (
            f"k{i}".encode(),
            value_of(i),
            [{"key": "i", "value": str(i).encode()}],
        )
    assert consumer.committed(topic_id) == {p: 1_500 for p in range(4)}
    assert len(slot.batches()) >= 3  # 1,500 per partition at 700 per batch
