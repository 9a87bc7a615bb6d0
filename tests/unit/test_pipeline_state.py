"""Stalled and stopped pipelines (Burrow's model): one table of cases over measurements and windows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lagsched.core.lag import OffsetSample, SampleWindow
from lagsched.core.pipeline_state import is_stuck, last_progress_at, pipeline_state, stored_state
from lagsched.core.policies import LagPoint

STEP = 60.0


@dataclass(frozen=True)
class Case:
    name: str
    lags: list[int]  # one per measurement, a minute apart, oldest first; the last is the current one
    moved_at: int | None  # index of the measurement that last saw an offset move; None: never committed
    holders: int
    expected: str
    unmoved: int
    stall_after: int = 3


CASES = [
    Case("first measurement ever", [500], 0, 2, "ok", 0),
    Case("moving offsets", [500, 400, 300, 200], 3, 2, "ok", 0),
    Case("one short of stall_after", [500] * 3, 0, 2, "ok", 2),
    Case("stall_after unmoved measurements with holders: stalled", [500] * 4, 0, 2, "stalled", 3),
    Case("the same without a live holder: stopped", [500] * 4, 0, 0, "stopped", 3),
    Case("caught up (lag 0) never stuck", [0] * 10, 0, 2, "ok", 0),
    Case("lag that appeared just now is not stuck yet", [0, 0, 0, 0, 5], 0, 2, "ok", 1),
    Case("lag back above zero counts only since then", [9, 9, 0, 9, 9, 9], 0, 1, "stalled", 3),
    Case("never committed, nobody holding: stopped", [500] * 3, None, 0, "stopped", 3),
    Case("never committed, held: stalled", [500] * 3, None, 4, "stalled", 3),
    Case("a move ends it", [500] * 6 + [400], 6, 2, "ok", 0),
    Case("stall_after 5 counts five", [500] * 6, 0, 1, "stalled", 5, stall_after=5),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_pipeline_state(case: Case) -> None:
    points = [LagPoint(STEP * i, lag) for i, lag in enumerate(case.lags)]
    moved = None if case.moved_at is None else STEP * case.moved_at
    s = pipeline_state(points, last_progress_at=moved, live_holders=case.holders, stall_after=case.stall_after)
    assert (s.state, s.unmoved) == (case.expected, case.unmoved), s.reason
    assert s.is_stuck == (case.expected != "ok") == is_stuck(s.state)
    assert bool(s.reason) == s.is_stuck


def test_reasons_say_what_to_look_at() -> None:
    points = [LagPoint(STEP * i, 1_234) for i in range(4)]
    stalled = pipeline_state(points, last_progress_at=0.0, live_holders=2, stall_after=3)
    assert stalled.reason.startswith(
        "lag 1,234 and no committed offset moved in the last 3 measurements (stall_after_measurements 3; "
        "the last move was seen at 1970-01-01 00:00:00 UTC); 2 partition(s) have a live holder that does not commit"
    )
    stopped = pipeline_state(points, last_progress_at=None, live_holders=0, stall_after=3)
    assert "no offset was ever committed" in stopped.reason
    assert "nothing consumes it (is the consume DAG running" in stopped.reason
    with pytest.raises(ValueError, match="stall_after must be >= 1"):
        pipeline_state(points, last_progress_at=None, live_holders=0, stall_after=0)


def test_last_progress_is_the_latest_start_of_a_trailing_unchanged_run() -> None:
    # A window keeps an unchanged run as its first and last sample, however long it lasts.
    moving = SampleWindow(10).extend(
        [OffsetSample(0, 5), OffsetSample(60, 9), OffsetSample(120, 9), OffsetSample(600, 9)]
    )
    assert [s.at for s in moving.samples] == [0, 60, 600]
    still = SampleWindow(10).extend([OffsetSample(0, 1), OffsetSample(60, 1), OffsetSample(600, 1)])
    assert last_progress_at([moving.samples]) == 60
    assert last_progress_at([still.samples]) == 0  # never seen moving: since the first observation
    assert last_progress_at([moving.samples, still.samples]) == 60  # the latest move of any partition
    assert last_progress_at([(), ()]) is None
    assert last_progress_at([]) is None
    # A reset (the offset went back) starts the window afresh: it counts as a move.
    reset = moving.add(OffsetSample(660, 2))
    assert last_progress_at([reset.samples]) == 660


def test_stored_state_reads_what_a_lag_record_holds() -> None:
    assert stored_state("stalled", "why").is_stuck
    assert (stored_state("stopped", "why").state, stored_state("stopped", "why").reason) == ("stopped", "why")
    assert not stored_state("ok").is_stuck
    assert not stored_state("", "").is_stuck  # a record written before states existed
