"""Which slot owns which topic, stored next to the claim table, and what each slot should claim.

Balanced HRW (``core/balance.py``) is sticky: it is computed from the assignment in force, so that
assignment is kept in ``topic_owners`` (one row per topic and lane, V002) together with a hash of
the inputs it was computed for and a generation in ``cluster_assignment_state`` (V007). Each Kafka
cluster has its own assignment, over its own topics and its own live slots: several clusters
share one database without handing each other's lanes around. ``current_assignment``:

1. reads the cluster's enabled topics (``topic_specs``) and takes its live slots from the caller
   (Redis);
2. reads the stored assignment, its generation and inputs hash, without locking; if it was
   computed for exactly these inputs, returns it (the common case: indexed reads, no write);
3. otherwise computes ``balanced_assign(topics, live, previous=stored)`` **holding no lock** (it
   takes up to a second at 10,000 topics x 1,000 slots, and slots would queue behind it);
4. then locks the cluster's ``cluster_assignment_state`` row and compares: if the generation is still the one it
   computed from, it writes only the topics whose owners changed, bumps the generation and
   commits (milliseconds under the lock); if another slot stored in the meantime, it lets go and
   starts again from step 2 with that newer assignment (which, for the same inputs, it simply
   returns). After ``max_attempts`` lost races it computes while holding the lock, so a
   recompute always lands.

Every caller therefore ends on one stored generation, computed from the one before it.

If the database fails (say it is read-only for a moment) it falls back to plain HRW (``assign``),
which needs no state and on which every slot agrees; the claim protocol keeps any disagreement
between slots safe (leases and epochs), it only costs a little efficiency until the next read.

``slot_wants`` then turns the assignment into the ``wants`` map a slot passes to
``ClaimStore.claim``: for each owned topic, the fair share of its lane.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pymysql

from lagsched.adapters.topics import load_topics
from lagsched.adapters.transactions import commit, end_reads, roll_back, transaction
from lagsched.core.balance import balanced_assign
from lagsched.core.claims import slot_wants
from lagsched.core.rendezvous import Assignment, TopicSpec, assign, check_slot_ids

if TYPE_CHECKING:
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "OwnershipView",
    "current_assignment",
    "inputs_hash",
    "load_stored",
    "topic_specs",
    "wants_for",
]

log = logging.getLogger(__name__)

#: Optimistic rounds (compute unlocked, then compare) before computing under the lock.
DEFAULT_MAX_ATTEMPTS = 3

# Topic ids per DELETE ... IN (...) statement when rewriting changed topics.
_DELETE_CHUNK = 500

# Re-reads when a writer commits between the two reads of an unlocked load_stored.
_CONSISTENT_READS = 5


@dataclass(frozen=True, slots=True)
class OwnershipView:
    """The assignment a slot acts on and where it came from.

    Attributes:
        assignment: owners per topic in lane order.
        topics: the enabled topics it covers.
        generation: ``cluster_assignment_state.generation`` it was read or written at; -1 for the
            plain-HRW fallback.
        recomputed: whether this call recomputed and stored it.
        lock_held_s: seconds this call held the cluster's state row lock (0 when it only read).
        attempts: compute-and-compare rounds this call ran (0 when the stored one was current).
    """

    assignment: Assignment
    topics: tuple[TopicSpec, ...]
    generation: int
    recomputed: bool
    lock_held_s: float = 0.0
    attempts: int = 0


def topic_specs(conn: Connection, cluster: str) -> list[TopicSpec]:
    """Every enabled topic of ``cluster`` as a ``TopicSpec`` (partitions, ``linker_workers``), by topic id.

    Read through the topics repository, the one home of the ``topics`` table.
    """
    rows = sorted(load_topics(conn, cluster), key=lambda t: t.topic_id)
    return [TopicSpec(t.topic_id, t.partition_count, max(1, t.linker_workers)) for t in rows]


def inputs_hash(topics: Sequence[TopicSpec], live_slots: Sequence[str]) -> str:
    """sha256 over the sorted live slots and the sorted (topic, partitions, linker_workers) list."""
    h = hashlib.sha256()
    for s in sorted(live_slots):
        h.update(b"s" + s.encode() + b"\0")
    for t in sorted(topics, key=lambda t: t.topic_id):
        h.update(f"t{t.topic_id}:{t.partitions}:{t.linker_workers}:{t.weight!r}\0".encode())
    return h.hexdigest()


_STATE_SQL = {
    False: "SELECT generation, inputs_hash FROM cluster_assignment_state WHERE cluster = %s",
    True: "SELECT generation, inputs_hash FROM cluster_assignment_state WHERE cluster = %s FOR UPDATE",
}


def _read_state(conn: Connection, cluster: str, *, lock: bool) -> tuple[int, str]:
    with conn.cursor() as cur:
        cur.execute(_STATE_SQL[lock], (cluster,))
        row = cur.fetchone()
    return (int(row[0]), str(row[1])) if row else (0, "")


def _ensure_state_row(conn: Connection, cluster: str) -> None:
    """Create the cluster's state row if it has none, in a transaction of its own.

    Writers lock this row, so it must exist before the first of them; created inside their
    transactions instead, concurrent first writers deadlock on the insert's gap locks.
    """
    with transaction(conn) as cur:
        cur.execute("SELECT 1 FROM cluster_assignment_state WHERE cluster = %s", (cluster,))
        if cur.fetchone() is None:
            cur.execute("INSERT IGNORE INTO cluster_assignment_state (cluster) VALUES (%s)", (cluster,))


def _read_owners(conn: Connection, cluster: str) -> Assignment:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT topic_id, lane, slot_id FROM topic_owners WHERE cluster = %s ORDER BY topic_id, lane", (cluster,)
        )
        owners: dict[str, list[str]] = {}
        for topic_id, _lane, slot_id in cur.fetchall():
            owners.setdefault(str(topic_id), []).append(str(slot_id))
    return Assignment({t: tuple(s) for t, s in owners.items()})


def load_stored(conn: Connection, cluster: str, *, lock: bool = False) -> tuple[Assignment, int, str]:
    """The cluster's stored assignment, its generation and inputs hash (empty assignment if none yet).

    With ``lock`` the cluster's ``cluster_assignment_state`` row stays locked until the caller commits, so no writer
    can change either table in between. Without it the generation is read before and after the
    owners, and the read repeats if they differ: every writer bumps it in the same transaction
    as its owners, so equal generations mean the owners are those of that generation (under READ
    COMMITTED, where each statement sees the latest commits, as under REPEATABLE READ).
    """
    if lock:
        generation, digest = _read_state(conn, cluster, lock=True)
        return _read_owners(conn, cluster), generation, digest
    for _ in range(_CONSISTENT_READS):
        generation, digest = _read_state(conn, cluster, lock=False)
        owners = _read_owners(conn, cluster)
        if _read_state(conn, cluster, lock=False)[0] == generation:
            return owners, generation, digest
        end_reads(conn)  # a fresh snapshot, should the session run REPEATABLE READ
    # Writers keep committing between our reads: read under the lock, which waits them out.
    return load_stored(conn, cluster, lock=True)


def _store_changes(
    conn: Connection, cluster: str, old: Assignment, new: Assignment, *, generation: int, digest: str
) -> int:
    """Rewrite the owners of the topics whose owners changed; returns how many topics that was.

    A sticky recompute changes a few topics (a join: the new slot's share), so only those rows
    are written, keeping the time under the lock short.
    """
    changed = sorted(t for t in old.owners.keys() | new.owners.keys() if old.owners_of(t) != new.owners_of(t))
    with conn.cursor() as cur:
        if old.owners and len(changed) * 2 > len(old.owners):
            cur.execute("DELETE FROM topic_owners WHERE cluster = %s", (cluster,))
            changed = sorted(new.owners)
        elif old.owners:
            gone = [t for t in changed if t in old.owners]
            for lo in range(0, len(gone), _DELETE_CHUNK):
                chunk = gone[lo : lo + _DELETE_CHUNK]
                marks = ", ".join(["%s"] * len(chunk))
                cur.execute(f"DELETE FROM topic_owners WHERE topic_id IN ({marks})", chunk)  # noqa: S608
        rows = [(cluster, t, lane, s, generation) for t in changed for lane, s in enumerate(new.owners_of(t))]
        if rows:
            cur.executemany(
                "INSERT INTO topic_owners (cluster, topic_id, lane, slot_id, generation) VALUES (%s, %s, %s, %s, %s)",
                rows,
            )
        cur.execute(
            "UPDATE cluster_assignment_state SET generation = %s, inputs_hash = %s,"
            " computed_at = CURRENT_TIMESTAMP(6) WHERE cluster = %s",
            (generation, digest, cluster),
        )
    return len(changed)


def current_assignment(
    conn: Connection,
    cluster: str,
    live_slots: Sequence[str],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    clock: Callable[[], float] = time.monotonic,
) -> OwnershipView:
    """The assignment of ``cluster``'s enabled topics to its live slots, recomputed and stored if stale.

    The balanced assignment is computed without holding any lock; only the compare-and-write
    holds the cluster's ``cluster_assignment_state`` row lock (``OwnershipView.lock_held_s``). See the module doc.

    Raises:
        AssignmentError: a live slot id is unusable (empty, repeated, not valid Unicode).
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts={max_attempts}; must be >= 1")
    topics = tuple(topic_specs(conn, cluster))
    if not live_slots:
        return OwnershipView(Assignment({}), topics, -1, False)
    check_slot_ids(live_slots)
    digest = inputs_hash(topics, live_slots)
    held_s = 0.0
    try:
        for attempt in range(1, max_attempts + 1):
            stored, generation, stored_digest = load_stored(conn, cluster)
            end_reads(conn)
            if stored_digest == digest:
                return OwnershipView(stored, topics, generation, False, held_s, attempt - 1)
            if stored_digest == "":
                # No assignment stored for the cluster yet: its state row may not exist either,
                # and the compare-and-write below locks it. (The common case, a current stored
                # assignment, returned above without this write.)
                _ensure_state_row(conn, cluster)
            last = attempt == max_attempts
            if last:
                # Lost every race so far: compute under the lock, so this one cannot be lost.
                stored, generation, stored_digest = load_stored(conn, cluster, lock=True)
                locked_at = clock()
                if stored_digest == digest:
                    end_reads(conn)
                    held_s += clock() - locked_at
                    return OwnershipView(stored, topics, generation, False, held_s, attempt)
            fresh = balanced_assign(topics, live_slots, stored if stored.owners else None)
            if not last:
                now_generation, _ = _read_state(conn, cluster, lock=True)
                locked_at = clock()
                if now_generation != generation:
                    # Another slot stored meanwhile: start again from what it stored.
                    roll_back(conn)
                    held_s += clock() - locked_at
                    continue
            changed = _store_changes(conn, cluster, stored, fresh, generation=generation + 1, digest=digest)
            commit(conn)
            held_s += clock() - locked_at
            log.info(
                "%s: assignment generation %d: %d topics over %d slots, %d topics changed owners; lock held %.3f s",
                cluster,
                generation + 1,
                len(topics),
                len(live_slots),
                changed,
                held_s,
            )
            return OwnershipView(fresh, topics, generation + 1, True, held_s, attempt)
    except pymysql.MySQLError as exc:
        roll_back(conn)
        log.warning("could not store the balanced assignment (%s); using plain HRW for now", exc)
    return OwnershipView(assign(topics, live_slots), topics, -1, False, held_s)


def wants_for(slot_id: str, view: OwnershipView) -> dict[str, int]:
    """The ``wants`` map for ``ClaimStore.claim``: the slot's fair share of each topic it owns."""
    return slot_wants(slot_id, view.assignment, view.topics)
