"""Manual overrides, end to end: validate, record, apply, announce; and cancel.

`apply_override` is what the override DAG and ``lagsched override`` call. It takes effect at
once, not at the next evaluation:

1. `lagsched.adapters.worker_changes.create_override`, one MySQL transaction: the override row, the new
   ``topics.linker_workers`` and a ``scaling_decisions`` row with rule ``override`` (a bad request
   raises `ConfigError` naming the field, and nothing is written);
2. the decision is published on ``lagsched:scaling`` like every other decision (running slots
   re-claim with the new count) and stamped ``announced_at``.

While the override is active the scaling evaluator holds the topic (rule ``override``); after it
expires or is cancelled the evaluator decides normally again, and its first change is recorded
with rule ``override_expired`` (`lagsched.workflows.scaling`).

Retries: with a ``request_id`` (the Airflow run id), a retried call finds the override its first
attempt made, writes nothing more, and publishes the decision only if the first attempt died
between the commit and the publish.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lagsched.adapters.decisions import decisions_of
from lagsched.adapters.lag_store import LagStore
from lagsched.adapters.overrides import OverrideRow, cancel_override, evaluation_id_of
from lagsched.adapters.worker_changes import create_override
from lagsched.core.decisions import DecisionRow
from lagsched.workflows.scaling import announce_row

__all__ = ["OverrideResult", "apply_override", "end_override"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OverrideResult:
    """What `apply_override` did.

    Attributes:
        override: the override row.
        decision: the ``scaling_decisions`` row that applied it.
        announced: True when this call published the decision (False on a retry that found it
            already published).
    """

    override: OverrideRow
    decision: DecisionRow
    announced: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (for XCom and ``--json``)."""
        return {
            **self.override.as_dict(),  # its linker_workers and previous_linker_workers are the decision's
            "decision_reason": self.decision.reason,
            "announced": self.announced,
        }

    def text(self) -> str:
        """One line for a log or a terminal."""
        o, d = self.override, self.decision
        return (
            f"override {o.id}: topic {o.topic} of cluster {o.cluster} pinned at {o.linker_workers} worker(s) "
            f"(was {d.previous_linker_workers}) until {o.expires_at:%Y-%m-%d %H:%M:%S UTC}, "
            f"by {o.created_by}: {o.reason}"
        )


def apply_override(
    mysql: Any,
    redis: Any,
    *,
    cluster: str,
    topic: str,
    linker_workers: int,
    duration_s: float,
    reason: str,
    created_by: str,
    now: datetime,
    request_id: str | None = None,
) -> OverrideResult:
    """Pin `topic`'s ``linker_workers`` at `linker_workers` for `duration_s` seconds from `now`, at once.

    Args:
        mysql: an open lagsched MySQL connection.
        redis: a ``redis.Redis`` client (the announcement, and the newest lag for the record).
        cluster: registry cluster of the topic.
        topic: topic name (an enabled topic of `cluster`).
        linker_workers: the count to pin, 1 to the topic's partition count.
        duration_s: how long, in seconds (at most 7 days).
        reason: why (recorded with the decision).
        created_by: who asks.
        now: aware UTC time of the request (the override starts then).
        request_id: idempotency key of the caller (the Airflow run id).

    Raises:
        ConfigError: a bad request, ``field`` naming it; nothing was written or published.
    """
    lag, time_lag_s = _newest_lag(redis, cluster, topic)
    row = create_override(
        mysql,
        cluster=cluster,
        topic=topic,
        linker_workers=linker_workers,
        duration_s=duration_s,
        reason=reason,
        created_by=created_by,
        now=now,
        request_id=request_id,
        lag=lag,
        time_lag_s=time_lag_s,
    )
    decision = decisions_of(mysql, evaluation_id_of(row.id))[row.topic_id]
    announced = decision.announced_at is None
    if announced:
        announce_row(mysql, redis, decision, now)
    result = OverrideResult(row, decision, announced)
    log.info("%s", result.text())
    return result


def end_override(mysql: Any, override_id: int, now: datetime, cancelled_by: str = "") -> bool:
    """Cancel override `override_id` at `now`; False when it was not active.

    The count stays until the next evaluation decides (rule ``override_expired`` if it changes).
    """
    done = cancel_override(mysql, override_id, now, cancelled_by)
    if done:
        log.info("override %d cancelled by %s", override_id, cancelled_by or "(unknown)")
    return done


def _newest_lag(redis: Any, cluster: str, topic: str) -> tuple[int, float]:
    """The newest stored lag and time lag of `topic` (0 when none: the record is informative only)."""
    try:
        records = LagStore(redis, cluster).read_lag_records([topic]).get(topic, ())
    except ValueError:  # an illegal name: create_override reports it as the unknown topic it is
        return 0, 0.0
    return (records[-1].lag, records[-1].time_lag_s) if records else (0, 0.0)
