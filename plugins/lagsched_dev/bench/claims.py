"""Claim-table benchmark and the safety checkers it shares with the soak tests.

Run from the repository root (the local stack must be up)::

    PYTHONPATH=plugins python -m lagsched_dev.bench.claims [--out PATH] [--seconds S] [--draws D] [--topics T]

For each lock mode (``skip_locked``, ``for_update``, ``optimistic``) and 1, 4 and 16 claimer
*processes*, on 10,000 rows in a fresh database ``lagsched_bench_<hex>`` (dropped afterwards),
``--draws`` times (interleaved across the configurations):

* every claimer loops: claim 4 rows of one topic, commit an offset for each, release them (Hevo's
  job cycle, with the processing left out so the table is the bottleneck), through ``ClaimStore``,
  the code production runs;
* ``claims_per_s`` = rows claimed per second of wall time, all claimers together;
  ``p50_ms`` / ``p99_ms`` = latency of one ``claim`` call (with its retries); ``lock_wait_s`` =
  claimer-seconds spent waiting for row locks (InnoDB's ``Innodb_row_lock_time``);
* each run reports the worst case over its draws (highest latency and lock wait, lowest
  throughput), the medians, and every draw;
* ``double_claims`` and ``stale_commits`` are counted by two independent checkers: a separate
  process polling the table (``poll_table``) and a post-run check of every claimer's event log
  (``check_history``). Both must be 0. The poller takes a snapshot once a second.

``--topics 1`` (default) puts all 10,000 rows in one topic, so every claimer competes for the head
of the same queue: Hevo's case of many jobs on one hot topic, and the case SKIP LOCKED exists for.
With ``--topics 10`` claimers spread over ten queues and plain FOR UPDATE queues far less.

The same worker loop (``claimer_loop``) drives the soak tests, with lease stalls and renewals turned
on so that takeovers and refused (stale) commits actually happen.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import random
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from lagsched.connections import MySQLParams
from lagsched.core.claims import claim_terms
from lagsched_dev.bench import cpu

__all__ = [
    "ClaimerSpec",
    "HistoryCheck",
    "PollResult",
    "check_history",
    "claimer_loop",
    "create_database",
    "drop_database",
    "main",
    "migrate_database",
    "poll_table",
    "read_events",
    "run_claimers",
    "seed_topics",
    "summarize",
    "targets",
]

#: Offsets committed by the claimers encode the epoch: epoch * OFFSET_EPOCH + sequence. Epochs only
#: grow, so valid commits only grow; a committed offset that goes down is a stale commit.
OFFSET_EPOCH = 1_000_000
#: Slack between the worker's clock and the database's when judging a lease from the log (same
#: host, so the clocks are the same; this only absorbs statement latency).
CLOCK_SLACK_S = 0.05

MODES = ("skip_locked", "for_update", "optimistic")
#: Seconds between the table poller's snapshots during the benchmark (see bench_run).
BENCH_POLL_INTERVAL_S = 1.0
CLAIMERS = (1, 4, 16)
ROWS = 10_000


# --------------------------------------------------------------------------- database set-up


def create_database(base: MySQLParams, prefix: str = "lagsched_bench", *, migrated: bool = True) -> MySQLParams:
    """A fresh database ``<prefix>_<hex>``, with every migration applied unless ``migrated`` is False."""
    from lagsched.adapters.mysql import connect

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = connect(base)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    admin.close()
    params = dataclasses.replace(base, database=name)
    return migrate_database(params) if migrated else params


def migrate_database(params: MySQLParams) -> MySQLParams:
    """``params``, once every migration in sql/ is applied to its database."""
    from lagsched.adapters import migrations

    migrations.migrate_database(params)
    return params


def drop_database(params: MySQLParams) -> None:
    from lagsched.adapters.mysql import connect

    if not params.database.startswith("lagsched_"):
        raise ValueError(f"refusing to drop {params.database!r}: not a lagsched_ scratch database")
    admin = connect(params)
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{params.database}`")
    admin.close()


def seed_topics(params: MySQLParams, partitions: Sequence[int], cluster: str = "bench") -> list[str]:
    """Register topics with the given partition counts and their claim rows; returns topic ids."""
    from lagsched.adapters.mysql import connect

    conn = connect(params)
    ids: list[str] = []
    try:
        with conn.cursor() as cur:
            for p in partitions:
                tid = str(uuid.uuid4())
                cur.execute(
                    "INSERT INTO topics (topic_id, cluster, name, partition_count) VALUES (%s, %s, %s, %s)",
                    (tid, cluster, f"bench-{tid[:8]}", p),
                )
                cur.executemany(
                    "INSERT INTO topic_partitions (topic_id, partition_id) VALUES (%s, %s)",
                    [(tid, j) for j in range(p)],
                )
                ids.append(tid)
        conn.commit()
    finally:
        conn.close()
    return ids


def reset_rows(params: MySQLParams) -> None:
    """Every row unclaimed, never picked, epoch 0, no offset: a clean start for the next run."""
    from lagsched.adapters.mysql import connect

    conn = connect(params)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE topic_partitions SET claimed_by = NULL, claim_epoch = 0, lease_expires_at = NULL,"
            " last_picked_at = NULL, committed_offset = NULL"
        )
    conn.commit()
    conn.close()


# --------------------------------------------------------------------------- claimers


@dataclass(frozen=True, slots=True)
class ClaimerSpec:
    """One claimer process's job (picklable, for ``spawn``).

    Attributes:
        params: the database.
        mode: lock mode (``skip_locked``, ``for_update``, ``optimistic``).
        slot_id: the claimer's slot UUID.
        topics: topic ids it may claim from; each round picks one at random.
        log_path: where its JSONL event log goes.
        seconds: how long to loop once started.
        batch: rows asked for per claim: a fixed number, or ``0`` for 1..4 at random.
        lease_s: lease of each claim.
        commits: offset commits per claimed row per round.
        stall_prob: chance per round of sleeping ``stall_s`` between claim and commit (a GC pause,
            a slow batch), so the lease runs out and others take the rows over.
        stall_s: length of a stall; make it longer than ``lease_s``.
        keep_prob: chance per round of keeping the rows (renewing) instead of releasing.
        seed: seeds the claimer's random choices and retry jitter.
    """

    params: MySQLParams
    mode: str
    slot_id: str
    topics: tuple[str, ...]
    log_path: str
    seconds: float
    batch: int = 4
    lease_s: float = 30.0
    commits: int = 1
    stall_prob: float = 0.0
    stall_s: float = 0.0
    keep_prob: float = 0.0
    seed: int = 0


class _Log:
    """Buffered JSONL event log; every event is a list starting with its kind."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "w", buffering=1 << 16)  # noqa: SIM115 - closed in close()

    def write(self, *event: Any) -> None:
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._f.close()


def claimer_loop(spec: ClaimerSpec, ready: Any, go: EventType) -> None:
    """Claim, commit and release in a loop for ``spec.seconds``, logging every outcome.

    It drives ``ClaimStore`` as a worker would: what it holds is what the last call returned (the
    claim's full holding, the commit's and renewal's fresh claims), never merged by hand.

    Events (times are ``time.time()`` before and after the call):
    ``call t0 t1 n_new status``, ``claim topic p epoch t0 t1 lease_expires``,
    ``commit topic p epoch offset t0 t1``, ``refused topic p epoch t0 t1 reason``,
    ``renew topic p epoch t0 t1 lease_expires``, ``release topic p epoch t0 t1 ok``,
    ``stats cas_conflicts retries cpu_s deadlocks lock_wait_timeouts``.
    """
    from lagsched.adapters.claims import ClaimStore
    from lagsched.adapters.mysql import connect
    from lagsched.core.claims import LockMode
    from lagsched.core.errors import StaleClaimError

    rng = random.Random(spec.seed)
    store = ClaimStore(connect(spec.params), LockMode(spec.mode), rng=random.Random(spec.seed + 1))
    log = _Log(spec.log_path)
    seq = 0
    held: Sequence[Any] = ()
    ready.put(spec.slot_id)
    go.wait()
    end = time.time() + spec.seconds
    cpu0 = time.process_time()
    try:
        while time.time() < end:
            topic = rng.choice(spec.topics)
            want = spec.batch or rng.randint(1, 4)
            t0 = time.time()
            result = store.claim(
                spec.slot_id, {topic: want + sum(1 for c in held if c.topic_id == topic)}, spec.lease_s
            )
            t1 = time.time()
            log.write("call", t0, t1, len(result.new), str(result.status))
            # A lapsed row was claimed too (it took an epoch) but is no longer held.
            for c in (*result.new, *result.lapsed):
                epoch, lease = claim_terms(c)
                log.write("claim", c.topic_id, c.partition_id, epoch, t0, t1, lease.timestamp())
            held = result.claims  # everything it holds now: no merging
            if spec.stall_prob and rng.random() < spec.stall_prob:
                time.sleep(spec.stall_s)
            alive = []
            for c in held:
                ok = True
                for _ in range(spec.commits):
                    seq += 1
                    offset = claim_terms(c)[0] * OFFSET_EPOCH + seq % OFFSET_EPOCH
                    t0 = time.time()
                    try:
                        c = store.commit_offset(spec.slot_id, c, offset)  # noqa: PLW2901 - the fresh claim
                    except StaleClaimError as exc:
                        reason = str(getattr(exc, "reason", ""))
                        log.write("refused", c.topic_id, c.partition_id, c.claim_epoch, t0, time.time(), reason)
                        ok = False
                        break
                    log.write("commit", c.topic_id, c.partition_id, c.claim_epoch, offset, t0, time.time())
                if ok:
                    alive.append(c)
            held = alive
            if held and spec.keep_prob and rng.random() < spec.keep_prob:
                t0 = time.time()
                renewed = store.renew(spec.slot_id, held, spec.lease_s)
                t1 = time.time()
                for c in renewed:
                    epoch, lease = claim_terms(c)
                    log.write("renew", c.topic_id, c.partition_id, epoch, t0, t1, lease.timestamp())
                held = renewed
                continue
            t0 = time.time()
            released = {c.key for c in store.release(spec.slot_id, held)}
            t1 = time.time()
            for c in held:
                log.write("release", c.topic_id, c.partition_id, c.claim_epoch, t0, t1, c.key in released)
            held = ()
        store.release(spec.slot_id, held)
        log.write(
            "stats",
            store.cas_conflicts,
            store.retries,
            time.process_time() - cpu0,
            store.deadlocks,
            store.lock_wait_timeouts,
        )
    finally:
        log.close()
        store.close()


def hold_loop(  # noqa: PLR0917 - a multiprocessing target takes its arguments positionally
    params: MySQLParams, mode: str, slot_id: str, wants: dict[str, int], lease_s: float, ready: Any
) -> None:
    """Claim ``wants`` and keep renewing until killed (the SIGKILL test's victim)."""
    from lagsched.adapters.claims import ClaimStore
    from lagsched.adapters.mysql import connect
    from lagsched.core.claims import LockMode

    store = ClaimStore(connect(params), LockMode(mode))
    held = list(store.claim(slot_id, wants, lease_s).claims)
    ready.put([[c.topic_id, c.partition_id, c.claim_epoch] for c in held])
    while True:
        time.sleep(lease_s / 4)
        held = store.renew(slot_id, held, lease_s)


# --------------------------------------------------------------------------- checkers


@dataclass(frozen=True, slots=True)
class PollResult:
    """What the polling checker saw.

    Attributes:
        polls: table snapshots taken.
        double_claims: an epoch seen with two different holders, or an epoch going back.
        stale_commits: a committed offset going down, or one from an epoch the row never reached.
        others_busy: the most sessions seen at once running a statement against another database of
            the server (other users of a shared server, whose lock waits InnoDB's counters include).
    """

    polls: int
    double_claims: int
    stale_commits: int
    others_busy: int = 0


def poll_table(params: MySQLParams, interval_s: float, stop: EventType, out: Any) -> None:
    """Independent checker: snapshot the table every ``interval_s`` until ``stop``; put a PollResult."""
    from lagsched.adapters.mysql import connect

    conn = connect(params)
    holder_of: dict[tuple[str, int, int], str] = {}
    last_epoch: dict[tuple[str, int], int] = {}
    last_offset: dict[tuple[str, int], int] = {}
    polls = doubles = stales = others = 0
    while True:
        stopping = stop.is_set()
        with conn.cursor() as cur:
            cur.execute(
                "SELECT topic_id, partition_id, claimed_by, claim_epoch, committed_offset FROM topic_partitions"
            )
            rows = cur.fetchall()
            # Without the PROCESS privilege this lists the sessions of this user only, which on the
            # local stack is every lagsched test and benchmark.
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query'"
                " AND ID <> CONNECTION_ID() AND NOT (DB <=> %s)",
                (params.database,),
            )
            others = max(others, int((cur.fetchone() or (0,))[0]))
        conn.commit()
        polls += 1
        for tid, p, holder, epoch, offset in rows:
            key = (str(tid), int(p))
            e = int(epoch)
            if e < last_epoch.get(key, 0):
                doubles += 1
            last_epoch[key] = e
            if holder is not None:
                seen = holder_of.setdefault((key[0], key[1], e), str(holder))
                if seen != holder:
                    doubles += 1
            if offset is not None:
                o = int(offset)
                if o < last_offset.get(key, -1) or o // OFFSET_EPOCH > e:
                    stales += 1
                last_offset[key] = o
        if stopping:
            break
        time.sleep(interval_s)
    conn.close()
    out.put(PollResult(polls, doubles, stales, others))


@dataclass(frozen=True, slots=True)
class HistoryCheck:
    """The post-run check of all claimers' event logs.

    Attributes:
        claims: rows claimed; ``claim_calls`` claim calls; ``latencies_ms`` their latencies.
        commits: offsets committed; ``refused`` commits refused with StaleClaimError.
        renews, releases: successful renewals and releases.
        double_claims: a (row, epoch) claimed twice, or a renew/release that succeeded after a
            higher epoch's claim of the row had returned.
        stale_commits: a commit that succeeded after a higher epoch's claim of the row had returned,
            or after its own lease had run out.
        cas_conflicts, retries: races lost to other claimers, and attempts retried (after
            a 1205/1213 or a round that lost every race).
        deadlocks, lock_wait_timeouts: 1213 and 1205 errors the claimers' transactions got.
        contended_calls: claims that ended ``contended`` (short although rows were free).
        refused_reasons: refused commits per ``StaleReason``.
        cpu_s: CPU seconds the claimer processes used while looping.
    """

    claims: int = 0
    claim_calls: int = 0
    commits: int = 0
    refused: int = 0
    renews: int = 0
    releases: int = 0
    double_claims: int = 0
    stale_commits: int = 0
    cas_conflicts: int = 0
    retries: int = 0
    deadlocks: int = 0
    lock_wait_timeouts: int = 0
    contended_calls: int = 0
    refused_reasons: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    latencies_ms: tuple[float, ...] = field(default=(), repr=False)


def read_events(paths: Iterable[Path]) -> list[tuple[str, list[Any]]]:
    """(slot log name, event) pairs from every claimer log."""
    events: list[tuple[str, list[Any]]] = []
    for path in paths:
        with path.open() as f:
            events.extend((path.stem, json.loads(line)) for line in f if line.strip())
    return events


def check_history(events: Sequence[tuple[str, list[Any]]]) -> HistoryCheck:
    """Check every claimer's log against the others'; see ``HistoryCheck`` for what counts.

    Times are conservative: a claim counts as taken at its call's *return* and an operation as
    done at its *start*, so "op started after a higher claim returned" proves the op ran after the
    takeover was committed, whatever the scheduling in between. No false positives by design.
    """
    claims: dict[tuple[str, int], list[tuple[int, float, str]]] = defaultdict(list)
    lease: dict[tuple[str, int, int], float] = {}
    ops: list[tuple[str, tuple[str, int], int, float, str]] = []
    calls: list[float] = []
    n: defaultdict[str, int] = defaultdict(int)
    reasons: defaultdict[str, int] = defaultdict(int)
    cas = transient = 0
    cpu = 0.0
    for slot, ev in events:
        kind = ev[0]
        if kind == "call":
            calls.append((ev[2] - ev[1]) * 1000)
            n["contended"] += len(ev) > 4 and ev[4] == "contended"
        elif kind == "claim":
            key = (ev[1], ev[2])
            claims[key].append((ev[3], ev[5], slot))
            lease[(ev[1], ev[2], ev[3])] = ev[6]
            n["claims"] += 1
        elif kind == "commit":
            ops.append(("commit", (ev[1], ev[2]), ev[3], ev[5], slot))
            n["commits"] += 1
        elif kind == "refused":
            n["refused"] += 1
            reasons[ev[6] if len(ev) > 6 else ""] += 1
        elif kind == "renew":
            ops.append(("renew", (ev[1], ev[2]), ev[3], ev[4], slot))
            key3 = (ev[1], ev[2], ev[3])
            lease[key3] = max(lease.get(key3, 0.0), ev[6])
            n["renews"] += 1
        elif kind == "release" and ev[6]:
            ops.append(("release", (ev[1], ev[2]), ev[3], ev[4], slot))
            n["releases"] += 1
        elif kind == "stats":
            cas += ev[1]
            transient += ev[2]
            cpu += ev[3]
            n["deadlocks"] += ev[4] if len(ev) > 4 else 0
            n["lock_wait_timeouts"] += ev[5] if len(ev) > 5 else 0
    doubles = stales = 0
    # Earliest return time of a claim with epoch > e, per row: suffix minimum over epochs.
    takeover: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for key, cs in claims.items():
        epochs = [c[0] for c in cs]
        doubles += len(epochs) - len(set(epochs))
        cs.sort()
        suffix: list[tuple[int, float]] = []
        best = float("inf")
        for epoch, returned, _slot in reversed(cs):
            best = min(best, returned)
            suffix.append((epoch, best))
        takeover[key] = suffix[::-1]
    for kind, key, epoch, started, _slot in ops:
        later = next((t for e, t in takeover.get(key, []) if e > epoch), float("inf"))
        after_takeover = started > later
        if kind == "commit":
            expired = started > lease.get((key[0], key[1], epoch), float("inf")) + CLOCK_SLACK_S
            stales += after_takeover or expired
        else:
            doubles += after_takeover
    return HistoryCheck(
        claims=n["claims"],
        claim_calls=len(calls),
        commits=n["commits"],
        refused=n["refused"],
        renews=n["renews"],
        releases=n["releases"],
        double_claims=doubles,
        stale_commits=stales,
        cas_conflicts=cas,
        retries=transient,
        deadlocks=n["deadlocks"],
        lock_wait_timeouts=n["lock_wait_timeouts"],
        contended_calls=n["contended"],
        refused_reasons=dict(reasons),
        cpu_s=cpu,
        latencies_ms=tuple(calls),
    )


# --------------------------------------------------------------------------- running


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run of N claimers: the log check, the poller's verdict, and the measured window (from the
    go signal until every claimer exited): its wall time, MariaDB's CPU-seconds in it and the whole
    machine's busy CPU-seconds in it."""

    history: HistoryCheck
    poll: PollResult
    wall_s: float
    db_cpu_s: float = 0.0
    machine_busy_s: float = 0.0


def run_claimers(
    specs: Sequence[ClaimerSpec], log_dir: Path, poll_interval_s: float = 0.05, spawn_timeout_s: float = 120.0
) -> RunResult:
    """Start one spawned process per spec and a polling checker; wait; check the logs.

    Claimers start together (after all have connected), so start-up cost is not measured.
    """
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    out = ctx.Queue()
    go = ctx.Event()
    stop = ctx.Event()
    procs = [ctx.Process(target=claimer_loop, args=(s, ready, go), daemon=True) for s in specs]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=spawn_timeout_s)
    poller = ctx.Process(target=poll_table, args=(specs[0].params, poll_interval_s, stop, out), daemon=True)
    poller.start()
    db0, busy0 = _db_cpu_s(), cpu.machine_busy_s()
    start = time.time()
    go.set()
    for p in procs:
        p.join(timeout=max(s.seconds for s in specs) + 120)
    wall = time.time() - start
    db_cpu, busy = _db_cpu_s() - db0, cpu.machine_busy_s() - busy0
    stop.set()
    poll = out.get(timeout=120)
    poller.join(timeout=30)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"{len(bad)} claimer process(es) failed, exit codes {bad}; see stderr")
    history = check_history(read_events(sorted(log_dir.glob("*.jsonl"))))
    return RunResult(history, poll, wall, db_cpu, busy)


def _db_cpu_s() -> float:
    """CPU seconds used so far by every ``mariadbd``/``mysqld`` on this host (read from /proc)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name in {"mariadbd", "mysqld"}:
            total += cpu.proc_pid_cpu_s(text, tick)
    return total


def _lock_status(params: MySQLParams) -> dict[str, int]:
    """Server-wide InnoDB row-lock waits, milliseconds spent waiting, and deadlocks, so far."""
    from lagsched.adapters.mysql import connect

    conn = connect(params)
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL STATUS WHERE Variable_name IN"
            " ('Innodb_row_lock_waits', 'Innodb_row_lock_time', 'Innodb_deadlocks')"
        )
        status = {str(k): int(v) for k, v in cur.fetchall()}
    conn.close()
    return status


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def bench_run(
    params: MySQLParams, topic_ids: Sequence[str], mode: str, claimers: int, seconds: float, *, seed: int = 0
) -> dict[str, Any]:
    """One draw of one (mode, claimers) configuration; returns its figures."""
    reset_rows(params)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lagsched-bench-") as tmp:
        specs = [
            ClaimerSpec(
                params=params,
                mode=mode,
                slot_id=str(uuid.UUID(int=i + 1)),
                topics=tuple(topic_ids),
                log_path=str(Path(tmp) / f"claimer{i:02d}.jsonl"),
                seconds=seconds,
                batch=4,
                lease_s=30.0,
                seed=seed + 1000 * claimers + i,
            )
            for i in range(claimers)
        ]
        lock0 = _lock_status(params)
        # A snapshot of 10,000 rows costs the poller about 40 ms of CPU (pymysql parses in Python):
        # at 4 a second that was a tenth of this 2-core machine taken from the claimers being
        # timed. Once a second keeps an independent check in every draw for a quarter of that;
        # the log check (check_history) sees every operation anyway.
        result = run_claimers(specs, Path(tmp), poll_interval_s=BENCH_POLL_INTERVAL_S)
        db_cpu, busy = result.db_cpu_s, result.machine_busy_s
        lock1 = _lock_status(params)
    h = result.history
    lock = {k: lock1.get(k, 0) - lock0.get(k, 0) for k in lock1}
    return {
        "claims_per_s": round(h.claims / seconds, 1),
        "p50_ms": round(_percentile(h.latencies_ms, 50), 2),
        "p99_ms": round(_percentile(h.latencies_ms, 99), 2),
        "max_ms": round(max(h.latencies_ms, default=float("nan")), 2),
        # Claimer-seconds spent waiting for row locks: InnoDB's own count of row-lock wait time
        # over the run. The counter is server-wide, so a concurrent user of the server adds to it.
        "lock_wait_s": round(lock.get("Innodb_row_lock_time", 0) / 1000, 3),
        "row_lock_waits": lock.get("Innodb_row_lock_waits", 0),
        "deadlocks": h.deadlocks,
        "server_deadlocks": lock.get("Innodb_deadlocks", 0),
        "double_claims": h.double_claims + result.poll.double_claims,
        "stale_commits": h.stale_commits + result.poll.stale_commits,
        "claim_calls": h.claim_calls,
        "contended_calls": h.contended_calls,
        "rows_claimed": h.claims,
        "commits": h.commits,
        "cas_conflicts": h.cas_conflicts,
        "retries": h.retries,
        "checker_polls": result.poll.polls,
        # Other sessions seen running statements on the server: if > 0, lock_wait_s may include theirs.
        "others_busy_on_server": result.poll.others_busy,
        # Where the time goes: CPU of the claimers and of the database over the run (2 cores give
        # 2 CPU-seconds per second).
        "claimer_cpu_s": round(h.cpu_s, 2),
        "db_cpu_s": round(db_cpu, 2),
        "wall_s": round(result.wall_s, 2),
        # CPU-seconds the machine spent on anything but the claimers and MariaDB during the draw:
        # other people's work on a shared machine (plus this checker, about 0.05 s a second). The
        # load average is no guide, as it counts this benchmark's own claimers.
        "others_cpu_s": round(max(0.0, busy - h.cpu_s - db_cpu), 2),
        "load_1m_before": round(load_before, 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
    }


#: Per-draw figures whose worst case is the largest value, and those whose worst is the smallest.
_WORST_HIGH = (
    "p50_ms",
    "p99_ms",
    "max_ms",
    "lock_wait_s",
    "row_lock_waits",
    "deadlocks",
    "contended_calls",
    "others_busy_on_server",
    "others_cpu_s",
)
_WORST_LOW = ("claims_per_s",)
_TOTALS = ("double_claims", "stale_commits", "claim_calls", "rows_claimed", "commits", "server_deadlocks")


def summarize(mode: str, claimers: int, seconds: float, draws: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One claims.json run: the worst case over the draws, the safety counts summed, every draw kept.

    >>> d = [{"p99_ms": 10.0, "claims_per_s": 900.0, "double_claims": 0}, {"p99_ms": 30.0, "claims_per_s": 800.0}]
    >>> r = summarize("skip_locked", 16, 8.0, d)
    >>> r["p99_ms"], r["claims_per_s"], r["median"]["p99_ms"], r["draws"]
    (30.0, 800.0, 20.0, 2)
    """
    run: dict[str, Any] = {"mode": mode, "claimers": claimers, "seconds": seconds, "draws": len(draws)}
    median: dict[str, float] = {}
    for key in (*_WORST_HIGH, *_WORST_LOW):
        values = [d[key] for d in draws if key in d]
        if values:
            run[key] = max(values) if key in _WORST_HIGH else min(values)
            median[key] = round(statistics.median(values), 3)
    for key in _TOTALS:
        run[key] = sum(d.get(key, 0) for d in draws)
    run["median"] = median
    run["per_draw"] = list(draws)
    return run


def _table(runs: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'mode':<12} {'claimers':>8} {'claims/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f" {'lock wait s':>11} {'deadlocks':>9} {'contended':>9} {'double':>7} {'stale':>6} {'others':>6}"
        f" {'others cpu s':>12}"
    )
    lines = [head, "-" * len(head)]
    lines += [
        f"{r['mode']:<12} {r['claimers']:>8} {r['claims_per_s']:>10.1f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}"
        f" {r['max_ms']:>8.2f} {r['lock_wait_s']:>11.2f} {r['deadlocks']:>9} {r['contended_calls']:>9}"
        f" {r['double_claims']:>7} {r['stale_commits']:>6} {r.get('others_busy_on_server', 0):>6}"
        f" {r.get('others_cpu_s', 0):>12.1f}"
        for r in runs
    ]
    return "\n".join(lines)


#: The targets (issue #8): latency, since on 2 cores every mode saturates the CPU and throughput
#: cannot show what row-lock queueing costs.
SKIP_LOCKED_P99_MAX_MS = 50.0
FOR_UPDATE_P99_RATIO_MIN = 2.0


def targets(runs: Sequence[dict[str, Any]], claimers: int) -> dict[str, Any]:
    """The targets at ``claimers``, judged on the worst case over the draws.

    ``for_update_over_skip_locked_p99`` is for_update's worst p99 over skip_locked's worst p99;
    ``..._paired_min`` pairs the two modes' p99 draw by draw (draws interleave the modes, so both
    saw the same background load) and takes the smallest ratio.
    """
    by = {(r["mode"], r["claimers"]): r for r in runs}
    skip, plain = by.get(("skip_locked", claimers)), by.get(("for_update", claimers))
    if skip is None or plain is None:
        return {}
    paired = [
        f["p99_ms"] / s["p99_ms"] for s, f in zip(skip["per_draw"], plain["per_draw"], strict=False) if s["p99_ms"] > 0
    ]
    ratio = plain["p99_ms"] / skip["p99_ms"] if skip["p99_ms"] > 0 else float("inf")
    safe = all(r["double_claims"] == 0 and r["stale_commits"] == 0 for r in runs)
    return {
        "claimers": claimers,
        "skip_locked_p99_ms": skip["p99_ms"],
        "skip_locked_p99_max_ms": SKIP_LOCKED_P99_MAX_MS,
        "for_update_p99_ms": plain["p99_ms"],
        "for_update_over_skip_locked_p99": round(ratio, 2),
        "for_update_over_skip_locked_p99_paired_min": round(min(paired), 2) if paired else None,
        "for_update_over_skip_locked_p99_min": FOR_UPDATE_P99_RATIO_MIN,
        "no_double_claims_no_stale_commits": safe,
        "met": skip["p99_ms"] < SKIP_LOCKED_P99_MAX_MS and ratio >= FOR_UPDATE_P99_RATIO_MIN and safe,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table and write ``bench/results/claims.json``."""
    from lagsched.connections import mysql_params
    from lagsched_dev.stack.config import REPO_ROOT

    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.bench.claims", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "claims.json")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per draw (default 6)")
    parser.add_argument("--draws", type=int, default=3, help="draws per configuration, interleaved (default 3)")
    parser.add_argument("--topics", type=int, default=1, help="topics the 10,000 rows are split over (default 1)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--claimers", default=",".join(map(str, CLAIMERS)))
    args = parser.parse_args(argv)
    if args.topics < 1 or ROWS % args.topics:
        parser.error(f"--topics must divide {ROWS}")
    if args.draws < 1:
        parser.error("--draws must be >= 1")
    from lagsched_dev.bench import use_local_stack_connections

    use_local_stack_connections()  # outside Airflow and the tests: the local stack, as the CLI does
    modes = args.modes.split(",")
    counts = [int(c) for c in args.claimers.split(",")]
    params = create_database(mysql_params())
    draws: dict[tuple[str, int], list[dict[str, Any]]] = {(m, n): [] for m in modes for n in counts}
    load_start = os.getloadavg()
    try:
        topic_ids = seed_topics(params, [ROWS // args.topics] * args.topics)
        # Draws go round every configuration in turn, so a burst of load from elsewhere on a shared
        # machine lands on all of them rather than on one mode's draws.
        for draw in range(args.draws):
            for mode in modes:
                for n in counts:
                    figures = bench_run(params, topic_ids, mode, n, args.seconds, seed=draw * 100_003)
                    draws[(mode, n)].append(figures)
                    print(
                        f"draw {draw + 1}/{args.draws} {mode:<12} {n:>3} claimers: {figures['claims_per_s']:>8.1f}"
                        f" claims/s, p99 {figures['p99_ms']} ms, lock wait {figures['lock_wait_s']} s,"
                        f" others' CPU {figures['others_cpu_s']} s",
                        flush=True,
                    )
    finally:
        drop_database(params)
    runs = [summarize(m, n, args.seconds, d) for (m, n), d in draws.items()]
    print()
    print(f"worst case over {args.draws} draws:")
    print(_table(runs))
    verdict = targets(runs, max(counts))
    if verdict:
        print(
            f"\nat {verdict['claimers']} claimers: skip_locked p99 {verdict['skip_locked_p99_ms']} ms"
            f" (target < {SKIP_LOCKED_P99_MAX_MS:g}), for_update/skip_locked p99"
            f" {verdict['for_update_over_skip_locked_p99']}x, paired min"
            f" {verdict['for_update_over_skip_locked_p99_paired_min']}x (target >= {FOR_UPDATE_P99_RATIO_MIN:g}x):"
            f" {'met' if verdict['met'] else 'NOT met'}"
        )
    meta = {
        "poll_interval_s": BENCH_POLL_INTERVAL_S,
        "rows": ROWS,
        "topics": args.topics,
        "batch": 4,
        "seconds_per_draw": args.seconds,
        "draws": args.draws,
        "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "targets": verdict, "setup": meta}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
