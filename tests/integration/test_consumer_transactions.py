"""Transactional and compacted topics through a real slot: only committed records land, once.

A transactional producer (``transactional.id``) writes 300 records a transaction over 3
partitions, commits and aborts interleaved; one topic ends on an abort, and on the other one
transaction stays OPEN on one partition while the slot runs. A read-uncommitted reader would land
the aborted records (Kafka's Java consumer, Spark's, reads uncommitted by default); a batch planned
to the high watermark would reach into the open transaction, where a read-committed poll finds
nothing and Spark's source fails the read as data loss. Here the slot must land exactly the
committed records, stop the open transaction's partition at its last stable offset (LSO) without
holding up the others, store offsets past the committed data (transaction markers included) and
count records, not offsets, in its stats.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from consumer_support import ConsumerHarness, offsets_by_topic, produce, value_of, wait_until

from lagsched.adapters.kafka_admin import admin_client, read_offsets

PARTITIONS = 3
PER_TRANSACTION = 300


def transactional_producer(kafka_config: dict[str, Any]) -> Any:
    producer = Producer(
        {
            **kafka_config,
            "transactional.id": f"lagsched-test-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
            # The open transaction must outlive the slot's run (librdkafka's default is 60 s).
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(30)
    return producer


def send(producer: Any, topic: str, ids: Iterable[int], *, partition: int | None = None) -> None:
    """Records ``i`` (key ``k<i>``, value ``value_of(i)``) to partition ``i % 3`` (or ``partition``)."""
    for i in ids:
        p = i % PARTITIONS if partition is None else partition
        producer.produce(topic, key=f"k{i}".encode(), value=value_of(i), headers=[("i", str(i).encode())], partition=p)
    assert producer.flush(30) == 0  # in the log before the transaction ends: aborted records are really there


def transaction(producer: Any, topic: str, ids: Iterable[int], *, commit: bool) -> None:
    producer.begin_transaction()
    send(producer, topic, ids)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def ids_of(table: Any, topic: str) -> list[int]:
    """The record numbers (header ``i``) of ``topic``'s rows, duplicates kept."""
    rows = zip(table.column("topic").to_pylist(), table.column("value").to_pylist(), strict=True)
    return [int(v.split(b":")[0][1:]) for t, v in rows if t == topic]


def stats_records(slot: Any) -> int:
    return sum(int(b["records"]) for b in slot.batches())


def test_only_committed_records_land_an_open_transaction_holds_only_its_partition_and_compaction_survivors_land_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Two claims on one slot's runs (one Spark start less than a run each): [transactions] only
    committed records land and an open transaction holds up only its own partition; [compacted] a
    compacted transactional topic, read by the same first run, lands its survivors once."""
    # [compacted] written first: the log cleaner compacts it while the other topics are written.
    compact_topic = write_compacted_topic(new_topic, kafka_config)
    a, b = new_topic(PARTITIONS), new_topic(PARTITIONS)
    producer = transactional_producer(kafka_config)
    committed: dict[str, set[int]] = {a: set(), b: set()}
    # a: commit, abort, commit, abort, commit; b: commit, abort, commit, commit, abort (ends on an abort).
    plan = {a: [True, False, True, False, True], b: [True, False, True, True, False]}
    n = 0
    for topic, outcomes in plan.items():
        for commit in outcomes:
            ids = range(n, n + PER_TRANSACTION)
            transaction(producer, topic, ids, commit=commit)
            if commit:
                committed[topic].update(ids)
            n += PER_TRANSACTION
    # An open transaction on a's partition 0 (another producer), then a committed one on all three
    # partitions: its records on partitions 1 and 2 are readable, on partition 0 they wait behind it.
    holder = transactional_producer(kafka_config)
    holder.begin_transaction()
    open_ids = range(100_000, 100_050)
    send(holder, a, open_ids, partition=0)
    late = range(n, n + PER_TRANSACTION)
    transaction(producer, a, late, commit=True)
    behind_open = {i for i in late if i % PARTITIONS == 0}

    admin = admin_client(kafka_config)
    before: dict[int, Any] = {}

    def settled() -> bool:
        # The commit's markers reach the partitions just after commit_transaction returns (once,
        # in CI, partitions 1 and 2 were read before theirs landed): wait for them, not for p0.
        before.update({o.partition: o for o in read_offsets(admin, {a: PARTITIONS})[a]})
        return all(before[p].latest == before[p].high_watermark for p in (1, 2))

    wait_until(settled, 30, "the committed transaction's markers on partitions 1 and 2")
    # The broker's own view: p0 stable at the open transaction's first offset, the others at their end.
    assert before[0].latest < before[0].high_watermark  # type: ignore[operator]
    assert all(before[p].latest == before[p].high_watermark for p in (1, 2))

    compacted_expected = await_compaction(compact_topic, kafka_config)
    ta, tb = consumer.register(a, linker_workers=1), consumer.register(b, linker_workers=1)
    consumer.register(compact_topic, linker_workers=1)
    started = time.monotonic()
    slot = consumer.run("slot-tx", "--exit-when-idle", "--max-records", "250", timeout=300)
    took = time.monotonic() - started

    table = consumer.sink_table()
    compact_rows = check_compacted_topic_landed(table, compact_topic, compacted_expected)
    got_a, got_b = ids_of(table, a), ids_of(table, b)
    assert sorted(got_b) == sorted(committed[b]), "b: not exactly its committed records"
    assert sorted(got_a) == sorted(committed[a] | (set(late) - behind_open)), (
        "a: not exactly the committed records before the open transaction (partition 0) and all of them elsewhere"
    )
    seen = offsets_by_topic(table)
    assert all(len(v) == len(set(v)) for v in seen.values()), "a record landed twice"
    stored_a, stored_b = consumer.committed(ta), consumer.committed(tb)
    # Offsets past the committed data and its markers: b past its final abort's marker; a's partition
    # 0 held at the LSO (the open transaction's first offset), the others at their end.
    ends_b = {o.partition: o.high_watermark for o in read_offsets(admin, {b: PARTITIONS})[b]}
    assert stored_b == ends_b
    assert stored_a == {p: before[p].latest for p in range(PARTITIONS)}
    assert all(o < before[0].latest for p, o in seen[a] if p == 0)
    # Records, not offsets: every transaction left a commit or abort marker on each partition, an
    # offset without a record, and the aborted records are offsets that are not records of the lake.
    assert len(got_a) + len(got_b) == 1_800 + 200
    assert stats_records(slot) == len(got_a) + len(got_b) + compact_rows  # the compacted topic's survivors too
    print(f"first run: {took:.1f} s, {len(slot.batches())} batch(es), {stats_records(slot)} records")

    # The open transaction commits: partition 0 reads on, through its records and the ones behind it.
    holder.commit_transaction(30)
    wait_until(lambda: read_offsets(admin, {a: PARTITIONS})[a][0].latest > before[0].latest, 30, "the LSO to move on")
    again = consumer.run("slot-tx", "--exit-when-idle", timeout=300)
    table = consumer.sink_table()
    got_a = ids_of(table, a)
    assert sorted(got_a) == sorted(committed[a] | set(late) | set(open_ids))
    assert sorted(ids_of(table, b)) == sorted(committed[b])
    ends_a = {o.partition: o.high_watermark for o in read_offsets(admin, {a: PARTITIONS})[a]}
    assert consumer.committed(ta) == ends_a
    # The stats file is appended to; the compacted topic had nothing new.
    assert stats_records(again) - 2_000 - compact_rows == len(behind_open) + len(open_ids)
    assert check_compacted_topic_landed(consumer.sink_table(), compact_topic, compacted_expected) == compact_rows


def write_compacted_topic(new_topic: Callable[..., str], kafka_config: dict[str, Any]) -> str:
    """[compacted] Compaction leaves offset holes (overwritten keys removed) beside the transactions'
    markers and aborted records; the slot must skip all of them and land each surviving committed
    record once. This writes such a topic: 6 transactions over 20 keys, the fifth aborted."""
    topic = new_topic(
        1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "200",
            "min.cleanable.dirty.ratio": "0.001",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    producer = transactional_producer(kafka_config)
    keys = 20

    def write(round_: int, *, commit: bool) -> None:
        producer.begin_transaction()
        for k in range(keys):
            producer.produce(topic, key=f"k{k}".encode(), value=f"r{round_}".encode(), partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        time.sleep(0.3)  # a new segment per round, so the cleaner can compact the older ones

    for r in range(6):
        write(r, commit=r != 4)  # the last round commits, the one before it aborts
    # Plain records after the transactions: they roll the last transactional segment.
    produce({**kafka_config}, topic, 5, start=0, partitions=1)
    return topic


def await_compaction(topic: str, kafka_config: dict[str, Any]) -> list[tuple[int, bytes, bytes]]:
    """[compacted] Wait for the cleaner; returns what a read-committed reader sees, which must land."""

    def compacted() -> bool:
        # Every overwritten value (rounds 0-3) and every aborted one (round 4) is gone from the log.
        values = {m.value() for m in _read_all(kafka_config, topic, "read_uncommitted")}
        return not values & {f"r{r}".encode() for r in range(5)}

    wait_until(compacted, 120, "[compacted] the log cleaner to compact the topic", poll=2)
    expected = _read_committed(kafka_config, topic)
    assert _offsets_missing(kafka_config, topic) >= 100, "[compacted]"  # holes: 100 records removed, markers
    return expected


def check_compacted_topic_landed(table: Any, topic: str, expected: list[tuple[int, bytes, bytes]]) -> int:
    """[compacted] Exactly the surviving committed records of ``topic`` are in ``table``; returns how many."""
    rows = [
        (o, k, v)
        for t, o, k, v in zip(
            table.column("topic").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
        if t == topic
    ]
    assert sorted(rows) == sorted(expected), "[compacted] not exactly the surviving committed records"
    assert not any(v == b"r4" for _o, _k, v in rows), "[compacted] an aborted record landed"
    return len(rows)


def _read_committed(kafka_config: dict[str, Any], topic: str) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record a read-committed consumer sees in partition 0."""
    return [(m.offset(), m.key(), m.value()) for m in _read_all(kafka_config, topic, "read_committed")]


def _offsets_missing(kafka_config: dict[str, Any], topic: str) -> int:
    """Offsets of partition 0 with no record for a read-uncommitted reader: compacted away or markers."""
    msgs = _read_all(kafka_config, topic, "read_uncommitted")
    end = msgs[-1].offset() + 1 if msgs else 0
    return end - len(msgs)


def _read_all(kafka_config: dict[str, Any], topic: str, isolation: str) -> list[Any]:
    c = Consumer(
        {
            **kafka_config,
            "group.id": f"lagsched-test-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"reading {topic}: {m.error()}")
            out.append(m)
        raise AssertionError(f"{topic} not read to its end in 30 s")
    finally:
        c.close()
