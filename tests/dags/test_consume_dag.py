"""The consume DAG's planning task, run in-process with dag.test() against the real stack's MySQL.

The Spark slots themselves are marked success here (``mark_success_pattern``): they run for real in
tests/integration/test_consumer*.py and, through the scheduler, in tests/e2e/test_airflow_loop.py.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

# `env` is test_lag_dags's fixture (the DAGs' MySQL and Redis Connections on this test's database and DB).
from test_lag_dags import add_topic, env, load_dag, state  # noqa: F401

from lagsched.adapters.alert_figures import read_planned_slots


def consume_tasks(run: Any) -> list[Any]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return sorted(
            (ti for ti in run.get_task_instances(session=session) if ti.task_id == "consume"),
            key=lambda ti: ti.map_index,
        )


def plan_of(run: Any) -> list[dict[str, Any]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids="plan_slots")
        row = session.scalars(query).first()
        assert row is not None, "plan_slots pushed no XCom"
        return list(XComModel.deserialize_value(row))


def test_plan_runs_one_slot_per_worker_of_the_busiest_topic(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    add_topic(env, cluster, "hot", {p: 0 for p in range(4)}, workers=3)
    add_topic(env, cluster, "cold", {0: 0}, workers=1)
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"max_slots": 4}}))

    run = load_dag("lagsched_consume").test(run_conf={"budget_s": 60}, mark_success_pattern="^consume$")

    assert state(run) == "success", run.state
    plan = plan_of(run)
    assert [p["application_args"][:4] for p in plan] == [
        ["--slot", f"{cluster}-slot-{n}", "--cluster", cluster] for n in (1, 2, 3)
    ]
    assert all(p["kafka_conn_id"] == "lagsched_kafka" for p in plan)
    assert plan[0]["application_args"][4:] == [
        "--slot-number", "1", "--max-slots", "4", "--budget-s", "60",
        # The cluster's default commit cadence.
        "--commit-interval-s", "30", "--commit-max-records", "10000000", "--commit-max-bytes", "1073741824",
    ]  # fmt: skip
    assert [ti.map_index for ti in consume_tasks(run)] == [0, 1, 2]


def test_plan_starts_only_the_slots_not_running_with_the_clusters_budget(
    env: Any,  # noqa: F811
    redis_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lagsched.adapters.slots import SlotLock, slot_id_for

    cluster = f"c-{uuid.uuid4().hex[:8]}"
    add_topic(env, cluster, "hot", {p: 0 for p in range(4)}, workers=3)
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"slot_budget_s": 900}}))
    # Slot 2 runs (its process holds the lock); slot 4 too, though only 3 are needed.
    lock = SlotLock(redis_client)
    for n in (2, 4):
        assert lock.acquire(slot_id_for(f"{cluster}-slot-{n}"), f"test:{n}", 60) is None

    run = load_dag("lagsched_consume").test(mark_success_pattern="^consume$")

    assert state(run) == "success", run.state
    plan = plan_of(run)
    assert [p["application_args"][1] for p in plan] == [f"{cluster}-slot-1", f"{cluster}-slot-3"]
    assert all(p["application_args"][8:10] == ["--budget-s", "900"] for p in plan), plan
    # The plan the alert compares live slots with: the 3 needed, started or already running (not 4).
    assert read_planned_slots(redis_client, cluster) == 3

    # Every needed slot running: the run starts nothing.
    for n in (1, 3):
        assert lock.acquire(slot_id_for(f"{cluster}-slot-{n}"), f"test:{n}", 60) is None
    run = load_dag("lagsched_consume").test(mark_success_pattern="^consume$")
    assert state(run) == "success", run.state
    assert plan_of(run) == []


def test_plan_is_capped_by_max_slots_and_empty_without_topics(
    env: Any,  # noqa: F811
    redis_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy, idle = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    add_topic(env, busy, "hot", {p: 0 for p in range(8)}, workers=6)
    monkeypatch.setenv(
        "AIRFLOW_VAR_LAGSCHED_CLUSTERS",
        json.dumps({busy: {"max_slots": 2, "kafka_conn_id": "lagsched_kafka_busy"}, idle: {}}),
    )

    run = load_dag("lagsched_consume").test(mark_success_pattern="^consume$")

    assert state(run) == "success", run.state
    plan = plan_of(run)
    assert [p["application_args"][1] for p in plan] == [f"{busy}-slot-1", f"{busy}-slot-2"]
    assert {p["kafka_conn_id"] for p in plan} == {"lagsched_kafka_busy"}
    assert (read_planned_slots(redis_client, busy), read_planned_slots(redis_client, idle)) == (2, 0)

    # Only the idle cluster: nothing to consume, the mapped task has no instance to run.
    run = load_dag("lagsched_consume").test(run_conf={"cluster": idle}, mark_success_pattern="^consume$")
    assert state(run) == "success", run.state
    assert plan_of(run) == []
