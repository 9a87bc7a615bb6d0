"""Consumer benchmark: one slot's Spark job against a tuned Python consumer and Kafka's perf test.

Run from the repository root (the local stack must be up)::

    PYTHONPATH=plugins python -m lagsched_dev.bench.consumer [--help]   # or -m lagsched_dev.bench <module>

Loads a backlog (`Knobs`: ``LAGSCHED_BENCH_CONSUMER_RECORDS``, default 24,000,000 records of
~100-byte values, a key and one header each, into a 12-partition topic), then,
``LAGSCHED_BENCH_DRAWS`` times (default 3), reads it with three readers, in a rotating order:

* ``raw``: `lagsched_dev.bench.raw_consumer`, a tuned confluent-kafka consumer writing the job's
  Parquet layout with pyarrow, over the whole backlog;
* ``perf``: Kafka's own ``kafka-consumer-perf-test`` (``ConsumerPerformance``): the ceiling of
  reading on this machine, nothing written;
* ``spark``: the production slot ``lagsched/jobs/consume.py`` under spark-submit (``local[2]``) with the
  job's defaults, a long-lived slot's life in small: busy on the backlog for its time budget
  (``LAGSCHED_BENCH_SLOT_S``, 240 s); its steady rate counts the batches after its first minute
  (`spark_figures`), its first batch and start-up apart; its CPU sampled per thread group.

Each reader's output is checked: the raw files and the slot's Iceberg table must hold every
(partition, offset) once (the table: every offset below the one the slot committed), the perf test
must count every record. Writes
``bench/results/consumer.json`` (see `summarize`); the topic is deleted at the end, also on
failure. Targets: ratio = spark / raw >= 1.0 (aim 1.2) and the job's CPU per record <= 1.3x the raw
consumer's (issue 31), first batch >= 0.5 x steady (issue 16). Method and figures:
docs/consumer-benchmark.md.

Environment: ``LAGSCHED_BENCH_REDIS_DB`` (default 14) the Redis DB of the job's slot,
``LAGSCHED_BENCH_SINK_ROOT`` (default /var/tmp), ``LAGSCHED_BENCH_KEEP_WORK=1`` keeps a Spark run's
sink, stats file and log.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagsched.jobs import CONSUME_JOB
from lagsched_dev.bench.cpu import machine_busy_s, proc_pid_cpu_s

DEFAULT_OUT = "bench/results/consumer.json"
DEFAULT_RECORDS = 24_000_000
DEFAULT_DRAWS = 3
DEFAULT_PARTITIONS = (12,)
VALUE_BYTES = 100
#: The job's --max-records default (records of one partition per batch): the raw consumer cuts its
#: files there too, so both write the same files.
JOB_MAX_RECORDS = 100_000
#: The slot's first minute is its warm-up; the steady state is the rest (issue 16).
DEFAULT_WARMUP_S = 60
#: The slot's time budget (``--budget-s``): it consumes the backlog for this long at most, then
#: finishes its batch and stops; a backlog it cannot finish in that time keeps it busy throughout.
DEFAULT_SLOT_S = 240
#: A long-lived slot's steady state: the job must consume at least this long (warm-up included),
#: else the run says so (``long_lived``: false) and more records are needed.
MIN_CONSUME_S = 180.0
#: The repository's plugins/ folder (the job needs the package on its PYTHONPATH).
PLUGINS = Path(__file__).resolve().parents[2]
#: Where each run's own sink folder goes (disk-backed, unlike /tmp on many machines); the folders
#: have random names and are removed after each run.
SINK_ROOT = Path(os.environ.get("LAGSCHED_BENCH_SINK_ROOT", "/var/tmp"))  # noqa: S108


# --------------------------------------------------------------------------- pure helpers


def env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    """An integer setting from the environment, checked.

    >>> env_int({"N": "3_000"}, "N", 5)
    3000
    >>> env_int({}, "N", 5)
    5
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} is below the minimum {minimum}")
    return value


def records_per_s(records: int, seconds: float) -> float:
    """Throughput, 0 for an empty or instant interval.

    >>> records_per_s(1000, 0.5)
    2000.0
    >>> records_per_s(10, 0.0)
    0.0
    """
    return records / seconds if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Knobs:
    """The benchmark's size and options (`knobs_from`)."""

    records: int = DEFAULT_RECORDS
    draws: int = DEFAULT_DRAWS
    partitions: tuple[int, ...] = DEFAULT_PARTITIONS
    warmup_s: float = DEFAULT_WARMUP_S
    slot_s: float = DEFAULT_SLOT_S
    jfr: bool = False
    #: ``raw`` (the values as bytes, the shared table) or ``avro`` (`AVRO_SCHEMA` through the schema
    #: registry: the slot routes the topic to a typed table, the raw consumer decodes the same way).
    format: str = "raw"


#: The Avro section's records (issue 41): ten fields of mixed types, a nullable string, a timestamp.
AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "BenchOrder",
    "namespace": "lagsched.bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sku", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "BenchStatus", "symbols": ["NEW", "PAID", "SENT"]}},
        {"name": "gift", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "region", "type": "string"},
    ],
}
#: Distinct datums the Avro backlog cycles through (encoding each of millions of records in Python
#: would take longer than reading them).
AVRO_POOL = 50_000


def avro_pool(schema_id: int, size: int = AVRO_POOL) -> list[bytes]:
    """``size`` distinct values in Confluent's wire format (`AVRO_SCHEMA`, id ``schema_id``).

    >>> values = avro_pool(7, 3)
    >>> {v[:5].hex() for v in values}, len(set(values))
    ({'0000000007'}, 3)
    """
    import io

    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    head = b"\x00" + schema_id.to_bytes(4, "big")
    out = []
    for i in range(size):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {
            "id": i, "sku": f"SKU-{i % 997:05d}", "qty": i % 50, "price": i * 0.25, "at": 1_780_000_000_000 + i,
            "note": None if i % 3 else f"note {i}", "status": ("NEW", "PAID", "SENT")[i % 3], "gift": i % 2 == 0,
            "ratio": (i % 100) / 100, "region": ("eu-west", "us-east", "ap-south")[i % 3],
        })  # fmt: skip
        out.append(head + buf.getvalue())
    return out


def knobs_from(env: Mapping[str, str]) -> Knobs:
    """The knobs from ``LAGSCHED_BENCH_CONSUMER_RECORDS``, ``..._DRAWS``, ``..._PARTITIONS`` (comma separated),
    ``..._WARMUP_S``, ``..._SLOT_S`` and ``..._JFR``.

    >>> knobs_from({"LAGSCHED_BENCH_PARTITIONS": "4,12", "LAGSCHED_BENCH_DRAWS": "1"})
    Knobs(records=24000000, draws=1, partitions=(4, 12), warmup_s=60, slot_s=240, jfr=False, format='raw')
    """
    parts = tuple(int(p) for p in env.get("LAGSCHED_BENCH_PARTITIONS", "").replace(" ", "").split(",") if p)
    return Knobs(
        records=env_int(env, "LAGSCHED_BENCH_CONSUMER_RECORDS", DEFAULT_RECORDS),
        draws=env_int(env, "LAGSCHED_BENCH_DRAWS", DEFAULT_DRAWS),
        partitions=parts or DEFAULT_PARTITIONS,
        warmup_s=env_int(env, "LAGSCHED_BENCH_WARMUP_S", DEFAULT_WARMUP_S, minimum=0),
        slot_s=env_int(env, "LAGSCHED_BENCH_SLOT_S", DEFAULT_SLOT_S),
        jfr=env.get("LAGSCHED_BENCH_JFR", "") not in ("", "0"),
        format=env.get("LAGSCHED_BENCH_FORMAT", "raw"),
    )


@dataclass(frozen=True, slots=True)
class SparkStats:
    """What the job's stats file says about one run."""

    spark_ready_s: float
    batches: list[dict[str, Any]]
    stopped: dict[str, Any]

    @property
    def records(self) -> int:
        return sum(int(b["records"]) for b in self.batches)


def parse_stats(lines: Iterable[str]) -> SparkStats:
    """The job's ``--stats-file`` (JSON lines: started, batch..., stopped).

    >>> s = parse_stats([
    ...     '{"event": "started", "slot": "w", "spark_ready_s": 4.5}',
    ...     '{"event": "batch", "n": 1, "records": 10, "wall_s": 2.0, "t_start": 100.0, "t_end": 102.0}',
    ...     '{"event": "stopped", "reason": "idle", "records": 10}',
    ... ])
    >>> (s.spark_ready_s, s.records, s.stopped["reason"])
    (4.5, 10, 'idle')
    """
    ready: float | None = None
    batches: list[dict[str, Any]] = []
    stopped: dict[str, Any] = {}
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        kind = event.get("event")
        if kind == "started":
            ready = float(event["spark_ready_s"])
        elif kind == "batch":
            batches.append(event)
        elif kind == "stopped":
            stopped = event
    if ready is None:
        raise ValueError("the stats file has no 'started' event")
    return SparkStats(spark_ready_s=ready, batches=batches, stopped=stopped)


def batch_start(batch: Mapping[str, Any]) -> float:
    """A batch's start (unix seconds) from its stats line: its end minus its wall time."""
    return float(batch["t_end"]) - float(batch["wall_s"])


def steady_from(batches: Sequence[Mapping[str, Any]], warmup_s: float) -> int:
    """The index of the first steady batch: the first to start `warmup_s` or more after batch 1 started.

    A run too short to have one falls back to batch 2 (index 1), the old "all but the first batch".

    >>> b = [{"t_end": 10.0, "wall_s": 10.0}, {"t_end": 40.0, "wall_s": 30.0}, {"t_end": 70.0, "wall_s": 30.0},
    ...      {"t_end": 80.0, "wall_s": 10.0}]
    >>> steady_from(b, 60.0), steady_from(b, 40.0), steady_from(b, 600.0)
    (3, 2, 1)
    """
    if not batches:
        return 0
    t0 = batch_start(batches[0])
    for i, batch in enumerate(batches[1:], start=1):
        if batch_start(batch) - t0 >= warmup_s:
            return i
    return 1


def spark_figures(stats: SparkStats, warmup_s: float = 0.0) -> dict[str, Any]:
    """Cold start, first batch, warm-up and steady-state figures of one job run.

    The steady state is what a long-lived slot lives in: the batches from the first one starting
    `warmup_s` after the first batch started (`steady_from`) to the last, their records over the
    wall time from the end of the batch before them to the last batch's end (so the driver's loop
    between batches counts). ``warmup_s=0`` makes it batches 2.. (the first batch alone is the
    cold one: classes loaded, code compiled). ``consumed_s`` is the first batch's start to the last
    batch's end.

    >>> s = parse_stats([
    ...     '{"event": "started", "spark_ready_s": 5.0}',
    ...     '{"event": "batch", "n": 1, "records": 100, "read_s": 1, "write_s": 2, "commit_s": 0.1,'
    ...     ' "wall_s": 4.0, "t_start": 1000.0, "t_end": 1004.0}',
    ...     '{"event": "batch", "n": 2, "records": 300, "read_s": 0.5, "write_s": 1.0, "commit_s": 0.1,'
    ...     ' "wall_s": 2.0, "t_start": 1004.5, "t_end": 1006.5}',
    ...     '{"event": "batch", "n": 3, "records": 300, "read_s": 0.5, "write_s": 1.0, "commit_s": 0.1,'
    ...     ' "wall_s": 2.0, "t_start": 1006.5, "t_end": 1009.0}',
    ...     '{"event": "stopped", "records": 700}'])
    >>> f = spark_figures(s)
    >>> (f["first_batch_records_per_s"], f["records_per_s"], f["steady_records"])
    (25.0, 120.0, 600)
    >>> f = spark_figures(s, warmup_s=5.0)
    >>> (f["steady_from_batch"], f["steady_records"], f["records_per_s"], f["warmup_records_per_s"])
    (3, 300, 120.0, 61.5)
    """
    if not stats.batches:
        raise ValueError("the job ran no batch")
    first = stats.batches[0]
    k = steady_from(stats.batches, warmup_s)
    rest = stats.batches[k:]
    steady_records = sum(int(b["records"]) for b in rest)
    boundary = float(stats.batches[k - 1]["t_end"])
    steady_wall = float(rest[-1]["t_end"]) - boundary if rest else 0.0
    t0 = batch_start(first)
    warmup_records = sum(int(b["records"]) for b in stats.batches[:k])

    def total(key: str) -> float:
        return round(sum(float(b.get(key, 0.0)) for b in rest), 3)

    return {
        "ready_s": round(stats.spark_ready_s, 3),
        "first_batch_records": int(first["records"]),
        "first_batch_s": round(float(first["wall_s"]), 3),
        "first_batch_records_per_s": round(records_per_s(int(first["records"]), float(first["wall_s"])), 1),
        # The slot's first minute (or whatever `warmup_s` is), first batch included.
        "warmup_records_per_s": round(records_per_s(warmup_records, boundary - t0), 1),
        "consumed_s": round(float(stats.batches[-1]["t_end"]) - t0, 3),
        "steady_from_batch": k + 1,
        "steady_after_s": round(boundary - t0, 3),
        "steady_records": steady_records,
        "steady_wall_s": round(steady_wall, 3),
        "records_per_s": round(records_per_s(steady_records, steady_wall), 1),
        "batches": len(stats.batches),
        # Where the steady state's wall time went, from the job's own stats: its "read_s" is the
        # Spark job (Kafka read, conversion and the data files' write run fused in one job), its
        # "table_commit_s" the Iceberg commit; "plan_s" the driver's planning (mark, claims' ranges
        # recorded), "commit_s" the offsets' commit in MySQL; the rest the loop between batches
        # (claims, ownership, ListOffsets, the mirrored group).
        "steady_batch_wall_s": total("wall_s"),
        "steady_spark_job_s": total("read_s"),
        "steady_table_commit_s": total("table_commit_s"),
        "steady_plan_s": total("plan_s"),
        "steady_commit_s": total("commit_s"),
        "steady_between_batches_s": round(max(0.0, steady_wall - total("wall_s")), 3),
    }


#: Targets of issue 31: the production slot's steady state at least as fast as the tuned Python
#: consumer (1.2x is the aim: the slot has both cores, the raw consumer is one process) on at most
#: 1.3x its CPU per record; and (issue 16) a new slot's first batch at least half the steady rate.
TARGET_RATIO = 1.0
TARGET_RATIO_AIM = 1.2
TARGET_CPU_VS_RAW = 1.3
TARGET_FIRST_BATCH_SHARE = 0.5


def summarize(records: int, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON document: worst case at the top, every run below.

    ``ratio`` is the lowest spark / raw over the runs (each run pairs the readers on the same topic
    in the same draw, so a machine busy with other work slows all three alike), and
    ``spark_records_per_s``, ``raw_records_per_s`` and ``perf_test_records_per_s`` are that run's,
    so the top-level ratio and ``spark_vs_perf_test`` are their quotients.
    ``spark_first_batch_records_per_s`` is the lowest and ``spark_startup_s`` the highest over the
    runs; ``first_batch_vs_steady`` is the lowest first batch over the lowest steady rate.
    ``job_cpu_us_per_record`` (the job's whole process tree in its steady window) and
    ``raw_cpu_us_per_record`` (the raw consumer's process over its run) are the worst run's, and
    ``cpu_vs_raw`` their quotient (issue 31: at most 1.3).

    >>> runs = [
    ...     {"partitions": 4, "draw": 1, "spark": {"records_per_s": 300.0, "first_batch_records_per_s": 100.0,
    ...      "startup_s": 9.0, "steady_job_cpu_us_per_record": 3.0}, "raw": {"records_per_s": 200.0,
    ...      "cpu": {"reader_cpu_us_per_record": 3.2}}, "perf": {"records_per_s": 900.0}},
    ...     {"partitions": 12, "draw": 1, "spark": {"records_per_s": 250.0, "first_batch_records_per_s": 120.0,
    ...      "startup_s": 8.0, "steady_job_cpu_us_per_record": 4.2}, "raw": {"records_per_s": 250.0,
    ...      "cpu": {"reader_cpu_us_per_record": 3.0}}, "perf": {"records_per_s": 800.0}},
    ... ]
    >>> s = summarize(1000, runs)
    >>> (s["ratio"], s["spark_records_per_s"], s["raw_records_per_s"], s["worst_run"])
    (1.0, 250.0, 250.0, {'partitions': 12, 'draw': 1})
    >>> (s["job_cpu_us_per_record"], s["raw_cpu_us_per_record"], s["cpu_vs_raw"])
    (4.2, 3.0, 1.4)
    >>> (s["spark_first_batch_records_per_s"], s["spark_startup_s"], s["spark_vs_perf_test"])
    (100.0, 9.0, 0.312)
    >>> s["target"]  # doctest: +NORMALIZE_WHITESPACE
    {'ratio': 1.0, 'ratio_aim': 1.2, 'ratio_met': True, 'cpu_vs_raw': 1.3, 'cpu_met': False,
     'first_batch_vs_steady': 0.5, 'first_batch_met': False}
    """
    if not runs:
        raise ValueError("no runs to summarize")

    def ratio(run: Mapping[str, Any]) -> float:
        raw = float(run["raw"]["records_per_s"])
        return float(run["spark"]["records_per_s"]) / raw if raw > 0 else 0.0

    worst = min(runs, key=ratio)

    def spread(get: Callable[[Mapping[str, Any]], float]) -> dict[str, float]:
        values = [get(r) for r in runs]
        return {
            "min": round(min(values), 3),
            "median": round(statistics.median(values), 3),
            "max": round(max(values), 3),
        }

    spark = float(worst["spark"]["records_per_s"])
    perf = float(worst["perf"]["records_per_s"])
    first = min(float(r["spark"]["first_batch_records_per_s"]) for r in runs)
    slowest = min(float(r["spark"]["records_per_s"]) for r in runs)
    first_share = first / slowest if slowest > 0 else 0.0
    job_cpu = float(worst["spark"].get("steady_job_cpu_us_per_record", 0.0))
    raw_cpu = float(worst["raw"].get("cpu", {}).get("reader_cpu_us_per_record", 0.0))
    cpu_vs_raw = job_cpu / raw_cpu if raw_cpu > 0 else 0.0
    return {
        "records": records,
        "spark_records_per_s": round(spark, 1),
        "spark_first_batch_records_per_s": round(first, 1),
        "raw_records_per_s": round(float(worst["raw"]["records_per_s"]), 1),
        "perf_test_records_per_s": round(perf, 1),
        "ratio": round(ratio(worst), 3),
        "spark_startup_s": round(max(float(r["spark"]["startup_s"]) for r in runs), 3),
        "spark_vs_perf_test": round(spark / perf, 3) if perf > 0 else 0.0,
        "first_batch_vs_steady": round(first_share, 3),
        "job_cpu_us_per_record": round(job_cpu, 2),
        "raw_cpu_us_per_record": round(raw_cpu, 2),
        "cpu_vs_raw": round(cpu_vs_raw, 3),
        "worst_run": {"partitions": worst["partitions"], "draw": worst["draw"]},
        "spread": {
            "ratio": spread(ratio),
            "spark_records_per_s": spread(lambda r: float(r["spark"]["records_per_s"])),
            "spark_first_batch_records_per_s": spread(lambda r: float(r["spark"]["first_batch_records_per_s"])),
            "raw_records_per_s": spread(lambda r: float(r["raw"]["records_per_s"])),
            "perf_test_records_per_s": spread(lambda r: float(r["perf"]["records_per_s"])),
        },
        "target": {
            "ratio": TARGET_RATIO,
            "ratio_aim": TARGET_RATIO_AIM,
            "ratio_met": ratio(worst) >= TARGET_RATIO,
            "cpu_vs_raw": TARGET_CPU_VS_RAW,
            "cpu_met": 0 < cpu_vs_raw <= TARGET_CPU_VS_RAW,
            "first_batch_vs_steady": TARGET_FIRST_BATCH_SHARE,
            "first_batch_met": first_share >= TARGET_FIRST_BATCH_SHARE,
        },
        "runs": list(runs),
    }


def reader_order(draw: int, readers: Sequence[str] = ("raw", "perf", "spark")) -> list[str]:
    """The readers' order in a draw, rotated so none always runs first (on a cold cache).

    >>> [reader_order(d) for d in range(3)]
    [['raw', 'perf', 'spark'], ['perf', 'spark', 'raw'], ['spark', 'raw', 'perf']]
    """
    k = draw % len(readers)
    return [*readers[k:], *readers[:k]]


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """CPU-seconds used so far: the whole machine (busy), this process, its waited-for children, the broker."""

    wall: float
    machine_busy: float
    own: float
    children: float
    broker: float


def cpu_snapshot(broker_pid: int | None) -> CpuSnapshot:
    tick = os.sysconf("SC_CLK_TCK")
    broker = 0.0
    if broker_pid is not None:
        try:
            broker = proc_pid_cpu_s(Path(f"/proc/{broker_pid}/stat").read_text(), tick)
        except OSError:
            broker = 0.0
    times = os.times()
    return CpuSnapshot(
        wall=time.monotonic(),
        machine_busy=machine_busy_s(),
        own=times.user + times.system,
        children=times.children_user + times.children_system,
        broker=broker,
    )


def cpu_usage(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """Where the machine's CPU went during one reader's run.

    ``reader_cpu_s`` is this process and the children it waited for (spark-submit's JVM and the
    job's Python, the perf test's JVM); ``others_cpu_s`` is everything else but the broker: other
    work on the machine competing with the reader, the reason a draw may be slow.

    >>> cpu_usage(CpuSnapshot(0, 10, 1, 0, 5), CpuSnapshot(10, 25, 5, 6, 7))
    {'wall_s': 10, 'reader_cpu_s': 10, 'broker_cpu_s': 2, 'others_cpu_s': 3, 'cores_busy': 1.5}
    """
    wall = after.wall - before.wall
    busy = after.machine_busy - before.machine_busy
    reader = (after.own - before.own) + (after.children - before.children)
    broker = after.broker - before.broker
    return {
        "wall_s": round(wall, 3),
        "reader_cpu_s": round(reader, 3),
        "broker_cpu_s": round(broker, 3),
        "others_cpu_s": round(max(0.0, busy - reader - broker), 3),
        "cores_busy": round(busy / wall, 2) if wall > 0 else 0.0,
    }


#: JVM thread names (Linux keeps their first 15 characters) -> what they do, for the per-thread profile.
THREAD_GROUPS: tuple[tuple[str, str], ...] = (
    ("Executor task", "spark task threads"),
    ("GC Thread", "GC"),
    ("G1 ", "GC"),
    ("C2 Compiler", "JIT C2"),
    ("C1 Compiler", "JIT C1"),
    ("kafka-", "kafka client threads"),
    ("VM ", "JVM internals"),
)


def thread_group(name: str) -> str:
    """What a JVM thread (by its Linux name) spends its CPU on, in the profile's terms.

    >>> [thread_group(n) for n in ("Executor task l", "GC Thread#1", "G1 Conc#0", "C2 CompilerThre", "Thread-7")]
    ['spark task threads', 'GC', 'GC', 'JIT C2', 'other JVM threads']
    """
    for prefix, group in THREAD_GROUPS:
        if name.startswith(prefix):
            return group
    return "other JVM threads"


def _proc_stat(path: Path) -> tuple[str, int, float] | None:
    """(name, parent pid, CPU-seconds) from a /proc .../stat file, None if it is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text[text.rfind(")") + 2 :].split()
    return name, int(fields[1]), proc_pid_cpu_s(text, os.sysconf("SC_CLK_TCK"))


def tree_cpu(root: int) -> dict[str, float]:
    """CPU-seconds so far of `root` and its descendants, the JVMs' per thread group (`thread_group`)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _proc_stat(entry / "stat")) is not None:
            names[int(entry.name)], parents[int(entry.name)] = st[0], st[1]
    tree, frontier = {root}, [root]
    while frontier:
        kids = [pid for pid, ppid in parents.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
    out: dict[str, float] = {}
    for pid in tree:
        if names.get(pid, "") != "java":
            st = _proc_stat(Path(f"/proc/{pid}/stat"))
            if st is not None:
                group = _python_group(pid) if st[0].startswith("python") else "other processes"
                out[group] = out.get(group, 0.0) + st[2]
            continue
        for task in Path(f"/proc/{pid}/task").glob("*"):
            if (st := _proc_stat(task / "stat")) is not None:
                group = thread_group(st[0])
                out[group] = out.get(group, 0.0) + st[2]
    return out


def _python_group(pid: int) -> str:
    """A Python process of the job: PySpark's workers (the batch tasks: reading Kafka, writing Parquet,
    forked from ``pyspark.daemon``) or the job's driver."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "job's python (driver)"
    return "python workers (tasks)" if b"pyspark.daemon" in cmdline else "job's python (driver)"


class CpuSampler:
    """Samples `tree_cpu` of a process tree, the broker and the machine every `period_s` (a thread)."""

    def __init__(self, root: int, broker_pid: int | None, period_s: float = 2.0) -> None:
        import threading

        self.samples: list[tuple[float, dict[str, float]]] = []
        self._root, self._broker, self._period = root, broker_pid, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            snap = cpu_snapshot(self._broker)
            groups = tree_cpu(self._root)
            groups["broker"], groups["machine busy"] = snap.broker, snap.machine_busy
            self.samples.append((time.time(), groups))
            if self._stop.wait(self._period):
                return


def window_cpu(samples: Sequence[tuple[float, Mapping[str, float]]], t_from: float, t_to: float) -> dict[str, Any]:
    """Cores each group kept busy between the first sample at or after `t_from` and the last at or before `t_to`.

    ``others`` is the machine's busy time the job's process tree and the broker do not explain.

    >>> samples = [(0.0, {"GC": 1.0, "broker": 0.0, "machine busy": 10.0}),
    ...            (10.0, {"GC": 6.0, "broker": 2.0, "machine busy": 30.0})]
    >>> window_cpu(samples, 0.0, 10.0)
    {'seconds': 10.0, 'cores': {'GC': 0.5, 'broker': 0.2, 'others': 1.3, 'machine busy': 2.0}}
    """
    inside = [(t, g) for t, g in samples if t_from <= t <= t_to]
    if len(inside) < 2:
        return {"seconds": 0.0, "cores": {}}
    (t0, a), (t1, b) = inside[0], inside[-1]
    wall = t1 - t0
    used = {k: b[k] - a.get(k, 0.0) for k in b}
    busy = used.pop("machine busy", 0.0)
    cores = {k: round(v / wall, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}
    cores["others"] = round(max(0.0, busy - sum(used.values())) / wall, 2)
    cores["machine busy"] = round(busy / wall, 2)
    return {"seconds": round(wall, 1), "cores": cores}


def job_cpu_per_record(window: Mapping[str, Any], records_per_s: float) -> dict[str, float]:
    """The job's own cores (its process tree: every group but the broker's and others') in a
    `window_cpu` window, and its CPU-microseconds per record at `records_per_s`: unlike throughput,
    this hardly depends on what else the machine runs.

    >>> job_cpu_per_record({"cores": {"spark task threads": 1.2, "GC": 0.3, "broker": 0.2, "others": 0.1,
    ...                     "machine busy": 1.8}}, 100_000.0)
    {'steady_job_cores': 1.5, 'steady_job_cpu_us_per_record': 15.0}
    """
    outside = {"broker", "others", "machine busy"}
    cores = sum(v for k, v in window.get("cores", {}).items() if k not in outside)
    per_record = cores / records_per_s * 1e6 if records_per_s > 0 else 0.0
    return {"steady_job_cores": round(cores, 2), "steady_job_cpu_us_per_record": round(per_record, 2)}


def _broker_pid() -> int | None:
    """The local stack's Kafka broker, if this machine runs it (its CPU is counted apart)."""
    try:
        from lagsched_dev.stack.config import load

        return int((load().run / "kafka.pid").read_text().split()[0])
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- the records


def _progress(label: str, done: int, total: int, started: float, last: list[float]) -> None:
    """A progress line at most every 2 s."""
    now = time.monotonic()
    if done < total and now - last[0] < 2.0:
        return
    last[0] = now
    rate = records_per_s(done, now - started)
    print(f"   {label}: {done:,}/{total:,} records ({rate:,.0f}/s)", flush=True)


def create_topic(admin: Any, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=60)
    futures[name].result(timeout=90)


def delete_topics(admin: Any, names: Sequence[str]) -> None:
    if not names:
        return
    for name, future in admin.delete_topics(list(names), operation_timeout=60).items():
        try:
            future.result(timeout=90)
        except Exception as exc:  # noqa: BLE001 - clean-up: report and go on
            print(f"   could not delete bench topic {name}: {exc}", file=sys.stderr, flush=True)


def load_records(
    bootstrap: Mapping[str, Any], topic: str, partitions: int, records: int, values: Sequence[bytes] | None = None
) -> float:
    """Produce `records` records round-robin over the partitions; the seconds it took.

    Values are ~100 bytes cut from a random buffer (so Parquet cannot compress them away), or
    ``values`` in turn (the Avro section's); keys are distinct, each record has one header. Checked
    afterwards: every partition's high watermark.
    """
    from confluent_kafka import Producer, TopicPartition

    errors: list[str] = []
    producer = Producer(
        {
            **bootstrap,
            "linger.ms": 50,
            "batch.size": 4 * 1024 * 1024,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1024 * 1024,
            "compression.type": "none",
            "acks": "1",
            "error_cb": lambda err: errors.append(str(err)),
        }
    )
    blob = os.urandom(1 << 20)
    span = len(blob) - VALUE_BYTES - 16
    started = time.monotonic()
    last = [started]
    produce = producer.produce
    for i in range(records):
        cut = (i * 7919) % span
        while True:
            try:
                produce(
                    topic,
                    value=blob[cut : cut + VALUE_BYTES] if values is None else values[i % len(values)],
                    key=b"key-%010d" % i,
                    partition=i % partitions,
                    headers=[("trace-id", blob[cut + VALUE_BYTES : cut + VALUE_BYTES + 16])],
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100_000 == 0:
            producer.poll(0)
            _progress(f"loading {topic}", i, records, started, last)
    if producer.flush(120) != 0:
        raise RuntimeError(f"loading {topic}: records still undelivered after 120 s ({errors[:3]})")
    elapsed = time.monotonic() - started
    _progress(f"loading {topic}", records, records, started, last)
    from confluent_kafka import Consumer

    check = Consumer({**bootstrap, "group.id": "lagsched-bench-check"})
    try:
        got = sum(check.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        check.close()
    if got != records:
        raise RuntimeError(f"loading {topic}: the partitions hold {got} records, expected {records} ({errors[:3]})")
    return elapsed


def check_sink(sink: Path, topic: str, expected: Mapping[int, int]) -> int:
    """Every (partition, offset) in [0, expected[partition]) once in the raw consumer's Parquet folder.

    Read with pyarrow (not Spark), only the partition and offset columns.
    """
    import pyarrow.dataset as ds

    table = ds.dataset(sink, format="parquet", partitioning="hive").to_table(
        columns=["partition", "offset"], filter=ds.field("topic") == topic
    )
    return check_offsets(table, str(sink), topic, expected)


def check_offsets(table: Any, sink: str, topic: str, expected: Mapping[int, int]) -> int:
    """Every (partition, offset) in [0, expected[partition]) once in ``table`` (pyarrow); the rows counted."""
    import numpy as np

    parts = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    for p, n in expected.items():
        mine = np.sort(offsets[parts == p])
        if len(mine) != n or (n and (mine[0] != 0 or mine[-1] != n - 1 or np.any(np.diff(mine) != 1))):
            raise RuntimeError(
                f"sink {sink}: {topic}[{p}] holds {len(mine)} rows, expected offsets 0..{n - 1} once each"
            )
    if table.num_rows != sum(expected.values()):
        raise RuntimeError(f"sink {sink}: {table.num_rows} rows for {topic}, expected {sum(expected.values())}")
    return int(table.num_rows)


# --------------------------------------------------------------------------- the readers


def run_raw(
    bootstrap: Mapping[str, Any], topic: str, expected: Mapping[int, int], max_records: int, *, decode: bool = False
) -> dict[str, Any]:
    """The raw consumer over the whole topic; ``decode``: it decodes the Avro values into their
    columns before writing (`raw_consumer.avro_columns`), as the slot does into its typed table."""
    from lagsched_dev.bench.raw_consumer import RawSettings, avro_columns, consume_topic

    sink = SINK_ROOT / f"lagsched-bench-raw-{uuid.uuid4().hex[:8]}"
    total = sum(expected.values())
    started = time.monotonic()
    last = [started]
    try:
        result = consume_topic(
            bootstrap,
            topic,
            sink,
            RawSettings(max_records=max_records, transform=avro_columns(json.dumps(AVRO_SCHEMA)) if decode else None),
            progress=lambda n: _progress("raw", n, total, started, last),
        )
        written = check_sink(sink, topic, expected)
        files = sum(1 for _ in sink.glob(f"topic={topic}/date=*/*.parquet"))
        size = sum(f.stat().st_size for f in sink.glob(f"topic={topic}/date=*/*.parquet"))
    finally:
        shutil.rmtree(sink, ignore_errors=True)
    return {
        "records": written,
        "records_per_s": round(result.records_per_s, 1),
        "wall_s": round(result.wall_s, 3),
        "setup_s": round(result.setup_s, 3),
        "read_s": round(result.read_s, 3),
        "convert_s": round(result.convert_s, 3),
        "write_s": round(result.write_s, 3),
        "wait_for_writer_s": round(result.wait_s, 3),
        "files": files,
        "bytes": size,
    }


def _use_local_stack() -> None:
    """Connections, Spark's jars and the S3 API server of the local stack, unless the environment has them."""
    from lagsched_dev.bench import use_local_stack_connections
    from lagsched_dev.stack.config import load
    from lagsched_dev.stack.environment import s3_environment, spark_jars

    use_local_stack_connections()
    if not os.environ.get("LAGSCHED_SPARK_JARS"):
        os.environ["LAGSCHED_SPARK_JARS"] = ",".join(str(p) for p in spark_jars(load()))
    for key, value in s3_environment(load()).items():
        os.environ.setdefault(key, value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.consumer", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=None, help="default: LAGSCHED_BENCH_CONSUMER_RECORDS or 24M")
    parser.add_argument("--draws", type=int, default=None, help="default: LAGSCHED_BENCH_DRAWS or 3")
    parser.add_argument("--partitions", type=int, nargs="+", help="default: LAGSCHED_BENCH_PARTITIONS or 12")
    parser.add_argument("--readers", nargs="+", default=["raw", "perf", "spark"], choices=["raw", "perf", "spark"])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument(
        "--format", choices=["raw", "avro"], default=None,
        help="raw bytes (default), or Avro through the registry into a typed table: written as the out file's "
        "`avro` section, the rest of it kept (LAGSCHED_BENCH_FORMAT)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    _use_local_stack()
    knobs = knobs_from(os.environ)
    knobs = Knobs(
        records=args.records or knobs.records,
        draws=args.draws or knobs.draws,
        partitions=tuple(args.partitions or knobs.partitions),
        warmup_s=knobs.warmup_s,
        slot_s=knobs.slot_s,
        jfr=knobs.jfr,
        format=args.format or knobs.format,
    )
    figures = run(knobs, args.readers)
    print(json.dumps({k: v for k, v in figures.items() if k != "runs"}, indent=2))
    if set(args.readers) == {"raw", "perf", "spark"}:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        if knobs.format == "avro":  # a section of the raw-bytes figures' file, which stay as they were
            whole = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
            figures = {**whole, "avro": figures}
            Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
            figures = figures["avro"]
        else:  # the Avro section, from its own run, is kept
            old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
            kept = {"avro": old["avro"]} if "avro" in old else {}
            Path(args.out).write_text(json.dumps({**figures, **kept}, indent=2) + "\n")
        target = figures["target"]
        print(f"target ratio >= {TARGET_RATIO}: {'met' if target['ratio_met'] else 'NOT met'}")
        print(f"target CPU per record <= {TARGET_CPU_VS_RAW} x raw: {'met' if target['cpu_met'] else 'NOT met'}")
        first = "met" if target["first_batch_met"] else "NOT met"
        print(f"target first batch >= {TARGET_FIRST_BATCH_SHARE} x steady: {first}")
    return 0


def run(knobs: Knobs, readers: Sequence[str]) -> dict[str, Any]:
    """Load the topics, run every reader `draws` times on each, delete the topics; the figures."""
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.connections import kafka_config

    bootstrap = kafka_config()
    admin = admin_client(bootstrap)
    broker_pid = _broker_pid()
    load_start = os.getloadavg()
    prefix = f"bench-consumer-{uuid.uuid4().hex[:6]}"
    created: list[str] = []
    all_runs: list[dict[str, Any]] = []
    records = knobs.records
    try:
        for partitions in knobs.partitions:
            topic = f"{prefix}-p{partitions}"
            create_topic(admin, topic, partitions)
            created.append(topic)
            values = None
            if knobs.format == "avro":
                schema_id = _register_schema(topic)
                values = avro_pool(schema_id)
            load_s = load_records(bootstrap, topic, partitions, records, values)
            print(f"   loaded {records:,} records into {topic} in {load_s:.1f} s", flush=True)
            expected = {p: records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)}
            for draw in range(knobs.draws):
                run_figures: dict[str, Any] = {"partitions": partitions, "draw": draw + 1, "topic": topic}
                for reader in reader_order(draw, [r for r in ("raw", "perf", "spark") if r in readers]):
                    print(f"-- {topic} draw {draw + 1}/{knobs.draws}: {reader}", flush=True)
                    before = cpu_snapshot(broker_pid)
                    if reader == "raw":
                        figures = run_raw(bootstrap, topic, expected, JOB_MAX_RECORDS, decode=knobs.format == "avro")
                    elif reader == "perf":
                        figures = run_perf(bootstrap, topic, records)
                    else:
                        figures = run_spark(topic, expected, knobs, broker_pid)
                        figures["long_lived"] = figures["consumed_s"] >= MIN_CONSUME_S
                        if not figures["long_lived"]:
                            print(
                                f"   the slot consumed for {figures['consumed_s']:.0f} s only "
                                f"(< {MIN_CONSUME_S:.0f} s): "
                                "raise LAGSCHED_BENCH_CONSUMER_RECORDS for a long-lived slot's steady state",
                                flush=True,
                            )
                    cpu = cpu_usage(before, cpu_snapshot(broker_pid))
                    # CPU per record barely depends on what else runs; throughput does.
                    cpu["reader_cpu_us_per_record"] = round(cpu["reader_cpu_s"] / records * 1e6, 3)
                    run_figures[reader] = {**figures, "cpu": cpu}
                    print(f"   {reader}: {json.dumps(run_figures[reader])}", flush=True)
                all_runs.append(run_figures)
    finally:
        delete_topics(admin, created)
    machine = {
        "cores": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        # Other work's CPU while a reader ran, worst draw: above a few seconds, the draws competed.
        "others_cpu_s_max": max(
            (float(r[k]["cpu"]["others_cpu_s"]) for r in all_runs for k in ("raw", "perf", "spark") if k in r),
            default=0.0,
        ),
    }
    method = {
        "partitions": list(knobs.partitions),
        "draws": knobs.draws,
        "warmup_s": knobs.warmup_s,
        "slot_s": knobs.slot_s,
        "min_consume_s": MIN_CONSUME_S,
        "job_max_records": JOB_MAX_RECORDS,
        "format": knobs.format,
    }
    extra = {"method": method, "machine": machine}
    if set(readers) != {"raw", "perf", "spark"}:
        return {"records": records, **extra, "runs": all_runs}
    return {**summarize(records, all_runs), **extra}


#: The perf test's fetch size per partition: the raw consumer's (8 MiB), for a ceiling; its
#: default of 1 MiB read 1M records at ~60% of the speed here.
PERF_FETCH_BYTES = 8 * 1024 * 1024


def run_perf(bootstrap: Mapping[str, Any], topic: str, records: int) -> dict[str, Any]:
    """Kafka's ConsumerPerformance over the whole topic; its figures, checked to count every record.

    ``records_per_s`` is the tool's ``fetch.nMsg.sec``: records over its fetch time, the group
    join excluded (the tool subscribes; the other readers assign).
    """
    from lagsched_dev.kafka_tools import consumer_perf_test

    result = consumer_perf_test(
        str(bootstrap["bootstrap.servers"]),
        topic,
        records,
        group=f"lagsched-bench-perf-{uuid.uuid4().hex[:8]}",
        fetch_size=PERF_FETCH_BYTES,
        idle_timeout_ms=60_000,
    )
    if result.records != records or not result.complete:
        raise RuntimeError(f"kafka-consumer-perf-test read {result.records} records, expected {records}")
    return {
        "records": result.records,
        "records_per_s": round(result.fetch_records_per_s, 1),
        "records_per_s_with_group_join": round(result.records_per_s, 1),
        "fetch_s": round(result.fetch_ms / 1000, 3),
        "group_join_s": round(result.rebalance_ms / 1000, 3),
        "process_wall_s": round(result.wall_s, 3),
        "megabytes": result.megabytes,
    }


def job_env(database: str, redis_db: int) -> dict[str, str]:
    """A benchmark job's environment: this one with the bench database and Redis DB as its
    Connections (`_connection_env`), the venv's Python for Spark's workers and lagsched on the path."""
    return {
        **os.environ,
        **_connection_env(database, redis_db),
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
    }


def _connection_env(database: str, redis_db: int) -> dict[str, str]:
    """The job's Connections: the bench database, the bench Redis DB, the rest as they are."""
    conns: dict[str, dict[str, Any]] = {}
    for name in ("AIRFLOW_CONN_LAGSCHED_MYSQL", "AIRFLOW_CONN_LAGSCHED_REDIS"):
        try:
            conns[name] = json.loads(os.environ[name])
        except (KeyError, ValueError):
            raise RuntimeError(f"{name} must be set in Airflow's JSON form (use_local_stack_connections)") from None
    conns["AIRFLOW_CONN_LAGSCHED_MYSQL"]["schema"] = database
    redis = conns["AIRFLOW_CONN_LAGSCHED_REDIS"]
    redis["extra"] = {**(redis.get("extra") or {}), "db": redis_db}
    return {name: json.dumps(conn) for name, conn in conns.items()}


def _register(database: Any, topic: str, cluster: str) -> None:
    """Register `topic` in the bench database (as the lag monitor's sync does), one linker worker."""
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config
    from lagsched.workflows.topic_sync import sync_registry

    conn = connect(database)
    try:
        report = sync_registry(conn, admin_client(kafka_config()), cluster, only=[topic])
        if list(report.added) != [topic]:
            raise RuntimeError(f"registering {topic}: the sync added {report.added}")
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = 1 WHERE cluster = %s AND name = %s", (cluster, topic))
        conn.commit()
    finally:
        conn.close()


def run_spark(topic: str, expected: Mapping[int, int], knobs: Knobs, broker_pid: int | None) -> dict[str, Any]:
    """One run of the production job (spark-submit, ``local[2]``) over the whole backlog; its figures.

    The job runs with its own defaults (``--max-records``, ``--min-records``, ``--min-interval-s``:
    as the consume DAG starts it), plus ``--exit-when-idle`` and ``--stats-file``. A fresh database
    with only this topic registered, a fresh sink, a fresh slot: the slot is the only live one in
    the bench's Redis DB, so it owns the topic and claims every partition. While it runs, the CPU
    of its process tree is sampled per thread group (`CpuSampler`): ``steady_cpu`` says where each
    core's time went in the steady state. ``LAGSCHED_BENCH_JFR=1`` also records a Java Flight
    Recorder profile of the job's JVM into its work folder (kept: set ``LAGSCHED_BENCH_KEEP_WORK``).
    """
    import subprocess

    from lagsched.adapters.spark import submit_command
    from lagsched.connections import mysql_params
    from lagsched_dev.bench.claims import create_database, drop_database

    run_id = uuid.uuid4().hex[:8]
    cluster = f"bench-{run_id}"
    work = SINK_ROOT / f"lagsched-bench-spark-{run_id}"
    stats_path = work / "stats.jsonl"
    log_path = work / "job.log"
    work.mkdir(parents=True)
    database = create_database(mysql_params(), prefix="lagsched_bench_consumer")
    group = f"lagsched-bench-{run_id}"
    try:
        _register(database, topic, cluster)
        args = [
            "--slot", f"bench-{run_id}", "--cluster", cluster, "--budget-s", str(knobs.slot_s),
            "--warehouse", (work / "warehouse").as_uri(), "--group", group,
            "--exit-when-idle", "--stats-file", str(stats_path),
            *(("--routes", json.dumps([{"topics": [topic], "value_format": "avro"}])) if knobs.format == "avro"
              else ()),
            # Experiments: other job options (e.g. --max-records), over the job's defaults.
            *shlex.split(os.environ.get("LAGSCHED_BENCH_JOB_ARGS", "")),
        ]  # fmt: skip
        java = [f"-XX:StartFlightRecording=filename={work / 'job.jfr'},settings=profile"] if knobs.jfr else []
        # Experiments: JVM options of the job's driver (in local mode the executors' JVM too).
        java += shlex.split(os.environ.get("LAGSCHED_BENCH_JAVA_OPTS", ""))
        job = CONSUME_JOB
        env = job_env(database.database, env_int(os.environ, "LAGSCHED_BENCH_REDIS_DB", 14, minimum=0))
        started_unix = time.time()
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(  # noqa: S603 - our own spark-submit argv
                submit_command(job, args, java_options=java), env=env, stdout=log_file, stderr=subprocess.STDOUT
            )
            with CpuSampler(proc.pid, broker_pid) as sampler:
                returncode = proc.wait(timeout=3600)
        process_s = time.time() - started_unix
        if returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"the consumer job exited {returncode}:\n{tail}")
        stats = parse_stats(stats_path.read_text().splitlines())
        figures = spark_figures(stats, knobs.warmup_s)
        first = stats.batches[0]
        figures["startup_s"] = round(batch_start(first) - started_unix, 3)
        figures["process_s"] = round(process_s, 3)
        steady_start = float(stats.batches[figures["steady_from_batch"] - 2]["t_end"])
        figures["steady_cpu"] = window_cpu(sampler.samples, steady_start, float(stats.batches[-1]["t_end"]))
        figures.update(job_cpu_per_record(figures["steady_cpu"], figures["records_per_s"]))
        # The job mirrors its offsets into a Kafka consumer group after each commit (issue 9 item 5):
        # they say where it stopped (its time budget may end it before the backlog's end).
        consumed = {p: _mirrored_offsets(topic, group).get(p, 0) for p in expected}
        if stats.stopped.get("reason") == "idle" and consumed != dict(expected):
            raise RuntimeError(f"the job went idle at {consumed}, the topic ends at {dict(expected)}")
        if stats.records != sum(consumed.values()):
            raise RuntimeError(f"the job reported {stats.records} records, its group holds {sum(consumed.values())}")
        figures["stopped"] = stats.stopped.get("reason")
        figures["mirrored_group_matches"] = True
        # Judged by Iceberg's own reader (pyiceberg, no Spark) through the job's catalog: every
        # offset below the committed one exactly once, nothing else.
        from lagsched.adapters.lake_reader import load_table, read_rows, table_stats
        from lagsched.core.lake import LakeTable

        lake = LakeTable.of(cluster, {"warehouse": (work / "warehouse").as_uri()}, default_warehouse="")
        if knobs.format == "avro":
            figures.update(_check_typed(lake, database, topic, consumed))
        else:
            rows = read_rows(lake, database, columns=("partition", "offset"))
            figures["records"] = check_offsets(rows, lake.identifier, topic, consumed)
            table = table_stats(lake, database)
            figures["files"] = table.data_files
            figures["bytes"] = table.data_bytes
            columns = ("partition", "offset", "timestamp", "key", "value", "headers")
            sample = load_table(lake, database).scan(selected_fields=columns, limit=10).to_arrow()
            figures["schema_matches_raw"] = _schema_matches(sample.schema)
    finally:
        if os.environ.get("LAGSCHED_BENCH_KEEP_WORK"):
            print(f"   kept the job's sink, stats and log in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
        drop_database(database)
        _delete_group(group)
    return figures


def _register_schema(topic: str) -> int:
    """`AVRO_SCHEMA` in the stack's registry under ``<topic>-value``; its id."""
    from lagsched.adapters.schema_registry import RegistryClient
    from lagsched.connections import schema_registry_params

    return int(RegistryClient(schema_registry_params()).register(f"{topic}-value", json.dumps(AVRO_SCHEMA)))


def _check_typed(lake: Any, database: Any, topic: str, consumed: Mapping[int, int]) -> dict[str, Any]:
    """The Avro section's check: every offset once in the topic's typed table, none a dead letter,
    the table's columns the Avro fields; its file figures."""
    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.adapters.lake_sink import dead_letter_table
    from lagsched.core.routing import table_for_topic

    catalog = open_catalog(lake, database)
    typed = catalog.load_table(f"{lake.namespace}.{table_for_topic(topic)}")
    rows = typed.scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
    rows = rows.rename_columns(["partition", "offset"])
    dead = catalog.load_table(dead_letter_table(lake).split(".", 1)[1]).scan().to_arrow().num_rows
    if dead:
        raise RuntimeError(f"{dead} record(s) of {topic} went to the dead-letter table")
    files = list(typed.scan().plan_files())
    columns = [f.name for f in typed.schema().fields if not f.name.startswith("_kafka_")]
    return {
        "records": check_offsets(rows, typed.name(), topic, consumed),
        "files": len(files),
        "bytes": sum(t.file.file_size_in_bytes for t in files),
        "typed_columns_match": columns == [f["name"] for f in AVRO_SCHEMA["fields"]],
    }


def _schema_matches(schema: Any) -> bool:
    """Whether the job's table has the raw consumer's columns and types (metadata and nullability aside)."""
    from lagsched_dev.bench.raw_consumer import SCHEMA

    def shape(s: Any) -> list[tuple[str, str]]:
        # pyiceberg reads binary and string columns as Arrow's large types and names a list's
        # element "element" (Arrow: "item"); the values are the same.
        return [
            (f.name, str(f.type).replace(" not null", "").replace("large_", "").replace("element:", "item:")) for f in s
        ]

    return shape(schema.remove_metadata()) == shape(SCHEMA)


def _mirrored_offsets(topic: str, group: str) -> dict[int, int]:
    """The next offsets the job mirrored into its consumer group, per partition ({} if none)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.connections import kafka_config

    admin = admin_client(kafka_config())  # kept referenced: its futures die with it
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=30)
    try:
        result = futures[group].result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - reported as a figure, not a failure of the benchmark
        print(f"   could not read consumer group {group}: {exc!r}", file=sys.stderr, flush=True)
        return {}
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.error is None}


def _delete_group(group: str) -> None:
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.connections import kafka_config

    admin = admin_client(kafka_config())  # kept referenced: its futures die with it
    try:
        for future in admin.delete_consumer_groups([group], request_timeout=30).values():
            future.result(timeout=60)
    except Exception as exc:  # noqa: BLE001 - clean-up: a missing group (nothing mirrored) is fine
        if "GROUP_ID_NOT_FOUND" not in repr(exc):
            print(f"   could not delete consumer group {group}: {exc!r}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
