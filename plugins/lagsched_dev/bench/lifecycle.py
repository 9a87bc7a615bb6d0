"""Slot lifecycle through Airflow on the local stack: start-up share, scale-up reaction, runs an hour.

Run from the repository root (starts Airflow with the stack if it is not running)::

    PYTHONPATH=plugins python -m lagsched_dev.bench lifecycle

It measures what an operator lives with, through the scheduler, the consume DAG, the override
DAG and real Spark slots writing the cluster's Iceberg table, with records arriving all along
(``LAGSCHED_BENCH_LIFECYCLE_RATE`` records/s on a 6-partition topic):

* ``startup_s`` and ``winddown_s``: a slot's wall time not spent consuming, from its Airflow task's
  start to the moment it goes live (its ``joined`` message on ``lagsched:slot_events``, sent once
  Spark is up, right before it claims and reads), and from its last committed batch to its task's
  end (a scale-down's exit). Its first batch, in a cold JVM, counts as consuming here; the
  consumer benchmark reports that batch's rate apart. ``startup_share`` is their sum over a
  default-budget slot (an hour: the cluster's ``slot_budget_s``), the worst of every slot started
  here;
* ``standby_slots``: the cluster's ``standby_slots`` (``LAGSCHED_BENCH_LIFECYCLE_STANDBY``, default 1):
  with 1, slot 2 starts with slot 1 and stands by warm; a scale-up makes it join (reported as
  ``decision_to_join_s`` and ``join_to_first_commit_s``), a scale-down makes it stand by again
  (``scale_down_s``: decision -> slot 2 out of the live set holding no row), and its start-up is
  task start -> standing by. With 0, slot 2 is started by the consume run the decision triggers;
* ``scale_up_reaction_s``: ``LAGSCHED_BENCH_LIFECYCLE_TRIALS`` times (default 5), an override raises
  the topic from 1 to 2 workers (the override DAG, which updates the asset the consume DAG runs on,
  as the evaluator does); from the decision's ``decided_at`` to the first table commit of slot 2
  (its snapshot's timestamp), with where the time went (asset -> run, run -> task start, task start
  -> first commit); then back to 1 and ``scale_down_s`` (decision -> slot 2's lock free);
* ``consume_runs_per_hour``: consume runs created in a steady window of
  ``LAGSCHED_BENCH_LIFECYCLE_STEADY_S`` (default 600) seconds with no change (starting a minute
  after the last trial), per hour; with the schedule's own count (the 15-minute refill plus one
  run per slot end);
* ``duplicate_slot_start``: ``lagsched/jobs/consume.py`` started by hand for slot 1 while it runs: its exit
  status, wall time, message, and whether slot 1's rows kept their holder and epoch.

The consume DAG must be paused when it starts (a demo would share the slots' ownership); the
Variables ``lagsched_clusters`` and the DAGs' paused states are restored at the end, the topic
deleted, its registry rows disabled. Writes ``bench/results/lifecycle.json``. Targets (issue 16):
``startup_share`` <= 0.02, ``scale_up_reaction_s.worst`` <= 60.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB

DEFAULT_OUT = "bench/results/lifecycle.json"
CONSUME, OVERRIDE = "lagsched_consume", "lagsched_override"
PARTITIONS = 6
DEFAULT_BUDGET_S = 3600
TARGETS = {"startup_share": 0.02, "scale_up_reaction_worst_s": 60.0}
ROOT = Path(os.environ.get("LAGSCHED_BENCH_SINK_ROOT", "/var/tmp"))  # noqa: S108


def env_number(name: str, default: float, minimum: float) -> float:
    raw = os.environ.get(name)
    value = float(raw) if raw else default
    if value < minimum:
        raise SystemExit(f"{name}={raw}: at least {minimum}")
    return value


def _ts(value: str | None) -> float | None:
    return None if not value else datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def summarize(values: Sequence[float]) -> dict[str, float]:
    """p50 and worst of a series (the benchmark's figures are worst cases over draws).

    >>> summarize([3.0, 1.0, 2.0])
    {'p50': 2.0, 'worst': 3.0, 'n': 3}
    """
    return {"p50": round(statistics.median(values), 3), "worst": round(max(values), 3), "n": len(values)}


class Producer(threading.Thread):
    """Records arriving at a steady rate for the whole benchmark (a slot's normal life)."""

    def __init__(self, kafka: Mapping[str, Any], topic: str, rate: float) -> None:
        super().__init__(daemon=True, name="bench-producer")
        from confluent_kafka import Producer as KafkaProducer

        self.topic, self.rate = topic, rate
        self.producer = KafkaProducer({**kafka, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            for i in range(self.sent, due):
                self.producer.produce(self.topic, value=b"v" * 100, key=f"k{i}".encode(), partition=i % PARTITIONS)
            self.sent = max(self.sent, due)
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(30)


class JoinWatch(threading.Thread):
    """When each slot went live or stood by: the ``joined`` and ``standby`` messages on
    `SlotRegistry.events_channel`."""

    def __init__(self, cluster: str) -> None:
        super().__init__(daemon=True, name="bench-joins")
        from lagsched.adapters.redis_store import redis_client, subscriber
        from lagsched.adapters.slots import SlotRegistry
        from lagsched.connections import redis_params

        client = redis_client(redis_params())
        self.pubsub = subscriber(client)
        self.pubsub.subscribe(SlotRegistry(client, cluster=cluster).events_channel)
        self.events: list[tuple[str, str, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.pubsub.get_message(timeout=0.5)
            if message and message.get("type") == "message":
                detail = json.loads(message["data"])
                self.events.append((str(detail.get("slot")), str(detail.get("event")), time.time()))

    def first_after(self, slot_id: str, since: float, event: str = "joined") -> float | None:
        return next((t for s, e, t in self.events if s == slot_id and e == event and t > since), None)

    def ready_after(self, slot_id: str, since: float) -> float | None:
        """When the slot was first ready after ``since``: live, or standing by warm."""
        return next((t for s, e, t in self.events if s == slot_id and e in ("joined", "standby") and t > since), None)


class Bench:
    """One benchmark's cluster, topic, Airflow and table (see the module doc)."""

    def __init__(self, api: Any, tag: str, standby: int = 0) -> None:
        from lagsched.adapters.lake_reader import load_table
        from lagsched.adapters.slots import slot_id_for
        from lagsched.connections import mysql_params
        from lagsched.core.lake import LakeTable

        self.api, self.tag, self.standby = api, tag, standby
        self.cluster, self.topic = f"bench_lc_{tag}", f"bench-lc-{tag}"
        self.joins = JoinWatch(self.cluster)
        self.warehouse = ROOT / f"lagsched-bench-lifecycle-{tag}"
        self.sink = {"warehouse": self.warehouse.as_uri()}
        self.lake = LakeTable.of(self.cluster, self.sink, default_warehouse=self.sink["warehouse"])
        self.slot_ids = {n: slot_id_for(f"{self.cluster}-slot-{n}") for n in (1, 2)}
        self._load_table: Callable[[], Any] = lambda: load_table(self.lake, mysql_params())

    # -- what the table and MySQL say -------------------------------------------------------------

    def commits(self, slot: int) -> list[float]:
        """Unix times of the table commits of slot ``slot`` (its snapshots' timestamps)."""
        try:
            table = self._load_table()
        except Exception:  # noqa: BLE001 - not created yet (the first slot creates it)
            return []
        wanted = self.slot_ids[slot]
        return sorted(
            s.timestamp_ms / 1000
            for s in table.metadata.snapshots
            if s.summary is not None and s.summary.additional_properties.get("lagsched.slot") == wanted
        )

    def first_commit_after(self, slot: int, since: float, timeout_s: float) -> float:
        found: list[float] = []

        def committed() -> bool:
            found[:] = [t for t in self.commits(slot) if t > since]
            return bool(found)

        wait(committed, timeout_s, f"slot {slot}'s first table commit", poll=0.5)
        return found[0]

    def decision_at(self, linker_workers: int, since: float, timeout_s: float = 120) -> float:
        """``decided_at`` of the topic's decision to ``linker_workers`` made after ``since``."""
        from lagsched.adapters.mysql import connect
        from lagsched.connections import mysql_params

        found: list[float] = []

        def decided() -> bool:
            conn = connect(mysql_params())
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT d.decided_at FROM scaling_decisions d JOIN topics t USING (topic_id)"
                        " WHERE t.cluster = %s AND t.name = %s AND d.linker_workers = %s ORDER BY d.decided_at DESC"
                        " LIMIT 1",
                        (self.cluster, self.topic, linker_workers),
                    )
                    row = cur.fetchone()
            finally:
                conn.close()
            if row is None:
                return False
            at = row[0].replace(tzinfo=UTC).timestamp()
            if at < since - 1:
                return False
            found.append(at)
            return True

        wait(decided, timeout_s, f"the decision to {linker_workers} worker(s)", poll=0.3)
        return found[-1]

    def claims(self) -> dict[int, tuple[Any, ...]]:
        from lagsched.adapters.mysql import connect
        from lagsched.connections import mysql_params

        conn = connect(mysql_params())
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT p.partition_id, p.claimed_by, p.claim_epoch FROM topic_partitions p"
                    " JOIN topics t USING (topic_id) WHERE t.cluster = %s AND t.name = %s AND t.enabled",
                    (self.cluster, self.topic),
                )
                return {int(r[0]): (r[1], int(r[2])) for r in cur.fetchall()}
        finally:
            conn.close()

    def running(self, slot: int) -> bool:
        from lagsched.adapters.redis_store import redis_client
        from lagsched.adapters.slots import SlotLock
        from lagsched.connections import redis_params

        client = redis_client(redis_params())
        try:
            return bool(SlotLock(client).holders([self.slot_ids[slot]]))
        finally:
            client.close()

    def live(self, slot: int) -> bool:
        """Whether slot ``slot`` heartbeats in the cluster's live set."""
        from lagsched.adapters.redis_store import redis_client
        from lagsched.adapters.slots import SlotRegistry
        from lagsched.connections import redis_params

        client = redis_client(redis_params())
        try:
            return self.slot_ids[slot] in SlotRegistry(client, cluster=self.cluster).live_slots(datetime.now(UTC), 15)
        finally:
            client.close()

    def standing_by(self, slot: int) -> bool:
        """Running (its lock held), not live, holding no row: a warm standby."""
        held = any(h == self.slot_ids[slot] for h, _ in self.claims().values())
        return self.running(slot) and not self.live(slot) and not held

    # -- Airflow --------------------------------------------------------------------------------

    def override(self, workers: int, *, decided: bool = True) -> float:
        """Pin the topic at ``workers`` through the override DAG; the decision's time (``decided``:
        wait for it; else the time asked, for a pin at the count the topic already has)."""
        asked = time.time()
        run_id = self.api.trigger(
            OVERRIDE,
            {"topic": self.topic, "linker_workers": workers, "duration": "2h", "reason": "lifecycle benchmark",
             "cluster": self.cluster},
        )  # fmt: skip
        state = self.api.wait_for_run(OVERRIDE, run_id, timeout_s=180, sleep=lambda _s: time.sleep(0.5))
        if state != "success":
            raise RuntimeError(f"override run {run_id} ended {state}")
        return self.decision_at(workers, asked) if decided else asked

    def slot_task(self, slot: int, since: float) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The consume run created after ``since`` whose task ran slot ``slot``, and that task.

        Two runs may start the slot at once (the asset's and the 15-minute refill's): the second
        start leaves within seconds, so the task that ran it is the one that ended last.
        """
        name = f"{self.cluster}-slot-{slot}"
        found: list[tuple[float, dict[str, Any], dict[str, Any]]] = []
        for run in self.api.dag_runs(CONSUME, limit=20):
            created = _ts(run.get("queued_at") or run.get("run_after")) or 0.0
            if created < since - 1:
                continue
            for ti in self.api.task_instances(CONSUME, run["dag_run_id"]):
                if ti["task_id"] == "consume" and ti.get("rendered_map_index") == name:
                    found.append((_ts(ti.get("end_date")) or float("inf"), run, ti))
        if not found:
            return None
        _, run, ti = max(found, key=lambda f: f[0])
        return run, ti

    def runs_created(self, start: float, end: float) -> list[dict[str, Any]]:
        runs = self.api.dag_runs(CONSUME, limit=100)
        return [r for r in runs if start <= (_ts(r.get("queued_at") or r.get("run_after")) or 0) < end]


def wait(predicate: Callable[[], bool], timeout_s: float, what: str, poll: float = 1.0) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - started


def scale_up_trial(bench: Bench, n: int) -> dict[str, Any]:
    if bench.standby:
        return standby_trial(bench, n)
    wait(lambda: not bench.running(2), 180, "slot 2 to be gone before the trial")
    decided = bench.override(2)
    first = bench.first_commit_after(2, decided, 240)
    found = bench.slot_task(2, decided)
    trial: dict[str, Any] = {"trial": n, "reaction_s": round(first - decided, 3)}
    if found is not None:
        run, ti = found
        queued, ti_start = _ts(run.get("queued_at")), _ts(ti.get("start_date"))
        if queued is not None and ti_start is not None:
            trial["decision_to_run_s"] = round(queued - decided, 3)
            trial["run_to_task_start_s"] = round(ti_start - queued, 3)
            trial["task_start_to_first_commit_s"] = round(first - ti_start, 3)
    print(f"   trial {n}: scale-up reaction {trial['reaction_s']:.1f} s {trial}", flush=True)
    down = bench.override(1)
    wait(lambda: not bench.running(2), 180, "slot 2 to leave after the scale-down", poll=0.5)
    trial["scale_down_s"] = round(time.time() - down, 3)
    ended = bench.slot_task(2, decided)
    last = [t for t in bench.commits(2) if t > decided]
    if ended is not None and last:
        end = _ts(ended[1].get("end_date"))
        if end is None:
            wait(lambda: _ts((bench.slot_task(2, decided) or ({}, {}))[1].get("end_date")) is not None, 60, "its end")
            end = _ts((bench.slot_task(2, decided) or ({}, {}))[1].get("end_date"))
        if end is not None:
            trial["winddown_s"] = round(end - last[-1], 3)
            start = _ts(ended[1].get("start_date"))
            live = bench.joins.first_after(bench.slot_ids[2], decided)
            trial["startup_s"] = round(live - start, 3) if start is not None and live is not None else None
    return trial


def standby_trial(bench: Bench, n: int) -> dict[str, Any]:
    """With ``standby_slots`` 1: slot 2 already runs, warm and standing by; the scale-up makes it
    join (no Spark start), the scale-down makes it stand by again (no exit)."""
    wait(lambda: bench.standing_by(2), 240, "slot 2 to stand by before the trial")
    decided = bench.override(2)
    first = bench.first_commit_after(2, decided, 240)
    trial: dict[str, Any] = {"trial": n, "reaction_s": round(first - decided, 3)}
    joined = bench.joins.first_after(bench.slot_ids[2], decided)
    if joined is not None:
        trial["decision_to_join_s"] = round(joined - decided, 3)
        trial["join_to_first_commit_s"] = round(first - joined, 3)
    print(f"   trial {n}: scale-up reaction {trial['reaction_s']:.1f} s {trial}", flush=True)
    down = bench.override(1)
    wait(lambda: bench.standing_by(2), 180, "slot 2 to stand by after the scale-down", poll=0.5)
    trial["scale_down_s"] = round(time.time() - down, 3)
    trial["slot_2_restarted"] = bool(bench.slot_task(2, decided))
    return trial


def duplicate_start(bench: Bench, env: Mapping[str, str]) -> dict[str, Any]:
    """``lagsched/jobs/consume.py`` for slot 1 by hand while slot 1 runs (as a second Airflow start would)."""
    from lagsched.adapters.spark import submit_command
    from lagsched.core.lake import job_args

    before = bench.claims()
    argv = ["--slot", f"{bench.cluster}-slot-1", "--cluster", bench.cluster, *job_args(bench.sink)]
    started = time.monotonic()
    proc = subprocess.run(  # noqa: S603 - our own job, arguments built here
        submit_command(CONSUME_JOB, argv, master="local[1]"),
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    after = bench.claims()
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "lagsched consume:" in line]
    return {
        "exit_status": proc.returncode,
        "wall_s": round(time.monotonic() - started, 3),
        "message": said[-1] if said else None,
        "first_slot_rows_untouched": before == after and any(h for h, _ in before.values()),
        "first_slot_still_running": bench.running(1),
    }


def measure(api: Any, trials: int, steady_s: float, rate: float, standby: int = 0) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params
    from lagsched.workflows.topic_sync import sync_registry

    tag = uuid.uuid4().hex[:6]
    bench = Bench(api, tag, standby)
    kafka = kafka_config()
    admin = AdminClient(kafka)
    admin.create_topics([NewTopic(bench.topic, PARTITIONS, 1)])[bench.topic].result(60)
    saved = api.get_variable("lagsched_clusters")
    paused = {d: bool((api.get_dag(d) or {}).get("is_paused", True)) for d in (CONSUME, OVERRIDE)}
    producer = Producer(kafka, bench.topic, rate)
    bench.joins.start()
    result: dict[str, Any] = {
        "cluster": bench.cluster, "rate_records_per_s": rate, "partitions": PARTITIONS, "standby_slots": standby,
    }  # fmt: skip
    try:
        settings = {"topic_pattern": bench.topic, "max_slots": 2, "standby_slots": standby, "sink": bench.sink}
        api.set_variable(
            "lagsched_clusters",
            json.dumps({bench.cluster: settings}),
        )
        conn = connect(mysql_params())
        try:
            sync_registry(conn, admin, bench.cluster, only=[bench.topic])
            conn.commit()
        finally:
            conn.close()
        api.set_paused(OVERRIDE, False)
        producer.start()
        bench.override(1, decided=False)  # pinned: the evaluator leaves the topic alone from now on

        print("-- slot 1: cold start through the consume DAG", flush=True)
        api.set_paused(CONSUME, False)
        triggered = time.time()
        api.trigger(CONSUME)
        first = bench.first_commit_after(1, triggered, 300)
        found = bench.slot_task(1, triggered)
        start1 = _ts(found[1].get("start_date")) if found else None
        live1 = bench.joins.first_after(bench.slot_ids[1], triggered)
        result["first_slot"] = {
            "trigger_to_first_commit_s": round(first - triggered, 3),
            "task_start_to_first_commit_s": round(first - start1, 3) if start1 is not None else None,
            "startup_s": round(live1 - start1, 3) if start1 is not None and live1 is not None else None,
        }
        if standby:
            # Slot 2 started with slot 1, as its standby: task start -> standing by warm.
            found2 = bench.slot_task(2, triggered)
            start2 = _ts(found2[1].get("start_date")) if found2 else None
            ready2 = bench.joins.ready_after(bench.slot_ids[2], triggered)
            result["standby_slot"] = {
                "startup_s": round(ready2 - start2, 3) if start2 is not None and ready2 is not None else None,
            }
        print(f"   {result['first_slot']} {result.get('standby_slot', '')}", flush=True)

        print(f"-- {trials} scale-up trials (1 -> 2 workers, then back)", flush=True)
        runs = [scale_up_trial(bench, n) for n in range(1, trials + 1)]
        result["trials"] = runs
        reactions = [r["reaction_s"] for r in runs]
        result["scale_up_reaction_s"] = summarize(reactions)
        result["scale_down_s"] = summarize([r["scale_down_s"] for r in runs])

        print(f"-- steady: {steady_s:.0f} s without changes, counting consume runs", flush=True)
        time.sleep(60)  # the last trial's slot end starts a run of its own: not the steady state
        window_start = time.time()
        time.sleep(steady_s)
        steady = bench.runs_created(window_start, time.time())
        result["steady_window_s"] = steady_s
        result["consume_runs_in_steady_window"] = {
            "count": len(steady),
            "run_types": sorted(str(r.get("run_type")) for r in steady),
        }
        result["consume_runs_per_hour"] = round(len(steady) * 3600 / steady_s, 2)
        # What the schedule makes of an hour at steady load: the 15-minute refill, plus one run per
        # slot that reaches its budget (one live slot here, an hour's budget).
        result["consume_runs_per_hour_by_schedule"] = 60 / 15 + 1 * 3600 / DEFAULT_BUDGET_S

        print("-- a second start of slot 1 while it runs", flush=True)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        result["duplicate_slot_start"] = duplicate_start(bench, env)
        print(f"   {result['duplicate_slot_start']}", flush=True)

        startups = [r["startup_s"] for r in runs if r.get("startup_s") is not None]
        if result["first_slot"]["startup_s"] is not None:
            startups.append(result["first_slot"]["startup_s"])
        if (result.get("standby_slot") or {}).get("startup_s") is not None:
            startups.append(result["standby_slot"]["startup_s"])
        winddowns = [r["winddown_s"] for r in runs if r.get("winddown_s") is not None]
        result["startup_s"] = summarize(startups)
        result["winddown_s"] = summarize(winddowns) if winddowns else None
        overhead = max(startups) + (max(winddowns) if winddowns else 0.0)
        result["default_budget_s"] = DEFAULT_BUDGET_S
        result["startup_share"] = round(overhead / (DEFAULT_BUDGET_S + overhead), 4)
        result["targets"] = {
            "startup_share": {"target": TARGETS["startup_share"], "met": result["startup_share"] <= 0.02},
            "scale_up_reaction_worst_s": {
                "target": TARGETS["scale_up_reaction_worst_s"],
                "met": max(reactions) <= TARGETS["scale_up_reaction_worst_s"],
            },
        }
        return result
    finally:
        producer.stop.set()
        bench.joins.stop.set()
        quietly(lambda: api.set_paused(CONSUME, True))
        quietly(lambda: stop_consume_runs(api))
        quietly(lambda: api.set_paused(OVERRIDE, paused[OVERRIDE]))
        quietly(lambda: api.set_paused(CONSUME, paused[CONSUME]))
        if saved is None:
            quietly(lambda: api.delete_variable("lagsched_clusters"))
        else:
            quietly(lambda: api.set_variable("lagsched_clusters", saved))
        quietly(lambda: _disable(bench))
        time.sleep(20)  # the stopped slots finish their batch before their topic goes
        quietly(lambda: admin.delete_topics([bench.topic])[bench.topic].result(60))
        shutil.rmtree(bench.warehouse, ignore_errors=True)


def stop_consume_runs(api: Any) -> None:
    """Mark every unfinished consume run failed: its slot tasks are killed, their drivers stop gracefully."""
    for run in api.dag_runs(CONSUME, limit=20):
        if run["state"] in ("queued", "running"):
            api.mark_run(CONSUME, run["dag_run_id"], "failed")


def _disable(bench: Bench) -> None:
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    conn = connect(mysql_params())
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET enabled = FALSE WHERE cluster = %s", (bench.cluster,))
        conn.commit()
    finally:
        conn.close()


def quietly(step: Callable[[], Any]) -> Any:
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - cleanup goes on; say what failed
        print(f"   cleanup step failed: {exc}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.lifecycle", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from lagsched_dev import stack as local_stack
    from lagsched_dev.airflow_api import AirflowAPI
    from lagsched_dev.bench.consumer import _use_local_stack
    from lagsched_dev.stack.config import load

    _use_local_stack()
    trials = int(env_number("LAGSCHED_BENCH_LIFECYCLE_TRIALS", 5, 1))
    steady_s = env_number("LAGSCHED_BENCH_LIFECYCLE_STEADY_S", 600, 30)
    rate = env_number("LAGSCHED_BENCH_LIFECYCLE_RATE", 1500, 10)
    standby = int(env_number("LAGSCHED_BENCH_LIFECYCLE_STANDBY", 1, 0))
    cfg = load()
    local_stack.up(cfg, airflow=True)
    api = AirflowAPI.for_simple_auth(f"http://127.0.0.1:{cfg.airflow_port}", cfg.airflow_home)
    for dag_id in (CONSUME, OVERRIDE):
        api.wait_for_dag(dag_id)
    if not consume_paused(api):
        return 1
    record(args.out, lambda: measure(api, trials, steady_s, rate, standby))
    return 0


def consume_paused(api: Any) -> bool:
    """Whether lagsched_consume is paused, as a benchmark through Airflow needs it (said if not)."""
    consume = api.get_dag(CONSUME)
    if consume is not None and not consume["is_paused"]:
        print(
            "lagsched_consume is unpaused (a demo?): pause it first; its slots would share ownership", file=sys.stderr
        )
        return False
    return True


def record(out: str, measure_it: Callable[[], dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """Run ``measure_it``; its figures with the start time, the machine and its load before and after
    (and ``extra``), printed and written to ``out`` as JSON."""
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    result = measure_it()
    doc = {
        "started_at": started_at,
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        **extra,
        **result,
    }
    print(json.dumps(doc, indent=2, default=str))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return doc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
