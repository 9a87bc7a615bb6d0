"""Lag math: lost records, no-offset policies, time lag, rates and the sample window."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagsched.core.lag import (
    OffsetSample,
    PartitionLag,
    PartitionOffsets,
    SampleWindow,
    aggregate_by_topic,
    consumption_rate,
    estimate_time_lag,
    ingress_rate,
    measure_lag,
    measure_partition_lag,
    offset_rate,
    topic_ingress_rate,
    topic_time_lag,
)

# (name, latest, log_start, committed, no-offset policy, lag, lost, position, policy applied)
PARTITION_CASES = [
    ("behind", 120, 0, 100, "earliest", 20, 0, 100, False),
    ("caught up", 120, 0, 120, "earliest", 0, 0, 120, False),
    ("committed at log start", 120, 50, 50, "earliest", 70, 0, 50, False),
    ("retention overtook the consumer", 120, 20, 5, "earliest", 100, 15, 20, False),
    ("everything deleted", 120, 120, 30, "earliest", 0, 90, 120, False),
    ("no offset, earliest", 120, 20, None, "earliest", 100, 0, 20, True),
    ("no offset, latest", 120, 20, None, "latest", 0, 0, 120, True),
    ("committed beyond latest", 120, 0, 130, "earliest", 0, 0, 130, False),
    ("empty partition", 0, 0, None, "earliest", 0, 0, 0, True),
]


@pytest.mark.parametrize(
    ("latest", "log_start", "committed", "policy", "lag", "lost", "position", "applied"),
    [c[1:] for c in PARTITION_CASES],
    ids=[c[0] for c in PARTITION_CASES],
)
def test_measure_partition_lag(
    latest: int, log_start: int, committed: int | None, policy: str, lag: int, lost: int, position: int, applied: bool
) -> None:
    got = measure_partition_lag(PartitionOffsets("t", 0, latest, log_start, committed), policy)  # type: ignore[arg-type]
    assert (got.lag, got.lost, got.position, got.no_offset_policy_applied) == (lag, lost, position, applied)


def test_lost_records_are_never_lag() -> None:
    got = measure_partition_lag(PartitionOffsets("t", 3, latest=1_000, log_start=900, committed=100))
    assert got.lost == 800
    assert got.lag == 100  # only what is still on the broker


def test_aggregate_by_topic_sums_partitions() -> None:
    lags = measure_lag(
        [
            PartitionOffsets("a", 0, 100, 0, 90),
            PartitionOffsets("a", 1, 100, 50, 10),
            PartitionOffsets("a", 2, 100, 0, None),
            PartitionOffsets("b", 0, 10, 0, 10),
        ],
        "earliest",
    )
    topics = aggregate_by_topic(lags)
    assert list(topics) == ["a", "b"]
    a = topics["a"]
    assert (a.lag, a.lost, a.partitions, a.partitions_without_offset, a.max_partition_lag) == (
        10 + 50 + 100,
        40,
        3,
        1,
        100,
    )
    assert topics["b"].lag == 0


def _busy() -> list[OffsetSample]:
    # 10 records/s, one sample a minute.
    return [OffsetSample(60.0 * i, 600 * i) for i in range(6)]


# (name, samples, committed, now, latest, expected seconds)
TIME_LAG_CASES = [
    ("interpolated mid-segment", _busy(), 900, 300.0, None, 300.0 - 90.0),
    ("exactly on a sample", _busy(), 1200, 300.0, None, 300.0 - 120.0),
    ("caught up is exactly zero", _busy(), 3000, 300.0, None, 0.0),
    ("beyond the newest sample is zero", _busy(), 3100, 300.0, 3200, 0.0),
    ("no samples", [], 5, 300.0, None, 0.0),
    ("older than the window: extrapolated at the rate", _busy(), -600, 300.0, None, 300.0 + 60.0),
    (
        "idle after a burst: flat stretch skipped, not interpolated through",
        [OffsetSample(0, 0), OffsetSample(60, 600), OffsetSample(600, 600), OffsetSample(1200, 600)],
        300,
        1200.0,
        None,
        1200.0 - 30.0,
    ),
    (
        "idle window, consumer behind: lower bound now - oldest",
        [OffsetSample(100, 500), OffsetSample(1000, 500)],
        400,
        1000.0,
        None,
        900.0,
    ),
    ("clock skew never gives a negative", [OffsetSample(100, 0), OffsetSample(200, 100)], 50, 100.0, None, 0.0),
]


@pytest.mark.parametrize(
    ("samples", "committed", "now", "latest", "expected"),
    [c[1:] for c in TIME_LAG_CASES],
    ids=[c[0] for c in TIME_LAG_CASES],
)
def test_estimate_time_lag(
    samples: list[OffsetSample], committed: int, now: float, latest: int | None, expected: float
) -> None:
    assert estimate_time_lag(samples, committed, now, latest=latest) == pytest.approx(expected)


def test_idle_caught_up_topic_stays_exactly_zero() -> None:
    window = SampleWindow(max_samples=10)
    results = []
    for i in range(100):
        window = window.add(OffsetSample(60.0 * i, 5_000))
        results.append(estimate_time_lag(window.samples, 5_000, 60.0 * i))
    assert results == [0.0] * 100


def test_idle_topic_behind_grows_with_the_clock_not_with_noise() -> None:
    # Head reached 5000 at t=0 and stayed; the consumer is stuck at 4000. The oldest unread record
    # is at least as old as t=0, and the estimate moves exactly with the clock.
    window = SampleWindow(max_samples=5, max_age_s=600.0)
    seen = []
    for i in range(60):
        now = 60.0 * i
        window = window.add(OffsetSample(now, 5_000))
        seen.append(estimate_time_lag(window.samples, 4_000, now))
    assert seen == [60.0 * i for i in range(60)]


def test_topic_time_lag_is_worst_partition() -> None:
    assert topic_time_lag([3.0, 10.0, 0.0]) == 10.0
    assert topic_time_lag([]) == 0.0


RATE_CASES = [
    ("steady", [OffsetSample(0, 0), OffsetSample(10, 50), OffsetSample(20, 100)], 5.0),
    ("one sample", [OffsetSample(0, 0)], 0.0),
    ("no samples", [], 0.0),
    ("zero span", [OffsetSample(5, 0), OffsetSample(5, 10)], 0.0),
    ("offsets went backwards", [OffsetSample(0, 100), OffsetSample(10, 50)], 0.0),
    ("idle", [OffsetSample(0, 7), OffsetSample(100, 7)], 0.0),
]


@pytest.mark.parametrize(("samples", "rate"), [c[1:] for c in RATE_CASES], ids=[c[0] for c in RATE_CASES])
def test_offset_rate(samples: list[OffsetSample], rate: float) -> None:
    assert offset_rate(samples) == pytest.approx(rate)
    assert ingress_rate(samples) == consumption_rate(samples) == offset_rate(samples)


def test_topic_ingress_rate_sums_partitions() -> None:
    by_partition = {0: [OffsetSample(0, 0), OffsetSample(10, 10)], 1: [OffsetSample(0, 0), OffsetSample(10, 30)]}
    assert topic_ingress_rate(by_partition) == pytest.approx(4.0)


class TestSampleWindow:
    def test_keeps_last_n(self) -> None:
        w = SampleWindow(max_samples=3).extend(OffsetSample(t, t) for t in range(10))
        assert [s.offset for s in w.samples] == [7, 8, 9]

    def test_drops_by_age_relative_to_newest(self) -> None:
        w = SampleWindow(max_samples=100, max_age_s=25).extend(OffsetSample(10 * i, i) for i in range(10))
        assert [s.at for s in w.samples] == [70, 80, 90]

    def test_never_fewer_than_two(self) -> None:
        w = SampleWindow(max_samples=10, max_age_s=5).extend([OffsetSample(0, 0), OffsetSample(100, 10)])
        assert len(w.samples) == 2

    def test_flat_run_keeps_first_and_last(self) -> None:
        w = SampleWindow(max_samples=10).extend(OffsetSample(t, 0 if t == 0 else 9) for t in range(0, 100, 10))
        assert [(s.at, s.offset) for s in w.samples] == [(0, 0), (10, 9), (90, 9)]

    def test_flat_run_start_survives_the_age_bound(self) -> None:
        w = SampleWindow(max_samples=10, max_age_s=30).extend(
            [OffsetSample(0, 0), OffsetSample(10, 5), *(OffsetSample(t, 5) for t in range(20, 200, 10))]
        )
        assert [(s.at, s.offset) for s in w.samples] == [(10, 5), (190, 5)]

    def test_offset_reset_starts_afresh(self) -> None:
        w = SampleWindow().extend([OffsetSample(0, 100), OffsetSample(10, 200), OffsetSample(20, 3)])
        assert [s.offset for s in w.samples] == [3]

    def test_late_sample_ignored(self) -> None:
        w = SampleWindow().extend([OffsetSample(10, 100), OffsetSample(5, 50)])
        assert [s.at for s in w.samples] == [10]
        assert w.newest == OffsetSample(10, 100)

    @pytest.mark.parametrize(("kwargs"), [{"max_samples": 1}, {"max_age_s": 0.0}])
    def test_rejects_useless_bounds(self, kwargs: dict[str, float]) -> None:
        with pytest.raises(ValueError, match="must be"):
            SampleWindow(**kwargs)  # type: ignore[arg-type]


@given(
    increments=st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=30),
    behind=st.integers(min_value=0, max_value=40_000),
    extra=st.floats(min_value=0, max_value=1_000),
)
def test_time_lag_properties(increments: list[int], behind: int, extra: float) -> None:
    """Never negative, zero when caught up, and never smaller for a consumer further behind."""
    offsets = [sum(increments[: i + 1]) for i in range(len(increments))]
    samples = [OffsetSample(60.0 * i, o) for i, o in enumerate(offsets)]
    now = samples[-1].at + extra
    head = offsets[-1]
    assert estimate_time_lag(samples, head, now) == 0.0
    committed = head - behind
    lag_time = estimate_time_lag(samples, committed, now)
    assert lag_time >= 0.0
    assert estimate_time_lag(samples, committed - 1, now) >= lag_time - 1e-9


def test_partition_lag_is_a_frozen_value() -> None:
    p = measure_partition_lag(PartitionOffsets("t", 0, 10, 0, 5))
    assert isinstance(p, PartitionLag)
    with pytest.raises(AttributeError):
        p.lag = 3  # type: ignore[misc]
