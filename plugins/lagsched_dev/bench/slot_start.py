"""A slot's start through the Airflow operator, with and without the JVM class-data archive.

Run from the repository root, with the stack up::

    PYTHONPATH=plugins python -m lagsched_dev.bench slot_start

Each draw runs `LagschedSparkSubmitOperator` as a consume task does, for a slot of a topic with
nothing to read (``--exit-when-idle``): spark-submit, Spark's start, the claim, and the
exit; what a slot's start costs before its first batch, with nothing else in it. The variants
alternate (``LAGSCHED_BENCH_SLOT_START_DRAWS`` draws each, default 4) after one unreported run that
records the archive (its cold start is reported apart, ``recording``). Reports each variant's
wall seconds and the machine's busy core-seconds (worst and median) and the ratios of the worst
draws, archive over none. Writes ``bench/results/slot_start.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS = Path("bench/results/slot_start.json")


def busy_core_s() -> float:
    """The machine's busy CPU time so far (all cores), from /proc/stat."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@contextmanager
def idle_topic() -> Iterator[tuple[str, str]]:
    """A cluster with one registered, empty one-partition topic, in a scratch database the Connection
    points at; all removed afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params
    from lagsched_dev.bench.claims import create_database, drop_database

    params = create_database(mysql_params(), prefix="lagsched_bench_start")
    saved = os.environ["AIRFLOW_CONN_LAGSCHED_MYSQL"]
    conn = json.loads(saved)
    os.environ["AIRFLOW_CONN_LAGSCHED_MYSQL"] = json.dumps({**conn, "schema": params.database})
    admin = AdminClient(kafka_config())
    cluster, topic = f"bench-{uuid.uuid4().hex[:8]}", f"bench-start-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    db = connect(params)
    try:
        with db.cursor() as cur:
            topic_id = str(uuid.uuid4())
            cur.execute(
                "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms, linker_workers)"
                " VALUES (%s, %s, %s, 1, 3600000, 1)",
                (topic_id, cluster, topic),
            )
            cur.execute("INSERT INTO topic_partitions (topic_id, partition_id) VALUES (%s, 0)", (topic_id,))
        db.commit()
        yield cluster, topic
    finally:
        db.close()
        os.environ["AIRFLOW_CONN_LAGSCHED_MYSQL"] = saved
        admin.delete_topics([topic])[topic].result(30)
        drop_database(params)


def run_slot(cluster: str, warehouse: str, *, class_archive: bool) -> tuple[float, float]:
    """One idle slot through the operator: (wall s, busy core-s)."""
    from lagsched.airflow.operators import LagschedSparkSubmitOperator
    from lagsched.jobs import CONSUME_JOB

    op = LagschedSparkSubmitOperator(
        task_id="consume",
        application=CONSUME_JOB,
        class_archive=class_archive,
        application_args=["--slot", f"{cluster}-slot-1", "--cluster", cluster, "--exit-when-idle",
                          "--warehouse", warehouse],
    )  # fmt: skip
    wall, cpu = time.monotonic(), busy_core_s()
    op.execute({})
    return round(time.monotonic() - wall, 2), round(busy_core_s() - cpu, 2)


def summarize(draws: Sequence[tuple[float, float]]) -> dict[str, Any]:
    walls, cpus = [w for w, _ in draws], [c for _, c in draws]
    return {
        "draws": [{"wall_s": w, "busy_core_s": c} for w, c in draws],
        "wall_s": {"worst": max(walls), "median": statistics.median(walls)},
        "busy_core_s": {"worst": max(cpus), "median": statistics.median(cpus)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    from lagsched_dev.bench import use_local_stack_connections

    use_local_stack_connections()
    # The provider runs `spark-submit` from PATH: this venv's, as in the stack's Airflow.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    draws = int(os.environ.get("LAGSCHED_BENCH_SLOT_START_DRAWS", "4"))
    with tempfile.TemporaryDirectory(prefix="lagsched-bench-start-") as work, idle_topic() as (cluster, _topic):
        os.environ["LAGSCHED_CLASS_ARCHIVE_DIR"] = str(Path(work, "classes"))
        warehouse = f"file://{work}/warehouse"
        recording = run_slot(cluster, warehouse, class_archive=True)
        results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(2 * draws):
            use = i % 2 == 1
            results[use].append(run_slot(cluster, warehouse, class_archive=use))
            print(f"draw {i + 1}/{2 * draws} ({'archive' if use else 'no archive'}): {results[use][-1]}", flush=True)
    with_archive, without = summarize(results[True]), summarize(results[False])
    report = {
        "benchmark": "slot_start",
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "recording": {"wall_s": recording[0], "busy_core_s": recording[1]},
        "archive": with_archive,
        "no_archive": without,
        "worst_wall_ratio": round(with_archive["wall_s"]["worst"] / without["wall_s"]["worst"], 3),
        "worst_cpu_ratio": round(with_archive["busy_core_s"]["worst"] / without["busy_core_s"]["worst"], 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
