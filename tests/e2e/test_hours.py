"""Hourly asset events through the running Airflow (docs/completeness.md): one per completed hour of
each table, exactly once, through a slot SIGKILLed mid-run, an emitting task SIGKILLed and the
scheduler (all of ``airflow standalone``) restarted; a downstream DAG reads exactly each hour; a
late record is restated once by ``lagsched_restatements``.

Records carry chosen CreateTime timestamps over past hours, so no hour is waited for. The stack
starts ``lagsched_hours`` at ``[lagsched] hours_start`` = 4 hours before its Airflow started; the
DAG is paused when created and this test unpauses it (and pauses it again at the end). Its cluster
(``e2e_<hex>``) is the only one in ``lagsched_clusters`` for the test's minutes, as in
test_airflow_loop; the Variable is restored at the end.

Two tables:
* the typed table of ``typed`` (2 partitions, one never written: idle), lateness 0;
* the shared table of ``stalled`` (2 partitions), whose slot falls behind: its later hours wait
  until a slot catches up, across the scheduler restart.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lagsched_dev.airflow_api import AirflowAPI
from lagsched_dev.stack.config import StackConfig

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from consumer_support import ConsumerHarness, wait_until

HOURS, MONITOR, RESTATEMENTS = "lagsched_hours", "lagsched_lag_monitor", "lagsched_restatements"
HOUR_MS, MIN = 3_600_000, 60_000
READER_SOURCE = Path(__file__).parents[2] / "docs" / "examples" / "lagsched_hour_reader.py"


def produce_at(kafka_config: dict[str, Any], topic: str, records: list[tuple[int, int]]) -> None:
    producer = Producer({**kafka_config, "acks": "all", "enable.idempotence": True})
    for i, (partition, ts) in enumerate(records):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition, timestamp=ts)
    assert producer.flush(60) == 0


def plain_hours(kafka_config: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    """Records per hour (its start, ms) of ``topic``, as a plain read-committed consumer reads them."""
    c = Consumer({**kafka_config, "group.id": f"plain-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})  # fmt: skip
    ends = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    counts: dict[int, int] = {}
    seen = 0
    while seen < ends:
        for m in c.consume(500, timeout=5):
            assert m.error() is None, m.error()
            hour = m.timestamp()[1] // HOUR_MS * HOUR_MS
            counts[hour] = counts.get(hour, 0) + 1
            seen += 1
    c.close()
    return counts


def key(hour_ms: int) -> str:
    return datetime.fromtimestamp(hour_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def hour_of(partition_key: str) -> int:
    return int(datetime.fromisoformat(partition_key + "+00:00").timestamp() * 1000)


@pytest.fixture
def reader_dag(airflow: AirflowAPI, stack: StackConfig) -> Iterator[Callable[[str], str]]:
    """Installs the docs' downstream example for one table (its dag_id returned); removed after."""
    written: list[Path] = []

    def install(table: str) -> str:
        dag_id = f"_test_hour_reader_{uuid.uuid4().hex[:8]}"
        text = READER_SOURCE.read_text()
        assert 'TABLE = "lagsched.kafka.lagsched_kafka"' in text and 'dag_id="lagsched_hour_reader"' in text
        text = text.replace('TABLE = "lagsched.kafka.lagsched_kafka"', f"TABLE = {table!r}")
        path = stack.repo / "dags" / f"{dag_id}.py"
        path.write_text(text.replace('dag_id="lagsched_hour_reader"', f"dag_id={dag_id!r}"))
        written.append(path)
        airflow.wait_for_dag(dag_id, timeout_s=180)
        return dag_id

    yield install
    for path in written:
        path.unlink(missing_ok=True)


@pytest.mark.timeout(1500)
def test_each_completed_hour_of_each_table_gets_one_event_through_kills_and_a_scheduler_restart(
    airflow: AirflowAPI,
    stack: StackConfig,
    kafka_config: dict[str, Any],
    new_topic: Callable[..., str],
    reader_dag: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from lagsched.connections import mysql_params
    from lagsched.core.routing import table_for_topic
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.services import Airflow

    api = airflow
    api.wait_for_dag(HOURS)
    dag = api.get_dag(HOURS)
    assert dag is not None
    if not dag["is_paused"]:
        pytest.fail("lagsched_hours is unpaused (the demo?): this test needs it to itself", pytrace=False)
    for old in api.dag_runs(HOURS):  # an earlier run of this test's hours (catchup would not redo them)
        api._request("DELETE", f"/api/v2/dags/{HOURS}/dagRuns/{old['dag_run_id']}")
    details = api._request("GET", f"/api/v2/dags/{HOURS}/details")
    start = int(datetime.fromisoformat(details["start_date"]).timestamp() * 1000)
    now_hour = int(time.time() * 1000) // HOUR_MS * HOUR_MS
    assert start <= now_hour - 3 * HOUR_MS, f"hours_start {details['start_date']} leaves too few past hours"
    tag = uuid.uuid4().hex[:8]
    cluster = f"e2e_{tag}"
    typed = new_topic(2, prefix=f"e2e-{tag}-typed")
    stalled = new_topic(2, prefix=f"e2e-{tag}-stalled")
    h3 = now_hour - 3 * HOUR_MS
    # typed: partition 0 only, over H-3 and H-2 (partition 1 stays empty); stalled: H-3 up to :35
    produce_at(kafka_config, typed, [(0, h3 + i * 5 * MIN) for i in range(20)])
    produce_at(kafka_config, stalled, [(i % 2, h3 + i * 5 * MIN) for i in range(8)])

    saved = api.get_variable("lagsched_clusters")
    routes = [{"topics": [typed], "allowed_lateness_s": 0}]
    config = {
        cluster: {
            "topic_pattern": f"e2e-{tag}-.*",
            "sink": {"warehouse": f"file://{tmp_path / 'warehouse'}"},
            "routes": routes,
            "allowed_lateness_s": 0,
        }
    }
    harness = ConsumerHarness(mysql_params(), kafka_config, 14, cluster, tmp_path)
    try:
        harness.register(typed)
        harness.register(stalled)
        # 1. A slot SIGKILLed after its first commits; the next one redoes its batch and catches up.
        slot = harness.start("hours-1", "--routes", json.dumps(routes), "--max-records", "3", "--budget-s", "300")
        wait_until(lambda: sum(1 for b in slot.batches()) >= 2, 240, "two batches of the first slot")
        slot.kill()
        harness.run("hours-2", "--routes", json.dumps(routes), "--exit-when-idle", timeout=300)
        reader = reader_dag(f"lagsched.kafka.{table_for_topic(typed)}")
        # 2. The stalled topic gets records its slot does not read yet; then the cluster is configured
        # (no lag monitor run saw it caught up before) and the lag monitor sees the lag.
        produce_at(kafka_config, stalled, [(0, h3 + HOUR_MS + 10 * MIN), (1, h3 + HOUR_MS + 20 * MIN)])
        api.set_variable("lagsched_clusters", json.dumps(config))
        run = api.trigger(MONITOR, {"cluster": cluster})
        assert api.wait_for_run(MONITOR, run, timeout_s=240) == "success"

        # 3. The hours run (catchup from hours_start); an emitting task is SIGKILLed mid-run.
        api.set_paused(HOURS, False)
        killed = kill_one_running_check(api)
        typed_uri = f"iceberg://lagsched/kafka/{table_for_topic(typed)}"
        shared_uri = f"iceberg://lagsched/kafka/{cluster}"
        # The hours: every run's up to the last past one (the runs start at hours_start, or earlier
        # when an Airflow restart moved it); a run of the hour now beginning may come, and wait.
        wait_until(lambda: key(now_hour - HOUR_MS) in {r["partition_key"] for r in api.dag_runs(HOURS)},
                   120, "the runs up to the last hour")  # fmt: skip
        wanted = sorted(
            hour_of(r["partition_key"]) for r in api.dag_runs(HOURS) if hour_of(r["partition_key"]) < now_hour
        )
        assert wanted == list(range(wanted[0], now_hour, HOUR_MS)) and wanted[0] <= h3 - HOUR_MS, wanted
        wait_until(lambda: {e["partition_key"] for e in api.asset_events(typed_uri)} >= {key(h) for h in wanted},
                   600, "the typed table's events")  # fmt: skip
        # the stalled table: its hours before H-3 are out, H-3 and later wait (its slowest partition's
        # newest committed record is at H-3 + 30 min)
        before = {key(h) for h in wanted if h < h3}
        wait_until(lambda: {e["partition_key"] for e in api.asset_events(shared_uri)} >= before,
                   300, "the stalled table's first hours")  # fmt: skip
        waiting = {r["partition_key"]: r["state"] for r in api.dag_runs(HOURS) if r["partition_key"] >= key(h3)}
        assert waiting and all(state == "running" for state in waiting.values()), waiting
        shared_keys = {e["partition_key"] for e in api.asset_events(shared_uri)}
        assert shared_keys == before, sorted(shared_keys)

        # 4. The scheduler (all of airflow standalone) restarts while those hours wait.
        Airflow(stack).stop(with_database=False)
        local_stack.up(stack, airflow=True)
        assert {e["partition_key"] for e in api.asset_events(shared_uri)} == shared_keys

        # 7, begun here (it is checked at the end, its restatement runs overlap steps 5 and 6): a late
        # record (lateness 0) into the typed table's H-3, already announced, for the next slot to land.
        typed_counts = plain_hours(kafka_config, typed, 2)  # the typed table's hours as announced
        hourly = [e["partition_key"] for e in api.asset_events(typed_uri)]
        produce_at(kafka_config, typed, [(0, h3 + MIN)])
        api.wait_for_dag(RESTATEMENTS)
        api.set_paused(RESTATEMENTS, False)

        # 5. A slot catches up and the lag monitor reads the ends: the waiting hours complete.
        harness.run("hours-3", "--routes", json.dumps(routes), "--exit-when-idle", timeout=300)
        run = api.trigger(MONITOR, {"cluster": cluster})
        assert api.wait_for_run(MONITOR, run, timeout_s=240) == "success"
        wait_until(lambda: {e["partition_key"] for e in api.asset_events(shared_uri)} >= {key(h) for h in wanted},
                   600, "the stalled table's remaining events")  # fmt: skip

        # Exactly one event per hour and table, each with the rows a plain consumer counts.
        for uri, topic in ((typed_uri, typed), (shared_uri, stalled)):
            events = api.asset_events(uri)
            keys = [e["partition_key"] for e in events]
            past = sorted(k for k in keys if hour_of(k) < now_hour)
            assert past == sorted(key(h) for h in wanted), (uri, keys)
            assert len(set(keys)) == len(keys), (uri, keys)
            counts = typed_counts if topic == typed else plain_hours(kafka_config, topic, 2)
            for e in events:
                hour = hour_of(e["partition_key"])
                assert e["extra"]["rows"] == counts.get(hour, 0), (uri, e["partition_key"], e["extra"])
                assert e["extra"]["restated"] is False and e["extra"]["snapshot_id"] is not None
        assert sum(e["extra"]["rows"] for e in api.asset_events(typed_uri)) == 20
        # The killed check was retried and emitted once (counted above).
        ti = api._request("GET", f"/api/v2/dags/{HOURS}/dagRuns/{killed[0]}/taskInstances/hour_complete/{killed[1]}")
        assert ti["state"] == "success" and ti["try_number"] >= 2, ti

        # 6. The downstream DAG ran once per hour of the typed table and read exactly its rows.
        wait_until(lambda: len(finished(api, reader)) >= len(wanted), 600, "the reader's runs")
        runs = finished(api, reader)
        assert sorted(r["partition_key"] for r in runs if hour_of(r["partition_key"]) < now_hour) == [
            key(h) for h in wanted
        ]
        counts = typed_counts  # each run read its hour as announced (the late record came after)
        for r in runs:
            assert r["state"] == "success", r
            read = api.xcom(reader, r["dag_run_id"], "read_hour")
            hour = hour_of(read["hour"])
            assert read["read"] == read["announced"] == counts.get(hour, 0), read

        # 7. The late record landed with step 5's slot: counted, and restated once by
        # lagsched_restatements on the table's restatements asset; the hour's own event stays one.
        restated_uri = typed_uri + "/restatements"
        wait_until(lambda: api.asset_events(restated_uri), 420, "the restatement of H-3")
        emitted_by = api.asset_events(restated_uri)[0]["source_run_id"]
        ended = next(r["data_interval_end"] for r in api.dag_runs(RESTATEMENTS) if r["dag_run_id"] == emitted_by)
        # the next run (every minute on the stack) restates nothing more
        wait_until(lambda: any(r["state"] == "success" and r["data_interval_start"] >= ended
                               for r in api.dag_runs(RESTATEMENTS)), 300, "the next restatement run")  # fmt: skip
        events = api.asset_events(restated_uri)
        assert len(events) == 1, events
        extra = events[0]["extra"]
        counts = plain_hours(kafka_config, typed, 2)
        assert counts[h3] == typed_counts[h3] + 1
        assert extra["restated"] is True and extra["cluster"] == cluster, extra
        assert list(extra["hours"]) == [key(h3)], extra
        assert extra["hours"][key(h3)]["late_records"] == 1 and extra["hours"][key(h3)]["rows"] == counts[h3], extra
        assert api.asset_events(shared_uri + "/restatements") == []
        assert [e["partition_key"] for e in api.asset_events(typed_uri)] == hourly
    finally:
        api.set_paused(RESTATEMENTS, True)
        api.set_paused(HOURS, True)
        for r in api.dag_runs(HOURS, limit=100):
            if r["state"] in ("queued", "running"):
                api.mark_run(HOURS, r["dag_run_id"], "failed")
        harness.stop_all()
        if saved is None:
            api.delete_variable("lagsched_clusters")
        else:
            api.set_variable("lagsched_clusters", saved)


def finished(api: AirflowAPI, dag_id: str) -> list[dict[str, Any]]:
    return [r for r in api.dag_runs(dag_id) if r["state"] in ("success", "failed")]


def kill_one_running_check(api: AirflowAPI, timeout_s: float = 300) -> tuple[str, int]:
    """SIGKILL the process of the first ``hour_complete`` attempt seen running; its (run id, map index)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in api.dag_runs(HOURS, limit=20):
            for ti in api.task_instances(HOURS, run["dag_run_id"]):
                if ti["task_id"] == "hour_complete" and ti["state"] == "running" and ti.get("pid"):
                    try:
                        os.kill(int(ti["pid"]), signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    return run["dag_run_id"], int(ti["map_index"])
        time.sleep(0.5)
    raise AssertionError(f"no hour_complete attempt was seen running within {timeout_s:.0f} s")
