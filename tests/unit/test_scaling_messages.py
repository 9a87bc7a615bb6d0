"""The scaling message: one type, built alike from a fresh decision and from its recorded row."""

from __future__ import annotations

import json

from lagsched.adapters.scaling_messages import ScalingMessage
from lagsched.core.decisions import DecisionRow
from lagsched.core.evaluator import Decision

AT = 1_795_000_000.25


def decision() -> Decision:
    return Decision(
        topic="orders", previous_linker_workers=2, linker_workers=5, lag=250_000, time_lag_s=90.0, slope=12.5,
        fit_r2=0.97, policy="hevo", rule="scale_up_rising", reason="lag 250000 above max_lag and rising; up by 3",
        at=AT,
    )  # fmt: skip


def test_a_decision_and_its_recorded_row_publish_the_same_message() -> None:
    d = decision()
    row = DecisionRow(
        decision_id=41, evaluation_id="run-1", decided_at=AT, topic_id="t-1", cluster="eu", topic=d.topic,
        previous_linker_workers=d.previous_linker_workers, linker_workers=d.linker_workers, lag=d.lag,
        time_lag_s=d.time_lag_s, slope=d.slope, fit_r2=d.fit_r2, rule=d.rule, policy=d.policy, reason=d.reason,
        announced_at=None,
    )  # fmt: skip
    fresh = ScalingMessage.of_decision("eu", "t-1", d, 41)
    assert fresh == ScalingMessage.of_row(row)
    assert fresh.to_json() == ScalingMessage.of_row(row).to_json()


def test_the_wire_format_is_the_documented_one() -> None:
    body = json.loads(ScalingMessage.of_decision("eu", "t-1", decision(), 41).to_json())
    # docs/lag.md: the counts travel under their own names, the time as ISO 8601 in UTC.
    assert body == {
        "topic_id": "t-1", "topic": "orders", "cluster": "eu", "previous_linker_workers": 2, "linker_workers": 5,
        "at": "2026-11-18T11:06:40.250000+00:00", "reason": "lag 250000 above max_lag and rising; up by 3",
        "rule": "scale_up_rising", "policy": "hevo", "decision_id": 41,
    }  # fmt: skip
