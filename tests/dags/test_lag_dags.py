"""The lag monitor and scaling evaluator DAGs run in-process with dag.test() against the real stack."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.mysql import connect

DAGS = Path(__file__).parents[2] / "dags"


def load_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


def state(run: Any) -> str:
    return str(run.state).rsplit(".", 1)[-1].lower()


@pytest.fixture
def env(mysql_db: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The DAGs' MySQL Connection points at this test's database, Redis at the test DB (flushed)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_MYSQL",
        json.dumps({"conn_type": "mysql", "host": mysql_db.host, "port": mysql_db.port,
                    "login": mysql_db.user, "password": mysql_db.password, "schema": mysql_db.database}),
    )  # fmt: skip
    p = redis_client.connection_pool.connection_kwargs
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_REDIS",
        json.dumps({"conn_type": "redis", "host": p["host"], "port": p["port"], "extra": {"db": p["db"]}}),
    )
    monkeypatch.delenv("AIRFLOW_VAR_LAGSCHED_SETTINGS", raising=False)
    conn = connect(mysql_db)
    yield conn
    conn.close()


def add_topic(conn: Any, cluster: str, name: str, committed: dict[int, int | None], workers: int = 2) -> str:
    topic_id = str(uuid.uuid4())
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms, linker_workers)"
            " VALUES (%s, %s, %s, %s, 3600000, %s)",
            (topic_id, cluster, name, len(committed), workers),
        )
        for p, off in committed.items():
            cur.execute(
                "INSERT INTO topic_partitions (topic_id, partition_id, committed_offset) VALUES (%s, %s, %s)",
                (topic_id, p, off),
            )
    conn.commit()
    return topic_id


def workers_of(conn: Any, topic_id: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT linker_workers FROM topics WHERE topic_id = %s", (topic_id,))
        (w,) = cur.fetchone()
    conn.commit()
    return int(w)


def decision_rows(conn: Any, topic_id: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT evaluation_id, previous_linker_workers, linker_workers, rule FROM scaling_decisions"
            " WHERE topic_id = %s",
            (topic_id,),
        )
        rows = list(cur.fetchall())
    conn.commit()
    return rows


def task_state(run: Any, task_id: str) -> str:
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = run.get_task_instance(task_id, session=session)
        return str(ti.state).rsplit(".", 1)[-1].lower()


def asset_events(run: Any) -> list[Any]:
    """The asset events the run's tasks emitted (with their asset loaded)."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    with create_session() as session:
        query = (
            select(AssetEvent)
            .options(joinedload(AssetEvent.asset))
            .where(AssetEvent.source_dag_id == run.dag_id, AssetEvent.source_run_id == run.run_id)
        )
        events = list(session.scalars(query))
        session.expunge_all()
        return events


def test_lag_monitor_dag_measures_and_stores(
    env: Any, redis_client: Any, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic = new_topic(2)
    producer = Producer(kafka_config)
    for i in range(30):
        producer.produce(topic, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    add_topic(env, cluster, topic, {0: 5, 1: None})  # lag (15 - 5) + 15 (earliest) = 25

    run = load_dag("lagsched_lag_monitor").test(run_conf={"cluster": cluster})

    assert state(run) == "success", run.state
    (rec,) = LagStore(redis_client, cluster).read_lag_records([topic])[topic]
    assert (rec.lag, rec.lost) == (25, 0)
    assert abs(rec.at - time.time()) < 120


def test_a_scheduled_measurement_waits_for_measure_every_s_and_a_triggered_one_does_not(
    env: Any, redis_client: Any, new_topic: Callable[..., str]
) -> None:
    from lagsched.airflow.tasks import run_monitor

    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic = new_topic(1)
    add_topic(env, cluster, topic, {0: None})
    settings = {"measure_every_s": 300}
    store = LagStore(redis_client, cluster)
    t0 = datetime.now(tz=UTC).timestamp()  # whole microseconds: the datetime the task takes reads back as t0

    def at(t: float) -> datetime:
        return datetime.fromtimestamp(t, tz=UTC)

    def scheduled(t: float) -> dict[str, Any]:
        return run_monitor(cluster, settings, now=at(t), when_due=True)

    assert "skipped" not in scheduled(t0)  # never measured: measures
    assert store.last_measured() == t0
    skipped = scheduled(t0 + 60)  # the next minute's run
    assert skipped == {"cluster": cluster, "skipped": "measured 60 s ago; measure_every_s is 300"}
    assert [r.at for r in store.read_lag_records([topic])[topic]] == [t0]  # nothing stored
    assert "skipped" not in run_monitor(cluster, settings, now=at(t0 + 120))  # triggered by hand: at once
    assert "skipped" in scheduled(t0 + 120 + 240)  # 240 s after that one
    assert "skipped" not in scheduled(t0 + 120 + 298)  # the fifth minute, started 2 s early
    assert [r.at for r in store.read_lag_records([topic])[topic]] == [t0, t0 + 120, t0 + 418]


def test_scaling_evaluator_dag_applies_and_records(
    env: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)})
    now = time.time()  # the DAG evaluates at the wall clock: the history must be fresh
    store = LagStore(redis_client, cluster)
    for i in range(6):
        store.add_lag_records({"orders": LagRecord(now - 60 * (5 - i), lag=200_000 + 10_000 * i)})

    # Variables reach the task through Airflow's environment secrets backend (AIRFLOW_VAR_*).
    monkeypatch.setenv(
        "AIRFLOW_VAR_LAGSCHED_SETTINGS", json.dumps({"defaults": {"evaluate_every": 1, "cooldown_s": 0}})
    )
    run = load_dag("lagsched_scaling_evaluator").test(run_conf={"cluster": cluster})

    assert state(run) == "success", run.state
    assert workers_of(env, topic_id) == 6  # short retention (1 h): hevo steps up by 4
    ((evaluation_id, old, new, rule),) = decision_rows(env, topic_id)
    assert (old, new, rule) == (2, 6, "scale_up_rising")
    assert evaluation_id == run.run_id
    # The change updated the asset the consume DAG runs on, naming the change.
    assert task_state(run, "announce_changes") == "success"
    (event,) = asset_events(run)
    assert event.asset.uri == "lagsched://scaling/workers_changed"
    assert event.extra["changes"] == [
        {"cluster": cluster, "topic": "orders", "previous_linker_workers": 2, "linker_workers": 6}
    ]
    # Reading the mapped results raised no error line in the task log: iterating them would ask for
    # the item past the last one, a 404 that Airflow's client logs as an error (apache/airflow#73175).
    out, err = capfd.readouterr()
    assert "XCom not found" not in out + err


def test_an_evaluation_that_changes_nothing_starts_no_consume_run(env: Any, redis_client: Any) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic_id = add_topic(env, cluster, "quiet", {0: 0}, workers=1)  # no lag and one worker: nothing to do

    run = load_dag("lagsched_scaling_evaluator").test(run_conf={"cluster": cluster})

    assert state(run) == "success", run.state
    assert workers_of(env, topic_id) == 1
    assert task_state(run, "announce_changes") == "skipped"
    assert asset_events(run) == []


def test_malformed_variable_fails_the_evaluator_dag_and_changes_nothing(
    env: Any, redis_client: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)})
    now = time.time()
    store = LagStore(redis_client, cluster)
    for i in range(6):
        store.add_lag_records({"orders": LagRecord(now - 60 * (5 - i), lag=200_000 + 10_000 * i)})
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_SETTINGS", json.dumps({"defaults": {"max_lag": "lots"}}))

    run = load_dag("lagsched_scaling_evaluator").test(run_conf={"cluster": cluster})

    assert state(run) == "failed", run.state
    # dag.test() writes the task log (structlog) to the process output; the failure is not retried.
    out, err = capfd.readouterr()
    log = out + err
    assert "AirflowFailException: invalid lagsched settings: defaults.max_lag = 'lots'" in log, log[-3000:]
    from airflow.utils.session import create_session

    with create_session() as session:
        # Mapped over the configured clusters: one cluster, map index 0.
        ti = run.get_task_instance("evaluate_and_apply", map_index=0, session=session)
        assert (str(ti.state).rsplit(".", 1)[-1].lower(), ti.try_number) == ("failed", 1)  # no retry of a bad config
    assert workers_of(env, topic_id) == 2
    assert decision_rows(env, topic_id) == []


def test_scale_up_counts_on_the_slots_the_consume_dag_can_start(
    env: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot is live, but the consume DAG may run 5: the step up from 2 stops at 5, not at 1."""
    from datetime import UTC, datetime

    from lagsched.adapters.slots import SlotRegistry, slot_id_for

    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)})
    now = time.time()
    store = LagStore(redis_client, cluster)
    for i in range(6):
        store.add_lag_records({"orders": LagRecord(now - 60 * (5 - i), lag=200_000 + 10_000 * i)})
    SlotRegistry(redis_client, cluster=cluster).heartbeat(slot_id_for(f"{cluster}-slot-1"), datetime.now(UTC), 60)
    monkeypatch.setenv(
        "AIRFLOW_VAR_LAGSCHED_SETTINGS", json.dumps({"defaults": {"evaluate_every": 1, "cooldown_s": 0}})
    )
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"max_slots": 5}}))

    run = load_dag("lagsched_scaling_evaluator").test(run_conf={"cluster": cluster})

    assert state(run) == "success", run.state
    assert workers_of(env, topic_id) == 5  # hevo's step of 4 would give 6; the live slot alone, 1


def test_the_evaluator_dag_tells_the_notifiers_once_with_the_task_s_context(
    env: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from lagsched.workflows.overrides import apply_override
    from notify_support import HTTP, Receiver, webhook_connection

    cluster = f"c-{uuid.uuid4().hex[:8]}"
    add_topic(env, cluster, "orders", {p: 0 for p in range(4)})
    # Started 20 minutes ago for 30: the DAG, evaluating at the wall clock, finds it ending in 10.
    apply_override(env, redis_client, cluster=cluster, topic="orders", linker_workers=3, duration_s=1800.0,
                   reason="sale", created_by="ana", now=datetime.now(tz=UTC) - timedelta(minutes=20))  # fmt: skip
    receiver = Receiver()
    try:
        monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_TEST_WEBHOOK", webhook_connection(receiver.port))
        payload = {"event": "{{ finding.event }}", "key": "{{ finding.key }}", "dag": "{{ dag.dag_id }}",
                   "run": "{{ run_id }}", "text": "{{ finding.summary }}"}  # fmt: skip
        entry = {"notifier": HTTP, "kwargs": {"http_conn_id": "lagsched_test_webhook", "json": payload}}
        monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_NOTIFIERS", json.dumps([entry]))
        dag = load_dag("lagsched_scaling_evaluator")
        first = dag.test(run_conf={"cluster": cluster})
        second = dag.test(run_conf={"cluster": cluster})
    finally:
        receiver.close()

    assert (state(first), state(second)) == ("success", "success")
    (message,) = receiver.all  # the second run sent nothing more
    assert message["event"] == "new" and message["key"].startswith("override_expiring:orders:")
    assert (message["dag"], message["run"]) == ("lagsched_scaling_evaluator", first.run_id)
    assert message["text"] == f"lagsched {cluster}/orders: manual override expiring"
