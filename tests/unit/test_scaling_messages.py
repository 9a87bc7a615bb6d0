"""The scaling message: one type, built from the recorded row of a decision, with the documented wire format."""

from __future__ import annotations

import json

from lagsched.adapters.scaling_messages import ScalingMessage
from lagsched.core.decisions import DecisionRow

AT = 1_795_000_000.25


def row() -> DecisionRow:
    return DecisionRow(
        decision_id=41, evaluation_id="run-1", decided_at=AT, topic_id="t-1", cluster="eu", topic="orders",
        previous_linker_workers=2, linker_workers=5, lag=250_000, time_lag_s=90.0, slope=12.5, fit_r2=0.97,
        rule="scale_up_rising", policy="hevo", reason="lag 250000 above max_lag and rising; up by 3", announced_at=None,
    )  # fmt: skip


def test_the_message_carries_the_rows_fields_and_its_time() -> None:
    message = ScalingMessage.of_row(row())
    assert (message.cluster, message.topic_id, message.topic, message.decision_id) == ("eu", "t-1", "orders", 41)
    assert (message.previous_linker_workers, message.linker_workers, message.decided_at) == (2, 5, AT)


def test_the_wire_format_is_the_documented_one() -> None:
    body = json.loads(ScalingMessage.of_row(row()).to_json())
    # docs/lag.md: the counts travel under their own names, the time as ISO 8601 in UTC.
    assert body == {
        "topic_id": "t-1", "topic": "orders", "cluster": "eu", "previous_linker_workers": 2, "linker_workers": 5,
        "at": "2026-11-18T11:06:40.250000+00:00", "reason": "lag 250000 above max_lag and rising; up by 3",
        "rule": "scale_up_rising", "policy": "hevo", "decision_id": 41,
    }  # fmt: skip
