"""Stalled and stopped pipelines, as Burrow tells them: one topic's recent measurements in, a state out.

Pure. A topic is **stuck** when, for the last ``stall_after`` measurements in a row, it had a
backlog (lag > 0) and none of its committed offsets moved. Then:

* **stalled**: some of its partitions have a live holder (a slot whose lease is current): the
  consumers are alive, hold the partitions and do not commit (a hung batch, a record that fails
  every time, a sink that refuses writes);
* **stopped**: no partition has a live holder: nothing is consuming it (the consume DAG is
  paused, its slots died, or no slot is assigned the topic).

Either way, more workers do not help: the scaling evaluator holds a stuck topic (rule ``stuck``)
and an operator has to look. A topic that is caught up (lag 0) is never stuck, however long its
offsets stand still: there is nothing to commit. The first measurement that sees an offset move
ends the state.

"Moved" is read from the stored committed-offset windows (`lagsched.core.lag.SampleWindow`): a
window keeps an unchanged run as its first and last sample, so the start of the trailing run is
when that partition's offset last changed, however long ago (`last_progress_at`).

Example:
    >>> from lagsched.core.policies import LagPoint
    >>> pts = [LagPoint(60.0 * i, 500) for i in range(7)]
    >>> s = pipeline_state(pts, last_progress_at=60.0, live_holders=2, stall_after=5)
    >>> (s.state, s.unmoved)
    ('stalled', 5)
    >>> pipeline_state(pts, last_progress_at=120.0, live_holders=2, stall_after=5).state
    'ok'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from lagsched.core.lag import OffsetSample
from lagsched.core.policies import LagPoint

__all__ = ["OK", "PipelineState", "StateName", "is_stuck", "last_progress_at", "pipeline_state", "stored_state"]

StateName = Literal["ok", "stalled", "stopped"]


@dataclass(frozen=True, slots=True)
class PipelineState:
    """A topic's pipeline state at one measurement.

    Attributes:
        state: ``ok``, ``stalled`` (live holders, no progress) or ``stopped`` (no live holder, no
            progress).
        reason: why, in words with the numbers (empty when ``ok``).
        unmoved: consecutive latest measurements with a backlog and no committed offset moving.
    """

    state: StateName = "ok"
    reason: str = ""
    unmoved: int = 0

    @property
    def is_stuck(self) -> bool:
        """True when stalled or stopped."""
        return self.state != "ok"


OK = PipelineState()


def is_stuck(state: str) -> bool:
    """True for ``stalled`` and ``stopped`` (a state as stored with a lag record)."""
    return state in ("stalled", "stopped")


def stored_state(state: str, reason: str = "") -> PipelineState:
    """The `PipelineState` of a state as stored with a lag record (anything unknown reads as ``ok``).

    Example:
        >>> stored_state("stopped", "no holder").is_stuck, stored_state("weird").state
        (True, 'ok')
    """
    if state == "stalled":
        return PipelineState("stalled", reason)
    if state == "stopped":
        return PipelineState("stopped", reason)
    return OK


def last_progress_at(windows: Iterable[Sequence[OffsetSample]]) -> float | None:
    """When any of the topic's committed offsets last moved: the latest start of a window's
    trailing run of equal offsets (its first observation, if it never moved). None when no
    partition has a committed offset yet.

    Example:
        >>> a = [OffsetSample(0, 5), OffsetSample(60, 9), OffsetSample(300, 9)]
        >>> b = [OffsetSample(0, 1), OffsetSample(300, 1)]
        >>> last_progress_at([a, b])
        60
    """
    latest: float | None = None
    for samples in windows:
        if not samples:
            continue
        i = len(samples) - 1
        while i > 0 and samples[i - 1].offset == samples[-1].offset:
            i -= 1
        start = samples[i].at
        latest = start if latest is None else max(latest, start)
    return latest


def pipeline_state(
    measurements: Sequence[LagPoint], *, last_progress_at: float | None, live_holders: int, stall_after: int
) -> PipelineState:
    """The topic's state from its lag measurements, oldest first, the newest being the current one.

    Counts the latest measurements, newest backwards, that had lag > 0 and were taken after
    `last_progress_at` (None: no offset ever committed, so none moved); ``stall_after`` of them
    make the topic stalled (``live_holders`` > 0: partitions held by live slots) or stopped.
    """
    if stall_after < 1:
        raise ValueError(f"stall_after must be >= 1, got {stall_after}")
    unmoved = 0
    for m in reversed(measurements):
        if m.lag <= 0 or (last_progress_at is not None and m.at <= last_progress_at):
            break
        unmoved += 1
    if unmoved < stall_after:
        return PipelineState("ok", "", unmoved)
    newest = measurements[-1]
    since = (
        "no offset was ever committed"
        if last_progress_at is None
        else f"the last move was seen at {_when(last_progress_at)}"
    )
    head = (
        f"lag {newest.lag:,} and no committed offset moved in the last {unmoved} measurements "
        f"(stall_after_measurements {stall_after}; {since})"
    )
    if live_holders > 0:
        return PipelineState(
            "stalled",
            f"{head}; {live_holders} partition(s) have a live holder that does not commit: look at the consumer "
            "slots' logs (a hung batch, a failing record, the sink). More workers would not help",
            unmoved,
        )
    return PipelineState(
        "stopped",
        f"{head}; no partition has a live holder: nothing consumes it (is the consume DAG running, are its "
        "slots alive?). More workers would not help",
        unmoved,
    )


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
