"""The Spark consumer at scale on the real stack: several slots, a rescale mid-run, the mirrored
consumer group, a retention gap, and the standalone Spark cluster. The sink is read with pyarrow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from consumer_support import (
    ConsumerHarness,
    Slot,
    assert_exactly_once,
    latest_offsets,
    offsets_by_topic,
    produce,
    value_of,
    wait_until,
)

# ---------------------------------------------------------------------------------------- helpers


def check_content(table: Any, topic: str, *, start: int, partitions: int | None) -> int:
    """Every row of ``topic`` carries record i's key, value and header, where i is its header.

    With ``partitions`` (records produced ``i -> i % partitions`` from ``start``, a multiple of
    ``partitions``), i must also match the row's place: partition ``i % n``, offset ``(i - start) // n``.
    Returns the rows checked.
    """
    import pyarrow.compute as pc

    rows = table.filter(pc.equal(table.column("topic"), topic)).to_pylist()
    bad: list[str] = []
    for row in rows:
        headers = row["headers"]
        i = int(headers[0]["value"]) if headers else -1
        ok = (row["key"], row["value"], headers) == (
            f"k{i}".encode(),
            value_of(i),
            [{"key": "i", "value": str(i).encode()}],
        )
        if partitions is not None:
            ok = ok and (row["partition"], row["offset"]) == (i % partitions, (i - start) // partitions)
        if not ok and len(bad) < 5:
            bad.append(repr({k: row[k] for k in ("partition", "offset", "key", "headers")}))
    assert not bad, f"{topic}: rows whose key, value, header or place do not match: {bad}"
    return len(rows)


def live(holders: dict[int, str | None]) -> dict[int, str]:
    """Only the partitions held under a live lease."""
    return {p: s for p, s in holders.items() if s is not None}


def assert_exited_ok(slots: list[Slot], timeout: float) -> None:
    for slot in slots:
        code = slot.wait(timeout)
        assert code == 0, f"slot {slot.name} exited {code}; log tail:\n{slot.tail()}"


# ------------------------------------------------------------------------- 3 slots, 3 topics


def test_three_slots_consume_three_topics_exactly_once_and_the_mirrored_group_lag_equals_lagscheds_own(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:
    """[three slots] Three slots consume three topics exactly once; then, on the same run's 4-partition
    topic, [mirrored group] the consumer group the slots mirror their offsets into reports the same lag
    as lagsched's own measurement (one run of slots for both claims)."""
    # 1, 4 and 12 partitions, 100,000 records in all (about 6,000 per partition, 4,000 on the lone
    # one); each topic's record numbers start at its own multiple of 12, so a record written under
    # the wrong topic would not pass the content check.
    layout = {1: (0, 4_000), 4: (120_000, 24_000), 12: (240_000, 72_000)}
    topics: dict[int, str] = {}
    ids: dict[int, str] = {}
    for n, (start, count) in layout.items():
        topics[n] = new_topic(n)
        produce(kafka_config, topics[n], count, start=start, partitions=n)
        # As many workers as slots where the partitions allow, so every slot has work.
        ids[n] = consumer.register(topics[n], linker_workers=min(n, 3))

    # Small batches: the first slot up claims every partition, and hands rows over to the others
    # only at its next batch boundary.
    slots = [consumer.start(f"w{k}", "--exit-when-idle", "--max-records", "1000") for k in (1, 2, 3)]
    assert_exited_ok(slots, timeout=240)

    table = consumer.sink_table()
    for n, (start, count) in layout.items():
        latest = latest_offsets(kafka_config, topics[n], n)
        assert sum(latest.values()) == count
        assert_exactly_once(table, topics[n], latest)
        assert check_content(table, topics[n], start=start, partitions=n) == count
        assert consumer.committed(ids[n]) == latest
    working = [s.name for s in slots if sum(b["records"] for b in s.batches()) > 0]
    print(f"slots that consumed records: {working}; batches: {[len(s.batches()) for s in slots]}")

    # [mirrored group] The 4-partition topic, consumed to 6,000 a partition (asserted above).
    check_mirrored_group_lag(consumer, kafka_config, redis_client, topics[4], committed=layout[4][1] // 4)


def check_mirrored_group_lag(
    consumer: ConsumerHarness, kafka_config: dict[str, Any], redis_client: Any, topic: str, *, committed: int
) -> None:
    """After a run that committed ``committed`` records of each of ``topic``'s 4 partitions: more
    records, a different number per partition; Kafka's own consumer-group tool and lagsched's lag
    monitor agree on each partition's (committed, latest, lag)."""

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from lagsched.adapters.lag_store import LagStore
    from lagsched.adapters.mysql import connect
    from lagsched.core.config import parse_settings
    from lagsched.workflows.lag_monitor import measure
    from lagsched_dev.kafka_tools import consumer_groups_describe

    # More records after the run, a different number per partition (none on partition 0).
    extra = {0: 0, 1: 7, 2: 30, 3: 111}
    producer = Producer({**kafka_config, "acks": "all", "enable.idempotence": True})
    for p, n in extra.items():
        for i in range(n):
            producer.produce(topic, key=f"x{p}-{i}".encode(), value=b"x", partition=p)
    assert producer.flush(60) == 0

    rows = [r for r in consumer_groups_describe(kafka_config["bootstrap.servers"], f"lagsched.{consumer.cluster}")
            if r.topic == topic]  # fmt: skip
    tool = {r.partition: (r.current_offset, r.log_end_offset, r.lag) for r in rows}

    conn = connect(consumer.mysql)
    try:
        settings = parse_settings({})
        store = LagStore(redis_client, consumer.cluster, max_samples=settings.sample_window,
                         max_age_s=settings.sample_ttl_s)  # fmt: skip
        summary = measure(consumer.cluster, mysql=conn, admin=AdminClient(kafka_config), store=store,
                          settings=settings, now=datetime.now(tz=UTC))  # fmt: skip
    finally:
        conn.close()
    own = {p.partition: (p.committed, p.latest, p.lag) for p in summary.topic(topic).partition_lags}
    print(f"kafka-consumer-groups: {tool}; lagsched: {own}")
    assert tool == own == {p: (committed, committed + n, n) for p, n in extra.items()}, (
        f"[mirrored group] kafka-consumer-groups {tool}, lagsched {own}"
    )


# ------------------------------------------------------------------------------ rescale mid-run


class Feed(threading.Thread):
    """Produces records continuously, record i to partition ``i % partitions``, until stopped.

    ``partitions`` may be raised while it runs (after the topic grew); the next chunk uses it. Each
    chunk is flushed (idempotent producer), so when ``stop()`` returns every record produced is in the
    log. An error in the thread is kept and raised by ``stop()``.
    """

    def __init__(self, kafka_config: dict[str, Any], topic: str, partitions: int, *, chunk: int, every_s: float):
        super().__init__(name=f"feed-{topic}", daemon=True)
        self.kafka_config, self.topic, self.partitions = kafka_config, topic, partitions
        self.chunk, self.every_s = chunk, every_s
        self.produced = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                produce(self.kafka_config, self.topic, self.chunk, start=self.produced, partitions=self.partitions)
                self.produced += self.chunk
                self._stop_event.wait(self.every_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread by stop()
            self.error = exc

    def stop(self) -> int:
        self._stop_event.set()
        self.join(timeout=120)
        assert not self.is_alive(), "the producer thread did not stop"
        if self.error is not None:
            raise AssertionError(f"the producer thread failed: {self.error}") from self.error
        return self.produced


def test_raising_linker_workers_spreads_partitions_within_a_batch_interval_and_new_partitions_are_consumed(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:
    import json
    import time

    from confluent_kafka.admin import AdminClient, NewPartitions

    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import SCALING_CHANNEL
    from lagsched.adapters.slots import SlotRegistry, slot_id_for

    interval_s = 5.0
    topic = new_topic(12)
    topic_id = consumer.register(topic, linker_workers=1)
    feed = Feed(kafka_config, topic, 12, chunk=300, every_s=0.5)
    feed.start()
    try:
        # Batches every interval_s (never earlier: the record threshold is out of reach).
        args = ("--min-interval-s", str(interval_s), "--min-records", "100000000", "--max-records", "5000")
        w1 = consumer.start("w1", *args)
        s1, s2 = slot_id_for("w1"), slot_id_for("w2")
        all_w1 = {p: s1 for p in range(12)}
        wait_until(lambda: live(consumer.holders(topic_id)) == all_w1, 180, "w1 to claim all 12 partitions")
        w2 = consumer.start("w2", *args)
        registry = SlotRegistry(redis_client, cluster=consumer.cluster)
        wait_until(lambda: s2 in registry.live_slots(datetime.now(UTC), 3.0), 180, "w2 to heartbeat")
        # Past w1's first batch (JIT warm-up), so the rescale meets w1 in its steady state.
        wait_until(lambda: len(w1.batches()) >= 2, 180, "w1's second batch")
        # w2 is live and in its loop; the topic has one worker, so w2 holds nothing.
        assert live(consumer.holders(topic_id)) == all_w1

        # The worst moment for a rescale: just after w1 recorded a batch (begin_batch sets
        # pending_end before the write), so the hand-over must wait for the whole batch in flight.
        wait_until(lambda: not consumer.pending(topic_id), 60, "w1 to finish its batch in flight", poll=0.05)
        seen = len(w1.batches())
        wait_until(lambda: bool(consumer.pending(topic_id)), 60, "w1 to start a batch", poll=0.05)

        # The evaluator's move, by hand: raise linker_workers, then announce it.
        t0 = time.monotonic()
        conn = connect(consumer.mysql)
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = 2 WHERE topic_id = %s", (topic_id,))
        conn.commit()
        conn.close()
        message = {
            "topic_id": topic_id, "topic": topic, "cluster": consumer.cluster,
            "previous_linker_workers": 1, "linker_workers": 2,
            "at": datetime.now(UTC).isoformat(), "reason": "test", "rule": "test", "policy": "hevo",
            "decision_id": None,
        }  # fmt: skip
        # Both slots listen (pub/sub channels span Redis DBs, so other runs' slots may hear it too).
        assert redis_client.publish(SCALING_CHANNEL, json.dumps(message)) >= 2

        def spread() -> bool:
            counts: dict[str, int] = {}
            for slot in live(consumer.holders(topic_id)).values():
                counts[slot] = counts.get(slot, 0) + 1
            return counts == {s1: 6, s2: 6}

        wait_until(spread, 120, "the partitions to spread 6/6 over w1 and w2", poll=0.1)
        took = time.monotonic() - t0
        in_flight = w1.batches()[seen]["wall_s"]
        print(f"rescale 1 -> 2 workers: spread 6/6 {took:.2f} s after the change, made as w1 started a "
              f"batch that took {in_flight:.2f} s (batch interval {interval_s} s)")  # fmt: skip
        # The hand-over happens at w1's next batch boundary, the end of the batch in flight, then w2
        # claims on its next poll (1 s): within one batch interval (or the batch, if longer), plus
        # slack for a busy machine.
        assert took <= max(interval_s, in_flight) + 5, f"rescale took {took:.1f} s"

        # The topic grows to 16 partitions mid-run; the registry is re-synced, the feed follows.
        admin = AdminClient(kafka_config)
        admin.create_partitions([NewPartitions(topic, 16)])[topic].result(timeout=30)
        consumer.register(topic, linker_workers=2)
        feed.partitions = 16
        wait_until(
            lambda: all((consumer.committed(topic_id).get(p) or 0) > 0 for p in range(12, 16)),
            180,
            "records of the new partitions 12-15 to be committed",
        )
    finally:
        produced = feed.stop()

    # Drain: every record produced is committed, then the slots stop on SIGTERM (to the driver).
    latest = latest_offsets(kafka_config, topic, 16)
    assert sum(latest.values()) == produced
    wait_until(lambda: consumer.committed(topic_id) == latest, 240, "the slots to drain the topic")
    for slot in (w1, w2):
        slot.terminate()
    assert_exited_ok([w1, w2], timeout=120)
    table = consumer.sink_table()
    assert_exactly_once(table, topic, latest)
    assert check_content(table, topic, start=0, partitions=None) == produced


# ----------------------------------------------------------------------------- retention gap


def test_a_retention_gap_is_recorded_logged_and_skipped_and_the_rest_lands_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from lagsched.adapters.lag_store import LagStore
    from lagsched.adapters.mysql import connect
    from lagsched.core.config import parse_settings
    from lagsched.workflows.lag_monitor import measure

    topic = new_topic(2)
    produce(kafka_config, topic, 3_000, partitions=2)  # 1,500 per partition
    topic_id = consumer.register(topic)
    # A short budget and a rate cap: the first batch reads 200 records of each partition, and each
    # next one waits a second, so the budget ends the run with each partition part-read however
    # fast the batches are (without the cap a quick slot read all 1,500 within the 2 s).
    consumer.run("w1", "--budget-s", "2", "--max-records", "400", "--max-rate", "400", "--min-interval-s", "1")
    committed = consumer.committed(topic_id)
    first = {p: c for p, c in committed.items() if c is not None and 0 < c < 1_000}
    assert len(first) == 2, f"the first run should have committed part of each partition, committed {committed}"

    # Retention (by hand) moves the log start past the committed offsets.
    admin = AdminClient(kafka_config)
    futures = admin.delete_records([TopicPartition(topic, p, 1_000) for p in range(2)], request_timeout=30)
    assert sorted(f.result(timeout=30).low_watermark for f in futures.values()) == [1_000, 1_000]

    second = consumer.run("w1", "--exit-when-idle", "--max-records", "400")
    assert "RETENTION GAP" in second.log.read_text(errors="replace"), second.tail()

    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_id, from_offset, to_offset, records FROM retention_gaps WHERE topic_id = %s"
                " ORDER BY partition_id",
                (topic_id,),
            )
            gaps = [tuple(int(v) for v in row) for row in cur.fetchall()]
        settings = parse_settings({})
        summary = measure(consumer.cluster, mysql=conn, admin=admin, store=LagStore(redis_client, consumer.cluster),
                          settings=settings, now=datetime.now(tz=UTC))  # fmt: skip
    finally:
        conn.close()
    assert gaps == [(p, first[p], 1_000, 1_000 - first[p]) for p in range(2)]
    # The lag monitor counts them as lost, and the topic has no lag left.
    measured = summary.topic(topic)
    assert (measured.lag, measured.lost) == (0, sum(1_000 - c for c in first.values()))

    # The sink: what the first run wrote, then everything from the new log start, each once.
    assert consumer.committed(topic_id) == {0: 1_500, 1: 1_500}
    table = consumer.sink_table()
    seen = offsets_by_topic(table)[topic]
    expected = [(p, o) for p in range(2) for o in [*range(first[p]), *range(1_000, 1_500)]]
    assert sorted(seen) == expected  # no duplicate, nothing missing, nothing from the deleted range
    assert check_content(table, topic, start=0, partitions=2) == len(expected)


# ----------------------------------------------------------------- the standalone Spark cluster


@pytest.fixture(scope="module")
def spark_master(stack: Any) -> Iterator[str]:
    """The local standalone cluster's master URL; started here if it was not up, stopped after only then."""
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.services import spark_cluster_services

    master, workers = spark_cluster_services(stack)
    was_up = all(s.status().healthy for s in (master, *workers))
    if not was_up:
        try:
            local_stack.spark_cluster_up(stack)
        except Exception as exc:  # noqa: BLE001 - a cluster that cannot start fails the test, never skips it
            local_stack.spark_cluster_down(stack)
            pytest.fail(f"the Spark standalone cluster could not start: {exc}", pytrace=False)
    yield str(stack.spark_master_url)
    if not was_up:
        local_stack.spark_cluster_down(stack)


def test_a_slot_on_the_standalone_spark_cluster_moves_every_record_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], spark_master: str,
    stack: Any,
) -> None:  # fmt: skip
    import json
    import time
    import urllib.request

    topic = new_topic(4)
    produce(kafka_config, topic, 4_000, partitions=4)
    topic_id = consumer.register(topic)
    started_ms = time.time() * 1000
    consumer.run("w1", "--exit-when-idle", "--max-records", "600", master=spark_master, timeout=300)

    table = consumer.sink_table()
    latest = latest_offsets(kafka_config, topic, 4)
    assert_exactly_once(table, topic, latest)
    assert check_content(table, topic, start=0, partitions=4) == 4_000
    assert consumer.committed(topic_id) == latest

    # It ran on the cluster, not locally: the master lists the application as finished.
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.spark_master_webui_port}/json/", timeout=10) as resp:
        state = json.loads(resp.read())
    apps = [a for a in state["completedapps"] if a["name"] == "lagsched-consume-w1" and a["starttime"] >= started_ms]
    assert [a["state"] for a in apps] == ["FINISHED"], state["completedapps"]
