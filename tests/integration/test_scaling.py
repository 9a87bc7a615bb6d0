"""The scaling service on real MariaDB and Redis: apply, record, announce, idempotent, bad config."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.redis_store import SCALING_CHANNEL
from lagsched.core.config import parse_settings
from lagsched.core.errors import ConfigError
from lagsched.core.evaluator import Decision
from lagsched.core.registry import TopicRow
from lagsched.workflows.scaling import _apply, effective_config, evaluate_cluster

NOW = 1_790_000_000.0


def at(t: float) -> datetime:
    """Epoch seconds as the aware datetime the workflows take."""
    return datetime.fromtimestamp(t, tz=UTC)


SETTINGS = {"defaults": {"evaluate_every": 1, "cooldown_s": 0}}


class OwnMessages:
    """lagsched:scaling as one test sees it: its own cluster's messages (its sentinels carry it too).

    A channel is the whole Redis server's, whatever the DB, and tests on other xdist workers
    publish their clusters' changes on it too; another cluster's message reads as no message.
    """

    def __init__(self, pubsub: Any, cluster: str) -> None:
        self.pubsub, self.cluster = pubsub, cluster

    def get_message(self, timeout: float) -> dict[str, Any] | None:
        m = self.pubsub.get_message(timeout=timeout)
        if m is not None and m["type"] == "message" and json.loads(m["data"]).get("cluster") != self.cluster:
            return None
        return m  # type: ignore[no-any-return]


def subscribe(redis_client: Any, cluster: str) -> tuple[Any, OwnMessages]:
    """Subscribed to lagsched:scaling before anything is published: (the pubsub, its own messages)."""
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(SCALING_CHANNEL)
    deadline = time.monotonic() + 5
    while redis_client.pubsub_numsub(SCALING_CHANNEL)[0][1] < 1 and time.monotonic() < deadline:
        pubsub.get_message(timeout=0.1)
    return pubsub, OwnMessages(pubsub, cluster)


@pytest.fixture
def subscriber(redis_client: Any, cluster: str) -> Iterator[OwnMessages]:
    pubsub, own = subscribe(redis_client, cluster)
    yield own
    pubsub.close()


def messages(pubsub: Any, wait_s: float = 1.0) -> list[dict[str, Any]]:
    out = []
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        m = pubsub.get_message(timeout=0.1)
        if m is not None and m["type"] == "message":
            out.append(json.loads(m["data"]))
    return out


def nothing_published(pubsub: Any, redis_client: Any) -> bool:
    """True when nothing was published before now: a sentinel published now is the next message.

    Redis delivers one channel's messages in publish order, so waiting for our own sentinel proves
    that no earlier message is still on its way, however slow the machine (no fixed wait).
    """
    sentinel = {"sentinel": uuid.uuid4().hex, "cluster": pubsub.cluster}
    redis_client.publish(SCALING_CHANNEL, json.dumps(sentinel))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = pubsub.get_message(timeout=1.0)
        if m is not None and m["type"] == "message":
            return bool(json.loads(m["data"]) == sentinel)
    raise AssertionError("the sentinel message never arrived")


def add_topic(
    conn: Any, cluster: str, name: str, *, workers: int = 2, retention_ms: int = 3_600_000, partitions: int = 12
) -> str:
    topic_id = str(uuid.uuid4())
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms, linker_workers)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (topic_id, cluster, name, partitions, retention_ms, workers),
        )
    conn.commit()
    return topic_id


def rising_history(redis_client: Any, cluster: str, name: str, end: float = NOW) -> None:
    """Six lag records a minute apart, 200k rising by 10k a minute: above max_lag and rising."""
    store = LagStore(redis_client, cluster)
    for i in range(6):
        at = end - 60 * (5 - i)
        store.add_lag_records({name: LagRecord(at, lag=200_000 + 10_000 * i, time_lag_s=60.0, ingress_rate=5.0)})


def workers_of(conn: Any, topic_id: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT linker_workers FROM topics WHERE topic_id = %s", (topic_id,))
        (w,) = cur.fetchone()
    conn.commit()
    return int(w)


def decisions(conn: Any, topic_id: str) -> list[dict[str, Any]]:
    cols = ("evaluation_id", "topic", "previous_linker_workers", "linker_workers", "lag_records", "time_lag_s", "slope",
            "fit_r2", "policy", "rule", "reason", "announced_at", "decided_at")  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(cols)} FROM scaling_decisions WHERE topic_id = %s ORDER BY decision_id", (topic_id,)
        )
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    conn.commit()
    return rows


def test_change_is_applied_recorded_and_announced(db: Any, redis_client: Any, cluster: str, subscriber: Any) -> None:
    topic_id = add_topic(db, cluster, "orders")
    quiet_id = add_topic(db, cluster, "quiet", workers=1)
    rising_history(redis_client, cluster, "orders")

    summary = evaluate_cluster(
        cluster, json.dumps(SETTINGS), mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW)
    )

    by_topic = {o.topic: o for o in summary.outcomes}
    assert by_topic["orders"].status == "applied"
    assert by_topic["quiet"].status == "held"  # no history: insufficient samples, nothing written
    # Retention 1 h is "short": the hevo step up is max_step (4), so 2 -> 6.
    assert workers_of(db, topic_id) == 6
    assert workers_of(db, quiet_id) == 1
    (row,) = decisions(db, topic_id)
    assert (row["evaluation_id"], row["topic"], row["previous_linker_workers"], row["linker_workers"]) == (
        "run-1",
        "orders",
        2,
        6,
    )
    assert (row["lag_records"], row["time_lag_s"], row["policy"], row["rule"]) == (
        250_000,
        60.0,
        "hevo",
        "scale_up_rising",
    )
    assert row["slope"] == pytest.approx(10_000 / 60) and row["fit_r2"] == pytest.approx(1.0)
    assert "above max_lag 100000 and rising" in row["reason"]
    assert row["announced_at"] is not None
    assert row["decided_at"] == datetime(2026, 9, 21, 14, 13, 20)  # NOW, stored as UTC
    assert decisions(db, quiet_id) == []

    (msg,) = messages(subscriber)
    assert msg["topic_id"] == topic_id
    assert (msg["topic"], msg["previous_linker_workers"], msg["linker_workers"], msg["cluster"]) == (
        "orders",
        2,
        6,
        cluster,
    )
    assert msg["at"] == "2026-09-21T14:13:20+00:00"  # NOW in UTC
    assert msg["reason"] == row["reason"]


def test_retry_does_not_double_apply(db: Any, redis_client: Any, cluster: str, subscriber: Any) -> None:
    topic_id = add_topic(db, cluster, "orders")
    rising_history(redis_client, cluster, "orders")
    raw = json.dumps(SETTINGS)
    first = evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW))
    assert [o.status for o in first.outcomes] == ["applied"]
    assert len(messages(subscriber)) == 1

    # A retry of the same run (same evaluation id), even with the evaluation mark lost and no
    # cooldown: it finds its own decision and applies nothing.
    redis_client.delete(LagStore(redis_client, cluster).evaluated_key("orders"))
    retry = evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW + 1))
    assert [o.status for o in retry.outcomes] == ["already_applied"]
    assert workers_of(db, topic_id) == 6
    assert len(decisions(db, topic_id)) == 1
    assert nothing_published(subscriber, redis_client)

    # The first try died between its commit and the PUBLISH: the retry announces it, once.
    with db.cursor() as cur:
        cur.execute("UPDATE scaling_decisions SET announced_at = NULL WHERE topic_id = %s", (topic_id,))
    db.commit()
    evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW + 2))
    (again,) = messages(subscriber)
    assert (again["previous_linker_workers"], again["linker_workers"]) == (2, 6)
    assert decisions(db, topic_id)[0]["announced_at"] is not None
    assert workers_of(db, topic_id) == 6

    # The next run with no new measurement is not due; nothing moves either.
    nxt = evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-2", now=at(NOW + 60))
    assert [o.status for o in nxt.outcomes] == ["not_due"]
    assert workers_of(db, topic_id) == 6


def test_guarded_update_loses_to_a_concurrent_change(db: Any, redis_client: Any, cluster: str) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=3)  # another evaluator already moved 2 -> 3
    stale = Decision("orders", 2, 6, 250_000, 60.0, 166.7, 1.0, "hevo", "scale_up_rising", "test", NOW)
    topic = TopicRow(topic_id, cluster, "orders", None, 12, 3_600_000, 2, None, None, True)
    outcome = _apply(db, redis_client, cluster=cluster, evaluation_id="run-x", topic=topic, d=stale, now=at(NOW))
    assert outcome.status == "conflict"
    assert workers_of(db, topic_id) == 3
    assert decisions(db, topic_id) == []


def test_cooldown_and_live_slots_bound_the_change(db: Any, redis_client: Any, cluster: str) -> None:
    topic_id = add_topic(db, cluster, "orders")
    rising_history(redis_client, cluster, "orders")
    capped = evaluate_cluster(
        cluster, json.dumps(SETTINGS), mysql=db, redis=redis_client, evaluation_id="r1", now=at(NOW), live_slots=3
    )
    assert capped.outcomes[0].decision is not None
    assert (capped.outcomes[0].decision.linker_workers, workers_of(db, topic_id)) == (3, 3)
    # With a 600 s scale-up cooldown, a run 5 minutes later holds despite the rising lag: the
    # cooldown counts from the change the first run stored.
    rising_history(redis_client, cluster, "orders", end=NOW + 300)  # five points since the change
    held = evaluate_cluster(
        cluster, json.dumps({"defaults": {"evaluate_every": 1, "scale_up_cooldown_s": 600}}), mysql=db,
        redis=redis_client,
        evaluation_id="r2", now=at(NOW + 300),
    )  # fmt: skip
    assert held.outcomes[0].decision is not None
    assert (held.outcomes[0].status, held.outcomes[0].decision.rule) == ("held", "cooldown")
    assert workers_of(db, topic_id) == 3


def test_stale_history_is_not_acted_on(db: Any, redis_client: Any, cluster: str) -> None:
    topic_id = add_topic(db, cluster, "orders")
    rising_history(redis_client, cluster, "orders", end=NOW - 3600)  # the monitor stopped an hour ago
    summary = evaluate_cluster(
        cluster, json.dumps(SETTINGS), mysql=db, redis=redis_client, evaluation_id="r", now=at(NOW)
    )
    assert summary.outcomes[0].decision is not None
    assert (summary.outcomes[0].status, summary.outcomes[0].decision.rule) == ("held", "insufficient_samples")
    assert workers_of(db, topic_id) == 2


def test_malformed_variable_fails_naming_the_field_and_changes_nothing(
    db: Any, redis_client: Any, cluster: str, subscriber: Any
) -> None:
    topic_id = add_topic(db, cluster, "orders")
    rising_history(redis_client, cluster, "orders")
    bad = json.dumps({"defaults": {"evaluate_every": 1, "cooldown_s": 0, "policy": "magic"}})
    with pytest.raises(ConfigError) as err:
        evaluate_cluster(cluster, bad, mysql=db, redis=redis_client, evaluation_id="run-bad", now=at(NOW))
    assert err.value.field == "defaults.policy"
    assert err.value.value == "magic"
    assert "defaults.policy = 'magic'" in str(err.value) and "'hevo', 'keda' or 'capacity'" in str(err.value)
    assert workers_of(db, topic_id) == 2
    assert decisions(db, topic_id) == []
    assert nothing_published(subscriber, redis_client)
    assert redis_client.get(LagStore(redis_client, cluster).evaluated_key("orders")) is None

    with pytest.raises(ConfigError, match=r"topics\.orders\.max_workers"):
        evaluate_cluster(
            cluster, '{"topics": {"orders": {"min_workers": 9, "max_workers": 4}}}', mysql=db, redis=redis_client,
            evaluation_id="run-bad-2", now=at(NOW),
        )  # fmt: skip
    with pytest.raises(ConfigError, match="not valid JSON"):
        evaluate_cluster(cluster, "{oops", mysql=db, redis=redis_client, evaluation_id="run-bad-3", now=at(NOW))
    assert workers_of(db, topic_id) == 2


def test_a_run_that_fails_part_way_changes_every_topic_or_its_retry_finishes(
    db: Any, redis_client: Any, cluster: str, subscriber: Any
) -> None:
    """Every topic is decided before anything is written, and a retry completes a broken run."""
    ids = {name: add_topic(db, cluster, name) for name in ("alpha", "beta")}
    for name in ids:
        rising_history(redis_client, cluster, name)

    class BrokenMarks(LagStore):
        def mark_evaluated(self, topic: str, at: float) -> None:
            raise ConnectionError("redis went away")

    raw = json.dumps(SETTINGS)
    with pytest.raises(ConnectionError):
        evaluate_cluster(
            cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW),
            store=BrokenMarks(redis_client, cluster),
        )  # fmt: skip
    # Before, the first topic's change was applied and the second topic never evaluated.
    assert {n: workers_of(db, t) for n, t in ids.items()} == {"alpha": 6, "beta": 6}
    retry = evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-1", now=at(NOW + 1))
    assert [o.status for o in retry.outcomes] == ["already_applied", "already_applied"]
    assert {n: len(decisions(db, t)) for n, t in ids.items()} == {"alpha": 1, "beta": 1}
    assert sorted(m["topic"] for m in messages(subscriber)) == ["alpha", "beta"]
    store = LagStore(redis_client, cluster)
    assert all(v is not None for v in store.last_evaluated(list(ids)).values())


def test_registry_limits_are_optional_and_the_variable_applies_without_them() -> None:
    settings = parse_settings({"defaults": {"max_workers": 32}, "topics": {"tight": {"max_workers": 4}}})
    free = TopicRow("t1", "c", "orders", None, 64, -1, 2, None, None, True)
    assert (effective_config(settings, free).min_workers, effective_config(settings, free).max_workers) == (1, 32)
    limited = TopicRow("t2", "c", "orders", None, 64, -1, 2, 3, 10, True)
    assert (effective_config(settings, limited).min_workers, effective_config(settings, limited).max_workers) == (3, 10)
    tight = TopicRow("t3", "c", "tight", None, 64, -1, 2, 6, 12, True)  # no overlap: the row's limits win
    assert (effective_config(settings, tight).min_workers, effective_config(settings, tight).max_workers) == (6, 12)


def test_an_override_for_an_unregistered_topic_is_named_in_the_log(
    db: Any, redis_client: Any, cluster: str, caplog: pytest.LogCaptureFixture
) -> None:
    add_topic(db, cluster, "orders")
    raw = json.dumps({"topics": {"Orders": {"max_workers": 4}, "clicks": {"max_workers": 2}}})
    with caplog.at_level("WARNING", logger="lagsched.workflows.scaling"):
        evaluate_cluster(cluster, raw, mysql=db, redis=redis_client, evaluation_id="run-o", now=at(NOW))
    text = caplog.text
    assert "'Orders'" in text and "did you mean 'orders'" in text
    assert "'clicks'" in text and "no effect" in text


def test_a_stuck_pipeline_is_held_and_a_stale_stuck_record_is_not(
    db: Any, redis_client: Any, cluster: str, caplog: pytest.LogCaptureFixture
) -> None:
    from dataclasses import replace

    topic_id = add_topic(db, cluster, "orders")
    rising_history(redis_client, cluster, "orders")  # would scale 2 -> 6 if the pipeline consumed
    store = LagStore(redis_client, cluster)
    newest = store.read_lag_records(["orders"])["orders"][-1]
    reason = "lag 250,000 and no committed offset moved in the last 5 measurements; no partition has a live holder"
    store.add_lag_records({"orders": replace(newest, at=NOW + 1, state="stopped", state_reason=reason)})

    held = evaluate_cluster(
        cluster, json.dumps(SETTINGS), mysql=db, redis=redis_client, evaluation_id="e1", now=at(NOW + 1)
    )

    (outcome,) = held.outcomes
    assert outcome.status == "held" and outcome.decision is not None
    assert (outcome.decision.rule, outcome.decision.reason) == ("stuck", f"pipeline stopped: {reason}")
    assert held.as_dict()["stuck"] == [{"topic": "orders", "reason": f"pipeline stopped: {reason}"}]
    assert f"topic orders: held at 2 workers, pipeline stopped: {reason}" in caplog.text
    assert (workers_of(db, topic_id), decisions(db, topic_id)) == (2, [])

    # The monitor stopped long ago: its last word ("stopped") is stale, and so is the whole history.
    later = NOW + 1 + 3 * 60 + 1
    stale = evaluate_cluster(
        cluster, json.dumps(SETTINGS), mysql=db, redis=redis_client, evaluation_id="e2", now=at(later)
    )
    assert [o.status for o in stale.outcomes] == ["not_due"]  # no fresh measurement: nothing to decide
    assert stale.as_dict()["stuck"] == []
