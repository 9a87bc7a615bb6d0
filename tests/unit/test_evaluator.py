"""The evaluator, one table of cases with an injected clock: every rule and every bound."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from lagsched.core.config import TopicPolicyConfig
from lagsched.core.evaluator import (
    Decision,
    LagPoint,
    Pin,
    TopicSnapshot,
    after_override,
    evaluate,
    is_evaluation_due,
    points_for_fit,
)
from lagsched.core.pipeline_state import PipelineState, stored_state
from lagsched.core.policies import fit_trend, has_data_loss_risk, retention_from_ms, retention_steps

STEP = 60.0
BASE = TopicPolicyConfig(
    min_lag=1_000,
    max_lag=10_000,
    window=10,
    min_samples=5,
    cooldown_s=600,
    hysteresis=0.1,
    min_workers=1,
    max_workers=16,
    drain_target_s=600,
    per_worker_rate=10.0,
    keda_lag_threshold=10_000,
)
HOUR = 3600.0
DAY = 86400.0


def at(t: float) -> datetime:
    """Epoch seconds as the aware datetime `evaluate` takes."""
    return datetime.fromtimestamp(t, tz=UTC)


def rising(start: int, per_sample: int, n: int = 5) -> list[int]:
    return [start + per_sample * i for i in range(n)]


@dataclass(frozen=True)
class Case:
    name: str
    lags: list[int]
    expected_workers: int
    expected_rule: str
    workers: int = 4
    policy: str = "hevo"
    config: dict[str, Any] = field(default_factory=dict)
    partitions: int = 32
    live_slots: int = 32
    retention_s: float | None = None
    time_lag_s: float = 0.0
    ingress_rate: float | None = None
    worker_rate: float | None = None
    change_ago_s: float | None = None  # last change this long before now
    pin: int | None = None  # an active manual override of this many workers
    state: str = "ok"  # the pipeline's state: ok, stalled or stopped


CASES = [
    # hevo: scale up
    Case("hevo rising above max, infinite retention: +1", rising(20_000, 1_000), 5, "scale_up_rising"),
    Case("hevo rising above max, 1h retention: +4", rising(20_000, 1_000), 8, "scale_up_rising", retention_s=HOUR),
    Case("hevo rising above max, 1d retention: +3", rising(20_000, 1_000), 7, "scale_up_rising", retention_s=DAY),
    Case("hevo rising above max, 3d retention: +2", rising(20_000, 1_000), 6, "scale_up_rising", retention_s=3 * DAY),
    Case("hevo high and flat: not draining, +1", [50_000] * 5, 5, "scale_up_not_draining"),
    Case(
        "hevo high, noisy, no steady trend but not draining: +1",
        [50_000, 20_000, 60_000, 15_000, 40_000],
        5,
        "scale_up_not_draining",
    ),
    Case("hevo high but draining fast enough: hold", [60_000, 50_000, 40_000, 30_000, 20_000], 4, "hold_draining"),
    # hevo: scale down
    Case("hevo below min, infinite retention: -4", [500] * 5, 4, "scale_down_low", workers=8),
    Case("hevo below min, 1h retention: -1", [500] * 5, 7, "scale_down_low", workers=8, retention_s=HOUR),
    Case("hevo below min, 1d retention: -2", [500] * 5, 6, "scale_down_low", workers=8, retention_s=DAY),
    Case(
        "hevo below min but rising towards max within the drain target: hold",
        rising(0, 200),
        4,
        "hold_rising",
        config={"drain_target_s": 6_000},
    ),
    Case(
        "hevo falling sharply inside the band: -1",
        [9_500, 8_000, 6_500, 5_000, 3_500],
        7,
        "scale_down_falling",
        workers=8,
        retention_s=HOUR,
    ),
    Case(
        "hevo falling, but not faster than one worker's worth: hold",
        [5_400, 5_300, 5_200, 5_100, 5_000],
        8,
        "hold_in_band",
        workers=8,
        retention_s=HOUR,
    ),
    Case("hevo inside the band, flat: hold", [5_000] * 5, 4, "hold_in_band"),
    Case(
        "hevo step down limited by the ingress floor",
        [500] * 5,
        7,
        "scale_down_low",
        workers=8,
        ingress_rate=65.0,
    ),
    Case(
        "hevo ingress floor at or above current: hold",
        [500] * 5,
        8,
        "hold_ingress_floor",
        workers=8,
        ingress_rate=100.0,
    ),
    Case(
        "hevo floor uses the observed worker rate",
        [500] * 5,
        5,
        "scale_down_low",
        workers=8,
        ingress_rate=100.0,
        worker_rate=20.0,
    ),
    # data-loss override
    Case(
        "data-loss risk forces a retention-sized step, through cooldown",
        [5_000] * 5,
        8,
        "data_loss_risk",
        retention_s=HOUR,
        time_lag_s=2_000,
        change_ago_s=60,
    ),
    Case(
        "data-loss risk acts even with too few samples",
        [5_000] * 2,
        8,
        "data_loss_risk",
        retention_s=HOUR,
        time_lag_s=2_000,
    ),
    Case(
        "time lag under half the retention: no override",
        [5_000] * 5,
        4,
        "hold_in_band",
        retention_s=HOUR,
        time_lag_s=1_700,
    ),
    Case("infinite retention never risks loss", [5_000] * 5, 4, "hold_in_band", time_lag_s=10 * DAY),
    Case(
        "capacity honours the data-loss override too",
        [5_000] * 5,
        8,
        "data_loss_risk",
        policy="capacity",
        retention_s=HOUR,
        time_lag_s=2_000,
        ingress_rate=10.0,
    ),
    # keda
    Case("keda ceil(lag / keda_lag_threshold)", [65_000] * 5, 7, "keda_target", policy="keda"),
    Case(
        "keda threshold defaults to per_worker_rate x drain_target_s: ceil(65000 / 6000)",
        [65_000] * 5,
        11,
        "keda_target",
        policy="keda",
        config={"keda_lag_threshold": None},
    ),
    Case(
        "keda with its own threshold",
        [5_500] * 5,
        6,
        "keda_target",
        policy="keda",
        config={"keda_lag_threshold": 1_000},
    ),
    Case("keda capped at partitions", [500_000] * 5, 12, "keda_target", policy="keda", partitions=12),
    Case("keda floored at min_workers", [0] * 5, 2, "keda_target", policy="keda", config={"min_workers": 2}),
    Case("keda ignores retention", [5_000] * 5, 1, "keda_target", policy="keda", retention_s=HOUR, time_lag_s=3_000),
    # capacity
    Case(
        "capacity above the band middle drains: ceil(50/10 + (6000 - 1000) / (600 * 10))",
        [6_000] * 5,
        6,
        "capacity_target",
        policy="capacity",
        ingress_rate=50.0,
    ),
    Case(
        "capacity within min_lag runs saturated: floor(47/10)",
        [500] * 5,
        4,
        "capacity_target",
        policy="capacity",
        workers=6,
        ingress_rate=47.0,
    ),
    Case(
        "capacity between min_lag and the band middle holds a count above what the ingress needs",
        [3_000] * 5,
        9,
        "capacity_target",
        policy="capacity",
        workers=9,
        ingress_rate=50.0,
    ),
    Case(
        "capacity between min_lag and the band middle raises a count below floor(ingress / rate)",
        [3_000] * 5,
        5,
        "capacity_target",
        policy="capacity",
        workers=3,
        ingress_rate=57.0,
    ),
    Case(
        "capacity is exempt from the relative hysteresis: 23 -> 21 at lag 0",
        [0] * 5,
        21,
        "capacity_target",
        policy="capacity",
        workers=23,
        ingress_rate=216.0,
        config={"max_workers": 32},
    ),
    Case(
        "capacity uses the observed worker rate",
        [0] * 5,
        5,
        "capacity_target",
        policy="capacity",
        workers=8,
        ingress_rate=100.0,
        worker_rate=20.0,
    ),
    Case("capacity without an ingress rate holds", [50_000] * 5, 4, "hold_no_rate", policy="capacity"),
    # bounds
    Case("max_workers caps a scale-up", rising(20_000, 1_000), 16, "at_bound", workers=16),
    Case("partitions cap a scale-up", rising(20_000, 1_000), 6, "at_bound", workers=6, partitions=6, retention_s=HOUR),
    Case("min_workers floors a scale-down", [0] * 5, 1, "scale_down_low", workers=3),
    Case("live slots cap a scale-up", [100_000] * 5, 7, "keda_target", policy="keda", live_slots=7),
    Case("live slots do not force a scale-down", [5_000] * 5, 10, "hold_in_band", workers=10, live_slots=5),
    Case(
        "live slots never make a scale-up a scale-down", rising(20_000, 1_000), 10, "at_bound", workers=10, live_slots=5
    ),
    Case(
        "count above max_workers corrected at once, even in cooldown",
        [5_000] * 5,
        16,
        "bounds",
        workers=20,
        change_ago_s=10,
    ),
    Case("count below min_workers corrected at once", [5_000] * 5, 3, "bounds", workers=1, config={"min_workers": 3}),
    Case(
        "partitions below min_workers: partitions win",
        [0] * 5,
        2,
        "bounds",
        workers=4,
        partitions=2,
        config={"min_workers": 3},
    ),
    # cooldown and hysteresis
    Case("cooldown holds a scale-down", [0] * 7, 4, "cooldown", change_ago_s=300),
    Case("cooldown elapsed: scale down", [0] * 11, 1, "scale_down_low", change_ago_s=600),
    Case(
        "scale_up_cooldown_s holds a scale-up",
        rising(20_000, 1_000, 7),
        4,
        "cooldown",
        change_ago_s=120,
        config={"scale_up_cooldown_s": 180, "min_samples": 3},
    ),
    Case(
        "a scale-up waits scale_up_cooldown_s, not cooldown_s",
        rising(20_000, 1_000, 7),
        5,
        "scale_up_rising",
        change_ago_s=300,
        config={"scale_up_cooldown_s": 180},
    ),
    Case("hysteresis holds a small target change", [105_000] * 5, 10, "hysteresis", policy="keda", workers=10),
    Case("hysteresis lets a large target change through", [125_000] * 5, 13, "keda_target", policy="keda", workers=10),
    Case("hysteresis does not freeze hevo's steps", rising(20_000, 1_000), 13, "scale_up_rising", workers=12),
    # samples
    Case("too few samples: no change", rising(20_000, 1_000, 4), 4, "insufficient_samples"),
    Case(
        "samples before the last change do not count",
        rising(20_000, 1_000, 10),
        4,
        "insufficient_samples",
        change_ago_s=180,
        config={"cooldown_s": 0},
    ),
    # manual override: pins the count, whatever the policy, the bounds or the pipeline say
    Case("override holds a rising lag", rising(20_000, 1_000), 4, "override", pin=4),
    Case("override sets a drifted count back", [5_000] * 5, 10, "override", pin=10),
    Case("override beats max_workers", [5_000] * 5, 20, "override", workers=20, pin=20),
    Case("override beats a scale-down", [10] * 5, 12, "override", workers=12, pin=12),
    Case(
        "override beats the data-loss risk",
        [5_000] * 5,
        4,
        "override",
        retention_s=HOUR,
        time_lag_s=2_000,
        pin=4,
    ),
    Case(
        "override holds a stuck pipeline too", rising(20_000, 1_000), 6, "override", workers=6, pin=6, state="stalled"
    ),
    # stuck pipelines: more workers would not help
    Case("stalled holds a rising lag", rising(20_000, 1_000), 4, "stuck", state="stalled"),
    Case("stopped holds a rising lag", rising(20_000, 1_000), 4, "stuck", state="stopped"),
    Case("stuck holds a scale-down", [10] * 5, 4, "stuck", state="stalled"),
    Case(
        "stuck holds through a data-loss risk",
        [5_000] * 5,
        4,
        "stuck",
        retention_s=HOUR,
        time_lag_s=2_000,
        state="stopped",
    ),
    Case("stuck still corrects a count out of bounds", [5_000] * 5, 16, "bounds", workers=20, state="stalled"),
]


def build(case: Case) -> tuple[TopicSnapshot, TopicPolicyConfig, float]:
    now = 1_700_000_000.0
    n = len(case.lags)
    points = tuple(LagPoint(now - STEP * (n - 1 - i), lag) for i, lag in enumerate(case.lags))
    config = BASE.model_copy(update={"policy": case.policy, **case.config})
    config = TopicPolicyConfig.model_validate(config.model_dump())  # re-run the validators
    snapshot = TopicSnapshot(
        topic="orders",
        linker_workers=case.workers,
        partitions=case.partitions,
        live_slots=case.live_slots,
        retention_s=case.retention_s,
        lag_history=points,
        time_lag_s=case.time_lag_s,
        ingress_rate=case.ingress_rate,
        worker_rate=case.worker_rate,
        last_change_at=None if case.change_ago_s is None else now - case.change_ago_s,
    )
    return snapshot, config, now


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_evaluator_rules_and_bounds(case: Case) -> None:
    snapshot, config, now = build(case)
    pin = None if case.pin is None else Pin(case.pin, now + HOUR, "sale, by ana")
    state = stored_state(case.state, f"{case.state} for a test")
    decision = evaluate(snapshot, config, at(now), pin=pin, state=state)
    assert (decision.linker_workers, decision.rule) == (case.expected_workers, case.expected_rule), decision.reason
    assert decision.previous_linker_workers == case.workers
    assert decision.changed == (case.expected_workers != case.workers)
    assert decision.policy == case.policy
    assert decision.decided_at == now
    assert decision.reason


def test_decision_records_the_fit_and_reads_as_words() -> None:
    snapshot, config, now = build(CASES[0])
    d = evaluate(snapshot, config, at(now))
    assert d.slope == pytest.approx(1_000 / STEP)
    assert d.fit_r2 == pytest.approx(1.0)
    assert d.lag == 24_000
    assert "lag 24000 above max_lag 10000" in d.reason
    assert d.decided_at_datetime.tzinfo is UTC


def test_evaluation_is_deterministic() -> None:
    for case in CASES:
        snapshot, config, now = build(case)
        assert evaluate(snapshot, config, at(now)) == evaluate(snapshot, config, at(now))


def test_decision_is_a_frozen_value() -> None:
    snapshot, config, now = build(CASES[0])
    d = evaluate(snapshot, config, at(now))
    assert isinstance(d, Decision)
    with pytest.raises(AttributeError):
        d.linker_workers = 1  # type: ignore[misc]


def test_points_for_fit_takes_the_window_after_the_last_change() -> None:
    points = tuple(LagPoint(float(i), i) for i in range(30))
    snap = TopicSnapshot("t", 1, 1, 1, None, points, last_change_at=5.0)
    got = points_for_fit(snap, TopicPolicyConfig(window=10, min_samples=5))
    assert [p.at for p in got] == [float(i) for i in range(20, 30)]
    snap = TopicSnapshot("t", 1, 1, 1, None, points, last_change_at=25.0)
    assert [p.at for p in points_for_fit(snap, TopicPolicyConfig(window=10, min_samples=5))] == [
        25.0,
        26.0,
        27.0,
        28.0,
        29.0,
    ]


# (retention seconds or None, max_step, expected (up, down))
RETENTION_CASES = [
    (60.0, 4, (4, 1)),
    (6 * HOUR, 4, (4, 1)),
    (DAY, 4, (3, 2)),
    (3 * DAY, 4, (2, 3)),
    (7 * DAY, 4, (1, 4)),
    (30 * DAY, 4, (1, 4)),
    (None, 4, (1, 4)),
    (HOUR, 1, (1, 1)),
    (None, 8, (1, 8)),
]


@pytest.mark.parametrize(("retention", "max_step", "steps"), RETENTION_CASES)
def test_retention_steps(retention: float | None, max_step: int, steps: tuple[int, int]) -> None:
    assert retention_steps(retention, TopicPolicyConfig(max_step=max_step)) == steps


def test_retention_from_ms() -> None:
    assert retention_from_ms(-1) is None
    assert retention_from_ms(None) is None
    assert retention_from_ms(86_400_000) == DAY


def test_has_data_loss_risk_needs_lag() -> None:
    snap = TopicSnapshot("t", 1, 1, 1, HOUR, (LagPoint(0, 0),), time_lag_s=3_000)
    assert not has_data_loss_risk(snap, TopicPolicyConfig())


FIT_CASES = [
    ("rising line", [(0, 100), (60, 160), (120, 220)], 1.0, 1.0),
    ("flat", [(0, 5), (60, 5), (120, 5)], 0.0, 1.0),
    ("single point", [(0, 5)], 0.0, 0.0),
    ("one instant", [(0, 5), (0, 9)], 0.0, 0.0),
    ("noise", [(0, 0), (60, 100), (120, 0), (180, 100)], 100 / 300, 0.2),
]


@pytest.mark.parametrize(("points", "slope", "r2"), [c[1:] for c in FIT_CASES], ids=[c[0] for c in FIT_CASES])
def test_fit_trend(points: list[tuple[float, int]], slope: float, r2: float) -> None:
    t = fit_trend([LagPoint(a, b) for a, b in points])
    assert t.slope == pytest.approx(slope)
    assert t.r2 == pytest.approx(r2)
    assert t.samples == len(points)


@pytest.mark.parametrize(
    ("since", "every", "due"),
    [
        (None, 3, True),  # never evaluated: due at once
        (None, 10_000, True),
        (0, 1, False),  # nothing new since the last evaluation
        (1, 1, True),
        (2, 3, False),
        (3, 3, True),
        (7, 3, True),  # the monitor ran more often than the evaluator: still due, once
    ],
)
def test_is_evaluation_due_counts_measurements_since_the_last_evaluation(
    since: int | None, every: int, due: bool
) -> None:
    """The rule the scaling workflow applies to the stored lag records, and the simulator models."""
    assert is_evaluation_due(since, TopicPolicyConfig(evaluate_every=every)) is due


def test_override_and_stuck_reasons_name_who_why_and_until() -> None:
    snapshot, config, now = build(Case("x", rising(20_000, 1_000), 4, "override"))
    pin = Pin(8, now + 2 * HOUR, "override 7 by ana: Black Friday")
    d = evaluate(snapshot, config, at(now), pin=pin)
    until = "2023-11-15 00:13:20 UTC"
    assert d.reason == f"manual override (override 7 by ana: Black Friday) pins 8 workers until {until}"
    held = evaluate(snapshot, config, at(now), pin=Pin(4, now + 2 * HOUR, "override 7 by ana: Black Friday"))
    assert held.reason == f"held at 4 workers by a manual override (override 7 by ana: Black Friday) until {until}"
    stuck = evaluate(snapshot, config, at(now), state=PipelineState("stopped", "nothing consumes it"))
    assert (stuck.rule, stuck.reason) == ("stuck", "pipeline stopped: nothing consumes it")
    assert evaluate(snapshot, config, at(now), state=PipelineState()).rule == "scale_up_rising"  # ok does not hold


def test_the_first_change_after_an_override_says_so() -> None:
    snapshot, config, now = build(Case("x", [10] * 5, 2, "scale_down_low_lag", workers=8))
    d = after_override(evaluate(snapshot, config, at(now)), "override ended (sale)")
    assert (d.previous_linker_workers, d.rule) == (8, "override_expired")
    assert d.reason.startswith("override ended (sale); scale_down")
