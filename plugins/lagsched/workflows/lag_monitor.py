"""The lag monitor: one measurement of every enabled topic of a cluster.

Wires the adapters to the pure lag math of `lagsched.core.lag`; holds no rule of its own. One
`measure` call:

1. reads the registry (``topics`` + ``topic_partitions``): enabled topics and the pipeline's own
   committed offsets;
2. reads the broker's latest (the last stable offset: what the slots' read-committed reads can
   reach), high watermark and log-start offsets of all their partitions in batched
   ``list_offsets`` calls (`lagsched.adapters.kafka_admin`);
3. computes lag, lost records and the no-offset policy per partition (`measure_lag`), stores a
   (time, latest) and a (time, committed) sample per partition, and from the stored windows
   derives time lag (`estimate_time_lag`), ingress rate and consumption rate;
4. tells whether the topic's pipeline is stuck (`lagsched.core.pipeline_state`): lag above zero
   and no committed offset moving for ``stall_after_measurements`` measurements makes it
   **stalled** when some of its partitions have a live holder, **stopped** when none has; each
   stuck topic gets a warning line in the log;
5. reports **open transactions**: offsets held behind a partition's last stable offset (high
   watermark minus LSO) and how long that LSO has stood still (the trailing run of its samples);
   one open for the topic's ``open_transaction_bound_s`` (300 s by default) or more gets a
   warning line, since it holds every record behind it from every read-committed consumer;
6. stores one `LagRecord` per topic, with that state (the evaluator's input), and returns a
   `MeasureSummary`.

``now`` is a parameter: the DAG passes the wall clock at which it reads the broker (a
measurement's time is part of the measurement), tests pass fixed times. It is an aware datetime;
the samples, the lag records and the measured mark hold it as epoch seconds (`epoch_s`).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from lagsched.adapters.alert_figures import read_dead_letters, write_thresholds
from lagsched.adapters.gaps import lost_records
from lagsched.adapters.gc_pause import cyclic_gc_paused
from lagsched.adapters.kafka_admin import OffsetsAdmin, list_partitions, read_offsets
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.mysql import aware_utc
from lagsched.adapters.topics import TopicRow, load_topics_with_partitions
from lagsched.adapters.watermarks import PartitionEnd, record_ends
from lagsched.core.config import Settings, effective_config
from lagsched.core.evaluator import LagPoint
from lagsched.core.lag import (
    OPEN_TRANSACTION_WARN_S,
    OffsetSample,
    PartitionLag,
    PartitionOffsets,
    aggregate_by_topic,
    consumption_rate,
    estimate_time_lag,
    is_old_open_transaction,
    measure_lag,
    topic_ingress_rate,
    topic_time_lag,
)
from lagsched.core.pipeline_state import OK, PipelineState, last_progress_at, pipeline_state
from lagsched.core.thresholds import ClusterThresholds, TopicThresholds
from lagsched.core.times import epoch_s

__all__ = ["MeasureSummary", "TopicMeasurement", "measure"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicMeasurement:
    """One topic's figures at one measurement.

    Attributes:
        topic_id: registry id.
        topic: name.
        partitions: partitions measured (the broker's count).
        lag: records to consume, summed over partitions (lost records excluded).
        lost: records retention deleted before they were consumed: those still ahead of the committed
            offset plus those a consumer already skipped (``lost_skipped``).
        time_lag_s: age of the oldest unread record (worst partition), seconds; exactly 0 when
            nothing is behind.
        ingress_rate: records/s produced, over the sample window.
        consumption_rate: records/s committed by the pipeline, over the sample window.
        worker_rate: consumption per active slot while the topic had a backlog throughout the
            window, None when not observed.
        partitions_without_offset: partitions with no committed offset (``no_offset_policy`` used).
        max_partition_lag: the largest single partition's lag.
        no_offset_policy: the topic's ``no_offset_policy`` setting.
        partition_lags: per-partition detail.
        lost_skipped: records a consumer found deleted and skipped, recorded in ``retention_gaps``
            (part of ``lost``).
        pipeline: the pipeline's state: ``ok``, ``stalled`` or ``stopped``, with the reason.
        held_by_transaction: offsets behind the last stable offsets, summed over partitions: an
            open transaction's records (and whatever was written after them), not yet readable.
        transaction_open_s: how long the oldest such hold has stood (seconds, at least; the sample
            window bounds it); 0 when nothing is held.
        transaction_bound_s: the topic's ``open_transaction_bound_s``: a hold this old is warned of.
        dead_letters: records of the topic in the cluster's dead-letter table so far (the slots' counter).
    """

    topic_id: str
    topic: str
    partitions: int
    lag: int
    lost: int
    time_lag_s: float
    ingress_rate: float
    consumption_rate: float
    worker_rate: float | None
    partitions_without_offset: int
    max_partition_lag: int
    no_offset_policy: str
    partition_lags: tuple[PartitionLag, ...]
    lost_skipped: int = 0
    pipeline: PipelineState = OK
    held_by_transaction: int = 0
    transaction_open_s: float = 0.0
    transaction_bound_s: float = OPEN_TRANSACTION_WARN_S
    dead_letters: int = 0

    @property
    def open_transaction_warning(self) -> str | None:
        """The warning for a transaction open ``transaction_bound_s`` or more, else None."""
        if not is_old_open_transaction(self.held_by_transaction, self.transaction_open_s, self.transaction_bound_s):
            return None
        return (
            f"OPEN TRANSACTION {self.topic}: {self.held_by_transaction:,} offset(s) held behind the last stable "
            f"offset for {self.transaction_open_s:,.0f} s or more; no read-committed consumer reads past it "
            "until its producer commits or aborts (or the transaction times out)"
        )

    @property
    def state(self) -> str:
        """``ok``, ``stalled`` or ``stopped``."""
        return self.pipeline.state

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures (the per-partition detail reduced to partitions with lost records)."""
        return {
            "topic_id": self.topic_id,
            "topic": self.topic,
            "partitions": self.partitions,
            "lag": self.lag,
            "lost": self.lost,
            "lost_skipped": self.lost_skipped,
            "time_lag_s": round(self.time_lag_s, 3),
            "ingress_rate": round(self.ingress_rate, 3),
            "consumption_rate": round(self.consumption_rate, 3),
            "worker_rate": None if self.worker_rate is None else round(self.worker_rate, 3),
            "partitions_without_offset": self.partitions_without_offset,
            "max_partition_lag": self.max_partition_lag,
            "no_offset_policy": self.no_offset_policy,
            "lost_by_partition": {str(p.partition): p.lost for p in self.partition_lags if p.lost},
            "anomalies": _anomalies(self),
            "state": self.pipeline.state,
            "state_reason": self.pipeline.reason,
            "held_by_transaction": self.held_by_transaction,
            "transaction_open_s": round(self.transaction_open_s, 3),
        }

    @property
    def anomalies(self) -> tuple[PartitionLag, ...]:
        """Partitions whose committed offset is beyond the high watermark (their lag is unknown)."""
        return tuple(p for p in self.partition_lags if p.is_anomaly)


@dataclass(frozen=True, slots=True)
class MeasureSummary:
    """The result of one `measure` run.

    Attributes:
        cluster: cluster measured.
        at: measurement time (aware UTC).
        topics: every measured topic, largest lag first.
        missing: enabled registry topics the broker does not know (deleted; not measured).
        slot_rates: records/s committed per slot, summed over the partitions it holds now
            (approximate: a partition that moved between slots within the window counts for its
            current holder).
    """

    cluster: str
    at: datetime
    topics: tuple[TopicMeasurement, ...]
    missing: tuple[str, ...] = ()
    slot_rates: Mapping[str, float] = field(default_factory=dict)

    @property
    def total_lag(self) -> int:
        return sum(t.lag for t in self.topics)

    @property
    def total_lost(self) -> int:
        return sum(t.lost for t in self.topics)

    @property
    def stuck(self) -> tuple[TopicMeasurement, ...]:
        """Topics whose pipeline is stalled or stopped."""
        return tuple(t for t in self.topics if t.pipeline.is_stuck)

    def topic(self, name: str) -> TopicMeasurement:
        """The measurement of topic `name` (KeyError when it was not measured)."""
        for t in self.topics:
            if t.topic == name:
                return t
        raise KeyError(name)

    def as_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready summary (for XCom); `top` limits the topics listed, largest lag first."""
        shown = self.topics if top is None else self.topics[:top]
        return {
            "cluster": self.cluster,
            "at": self.at.isoformat(),
            "topics_measured": len(self.topics),
            "total_lag": self.total_lag,
            "total_lost": self.total_lost,
            "top": [t.as_dict() for t in shown],
            "lost": {t.topic: t.lost for t in self.topics if t.lost},
            "missing": list(self.missing),
            # Every anomaly, not only the top topics': each is something an operator must look at.
            "anomalies": {t.topic: _anomalies(t) for t in self.topics if t.anomalies},
            "slot_rates": {k: round(v, 3) for k, v in sorted(self.slot_rates.items())},
            # Every stuck topic, not only the top ones': more workers will not fix them.
            "stuck": [{"topic": t.topic, "state": t.state, "reason": t.pipeline.reason} for t in self.stuck],
            # Every topic an old open transaction holds back: no scaling makes it readable.
            "open_transactions": [
                {
                    "topic": t.topic,
                    "held_by_transaction": t.held_by_transaction,
                    "open_s": round(t.transaction_open_s, 1),
                }
                for t in self.topics
                if t.open_transaction_warning
            ],
        }

    def table(self, top: int = 10) -> str:
        """A readable summary: the `top` most lagging topics, then every topic with lost records."""
        when = self.at.strftime("%Y-%m-%d %H:%M:%S UTC")
        lines = [
            f"cluster {self.cluster} at {when}: {len(self.topics)} topic(s), total lag {self.total_lag:,}, "
            f"lost {self.total_lost:,}"
        ]
        header = (
            f"{'topic':<40} {'parts':>5} {'lag':>12} {'lost':>10} {'time lag s':>10} "
            f"{'in rec/s':>9} {'out rec/s':>9} {'no offset':>9}"
        )
        lines += [header, "-" * len(header)]
        for t in self.topics[:top]:
            lines.append(
                f"{t.topic[:40]:<40} {t.partitions:>5} {t.lag:>12,} {t.lost:>10,} {t.time_lag_s:>10.1f} "
                f"{t.ingress_rate:>9.1f} {t.consumption_rate:>9.1f} "
                f"{f'{t.partitions_without_offset} {t.no_offset_policy[:1]}':>9}"
            )
        if len(self.topics) > top:
            lines.append(f"... {len(self.topics) - top} more topic(s)")
        lost = [t for t in self.topics if t.lost]
        if lost:
            lines.append("records lost to retention (never consumed, not counted as lag):")
            for t in lost:
                parts = [f"p{p.partition}: {p.lost:,}" for p in t.partition_lags if p.lost]
                if t.lost_skipped:
                    parts.append(f"already skipped by the consumer: {t.lost_skipped:,}")
                lines.append(f"  {t.topic}: {t.lost:,} ({', '.join(parts)})")
        else:
            lines.append("no records lost to retention")
        if self.missing:
            lines.append(f"enabled in the registry but missing on the broker: {', '.join(self.missing)}")
        for t in self.stuck:
            lines.append(f"{t.state.upper()} {t.topic}: {t.pipeline.reason}")
        lines.extend(w for t in self.topics if (w := t.open_transaction_warning))
        for t in self.topics:
            for p in t.anomalies:
                lines.append(
                    f"ANOMALY {t.topic}[{p.partition}]: committed offset {p.committed:,} is {p.ahead:,} beyond the "
                    f"high watermark {p.latest:,}; its lag is unknown (offsets stored by hand, or the topic was "
                    "re-created without a sync)"
                )
        return "\n".join(lines)

    @property
    def anomalies(self) -> int:
        """Partitions, over all topics, whose committed offset is beyond the high watermark."""
        return sum(len(t.anomalies) for t in self.topics)


def _anomalies(t: TopicMeasurement) -> dict[str, dict[str, int]]:
    return {
        str(p.partition): {"committed": int(p.committed or 0), "latest": p.latest, "ahead": p.ahead}
        for p in t.anomalies
    }


@dataclass(frozen=True, slots=True)
class _Registered:
    """An enabled topic with its partitions' committed offsets and live holders."""

    row: TopicRow
    committed: Mapping[int, int | None]
    holders: Mapping[int, str]  # rows whose lease ran out have no holder


def _load_registered(conn: Any, cluster: str) -> dict[str, _Registered]:
    now, registered = load_topics_with_partitions(conn, cluster)  # now: the database's, judging the leases
    return {
        t.name: _Registered(
            t,
            {p.partition_id: p.committed_offset for p in partitions},
            {p.partition_id: holder for p in partitions if (holder := p.holder_at(now)) is not None},
        )
        for t, partitions in registered
    }


@cyclic_gc_paused()
def measure(
    cluster: str,
    *,
    mysql: Any,
    admin: OffsetsAdmin,
    store: LagStore,
    settings: Settings,
    now: datetime,
    timeout_s: float = 10.0,
) -> MeasureSummary:
    """Measure every enabled topic of `cluster`, store the samples, return the summary.

    Args:
        cluster: registry cluster name.
        mysql: an open lagsched MySQL connection.
        admin: Admin client of the cluster's broker.
        store: the cluster's `LagStore` (its window/TTL should come from `settings`).
        settings: validated settings (per-topic ``no_offset_policy``).
        now: measurement time, timezone-aware (a naive datetime is refused).
        timeout_s: broker request timeout.
    """
    at = epoch_s(now)  # the samples' axis
    # The committed offsets are read before the broker's watermarks, so a consumer that keeps up is
    # never past the log end within one measurement: the status page's offset_ahead relies on it.
    by_name = _load_registered(mysql, cluster)
    counts = list_partitions(admin, by_name, timeout_s=timeout_s, ignore_missing=True)
    missing = tuple(n for n in by_name if n not in counts)
    if missing:
        log.warning("topics enabled in the registry but not on the broker (not measured): %s", ", ".join(missing))
    # The committed offsets' windows need nothing from the broker: they are appended in Redis while
    # the broker answers list_offsets (each waits on another process), the latest windows after.
    committed_samples = {
        store.committed_key(name, p): OffsetSample(at, c)
        for name, n in counts.items()
        for p, c in by_name[name].committed.items()
        if c is not None and p < n
    }
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="committed-windows") as background:
        appended = background.submit(store.add_samples, committed_samples)
        broker = read_offsets(admin, counts, timeout_s=timeout_s)
        committed_windows = appended.result()
    lags = _partition_lags(by_name, broker, settings)
    latest_samples: dict[str, OffsetSample] = {}
    positions: dict[str, int] = {}
    for name, plags in lags.items():
        for p in plags:
            key = store.latest_key(name, p.partition)
            latest_samples[key] = OffsetSample(at, p.latest)
            positions[key] = p.position  # the time lag reads the samples around it
    # The windows come back as digests: the samples of each that the lag math below reads.
    readings = _Readings(
        at=at,
        store=store,
        settings=settings,
        by_name=by_name,
        broker=broker,
        committed_windows=committed_windows,
        latest_windows=store.add_samples(latest_samples, positions),
        history=store.read_lag_records(list(lags)),
        skipped=lost_records(mysql, [r.row.topic_id for r in by_name.values()]),
        totals=aggregate_by_topic(p for ps in lags.values() for p in ps),
        dead_letters=read_dead_letters(store.client, cluster),
    )
    measured: list[TopicMeasurement] = []
    slot_rates: dict[str, float] = {}
    for name, plags in lags.items():
        m, rates = _measure_topic(readings, name, plags)
        measured.append(m)
        for holder, rate in rates.items():
            slot_rates[holder] = slot_rates.get(holder, 0.0) + rate
    store.add_lag_records({m.topic: _lag_record(m, at) for m in measured})
    record_ends(mysql, [end for name, plags in lags.items() for end in _ends(by_name[name], plags, at)])
    store.mark_measured(at)
    write_thresholds(store.client, cluster, _thresholds(settings, by_name, counts))
    measured.sort(key=lambda t: (-t.lag, -t.lost, t.topic))
    _log_findings(measured)
    return MeasureSummary(cluster, aware_utc(now), tuple(measured), missing, slot_rates)


def _ends(registered: _Registered, plags: Sequence[PartitionLag], at: float) -> list[PartitionEnd]:
    """Each partition's end as read, for the watermarks (docs/completeness.md): the offset the pipeline
    must have committed to hold every record appended before ``at``. ``at`` was taken before the
    broker was asked, so those records sit below the end read. A partition with nothing to read then
    (no lag: nothing ever written, or all of it deleted by retention) is caught up at the offset it
    is at, which may be none (0). Partitions the broker has and the registry not yet are left out."""
    ms, tid = int(at * 1000), registered.row.topic_id
    return [
        (tid, p.partition, p.latest, ms, None) if p.lag else (tid, p.partition, min(p.latest, p.committed or 0), ms, ms)
        for p in plags
        if p.partition in registered.committed
    ]


def _thresholds(settings: Settings, by_name: Mapping[str, _Registered], counts: Mapping[str, int]) -> ClusterThresholds:
    """The alert thresholds this measurement applied (`lagsched.core.thresholds`): each topic's
    settings with its registry row's worker limits, as the evaluator sees them."""
    return ClusterThresholds(
        settings.measurements_stale_after_s,
        {
            name: TopicThresholds.of(effective_config(settings, reg.row), counts.get(name, reg.row.partition_count))
            for name, reg in by_name.items()
        },
    )


def _partition_lags(
    by_name: Mapping[str, _Registered], broker: Mapping[str, Sequence[Any]], settings: Settings
) -> dict[str, list[PartitionLag]]:
    """Each topic's partition lags: the broker's offsets against the stored ones."""
    lags: dict[str, list[PartitionLag]] = {}
    for name, parts in broker.items():
        reg = by_name[name]
        if reg.row.partition_count != len(parts):
            log.info("topic %s: registry has %d partitions, broker %d", name, reg.row.partition_count, len(parts))
        offsets = [
            PartitionOffsets(name, b.partition, b.latest, b.log_start, reg.committed.get(b.partition)) for b in parts
        ]
        lags[name] = measure_lag(offsets, settings.for_topic(name).no_offset_policy)
    return lags


@dataclass(frozen=True, slots=True)
class _Readings:
    """What one measurement read, for the per-topic figures (``at``: its time, epoch seconds)."""

    at: float
    store: LagStore
    settings: Settings
    by_name: Mapping[str, _Registered]
    broker: Mapping[str, Sequence[Any]]
    committed_windows: Mapping[str, Any]
    latest_windows: Mapping[str, Any]
    history: Mapping[str, Sequence[LagRecord]]
    skipped: Mapping[str, Mapping[int, int]]
    totals: Mapping[str, Any]
    dead_letters: Mapping[str, int]


def _measure_topic(r: _Readings, name: str, plags: Sequence[PartitionLag]) -> tuple[TopicMeasurement, dict[str, float]]:
    """One topic's measurement, and the consumption rate of each slot holding one of its partitions."""
    reg, at, store = r.by_name[name], r.at, r.store
    topic_settings = r.settings.for_topic(name)
    windows = {p.partition: r.latest_windows[store.latest_key(name, p.partition)].samples for p in plags}
    time_lag = topic_time_lag(
        estimate_time_lag(windows[p.partition], committed=p.position, at=at, latest=p.latest) for p in plags
    )
    held = {b.partition: b.held_by_transaction for b in r.broker[name] if b.held_by_transaction}
    # The LSO stands still while a transaction is open: its trailing run of equal samples says since when.
    held_since = [s for p in held if (s := last_progress_at([windows[p]])) is not None]
    committed = [
        (p.partition, w.samples)
        for p in plags
        if (w := r.committed_windows.get(store.committed_key(name, p.partition))) is not None and w.samples
    ]
    slot_rates: dict[str, float] = {}
    consumed = 0.0
    for partition, samples in committed:
        rate = consumption_rate(samples)  # once per window: this runs for every partition each minute
        consumed += rate
        holder = reg.holders.get(partition)
        if holder is not None:
            slot_rates[holder] = slot_rates.get(holder, 0.0) + rate
    oldest_committed = min((samples[0].at for _, samples in committed), default=None)
    total = r.totals[name]
    lost_skipped = sum(r.skipped.get(reg.row.topic_id, {}).values())
    history = r.history.get(name, ())
    state = _pipeline_state(
        [samples for _, samples in committed],
        history,
        LagPoint(at, total.lag),
        live_holders=len(reg.holders),
        stall_after=topic_settings.stall_after_measurements,
    )
    measurement = TopicMeasurement(
        topic_id=reg.row.topic_id,
        topic=name,
        partitions=total.partitions,
        lag=total.lag,
        lost=total.lost + lost_skipped,
        time_lag_s=time_lag,
        ingress_rate=topic_ingress_rate(windows),
        consumption_rate=consumed,
        worker_rate=_worker_rate(total.lag, consumed, reg, history, oldest_committed, min_lag=topic_settings.min_lag),
        partitions_without_offset=total.partitions_without_offset,
        max_partition_lag=total.max_partition_lag,
        no_offset_policy=topic_settings.no_offset_policy,
        partition_lags=tuple(plags),
        lost_skipped=lost_skipped,
        pipeline=state,
        held_by_transaction=sum(held.values()),
        transaction_open_s=max(0.0, at - min(held_since)) if held_since else 0.0,
        transaction_bound_s=topic_settings.open_transaction_bound_s,
        dead_letters=r.dead_letters.get(name, 0),
    )
    return measurement, slot_rates


def _lag_record(m: TopicMeasurement, at: float) -> LagRecord:
    """The history record of one topic's measurement (what the evaluator reads)."""
    return LagRecord(
        at=at,
        lag=m.lag,
        lost=m.lost,
        time_lag_s=m.time_lag_s,
        ingress_rate=m.ingress_rate,
        consumption_rate=m.consumption_rate,
        worker_rate=m.worker_rate,
        state=m.pipeline.state,
        state_reason=m.pipeline.reason,
        held_by_transaction=m.held_by_transaction,
        transaction_open_s=m.transaction_open_s,
        dead_letters=m.dead_letters,
    )


def _log_findings(measured: Sequence[TopicMeasurement]) -> None:
    """Warnings an operator should see in the task log: impossible offsets, stuck pipelines, open transactions."""
    for m in measured:
        for p in m.anomalies:
            log.warning(
                "topic %s partition %d: committed offset %d is beyond the high watermark %d (lag unknown)",
                m.topic, p.partition, p.committed, p.latest,
            )  # fmt: skip
    for m in measured:
        if m.pipeline.is_stuck:
            log.warning("topic %s is %s: %s", m.topic, m.state.upper(), m.pipeline.reason)
        if warning := m.open_transaction_warning:
            log.warning("%s", warning)


def _pipeline_state(
    committed: Sequence[Sequence[OffsetSample]],
    history: Sequence[LagRecord],
    current: LagPoint,
    *,
    live_holders: int,
    stall_after: int,
) -> PipelineState:
    """The topic's state from its committed-offset windows and its lag records plus this measurement."""
    # A record at or after this measurement's time (a re-run at the same time) is not an earlier one.
    earlier = bisect.bisect_left(history, current.at, key=_record_at)
    return pipeline_state(
        _Points(history, earlier, current),
        last_progress_at=last_progress_at(committed),
        live_holders=live_holders,
        stall_after=stall_after,
    )


def _worker_rate(
    lag: int, consumed: float, reg: _Registered, history: Sequence[LagRecord], since: float | None, *, min_lag: int
) -> float | None:
    """Records/s per active slot, only when the topic had a backlog over the whole rate window.

    A caught-up consumer's rate is the ingress rate, not its capacity: counting it would make the
    capacity policy believe workers are slow and over-scale, and would hold every step down at
    the workers there are (the ingress floor divides the ingress by this rate: ingress over
    ingress per worker is the worker count). So a window in which the lag was ever at or below
    `min_lag` (what the policies call nothing to drain; a caught-up slot still trails the newest
    records by a batch) gives no observation.
    """
    # Live holders only: a dead slot whose lease ran out consumes nothing, and counting it would
    # lower the per-worker rate and make the capacity policy over-scale.
    active = len(set(reg.holders.values()))
    if lag <= min_lag or consumed <= 0.0 or active == 0 or since is None:
        return None
    for r in reversed(history):  # newest first: the records since `since` are the newest ones
        if r.at < since:
            break
        if r.lag <= min_lag:
            return None
    return consumed / active


def _record_at(record: LagRecord) -> float:
    return record.at


class _Points(Sequence[LagPoint]):
    """The first ``count`` of ``history`` as `LagPoint` s, then ``current``: built per point read,
    since `pipeline_state` reads from the newest backwards and usually stops after a few."""

    def __init__(self, history: Sequence[LagRecord], count: int, current: LagPoint) -> None:
        self._history, self._count, self._current = history, count, current

    def __len__(self) -> int:
        return self._count + 1

    @overload
    def __getitem__(self, index: int) -> LagPoint: ...
    @overload
    def __getitem__(self, index: slice) -> list[LagPoint]: ...
    def __getitem__(self, index: int | slice) -> LagPoint | list[LagPoint]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(index)
        if i == self._count:
            return self._current
        r = self._history[i]
        return LagPoint(r.at, r.lag)
