"""The Spark consumer under failure: SIGKILL at chosen points, a stale holder, two holders of one range,
unreachable services; on a local warehouse and on S3 (the stack's S3Proxy, through S3A).

Real slots (spark-submit of ``lagsched/jobs/consume.py``) on the real stack; the Iceberg table is read back
with pyiceberg, the snapshots' ``lagsched.ranges`` say which commit holds which range. Where a kill
or a stop lands is not left to luck alone: the test watches the claim table (``pending_*`` = a
batch recorded under the epoch, not committed) and the table's commits (the catalog row's
``metadata_location`` changes at each one), and after each kill it says, from that evidence, where
the process died.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import re
import signal
import socket
import threading
import time
import typing
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from consumer_support import (
    ConsumerHarness,
    Slot,
    assert_exactly_once,
    latest_offsets,
    offsets_by_topic,
    produce,
    value_of,
    wait_until,
)
from typed_support import assert_once_over_both, avro, dead_letters, framed, read_table

from lagsched.core.claims import PartitionRow

log = logging.getLogger(__name__)

#: Seed of the kill schedule; a failing draw is replayed with LAGSCHED_KILL_SEED=<seed>.
SEED = int(os.environ.get("LAGSCHED_KILL_SEED", "9"))
#: Kills per mode. One keeps `make test` within its time budget (each kill restarts a Spark session);
#: set LAGSCHED_KILL_ROUNDS=2 or more for a longer hunt with other seeds.
KILL_ROUNDS = int(os.environ.get("LAGSCHED_KILL_ROUNDS", "1"))
PARTITIONS = 4
#: The redo check's log line (adapters/sink.py).
_REDONE = re.compile(r"(\d+) redone range\(s\) were committed to \S+ already")


@pytest.fixture(params=["file", "s3a"])
def warehouse(request: pytest.FixtureRequest, consumer: ConsumerHarness) -> str:
    """The consumer's warehouse: a local folder, or a prefix of the stack's S3 bucket (S3Proxy)."""
    if request.param == "s3a":
        consumer.warehouse_uri = f"s3a://lagsched/tests/{uuid.uuid4().hex[:10]}"
    return consumer.warehouse


# ---------------------------------------------------------------------------------------- helpers


class SteadyProducer(threading.Thread):
    """Produces record i (key ``k<i>``, value ``value_of(i)``, header ``i``) to partition i % 4.

    At ``per_s`` records a second until stopped, so record i sits at offset i // 4 of partition
    i % 4 (idempotent producer: a retried request cannot reorder or duplicate records).
    """

    def __init__(
        self,
        kafka_config: dict[str, Any],
        topic: str,
        per_s: float,
        *,
        value: Callable[[int], bytes | None] = value_of,
        partitions: int = PARTITIONS,
    ) -> None:
        super().__init__(name=f"steady-producer-{topic}", daemon=True)
        self._config, self._kafka_topic, self._per_s = kafka_config, topic, per_s
        self._value, self._partitions = value, partitions
        self._stop_event = threading.Event()
        self.count = 0
        self.failed: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**self._config, "linger.ms": 20, "acks": "all", "enable.idempotence": True})

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                self.failed.append(str(err))

        start = time.monotonic()
        while not self._stop_event.is_set():
            due = int((time.monotonic() - start) * self._per_s)
            while self.count < due:
                i = self.count
                producer.produce(
                    self._kafka_topic, key=f"k{i}".encode(), value=self._value(i), headers=[("i", str(i).encode())],
                    partition=i % self._partitions, on_delivery=on_delivery,
                )  # fmt: skip
                self.count += 1
            producer.poll(0)
            self._stop_event.wait(0.05)
        if producer.flush(60) != 0:
            self.failed.append("flush left records undelivered")

    def stop(self) -> int:
        self._stop_event.set()
        self.join(timeout=90)
        assert not self.is_alive(), "the producer did not stop"
        assert not self.failed, f"the producer failed: {self.failed[:3]}"
        return self.count


def table_rows(consumer: ConsumerHarness, topic_id: str) -> tuple[datetime, dict[int, PartitionRow]]:
    """The topic's rows by partition (offset, pending batch, claim columns), and the database's time
    of the read, which judges the leases (``row.holder_at(now)``)."""
    from lagsched.adapters.mysql import connect, from_db

    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_id, committed_offset, pending_start, pending_end, claimed_by, claim_epoch,"
                " lease_expires_at, CURRENT_TIMESTAMP(6) FROM topic_partitions WHERE topic_id = %s",
                (topic_id,),
            )
            rows = cur.fetchall()
            now = from_db(rows[0][-1]) if rows else datetime.fromtimestamp(0, UTC)  # no row: nothing to judge
            return now, {
                int(p): PartitionRow(
                    topic_id,
                    int(p),
                    committed_offset=None if c is None else int(c),
                    pending_start=None if s is None else int(s),
                    pending_end=None if e is None else int(e),
                    claimed_by=None if h is None else str(h),
                    claim_epoch=int(ep),
                    lease_expires_at=None if lease is None else from_db(lease),
                )
                for p, c, s, e, h, ep, lease, _ in rows
            }
    finally:
        conn.close()


def stats_rows(stats: Path) -> list[dict[str, Any]]:
    """The stats file's lines (one file per slot name, appended to by each of its runs)."""
    if not stats.exists():
        return []
    return [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]


def started_count(stats: Path) -> int:
    return sum(1 for r in stats_rows(stats) if r.get("event") == "started")


def batch_count(stats: Path) -> int:
    return sum(1 for r in stats_rows(stats) if r.get("event") == "batch")


def read_sink(consumer: ConsumerHarness) -> Any:
    """The table as pyiceberg reads it (every column the checks need)."""
    return consumer.sink_table()


def table_ranges(consumer: ConsumerHarness) -> list[tuple[str | None, dict[tuple[str, int], tuple[int, int]]]]:
    """Each kept snapshot's (slot, ranges) from its summary, oldest first ([] before the table exists)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lagsched.adapters.lake_reader import load_table
    from lagsched.core.lake import RANGES_PROPERTY, decode_ranges

    try:
        table = load_table(consumer.lake, consumer.mysql)
    except NoSuchTableError:
        return []
    out = []
    for snap in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number):
        extra = snap.summary.additional_properties if snap.summary is not None else {}
        out.append((extra.get("lagsched.slot"), decode_ranges(extra.get(RANGES_PROPERTY))))
    return out


def committed_ranges(consumer: ConsumerHarness, topic: str) -> Counter[tuple[int, int, int]]:
    """How many kept snapshots hold each (partition, start, end) of ``topic``."""
    return Counter(
        (p, s, e) for _slot, ranges in table_ranges(consumer) for (t, p), (s, e) in ranges.items() if t == topic
    )


def metadata_location(consumer: ConsumerHarness) -> str | None:
    """The table's current metadata file as the catalog row says: it changes at every commit (cheap to poll)."""
    from lagsched.adapters.mysql import connect

    lake = consumer.lake
    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(
                    "SELECT metadata_location FROM iceberg_tables"
                    " WHERE catalog_name = %s AND table_namespace = %s AND table_name = %s",
                    (lake.catalog, lake.namespace, lake.table),
                )
            except Exception:  # noqa: BLE001 - the catalog's tables do not exist before the first slot
                return None
            row = cur.fetchone()
            return None if row is None else str(row[0])
    finally:
        conn.close()


def pending_of(consumer: ConsumerHarness, topic_id: str) -> dict[int, tuple[int, int]]:
    return {p: r.pending for p, r in table_rows(consumer, topic_id)[1].items() if r.pending is not None}


def live_holders(consumer: ConsumerHarness, topic_id: str) -> dict[int, str]:
    """Partition -> the slot holding it under a live lease (by the database's clock)."""
    now, rows = table_rows(consumer, topic_id)
    return {p: h for p, r in rows.items() if (h := r.holder_at(now)) is not None}


def in_table(consumer: ConsumerHarness, topic: str, pending: dict[int, tuple[int, int]]) -> int:
    """How many of the recorded ranges a kept snapshot holds."""
    held = committed_ranges(consumer, topic)
    return sum(1 for p, (s, e) in pending.items() if held[(p, s, e)])


def check_nothing_committed_ahead(table: Any, topic: str, rows: dict[int, PartitionRow]) -> None:
    """No duplicate in the sink, and every offset below each committed offset is in it."""
    seen = offsets_by_topic(table).get(topic, [])
    dupes = [k for k, n in Counter(seen).items() if n > 1]
    assert not dupes, f"{len(dupes)} (partition, offset) pair(s) twice in the sink, e.g. {sorted(dupes)[:5]}"
    by_partition: dict[int, set[int]] = defaultdict(set)
    for p, o in seen:
        by_partition[p].add(o)
    for p, row in rows.items():
        committed = row.committed_offset
        if committed is None:
            continue
        have = by_partition[p]
        assert committed <= max(have, default=-1) + 1, (
            f"partition {p}: committed offset {committed} is ahead of the sink (max {max(have, default=None)})"
        )
        missing = [o for o in range(committed) if o not in have]
        assert not missing, f"partition {p}: committed {committed} but offsets {missing[:5]}... are not in the sink"


def check_records(table: Any, topic: str) -> None:
    """Each row holds record i = 4 * offset + partition: its key, value and header."""
    wanted = table.filter(_kafka_topic_is(table, topic))
    for p, o, k, v, h in zip(
        *(wanted.column(c).to_pylist() for c in ("partition", "offset", "key", "value", "headers")), strict=True
    ):
        i = PARTITIONS * o + p
        assert (k, v, h) == (f"k{i}".encode(), value_of(i), [{"key": "i", "value": str(i).encode()}]), (p, o)


def _kafka_topic_is(table: Any, topic: str) -> Any:
    import pyarrow.compute as pc

    return pc.equal(table.column("topic").cast("string"), topic)


def free_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_running(slot: Slot, predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> float:
    """``wait_until`` that fails at once, with the log, if the slot exits while we wait."""

    def check() -> bool:
        if predicate():
            return True
        if slot.proc.poll() is not None:
            raise AssertionError(
                f"slot {slot.name} exited {slot.proc.returncode} while waiting for {what}:\n{slot.tail()}"
            )
        return False

    return wait_until(check, timeout, what, poll=poll)


# ------------------------------------------------------------------------------------- kill test


@dataclass
class Kill:
    """Where one SIGKILL landed, judged from the claim table and the Iceberg table right after it."""

    mode: str
    lease_s: int
    after_s: float
    batches_done: int
    pending: dict[int, tuple[int, int]]
    pending_in_table: int
    where: str
    fenced: int = 0  # rows the next run found still held by the dead run (live lease), handed back, claimed anew
    redid: int = 0  # recorded ranges the next run found in the table already (only their offsets committed)

    @property
    def mid_batch(self) -> bool:
        return self.where.startswith("mid-batch")


def judge_kill(
    consumer: ConsumerHarness, topic: str, pending: dict[int, tuple[int, int]], batches_done: int
) -> tuple[str, int]:
    """Where the run was when it died, and how many of the recorded ranges a table commit holds."""
    placed = in_table(consumer, topic, pending)
    if not pending:
        where = "before the first batch" if batches_done == 0 else "between batches"
    elif placed == len(pending):
        where = "mid-batch: in the table, offsets not committed"
    elif placed:
        where = "mid-batch: partly in the table (a bug: one commit holds a whole batch)"
    else:
        where = "mid-batch: recorded, not in the table"
    return where, placed


class RoutedTopic:
    """A second topic the killed slots read, routed to a typed table: record i is Avro of writer schema
    v1 or (from i = 200) v2, which adds a field; every 40th is poison (a wrong magic byte, an unknown
    schema id) and every 40th a tombstone. Record i sits at offset i // 2 of partition i % 2."""

    PARTITIONS = 2
    V1: typing.ClassVar[dict[str, Any]] = {
        "type": "record", "name": "Tick", "namespace": "t.kill",
        "fields": [{"name": "i", "type": "long"}, {"name": "label", "type": "string"}],
    }  # fmt: skip
    V2: typing.ClassVar[dict[str, Any]] = {
        **V1, "fields": [*V1["fields"], {"name": "extra", "type": ["null", "long"], "default": None}],
    }  # fmt: skip

    def __init__(self, topic: str) -> None:
        from lagsched.adapters.schema_registry import RegistryClient
        from lagsched.connections import schema_registry_params

        registry = RegistryClient(schema_registry_params())
        self.topic = topic
        self.v1 = registry.register(f"{topic}-value", json.dumps(self.V1))
        self.v2 = registry.register(f"{topic}-value", json.dumps(self.V2))
        self.routes = json.dumps([{"topics": [topic], "value_format": "avro"}])

    def value(self, i: int) -> bytes | None:
        if i % 40 == 13:
            return None
        if i % 40 == 7:
            return framed(self.v1, avro(self.V1, {"i": i, "label": "x"}), magic=b"\x02")
        if i % 40 == 27:
            return framed(self.v2 + 1_000_000, avro(self.V1, {"i": i, "label": "x"}))
        if i < 200:
            return framed(self.v1, avro(self.V1, {"i": i, "label": f"l{i}"}))
        return framed(self.v2, avro(self.V2, {"i": i, "label": f"l{i}", "extra": i * 2}))

    def check(self, consumer: ConsumerHarness, latest: dict[int, int]) -> dict[str, int]:
        """Exactly once over the typed and the dead-letter table, each record where it belongs."""
        from lagsched.core.routing import table_for_topic

        typed = read_table(consumer, f"lagsched.{consumer.lake.namespace}.{table_for_topic(self.topic)}")
        rows = typed.scan().to_arrow()
        dead = dead_letters(consumer)
        assert_once_over_both(rows, dead, self.topic, latest)
        produced = sum(latest.values())
        index = [
            o * 2 + p
            for p, o in zip(
                rows.column("_kafka_partition").to_pylist(), rows.column("_kafka_offset").to_pylist(), strict=True
            )
        ]
        decoded = dict(zip(index, rows.column("i").to_pylist(), strict=True))
        extra = dict(zip(index, rows.column("extra").to_pylist(), strict=True))
        for i in range(produced):
            if i % 40 in (7, 27):
                continue
            assert decoded[i] == (None if i % 40 == 13 else i), i
            assert extra[i] == (i * 2 if i >= 200 and i % 40 != 13 else None), i
        mine = [
            r
            for t, r in zip(dead.column("topic").to_pylist(), dead.column("reason").to_pylist(), strict=True)
            if t == self.topic
        ]
        assert len(mine) == sum(1 for i in range(produced) if i % 40 in (7, 27)), len(mine)
        assert len(typed.schemas()) == (2 if produced > 200 else 1)
        return {"typed_rows": rows.num_rows, "dead_letters": len(mine)}


#: Where each kill aims; the schedule holds each KILL_ROUNDS times, shuffled by the seed.
KILL_MODES = ("early", "first_batch", "mid_write", "after_table_commit", "later")


@pytest.mark.timeout(1500)  # each restart starts a Spark session: 6 s idle, up to 45 s on a loaded 2-core box
def test_sigkill_at_chosen_points_while_records_arrive_leaves_each_record_once(
    consumer: ConsumerHarness, warehouse: str, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    rng = random.Random(SEED)
    topic = new_topic(PARTITIONS)
    topic_id = consumer.register(topic)
    # A second topic in the same batches, routed to a typed table (and poison to the dead-letter table).
    routed = RoutedTopic(new_topic(RoutedTopic.PARTITIONS))
    consumer.register(routed.topic)
    stats = consumer.workdir / "k.stats"
    producer = SteadyProducer(kafka_config, topic, per_s=100)
    typed_producer = SteadyProducer(
        kafka_config, routed.topic, per_s=20, value=routed.value, partitions=RoutedTopic.PARTITIONS
    )
    producer.start()
    typed_producer.start()
    schedule = [m for m in KILL_MODES for _ in range(KILL_ROUNDS)]
    rng.shuffle(schedule)
    kills: list[Kill] = []
    t_test = time.monotonic()
    try:
        for mode in schedule:
            # 90 s: the restart (a Spark start, up to ~45 s on a busy box) finds its rows still held under the dead
            # run's lease; it hands them back and claims them under a new epoch, then redoes the recorded batch.
            lease = rng.choice((6, 90))
            started_before, batches_before = started_count(stats), batch_count(stats)
            t0 = time.monotonic()
            slot = consumer.start("k", "--max-records", "400", "--lease-s", str(lease), "--routes", routed.routes)
            if mode == "early":  # before Spark is ready: nothing claimed yet, or just claimed
                time.sleep(rng.uniform(0.5, 4.0))
            else:
                wait_running(slot, lambda: started_count(stats) > started_before, 240, "Spark to start")
                if mode == "first_batch":  # claiming, planning, recording, or the Spark job starting
                    time.sleep(rng.uniform(0.0, 1.5))
                elif mode == "mid_write":
                    # A written batch recorded for its commit (the harness's --commit-interval-s 0 commits
                    # each while the next one's tasks read and write): killed in the table commit, or
                    # between it and the offset commit, with the next batch's files being written.
                    wait_running(
                        slot, lambda: bool(pending_of(consumer, topic_id)), 240, "a batch to be recorded", poll=0.01
                    )
                    time.sleep(rng.uniform(0.0, 0.3))
                elif mode == "after_table_commit":
                    _freeze_after_table_commit(consumer, slot, topic, topic_id)
                elif mode == "later":  # after a batch or two: between batches or in a later one
                    done = rng.choice((1, 2))
                    wait_running(slot, lambda: batch_count(stats) - batches_before >= done, 240, f"{done} batch(es)")
                    time.sleep(rng.uniform(0.0, 3.0))
            slot.kill()
            after = time.monotonic() - t0
            _, rows = table_rows(consumer, topic_id)
            pending = {p: r.pending for p, r in rows.items() if r.pending is not None}
            where, placed = judge_kill(consumer, topic, pending, batch_count(stats) - batches_before)
            kill = Kill(mode, lease, round(after, 1), batch_count(stats) - batches_before, pending, placed, where)
            kills.append(kill)
            log.warning("kill %d (%s) after %.1f s: %s; pending %s", len(kills), mode, after, where, pending)
            check_nothing_committed_ahead(read_sink(consumer), topic, rows)
    finally:
        produced = producer.stop()
        typed_produced = typed_producer.stop()
    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    assert sum(latest.values()) == produced
    typed_latest = latest_offsets(kafka_config, routed.topic, RoutedTopic.PARTITIONS)
    assert sum(typed_latest.values()) == typed_produced
    drain_before = batch_count(stats)
    consumer.run("k", "--exit-when-idle", "--max-records", "20000", "--routes", routed.routes, timeout=400)
    typed_figures = routed.check(consumer, typed_latest)
    _note_restarts(consumer, kills)

    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    _, rows = table_rows(consumer, topic_id)
    assert {p: r.committed_offset for p, r in rows.items()} == latest
    assert all(r.pending is None for r in rows.values())
    assert table.num_rows == produced
    # The snapshots' recorded ranges: no range twice, and together every committed offset once.
    ranges = committed_ranges(consumer, topic)
    assert all(n == 1 for n in ranges.values()), [r for r, n in ranges.items() if n > 1]
    for p in range(PARTITIONS):
        spans = sorted((s, e) for q, s, e in ranges if q == p)
        assert spans[0][0] == 0 and spans[-1][1] == latest[p], (p, spans[:3], spans[-3:])
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), f"partition {p}: gaps or overlaps"

    summary = {
        "seed": SEED,
        "warehouse": warehouse.split(":", 1)[0],
        "kills": len(kills),
        "records": produced,
        "where": Counter(k.where for k in kills),
        "mid_batch": sum(k.mid_batch for k in kills),
        "restarts_that_fenced_live_rows": sum(k.fenced > 0 for k in kills),
        "redone_ranges_found_in_table": sum(k.redid for k in kills),
        "snapshots": len(table_ranges(consumer)),
        "drain_batches": batch_count(stats) - drain_before,
        "routed_topic": typed_figures,
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\nkill test:", json.dumps(summary), *(f"\n  {k}" for k in kills))
    assert len(kills) == len(schedule)
    assert not any("partly" in k.where for k in kills)
    assert sum(k.mid_batch for k in kills) >= 2, "the schedule aims at batches in flight; none was hit"
    between = [k for k in kills if k.where == "mid-batch: in the table, offsets not committed"]
    assert between, "never caught a batch between its table commit and its offset commit"
    # Each range a kill left in the table with its offsets not committed was found there by a later
    # run (the next one, or a later one if the next was killed before its redo), not written again.
    left_in_table = {(p, r) for k in between for p, r in k.pending.items()}
    assert sum(k.redid for k in kills) >= len(left_in_table), kills


def _freeze_after_table_commit(
    consumer: ConsumerHarness, slot: Slot, topic: str, topic_id: str, *, timeout: float = 240
) -> None:
    """Freeze the slot between a batch's table commit and its offset commit (the caller kills it).

    The catalog row's metadata location changes at each table commit; the slot is SIGSTOPped the
    moment it does and judged while frozen: if its recorded ranges are in the table and still
    recorded (not committed) in MySQL, it is where it should be. If the offset commit won the race,
    it runs on and the next batch is watched.
    """
    deadline = time.monotonic() + timeout
    last = metadata_location(consumer)
    while time.monotonic() < deadline:
        if slot.proc.poll() is not None:
            raise AssertionError(f"slot exited {slot.proc.returncode}:\n{slot.tail()}")
        now = metadata_location(consumer)
        if now == last:
            time.sleep(0.002)
            continue
        slot.signal(signal.SIGSTOP)
        pending = pending_of(consumer, topic_id)
        if pending and in_table(consumer, topic, pending) == len(pending):
            return
        last = metadata_location(consumer)
        slot.signal(signal.SIGCONT)
    log.warning("never caught a batch between its table commit and its offset commit within %.0f s", timeout)


def _note_restarts(consumer: ConsumerHarness, kills: list[Kill]) -> None:
    """From each restart's log: rows it found still held by the dead run, ranges it found in the table."""
    runs = [s for s in consumer.slots if s.name == "k"]
    for kill, nxt in zip(kills, runs[1:], strict=True):
        text = nxt.log.read_text(errors="replace")
        kill.redid = sum(int(n) for n in _REDONE.findall(text))
        held = re.search(r"an earlier run of this slot held (\d+) row", text)
        kill.fenced = int(held[1]) if held else 0


# ------------------------------------------------------------------------------ stale-holder tests


def rows_locked(consumer: ConsumerHarness, topic_id: str) -> bool:
    """Whether a transaction holds a lock on one of the topic's rows (a frozen process mid-statement)."""
    from lagsched.adapters.mysql import connect

    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM topic_partitions WHERE topic_id = %s", (topic_id,))
            (total,) = cur.fetchone()
            cur.execute(
                "SELECT partition_id FROM topic_partitions WHERE topic_id = %s FOR UPDATE SKIP LOCKED", (topic_id,)
            )
            free = len(cur.fetchall())
        conn.rollback()
        return free < int(total)
    finally:
        conn.close()


def local_data_files(consumer: ConsumerHarness) -> int:
    """Parquet files under a ``file://`` warehouse, committed or only written."""
    root = consumer.warehouse.removeprefix("file://")
    return sum(1 for _ in Path(root).rglob("*.parquet")) if os.path.isdir(root) else 0


def freeze_with_recorded_batch(
    consumer: ConsumerHarness,
    slot: Slot,
    slot_id: str,
    topic: str,
    topic_id: str,
    *,
    writing: Callable[[], bool] = lambda: True,
    tries: int = 40,
) -> dict[int, tuple[int, int]]:
    """SIGSTOP ``slot`` in the write of a batch: every row it holds recorded, no table commit holding
    them, no row lock held (a process frozen mid-transaction would hold its rows' locks until the
    server drops its connection, and nobody could claim them). ``writing`` can ask for more evidence
    (its data files appearing). Returns the recorded ranges."""

    def recorded() -> dict[int, tuple[int, int]]:
        now, rows = table_rows(consumer, topic_id)
        held = {p: r for p, r in rows.items() if r.holder_at(now) == slot_id}
        if not held or any(r.pending is None for r in held.values()):
            return {}
        return {p: r.pending for p, r in held.items() if r.pending is not None}

    for _ in range(tries):
        wait_running(slot, lambda: bool(recorded()) and writing(), 120, "a batch recorded by the slot", poll=0.005)
        slot.signal(signal.SIGSTOP)
        stale = recorded()
        if stale and in_table(consumer, topic, stale) == 0 and not rows_locked(consumer, topic_id):
            return stale
        slot.signal(signal.SIGCONT)  # committed already, or mid-statement: catch the next chance
        time.sleep(0.05)
    raise AssertionError("never froze the slot with a recorded batch not yet in the table")


# On a local warehouse the same claims are made by the two-holders test below, on one run of slots.
@pytest.mark.parametrize("warehouse", ["s3a"], indirect=True)
def test_stale_holder_resumed_after_its_rows_moved_has_its_commit_refused_and_exits_lost(
    consumer: ConsumerHarness, warehouse: str, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    from lagsched.adapters.slots import slot_id_for

    topic = new_topic(PARTITIONS)
    produce(kafka_config, topic, 8_000, partitions=PARTITIONS)
    topic_id = consumer.register(topic)
    a_stats = consumer.workdir / "a.stats"
    slot_a, slot_b = slot_id_for("a"), slot_id_for("b")
    a = consumer.start("a", "--max-records", "250")  # 8 batches of 4 x 250
    wait_running(a, lambda: batch_count(a_stats) >= 1, 300, "A's first batch")

    # Freeze A with a batch recorded and not yet committed to the table.
    stale = freeze_with_recorded_batch(consumer, a, slot_a, topic, topic_id)
    t_stop = time.monotonic()
    batches_before_stop = batch_count(a_stats)

    # Past its lease (and three heartbeats) A is dead to the others.
    expired_s = wait_until(lambda: not live_holders(consumer, topic_id), 60, "A's leases to run out")
    b = consumer.start("b", "--exit-when-idle", "--max-records", "250")
    t_b = time.monotonic()

    def b_is_past_stale() -> bool:
        _, rows = table_rows(consumer, topic_id)
        return all((rows[p].committed_offset or 0) > end for p, (_, end) in stale.items())

    wait_running(b, b_is_past_stale, 300, "B to consume past A's recorded batch", poll=0.2)
    b_past_s = time.monotonic() - t_b
    a.signal(signal.SIGCONT)
    t_cont = time.monotonic()
    code_a = a.wait(180)
    a_exit_s = time.monotonic() - t_cont
    a_log = a.log.read_text(errors="replace")
    assert code_a == 3, f"the stale holder exited {code_a}, not 3:\n{a.tail()}"
    assert "lost the claim" in a_log
    # The table itself refused A's commit: B had committed records of the same ranges since A's mark.
    assert "were committed by another holder" in a_log, a.tail()
    code_b = b.wait(300)
    assert code_b == 0, f"B exited {code_b}:\n{b.tail()}"

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    _, rows = table_rows(consumer, topic_id)
    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    assert {p: r.committed_offset for p, r in rows.items()} == latest
    # A committed nothing after it was stopped; each stale range is in exactly one snapshot, B's.
    late = [r for r in stats_rows(a_stats) if r.get("event") == "batch"][batches_before_stop:]
    assert late == [], late
    stopped = stats_rows(a_stats)[-1]
    assert (stopped["event"], stopped["reason"], stopped["records"]) == (
        "stopped",
        "lost",
        250 * 4 * batches_before_stop,
    )
    holders = {
        (p, s, e): slot for slot, ranges in table_ranges(consumer) for (t, p), (s, e) in ranges.items() if t == topic
    }
    assert set(committed_ranges(consumer, topic).values()) == {1}  # no range twice
    assert all(holders[(p, s, e)] == slot_b for p, (s, e) in stale.items()), holders
    summary = {
        "warehouse": warehouse.split(":", 1)[0],
        "stale_ranges": stale,
        "a_frozen_s": round(t_cont - t_stop, 1),
        "a_leases_ran_out_after_s": round(expired_s, 1),
        "b_start_to_past_stale_s": round(b_past_s, 1),
        "a_exit_after_sigcont_s": round(a_exit_s, 1),
        "a_refusal": next((ln for ln in a_log.splitlines() if "committed by another holder" in ln), "")[:300],
    }
    print("\nstale-holder test:", json.dumps(summary))


def test_two_holders_redoing_one_recorded_range_commit_it_once_and_the_stale_holder_is_refused_and_exits_lost(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """[two holders] A records a batch and stops answering; Y claims the rows and redoes it, frozen
    before its table commit; its lease runs out and Z redoes the same range and commits it; Y, resumed,
    is refused and exits 3. [stale holder] A, frozen all along (the stale-holder test's first slot, on a
    local warehouse), is resumed after its rows moved: its commit is refused, it exits 3 as lost.
    One run of three slots for both claims (they took five Spark starts as two tests)."""
    from lagsched.adapters.slots import slot_id_for

    topic = new_topic(PARTITIONS)
    produce(kafka_config, topic, 8_000, partitions=PARTITIONS)
    topic_id = consumer.register(topic)
    a_stats = consumer.workdir / "a.stats"
    slot_a, slot_z = slot_id_for("a"), slot_id_for("z")
    a = consumer.start("a", "--max-records", "250")  # 8 batches of 4 x 250
    wait_running(a, lambda: batch_count(a_stats) >= 1, 300, "[stale holder] A's first batch")

    # Freeze A with a batch recorded and not yet committed to the table.
    recorded = freeze_with_recorded_batch(consumer, a, slot_a, topic, topic_id)
    t_stop = time.monotonic()
    batches_before_stop = batch_count(a_stats)
    # Past its lease (and three heartbeats) A is dead to the others.
    expired_s = wait_until(lambda: not live_holders(consumer, topic_id), 60, "[stale holder] A's leases to run out")

    files_before = local_data_files(consumer)
    y = consumer.start("y", "--max-records", "250")
    slot_y = slot_id_for("y")
    # Y's first batch is the redo of A's range (recorded ranges go first): freeze it once its data
    # files are written, before its table commit.
    redo = freeze_with_recorded_batch(
        consumer, y, slot_y, topic, topic_id, writing=lambda: local_data_files(consumer) > files_before
    )
    assert redo == recorded, f"[two holders] Y's first batch is not A's recorded range: {redo} != {recorded}"
    wait_until(lambda: not live_holders(consumer, topic_id), 60, "[two holders] Y's leases to run out")
    z = consumer.start("z", "--exit-when-idle", "--max-records", "250")
    t_z = time.monotonic()
    assert z.wait(300) == 0, f"[two holders, stale holder] Z: {z.tail()}"
    z_done_s = time.monotonic() - t_z
    _, rows = table_rows(consumer, topic_id)
    assert all((rows[p].committed_offset or 0) > end for p, (_, end) in recorded.items()), (
        f"[stale holder] Z did not consume past A's recorded batch {recorded}: {rows}"
    )

    # [stale holder] A resumed: the table itself refuses A's commit (Z committed records of the same
    # ranges since A's mark).
    a.signal(signal.SIGCONT)
    t_cont = time.monotonic()
    code_a = a.wait(180)
    a_exit_s = time.monotonic() - t_cont
    a_log = a.log.read_text(errors="replace")
    assert code_a == 3, f"[stale holder] the stale holder exited {code_a}, not 3:\n{a.tail()}"
    assert "lost the claim" in a_log, f"[stale holder] {a.tail()}"
    assert "were committed by another holder" in a_log, f"[stale holder] {a.tail()}"
    # [two holders] Y resumed: refused the same way.
    y.signal(signal.SIGCONT)
    code_y = y.wait(180)
    y_log = y.log.read_text(errors="replace")
    assert code_y == 3, f"[two holders] Y exited {code_y}:\n{y.tail()}"
    assert "were committed by another holder" in y_log, f"[two holders] {y.tail()}"

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    _, rows = table_rows(consumer, topic_id)
    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    assert {p: r.committed_offset for p, r in rows.items()} == latest, "[stale holder]"
    # A committed nothing after it was stopped; each recorded range is in exactly one snapshot, Z's.
    late = [r for r in stats_rows(a_stats) if r.get("event") == "batch"][batches_before_stop:]
    assert late == [], f"[stale holder] {late}"
    stopped = stats_rows(a_stats)[-1]
    assert (stopped["event"], stopped["reason"], stopped["records"]) == (
        "stopped",
        "lost",
        250 * 4 * batches_before_stop,
    ), f"[stale holder] {stopped}"
    ranges = committed_ranges(consumer, topic)
    assert set(ranges.values()) == {1}, f"[stale holder] a range twice: {ranges}"
    assert all(ranges[(p, s, e)] == 1 for p, (s, e) in recorded.items()), f"[two holders] {ranges}"
    holders = {(p, s, e): slot for slot, rs in table_ranges(consumer) for (t, p), (s, e) in rs.items() if t == topic}
    assert all(holders[(p, s, e)] == slot_z for p, (s, e) in recorded.items()), f"[two holders, stale holder] {holders}"
    summary = {
        "range": recorded,
        "committed_by": "z",
        "y_exit": code_y,
        "a_frozen_s": round(t_cont - t_stop, 1),
        "a_leases_ran_out_after_s": round(expired_s, 1),
        "z_start_to_exit_s": round(z_done_s, 1),
        "a_exit_after_sigcont_s": round(a_exit_s, 1),
        "a_refusal": next((ln for ln in a_log.splitlines() if "committed by another holder" in ln), "")[:300],
    }
    print("\ntwo redoing holders and a stale one:", json.dumps(summary))


@pytest.mark.timeout(900)
def test_concurrent_slots_commit_to_one_table_each_batch_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Three slots on two topics of one cluster commit to its one table at once: Iceberg's retries rebase
    each commit over the others' (other partitions never conflict), nothing dropped or doubled."""
    topics = [new_topic(3), new_topic(3)]
    for t in topics:
        produce(kafka_config, t, 9_000, partitions=3)
        consumer.register(t, linker_workers=3)
    slots = [consumer.start(f"s{i}", "--exit-when-idle", "--max-records", "200") for i in range(3)]
    for s in slots:
        assert s.wait(400) == 0, s.tail()
    table = read_sink(consumer)
    for t in topics:
        latest = latest_offsets(kafka_config, t, 3)
        assert_exactly_once(table, t, latest)
        ranges = committed_ranges(consumer, t)
        assert all(n == 1 for n in ranges.values())
        for p in range(3):
            spans = sorted((s, e) for q, s, e in ranges if q == p)
            assert spans[0][0] == 0 and spans[-1][1] == latest[p]
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), (t, p, spans)
    committers = Counter(slot for slot, ranges in table_ranges(consumer) if ranges)
    assert len(committers) >= 2, f"the slots did not share the work: {committers}"
    retried = sum(len(re.findall(r"Retrying task after failure", s.log.read_text(errors="replace"))) for s in slots)
    print("\nconcurrent slots:", json.dumps({"commits_by_slot": dict(committers), "commit_retries_logged": retried}))


# ------------------------------------------------------------------------------------ clear errors

_CONN = {
    "mysql": "AIRFLOW_CONN_LAGSCHED_MYSQL",
    "redis": "AIRFLOW_CONN_LAGSCHED_REDIS",
    "kafka": "AIRFLOW_CONN_LAGSCHED_KAFKA",
}
#: Seconds from the Spark session being ready to the exit. A refused connection is immediate for
#: MySQL and Redis; Kafka's requests time out (10 s each) and are retried a few times.
_BOUND_S = {"mysql": 30.0, "redis": 30.0, "kafka": 90.0}


@pytest.mark.parametrize(
    "service",
    ["mysql", "redis", "kafka"],
)
def test_unreachable_service_ends_the_run_with_exit_1_and_a_message_naming_it(
    service: str, consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    topic = new_topic(1)
    produce(kafka_config, topic, 10, partitions=1)
    topic_id = consumer.register(topic)  # with the good Connection: the run has a row to claim and read
    env = consumer.env()
    conn = json.loads(env[_CONN[service]])
    if service == "kafka":
        conn["extra"]["bootstrap.servers"] = f"127.0.0.1:{free_port()}"
    else:
        conn["port"] = free_port()
    env[_CONN[service]] = json.dumps(conn)
    stats = consumer.workdir / f"bad-{service}.stats"
    # A budget, not --exit-when-idle: a production run has none, and a run that shrugs the failure
    # off must still end (with exit 0, failing the test) rather than hang it.
    budget = _BOUND_S[service] + 10
    slot = consumer.start(f"bad-{service}", "--budget-s", str(budget), env=env)
    t0 = time.monotonic()
    wait_until(lambda: started_count(stats) > 0 or slot.proc.poll() is not None, 240, "Spark to start", poll=0.05)
    t_ready = time.monotonic()
    code = slot.wait(budget + 120)
    after_ready = time.monotonic() - t_ready
    text = slot.log.read_text(errors="replace")
    failed = [ln for ln in text.splitlines() if ln.startswith("lagsched consume: FAILED")]
    print(
        f"\n{service} unreachable: exit {code} {time.monotonic() - t0:.1f} s after start, "
        f"{after_ready:.1f} s after Spark was ready: {failed}"
    )
    assert all(c is None for c in consumer.committed(topic_id).values())  # nothing consumed, nothing committed
    assert code == 1, f"exit {code}:\n{slot.tail()}"
    assert failed, f"no failure line:\n{slot.tail()}"
    assert service in failed[-1].lower(), failed[-1]
    assert after_ready < _BOUND_S[service], f"took {after_ready:.0f} s after Spark was ready"
