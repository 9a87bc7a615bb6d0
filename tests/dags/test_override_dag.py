"""The override DAG with dag.test() against the real MariaDB and Redis: the form applied at once,
a bad value failing the run with the field named and changing nothing, and an expired override
gone from the evaluator's bounds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from test_lag_dags import add_topic, decision_rows, env, load_dag, state, workers_of

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.overrides import active_overrides

__all__ = ["env"]  # the fixture, shared with the lag DAGs' tests


def form(cluster: str, **change: Any) -> dict[str, Any]:
    return {
        "topic": "orders",
        "linker_workers": 8,
        "duration": "2h",
        "reason": "Black Friday",
        "cluster": cluster,
    } | change


def override_count(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM scaling_overrides")
        (n,) = cur.fetchone()
    conn.commit()
    return int(n)


def ti_of(run: Any, task_id: str) -> Any:
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = run.get_task_instance(task_id, session=session)
        return str(ti.state).rsplit(".", 1)[-1].lower(), ti.try_number


def test_the_form_pins_the_topic_at_once_and_records_who_and_why(env: Any, cluster: str) -> None:
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)})

    run = load_dag("lagsched_override").test(run_conf=form(cluster))

    assert state(run) == "success", run.state
    assert workers_of(env, topic_id) == 8
    ((evaluation_id, old, new, rule),) = decision_rows(env, topic_id)
    assert (old, new, rule) == (2, 8, "override")
    (active,) = active_overrides(env, cluster, _utcnow())
    assert evaluation_id == f"override-{active.id}"
    assert (active.linker_workers, active.reason, active.request_id) == (8, "Black Friday", run.run_id)
    assert active.created_by  # the triggering user ("dag_test" under dag.test())
    assert 7100 < (active.expires_at - active.created_at).total_seconds() <= 7200


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"linker_workers": 13}, "invalid override: linker_workers = 13: must be at most the 12 partitions"),
        ({"topic": "ordrs"}, "invalid override: topic = 'ordrs': must be an enabled topic of cluster"),
        ({"duration": "8d"}, "invalid override: duration = '8d'"),
        ({"reason": "   "}, "invalid override: reason = '   ': must say why"),
    ],
)
def test_a_bad_value_fails_the_run_naming_the_field_and_changes_nothing(
    env: Any, cluster: str, capfd: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)})

    run = load_dag("lagsched_override").test(run_conf=form(cluster, **change))

    assert state(run) == "failed", run.state
    out, err = capfd.readouterr()
    assert f"AirflowFailException: {message}" in out + err, (out + err)[-3000:]
    assert ti_of(run, "apply_override") == ("failed", 1)  # a bad value is not retried
    assert (workers_of(env, topic_id), decision_rows(env, topic_id), override_count(env)) == (2, [], 0)


def test_an_expired_override_no_longer_bounds_the_evaluator(
    env: Any, redis_client: Any, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic_id = add_topic(env, cluster, "orders", {p: 0 for p in range(12)}, workers=2)
    monkeypatch.setenv(
        "AIRFLOW_VAR_LAGSCHED_SETTINGS", json.dumps({"defaults": {"evaluate_every": 1, "cooldown_s": 0}})
    )
    evaluate = load_dag("lagsched_scaling_evaluator")
    assert state(load_dag("lagsched_override").test(run_conf=form(cluster, linker_workers=8))) == "success"
    add_history = _history(redis_client, cluster)

    add_history(lag=100)  # a low lag: the evaluator would scale 8 down at once, but the override holds
    assert state(evaluate.test(run_conf={"cluster": cluster})) == "success"
    assert workers_of(env, topic_id) == 8
    assert [r[3] for r in decision_rows(env, topic_id)] == ["override"]

    # Three hours pass: the evaluator runs at the wall clock, so the override and its decision move back.
    with env.cursor() as cur:
        cur.execute(
            "UPDATE scaling_overrides SET created_at = created_at - INTERVAL 3 HOUR,"
            " expires_at = expires_at - INTERVAL 3 HOUR"
        )
        cur.execute("UPDATE scaling_decisions SET decided_at = decided_at - INTERVAL 3 HOUR")
    env.commit()
    assert active_overrides(env, cluster, _utcnow()) == []
    add_history(lag=100)
    assert state(evaluate.test(run_conf={"cluster": cluster})) == "success"

    assert workers_of(env, topic_id) < 8
    rules = [r[3] for r in decision_rows(env, topic_id)]
    assert rules == ["override", "override_expired"]


def _utcnow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(tz=UTC)


def _history(redis_client: Any, cluster: str) -> Callable[..., None]:
    def add(lag: int) -> None:
        """Six fresh measurements a minute apart, the newest now (the DAG evaluates at the wall clock)."""
        now = time.time()
        store = LagStore(redis_client, cluster)
        for i in range(6):
            store.add_lag_records({"orders": LagRecord(now - 60 * (5 - i), lag=lag)})

    return add
