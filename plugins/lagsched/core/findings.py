"""Findings: what needs a person, as the notifications see it, and which ones are new or cleared. Pure.

The lag monitor and the scaling evaluator turn what they saw into `Finding`s; the notifications
(`lagsched.workflows.notifications`) compare them with the findings already sent, kept in Redis, and
send each **new** one once and each **cleared** one once (`diff`). The kinds, and when each is
active (docs/notifications.md has what to do about each):

* ``stalled`` / ``stopped``: the topic's pipeline state of the newest measurement
  (`lagsched.core.pipeline_state`): lag and no committed offset moving for
  ``stall_after_measurements`` measurements, with (stalled) or without (stopped) a live holder;
* ``lost_records``: the topic's lost-record count (`TopicMeasurement.lost`) rose within the last
  `LOST_WINDOW_S` (it is above its lowest of that window, the rule of the ``LagschedRecordsLost``
  alert); it clears once no new loss was seen for that long;
* ``lag_at_max_workers``: the evaluator found the topic at its ceiling (``max_workers`` with the
  registry's limit, capped by its partitions) with lag above ``max_lag`` and rising (a fitted slope
  above 0 with an r² of at least ``min_fit_r2``); it clears when the lag stops rising (slope at or
  below 0), falls to ``max_lag`` or below, or the topic is below its ceiling (the ceiling was
  raised): a rising fit too weak to count raises nothing and clears nothing;
* ``override_expiring``: an active manual override ends within `OVERRIDE_EXPIRY_WARN_S`; it clears
  when the override has ended, was cancelled, or was extended past the window;
* ``dead_letters``: records of a routed topic landed in the cluster's dead-letter table within the
  last `LOST_WINDOW_S` (the slots' counter rose: the ``LagschedDeadLetters`` alert's rule); it
  clears once none landed for that long.

Each finding has a `key` (kind, topic, and for an override its id): the same key on the next run is
the same finding, never sent again.

Example:
    >>> old = {f.key: f for f in [Finding("stalled", "eu", "orders", "no commit")]}
    >>> now = [Finding("stopped", "eu", "orders", "no holder")]
    >>> new, cleared = diff(old, now, Scope.of(MONITOR_KINDS))
    >>> [f.key for f in new], [f.key for f in cleared]
    (['stopped:orders'], ['stalled:orders'])
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

__all__ = [
    "EVALUATOR_KINDS",
    "KINDS",
    "LOST_WINDOW_S",
    "MONITOR_KINDS",
    "OVERRIDE_EXPIRY_WARN_S",
    "Event",
    "Finding",
    "FindingKind",
    "Notice",
    "Scope",
    "dead_letters_finding",
    "diff",
    "is_lag_at_max_workers",
    "lost_records_finding",
    "override_expiring_finding",
    "rise_within",
    "stuck_finding",
]

FindingKind = Literal["stalled", "stopped", "lost_records", "lag_at_max_workers", "override_expiring", "dead_letters"]
KINDS: tuple[FindingKind, ...] = get_args(FindingKind)
#: What the lag monitor observes (every measured topic of the cluster).
MONITOR_KINDS: frozenset[FindingKind] = frozenset({"stalled", "stopped", "lost_records", "dead_letters"})
#: What the evaluator observes (overrides: every topic; lag at max_workers: the topics it evaluated).
EVALUATOR_KINDS: frozenset[FindingKind] = frozenset({"lag_at_max_workers", "override_expiring"})

Event = Literal["new", "cleared"]

LOST_WINDOW_S = 900.0
"""A loss seen within this window keeps ``lost_records`` active (15 min: the alert's window)."""
OVERRIDE_EXPIRY_WARN_S = 900.0
"""An override ending within this (15 min) is ``override_expiring``."""

#: What each kind means, in a few words (the message's title).
TITLES: Mapping[FindingKind, str] = {
    "stalled": "pipeline stalled",
    "stopped": "pipeline stopped",
    "lost_records": "records lost to retention",
    "lag_at_max_workers": "lag rising at max_workers",
    "override_expiring": "manual override expiring",
    "dead_letters": "records in the dead-letter table",
}
#: The runbook section in docs/alerts.md that matches the kind, where one does.
RUNBOOK: Mapping[FindingKind, str] = {
    "stalled": "docs/alerts.md#lagschedtopicstalled",
    "stopped": "docs/alerts.md#lagschedtopicstopped",
    "lost_records": "docs/alerts.md#lagschedrecordslost",
    "lag_at_max_workers": "docs/notifications.md#lag_at_max_workers",
    "override_expiring": "docs/notifications.md#override_expiring",
    "dead_letters": "docs/alerts.md#lagscheddeadletters",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing that needs a person, about one topic of one cluster.

    Attributes:
        kind: what was found (see the module docstring).
        cluster: the cluster.
        topic: the topic.
        detail: the finding in words, with its numbers (the reason the monitor or evaluator gave).
        ref: what tells two findings of a kind and topic apart: an override's id; else empty.
    """

    kind: FindingKind
    cluster: str
    topic: str
    detail: str
    ref: str = ""

    @property
    def key(self) -> str:
        """``<kind>:<topic>[:<ref>]``: the identity of the finding across runs."""
        return f"{self.kind}:{self.topic}" + (f":{self.ref}" if self.ref else "")

    @property
    def title(self) -> str:
        return TITLES[self.kind]

    @property
    def runbook(self) -> str:
        """Where the docs say what to do (relative to lagsched's docs)."""
        return RUNBOOK[self.kind]

    @property
    def summary(self) -> str:
        """``lagsched eu/orders: pipeline stalled``: one line that names it."""
        return f"lagsched {self.cluster}/{self.topic}: {self.title}"

    def as_dict(self) -> dict[str, str]:
        """JSON-ready (what Redis keeps, what a notifier's template sees under ``finding``)."""
        return {
            "kind": self.kind,
            "cluster": self.cluster,
            "topic": self.topic,
            "detail": self.detail,
            "ref": self.ref,
            "key": self.key,
            "title": self.title,
            "summary": self.summary,
            "runbook": self.runbook,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """The finding `as_dict` wrote (extra entries ignored).

        Raises:
            ValueError: not such a dict (an unknown kind, a missing field).
        """
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"unknown finding kind {kind!r}")
        fields = [data.get(name) for name in ("cluster", "topic", "detail")]
        if not all(isinstance(v, str) for v in fields):
            raise ValueError(f"malformed finding {dict(data)!r}")
        ref = data.get("ref", "")
        return cls(kind, str(fields[0]), str(fields[1]), str(fields[2]), ref if isinstance(ref, str) else "")


@dataclass(frozen=True, slots=True)
class Notice:
    """A message to send: a finding that is new, or one that cleared."""

    event: Event
    finding: Finding

    @property
    def summary(self) -> str:
        """The finding's summary; ``... cleared`` for a cleared one."""
        return self.finding.summary + (" cleared" if self.event == "cleared" else "")

    def as_dict(self) -> dict[str, str]:
        """The finding's `Finding.as_dict`, with ``event`` and this summary."""
        return {**self.finding.as_dict(), "event": self.event, "summary": self.summary}


@dataclass(frozen=True, slots=True)
class Scope:
    """Which findings one run observed: a finding outside it is neither new nor cleared by the run.

    Attributes:
        kinds: the kinds the run looked for.
        topics: per kind, the topics it looked at; a kind not listed: every topic.
    """

    kinds: frozenset[FindingKind]
    topics: Mapping[FindingKind, frozenset[str]]

    @classmethod
    def of(cls, kinds: Collection[FindingKind], topics: Mapping[FindingKind, Collection[str]] | None = None) -> Scope:
        return cls(frozenset(kinds), {k: frozenset(v) for k, v in (topics or {}).items()})

    def covers(self, finding: Finding) -> bool:
        if finding.kind not in self.kinds:
            return False
        topics = self.topics.get(finding.kind)
        return topics is None or finding.topic in topics


def diff(
    previous: Mapping[str, Finding], current: Iterable[Finding], scope: Scope
) -> tuple[list[Finding], list[Finding]]:
    """``(new, cleared)``: the current findings not sent before, and the sent ones the run no longer sees.

    ``previous`` maps each key already sent (and not cleared) to its finding. A previous finding
    outside ``scope`` (another task's kind, a topic this run did not evaluate) is left alone; a
    current one outside it is ignored. Both lists are sorted by key; a key given twice counts once.

    >>> f = Finding("stalled", "eu", "a", "x")
    >>> diff({f.key: f}, [f], Scope.of({"stalled"}))
    ([], [])
    >>> diff({f.key: f}, [], Scope.of({"stopped"}))
    ([], [])
    """
    now = {f.key: f for f in current if scope.covers(f)}
    new = [now[k] for k in sorted(now) if k not in previous]
    cleared = [previous[k] for k in sorted(previous) if k not in now and scope.covers(previous[k])]
    return new, cleared


def stuck_finding(cluster: str, topic: str, state: str, reason: str) -> Finding | None:
    """The ``stalled`` or ``stopped`` finding of a topic in that pipeline state; None for ``ok``."""
    if state == "stalled":
        return Finding("stalled", cluster, topic, reason)
    if state == "stopped":
        return Finding("stopped", cluster, topic, reason)
    return None


def rise_within(counts: Sequence[tuple[float, int]], window_s: float = LOST_WINDOW_S) -> tuple[int, int] | None:
    """The newest count and the lowest of the last ``window_s`` before it, when the newest is above
    the lowest (None otherwise). ``counts``: a counter's ``(time, count)`` measurements, oldest first,
    the newest being this measurement. A rise counted before the window (or before the first
    measurement) is none: the rule of the ``LagschedRecordsLost`` alert, for every counter.

    >>> rise_within([(0.0, 5), (60.0, 5), (120.0, 9)]), rise_within([(0.0, 5), (960.0, 9), (1020.0, 9)])
    ((9, 5), None)
    """
    if not counts:
        return None
    newest_at = counts[-1][0]
    recent = [n for at, n in counts if at >= newest_at - window_s]
    newest, lowest = recent[-1], min(recent)
    return (newest, lowest) if newest > lowest else None


def lost_records_finding(
    cluster: str, topic: str, losses: Sequence[tuple[float, int]], window_s: float = LOST_WINDOW_S
) -> Finding | None:
    """``lost_records`` when the topic's lost count rose within the last ``window_s`` (`rise_within`).

    >>> lost_records_finding("eu", "a", [(0.0, 5), (60.0, 5), (120.0, 9)]).detail
    '4 record(s) lost to retention in the last 15 min (9 counted in the retained period)'
    """
    if (rise := rise_within(losses, window_s)) is None:
        return None
    newest, lowest = rise
    return Finding(
        "lost_records",
        cluster,
        topic,
        f"{newest - lowest:,} record(s) lost to retention in the last {window_s / 60:g} min "
        f"({newest:,} counted in the retained period)",
    )


def dead_letters_finding(
    cluster: str, topic: str, counts: Sequence[tuple[float, int]], window_s: float = LOST_WINDOW_S
) -> Finding | None:
    """``dead_letters`` when the topic's dead-letter count rose within the last ``window_s`` (`rise_within`).

    >>> print(dead_letters_finding("eu", "orders", [(0.0, 2), (60.0, 2), (120.0, 5)]).detail)
    ... # doctest: +NORMALIZE_WHITESPACE
    3 record(s) could not be decoded into the topic's typed table in the last 15 min and are in the
    dead-letter table (5 so far)
    """
    if (rise := rise_within(counts, window_s)) is None:
        return None
    newest, lowest = rise
    return Finding(
        "dead_letters",
        cluster,
        topic,
        f"{newest - lowest:,} record(s) could not be decoded into the topic's typed table in the last "
        f"{window_s / 60:g} min and are in the dead-letter table ({newest:,} so far)",
    )


def is_lag_at_max_workers(
    *,
    linker_workers: int,
    ceiling: int,
    lag: int,
    max_lag: int,
    slope: float,
    fit_r2: float,
    min_fit_r2: float,
    was_active: bool,
) -> bool:
    """Whether ``lag_at_max_workers`` is active; see the module docstring (a weak fit keeps the state).

    >>> kw = dict(linker_workers=8, ceiling=8, lag=500_000, max_lag=100_000, min_fit_r2=0.5)
    >>> is_lag_at_max_workers(**kw, slope=120.0, fit_r2=0.9, was_active=False)
    True
    >>> is_lag_at_max_workers(**kw, slope=40.0, fit_r2=0.1, was_active=True)  # too weak to clear it
    True
    >>> is_lag_at_max_workers(**kw, slope=-3.0, fit_r2=0.1, was_active=True)
    False
    """
    if linker_workers < ceiling or lag <= max_lag or slope <= 0:
        return False
    return was_active or fit_r2 >= min_fit_r2


def lag_at_max_detail(*, linker_workers: int, lag: int, max_lag: int, slope: float, max_workers: int,
                      partitions: int) -> str:  # fmt: skip
    """The words of a ``lag_at_max_workers`` finding."""
    bound = "its partitions" if partitions <= max_workers else "max_workers"
    return (
        f"lag {lag:,} (max_lag {max_lag:,}) rising at {slope:,.1f} records/s with {linker_workers} workers, "
        f"the most it can have ({bound}: max_workers {max_workers}, partitions {partitions})"
    )


def override_expiring_finding(
    cluster: str,
    topic: str,
    *,
    override_id: int,
    linker_workers: int,
    expires_at: datetime,
    created_by: str,
    reason: str,
    now: datetime,
    window_s: float = OVERRIDE_EXPIRY_WARN_S,
) -> Finding | None:
    """``override_expiring`` when the override is still active and ends within ``window_s`` of ``now``.

    >>> from datetime import timedelta
    >>> t = datetime(2026, 11, 27, 9, 50, tzinfo=UTC)
    >>> f = override_expiring_finding("eu", "orders", override_id=7, linker_workers=8, created_by="ana",
    ...     reason="sale", expires_at=t + timedelta(minutes=10), now=t)
    >>> f.key
    'override_expiring:orders:7'
    >>> print(f.detail)
    override 7 by ana (sale) pins 8 workers until 2026-11-27 10:00:00 UTC, in 10 min; then the policy decides again
    """
    left = (expires_at - now).total_seconds()
    if not 0 < left <= window_s:
        return None
    until = expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Finding(
        "override_expiring",
        cluster,
        topic,
        f"override {override_id} by {created_by} ({reason}) pins {linker_workers} workers until {until}, "
        f"in {left / 60:.0f} min; then the policy decides again",
        ref=str(override_id),
    )
