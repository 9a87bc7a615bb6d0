"""Which slot owns which topic, stored next to the claim table, and what each slot should claim.

Balanced HRW (``core/balance.py``) is sticky: it is computed from the assignment in force, so that
assignment is kept in ``topic_owners`` (one row per topic and lane, V002) together with a hash of
the inputs it was computed for in ``assignment_state``. ``current_assignment``:

1. reads the enabled topics (``topic_specs``) and takes the live slots from the caller (Redis);
2. if the stored assignment was computed for exactly these inputs, returns it (the common case:
   one indexed read, no write);
3. otherwise locks ``assignment_state``, re-reads (another slot may have just recomputed), computes
   ``balanced_assign(topics, live, previous=stored)``, rewrites ``topic_owners`` and bumps the
   generation, all in one transaction.

If that fails (say the database is read-only for a moment) it falls back to plain HRW (``assign``),
which needs no state and on which every slot agrees; the claim protocol keeps any disagreement
between slots safe (leases and epochs), it only costs a little efficiency until the next read.

``slot_wants`` then turns the assignment into the ``wants`` map a slot passes to
``ClaimStore.claim``: for each owned topic, the fair share of its lane.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pymysql

from lagsched.core.balance import balanced_assign
from lagsched.core.claims import slot_wants
from lagsched.core.rendezvous import Assignment, TopicSpec, assign

if TYPE_CHECKING:
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = ["OwnershipView", "current_assignment", "inputs_hash", "load_stored", "topic_specs", "wants_for"]

log = logging.getLogger(__name__)

_LOCK = {True: " FOR UPDATE", False: ""}


@dataclass(frozen=True, slots=True)
class OwnershipView:
    """The assignment a slot acts on and where it came from.

    Attributes:
        assignment: owners per topic in lane order.
        topics: the enabled topics it covers.
        generation: ``assignment_state.generation`` it was read or written at; -1 for the plain-HRW
            fallback.
        recomputed: whether this call recomputed and stored it.
    """

    assignment: Assignment
    topics: tuple[TopicSpec, ...]
    generation: int
    recomputed: bool


def topic_specs(conn: Connection) -> list[TopicSpec]:
    """Every enabled topic as a ``TopicSpec`` (partitions, ``linker_workers``), by topic id."""
    with conn.cursor() as cur:
        cur.execute("SELECT topic_id, partition_count, linker_workers FROM topics WHERE enabled ORDER BY topic_id")
        rows = cur.fetchall()
    conn.commit()
    return [TopicSpec(str(t), int(p), max(1, int(k))) for t, p, k in rows]


def inputs_hash(topics: Sequence[TopicSpec], live_slots: Sequence[str]) -> str:
    """sha256 over the sorted live slots and the sorted (topic, partitions, linker_workers) list."""
    h = hashlib.sha256()
    for s in sorted(live_slots):
        h.update(b"s" + s.encode() + b"\0")
    for t in sorted(topics, key=lambda t: t.topic_id):
        h.update(f"t{t.topic_id}:{t.partitions}:{t.linker_workers}:{t.weight!r}\0".encode())
    return h.hexdigest()


def load_stored(conn: Connection, *, lock: bool = False) -> tuple[Assignment, int, str]:
    """The stored assignment, its generation and inputs hash (empty assignment if none yet).

    With ``lock`` the ``assignment_state`` row stays locked until the caller commits.
    """
    with conn.cursor() as cur:
        cur.execute("SELECT generation, inputs_hash FROM assignment_state WHERE id = 1" + _LOCK[lock])  # noqa: S608
        row = cur.fetchone()
        generation, digest = (int(row[0]), str(row[1])) if row else (0, "")
        cur.execute("SELECT topic_id, lane, slot_id FROM topic_owners ORDER BY topic_id, lane")
        owners: dict[str, list[str]] = {}
        for topic_id, _lane, slot_id in cur.fetchall():
            owners.setdefault(str(topic_id), []).append(str(slot_id))
    return Assignment({t: tuple(s) for t, s in owners.items()}), generation, digest


def _store(conn: Connection, assignment: Assignment, generation: int, digest: str) -> None:
    with conn.cursor() as cur:
        cur.execute("DELETE FROM topic_owners")
        rows = [(t, lane, s, generation) for t, owners in assignment for lane, s in enumerate(owners)]
        if rows:
            cur.executemany(
                "INSERT INTO topic_owners (topic_id, lane, slot_id, generation) VALUES (%s, %s, %s, %s)", rows
            )
        cur.execute(
            "UPDATE assignment_state SET generation = %s, inputs_hash = %s, computed_at = CURRENT_TIMESTAMP(6)"
            " WHERE id = 1",
            (generation, digest),
        )


def current_assignment(conn: Connection, live_slots: Sequence[str]) -> OwnershipView:
    """The assignment for the enabled topics and these live slots, recomputed and stored if stale."""
    topics = tuple(topic_specs(conn))
    if not live_slots:
        return OwnershipView(Assignment({}), topics, -1, False)
    digest = inputs_hash(topics, live_slots)
    stored, generation, stored_digest = load_stored(conn)
    conn.commit()
    if stored_digest == digest:
        return OwnershipView(stored, topics, generation, False)
    try:
        previous, generation, stored_digest = load_stored(conn, lock=True)
        if stored_digest == digest:  # another slot recomputed while we waited for the lock
            conn.commit()
            return OwnershipView(previous, topics, generation, False)
        fresh = balanced_assign(topics, live_slots, previous if previous.owners else None)
        _store(conn, fresh, generation + 1, digest)
        conn.commit()
        log.info("assignment generation %d: %d topics over %d slots", generation + 1, len(topics), len(live_slots))
        return OwnershipView(fresh, topics, generation + 1, True)
    except pymysql.MySQLError as exc:
        conn.rollback()
        log.warning("could not store the balanced assignment (%s); using plain HRW for now", exc)
        return OwnershipView(assign(topics, live_slots), topics, -1, False)


def wants_for(slot_id: str, view: OwnershipView) -> dict[str, int]:
    """The ``wants`` map for ``ClaimStore.claim``: the slot's fair share of each topic it owns."""
    return slot_wants(slot_id, view.assignment, view.topics)
