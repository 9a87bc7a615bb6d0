"""Which dead letters a replay landed in their typed table: ``dead_letter_replays`` (docs/routing.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lagsched.adapters.transactions import transaction

__all__ = ["record_replayed", "replayed"]

_CHUNK = 1000


def replayed(conn: Any, dead_letter_table: str, topic: str) -> set[tuple[int, int]]:
    """The (partition, offset) of ``topic``'s dead letters already replayed."""
    with transaction(conn) as cur:
        cur.execute(
            "SELECT kafka_partition, kafka_offset FROM dead_letter_replays WHERE dead_letter_table = %s AND topic = %s",
            (dead_letter_table, topic),
        )
        return {(int(p), int(o)) for p, o in cur.fetchall()}


def record_replayed(
    conn: Any, dead_letter_table: str, topic: str, *, target: str, rows: Iterable[tuple[int, int]], replay_id: str
) -> int:
    """Record dead letters as replayed (a row already recorded stays as it was); how many were new."""
    values = [(dead_letter_table, topic, p, o, target, replay_id) for p, o in sorted(set(rows))]
    added = 0
    with transaction(conn) as cur:
        for i in range(0, len(values), _CHUNK):
            added += (
                cur.executemany(
                    "INSERT IGNORE INTO dead_letter_replays"
                    " (dead_letter_table, topic, kafka_partition, kafka_offset, target_table, replay_id)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    values[i : i + _CHUNK],
                )
                or 0
            )
    return added
