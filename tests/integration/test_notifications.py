"""Notifications end to end: the lag monitor's and the evaluator's task bodies against the real broker,
MariaDB and Redis, sending through Airflow's own HttpNotifier (built from ``lagsched_notifiers``, its
Connection an ``AIRFLOW_CONN_*``) to a real HTTP server on 127.0.0.1.

What is pinned: exactly one message per finding however many runs see it, exactly one when it clears,
a receiver that fails is sent the same message on the next run (once it succeeds, never again), and a
broken notifier neither stops the others nor fails the task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_lag_measurement import produce, register, set_committed
from test_scaling import add_topic, rising_history
from test_task_errors import env, free_port  # noqa: F401 - env is a fixture

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.notified import NotifiedStore
from lagsched.airflow.tasks import run_evaluation, run_monitor
from lagsched.workflows.overrides import apply_override
from notify_support import HTTP, PAYLOAD, Receiver, webhook_connection

T0 = 1_790_000_000.0


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    r = Receiver()
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_TEST_WEBHOOK", webhook_connection(r.port))
    yield r
    r.close()


def notifiers(*extra: dict[str, Any], kinds: list[str] | None = None) -> str:
    webhook: dict[str, Any] = {
        "name": "webhook",
        "notifier": HTTP,
        "kwargs": {"http_conn_id": "lagsched_test_webhook", "endpoint": "/hooks/lagsched", "json": PAYLOAD},
    }
    if kinds:
        webhook["kinds"] = kinds
    return json.dumps([*extra, webhook])


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


SETTINGS = json.dumps({"defaults": {"stall_after_measurements": 2}})


def test_a_stopped_topic_is_sent_once_and_its_clearing_once(
    env: Any,  # noqa: F811 - the fixture
    receiver: Receiver,
    new_topic: Any,
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
) -> None:
    topic = new_topic(1)
    produce(kafka_config, topic, 0, 50)
    topic_id = register(db, cluster, topic, {0: 10})  # 40 behind, nobody consuming: stopped soon

    def measure(i: int) -> dict[str, Any]:
        return run_monitor(cluster, SETTINGS, now=at(T0 + 60 * i), raw_notifiers=notifiers(), context={})

    first = measure(0)
    assert first["notifications"] == {"notifiers": 1, "active": 0, "sent": [], "failed": []}
    stopped_at = next(i for i in range(1, 6) if measure(i)["stuck"])
    assert receiver.take() == [("new", f"stopped:{topic}")]
    (message,) = receiver.all
    assert message["path"] == "/hooks/lagsched"
    assert message["text"].startswith(f"lagsched {cluster}/{topic}: pipeline stopped: lag 40 and no committed offset")
    assert message["runbook"] == "docs/alerts.md#lagschedtopicstopped"
    for i in range(stopped_at + 1, stopped_at + 6):  # five more runs that see it: nothing more
        assert measure(i)["notifications"]["active"] == 1
    assert receiver.take() == []

    set_committed(db, topic_id, 0, 50)  # caught up: the pipeline is ok again
    summary = measure(stopped_at + 6)
    assert summary["stuck"] == []
    assert receiver.take() == [("cleared", f"stopped:{topic}")]
    for i in range(stopped_at + 7, stopped_at + 10):
        measure(i)
    assert receiver.take() == []
    assert NotifiedStore(env_redis(env), cluster).load() == {}


def env_redis(_: Any) -> Any:
    """A client on the test's Redis DB (the one the Connection ``lagsched_redis`` points at)."""
    import os

    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import redis_params

    return redis_client(redis_params(), db=int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15")))


def test_a_failed_send_is_retried_next_run_and_a_broken_notifier_stops_nothing(
    env: Any,  # noqa: F811 - the fixture
    receiver: Receiver,
    new_topic: Any,
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dead = free_port()  # nothing listens there: every send to it fails
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_TEST_DEAD", webhook_connection(dead, password="hunter2-secret"))
    broken = {"name": "dead", "notifier": HTTP, "kwargs": {"http_conn_id": "lagsched_test_dead", "json": PAYLOAD}}
    raw = notifiers(broken)
    topic = new_topic(1)
    produce(kafka_config, topic, 0, 50)
    register(db, cluster, topic, {0: 10})

    def measure(i: int) -> dict[str, Any]:
        return run_monitor(cluster, SETTINGS, now=at(T0 + 60 * i), raw_notifiers=raw, context={})

    receiver.fail_next = 1  # the webhook's first message is refused (500)
    i = 0
    while not (first := measure(i))["stuck"]:
        i += 1
        assert i < 6
    failed = first["notifications"]
    assert [(f["notifier"], f["event"]) for f in failed["failed"]] == [("dead", "new"), ("webhook", "new")]
    assert failed["sent"] == []
    assert receiver.refused == 1 and receiver.take() == []
    assert "hunter2-secret" not in json.dumps(failed) and "hunter2-secret" not in caplog.text
    retried = measure(i + 1)["notifications"]
    assert [(s["notifier"], s["event"]) for s in retried["sent"]] == [("webhook", "new")]
    assert [f["notifier"] for f in retried["failed"]] == ["dead"]  # retried every run, never marked sent
    assert receiver.take() == [("new", f"stopped:{topic}")]
    for j in range(i + 2, i + 7):
        measure(j)
    assert receiver.take() == []  # exactly one, after the retry
    assert set(NotifiedStore(env_redis(env), cluster).load()) == {"webhook"}


def test_the_evaluator_sends_lag_at_max_workers_and_an_expiring_override_once(
    env: Any,  # noqa: F811 - the fixture
    receiver: Receiver,
    db: Any,
    cluster: str,
) -> None:
    redis = env_redis(env)
    now = at(T0)
    add_topic(db, cluster, "orders", workers=4, partitions=4)  # at its ceiling: 4 partitions
    rising_history(redis, cluster, "orders", end=T0)  # 200k rising by 10k a minute
    add_topic(db, cluster, "payments", workers=2, partitions=12)
    apply_override(db, redis, cluster=cluster, topic="payments", linker_workers=6, duration_s=1800.0,
                   reason="sale", created_by="ana", now=now - timedelta(minutes=20))  # fmt: skip
    settings = json.dumps({"defaults": {"evaluate_every": 1}})

    def evaluate(t: datetime, run: str) -> dict[str, Any]:
        return run_evaluation(cluster, settings, evaluation_id=run, now=t, raw_notifiers=notifiers(), context={})

    summary = evaluate(now, "r1")
    assert summary["notifications"]["failed"] == []
    got = receiver.take()
    assert [(e, k.rsplit(":", 1)[0] if k.startswith("override") else k) for e, k in sorted(got)] == [
        ("new", "lag_at_max_workers:orders"),
        ("new", "override_expiring:payments"),
    ]
    evaluate(now + timedelta(seconds=1), "r2")  # orders is not due (no new measurement); payments unchanged
    assert receiver.take() == []
    # Ten minutes on the override has ended, and a new measurement finds orders' lag fallen.
    later = now + timedelta(minutes=11)
    LagStore(redis, cluster).add_lag_records({"orders": LagRecord(later.timestamp(), lag=100)})
    evaluate(later, "r3")
    assert sorted((e, k.split(":")[0]) for e, k in receiver.take()) == [
        ("cleared", "lag_at_max_workers"),
        ("cleared", "override_expiring"),
    ]
    evaluate(later + timedelta(seconds=1), "r4")
    assert receiver.take() == []


def test_records_lost_are_sent_once_and_cleared_15_minutes_after_the_last_loss(
    env: Any,  # noqa: F811 - the fixture
    receiver: Receiver,
    new_topic: Any,
    kafka_config: dict[str, Any],
    db: Any,
    cluster: str,
) -> None:
    from lagsched.adapters.gaps import RetentionGap, record_gap

    topic = new_topic(1)
    produce(kafka_config, topic, 0, 20)
    topic_id = register(db, cluster, topic, {0: 20})  # caught up: never stalled
    raw = notifiers(kinds=["lost_records"])

    def measure(t: float) -> dict[str, Any]:
        return run_monitor(cluster, None, now=at(T0 + t), raw_notifiers=raw, context={})

    measure(0)
    record_gap(db, RetentionGap(topic_id, 0, 0, 5), "slot-a")  # a slot found 5 records deleted unread
    assert measure(60)["lost"] == {topic: 5}
    assert receiver.take() == [("new", f"lost_records:{topic}")]
    for t in range(120, 900, 120):  # still within 15 minutes of the measurement before the loss
        measure(t)
    assert receiver.take() == []
    measure(960)  # no new loss since: the window holds only 5s
    assert receiver.take() == [("cleared", f"lost_records:{topic}")]
    measure(1020)
    assert receiver.take() == []
