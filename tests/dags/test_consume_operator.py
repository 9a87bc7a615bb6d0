"""LagschedSparkSubmitOperator runs a real consumer slot, and a kill stops it at a batch boundary.

One Spark slot (about 30 s): the Connections reach the job through its environment only, and
``on_kill`` (what Airflow calls when a task is marked failed or times out) makes the job finish its
batch, commit, release its rows and exit 0, where the provider's kill would abandon the batch.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from test_lag_dags import add_topic, env  # noqa: F401 - env is a fixture

from lagsched.adapters.slots import SlotRegistry, slot_id_for
from lagsched.airflow.operators import LagschedSparkSubmitOperator
from lagsched.airflow.scratch import LOCK_FILE, MIN_AGE_S, SCRATCH_PREFIX
from lagsched.jobs import CONSUME_JOB

# Starts Spark applications: with the other Spark tests, one at a time (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("spark")

JOB = Path(CONSUME_JOB)


def committed(conn: Any, topic_id: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COALESCE(SUM(committed_offset), 0) FROM topic_partitions WHERE topic_id = %s", (topic_id,))
        (total,) = cur.fetchone()
    conn.commit()
    return int(total)


def processes_holding(path: Path) -> dict[int, str]:
    """The processes with `path` open, and their command lines."""
    holders = {}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if fd.readlink() == path:
                pid = int(fd.parts[2])
                holders[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return holders


def run_in_thread(op: LagschedSparkSubmitOperator, outcome: dict[str, BaseException | None]) -> threading.Thread:
    def run() -> None:
        try:
            op.execute({})
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker


def jvms_mapping(path: Path) -> list[int]:
    """The processes that have `path` mapped into memory."""
    found = []
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            if str(path) in maps.read_text():
                found.append(int(maps.parts[2]))
        except OSError:
            continue
    return found


def test_slot_consumes_then_stops_gracefully_on_kill(
    env: Any,  # noqa: F811
    redis_client: Any,
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    task_cwd = tmp_path / "task-cwd"
    task_cwd.mkdir()
    monkeypatch.chdir(task_cwd)  # where Airflow's task process runs: Spark must leave nothing there
    classes = tmp_path / "classes"
    monkeypatch.setenv("LAGSCHED_CLASS_ARCHIVE_DIR", str(classes))
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    topic = new_topic(1)
    producer = Producer(kafka_config)
    for i in range(2000):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    topic_id = add_topic(env, cluster, topic, {0: None}, workers=1)
    name = f"{cluster}-slot-1"
    # The scratch folder of an earlier run whose task process and JVM were killed: this run sweeps it.
    left = Path(tempfile.gettempdir()) / f"{SCRATCH_PREFIX}{cluster}-killed"
    (left / "artifacts").mkdir(parents=True)
    (left / LOCK_FILE).touch()
    os.utime(left, (time.time() - MIN_AGE_S - 5,) * 2)
    op = LagschedSparkSubmitOperator(
        task_id="consume",
        application=str(JOB),
        application_args=[
            "--slot",
            name,
            "--cluster",
            cluster,
            "--budget-s",
            "600",
            "--warehouse",
            f"file://{tmp_path}",
        ],
        # Half the JVM start-up CPU on shared cores, as the consumer tests do.
        conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
        stop_timeout_s=120,
    )
    outcome: dict[str, BaseException | None] = {}

    worker = run_in_thread(op, outcome)
    deadline = time.monotonic() + 240
    while committed(env, topic_id) < 2000:
        assert worker.is_alive(), f"the slot ended before consuming: {outcome.get('error')!r}"
        assert time.monotonic() < deadline, "the slot did not commit the topic's 2000 records in 240 s"
        time.sleep(1)
    assert SlotRegistry(redis_client, cluster=cluster).last_seen(slot_id_for(name)) is not None  # heartbeating
    # Spark's local dir is the run's scratch folder: the jars it copies there at every start go with
    # the folder, also when the driver is killed.
    assert op._hook is not None and op._hook.scratch_dir is not None
    running_in = Path(op._hook.scratch_dir)
    assert list(running_in.glob("spark-*/userFiles-*/*.jar")), sorted(p.name for p in running_in.iterdir())
    # Spark's JVM inherited the folder's lock, so it stays held (the folder unswept) if the task
    # process is killed and the JVM lives on.
    holders = processes_holding(running_in / LOCK_FILE)
    assert any("java" in cmd and "SparkSubmit" in cmd for cmd in holders.values()), holders
    assert not left.exists()

    op.on_kill()
    worker.join(timeout=150)

    assert not worker.is_alive()
    assert outcome["error"] is None, outcome["error"]  # exit 0: it stopped, it did not die
    assert op._hook is not None and op._hook._submit_sp is not None
    assert op._hook._submit_sp.returncode == 0
    assert SlotRegistry(redis_client, cluster=cluster).last_seen(slot_id_for(name)) is None  # it left the live set
    with env.cursor() as cur:
        cur.execute("SELECT claimed_by FROM topic_partitions WHERE topic_id = %s", (topic_id,))
        assert cur.fetchall() == ((None,),)  # its row was released
    env.commit()
    # Spark ran in a scratch folder of its own (it makes `artifacts/` in its working directory),
    # and the folder went when the run ended.
    assert list(task_cwd.iterdir()) == []
    scratch = getattr(op._hook, "scratch_dir", None)
    assert scratch is not None and Path(scratch).parent == Path(tempfile.gettempdir())
    assert not Path(scratch).exists()

    # The run recorded the slots' class-data archive as its JVM exited; the next run's JVM maps it.
    (archive,) = classes.iterdir()
    assert archive.suffix == ".jsa" and archive.stat().st_size > 10_000_000, archive
    again = LagschedSparkSubmitOperator(
        task_id="consume-again",
        application=str(JOB),
        application_args=["--slot", name, "--cluster", cluster, "--exit-when-idle",
                          "--warehouse", f"file://{tmp_path}"],
        conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    )  # fmt: skip
    outcome = {}
    worker = run_in_thread(again, outcome)
    mapped: list[int] = []
    while worker.is_alive() and not mapped:
        mapped = jvms_mapping(archive)
        time.sleep(0.2)
    worker.join(timeout=150)
    assert outcome.get("error", "running") is None, outcome
    assert mapped, "the second run's JVM did not map the class archive"
    assert list(classes.iterdir()) == [archive]  # mapped, not recorded again


def test_an_archive_folder_that_cannot_be_made_costs_the_archive_only(
    tmp_path: Path, monkeypatch: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    op = LagschedSparkSubmitOperator(task_id="consume", application=str(JOB), application_args=["--slot", "s-1"])
    jars = [str(tmp_path / "a.jar")]
    taken = tmp_path / "a-file"
    taken.write_text("not a folder")
    monkeypatch.setenv("LAGSCHED_CLASS_ARCHIVE_DIR", str(taken / "classes"))
    assert op._class_archive_path(jars) is None
    logged = capfd.readouterr()
    assert "no class archive" in logged.out + logged.err and str(taken / "classes") in logged.out + logged.err
    monkeypatch.setenv("LAGSCHED_CLASS_ARCHIVE_DIR", "")
    assert op._class_archive_path(jars) is None
    monkeypatch.setenv("LAGSCHED_CLASS_ARCHIVE_DIR", str(tmp_path / "new" / "classes"))
    path = op._class_archive_path(jars)
    assert path is not None and Path(path).parent == tmp_path / "new" / "classes"
    assert (tmp_path / "new" / "classes").is_dir()
    assert path != op._class_archive_path([*jars, str(tmp_path / "b.jar")])  # other jars, another archive
