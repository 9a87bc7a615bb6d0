"""Whether a writer schema may evolve a typed table: decided once, recorded in ``schema_decisions``.

The first slot to meet a (table, part, schema id) decides it (part: ``value`` or ``key``, the
columns the schema is for), holding the table's lock (`table_lock`)
while it compares the schema with the table's and evolves the table; the decision is recorded
first-writer-wins and never changes. So where a schema id's records land (the typed table, or the
dead-letter table as incompatible) is the same for every slot and every redo of a range, whatever
order the schemas arrived in: exactly once across tables rests on it (docs/lake.md).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

from lagsched.adapters.transactions import transaction
from lagsched.core.errors import LagschedError

__all__ = ["Decisions", "load_decisions", "record_decision", "table_lock"]

#: Seconds a slot waits for another that is deciding a schema of the same table.
LOCK_WAIT_S = 60
_REASON_CHARS = 2000


#: (table, part, schema id) -> the reason the schema was refused for the table; None: accepted.
Decisions = dict[tuple[str, str, int], str | None]


def load_decisions(conn: Any, tables: list[str]) -> Decisions:
    """The recorded decisions of ``tables``."""
    if not tables:
        return {}
    marks = ", ".join(["%s"] * len(tables))
    with transaction(conn) as cur:
        cur.execute(
            "SELECT table_name, part, schema_id, accepted, reason FROM schema_decisions"  # noqa: S608 - placeholders only
            f" WHERE table_name IN ({marks})",
            tables,
        )
        rows = cur.fetchall()
    return {
        (str(t), str(part), int(i)): (None if accepted else str(reason or "incompatible"))
        for t, part, i, accepted, reason in rows
    }


def record_decision(
    conn: Any, table: str, part: str, schema_id: int, *, refused: str | None, slot_id: str
) -> str | None:
    """Record a decision unless one is recorded already; the decision that stands (None: accepted)."""
    with transaction(conn) as cur:
        cur.execute(
            "INSERT IGNORE INTO schema_decisions (table_name, part, schema_id, accepted, reason, decided_by)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (table, part, schema_id, refused is None, None if refused is None else refused[:_REASON_CHARS], slot_id),
        )
        cur.execute(
            "SELECT accepted, reason FROM schema_decisions WHERE table_name = %s AND part = %s AND schema_id = %s",
            (table, part, schema_id),
        )
        accepted, reason = cur.fetchone() or (True, None)  # the row is there: inserted or found
    return None if accepted else str(reason or "incompatible")


@contextlib.contextmanager
def table_lock(conn: Any, table: str) -> Iterator[None]:
    """Hold the server's named lock of ``table`` (``GET_LOCK``) while deciding and evolving it.

    Raises:
        LagschedError: another slot held it for `LOCK_WAIT_S` (stuck deciding): the batch is tried again.
    """
    # MySQL's lock names are at most 64 characters: a digest of the table's identifier.
    name = "lagsched.schema." + hashlib.sha256(table.encode()).hexdigest()[:40]
    with transaction(conn) as cur:
        cur.execute("SELECT GET_LOCK(%s, %s)", (name, LOCK_WAIT_S))
        (got,) = cur.fetchone() or (None,)
    if got != 1:
        raise LagschedError(f"{table}: another slot has been deciding a schema for {LOCK_WAIT_S} s; trying again")
    try:
        yield
    finally:
        with transaction(conn) as cur:
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
