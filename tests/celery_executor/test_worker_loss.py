"""Airflow's CeleryExecutor with two workers on the real stack: the consume DAG's slots run on both,
one worker is SIGKILLed with every process below it, the survivors take its rows, Airflow runs the
lost slots again on the surviving worker, and every record lands in the table once.

The scenario is the failover benchmark's (`lagsched_dev.bench.failover`, one kill here). The stack's
Airflow runs with Celery for this module only: a standalone Airflow that runs is stopped first (the
e2e tier starts its own again), and the Celery processes stop at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched_dev.bench.failover import Failover, celery_stack
from lagsched_dev.stack.config import StackConfig

pytestmark = [
    pytest.mark.e2e,
    # It replaces the stack's Airflow by another: alone under xdist, after the rest.
    pytest.mark.serial,
    pytest.mark.xdist_group("stack-airflow"),
    pytest.mark.timeout(1500),
]

CONSUME, MONITOR = "lagsched_consume", "lagsched_lag_monitor"
#: The slots' lease (60 s) and heartbeat timeout (15 s), with room for a loaded machine.
TAKEOVER_BOUND_S = 60 + 15 + 45
#: Airflow's task heartbeat timeout (60 s on the stack), its retry delay (30 s), a slot's start.
RERUN_BOUND_S = 60 + 30 + 120


@pytest.fixture(scope="module")
def celery(stack: StackConfig) -> Iterator[tuple[StackConfig, Any]]:
    from lagsched_dev.stack import celery as celery_services
    from lagsched_dev.stack.process import ServiceError
    from lagsched_dev.stack.services import Airflow

    try:
        cfg, api = celery_stack(stack)
    except ServiceError as exc:
        pytest.fail(f"Airflow with Celery could not start: {exc}", pytrace=False)
    for dag_id in (CONSUME, MONITOR, "lagsched_override"):
        api.wait_for_dag(dag_id)
    consume = api.get_dag(CONSUME)
    if consume is not None and not consume["is_paused"]:
        pytest.fail("lagsched_consume is unpaused (the demo?): the test needs the DAG to itself", pytrace=False)
    yield cfg, api
    if not os.environ.get("LAGSCHED_KEEP_STACK"):
        for service in [*celery_services.workers(cfg), *celery_services.components(cfg)]:
            service.stop()
        Airflow(cfg).stop(with_database=False)  # the rest of the suite still uses the metadata DB


def test_a_worker_killed_mid_run_loses_nothing_and_its_slots_come_back(celery: tuple[StackConfig, Any]) -> None:
    from lagsched_dev.stack.celery import ping_workers, workers

    cfg, api = celery
    nodes = workers(cfg)
    assert len(nodes) == 2
    scenario = Failover(api, cfg, rate=200)
    try:
        scenario.start()
        # 1. The slots run on both workers, and the status (page, `lagsched status`) says where.
        placed = scenario.spread([w.node for w in nodes])
        assert set(placed.values()) == {w.node for w in nodes}, placed
        hosts = _status_hosts(scenario)
        assert {n: hosts[scenario.slot_ids[n]] for n in placed} == placed
        # ... as Airflow does: each slot task's hostname is its worker's node name.
        running = _slot_tasks(api, scenario.cluster, states={"running"})
        assert {t["hostname"] for t in running} == {w.node for w in nodes}, running

        # 2. SIGKILL the worker with the most slots, with its whole process tree.
        counts = {w.node: sum(1 for v in placed.values() if v == w.node) for w in nodes}
        victim = max(nodes, key=lambda w: counts[w.node])
        survivor = next(w for w in nodes if w is not victim)
        time.sleep(10)  # a few batches in steady state first
        figures = scenario.kill(victim, survivor.node)
        print(f"failover: {figures}")
        assert figures["slots_lost"] == sorted(n for n, w in placed.items() if w == victim.node)
        assert figures["takeover_s"] <= TAKEOVER_BOUND_S, figures
        assert figures["recovered_s"] <= TAKEOVER_BOUND_S + 30, figures
        assert figures["rerun_s"] <= RERUN_BOUND_S, figures
        assert scenario.placement() == dict.fromkeys(placed, survivor.node)

        # 3. Airflow failed the lost slots' tasks (no heartbeat) and started the slots again on the
        #    survivor: a retry of the lost task, or the task of a consume run waiting for the pool.
        running = _slot_tasks(api, scenario.cluster, states={"running"})
        assert all(t["hostname"] == survivor.node for t in running), running
        lost_names = {f"{scenario.cluster}-slot-{n}" for n in figures["slots_lost"]}
        assert lost_names <= {t["rendered_map_index"] for t in running}, running

        # 4. The worker starts again and takes work: the next start of the slots uses both workers.
        victim.start()
        assert ping_workers(cfg, [victim.node]) == {victim.node}
        scenario.restart_slots()
        again = scenario.spread([w.node for w in nodes])
        assert set(again.values()) == {w.node for w in nodes}, again

        # 5. Every record once, across the kill, the re-runs and the restarts.
        latest = scenario.drain()
        counts_once = scenario.exactly_once(latest)
        assert counts_once["rows"] == counts_once["expected"] > 0, counts_once
        assert counts_once["duplicates"] == counts_once["missing"] == counts_once["extra"] == 0, counts_once
    finally:
        scenario.stop()


def _status_hosts(scenario: Failover) -> dict[str, str | None]:
    """Slot id -> host, as the page and `lagsched status` show them (`cluster_status`)."""
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import mysql_params, redis_params
    from lagsched.workflows.status import cluster_status

    conn, client = connect(mysql_params()), redis_client(redis_params())
    try:
        status = cluster_status(conn, client, scenario.cluster, datetime.now(UTC))
    finally:
        conn.close()
        client.close()
    return {s.slot_id: s.host for s in status.slots}


def _slot_tasks(api: Any, cluster: str, states: set[str]) -> list[dict[str, Any]]:
    """The consume task instances of the test's slots in ``states``, over the recent runs."""
    prefix = f"{cluster}-slot-"
    return [
        t
        for r in api.dag_runs(CONSUME, limit=20)
        for t in api.task_instances(CONSUME, r["dag_run_id"])
        if t["task_id"] == "consume"
        and str(t.get("rendered_map_index") or "").startswith(prefix)
        and t["state"] in states
    ]
