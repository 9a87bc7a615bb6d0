"""Watermarks, complete hours and late records on the real stack: slots, the lag monitor, MySQL and
Iceberg (docs/completeness.md).

One scenario, asserted step by step. Two topics of one cluster, records with chosen CreateTime
timestamps over past hours (so no test waits for an hour to pass):

* ``typed`` (routed to a table of its own, raw values): 3 partitions, one never written (idle);
* ``shared`` (the cluster's shared table): 2 partitions, whose slot falls behind (stalled).

What a downstream reader would check: each complete hour's row count equals the records a plain
Kafka consumer reads with timestamps in that hour, and its offset ranges are theirs; an idle
partition does not hold an hour back once the lag monitor has seen it caught up; a stalled topic
does, until its slot catches up; the commits record the watermark; a record written into an hour
already complete is counted late, lands in its hour, and the hour is restated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from consumer_support import ConsumerHarness

from lagsched.adapters.lag_store import LagStore
from lagsched.adapters.lake_reader import open_catalog
from lagsched.adapters.late_records import late_totals
from lagsched.adapters.mysql import connect
from lagsched.adapters.watermarks import partition_times
from lagsched.cli.status import format_status
from lagsched.core.clusters import parse_clusters
from lagsched.core.completeness import HOUR_MS, HourTable, hour_key, hour_of_key
from lagsched.core.config import parse_settings
from lagsched.core.lake import LATE_RECORDS_PROPERTY, MAX_TIMESTAMPS_PROPERTY, VALID_THROUGH_PROPERTY
from lagsched.core.status import metric_families, render_prometheus
from lagsched.workflows.hours import check_hour, list_hour_tables, restatements
from lagsched.workflows.lag_monitor import measure
from lagsched.workflows.status import cluster_status

pytestmark = pytest.mark.integration


def current_hour() -> int:
    """The current hour's start (ms): read when a test starts, not when the suite collects it (a
    whole suite runs for most of an hour)."""
    return (int(datetime.now(UTC).timestamp() * 1000) // HOUR_MS) * HOUR_MS


MIN = 60_000


def produce_at(kafka_config: dict[str, Any], topic: str, records: list[tuple[int, int]]) -> None:
    """(partition, CreateTime ms) per record, in order."""
    producer = Producer({**kafka_config, "acks": "all", "enable.idempotence": True})
    for i, (partition, ts) in enumerate(records):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition, timestamp=ts)
    assert producer.flush(60) == 0


def plain_read(kafka_config: dict[str, Any], topic: str, partitions: int) -> list[tuple[int, int, int]]:
    """Every record of ``topic`` as a plain consumer reads it: (partition, offset, timestamp ms)."""
    admin_ends = Consumer({**kafka_config, "group.id": "unused", "enable.auto.commit": False})
    ends = {p: admin_ends.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    admin_ends.close()
    c = Consumer({**kafka_config, "group.id": f"plain-{topic}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple[int, int, int]] = []
    while len(out) < sum(ends.values()):
        for m in c.consume(500, timeout=5):
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.timestamp()[1]))
    c.close()
    return out


def in_hour(records: list[tuple[int, int, int]], hour: int) -> tuple[int, dict[str, list[int]]]:
    """The count and the offset ranges ({partition: [first, last]}) of the records of ``hour``."""
    spans: dict[str, list[int]] = {}
    n = 0
    for p, offset, ts in records:
        if hour <= ts < hour + HOUR_MS:
            n += 1
            span = spans.setdefault(str(p), [offset, offset])
            span[0], span[1] = min(span[0], offset), max(span[1], offset)
    return n, dict(sorted(spans.items()))


def test_hours_complete_as_a_plain_consumer_counts_idle_partitions_pass_stalled_topics_hold_late_records_restate(
    consumer: ConsumerHarness, kafka_config: dict[str, Any], new_topic: Callable[..., str], redis_client: Any
) -> None:
    H = current_hour()  # the hour the scenario's timestamps count from
    typed, shared = new_topic(3), new_topic(2)
    # typed: partitions 0 and 1 over hours H-4..H-2; partition 2 never written
    produce_at(kafka_config, typed, [(i % 2, H - 4 * HOUR_MS + i * 7 * MIN) for i in range(30)])
    # shared: both partitions in H-4 and the start of H-3
    produce_at(kafka_config, shared, [(i % 2, H - 4 * HOUR_MS + i * 5 * MIN) for i in range(16)])
    consumer.register(typed)
    consumer.register(shared)
    routes = [{"topics": [typed], "allowed_lateness_s": 0}]
    clusters = parse_clusters(
        {consumer.cluster: {"sink": {"warehouse": consumer.warehouse}, "routes": routes, "allowed_lateness_s": 300}}
    )
    conn = connect(consumer.mysql)
    catalog = open_catalog(consumer.lake, consumer.mysql)

    def tables() -> dict[tuple[str, ...], HourTable]:
        found = list_hour_tables(clusters, conn=conn, exists=lambda _c, name: bool(catalog.table_exists(name)))
        return {t.topics: t for t in found}

    def load(t: HourTable) -> Any:
        return catalog.load_table(f"{t.namespace}.{t.table}")

    def lag_reading() -> None:
        measure(
            consumer.cluster,
            mysql=conn,
            admin=AdminClient(kafka_config),
            store=LagStore(redis_client, consumer.cluster),
            settings=parse_settings(None),
            now=datetime.now(UTC),
        )

    # 1. The slot commits (several times: 7 records a batch): each offset moves with its records' newest timestamp.
    consumer.run("hours", "--routes", json.dumps(routes), "--exit-when-idle", "--max-records", "7", timeout=300)
    records = {typed: plain_read(kafka_config, typed, 3), shared: plain_read(kafka_config, shared, 2)}
    times = partition_times(conn, consumer.cluster, [(typed, p) for p in range(3)] + [(shared, p) for p in range(2)])
    for topic, parts in ((typed, 3), (shared, 2)):
        for p in range(parts):
            newest = max((ts for q, _o, ts in records[topic] if q == p), default=None)
            assert times[(topic, p)].max_timestamp_ms == newest, (topic, p)
    # the empty partition: its offset stored (0), no record, so no time known
    assert times[(typed, 2)].max_timestamp_ms is None and times[(typed, 2)].watermark_ms is None
    found = tables()
    assert set(found) == {(typed,), (shared,)}, "the typed table and the shared table (not the dead letters)"
    typed_table, shared_table = found[(typed,)], found[(shared,)]
    assert typed_table.uri == f"iceberg://lagsched/{typed_table.namespace}/{typed_table.table}"
    snapshots = load(typed_table).metadata.snapshots
    assert len(snapshots) >= 3
    assert all(MAX_TIMESTAMPS_PROPERTY in s.summary.additional_properties for s in snapshots)
    # partition 2 was never committed nor seen by the lag monitor: nothing can be said yet
    assert not any(VALID_THROUGH_PROPERTY in s.summary.additional_properties for s in snapshots)
    assert not check_hour(typed_table, H - 4 * HOUR_MS, conn=conn, load_table=load).complete

    # 2. The shared topic's slot falls behind: new records (in H-2) wait unread when the lag
    # monitor reads the ends. The typed topic's partitions are all caught up, the idle one too.
    produce_at(kafka_config, shared, [(0, H - 2 * HOUR_MS + 10 * MIN), (1, H - 2 * HOUR_MS + 20 * MIN)])
    read_at = int(datetime.now(UTC).timestamp() * 1000)
    lag_reading()
    # The typed table (lateness 0 by its route): every past hour complete, exactly as counted.
    for hour in range(H - 5 * HOUR_MS, H, HOUR_MS):
        check = check_hour(typed_table, hour, conn=conn, load_table=load)
        assert check.complete, check.describe()
        assert check.stats is not None
        rows, offsets = in_hour(records[typed], hour)
        assert (check.stats.rows, check.stats.offsets) == (rows, {typed: offsets} if rows else {}), hour
        extra = check.event_extra()
        assert extra["rows"] == rows and extra["snapshot_id"] == load(typed_table).current_snapshot().snapshot_id
        assert extra["watermark_ms"] >= read_at and extra["restated"] is False
    # The shared table: complete up to its slowest partition's newest record (H-3 + 10 min), no further.
    assert check_hour(shared_table, H - 4 * HOUR_MS, conn=conn, load_table=load).complete
    stalled = check_hour(shared_table, H - 3 * HOUR_MS, conn=conn, load_table=load)
    assert not stalled.complete and stalled.watermark_ms == H - 3 * HOUR_MS + 10 * MIN, stalled.describe()
    # What the page, `lagsched status` and /metrics show: each topic's watermark.
    views = {t.name: t for t in cluster_status(conn, redis_client, consumer.cluster, datetime.now(UTC)).topics}
    assert views[typed].watermark_ms is not None and views[typed].watermark_ms >= read_at
    assert views[shared].watermark_ms == stalled.watermark_ms

    # 3. The slot catches up: its commit records the table's watermark (the reading, now reached),
    # and the hours complete, H-2 with the new records.
    consumer.run("hours", "--routes", json.dumps(routes), "--exit-when-idle", timeout=300)
    records[shared] = plain_read(kafka_config, shared, 2)
    latest = load(shared_table).current_snapshot().summary.additional_properties
    assert read_at <= int(latest[VALID_THROUGH_PROPERTY]) <= int(datetime.now(UTC).timestamp() * 1000)
    assert json.loads(latest[MAX_TIMESTAMPS_PROPERTY]) == {
        shared: {"0": H - 2 * HOUR_MS + 10 * MIN, "1": H - 2 * HOUR_MS + 20 * MIN}
    }
    for hour in (H - 3 * HOUR_MS, H - 2 * HOUR_MS):
        check = check_hour(shared_table, hour, conn=conn, load_table=load)
        assert check.complete and check.stats is not None, check.describe()
        assert check.stats.rows == in_hour(records[shared], hour)[0] > 0

    # 4. It falls behind again: a newer reading it has not reached takes no credit back.
    produce_at(kafka_config, shared, [(0, H - 2 * HOUR_MS + 30 * MIN)])
    lag_reading()
    assert check_hour(shared_table, H - 2 * HOUR_MS, conn=conn, load_table=load).complete

    # 5. Late records: a producer writes into hours already complete (past the allowed lateness:
    # 0 s for the typed table, 300 s for the shared one), and one record of the next hour, which
    # is not. They land in their hours, are counted per table, and their hours restated. The
    # record of step 4 (H-2 + 30 min, unread until now) is late too: H-2 was complete before it.
    assert late_totals(conn, consumer.cluster) == {}
    produce_at(
        kafka_config, typed, [(0, H - 4 * HOUR_MS + MIN), (1, H - 3 * HOUR_MS + 2 * MIN), (2, H + HOUR_MS + MIN)]
    )
    produce_at(kafka_config, shared, [(1, H - 4 * HOUR_MS + 3 * MIN)])
    since = datetime.now(UTC)
    consumer.run("hours", "--routes", json.dumps(routes), "--exit-when-idle", "--allowed-lateness-s", "300",
                 timeout=300)  # fmt: skip
    until = datetime.now(UTC)
    assert late_totals(conn, consumer.cluster) == {typed_table.identifier: 2, shared_table.identifier: 2}
    summaries = [s.summary.additional_properties for s in load(typed_table).metadata.snapshots]
    late_in_typed: dict[str, int] = {}  # the commits' summaries, merged (one commit or several)
    for p in summaries:
        for hour, n in json.loads(p.get(LATE_RECORDS_PROPERTY, "{}")).get(typed, {}).items():
            late_in_typed[hour] = late_in_typed.get(hour, 0) + n
    assert late_in_typed == {hour_key(H - 4 * HOUR_MS): 1, hour_key(H - 3 * HOUR_MS): 1}
    records = {typed: plain_read(kafka_config, typed, 3), shared: plain_read(kafka_config, shared, 2)}
    for table, topic, hours in (
        (typed_table, typed, (H - 4 * HOUR_MS, H - 3 * HOUR_MS)),
        (shared_table, shared, (H - 4 * HOUR_MS, H - 2 * HOUR_MS)),
    ):
        for hour in hours:  # the hour holds its late record, as a plain consumer counts it
            check = check_hour(table, hour, conn=conn, load_table=load)
            assert check.complete and check.stats is not None and check.stats.rows == in_hour(records[topic], hour)[0]

    def by_name(_cluster: str, name: str) -> Any:
        return catalog.load_table(name.split(".", 1)[1])

    found = restatements([consumer.cluster], since, until, conn=conn, load_table=by_name)
    assert [(r.table, sorted(r.hours)) for r in found] == sorted(
        [
            (shared_table.identifier, [hour_key(H - 4 * HOUR_MS), hour_key(H - 2 * HOUR_MS)]),
            (typed_table.identifier, [hour_key(H - 4 * HOUR_MS), hour_key(H - 3 * HOUR_MS)]),
        ]
    )
    for r in found:
        topic = typed if r.table == typed_table.identifier else shared
        extra = r.event_extra()
        assert extra["restated"] is True and extra["cluster"] == consumer.cluster
        for hour, what in extra["hours"].items():
            assert what["late_records"] == 1 and what["topics"] == [topic]
            assert what["rows"] == in_hour(records[topic], hour_of_key(hour))[0], (r.table, hour, what)
    # the same interval restates the same hours (a retried run); the interval before holds none
    again = restatements([consumer.cluster], since, until, conn=conn, load_table=by_name)
    assert [r.hours.keys() for r in again] == [r.hours.keys() for r in found]
    assert restatements([consumer.cluster], since - (until - since), since, conn=conn, load_table=by_name) == []
    # What the page, `lagsched status` and /metrics show.
    status = cluster_status(conn, redis_client, consumer.cluster, datetime.now(UTC))
    assert status.late_records == {typed_table.identifier: 2, shared_table.identifier: 2}
    assert f"LATE RECORDS {typed_table.identifier}: 2 record(s)" in format_status(status)
    text = render_prometheus(metric_families([(status, [])]))
    assert f'lagsched_late_records_total{{cluster="{consumer.cluster}",table="{shared_table.identifier}"}} 2' in text, (
        text
    )
    conn.close()


def test_a_log_append_time_topic_needs_no_lateness_and_a_change_of_its_type_is_synced(
    consumer: ConsumerHarness, kafka_config: dict[str, Any], new_topic: Callable[..., str]
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    from lagsched.adapters.topics import load_topics

    stamped = new_topic(1, config={"message.timestamp.type": "LogAppendTime"})
    created = new_topic(1)
    consumer.register(stamped)
    consumer.register(created)
    clusters = parse_clusters({consumer.cluster: {"routes": [{"topics": [stamped]}], "allowed_lateness_s": 300}})
    conn = connect(consumer.mysql)

    def lateness() -> dict[tuple[str, ...], int]:
        found = list_hour_tables(clusters, conn=conn, exists=lambda _c, _name: True)
        return {t.topics: t.allowed_lateness_s for t in found}

    flags = {t.name: t.log_append_time for t in load_topics(conn, consumer.cluster)}
    assert flags == {stamped: True, created: False}
    assert lateness() == {(stamped,): 0, (created,): 300}
    # The broker's type changes back to CreateTime: the next sync follows, and so does the lateness.
    admin = AdminClient(kafka_config)
    entry = ConfigEntry("message.timestamp.type", "CreateTime", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, stamped, incremental_configs=[entry])]
    ).values():
        future.result(timeout=30)
    consumer.register(stamped)
    assert {t.name: t.log_append_time for t in load_topics(conn, consumer.cluster)}[stamped] is False
    assert lateness() == {(stamped,): 300, (created,): 300}
    conn.close()
