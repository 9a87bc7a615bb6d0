"""The Spark consumer under failure: SIGKILL at chosen points, a stale holder, two holders of one range,
slots committing to one table at once, unreachable services; on a local warehouse and on S3 (the
stack's S3Proxy, through S3A).

Real slots (spark-submit of ``jobs/consume.py``) on the real stack; the Iceberg table is read back
with pyiceberg, and the snapshots' ``lagsched.ranges`` say which commit holds which range. Where a
kill lands is not left to luck: the test watches the claim table (``pending_*`` = a batch recorded
under the epoch, not committed), the slot's stats file (a line per finished batch) and the table's
commits (the catalog row's ``metadata_location`` changes at each one), SIGSTOPs the slot's process
group at the moment it wants, confirms from that evidence that the frozen slot is where it should
be (or lets it run on to the next chance), then SIGKILLs it. After each kill it judges again, from
the state the dead run left, where it died.
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
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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

log = logging.getLogger(__name__)

#: Seed of the kill schedule; a failing draw is replayed with LAGSCHED_KILL_SEED=<seed>.
SEED = int(os.environ.get("LAGSCHED_KILL_SEED", "9"))
#: Kills per mode. One keeps `make test` within its time budget (each kill restarts a Spark session);
#: set LAGSCHED_KILL_ROUNDS=2 or more for a longer hunt with other seeds.
KILL_ROUNDS = int(os.environ.get("LAGSCHED_KILL_ROUNDS", "1"))
PARTITIONS = 4
#: The redo check's log line (adapters/sink.py).
_REDONE = re.compile(r"(\d+) redone range\(s\) were committed to \S+ already")
#: The table's refusal of a batch (adapters/sink.py, SinkConflictError).
_REFUSED = "were committed by another holder"


@pytest.fixture(params=["file", "s3a"])
def warehouse(request: pytest.FixtureRequest, consumer: ConsumerHarness) -> str:
    """The consumer's warehouse: a local folder, or a prefix of the stack's S3 bucket (S3Proxy).

    The s3a variant fails (never skips) when the stack's S3 API server is not configured or down.
    """
    if request.param == "s3a":
        endpoint = os.environ.get("LAGSCHED_S3_ENDPOINT")
        if not endpoint:
            pytest.fail("LAGSCHED_S3_ENDPOINT is not set: the stack has no S3 API server (S3Proxy)", pytrace=False)
        where = urlsplit(endpoint)
        try:
            socket.create_connection((where.hostname or "127.0.0.1", where.port or 80), timeout=5).close()
        except OSError as exc:
            pytest.fail(f"the stack's S3 API server at {endpoint} is down: {exc}", pytrace=False)
        consumer.warehouse_uri = f"s3a://lagsched/tests/{uuid.uuid4().hex[:10]}"
    return consumer.warehouse


# ---------------------------------------------------------------------------------------- helpers


class SteadyProducer(threading.Thread):
    """Produces record i (key ``k<i>``, value ``value_of(i)``, header ``i``) to partition i % 4.

    At ``per_s`` records a second until stopped, so record i sits at offset i // 4 of partition
    i % 4 (idempotent producer: a retried request cannot reorder or duplicate records).
    """

    def __init__(self, kafka_config: dict[str, Any], topic: str, per_s: float) -> None:
        super().__init__(name="steady-producer", daemon=True)
        self._config, self._topic, self._per_s = kafka_config, topic, per_s
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
                    self._topic, key=f"k{i}".encode(), value=value_of(i), headers=[("i", str(i).encode())],
                    partition=i % PARTITIONS, on_delivery=on_delivery,
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


@dataclass(frozen=True)
class Row:
    """One ``topic_partitions`` row as the test sees it."""

    committed: int | None
    pending: tuple[int, int] | None
    holder: str | None
    epoch: int
    live: bool


def table_rows(consumer: ConsumerHarness, topic_id: str) -> dict[int, Row]:
    from lagsched.adapters.mysql import connect

    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT partition_id, committed_offset, pending_start, pending_end, claimed_by, claim_epoch,"
                " COALESCE(lease_expires_at > CURRENT_TIMESTAMP(6), 0)"
                " FROM topic_partitions WHERE topic_id = %s",
                (topic_id,),
            )
            return {
                int(p): Row(
                    None if c is None else int(c),
                    None if e is None else (int(s), int(e)),
                    None if h is None else str(h),
                    int(ep),
                    bool(live),
                )
                for p, c, s, e, h, ep, live in cur.fetchall()
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
    """The table as pyiceberg reads it, every column (empty before a slot created the catalog or table)."""
    if metadata_location(consumer) is None:
        import pyarrow as pa

        return pa.table({c: [] for c in ("topic", "partition", "offset")})
    return consumer.sink_table()


def _load_table(consumer: ConsumerHarness) -> Any:
    """The pyiceberg table, or None before any slot created it."""
    from pyiceberg.exceptions import NoSuchTableError

    from lagsched.adapters.lake_reader import load_table

    if metadata_location(consumer) is None:  # no catalog tables yet, or no table in them
        return None
    try:
        return load_table(consumer.lake, consumer.mysql)
    except NoSuchTableError:
        return None


def table_snapshots(consumer: ConsumerHarness) -> list[tuple[int, dict[str, str]]]:
    """Each kept snapshot's (id, summary properties), oldest first ([] before the table exists)."""
    table = _load_table(consumer)
    if table is None:
        return []
    return [
        (int(s.snapshot_id), dict(s.summary.additional_properties) if s.summary is not None else {})
        for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    ]


def table_ranges(consumer: ConsumerHarness) -> list[tuple[str | None, dict[tuple[str, int], tuple[int, int]]]]:
    """Each kept snapshot's (slot, ranges) from its summary, oldest first."""
    from lagsched.core.lake import RANGES_PROPERTY, decode_ranges

    return [(extra.get("lagsched.slot"), decode_ranges(extra.get(RANGES_PROPERTY))) for _, extra in
            table_snapshots(consumer)]  # fmt: skip


def committed_ranges(consumer: ConsumerHarness, topic: str) -> Counter[tuple[int, int, int]]:
    """How many kept snapshots hold each (partition, start, end) of ``topic``."""
    return Counter(
        (p, s, e) for _slot, ranges in table_ranges(consumer) for (t, p), (s, e) in ranges.items() if t == topic
    )


def check_ranges_tile(consumer: ConsumerHarness, topic: str, committed: dict[int, int | None]) -> int:
    """The snapshots' recorded ranges of ``topic``: none twice, and per partition they tile
    ``[0, committed)`` with no gap and no overlap. Returns how many ranges there are."""
    ranges = committed_ranges(consumer, topic)
    twice = [r for r, n in ranges.items() if n > 1]
    assert not twice, f"{topic}: range(s) committed to the table more than once: {twice}"
    for p, end in committed.items():
        spans = sorted((s, e) for q, s, e in ranges if q == p)
        if not end:
            assert not spans, (topic, p, spans)
            continue
        assert spans and spans[0][0] == 0 and spans[-1][1] == end, (topic, p, end, spans[:3], spans[-3:])
        bad = [(a, b) for a, b in itertools.pairwise(spans) if a[1] != b[0]]
        assert not bad, f"{topic}[{p}]: gaps or overlaps between the snapshots' ranges: {bad[:3]}"
    return len(ranges)


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
    return {p: r.pending for p, r in table_rows(consumer, topic_id).items() if r.pending is not None}


def in_table(consumer: ConsumerHarness, topic: str, pending: dict[int, tuple[int, int]]) -> int:
    """How many of the recorded ranges a kept snapshot holds."""
    if not pending:
        return 0
    held = committed_ranges(consumer, topic)
    return sum(1 for p, (s, e) in pending.items() if held[(p, s, e)])


def check_nothing_committed_ahead(table: Any, topic: str, rows: dict[int, Row]) -> None:
    """No duplicate in the table, and every offset below each committed offset is in it."""
    seen = offsets_by_topic(table).get(topic, [])
    dupes = [k for k, n in Counter(seen).items() if n > 1]
    assert not dupes, f"{len(dupes)} (partition, offset) pair(s) twice in the table, e.g. {sorted(dupes)[:5]}"
    by_partition: dict[int, set[int]] = defaultdict(set)
    for p, o in seen:
        by_partition[p].add(o)
    for p, row in rows.items():
        if row.committed is None:
            continue
        missing = [o for o in range(row.committed) if o not in by_partition[p]]
        assert not missing, (
            f"partition {p}: committed {row.committed} but offsets {missing[:5]}... are not in the table"
        )


def check_records(table: Any, topic: str, partitions: int = PARTITIONS) -> None:
    """Each row holds record i = partitions * offset + partition: its key, value and header."""
    import pyarrow.compute as pc

    wanted = table.filter(pc.equal(table.column("topic").cast("string"), topic))
    for p, o, k, v, h in zip(
        *(wanted.column(c).to_pylist() for c in ("partition", "offset", "key", "value", "headers")), strict=True
    ):
        i = partitions * o + p
        assert (k, v, h) == (f"k{i}".encode(), value_of(i), [{"key": "i", "value": str(i).encode()}]), (p, o)


def _bare(uri: str) -> str:
    """A file's URI without its scheme: ``/bucket/key`` or ``/local/path``."""
    return re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:/*", "/", uri)


def stray_data_files(consumer: ConsumerHarness) -> set[str]:
    """Data files in the table's folder (local or S3) that no snapshot of the table holds.

    Every commit of these tests only adds files, so the current snapshot's files are every file
    ever committed; a file outside them was written and not committed (a refused or killed batch).
    """
    from pyarrow import fs

    table = _load_table(consumer)
    assert table is not None, "no table"
    committed = {_bare(t.file.file_path) for t in table.scan().plan_files()}
    root = _bare(table.metadata.location).rstrip("/") + "/data"
    if consumer.lake.scheme == "s3a":
        endpoint = urlsplit(consumer.lake.s3_endpoint or "")
        storage: Any = fs.S3FileSystem(
            access_key=os.environ["AWS_ACCESS_KEY_ID"],
            secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=endpoint.netloc,
            scheme=endpoint.scheme or "http",
            region=os.environ.get("AWS_REGION", "us-east-1"),
        )
        base = root.lstrip("/")
    else:
        storage, base = fs.LocalFileSystem(), root
    infos = storage.get_file_info(fs.FileSelector(base, recursive=True, allow_not_found=True))
    on_storage = {"/" + i.path.lstrip("/") for i in infos if i.type == fs.FileType.File and i.path.endswith(".parquet")}
    unseen = committed - on_storage
    assert not unseen, f"the listing of {root} misses committed files, e.g. {sorted(unseen)[:2]}"
    return on_storage - committed


def local_data_files(consumer: ConsumerHarness) -> int:
    """Parquet files under a ``file://`` warehouse, committed or only written."""
    root = consumer.warehouse.removeprefix("file://")
    return sum(1 for _ in Path(root).rglob("*.parquet")) if os.path.isdir(root) else 0


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


def stop_and_confirm(slot: Slot, confirm: Callable[[], bool], *, settle_s: float = 0.1) -> bool:
    """SIGSTOP the slot's process group and check ``confirm`` on the frozen state; SIGCONT if it fails.

    ``settle_s``: statements the slot sent just before the stop land in MySQL before the check.
    """
    slot.signal(signal.SIGSTOP)
    time.sleep(settle_s)
    if confirm():
        return True
    slot.signal(signal.SIGCONT)
    return False


# ------------------------------------------------------------------------------------- kill test

BEFORE = "before its first batch"
BETWEEN = "between batches"
RECORDED = "mid-batch: recorded, not in the table"
IN_TABLE = "mid-batch: in the table, offsets not committed"
PARTLY = "mid-batch: partly in the table (a bug: one commit holds a whole batch)"
#: Where each kill aims (None: anywhere, a random moment of the run's first batch).
KILL_MODES: dict[str, str | None] = {
    "early": BEFORE,  # before Spark is up: nothing claimed, or just claimed
    "first_batch": None,  # claiming, planning, recording, a redo, the Spark job starting
    "between": BETWEEN,  # a batch committed, the next not recorded yet
    "mid_write": RECORDED,  # a batch recorded, Spark reading and writing it
    "after_table_commit": IN_TABLE,  # the table commit done, the offset commit not
}
#: On S3 the modes where the storage matters: files written and not committed, the redo check
#: reading the table's files. The others are the same code path on either warehouse.
S3A_KILL_MODES = ("mid_write", "after_table_commit")


@dataclass
class Kill:
    """Where one SIGKILL landed, judged from the claim table and the Iceberg table right after it."""

    mode: str
    lease_s: int
    after_s: float
    where: str
    pending: dict[int, tuple[int, int]]
    pending_in_table: int
    fenced: int = 0  # rows the next run found still held by the dead run (live lease), handed back, claimed anew
    redid: int = 0  # recorded ranges the next run found in the table already (only their offsets committed)


def judge_kill(before: dict[int, Row], after: dict[int, Row], placed_before: int, placed: int) -> str:
    """Where a run died, from the claim rows at its start and after its death.

    A range recorded at the start (left by an earlier kill) and left as it was says nothing about
    this run: it may not have reached it, or been redoing it. Only evidence of this run's own
    progress counts as a batch in flight: an offset it committed, a range it recorded, or a
    recorded range it committed to the table.
    """
    leftover = {p: r.pending for p, r in before.items() if r.pending is not None}
    pending = {p: r.pending for p, r in after.items() if r.pending is not None}
    advanced = any(after[p].committed != before[p].committed for p in after)
    if not pending:
        return BETWEEN if advanced else BEFORE
    if not advanced and pending == leftover and placed == placed_before:
        return BEFORE
    if placed == len(pending):
        return IN_TABLE
    return RECORDED if placed == 0 else PARTLY


def _aim(mode: str, consumer: ConsumerHarness, slot: Slot, stats: Path, topic: str, topic_id: str,
         rng: random.Random, *, timeout: float = 240) -> None:  # fmt: skip
    """Bring the freshly started slot to where ``mode`` aims (frozen there for the targeted modes)."""
    started_before, batches_before = started_count(stats), batch_count(stats)
    if mode == "early":
        time.sleep(rng.uniform(0.5, 3.0))
        return
    wait_running(slot, lambda: started_count(stats) > started_before, timeout, "Spark to start")
    deadline = time.monotonic() + timeout
    if mode == "first_batch":
        time.sleep(rng.uniform(0.0, 1.5))
        return
    seen = batches_before
    last = metadata_location(consumer)
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        if mode == "between":
            # The stats line of a batch is written after its offset commit; the next batch is recorded
            # only after the next boundary's claim and plan (MySQL and Kafka round trips).
            wait_running(slot, lambda: batch_count(stats) > seen, left, "a batch to finish", poll=0.002)
            if stop_and_confirm(slot, lambda: not pending_of(consumer, topic_id)):
                return
        elif mode == "mid_write":
            # A range recorded after one of this run's batches finished is this run's (not a leftover).
            wait_running(slot, lambda: batch_count(stats) > seen and bool(pending_of(consumer, topic_id)), left,
                         "a batch to be recorded", poll=0.005)  # fmt: skip
            time.sleep(rng.uniform(0.0, 0.4))  # into Spark's read and write

            def recorded_only() -> bool:
                pending = pending_of(consumer, topic_id)
                return bool(pending) and in_table(consumer, topic, pending) == 0

            if stop_and_confirm(slot, recorded_only):
                return
        elif mode == "after_table_commit":
            wait_running(slot, lambda: metadata_location(consumer) != last, left, "a table commit", poll=0.002)

            def committed_not_offsets() -> bool:
                pending = pending_of(consumer, topic_id)
                return bool(pending) and in_table(consumer, topic, pending) == len(pending)

            if stop_and_confirm(slot, committed_not_offsets, settle_s=0.05):
                return
            last = metadata_location(consumer)
        else:
            raise ValueError(mode)
        seen = batch_count(stats)
    raise AssertionError(f"never caught the slot where {mode!r} aims within {timeout} s")


def _note_restarts(consumer: ConsumerHarness, kills: list[Kill]) -> None:
    """From each restart's log: rows it found still held by the dead run, ranges it found in the table."""
    runs = [s for s in consumer.slots if s.name == "k"]
    for kill, nxt in zip(kills, runs[1:], strict=True):
        text = nxt.log.read_text(errors="replace")
        kill.redid = sum(int(n) for n in _REDONE.findall(text))
        held = re.search(r"an earlier run of this slot held (\d+) row", text)
        kill.fenced = int(held[1]) if held else 0


@pytest.mark.timeout(1200)  # each restart starts a Spark session: ~15 s idle, up to 60 s on a loaded 2-core box
def test_sigkill_at_chosen_points_while_records_arrive_leaves_each_record_once(
    consumer: ConsumerHarness, warehouse: str, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    rng = random.Random(SEED)
    topic = new_topic(PARTITIONS)
    topic_id = consumer.register(topic)
    stats = consumer.workdir / "k.stats"
    modes = S3A_KILL_MODES if warehouse.startswith("s3a:") else tuple(KILL_MODES)
    schedule = [m for m in modes for _ in range(KILL_ROUNDS)]
    rng.shuffle(schedule)
    producer = SteadyProducer(kafka_config, topic, per_s=100)
    producer.start()
    kills: list[Kill] = []
    t_test = time.monotonic()
    try:
        for mode in schedule:
            # 90 s: the restart finds its rows still held under the dead run's lease; it hands them back
            # and claims them under a new epoch, then redoes the recorded batch.
            lease = rng.choice((6, 90))
            before = table_rows(consumer, topic_id)
            leftover = {p: r.pending for p, r in before.items() if r.pending is not None}
            placed_before = in_table(consumer, topic, leftover)
            t0 = time.monotonic()
            slot = consumer.start("k", "--max-records", "400", "--lease-s", str(lease))
            _aim(mode, consumer, slot, stats, topic, topic_id, rng)
            slot.kill()
            after = table_rows(consumer, topic_id)
            pending = {p: r.pending for p, r in after.items() if r.pending is not None}
            placed = in_table(consumer, topic, pending)
            where = judge_kill(before, after, placed_before, placed)
            kill = Kill(mode, lease, round(time.monotonic() - t0, 1), where, pending, placed)
            kills.append(kill)
            log.warning("kill %d (%s) after %.1f s: %s; pending %s", len(kills), mode, kill.after_s, where, pending)
            check_nothing_committed_ahead(read_sink(consumer), topic, after)
    finally:
        produced = producer.stop()
    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    assert sum(latest.values()) == produced
    drain_before = batch_count(stats)
    consumer.run("k", "--exit-when-idle", "--max-records", "20000", timeout=400)
    _note_restarts(consumer, kills)

    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    rows = table_rows(consumer, topic_id)
    assert {p: r.committed for p, r in rows.items()} == latest
    assert all(r.pending is None for r in rows.values())
    assert table.num_rows == produced
    n_ranges = check_ranges_tile(consumer, topic, {p: r.committed for p, r in rows.items()})

    summary = {
        "seed": SEED,
        "warehouse": warehouse.split(":", 1)[0],
        "kills": len(kills),
        "records": produced,
        "where": Counter(k.where for k in kills),
        "restarts_that_fenced_live_rows": sum(k.fenced > 0 for k in kills),
        "redone_ranges_found_in_table": sum(k.redid for k in kills),
        "ranges_in_snapshots": n_ranges,
        "drain_batches": batch_count(stats) - drain_before,
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\nkill test:", json.dumps(summary), *(f"\n  {k}" for k in kills))
    assert len(kills) == len(schedule)
    assert not any(k.where == PARTLY for k in kills), kills
    # Each targeted kind of landing happened (each targeted kill is confirmed on the frozen slot first).
    aimed = {KILL_MODES[m] for m in modes} - {None}
    missed = aimed - {k.where for k in kills}
    assert not missed, f"no kill landed {sorted(missed)}: {kills}"
    # Each range a kill left in the table with its offsets not committed was found there by a later
    # run (the next one, or a later one if the next was killed before its redo), not written again
    # (check_ranges_tile: no range in two snapshots).
    left_in_table = {(p, r) for k in kills if k.where == IN_TABLE for p, r in k.pending.items()}
    assert sum(k.redid for k in kills) >= len(left_in_table), kills


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


def freeze_with_recorded_batch(
    consumer: ConsumerHarness,
    slot: Slot,
    slot_id: str,
    topic: str,
    topic_id: str,
    *,
    writing: Callable[[], bool] = lambda: True,
    into_write_s: float = 0.0,
    tries: int = 40,
) -> dict[int, tuple[int, int]]:
    """SIGSTOP ``slot`` in the write of a batch: every row it holds recorded, no table commit holding
    them, no row lock held (a process frozen mid-transaction would hold its rows' locks until the
    server drops its connection, and nobody could claim them). ``writing`` can ask for more evidence
    (its data files appearing); ``into_write_s`` waits that long after it before the stop. Returns the
    recorded ranges."""

    def recorded() -> dict[int, tuple[int, int]]:
        held = {p: r for p, r in table_rows(consumer, topic_id).items() if r.holder == slot_id and r.live}
        if not held or any(r.pending is None for r in held.values()):
            return {}
        return {p: r.pending for p, r in held.items() if r.pending is not None}

    for _ in range(tries):
        wait_running(slot, lambda: bool(recorded()) and writing(), 120, "a batch recorded by the slot", poll=0.005)
        time.sleep(into_write_s)
        stale: dict[int, tuple[int, int]] = {}

        def confirm() -> bool:
            stale.update(recorded())
            return bool(stale) and in_table(consumer, topic, stale) == 0 and not rows_locked(consumer, topic_id)

        if stop_and_confirm(slot, confirm):
            return stale
        # Committed already, or mid-statement: catch the next batch.
        wait_running(slot, lambda: not recorded(), 120, "the batch to be committed", poll=0.005)
    raise AssertionError("never froze the slot with a recorded batch not yet in the table")


@pytest.mark.timeout(600)
def test_stale_holder_resumed_after_its_rows_moved_has_its_commit_refused_and_exits_lost(
    consumer: ConsumerHarness, warehouse: str, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """A is frozen mid-batch (its ranges recorded) past its lease; B takes the rows, redoes A's range and
    goes on; A, resumed, finishes its write and the table refuses its commit: A exits 3."""
    from lagsched.adapters.slots import slot_id_for

    topic = new_topic(PARTITIONS)
    produce(kafka_config, topic, 6_000, partitions=PARTITIONS)
    topic_id = consumer.register(topic)
    a_stats = consumer.workdir / "a.stats"
    slot_a, slot_b = slot_id_for("a"), slot_id_for("b")
    t_test = time.monotonic()
    a = consumer.start("a", "--max-records", "250")  # 6 batches of 4 x 250
    wait_running(a, lambda: batch_count(a_stats) >= 1, 300, "A's first batch")

    # Freeze A with a batch recorded and not yet committed to the table, into its Spark write.
    stale = freeze_with_recorded_batch(consumer, a, slot_a, topic, topic_id, into_write_s=random.uniform(0, 0.3))
    t_stop = time.monotonic()
    batches_before_stop = batch_count(a_stats)
    # B's Spark start outlasts A's three missed heartbeats, so B is the topic's only live owner when it
    # first claims; it waits for A's leases (6 s) to run out, then takes the rows and redoes A's range.
    b = consumer.start("b", "--exit-when-idle", "--max-records", "250")

    def b_is_past_stale() -> bool:
        rows = table_rows(consumer, topic_id)
        return all((rows[p].committed or 0) > end for p, (_, end) in stale.items())

    wait_running(b, b_is_past_stale, 300, "B to consume past A's recorded batch", poll=0.2)
    b_past_s = time.monotonic() - t_stop
    a.signal(signal.SIGCONT)
    t_cont = time.monotonic()
    code_a = a.wait(180)
    a_exit_s = time.monotonic() - t_cont
    a_log = a.log.read_text(errors="replace")
    assert code_a == 3, f"the stale holder exited {code_a}, not 3:\n{a.tail()}"
    assert "lost the claim" in a_log
    # The table itself refused A's commit: B had committed records of the same ranges since A's mark.
    assert _REFUSED in a_log, a.tail()
    code_b = b.wait(300)
    assert code_b == 0, f"B exited {code_b}:\n{b.tail()}"

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    rows = table_rows(consumer, topic_id)
    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    assert {p: r.committed for p, r in rows.items()} == latest
    check_ranges_tile(consumer, topic, latest)
    # A committed nothing after it was stopped; each stale range is in exactly one snapshot, B's.
    late = [r for r in stats_rows(a_stats) if r.get("event") == "batch"][batches_before_stop:]
    assert late == [], late
    events = [r for r in stats_rows(a_stats) if r.get("event") in ("conflict", "stopped")]
    assert [e["event"] for e in events] == ["conflict", "stopped"], events
    assert events[0]["lost"] == len(stale), events
    assert (events[1]["reason"], events[1]["records"]) == ("lost", 250 * 4 * batches_before_stop)
    holders = {
        (p, s, e): slot for slot, ranges in table_ranges(consumer) for (t, p), (s, e) in ranges.items() if t == topic
    }
    assert all(holders[(p, s, e)] == slot_b for p, (s, e) in stale.items()), holders
    # A's refused files were deleted at once (nobody else wrote files it did not commit).
    stray = stray_data_files(consumer)
    assert not stray, f"files written and not committed are left: {sorted(stray)[:3]}"
    summary = {
        "warehouse": warehouse.split(":", 1)[0],
        "stale_ranges": stale,
        "a_frozen_s": round(t_cont - t_stop, 1),
        "b_start_to_past_stale_s": round(b_past_s, 1),
        "a_exit_after_sigcont_s": round(a_exit_s, 1),
        "a_refusal": next((ln for ln in a_log.splitlines() if _REFUSED in ln), "")[:300],
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\nstale-holder test:", json.dumps(summary))


@pytest.mark.timeout(600)
def test_two_holders_redoing_one_recorded_range_commit_it_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """X records a batch and dies at once (before any file: the test records it through the claim store,
    as a slot's ``begin_batch`` does); Y claims the rows and redoes it, frozen in its Spark write; its
    lease runs out and Z redoes the same range and commits it; Y, resumed, is refused and exits 3."""
    from lagsched.adapters.claims import open_claim_store
    from lagsched.adapters.slots import slot_id_for

    per_partition = 4_000
    topic = new_topic(PARTITIONS)
    produce(kafka_config, topic, per_partition * PARTITIONS, partitions=PARTITIONS)
    topic_id = consumer.register(topic)
    t_test = time.monotonic()
    slot_x = slot_id_for("x")
    with open_claim_store(consumer.mysql) as store:
        result = store.claim(slot_x, {topic_id: PARTITIONS}, 1.0)
        assert len(result.claims) == PARTITIONS, result
        for claim in result.claims:
            store.begin_batch(slot_x, claim, 0, per_partition)
    recorded = pending_of(consumer, topic_id)
    assert recorded == {p: (0, per_partition) for p in range(PARTITIONS)}, recorded

    # Y reads the whole range in one batch, one Kafka partition after another (local[1]): its first
    # data files appear while the others are still being written, well before its table commit.
    slot_y, slot_z = slot_id_for("y"), slot_id_for("z")
    y = consumer.start("y", "--max-records", str(per_partition), master="local[1]")
    redo = freeze_with_recorded_batch(
        consumer, y, slot_y, topic, topic_id, writing=lambda: local_data_files(consumer) > 0, tries=1
    )
    assert redo == recorded, (redo, recorded)
    # Z's Spark start outlasts Y's heartbeats; it claims the rows once Y's leases ran out.
    z = consumer.start("z", "--exit-when-idle", "--max-records", str(per_partition))
    assert z.wait(300) == 0, z.tail()
    y.signal(signal.SIGCONT)
    code_y = y.wait(180)
    y_log = y.log.read_text(errors="replace")
    assert code_y == 3, f"Y exited {code_y}:\n{y.tail()}"
    assert _REFUSED in y_log, y.tail()
    assert "lost the claim" in y_log

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    assert consumer.committed(topic_id) == latest
    check_ranges_tile(consumer, topic, latest)
    holders = {(p, s, e): slot for slot, rs in table_ranges(consumer) for (t, p), (s, e) in rs.items() if t == topic}
    assert all(holders[(p, s, e)] == slot_z for p, (s, e) in recorded.items()), holders
    stray = stray_data_files(consumer)
    assert not stray, f"Y's refused files are left: {sorted(stray)[:3]}"
    summary = {
        "range": recorded,
        "committed_by": "z",
        "y_exit": code_y,
        "y_refusal": next((ln for ln in y_log.splitlines() if _REFUSED in ln), "")[:300],
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\ntwo redoing holders:", json.dumps(summary))


@pytest.mark.timeout(600)
def test_concurrent_slots_commit_to_one_table_each_batch_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Three slots on two topics of one cluster commit to its one table at once: Iceberg's retries rebase
    each commit over the others' (other partitions never conflict), nothing dropped or doubled.

    The records arrive only once all three slots are up and hold one partition of each topic, so
    every batch of the run races the other slots' batches."""
    per_topic, parts = 1_800, 3
    topics = [new_topic(parts), new_topic(parts)]
    ids = {t: consumer.register(t, linker_workers=3) for t in topics}
    t_test = time.monotonic()
    slots = [consumer.start(f"s{i}", "--max-records", "100") for i in range(3)]
    for s in slots:
        wait_running(s, lambda s=s: started_count(s.stats) > 0, 300, f"{s.name}'s Spark to start")

    def settled() -> bool:
        held = [consumer.holders(i) for i in ids.values()]
        return all(None not in h.values() and len(set(h.values())) == 3 for h in held)

    wait_until(settled, 120, "each slot to hold one partition of each topic", poll=0.2)
    t_records = time.monotonic()
    for t in topics:
        produce(kafka_config, t, per_topic, partitions=parts)
    latest = {t: latest_offsets(kafka_config, t, parts) for t in topics}
    wait_until(lambda: all(consumer.committed(ids[t]) == latest[t] for t in topics), 300, "every record committed")
    consume_s = time.monotonic() - t_records
    for s in slots:
        s.terminate()
    for s in slots:
        assert s.wait(120) == 0, s.tail()

    table = read_sink(consumer)
    for t in topics:
        assert_exactly_once(table, t, latest[t])
        check_records(table, t, parts)
        assert consumer.committed(ids[t]) == latest[t]
        check_ranges_tile(consumer, t, latest[t])
    # Every batch's snapshot is in the table, one each; no other snapshot holds ranges.
    snapshots = {sid: extra for sid, extra in table_snapshots(consumer) if "lagsched.ranges" in extra}
    batches = [b for s in slots for b in s.batches() if b["records"]]
    ids_of_batches = [b["snapshot_id"] for b in batches]
    assert None not in ids_of_batches, [b for b in batches if b["snapshot_id"] is None]
    assert sorted(ids_of_batches) == sorted(snapshots), (sorted(ids_of_batches), sorted(snapshots))
    committers = Counter(extra.get("lagsched.slot") for extra in snapshots.values())
    assert len(committers) == 3, f"the slots did not share the work: {committers}"
    # How often a batch's commit window overlapped another slot's (the races Iceberg resolved).
    spans = [(b["slot"], b["t_end"] - b["table_commit_s"] - b["commit_s"], b["t_end"] - b["commit_s"]) for b in batches]
    overlapping = sum(1 for a, b in itertools.combinations(spans, 2) if a[0] != b[0] and a[1] < b[2] and b[1] < a[2])
    retried = sum(len(re.findall(r"Retrying task after failure", s.log.read_text(errors="replace"))) for s in slots)
    summary = {
        "batches": len(batches),
        "commits_by_slot": dict(committers),
        "overlapping_commit_pairs": overlapping,
        "commit_retries_logged": retried,
        "consume_s": round(consume_s, 1),
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\nconcurrent slots:", json.dumps(summary))
    assert overlapping > 0, f"no two commits of different slots overlapped: {summary}"


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
