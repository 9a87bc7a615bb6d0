"""The topic sync DAG with a cluster's topic filter (Variable lagsched_clusters), via dag.test()."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

# `env` is test_lag_dags's fixture (the DAGs' MySQL and Redis Connections on this test's database and DB).
from test_lag_dags import env, load_dag, state  # noqa: F401


def registered(conn: Any, cluster: str) -> dict[str, bool]:
    with conn.cursor() as cur:
        cur.execute("SELECT name, enabled FROM topics WHERE cluster = %s", (cluster,))
        rows = {str(name): bool(enabled) for name, enabled in cur.fetchall()}
    conn.commit()
    return rows


def test_filter_registers_only_managed_topics_and_disables_what_leaves_it(
    env: Any,  # noqa: F811
    new_topic: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag = uuid.uuid4().hex[:8]
    cluster = f"c-{tag}"
    orders = new_topic(2, prefix=f"sync-{tag}-orders")
    clicks = new_topic(1, prefix=f"sync-{tag}-clicks")
    other = new_topic(1, prefix=f"other-{tag}")
    dag = load_dag("lagsched_topic_sync")

    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"topic_pattern": f"sync-{tag}-.*"}}))
    assert state(dag.test()) == "success"
    assert registered(env, cluster) == {orders: True, clicks: True}  # `other` is not the cluster's

    # Narrowed to one named topic: clicks leaves the filter and is disabled (its row is kept).
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"topics": [orders]}}))
    assert state(dag.test()) == "success"
    assert registered(env, cluster) == {orders: True, clicks: False}

    # Widened again: the same Kafka topic comes back enabled, still one row.
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"topics": [orders, clicks]}}))
    assert state(dag.test()) == "success"
    assert registered(env, cluster) == {orders: True, clicks: True}
    assert other not in registered(env, cluster)


def test_malformed_clusters_variable_fails_at_once_naming_the_field(
    env: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({"c": {"max_slots": 0}}))

    run = load_dag("lagsched_topic_sync").test()

    assert state(run) == "failed", run.state
    out, err = capfd.readouterr()
    assert "invalid lagsched_clusters: c.max_slots = 0: Input should be greater than or equal to 1" in out + err
    assert "(allowed: an integer from 1 to 1,000)" in out + err
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = run.get_task_instance("clusters", session=session)
        assert ti.try_number == 1  # a bad Variable is not retried
