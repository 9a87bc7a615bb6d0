"""Fast-time simulation of one topic under one policy, driving the real evaluator.

Each tick (one measurement run, a minute by default):

1. the trace produces its records for the tick;
2. retention advances the log start to the first record younger than ``retention_s``; the real
   `lagsched.core.lag.measure_partition_lag` reports records below it that were never read as lost,
   and the consumer resumes at the log start (``auto.offset.reset = earliest``);
3. the workers consume ``min(workers, partitions) * worker_rate`` records/s for the tick, less what
   the last change of worker count cost (``rebalance_pause_s``, see `PauseModel`);
4. the monitor measures: lag (real `measure_partition_lag`), time lag (real `estimate_time_lag`
   over a real `SampleWindow` of high-watermark samples), ingress rate (real `ingress_rate`) and the
   per-worker rate observed while the workers had a backlog throughout;
5. the real `lagsched.core.evaluator.evaluate` decides when `is_evaluation_due` says so, the rule
   production applies: at the first tick, then once ``evaluate_every`` measurements were taken
   since the last evaluation (or, for the KEDA baseline, `lagsched_dev.sim.keda.KedaHpa` every tick);
   a change takes effect from the next tick. The evaluator is assumed to run after every
   measurement; a slower evaluator schedule (the DAG's 5 minutes) would evaluate less often.

The topic is modelled as one aggregate partition for offsets (FIFO by production time), so the
*true* time lag of the oldest unread record is known exactly; it, not the estimate, is what the
figures report. Partition skew is not modelled: throughput is capped at one worker per partition.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from lagsched.core.config import TopicPolicyConfig
from lagsched.core.evaluator import LagPoint, TopicSnapshot, evaluate, is_evaluation_due
from lagsched.core.lag import (
    OffsetSample,
    PartitionOffsets,
    SampleWindow,
    estimate_time_lag,
    ingress_rate,
    measure_partition_lag,
)
from lagsched_dev.sim.keda import KedaHpa
from lagsched_dev.sim.traces import Trace

__all__ = ["DEFAULT_REBALANCE_PAUSE_S", "PAUSE_MODELS", "Figures", "PauseModel", "Run", "simulate"]

DEFAULT_REBALANCE_PAUSE_S = 30.0
"""Seconds of consumption a change of worker count costs the workers it stops."""

PauseModel = Literal["runtime", "equal"]
"""Who pays `DEFAULT_REBALANCE_PAUSE_S` (or the ``rebalance_pause_s`` given) on a change of workers.

``runtime`` (the default) charges each runtime what it really stops. lagsched's workers claim
partition rows in MySQL and keep their claims across a change, so only a *started* worker loses the
pause (it starts and claims); the others go on. The KEDA baseline's replicas are one Kafka consumer
group, and a Java consumer with the default ``group.protocol=classic`` and the default assignors
(``RangeAssignor`` first) rebalances eagerly: every member revokes its partitions and stops until
the group has re-formed, so every replica loses the pause on every change.

``equal`` charges every policy the whole group's pause on every change, as if lagsched stopped and
restarted all its jobs (Hevo's behaviour); it compares the policies with the runtimes set aside.
"""
PAUSE_MODELS: tuple[PauseModel, ...] = ("runtime", "equal")


@dataclass(frozen=True, slots=True)
class Figures:
    """The summary of one (trace, policy) run; the values of the results JSON.

    Attributes:
        peak_lag: largest lag measured, records.
        peak_time_lag_s: largest true age of the oldest unread record, seconds.
        seconds_above_target: simulated seconds with lag above the topic's ``max_lag``.
        worker_hours: workers x hours paid for (``linker_workers`` over time).
        scaling_changes: number of changes of the worker count.
        records_lost: records deleted by retention before they were read.
        final_lag: lag at the end of the trace, records.
    """

    peak_lag: int
    peak_time_lag_s: float
    seconds_above_target: int
    worker_hours: float
    scaling_changes: int
    records_lost: int
    final_lag: int

    def as_json(self) -> dict[str, int | float]:
        """The figures as the results JSON holds them (rounded for reading)."""
        return {
            "peak_lag": self.peak_lag,
            "peak_time_lag_s": round(self.peak_time_lag_s, 1),
            "seconds_above_target": self.seconds_above_target,
            "worker_hours": round(self.worker_hours, 2),
            "scaling_changes": self.scaling_changes,
            "records_lost": self.records_lost,
            "final_lag": self.final_lag,
        }


@dataclass(frozen=True, slots=True)
class Run:
    """One (trace, policy) run: figures plus the per-tick series for plots and tests.

    Attributes:
        trace: trace name.
        policy: policy name.
        figures: the summary.
        times: tick end times, seconds from the start.
        lag: lag after each tick.
        time_lag: true time lag after each tick, seconds.
        workers: workers during each tick.
        ingress: records/s produced during each tick.
    """

    trace: str
    policy: str
    figures: Figures
    times: npt.NDArray[np.float64]
    lag: npt.NDArray[np.float64]
    time_lag: npt.NDArray[np.float64]
    workers: npt.NDArray[np.float64]
    ingress: npt.NDArray[np.float64]


def simulate(
    trace: Trace,
    config: TopicPolicyConfig,
    *,
    sample_window: int = 120,
    rebalance_pause_s: float = DEFAULT_REBALANCE_PAUSE_S,
    keda: KedaHpa | None = None,
    pause_model: PauseModel = "runtime",
) -> Run:
    """Run `trace` under `config` (its ``policy`` picks the policy) and return the figures.

    Args:
        trace: the simulated topic.
        config: the topic's settings, as the evaluator would get them.
        sample_window: high-watermark samples kept for the time-lag estimate (``Settings.sample_window``).
        rebalance_pause_s: consumption seconds a change costs each worker it stops (see `PauseModel`).
        keda: when given, this KEDA/HPA model decides every tick instead of the evaluator, and its
            changes stop the whole group.
        pause_model: who pays the pause on the evaluator's changes, see `PauseModel`.
    """
    times, produced = trace.ingress()
    cumulative = np.cumsum(produced)
    # Production curve for the true time lag: offset o was produced at interp(o, offsets, times).
    curve_offsets = np.concatenate(([0.0], cumulative))
    curve_times = np.concatenate(([0.0], times))
    dt = trace.tick_s
    n = times.size

    workers = trace.initial_workers
    committed = 0
    consumed_total = 0  # records read; unlike `committed`, it does not jump over lost records
    lost_total = 0
    changes = 0
    last_change_at: float | None = None
    stopped_next = 0  # workers that lose rebalance_pause_s of the next tick
    window = SampleWindow(max_samples=sample_window)
    lag_history: deque[LagPoint] = deque(maxlen=sample_window)
    consumed_log: deque[tuple[float, int, int, bool]] = deque(maxlen=config.window)  # (t, consumed, workers, busy)
    observed_rate: float | None = None
    since_evaluation: int | None = None  # measurements since the last evaluation; None: never evaluated

    lag_series = np.zeros(n)
    time_lag_series = np.zeros(n)
    worker_series = np.zeros(n)
    above = 0.0

    for i in range(n):
        now = float(times[i])
        latest = int(cumulative[i])
        # Retention: everything produced before now - retention is gone.
        log_start = int(np.floor(np.interp(now - trace.retention_s, curve_times, curve_offsets)))
        before = measure_partition_lag(PartitionOffsets(trace.name, 0, latest, log_start, committed))
        lost_total += before.lost
        position = before.position

        active = min(workers, trace.partitions)
        worker_seconds = active * dt - min(stopped_next, active) * min(rebalance_pause_s, dt)
        stopped_next = 0
        capacity = int(trace.worker_rate * worker_seconds)
        committed = min(latest, position + capacity)
        consumed_total += committed - position
        worker_series[i] = workers

        after = measure_partition_lag(PartitionOffsets(trace.name, 0, latest, log_start, committed))
        lag = after.lag
        lag_series[i] = lag
        if lag > config.max_lag:
            above += dt
        if committed < latest:
            produced_at = float(np.interp(committed, curve_offsets, curve_times))
            time_lag_series[i] = max(0.0, now - produced_at)

        window = window.add(OffsetSample(now, latest))
        lag_history.append(LagPoint(now, lag))
        consumed_log.append((now, consumed_total, active, lag > 0))
        observed_rate = _observe_worker_rate(consumed_log, observed_rate)
        if since_evaluation is not None:
            since_evaluation += 1

        if keda is not None:
            linker_workers = keda.decide(lag, workers, now)
        elif is_evaluation_due(since_evaluation, config):
            since_evaluation = 0
            recent = window.samples[-config.window :]
            snapshot = TopicSnapshot(
                topic=trace.name,
                linker_workers=workers,
                partitions=trace.partitions,
                live_slots=config.max_workers,
                retention_s=trace.retention_s,
                lag_history=tuple(lag_history),
                time_lag_s=estimate_time_lag(window.samples, committed, now, latest=latest),
                ingress_rate=ingress_rate(recent) if len(recent) >= 2 else None,
                worker_rate=observed_rate,
                last_change_at=last_change_at,
            )
            linker_workers = evaluate(snapshot, config, datetime.fromtimestamp(now, tz=UTC)).linker_workers
        else:
            continue
        if linker_workers != workers:
            next_active = min(linker_workers, trace.partitions)
            # KEDA's consumer group rebalances eagerly and stops all; lagsched's claims stop only starters.
            stops_all = keda is not None or pause_model == "equal"
            stopped_next = next_active if stops_all else max(0, next_active - active)
            workers = linker_workers
            last_change_at = now
            changes += 1

    figures = Figures(
        peak_lag=int(lag_series.max(initial=0.0)),
        peak_time_lag_s=float(time_lag_series.max(initial=0.0)),
        seconds_above_target=int(above),
        worker_hours=float(worker_series.sum() * dt / 3600.0),
        scaling_changes=changes,
        records_lost=lost_total,
        final_lag=int(lag_series[-1]) if n else 0,
    )
    return Run(
        trace=trace.name,
        policy=config.policy,
        figures=figures,
        times=times,
        lag=lag_series,
        time_lag=time_lag_series,
        workers=worker_series,
        ingress=produced / dt,
    )


def _observe_worker_rate(log: deque[tuple[float, int, int, bool]], previous: float | None) -> float | None:
    """Records/s per worker over the log, when the workers had a backlog all along and their number
    did not change; otherwise the previous observation stands (an idle worker's rate says nothing
    about its capacity)."""
    if len(log) < 2 or log.maxlen is None or len(log) < log.maxlen:
        return previous
    first, last = log[0], log[-1]
    workers = {entry[2] for entry in log}
    if len(workers) != 1 or not all(entry[3] for entry in log) or last[2] <= 0:
        return previous
    span = last[0] - first[0]
    if span <= 0:
        return previous
    return (last[1] - first[1]) / span / last[2]
