"""Sink benchmark: two production slots committing the demo's uneven traffic into one Iceberg table.

Run from the repository root (the local stack must be up)::

    PYTHONPATH=plugins python -m lagsched_dev.bench sink   # or -m lagsched_dev.bench.sink

For ``LAGSCHED_BENCH_SINK_S`` seconds (default 600) the demo's traffic profile
(`lagsched.core.load_profile.demo_profile`, scaled to that duration) is produced into 5 fresh
topics, the record timestamps replayed faster: spread over the past `REPLAY_HOURS` hours, so most
of the table's (topic, hour) partitions are closed at the end. Two slots (spark-submit
``lagsched/jobs/consume.py``, as `lagsched_dev.bench.consumer.run_spark` runs it) consume them concurrently into
one cluster table; once the producer is done and the slots caught up, they are stopped, then one
maintenance run (``lagsched/jobs/table_care.py``, the production table care, every hour before it closed)
while a pyiceberg reader scans the table over and over, each scan checked exact.

Per warehouse (``file``, and ``s3a`` when ``LAGSCHED_S3_ENDPOINT`` is set) writes the figures of
`measure` into ``bench/results/sink.json``.
Environment: ``LAGSCHED_BENCH_SINK_PEAK`` (default 2000) the hot topic's peak records/s,
``LAGSCHED_BENCH_SINK_REDIS_DB`` (default 12) the slots' Redis DB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB, TABLE_CARE_JOB
from lagsched_dev.bench.consumer import SINK_ROOT, _register, env_int, job_env, parse_stats

DEFAULT_OUT = "bench/results/sink.json"
DEFAULT_S = 600
REPLAY_HOURS = 6
SLOTS = 2
TARGET_FILE_BYTES = 128 * 1024 * 1024
VALUE_BYTES = 100


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.99), percentile([3.0, 1.0, 2.0], 0.5)
    (10, 2.0)
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


def files_per_partition(parts: Mapping[Any, tuple[int, int]], target: int) -> float:
    """The worst (data files / ceil(bytes / target)) over partitions given as key -> (files, bytes).

    >>> files_per_partition({"a": (3, 10), "b": (2, 300)}, 100)
    3.0
    """
    return max((files / max(1, math.ceil(size / target)) for files, size in parts.values()), default=0.0)


def _progress(message: str) -> None:
    print(f"   [{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- load


def produce(bootstrap: Mapping[str, Any], loads: Sequence[Any], duration_s: float, ts_start_ms: int) -> None:
    """The profile's records for `duration_s` seconds; timestamps replayed `REPLAY_HOURS` hours in that time."""
    from confluent_kafka import Producer

    from lagsched.core.load_profile import DueSchedule

    errors: list[str] = []
    producer = Producer({**bootstrap, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    blob = os.urandom(1 << 20)
    speedup = REPLAY_HOURS * 3600 / duration_s
    partitions = {lt.topic: lt.partitions for lt in loads}
    started = time.monotonic()
    schedule = DueSchedule(loads, start=started, burst_s=2.0)
    sent, last_report = 0, started
    while (now := time.monotonic()) < started + duration_s:
        ts = ts_start_ms + int((now - started) * speedup * 1000)
        for topic, n in schedule.due(now).items():
            for _ in range(n):
                cut = (sent * 7919) % (len(blob) - VALUE_BYTES)
                while True:
                    try:
                        producer.produce(
                            topic, value=blob[cut : cut + VALUE_BYTES], key=b"k%012d" % sent,
                            partition=sent % partitions[topic], timestamp=ts,
                            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
                        )  # fmt: skip
                        break
                    except BufferError:
                        producer.poll(0.05)
                sent += 1
        producer.poll(0)
        if now - last_report >= 15:
            last_report = now
            _progress(f"produced {sent:,} records ({now - started:.0f}/{duration_s:.0f} s)")
        time.sleep(0.02)
    if producer.flush(120) != 0 or errors:
        raise RuntimeError(f"producing: undelivered records ({errors[:3]})")
    _progress(f"produced {sent:,} records in {time.monotonic() - started:.0f} s")


def log_ends(bootstrap: Mapping[str, Any], loads: Sequence[Any]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    check = Consumer({**bootstrap, "group.id": "lagsched-bench-check"})
    try:
        return {
            (lt.topic, p): check.get_watermark_offsets(TopicPartition(lt.topic, p), timeout=30)[1]
            for lt in loads
            for p in range(lt.partitions)
        }
    finally:
        check.close()


def committed(bootstrap: Mapping[str, Any], group: str, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The offsets the slots mirrored into their consumer group (-1001 when none yet)."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({**bootstrap, "group.id": group})
    try:
        got = reader.committed([TopicPartition(t, p) for t, p in keys], timeout=30)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        reader.close()


def driver_pid(submit_pid: int) -> int:
    """The job's Python driver: the child spark-submit's JVM started (client mode)."""
    job = CONSUME_JOB.encode()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == submit_pid and job in (stat.parent / "cmdline").read_bytes():
                return int(stat.parent.name)
        except OSError:
            continue
    raise RuntimeError(f"no Python driver under spark-submit {submit_pid}")


# --------------------------------------------------------------------------- checks


def exact(rows: Any, ends: Mapping[tuple[str, int], int]) -> tuple[bool, int, int]:
    """Whether `rows` (topic, partition, offset) hold every offset below `ends` once and nothing else."""
    import numpy as np

    topics = rows.column("topic").to_pylist()
    parts = rows.column("partition").to_numpy()
    offsets = rows.column("offset").to_numpy()
    index = {key: i for i, key in enumerate(sorted(ends))}
    keys = np.array([index.get((t, int(p)), -1) for t, p in zip(topics, parts, strict=True)], dtype=np.int64)
    combined = keys * (1 << 40) + offsets
    distinct = len(np.unique(combined))
    expected = sum(ends.values())
    ok = rows.num_rows == distinct == expected and bool(np.all(keys >= 0)) and bool(np.all(offsets >= 0))
    if ok:
        ends_of = np.array([ends[k] for k in sorted(ends)], dtype=np.int64)
        ok = bool(np.all(offsets < ends_of[keys]))
    return ok, int(rows.num_rows), distinct


def partition_files(table: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, hour) -> (data files, bytes) of the current snapshot."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for task in table.scan().plan_files():
        record = task.file.partition
        key = (str(record[0]), int(record[1]))
        files, size = out.get(key, (0, 0))
        out[key] = (files + 1, size + int(task.file.file_size_in_bytes))
    return out


# --------------------------------------------------------------------------- maintenance


def maintain(cluster: str, lake: Any, database: Any, now: datetime) -> dict[str, Any]:
    """One run of the production table care (``lagsched/jobs/table_care.py``) as of ``now``, every hour before
    it closed; its JSON summary."""
    from lagsched.adapters.spark import submit_command
    from lagsched.core.lake import job_args

    env = job_env(database.database, 0)
    settings = json.dumps({"closed_after_minutes": 0, "target_file_mb": TARGET_FILE_BYTES // 2**20})
    sink = {k: v for k, v in lake.as_dict().items() if v}
    argv = ["--cluster", cluster, "--now", now.isoformat(), "--settings", settings, *job_args(sink)]
    care = Path(TABLE_CARE_JOB)
    done = subprocess.run(  # noqa: S603 - our own spark-submit argv
        submit_command(str(care), argv), env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"table care exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    # The last JSON line on stdout (spark-submit may log after it).
    return dict(json.loads(next(x for x in reversed(done.stdout.splitlines()) if x.startswith("{"))))


def reader_loop(
    lake: Any, database: Any, ends: Mapping[tuple[str, int], int], stop: threading.Event, scans: list[dict[str, Any]]
) -> None:
    """Scan the whole table until `stop`, each scan judged by `exact`."""
    from lagsched.adapters.lake_reader import read_rows

    while not stop.is_set():
        started = time.time()
        try:
            ok, rows, distinct = exact(read_rows(lake, database), ends)
            scans.append({"t_start": started, "t_end": time.time(), "exact": ok, "rows": rows, "distinct": distinct})
        except Exception as exc:  # noqa: BLE001 - a failed scan is a figure
            scans.append({"t_start": started, "t_end": time.time(), "exact": False, "error": repr(exc)[:300]})


# --------------------------------------------------------------------------- one warehouse


def measure(warehouse: str, s3_endpoint: str | None, duration_s: int, peak: float) -> dict[str, Any]:
    """Load, two slots, catch-up, maintenance; the figures of one warehouse."""
    import pyiceberg

    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lake_reader import load_table, read_rows, table_stats
    from lagsched.adapters.spark import submit_command
    from lagsched.connections import kafka_config, mysql_params
    from lagsched.core.lake import LakeTable
    from lagsched.core.load_profile import demo_profile
    from lagsched_dev.bench.claims import create_database, drop_database
    from lagsched_dev.bench.consumer import create_topic, delete_topics

    run_id = uuid.uuid4().hex[:6]
    cluster = f"bench_sink_{run_id}"
    loads = demo_profile(
        peak_rate=peak, ramp_at_s=0.05 * duration_s, ramp_s=0.1 * duration_s, hold_s=0.35 * duration_s,
        fall_s=0.05 * duration_s, prefix=f"bench-sink-{run_id}.",
    )  # fmt: skip
    bootstrap = kafka_config()
    admin = admin_client(bootstrap)
    work = SINK_ROOT / f"lagsched-bench-sink-{run_id}"
    work.mkdir(parents=True)
    database = create_database(mysql_params(), prefix="lagsched_bench_sink")
    lake = LakeTable.of(cluster, {"warehouse": warehouse, "s3_endpoint": s3_endpoint}, default_warehouse="")
    group = f"lagsched-bench-sink-{run_id}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for lt in loads:
            create_topic(admin, lt.topic, lt.partitions)
            _register(database, lt.topic, cluster)
        env = job_env(database.database, env_int(os.environ, "LAGSCHED_BENCH_SINK_REDIS_DB", 12, minimum=0))
        for i in range(SLOTS):
            args = [
                "--slot", f"bench-sink-{run_id}-{i}", "--cluster", cluster, "--budget-s", str(duration_s + 1800),
                "--warehouse", warehouse, "--group", group, "--stats-file", str(work / f"stats-{i}.jsonl"),
                *(["--s3-endpoint", s3_endpoint] if s3_endpoint else []),
            ]  # fmt: skip
            with (work / f"slot-{i}.log").open("w") as log_file:
                procs.append(
                    subprocess.Popen(  # noqa: S603 - our own spark-submit argv
                        submit_command(CONSUME_JOB, args),
                        env=env,
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        _progress(f"{SLOTS} slots started on cluster {cluster} ({warehouse}); producing for {duration_s} s")
        ts_start_ms = int((time.time() - REPLAY_HOURS * 3600) * 1000)
        produce(bootstrap, loads, duration_s, ts_start_ms)
        ends = log_ends(bootstrap, loads)
        deadline = time.monotonic() + 1800
        while True:
            done = committed(bootstrap, group, list(ends))
            behind = sum(max(0, n - max(0, done.get(k, 0))) for k, n in ends.items())
            _progress(f"slots behind by {behind:,} records")
            if behind == 0:
                break
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a slot exited {proc.returncode} early (logs in {work})")
            if time.monotonic() > deadline:
                raise RuntimeError("the slots did not catch up within 30 min")
            time.sleep(5)
        for proc in procs:
            os.kill(driver_pid(proc.pid), signal.SIGTERM)  # a graceful stop: finish the batch, commit, release
        for proc in procs:
            if proc.wait(timeout=300) != 0:
                raise RuntimeError(f"a slot exited {proc.returncode} (logs in {work})")
        batches = [
            b for i in range(SLOTS) for b in parse_stats((work / f"stats-{i}.jsonl").read_text().splitlines()).batches
        ]
        commit_s = [float(b["table_commit_s"]) + float(b["commit_s"]) for b in batches]
        ok, rows, _ = exact(read_rows(lake, database), ends)
        _progress(f"consumed: {rows:,} rows, exactly once: {ok}; {len(batches)} batches")
        before = table_stats(lake, database)
        now = datetime.now(UTC)
        stop = threading.Event()
        scans: list[dict[str, Any]] = []
        reader = threading.Thread(target=reader_loop, args=(lake, database, ends, stop, scans), daemon=True)
        reader.start()
        try:
            _progress("maintenance with a concurrent reader")
            care = maintain(cluster, lake, database, now)
        finally:
            stop.set()
            reader.join(timeout=600)
        after = table_stats(lake, database)
        closed_hour = int(now.timestamp()) // 3600
        parts = {k: v for k, v in partition_files(load_table(lake, database)).items() if k[1] < closed_hour}
        comp = care["compaction"]
        overlapped = [s for s in scans if s["t_start"] < comp["finished_unix"] and s["t_end"] > comp["started_unix"]]
        ok_after, _, _ = exact(read_rows(lake, database), ends)
        return {
            "warehouse": warehouse,
            "records": sum(ends.values()),
            "exactly_once": ok and ok_after,
            "reader": f"pyiceberg {pyiceberg.__version__}",
            "batches": len(batches),
            "files_before": before.data_files,
            "files_after": after.data_files,
            "median_file_bytes_before": before.median_file_bytes,
            "median_file_bytes_after": after.median_file_bytes,
            "target_file_bytes": TARGET_FILE_BYTES,
            "closed_partitions": len(parts),
            "max_files_per_partition_after": round(files_per_partition(parts, TARGET_FILE_BYTES), 3),
            "max_files_per_partition_target": 1.5,
            "commit_s_p50": round(percentile(commit_s, 0.5), 4),
            "commit_s_p99": round(percentile(commit_s, 0.99), 4),
            "compaction_s": comp["seconds"],
            "exactly_once_during_compaction": bool(overlapped) and all(s["exact"] for s in overlapped),
            "scans_during_compaction": len(overlapped),
            "scans_during_maintenance": len(scans),
            "scans_not_exact": [s for s in scans if not s["exact"]][:5],
            "snapshots_after": after.snapshots,
            "maintenance": {k: v for k, v in care.items() if k != "compaction"} | {"compaction": comp},
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        delete_topics(admin, [lt.topic for lt in loads])
        drop_database(database)
        if os.environ.get("LAGSCHED_BENCH_KEEP_WORK"):
            print(f"   kept the slots' stats and logs in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.sink", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from lagsched_dev.bench.consumer import _use_local_stack

    _use_local_stack()
    duration_s = env_int(os.environ, "LAGSCHED_BENCH_SINK_S", DEFAULT_S, minimum=30)
    peak = float(env_int(os.environ, "LAGSCHED_BENCH_SINK_PEAK", 2000))
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    root = SINK_ROOT / f"lagsched-bench-sink-warehouse-{uuid.uuid4().hex[:6]}"
    try:
        print(f"-- file:// warehouse, {duration_s} s", flush=True)
        results["file"] = measure(root.as_uri(), None, duration_s, peak)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    endpoint = os.environ.get("LAGSCHED_S3_ENDPOINT")
    if endpoint:
        print(f"-- s3a:// warehouse ({endpoint}), {duration_s} s", flush=True)
        results["s3a"] = measure(f"s3a://lagsched/bench-sink/{uuid.uuid4().hex[:6]}", endpoint, duration_s, peak)
    else:
        results["s3a"] = {"skipped": "LAGSCHED_S3_ENDPOINT is not set (no S3-compatible store to write to)"}
        print("-- s3a:// skipped: LAGSCHED_S3_ENDPOINT is not set", flush=True)
    doc = {
        "spec": {
            "load": "demo_profile (5 topics) scaled to duration_s, timestamps replayed over the past "
            f"{REPLAY_HOURS} h, hot topic peak {peak:.0f} records/s",
            "slots": SLOTS,
            "maintenance": "lagsched/jobs/table_care.py as of the end, every earlier hour closed",
            "targets": {"max_files_per_partition_after": 1.5},
        },
        "duration_s": duration_s,
        "started_at": started_at,
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        **results,
    }
    print(json.dumps(doc, indent=2, default=str))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
