"""The clock code is given, and times as the JSON of the page, the routes and ``lagsched status`` show them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["Clock", "epoch_s", "iso"]


@dataclass(frozen=True, slots=True)
class Clock:
    """The one clock a long-lived loop is given, never read around it: ``now`` is the wall time (an aware
    UTC datetime: heartbeats, the live set, when a batch ended), ``monotonic`` counts seconds that never
    jump (budgets, intervals, outage bounds). Production passes the machine's
    (`lagsched.adapters.clock.SYSTEM_CLOCK`); tests pass their own.

    >>> fixed = Clock(now=lambda: datetime(2026, 1, 1, tzinfo=UTC), monotonic=lambda: 5.0)
    >>> fixed.now().isoformat(), fixed.monotonic()
    ('2026-01-01T00:00:00+00:00', 5.0)
    """

    now: Callable[[], datetime]
    monotonic: Callable[[], float]


def iso(at: float | datetime | None) -> str | None:
    """``at`` (epoch seconds or an aware datetime) as ISO 8601 in UTC, None stays None.

    >>> iso(0.0), iso(datetime(1970, 1, 1, 1, tzinfo=UTC))
    ('1970-01-01T00:00:00+00:00', '1970-01-01T01:00:00+00:00')
    """
    if at is None:
        return None
    return (at.astimezone(UTC) if isinstance(at, datetime) else datetime.fromtimestamp(at, tz=UTC)).isoformat()


def epoch_s(at: datetime) -> float:
    """``at`` as seconds since the epoch: where a wall time meets the numbers of the lag samples
    (Redis scores, the regression's x axis), which stay floats.

    Exact for the times of this century: a float near 1.8e9 resolves 0.24 us, so a datetime's
    microseconds read back unchanged from the float (``datetime.fromtimestamp(epoch_s(at), UTC) == at``).

    >>> epoch_s(datetime(1970, 1, 1, 0, 1, tzinfo=UTC))
    60.0

    Raises:
        ValueError: a naive datetime (its zone would be a guess, and ``timestamp()`` would take the host's).
    """
    if at.tzinfo is None:
        raise ValueError(f"{at!r} is naive; pass timezone-aware datetimes")
    return at.timestamp()
