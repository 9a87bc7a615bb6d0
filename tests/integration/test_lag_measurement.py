"""Lag measurement against the real broker, MariaDB and Redis, checked against hand-computed numbers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from lagsched.adapters.alert_figures import read_thresholds
from lagsched.adapters.gaps import RetentionGap, record_gap
from lagsched.adapters.kafka_admin import _has_whole_call, fetch_offsets, read_offsets
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.core.config import parse_settings
from lagsched.core.errors import KafkaOffsetsError, UnknownTopicError
from lagsched.core.lag import OPEN_TRANSACTION_WARN_S, OffsetSample
from lagsched.core.status import render_prometheus
from lagsched.core.thresholds import ClusterThresholds, TopicThresholds
from lagsched.workflows.lag_monitor import measure
from lagsched.workflows.status import cluster_status, metrics

T0 = 1_790_000_000.0  # injected clock: a fixed instant, so every expected figure is exact


def at(t: float) -> datetime:
    """Epoch seconds as the aware datetime the workflows take."""
    return datetime.fromtimestamp(t, tz=UTC)


class CountingAdmin:
    """Wraps an AdminClient and records every metadata and list_offsets call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.metadata_calls = 0
        # (spec class, isolation level or None: the client's default, partitions in the request)
        self.offset_calls: list[tuple[str, str | None, int]] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.metadata_calls += 1
        return self.inner.list_topics(topic=topic, timeout=timeout)

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        specs = {type(s).__name__ for s in request.values()}
        assert len(specs) == 1, specs
        level = kwargs.get("isolation_level")
        self.offset_calls.append((specs.pop(), None if level is None else level.name, len(request)))
        return self.inner.list_offsets(request, **kwargs)


@pytest.fixture
def admin(kafka_config: dict[str, Any]) -> CountingAdmin:
    return CountingAdmin(AdminClient(kafka_config))


def register(
    conn: Any,
    cluster: str,
    topic: str,
    committed: dict[int, int | None],
    *,
    retention_ms: int = -1,
    claimed_by: dict[int, str] | None = None,
) -> str:
    """Insert a topics row and its topic_partitions rows directly."""
    topic_id = str(uuid.uuid4())
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms) VALUES (%s, %s, %s, %s, %s)",
            (topic_id, cluster, topic, len(committed), retention_ms),
        )
        for p, offset in committed.items():
            cur.execute(
                "INSERT INTO topic_partitions (topic_id, partition_id, committed_offset, claimed_by)"
                " VALUES (%s, %s, %s, %s)",
                (topic_id, p, offset, (claimed_by or {}).get(p)),
            )
    conn.commit()
    return topic_id


def set_committed(conn: Any, topic_id: str, partition: int, offset: int | None) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions SET committed_offset = %s WHERE topic_id = %s AND partition_id = %s",
            (offset, topic_id, partition),
        )
    conn.commit()


def produce(kafka_config: dict[str, Any], topic: str, partition: int, n: int, timestamp_ms: int | None = None) -> None:
    producer = Producer({**kafka_config, "acks": "all", "linger.ms": 5})
    for i in range(n):
        kwargs: dict[str, Any] = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        producer.produce(topic, value=f"v{i}".encode(), partition=partition, **kwargs)
    assert producer.flush(30) == 0


@pytest.fixture
def measure_at(db: Any, admin: CountingAdmin, redis_client: Any, cluster: str) -> Callable[..., Any]:
    """measure(cluster) at an injected time, with the given settings."""

    def run(now: float, settings: dict[str, Any] | None = None) -> Any:
        s = parse_settings(settings or {})
        store = LagStore(redis_client, cluster, max_samples=s.sample_window, max_age_s=s.sample_ttl_s)
        return measure(cluster, mysql=db, admin=admin, store=store, settings=s, now=at(now))

    return run


def test_lag_and_no_offset_policy_over_a_batched_read(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    redis_client: Any,
    cluster: str,
    admin: CountingAdmin,
    measure_at: Callable[..., Any],
) -> None:
    a = new_topic(3)
    b = new_topic(2)
    produce(kafka_config, a, 0, 100)
    produce(kafka_config, a, 1, 50)
    produce(kafka_config, b, 0, 30)
    produce(kafka_config, b, 1, 7)
    register(db, cluster, a, {0: 40, 1: None, 2: None})
    register(db, cluster, b, {0: 30, 1: 2})

    summary = measure_at(T0)

    ta, tb = summary.topic(a), summary.topic(b)
    # a: p0 100 - 40 = 60; p1 never committed, earliest: 50 - 0 = 50; p2 empty: 0.
    assert (ta.lag, ta.lost, ta.partitions, ta.partitions_without_offset, ta.max_partition_lag) == (110, 0, 3, 2, 60)
    assert [p.position for p in ta.partition_lags] == [40, 0, 0]
    # b: p0 caught up, p1 7 - 2 = 5.
    assert (tb.lag, tb.lost, tb.partitions_without_offset) == (5, 0, 0)
    assert [t.topic for t in summary.topics] == [a, b]  # largest lag first
    # ONE metadata request and ONE list_offsets call per spec and isolation level, each carrying all
    # 5 partitions: the last stable offset (read committed), the high watermark, the log start.
    assert admin.metadata_calls == 1
    assert sorted(admin.offset_calls, key=str) == [
        ("EarliestSpec", None, 5),
        ("LatestSpec", "READ_COMMITTED", 5),
        ("LatestSpec", "READ_UNCOMMITTED", 5),
    ]

    # Per-topic override: never-committed partitions start at the head, so they add no lag.
    settings = {
        "stale_after_s": 300,
        "defaults": {"max_workers": 8},
        "topics": {a: {"no_offset_policy": "latest", "time_lag_slo_s": 90, "open_transaction_bound_s": 45}},
    }
    later = measure_at(T0 + 60, settings)
    assert later.topic(a).lag == 60
    assert later.topic(a).no_offset_policy == "latest"
    assert later.topic(b).lag == 5
    # The measurement stores the thresholds it applied, for the metrics the alert rules compare with:
    # max_workers capped by each topic's partitions.
    stored = read_thresholds(redis_client, cluster)
    assert stored == ClusterThresholds(300.0, {a: TopicThresholds(3, 90.0, 45.0), b: TopicThresholds(2, 600.0, 300.0)})


def test_unknown_topic_is_named(admin: CountingAdmin, new_topic: Callable[..., str]) -> None:
    known = new_topic(1)
    missing = f"no-such-topic-{uuid.uuid4().hex[:6]}"
    with pytest.raises(UnknownTopicError, match=missing) as err:
        fetch_offsets(admin, [known, missing])
    assert err.value.topics == (missing,)
    assert fetch_offsets(admin, [known])[known][0].latest == 0


def test_registry_topic_missing_on_broker_is_reported_not_fatal(
    new_topic: Callable[..., str], db: Any, cluster: str, measure_at: Callable[..., Any]
) -> None:
    real = new_topic(1)
    gone = f"deleted-{uuid.uuid4().hex[:6]}"
    register(db, cluster, real, {0: 0})
    register(db, cluster, gone, {0: 5})
    summary = measure_at(T0)
    assert summary.missing == (gone,)
    assert [t.topic for t in summary.topics] == [real]
    assert gone in summary.table()


def _log_start(admin: CountingAdmin, topic: str) -> int:
    futures = admin.inner.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=10)
    return int(next(iter(futures.values())).result().offset)


def test_lost_records_when_retention_deletes_unread_data(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
    admin: CountingAdmin,
    redis_client: Any,
    measure_at: Callable[..., Any],
) -> None:
    # retention.ms 30 s, segments roll after 100 ms. The first 100 records carry a timestamp 10
    # minutes old, so their segment is past retention at once; the 20 records produced after
    # the roll are fresh and stay for 30 s, long enough to measure a stable state.
    topic = new_topic(1, config={"retention.ms": "30000", "segment.ms": "100"})
    produce(kafka_config, topic, 0, 100, timestamp_ms=int((time.time() - 600) * 1000))
    time.sleep(0.3)
    produce(kafka_config, topic, 0, 20)
    topic_id = register(db, cluster, topic, {0: 10}, retention_ms=30000)  # consumer stalled at offset 10

    deadline = time.monotonic() + 60
    log_start = _log_start(admin, topic)
    while log_start < 100 and time.monotonic() < deadline:
        time.sleep(0.5)
        log_start = _log_start(admin, topic)
    assert log_start == 100, f"retention did not delete the old segment within 60 s (log start {log_start})"

    summary = measure_at(T0)
    t = summary.topic(topic)
    p = t.partition_lags[0]
    assert (p.latest, p.log_start, p.committed) == (120, 100, 10)
    assert t.lost == 100 - 10  # deleted before they were read
    assert t.lag == 120 - 100  # counted from the log start, never from the stale commit (110)
    assert p.position == 100
    assert summary.total_lost == 90
    assert f"{topic}: 90 (p0: 90)" in summary.table()
    stored = LagStore(redis_client, cluster).read_lag_records([topic])[topic]
    assert [(r.lag, r.lost) for r in stored] == [(20, 90)]
    assert summary.as_dict()["lost"] == {topic: 90}
    assert topic_id == t.topic_id
    # The consumer then skips the gap: records it in retention_gaps and commits the log start. The
    # same 90 records stay counted as lost, now as skipped rather than ahead of the offset.
    record_gap(db, RetentionGap(topic_id, 0, 10, 100), slot_id="00000000-0000-0000-0000-000000000001")
    set_committed(db, topic_id, 0, 100)
    after = measure_at(T0 + 10).topic(topic)
    assert (after.lost, after.lost_skipped, after.lag) == (90, 90, 20)
    assert after.partition_lags[0].lost == 0
    assert f"{topic}: 90 (already skipped by the consumer: 90)" in measure_at(T0 + 20).table()


def test_time_lag_on_a_busy_topic_interpolates_between_samples(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
    measure_at: Callable[..., Any],
) -> None:
    topic = new_topic(1)
    register(db, cluster, topic, {0: 150})
    figures = []
    for i in range(3):  # 100 records per minute; the consumer sits at offset 150 throughout
        produce(kafka_config, topic, 0, 100)
        t = measure_at(T0 + 60 * i).topic(topic)
        figures.append((t.lag, t.time_lag_s, round(t.ingress_rate, 6)))
    # Samples (T0, 100), (T0+60, 200), (T0+120, 300). Offset 150 was the head at T0+30 (halfway
    # between the first two), so its time lag is 30 s at T0+60 and 90 s at T0+120. At T0 the
    # commit (150) is beyond the head (100): nothing behind, exactly 0.
    assert figures == [(0, 0.0, 0.0), (50, 30.0, round(100 / 60, 6)), (150, 90.0, round(200 / 120, 6))]


def test_time_lag_on_an_idle_caught_up_topic_is_exactly_zero_and_stays_zero(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
    redis_client: Any,
    measure_at: Callable[..., Any],
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 0, 50)
    register(db, cluster, topic, {0: 50, 1: 0})
    seen = []
    for i in range(6):
        t = measure_at(T0 + 60 * i).topic(topic)
        seen.append((t.lag, t.time_lag_s, t.ingress_rate))
    assert seen == [(0, 0.0, 0.0)] * 6
    # The idle run is stored as its first and last sample only.
    store = LagStore(redis_client, cluster)
    assert [(s.at, s.offset) for s in store.read_windows([store.latest_key(topic, 0)])[0].samples] == [
        (T0, 50),
        (T0 + 300, 50),
    ]


def test_store_bounds_samples_by_count_age_and_ttl(redis_client: Any, cluster: str) -> None:
    store = LagStore(redis_client, cluster, max_samples=5, max_age_s=100)
    key = store.latest_key("orders", 0)
    for i in range(8):
        store.add_samples({key: OffsetSample(T0 + 10 * i, 100 * i)})
        store.add_lag_records({"orders": LagRecord(T0 + 10 * i, lag=i)})
    assert [s.offset for s in store.read_windows([key])[0].samples] == [300, 400, 500, 600, 700]
    assert redis_client.hlen(f"lagsched:{cluster}:latest:orders") == 1  # one hash per topic
    assert [r.lag for r in store.read_lag_records(["orders"])["orders"]] == [3, 4, 5, 6, 7]
    assert 0 < redis_client.ttl(f"lagsched:{cluster}:latest:orders") <= 100
    assert 0 < redis_client.ttl(store.lag_key("orders")) <= 100
    # The age bound: a sample 200 s later leaves only the samples within 100 s of it (>= 2 kept).
    store.add_lag_records({"orders": LagRecord(T0 + 270, lag=9)})
    assert [r.lag for r in store.read_lag_records(["orders"])["orders"]] == [9]
    assert key.startswith(f"lagsched:{cluster}:latest:")


def test_committed_beyond_the_head_is_an_anomaly_not_silently_lag_zero(
    new_topic: Callable[..., str], kafka_config: dict[str, Any], db: Any, cluster: str, measure_at: Callable[..., Any]
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 0, 300)
    produce(kafka_config, topic, 1, 10)
    register(db, cluster, topic, {0: 500, 1: 4})  # p0: stored by hand, or a topic re-created behind our back

    summary = measure_at(T0)

    m = summary.topic(topic)
    assert (m.lag, [p.partition for p in m.anomalies]) == (6, [0])
    assert summary.anomalies == 1
    assert summary.as_dict()["anomalies"] == {topic: {"0": {"committed": 500, "latest": 300, "ahead": 200}}}
    assert summary.as_dict()["top"][0]["anomalies"] == {"0": {"committed": 500, "latest": 300, "ahead": 200}}
    assert f"ANOMALY {topic}[0]: committed offset 500 is 200 beyond the high watermark 300" in summary.table()


def test_worker_rate_counts_only_holders_with_a_live_lease(
    new_topic: Callable[..., str], kafka_config: dict[str, Any], db: Any, cluster: str, measure_at: Callable[..., Any]
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 0, 1000)
    produce(kafka_config, topic, 1, 1000)
    topic_id = register(db, cluster, topic, {0: 0, 1: 0}, claimed_by={0: "slot-live", 1: "slot-dead"})
    with db.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions SET lease_expires_at = CASE partition_id"
            " WHEN 0 THEN CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR ELSE CURRENT_TIMESTAMP(6) - INTERVAL 1 HOUR END"
            " WHERE topic_id = %s",
            (topic_id,),
        )
    db.commit()
    backlog = {"defaults": {"min_lag": 100}}  # 1,760 records behind: a backlog, so the rate is capacity
    measure_at(T0, backlog)
    set_committed(db, topic_id, 0, 120)
    set_committed(db, topic_id, 1, 120)  # moved before slot-dead died; nobody holds it now

    m = measure_at(T0 + 60, backlog).topic(topic)

    assert m.consumption_rate == pytest.approx(4.0)  # 2 x 120 records in 60 s
    # One live worker: the dead slot must not halve the per-worker rate.
    assert m.worker_rate == pytest.approx(4.0)


def test_a_caught_up_consumer_gives_no_worker_rate(
    new_topic: Callable[..., str], kafka_config: dict[str, Any], db: Any, cluster: str, measure_at: Callable[..., Any]
) -> None:
    """A slot that keeps up trails the newest records by a batch: its rate is the ingress, not what it
    could do. Counted, it would hold every step down at the workers there are (the ingress floor)."""
    topic = new_topic(1)
    produce(kafka_config, topic, 0, 300)
    topic_id = register(db, cluster, topic, {0: 0}, claimed_by={0: "slot-1"})
    with db.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions SET lease_expires_at = CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE topic_id = %s",
            (topic_id,),
        )
    db.commit()
    settings = {"defaults": {"min_lag": 100}}
    set_committed(db, topic_id, 0, 150)
    measure_at(T0, settings)  # 150 behind: a backlog
    set_committed(db, topic_id, 0, 250)

    m = measure_at(T0 + 60, settings).topic(topic)

    assert (m.lag, m.consumption_rate) == (50, pytest.approx(100 / 60))
    assert m.worker_rate is None  # 50 behind, within min_lag: caught up, no capacity observed
    produce(kafka_config, topic, 0, 600)
    assert measure_at(T0 + 120, settings).topic(topic).worker_rate is None  # the window still holds the catch-up


def _lease(conn: Any, topic_id: str, holder: str | None, live: bool) -> None:
    """Every row of the topic held by `holder`, with a lease live for an hour or expired an hour ago."""
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions SET claimed_by = %s, lease_expires_at = CURRENT_TIMESTAMP(6) + INTERVAL"
            f" {'' if live else '-'}1 HOUR WHERE topic_id = %s",
            (holder, topic_id),
        )
    conn.commit()


def test_a_pipeline_with_lag_and_no_commit_is_stalled_with_live_holders_and_stopped_without(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    redis_client: Any,
    cluster: str,
    measure_at: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lagsched.workflows.scaling import evaluate_cluster

    settings = {"defaults": {"stall_after_measurements": 3, "evaluate_every": 1}}
    topic, idle = new_topic(2), new_topic(1)
    produce(kafka_config, topic, 0, 100)
    produce(kafka_config, topic, 1, 100)
    produce(kafka_config, idle, 0, 10)
    topic_id = register(db, cluster, topic, {0: 10, 1: 10})
    register(db, cluster, idle, {0: 10})  # caught up: its offset stands still with nothing to read
    _lease(db, topic_id, "slot-a", live=True)

    states = []
    for i in range(5):  # the offsets move between the first two measurements, then stand still
        if i == 1:
            set_committed(db, topic_id, 0, 20)
        summary = measure_at(T0 + 60 * i, settings)
        states.append(summary.topic(topic).state)
    # The move is seen at T0 + 60; three measurements with lag and no move after it make it stalled.
    assert states == ["ok", "ok", "ok", "ok", "stalled"]
    stalled = summary.topic(topic)
    assert stalled.pipeline.unmoved == 3
    assert "lag 170 and no committed offset moved in the last 3 measurements" in stalled.pipeline.reason
    assert "2 partition(s) have a live holder that does not commit" in stalled.pipeline.reason
    assert summary.topic(idle).state == "ok"  # lag 0 is never stuck
    assert summary.as_dict()["stuck"] == [{"topic": topic, "state": "stalled", "reason": stalled.pipeline.reason}]
    assert f"STALLED {topic}: lag 170" in summary.table()
    assert f"topic {topic} is STALLED: lag 170" in caplog.text
    (newest,) = LagStore(redis_client, cluster).read_lag_records([topic])[topic][-1:]
    assert (newest.state, newest.state_reason) == ("stalled", stalled.pipeline.reason)

    # The evaluator holds it: more workers would not help (lag 170 alone would not scale anyway,
    # so the rule, not the policy, is what holds it).
    evaluation = evaluate_cluster(cluster, settings, mysql=db, redis=redis_client, evaluation_id="e1", now=at(T0 + 240))
    held = {o.topic: o for o in evaluation.outcomes}[topic]
    assert held.status == "held" and held.decision is not None
    assert (held.decision.rule, held.decision.reason) == ("stuck", f"pipeline stalled: {stalled.pipeline.reason}")
    assert evaluation.as_dict()["stuck"] == [{"topic": topic, "reason": held.decision.reason}]

    # The holder's lease runs out: nothing consumes the topic any more.
    _lease(db, topic_id, "slot-a", live=False)
    stopped = measure_at(T0 + 300, settings).topic(topic)
    assert stopped.state == "stopped"
    assert "no committed offset moved in the last 4 measurements" in stopped.pipeline.reason
    assert "no partition has a live holder" in stopped.pipeline.reason

    # One committed offset moving ends it at once.
    set_committed(db, topic_id, 1, 50)
    assert measure_at(T0 + 360, settings).topic(topic).state == "ok"


def test_the_whole_call_path_reads_what_the_public_list_offsets_reads(
    new_topic: Callable[..., str], kafka_config: dict[str, Any], admin: CountingAdmin
) -> None:
    """confluent-kafka's own client is read through the C call under ``list_offsets`` (one future a
    call, not one a partition); a wrapper through the public method: both give the same offsets,
    in chunks too."""
    topic = new_topic(3)
    produce(kafka_config, topic, 0, 5)
    produce(kafka_config, topic, 2, 9)
    real = admin.inner
    assert _has_whole_call(real) and not _has_whole_call(admin)
    whole = read_offsets(real, {topic: 3}, max_partitions_per_request=2)
    public = read_offsets(admin, {topic: 3}, max_partitions_per_request=2)
    assert whole == public
    assert [(o.partition, o.latest, o.log_start) for o in whole[topic]] == [(0, 5, 0), (1, 0, 0), (2, 9, 0)]
    assert sorted(admin.offset_calls, key=str) == [
        ("EarliestSpec", None, 1),
        ("EarliestSpec", None, 2),
        ("LatestSpec", "READ_COMMITTED", 1),
        ("LatestSpec", "READ_COMMITTED", 2),
        ("LatestSpec", "READ_UNCOMMITTED", 1),
        ("LatestSpec", "READ_UNCOMMITTED", 2),
    ]


def test_the_whole_call_path_names_a_partition_the_broker_does_not_have(
    new_topic: Callable[..., str], admin: CountingAdmin
) -> None:
    topic = new_topic(1)
    with pytest.raises(KafkaOffsetsError, match=rf"{topic}\[1\]"):
        read_offsets(admin.inner, {topic: 2}, timeout_s=5)


def test_an_open_transaction_holds_lag_at_the_stable_offset_and_is_reported_when_old(
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    db: Any,
    redis_client: Any,
    cluster: str,
    measure_at: Callable[..., Any],
) -> None:
    """Lag is what a read-committed consumer can read: an open transaction's records are held behind
    the last stable offset (LSO), not lag; one open past OPEN_TRANSACTION_WARN_S is reported in the
    summary, the stored lag record, the status (page) and the metrics; once committed, it is lag."""
    topic = new_topic(2)
    produce(kafka_config, topic, 1, 10)
    register(db, cluster, topic, {0: 0, 1: 0})
    producer = Producer(
        {**kafka_config, "transactional.id": f"lagsched-test-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 600_000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    assert producer.flush(30) == 0  # in the log, past the LSO

    first = measure_at(T0).topic(topic)
    assert (first.lag, first.held_by_transaction) == (10, 20)  # p0: LSO 0, high watermark 20
    assert first.transaction_open_s == 0.0 and first.open_transaction_warning is None

    late = T0 + OPEN_TRANSACTION_WARN_S + 100
    summary = measure_at(late)
    held = summary.topic(topic)
    assert (held.lag, held.held_by_transaction, held.transaction_open_s) == (10, 20, OPEN_TRANSACTION_WARN_S + 100)
    assert f"OPEN TRANSACTION {topic}: 20 offset(s) held" in summary.table()
    assert summary.as_dict()["open_transactions"] == [
        {"topic": topic, "held_by_transaction": 20, "open_s": OPEN_TRANSACTION_WARN_S + 100}
    ]
    status = cluster_status(db, redis_client, cluster, at(late + 1)).as_dict()
    assert status["open_transactions"] == [
        {"topic": topic, "held_by_transaction": 20, "open_s": OPEN_TRANSACTION_WARN_S + 100}
    ]
    text = render_prometheus(metrics(db, redis_client, at(late + 1), cluster_names=[cluster]))
    assert f'lagsched_topic_open_transaction_seconds{{cluster="{cluster}",topic="{topic}"}} 400' in text
    assert f'lagsched_topic_transaction_held_offsets{{cluster="{cluster}",topic="{topic}"}} 20' in text

    producer.commit_transaction(30)
    # The coordinator writes the commit markers after EndTxn returns: wait for the LSO to pass them.
    deadline = time.monotonic() + 30
    while read_offsets(AdminClient(kafka_config), {topic: 2})[topic][0].latest < 21:
        assert time.monotonic() < deadline, "the LSO did not move past the committed transaction"
        time.sleep(0.2)
    done = measure_at(late + 60).topic(topic)
    # 20 records and the commit marker are now below the LSO: lag in offsets, nothing held.
    assert (done.lag, done.held_by_transaction, done.transaction_open_s) == (10 + 21, 0, 0.0)
    assert cluster_status(db, redis_client, cluster, at(late + 61)).as_dict()["open_transactions"] == []
