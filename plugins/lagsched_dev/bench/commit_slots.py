"""Several production slots committing to one table under backlog: do their commits contend, retry
within bounds and never fail, and how many snapshots and how fresh a table does the cadence give?

Run from the repository root, with the stack up::

    PYTHONPATH=plugins python -m lagsched_dev.bench commit_slots   # or -m lagsched_dev.bench.commit_slots

Sections (b) and (c) of ``bench/results/commit_scale.json`` (issue 40; section (a), a table with six
hours of history, is `lagsched_dev.bench.commit_scale`). ``LAGSCHED_BENCH_SLOTS`` slots (default 4,
``local[1]`` each: one core's task and a driver, so four of them share this machine's two cores
as four small executors would share a cluster) run ``lagsched/jobs/consume.py`` as the consume DAG
starts it, with the job's default commit cadence (``--commit-interval-s`` 30 s and the volume
bounds), on one topic of 12 partitions whose ``linker_workers`` is the slot count, so each slot owns
three partitions and all commit to the cluster's one table. They run ``LAGSCHED_BENCH_COMMIT_SLOTS_S``
seconds (default 600) after the first batch, then get SIGTERM (each commits what waits and leaves).

The backlog is the long-slot benchmark's (`lagsched_dev.bench.long_slot.load_backlog`: compressible
JSON-like values loaded by Kafka's producer performance tool, ``LAGSCHED_BENCH_COMMIT_SLOTS_RECORDS``,
default 240 million), trimmed as it is consumed (`long_slot.Trimmer`: committed records deleted
from Kafka, data files older than two minutes deleted from the warehouse: this run does not read
the table back; exactly once with several slots is tests/integration/test_consumer_scaling.py's).

Reported from each slot's ``--stats-file`` (its ``commit`` events) and log: commits, their
``table_commit_s`` p50/p99/max, commits refused (``conflict`` events) and failed (a slot that exited
non-zero, a ``table commit`` error), Iceberg's own retries of a commit that lost the race
("Retrying task after failure" lines of ``org.apache.iceberg.util.Tasks``) per commit, snapshots per
hour for the table, and freshness (``freshness_s``: how old the oldest batch of a commit was when it
became visible) p50/p99/max.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB
from lagsched_dev.bench.consumer import (
    SINK_ROOT,
    _register,
    _use_local_stack,
    create_topic,
    delete_topics,
    env_int,
    job_env,
)
from lagsched_dev.bench.long_slot import PARTITIONS, Trimmer, _driver_pid, _tail, load_backlog
from lagsched_dev.bench.sink import percentile

DEFAULT_OUT = "bench/results/commit_scale.json"
#: Iceberg's retry loop (org.apache.iceberg.util.Tasks) logs each retry of a failed attempt at warn.
RETRY_LINE = "Retrying task after failure"


def stats_events(path: Path, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` events of one slot's stats file.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "s"
    >>> _ = p.write_text('{"event": "commit", "n": 1}\\n\\n{"event": "batch"}\\n')
    >>> stats_events(p, "commit")
    [{'event': 'commit', 'n': 1}]
    """
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("event") == kind]


def spread(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and max of ``values`` (0 for none).

    >>> spread([1.0, 2.0, 3.0, 10.0])
    {'p50': 2.0, 'p99': 10.0, 'max': 10.0}
    """
    if not values:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    return {
        "p50": round(percentile(values, 0.5), 3),
        "p99": round(percentile(values, 0.99), 3),
        "max": round(max(values), 3),
    }


def summarize(
    per_slot: Mapping[str, Mapping[str, Any]], *, duration_s: float, interval_s: float, slots: int
) -> dict[str, Any]:
    """Sections (b) and (c) from each slot's commit events, conflicts, retries and exit code.

    >>> one = {"commits": [{"table_commit_s": 0.2, "freshness_s": 31.0, "records": 10}], "conflicts": 0,
    ...        "retries": 1, "exit": 0, "errors": 0}
    >>> s = summarize({"a": one, "b": one}, duration_s=60, interval_s=30, slots=2)
    >>> s["contention"]["commits"], s["contention"]["retries_per_commit"], s["cadence"]["snapshots_per_hour"]
    (2, 1.0, 120.0)
    """
    commits = [c for s in per_slot.values() for c in s["commits"]]
    table_s = [float(c["table_commit_s"]) for c in commits]
    fresh = [float(c["freshness_s"]) for c in commits if c.get("freshness_s") is not None]
    retries = sum(int(s["retries"]) for s in per_slot.values())
    failed = sum(int(s["conflicts"]) + int(s["errors"]) + (1 if s["exit"] != 0 else 0) for s in per_slot.values())
    records = sum(int(c["records"]) for c in commits)
    return {
        "contention": {
            "slots": slots,
            "duration_s": duration_s,
            "commits": len(commits),
            "failed_commits": failed,
            "retries": retries,
            "retries_per_commit": round(retries / len(commits), 3) if commits else 0.0,
            "commit_s_p50": spread(table_s)["p50"],
            "commit_s_p99": spread(table_s)["p99"],
            "commit_s_max": spread(table_s)["max"],
            "records": records,
            "records_per_s": round(records / duration_s, 1) if duration_s else 0.0,
            "per_slot": {
                name: {"commits": len(s["commits"]), "retries": s["retries"], "exit": s["exit"]}
                for name, s in per_slot.items()
            },
            "target_failed_commits": 0,
            "met": failed == 0,
        },
        "cadence": {
            "commit_interval_s": interval_s,
            "snapshots_per_hour": round(len(commits) * 3600 / duration_s, 1) if duration_s else 0.0,
            "snapshots_per_hour_per_slot": round(len(commits) * 3600 / duration_s / slots, 1) if duration_s else 0.0,
            "reasons": dict(sorted(Counter(str(c.get("reason")) for c in commits).items())),
            "freshness_s_p50": spread(fresh)["p50"],
            "freshness_s_p99": spread(fresh)["p99"],
            "freshness_s_max": spread(fresh)["max"],
        },
    }


def run(slots: int, duration_s: float, records: int) -> dict[str, Any]:
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.spark import submit_command
    from lagsched.connections import kafka_config, mysql_params
    from lagsched.core.cadence import DEFAULT_COMMIT_INTERVAL_S
    from lagsched_dev.bench.claims import create_database, drop_database

    run_id = uuid.uuid4().hex[:8]
    topic, cluster = f"bench-cs-{run_id}", f"bench-cs-{run_id}"
    work = SINK_ROOT / f"lagsched-bench-cs-{run_id}"
    warehouse = work / "warehouse"
    work.mkdir(parents=True)
    kafka = kafka_config()
    admin = admin_client(kafka)
    create_topic(admin, topic, PARTITIONS)
    database = create_database(mysql_params(), prefix="lagsched_bench_cs")
    trimmer: Trimmer | None = None
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        load_s = load_backlog(str(kafka["bootstrap.servers"]), topic, records, work)
        _register(database, topic, cluster)
        conn = connect(database)
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE topics SET linker_workers = %s WHERE cluster = %s", (slots, cluster))
            conn.commit()
        finally:
            conn.close()
        env = job_env(database.database, env_int(os.environ, "LAGSCHED_BENCH_REDIS_DB", 14, minimum=0))
        trimmer = Trimmer(admin, database, topic, cluster, warehouse)
        trimmer.start()
        for i in range(1, slots + 1):
            name = f"{cluster}-slot-{i}"
            args = [
                "--slot", name, "--cluster", cluster, "--budget-s", str(duration_s + 900),
                "--warehouse", warehouse.as_uri(), "--stats-file", str(work / f"{name}.stats"),
            ]  # fmt: skip
            with (work / f"{name}.log").open("w") as log_file:
                procs[name] = subprocess.Popen(  # noqa: S603 - our own spark-submit argv
                    submit_command(CONSUME_JOB, args, master="local[1]"),
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
        first = _first_batch(work, procs)
        print(f"   {slots} slots running; measuring {duration_s:.0f} s", flush=True)
        while time.time() < first + duration_s:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode} early:\n{_tail(work / f'{name}.log')}")
            if trimmer.error is not None:
                raise RuntimeError(f"trimming failed: {trimmer.error!r}")
            done = sum(len(stats_events(work / f"{n}.stats", "commit")) for n in procs)
            backlog = trimmer.backlog[-1][1] if trimmer.backlog else None
            print(f"   {time.time() - first:>5.0f} s: {done} commits, backlog {backlog}", flush=True)
            time.sleep(min(30.0, max(1.0, first + duration_s - time.time())))
        ended = time.time()
        for proc in procs.values():
            os.kill(_driver_pid(proc.pid), signal.SIGTERM)
        codes = {name: proc.wait(timeout=300) for name, proc in procs.items()}
        per_slot: dict[str, dict[str, Any]] = {}
        for name in procs:
            log_text = (work / f"{name}.log").read_text(errors="replace")
            per_slot[name] = {
                # Commits while measured: the last ones, at SIGTERM, land what waited (reason flush).
                "commits": [c for c in stats_events(work / f"{name}.stats", "commit") if float(c["t_end"]) <= ended],
                "conflicts": len(stats_events(work / f"{name}.stats", "conflict")),
                "retries": log_text.count(RETRY_LINE),
                "errors": log_text.count("lagsched consume: FAILED"),
                "exit": codes[name],
            }
        figures = summarize(per_slot, duration_s=duration_s, interval_s=DEFAULT_COMMIT_INTERVAL_S, slots=slots)
        backlog_left = trimmer.backlog[-1][1] if trimmer.backlog else 0
        figures["contention"]["backlog_ran_out"] = backlog_left == 0
        figures["contention"]["load_s"] = round(load_s, 1)
        figures["contention"]["backlog_records"] = records
        return figures
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        if trimmer is not None:
            trimmer.stop_event.set()
        delete_topics(admin, [topic])
        drop_database(database)
        if not os.environ.get("LAGSCHED_BENCH_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)


def _first_batch(work: Path, procs: Mapping[str, subprocess.Popen[bytes]]) -> float:
    """When every slot has written its first batch (the measured time starts there)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                tail = _tail(work / f"{name}.log")
                raise RuntimeError(f"{name} exited {proc.returncode} before its first batch:\n{tail}")
        ends = [stats_events(work / f"{name}.stats", "batch") for name in procs]
        if all(ends):
            return max(float(b[0]["t_end"]) for b in ends)
        time.sleep(1)
    raise RuntimeError("not every slot wrote a batch within 600 s")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.commit_slots", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="merged into this JSON file (default: %(default)s)")
    args = parser.parse_args(argv)
    _use_local_stack()
    slots = env_int(os.environ, "LAGSCHED_BENCH_SLOTS", 4)
    duration_s = float(env_int(os.environ, "LAGSCHED_BENCH_COMMIT_SLOTS_S", 600, minimum=60))
    records = env_int(os.environ, "LAGSCHED_BENCH_COMMIT_SLOTS_RECORDS", 240_000_000)
    started = time.monotonic()
    figures = run(slots, duration_s, records)
    figures["contention"]["elapsed_s"] = round(time.monotonic() - started, 1)
    figures["contention"]["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_end": os.getloadavg(),
    }
    print(json.dumps(figures, indent=2))
    out = Path(args.out)
    merged = json.loads(out.read_text()) if out.exists() else {}
    merged.update(figures)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
