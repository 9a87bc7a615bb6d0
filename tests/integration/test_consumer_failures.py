"""The Spark consumer under failure: SIGKILL at random points, a stale holder, unreachable services.

Real slots (spark-submit of ``jobs/consume.py``) on the real stack; the sink is read back with
pyarrow. Where a kill or a stop lands is not left to luck alone: the test watches the sink (a new
``_tmp`` folder means Spark is writing; a new final file means the batch is written but perhaps not
committed) and the claim table (``pending_*`` = a batch recorded under the epoch, not committed),
and after each kill it says, from that evidence, where the process died.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
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

log = logging.getLogger(__name__)

#: Seed of the kill schedule; a failing draw is replayed with LAGSCHED_KILL_SEED=<seed>.
SEED = int(os.environ.get("LAGSCHED_KILL_SEED", "9"))
#: Kills per mode. One keeps `make test` within its time budget (each kill restarts a Spark session);
#: set LAGSCHED_KILL_ROUNDS=2 or more for a longer hunt with other seeds.
KILL_ROUNDS = int(os.environ.get("LAGSCHED_KILL_ROUNDS", "1"))
PARTITIONS = 4
_FILE = re.compile(r"^(\d{5})-(\d{20})-(\d{20})(?:-\d+)?\.parquet$")


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


def final_files(sink: Path, topic: str) -> dict[str, tuple[int, int, int]]:
    """Files in place in the sink (relative path -> partition, start, end)."""
    out: dict[str, tuple[int, int, int]] = {}
    root = sink / f"topic={topic}"
    if not root.is_dir():
        return out
    for date_dir in os.scandir(root):
        if not date_dir.is_dir():
            continue
        for entry in os.scandir(date_dir.path):
            m = _FILE.match(entry.name)
            if m:
                out[f"{date_dir.name}/{entry.name}"] = (int(m[1]), int(m[2]), int(m[3]))
    return out


def tmp_entries(sink: Path) -> set[str]:
    tmp = sink / "_tmp"
    return {e.name for e in os.scandir(tmp)} if tmp.is_dir() else set()


def tmp_parquet_files(sink: Path) -> list[Path]:
    tmp = sink / "_tmp"
    return sorted(p for p in tmp.rglob("*.parquet")) if tmp.is_dir() else []


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
    """The sink as a reader sees it (``consumer.sink_table``, also when only ``_tmp`` exists yet)."""
    import pyarrow as pa

    table = consumer.sink_table()
    if "topic" not in table.column_names:  # a folder holding only _tmp: no file, no hive columns
        return pa.table({"topic": pa.array([], pa.string()), "partition": [], "offset": []})
    return table


def check_nothing_committed_ahead(table: Any, topic: str, rows: dict[int, Row]) -> None:
    """No duplicate in the sink, and every offset below each committed offset is in it."""
    seen = offsets_by_topic(table).get(topic, [])
    dupes = [k for k, n in Counter(seen).items() if n > 1]
    assert not dupes, f"{len(dupes)} (partition, offset) pair(s) twice in the sink, e.g. {sorted(dupes)[:5]}"
    by_partition: dict[int, set[int]] = defaultdict(set)
    for p, o in seen:
        by_partition[p].add(o)
    for p, row in rows.items():
        if row.committed is None:
            continue
        have = by_partition[p]
        assert row.committed <= max(have, default=-1) + 1, (
            f"partition {p}: committed offset {row.committed} is ahead of the sink (max {max(have, default=None)})"
        )
        missing = [o for o in range(row.committed) if o not in have]
        assert not missing, f"partition {p}: committed {row.committed} but offsets {missing[:5]}... are not in the sink"


def check_records(table: Any, topic: str) -> None:
    """Each row holds record i = 4 * offset + partition: its key, value and header."""
    wanted = table.filter(_topic_is(table, topic))
    for p, o, k, v, h in zip(
        *(wanted.column(c).to_pylist() for c in ("partition", "offset", "key", "value", "headers")), strict=True
    ):
        i = PARTITIONS * o + p
        assert (k, v, h) == (f"k{i}".encode(), value_of(i), [{"key": "i", "value": str(i).encode()}]), (p, o)


def _topic_is(table: Any, topic: str) -> Any:
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


class TmpWatcher(threading.Thread):
    """Notes every ``_tmp/<batch>`` folder the moment it appears (a batch's Spark write began).

    Folders of finished batches are deleted, so only a watcher can say a run started a batch.
    """

    def __init__(self, sink: Path) -> None:
        super().__init__(name="tmp-watcher", daemon=True)
        self._sink = sink
        self._stop_event = threading.Event()
        self.first_seen: dict[str, float] = {}

    def run(self) -> None:
        while not self._stop_event.wait(0.02):
            for name in tmp_entries(self._sink):
                self.first_seen.setdefault(name, time.monotonic())

    def seen_since(self, t: float) -> set[str]:
        return {name for name, at in list(self.first_seen.items()) if at >= t}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def tmp_state(folder: Path) -> str:
    """What a batch's ``_tmp`` folder says about its write.

    Spark's tasks write under ``_temporary``, which the job's commit removes; the batch then
    renames each file into place and deletes the folder last, just before committing the offsets.
    """
    if (folder / "_temporary").exists():
        return "Spark writing"
    if any(folder.rglob("*.parquet")):
        return "renaming into place"
    return "written, not committed"


@dataclass
class Kill:
    """Where one SIGKILL landed, judged from the table and the sink right after it."""

    mode: str
    lease_s: int
    after_s: float
    batches_done: int
    pending: dict[int, tuple[int, int]]
    pending_files_in_place: int
    tmp_folders_seen: int
    where: str
    fenced: int = 0  # rows the next run found still held by the dead run (live lease), handed back, claimed anew
    redid: int = 0  # files the next run found already in place when it redid the recorded batch

    @property
    def mid_batch(self) -> bool:
        return self.where.startswith("mid-batch")


def judge_kill(
    sink: Path, topic: str, pending: dict[int, tuple[int, int]], batches_done: int, seen: set[str]
) -> tuple[str, int]:
    """Where the run was when it died, and how many of the recorded ranges' files are in place."""
    in_place = {(p, s, e) for p, s, e in final_files(sink, topic).values()}
    placed = sum(1 for p, (s, e) in pending.items() if (p, s, e) in in_place)
    live = [sink / "_tmp" / name for name in seen if (sink / "_tmp" / name).exists()]
    if batches_done == 0 and not seen:
        where = "before the first batch" + (" (a recorded batch waits for its redo)" if pending else "")
    elif not pending:
        where = "between batches"
    elif live:
        where = "mid-batch: " + tmp_state(max(live, key=lambda p: p.stat().st_mtime))
    elif placed == len(pending):
        where = "mid-batch: written, not committed"
    else:
        where = "mid-batch: recorded, not yet writing"
    return where, placed


#: Where each kill aims; the schedule holds each KILL_ROUNDS times, shuffled by the seed.
KILL_MODES = ("early", "first_batch", "mid_write", "after_write", "later")


@pytest.mark.timeout(1500)  # each restart starts a Spark session: 6 s idle, up to 45 s on a loaded 2-core box
def test_sigkill_at_random_points_while_records_arrive_leaves_each_record_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    rng = random.Random(SEED)
    topic = new_topic(PARTITIONS)
    topic_id = consumer.register(topic)
    sink, stats = consumer.sink, consumer.workdir / "k.stats"
    producer = SteadyProducer(kafka_config, topic, per_s=100)
    watcher = TmpWatcher(sink)
    producer.start()
    watcher.start()
    # An even number of after_write kills, so both of its variants (every file renamed, or not yet) run.
    schedule = [m for m in KILL_MODES for _ in range(KILL_ROUNDS)] + ["after_write"] * (KILL_ROUNDS % 2)
    rng.shuffle(schedule)
    kills: list[Kill] = []
    t_test = time.monotonic()
    try:
        for n, mode in enumerate(schedule):
            # 90 s: the restart (a Spark start, up to ~45 s on a busy box) finds its rows still held under the dead
            # run's lease; it hands them back and claims them under a new epoch, then redoes the recorded batch.
            lease = rng.choice((6, 90))
            started_before, batches_before = started_count(stats), batch_count(stats)
            files_before = set(final_files(sink, topic))
            t0 = time.monotonic()
            slot = consumer.start("k", "--max-records", "400", "--lease-s", str(lease))
            if mode == "early":  # before Spark is ready: nothing claimed yet, or just claimed
                time.sleep(rng.uniform(0.5, 4.0))
            else:
                wait_running(slot, lambda: started_count(stats) > started_before, 240, "Spark to start")
                if mode == "first_batch":  # claiming, planning, recording, or the Spark job starting
                    time.sleep(rng.uniform(0.0, 1.5))
                elif mode == "mid_write":
                    wait_running(slot, lambda: bool(watcher.seen_since(t0)), 240, "Spark to write a batch")
                    time.sleep(rng.uniform(0.0, 0.6))
                elif mode == "after_write":
                    # The first such kill waits for every file (written, not committed), the next one not.
                    whole = schedule[:n].count("after_write") % 2 == 0
                    _stop_after_rename(consumer, slot, topic, topic_id, files_before, whole=whole)
                elif mode == "later":  # after a batch or two: between batches or in a later one
                    done = rng.choice((1, 2))
                    wait_running(slot, lambda: batch_count(stats) - batches_before >= done, 240, f"{done} batch(es)")
                    time.sleep(rng.uniform(0.0, 3.0))
            slot.kill()
            after = time.monotonic() - t0
            rows = table_rows(consumer, topic_id)
            pending = {p: r.pending for p, r in rows.items() if r.pending is not None}
            batches_done = batch_count(stats) - batches_before
            seen = watcher.seen_since(t0)
            where, placed = judge_kill(sink, topic, pending, batches_done, seen)
            kill = Kill(mode, lease, round(after, 1), batches_done, pending, placed, len(seen), where)
            kills.append(kill)
            log.warning("kill %d (%s) after %.1f s: %s; pending %s", len(kills), mode, after, where, pending)
            check_nothing_committed_ahead(read_sink(consumer), topic, rows)
    finally:
        watcher.stop()
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
    # Leftovers of killed writes stay under _tmp, and a reader of the sink does not see them.
    import pyarrow.dataset as ds

    leftovers = tmp_parquet_files(sink)
    dataset_files = ds.dataset(str(sink), format="parquet", partitioning="hive").files
    assert not [f for f in dataset_files if "/_tmp/" in f], "pyarrow reads the sink's temporary files"
    assert table.num_rows == produced

    summary = {
        "seed": SEED,
        "kills": len(kills),
        "records": produced,
        "where": Counter(k.where for k in kills),
        "mid_batch": sum(k.mid_batch for k in kills),
        "restarts_that_fenced_live_rows": sum(k.fenced > 0 for k in kills),
        "redo_files_kept": sum(k.redid for k in kills),
        "tmp_leftover_parquet_files": len(leftovers),
        "drain_batches": batch_count(stats) - drain_before,
        "test_s": round(time.monotonic() - t_test, 1),
    }
    print("\nkill test:", json.dumps(summary), *(f"\n  {k}" for k in kills))
    assert len(kills) == len(schedule)
    assert sum(k.mid_batch for k in kills) >= 2, "the schedule aims at batches in flight; none was hit"
    assert any(k.where == "mid-batch: written, not committed" for k in kills), "never caught a batch before its commit"


def _stop_after_rename(
    consumer: ConsumerHarness,
    slot: Slot,
    topic: str,
    topic_id: str,
    files_before: set[str],
    *,
    whole: bool,
    timeout: float = 240,
) -> None:
    """Freeze the slot once a batch's files are in place while its range is still recorded.

    Files are renamed into place before the offsets are committed, so a new file whose range is
    still pending in the table means the slot is between its write and its commit. The slot is
    SIGSTOPped as soon as a new file is seen and judged while frozen; with ``whole`` it is let run
    a few milliseconds at a time until every recorded range's file is in place (written, not
    committed), else it is left mid-rename. If the commit wins the race, the next batch is watched.
    """
    deadline = time.monotonic() + timeout
    seen = set(files_before)
    while time.monotonic() < deadline:
        if slot.proc.poll() is not None:
            raise AssertionError(f"slot exited {slot.proc.returncode}:\n{slot.tail()}")
        now = final_files(consumer.sink, topic)
        new = {name: v for name, v in now.items() if name not in seen}
        if not new:
            time.sleep(0.005)
            continue
        slot.signal(signal.SIGSTOP)
        while True:
            pending = {p: r.pending for p, r in table_rows(consumer, topic_id).items() if r.pending is not None}
            in_place = set(final_files(consumer.sink, topic).values())
            if not pending or not any((p, s, e) in in_place for p, (s, e) in pending.items()):
                break  # committed already: watch the next batch
            if not whole or all((p, s, e) in in_place for p, (s, e) in pending.items()):
                return  # the caller kills it, frozen where it stands
            slot.signal(signal.SIGCONT)
            time.sleep(0.002)
            slot.signal(signal.SIGSTOP)
        slot.signal(signal.SIGCONT)
        seen |= set(final_files(consumer.sink, topic))
    log.warning("never caught a batch between its write and its commit within %.0f s", timeout)


def _note_restarts(consumer: ConsumerHarness, kills: list[Kill]) -> None:
    """From each restart's log: rows it found still held by the dead run, files it found already in place."""
    runs = [s for s in consumer.slots if s.name == "k"]
    for kill, nxt in zip(kills, runs[1:], strict=True):
        text = nxt.log.read_text(errors="replace")
        kill.redid = sum(int(n) for n in re.findall(r"(\d+) file\(s\) of this batch were already in the sink", text))
        held = re.search(r"an earlier run of this slot held (\d+) row", text)
        kill.fenced = int(held[1]) if held else 0


# ------------------------------------------------------------------------------ stale-holder test


def test_stale_holder_resumed_after_its_rows_moved_exits_lost_and_leaves_no_duplicate(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    from lagsched.adapters.slots import slot_id_for

    topic = new_topic(PARTITIONS)
    produce(kafka_config, topic, 8_000, partitions=PARTITIONS)
    topic_id = consumer.register(topic)
    sink, a_stats = consumer.sink, consumer.workdir / "a.stats"
    slot_a, slot_b = slot_id_for("a"), slot_id_for("b")
    a = consumer.start("a", "--max-records", "250")  # 8 batches of 4 x 250
    wait_running(a, lambda: batch_count(a_stats) >= 1, 300, "A's first batch")

    # Freeze A the moment Spark starts writing its next batch: its range is recorded by then.
    stale: dict[int, tuple[int, int]] = {}
    for _ in range(5):
        tmp_before = tmp_entries(sink)
        wait_running(a, lambda: bool(tmp_entries(sink) - tmp_before), 120, "A to write a batch", poll=0.01)
        a.signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        rows = table_rows(consumer, topic_id)
        stale = {p: r.pending for p, r in rows.items() if r.pending is not None and r.holder == slot_a}
        if stale:
            break
        a.signal(signal.SIGCONT)  # the batch finished in between: catch the next one
    assert stale, "never caught A with a batch recorded"
    batches_before_stop = batch_count(a_stats)
    files_before_stop = final_files(sink, topic)

    # Past its lease (and three heartbeats) A is dead to the others.
    expired_s = wait_until(
        lambda: not any(r.live for r in table_rows(consumer, topic_id).values()), 60, "A's leases to run out"
    )
    b = consumer.start("b", "--exit-when-idle", "--max-records", "250")
    t_b = time.monotonic()

    def b_is_past_stale() -> bool:
        rows = table_rows(consumer, topic_id)
        return all((rows[p].committed or 0) > end for p, (_, end) in stale.items())

    wait_running(b, b_is_past_stale, 300, "B to consume past A's recorded batch", poll=0.2)
    b_past_s = time.monotonic() - t_b
    rows_before_cont = table_rows(consumer, topic_id)
    a.signal(signal.SIGCONT)
    t_cont = time.monotonic()
    code_a = a.wait(180)
    a_exit_s = time.monotonic() - t_cont
    a_log = a.log.read_text(errors="replace")
    assert code_a == 3, f"the stale holder exited {code_a}, not 3:\n{a.tail()}"
    assert "lost the claim" in a_log
    code_b = b.wait(300)
    assert code_b == 0, f"B exited {code_b}:\n{b.tail()}"

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    rows = table_rows(consumer, topic_id)
    table = read_sink(consumer)
    assert_exactly_once(table, topic, latest)
    check_records(table, topic)
    assert {p: r.committed for p, r in rows.items()} == latest
    # A committed nothing after it was stopped, and every stale range has exactly its files.
    late = [r for r in stats_rows(a_stats) if r.get("event") == "batch"][batches_before_stop:]
    assert [r["records"] for r in late] in ([], [0]), late
    assert stats_rows(a_stats)[-1] == {
        "event": "stopped",
        "reason": "lost",
        "records": 250 * 4 * batches_before_stop,
        "slot": slot_a,
    }
    in_place = Counter((p, s, e) for p, s, e in final_files(sink, topic).values())
    assert all(in_place[(p, s, e)] == 1 for p, (s, e) in stale.items()), in_place
    b_log = b.log.read_text(errors="replace")
    summary = {
        "stale_ranges": stale,
        "stale_files_in_place_when_stopped": sum(
            (p, s, e) in files_before_stop.values() for p, (s, e) in stale.items()
        ),
        "a_frozen_s": round(t_cont - t_stop, 1),
        "a_leases_ran_out_after_s": round(expired_s, 1),
        "b_start_to_past_stale_s": round(b_past_s, 1),
        "a_exit_after_sigcont_s": round(a_exit_s, 1),
        "holders_before_sigcont": sorted({str(r.holder) for r in rows_before_cont.values()}),
        "b_is": slot_b,
        "a_kept_existing_files": sum(
            int(n) for n in re.findall(r"(\d+) file\(s\) of this batch were already in the sink", a_log)
        ),
        "b_redo_files_kept": sum(
            int(n) for n in re.findall(r"(\d+) file\(s\) of this batch were already in the sink", b_log)
        ),
        "a_lost_line": next((ln for ln in a_log.splitlines() if "lost the claim" in ln), "")[:400],
    }
    print("\nstale-holder test:", json.dumps(summary))


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
