"""The status read model on real MariaDB and Redis: every section of the page from seeded state.

The state is written through the real adapters (registry sync, claim store, decisions, gaps,
overrides, slot heartbeats, lag store), then read back by `cluster_status`, `lag_history` and
`metrics`. Slot liveness and override expiry are judged at an injected ``now``; leases by the
database's clock, as in the claim protocol, so ``now`` is the wall clock at the start.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched.adapters.alert_figures import (
    TableCommitCounter,
    count_table_care,
    write_planned_slots,
    write_thresholds,
)
from lagsched.adapters.claims import ClaimStore, server_lock_mode
from lagsched.adapters.gaps import RetentionGap, record_gap
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.slots import SlotLock, SlotRegistry, slot_id_for
from lagsched.adapters.topics import apply_sync
from lagsched.adapters.worker_changes import apply_change, create_override
from lagsched.cli.status import format_status
from lagsched.core.evaluator import Decision
from lagsched.core.lag import OffsetSample
from lagsched.core.registry import BrokerTopic, plan_sync
from lagsched.core.status import render_prometheus
from lagsched.core.thresholds import ClusterThresholds, TopicThresholds
from lagsched.workflows.status import cluster_status, lag_history, list_clusters, metrics
from promtool_support import output, promtool


@dataclass
class Seeded:
    now: float
    cluster: str
    orders_id: str
    slot_a: str
    slot_b: str
    slot_dead: str


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


@pytest.fixture
def seeded(db: Any, redis_client: Any, cluster: str) -> Seeded:
    now = time.time()
    applied = apply_sync(db, cluster, lambda rows: plan_sync(rows, [BrokerTopic("orders", 3), BrokerTopic("idle", 1)]))
    orders = applied.topic_ids["orders"]
    slot_a, slot_b, slot_dead = (slot_id_for(f"{cluster}-slot-{n}") for n in range(3))

    registry = SlotRegistry(redis_client, cluster=cluster)
    registry.heartbeat(slot_a, at(now - 5), 15)  # live
    # Its process holds its lock: the lock token names the worker it runs on (the page's host column).
    assert SlotLock(redis_client).acquire(slot_a, "lagsched-w2@box:4242:abcdef12", 600) is None
    registry.heartbeat(slot_dead, at(now - 500), 15)  # silent for long: dead, holds nothing
    # slot_b never beats: it holds a row whose lease is live, so the row is blocked.

    store = ClaimStore(db, server_lock_mode(db))
    held_a = store.claim(slot_a, {orders: 2}, lease_s=600).claims  # partitions 0 and 1 (claim order)
    held_b = store.claim(slot_b, {orders: 1}, lease_s=600).claims  # partition 2
    assert sorted(c.partition_id for c in held_a) == [0, 1] and [c.partition_id for c in held_b] == [2]
    for c in held_a:
        store.commit_offset(slot_a, c, 40 + c.partition_id)
    store.commit_offset(slot_b, held_b[0], 500)  # beyond the broker's head sampled below

    lag_store = LagStore(redis_client, cluster)
    for i, (lag, state) in enumerate([(100, "ok"), (400, "ok"), (900, "stalled")]):
        lag_store.add_lag_records(
            {
                "orders": LagRecord(
                    at=now - 120 + 60 * i,
                    lag=lag,
                    lost=10,
                    time_lag_s=30.0 * i,
                    ingress_rate=5.0,
                    consumption_rate=1.5,
                    state=state,
                    state_reason="committed offsets unchanged for 3 measurements" if state != "ok" else "",
                )
            }
        )
    for p, head in enumerate([100, 200, 300]):
        lag_store.add_samples({lag_store.latest_key("orders", p): OffsetSample(now - 60, head - 50)})
        lag_store.add_samples({lag_store.latest_key("orders", p): OffsetSample(now, head)})
        # What the measurement read from MySQL just before the broker: p2's 500 is past the log end.
        lag_store.add_samples({lag_store.committed_key("orders", p): OffsetSample(now, [40, 41, 500][p])})

    d = Decision("orders", 1, 2, 400, 30.0, 1.0, 0.9, "hevo", "scale_up_rising", "lag 400 rising; up by 1", now - 90)
    assert apply_change(db, cluster=cluster, evaluation_id="eval-1", topic_id=orders, d=d)[0] == "applied"
    assert record_gap(db, RetentionGap(orders, 0, 0, 10), slot_a)
    create_override(
        db, cluster=cluster, topic="orders", linker_workers=3, duration_s=3600, reason="black friday",
        created_by="ops", now=at(now - 10),
    )  # fmt: skip
    # What the lag monitor, the consume plan, a slot and the table care callbacks store for the alerts.
    write_thresholds(redis_client, cluster, ClusterThresholds(240.0, {"orders": TopicThresholds(3, 120.0, 60.0)}))
    write_planned_slots(redis_client, {cluster: 3})
    commits = TableCommitCounter(redis_client, cluster, "lake.t")
    for outcome in ("ok", "ok", "refused", "ok"):
        commits.count(outcome)
    for _ in range(2):
        count_table_care(redis_client, cluster, "failed", at(now))
    return Seeded(now, cluster, orders, slot_a, slot_b, slot_dead)


def test_cluster_status_shows_every_section(db: Any, redis_client: Any, seeded: Seeded) -> None:
    st = cluster_status(db, redis_client, seeded.cluster, at(seeded.now), slot_timeout_s=60)
    d = st.as_dict()
    topics = {t["name"]: t for t in d["topics"]}
    assert set(topics) == {"orders", "idle"}
    orders = topics["orders"]
    assert (orders["lag"], orders["lost"], orders["time_lag_s"], orders["partitions"]) == (900, 10, 60.0, 3)
    assert orders["state"] == "stalled" and "unchanged" in orders["state_reason"]
    assert orders["linker_workers"] == 3  # the override's value
    assert orders["owners"] == [seeded.slot_a, seeded.slot_b]  # by slot number: slot-0, slot-1
    assert orders["override"]["linker_workers"] == 3 and orders["override"]["reason"] == "black friday"
    assert orders["override"]["expires_at"].startswith(at(seeded.now + 3590).isoformat()[:15])
    assert topics["idle"]["lag"] is None and topics["idle"]["owners"] == []

    slots = {s["slot_id"]: s for s in d["slots"]}
    assert set(slots) == {seeded.slot_a, seeded.slot_b}  # the long-dead slot holds nothing: not listed
    a, b = slots[seeded.slot_a], slots[seeded.slot_b]
    assert a["live"] and not b["live"] and d["live_slots"] == 1
    assert (a["host"], b["host"]) == ("lagsched-w2@box", None)  # b's process is gone: no lock, no host
    assert a["name"] == f"{seeded.cluster}-slot-0"
    assert [(c["topic"], c["partition"], c["committed_offset"]) for c in a["claims"]] == [
        ("orders", 0, 40),
        ("orders", 1, 41),
    ]
    lease = datetime.fromisoformat(a["claims"][0]["lease_expires_at"]).timestamp()
    assert seeded.now + 500 < lease < seeded.now + 700  # 600 s by the database's clock
    assert [(c["partition"], c["committed_offset"]) for c in b["claims"]] == [(2, 500)]

    rules = [(x["rule"], x["previous_linker_workers"], x["linker_workers"]) for x in d["decisions"]]
    assert rules == [("override", 2, 3), ("scale_up_rising", 1, 2)]  # newest first
    assert d["decisions"][1]["reason"] == "lag 400 rising; up by 1"
    assert [(g["topic"], g["partition"], g["records"]) for g in d["retention_gaps"]] == [("orders", 0, 10)]
    assert d["stuck"] == [{"topic": "orders", "state": "stalled", "reason": orders["state_reason"]}]
    assert [o["topic"] for o in d["overrides"]] == ["orders"]

    kinds = [(x["kind"], x["topic"], x["partition"]) for x in d["anomalies"]]
    assert kinds == [
        ("not_measured", "idle", None),
        ("lost_records", "orders", None),
        ("offset_ahead", "orders", 2),
        ("holder_not_live", "orders", 2),
    ]
    assert d["notes"] == []


def test_lag_history_gives_points_and_the_workers_step_line(db: Any, redis_client: Any, seeded: Seeded) -> None:
    h = lag_history(redis_client, seeded.cluster, "orders", mysql=db, now=at(seeded.now))
    assert [p["lag"] for p in h["points"]] == [100, 400, 900]
    assert [p["state"] for p in h["points"]] == ["ok", "ok", "stalled"]
    steps = [(round(s["t"] - seeded.now), s["linker_workers"], s["rule"]) for s in h["linker_workers_steps"]]
    assert steps == [(-120, 1, ""), (-90, 2, "scale_up_rising"), (-10, 3, "override"), (0, 3, "")]
    assert h["linker_workers"] == 3
    assert {x["rule"] for x in h["decisions"]} == {"scale_up_rising", "override"}
    # Without MySQL the measurements alone.
    assert lag_history(redis_client, seeded.cluster, "orders")["linker_workers_steps"] == []


def test_metrics_per_partition_and_per_topic(db: Any, redis_client: Any, seeded: Seeded) -> None:
    text = render_prometheus(metrics(db, redis_client, at(seeded.now), cluster_names=[seeded.cluster]))
    c = seeded.cluster

    def value(line_start: str) -> float:
        m = re.search("^" + re.escape(line_start) + r" (\S+)$", text, re.MULTILINE)
        assert m, f"no sample {line_start} in\n{text}"
        return float(m.group(1))

    assert value(f'lagsched_partition_lag_records{{cluster="{c}",partition="0",topic="orders"}}') == 60
    assert value(f'lagsched_partition_lag_records{{cluster="{c}",partition="1",topic="orders"}}') == 159
    assert value(f'lagsched_partition_lag_records{{cluster="{c}",partition="2",topic="orders"}}') == 0  # ahead
    assert value(f'lagsched_topic_lag_records{{cluster="{c}",topic="orders"}}') == 900
    assert value(f'lagsched_topic_lost_records{{cluster="{c}",topic="orders"}}') == 10
    assert value(f'lagsched_topic_linker_workers{{cluster="{c}",topic="orders"}}') == 3
    assert value(f'lagsched_topic_consume_rate_records_per_second{{cluster="{c}",topic="orders"}}') == 1.5
    assert value(f'lagsched_topic_state{{cluster="{c}",state="stalled",topic="orders"}}') == 1
    assert value(f'lagsched_live_slots{{cluster="{c}"}}') == 1
    assert value(f'lagsched_slot_claimed_partitions{{cluster="{c}",slot="{seeded.slot_a}"}}') == 2
    # Never measured: listed with its workers, but no made-up lag of 0.
    assert f'lagsched_topic_linker_workers{{cluster="{c}",topic="idle"}} 1' in text
    assert 'topic="idle"} ' not in text.split("# HELP lagsched_topic_lag_records")[1].split("# HELP")[0]
    # What the alert rules compare with (thresholds, plan, counters), from what the parts stored in Redis.
    assert value(f'lagsched_topic_time_lag_slo_seconds{{cluster="{c}",topic="orders"}}') == 120
    assert value(f'lagsched_topic_open_transaction_bound_seconds{{cluster="{c}",topic="orders"}}') == 60
    assert value(f'lagsched_topic_max_workers{{cluster="{c}",topic="orders"}}') == 3
    # idle is not in the stored thresholds (registered after that measurement): the defaults, capped by 1 partition
    assert value(f'lagsched_topic_time_lag_slo_seconds{{cluster="{c}",topic="idle"}}') == 600
    assert value(f'lagsched_topic_max_workers{{cluster="{c}",topic="idle"}}') == 1
    assert value(f'lagsched_measurements_stale_after_seconds{{cluster="{c}"}}') == 240
    assert value(f'lagsched_planned_slots{{cluster="{c}"}}') == 3
    assert value(f'lagsched_table_commits_total{{cluster="{c}",table="lake.t"}}') == 3
    assert value(f'lagsched_table_commit_failures_total{{cluster="{c}",reason="refused",table="lake.t"}}') == 1
    assert value(f'lagsched_table_commit_failures_total{{cluster="{c}",reason="error",table="lake.t"}}') == 0
    assert value(f'lagsched_table_care_runs_total{{cluster="{c}",outcome="failed"}}') == 2
    assert value(f'lagsched_table_care_runs_total{{cluster="{c}",outcome="ok"}}') == 0
    last_failed = value(f'lagsched_table_care_last_run_timestamp_seconds{{cluster="{c}",outcome="failed"}}')
    assert last_failed == pytest.approx(seeded.now)
    assert "# TYPE lagsched_table_commits_total counter" in text
    # By the book, as Prometheus' own checker reads it (tests/unit/test_metrics_lint.py: every kind of topic).
    checked = promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), output(checked)


def test_cli_table_names_slots_and_claims(db: Any, redis_client: Any, seeded: Seeded) -> None:
    out = format_status(cluster_status(db, redis_client, seeded.cluster, at(seeded.now)))
    # the watermark column: "-" (no partition committed a record or was read caught up)
    assert re.search(r"^orders\s+3\s+900\s+10\s+60\.0\s+-\s+3\*\s+stalled\s+" + re.escape(seeded.cluster), out, re.M)
    assert f"{seeded.cluster}-slot-0 ({seeded.slot_a}) live on lagsched-w2@box" in out
    assert "orders[0] committed 40, lease until" in out
    assert "STALLED orders: committed offsets unchanged" in out
    assert "ANOMALY offset_ahead orders[2]" in out


def test_a_database_without_the_overrides_table_still_shows_status(db: Any, redis_client: Any, seeded: Seeded) -> None:
    with db.cursor() as cur:
        cur.execute("DROP TABLE scaling_overrides")
    db.commit()
    st = cluster_status(db, redis_client, seeded.cluster, at(seeded.now))
    assert st.overrides == () and "V006" in st.notes[0]
    assert [t.name for t in st.topics] == ["idle", "orders"]
    assert seeded.cluster in list_clusters(db)


def test_garbage_in_the_alert_figures_keys_never_breaks_the_scrape(db: Any, redis_client: Any, seeded: Seeded) -> None:
    """Someone's redis-cli in the keys the alert figures live in: the scrape leaves out what it cannot
    read (thresholds fall back to the defaults) rather than fail the whole /metrics."""
    from lagsched.adapters import redis_store as keys

    c = seeded.cluster
    redis_client.set(keys.thresholds_key(c), "{oops")
    redis_client.set(keys.planned_slots_key(c), "many")
    redis_client.hset(keys.table_commits_key(c), mapping={"lake.t|ok": "x", "no-outcome": "3", "lake.t|error": "2"})
    redis_client.hset(keys.table_care_key(c), mapping={"ok": "abc", "ok_at": "yesterday", "failed": "1"})
    text = render_prometheus(metrics(db, redis_client, at(seeded.now), cluster_names=[c]))
    assert f'lagsched_topic_time_lag_slo_seconds{{cluster="{c}",topic="orders"}} 600' in text
    assert f'lagsched_measurements_stale_after_seconds{{cluster="{c}"}} 600' in text
    assert "lagsched_planned_slots{" not in text
    assert f'lagsched_table_commit_failures_total{{cluster="{c}",reason="error",table="lake.t"}} 2' in text
    assert f'lagsched_table_commits_total{{cluster="{c}",table="lake.t"}} 0' in text
    assert f'lagsched_table_care_runs_total{{cluster="{c}",outcome="failed"}} 1' in text
    assert f'lagsched_table_care_runs_total{{cluster="{c}",outcome="ok"}} 0' in text
    assert f'lagsched_table_care_last_run_timestamp_seconds{{cluster="{c}",outcome="ok"}}' not in text
