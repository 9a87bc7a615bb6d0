"""How long lagsched keeps its history (the Airflow Variable ``lagsched_retention``). Pure.

::

    {"decisions_days": 30, "gaps_days": 30, "overrides_days": 30, "batch_rows": 5000}

Every field is optional (the defaults above); the maintenance DAG applies them every hour
(docs/dags.md, "Maintenance"):

* ``decisions_days``: ``scaling_decisions`` rows older than this are deleted, except each topic's
  newest decision (the evaluator's cooldown and its ``override_expired`` rule read it) and the
  decision that applied an override still active;
* ``gaps_days``: ``retention_gaps`` rows detected longer ago than this are deleted (the retention
  losses the page, the metrics and the maintenance report count then cover this many days);
* ``overrides_days``: ``scaling_overrides`` rows that ended (expired or cancelled) longer ago than
  this are deleted; an active override is never deleted;
* ``batch_rows``: rows one DELETE removes at most; each batch is its own short transaction, so a
  large backlog never holds its locks for long.

Example:
    >>> s = parse_retention(None)
    >>> (s.decisions_days, s.batch_rows)
    (30.0, 5000)
    >>> from datetime import UTC
    >>> s.cutoffs(now=datetime(2026, 4, 10, tzinfo=UTC))["retention_gaps"].isoformat()
    '2026-03-11T00:00:00+00:00'
    >>> parse_retention('{"gaps_days": 0}')
    Traceback (most recent call last):
    ...
    lagsched.core.errors.ConfigError: invalid lagsched_retention: gaps_days = 0: Input should be greater than or \
equal to 1 (allowed: a finite number of days from 1 to 3,650)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field

from lagsched.core.variables import VariableModel, decode, require_object, validate

__all__ = ["DAY_S", "RETENTION_VARIABLE", "RetentionSettings", "parse_retention"]

RETENTION_VARIABLE = "lagsched_retention"
DAY_S = 86_400.0


class RetentionSettings(VariableModel):
    """What one maintenance run deletes: the Variable's model.

    Attributes:
        decisions_days: scaling decisions older than this many days are deleted (each topic's newest,
            and an active override's, kept).
        gaps_days: retention gaps detected more than this many days ago are deleted.
        overrides_days: overrides that ended more than this many days ago are deleted.
        batch_rows: rows one DELETE removes at most (one short transaction each).
    """

    # A day at least: the page, the report and an operator's look back need some history, and the
    # evaluator's cooldowns are minutes.
    decisions_days: float = Field(default=30.0, ge=1, le=3650)
    gaps_days: float = Field(default=30.0, ge=1, le=3650)
    overrides_days: float = Field(default=30.0, ge=1, le=3650)
    # Below 100 a backlog takes many round trips; above 100,000 one DELETE holds its locks for seconds.
    batch_rows: int = Field(default=5000, ge=100, le=100_000)

    def cutoffs(self, now: datetime) -> dict[str, datetime]:
        """Table -> the time before which its rows may go, at ``now`` (aware UTC, as is each cutoff)."""
        return {
            "scaling_decisions": now - timedelta(days=self.decisions_days),
            "retention_gaps": now - timedelta(days=self.gaps_days),
            "scaling_overrides": now - timedelta(days=self.overrides_days),
        }

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


def parse_retention(raw: str | bytes | Mapping[str, Any] | None) -> RetentionSettings:
    """The Variable, validated; None or blank = the defaults.

    Raises:
        ConfigError: naming every bad field, its value and what is allowed (``field``/``value``/
            ``allowed`` describe the first).
    """
    data = decode(raw, RETENTION_VARIABLE)
    if data is None:
        return RetentionSettings()
    return validate(RetentionSettings, require_object(data, RETENTION_VARIABLE), RETENTION_VARIABLE)
