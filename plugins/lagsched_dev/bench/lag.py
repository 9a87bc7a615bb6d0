"""Lag measurement at scale on the real broker: registry sync and measurement, 1,000 x 10 and 10,000 x 10.

Two sections, each on ``--partitions`` partitions per topic under a unique prefix (deleted at the
end, on failure too), with a fresh database, timing the two code paths the lag monitor DAG runs
every minute:

* ``sync_s``: `lagsched.workflows.topic_sync.sync_registry` of the whole cluster (every topic read
  and described, the bench's kept by the cluster's topic filter); the first sync registers them
  (``first_sync_s``, reported apart), the figure is the worst steady-state sync afterwards;
* ``measure_s``: `lagsched.workflows.lag_monitor.measure` of every registered topic (registry
  read, batched ``list_offsets`` calls, lag math, Redis writes), worst of the steady-state runs;
  the first measurement, whose sample windows are still empty, is ``first_measure_s``;
* ``measure_cpu_s``, ``sync_cpu_s``: the worst CPU time of this process (all threads) in those
  runs: what the code costs apart from waiting for a core on a shared machine.

The first section has ``--topics`` topics (1,000: targets measure < 2 s, sync < 5 s); the ``full``
section (keys ending ``_full``) the same topics in the state a busy pipeline lives in once its
windows are full (`_fill_windows`: records, committed offsets, ``sample_window`` samples in every
partition's two windows and as many lag records per topic; between two timed runs every
partition gets a record more and its committed offset moves one on, untimed, so each measurement
appends to and trims every window as production's does; target measure < 2 s); the third
``--large-topics`` (10,000, 100,000 partitions: measure < 10 s, sync < 20 s; its keys end in
``_100k``). Each is run ``--runs`` times and the worst is reported.

**Where the time goes.** After the timed runs, one more sync and measurement are run with each
step timed (``breakdown``): Admin calls (metadata, ``list_offsets``, ``DescribeTopics``,
``DescribeConfigs``), MySQL reads and writes, Redis reads and writes; what is left is Python (the
lag math, building the per-partition records).

**The broker's capacity.** A Kafka broker keeps each partition's active segment open (one file
descriptor) and its two index files memory-mapped, and holds some 28 KB of heap per partition
(measured on the stack's broker: 10,000 partitions took 280 MB). Past its open-file limit it
marks its log directory offline and, having one, shuts down; past ``vm.max_map_count`` its mmap
fails. So before creating a section's topics on the stack's broker (found by its pid file), the
benchmark reads its limits from ``/proc`` and, if the topics would take it past 90% of any of
them, creates the largest number of topics that fits instead and says which limit bound it
(``limited_by_100k``). A broker it cannot inspect is taken at its word. When one broker cannot hold
the large section, it runs on a cluster of as many brokers as the limits need (``brokers_100k``),
and the ``one_broker`` section measures the largest count that fits on the stack's own broker, with
the time per partition (keys ending ``_one_broker``; ``limited_by_one_broker`` names the limit).

Writes ``bench/results/lag.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import resource
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_OUT = "bench/results/lag.json"

#: Targets of issue 16: (measure, sync) seconds, worst of the runs.
TARGETS = {"measure_s": 2.0, "sync_s": 5.0, "measure_s_full": 2.0, "measure_s_100k": 10.0, "sync_s_100k": 20.0}
#: The sections, in the order they run: idle windows, full windows (``_full``), 100,000 partitions.
SECTIONS = ("small", "full", "large", "one_broker")

#: Live heap per partition on the stack's broker (Kafka 4.1: 10,000 partitions took ~280 MB
#: after a full GC, mostly per-partition metrics and log objects).
HEAP_PER_PARTITION = 28 * 1024
#: What the broker itself holds before any topic (heap after a full GC with a few topics).
HEAP_BASE = 64 * 1024 * 1024
#: Fraction of a broker limit the benchmark will use at most: other work shares the broker.
LIMIT_SHARE = 0.9


_WARM_UP_CLIENTS: list[Any] = []


def _create_topics(admin: Any, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    for start in range(0, len(names), 200):
        batch = names[start : start + 200]
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in batch], operation_timeout=120)
        for f in futures.values():
            f.result(timeout=180)
        if (start // 200) % 5 == 4 or start + len(batch) == len(names):
            print(f"   created {start + len(batch):,}/{len(names):,} topics", flush=True)
    # Creation is asynchronous: metadata names a leader seconds before it serves offsets (10,000
    # new partitions answer NOT_LEADER for a while), and that warm-up is not what is measured.
    from lagsched.adapters.kafka_admin import admin_client, read_offsets
    from lagsched.connections import kafka_config
    from lagsched.core.errors import KafkaOffsetsError

    deadline = time.monotonic() + 600
    # Leaders first, from metadata alone: asking list_offsets of thousands of leaderless partitions
    # again and again is when the process died of a segfault in libc (three times so far).
    wanted = set(names)
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=30).topics
        leaderless = sum(
            1
            for n in wanted
            for part in (topics[n].partitions.values() if n in topics else [None])
            if part is None or part.leader < 0
        )
        if not leaderless:
            break
        print(f"   waiting for {leaderless:,} new partitions' leaders", flush=True)
        time.sleep(2)
    while True:
        # Each attempt's client is kept until the process ends: twice a bench process died of a
        # segfault (pthread_mutex_lock on NULL in libc) while these attempts failed by the
        # thousand, and destroying a client with requests still in flight is the suspect.
        _WARM_UP_CLIENTS.append(admin_client(kafka_config()))
        try:
            read_offsets(_WARM_UP_CLIENTS[-1], dict.fromkeys(names, partitions), timeout_s=60)
            return
        except KafkaOffsetsError as exc:
            if time.monotonic() > deadline:
                raise
            print(f"   waiting for the new partitions' leaders: {str(exc)[:100]}", flush=True)
            time.sleep(2)


def _delete_topics(admin: Any, names: list[str]) -> None:
    for start in range(0, len(names), 200):
        try:
            futures = admin.delete_topics(names[start : start + 200], operation_timeout=120)
        except Exception as exc:  # noqa: BLE001 - clean-up: report and go on with the next batch
            log.warning("could not delete bench topics: %s", exc)
            continue
        for f in futures.values():
            try:
                f.result(timeout=180)
            except Exception as exc:  # noqa: BLE001 - clean-up: report and go on
                log.warning("could not delete a bench topic: %s", exc)
    print(f"   deleted {len(names):,} topics", flush=True)


# -- the broker's capacity -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerLimits:
    """The stack's broker as ``/proc`` shows it.

    Attributes:
        pid: the broker's JVM.
        open_files: descriptors open now.
        max_open_files: its soft ``RLIMIT_NOFILE``.
        maps: memory mappings now.
        max_map_count: ``vm.max_map_count``.
        max_heap: ``-Xmx`` in bytes (None when not set).
    """

    pid: int
    open_files: int
    max_open_files: int
    maps: int
    max_map_count: int
    max_heap: int | None

    def partitions_that_fit(self) -> tuple[int, str]:
        """New partitions that keep the broker under `LIMIT_SHARE` of every limit, and the binding limit."""
        fits = {
            "open files": int(self.max_open_files * LIMIT_SHARE) - self.open_files,
            "vm.max_map_count": (int(self.max_map_count * LIMIT_SHARE) - self.maps) // 2,
        }
        if self.max_heap is not None:
            # Partitions already there are counted by their descriptors (one each).
            fits["heap"] = int((self.max_heap * LIMIT_SHARE - HEAP_BASE) / HEAP_PER_PARTITION) - self.open_files
        name = min(fits, key=lambda k: fits[k])
        return max(0, fits[name]), name

    def describe(self) -> str:
        heap = "unset" if self.max_heap is None else f"{self.max_heap // 2**20} MB"
        return (
            f"open files {self.open_files:,} of {self.max_open_files:,}; memory maps {self.maps:,} of "
            f"vm.max_map_count {self.max_map_count:,}; -Xmx {heap}"
        )


def broker_limits() -> BrokerLimits | None:
    """The stack's broker's limits, or None when it is not a local process this user can read."""
    from lagsched_dev.stack.config import load
    from lagsched_dev.stack.process import read_pid

    pid = read_pid(load().run / "kafka.pid")
    if pid is None:
        return None
    try:
        proc = Path(f"/proc/{pid}")
        limits = (proc / "limits").read_text()
        match = re.search(r"^Max open files\s+(\d+)", limits, re.MULTILINE)
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        return BrokerLimits(
            pid=pid,
            open_files=len(os.listdir(proc / "fd")),
            max_open_files=int(match.group(1)) if match else 1 << 20,
            maps=len((proc / "maps").read_text().splitlines()),
            max_map_count=int(Path("/proc/sys/vm/max_map_count").read_text()),
            max_heap=next((_size(a[4:].decode()) for a in cmdline if a.startswith(b"-Xmx")), None),
        )
    except OSError as exc:
        log.warning("cannot read the broker's limits from /proc: %s", exc)
        return None


def _size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    last = text[-1:].lower()
    return int(text[:-1]) * units[last] if last in units else int(text)


def _wait_for_files_to_close(limit: int, timeout_s: float = 120.0) -> None:
    """Deleted topics close their files a little later (``log.segment.delete.delay.ms``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        limits = broker_limits()
        if limits is None or limits.open_files <= limit:
            return
        time.sleep(2)


def fit_topics(wanted: int, partitions: int) -> tuple[int, str | None]:
    """How many of `wanted` topics of `partitions` partitions the stack's broker can hold, and why fewer."""
    limits = broker_limits()
    if limits is None:
        return wanted, None
    room, binding = limits.partitions_that_fit()
    print(f"   broker pid {limits.pid}: {limits.describe()}; room for {room:,} partitions ({binding})", flush=True)
    if wanted * partitions <= room:
        return wanted, None
    need = wanted * partitions
    reason = (
        f"the broker cannot hold {need:,} more partitions: {limits.describe()}. Each partition keeps its "
        f"active segment open (one descriptor) and two index files memory-mapped, and takes ~"
        f"{HEAP_PER_PARTITION // 1024} KB of heap, so {need:,} partitions need ~{need:,} descriptors, "
        f"~{2 * need:,} maps and ~{(HEAP_BASE + need * HEAP_PER_PARTITION) // 2**20:,} MB of heap. Past the "
        "open-file limit the broker takes its only log directory offline and shuts down; past "
        f"vm.max_map_count its mmap fails. The largest that fits under {LIMIT_SHARE:.0%} of every limit "
        f"is bound by {binding}: {room // partitions:,} topics x {partitions}"
    )
    return room // partitions, reason


# -- timing spans ----------------------------------------------------------------------------


#: Marks a span timed in a background thread: it overlapped the main thread's spans.
BACKGROUND = "(in the background, overlapping the rest)"


class _Spans:
    """Seconds spent in named functions while `patched` is active, summed per label."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                # A call in another thread overlaps the main thread's: listed apart, not in the rest's sum.
                key = label if threading.current_thread() is threading.main_thread() else f"{label} {BACKGROUND}"
                self.seconds[key] = self.seconds.get(key, 0.0) + time.monotonic() - started

        return wrapper

    @contextlib.contextmanager
    def patched(self, targets: Sequence[tuple[Any, str, str]]) -> Iterator[None]:
        saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in targets]
        for owner, attr, label in targets:
            setattr(owner, attr, self.timed(label, getattr(owner, attr)))
        try:
            yield
        finally:
            for owner, attr, fn in saved:
                setattr(owner, attr, fn)


class _TimedAdmin:
    """An Admin client whose sync-time calls are timed (the sync uses only public methods).

    The Describe calls answer with futures at once; each is timed until all its futures are done,
    which the sync waits for right after anyway.
    """

    def __init__(self, inner: Any, spans: _Spans) -> None:
        self.list_topics = spans.timed("admin: metadata (list_topics)", inner.list_topics)
        self.describe_topics = spans.timed("admin: DescribeTopics (topic ids)", _answered(inner.describe_topics))
        self.describe_configs = spans.timed("admin: DescribeConfigs (retention.ms)", _answered(inner.describe_configs))


def _answered(call: Callable[..., dict[Any, Any]]) -> Callable[..., dict[Any, Any]]:
    def wait(*args: Any, **kwargs: Any) -> dict[Any, Any]:
        futures = call(*args, **kwargs)
        concurrent.futures.wait(list(futures.values()))
        return futures

    return wait


def _breakdown(
    conn: Any, admin: Any, cluster: str, *, store: Any, settings: Any, ours: Callable[[str], bool]
) -> dict[str, dict[str, float]]:
    """One sync and one measurement with each step timed: label -> seconds, plus the total and the rest."""
    from lagsched.adapters.lag_store import LagStore
    from lagsched.workflows import lag_monitor, topic_sync

    sync_spans = _Spans()
    with sync_spans.patched([(topic_sync, "apply_sync", "mysql: lock, plan and write the registry (apply_sync)")]):
        started = time.monotonic()
        topic_sync.sync_registry(conn, _TimedAdmin(admin, sync_spans), cluster, topic_filter=ours)
        sync_total = time.monotonic() - started
    measure_spans = _Spans()
    with measure_spans.patched(
        [
            (lag_monitor, "_load_registered", "mysql: registry read (topics, partitions, holders)"),
            (lag_monitor, "lost_records", "mysql: retention gaps"),
            (lag_monitor, "list_partitions", "admin: metadata (list_topics)"),
            (lag_monitor, "read_offsets", "admin: list_offsets (latest and earliest)"),
            (LagStore, "add_samples", "redis: offset samples (read and write windows)"),
            (LagStore, "read_lag_records", "redis: lag history read"),
            (LagStore, "add_lag_records", "redis: lag records write"),
        ]
    ):
        started = time.monotonic()
        lag_monitor.measure(cluster, mysql=conn, admin=admin, store=store, settings=settings, now=datetime.now(tz=UTC))
        measure_total = time.monotonic() - started
    return {
        "sync": _with_rest(sync_spans.seconds, sync_total),
        "measure": _with_rest(measure_spans.seconds, measure_total),
    }


def _with_rest(spans: dict[str, float], total: float) -> dict[str, float]:
    out = {k: round(v, 3) for k, v in sorted(spans.items(), key=lambda kv: -kv[1])}
    own = sum(v for k, v in spans.items() if not k.endswith(BACKGROUND))
    out["python: the rest (lag math, records, planning)"] = round(max(0.0, total - own), 3)
    out["total"] = round(total, 3)
    return out


# -- one section -----------------------------------------------------------------------------


def run(topics: int, partitions: int, runs: int, *, full_windows: bool = False) -> dict[str, Any]:
    """Create the topics, time sync and measure `runs` times each, clean up; the figures.

    ``full_windows``: before the timed runs, bring every partition to the state a busy pipeline
    lives in after two hours (`_fill_windows`): records in each partition, a committed offset
    behind them, and full sample windows and lag histories (`sample_window` of each).
    """
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lag_store import LagStore
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import PREFIX, redis_client
    from lagsched.connections import kafka_config, mysql_params, redis_params
    from lagsched.core.config import parse_settings
    from lagsched.workflows.lag_monitor import measure
    from lagsched.workflows.topic_sync import sync_registry
    from lagsched_dev.bench.claims import create_database, drop_database

    prefix = f"bench-lag-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:05d}" for i in range(topics)]
    cluster = prefix
    admin = admin_client(kafka_config())
    params = create_database(mysql_params())
    conn = connect(params)
    redis = redis_client(redis_params(), db=14)
    settings = parse_settings({})
    store = LagStore(redis, cluster, max_samples=settings.sample_window, max_age_s=settings.sample_ttl_s)
    print(f"== {topics:,} topics x {partitions} partitions ({prefix})", flush=True)
    try:
        started = time.monotonic()
        _create_topics(admin, names, partitions)
        create_s = time.monotonic() - started
        # A fresh client, as each DAG run has: the creating client's metadata cache answers
        # UNKNOWN_TOPIC for the newest topics until its refresh interval (5 minutes) passes.
        admin = admin_client(kafka_config())

        # The cluster's topic filter (a production setting, `ClusterConfig.manages`) keeps the
        # registry to the bench's topics: the sync still reads and describes every topic of the
        # broker, but a test topic of someone else deleted between the measurement's metadata
        # request and its list_offsets cannot fail the run (it did, at load average 8).
        def ours(name: str) -> bool:
            return name.startswith(prefix)

        started = time.monotonic()
        first = sync_registry(conn, admin, cluster, topic_filter=ours)
        first_sync_s = time.monotonic() - started
        if len([n for n in first.added if n.startswith(prefix)]) != topics:
            raise RuntimeError(f"the first sync registered {len(first.added)} topics, expected {topics}")
        # The first measurement finds no stored windows: reported apart, as the first sync is.
        started = time.monotonic()
        measure(cluster, mysql=conn, admin=admin, store=store, settings=settings, now=datetime.now(tz=UTC))
        first_measure_s = time.monotonic() - started
        print(f"   first sync {first_sync_s:.3f} s, first measure {first_measure_s:.3f} s", flush=True)
        if full_windows:
            started = time.monotonic()
            _fill_windows(conn, store, cluster, names, partitions=partitions, window=settings.sample_window)
            print(f"   filled every window to {settings.sample_window} samples in {time.monotonic() - started:.1f} s")
        syncs, measures, sync_cpu, measure_cpu = [], [], [], []
        for i in range(runs):
            if full_windows:  # untimed: the pipeline moves on between measurements, as a busy one does
                _move_on(conn, cluster, names, partitions=partitions)
            started, cpu = time.monotonic(), time.process_time()
            sync_registry(conn, admin, cluster, topic_filter=ours)
            syncs.append(time.monotonic() - started)
            sync_cpu.append(time.process_time() - cpu)
            started, cpu = time.monotonic(), time.process_time()
            summary = measure(
                cluster, mysql=conn, admin=admin, store=store, settings=settings, now=datetime.now(tz=UTC)
            )
            measures.append(time.monotonic() - started)
            measure_cpu.append(time.process_time() - cpu)
            measured = sum(t.partitions for t in summary.topics if t.topic.startswith(prefix))
            if measured != topics * partitions:
                raise RuntimeError(f"measured {measured} partitions, expected {topics * partitions}")
            print(
                f"   run {i + 1}/{runs}: sync {syncs[-1]:.3f} s (CPU {sync_cpu[-1]:.3f} s), "
                f"measure {measures[-1]:.3f} s (CPU {measure_cpu[-1]:.3f} s)",
                flush=True,
            )
        if full_windows:
            _move_on(conn, cluster, names, partitions=partitions)
        breakdown = _breakdown(conn, admin, cluster, store=store, settings=settings, ours=ours)
        print(f"   breakdown: {json.dumps(breakdown)}", flush=True)
    finally:
        for key in redis.scan_iter(f"{PREFIX}{cluster}:*", count=5000):
            redis.delete(key)
        redis.close()
        conn.close()
        drop_database(params)
        _delete_topics(admin, names)
    return {
        "topics": topics,
        "partitions": topics * partitions,
        "measure_s": round(max(measures), 3),
        "sync_s": round(max(syncs), 3),
        "runs": runs,
        "measure_median_s": round(statistics.median(measures), 3),
        "sync_median_s": round(statistics.median(syncs), 3),
        # This process's CPU (all its threads, librdkafka's included): what the code costs, apart
        # from how long it waited for a core on a shared machine.
        "measure_cpu_s": round(max(measure_cpu), 3),
        "sync_cpu_s": round(max(sync_cpu), 3),
        "first_sync_s": round(first_sync_s, 3),
        "first_measure_s": round(first_measure_s, 3),
        "create_topics_s": round(create_s, 1),
        "breakdown": breakdown,
    }


def _produce_to_every_partition(names: list[str], *, partitions: int, records: int, what: str) -> None:
    """``records`` one-byte records into every partition of ``names``, all delivered or an error."""
    from confluent_kafka import Producer

    from lagsched.connections import kafka_config

    producer = Producer({**kafka_config(), "linger.ms": 50, "queue.buffering.max.messages": 1_000_000, "acks": 1})
    for name in names:
        for partition in range(partitions):
            for _ in range(records):
                try:
                    producer.produce(name, value=b"x", partition=partition)
                except BufferError:  # the local queue is full: let it drain, then go on
                    producer.flush(60)
                    producer.produce(name, value=b"x", partition=partition)
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError(f"{what} were not all delivered")


def _move_on(conn: Any, cluster: str, names: list[str], *, partitions: int) -> None:
    """One record more in every partition and every committed offset one further: a busy pipeline
    between two measurements. Each measurement then appends a sample to every window and trims its
    oldest (a window whose offsets stood still would only extend its flat run), and no topic looks
    stopped (a stopped topic costs a warning line each per measurement)."""
    _produce_to_every_partition(names, partitions=partitions, records=1, what="the records between two measurements")
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions p JOIN topics t ON t.topic_id = p.topic_id"
            " SET p.committed_offset = p.committed_offset + 1 WHERE t.cluster = %s",
            (cluster,),
        )
    conn.commit()


def _fill_windows(conn: Any, store: Any, cluster: str, names: list[str], *, partitions: int, window: int) -> None:
    """Every partition as a busy pipeline leaves it after ``window`` measurements a minute apart.

    ``window`` records in each partition (offsets 0..window-1); a committed offset of half of
    that in MySQL; a latest-offset window of ``window`` samples (offset i at minute i) and a
    committed window of as many (offset i // 2), so no run of equal offsets shortens them; and
    ``window`` lag records per topic. Each timed measurement then reads, extends and rewrites
    windows of that size, as production does every minute once its windows are full.
    """
    from lagsched.adapters import lag_store
    from lagsched.adapters.lag_store import LagRecord
    from lagsched.core.lag import OffsetSample

    _produce_to_every_partition(names, partitions=partitions, records=window, what="records for the full windows")
    committed = window // 2 - 1
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions p JOIN topics t ON t.topic_id = p.topic_id SET p.committed_offset = %s"
            " WHERE t.cluster = %s",
            (committed, cluster),
        )
    conn.commit()
    now = time.time()
    at = [now - (window - i) * 60.0 for i in range(window)]
    pipe = store.client.pipeline(transaction=False)
    for name in names:
        for kind, step in ((store.latest_key, 1), (store.committed_key, 2)):
            fields = {}
            for partition in range(partitions):
                h, f = lag_store._location(kind(name, partition))  # the store's own layout
                fields[f] = lag_store._encode([OffsetSample(at[i], i // step) for i in range(window)])
            pipe.hset(h, mapping=fields)
            pipe.expire(h, int(store.max_age_s))
        if len(pipe) >= 2000:
            pipe.execute()
    pipe.execute()
    for i in range(window):
        lag = partitions * (window - committed)
        store.add_lag_records({n: LagRecord(at=at[i], lag=lag, lost=0) for n in names})


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.bench.lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--large-topics", type=int, default=10_000, help="the second section; 0 skips it")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--large-runs", type=int, default=5)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument(
        "--sections", default=",".join(SECTIONS),
        help="comma-separated sections to run (small, full, large); the others' figures already in --out are kept",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if not sections or set(sections) - set(SECTIONS):
        parser.error(f"--sections: some of {', '.join(SECTIONS)}")
    if not (1 <= args.topics <= 10_000 and 0 <= args.large_topics <= 10_000 and 1 <= args.partitions <= 100):
        parser.error("--topics 1..10000, --large-topics 0..10000, --partitions 1..100")
    if not (5 <= args.runs <= 100 and 5 <= args.large_runs <= 100):
        parser.error("--runs and --large-runs 5..100 (the figures are the worst of at least 5 runs)")
    from lagsched_dev.bench import use_local_stack_connections

    use_local_stack_connections()
    before = broker_limits()
    load = {"before": _load_average()}
    figures: dict[str, Any] = _kept_figures(Path(args.out), sections)
    small_topics, small_reason = fit_topics(args.topics, args.partitions)
    if small_reason is not None and {"small", "full"} & set(sections):
        raise SystemExit(f"the broker has no room for the first section: {small_reason}")
    if "small" in sections:
        figures |= run(small_topics, args.partitions, args.runs)
    if "full" in sections:
        if before is not None:
            _wait_for_files_to_close(before.open_files + 200)
        full = run(small_topics, args.partitions, args.runs, full_windows=True)
        figures |= {f"{k}_full": v for k, v in full.items()}
    if "large" in sections and args.large_topics:
        if before is not None:
            _wait_for_files_to_close(before.open_files + 200)
        figures |= _large_section(args.large_topics, args.partitions, args.large_runs)
    if "one_broker" in sections and args.large_topics:
        if before is not None:
            _wait_for_files_to_close(before.open_files + 200)
        figures |= _one_broker_section(args.large_topics, args.partitions, args.large_runs)
    figures.setdefault("measured_at", {}).update(
        dict.fromkeys(sections, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    )
    load["after"] = _load_average()
    figures["load_average"] = load
    figures["targets"] = {k: v for k, v in TARGETS.items() if k in figures}
    figures["met"] = _met(figures)
    print(json.dumps(figures, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    for key, ok in figures["met"].items():
        print(f"target {key} < {TARGETS[key]} s: {'met' if ok else 'NOT met'} ({figures[key]} s)")
    return 0


def _large_section(wanted: int, partitions: int, runs: int) -> dict[str, Any]:
    """The 100k section: on the stack's broker when it has room, else on a cluster of as many
    brokers as the per-process limits need (`brokers_for`), started for it and removed after."""
    from lagsched_dev.bench import scale_cluster
    from lagsched_dev.stack.config import load

    need = wanted * partitions
    topics, reason = fit_topics(wanted, partitions)
    if reason is None:
        return {f"{k}_100k": v for k, v in run(topics, partitions, runs).items()} | {
            "requested_partitions_100k": need, "brokers_100k": 1, "limited_by_100k": None,
        }  # fmt: skip
    count, per_broker = brokers_for(need)
    print(f"   {reason}", flush=True)
    print(f"   so the section runs on {count} brokers of up to {per_broker:,} partitions each", flush=True)
    cfg = load()
    started = time.monotonic()
    try:
        bootstrap = scale_cluster.up(cfg, count)
        print(f"   scale cluster up ({bootstrap}) in {time.monotonic() - started:.1f} s", flush=True)
        with _kafka_connection(bootstrap):
            large = run(wanted, partitions, runs)
    finally:
        scale_cluster.down(cfg, count)
    return {f"{k}_100k": v for k, v in large.items()} | {
        "requested_partitions_100k": need,
        "brokers_100k": count,
        "limited_by_100k": None,
        "why_brokers_100k": (
            f"one broker process holds at most ~{per_broker:,} partitions here (one descriptor each "
            f"under RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]:,}, two maps each "
            f"under vm.max_map_count, {LIMIT_SHARE:.0%} of each), so {need:,} partitions ran on "
            f"{count} brokers (node 1 also the KRaft controller), as a cluster of that size would"
        ),
    }


def _one_broker_section(wanted: int, partitions: int, runs: int) -> dict[str, Any]:
    """The 100k section's topics on the stack's one broker, as many as fit under its limits (the
    largest count one broker process holds here), with the time per partition (keys ``_one_broker``)."""
    topics, reason = fit_topics(wanted, partitions)
    limits = broker_limits()
    if topics == 0:
        raise SystemExit(f"the stack's broker has no room for the one_broker section: {reason}")
    figures = run(topics, partitions, runs)
    count = topics * partitions
    per_partition = {
        f"{k}_per_partition_us": round(figures[k] / count * 1e6, 2) for k in ("measure_s", "sync_s") if k in figures
    }
    return {f"{k}_one_broker": v for k, v in (figures | per_partition).items()} | {
        "requested_partitions_one_broker": wanted * partitions,
        "limited_by_one_broker": reason,
        "broker_limits_one_broker": None if limits is None else limits.describe(),
    }


#: Descriptors and maps a broker holds before any partition (jars, sockets, its own files).
BROKER_FILES_BASE = 400
BROKER_MAPS_BASE = 700
#: The scale cluster's heap per broker (``-Xmx``).
SCALE_BROKER_HEAP = 2**30


def brokers_for(partitions: int) -> tuple[int, int]:
    """Brokers needed so each stays under `LIMIT_SHARE` of this machine's per-process limits.

    A broker started from here inherits this process's ``RLIMIT_NOFILE``; ``vm.max_map_count`` is
    per process too. Returns (brokers, partitions one broker may hold).
    """
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    maps = int(Path("/proc/sys/vm/max_map_count").read_text())
    per_broker = min(
        int(files * LIMIT_SHARE) - BROKER_FILES_BASE,
        (int(maps * LIMIT_SHARE) - BROKER_MAPS_BASE) // 2,
        int((SCALE_BROKER_HEAP * LIMIT_SHARE - HEAP_BASE) / HEAP_PER_PARTITION),
    )
    return -(-partitions // per_broker), per_broker


@contextlib.contextmanager
def _kafka_connection(bootstrap: str) -> Iterator[None]:
    """The lagsched Kafka Connection pointed at `bootstrap` for the block (restored after)."""
    key = "AIRFLOW_CONN_LAGSCHED_KAFKA"
    before = os.environ.get(key)
    os.environ[key] = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def _kept_figures(out: Path, sections: Sequence[str]) -> dict[str, Any]:
    """The figures of the sections not run now, from an earlier ``out`` (none when all run)."""
    if set(sections) == set(SECTIONS) or not out.exists():
        return {}
    old = json.loads(out.read_text())

    def section(key: str) -> str:
        return "large" if key.endswith("_100k") else "full" if key.endswith("_full") else "small"

    shared = {"load_average", "targets", "met", "measured_at"}
    return {k: v for k, v in old.items() if k in shared or section(k) not in sections}


def _met(figures: dict[str, Any]) -> dict[str, bool]:
    """Each target against its figure; a ``_100k`` target counts only at the full 100,000 partitions."""
    met = {}
    for key, target in TARGETS.items():
        if key not in figures:
            continue
        full = not key.endswith("_100k") or figures.get("partitions_100k", 0) >= figures["requested_partitions_100k"]
        met[key] = bool(figures[key] < target and full)
    return met


if __name__ == "__main__":
    raise SystemExit(main())
