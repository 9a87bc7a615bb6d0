"""A long-lived slot: does one production slot stay as fast in its 20th minute as in its 5th?

Run from the repository root, with the stack up::

    PYTHONPATH=plugins python -m lagsched_dev.bench long_slot   # or -m lagsched_dev.bench.long_slot

A slot lives an hour; whatever grows with its batches (Spark's retained job state, the table's
metadata, a leak) shows as a rate that falls and a garbage collector that takes more of its CPU.
So one slot (``lagsched/jobs/consume.py`` under spark-submit, ``local[2]``, the job's own defaults
as the consume DAG starts it) consumes a backlog it cannot finish for ``LAGSCHED_BENCH_LONG_S``
seconds after its first batch (default 1,200: four 5-minute windows), and the benchmark reports
each 5-minute window of its life from its first batch on (start-up apart): records/s, the GC's
share of the job's CPU, the job's cores and CPU per record, batches and their mean wall and
table-commit times.

**The backlog.** At the slot's ~0.6 million records a second, an hour is ~2.1 billion records:
~240 GB in Kafka with the consumer benchmark's incompressible records, more than this machine's
disk. So this benchmark's records compress: ``LAGSCHED_BENCH_LONG_RECORDS`` (default 720 million;
~2.35 billion for an hour) JSON-like values of ~75 bytes (a user, an event, a page, a number:
20,000 distinct lines), no key, no header, loaded by Kafka's own producer performance tool (Java,
zstd batches, ~0.9 million a second here) into 12 partitions: ~17.6 bytes a record on disk (lz4
took 32.5, too much for an hour's backlog on this disk). The tasks decompress them and write them
with snappy (~33 bytes a record); a record costs a task about what a consumer benchmark record
does (2.4-3.2 us against 2.5-3.4 us in one process, measured here with lz4). A first try kept an
incompressible backlog up with a Python producer beside the slot instead: on two cores the
producer got too little CPU to keep up and the slot caught up within 4 minutes.

**Disk.** Every 20 s the records the slot committed are deleted from Kafka (``DeleteRecords`` up
to the committed offsets) and the table's data files older than two minutes from the warehouse
folder: the slot only appends (the files' metadata stays in the table), and nothing in this run
reads them back. The table is therefore not checked here; exactly once is the tests' business
(tests/integration/test_consumer_failures.py) and the consumer benchmark's.

The backlog (latest minus committed offsets) is sampled with each trim; a run whose slot caught up
says so (``backlog_ran_out``), as its rates would be the backlog's end, not the slot's.
Writes ``bench/results/long_slot.json``: ``windows`` (in order) and ``last_vs_second``
(records/s of the last window over the second's; the target is >= 0.95).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB
from lagsched_dev.bench.consumer import (
    SINK_ROOT,
    CpuSampler,
    _broker_pid,
    _register,
    _use_local_stack,
    create_topic,
    delete_topics,
    env_int,
    job_env,
    parse_stats,
    window_cpu,
)

DEFAULT_OUT = "bench/results/long_slot.json"
PARTITIONS = 12
WINDOW_S = 300
TRIM_EVERY_S = 20
#: Data files older than this are deleted from the warehouse (the slot never reads them back).
KEEP_FILES_S = 120
#: The backlog's compression (Kafka's producer batches) and what a record takes on disk with it, measured.
CODEC, BYTES_PER_RECORD = "zstd", 17.6


def windows_of(
    batches: Sequence[Mapping[str, Any]],
    samples: Sequence[tuple[float, Mapping[str, float]]],
    start: float,
    window_s: float = WINDOW_S,
    *,
    commits: Sequence[Mapping[str, Any]] = (),
    metadata: Sequence[tuple[float, int, int]] = (),
) -> list[dict[str, Any]]:
    """The slot's life in windows of `window_s` from `start` (unix seconds): per window its batches
    (by the time each ended), records/s, and the job's CPU from the sampler (`window_cpu`): its
    cores, CPU per record, and the GC's share of them. Only whole windows.

    With `commits` (the stats file's commit events: the cadence commits several batches at once)
    the table-commit times are theirs, not the batches'; `metadata` samples (unix seconds, bytes of
    the newest ``metadata.json``, snapshots in it) give each window's last size.

    >>> batches = [{"records": 1000, "t_end": 5.0, "wall_s": 1.0, "table_commit_s": 0.1},
    ...            {"records": 3000, "t_end": 15.0, "wall_s": 2.0, "table_commit_s": 0.3}]
    >>> samples = [(0.0, {"GC": 0.0, "python workers (tasks)": 0.0, "broker": 0.0, "machine busy": 0.0}),
    ...            (10.0, {"GC": 1.0, "python workers (tasks)": 9.0, "broker": 1.0, "machine busy": 12.0}),
    ...            (20.0, {"GC": 4.0, "python workers (tasks)": 16.0, "broker": 2.0, "machine busy": 24.0})]
    >>> [(w["records_per_s"], w["gc_share"], w["job_cores"]) for w in windows_of(batches, samples, 0.0, 10.0)]
    [(100.0, 0.1, 1.0), (300.0, 0.3, 1.0)]
    """
    if not samples:
        return []
    out = []
    t = start
    while t + window_s <= samples[-1][0] + 1e-9:
        inside = [b for b in batches if t < float(b["t_end"]) <= t + window_s]
        landed = [c for c in commits if t < float(c["t_end"]) <= t + window_s] if commits else inside
        commit_times = [float(c.get("table_commit_s", 0)) for c in landed]
        sizes = [(size, snaps) for at, size, snaps in metadata if at <= t + window_s]
        records = sum(int(b["records"]) for b in inside)
        cpu = window_cpu(samples, t, t + window_s)
        cores = cpu.get("cores", {})
        job = sum(v for k, v in cores.items() if k not in ("broker", "others", "machine busy"))
        rate = records / window_s
        out.append(
            {
                "from_s": round(t - start, 1),
                "to_s": round(t + window_s - start, 1),
                "records": records,
                "records_per_s": round(rate, 1),
                "gc_share": round(cores.get("GC", 0.0) / job, 3) if job else 0.0,
                "job_cores": round(job, 2),
                "job_cpu_us_per_record": round(job / rate * 1e6, 2) if rate else 0.0,
                "batches": len(inside),
                "batch_wall_s_mean": round(sum(float(b["wall_s"]) for b in inside) / len(inside), 3) if inside else 0,
                "commits": len(landed),
                "table_commit_s_mean": round(sum(commit_times) / len(commit_times), 3) if commit_times else 0,
                "table_commit_s_max": round(max(commit_times), 3) if commit_times else 0,
                "metadata_bytes": sizes[-1][0] if sizes else None,
                "snapshots": sizes[-1][1] if sizes else None,
                "cores": cores,
            }
        )
        t += window_s
    return out


# --------------------------------------------------------------------------- the backlog


def payload_lines(count: int = 20_000, seed: int = 1) -> list[str]:
    """The backlog's values: JSON-like events of ~75 bytes, as many distinct ones as `count`.

    >>> lines = payload_lines(3)
    >>> len(lines), all(line.startswith('{"user":"u') for line in lines)
    (3, True)
    """
    import random

    rnd = random.Random(seed)
    events = ("click", "view", "purchase", "signup", "search", "logout", "login", "share")
    lines = []
    for _ in range(count):
        user, event, page, ms = rnd.randrange(10**6), rnd.choice(events), rnd.randrange(5000), rnd.randrange(10**9)
        lines.append(f'{{"user":"u{user:06d}","event":"{event}","page":"/p/{page}","ms":{ms},"ok":true}}')
    return lines


def load_backlog(bootstrap: str, topic: str, records: int, work: Path) -> float:
    """Load `records` of `payload_lines` into `topic` with Kafka's producer performance tool; the seconds."""
    from lagsched_dev.kafka_tools import tool_command

    payloads = work / "payloads.txt"
    payloads.write_text("\n".join(payload_lines()) + "\n")
    command = tool_command(
        "producer-perf-test",
        [
            "--topic", topic, "--num-records", str(records), "--throughput", "-1",
            "--payload-file", str(payloads),
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=50",
            "batch.size=1048576", f"compression.type={CODEC}", "buffer.memory=268435456",
        ],
    )  # fmt: skip
    started = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:  # noqa: S603
        assert proc.stdout is not None
        for n, line in enumerate(proc.stdout):
            if "records sent" in line and n % 6 == 0:
                print(f"   loading {topic}: {line.strip()}", flush=True)
        if proc.wait() != 0:
            raise RuntimeError(f"loading {topic}: Kafka's producer performance tool exited {proc.returncode}")
    return time.monotonic() - started


# --------------------------------------------------------------------------- the run


def committed_offsets(database: Any, topic: str, cluster: str) -> dict[int, int]:
    from lagsched.adapters.mysql import connect

    conn = connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT p.partition_id, p.committed_offset FROM topic_partitions p JOIN topics t"
                " ON t.topic_id = p.topic_id WHERE t.cluster = %s AND t.name = %s",
                (cluster, topic),
            )
            rows = cur.fetchall()
        conn.commit()
    finally:
        conn.close()
    return {int(p): int(o or 0) for p, o in rows}


def latest_offsets(admin: Any, topic: str) -> dict[int, int]:
    from lagsched.adapters.kafka_admin import read_offsets

    return {o.partition: o.latest for o in read_offsets(admin, {topic: PARTITIONS})[topic]}


class Trimmer(threading.Thread):
    """Every `TRIM_EVERY_S`: deletes the records the slot committed from Kafka and old data files from
    the warehouse, and samples the backlog."""

    def __init__(self, admin: Any, database: Any, topic: str, cluster: str, warehouse: Path) -> None:
        super().__init__(name="trimmer", daemon=True)
        self.admin, self.database, self.topic, self.cluster, self.warehouse = admin, database, topic, cluster, warehouse
        self.stop_event = threading.Event()
        self.backlog: list[tuple[float, int]] = []
        self.metadata: list[tuple[float, int, int]] = []
        self.files_deleted = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop_event.wait(TRIM_EVERY_S):
            try:
                self.trim()
            except BaseException as exc:  # noqa: BLE001 - reported by the run
                self.error = exc
                return

    def trim(self) -> None:
        from confluent_kafka import TopicPartition

        committed = committed_offsets(self.database, self.topic, self.cluster)
        latest = latest_offsets(self.admin, self.topic)
        self.backlog.append((time.time(), sum(latest[p] - committed.get(p, 0) for p in latest)))
        done = [TopicPartition(self.topic, p, o) for p, o in committed.items() if o > 0]
        if done:
            for future in self.admin.delete_records(done).values():
                future.result(60)
        self.sample_metadata()
        cutoff = time.time() - KEEP_FILES_S
        for path in self.warehouse.rglob("*.parquet"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    self.files_deleted += 1
            except FileNotFoundError:
                continue

    def sample_metadata(self) -> None:
        """The newest ``metadata.json``'s size and snapshots (the file every commit reads and rewrites)."""
        files = sorted(self.warehouse.rglob("*.metadata.json"), key=lambda f: f.stat().st_mtime)
        if files:
            newest = files[-1]
            snapshots = len(json.loads(newest.read_text()).get("snapshots", []))
            self.metadata.append((time.time(), newest.stat().st_size, snapshots))


def commit_events(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The stats file's commit events (one per table commit of the cadence).

    >>> commit_events(['{"event": "batch", "n": 1}', '', '{"event": "commit", "n": 1, "table_commit_s": 0.2}'])
    [{'event': 'commit', 'n': 1, 'table_commit_s': 0.2}]
    """
    return [e for e in (json.loads(line) for line in lines if line.strip()) if e.get("event") == "commit"]


def run(duration_s: float, records: int) -> dict[str, Any]:
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.spark import submit_command
    from lagsched.connections import kafka_config, mysql_params
    from lagsched_dev.bench.claims import create_database, drop_database

    run_id = uuid.uuid4().hex[:8]
    topic, cluster = f"bench-long-{run_id}", f"bench-long-{run_id}"
    work = SINK_ROOT / f"lagsched-bench-long-{run_id}"
    warehouse = work / "warehouse"
    stats_path, log_path = work / "stats.jsonl", work / "job.log"
    work.mkdir(parents=True)
    need = records * BYTES_PER_RECORD * 1.3  # Kafka's indexes and the segment being written
    free = shutil.disk_usage(work).free
    if free < need:
        raise RuntimeError(f"{records:,} records need ~{need / 1e9:.0f} GB free at {work}; {free / 1e9:.0f} GB are")
    kafka = kafka_config()
    admin = admin_client(kafka)
    create_topic(admin, topic, PARTITIONS)
    database = create_database(mysql_params(), prefix="lagsched_bench_long")
    trimmer: Trimmer | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        load_s = load_backlog(str(kafka["bootstrap.servers"]), topic, records, work)
        _register(database, topic, cluster)
        env = job_env(database.database, env_int(os.environ, "LAGSCHED_BENCH_REDIS_DB", 14, minimum=0))
        args = [
            "--slot", f"bench-long-{run_id}", "--cluster", cluster, "--budget-s", str(duration_s + 600),
            "--warehouse", warehouse.as_uri(), "--stats-file", str(stats_path),
            *shlex.split(os.environ.get("LAGSCHED_BENCH_JOB_ARGS", "")),
        ]  # fmt: skip
        java = shlex.split(os.environ.get("LAGSCHED_BENCH_JAVA_OPTS", ""))
        trimmer = Trimmer(admin, database, topic, cluster, warehouse)
        trimmer.start()
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(  # noqa: S603 - our own spark-submit argv
                submit_command(CONSUME_JOB, args, java_options=java), env=env, stdout=log_file, stderr=subprocess.STDOUT
            )
            with CpuSampler(proc.pid, _broker_pid(), period_s=5.0) as sampler:
                first = _wait_first_batch(stats_path, proc)
                # The windows run from the first batch's end; the last sample must be past the last one.
                while time.time() < first + duration_s + 10:
                    if proc.poll() is not None:
                        raise RuntimeError(f"the slot exited {proc.returncode} early:\n{_tail(log_path)}")
                    if trimmer.error is not None:
                        raise RuntimeError(f"trimming failed: {trimmer.error!r}")
                    _report(stats_path, first, trimmer)
                    time.sleep(min(30.0, max(1.0, first + duration_s + 10 - time.time())))
                os.kill(_driver_pid(proc.pid), signal.SIGTERM)
                code = proc.wait(timeout=300)
        if code != 0:
            raise RuntimeError(f"the slot exited {code}:\n{_tail(log_path)}")
        lines = stats_path.read_text().splitlines()
        stats = parse_stats(lines)
        commits = commit_events(lines)
        windows = windows_of(stats.batches, sampler.samples, first, commits=commits, metadata=trimmer.metadata)
        return _figures(windows, stats, trimmer, first=first, records=records, load_s=load_s, duration_s=duration_s)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if trimmer is not None:
            trimmer.stop_event.set()
        delete_topics(admin, [topic])
        drop_database(database)
        shutil.rmtree(work, ignore_errors=True)


def _wait_first_batch(stats_path: Path, proc: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the slot exited {proc.returncode} before its first batch")
        if stats_path.exists():
            for line in stats_path.read_text().splitlines():
                row = json.loads(line) if line.strip() else {}
                if row.get("event") == "batch":
                    return float(row["t_end"])
        time.sleep(1)
    raise RuntimeError("no batch within 300 s")


def _report(stats_path: Path, first: float, trimmer: Trimmer) -> None:
    batches = parse_stats(stats_path.read_text().splitlines()).batches
    recent = [b for b in batches if float(b["t_end"]) > time.time() - 60]
    rate = sum(int(b["records"]) for b in recent) / 60
    backlog = trimmer.backlog[-1][1] if trimmer.backlog else -1
    print(
        f"   [{time.time() - first:6.0f} s] {len(batches)} batches, last minute {rate:,.0f} records/s, "
        f"backlog {backlog:,}, files deleted {trimmer.files_deleted:,}",
        flush=True,
    )


def _figures(
    windows: list[dict[str, Any]],
    stats: Any,
    trimmer: Trimmer,
    *,
    first: float,
    records: int,
    load_s: float,
    duration_s: float,
) -> dict[str, Any]:
    ran_out = [t - first for t, n in trimmer.backlog if n <= 0]
    return {
        "windows": windows,
        "last_vs_second": (
            round(windows[-1]["records_per_s"] / windows[1]["records_per_s"], 3)
            if len(windows) >= 2 and windows[1]["records_per_s"]
            else None
        ),
        "table_commit_last_vs_second": (
            round(windows[-1]["table_commit_s_mean"] / windows[1]["table_commit_s_mean"], 3)
            if len(windows) >= 2 and windows[1]["table_commit_s_mean"]
            else None
        ),
        "gc_share_last": windows[-1]["gc_share"] if windows else None,
        "batches": len(stats.batches),
        "records": stats.records,
        "backlog_min": min((n for _t, n in trimmer.backlog), default=None),
        "backlog_ran_out": bool(ran_out),
        "backlog_ran_out_at_s": round(ran_out[0], 1) if ran_out else None,
        "preloaded_records": records,
        "load_s": round(load_s, 1),
        "duration_s": duration_s,
        "window_s": WINDOW_S,
        "method": (
            "one production slot (spark-submit local[2], the job's defaults) over a preloaded backlog of compressible "
            f"records (Kafka's producer performance tool, {CODEC}); committed records deleted from Kafka and data "
            "files older than 2 minutes from the warehouse every 20 s; windows of 5 minutes from the first batch's "
            "end; records/s from the job's batch stats, CPU per thread group from /proc"
        ),
    }


def _driver_pid(submit_pid: int) -> int:
    """The job's Python driver under spark-submit's JVM (client mode): SIGTERM there stops gracefully."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == submit_pid and CONSUME_JOB.encode() in cmdline:
            return int(stat.parent.name)
    return submit_pid


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.long_slot", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    _use_local_stack()
    duration_s = float(env_int(os.environ, "LAGSCHED_BENCH_LONG_S", 1200, minimum=2 * WINDOW_S))
    records = env_int(os.environ, "LAGSCHED_BENCH_LONG_RECORDS", 720_000_000)
    started = time.monotonic()
    figures = run(duration_s, records)
    figures["elapsed_s"] = round(time.monotonic() - started, 1)
    figures["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_end": os.getloadavg(),
    }
    print(json.dumps({k: v for k, v in figures.items() if k != "windows"}, indent=2))
    for w in figures["windows"]:
        span = f"{w['from_s']:>6.0f}-{w['to_s']:<6.0f} s"
        print(
            f"   window {span}: {w['records_per_s']:>10,.0f} records/s, GC {w['gc_share']:.3f}, "
            f"{w['commits']} commits of {w['table_commit_s_mean']:.2f} s, metadata {w['metadata_bytes']} bytes"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
