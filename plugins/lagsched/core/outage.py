"""Riding through a short outage of a service: how long to wait, and when to give up.

A slot that lives for an hour meets restarts of Kafka, MySQL and Redis. Ending the run at the
first failed call costs a Spark start, a re-claim and an Airflow retry for a blip of seconds, so a
slot waits instead, with backoff, for up to a bound (``--outage-s``, the lease by default: past
it, its rows may have failed over to other slots anyway) and then exits naming the service and
the bound. `Outage` is that bookkeeping, with no clock and no I/O of its own: the caller passes
the time (monotonic seconds, `Clock.monotonic`, never wall time) and the service a failed call
was about, and logs what `failed` and `recovered` report as changes, so the log says once per
state change what happens rather than once per retry.

Example:
    >>> o = Outage(bound_s=30)
    >>> o.failed("mysql", monotonic_s=100.0)
    Wait(seconds=0.5, changed=True, elapsed_s=0.0)
    >>> o.failed("mysql", monotonic_s=100.5)
    Wait(seconds=1.0, changed=False, elapsed_s=0.5)
    >>> o.recovered(monotonic_s=102.0)
    2.0
    >>> o.failed("redis", monotonic_s=200.0).changed, o.failed("redis", monotonic_s=231.0)
    (True, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["BACKOFF_S", "Outage", "Wait"]

#: Waits between attempts, the last one repeated: quick for a blip, at most 5 s between looks.
BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 5.0)


@dataclass(frozen=True, slots=True)
class Wait:
    """What to do after a failed attempt while the bound holds.

    Attributes:
        seconds: how long to wait before the next attempt (never past the bound).
        changed: the outage began, or moved to another service, with this failure: log it.
        elapsed_s: how long the outage has lasted so far.
    """

    seconds: float
    changed: bool
    elapsed_s: float


@dataclass(slots=True)
class Outage:
    """One service outage at a time: since when, of what, and how many attempts failed.

    Attributes:
        bound_s: how long an outage is ridden through; at or past it `failed` returns None.
        backoff_s: the waits between attempts, the last one repeated.
    """

    bound_s: float
    backoff_s: Sequence[float] = BACKOFF_S
    since: float | None = field(default=None, init=False)
    service: str | None = field(default=None, init=False)
    attempts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.bound_s < 0:
            raise ValueError(f"bound_s={self.bound_s}: must be >= 0")
        if not self.backoff_s or any(b <= 0 for b in self.backoff_s):
            raise ValueError(f"backoff_s={tuple(self.backoff_s)}: needs at least one wait, each > 0")

    @property
    def active(self) -> bool:
        return self.since is not None

    def elapsed_s(self, monotonic_s: float) -> float:
        """How long the current outage has lasted at ``monotonic_s`` (0 when none)."""
        return 0.0 if self.since is None else max(0.0, monotonic_s - self.since)

    def failed(self, service: str, monotonic_s: float) -> Wait | None:
        """A call to ``service`` failed at ``monotonic_s``: how long to wait, or None once past the bound.

        The outage counts from its first failure, whichever service fails later in it: a slot
        waiting on MySQL and then on Kafka has been stuck for the whole time.
        """
        changed = self.since is None or service != self.service
        if self.since is None:
            self.since, self.attempts = monotonic_s, 0
        self.service = service
        elapsed = self.elapsed_s(monotonic_s)
        if elapsed >= self.bound_s:
            return None
        wait = self.backoff_s[min(self.attempts, len(self.backoff_s) - 1)]
        self.attempts += 1
        return Wait(min(wait, self.bound_s - elapsed), changed, elapsed)

    def recovered(self, monotonic_s: float) -> float | None:
        """A call succeeded at ``monotonic_s``: the outage's length if one was under way (log it), else None."""
        if self.since is None:
            return None
        took = self.elapsed_s(monotonic_s)
        self.since, self.service, self.attempts = None, None, 0
        return took
