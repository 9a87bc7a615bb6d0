"""Scaling policies: small pure functions from a topic's measured state to a proposed worker count.

Each policy answers one question, "how many workers does this topic want now?", and says why in
words. Everything that is common to all policies (bounds, cooldown, hysteresis, too few samples)
lives in `lagsched.core.evaluator`, so the policies stay comparable: the simulator runs all three
through the same evaluator.

* ``hevo``: Hevo's evaluator made precise (seed 003): a linear regression of the recent lag gives a
  slope and a fit quality; above ``max_lag`` and rising, or not draining within the drain target,
  step up; below ``min_lag``, or falling faster than needed, step down; the step size comes from the
  topic's retention (`retention_steps`); a time lag near retention forces a step up.
* ``keda``: KEDA's Kafka scaler rule, ``ceil(lag / lagThreshold)``, as a baseline.
* ``capacity``: the workers the ingress rate needs at the per-worker rate actually observed, with
  the lag between ``min_lag`` and the middle of the band as a buffer that keeps every worker busy;
  above it, enough to drain the backlog within ``drain_target_s``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lagsched.core.config import PolicyName, TopicPolicyConfig

__all__ = [
    "POLICIES",
    "LagPoint",
    "Policy",
    "Proposal",
    "TopicSnapshot",
    "Trend",
    "capacity_policy",
    "fit_trend",
    "has_data_loss_risk",
    "hevo_policy",
    "keda_policy",
    "retention_from_ms",
    "retention_steps",
]


@dataclass(frozen=True, slots=True)
class LagPoint:
    """A topic's total lag at one measurement.

    Attributes:
        at: measurement time, seconds since the epoch (UTC).
        lag: total records behind (lost records excluded, see `lagsched.core.lag`).
    """

    at: float
    lag: int


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    """Everything the evaluator knows about one topic at one evaluation; gathered by the adapters.

    Attributes:
        topic: topic name.
        linker_workers: the topic's current ``linker_workers``.
        partitions: partition count; more workers than partitions would idle.
        live_slots: worker slots currently alive that could run this topic; a scale-up never asks
            for more.
        retention_s: topic retention in seconds, None when infinite (``retention.ms = -1``, see
            `retention_from_ms`).
        lag_history: recent `LagPoint` s, oldest first; the newest is the current measurement.
        time_lag_s: current time lag in seconds (`lagsched.core.lag.estimate_time_lag`, worst
            partition).
        ingress_rate: records/s produced into the topic, None when not measurable yet.
        worker_rate: records/s one worker was observed to consume while it had a backlog, None
            when not observed yet (the config's ``per_worker_rate`` is used then).
        last_change_at: time of the last change of ``linker_workers``, None if never changed.
    """

    topic: str
    linker_workers: int
    partitions: int
    live_slots: int
    retention_s: float | None
    lag_history: tuple[LagPoint, ...]
    time_lag_s: float = 0.0
    ingress_rate: float | None = None
    worker_rate: float | None = None
    last_change_at: float | None = None

    @property
    def lag(self) -> int:
        """The current lag (the newest point's), 0 with no history."""
        return self.lag_history[-1].lag if self.lag_history else 0


@dataclass(frozen=True, slots=True)
class Trend:
    """A least-squares line through recent lag points.

    Attributes:
        slope: records per second the lag grows by (negative: draining).
        r2: coefficient of determination in [0, 1]; how much of the lag's movement the line
            explains. A flat series is a perfect fit (1.0) with slope 0.
        samples: points fitted.
    """

    slope: float
    r2: float
    samples: int


@dataclass(frozen=True, slots=True)
class Proposal:
    """What a policy wants, before the evaluator's bounds, cooldown and hysteresis.

    Attributes:
        linker_workers: the ``linker_workers`` it wants (unbounded).
        rule: short machine-readable name of the rule that fired (``scale_up_rising``, ...).
        reason: the same in words, with the numbers, for the decision log.
        forced: True when the proposal must bypass cooldown and hysteresis (data-loss risk).
        is_target: True when `linker_workers` is a target computed from a measurement (keda, capacity), so
            measurement noise can move it and the evaluator's hysteresis applies (keda); False when
            the policy's min/max lag band already is the hysteresis (hevo's steps, capacity)
            (applying a relative hysteresis to a fixed step would freeze it once the step is
            smaller than ``hysteresis * linker_workers``).
    """

    linker_workers: int
    rule: str
    reason: str
    forced: bool = False
    is_target: bool = False


Policy = Callable[[TopicSnapshot, TopicPolicyConfig, Trend], Proposal]
"""A policy: (snapshot, topic config, fitted trend) -> proposal."""


def retention_from_ms(retention_ms: int | None) -> float | None:
    """Kafka's ``retention.ms`` as seconds, None for infinite (-1, or not set).

    Example:
        >>> (retention_from_ms(3_600_000), retention_from_ms(-1))
        (3600.0, None)
    """
    if retention_ms is None or retention_ms < 0:
        return None
    return retention_ms / 1000.0


def fit_trend(points: Sequence[LagPoint]) -> Trend:
    """Fit lag = a + slope * t with scikit-learn's `LinearRegression` over `points`.

    Fewer than two points, or all at one instant, give a flat trend with r² 0 (no evidence).

    Example:
        >>> t = fit_trend([LagPoint(0, 100), LagPoint(60, 160), LagPoint(120, 220)])
        >>> (round(t.slope, 6), round(t.r2, 6))
        (1.0, 1.0)
    """
    n = len(points)
    if n < 2:
        return Trend(0.0, 0.0, n)
    t0 = points[0].at
    x = np.fromiter((p.at - t0 for p in points), dtype=float, count=n).reshape(-1, 1)
    y = np.fromiter((p.lag for p in points), dtype=float, count=n)
    if float(np.ptp(x)) == 0.0:
        return Trend(0.0, 0.0, n)
    if float(np.ptp(y)) == 0.0:
        return Trend(0.0, 1.0, n)
    # Imported here: scikit-learn takes 1-2 s to import (10+ s on a loaded box), and the lag monitor and
    # every failing-fast path import this module without fitting anything.
    from sklearn.linear_model import LinearRegression  # type: ignore[import-untyped, unused-ignore]

    model = LinearRegression().fit(x, y)
    r2 = float(model.score(x, y))
    return Trend(float(model.coef_[0]), min(1.0, max(0.0, r2)), n)


def retention_steps(retention_s: float | None, config: TopicPolicyConfig) -> tuple[int, int]:
    """The hevo policy's (step up, step down), in workers, from the topic's retention.

    Short retention means a backlog turns into lost data soon, so scale up by a lot and down by a
    little; long retention can afford to drain slowly, so the reverse. The mapping, with
    ``p = clamp(ln(retention / short_retention_s) / ln(long_retention_s / short_retention_s), 0, 1)``
    (log scale, because retentions span hours to weeks; infinite retention is p = 1):

        step_up   = 1 + round((max_step - 1) * (1 - p))
        step_down = 1 + round((max_step - 1) * p)

    With the defaults (6 h, 7 d, max_step 4): 6 h or less -> (+4, -1); 1 d -> (+3, -2);
    3 d -> (+2, -3); 7 d or more, or infinite -> (+1, -4).

    Example:
        >>> cfg = TopicPolicyConfig()
        >>> retention_steps(3600.0, cfg), retention_steps(86400.0, cfg), retention_steps(None, cfg)
        ((4, 1), (3, 2), (1, 4))
    """
    if retention_s is None:
        p = 1.0
    elif retention_s <= config.short_retention_s:
        p = 0.0
    else:
        p = math.log(retention_s / config.short_retention_s) / math.log(
            config.long_retention_s / config.short_retention_s
        )
        p = min(1.0, max(0.0, p))
    span = config.max_step - 1
    return 1 + round(span * (1.0 - p)), 1 + round(span * p)


def has_data_loss_risk(snapshot: TopicSnapshot, config: TopicPolicyConfig) -> bool:
    """True when the oldest unread record is older than ``data_loss_fraction`` of the retention."""
    return (
        snapshot.retention_s is not None
        and snapshot.lag > 0
        and snapshot.time_lag_s > config.data_loss_fraction * snapshot.retention_s
    )


def _worker_rate(snapshot: TopicSnapshot, config: TopicPolicyConfig) -> float:
    observed = snapshot.worker_rate
    return observed if observed is not None and observed > 0 else config.per_worker_rate


def _data_loss_proposal(snapshot: TopicSnapshot, config: TopicPolicyConfig, at_least: int) -> Proposal:
    assert snapshot.retention_s is not None  # guarded by has_data_loss_risk
    step_up, _ = retention_steps(snapshot.retention_s, config)
    return Proposal(
        linker_workers=max(at_least, snapshot.linker_workers + step_up),
        rule="data_loss_risk",
        reason=(
            f"time lag {snapshot.time_lag_s:.0f}s exceeds {config.data_loss_fraction:.0%} of retention "
            f"{snapshot.retention_s:.0f}s: unread records will be deleted; scale up by at least {step_up}"
        ),
        forced=True,
    )


def _step_down(snapshot: TopicSnapshot, step: int, rate: float, rule: str, why: str) -> Proposal:
    """Step down, but not below the workers the measured ingress needs: stepping below them only
    makes the lag climb back over max_lag, the saw-tooth Hevo's plain thresholds produce. Never
    proposes more workers than now (scaling up is the other rules' business)."""
    target = snapshot.linker_workers - step
    if snapshot.ingress_rate is None:
        return Proposal(target, rule, f"{why}; down by {step}")
    floor = math.ceil(snapshot.ingress_rate / rate - 1e-9)
    if target >= floor:
        return Proposal(target, rule, f"{why}; down by {step}")
    limited = min(snapshot.linker_workers, floor)
    return Proposal(
        limited,
        rule if limited < snapshot.linker_workers else "hold_ingress_floor",
        f"{why}; down by {step} limited by ingress {snapshot.ingress_rate:.1f} rec/s needing {floor} workers "
        f"at {rate:.1f} rec/s each",
    )


def hevo_policy(snapshot: TopicSnapshot, config: TopicPolicyConfig, trend: Trend) -> Proposal:
    """Hevo's regression + thresholds policy, with retention-sized steps.

    Rules, first match wins (``lag`` current, ``slope``/``r2`` from `trend`, ``D`` the drain
    target, ``w`` the per-worker rate):

    1. data-loss risk (`has_data_loss_risk`): up by step_up, forced;
    2. ``lag > max_lag`` and rising steadily (``slope > 0``, ``r2 >= min_fit_r2``): up by step_up;
    3. ``lag > max_lag`` and the trend does not bring it under max_lag within D
       (``lag + slope * D > max_lag``): up by step_up (Hevo only scales on a rising lag; a high,
       flat lag would otherwise never drain);
    4. ``lag < min_lag`` and not rising towards max_lag within D: down by step_down;
    5. falling steadily (``slope < 0``, ``r2 >= min_fit_r2``) faster than needed: with step_down
       fewer workers the lag would still fall at least at ``lag / D``
       (``-slope - step_down * w >= lag / D``): down by step_down;
    6. otherwise hold.

    A step down never goes below ``ceil(ingress_rate / w)`` when the ingress rate is known (Hevo's
    thresholds alone scale a busy topic below its ingress whenever the lag dips under min_lag, and
    it climbs right back: the saw-tooth is visible in the simulator without this floor).
    """
    lag = snapshot.lag
    slope, r2 = trend.slope, trend.r2
    steady = r2 >= config.min_fit_r2
    step_up, step_down = retention_steps(snapshot.retention_s, config)
    d = config.drain_target_s
    fit = f"slope {slope:+.2f} rec/s, r² {r2:.2f}"
    if has_data_loss_risk(snapshot, config):
        return _data_loss_proposal(snapshot, config, at_least=0)
    if lag > config.max_lag:
        if slope > 0 and steady:
            return Proposal(
                snapshot.linker_workers + step_up,
                "scale_up_rising",
                f"lag {lag} above max_lag {config.max_lag} and rising steadily ({fit}); up by {step_up}",
            )
        projected = lag + slope * d
        if projected > config.max_lag:
            return Proposal(
                snapshot.linker_workers + step_up,
                "scale_up_not_draining",
                f"lag {lag} above max_lag {config.max_lag} and projected {projected:.0f} after "
                f"drain_target_s {d:.0f} ({fit}); up by {step_up}",
            )
        return Proposal(
            snapshot.linker_workers,
            "hold_draining",
            f"lag {lag} above max_lag {config.max_lag} but draining below it within {d:.0f}s ({fit})",
        )
    rate = _worker_rate(snapshot, config)
    if lag < config.min_lag:
        projected = lag + slope * d
        if slope > 0 and steady and projected > config.max_lag:
            return Proposal(
                snapshot.linker_workers,
                "hold_rising",
                f"lag {lag} below min_lag {config.min_lag} but rising towards max_lag ({fit})",
            )
        return _step_down(
            snapshot, step_down, rate, "scale_down_low", f"lag {lag} below min_lag {config.min_lag} ({fit})"
        )
    if slope < 0 and steady and -slope - step_down * rate >= lag / d:
        return _step_down(
            snapshot,
            step_down,
            rate,
            "scale_down_falling",
            f"lag {lag} falling sharply ({fit}): {step_down} fewer workers at {rate:.1f} rec/s each "
            f"would still drain it within {d:.0f}s",
        )
    return Proposal(
        snapshot.linker_workers,
        "hold_in_band",
        f"lag {lag} between min_lag {config.min_lag} and max_lag {config.max_lag} ({fit})",
    )


def keda_policy(snapshot: TopicSnapshot, config: TopicPolicyConfig, trend: Trend) -> Proposal:
    """KEDA's Kafka scaler rule: ``ceil(lag / lag_threshold)`` workers.

    The evaluator then caps it at the partition count (KEDA's default without
    ``allowIdleConsumers``) and floors it at ``min_workers`` (KEDA's ``minReplicaCount``). KEDA
    does not know retention, so there is no data-loss override here.
    """
    threshold = config.lag_threshold
    want = math.ceil(snapshot.lag / threshold)
    return Proposal(
        want, "keda_target", f"ceil(lag {snapshot.lag} / lag_threshold {threshold}) = {want}", is_target=True
    )


def capacity_policy(snapshot: TopicSnapshot, config: TopicPolicyConfig, trend: Trend) -> Proposal:
    """Workers from the ingress rate, with the lag as a buffer between ``min_lag`` and the band top.

    With ``x = ingress_rate / w`` (the workers the ingress needs at the observed per-worker rate
    ``w``), ``D = drain_target_s`` and ``top = (min_lag + max_lag) / 2``:

    * lag above ``top``: ``ceil(x + (lag - min_lag) / (D * w))``, enough to absorb the ingress and
      bring the lag back to ``min_lag`` within D;
    * lag at or below ``min_lag``: ``floor(x)``, so every worker runs saturated and the fraction of
      a worker the ingress needs beyond that is taken from the buffer; the lag climbs slowly until
      it crosses ``top``, which is what makes changes rare;
    * in between: the current count, raised to ``floor(x)`` if it cannot even keep up with the
      ingress. A count above what draining needs is kept on purpose: while there is a backlog every
      worker is busy, so holding costs nothing, and stepping down mid-drain would be a change too many.

    The lag band is this policy's hysteresis, so the evaluator's relative one does not apply (at 23
    workers it would hold an idle 2 for hours). A data-loss risk forces at least a retention-sized
    step up. Without an ingress rate yet, it holds.
    """
    rate = _worker_rate(snapshot, config)
    if snapshot.ingress_rate is None:
        if has_data_loss_risk(snapshot, config):
            return _data_loss_proposal(snapshot, config, at_least=0)
        return Proposal(snapshot.linker_workers, "hold_no_rate", "no ingress rate measured yet")
    lag = snapshot.lag
    steady = snapshot.ingress_rate / rate
    excess = max(0, lag - config.min_lag)
    drain = steady + excess / (config.drain_target_s * rate)
    floor_, ceil_ = math.floor(steady + 1e-9), math.ceil(drain - 1e-9)  # 1e-9: an exact fit is not rounded
    top = (config.min_lag + config.max_lag) // 2
    if lag > top:
        want, why = (
            ceil_,
            f"lag {lag} above {top}: drain to min_lag {config.min_lag} within {config.drain_target_s:.0f}s",
        )
    elif lag <= config.min_lag:
        want, why = floor_, f"lag {lag} within min_lag {config.min_lag}: run saturated on the buffer"
    else:
        want = max(snapshot.linker_workers, floor_)
        why = f"lag {lag} between min_lag {config.min_lag} and {top}: hold, at least {floor_}"
    if has_data_loss_risk(snapshot, config):
        return _data_loss_proposal(snapshot, config, at_least=want)
    return Proposal(
        want,
        "capacity_target",
        f"ingress {snapshot.ingress_rate:.1f} rec/s / {rate:.1f} rec/s per worker = {steady:.2f} workers; {why} "
        f"-> {want}",
    )


POLICIES: Mapping[PolicyName, Policy] = {"hevo": hevo_policy, "keda": keda_policy, "capacity": capacity_policy}
"""Policies by the name used in the settings' ``policy`` field."""
