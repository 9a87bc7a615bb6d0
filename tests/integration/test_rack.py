"""Rack-aware routing on the real 3-broker cluster (racks a, b, c; docs/rack.md).

The cluster is started once for the session by ``lagsched_dev.stack.kafka_cluster`` (and stopped at the
end unless it was already up or ``LAGSCHED_KEEP_STACK`` is set); a cluster that cannot start fails
the tests, never skips them. The test that stops broker 1 runs last and starts it again.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import assert_exactly_once, latest_offsets, produce, wait_until
from rack_support import RackHarness, wait_for_leaders

from lagsched_dev.stack.config import StackConfig

# ------------------------------------------------------------------------------------- fixtures


@pytest.fixture
def bootstrap(rack_cluster: StackConfig) -> str:
    return rack_cluster.kafka_rack_bootstrap


@pytest.fixture
def rack_topic(bootstrap: str) -> Iterator[Callable[..., str]]:
    """Factory: a topic on the rack cluster (replication factor 3 unless told), deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched_dev.bench.rack import create_topic, delete_topic

    made: list[str] = []

    def make(partitions: int, replication: int = 3) -> str:
        if replication == 3:
            name = create_topic(bootstrap, partitions, prefix="rack-test")
        else:
            name = f"rack-test-rf{replication}-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(name, partitions, replication)])[name].result(timeout=60)
            wait_for_leaders(
                bootstrap, name, timeout_s=60, accept=lambda r: len(r) == partitions and None not in r.values()
            )
        made.append(name)
        return name

    yield make
    for name in made:
        delete_topic(bootstrap, name)


def settled_leaders(bootstrap: str, topic: str, partitions: int) -> dict[int, str | None]:
    """The rack of every partition's leader, once the broker asked knows them all: a new topic's
    metadata reaches the three brokers one after the other, and a broker that has not caught up
    answers with no leaders (seen in CI right after the cluster started)."""
    return wait_for_leaders(
        bootstrap, topic, timeout_s=60, accept=lambda r: len(r) == partitions and None not in r.values()
    )


class Deliveries:
    """Delivery reports of one producer: partitions written, errors."""

    def __init__(self) -> None:
        self.partitions: list[int] = []
        self.keyed: dict[bytes, set[int]] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
                return
            self.partitions.append(int(msg.partition()))
            if msg.key() is not None:
                self.keyed.setdefault(bytes(msg.key()), set()).add(int(msg.partition()))


def produce_mixed(producer: Any, topic: str, count: int, deliveries: Deliveries, *, start: int = 0) -> None:
    """``count`` records, even ones keyed ``k<i % 50>`` (25 keys, each repeated), odd ones keyless."""
    for i in range(start, start + count):
        key = f"k{i % 50}".encode() if i % 2 == 0 else None
        producer.produce(topic, f"v{i}".encode(), key, on_delivery=deliveries)
    assert producer.flush(60) == 0


# ------------------------------------------------------------------------------------ producing


def test_a_producer_in_rack_a_writes_only_to_partitions_led_in_a(
    bootstrap: str, rack_topic: Callable[..., str]
) -> None:
    from lagsched_dev.rack_producer import RackAwareProducer

    topic = rack_topic(12)
    leaders = settled_leaders(bootstrap, topic, 12)
    local = {p for p, r in leaders.items() if r == "a"}
    assert 0 < len(local) < 12, leaders  # the cluster spreads leaders over the racks

    deliveries = Deliveries()
    producer = RackAwareProducer({"bootstrap.servers": bootstrap, "acks": "all"}, "a")
    produce_mixed(producer, topic, 600, deliveries)

    assert not deliveries.errors
    assert len(deliveries.partitions) == 600
    assert set(deliveries.partitions) == local  # keyless round-robin reaches every local partition
    assert all(len(ps) == 1 for ps in deliveries.keyed.values())  # a key keeps its partition
    assert len(deliveries.keyed) == 25  # k0, k2, ..., k48
    assert producer.stats.same_rack == producer.stats.total == 600


# ------------------------------------------------------------------------------------ consuming


def test_slots_read_from_same_rack_replicas(bootstrap: str, rack_topic: Callable[..., str]) -> None:
    from confluent_kafka import Producer

    from lagsched_dev.bench.rack import fetch, slot_fetch

    topic = rack_topic(6)
    # Records everywhere, through the leaders of every rack.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(6000):
        producer.produce(topic, f"v{i}".encode().ljust(200, b"."), partition=i % 6)
    assert producer.flush(60) == 0
    leaders = settled_leaders(bootstrap, topic, 6)

    # The slots' reader (a batch task's function): client.rack=a reads from broker 1's replicas.
    got = slot_fetch(bootstrap, topic, "a", list(range(6)), client_rack=True)
    assert got.records == 6000
    assert got.total_bytes > 6000 * 200, got.bytes_by_rack  # the records' bytes came through this consumer
    assert got.same_rack_bytes / got.total_bytes >= 0.9, f"client.rack=a got {got.bytes_by_rack}"
    got = slot_fetch(bootstrap, topic, "a", list(range(6)), client_rack=False)
    assert got.records == 6000
    led_by_a = sum(1 for r in leaders.values() if r == "a") / 6
    assert got.same_rack_bytes / got.total_bytes <= led_by_a + 0.1, "without client.rack the reads follow the leaders"

    # librdkafka (the benchmark's path) in rack b, likewise.
    got = fetch(bootstrap, topic, "b", list(range(6)), client_rack=True)
    assert got.records == 6000
    assert got.same_rack_bytes / got.total_bytes >= 0.9, got.bytes_by_rack

    # Where the topic does not allow it (one replica, in the leader's rack), reads go to the leaders.
    single = rack_topic(6, replication=1)
    producer.produce(single, b"x" * 200, partition=0)
    for p in range(6):
        producer.produce(single, b"y" * 200, partition=p)
    assert producer.flush(30) == 0
    got = fetch(bootstrap, single, "a", list(range(6)), client_rack=True)
    assert got.records == 7


@pytest.mark.parametrize("mode", ["skip_locked", "optimistic", "for_update"])
def test_claims_with_rack_targets_take_and_keep_only_target_rows(mysql_db: Any, mode: str) -> None:
    from lagsched.adapters.claims import ClaimStore
    from lagsched.adapters.mysql import connect
    from lagsched.core.claims import ClaimStatus, LockMode
    from lagsched_dev.bench.claims import seed_topics

    tid = seed_topics(mysql_db, [12])[0]
    conn = connect(mysql_db)
    store = ClaimStore(conn, LockMode(mode))
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    evens, odds = set(range(0, 12, 2)), set(range(1, 12, 2))
    try:
        # Before racks: a holds everything. With targets, it hands back what is not in its target.
        assert len(store.claim(a, {tid: 12}, 30).claims) == 12
        handed = store.rebalance(a, {tid: 4}, targets={tid: {0, 2, 4, 6}})
        assert {r.partition_id for r in handed} == set(range(12)) - {0, 2, 4, 6}
        # c holds partition 1 (b's target) for now.
        assert {r.partition_id for r in store.claim(c, {tid: 1}, 30, targets={tid: {1}}).claims} == {1}
        # b takes only its target's free rows, not the free evens 8 and 10, and knows why it is short.
        got = store.claim(b, {tid: 6}, 30, targets={tid: odds})
        assert {r.partition_id for r in got.claims} == odds - {1}
        assert got.short == {tid: 1}
        assert got.status is ClaimStatus.NONE_FREE
        # A target row's holder hands it over; then b completes its share.
        store.rebalance(c, {tid: 1}, targets={tid: {8}})
        got = store.claim(b, {tid: 6}, 30, targets={tid: odds})
        assert {r.partition_id for r in got.claims} == odds
        assert got.status is ClaimStatus.COMPLETE
        # Without targets the claim takes any free row, as before.
        assert {r.partition_id for r in store.claim(c, {tid: 2}, 30).new} == evens - {0, 2, 4, 6}
    finally:
        store.close()


def test_rack_slots_consume_exactly_once_and_hold_their_racks_partitions(
    rack_cluster: StackConfig,
    bootstrap: str,
    rack_topic: Callable[..., str],
    mysql_db: Any,
    redis_client: Any,
    cluster: str,
    tmp_path: Path,
) -> None:
    from lagsched.adapters.slots import slot_id_for

    kafka = {"bootstrap.servers": bootstrap}
    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    harness = RackHarness(mysql_db, kafka, db, cluster, tmp_path)
    topic = rack_topic(12)
    leaders = settled_leaders(bootstrap, topic, 12)
    produce(kafka, topic, 3000, partitions=12)
    topic_id = harness.register(topic, linker_workers=3)
    rack_of = {slot_id_for(f"w-{r}"): r for r in "abc"}
    try:
        slots = [
            harness.start(f"w-{r}", "--rack", r, "--max-records", "1000", "--budget-s", "240", master="local[1]")
            for r in "abc"
        ]

        def settled() -> bool:
            for s in slots:
                assert s.proc.poll() is None, f"slot {s.name} exited early; log tail:\n{s.tail()}"
            holders = harness.holders(topic_id)
            return all(h is not None and rack_of.get(h) == leaders[p] for p, h in holders.items())

        took = wait_until(settled, 150, "every partition held by the slot of its leader's rack", poll=1.0)
        print(f"rack targets held after {took:.1f} s")
        # More records once the slots hold their racks' partitions; all of it read exactly once.
        produce(kafka, topic, 3000, start=3000, partitions=12)
        latest = latest_offsets(kafka, topic, 12)
        wait_until(lambda: harness.committed(topic_id) == latest, 120, "every record committed", poll=1.0)
        for s in slots:
            s.terminate()
        for s in slots:
            code = s.wait(90)
            assert code == 0, f"slot {s.name} exited {code}; log tail:\n{s.tail()}"
    finally:
        harness.stop_all()
    assert sum(latest.values()) == 6000
    assert_exactly_once(harness.sink_table(), topic, latest)
    assert harness.committed(topic_id) == latest


# ------------------------------------------------------------------------- fallback (runs last)


def test_the_producer_falls_back_when_rack_a_has_no_leader(
    rack_cluster: StackConfig, bootstrap: str, rack_topic: Callable[..., str]
) -> None:
    from lagsched_dev.rack_producer import RackAwareProducer
    from lagsched_dev.stack import kafka_cluster

    topic = rack_topic(12)
    assert "a" in settled_leaders(bootstrap, topic, 12).values()
    producer = RackAwareProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}, "a", metadata_interval_s=1.0
    )
    before = Deliveries()
    produce_mixed(producer, topic, 200, before)
    assert not before.errors

    # Broker 1 (rack a) goes down while the producer keeps producing.
    during = Deliveries()
    stopper = threading.Thread(target=kafka_cluster.stop_broker, args=(rack_cluster, 1))
    try:
        stopper.start()
        sent = 0
        while stopper.is_alive():
            produce_mixed(producer, topic, 50, during, start=sent)
            sent += 50
        stopper.join()
        leaders = wait_for_leaders(
            bootstrap, topic, timeout_s=60, accept=lambda r: None not in r.values() and "a" not in r.values()
        )

        def fresh() -> bool:
            # Within the producer's metadata interval (1 s) its view follows the leaders' move.
            view = producer.leader_racks(topic)
            return view is not None and "a" not in view.values()

        wait_until(fresh, 30, "the producer's view without rack a's leaders")
        after = Deliveries()
        produce_mixed(producer, topic, 600, after)
    finally:
        kafka_cluster.start_broker(rack_cluster, 1)

    assert not during.errors, during.errors[:3]
    assert len(during.partitions) == sent
    assert not after.errors
    assert len(after.partitions) == 600
    # Every partition is a candidate now (none is led from rack a); keys keep Kafka's default place.
    assert set(after.partitions) == set(range(12))
    assert {leaders[p] for p in after.partitions} <= {"b", "c"}
    from lagsched.core.rack import kafka_key_partition

    assert all(ps == {kafka_key_partition(k, 12)} for k, ps in after.keyed.items())
