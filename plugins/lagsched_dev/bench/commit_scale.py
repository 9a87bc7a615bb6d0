"""Commits at scale (issue 40, a): what does a slot's table commit cost once the table holds 6 hours of snapshots?

Run from the repository root, with the stack up::

    PYTHONPATH=plugins python -m lagsched_dev.bench.commit_scale [--snapshots N] [--slots 20]
        [--partitions-per-commit 20] [--out bench/results/commit_scale.json]

**Why.** Each slot commits to its cluster's table at most once every ``commit_interval_s`` (30 s)
and the table care expires snapshots older than 6 hours, hourly: a table written by 20 slots
carries 6 * 3600 / 30 * 20 = 14,400 snapshots. Every commit reads the table's whole metadata file
(one entry per snapshot, each with its ``lagsched.ranges`` summary) and writes a new one, so its
cost grows with the history. The target: the production commit's p99 at most 1.0 s on such a table.

**How.** The history is built through the production commit path only, in one Spark session
(``local[2]``, the lake's jars, the Iceberg JDBC catalog in a scratch MariaDB database of the
stack, a ``file://`` warehouse under ``LAGSCHED_BENCH_SINK_ROOT``): one
`lagsched.adapters.sink.IcebergSink` per slot (its own snapshot summary ``lagsched.slot``), the
slots taking turns. Each commit is a slot's batch as `lagsched.workflows.batch` runs it:
``since = sink.mark()``, ``sink.file_settings()``, one small data file written by the production
writer (`lagsched.adapters.data_files.PartitionFiles`, a few records of one of the slot's
partitions, timestamps advancing 30 s / slots per commit so the files spread over the past hours'
partitions), then ``sink.commit(files, ranges, since)`` with the ranges of ``--partitions-per-commit``
partitions (each slot owns its own lanes over 20 topics; offsets advance per slot commit). Slots
commit concurrently in production, so a mark is taken ``--in-flight`` commits (of other slots)
before its commit lands: every refresh of a slot's table then finds a newer metadata file and
parses it, and the commit's conflict check has those snapshots to look at, as in production.

``commit_s`` is `lagsched.adapters.sink.TableCommit.seconds` (what a slot reports as
``table_commit_s``: footers, refresh, Iceberg's commit and the lookup of its snapshot);
``mark_s`` the mark's refresh. The metadata file is the catalog row's ``metadata_location``,
measured after every commit; ``commit_s_per_metadata_mb`` is the least-squares slope of
``commit_s`` against that size. ``--max-build-s`` stops the build early: the figures are then
those of the snapshots reached, with a linear extrapolation to the full history, marked as such.
With ``--gzip-commits N`` (default 200) the built table then takes
``write.metadata.compression-codec=gzip`` and N more commits, measured the same way. The table,
its warehouse folder and the scratch database are removed at the end unless ``--keep``.

Writes ``bench/results/commit_scale.json``: ``history`` (the figures above), ``windows`` (every
500 commits), ``gzip``, ``spec`` and ``machine``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lagsched_dev.bench.consumer import SINK_ROOT
from lagsched_dev.bench.sink import percentile

DEFAULT_OUT = "bench/results/commit_scale.json"
COMMIT_INTERVAL_S = 30
HOURS = 6
TARGET_COMMIT_S_P99 = 1.0
TOPICS = 20
RECORDS_PER_FILE = 5
WINDOW = 500
#: Offsets of a long-lived partition have ten digits or so: the summaries' size depends on it.
BASE_OFFSET = 4_000_000_000
#: The driver's heap: one JVM holds every slot's copy of the table's metadata here (a production
#: slot holds one, in a JVM of its own).
DRIVER_MEMORY = "4g"

Lane = tuple[str, int]


def history_snapshots(slots: int, hours: float = HOURS, interval_s: float = COMMIT_INTERVAL_S) -> int:
    """Snapshots a table holds when ``slots`` slots commit every ``interval_s`` and ``hours`` are kept.

    >>> history_snapshots(20)
    14400
    """
    return int(hours * 3600 / interval_s * slots)


def topic_name(index: int, prefix: str = "bench-commits.t") -> str:
    """The name of the bench's topic ``index``.

    >>> topic_name(3)
    'bench-commits.t03'
    """
    return f"{prefix}{index:02d}"


def lanes_of(slot: int, per_commit: int, topics: int = TOPICS) -> list[Lane]:
    """The ``per_commit`` partitions slot ``slot`` owns, spread over ``topics`` topics; no two slots share one.

    >>> lanes_of(0, 3, topics=2)
    [('bench-commits.t00', 0), ('bench-commits.t01', 0), ('bench-commits.t00', 1)]
    >>> lanes_of(1, 3, topics=2)
    [('bench-commits.t01', 1), ('bench-commits.t00', 2), ('bench-commits.t01', 2)]
    """
    return [(topic_name(g % topics), g // topics) for g in range(slot * per_commit, (slot + 1) * per_commit)]


def lane_step(lane: Lane) -> int:
    """Offsets one lane advances per commit: uneven over lanes (a few hot partitions, many quiet ones).

    >>> lane_step(("bench-commits.t00", 0)), lane_step(("bench-commits.t07", 3))
    (20, 6020)
    """
    topic = int(lane[0][-2:])
    return 20 + 1500 * ((topic * 7 + lane[1]) % 6)


def commit_ranges(lanes: Sequence[Lane], round_: int) -> dict[Lane, tuple[int, int]]:
    """The ranges of a slot's ``round_``-th commit: each lane's ``[start, end)``, continuing the previous round's.

    >>> commit_ranges([("bench-commits.t00", 0)], 2)
    {('bench-commits.t00', 0): (4000000040, 4000000060)}
    """
    return {
        lane: (BASE_OFFSET + round_ * lane_step(lane), BASE_OFFSET + (round_ + 1) * lane_step(lane)) for lane in lanes
    }


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``ys`` against ``xs`` (0.0 when ``xs`` do not vary).

    >>> slope([0, 1, 2, 3], [1.0, 3.0, 5.0, 7.0]), slope([1, 1], [2.0, 5.0])
    (2.0, 0.0)
    """
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def stats(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max, rounded.

    >>> stats([0.1, 0.2, 0.3])
    {'p50': 0.2, 'p99': 0.3, 'max': 0.3}
    """
    return {
        "p50": round(percentile(values, 0.5), 4),
        "p99": round(percentile(values, 0.99), 4),
        "max": round(max(values, default=0.0), 4),
    }


@dataclass(slots=True)
class Commit:
    """One commit's figures: its number, slot, the mark's and the commit's seconds, the metadata file after it."""

    n: int
    slot: int
    mark_s: float
    commit_s: float
    metadata_bytes: int


@dataclass(slots=True)
class Run:
    """What the build measured so far."""

    commits: list[Commit] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- the table's side


class Catalog:
    """The catalog row of the bench's table, read directly: where its current metadata file is, and its size."""

    def __init__(self, params: Any, lake: Any) -> None:
        from lagsched.adapters.mysql import connect

        self._conn = connect(params)
        self._key = (lake.catalog, lake.namespace, lake.table)

    def metadata_location(self) -> str:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT metadata_location FROM iceberg_tables"
                " WHERE catalog_name = %s AND table_namespace = %s AND table_name = %s",
                self._key,
            )
            row = cur.fetchone()
        self._conn.commit()  # READ COMMITTED anyway; no snapshot held between reads
        if row is None or row[0] is None:
            raise RuntimeError(f"no catalog row for {'.'.join(self._key)}")
        return str(row[0])

    def metadata_bytes(self) -> int:
        return os.path.getsize(urlsplit(self.metadata_location()).path)

    def close(self) -> None:
        self._conn.close()


def record_batch(schema: Any, lane: Lane, *, first: int, count: int, ts_us: int) -> Any:
    """``count`` records of one partition from offset ``first``, in the table's Arrow schema, as the tasks build
    them (`lagsched.adapters.range_files`)."""
    import numpy as np
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, dtype=np.int32)), pa.array([lane[0]])),
            pa.array(np.full(count, lane[1], dtype=np.int32)),
            pa.array(np.arange(first, first + count, dtype=np.int64)),
            pa.array(np.full(count, ts_us, dtype=np.int64) + np.arange(count)).view(pa.timestamp("us", tz="UTC")),
            pa.array([b"k%012d" % (first + i) for i in range(count)], type=pa.binary()),
            pa.array([os.urandom(100) for _ in range(count)], type=pa.binary()),
            pa.nulls(count, type=schema.field("headers").type),
        ],
        schema=schema,
    )


def write_file(settings: Any, lane: Lane, first: int, ts_us: int) -> list[Any]:
    """One data file of ``RECORDS_PER_FILE`` records of ``lane``, by the production writer; its `WrittenFile`."""
    import numpy as np

    from lagsched.adapters.data_files import HOUR_US, DataFolder, PartitionFiles

    folder = DataFolder(settings.data_location, settings.s3_endpoint)
    files = PartitionFiles(folder, lane[0], lane[1], settings)
    batch = record_batch(settings.schema, lane, first=first, count=RECORDS_PER_FILE, ts_us=ts_us)
    ts = batch.column(3).cast("int64").to_numpy()
    files.add(batch, np.floor_divide(ts, HOUR_US))
    files.close()
    return list(files.written)


class Slots:
    """The slots taking turns on one table: one `IcebergSink` each, marks taken ``in_flight`` commits early."""

    def __init__(self, spark: Any, lake: Any, *, slots: int, per_commit: int, in_flight: int, run_id: str) -> None:
        from lagsched.adapters.sink import IcebergSink

        if not 0 <= in_flight < slots:
            raise ValueError(f"--in-flight {in_flight}: must be >= 0 and below the slots ({slots})")
        cluster = f"bench_commits_{run_id}"
        self.names = [f"bench-commits-{run_id}-slot-{i:02d}" for i in range(slots)]
        self.sinks = [
            IcebergSink(spark, lake, properties={"lagsched.slot": name, "lagsched.cluster": cluster})
            for name in self.names
        ]
        self.lanes = [lanes_of(i, per_commit) for i in range(slots)]
        self.in_flight = in_flight
        self.next = 0  # the next commit's number
        self._started_us = int((time.time() - HOURS * 3600) * 1e6)
        self._pending: deque[tuple[int, int, int | None, float, list[Any], dict[Lane, tuple[int, int]]]] = deque()

    def step(self, commits: int, done: Callable[[Commit], None], measure: Callable[[], int]) -> None:
        """Prepare ``commits`` more commits (mark, settings, file) and land each ``in_flight`` steps later."""
        for _ in range(commits):
            n = self.next
            self.next += 1
            slot = n % len(self.sinks)
            sink = self.sinks[slot]
            round_ = n // len(self.sinks)
            t0 = time.monotonic()
            since = sink.mark()
            mark_s = time.monotonic() - t0
            ranges = commit_ranges(self.lanes[slot], round_)
            lane = self.lanes[slot][round_ % len(self.lanes[slot])]
            ts_us = self._started_us + int(n * COMMIT_INTERVAL_S / len(self.sinks) * 1e6)
            written = write_file(sink.file_settings(), lane, ranges[lane][0], ts_us)
            self._pending.append((n, slot, since, mark_s, written, ranges))
            if len(self._pending) > self.in_flight:
                self._land(done, measure)

    def drain(self, done: Callable[[Commit], None], measure: Callable[[], int]) -> None:
        while self._pending:
            self._land(done, measure)

    def _land(self, done: Callable[[Commit], None], measure: Callable[[], int]) -> None:
        n, slot, since, mark_s, written, ranges = self._pending.popleft()
        result = self.sinks[slot].commit(written, ranges, since)
        done(Commit(n, slot, mark_s, result.seconds, measure()))


def gc_seconds(spark: Any) -> float:
    """The driver JVM's garbage collection time so far."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    return sum(int(beans.get(i).getCollectionTime()) for i in range(beans.size())) / 1000.0


def window_of(commits: Sequence[Commit], gc_s: float, elapsed_s: float) -> dict[str, Any]:
    """One progress window's figures."""
    last = commits[-1]
    return {
        "snapshots": last.n + 1,
        "metadata_bytes": last.metadata_bytes,
        "commit_s": stats([c.commit_s for c in commits]),
        "mark_s": stats([c.mark_s for c in commits]),
        "driver_gc_s": round(gc_s, 2),
        "elapsed_s": round(elapsed_s, 1),
    }


def _progress(message: str) -> None:
    print(f"   [{time.strftime('%H:%M:%S')}] {message}", flush=True)


def build(
    slots: Slots, catalog: Catalog, spark: Any, run: Run, *, total: int, max_build_s: float | None
) -> tuple[float, bool, str | None]:
    """Commit until the table holds ``total`` snapshots (or ``max_build_s`` ran out); (seconds, finished, why not).

    A failed commit or catalog read (the shared stack's MariaDB restarted, say) ends the build with the
    figures reached, as `--max-build-s` does; it fails only before the first commit.
    """
    started = time.monotonic()
    gc_start = gc_seconds(spark)
    window_gc = gc_start

    def done(commit: Commit) -> None:
        nonlocal window_gc
        run.commits.append(commit)
        if len(run.commits) % WINDOW == 0:
            gc_now = gc_seconds(spark)
            w = window_of(run.commits[-WINDOW:], gc_now - window_gc, time.monotonic() - started)
            window_gc = gc_now
            run.windows.append(w)
            _progress(
                f"{w['snapshots']:,} snapshots, metadata {w['metadata_bytes'] / 1e6:.1f} MB: commit_s p50 "
                f"{w['commit_s']['p50']:.3f} p99 {w['commit_s']['p99']:.3f} max {w['commit_s']['max']:.3f}, "
                f"mark_s p50 {w['mark_s']['p50']:.3f}, GC {w['driver_gc_s']:.1f} s, {w['elapsed_s']:.0f} s in"
            )

    try:
        while slots.next < total:
            if max_build_s is not None and time.monotonic() - started > max_build_s:
                slots.drain(done, catalog.metadata_bytes)
                _progress(f"--max-build-s {max_build_s:.0f} reached at {len(run.commits):,} snapshots")
                return time.monotonic() - started, False, f"--max-build-s {max_build_s:.0f}"
            slots.step(min(50, total - slots.next), done, catalog.metadata_bytes)
        slots.drain(done, catalog.metadata_bytes)
    except Exception as exc:
        if len(run.commits) < 2:
            raise
        _progress(f"the build stopped at {len(run.commits):,} snapshots: {exc!r:.300}")
        return time.monotonic() - started, False, f"{type(exc).__name__}: {str(exc)[:300]}"
    return time.monotonic() - started, True, None


# --------------------------------------------------------------------------- the figures


def history_figures(
    run: Run,
    *,
    slots: int,
    per_commit: int,
    in_flight: int,
    build_s: float,
    finished: bool,
    target: int,
    stopped_by: str | None = None,
) -> dict[str, Any]:
    """The ``history`` section: the last and first ``WINDOW`` commits, growth per MB, target met."""
    commits = run.commits
    window = min(WINDOW, max(1, len(commits) // 2))
    last, first = commits[-window:], commits[:window]
    last_s, first_s = stats([c.commit_s for c in last]), stats([c.commit_s for c in first])
    per_mb = slope([c.metadata_bytes / 1e6 for c in commits], [c.commit_s for c in commits])
    out: dict[str, Any] = {
        "snapshots": len(commits),
        "slots": slots,
        "partitions_per_commit": per_commit,
        "commit_interval_s": COMMIT_INTERVAL_S,
        "hours": HOURS,
        "metadata_bytes": commits[-1].metadata_bytes,
        "metadata_bytes_per_snapshot": round(commits[-1].metadata_bytes / len(commits), 1),
        "commit_s_p50": last_s["p50"],
        "commit_s_p99": last_s["p99"],
        "commit_s_max": last_s["max"],
        "first_commits_p50": first_s["p50"],
        "first_commits_p99": first_s["p99"],
        "first_commits_max": first_s["max"],
        "last_vs_first_p99": round(last_s["p99"] / first_s["p99"], 2) if first_s["p99"] else None,
        "window_commits": window,
        "mark_s_last": stats([c.mark_s for c in last]),
        "commit_s_per_metadata_mb": round(per_mb, 4),
        "build_s": round(build_s, 1),
        "commits_in_flight": in_flight,
        "history_method": (
            f"{len(commits):,} commits, each through IcebergSink.commit (one sink per slot, {slots} slots in turn, "
            f"mark -> file_settings -> one {RECORDS_PER_FILE}-record data file by data_files.PartitionFiles -> "
            f"commit of {per_commit} partitions' ranges; each mark taken {in_flight} other slots' commits before "
            "its commit), into a fresh table made by ensure_table (production properties), file:// warehouse"
        ),
        "target_commit_s_p99": TARGET_COMMIT_S_P99,
        "met": last_s["p99"] <= TARGET_COMMIT_S_P99,
    }
    if stopped_by is not None:
        out["stopped_by"] = stopped_by
    if not finished or len(commits) < target:
        bytes_per_snapshot = slope([c.n + 1 for c in commits], [c.metadata_bytes for c in commits])
        projected_bytes = commits[-1].metadata_bytes + bytes_per_snapshot * (target - len(commits))
        growth = (projected_bytes - commits[-1].metadata_bytes) / 1e6 * per_mb
        out["extrapolated_to_target"] = {
            "EXTRAPOLATED": True,
            "snapshots": target,
            "metadata_bytes": int(projected_bytes),
            "commit_s_p99": round(last_s["p99"] + growth, 3),
            "how": "metadata bytes linear in snapshots (least squares over the build); commit_s p99 of the last "
            "window plus commit_s_per_metadata_mb times the metadata still to grow",
        }
    return out


def gzip_variant(spark: Any, lake: Any, slots: Slots, catalog: Catalog, run: Run, *, commits: int) -> dict[str, Any]:
    """``write.metadata.compression-codec=gzip`` on the built table, then ``commits`` more commits."""
    before = run.commits[-commits:]
    plain_bytes = catalog.metadata_bytes()
    spark.sql(f"ALTER TABLE {lake.identifier} SET TBLPROPERTIES ('write.metadata.compression-codec'='gzip')")
    measured: list[Commit] = []
    slots.step(commits, measured.append, catalog.metadata_bytes)
    slots.drain(measured.append, catalog.metadata_bytes)
    after = stats([c.commit_s for c in measured])
    plain = stats([c.commit_s for c in before])
    location = catalog.metadata_location()
    _progress(f"gzip: metadata {measured[-1].metadata_bytes / 1e6:.2f} MB, commit_s p99 {after['p99']:.3f}")
    return {
        "property": "write.metadata.compression-codec=gzip",
        "commits": len(measured),
        "snapshots": measured[-1].n + 1,
        "metadata_file": location.rsplit("/", 1)[-1],
        "metadata_bytes": measured[-1].metadata_bytes,
        "plain_metadata_bytes": plain_bytes,
        "commit_s_p50": after["p50"],
        "commit_s_p99": after["p99"],
        "commit_s_max": after["max"],
        "mark_s": stats([c.mark_s for c in measured]),
        "plain_last_commits_p50": plain["p50"],
        "plain_last_commits_p99": plain["p99"],
        "plain_window_commits": len(before),
        "met": after["p99"] <= TARGET_COMMIT_S_P99,
    }


# --------------------------------------------------------------------------- the run


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Scratch database, session, table; the build; the gzip variant; clean-up."""
    from lagsched.adapters import spark as spark_adapter
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.sink import catalog_conf, ensure_catalog_tables, jdbc_url
    from lagsched.connections import mysql_params
    from lagsched.core.lake import LakeTable
    from lagsched_dev.bench.claims import create_database

    run_id = uuid.uuid4().hex[:6]
    root = SINK_ROOT / f"lagsched-bench-commits-{run_id}"
    root.mkdir(parents=True)
    database = create_database(mysql_params(), prefix="lagsched_bench_commits", migrated=False)
    lake = LakeTable(warehouse=root.as_uri(), table=f"bench_commits_{run_id}")
    conn = connect(database)
    try:
        ensure_catalog_tables(conn)
    finally:
        conn.close()
    conf = catalog_conf(
        lake,
        jdbc_url=jdbc_url(database.host, database.port, database.database, tls=database.tls),
        user=database.user,
        password=database.password,
    )
    spark = spark_adapter.session(
        f"lagsched-bench-commit-scale-{run_id}", conf={**conf, "spark.driver.memory": args.driver_memory}
    )
    spark.sparkContext.setLogLevel("WARN")  # as the jobs' log4j2.properties
    catalog: Catalog | None = None
    run = Run()
    try:
        slots = Slots(
            spark,
            lake,
            slots=args.slots,
            per_commit=args.partitions_per_commit,
            in_flight=args.in_flight,
            run_id=run_id,
        )
        catalog = Catalog(database, lake)
        _progress(f"table {lake.identifier} in {root}, database {database.database}; building {args.snapshots:,}")
        build_s, finished, stopped_by = build(
            slots, catalog, spark, run, total=args.snapshots, max_build_s=args.max_build_s
        )
        history = history_figures(
            run, slots=args.slots, per_commit=args.partitions_per_commit, in_flight=args.in_flight,
            build_s=build_s, finished=finished, target=args.snapshots, stopped_by=stopped_by,
        )  # fmt: skip
        _progress(
            f"history: {history['snapshots']:,} snapshots, metadata {history['metadata_bytes'] / 1e6:.1f} MB, "
            f"commit_s p99 {history['commit_s_p99']:.3f} (first {history['first_commits_p99']:.3f}), "
            f"built in {build_s:.0f} s"
        )
        gzip: dict[str, Any] = {"skipped": "--gzip-commits 0"}
        if stopped_by is not None and not stopped_by.startswith("--max-build-s"):
            gzip = {"skipped": f"the build failed: {stopped_by}"}
        elif args.gzip_commits > 0:
            try:
                gzip = gzip_variant(spark, lake, slots, catalog, run, commits=args.gzip_commits)
            except Exception as exc:  # noqa: BLE001 - the history's figures stand without it
                gzip = {"error": repr(exc)[:500]}
        return {"history": history, "windows": run.windows, "gzip": gzip, "table": lake.identifier}
    finally:
        if catalog is not None:
            catalog.close()
        if args.keep:
            print(f"   kept {lake.identifier} in {root} (database {database.database})", flush=True)
        else:
            _clean_up(spark, lake, root, database)


def _clean_up(spark: Any, lake: Any, root: Path, database: Any) -> None:
    """Drop the table, delete its folder and the scratch database; each step tried, a failure only said."""
    from lagsched_dev.bench.claims import drop_database

    steps: list[tuple[str, Callable[[], Any]]] = [
        ("drop the table", lambda: spark.sql(f"DROP TABLE IF EXISTS {lake.identifier}")),
        ("stop Spark", spark.stop),
        ("delete the warehouse folder", lambda: shutil.rmtree(root)),
        ("drop the database", lambda: drop_database(database)),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - clean-up is best effort; the figures stand
            print(f"   could not {what} ({exc!r:.200}); remove {root} / {database.database} by hand", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.commit_scale", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--slots", type=int, default=20)
    parser.add_argument("--snapshots", type=int, default=None, help="default: 6 h of --slots slots every 30 s")
    parser.add_argument("--partitions-per-commit", type=int, default=20)
    parser.add_argument("--in-flight", type=int, default=2, help="other slots' commits between a mark and its commit")
    parser.add_argument("--gzip-commits", type=int, default=200)
    parser.add_argument("--max-build-s", type=float, default=None, help="stop building after this long")
    parser.add_argument("--driver-memory", default=DRIVER_MEMORY)
    parser.add_argument("--keep", action="store_true", help="keep the table, its folder and the database")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.snapshots is None:
        args.snapshots = history_snapshots(args.slots)
    from lagsched_dev.bench.consumer import _use_local_stack

    _use_local_stack()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    wall = time.monotonic()
    results = measure(args)
    doc = {
        "spec": {
            "question": "issue 40 (a): the production commit's cost on a table of 6 h of snapshots "
            f"({args.slots} slots committing every {COMMIT_INTERVAL_S} s)",
            "commit": "lagsched.adapters.sink.IcebergSink.commit; commit_s = TableCommit.seconds (table_commit_s)",
            "topics": TOPICS,
            "records_per_file": RECORDS_PER_FILE,
            "window_commits": WINDOW,
            "driver_memory": args.driver_memory,
            "master": "local[2]",
        },
        "started_at": started_at,
        "wall_s": round(time.monotonic() - wall, 1),
        "machine": _machine(load_start),
        **results,
    }
    text = json.dumps(doc, indent=2, default=str)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    return 0


def _machine(load_start: Sequence[float]) -> Mapping[str, Any]:
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
