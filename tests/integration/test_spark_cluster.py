"""The Spark standalone cluster of `lagsched-dev stack up --spark-cluster`: its workers register, and a job
submitted with ``--master spark://...`` reads exact Kafka offset ranges with the slots' write path
(`lagsched.adapters.range_files.RangeWriter`) on both of them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lagsched_dev.stack.config import StackConfig

PARTITIONS = 4
RECORDS = 2_000  # record i in partition i % 4 with value v<i>, so offset o of partition p is v<4o+p>
START, END = 100, 300  # the range read from every partition

# The job runs under spark-submit as the consumer job does: it sets no master (spark-submit's
# --master applies), takes the lake's jars from --jars, and imports lagsched from PYTHONPATH.
JOB = """
import json, os, sys, time

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from lagsched.adapters.data_files import CREATED_SCHEMA, FileSettings
from lagsched.adapters.range_files import RangeWriter
from lagsched.core.offsets import OffsetRange

topic, bootstrap, start, end, partitions, out, folder = sys.argv[1:8]
spark = SparkSession.builder.appName(os.environ["JOB_NAME"]).getOrCreate()


def where(_: object) -> list[list[str]]:
    # An executor's working directory is <worker work dir>/<app id>/<executor id>; the Python worker
    # inherits it, and runs with the interpreter and PYTHONPATH the worker handed down.
    import pyarrow  # noqa: F401 - the venv's python has it, the system python does not
    import lagsched  # noqa: F401

    connections = sorted(k for k in os.environ if k.startswith("AIRFLOW_CONN_"))
    return [[os.getcwd(), sys.executable, ",".join(connections)]]


# Once both executors have registered (the driver counts itself too), a wave of tasks puts one on
# each, as each has one core.
deadline = time.monotonic() + 90
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:
    if time.monotonic() > deadline:
        sys.exit("the two executors did not register within 90 s")
    time.sleep(0.2)
placements = spark.sparkContext.parallelize(range(4), 4).mapPartitions(where).collect()
# The slots' write path: one task per range, spread over the executors, files on the shared disk.
ranges = [OffsetRange(topic, p, int(start), int(end)) for p in range(int(partitions))]
settings = FileSettings.of("file://" + folder, CREATED_SCHEMA, {})
files = RangeWriter(spark, {"bootstrap.servers": bootstrap}, tasks=len(ranges)).write(ranges, settings)
rows = []
for f in files:
    t = pq.read_table(f.location.removeprefix("file://"), columns=["partition", "offset", "value"])
    rows += [[p, o, v.decode()] for p, o, v in zip(*(t[c].to_pylist() for c in t.column_names))]
result = {
    "master": spark.sparkContext.master,
    "driver_host": spark.conf.get("spark.driver.host"),
    "rows": rows,
    "executors": sorted({tuple(p) for p in placements}),
}
spark.stop()
with open(out, "w") as fh:
    json.dump(result, fh)
"""


def master_state(cfg: StackConfig) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{cfg.spark_master_webui_port}/json/", timeout=5) as resp:
        state: dict[str, Any] = json.loads(resp.read())
    return state


@pytest.fixture(scope="module")
def spark_cluster(stack: StackConfig) -> Iterator[StackConfig]:
    """The local standalone cluster; started here if it was not up, and then stopped at the end."""
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.services import spark_cluster_services

    master, workers = spark_cluster_services(stack)
    was_up = all(s.status().healthy for s in (master, *workers))
    started = time.monotonic()
    try:
        local_stack.spark_cluster_up(stack)
    except Exception as exc:  # noqa: BLE001 - whatever stops the cluster fails the run, never skips it
        if not was_up:
            local_stack.spark_cluster_down(stack)
        pytest.fail(f"the Spark standalone cluster could not start: {exc}", pytrace=False)
    print(f"spark cluster {'was up' if was_up else f'started in {time.monotonic() - started:.1f} s'}")
    yield stack
    if not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
        local_stack.spark_cluster_down(stack)


def test_two_workers_register_with_the_master(spark_cluster: StackConfig) -> None:
    state = master_state(spark_cluster)
    assert state["status"] == "ALIVE"
    assert state["url"] == spark_cluster.spark_master_url == "spark://127.0.0.1:" + str(spark_cluster.spark_master_port)
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert sorted(w["webuiaddress"] for w in alive) == [
        f"http://127.0.0.1:{port}" for port in spark_cluster.spark_worker_webui_ports
    ]
    assert len(alive) == spark_cluster.spark_workers >= 2
    assert all(w["host"] == "127.0.0.1" and w["cores"] == spark_cluster.spark_worker_cores for w in alive)


def test_a_job_submitted_to_the_cluster_reads_exact_kafka_ranges_on_both_workers(
    spark_cluster: StackConfig, new_topic: Any, kafka_config: dict[str, Any], tmp_path: Path
) -> None:
    topic = new_topic(PARTITIONS)
    producer = Producer({**kafka_config, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    job, out = tmp_path / "read_kafka.py", tmp_path / "result.json"
    job.write_text(JOB)
    name = f"lagsched-cluster-test-{uuid.uuid4().hex[:8]}"
    jars = os.environ["LAGSCHED_SPARK_JARS"]
    argv = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", spark_cluster.spark_master_url,
        "--jars", jars,
        "--conf", f"spark.pyspark.python={sys.executable}",
        # Both workers' cores: the cluster gives an application one unless asked.
        "--conf", "spark.cores.max=2",
        # A job this short spends more CPU in C2 compiling than it saves: C1 alone cut the driver's
        # and executors' CPU from 46 s to 31 s here (wall 27-38 s to 23-31 s, load average 5-6).
        "--driver-java-options", "-XX:TieredStopAtLevel=1",
        "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1",
        "--conf", "spark.ui.enabled=false",
        str(job), topic, spark_cluster.kafka_bootstrap, str(START), str(END), str(PARTITIONS), str(out),
        str(tmp_path / "data"),
    ]  # fmt: skip
    env = {**os.environ, "JOB_NAME": name}
    started = time.monotonic()
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=False)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, f"spark-submit failed ({run.returncode}):\n{run.stderr[-4000:]}"
    print(f"spark-submit on the cluster: {elapsed:.1f} s")

    result = json.loads(out.read_text())
    assert result["master"] == spark_cluster.spark_master_url
    # SPARK_LOCAL_IP from the stack's environment keeps the driver on loopback (Spark names it).
    assert socket.gethostbyname(result["driver_host"]).startswith("127.")
    expected = [[p, o, f"v{4 * o + p}"] for p in range(PARTITIONS) for o in range(START, END)]
    assert sorted(result["rows"]) == expected

    # Both workers ran executors, each with the venv's python (PYSPARK_PYTHON) and lagsched importable.
    work_dirs = {Path(cwd) for cwd, _, _ in result["executors"]}
    assert {d.parents[1].name for d in work_dirs} == {"spark-worker-1", "spark-worker-2"}
    assert {python for _, python, _ in result["executors"]} == {sys.executable}
    # ... and without the Connections (secrets) of the process that started the cluster.
    assert {connections for _, _, connections in result["executors"]} == {""}

    apps = [a for a in master_state(spark_cluster)["completedapps"] if a["name"] == name]
    assert [a["state"] for a in apps] == ["FINISHED"]
