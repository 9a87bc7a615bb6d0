"""Manual overrides of a topic's ``linker_workers``: the rules for what a user may ask. Pure.

An override (Tinybird's Black Friday case: more workers on one topic for a known spike) pins the
topic's worker count for a while. What is accepted, checked here before anything is written:

* ``linker_workers``: an integer from 1 to the topic's partition count (a worker beyond that
  would own no partition);
* ``duration``: a positive span of at most `MAX_OVERRIDE_S` (7 days), written with units, as
  ``90m``, ``2h``, ``1h30m`` or ``1d`` (a bare number is ambiguous, so it is refused);
* ``reason`` and ``created_by``: non-empty text, at most `MAX_REASON` and `MAX_CREATED_BY`
  characters.

Each failure is a `ConfigError` whose ``field`` names the offending field.

Example:
    >>> parse_duration("1h30m")
    5400.0
    >>> validate_override(topic="orders", linker_workers=40, partitions=12, duration_s=3600.0,
    ...                   reason="sale", created_by="ana")
    Traceback (most recent call last):
    ...
    lagsched.core.errors.ConfigError: invalid override: linker_workers = 40: must be at most the 12 \
partitions of topic 'orders' (a worker beyond that would own no partition)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from lagsched.core.errors import ConfigError
from lagsched.core.evaluator import Decision

__all__ = [
    "DURATION_PATTERN",
    "MAX_CREATED_BY",
    "MAX_OVERRIDE_S",
    "MAX_REASON",
    "format_duration",
    "override_decision",
    "parse_duration",
    "unknown_topic",
    "validate_override",
]

MAX_OVERRIDE_S = 7 * 86_400.0
"""Longest override: a week. Longer is a setting, not an override (set ``min_workers`` instead)."""
MAX_REASON = 500  # scaling_overrides.reason VARCHAR(500)
MAX_CREATED_BY = 255  # scaling_overrides.created_by VARCHAR(255)

DURATION_PATTERN = r"^\s*([0-9]+\s*[dhms]\s*)+$"
"""A duration with units: ``2h``, ``90m``, ``1h30m``, ``1d``, ``45s`` (JSON-schema ``pattern`` of the
DAG's form field)."""
_PART = re.compile(r"([0-9]+)\s*([dhms])")
_UNIT_S = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def _error(field: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"invalid override: {field} = {value!r}: {allowed}", field=field, value=value, allowed=allowed)


def parse_duration(text: str, field: str = "duration") -> float:
    """Seconds in a duration written with units (``2h``, ``1h30m``, ``90m``, ``1d``, ``30s``).

    Raises:
        ConfigError: not such a duration (``field`` names it), zero, or above `MAX_OVERRIDE_S`.

    Example:
        >>> [parse_duration(t) for t in ("2h", "90m", "1d", "1h 30m")]
        [7200.0, 5400.0, 86400.0, 5400.0]
    """
    allowed = f"a duration with units, like 90m, 2h, 1h30m or 1d, from 1s to {format_duration(MAX_OVERRIDE_S)}"
    if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text.lower()):
        raise _error(field, text, f"must be {allowed}")
    seconds = float(sum(int(n) * _UNIT_S[u] for n, u in _PART.findall(text.lower())))
    return check_duration(seconds, field, shown=text)


def check_duration(seconds: float, field: str = "duration", *, shown: object = None) -> float:
    """`seconds` if it is a usable override duration (> 0, at most `MAX_OVERRIDE_S`); the error
    quotes `shown` (what the user wrote) when given, else the seconds."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 < seconds <= MAX_OVERRIDE_S:
        raise _error(
            field,
            seconds if shown is None else shown,
            f"must be more than 0 and at most {format_duration(MAX_OVERRIDE_S)} ({MAX_OVERRIDE_S:g} s)",
        )
    return float(seconds)


def format_duration(seconds: float) -> str:
    """``1d2h``, ``1h30m``, ``45s``: the short form `parse_duration` reads back.

    Example:
        >>> format_duration(5400), format_duration(7 * 86400), format_duration(61)
        ('1h30m', '7d', '1m1s')
    """
    left = round(seconds)
    parts = []
    for unit, size in _UNIT_S.items():
        n, left = divmod(left, size)
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def validate_override(
    *, topic: str, linker_workers: int, partitions: int, duration_s: float, reason: str, created_by: str
) -> None:
    """Check an override request against the topic it is for; see the module docstring.

    Raises:
        ConfigError: the first bad field, named in ``field`` and in the message.
    """
    if isinstance(linker_workers, bool) or not isinstance(linker_workers, int) or linker_workers < 1:
        raise _error("linker_workers", linker_workers, "must be an integer >= 1")
    if linker_workers > partitions:
        raise _error(
            "linker_workers",
            linker_workers,
            f"must be at most the {partitions} partitions of topic {topic!r} (a worker beyond that would own no "
            "partition)",
        )
    check_duration(duration_s)
    if not isinstance(reason, str) or not reason.strip():
        raise _error("reason", reason, "must say why (non-empty text); it is recorded with the decision")
    if len(reason) > MAX_REASON:
        raise _error("reason", reason[:40] + "...", f"must be at most {MAX_REASON} characters, got {len(reason)}")
    if not isinstance(created_by, str) or not created_by.strip():
        raise _error("created_by", created_by, "must name who asks for the override (non-empty text)")
    if len(created_by) > MAX_CREATED_BY:
        raise _error("created_by", created_by[:40] + "...", f"must be at most {MAX_CREATED_BY} characters")


def unknown_topic(topic: str, cluster: str, enabled_topics: Collection[str]) -> ConfigError:
    """The error for an override of a topic that is not an enabled topic of `cluster`, with the
    closest name as a hint.

    >>> print(unknown_topic("ordres", "main", ["orders", "clicks"]))
    invalid override: topic = 'ordres': must be an enabled topic of cluster 'main' (did you mean 'orders'?); \
run the topic sync if it is new
    """
    close = difflib.get_close_matches(topic, list(enabled_topics), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    allowed = f"must be an enabled topic of cluster {cluster!r}{hint}; run the topic sync if it is new"
    return _error("topic", topic, allowed)


def override_decision(
    *,
    override_id: int,
    topic: str,
    previous_linker_workers: int,
    linker_workers: int,
    reason: str,
    created_by: str,
    duration_s: float,
    now: datetime,
    lag: int = 0,
    time_lag_s: float = 0.0,
) -> Decision:
    """The ``scaling_decisions`` entry that records an override: policy ``manual``, rule ``override``,
    a reason quoting the user's, who asked and until when; `lag` and `time_lag_s` are the newest
    measurement's."""
    until = (now + timedelta(seconds=duration_s)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Decision(
        topic=topic,
        previous_linker_workers=previous_linker_workers,
        linker_workers=linker_workers,
        lag=lag,
        time_lag_s=time_lag_s,
        slope=0.0,
        fit_r2=0.0,
        policy="manual",
        rule="override",
        reason=f"{reason} (override {override_id} by {created_by} for {format_duration(duration_s)}, "
        f"{linker_workers} workers until {until})",
        decided_at=now.timestamp(),
    )
