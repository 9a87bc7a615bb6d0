"""``make demo``: lagsched closing the loop in Airflow, under uneven traffic, with a summary at the end.

1. starts the local stack with Airflow (``lagsched-dev stack up --airflow``; the Connections are its
   ``AIRFLOW_CONN_*`` environment), waits for the lagsched DAGs to be parsed;
2. merges the demo's entries into the Variables ``lagsched_settings`` (per-topic settings of the
   ``demo.*`` topics, tuned to scale within minutes) and ``lagsched_clusters`` (the cluster
   ``lagsched_kafka`` manages ``demo.*`` only), leaving every other entry alone; creates the topics;
3. runs ``lagsched_setup`` and ``lagsched_topic_sync``, unpauses the DAGs (monitor, evaluator,
   consume, maintenance, override), prints the UI address, login and the lagsched page;
4. starts the load generator (`lagsched_dev.loadgen`: ``demo.orders`` ramps to ``--peak-rate``, three
   topics trickle, ``demo.archive`` stays idle) and prints a status line every 15 s until Ctrl-C
   or ``--duration`` seconds of traffic;
5. seeds ``demo.history`` with records timestamped over the three past hours (a producer's
   backfill, in the shared table), installs the docs' downstream example (``_demo_hour_reader``) and
   unpauses ``lagsched_hours`` and ``lagsched_restatements``: at the end it prints, per seeded hour,
   the hour's asset event and the rows the example read (docs/completeness.md), then pauses them;
6. stops the load generator, pauses ``lagsched_consume`` and stops its running slots gracefully
   (each finishes its batch, commits and releases; slots live an hour, so waiting for their budget
   is opt-in: ``--budget-wait``), then prints the summary: peak and final lag
   per topic, linker_workers over time, records produced, consumed (committed offsets) and in the
   sink (Parquet rows), and whether the sink holds every consumed record exactly once.

``demo.orders`` and ``demo.clicks`` are routed to typed tables (``DEMO_ROUTES``): the load generator
writes them as Avro and JSON Schema through the stack's schema registry (``--typed``), orders
evolving (an added optional field) when its ramp ends, with a handful of poison records. The
summary reads the typed tables (their columns, the evolution, the rows by writer schema) and the
dead-letter table (its records by reason), and checks exactly once over every table.

Everything it adds is on the shared stack under the ``demo.`` prefix and the cluster
``lagsched_kafka``; ``lagsched-dev demo --down`` (``make demo-down``) stops the load generator and the
stack.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from lagsched.core.cadence import DEFAULT_COMMIT_INTERVAL_S
from lagsched.core.load_profile import DEMO_PEAK_RATE, DEMO_SLOT_MAX_RATE, TopicLoad, demo_profile
from lagsched_dev.airflow_api import PASSWORDS_FILE, AirflowAPI, AirflowAPIError
from lagsched_dev.progress import Progress, format_duration
from lagsched_dev.stack.config import StackConfig, load, with_celery
from lagsched_dev.stack.process import ServiceError

__all__ = [
    "DEMO_CLUSTER",
    "DEMO_PREFIX",
    "DEMO_TOPIC_SETTINGS",
    "add_arguments",
    "main",
    "merge_clusters",
    "merge_settings",
    "run",
]

DEMO_CLUSTER = "lagsched_kafka"
DEMO_PREFIX = "demo."
CONSUME_DAG = "lagsched_consume"
REQUIRED_DAGS = (
    "lagsched_setup",
    "lagsched_topic_sync",
    "lagsched_lag_monitor",
    "lagsched_scaling_evaluator",
    CONSUME_DAG,
)
OPTIONAL_DAGS = ("lagsched_maintenance", "lagsched_override", "lagsched_table_care")
#: The completeness DAGs (docs/completeness.md): unpaused for the demo, paused again at its end
#: (the e2e tests need them to themselves).
HOURS_DAGS = ("lagsched_hours", "lagsched_restatements")
#: A topic of the shared table seeded with records timestamped over the past hours (a producer's
#: backfill): lagsched_hours announces those hours of the shared table during the demo, and the
#: docs' downstream example (installed as `HOUR_READER`) reads each one.
HISTORY_TOPIC = "demo.history"
HISTORY_HOURS = 3
HISTORY_PER_HOUR = 120
HOUR_READER = "_demo_hour_reader"
READER_EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "lagsched_hour_reader.py"
TABLE_CARE_DAG = "lagsched_table_care"
#: The demo topics' settings: lagsched's own evaluator (the hevo policy, the default) with
#: thresholds sized for the demo's traffic. Above max_lag and rising steadily (the regression's
#: slope > 0 with r² >= 0.5), a topic gets one more worker (one, as its retention is a week: a
#: week-long retention can afford to drain slowly); below min_lag it steps down, never below the
#: workers its ingress needs at per_worker_rate (the slot cap). It decides from three one-minute
#: measurements since the last change, scales up a minute after a change and down two minutes
#: after, so a ten-minute run shows a full cycle: up on the ramp, back down after it (fresh-clone
#: runs on 2 cores: 1 -> 2 at +2:29 and back to 1 at +8:29; `python -m lagsched_dev.sim --trace
#: demo` plays the same profile through the same evaluator and steps 1 -> 2 -> 3 -> 1). Merged into
#: lagsched_settings under "topics".
DEMO_TOPIC_SETTINGS: dict[str, Any] = {
    "policy": "hevo",
    "min_lag": 1_000,
    "max_lag": 10_000,
    "per_worker_rate": DEMO_SLOT_MAX_RATE,
    "drain_target_s": 120,
    "min_samples": 3,
    "window": 5,
    "evaluate_every": 1,
    "scale_up_cooldown_s": 60,
    "cooldown_s": 120,
    "max_workers": 3,
}
#: The demo's typed tables (docs/routing.md): orders as Avro, clicks as JSON Schema, both through the
#: stack's schema registry (the load generator's --typed values, `lagsched_dev.typed_values`); the
#: other demo topics land in the cluster's shared table.
DEMO_ROUTES: list[dict[str, Any]] = [
    {"topics": ["demo.orders"], "value_format": "avro", "key_format": "string", "namespace": "demo", "table": "orders"},
    {"topics": ["demo.clicks"], "value_format": "json_schema", "key_format": "string", "namespace": "demo",
     "table": "clicks"},
]  # fmt: skip
#: The consume DAG's slots for the demo cluster (the stack's pool lagsched_consume has 3).
DEMO_MAX_SLOTS = 3
STATUS_EVERY_S = 15.0


# -- Variables -------------------------------------------------------------------------------------


def merge_settings(current: str | None, topics: Iterable[str]) -> str:
    """``lagsched_settings`` with the demo topics' entries set and everything else kept, validated.

    >>> json.loads(merge_settings('{"defaults": {"max_workers": 8}}', ["demo.a"]))["defaults"]
    {'max_workers': 8}
    """
    from lagsched.core.config import parse_settings

    settings: dict[str, Any] = json.loads(current) if current and current.strip() else {}
    entries = settings.setdefault("topics", {})
    for topic in topics:
        entries[topic] = {**entries.get(topic, {}), **DEMO_TOPIC_SETTINGS}
    parse_settings(settings)  # a demo entry that clashes with the user's globals fails here, not in a DAG
    return json.dumps(settings, indent=2)


#: The demo's commit cadence: 5 s keeps one interval's records (6,000 at the 1,200 records/s peak)
#: below its scale-up threshold (10,000 records of lag), and shows commits within its ten minutes.
DEMO_COMMIT_INTERVAL_S = 5.0


def merge_clusters(current: str | None) -> str:
    """``lagsched_clusters`` with the demo cluster managing ``demo.*`` only; other clusters kept.

    Without the pattern the demo cluster would manage every topic of the broker (a benchmark's
    millions of records included) and the demo's slots would consume them all.

    >>> json.loads(merge_clusters('{"eu": {"max_slots": 2}}'))["eu"]
    {'max_slots': 2}
    """
    from lagsched.core.clusters import parse_clusters

    clusters: dict[str, Any] = json.loads(current) if current and current.strip() else {}
    entry = clusters.setdefault(DEMO_CLUSTER, {})
    entry.update({
        "topic_pattern": r"demo\..*", "max_slots": DEMO_MAX_SLOTS, "slot_max_rate": int(DEMO_SLOT_MAX_RATE),
        "commit_interval_s": DEMO_COMMIT_INTERVAL_S, "routes": DEMO_ROUTES,
    })  # fmt: skip
    parse_clusters(clusters)
    return json.dumps(clusters, indent=2)


def _demo_variables_in_place(api: AirflowAPI, topics: Sequence[str]) -> bool:
    """True if both Variables still hold the demo's entries (a test may have restored its own copy)."""
    settings = json.loads(api.get_variable("lagsched_settings") or "{}")
    clusters = json.loads(api.get_variable("lagsched_clusters") or "{}")
    ours = settings.get("topics", {})
    demo_cluster = clusters.get(DEMO_CLUSTER, {})
    return all(ours.get(t, {}).get("policy") == DEMO_TOPIC_SETTINGS["policy"] for t in topics) and (
        demo_cluster.get("topic_pattern") == r"demo\..*"
        and demo_cluster.get("slot_max_rate") == int(DEMO_SLOT_MAX_RATE)
    )


def apply_variables(api: AirflowAPI, topics: Sequence[str]) -> None:
    api.set_variable(
        "lagsched_settings",
        merge_settings(api.get_variable("lagsched_settings"), topics),
        "lagsched scaling settings (docs/configuration.md); the demo.* entries are make demo's",
    )
    api.set_variable(
        "lagsched_clusters",
        merge_clusters(api.get_variable("lagsched_clusters")),
        "Kafka clusters lagsched watches (lagsched.core.clusters); lagsched_kafka = make demo's demo.* topics",
    )


def reset_workers(conn: Any, topics: Sequence[str], now: float) -> list[tuple[str, int]]:
    """Set the demo topics' ``linker_workers`` back to 1, each with a ``demo_reset`` decision, so a
    second demo on the same stack shows the scale-up again; returns (topic, workers before) of each
    topic that was above 1."""
    from lagsched.adapters.topics import load_topics
    from lagsched.adapters.worker_changes import apply_change
    from lagsched.core.evaluator import Decision

    reset = []
    for row in load_topics(conn, DEMO_CLUSTER):
        if row.name not in topics or row.linker_workers <= 1:
            continue
        decision = Decision(
            row.name, row.linker_workers, 1, 0, 0.0, 0.0, 0.0, "manual", "demo_reset",
            f"make demo starts every run from 1 worker (was {row.linker_workers})", now,
        )  # fmt: skip
        status, _ = apply_change(
            conn, cluster=DEMO_CLUSTER, evaluation_id=f"demo-reset-{now:.0f}", topic_id=row.topic_id, d=decision
        )
        if status == "applied":
            reset.append((row.name, row.linker_workers))
    return reset


# -- what the stack holds --------------------------------------------------------------------------


@dataclass
class Snapshot:
    """One status reading of the demo topics."""

    at: float
    lag: dict[str, int | None]
    workers: dict[str, int]
    measured_at: dict[str, float | None]
    live_slots: int
    states: dict[str, str] = field(default_factory=dict)
    #: Each running slot (``slot-<n>``) and the host (worker) running it, from its lock.
    slot_hosts: dict[str, str] = field(default_factory=dict)


class Stack:
    """The demo's read-only view of MySQL, Redis and Kafka (connections opened once, reopened on error)."""

    def __init__(self, topics: Sequence[str]) -> None:
        self.topics = list(topics)
        self._mysql: Any = None
        self._redis: Any = None

    def _clients(self) -> tuple[Any, Any]:
        from lagsched.adapters.mysql import connect
        from lagsched.adapters.redis_store import redis_client
        from lagsched.connections import mysql_params, redis_params

        if self._mysql is None:
            self._mysql = connect(mysql_params())
        if self._redis is None:
            self._redis = redis_client(redis_params())
        return self._mysql, self._redis

    def close(self) -> None:
        for client in (self._mysql, self._redis):
            if client is not None:
                # Closing a broken connection: nothing to do about an error.
                with contextlib.suppress(Exception):
                    client.close()
        self._mysql = self._redis = None

    def snapshot(self) -> Snapshot:
        from lagsched.workflows.status import cluster_status

        mysql, redis = self._clients()
        try:
            status = cluster_status(mysql, redis, DEMO_CLUSTER, datetime.now(tz=UTC))
        except Exception:
            self.close()  # the next reading reconnects
            raise
        views = {t.name: t for t in status.topics if t.name in self.topics}
        return Snapshot(
            at=status.at.timestamp(),
            lag={t: views[t].lag if t in views else None for t in self.topics},
            workers={t: views[t].linker_workers if t in views else 0 for t in self.topics},
            measured_at={t: views[t].measured_at if t in views else None for t in self.topics},
            live_slots=sum(1 for s in status.slots if s.live),
            states={t: views[t].state for t in views},
            slot_hosts={s.name.removeprefix(f"{DEMO_CLUSTER}-"): s.host for s in status.slots if s.name and s.host},
        )

    def committed(self) -> dict[tuple[str, int], int | None]:
        """Each demo partition's committed offset (None: never committed)."""
        from lagsched.adapters.status_queries import partition_lines

        mysql, _ = self._clients()
        return {
            (p.topic, p.row.partition_id): p.row.committed_offset
            for p in partition_lines(mysql, DEMO_CLUSTER)
            if p.topic in self.topics
        }

    def decisions(self, since: float) -> list[Any]:
        """The demo topics' scaling decisions since ``since``, oldest first."""
        from lagsched.adapters.decisions import recent_decisions

        mysql, _ = self._clients()
        rows = recent_decisions(mysql, DEMO_CLUSTER, since=since, limit=1000)
        return sorted((d for d in rows if d.topic in self.topics), key=lambda d: d.decided_at)

    def peak_lag_history(self, since: float) -> dict[str, int]:
        """The highest lag the monitor stored for each demo topic since ``since`` (Redis history)."""
        from lagsched.adapters.lag_store import LagStore

        _, redis = self._clients()
        records = LagStore(redis, DEMO_CLUSTER).read_lag_records(self.topics)
        return {t: max((r.lag for r in recs if r.at >= since), default=0) for t, recs in records.items()}


def watermarks(kafka_config: Mapping[str, Any], topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermark of every partition of ``topics``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_config, "group.id": "lagsched-demo-summary", "enable.auto.commit": False})
    try:
        out = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=15).topics[topic]
            for p in meta.partitions:
                out[(topic, p)] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
        return out
    finally:
        consumer.close()


def sink_rows(table: Any, ranges: Mapping[tuple[str, int], tuple[int, int]]) -> tuple[int, int]:
    """Rows and distinct (topic, partition, offset) of ``table`` (pyarrow: topic, partition, offset)
    within ``ranges`` (``[start, end)`` per (topic, partition)); rows of other ranges are not counted."""
    rows = 0
    seen: set[tuple[str, int, int]] = set()
    columns = (table.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    for topic, partition, offset in zip(*columns, strict=True):
        start, end = ranges.get((topic, partition), (0, 0))
        if start <= offset < end:
            rows += 1
            seen.add((topic, partition, offset))
    return rows, len(seen)


def demo_lake(cfg: StackConfig, clusters: str | None) -> Any:
    """The demo cluster's Iceberg table: its ``sink`` in ``lagsched_clusters``, else the stack's default
    (``.local/warehouse``, as the slots resolve it with the stack's ``LAGSCHED_HOME``)."""
    from lagsched.core.clusters import parse_clusters, select_clusters
    from lagsched.core.lake import LakeTable, default_warehouse

    (cluster,) = select_clusters(parse_clusters(clusters), DEMO_CLUSTER)
    warehouse = default_warehouse({**os.environ, "LAGSCHED_HOME": str(cfg.home)})
    return LakeTable.of(DEMO_CLUSTER, cluster.sink_settings(), default_warehouse=warehouse)


# -- the run ---------------------------------------------------------------------------------------


class Stopper:
    """SIGINT/SIGTERM: the first asks the demo to wind down, the second to hurry (stop the slots now)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.hurry = threading.Event()

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stop.is_set():
            self.hurry.set()
        self.stop.set()


def _short(topic: str) -> str:
    return topic.removeprefix(DEMO_PREFIX)


def status_line(elapsed_s: float, snap: Snapshot, sent: int | None) -> str:
    """``[ 2:15] orders lag 45,210 w3 | clicks lag 120 w1 | ... | 3 live slots | 123,456 sent``.

    >>> snap = Snapshot(0.0, {"demo.orders": 45210, "demo.archive": None}, {"demo.orders": 3, "demo.archive": 1},
    ...                 {}, 2, {"demo.orders": "ok", "demo.archive": "ok"})
    >>> status_line(135, snap, 1200)
    '[ 2:15] orders lag 45,210 w3 | archive lag - w1 | 2 live slots | 1,200 sent'
    """
    parts = []
    for topic, lag in snap.lag.items():
        text = f"{_short(topic)} lag {'-' if lag is None else f'{lag:,}'} w{snap.workers.get(topic, 0)}"
        state = snap.states.get(topic, "ok")
        parts.append(text if state == "ok" else f"{text} {state.upper()}")
    parts.append(f"{snap.live_slots} live slot{'s' if snap.live_slots != 1 else ''}")
    if sent is not None:
        parts.append(f"{sent:,} sent")
    minutes, seconds = divmod(int(elapsed_s), 60)
    return f"[{minutes:2d}:{seconds:02d}] " + " | ".join(parts)


def _profile(duration_s: float | None, peak_rate: float) -> tuple[TopicLoad, ...]:
    """The demo profile; with a duration, the hot phase ends by 45 % of it, leaving time to drain.

    The scale-down needs that much: the step down is held at the workers the ingress averaged over
    the sample window needs, and that average stays high for minutes after the burst ends (a
    600 s run whose burst ended at 55 % scaled down 22 s after its traffic stopped).
    """
    if duration_s is None or duration_s >= 600:
        return demo_profile(peak_rate=peak_rate)
    d = max(duration_s, 60.0)
    return demo_profile(peak_rate=peak_rate, ramp_at_s=0.05 * d, ramp_s=0.1 * d, hold_s=0.25 * d, fall_s=0.05 * d)


def _loadgen_argv(loads: Sequence[TopicLoad], peak_rate: float, stats: Path) -> list[str]:
    hot = loads[0].points
    # points: (0, trickle), (ramp_at, trickle), (ramp end, peak), (hold end, peak), (fall end, trickle)
    ramp_at, ramp_end, hold_end, fall_end = hot[1][0], hot[2][0], hot[3][0], hot[4][0]
    return [
        sys.executable,
        "-m",
        "lagsched_dev.loadgen",
        "--prefix",
        DEMO_PREFIX,
        "--peak-rate",
        str(peak_rate),
        "--ramp-at-s",
        str(ramp_at),
        "--ramp-s",
        str(ramp_end - ramp_at),
        "--hold-s",
        str(hold_end - ramp_end),
        "--fall-s",
        str(fall_end - hold_end),
        "--report-every-s",
        "15",
        "--stats-file",
        str(stats),
        "--typed",
    ]


def _read_table(lake: Any) -> tuple[Any, Any]:
    """The demo table's rows (topic, partition, offset) and its file/snapshot figures, read with pyiceberg
    through the catalog; (None, None), said on stderr, when it cannot be read."""
    from lagsched.adapters.lake_reader import read_rows, table_stats
    from lagsched.connections import mysql_params

    try:
        mysql = mysql_params()
        return read_rows(lake, mysql), table_stats(lake, mysql)
    except Exception as exc:  # noqa: BLE001 - the summary says what it could not count
        print(f"demo: could not read {lake.identifier}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None, None


@dataclass
class TypedReport:
    """The demo's typed tables and dead letters as the summary shows them."""

    #: (topic, partition, offset) of every row of the typed and dead-letter tables.
    coordinates: list[Any]
    lines: list[str]
    data: dict[str, Any]


def pa_concat(tables: Sequence[Any]) -> Any:
    """The (topic, partition, offset) columns of several tables, one table (for `sink_rows`)."""
    import pyarrow as pa

    plain = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
    return pa.concat_tables([t.select(plain.names).cast(plain) for t in tables])


def _read_typed(lake: Any) -> TypedReport | None:
    """The demo's typed tables (columns, evolution, rows per writer schema) and the dead letters by
    reason, read with pyiceberg; None, said on stderr, when they cannot be read."""
    from pyiceberg.exceptions import NoSuchTableError

    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.adapters.lake_sink import dead_letter_table
    from lagsched.connections import mysql_params

    try:
        catalog = open_catalog(lake, mysql_params())
        coordinates, lines, data = [], [], {}
        for route in DEMO_ROUTES:
            name = f"{route['namespace']}.{route['table']}"
            try:
                table = catalog.load_table(name)
            except NoSuchTableError:
                lines.append(f"typed table {lake.catalog}.{name}: not created (no record of {route['topics'][0]} yet)")
                continue
            rows = table.scan(selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
            coordinates.append(rows.rename_columns(["topic", "partition", "offset"]))
            schemas = [table.schemas()[i] for i in sorted(table.schemas())]
            added = [f.name for f in schemas[-1].fields if f.name not in {g.name for g in schemas[0].fields}]
            per_schema: dict[str, int] = {}
            for snapshot in table.snapshots():
                for schema_id, n in json.loads(snapshot.summary.get("lagsched.schema-ids") or "{}").items():
                    per_schema[schema_id] = per_schema.get(schema_id, 0) + int(n)
            value_columns = [f.name for f in schemas[-1].fields if not f.name.startswith("_kafka_")]
            writers = ", ".join(
                f"{'tombstones' if sid == '-1' else 'schema ' + sid} {n:,}" for sid, n in sorted(per_schema.items())
            )
            lines.append(
                f"typed table {lake.catalog}.{name}: {rows.num_rows:,} rows ({route['value_format']}); "
                f"columns {', '.join(value_columns)}"
            )
            lines.append(
                f"  {len(schemas)} table schema version(s)"
                + (f", evolved: added {', '.join(added)}" if added else "")
                + (f"; rows by writer schema: {writers}" if writers else "")
            )
            data[name] = {
                "rows": rows.num_rows,
                "schema_versions": len(schemas),
                "added": added,
                "by_writer": per_schema,
            }
        try:
            dead = catalog.load_table(dead_letter_table(lake).split(".", 1)[1]).scan().to_arrow()
        except NoSuchTableError:
            dead = None
        if dead is not None:
            coordinates.append(dead.select(["topic", "partition", "offset"]))
            reasons: dict[str, int] = {}
            for reason in dead.column("reason").to_pylist():
                kind = re.sub(r"\s*\([^)]*\)", "", reason)[:100]  # where the registry is: said once above
                reasons[kind] = reasons.get(kind, 0) + 1
            lines.append(f"dead-letter table {dead_letter_table(lake)}: {dead.num_rows:,} record(s)")
            lines += [f"  {n:>5,}  {kind}" for kind, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
            data["dead_letters"] = {"records": dead.num_rows, "reasons": reasons}
        return TypedReport(coordinates, lines, data)
    except Exception as exc:  # noqa: BLE001 - the summary says what it could not count
        print(f"demo: could not read the typed tables: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def _read_stats(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _sent(stats: Mapping[str, Any]) -> int | None:
    topics = stats.get("topics")
    return None if not topics else sum(int(c["sent"]) for c in topics.values())


def _stack_environment(cfg: StackConfig) -> dict[str, str]:
    from lagsched_dev.stack.environment import stack_environment

    return stack_environment(cfg)


def _demo_dir(cfg: StackConfig) -> Path:
    path = cfg.home / "demo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stop_loadgen(cfg: StackConfig, timeout_s: float = 60.0) -> bool:
    """Stop a load generator a demo left running (its pid file); True if one was running."""
    pid_file = _demo_dir(cfg) / "loadgen.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return False
    if b"lagsched_dev.loadgen" not in cmdline:  # the pid was reused by another process: leave it alone
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    pid_file.unlink(missing_ok=True)
    return True


class DemoAPI(AirflowAPI):
    @classmethod
    def for_stack(cls, cfg: StackConfig) -> DemoAPI:
        """Logged in as admin with the password Airflow's simple auth manager generated."""
        passwords = json.loads((cfg.airflow_home / PASSWORDS_FILE).read_text())
        return cls(f"http://127.0.0.1:{cfg.airflow_port}", "admin", passwords["admin"])

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, auth: bool = True) -> Any:
        # The local stack's SQLite metadata DB answers "database is locked" (HTTP 500, "Database
        # error") while the scheduler writes; the demo's calls are idempotent or harmless to repeat.
        for attempt in range(6):
            try:
                return super()._request(method, path, body, auth)
            except AirflowAPIError as exc:
                if "HTTP 500" not in str(exc) or "Database error" not in str(exc) or attempt == 5:
                    raise
                time.sleep(1.0 + attempt)
        raise AssertionError("unreachable")

    def active_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return [r for r in self.dag_runs(dag_id, limit=10) if r.get("state") in ("queued", "running")]


def _run_dag(api: AirflowAPI, dag_id: str, timeout_s: float = 300.0, conf: dict[str, Any] | None = None) -> str:
    with Progress(f"running {dag_id}", stream=sys.stdout) as progress:
        progress.tick_every(0.5)
        run_id = api.trigger(dag_id, conf)

        def show(tis: list[dict[str, Any]]) -> None:
            states = [f"{ti['task_id']} {ti.get('state') or 'scheduled'}" for ti in tis]
            progress.update(detail=", ".join(states)[:100])

        state = api.wait_for_run(dag_id, run_id, timeout_s=timeout_s, on_progress=show)
        progress.detail = state
    return state


def run(args: argparse.Namespace) -> int:
    cfg = load()
    if args.down:
        stopped = stop_loadgen(cfg)
        print("load generator: " + ("stopped" if stopped else "was not running"), flush=True)
        remove_hour_reader(cfg)
        from lagsched_dev import stack

        names = stack.down(cfg)
        print("stopped: " + (", ".join(names) if names else "nothing was running"), flush=True)
        return 0
    duration = args.duration if args.duration and args.duration > 0 else None
    try:
        cfg = demo_config(cfg, args)
    except ValueError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    try:
        prepared = _start_and_prepare(cfg, duration, args.peak_rate)
    except KeyboardInterrupt:
        print("\ndemo: interrupted before the traffic started; `make demo-down` stops the stack", file=sys.stderr)
        return 130
    if isinstance(prepared, int):
        return prepared
    api, loads, lake, seeded_hours = prepared
    topics = [lt.topic for lt in loads]
    # From here a Ctrl-C winds the demo down in order and still prints the summary.
    stopper = Stopper()
    stopper.install()

    view = Stack(topics)
    baseline = view.committed()
    from lagsched.connections import kafka_config

    # With the committed offsets: the backlog already waiting, which this run consumes too.
    heads_at_start = watermarks(kafka_config(), topics)
    demo_dir = _demo_dir(cfg)
    stats_path = demo_dir / "loadgen.json"
    stats_path.unlink(missing_ok=True)
    log_path = cfg.logs / "demo-loadgen.log"
    started = time.time()
    with log_path.open("ab") as log:
        # Its own session: a Ctrl-C reaches the demo only, which then stops it in order.
        loadgen = subprocess.Popen(  # noqa: S603 - our own module
            _loadgen_argv(loads, args.peak_rate, stats_path),
            env={**os.environ, **_stack_environment(cfg)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (demo_dir / "loadgen.pid").write_text(str(loadgen.pid))
    print(
        f"==> load generator started (pid {loadgen.pid}, log {log_path}): {_short(topics[0])} ramps to "
        f"{args.peak_rate:,.0f} records/s, {', '.join(_short(t) for t in topics[1:-1])} trickle, "
        f"{_short(topics[-1])} stays idle",
        flush=True,
    )
    print(
        "    " + ("until Ctrl-C" if duration is None else f"for {format_duration(duration)} (or until Ctrl-C)"),
        flush=True,
    )
    demo = Demo(
        api, view, loads, started, duration, stopper, loadgen, stats_path, baseline, heads_at_start, lake, cfg=cfg
    )
    try:
        _wait_first_measurement(view, started, stopper, loadgen)
        _watch(demo)
    finally:
        _wind_down(api, cfg, loadgen, stopper, args.budget_wait)
    demo.compaction = _compact(api, lake)
    try:
        demo.hours = _hours_report(api, seeded_hours)
    except AirflowAPIError as exc:
        print(f"demo: could not read the hours' events: {exc}", file=sys.stderr)
    finally:
        _pause_hours(api, cfg)
    summary = _summary(demo)
    view.close()
    (demo_dir / "summary.json").write_text(json.dumps(summary["data"], indent=1, default=str))
    print(summary["text"], flush=True)
    print(f"(also in {demo_dir / 'summary.json'}; `make demo-down` stops everything)", flush=True)
    hours_ok = demo.hours is None or all(
        v["read"] is None or v["read"]["read"] == v["read"]["announced"] for v in demo.hours["hours"].values()
    )
    return 0 if summary["data"]["exactly_once"] in (True, None) and hours_ok else 1


def _start_and_prepare(
    cfg: StackConfig, duration: float | None, peak_rate: float
) -> int | tuple[DemoAPI, tuple[TopicLoad, ...], Any, list[str]]:
    """Stack up, everything set up; the API, the profile, the lake table and the hours seeded into
    `HISTORY_TOPIC`, or the exit status on failure."""
    from lagsched_dev.cli import start_stack

    try:
        start_stack(cfg, airflow=True, prometheus=True, spark_cluster=cfg.slots_on_spark_cluster)
    except ServiceError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    from lagsched_dev.stack.environment import connection_environment

    for key, value in connection_environment(cfg).items():
        os.environ.setdefault(key, value)
    url = f"http://127.0.0.1:{cfg.airflow_port}"
    api = DemoAPI.for_stack(cfg)
    loads = _profile(duration, peak_rate)
    try:
        failed, seeded_hours = _prepare(api, cfg, loads)
        sink = demo_lake(cfg, api.get_variable("lagsched_clusters"))
    except (AirflowAPIError, ValueError) as exc:  # ConfigError is a ValueError
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    if failed:
        print(f"demo: {failed} did not succeed; see its task logs in the Airflow UI ({url})", file=sys.stderr)
        return 1
    _print_addresses(cfg, url, sink)  # the demo cluster's table
    return api, loads, sink, seeded_hours


def _prepare(api: DemoAPI, cfg: StackConfig, loads: Sequence[TopicLoad]) -> tuple[str | None, list[str]]:
    """DAGs parsed, Variables merged, topics created, past hours seeded, setup and topic sync run,
    DAGs unpaused; the DAG that failed (None: none) and the hours seeded."""
    from lagsched.connections import kafka_config
    from lagsched_dev.loadgen import create_topics

    with Progress("waiting for Airflow to parse the lagsched DAGs", total=len(REQUIRED_DAGS), stream=sys.stdout) as p:
        p.tick_every(0.5)
        for dag_id in REQUIRED_DAGS:
            api.wait_for_dag(dag_id, timeout_s=300)
            p.advance(detail=dag_id)
    topics = [lt.topic for lt in loads]
    apply_variables(api, topics)
    print(
        f"==> Variables: lagsched_settings (hevo: scale up above {DEMO_TOPIC_SETTINGS['max_lag']:,} records of lag "
        f"and rising, down below {DEMO_TOPIC_SETTINGS['min_lag']:,}; {len(topics)} demo topics), lagsched_clusters "
        f"(slots capped at {DEMO_SLOT_MAX_RATE:,.0f} records/s, committing to the table every "
        f"{DEMO_COMMIT_INTERVAL_S:.0f} s: shorter than the production default of {DEFAULT_COMMIT_INTERVAL_S:.0f} s, "
        "so ten minutes show many commits and the lag thresholds stay above one interval's records)",
        flush=True,
    )
    created = create_topics(kafka_config(), loads)
    print(f"==> topics: {', '.join(created) if created else 'all present'}", flush=True)
    seeded_at = time.time()
    seeded = seed_history(kafka_config(), seeded_at)
    hours = history_hours(seeded_at)
    print(
        f"==> {HISTORY_TOPIC}: {seeded} records timestamped over the {HISTORY_HOURS} past hours "
        f"({hours[0]} to {hours[-1]}): lagsched_hours announces them for the shared table, and {HOUR_READER} "
        "(docs/examples/lagsched_hour_reader.py) reads each announced hour",
        flush=True,
    )
    install_hour_reader(cfg)
    api.wait_for_dag(HOUR_READER, timeout_s=300)
    for dag_id in ("lagsched_setup",):
        if _run_dag(api, dag_id) != "success":
            return dag_id, hours
    present = [d for d in REQUIRED_DAGS + OPTIONAL_DAGS + HOURS_DAGS + (HOUR_READER,) if api.get_dag(d) is not None]
    for dag_id in present:
        api.set_paused(dag_id, False)
    print(f"==> unpaused: {', '.join(present)}", flush=True)
    # Registers the demo topics now rather than at the sync's next 10-minute mark.
    if _run_dag(api, "lagsched_topic_sync") != "success":
        return "lagsched_topic_sync", hours
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    conn = connect(mysql_params())
    try:
        reset = reset_workers(conn, topics, time.time())
    finally:
        conn.close()
    if reset:
        was = ", ".join(f"{_short(t)} {n}" for t, n in reset)
        print(f"==> linker_workers back to 1 (a demo starts where the first one did): {was} before", flush=True)
    # The consume DAG runs on scaling changes, slot ends and every 15 minutes: start the slots the
    # topics need now (a run with nothing to start ends at once).
    api.trigger(CONSUME_DAG, {})
    print(f"==> triggered {CONSUME_DAG}: the slots start now and live until the demo ends", flush=True)
    return None, hours


def _print_addresses(cfg: StackConfig, url: str, lake: Any) -> None:
    from lagsched_dev.stack.services import Prometheus

    prometheus = Prometheus(cfg).url
    print(
        f"""
  Airflow UI     {url}   user admin, password in {cfg.airflow_home / PASSWORDS_FILE}
  lagsched page  {url}/plugin/lagsched   ("lagsched" in Airflow's navigation)
  DAGs           {url}/dags?tags=lagsched
  Prometheus     {prometheus}/classic/alerts   lagsched's alert rules (docs/alerts.md); watch
                 LagschedTopicTimeLagHigh and LagschedFewerLiveSlotsThanPlanned go pending while the hot
                 topic scales. Graphs (Debian's build serves Prometheus' classic UI):
                 {prometheus}/classic/graph?g0.expr=lagsched_topic_time_lag_seconds&g0.tab=0
  Grafana        import plugins/lagsched/monitoring/dashboard.json (docs/prometheus.md) with a Prometheus
                 data source at {prometheus}
  in a terminal  .venv/bin/lagsched status   (after: eval "$(.venv/bin/lagsched-dev stack env)")
  Iceberg table  {lake.identifier} in {lake.warehouse}
  logs           {cfg.logs}/   task logs {cfg.airflow_home / "logs"}/
{_placement_lines(cfg)}""",
        flush=True,
    )


def _placement_lines(cfg: StackConfig) -> str:
    """Where the slots run, when the demo asked for Celery workers or the Spark cluster."""
    lines = []
    if cfg.airflow_executor == "celery":
        from lagsched_dev.stack.celery import workers

        nodes = ", ".join(w.node for w in workers(cfg))
        lines.append(f"  Celery         {nodes}: the slots' host column on the lagsched page, and each task's")
        lines.append("                 Hostname in Airflow (docs/celery.md)")
    if cfg.slots_on_spark_cluster:
        lines.append(f"  Spark cluster  http://127.0.0.1:{cfg.spark_master_webui_port}   the slots' applications and")
        lines.append(f"                 executors on {cfg.spark_workers} workers (master {cfg.spark_master_url})")
    return "".join(line + "\n" for line in lines)


def _wait_first_measurement(view: Stack, started: float, stopper: Stopper, loadgen: subprocess.Popen[bytes]) -> None:
    """Until the lag monitor has measured every demo topic since the traffic started (a minute or two)."""
    with Progress("waiting for the first lag measurement", stream=sys.stdout) as p:
        p.tick_every(0.5)
        deadline = time.monotonic() + 300
        while not stopper.stop.is_set() and time.monotonic() < deadline:
            if loadgen.poll() is not None:
                raise RuntimeError(f"the load generator exited with {loadgen.returncode}; see its log")
            try:
                snap = view.snapshot()
            except Exception as exc:  # noqa: BLE001 - a transient read error: shown, retried
                p.update(detail=f"reading the status: {exc}"[:100])
            else:
                fresh = sum(1 for at in snap.measured_at.values() if at is not None and at >= started)
                p.update(detail=f"{fresh}/{len(snap.measured_at)} topics measured")
                if fresh == len(snap.measured_at):
                    return
            stopper.stop.wait(5)
        if not stopper.stop.is_set():
            p.detail = "no measurement within 5 min: is lagsched_lag_monitor running? (its task log says why)"


@dataclass
class Demo:
    """One demo run's parts and what it saw."""

    api: DemoAPI
    view: Stack
    loads: Sequence[TopicLoad]
    started: float
    duration: float | None
    stopper: Stopper
    loadgen: subprocess.Popen[bytes]
    stats_path: Path
    baseline: Mapping[tuple[str, int], int | None]
    heads_at_start: Mapping[tuple[str, int], tuple[int, int]]
    lake: Any  # lagsched.core.lake.LakeTable
    history: list[Snapshot] = field(default_factory=list)
    #: The table's figures before and after the table care run at the end (`_compact`).
    compaction: dict[str, Any] | None = None
    #: With the slots on the Spark cluster: each Spark worker's most cores in use at once.
    spark_cores: dict[str, int] = field(default_factory=dict)
    cfg: StackConfig | None = None
    #: The seeded hours of the shared table: each one's event and what the reader read (`_hours_report`).
    hours: dict[str, Any] | None = None


def _watch(demo: Demo) -> None:
    api, view, started, duration, stopper = demo.api, demo.view, demo.started, demo.duration, demo.stopper
    loadgen, stats_path, history = demo.loadgen, demo.stats_path, demo.history
    topics = [lt.topic for lt in demo.loads]
    next_check = time.monotonic() + 60
    while not stopper.stop.is_set():
        elapsed = time.time() - started
        if duration is not None and elapsed >= duration:
            break
        if loadgen.poll() is not None:
            print(f"demo: the load generator exited with {loadgen.returncode}; see its log", file=sys.stderr)
            break
        try:
            snap = view.snapshot()
        except Exception as exc:  # noqa: BLE001 - one failed reading is a line, not the end of the demo
            print(f"[status unavailable: {exc}]", flush=True)
        else:
            history.append(snap)
            print(status_line(elapsed, snap, _sent(_read_stats(stats_path))), flush=True)
        _sample_spark(demo)
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + 60
            try:
                if not _demo_variables_in_place(api, topics):
                    # Someone (a test restoring its own copy) replaced them: the demo's entries go back.
                    apply_variables(api, topics)
                    print("    (the demo's entries in lagsched_settings/lagsched_clusters were put back)", flush=True)
            except (AirflowAPIError, ValueError, OSError) as exc:
                print(f"    (could not check the Variables: {exc})", flush=True)
        wait = STATUS_EVERY_S
        if duration is not None:
            wait = min(wait, max(0.0, duration - (time.time() - started)))
        stopper.stop.wait(wait)


def _sample_spark(demo: Demo) -> None:
    """With the slots on the Spark cluster: each Spark worker's cores in use now (the most seen is kept)."""
    if demo.cfg is None or not demo.cfg.slots_on_spark_cluster:
        return
    from lagsched_dev.stack.services import spark_master_state

    state = spark_master_state(demo.cfg) or {}
    for worker in state.get("workers", []):
        if isinstance(worker, dict) and worker.get("state") == "ALIVE":
            key = f"{worker.get('host')}:{worker.get('port')}"
            demo.spark_cores[key] = max(demo.spark_cores.get(key, 0), int(worker.get("coresused") or 0))


def _slot_hosts(history: Sequence[Snapshot]) -> dict[str, list[str]]:
    """Where the slots ran over the demo: slot -> every host (worker) the status readings saw run it."""
    hosts: dict[str, set[str]] = {}
    for snap in history:
        for slot, host in snap.slot_hosts.items():
            hosts.setdefault(slot, set()).add(host)
    return {slot: sorted(h) for slot, h in sorted(hosts.items())}


def _compact(api: AirflowAPI, lake: Any) -> dict[str, Any] | None:
    """Run the table care DAG on the demo's table, as of an hour and a half from now so that the
    demo's hours count as closed, and return the table's figures before and after it (None if the
    table cannot be read)."""
    _, before = _read_table(lake)
    if before is None:
        return None
    as_of = (datetime.now(UTC) + timedelta(minutes=90)).isoformat()
    print(f"==> {TABLE_CARE_DAG}: compacting {lake.identifier} (as of {as_of}: the demo's hours count as closed)")
    try:
        state = _run_dag(api, TABLE_CARE_DAG, timeout_s=600, conf={"cluster": DEMO_CLUSTER, "now": as_of})
    except AirflowAPIError as exc:
        print(f"demo: could not run {TABLE_CARE_DAG}: {exc}", file=sys.stderr)
        state = "not run"
    _, after = _read_table(lake)
    return {"state": state, "before": before, "after": after}


def seed_history(kafka_config: Mapping[str, Any], now: float) -> int:
    """Create `HISTORY_TOPIC` if missing and write `HISTORY_PER_HOUR` records into each of the
    `HISTORY_HOURS` hours before the current one (their CreateTime); the records written. Each demo
    seeds its own past hours (an earlier demo's are hours further back)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from lagsched_dev.loadgen import wait_until_ready

    admin = AdminClient(dict(kafka_config))
    if HISTORY_TOPIC not in (admin.list_topics(timeout=30).topics or {}):
        futures = admin.create_topics([NewTopic(HISTORY_TOPIC, 2, 1)], operation_timeout=30)
        futures[HISTORY_TOPIC].result(timeout=30)
        wait_until_ready(dict(kafka_config), {HISTORY_TOPIC: 2})
    hour_ms = 3_600_000
    first = (int(now * 1000) // hour_ms - HISTORY_HOURS) * hour_ms
    step = hour_ms // HISTORY_PER_HOUR
    producer = Producer({**kafka_config, "acks": "all", "enable.idempotence": True})
    n = HISTORY_HOURS * HISTORY_PER_HOUR
    for i in range(n):
        producer.produce(HISTORY_TOPIC, key=f"h{i}".encode(), value=f"history {i}".encode(), partition=i % 2,
                         timestamp=first + i * step)  # fmt: skip
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"{HISTORY_TOPIC}: records still unacknowledged after 60 s")
    return n


def _pause_hours(api: DemoAPI, cfg: StackConfig) -> None:
    """Pause the completeness DAGs and remove the reader (the e2e tests need them to themselves)."""
    for dag_id in HOURS_DAGS:
        with contextlib.suppress(AirflowAPIError):
            api.set_paused(dag_id, True)
    remove_hour_reader(cfg)


def install_hour_reader(cfg: StackConfig) -> Path:
    """The docs' downstream example as `HOUR_READER` in the stack's DAGs folder, reading the demo
    cluster's shared table (removed again by `remove_hour_reader`)."""
    text = READER_EXAMPLE.read_text().replace('dag_id="lagsched_hour_reader"', f"dag_id={HOUR_READER!r}")
    path = cfg.repo / "dags" / f"{HOUR_READER}.py"
    path.write_text(text)
    return path


def remove_hour_reader(cfg: StackConfig) -> None:
    (cfg.repo / "dags" / f"{HOUR_READER}.py").unlink(missing_ok=True)


def shared_table_uri() -> str:
    return f"iceberg://lagsched/kafka/{DEMO_CLUSTER}"


def history_hours(now: float) -> list[str]:
    """The partition keys of the hours `seed_history` wrote into (as of ``now``)."""
    hour_s = 3600
    first = (int(now) // hour_s - HISTORY_HOURS) * hour_s
    return [datetime.fromtimestamp(first + k * hour_s, UTC).strftime("%Y-%m-%dT%H:%M:%S") for k in range(HISTORY_HOURS)]


def _hours_report(api: DemoAPI, wanted: Sequence[str], timeout_s: float = 600) -> dict[str, Any]:
    """Wait (with progress) until the seeded hours (``wanted``, partition keys) of the shared table
    are announced and each was read by `HOUR_READER`; per hour the event's extra and the rows the
    reader read."""
    report: dict[str, Any] = {"hours": {}, "complete": False}
    with Progress("waiting for lagsched_hours to announce the seeded hours, and the reader to read them",
                  total=len(wanted), stream=sys.stdout) as p:  # fmt: skip
        p.tick_every(0.5)
        deadline = time.monotonic() + timeout_s
        while True:
            events = {e["partition_key"]: e["extra"] for e in api.asset_events(shared_table_uri())}
            reads: dict[str, Any] = {}
            for r in api.dag_runs(HOUR_READER):
                if r["state"] == "success" and r.get("partition_key") in wanted:
                    with contextlib.suppress(AirflowAPIError):
                        reads[r["partition_key"]] = api.xcom(HOUR_READER, r["dag_run_id"], "read_hour")
            done = [h for h in wanted if h in events and h in reads]
            p.update(len(done), detail=f"{len([h for h in wanted if h in events])} announced, {len(reads)} read")
            if len(done) == len(wanted) or time.monotonic() > deadline:
                break
            time.sleep(10)
    for h in wanted:
        report["hours"][h] = {"event": events.get(h), "read": reads.get(h)}
    report["complete"] = all(v["event"] is not None and v["read"] is not None for v in report["hours"].values())
    return report


def _hours_lines(report: Mapping[str, Any]) -> list[str]:
    lines = [f"hours of the shared table (lagsched_hours -> {HOUR_READER}, docs/completeness.md):"]
    for hour, v in report["hours"].items():
        event, read = v["event"], v["read"]
        if event is None:
            lines.append(f"  {hour}: not announced yet")
            continue
        said = (
            f"event: {event['rows']:,} row(s), snapshot {event['snapshot_id']}, valid through {event['valid_through']}"
        )
        got = "not read yet" if read is None else f"read {read['read']:,} row(s)"
        lines.append(f"  {hour}: {said}; {got}")
    return lines


def _wind_down(
    api: DemoAPI, cfg: StackConfig, loadgen: subprocess.Popen[bytes], stopper: Stopper, budget_wait: bool
) -> None:
    print("==> winding down: stopping the load generator", flush=True)
    if loadgen.poll() is None:
        loadgen.send_signal(signal.SIGTERM)
        try:
            loadgen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            loadgen.kill()
    (_demo_dir(cfg) / "loadgen.pid").unlink(missing_ok=True)
    try:
        api.set_paused(CONSUME_DAG, True)
        runs = api.active_runs(CONSUME_DAG)
    except AirflowAPIError as exc:
        print(f"demo: could not pause {CONSUME_DAG}: {exc}", file=sys.stderr)
        return
    print(f"==> paused {CONSUME_DAG}; {len(runs)} run(s) still consuming", flush=True)
    if not runs:
        return
    if not budget_wait:
        stopper.hurry.set()
    label = (
        "waiting for the running slots to finish their budget (Ctrl-C again: stop them now)"
        if budget_wait
        else "stopping the running slots (each finishes its batch, commits and releases)"
    )
    with Progress(label, stream=sys.stdout) as p:
        p.tick_every(0.5)
        deadline = time.monotonic() + 600
        while runs and time.monotonic() < deadline:
            if stopper.hurry.is_set():
                for r in runs:
                    # Failing the run kills its slots' tasks; each driver finishes its batch and stops
                    # without losing or duplicating a record (docs/consumer.md).
                    api.mark_run(CONSUME_DAG, r["dag_run_id"], "failed")
                p.detail = "slots asked to stop"
                stopper.hurry.clear()
                deadline = min(deadline, time.monotonic() + 90)
            stopper.hurry.wait(3)
            runs = api.active_runs(CONSUME_DAG)
            p.update(detail=f"{len(runs)} run(s) active")


def _summary(demo: Demo) -> dict[str, Any]:
    from lagsched.connections import kafka_config

    view, loads, baseline, started, history = demo.view, demo.loads, demo.baseline, demo.started, demo.history
    stats, lake = _read_stats(demo.stats_path), demo.lake

    topics = [lt.topic for lt in loads]
    marks = watermarks(kafka_config(), topics)
    committed = view.committed()
    peaks = view.peak_lag_history(started)
    for snap in history:
        for t, lag in snap.lag.items():
            if lag is not None:
                peaks[t] = max(peaks.get(t, 0), lag)
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    per_topic: dict[str, dict[str, Any]] = {}
    for t in topics:
        produced = int(stats.get("topics", {}).get(t, {}).get("acked", 0))
        consumed = final_lag = 0
        for (topic, p), (low, high) in sorted(marks.items()):
            if topic != t:
                continue
            start = baseline.get((t, p))
            end = committed.get((t, p))
            start = low if start is None else start
            end = start if end is None else end
            ranges[(t, p)] = (start, end)
            consumed += max(0, end - start)
            final_lag += max(0, high - max(end, low))
        # The final lag is a reading too (exact: broker heads minus committed offsets, at the end).
        peak = max(peaks.get(t, 0), final_lag)
        per_topic[t] = {"peak_lag": peak, "final_lag": final_lag, "produced": produced, "consumed": consumed}
    table, files = _read_table(lake)
    typed = _read_typed(lake)
    if table is not None and typed is not None:
        table = pa_concat([table, *typed.coordinates])
    counted = None if table is None or typed is None else sink_rows(table, ranges)
    consumed_total = sum(v["consumed"] for v in per_topic.values())
    if counted is None:
        exactly_once: bool | None = None
        in_sink = "not counted (the table could not be read; see above)"
    elif consumed_total == 0:
        exactly_once = None
        in_sink = f"{counted[0]:,} rows"
    else:
        rows, distinct = counted
        exactly_once = rows == distinct == consumed_total
        in_sink = f"{rows:,} rows ({distinct:,} distinct offsets)"
    decisions = view.decisions(started)
    lines = ["", "=" * 78, "lagsched demo summary", "=" * 78]
    lines.append(
        f"{'topic':<16} {'peak lag':>10} {'final lag':>10} {'produced':>10} {'consumed':>10}  workers over time"
    )
    for t in topics:
        v = per_topic[t]
        steps = _workers_over_time(t, decisions, history, started)
        figures = f"{v['peak_lag']:>10,} {v['final_lag']:>10,} {v['produced']:>10,} {v['consumed']:>10,}"
        lines.append(f"{_short(t):<16} {figures}  {steps}")
    produced_total = sum(v["produced"] for v in per_topic.values())
    backlog = sum(max(0, high - max(low, baseline.get(key) or 0)) for key, (low, high) in demo.heads_at_start.items())
    lines += [
        "",
        f"records produced {produced_total:,}; consumed (committed offsets) {consumed_total:,}; in the table {in_sink}",
    ]
    compaction = demo.compaction
    if compaction is not None and compaction["after"] is not None:
        b, a = compaction["before"], compaction["after"]
        lines.append(
            f"table {lake.identifier}: data files {b.data_files:,} -> {a.data_files:,} after table care "
            f"({compaction['state']}), median file {b.median_file_bytes:,} -> {a.median_file_bytes:,} bytes, "
            f"{a.snapshots:,} snapshots"
        )
    elif files is not None:
        lines.append(
            f"table {lake.identifier}: {files.data_files:,} data files, median {files.median_file_bytes:,} bytes, "
            f"{files.snapshots:,} snapshots (table care did not run)"
        )
    if typed is not None:
        lines += typed.lines
    if backlog:
        lines.append(f"(the consumed records include {backlog:,} that were waiting before the traffic started)")
    if exactly_once is None:
        why = "the table could not be read" if counted is None else "nothing was consumed during this run"
        lines.append(f"exactly once: not checked ({why})")
    else:
        lines.append(
            "exactly once: "
            + (
                "YES, every consumed record is in the lake once: in the shared table, its typed table or the "
                "dead-letter table (read with pyiceberg)"
                if exactly_once
                else "NO: the tables and the committed offsets differ"
            )
        )
    if demo.hours is not None:
        lines += _hours_lines(demo.hours)
    slot_hosts = _slot_hosts(history)
    if slot_hosts:
        where = "; ".join(f"{n} on {', '.join(h)}" for n, h in slot_hosts.items())
        lines.append(f"slots ran: {where}")
    if demo.spark_cores:
        used = ", ".join(f"{w} up to {c} core(s)" for w, c in sorted(demo.spark_cores.items()))
        lines.append(f"Spark workers with executors: {used}")
    lines.append(f"scaling decisions ({len(decisions)}), each with the evidence its policy saw:")
    for d in decisions:
        at = datetime.fromtimestamp(d.decided_at, tz=UTC).strftime("%H:%M:%S")
        change = f"{_short(d.topic):<10} {d.previous_linker_workers} -> {d.linker_workers}"
        lines.append(f"  {at} +{format_duration(d.decided_at - started):>10}  {change}  {d.policy} {d.rule}")
        lines.append(f"      {evidence(d)}")
        lines.append(f"      {d.reason}")
    lines.append("=" * 78)
    data = {
        "started_at": datetime.fromtimestamp(started, tz=UTC).isoformat(),
        "topics": per_topic,
        "produced": produced_total,
        "backlog_at_start": backlog,
        "consumed": consumed_total,
        "table": lake.identifier,
        "warehouse": lake.warehouse,
        "sink_rows": None if counted is None else counted[0],
        "sink_distinct": None if counted is None else counted[1],
        "data_files": None if files is None else files.data_files,
        "median_file_bytes": None if files is None else files.median_file_bytes,
        "snapshots": None if files is None else files.snapshots,
        "table_care": None
        if compaction is None or compaction["after"] is None
        else {
            "state": compaction["state"],
            "data_files_before": compaction["before"].data_files,
            "data_files_after": compaction["after"].data_files,
            "median_file_bytes_before": compaction["before"].median_file_bytes,
            "median_file_bytes_after": compaction["after"].median_file_bytes,
        },
        "exactly_once": exactly_once,
        "typed_tables": None if typed is None else typed.data,
        "slot_hosts": slot_hosts,
        "spark_worker_cores_used": dict(sorted(demo.spark_cores.items())),
        "decisions": [
            {
                "at": d.decided_at,
                "topic": d.topic,
                "previous_linker_workers": d.previous_linker_workers,
                "linker_workers": d.linker_workers,
                "policy": d.policy,
                "rule": d.rule,
                "reason": d.reason,
                "lag": d.lag,
                "time_lag_s": d.time_lag_s,
                "slope": d.slope,
                "fit_r2": d.fit_r2,
                "drain_s": d.drain_s,
            }
            for d in decisions
        ],
        "hours": demo.hours,
    }
    return {"text": "\n".join(lines), "data": data}


def evidence(d: Any) -> str:
    """A decision's figures in words: lag, time lag, the regression and the drain it implies.

    >>> from dataclasses import replace
    >>> from lagsched.core.decisions import EXAMPLE
    >>> def row(lag, time_lag_s, slope, fit_r2):
    ...     return replace(EXAMPLE, lag=lag, time_lag_s=time_lag_s, slope=slope, fit_r2=fit_r2)
    >>> print(evidence(row(114_942, 41.5, 1790.4, 0.93)))
    lag 114,942 records (41.5 s behind); slope +1,790 records/s, r² 0.93: not draining at this trend
    >>> print(evidence(row(600, 0.4, -20.0, 0.7)))
    lag 600 records (0.4 s behind); slope -20 records/s, r² 0.70: drains in 30 s at this trend
    >>> print(evidence(row(0, 0.0, -184.0, 0.5)))
    lag 0 records (0.0 s behind); slope -184 records/s, r² 0.50: nothing to drain
    """
    head = f"lag {d.lag:,} records ({d.time_lag_s:.1f} s behind)"
    if d.policy == "manual":
        return head + "; a manual change (no regression)"
    if d.lag == 0:
        drain = "nothing to drain"
    elif d.drain_s is None:
        drain = "not draining at this trend"
    else:
        drain = f"drains in {format_duration(d.drain_s)} at this trend"
    return f"{head}; slope {d.slope:+,.0f} records/s, r² {d.fit_r2:.2f}: {drain}"


def _workers_over_time(topic: str, decisions: Sequence[Any], history: Sequence[Snapshot], started: float) -> str:
    """``1 -> 3 (+2 min 50 s) -> 1 (+7 min 40 s)`` from the decisions (or the status readings)."""
    mine = [d for d in decisions if d.topic == topic]
    if mine:
        text = str(mine[0].previous_linker_workers)
        for d in mine:
            text += f" -> {d.linker_workers} (+{format_duration(d.decided_at - started)})"
        return text
    seen = [s.workers.get(topic, 0) for s in history]
    return str(seen[-1]) if seen else "-"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration",
        type=float,
        default=float(os.environ.get("DURATION") or 0) or None,
        help="seconds of traffic before the demo winds down (default: $DURATION, else until Ctrl-C)",
    )
    parser.add_argument(
        "--peak-rate",
        type=float,
        default=DEMO_PEAK_RATE,
        help=f"the hot topic's peak, records/s (default {DEMO_PEAK_RATE:,.0f}; slots read at most "
        f"{DEMO_SLOT_MAX_RATE:,.0f} each)",
    )
    parser.add_argument(
        "--budget-wait",
        action="store_true",
        help="at the end, let the running slots finish their budget (up to 10 minutes) instead of stopping them "
        "gracefully at once",
    )
    parser.add_argument(
        "--celery",
        action="store_true",
        default=_env_flag("CELERY"),
        help="Airflow with the CeleryExecutor and separate Celery workers (default: $CELERY; docs/celery.md)",
    )
    parser.add_argument(
        "--celery-workers",
        type=int,
        default=None,
        metavar="N",
        help="with --celery: how many workers (default 2)",
    )
    parser.add_argument(
        "--spark-cluster",
        action="store_true",
        default=_env_flag("SPARK_CLUSTER"),
        help="the slots submit to the stack's Spark standalone master, executors on its two workers "
        "(default: $SPARK_CLUSTER; docs/spark-cluster.md)",
    )
    parser.add_argument("--down", action="store_true", help="stop a demo's load generator and the whole stack")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def demo_config(cfg: StackConfig, args: argparse.Namespace) -> StackConfig:
    """The stack the demo asks for: Celery workers, slots on the Spark cluster (each a whole machine's
    worth of processes; the default demo is the light one)."""
    if args.celery or args.celery_workers is not None:
        cfg = with_celery(cfg, args.celery_workers)
    if args.spark_cluster:
        # Three slots at once, one core and a 1g executor each: 2 workers of 2 cores and 2g hold 4,
        # unless LAGSCHED_SPARK_WORKER_* say otherwise.
        cores = cfg.spark_worker_cores if "LAGSCHED_SPARK_WORKER_CORES" in os.environ else 2
        memory = cfg.spark_worker_memory if "LAGSCHED_SPARK_WORKER_MEMORY" in os.environ else "2g"
        cfg = replace(cfg, slots_on_spark_cluster=True, spark_worker_cores=cores, spark_worker_memory=memory)
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.demo", description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
