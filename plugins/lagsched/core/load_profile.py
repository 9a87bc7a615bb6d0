"""The demo's traffic: records per second per topic over time, and how many records are due now.

Pure: `lagsched_dev.loadgen` drives a Kafka producer with it; tests check the arithmetic with a fake
clock. A profile is piecewise linear in time (rates between two points are interpolated; the last
rate holds for ever), so the number of records due between two instants is an exact integral and
the generator produces the profile's records however its loop is timed.

Example:
    >>> hot = TopicLoad("demo.orders", 8, ((0, 0), (10, 100), (20, 100), (30, 0)))
    >>> hot.rate_at(5), hot.rate_at(15), hot.rate_at(40)
    (50.0, 100.0, 0.0)
    >>> hot.records_between(0, 30)  # 500 up the ramp, 1,000 held, 500 down
    2000.0
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from lagsched.core.errors import ConfigError
from lagsched.core.names import validate_topic_name

__all__ = ["DEMO_PEAK_RATE", "DEMO_SLOT_MAX_RATE", "DueSchedule", "TokenBucket", "TopicLoad", "demo_profile"]


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """One topic's traffic.

    Attributes:
        topic: the Kafka topic.
        partitions: its partition count (when the generator creates it).
        points: ``(seconds since start, records/s)``, times strictly increasing from 0; linear
            between points, the last rate held afterwards.
    """

    topic: str
    partitions: int
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if self.partitions < 1:
            raise ConfigError(f"{self.topic}: partitions = {self.partitions}: must be at least 1")
        if not self.points or self.points[0][0] != 0:
            raise ConfigError(f"{self.topic}: the first point must be at time 0, got {self.points[:1]}")
        for (t0, _), (t1, _) in itertools.pairwise(self.points):
            if t1 <= t0:
                raise ConfigError(f"{self.topic}: point times must increase, got {t0} then {t1}")
        for t, rate in self.points:
            if not rate >= 0:  # also rejects NaN
                raise ConfigError(f"{self.topic}: rate at {t} s = {rate}: must be >= 0 records/s")

    @property
    def peak(self) -> float:
        """The highest rate of the profile, records/s."""
        return max(rate for _, rate in self.points)

    def rate_at(self, t: float) -> float:
        """Records/s at ``t`` seconds (0 before the start)."""
        if t < 0:
            return 0.0
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            if t < t1:
                return float(r0 + (r1 - r0) * (t - t0) / (t1 - t0))
        return float(self.points[-1][1])

    def records_between(self, start: float, end: float) -> float:
        """Records due in ``[start, end)``: the integral of the rate (0 if ``end <= start``)."""
        if end <= start:
            return 0.0
        start, end = max(start, 0.0), max(end, 0.0)
        knots = sorted({start, end, *(t for t, _ in self.points if start < t < end)})
        # The rate is linear between consecutive knots, so the trapezoid rule is exact.
        return float(sum((b - a) * (self.rate_at(a) + self.rate_at(b)) / 2 for a, b in itertools.pairwise(knots)))


@dataclass(slots=True)
class TokenBucket:
    """Tokens (records allowed) accrue as the profile says; a send takes whole tokens.

    ``burst`` caps the tokens kept: a producer that fell behind (a stalled broker, a slow loop) sends
    at most ``burst`` records at once when it catches up, instead of a flood.

    >>> b = TokenBucket(burst=10)
    >>> b.add(3.7); b.take()
    3
    >>> b.add(100); b.take(), b.dropped
    (10, 90.7)
    """

    burst: float
    tokens: float = 0.0
    dropped: float = 0.0

    def add(self, amount: float) -> None:
        """Accrue ``amount`` tokens; what exceeds ``burst`` is dropped (and counted)."""
        total = self.tokens + amount
        self.tokens = min(self.burst, total)
        self.dropped += total - self.tokens

    def take(self, limit: int | None = None) -> int:
        """Take the whole tokens available (at most ``limit``); the fraction stays for later."""
        n = int(self.tokens)
        if limit is not None:
            n = min(n, limit)
        self.tokens -= n
        return n


@dataclass(slots=True)
class DueSchedule:
    """How many records each topic is due at each tick of the generator's loop.

    Args:
        loads: the profile.
        start: the clock value at which the profile's time 0 falls.
        burst_s: each topic's bucket holds at most ``burst_s`` seconds of its peak rate (at least 1).
    """

    loads: Sequence[TopicLoad]
    start: float
    burst_s: float = 1.0
    _last: float = field(init=False)
    _buckets: dict[str, TokenBucket] = field(init=False)

    def __post_init__(self) -> None:
        self._last = self.start
        self._buckets = {lt.topic: TokenBucket(burst=max(1.0, lt.peak * self.burst_s)) for lt in self.loads}

    def due(self, t_s: float) -> dict[str, int]:
        """Records to send at ``t_s`` (a reading of the clock ``start`` is on, seconds) per topic.

        Topics with none are left out.
        """
        elapsed0, elapsed1 = self._last - self.start, t_s - self.start
        self._last = max(self._last, t_s)
        out: dict[str, int] = {}
        for lt in self.loads:
            bucket = self._buckets[lt.topic]
            bucket.add(lt.records_between(elapsed0, elapsed1))
            n = bucket.take()
            if n:
                out[lt.topic] = n
        return out

    def rates(self, t_s: float) -> dict[str, float]:
        """Each topic's target rate at ``t_s``, records/s."""
        return {lt.topic: lt.rate_at(t_s - self.start) for lt in self.loads}

    @property
    def dropped(self) -> dict[str, float]:
        """Records the buckets dropped because the producer was behind by more than ``burst_s``."""
        return {topic: b.dropped for topic, b in self._buckets.items()}


#: `make demo`'s peak on its hot topic, records/s, and what one of its slots reads at most (the demo
#: cluster's ``slot_max_rate``): the peak needs three slots. Uncapped, one slot reads many times
#: the peak; capped below what three slots reach together on a 2-core machine running the whole
#: stack, the cap and not the machine is what the evaluator sizes for.
DEMO_PEAK_RATE = 1_200.0
DEMO_SLOT_MAX_RATE = 500.0


def demo_profile(
    *,
    peak_rate: float = DEMO_PEAK_RATE,
    ramp_at_s: float = 30.0,
    ramp_s: float = 60.0,
    hold_s: float = 150.0,
    fall_s: float = 30.0,
    prefix: str = "demo.",
) -> tuple[TopicLoad, ...]:
    """The demo's uneven traffic: one topic ramps hard, three trickle, one stays idle.

    ``<prefix>orders`` (8 partitions) trickles at 20 records/s, ramps from ``ramp_at_s`` over
    ``ramp_s`` to ``peak_rate``, holds it ``hold_s``, falls back over ``fall_s`` and trickles again;
    ``clicks`` (4), ``payments`` (2) and ``audit`` (1) trickle at 50, 10 and 2 records/s;
    ``archive`` (2) gets nothing.

    >>> [(t.topic, t.peak) for t in demo_profile(peak_rate=500)]  # doctest: +NORMALIZE_WHITESPACE
    [('demo.orders', 500.0), ('demo.clicks', 50.0), ('demo.payments', 10.0), ('demo.audit', 2.0),
     ('demo.archive', 0.0)]
    """
    if not peak_rate > 0:
        raise ConfigError(f"peak_rate = {peak_rate}: must be > 0 records/s")
    for name, value in (("ramp_at_s", ramp_at_s), ("ramp_s", ramp_s), ("hold_s", hold_s), ("fall_s", fall_s)):
        if not value > 0:
            raise ConfigError(f"{name} = {value}: must be > 0 seconds")
    trickle = 20.0
    t1 = ramp_at_s + ramp_s
    t2 = t1 + hold_s
    hot = ((0.0, trickle), (ramp_at_s, trickle), (t1, float(peak_rate)), (t2, float(peak_rate)), (t2 + fall_s, trickle))
    return (
        TopicLoad(f"{prefix}orders", 8, hot),
        TopicLoad(f"{prefix}clicks", 4, ((0.0, 50.0),)),
        TopicLoad(f"{prefix}payments", 2, ((0.0, 10.0),)),
        TopicLoad(f"{prefix}audit", 1, ((0.0, 2.0),)),
        TopicLoad(f"{prefix}archive", 2, ((0.0, 0.0),)),
    )
