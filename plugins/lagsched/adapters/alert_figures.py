"""The figures lagsched's alert rules need beyond the lag measurements, kept in Redis.

Each is written by the part of lagsched that knows it and read by the metrics endpoint
(`lagsched.workflows.status`):

* the thresholds the lag monitor applied (`lagsched.core.thresholds`), on every measurement;
* the slots the consume DAG planned, on every planning run;
* the slots' table commits by outcome (``ok``; ``refused``: another holder committed the ranges,
  Iceberg's conflict check; ``error``: the commit failed otherwise), counted by each slot;
* table care runs by outcome (``ok``, ``failed``) and the time of the latest of each, counted by the
  table care DAG's task callbacks.

The counters are Prometheus counters: they only grow (HINCRBY) and start at 0. None has a TTL: a
planned slot count or a failed table care must outlive a stopped DAG, which is when it matters.
Counting never fails what is counted: a Redis error is logged and the figure is one short.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from lagsched.adapters.redis_store import (
    dead_letters_key,
    planned_slots_key,
    table_care_key,
    table_commits_key,
    thresholds_key,
)
from lagsched.core.status import TableCareRuns
from lagsched.core.thresholds import ClusterThresholds
from lagsched.core.times import epoch_s

if TYPE_CHECKING:
    import redis

__all__ = [
    "COMMIT_OUTCOMES",
    "TABLE_CARE_OUTCOMES",
    "DeadLetterCounter",
    "TableCommitCounter",
    "count_table_care",
    "read_dead_letters",
    "read_planned_slots",
    "read_table_care",
    "read_table_commits",
    "read_thresholds",
    "write_planned_slots",
    "write_thresholds",
]

log = logging.getLogger(__name__)

COMMIT_OUTCOMES = ("ok", "refused", "error")
TABLE_CARE_OUTCOMES = ("ok", "failed")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def write_thresholds(client: redis.Redis, cluster: str, thresholds: ClusterThresholds) -> None:
    client.set(thresholds_key(cluster), thresholds.to_json())


def read_thresholds(client: redis.Redis, cluster: str) -> ClusterThresholds | None:
    """The stored thresholds, None before the first measurement (or if unreadable)."""
    raw = client.get(thresholds_key(cluster))
    return None if raw is None else ClusterThresholds.from_json(_text(raw))


def write_planned_slots(client: redis.Redis, planned: Mapping[str, int]) -> None:
    """Each cluster's planned slot count, as the consume DAG's plan has it."""
    if planned:
        pipe = client.pipeline(transaction=False)
        for cluster, count in planned.items():
            pipe.set(planned_slots_key(cluster), str(int(count)))
        pipe.execute()


def read_planned_slots(client: redis.Redis, cluster: str) -> int | None:
    """The slots last planned for ``cluster``; None when the consume DAG never planned it."""
    raw = client.get(planned_slots_key(cluster))
    try:
        return None if raw is None else int(_text(raw))
    except ValueError:
        return None


class TableCommitCounter:
    """A slot's counter of its table commits (one per slot run; `count` never raises)."""

    def __init__(self, client: redis.Redis, cluster: str, table: str) -> None:
        self._client, self._key, self._table = client, table_commits_key(cluster), table

    def count(self, outcome: str) -> None:
        if outcome not in COMMIT_OUTCOMES:
            raise ValueError(f"unknown table commit outcome {outcome!r}; one of {', '.join(COMMIT_OUTCOMES)}")
        try:
            self._client.hincrby(self._key, f"{self._table}|{outcome}", 1)
        except Exception as exc:  # noqa: BLE001 - a metric one short, never a batch lost
            log.warning("could not count a table commit (%s) in Redis: %s", outcome, exc)


class DeadLetterCounter:
    """A slot's counter of the dead letters it committed, per topic (`count` never raises)."""

    def __init__(self, client: redis.Redis, cluster: str) -> None:
        self._client, self._key = client, dead_letters_key(cluster)

    def count(self, per_topic: Mapping[str, int]) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            for topic, n in per_topic.items():
                pipe.hincrby(self._key, topic, int(n))
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - a metric short, never a batch lost
            log.warning("could not count %d dead letter(s) in Redis: %s", sum(per_topic.values()), exc)


def read_dead_letters(client: redis.Redis, cluster: str) -> dict[str, int]:
    """``topic -> records`` the cluster's slots committed to its dead-letter table so far."""
    raw: Mapping[str | bytes, str | bytes] = client.hgetall(dead_letters_key(cluster))
    out: dict[str, int] = {}
    for f, v in raw.items():
        n = _count(v)
        if n is not None:
            out[_text(f)] = n
    return out


def read_table_commits(client: redis.Redis, cluster: str) -> dict[tuple[str, str], int]:
    """``(table, outcome) -> commits`` of the cluster's slots so far."""
    raw: Mapping[str | bytes, str | bytes] = client.hgetall(table_commits_key(cluster))
    out: dict[tuple[str, str], int] = {}
    for f, v in raw.items():
        table, _, outcome = _text(f).rpartition("|")
        n = _count(v)
        if table and outcome in COMMIT_OUTCOMES and n is not None:
            out[(table, outcome)] = n
    return out


def _count(value: str | bytes | None) -> int | None:
    """A stored counter; None for a field someone overwrote with something else (left out, logged)."""
    if value is None:
        return None
    try:
        return int(_text(value))
    except ValueError:
        log.warning("ignoring a counter that is not an integer in Redis: %r", value)
        return None


def _time(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        log.warning("ignoring a time that is not a number in Redis: %r", value)
        return None


def count_table_care(client: redis.Redis, cluster: str, outcome: str, at: datetime) -> None:
    """Count one table care run of ``cluster`` that ended with ``outcome`` at ``at``."""
    if outcome not in TABLE_CARE_OUTCOMES:
        raise ValueError(f"unknown table care outcome {outcome!r}; one of {', '.join(TABLE_CARE_OUTCOMES)}")
    pipe = client.pipeline(transaction=True)
    pipe.hincrby(table_care_key(cluster), outcome, 1)
    pipe.hset(table_care_key(cluster), f"{outcome}_at", repr(epoch_s(at)))
    pipe.execute()


def read_table_care(client: redis.Redis, cluster: str) -> tuple[TableCareRuns, ...]:
    """Runs by outcome (every outcome, 0 runs when none), in `TABLE_CARE_OUTCOMES` order."""
    raw: Mapping[str | bytes, str | bytes] = client.hgetall(table_care_key(cluster))
    fields = {_text(f): _text(v) for f, v in raw.items()}
    return tuple(
        TableCareRuns(o, _count(fields.get(o)) or 0, _time(fields.get(f"{o}_at"))) for o in TABLE_CARE_OUTCOMES
    )
