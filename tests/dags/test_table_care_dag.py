"""The table care DAG's planning task, run in-process with dag.test().

The Spark job itself is marked success here (``mark_success_pattern``); it runs for real in
tests/integration/test_table_care.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

# `env` is test_lag_dags's fixture (the DAGs' Connections on this test's database).
from test_lag_dags import env, load_dag, state  # noqa: F401


def plan_of(run: Any) -> list[dict[str, Any]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids="plan_tables")
        row = session.scalars(query).first()
        assert row is not None, "plan_tables pushed no XCom"
        return list(XComModel.deserialize_value(row))


def test_one_job_per_cluster_table_with_its_sink_and_the_settings(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    clusters = {"eu": {"sink": {"warehouse": "s3a://lake/eu", "table": "events"}}, "us": {}}
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps(clusters))
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_TABLE_CARE", json.dumps({"target_file_mb": 64}))

    run = load_dag("lagsched_table_care").test(
        run_conf={"now": "2026-11-25T10:00:00+00:00"}, mark_success_pattern="^care$"
    )

    assert state(run) == "success", run.state
    plan = plan_of(run)
    eu, us = (p["application_args"] for p in plan)
    assert eu[:2] == ["--cluster", "eu"] and us[:2] == ["--cluster", "us"]
    assert json.loads(eu[eu.index("--settings") + 1])["target_file_mb"] == 64
    assert eu[eu.index("--warehouse") + 1] == "s3a://lake/eu" and eu[eu.index("--table") + 1] == "events"
    assert "--warehouse" not in us  # the job's default warehouse
    assert eu[-2:] == ["--now", "2026-11-25T10:00:00+00:00"]


def test_a_malformed_settings_variable_fails_the_plan_before_any_job(
    env: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_TABLE_CARE", json.dumps({"snapshots_to_keep": 0}))

    run = load_dag("lagsched_table_care").test(mark_success_pattern="^care$")

    assert state(run) == "failed"
    from airflow.utils.session import create_session

    with create_session() as session:
        states = {ti.task_id: ti.state for ti in run.get_task_instances(session=session)}
    assert states["plan_tables"] == "failed" and states.get("care") != "success", states


def test_the_care_tasks_callbacks_count_each_attempts_outcome_in_redis(
    env: Any,  # noqa: F811
    redis_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What LagschedTableCareFailing reads: the care task's callbacks count its attempts in the real
    Redis of the task's Connection (the job itself cannot: a job that dies with its JVM says nothing)."""
    import uuid
    from types import SimpleNamespace

    from lagsched.adapters.alert_figures import read_table_care
    from lagsched.airflow.callbacks import table_care_failed, table_care_succeeded

    care = load_dag("lagsched_table_care").get_task("care")

    def callbacks(hook: Any) -> list[Any]:
        return hook if isinstance(hook, list) else [hook]

    assert table_care_succeeded in callbacks(care.on_success_callback)
    assert table_care_failed in callbacks(care.on_retry_callback)
    assert table_care_failed in callbacks(care.on_failure_callback)

    cluster = f"c-{uuid.uuid4().hex[:8]}"
    task = SimpleNamespace(application_args=["--cluster", cluster, "--warehouse", "s3a://lake/x"])
    table_care_failed({"task": task})  # the first attempt failed, Airflow retries ...
    table_care_succeeded({"task": task})  # ... and the retry succeeded
    table_care_failed({"task": task})  # the next hour's attempt failed
    runs = {r.outcome: r for r in read_table_care(redis_client, cluster)}
    assert (runs["ok"].runs, runs["failed"].runs) == (1, 2)
    assert runs["failed"].last_at is not None and runs["ok"].last_at is not None
    assert runs["failed"].last_at >= runs["ok"].last_at

    # A context without a cluster (or Redis down) never fails the task: the log says what was not counted.
    with caplog.at_level("WARNING", logger="lagsched.airflow.callbacks"):
        table_care_succeeded({"task": SimpleNamespace(application_args=["--now", "x"])})
    assert "could not count this table care run (ok)" in caplog.text and "--cluster" in caplog.text
