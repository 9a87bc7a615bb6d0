"""``offset_ahead`` on the real stack: never for a consumer that keeps up, always for a real one (issue 17).

The page read the pipeline's committed offsets from MySQL *now* and set them against the high
watermarks of the last lag measurement (up to a minute old), so every partition consumed since the
measurement was reported as "committed offset beyond the high watermark". Here a consumer reads a
real topic while records arrive and stores its offsets in the claim table as a slot does, the lag
monitor's `measure` runs against the real broker every few seconds, and the status is read over
and over in between: no ``offset_ahead``, although MySQL's committed offsets are beyond the
measured watermarks at almost every read (asserted, so the test shows the case it is about). An
offset stored past the log end by hand is still reported, with the measurement's numbers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from lagsched.adapters.claims import ClaimStore, server_lock_mode
from lagsched.adapters.lag_store import LagStore
from lagsched.adapters.mysql import connect
from lagsched.adapters.slots import SlotRegistry, slot_id_for
from lagsched.adapters.topics import apply_sync
from lagsched.cli.status import format_status
from lagsched.core.config import parse_settings
from lagsched.core.registry import BrokerTopic, plan_sync
from lagsched.workflows.lag_monitor import measure
from lagsched.workflows.status import cluster_status

PARTITIONS = 3
#: Long enough for several measurements and dozens of status reads while records flow.
RUN_S = 10.0
MEASURE_EVERY_S = 2.5


def register(db: Any, cluster: str, topic: str, partitions: int) -> str:
    applied = apply_sync(db, cluster, lambda rows: plan_sync(rows, [BrokerTopic(topic, partitions)]))
    return str(applied.topic_ids[topic])


def run_measure(db: Any, redis_client: Any, cluster: str, admin: Any) -> Any:
    s = parse_settings({})
    store = LagStore(redis_client, cluster, max_samples=s.sample_window, max_age_s=s.sample_ttl_s)
    return measure(cluster, mysql=db, admin=admin, store=store, settings=s, now=datetime.now(tz=UTC))


@dataclass
class Pipeline:
    """A producer and a consuming slot in threads: records arrive, the slot reads and commits them."""

    kafka_config: dict[str, Any]
    mysql_params: Any
    topic: str
    topic_id: str
    slot_id: str
    stop: threading.Event = field(default_factory=threading.Event)
    produced: int = 0
    committed: dict[int, int] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)

    def produce(self) -> None:
        producer = Producer({**self.kafka_config, "linger.ms": 5})
        try:
            while not self.stop.is_set():
                for i in range(20):  # ~2,000 records/s
                    producer.produce(self.topic, value=b"x" * 50, partition=(self.produced + i) % PARTITIONS)
                self.produced += 20
                producer.poll(0)
                time.sleep(0.01)
            assert producer.flush(30) == 0
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def consume(self) -> None:
        """Read every partition and store the next offset after each poll, as a slot commits each batch."""
        conn = connect(self.mysql_params)
        consumer = Consumer(
            {**self.kafka_config, "group.id": f"status-test-{self.slot_id}", "enable.auto.commit": False}
        )
        try:
            store = ClaimStore(conn, server_lock_mode(conn))
            claims = {c.partition_id: c for c in store.claim(self.slot_id, {self.topic_id: PARTITIONS}, 600).claims}
            assert sorted(claims) == list(range(PARTITIONS)), claims
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            while not self.stop.is_set():
                nxt: dict[int, int] = {}
                for msg in consumer.consume(num_messages=500, timeout=0.05):
                    if msg.error() is None:
                        nxt[msg.partition()] = msg.offset() + 1
                for p, offset in nxt.items():
                    claims[p] = store.commit_offset(self.slot_id, claims[p], offset)
                    self.committed[p] = offset
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
        finally:
            consumer.close()
            conn.close()


@pytest.fixture
def running(
    kafka_config: dict[str, Any], mysql_db: Any, db: Any, redis_client: Any, cluster: str, new_topic: Callable[..., str]
) -> Iterator[Pipeline]:
    topic = new_topic(PARTITIONS)
    slot_id = slot_id_for(f"{cluster}-slot-0")
    SlotRegistry(redis_client, cluster=cluster).heartbeat(slot_id, datetime.now(UTC), 600)
    pipe = Pipeline(kafka_config, mysql_db, topic, register(db, cluster, topic, PARTITIONS), slot_id)
    threads = [threading.Thread(target=pipe.produce), threading.Thread(target=pipe.consume)]
    for t in threads:
        t.start()
    try:
        yield pipe
    finally:
        pipe.stop.set()
        for t in threads:
            t.join(60)


def test_a_consumer_that_keeps_up_is_never_reported_ahead(
    running: Pipeline, db: Any, redis_client: Any, cluster: str, kafka_config: dict[str, Any]
) -> None:
    admin = AdminClient(kafka_config)
    store = LagStore(redis_client, cluster)
    deadline = time.monotonic() + 30
    while len(running.committed) < PARTITIONS and time.monotonic() < deadline and not running.errors:
        time.sleep(0.1)
    assert not running.errors, running.errors
    assert len(running.committed) == PARTITIONS, "the consumer committed nothing on some partition in 30 s"

    reads = ahead_of_measured = 0
    flagged: list[dict[str, Any]] = []
    next_measure = 0.0
    end = time.monotonic() + RUN_S
    while time.monotonic() < end:
        if time.monotonic() >= next_measure:
            summary = run_measure(db, redis_client, cluster, admin)
            assert summary.anomalies == 0  # the monitor's own readings never were ahead
            next_measure = time.monotonic() + MEASURE_EVERY_S
        time.sleep(0.2)
        d = cluster_status(db, redis_client, cluster, datetime.now(tz=UTC)).as_dict()
        reads += 1
        flagged += [a for a in d["anomalies"] if a["kind"] == "offset_ahead"]
        # The old rule's inputs: the committed offsets MySQL holds now against the measured heads.
        heads = store.read_windows([store.latest_key(running.topic, p) for p in range(PARTITIONS)])
        now_committed = {c["partition"]: c["committed_offset"] for s in d["slots"] for c in s["claims"]}
        if any((now_committed.get(p) or 0) > w.samples[-1].offset for p, w in enumerate(heads) if w.samples):
            ahead_of_measured += 1
        topic = next(t for t in d["topics"] if t["name"] == running.topic)
        assert topic["measured_at"] is not None
    assert not running.errors, running.errors
    assert flagged == [], f"a consumer that keeps up was reported ahead of the log end: {flagged[:3]}"
    # The case the test is about did happen: MySQL's offsets were past the measured watermarks.
    assert ahead_of_measured >= reads // 2, (ahead_of_measured, reads)
    assert reads >= 10 and running.produced > 5_000


def test_an_offset_stored_past_the_log_end_is_reported(
    db: Any, redis_client: Any, cluster: str, kafka_config: dict[str, Any], new_topic: Callable[..., str]
) -> None:
    topic = new_topic(2)
    producer = Producer(kafka_config)
    for i in range(100):
        producer.produce(topic, value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    topic_id = register(db, cluster, topic, 2)
    with db.cursor() as cur:  # p0 consumed to the end; p1 stored by hand 1,000 past its end (50)
        cur.execute(
            "UPDATE topic_partitions SET committed_offset = CASE partition_id WHEN 0 THEN 50 ELSE 1050 END"
            " WHERE topic_id = %s",
            (topic_id,),
        )
    db.commit()

    summary = run_measure(db, redis_client, cluster, AdminClient(kafka_config))
    st = cluster_status(db, redis_client, cluster, datetime.now(tz=UTC))

    ahead = [a for a in st.anomalies if a.kind == "offset_ahead"]
    assert [(a.topic, a.partition) for a in ahead] == [(topic, 1)]
    assert "committed offset 1,050 was 1,000 beyond the high watermark 50" in ahead[0].detail
    assert ahead[0].seen_at == summary.at.timestamp()  # the status page keeps epoch seconds
    assert f"ANOMALY offset_ahead {topic}[1]: at the measurement of" in format_status(st)
