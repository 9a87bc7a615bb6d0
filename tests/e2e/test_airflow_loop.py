"""The loop closed by Airflow itself, with its running scheduler (not ``dag.test()``).

topic sync -> lag monitor -> the evaluator (scheduled on the monitor's asset) raises a hot topic's
linker_workers -> the consume DAG starts more slots -> lag falls below the threshold ->
linker_workers come back down and the surplus slots leave; every record is in the cluster's Iceberg table exactly once.

Shared-stack etiquette: the test's topics live in a cluster of their own (``e2e_<hex>``, a
``topic_pattern`` that matches only its topics), added to ``lagsched_clusters`` next to whatever
is configured; its tuned settings are per-topic overrides in ``lagsched_settings``, so nobody
else's topics change policy. For the test's few minutes that cluster is the only configured one
(its table's warehouse in the test's temporary folder); the consume DAG is unpaused and triggered,
its long-lived slots follow the scale-down (slots 2 and 3 leave, slot 1 lives on), and at the end
it is paused and its runs stopped (each slot finishes its batch). Both Variables are restored and
the cluster's registry rows disabled at the end. The demo (which consumes ``lagsched_kafka`` with
the same DAG) must not run at the same time: slot ownership spans the registry database
(docs/consumer.md).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched_dev.airflow_api import AirflowAPI

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from consumer_support import latest_offsets, produce, wait_until

MONITOR, EVALUATOR, CONSUME = "lagsched_lag_monitor", "lagsched_scaling_evaluator", "lagsched_consume"
HOT_RECORDS, COLD_RECORDS = 6000, 300
THRESHOLD = 2000  # keda: ceil(lag / 2000) workers, so 6000 records of lag want 3


def tuned(names: list[str]) -> dict[str, Any]:
    """Per-topic settings that decide in three measurements and never wait for a cooldown."""
    fast = {
        "policy": "keda",
        "keda_lag_threshold": THRESHOLD,
        "hysteresis": 0,
        "evaluate_every": 1,
        "min_samples": 3,
        "window": 3,
        "cooldown_s": 0,
        "scale_up_cooldown_s": 0,
        "min_workers": 1,
        "max_workers": 3,
        # The backlog waits, unconsumed, for the first measurements: that is not a stuck pipeline.
        "stall_after_measurements": 20,
    }
    return {name: dict(fast) for name in names}


@pytest.fixture
def registry() -> Iterator[Any]:
    """A connection to the stack's own registry (the DAGs' ``lagsched_mysql``)."""
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    conn = connect(mysql_params())
    yield conn
    conn.close()


def workers(conn: Any, cluster: str, topic: str) -> int | None:
    with conn.cursor() as cur:
        cur.execute("SELECT linker_workers FROM topics WHERE cluster = %s AND name = %s AND enabled", (cluster, topic))
        row = cur.fetchone()
    conn.commit()
    return None if row is None else int(row[0])


def running_slots(cluster: str) -> set[int]:
    """Numbers of the cluster's slots 1 to 3 whose lock a process holds (they run)."""
    from lagsched.adapters.redis_store import redis_client
    from lagsched.adapters.slots import SlotLock, slot_id_for
    from lagsched.connections import redis_params

    ids = {slot_id_for(f"{cluster}-slot-{n}"): n for n in (1, 2, 3)}
    client = redis_client(redis_params())
    try:
        return {ids[s] for s in SlotLock(client).holders(list(ids))}
    finally:
        client.close()


def latest_lag(cluster: str, topic: str) -> int | None:
    from lagsched.adapters.lag_store import LagStore
    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import redis_params

    client = redis_client(redis_params())
    try:
        records = LagStore(client, cluster).read_lag_records([topic])[topic]
    finally:
        client.close()
    return records[-1].lag if records else None


def drive(api: AirflowAPI, cluster: str, done: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Keep measurements coming until ``done``: the evaluator follows each one through the asset.

    A monitor run for ``cluster`` is triggered whenever none is queued or running (the cron's
    runs, every minute, measure the cluster too), so measurements follow each other back to back.
    """
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        if not any(r["state"] in ("queued", "running") for r in api.dag_runs(MONITOR, limit=5)):
            api.trigger(MONITOR, {"cluster": cluster})
        time.sleep(3)


def test_airflow_scales_consumes_and_scales_back(
    airflow: AirflowAPI, registry: Any, kafka_config: dict[str, Any], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    api = airflow
    tag = uuid.uuid4().hex[:8]
    cluster = f"e2e_{tag}"
    for dag_id in (MONITOR, EVALUATOR, CONSUME):
        api.wait_for_dag(dag_id)
    consume = api.get_dag(CONSUME)
    if consume is not None and not consume["is_paused"]:
        pytest.fail(
            "lagsched_consume is unpaused (the demo?): its slots would share slot ownership with this test's "
            "(one registry database), so the test needs the DAG to itself; stop the demo or pause the DAG",
            pytrace=False,
        )
    setup = api.trigger("lagsched_setup")  # the stack's schema up to date (idempotent)
    assert api.wait_for_run("lagsched_setup", setup, timeout_s=180) == "success"
    if api.get_pool("lagsched_consume") is None:
        pytest.fail("the pool lagsched_consume is missing: `lagsched-dev stack up --airflow` creates it", pytrace=False)

    hot = new_topic(3, prefix=f"e2e-{tag}-hot")
    cold = new_topic(1, prefix=f"e2e-{tag}-cold")
    produce(kafka_config, hot, HOT_RECORDS, partitions=3)
    produce(kafka_config, cold, COLD_RECORDS)

    saved_clusters = api.get_variable("lagsched_clusters")
    saved_settings = api.get_variable("lagsched_settings")
    # For the test's few minutes its cluster is the only one: the continuous consume runs (default
    # params) then consume nothing but its topics. The per-topic settings join whatever is set.
    sink = {"warehouse": f"file://{tmp_path / 'warehouse'}"}
    # The demo's cadence (5 s, not 30): the loop scales on the lag, which counts records until their commit.
    clusters = {cluster: {"topic_pattern": f"e2e-{tag}-.*", "max_slots": 3, "sink": sink, "commit_interval_s": 5}}
    settings = json.loads(saved_settings) if saved_settings else {}
    settings.setdefault("topics", {}).update(tuned([hot, cold]))
    started = time.monotonic()
    try:
        api.set_variable("lagsched_clusters", json.dumps(clusters))
        api.set_variable("lagsched_settings", json.dumps(settings))

        # 1. The monitor's sync registers the cluster's topics (one worker each), then it measures.
        drive(api, cluster, lambda: latest_lag(cluster, hot) is not None, "the first measurement", 240)
        assert workers(registry, cluster, hot) == 1
        assert latest_lag(cluster, hot) == HOT_RECORDS

        # 2. Three measurements later the evaluator raises the hot topic to 3 workers.
        drive(api, cluster, lambda: workers(registry, cluster, hot) == 3, "linker_workers 3 on the hot topic", 240)
        assert workers(registry, cluster, cold) == 1

        # 3. Unpaused and triggered (as a user would), the consume DAG starts 3 slots (the hot topic's
        #    workers). Other runs may start at the same moment (the first unpause's scheduled run,
        #    the evaluator's asset): a slot runs in one process whichever run started it, and the
        #    others' starts of it leave at once (exit 0).
        before = {r["dag_run_id"] for r in api.dag_runs(CONSUME)}
        api.set_paused(CONSUME, False)
        first = Plan.of(api, api.trigger(CONSUME))
        assert first.names == [f"{cluster}-slot-{n}" for n in (1, 2, 3)], first.names
        wait_until(lambda: running_slots(cluster) == {1, 2, 3}, 180, "three running slots", poll=2)

        # 4. The slots drain the backlog; the monitor sees the lag fall, the evaluator scales down.
        wait_until(
            lambda: (
                _committed(registry, cluster, hot) == HOT_RECORDS
                and _committed(registry, cluster, cold) == COLD_RECORDS
            ),
            240,
            "the slots to commit every record",
            poll=2,
        )
        drive(api, cluster, lambda: workers(registry, cluster, hot) == 1, "linker_workers back to 1", 240)
        lag = latest_lag(cluster, hot)
        assert lag is not None and lag < THRESHOLD, lag

        # 5. Slots 2 and 3 leave at a batch boundary while slot 1 lives on; a run now starts nothing.
        wait_until(lambda: running_slots(cluster) == {1}, 180, "slots 2 and 3 to leave", poll=2)
        now = Plan.of(api, api.trigger(CONSUME))
        assert now.names == [], now.names
        assert running_slots(cluster) == {1}
        # No slot task of any run since the unpause failed (duplicate starts exit 0); some may still
        # be on their way (runs the slots' ends started).
        states = [
            t["state"]
            for r in api.dag_runs(CONSUME)
            if r["dag_run_id"] not in before
            for t in api.task_instances(CONSUME, r["dag_run_id"])
            if t["task_id"] == "consume"
        ]
        assert not set(states) & {"failed", "up_for_retry", "upstream_failed"}, states

        for topic, partitions in ((hot, 3), (cold, 1)):
            assert_once(cluster, sink, topic, latest_offsets(kafka_config, topic, partitions))
        assert time.monotonic() - started < 600
    finally:
        # Each step on its own: one failing (Airflow restarting) must not skip the others.
        _cleanup(lambda: api.set_paused(CONSUME, True))
        _cleanup(lambda: _stop_runs(api))  # the slots in flight stop at a batch boundary
        _cleanup(lambda: _restore(api, "lagsched_clusters", saved_clusters))
        _cleanup(lambda: _restore(api, "lagsched_settings", saved_settings))
        _cleanup(lambda: _disable(registry, cluster))  # keep the test's topics out of everyone's ownership


class Plan:
    """A consume run and the slot names its planning task chose."""

    def __init__(self, run_id: str, names: list[str]) -> None:
        self.run_id, self.names = run_id, names

    @classmethod
    def of(cls, api: AirflowAPI, run_id: str) -> Plan:
        """The plan of ``run_id``, once its plan_slots task succeeded."""

        def planned() -> bool:
            tis = {t["task_id"]: t["state"] for t in api.task_instances(CONSUME, run_id) if t["map_index"] < 0}
            return tis.get("plan_slots") == "success"

        wait_until(planned, 240, f"the plan of consume run {run_id}", poll=2)
        plan = api.xcom(CONSUME, run_id, "plan_slots")
        return cls(run_id, sorted(p["application_args"][1] for p in plan))


def assert_once(cluster: str, sink: dict[str, str], topic: str, latest: dict[int, int]) -> None:
    """Every offset ``[0, latest[p])`` of the topic's partitions is in the cluster's table exactly once
    (read with pyiceberg through the stack's catalog)."""
    from lagsched.adapters.lake_reader import read_rows
    from lagsched.connections import mysql_params
    from lagsched.core.lake import LakeTable

    lake = LakeTable.of(cluster, sink, default_warehouse=sink["warehouse"])
    table = read_rows(lake, mysql_params(), topic=topic)
    seen = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    expected = {(p, o) for p, end in latest.items() for o in range(end)}
    dupes = len(seen) - len(set(seen))
    missing, extra = expected - set(seen), set(seen) - expected
    assert dupes == 0 and not missing and not extra, (
        f"{topic}: {dupes} duplicate(s), {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
        f"{len(extra)} unexpected (e.g. {sorted(extra)[:5]})"
    )


def _committed(conn: Any, cluster: str, topic: str) -> int:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COALESCE(SUM(p.committed_offset), 0) FROM topic_partitions p JOIN topics t USING (topic_id)"
            " WHERE t.cluster = %s AND t.name = %s AND t.enabled",
            (cluster, topic),
        )
        (total,) = cur.fetchone()
    conn.commit()
    return int(total)


def _stop_runs(api: AirflowAPI) -> None:
    """Mark every unfinished consume run failed: its slot tasks are killed, their drivers stop gracefully."""
    for run in api.dag_runs(CONSUME, limit=10):
        if run["state"] in ("queued", "running"):
            api.mark_run(CONSUME, run["dag_run_id"], "failed")


def _cleanup(step: Callable[[], object]) -> None:
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - a cleanup must not hide the test's own failure
        print(f"cleanup step failed: {exc!r}")


def _disable(conn: Any, cluster: str) -> None:
    with conn.cursor() as cur:
        cur.execute("UPDATE topics SET enabled = FALSE WHERE cluster = %s", (cluster,))
    conn.commit()


def _restore(api: AirflowAPI, key: str, value: str | None) -> None:
    if value is None:
        api.delete_variable(key)
    else:
        api.set_variable(key, value)
