"""The scaling evaluator: one topic's snapshot and settings in, one `Decision` out. Pure.

Deterministic for a given input: the clock is the ``now`` argument, and nothing is read or written.
The DAG (or the simulator) gathers a `TopicSnapshot`, calls `evaluate`, and, if
``decision.changed``, records the decision and applies ``linker_workers``.

Steps, in order; the first that settles the matter wins:

0. **override** and **stuck**: an active manual override (`Pin`) pins the count to its value
   (rule ``override``; a count that drifted from it is set back). A topic whose pipeline is
   stalled or stopped (`lagsched.core.pipeline_state`) is held (rule ``stuck``) once its count is
   within bounds: more workers cannot help a consumer that does not commit;
1. **samples**: the lag points considered are the last ``window`` ones taken after the last change
   (a regression across a change in worker count mixes two regimes). Fewer than ``min_samples`` of
   them: no change, unless the policy reports a data-loss risk;
2. **policy**: `lagsched.core.policies` proposes a worker count and a reason;
3. **bounds**: clamp to ``[min_workers, min(max_workers, partitions)]``; a scale-up also never goes
   above the live slots (a scale-down is not forced by slots vanishing, because rendezvous failover
   already copes and shrinking then regrowing would be churn). When partitions < min_workers,
   partitions win: extra workers could own nothing. A current count outside the configured bounds
   is corrected at once, whatever the cooldown;
4. **cooldown**: no scale-up within ``scale_up_cooldown_s`` of the last change and no scale-down
   within ``cooldown_s`` of it, unless forced (data-loss risk). Up fast, down slowly, as a
   Kubernetes HPA does: a lag outrunning the workers costs more than a worker kept a while longer;
5. **hysteresis**: for the keda policy, whose target moves with every measurement, no change when
   ``|new - old| <= hysteresis * old``, unless forced. The hevo and capacity policies are exempt:
   their min/max lag band is their hysteresis.

Example:
    >>> from lagsched.core.config import TopicPolicyConfig
    >>> pts = tuple(LagPoint(60.0 * i, 200_000 + 10_000 * i) for i in range(6))
    >>> snap = TopicSnapshot("orders", linker_workers=2, partitions=12, live_slots=8, retention_s=None, lag_history=pts)
    >>> d = evaluate(snap, TopicPolicyConfig(), now=datetime.fromtimestamp(300.0, tz=UTC))
    >>> (d.previous_linker_workers, d.linker_workers, d.rule)
    (2, 3, 'scale_up_rising')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from lagsched.core.config import PolicyName, TopicPolicyConfig
from lagsched.core.pipeline_state import PipelineState
from lagsched.core.policies import POLICIES, LagPoint, Proposal, TopicSnapshot, Trend, fit_trend
from lagsched.core.times import epoch_s

__all__ = [
    "Decision",
    "DecisionPolicy",
    "LagPoint",
    "Pin",
    "Proposal",
    "TopicSnapshot",
    "Trend",
    "after_override",
    "evaluate",
    "is_evaluation_due",
    "points_for_fit",
]

DecisionPolicy = PolicyName | Literal["manual"]
"""Who decided: a scaling policy, or ``manual`` for an override."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one evaluation of one topic; recorded in MySQL and announced on Redis.

    Attributes:
        topic: topic name.
        previous_linker_workers: the topic's ``linker_workers`` before.
        linker_workers: the ``linker_workers`` it sets (``previous_linker_workers`` when nothing changes).
        lag: current lag, records.
        time_lag_s: current time lag, seconds.
        slope: fitted lag slope, records/s (0.0 when not fitted).
        fit_r2: r² of that fit.
        policy: policy name that proposed it (``manual`` for an override).
        rule: machine-readable rule that settled it (``scale_up_rising``, ``cooldown``, ...).
        reason: the decision in words, with the numbers.
        decided_at: evaluation time, seconds since the epoch (UTC): the row's ``decided_at``.
    """

    topic: str
    previous_linker_workers: int
    linker_workers: int
    lag: int
    time_lag_s: float
    slope: float
    fit_r2: float
    policy: DecisionPolicy
    rule: str
    reason: str
    decided_at: float

    @property
    def changed(self) -> bool:
        """True when ``linker_workers`` differs from ``previous_linker_workers``."""
        return self.linker_workers != self.previous_linker_workers

    @property
    def decided_at_datetime(self) -> datetime:
        """``decided_at`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.decided_at, tz=UTC)


@dataclass(frozen=True, slots=True)
class Pin:
    """An active manual override of a topic's worker count (`lagsched.adapters.overrides`).

    Attributes:
        linker_workers: the count it pins.
        until: when it expires, seconds since the epoch (UTC).
        note: who asked and why, quoted in the reason of a hold.
    """

    linker_workers: int
    until: float
    note: str = ""


def after_override(decision: Decision, ended: str) -> Decision:
    """`decision` recorded as the first change after an override ended (rule ``override_expired``).

    The policy's own rule moves into the reason, after `ended` (which override, when it ended).

    Example:
        >>> d = Decision("t", 8, 3, 0, 0.0, 0.0, 0.0, "hevo", "scale_down_low_lag", "lag 10 < min_lag", 0.0)
        >>> after_override(d, "override 7 (8 workers) expired").reason
        'override 7 (8 workers) expired; scale_down_low_lag: lag 10 < min_lag'
    """
    return replace(decision, rule="override_expired", reason=f"{ended}; {decision.rule}: {decision.reason}")


def is_evaluation_due(records_since_last: int | None, config: TopicPolicyConfig) -> bool:
    """True when the topic was never evaluated (None) or at least ``evaluate_every`` lag
    measurements arrived since its last evaluation.

    The one rule: the scaling workflow counts the stored lag records newer than the topic's last
    evaluation, and the simulator counts its measurements the same way, so both decide alike.
    Counting records rather than scheduler runs keeps it right when the evaluator's schedule and
    the monitor's differ, or when the monitor missed runs (no new records, no evaluation).

    Example:
        >>> cfg = TopicPolicyConfig(evaluate_every=3)
        >>> [is_evaluation_due(n, cfg) for n in (None, 0, 2, 3, 7)]
        [True, False, False, True, True]
    """
    return records_since_last is None or records_since_last >= config.evaluate_every


def points_for_fit(snapshot: TopicSnapshot, config: TopicPolicyConfig) -> tuple[LagPoint, ...]:
    """The lag points the evaluator fits: the last ``window`` ones at or after the last change."""
    points = snapshot.lag_history
    if snapshot.last_change_at is not None:
        since = snapshot.last_change_at
        points = tuple(p for p in points if p.at >= since)
    return points[-config.window :]


def evaluate(
    snapshot: TopicSnapshot,
    config: TopicPolicyConfig,
    now: datetime,
    *,
    pin: Pin | None = None,
    state: PipelineState | None = None,
) -> Decision:
    """Decide the topic's worker count; see the module docstring for the steps.

    Args:
        snapshot: the topic's measured state.
        config: its settings (``Settings.for_topic(topic)``).
        now: evaluation time (aware), from the injected clock; the decision's ``decided_at`` is its
            `epoch_s`, the lag points' axis.
        pin: the topic's active manual override, if any (an expired one must not be passed).
        state: the topic's pipeline state from its newest measurement (None: ``ok``).

    Example:
        >>> from lagsched.core.config import TopicPolicyConfig
        >>> snap = TopicSnapshot(
        ...     "orders", linker_workers=2, partitions=12, live_slots=8, retention_s=None, lag_history=()
        ... )
        >>> epoch = datetime.fromtimestamp(0, tz=UTC)
        >>> evaluate(snap, TopicPolicyConfig(), epoch, pin=Pin(8, 3600.0, "sale, by ana")).rule
        'override'
    """
    t = epoch_s(now)
    points = points_for_fit(snapshot, config)
    trend = fit_trend(points)
    proposal = POLICIES[config.policy](snapshot, config, trend)
    old = snapshot.linker_workers

    def decide(new: int, rule: str, reason: str) -> Decision:
        return Decision(
            topic=snapshot.topic,
            previous_linker_workers=old,
            linker_workers=new,
            lag=snapshot.lag,
            time_lag_s=snapshot.time_lag_s,
            slope=trend.slope,
            fit_r2=trend.r2,
            policy=config.policy,
            rule=rule,
            reason=reason,
            decided_at=t,
        )

    if pin is not None:
        until = datetime.fromtimestamp(pin.until, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        note = f" ({pin.note})" if pin.note else ""
        if old != pin.linker_workers:
            return decide(
                pin.linker_workers, "override", f"manual override{note} pins {pin.linker_workers} workers until {until}"
            )
        return decide(old, "override", f"held at {old} workers by a manual override{note} until {until}")

    upper = config.ceiling(snapshot.partitions)
    lower = min(config.min_workers, upper)
    if old > upper or old < lower:
        new = min(max(old, lower), upper)
        return decide(
            new, "bounds", f"{old} workers outside bounds [{lower}, {upper}] ({_bounds_text(config, snapshot)})"
        )

    if state is not None and state.is_stuck:
        return decide(old, "stuck", f"pipeline {state.state}: {state.reason}")

    if len(points) < config.min_samples and not proposal.forced:
        return decide(
            old,
            "insufficient_samples",
            f"{len(points)} lag samples since the last change, need min_samples {config.min_samples}",
        )

    new, bound_note = _bounded(proposal, snapshot, lower, upper)
    if new == old:
        note = f"; {bound_note}" if bound_note else ""
        return decide(old, proposal.rule if not bound_note else "at_bound", proposal.reason + note)

    if not proposal.forced and snapshot.last_change_at is not None:
        since = t - snapshot.last_change_at
        name, wait = (
            ("scale_up_cooldown_s", config.scale_up_cooldown_s) if new > old else ("cooldown_s", config.cooldown_s)
        )
        if since < wait:
            return decide(
                old,
                "cooldown",
                f"would go {old} -> {new} ({proposal.reason}) but the last change was {since:.0f}s ago, "
                f"{name} {wait:.0f}",
            )
    if proposal.is_target and not proposal.forced and abs(new - old) <= config.hysteresis * old:
        return decide(
            old,
            "hysteresis",
            f"would go {old} -> {new} ({proposal.reason}) but a change of {abs(new - old)} is within "
            f"hysteresis {config.hysteresis:.0%} of {old}",
        )
    note = f"; {bound_note}" if bound_note else ""
    return decide(new, proposal.rule, proposal.reason + note)


def _bounded(proposal: Proposal, snapshot: TopicSnapshot, lower: int, upper: int) -> tuple[int, str]:
    want = proposal.linker_workers
    new = min(max(want, lower), upper)
    note = ""
    if new != want:
        note = f"{want} clamped to [{lower}, {upper}]"
    if new > snapshot.linker_workers and new > snapshot.live_slots:
        capped = max(snapshot.linker_workers, snapshot.live_slots)
        note = f"{want} capped at {snapshot.live_slots} live slots" if capped != new else note
        new = capped
    return new, note


def _bounds_text(config: TopicPolicyConfig, snapshot: TopicSnapshot) -> str:
    return f"min_workers {config.min_workers}, max_workers {config.max_workers}, partitions {snapshot.partitions}"
