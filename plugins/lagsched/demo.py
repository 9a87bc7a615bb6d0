"""`make demo`: the local stack plus Airflow, then lagsched's DAGs run the way a user would run them."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from lagsched import stack
from lagsched.adapters.airflow_api import PASSWORDS_FILE, AirflowAPI, AirflowAPIError
from lagsched.stack.config import load
from lagsched.stack.process import ServiceError

DEMO_DAGS = ["lagsched_setup", "lagsched_lag_monitor", "lagsched_scaling_evaluator"]

# Uneven volumes, as in the field: one hot topic, one warm, one nearly idle.
DEMO_TOPICS = {"demo.orders": (8, 120_000), "demo.clicks": (4, 12_000), "demo.audit": (1, 20)}


def seed_demo_topics(kafka_config: dict[str, Any]) -> None:
    """Create the demo topics if missing and produce a batch to each (every run adds more lag)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(kafka_config)
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [NewTopic(name, parts, 1) for name, (parts, _) in DEMO_TOPICS.items() if name not in existing]
    if missing:
        for future in admin.create_topics(missing, operation_timeout=30).values():
            future.result(timeout=30)
    producer = Producer({**kafka_config, "linger.ms": 50})
    for name, (_, records) in DEMO_TOPICS.items():
        for i in range(records):
            producer.produce(name, key=str(i).encode(), value=b'{"demo": true}')
            if i % 10_000 == 0:
                producer.poll(0)
        print(f"    produced {records:>7,} records to {name}", flush=True)
    producer.flush(60)


DEMO_SLOTS = 2


def consume_demo(cfg: Any, sink: Any) -> list[str]:
    """Run ``DEMO_SLOTS`` consumer slots side by side until every claimed partition is caught up."""
    import subprocess

    from lagsched.adapters.spark import submit_command
    from lagsched.stack.environment import stack_environment

    env = {**os.environ, **stack_environment(cfg)}
    os.environ.setdefault("LAGSCHED_SPARK_JARS", env["LAGSCHED_SPARK_JARS"])  # submit_command checks them
    job = str(cfg.repo / "jobs" / "consume.py")
    procs = []
    for n in range(1, DEMO_SLOTS + 1):
        log_path = cfg.logs / f"demo-consume-{n}.log"
        # A budget too: on a machine with other topics registered the demo must still end.
        args = ["--slot", f"demo-{n}", "--sink", sink.as_uri(), "--exit-when-idle", "--min-interval-s", "1"]
        args += ["--budget-s", "300"]
        args += ["--max-records", "50000", "--stats-file", str(cfg.logs / f"demo-consume-{n}.stats")]
        with log_path.open("wb") as out:
            cmd = submit_command(job, args, master="local[1]")
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - our own argv
            procs.append((f"demo-{n}", log_path, proc))
    failed = []
    for name, log_path, proc in procs:
        code = proc.wait()
        tail = log_path.read_text(errors="replace").splitlines()
        done = [line for line in tail if "lagsched.consume: done" in line]
        print(
            f"    slot {name}: exit {code}; {done[-1].split(': ', 1)[-1] if done else ''} (log {log_path})", flush=True
        )
        if code != 0:
            print("\n".join("      " + line for line in tail[-10:]), flush=True)
            failed.append(f"consume {name}")
    return failed


def _show_lag(api: AirflowAPI, when: str) -> list[str]:
    run_id = api.trigger("lagsched_lag_monitor")
    state = api.wait_for_run("lagsched_lag_monitor", run_id)
    if state != "success":
        return ["lagsched_lag_monitor"]
    summary = api.xcom("lagsched_lag_monitor", run_id, "measure_lag")
    print(f"==> lag {when}: total {summary['total_lag']:,}, lost {summary['total_lost']:,}", flush=True)
    for topic in summary["top"][:5]:
        print(f"    {topic['topic']:<20} lag {topic['lag']:>9,}", flush=True)
    return []


def _progress_printer() -> Any:
    last: dict[str, str] = {}

    def show(tis: list[dict[str, Any]]) -> None:
        for ti in tis:
            state = ti.get("state") or "scheduled"
            if last.get(ti["task_id"]) != state:
                last[ti["task_id"]] = state
                print(f"    {ti['task_id']:<24} {state}", flush=True)

    return show


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load()
    print("==> starting Kafka, MariaDB, Redis and Airflow (first start takes ~30 s)", flush=True)
    try:
        stack.up(cfg, airflow=True)
    except ServiceError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    from lagsched.connections import kafka_config
    from lagsched.stack.environment import connection_environment

    for key, value in connection_environment(cfg).items():
        os.environ.setdefault(key, value)
    print("==> producing demo records (uneven volumes)", flush=True)
    seed_demo_topics(kafka_config())
    url = f"http://127.0.0.1:{cfg.airflow_port}"
    api = AirflowAPI.for_simple_auth(url, cfg.airflow_home)
    failed = []
    for dag_id in DEMO_DAGS:
        try:
            api.wait_for_dag(dag_id)
            run_id = api.trigger(dag_id)
            print(f"==> triggered {dag_id} (run {run_id})", flush=True)
            started = time.monotonic()
            state = api.wait_for_run(dag_id, run_id, on_progress=_progress_printer())
        except AirflowAPIError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 1
        print(f"==> {dag_id}: {state} in {time.monotonic() - started:.0f} s", flush=True)
        if state != "success":
            failed.append(dag_id)
        elif dag_id == "lagsched_lag_monitor":
            summary = api.xcom(dag_id, run_id, "measure_lag")
            print(f"    total lag {summary['total_lag']:,}, lost {summary['total_lost']:,}", flush=True)
            for topic in summary["top"][:5]:
                print(f"    {topic['topic']:<20} lag {topic['lag']:>9,}", flush=True)
        elif dag_id == "lagsched_scaling_evaluator":
            result = api.xcom(dag_id, run_id, "evaluate_and_apply")
            for o in result["outcomes"]:
                if o["topic"].startswith("demo."):
                    change = f"{o['old']} -> {o['new']}" if o["old"] is not None else ""
                    print(f"    {o['topic']:<20} {o['status']:<16} {change} {o['reason'] or ''}", flush=True)
    print(
        "    (the evaluator decides once the monitor has stored `evaluate_every` measurements;\n"
        "     the monitor runs every minute, so re-trigger lagsched_scaling_evaluator in a few minutes)",
        flush=True,
    )
    if not failed:
        sink = cfg.home / "sink"
        print(
            f"==> consuming: {DEMO_SLOTS} worker slots (Spark jobs) drain the claimed partitions into {sink}",
            flush=True,
        )
        failed += consume_demo(cfg, sink)
        failed += _show_lag(api, "after consuming")
    print(
        f"""
Airflow UI:  {url}   (user: admin, password: in {cfg.airflow_home / PASSWORDS_FILE})
DAGs:        {url}/dags?tags=lagsched
Logs:        {cfg.logs}/   (services, demo-consume-*.log)  {cfg.airflow_home / "logs"}/  (task logs)
Sink:        {cfg.home / "sink"}/   (Parquet, topic=<t>/date=<d>/; docs/consumer.md)
Stop it all: make stack-down
""",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
