"""Lag math: offsets in, lag, lost records, time lag and rates out. Pure: no client, no clock.

Definitions (per partition, offsets as Kafka reports them):

* ``latest``: the high watermark, the offset the next produced record will get;
* ``log_start``: the first offset still on the broker; retention deletes records below it;
* ``committed``: the pipeline's own stored position (the next offset it will read), or None when it
  has never consumed the partition.

Records below ``log_start`` that the pipeline never read are **lost**: retention deleted them. They
are reported separately and never counted as lag, because no amount of scaling can consume them
(counting them is what makes KEDA's Kafka scaler scale out on data that no longer exists,
kedacore/keda#2612). Lag therefore counts from ``max(committed, log_start)``.

Time lag follows kafka-lag-exporter: keep a history of (time, latest offset) samples and read off,
by linear interpolation, *when* the head of the log was where the consumer is now. Its users'
recurring complaints (seglo/kafka-lag-exporter#37, #121, #353) were non-zero or jumping time lag on
caught-up or idle topics, so here a consumer that is not behind has a time lag of exactly 0.0, and a
flat (idle) history never divides by zero.

Example:
    >>> p = measure_partition_lag(PartitionOffsets("t", 0, latest=120, log_start=20, committed=5))
    >>> (p.lag, p.lost)
    (100, 15)
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from lagsched.core.times import epoch_s

__all__ = [
    "MONITOR_SCHEDULE_S",
    "OPEN_TRANSACTION_WARN_S",
    "NoOffsetPolicy",
    "OffsetSample",
    "PartitionLag",
    "PartitionOffsets",
    "SampleWindow",
    "TopicLag",
    "aggregate_by_topic",
    "consumption_rate",
    "estimate_time_lag",
    "ingress_rate",
    "is_old_open_transaction",
    "measure_lag",
    "measure_partition_lag",
    "measurement_due",
    "offset_rate",
    "topic_ingress_rate",
    "topic_time_lag",
]

NoOffsetPolicy = Literal["earliest", "latest"]
"""Where a partition with no committed offset starts: ``earliest`` reads everything still retained
(all of it is lag), ``latest`` skips to the head (lag 0), mirroring Kafka's ``auto.offset.reset``."""


#: An open transaction holding a partition's last stable offset this long (seconds) is reported
#: (lag monitor warning, status page, ``open_transactions``): Kafka's default
#: ``transaction.timeout.ms`` is one minute and the broker's cap (``transaction.max.timeout.ms``)
#: 15 minutes, so one open for five is a producer worth a look. Shorter holds are normal traffic.
OPEN_TRANSACTION_WARN_S = 300.0

#: The lag monitor DAG's schedule (every minute): the shortest ``measure_every_s`` it can honour.
MONITOR_SCHEDULE_S = 60.0


def measurement_due(last_at: float | None, now: datetime, every_s: float) -> bool:
    """Whether a scheduled lag monitor run measures: the first one does, then one at least
    ``every_s`` after the last measurement, give or take half the minute schedule (a run the
    scheduler starts a few seconds early still counts). ``last_at`` is the Redis mark, epoch seconds.

    >>> from datetime import UTC
    >>> def at(t: float) -> datetime:
    ...     return datetime.fromtimestamp(t, tz=UTC)
    >>> [measurement_due(0.0, at(m * 60.0 + 2), 300.0) for m in range(1, 6)]  # every fifth minute
    [False, False, False, False, True]
    >>> measurement_due(None, at(5.0), 300.0), measurement_due(0.0, at(58.0), 60.0)
    (True, True)
    """
    return last_at is None or epoch_s(now) - last_at >= every_s - MONITOR_SCHEDULE_S / 2


def is_old_open_transaction(held_offsets: int, open_s: float, bound_s: float = OPEN_TRANSACTION_WARN_S) -> bool:
    """Whether a hold behind the last stable offset is one to report: it stood ``bound_s`` or more
    (the topic's ``open_transaction_bound_s``, by default `OPEN_TRANSACTION_WARN_S`).

    >>> is_old_open_transaction(20, 400.0), is_old_open_transaction(20, 60.0), is_old_open_transaction(0, 900.0)
    (True, False, False)
    >>> is_old_open_transaction(20, 60.0, bound_s=30.0)
    True
    """
    return held_offsets > 0 and open_s >= bound_s


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Raw offsets of one partition as measured in one run.

    Attributes:
        topic: topic name.
        partition: partition number.
        latest: high watermark (offset of the next record to be produced).
        log_start: earliest offset still retained by the broker.
        committed: the pipeline's stored next offset to read, or None if it never consumed.
    """

    topic: str
    partition: int
    latest: int
    log_start: int
    committed: int | None


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Lag of one partition.

    Attributes:
        topic: topic name.
        partition: partition number.
        latest: high watermark used.
        log_start: log-start offset used.
        committed: committed offset as stored (None if none).
        position: where consumption effectively resumes: ``max(committed, log_start)``, or the
            no-offset policy's choice when nothing is committed.
        lag: records still to consume, ``latest - position`` (never negative).
        lost: records retention deleted before they were consumed, ``log_start - committed`` when
            positive, else 0. Not part of ``lag``.
        no_offset_policy_applied: True when ``committed`` was None and ``position`` comes from the
            no-offset policy; reported so a user sees why the lag is what it is.
        ahead: how far ``committed`` is beyond ``latest``; an **anomaly** when positive (a topic
            re-created behind the registry's back, or offsets stored by hand): the lag of such a
            partition is unknown, not 0, and it is reported as such.
    """

    topic: str
    partition: int
    latest: int
    log_start: int
    committed: int | None
    position: int
    lag: int
    lost: int
    no_offset_policy_applied: bool
    ahead: int = 0

    @property
    def is_anomaly(self) -> bool:
        """The committed offset is beyond the partition's high watermark."""
        return self.ahead > 0


@dataclass(frozen=True, slots=True)
class TopicLag:
    """Lag of one topic, summed over its partitions.

    Attributes:
        topic: topic name.
        lag: total records to consume.
        lost: total records lost to retention.
        partitions: number of partitions measured.
        partitions_without_offset: how many had no committed offset (no-offset policy applied).
        max_partition_lag: the largest single partition lag (a hot partition bounds the drain
            time no matter how many workers run).
    """

    topic: str
    lag: int
    lost: int
    partitions: int
    partitions_without_offset: int
    max_partition_lag: int


def measure_partition_lag(offsets: PartitionOffsets, no_offset_policy: NoOffsetPolicy = "earliest") -> PartitionLag:
    """Lag and lost records of one partition.

    A committed offset beyond ``latest`` gives lag 0 rather than a negative number, and ``ahead``
    says by how much: an anomaly the monitor reports per partition (the registry tells re-created
    topics by their Kafka topic id, so it should not happen; when it does, it must be seen).

    Example:
        >>> measure_partition_lag(PartitionOffsets("t", 0, 50, 10, None), "latest").lag
        0
        >>> measure_partition_lag(PartitionOffsets("t", 0, 300, 0, 500)).ahead
        200
        >>> measure_partition_lag(PartitionOffsets("t", 0, 50, 10, None), "earliest").lag
        40
    """
    latest = offsets.latest
    log_start = min(offsets.log_start, latest)  # a log-start past the head would mean negative lag
    if offsets.committed is None:
        position = log_start if no_offset_policy == "earliest" else latest
        lost = 0
        applied = True
    else:
        lost = max(0, log_start - offsets.committed)
        position = max(offsets.committed, log_start)
        applied = False
    return PartitionLag(
        topic=offsets.topic,
        partition=offsets.partition,
        latest=latest,
        log_start=offsets.log_start,
        committed=offsets.committed,
        position=position,
        lag=max(0, latest - position),
        lost=lost,
        no_offset_policy_applied=applied,
        ahead=0 if offsets.committed is None else max(0, offsets.committed - latest),
    )


def measure_lag(
    offsets: Iterable[PartitionOffsets], no_offset_policy: NoOffsetPolicy = "earliest"
) -> list[PartitionLag]:
    """Lag of every partition given, in input order (see `measure_partition_lag`)."""
    return [measure_partition_lag(o, no_offset_policy) for o in offsets]


def aggregate_by_topic(lags: Iterable[PartitionLag]) -> dict[str, TopicLag]:
    """Sum partition lags per topic; topics come out in the order first seen."""
    acc: dict[str, list[int]] = {}
    for p in lags:
        a = acc.setdefault(p.topic, [0, 0, 0, 0, 0])
        a[0] += p.lag
        a[1] += p.lost
        a[2] += 1
        a[3] += int(p.no_offset_policy_applied)
        a[4] = max(a[4], p.lag)
    return {
        t: TopicLag(t, lag=a[0], lost=a[1], partitions=a[2], partitions_without_offset=a[3], max_partition_lag=a[4])
        for t, a in acc.items()
    }


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One observation of an offset at a time.

    Attributes:
        at: when it was observed, seconds since the epoch (UTC), as given by the injected clock.
        offset: the offset observed (a high watermark, or a committed offset).
    """

    at: float
    offset: int


@dataclass(frozen=True, slots=True)
class SampleWindow:
    """The recent history of one offset, oldest first, bounded by count and by age.

    Immutable: `add` returns a new window. Bounds are applied relative to the newest sample, never
    to a wall clock, so replaying the same samples always gives the same window.

    A run of equal offsets (an idle partition) is kept as its first and last sample only: the first
    remembers *since when* the head has not moved, which time lag needs, and the run costs two slots
    however long the topic stays idle. For the same reason the age bound keeps a sample that starts
    a flat run reaching into the window, and it never leaves fewer than two samples (one sample
    gives no rate).

    Attributes:
        max_samples: keep at most this many samples (>= 2).
        max_age_s: drop samples older than this, relative to the newest (None: no age bound).
        samples: the samples, oldest first, times non-decreasing.

    Example:
        >>> w = SampleWindow(max_samples=3)
        >>> for t, o in [(0, 0), (60, 10), (120, 20), (180, 30)]:
        ...     w = w.add(OffsetSample(t, o))
        >>> [s.offset for s in w.samples]
        [10, 20, 30]
    """

    max_samples: int = 60
    max_age_s: float | None = None
    samples: tuple[OffsetSample, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_samples < 2:
            raise ValueError(f"max_samples must be >= 2 to estimate a rate, got {self.max_samples}")
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0 or None, got {self.max_age_s}")

    def add(self, sample: OffsetSample) -> SampleWindow:
        """A new window with `sample` appended and the bounds applied.

        A sample older than the newest one is ignored (a late, out-of-order write); an offset that
        goes backwards (topic recreated, offsets reset) starts the history afresh, because rates and
        interpolation across a reset are meaningless.
        """
        items = list(self.samples)
        if items and sample.at < items[-1].at:
            return self
        if items and sample.offset < items[-1].offset:
            items = []
        if len(items) >= 2 and items[-1].offset == sample.offset and items[-2].offset == sample.offset:
            items[-1] = sample  # extend the flat run: keep its first and last sample
        else:
            items.append(sample)
        if self.max_age_s is not None:
            horizon = sample.at - self.max_age_s
            first_kept = 0
            while first_kept < len(items) - 2 and items[first_kept + 1].at < horizon:
                first_kept += 1
            if (
                first_kept < len(items) - 2
                and items[first_kept].at < horizon
                and items[first_kept].offset != items[first_kept + 1].offset
            ):
                first_kept += 1
            items = items[first_kept:]
        if len(items) > self.max_samples:
            items = items[len(items) - self.max_samples :]
        return SampleWindow(self.max_samples, self.max_age_s, tuple(items))

    def extend(self, samples: Iterable[OffsetSample]) -> SampleWindow:
        """`add` each sample in turn."""
        w = self
        for s in samples:
            w = w.add(s)
        return w

    @property
    def newest(self) -> OffsetSample | None:
        """The newest sample, or None when empty."""
        return self.samples[-1] if self.samples else None


def offset_rate(samples: Sequence[OffsetSample]) -> float:
    """Average rate of change of an offset over the samples, in records per second.

    The slope between the oldest and the newest sample: with monotone offsets this is exactly the
    records produced (or consumed) over the span, divided by the span, and it is robust to a
    sample missing in between. Returns 0.0 with fewer than two samples, a zero time span, or an
    offset that went backwards.

    Example:
        >>> offset_rate([OffsetSample(0, 100), OffsetSample(30, 160), OffsetSample(60, 220)])
        2.0
    """
    if len(samples) < 2:
        return 0.0
    first, last = samples[0], samples[-1]
    span = last.at - first.at
    if span <= 0 or last.offset <= first.offset:
        return 0.0
    return (last.offset - first.offset) / span


def ingress_rate(latest_samples: Sequence[OffsetSample]) -> float:
    """Records per second produced into one partition, from (time, latest offset) samples."""
    return offset_rate(latest_samples)


def consumption_rate(committed_samples: Sequence[OffsetSample]) -> float:
    """Records per second consumed, from (time, committed offset) samples of one partition or slot.

    For a slot that owns several partitions, pass the per-time sums of its committed offsets
    (records consumed so far), or sum the per-partition rates.
    """
    return offset_rate(committed_samples)


def topic_ingress_rate(latest_samples_by_partition: Mapping[int, Sequence[OffsetSample]]) -> float:
    """Records per second produced into a topic: the sum of its partitions' ingress rates."""
    return sum(ingress_rate(s) for s in latest_samples_by_partition.values())


def estimate_time_lag(
    latest_samples: Sequence[OffsetSample], committed: int, at: float, latest: int | None = None
) -> float:
    """Seconds since the head of the log was at the consumer's position (kafka-lag-exporter style), at ``at``.

    ``at`` is on the samples' axis, epoch seconds like `OffsetSample.at` (the lag monitor's
    measurement time, or the newest sample's).

    ``latest_samples`` are (time, high watermark) samples of one partition, oldest first; the
    current measurement is normally the newest of them. ``latest`` overrides the newest sample's
    offset as the current head when given. Rules, in order:

    1. nothing behind (``committed >= latest``) or no samples: exactly 0.0;
    2. ``committed`` at or beyond the newest sample's offset: 0.0 (every unread record is younger
       than any sample we hold, and the newest sample is the current measurement);
    3. ``committed`` inside the sampled range: interpolate between the last sample at or below it
       and the first sample above it (offsets strictly differ there, so no division by zero and
       flat idle stretches are skipped rather than interpolated through);
    4. ``committed`` older than the oldest sample: extrapolate back from the oldest sample at the
       window's average ingress rate; with no measurable rate (an idle window) report the lower
       bound ``at - oldest.at``. Never less than that bound.

    The result is clamped to be >= 0 so a clock skew between sampler and caller cannot make it
    negative.

    Example:
        >>> s = [OffsetSample(0, 0), OffsetSample(60, 600), OffsetSample(120, 1200)]
        >>> estimate_time_lag(s, committed=300, at=120)
        90.0
        >>> estimate_time_lag(s, committed=1200, at=120)
        0.0
    """
    if not latest_samples:
        return 0.0
    head = latest_samples[-1].offset if latest is None else latest
    if committed >= head or committed >= latest_samples[-1].offset:
        return 0.0
    oldest = latest_samples[0]
    if committed < oldest.offset:
        rate = offset_rate(latest_samples)
        bound = at - oldest.at
        if rate <= 0.0:
            return max(0.0, bound)
        extrapolated = at - (oldest.at - (oldest.offset - committed) / rate)
        return max(0.0, bound, extrapolated)
    # Last sample with offset <= committed; the one after it is the first with offset > committed.
    # A window's offsets never go down (a reset starts a new window), so a binary search finds it
    # reading a few samples of a full window rather than all of them.
    lo = bisect.bisect_right(latest_samples, committed, key=_offset) - 1
    a, b = latest_samples[lo], latest_samples[lo + 1]
    fraction = (committed - a.offset) / (b.offset - a.offset)
    produced_at = a.at + fraction * (b.at - a.at)
    result = at - produced_at
    return result if result > 0.0 and math.isfinite(result) else 0.0


def _offset(sample: OffsetSample) -> int:
    return sample.offset


def topic_time_lag(partition_time_lags: Iterable[float]) -> float:
    """A topic's time lag: its worst partition's (the oldest unread record anywhere in it)."""
    return max(partition_time_lags, default=0.0)
