"""Simulated topics: an ingress curve plus the topic's partitions, retention and worker throughput.

Each trace is deterministic (a seeded generator), and its ingress series is computed once, so every
policy faces exactly the same records at exactly the same times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from lagsched.core.load_profile import DEMO_SLOT_MAX_RATE

__all__ = ["DAY", "HOUR", "ON_REQUEST", "TRACES", "WORKER_RATE", "Trace", "trace_names"]

HOUR = 3600.0
DAY = 86400.0
WORKER_RATE = 50_000 / HOUR
"""Records/s one worker consumes: Hevo's "each job ingests 50k records in an hour"."""

Rates = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Trace:
    """One simulated topic.

    Attributes:
        name: trace name (a key of the results JSON).
        description: what it models, in words.
        duration_s: simulated time.
        tick_s: measurement period (one measurement run per tick).
        partitions: partition count; caps useful workers.
        retention_s: retention; records older than this are deleted, read or not.
        worker_rate: records/s one worker consumes while it has a backlog.
        initial_workers: workers at the start.
        seed: seed of the trace's random generator.
        rates: function (tick end times, generator) -> mean ingress rate in records/s per tick.
    """

    name: str
    description: str
    duration_s: float
    tick_s: float
    partitions: int
    retention_s: float
    worker_rate: float
    initial_workers: int
    seed: int
    rates: Callable[[Rates, np.random.Generator], Rates]

    @property
    def ticks(self) -> int:
        """Number of ticks simulated."""
        return int(self.duration_s // self.tick_s)

    def ingress(self) -> tuple[Rates, Rates]:
        """(tick end times, records produced in each tick), the same on every call."""
        times = self.tick_s * np.arange(1, self.ticks + 1, dtype=np.float64)
        rates = np.clip(self.rates(times, np.random.default_rng(self.seed)), 0.0, None)
        produced = rates * self.tick_s
        # Integer records with the fractions carried over, so totals are exact.
        cumulative = np.floor(np.cumsum(produced))
        counts = np.diff(cumulative, prepend=0.0)
        return times, counts


def _noise(rng: np.random.Generator, n: int, relative: float) -> Rates:
    return np.asarray(1.0 + relative * rng.standard_normal(n), dtype=np.float64)


def _hevo_ramp(times: Rates, rng: np.random.Generator) -> Rates:
    # Input keeps rising: from 5 rec/s (a tenth of a worker) to 160 rec/s (11.5 workers) over 3 days.
    rising = 5.0 + (160.0 - 5.0) * times / (3 * DAY)
    return rising * _noise(rng, times.size, 0.05)


def _spike(times: Rates, rng: np.random.Generator) -> Rates:
    # Black Friday: 40 rec/s, then from t = 24 h a 15 min climb to 300 rec/s (21.6 workers), held 4 h,
    # back to 40 over 2 h.
    base = 40.0
    peak = 300.0
    start, climb, hold, decay = 24 * HOUR, 15 * 60.0, 4 * HOUR, 2 * HOUR
    out = np.full(times.size, base)
    up = (times >= start) & (times < start + climb)
    out[up] = base + (peak - base) * (times[up] - start) / climb
    top = (times >= start + climb) & (times < start + climb + hold)
    out[top] = peak
    down_from = start + climb + hold
    down = (times >= down_from) & (times < down_from + decay)
    out[down] = peak - (peak - base) * (times[down] - down_from) / decay
    return out * _noise(rng, times.size, 0.05)


def _diurnal(times: Rates, rng: np.random.Generator) -> Rates:
    # 80 rec/s on average, +-75 %, trough at midnight, peak (140 rec/s, ~10 workers) at noon.
    phase = 2 * math.pi * times / DAY - math.pi / 2
    return 80.0 * (1.0 + 0.75 * np.sin(phase)) * _noise(rng, times.size, 0.08)


def _demo(times: Rates, rng: np.random.Generator) -> Rates:
    # `make demo`'s hot topic (demo.orders): 20 rec/s, ramping from 30 s to its peak (1,200 rec/s)
    # by 90 s, held to 300 s, back to 20 by 330 s; 3% noise, as a real producer's pace varies.
    from lagsched.core.load_profile import demo_profile

    points = demo_profile()[0].points
    at, rate = [p[0] for p in points], [p[1] for p in points]
    return np.interp(times, at, rate) * _noise(rng, times.size, 0.03)


def _noisy_idle(times: Rates, rng: np.random.Generator) -> Rates:
    # Nearly idle (0.5 rec/s, very noisy) with a few bursts a day of 5k-60k records in one minute.
    tick = float(times[1] - times[0]) if times.size > 1 else 60.0
    out = np.abs(0.5 * _noise(rng, times.size, 1.0))
    bursts = rng.random(times.size) < 6.0 / (DAY / tick)
    out[bursts] += rng.uniform(5_000, 60_000, int(bursts.sum())) / tick
    return out


TRACES: Mapping[str, Trace] = {
    t.name: t
    for t in (
        Trace(
            "hevo_ramp",
            "Hevo's case: input rising steadily for 3 days; each worker ingests 50k records/hour",
            duration_s=3 * DAY,
            tick_s=60.0,
            partitions=32,
            retention_s=7 * DAY,
            worker_rate=WORKER_RATE,
            initial_workers=1,
            seed=3,
            rates=_hevo_ramp,
        ),
        Trace(
            "spike",
            "Black Friday: 40 rec/s, a 7.5x spike for 4 h at day 1, 12 h retention",
            duration_s=2 * DAY,
            tick_s=60.0,
            partitions=24,
            retention_s=12 * HOUR,
            worker_rate=WORKER_RATE,
            initial_workers=1,
            seed=11,
            rates=_spike,
        ),
        Trace(
            "diurnal",
            "A daily cycle between 20 and 140 rec/s with 8% noise, 3 days",
            duration_s=3 * DAY,
            tick_s=60.0,
            partitions=16,
            retention_s=2 * DAY,
            worker_rate=WORKER_RATE,
            initial_workers=1,
            seed=5,
            rates=_diurnal,
        ),
        Trace(
            "noisy_idle",
            "Nearly idle with a few bursts of 5k-60k records a day, 2 days, 1 day retention",
            duration_s=2 * DAY,
            tick_s=60.0,
            partitions=8,
            retention_s=DAY,
            worker_rate=WORKER_RATE,
            initial_workers=1,
            seed=7,
            rates=_noisy_idle,
        ),
        Trace(
            "demo",
            "make demo's demo.orders: a ramp to 1,200 rec/s held 3.5 min, slots capped at 500 rec/s, 15 min",
            duration_s=900.0,
            tick_s=60.0,
            partitions=8,
            retention_s=7 * DAY,
            worker_rate=DEMO_SLOT_MAX_RATE,
            initial_workers=1,
            seed=13,
            rates=_demo,
        ),
    )
}
"""The traces by name, in the order they are reported."""

#: Traces run only when asked for (``--trace demo``): the demo's, at its own settings (the demo
#: topics' entries of `lagsched_dev.demo.DEMO_TOPIC_SETTINGS`), not the defaults the report compares.
ON_REQUEST = frozenset({"demo"})


def trace_names() -> list[str]:
    """Names of the traces a default run simulates, in report order (every trace but `ON_REQUEST`)."""
    return [name for name in TRACES if name not in ON_REQUEST]
