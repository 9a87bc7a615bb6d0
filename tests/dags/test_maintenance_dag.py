"""The maintenance DAG, run in-process with dag.test() against the real stack."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer

# `env` is test_lag_dags's fixture (the DAGs' MySQL and Redis Connections on this test's database and DB).
from test_lag_dags import add_topic, env, load_dag, state  # noqa: F401

from lagsched.adapters.gaps import RetentionGap, record_gap
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.slots import SlotRegistry, slot_id_for


def test_maintenance_prunes_trims_and_reports(
    env: Any,  # noqa: F811
    redis_client: Any,
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic = new_topic(2)
    producer = Producer(kafka_config)
    for i in range(10):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    # Partition 0 has 5 records; a committed offset of 50 is 45 beyond its head: an anomaly.
    topic_id = add_topic(env, cluster, topic, {0: 50, 1: 5})
    gone_id = add_topic(env, cluster, "gone", {0: 0})
    with env.cursor() as cur:
        cur.execute("UPDATE topics SET enabled = FALSE WHERE topic_id = %s", (gone_id,))
    env.commit()
    slot = slot_id_for("worker-1")
    record_gap(env, RetentionGap(topic_id, 1, 0, 3), slot)
    now = time.time()
    store = LagStore(redis_client, cluster)
    for name in (topic, "gone"):
        store.add_lag_records({name: LagRecord(now - 30, lag=1)})
        store.mark_evaluated(name, now - 30)
    other = LagStore(redis_client, "other-cluster")
    other.add_lag_records({"gone": LagRecord(now - 30, lag=1)})
    registry = SlotRegistry(redis_client, cluster=cluster)
    registry.heartbeat(slot, datetime.fromtimestamp(now - 7200, tz=UTC), 15)  # dead for two hours
    live = slot_id_for("worker-2")
    registry.heartbeat(live, datetime.fromtimestamp(now, tz=UTC), 15)
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {}}))
    caplog.set_level(logging.INFO, logger="lagsched")

    run = load_dag("lagsched_maintenance").test()

    assert state(run) == "success", run.state
    assert registry.last_seen(slot) is None and registry.last_seen(live) is not None
    assert store.read_lag_records([topic, "gone"]) == {topic: store.read_lag_records([topic])[topic], "gone": ()}
    assert store.read_lag_records([topic])[topic] != ()
    assert store.last_evaluated(["gone"]) == {"gone": None}
    assert other.read_lag_records(["gone"])["gone"] != ()  # another cluster's history is not touched
    report = xcom_of(run, "maintain")
    (c,) = report["clusters"]
    assert (report["slots_pruned"], c["redis_keys_deleted"]) == (1, 2)  # gone's lag record and evaluation mark
    assert c["retention_losses"] == {topic: {"1": 3}}
    assert c["anomalies"] == {topic: {"0": {"committed": 50, "latest": 5, "ahead": 45}}}
    assert c["lost_pending"] == {}
    log = caplog.text
    assert "1 dead slot(s) pruned" in log, log[-3000:]
    assert f"RETENTION LOSS skipped by the slots (deleted before they were read): {topic}: 3 record(s) (p1: 3)" in log
    assert f"ANOMALY {topic}[0]: committed offset 50 is 45 beyond the high watermark 5" in log


def xcom_of(run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id)).first()
        assert row is not None, f"{task_id} pushed no XCom"
        return XComModel.deserialize_value(row)
