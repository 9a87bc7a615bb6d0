"""Manual overrides on real MariaDB and Redis: applied at once, recorded, announced, bounding the
evaluator while active and gone from its bounds once expired or cancelled; bad requests change nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_scaling import add_topic, decisions, messages, nothing_published, subscribe, workers_of

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.overrides import active_overrides, cancel_override, get_override, list_overrides
from lagsched.core.errors import ConfigError
from lagsched.workflows.overrides import apply_override
from lagsched.workflows.scaling import evaluate_cluster

NOW = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)  # Black Friday, 08:00 UTC
SETTINGS = json.dumps({"defaults": {"evaluate_every": 1, "cooldown_s": 0}})


@pytest.fixture
def subscriber(redis_client: Any, cluster: str) -> Iterator[Any]:
    pubsub, own = subscribe(redis_client, cluster)
    yield own
    pubsub.close()


def override(db: Any, redis: Any, cluster: str, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "cluster": cluster, "topic": "orders", "linker_workers": 8, "duration_s": 7200.0,
        "reason": "Black Friday sale", "created_by": "ana", "now": NOW,
    }  # fmt: skip
    return apply_override(db, redis, **(args | kw))


def override_rows(db: Any) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM scaling_overrides")
        (n,) = cur.fetchone()
    db.commit()
    return int(n)


def quiet_history(redis: Any, cluster: str, end: float) -> None:
    """Six measurements a minute apart with a small, flat lag: the hevo policy scales down."""
    store = LagStore(redis, cluster)
    for i in range(6):
        store.add_lag_records({"orders": LagRecord(end - 60 * (5 - i), lag=100)})


def test_an_override_is_applied_recorded_and_announced_at_once(
    db: Any, redis_client: Any, cluster: str, subscriber: Any
) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    LagStore(redis_client, cluster).add_lag_records({"orders": LagRecord(NOW.timestamp() - 30, lag=4_200)})

    result = override(db, redis_client, cluster)

    assert workers_of(db, topic_id) == 8
    o = result.override
    assert (o.topic, o.linker_workers, o.previous_linker_workers, o.created_by) == ("orders", 8, 2, "ana")
    assert o.expires_at == NOW + timedelta(hours=2)
    (row,) = decisions(db, topic_id)
    assert (row["previous_linker_workers"], row["linker_workers"], row["rule"], row["policy"]) == (
        2,
        8,
        "override",
        "manual",
    )
    assert row["evaluation_id"] == f"override-{o.id}"
    assert row["lag_records"] == 4_200
    assert (
        row["reason"] == f"Black Friday sale (override {o.id} by ana for 2h, 8 workers until 2026-11-27 10:00:00 UTC)"
    )
    assert row["announced_at"] is not None
    (msg,) = messages(subscriber)
    assert (msg["topic"], msg["previous_linker_workers"], msg["linker_workers"], msg["rule"], msg["reason"]) == (
        "orders", 2, 8, "override", row["reason"],
    )  # fmt: skip
    assert [a.id for a in active_overrides(db, cluster, NOW)] == [o.id]
    assert active_overrides(db, cluster, NOW + timedelta(hours=2)) == []  # expires_at is exclusive


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"topic": "ordres"}, "topic", "did you mean 'orders'?"),
        ({"linker_workers": 0}, "linker_workers", "must be an integer >= 1"),
        ({"linker_workers": 13}, "linker_workers", "at most the 12 partitions of topic 'orders'"),
        ({"duration_s": 0.0}, "duration", "more than 0"),
        ({"duration_s": 8 * 86_400.0}, "duration", "at most 7d"),
        ({"reason": "  "}, "reason", "must say why"),
        ({"created_by": ""}, "created_by", "must name who"),
    ],
)
def test_a_bad_request_names_the_field_and_changes_nothing(
    db: Any, redis_client: Any, cluster: str, subscriber: Any, change: dict[str, Any], field: str, words: str
) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)

    with pytest.raises(ConfigError) as caught:
        override(db, redis_client, cluster, **change)

    assert caught.value.field == field
    assert f"invalid override: {field} = " in str(caught.value)
    assert words in str(caught.value)
    assert (workers_of(db, topic_id), decisions(db, topic_id), override_rows(db)) == (2, [], 0)
    assert nothing_published(subscriber, redis_client)


def test_the_evaluator_holds_an_overridden_topic_and_decides_normally_after_expiry(
    db: Any, redis_client: Any, cluster: str
) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    o = override(db, redis_client, cluster, duration_s=3600.0).override
    during = NOW + timedelta(minutes=30)
    quiet_history(redis_client, cluster, during.timestamp())

    held = evaluate_cluster(cluster, SETTINGS, mysql=db, redis=redis_client, evaluation_id="during", now=during)

    (outcome,) = held.outcomes
    assert outcome.status == "held" and outcome.decision is not None
    assert outcome.decision.rule == "override"
    assert f"override {o.id} by ana: Black Friday sale" in outcome.decision.reason
    assert workers_of(db, topic_id) == 8

    # An hour and a minute in, the override has expired: the low lag scales the topic down, and
    # the change says the override ended.
    after = NOW + timedelta(minutes=61)
    quiet_history(redis_client, cluster, after.timestamp())
    assert active_overrides(db, cluster, after) == []
    done = evaluate_cluster(cluster, SETTINGS, mysql=db, redis=redis_client, evaluation_id="after", now=after)

    (outcome,) = done.outcomes
    assert outcome.status == "applied" and outcome.decision is not None
    assert outcome.decision.linker_workers < 8
    assert workers_of(db, topic_id) == outcome.decision.linker_workers
    last = decisions(db, topic_id)[-1]
    assert (last["rule"], last["previous_linker_workers"]) == ("override_expired", 8)
    assert last["reason"].startswith(f"override ended (Black Friday sale (override {o.id} by ana")
    assert "; scale_down" in last["reason"]


def test_an_override_sets_a_drifted_count_back(db: Any, redis_client: Any, cluster: str) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    override(db, redis_client, cluster)
    with db.cursor() as cur:  # someone edits the row by hand while the override runs
        cur.execute("UPDATE topics SET linker_workers = 3 WHERE topic_id = %s", (topic_id,))
    db.commit()
    at = (NOW + timedelta(minutes=5)).timestamp()
    quiet_history(redis_client, cluster, at)

    summary = evaluate_cluster(
        cluster, SETTINGS, mysql=db, redis=redis_client, evaluation_id="e", now=NOW + timedelta(minutes=5)
    )

    assert summary.outcomes[0].status == "applied"
    assert workers_of(db, topic_id) == 8
    assert decisions(db, topic_id)[-1]["rule"] == "override"


def test_cancel_ends_an_override_and_a_newer_one_replaces_the_older(db: Any, redis_client: Any, cluster: str) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    first = override(db, redis_client, cluster).override
    second = override(db, redis_client, cluster, linker_workers=10, now=NOW + timedelta(minutes=1)).override

    assert [a.id for a in active_overrides(db, cluster, NOW + timedelta(minutes=2))] == [second.id]
    replaced = get_override(db, first.id)
    assert replaced is not None and replaced.cancelled_by == f"replaced by override {second.id}"
    assert workers_of(db, topic_id) == 10

    assert cancel_override(db, second.id, NOW + timedelta(minutes=3), "bob")
    assert not cancel_override(db, second.id, NOW + timedelta(minutes=4), "bob")  # no longer active
    assert not cancel_override(db, 999_999, NOW, "bob")
    assert active_overrides(db, cluster, NOW + timedelta(minutes=3)) == []
    listed = list_overrides(db, cluster)
    assert [(r.id, r.status(NOW + timedelta(minutes=5))) for r in listed] == [
        (second.id, "cancelled"), (first.id, "cancelled"),
    ]  # fmt: skip
    assert workers_of(db, topic_id) == 10  # a cancel moves nothing; the next evaluation decides


def test_a_retried_request_finds_its_override_and_writes_nothing_more(
    db: Any, redis_client: Any, cluster: str, subscriber: Any
) -> None:
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    first = override(db, redis_client, cluster, request_id="manual__2026-11-27")
    assert len(messages(subscriber)) == 1

    again = override(db, redis_client, cluster, request_id="manual__2026-11-27", now=NOW + timedelta(seconds=30))

    assert again.override.id == first.override.id
    assert not again.announced
    assert (override_rows(db), len(decisions(db, topic_id))) == (1, 1)
    assert nothing_published(subscriber, redis_client)

    # The first attempt died between its commit and the publish: the retry announces, once.
    with db.cursor() as cur:
        cur.execute("UPDATE scaling_decisions SET announced_at = NULL WHERE topic_id = %s", (topic_id,))
    db.commit()
    third = override(db, redis_client, cluster, request_id="manual__2026-11-27")
    assert third.announced
    (msg,) = messages(subscriber)
    assert (msg["rule"], msg["linker_workers"]) == ("override", 8)


def test_the_cli_adds_lists_and_cancels(
    db: Any, mysql_db: Any, redis_client: Any, cluster: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    import argparse

    from lagsched.cli import override as override_cli

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
    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    parser = argparse.ArgumentParser()
    override_cli.add_arguments(parser)

    def cli(*argv: str) -> tuple[int, str, str]:
        code = override_cli.run(parser.parse_args(["--cluster", cluster, *argv]), now=NOW)
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = cli("orders", "--workers", "13", "--for", "2h", "--reason", "sale", "--by", "ana")
    assert (code, out) == (1, "")
    assert "invalid override: linker_workers = 13: must be at most the 12 partitions" in err
    assert cli("orders", "--workers", "8", "--reason", "sale")[0] == 1  # --for missing

    code, out, err = cli("orders", "--linker-workers", "8", "--for", "90m", "--reason", "Black Friday", "--by", "ana")
    assert code == 0, err
    (active,) = active_overrides(db, cluster, NOW)
    assert f"override {active.id}: topic orders of cluster {cluster} pinned at 8 worker(s) (was 2)" in out
    assert f"lagsched override --cancel {active.id}" in out
    assert (workers_of(db, topic_id), active.created_by, active.expires_at) == (8, "ana", NOW + timedelta(minutes=90))

    code, out, _ = cli("--list")
    assert code == 0
    assert f"{active.id:>5} orders" in out and "2->8" in out and "active" in out and "(1h30m left)" in out
    code, out, _ = cli("--list", "--json")
    assert [(r["id"], r["status"], r["remaining_s"]) for r in json.loads(out)] == [(active.id, "active", 5400.0)]

    assert cli("--cancel", str(active.id), "--by", "bob")[0] == 0
    code, _, err = cli("--cancel", str(active.id))
    assert code == 1 and "it is already cancelled" in err
    assert "no overrides" in cli("--list")[1]
    assert "cancelled" in cli("--list", "--all")[1]


def test_an_evaluation_decided_before_an_override_does_not_undo_it(db: Any, redis_client: Any, cluster: str) -> None:
    from lagsched.core.evaluator import Decision
    from lagsched.core.registry import TopicRow
    from lagsched.workflows.scaling import _apply

    topic_id = add_topic(db, cluster, "orders", workers=2, partitions=12)
    at = NOW.timestamp()
    # The evaluator read no override and decided 2 -> 6; meanwhile someone pins the topic at 2
    # (the same count, so the evaluator's compare-and-set on 2 alone would still succeed).
    decided = Decision("orders", 2, 6, 250_000, 60.0, 166.7, 1.0, "hevo", "scale_up_rising", "rising", at)
    override(db, redis_client, cluster, linker_workers=2)
    row = TopicRow(topic_id, cluster, "orders", None, 12, 3_600_000, 2, None, None, True)

    outcome = _apply(db, redis_client, cluster=cluster, evaluation_id="late", topic=row, d=decided, now=NOW)

    assert outcome.status == "conflict"
    assert workers_of(db, topic_id) == 2
    assert [r["rule"] for r in decisions(db, topic_id)] == ["override"]
