"""The scaling service: evaluate every enabled topic of a cluster, apply, record, announce.

Wires the registry (MySQL), the lag history (`lagsched.adapters.lag_store`) and the pure
`lagsched.core.evaluator`; the rules themselves live in the core. One `evaluate_cluster` call:

1. validates the settings first (`parse_settings`): a malformed Variable raises `ConfigError`
   before anything is read or written;
2. decides every enabled topic before writing anything: skips a topic that is not due (fewer than
   ``evaluate_every`` measurements since its last evaluation, `is_evaluation_due`, the rule the
   simulator models too) and builds a `TopicSnapshot` from the ``topics`` row, the stored lag
   records (ignored when stale: older than ``3 * measure_every_s``), the last recorded change
   (cooldown) and the live slot count;
3. then, for each changed decision, in ONE transaction (`lagsched.adapters.decisions`):
   ``UPDATE topics SET linker_workers = new WHERE linker_workers = old`` (a concurrent evaluator
   that got there first makes this touch 0 rows: reported as a conflict, nothing written) and an
   INSERT into ``scaling_decisions``; after the commit, PUBLISH on ``lagsched:scaling`` and stamp ``announced_at``.

Only changes are recorded in ``scaling_decisions`` (the history ops need); holds are returned in
the summary and logged, so a 5-minute evaluator does not write a row per topic per run.

Manual overrides (`lagsched.adapters.overrides`): a topic with an active override is held at the
override's count (rule ``override``; a count that drifted from it is set back). Once the override
has expired or was cancelled it is simply no longer read, and the topic is evaluated normally; if
its last recorded change was the override's, the first change after it is recorded with rule
``override_expired`` (the policy's own rule and reason follow in the reason).

Stuck pipelines (`lagsched.core.pipeline_state`): the lag monitor stores each measurement's state
with the lag record. A topic whose newest record is ``stalled`` or ``stopped`` is held with rule
``stuck`` and that reason, logged as a warning: more workers cannot help a consumer that does not
commit. The hold is not written to ``scaling_decisions`` (no change happened); the state itself is
on the lag record, where the page reads it, and in this summary.

Idempotent on retry: decisions are keyed by (evaluation_id, topic_id). A retried evaluation with
the same id finds the decision it already applied, never applies a second step, and publishes it
only if the first attempt died between the commit and the PUBLISH (at-least-once announcements;
subscribers should treat a repeated ``decision_id`` as a duplicate).

Live slots: ``live_slots=None`` means unknown, and then the live-slot cap of the evaluator is not
applied (the partition count and the min/max workers still bound every decision).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from lagsched.adapters.decisions import (
    decisions_of,
    last_change_times,
    last_decisions,
    mark_announced,
)
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.mysql import aware_utc
from lagsched.adapters.overrides import OverrideRow, active_overrides
from lagsched.adapters.redis_store import SCALING_CHANNEL
from lagsched.adapters.scaling_messages import ScalingMessage, publish_decision
from lagsched.adapters.topics import TopicRow, load_topics
from lagsched.adapters.worker_changes import apply_change
from lagsched.core.config import Settings, effective_config, parse_settings, unknown_topic_overrides
from lagsched.core.decisions import DecisionRow
from lagsched.core.evaluator import (
    Decision,
    LagPoint,
    Pin,
    TopicSnapshot,
    after_override,
    evaluate,
    is_evaluation_due,
)
from lagsched.core.names import validate_cluster_name
from lagsched.core.pipeline_state import stored_state
from lagsched.core.policies import retention_from_ms
from lagsched.core.times import epoch_s

__all__ = [
    "STALE_AFTER_MEASUREMENTS",
    "EvaluationSummary",
    "Outcome",
    "announce_row",
    "count_live_slots",
    "effective_config",
    "evaluate_cluster",
]

log = logging.getLogger(__name__)

STALE_AFTER_MEASUREMENTS = 3
"""Lag history whose newest record is older than this many ``measure_every_s`` is ignored: the
monitor has stopped, and scaling on an old picture could scale the wrong way."""

Status = Literal["applied", "held", "conflict", "already_applied", "not_due"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one topic in one evaluation.

    Attributes:
        topic_id: registry id.
        topic: name.
        status: ``applied`` (changed, recorded, announced), ``held`` (evaluated, no change),
            ``conflict`` (another evaluator changed it first; nothing written), ``already_applied``
            (this evaluation id decided it before: a retry), ``not_due`` (not evaluated).
        decision: the evaluator's decision (None for ``not_due`` and ``already_applied``).
        decision_id: the ``scaling_decisions`` row, when one exists.
    """

    topic_id: str
    topic: str
    status: Status
    decision: Decision | None = None
    decision_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = self.decision
        return {
            "topic_id": self.topic_id,
            "topic": self.topic,
            "status": self.status,
            "decision_id": self.decision_id,
            "previous_linker_workers": None if d is None else d.previous_linker_workers,
            "linker_workers": None if d is None else d.linker_workers,
            "rule": None if d is None else d.rule,
            "reason": None if d is None else d.reason,
        }


@dataclass(frozen=True, slots=True)
class EvaluationSummary:
    """The result of one `evaluate_cluster` call."""

    cluster: str
    evaluation_id: str
    at: datetime
    outcomes: tuple[Outcome, ...] = field(default=())

    @property
    def applied(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "applied")

    @property
    def stuck(self) -> tuple[Outcome, ...]:
        """Topics held because their pipeline is stalled or stopped."""
        return tuple(o for o in self.outcomes if o.decision is not None and o.decision.rule == "stuck")

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "evaluation_id": self.evaluation_id,
            "at": self.at.isoformat(),
            "applied": len(self.applied),
            "outcomes": [o.as_dict() for o in self.outcomes],
            "stuck": [{"topic": o.topic, "reason": o.decision.reason} for o in self.stuck if o.decision is not None],
        }

    def table(self) -> str:
        """One line per topic: status, workers, rule and reason."""
        lines = [f"evaluation {self.evaluation_id} of cluster {self.cluster}: {len(self.applied)} change(s)"]
        for o in self.outcomes:
            d = o.decision
            if d is None:
                lines.append(f"  {o.topic:<40} {o.status}")
            else:
                lines.append(
                    f"  {o.topic:<40} {o.status:<15} {d.previous_linker_workers:>3} -> {d.linker_workers:<3} "
                    f"{d.rule}: {d.reason}"
                )
        return "\n".join(lines)


def announce_row(conn: Any, redis: Any, row: DecisionRow, now: datetime) -> None:
    """Publish a recorded decision on ``lagsched:scaling`` and stamp it announced (an override's,
    or one a crashed run left unannounced)."""
    _announce(conn, redis, ScalingMessage.of_row(row), now)


def evaluate_cluster(
    cluster: str,
    settings: Settings | str | bytes | Mapping[str, Any] | None,
    *,
    mysql: Any,
    redis: Any,
    evaluation_id: str,
    now: datetime,
    live_slots: int | None = None,
    store: LagStore | None = None,
) -> EvaluationSummary:
    """Evaluate every enabled topic of `cluster`, then apply, record and announce the changes.

    Two phases. First every topic is read and decided, with nothing written: a bad setting or an
    unreadable history fails the run before any change. Then each change is applied in its own
    transaction (CAS on the old value, keyed by `evaluation_id`); if the run dies part-way, its
    retry (same id) finds the changes already applied, applies the rest and announces what was
    not announced, so the run as a whole takes effect once.

    Args:
        cluster: registry cluster name.
        settings: the ``lagsched_settings`` Variable, parsed (`parse_settings`: a task parses it once, before
            connecting), or as stored (JSON text), a decoded mapping, or None for all defaults.
        mysql: an open lagsched MySQL connection.
        redis: a ``redis.Redis`` client (lag history and pub/sub).
        evaluation_id: stable id of this evaluation across retries (the Airflow run_id).
        now: evaluation time, timezone-aware (a naive datetime is refused).
        live_slots: live worker slots, None when unknown (no live-slot cap).
        store: the lag store to read (default: one on `redis` with the settings' window and TTL).

    Raises:
        ConfigError: the settings are malformed (nothing was read or changed).
    """
    if not isinstance(settings, Settings):  # first: bad config changes nothing
        settings = parse_settings({} if settings is None else settings)
    validate_cluster_name(cluster)
    if not evaluation_id or len(evaluation_id) > 250:
        raise ValueError(f"evaluation_id must be 1 to 250 characters, got {evaluation_id!r}")
    if store is None:
        store = LagStore(redis, cluster, max_samples=settings.sample_window, max_age_s=settings.sample_ttl_s)

    now = aware_utc(now)
    # Phase 1: read and decide; nothing is written.
    topics = load_topics(mysql, cluster)
    for key, hint in unknown_topic_overrides(settings, [t.name for t in topics]):
        log.warning(
            "lagsched_settings overrides topic %r, which is not a registered topic of cluster %s%s: it has no effect",
            key, cluster, f" (did you mean {hint!r}?)" if hint else "",
        )  # fmt: skip
    names = [t.name for t in topics]
    ids = [t.topic_id for t in topics]
    done = decisions_of(mysql, evaluation_id)
    inputs = _Inputs(
        settings=settings,
        now=now,
        live_slots=live_slots,
        history=store.read_lag_records(names),
        evaluated=store.last_evaluated(names),
        last_change=last_change_times(mysql, ids),
        last=last_decisions(mysql, ids),
        pins={o.topic_id: o for o in active_overrides(mysql, cluster, now)},
    )
    plans = [(t, None, "retry") if t.topic_id in done else _plan(inputs, t) for t in topics]

    # Phase 2: apply, record and announce.
    outcomes: list[Outcome] = []
    for topic, planned, step in plans:
        if step == "retry":
            outcomes.append(_finish_retry(mysql, redis, topic, done[topic.topic_id], now))
        elif planned is None:
            outcomes.append(Outcome(topic.topic_id, topic.name, "not_due"))
        elif step == "held":
            outcomes.append(Outcome(topic.topic_id, topic.name, "held", planned))
        else:
            outcomes.append(
                _apply(mysql, redis, cluster=cluster, evaluation_id=evaluation_id, topic=topic, d=planned, now=now)
            )
    for o in outcomes:
        if o.status != "not_due":
            store.mark_evaluated(o.topic, epoch_s(now))
    return EvaluationSummary(cluster, evaluation_id, now, tuple(outcomes))


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What one evaluation read before deciding anything, for every topic of the cluster."""

    settings: Settings
    now: datetime
    live_slots: int | None
    history: Mapping[str, Sequence[LagRecord]]
    evaluated: Mapping[str, float | None]
    last_change: Mapping[str, float]
    last: Mapping[str, DecisionRow]
    pins: Mapping[str, OverrideRow]


def _plan(inputs: _Inputs, topic: TopicRow) -> tuple[TopicRow, Decision | None, str]:
    """One topic's plan: ``not_due`` (no decision), ``held`` or ``apply`` (with its decision)."""
    now = epoch_s(inputs.now)
    cfg = effective_config(inputs.settings, topic)
    records = inputs.history.get(topic.name, ())
    stale_after = STALE_AFTER_MEASUREMENTS * inputs.settings.measure_every_s
    if records and now - records[-1].at > stale_after:
        log.warning(
            "topic %s: newest lag record is %.0fs old (> %.0fs); ignoring the stale history",
            topic.name, now - records[-1].at, stale_after,
        )  # fmt: skip
        records = ()
    last_eval = inputs.evaluated.get(topic.name)
    since = None if last_eval is None else sum(1 for r in records if r.at > last_eval)
    if not is_evaluation_due(since, cfg):
        return topic, None, "not_due"
    override = inputs.pins.get(topic.topic_id)
    # The newest record's state: a stale history was dropped above, so an old "stuck" cannot hold.
    state = stored_state(records[-1].state, records[-1].state_reason) if records else None
    decision = evaluate(
        _snapshot(topic, records, inputs.last_change.get(topic.topic_id), inputs.live_slots),
        cfg,
        inputs.now,
        pin=None if override is None else _pin(override),
        state=state,
    )
    previous = inputs.last.get(topic.topic_id)
    if decision.changed and override is None and previous is not None and previous.rule == "override":
        decision = after_override(decision, f"override ended ({previous.reason})")
    if decision.rule == "stuck":
        log.warning("topic %s: held at %d workers, %s", topic.name, decision.previous_linker_workers, decision.reason)
    return topic, decision, "apply" if decision.changed else "held"


def _pin(override: OverrideRow) -> Pin:
    return Pin(
        override.linker_workers,
        override.expires_at.timestamp(),
        f"override {override.id} by {override.created_by}: {override.reason}",
    )


def _snapshot(
    topic: TopicRow, records: Sequence[LagRecord], last_change_at: float | None, live_slots: int | None
) -> TopicSnapshot:
    newest = records[-1] if records else None
    # Unknown live slots must not cap anything: the partition count is already an upper bound.
    slots = live_slots if live_slots is not None else max(topic.partition_count, topic.linker_workers)
    return TopicSnapshot(
        topic=topic.name,
        linker_workers=topic.linker_workers,
        partitions=topic.partition_count,
        live_slots=slots,
        retention_s=retention_from_ms(topic.retention_ms),
        lag_history=tuple(LagPoint(r.at, r.lag) for r in records),
        time_lag_s=newest.time_lag_s if newest else 0.0,
        # Fewer than two samples give no rate: report "unknown" rather than a misleading 0.
        ingress_rate=newest.ingress_rate if newest and len(records) >= 2 else None,
        worker_rate=newest.worker_rate if newest else None,
        last_change_at=last_change_at,
    )


def _apply(
    conn: Any, redis: Any, *, cluster: str, evaluation_id: str, topic: TopicRow, d: Decision, now: datetime
) -> Outcome:
    status, row = apply_change(
        # An override's own re-pin must not be stopped by that override.
        conn, cluster=cluster, evaluation_id=evaluation_id, topic_id=topic.topic_id, d=d,
        unless_overridden=d.rule != "override",
    )  # fmt: skip
    if status == "conflict":
        log.warning(
            "topic %s: linker_workers is no longer %d, or a manual override began meanwhile; not changed",
            topic.name, d.previous_linker_workers,
        )  # fmt: skip
        return Outcome(topic.topic_id, topic.name, "conflict", d)
    if status == "already_applied" or row is None:  # the same evaluation id ran twice at once
        return Outcome(topic.topic_id, topic.name, "already_applied", d)
    log.info(
        "topic %s: %d -> %d workers (%s): %s", topic.name, d.previous_linker_workers, d.linker_workers, d.rule, d.reason
    )
    _announce(conn, redis, ScalingMessage.of_row(row), now)
    return Outcome(topic.topic_id, topic.name, "applied", d, row.decision_id)


def _announce(conn: Any, redis: Any, message: ScalingMessage, now: datetime) -> None:
    assert message.decision_id is not None  # only recorded decisions are announced
    receivers = publish_decision(redis, message)
    log.info("announced decision %d on %s to %d subscriber(s)", message.decision_id, SCALING_CHANNEL, receivers)
    mark_announced(conn, message.decision_id, now)


def _finish_retry(conn: Any, redis: Any, topic: TopicRow, row: DecisionRow, now: datetime) -> Outcome:
    if row.announced_at is None:
        log.info("topic %s: decision %d was applied but not announced; announcing it now", topic.name, row.decision_id)
        _announce(conn, redis, ScalingMessage.of_row(row), now)
    return Outcome(topic.topic_id, topic.name, "already_applied", None, row.decision_id)


def count_live_slots(client: Any, cluster: str, now: datetime, timeout_s: float) -> int | None:
    """Live worker slots of ``cluster`` (`lagsched.adapters.slots.SlotRegistry`), None when none ever registered.

    An empty slot set means the workers do not heartbeat (not deployed yet, or an older version),
    so the count is unknown rather than zero: treating it as zero would block every scale-up.
    """
    from lagsched.adapters.slots import SlotRegistry

    registry = SlotRegistry(client, cluster=cluster)
    if not registry.ever_registered():
        return None
    return len(registry.live_slots(now, timeout_s))
