"""A scaling decision as recorded: the one type of a ``scaling_decisions`` row.

`lagsched.core.evaluator.Decision` is what an evaluation proposes (the row's fields an evaluation
decides, no ids yet); once `lagsched.adapters.worker_changes` has applied it, the row it wrote is a
`DecisionRow`, and everything after gets this type: the ``lagsched:scaling`` message (always built
from the row), the evaluator's retry and cooldown, an override's result, the lagsched page and
``lagsched status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lagsched.core.times import iso

__all__ = ["DecisionRow"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRow:
    """One ``scaling_decisions`` row (times in seconds since the epoch, UTC).

    Attributes:
        decision_id: row id.
        evaluation_id: the evaluation run that made it (the Airflow run id; an override's id for a pin).
        decided_at: when it was decided.
        topic_id: registry id of the topic.
        cluster: registry cluster.
        topic: the topic's name at decision time.
        previous_linker_workers: the topic's ``linker_workers`` before.
        linker_workers: the ``linker_workers`` it set.
        lag: the lag the evaluation saw, records.
        time_lag_s: the time lag it saw, seconds.
        slope: the fitted lag slope, records/s (0.0 when not fitted, and for manual changes).
        fit_r2: r² of that fit.
        policy: the policy that decided (``manual`` for an override).
        rule: the rule that fired.
        reason: the reason in words.
        announced_at: when it was published on ``lagsched:scaling``; None until then.
    """

    decision_id: int
    evaluation_id: str
    decided_at: float
    topic_id: str
    cluster: str
    topic: str
    previous_linker_workers: int
    linker_workers: int
    lag: int
    time_lag_s: float
    slope: float
    fit_r2: float
    policy: str
    rule: str
    reason: str
    announced_at: float | None

    @property
    def drain_s(self) -> float | None:
        """Seconds the lag would take to drain at the fitted slope; None when it was not falling.

        >>> from dataclasses import replace
        >>> replace(EXAMPLE, lag=12_000, slope=-100.0).drain_s, replace(EXAMPLE, slope=5.0).drain_s
        (120.0, None)
        """
        return self.lag / -self.slope if self.slope < 0 else None

    def as_dict(self) -> dict[str, Any]:
        """The row as the status JSON and ``lagsched status --json`` give it."""
        return {
            "decision_id": self.decision_id,
            "decided_at": iso(self.decided_at),
            "topic": self.topic,
            "previous_linker_workers": self.previous_linker_workers,
            "linker_workers": self.linker_workers,
            "rule": self.rule,
            "policy": self.policy,
            "reason": self.reason,
            "lag": self.lag,
            "time_lag_s": round(self.time_lag_s, 3),
            "slope": round(self.slope, 3),
            "fit_r2": round(self.fit_r2, 4),
            "drain_s": None if self.drain_s is None else round(self.drain_s, 1),
        }


#: A row for the examples of this package's doctests.
EXAMPLE = DecisionRow(
    decision_id=1, evaluation_id="scheduled__2026-01-01", decided_at=0.0, topic_id="t-1", cluster="c", topic="t",
    previous_linker_workers=1, linker_workers=2, lag=0, time_lag_s=0.0, slope=0.0, fit_r2=0.0, policy="hevo",
    rule="scale_up_rising", reason="", announced_at=None,
)  # fmt: skip
