"""The demo's traffic profile and the token-bucket arithmetic the load generator runs on."""

from __future__ import annotations

import itertools
import math

import pytest

from lagsched.core.errors import ConfigError, TopicNameError
from lagsched.core.load_profile import DueSchedule, TokenBucket, TopicLoad, demo_profile


def test_rate_is_linear_between_points_and_holds_after_the_last() -> None:
    load = TopicLoad("t", 1, ((0, 10), (10, 110), (20, 0)))
    assert load.rate_at(-1) == 0
    assert load.rate_at(0) == 10
    assert load.rate_at(5) == 60
    assert load.rate_at(10) == 110
    assert load.rate_at(15) == 55
    assert load.rate_at(20) == 0
    assert load.rate_at(1e9) == 0
    assert load.peak == 110


@pytest.mark.parametrize(("start", "end"), [(0, 20), (3, 17), (-5, 4), (12.5, 12.75), (19, 40)])
def test_records_between_is_the_integral_of_the_rate(start: float, end: float) -> None:
    load = TopicLoad("t", 1, ((0, 10), (10, 110), (20, 0)))
    steps = 20_000  # a fine midpoint sum as the reference
    width = (end - start) / steps
    reference = sum(load.rate_at(start + (i + 0.5) * width) for i in range(steps)) * width
    assert load.records_between(start, end) == pytest.approx(reference, rel=1e-4)


def test_records_between_adds_up_over_any_split() -> None:
    load = demo_profile(peak_rate=1000)[0]
    cuts = [0, 0.3, 29.99, 30, 61.7, 200, 330.5, 400]
    pieces = sum(load.records_between(a, b) for a, b in itertools.pairwise(cuts))
    assert pieces == pytest.approx(load.records_between(0, 400))
    assert load.records_between(10, 10) == 0
    assert load.records_between(10, 5) == 0


def test_demo_profile_has_one_hot_topic_trickles_and_an_idle_one() -> None:
    loads = {t.topic: t for t in demo_profile(peak_rate=3000, ramp_at_s=30, ramp_s=60, hold_s=210, fall_s=30)}
    assert set(loads) == {"demo.orders", "demo.clicks", "demo.payments", "demo.audit", "demo.archive"}
    hot = loads["demo.orders"]
    assert hot.rate_at(10) == 20
    assert hot.rate_at(60) == pytest.approx(1510)
    assert hot.rate_at(200) == 3000
    assert hot.rate_at(400) == 20  # back to a trickle after 30 + 60 + 210 + 30 s
    # 20/s for 30 s, the ramp's mean for 60 s, the peak for 210 s, the fall's mean for 30 s.
    assert hot.records_between(0, 330) == pytest.approx(20 * 30 + 1510 * 60 + 3000 * 210 + 1510 * 30)
    assert loads["demo.archive"].records_between(0, 1e6) == 0
    assert 0 < loads["demo.audit"].peak < loads["demo.payments"].peak < loads["demo.clicks"].peak < hot.peak
    assert all(t.partitions >= 1 for t in loads.values())


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"peak_rate": 0}, "peak_rate"), ({"ramp_s": -1}, "ramp_s"), ({"hold_s": math.nan}, "hold_s")],
)
def test_demo_profile_rejects_bad_values_naming_them(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        demo_profile(**kwargs)


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ((), "first point"),
        (((1, 5),), "first point"),
        (((0, 5), (0, 6)), "must increase"),
        (((0, 5), (3, -1)), "must be >= 0"),
        (((0, math.nan),), "must be >= 0"),
    ],
)
def test_topic_load_rejects_bad_points(points: tuple[tuple[float, float], ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopicLoad("t", 1, points)


def test_topic_load_validates_its_name_and_partitions() -> None:
    with pytest.raises(TopicNameError):
        TopicLoad("bad name", 1, ((0, 1),))
    with pytest.raises(ConfigError, match="partitions"):
        TopicLoad("t", 0, ((0, 1),))


def test_token_bucket_keeps_fractions_and_caps_at_burst() -> None:
    bucket = TokenBucket(burst=5)
    bucket.add(0.4)
    assert bucket.take() == 0
    bucket.add(0.7)
    assert bucket.take() == 1
    assert bucket.tokens == pytest.approx(0.1)
    bucket.add(20)
    assert bucket.dropped == pytest.approx(15.1)
    assert bucket.take(limit=2) == 2
    assert bucket.take() == 3
    assert bucket.take() == 0


def test_schedule_sends_exactly_the_profile_whatever_the_tick() -> None:
    loads = demo_profile(peak_rate=400, ramp_at_s=5, ramp_s=10, hold_s=10, fall_s=5)
    for tick in (0.05, 0.25, 0.9):
        schedule = DueSchedule(loads, start=1000.0, burst_s=2.0)
        sent: dict[str, int] = {}
        now = 1000.0
        while now < 1060.0:
            now = min(1060.0, now + tick)
            for topic, n in schedule.due(now).items():
                sent[topic] = sent.get(topic, 0) + n
        for load in loads:
            expected = load.records_between(0, 60)
            # Whole records only: at most one record short per topic (and float sums round).
            assert expected - 1.001 < sent.get(load.topic, 0) <= expected + 0.001, (tick, load.topic)
        assert all(d == 0 for d in schedule.dropped.values())
        assert "demo.archive" not in sent


def test_a_producer_far_behind_catches_up_by_at_most_one_burst() -> None:
    loads = (TopicLoad("t", 1, ((0, 100),)),)
    schedule = DueSchedule(loads, start=0.0, burst_s=1.0)
    assert schedule.due(0.5) == {"t": 50}
    assert schedule.due(30.5) == {"t": 100}  # 3,000 due; the bucket holds one second of the peak
    assert schedule.dropped["t"] == pytest.approx(2900)
    assert schedule.due(30.5) == {}  # time did not move
    assert schedule.due(20.0) == {}  # nor backwards
    assert schedule.rates(10.0) == {"t": 100.0}
