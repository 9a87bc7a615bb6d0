"""A Celery worker lost mid-run: SIGKILL it with its slots, time the failover, count every record.

Run from the repository root (starts the stack with Airflow's CeleryExecutor and two workers; a
standalone Airflow that runs is stopped first, and started again at the end)::

    PYTHONPATH=plugins python -m lagsched_dev.bench failover

The scenario, on the real stack through Airflow's own scheduler and Celery workers: a 6-partition
topic pinned at 3 workers (the override DAG), records arriving all along
(``LAGSCHED_BENCH_FAILOVER_RATE`` records/s), the consume DAG's 3 slots spread over both workers.
``LAGSCHED_BENCH_FAILOVER_KILLS`` times (default 3):

1. the slots run on both workers (else they are stopped and started again until they do);
2. the worker running most slots is SIGKILLed with every process below it (its slots' task
   supervisors, spark-submits, JVMs and Python drivers): nothing of it leaves gracefully;
3. ``takeover_s``: kill -> every partition held by a live slot of the surviving worker (the dead
   slots' leases run out, the survivors' rendezvous takes their rows);
   ``recovered_s``: kill -> every partition committed past its offset at the kill (consumed again);
   ``lag_at_kill``, ``peak_lag``, ``lag_at_recovery``: the topic's records not yet committed;
   ``rerun_s``: kill -> the lost slots running again (Airflow fails their tasks when their
   heartbeats stop, ``task_instance_heartbeat_timeout``, and retries them on the survivor);
4. the worker is started again: ``rejoin_s`` is start -> answering Celery's ping.

At the end the producer stops, the slots drain the topic, and every offset must be in the
cluster's Iceberg table exactly once. Writes ``bench/results/failover.json``; the figures are the
worst over the kills.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lagsched_dev.bench.lifecycle import (
    Producer,
    consume_paused,
    env_number,
    quietly,
    record,
    stop_consume_runs,
    summarize,
    wait,
)
from lagsched_dev.stack.config import with_celery
from lagsched_dev.stack.environment import celery_environment

DEFAULT_OUT = "bench/results/failover.json"
CONSUME, OVERRIDE = "lagsched_consume", "lagsched_override"
PARTITIONS = 6
SLOTS = 3
ROOT = Path(os.environ.get("LAGSCHED_BENCH_SINK_ROOT", "/var/tmp"))  # noqa: S108


class Failover:
    """One scenario's cluster, topic, producer and table, on a stack running Celery workers."""

    def __init__(self, api: Any, cfg: Any, rate: float, tag: str | None = None) -> None:
        from lagsched.adapters.slots import slot_id_for
        from lagsched.core.lake import LakeTable

        self.api, self.cfg, self.rate = api, cfg, rate
        self.tag = tag or uuid.uuid4().hex[:6]
        self.cluster, self.topic = f"failover_{self.tag}", f"failover-{self.tag}"
        self.warehouse = ROOT / f"lagsched-failover-{self.tag}"
        self.sink = {"warehouse": self.warehouse.as_uri()}
        self.lake = LakeTable.of(self.cluster, self.sink, default_warehouse=self.sink["warehouse"])
        self.slot_ids = {n: slot_id_for(f"{self.cluster}-slot-{n}") for n in range(1, SLOTS + 1)}
        self.producer: Producer | None = None
        self._probe: Any = None
        self._saved: str | None = None
        self._paused: dict[str, bool] = {}

    # -- set-up and tear-down -----------------------------------------------------------------------

    def start(self) -> None:
        """Topic, Variable, pin at 3 workers, records arriving, the consume DAG unpaused and triggered."""
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        from lagsched.adapters.mysql import connect
        from lagsched.connections import kafka_config, mysql_params
        from lagsched.workflows.topic_sync import sync_registry

        kafka = kafka_config()
        self.admin = AdminClient(kafka)
        self.admin.create_topics([NewTopic(self.topic, PARTITIONS, 1)])[self.topic].result(60)
        self._saved = self.api.get_variable("lagsched_clusters")
        self._paused = {d: bool((self.api.get_dag(d) or {}).get("is_paused", True)) for d in (CONSUME, OVERRIDE)}
        # The demo's commit cadence (5 s): the failover is measured by committed offsets, which the
        # production default (30 s) would move up to 25 s later; the lease, not the cadence, is measured.
        settings = {"topic_pattern": self.topic, "max_slots": SLOTS, "sink": self.sink, "commit_interval_s": 5}
        self.api.set_variable("lagsched_clusters", json.dumps({self.cluster: settings}))
        conn = connect(mysql_params())
        try:
            sync_registry(conn, self.admin, self.cluster, only=[self.topic])
            conn.commit()
        finally:
            conn.close()
        self.api.set_paused(OVERRIDE, False)
        run_id = self.api.trigger(
            OVERRIDE,
            {"topic": self.topic, "linker_workers": SLOTS, "duration": "2h", "reason": "failover benchmark",
             "cluster": self.cluster},
        )  # fmt: skip
        state = self.api.wait_for_run(OVERRIDE, run_id, timeout_s=180, sleep=lambda _s: time.sleep(0.5))
        if state != "success":
            raise RuntimeError(f"override run {run_id} ended {state}")
        self.producer = Producer(kafka, self.topic, self.rate)
        self.producer.start()
        self.api.set_paused(CONSUME, False)
        self.api.trigger(CONSUME)

    def stop(self) -> None:
        """Producer, consume runs, Variables and paused states back; the topic and table go."""
        if self.producer is not None:
            self.producer.stop.set()
        quietly(lambda: self.api.set_paused(CONSUME, True))
        quietly(lambda: stop_consume_runs(self.api))
        quietly(lambda: self.api.set_paused(OVERRIDE, self._paused.get(OVERRIDE, True)))
        if self._saved is None:
            quietly(lambda: self.api.delete_variable("lagsched_clusters"))
        else:
            quietly(lambda: self.api.set_variable("lagsched_clusters", self._saved))
        quietly(self._disable)
        if self._probe is not None:
            quietly(self._probe.close)
        time.sleep(15)  # the stopped slots finish their batch before their topic goes
        quietly(lambda: self.admin.delete_topics([self.topic])[self.topic].result(60))
        shutil.rmtree(self.warehouse, ignore_errors=True)

    def _disable(self) -> None:
        from lagsched.adapters.mysql import connect
        from lagsched.connections import mysql_params

        conn = connect(mysql_params())
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE topics SET enabled = FALSE WHERE cluster = %s", (self.cluster,))
            conn.commit()
        finally:
            conn.close()

    # -- what Redis, MySQL and Kafka say ----------------------------------------------------------

    def placement(self) -> dict[int, str]:
        """Slot number -> the worker whose process holds its lock (the running slots)."""
        from lagsched.adapters.redis_store import redis_client
        from lagsched.adapters.slots import SlotLock, token_worker
        from lagsched.connections import redis_params

        client = redis_client(redis_params())
        try:
            holders = SlotLock(client).holders(list(self.slot_ids.values()))
        finally:
            client.close()
        return {n: token_worker(holders[s]) for n, s in self.slot_ids.items() if s in holders}

    def live_slots(self) -> set[int]:
        from lagsched.adapters.redis_store import redis_client
        from lagsched.adapters.slots import SlotRegistry
        from lagsched.connections import redis_params

        client = redis_client(redis_params())
        try:
            live = set(
                SlotRegistry(client, cluster=self.cluster).live_slots(datetime.now(UTC), slot_defaults().slot_timeout_s)
            )
        finally:
            client.close()
        return {n for n, s in self.slot_ids.items() if s in live}

    def rows(self) -> dict[int, tuple[str | None, int, bool]]:
        """Partition -> (holder slot id, committed offset, lease live by the database's clock)."""
        from lagsched.adapters.mysql import connect
        from lagsched.connections import mysql_params

        conn = connect(mysql_params())
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT p.partition_id, p.claimed_by, COALESCE(p.committed_offset, 0),"
                    " p.lease_expires_at > CURRENT_TIMESTAMP(6) FROM topic_partitions p JOIN topics t USING (topic_id)"
                    " WHERE t.cluster = %s AND t.name = %s AND t.enabled",
                    (self.cluster, self.topic),
                )
                return {int(r[0]): (r[1], int(r[2]), bool(r[3])) for r in cur.fetchall()}
        finally:
            conn.close()

    def latest(self) -> dict[int, int]:
        """Each partition's end offset (one probe consumer for the scenario, asked every second)."""
        from confluent_kafka import Consumer, TopicPartition

        from lagsched.connections import kafka_config

        if self._probe is None:
            settings = {**kafka_config(), "group.id": f"failover-probe-{self.tag}", "enable.auto.commit": False}
            self._probe = Consumer(settings)
        probe = self._probe
        return {p: probe.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in range(PARTITIONS)}

    def lag(self, rows: dict[int, tuple[str | None, int, bool]]) -> int:
        """Records not yet committed, against ``rows`` (`rows`) read just before."""
        return sum(max(0, end - (rows[p][1] if p in rows else 0)) for p, end in self.latest().items())

    # -- the scenario ------------------------------------------------------------------------------

    def spread(self, nodes: Sequence[str], attempts: int = 4) -> dict[int, str]:
        """Wait for the 3 slots to run, on every worker of ``nodes``; if Celery put them all on one,
        stop the runs (the slots leave gracefully) and trigger the consume DAG again."""
        for attempt in range(1, attempts + 1):
            wait(lambda: len(self.placement()) == SLOTS and self.live_slots() == set(self.slot_ids), 300,
                 "the 3 slots to run and be live", poll=2)  # fmt: skip
            placed = self.placement()
            if set(placed.values()) >= set(nodes):
                return placed
            print(
                f"   attempt {attempt}: every slot on {sorted(set(placed.values()))}; starting them again", flush=True
            )
            self.restart_slots()
        raise RuntimeError(f"the slots never ran on all of {list(nodes)} in {attempts} starts")

    def restart_slots(self) -> None:
        """Stop the consume runs (each slot finishes its batch and leaves), then start the slots anew. A
        consume run plans only the slots not running, so the trigger waits for them to be gone."""
        stop_consume_runs(self.api)
        wait(lambda: not self.placement(), 180, "the slots to leave", poll=2)
        self.api.trigger(CONSUME)

    def kill(self, worker: Any, survivor: str, timeout_s: float = 600) -> dict[str, Any]:
        """SIGKILL ``worker`` (a `CeleryWorker`) and its whole tree; the failover's figures."""
        from lagsched_dev.stack.process import kill_tree

        placed = self.placement()
        lost = sorted(n for n, w in placed.items() if w == worker.node)
        before = self.rows()
        lag_at_kill = self.lag(before)
        pid = worker.pid()
        if pid is None:
            raise RuntimeError(f"{worker.name} is not running")
        killed_at = time.monotonic()
        killed = kill_tree(pid, signal.SIGKILL)
        print(f"   killed {worker.node}: {len(killed)} processes, slots {lost} with it", flush=True)
        survivor_ids = {self.slot_ids[n] for n, w in placed.items() if w == survivor}
        marks: dict[str, float] = {}
        peak = lag_at_kill
        deadline = killed_at + timeout_s
        while time.monotonic() < deadline:
            now = time.monotonic() - killed_at
            rows = self.rows()
            lag = self.lag(rows)
            peak = max(peak, lag)
            if "takeover_s" not in marks and all(live and holder in survivor_ids for holder, _, live in rows.values()):
                marks["takeover_s"] = now
            if "recovered_s" not in marks and all(rows[p][1] > before[p][1] for p in rows):
                marks["recovered_s"] = now
                marks["lag_at_recovery"] = lag
            placed_now = self.placement()
            if "rerun_s" not in marks and len(placed_now) == SLOTS and set(placed_now.values()) == {survivor}:
                marks["rerun_s"] = now
            if {"takeover_s", "recovered_s", "rerun_s"} <= set(marks):
                break
            time.sleep(1)
        else:
            raise TimeoutError(f"the failover did not complete in {timeout_s:.0f} s: {marks}")
        return {
            "worker": worker.node,
            "slots_lost": lost,
            "processes_killed": len(killed),
            "takeover_s": round(marks["takeover_s"], 1),
            "recovered_s": round(marks["recovered_s"], 1),
            "rerun_s": round(marks["rerun_s"], 1),
            "lag_at_kill": lag_at_kill,
            "peak_lag": peak,
            "lag_at_recovery": int(marks["lag_at_recovery"]),
        }

    def drain(self, timeout_s: float = 300) -> dict[int, int]:
        """Stop producing; wait for every record to be committed. The topic's end offsets."""
        assert self.producer is not None
        self.producer.stop.set()
        self.producer.join(60)
        latest = self.latest()
        wait(lambda: all(self.rows()[p][1] == end for p, end in latest.items()), timeout_s,
             "every record committed", poll=2)  # fmt: skip
        return latest

    def exactly_once(self, latest: dict[int, int]) -> dict[str, int]:
        """Every offset below ``latest`` in the table once: counts of rows, duplicates, missing, extra."""
        from lagsched.adapters.lake_reader import read_rows
        from lagsched.connections import mysql_params

        table = read_rows(self.lake, mysql_params(), topic=self.topic)
        seen = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
        expected = {(p, o) for p, end in latest.items() for o in range(end)}
        return {
            "rows": len(seen),
            "expected": len(expected),
            "duplicates": len(seen) - len(set(seen)),
            "missing": len(expected - set(seen)),
            "extra": len(set(seen) - expected),
        }


def slot_defaults() -> Any:
    """The `ConsumerSettings` a slot of the consume DAG runs with (its lease, its heartbeat timeout)."""
    from lagsched.adapters.slots import new_slot_id
    from lagsched.workflows.slot_settings import ConsumerSettings

    return ConsumerSettings(slot_id=new_slot_id())


def celery_stack(cfg: Any) -> Any:
    """The stack with Airflow on Celery (2 workers), an Airflow running otherwise stopped first; the API."""
    from lagsched_dev import stack as local_stack
    from lagsched_dev.airflow_api import AirflowAPI
    from lagsched_dev.stack.services import Airflow

    celery_cfg = with_celery(cfg, 2)
    wanted = Airflow(celery_cfg)
    if wanted.running_mode() not in (None, wanted.mode()):
        wanted.stop(with_database=False)
    local_stack.up(celery_cfg, airflow=True)
    return celery_cfg, AirflowAPI.for_simple_auth(f"http://127.0.0.1:{cfg.airflow_port}", cfg.airflow_home)


def measure(api: Any, cfg: Any, kills: int, rate: float) -> dict[str, Any]:
    from lagsched_dev.stack.celery import workers

    nodes = workers(cfg)
    scenario = Failover(api, cfg, rate)
    result: dict[str, Any] = {"cluster": scenario.cluster, "rate_records_per_s": rate, "partitions": PARTITIONS,
                              "slots": SLOTS, "workers": [w.node for w in nodes]}  # fmt: skip
    try:
        scenario.start()
        runs = []
        for n in range(1, kills + 1):
            print(f"-- kill {n} of {kills}", flush=True)
            placed = scenario.spread([w.node for w in nodes])
            counts = {w.node: sum(1 for v in placed.values() if v == w.node) for w in nodes}
            victim = max(nodes, key=lambda w: counts[w.node])
            survivor = next(w for w in nodes if w is not victim)
            time.sleep(20)  # steady state before the kill
            run = {"placement_before": {str(k): v for k, v in sorted(placed.items())},
                   **scenario.kill(victim, survivor.node)}  # fmt: skip
            restarted = time.monotonic()
            victim.start()
            run["rejoin_s"] = round(time.monotonic() - restarted, 1)
            print(f"   {run}", flush=True)
            runs.append(run)
        latest = scenario.drain()
        result["exactly_once"] = scenario.exactly_once(latest)
        result["kills"] = runs
        for key in ("takeover_s", "recovered_s", "rerun_s", "rejoin_s", "peak_lag", "lag_at_recovery"):
            result[key] = summarize([r[key] for r in runs])
        return result
    finally:
        scenario.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.failover", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from lagsched_dev.bench.consumer import _use_local_stack
    from lagsched_dev.stack.config import load

    _use_local_stack()
    kills = int(env_number("LAGSCHED_BENCH_FAILOVER_KILLS", 3, 1))
    rate = env_number("LAGSCHED_BENCH_FAILOVER_RATE", 300, 10)
    cfg, api = celery_stack(load())
    for dag_id in (CONSUME, OVERRIDE):
        api.wait_for_dag(dag_id)
    if not consume_paused(api):
        return 1
    slot = slot_defaults()
    settings = {
        "task_instance_heartbeat_timeout_s": int(
            celery_environment(cfg)["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"]
        ),
        "retry_delay_s": 30,  # the consume DAG's default_args
        "slot_lease_s": slot.lease_s,
        "slot_timeout_s": slot.slot_timeout_s,
    }
    result = record(args.out, lambda: measure(api, cfg, kills, rate), settings=settings)
    ok = result["exactly_once"]["duplicates"] == 0 and result["exactly_once"]["missing"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
