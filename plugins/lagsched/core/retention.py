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
    >>> s.cutoffs(now=100 * 86400.0)["retention_gaps"] / 86400
    70.0
    >>> parse_retention('{"gaps_days": 0}')
    Traceback (most recent call last):
    ...
    lagsched.core.errors.ConfigError: invalid lagsched_retention: gaps_days = 0: expected a number of days ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lagsched.core import variable_json
from lagsched.core.errors import ConfigError

__all__ = ["DAY_S", "RETENTION_VARIABLE", "RetentionSettings", "parse_retention"]

RETENTION_VARIABLE = "lagsched_retention"
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """What one maintenance run deletes.

    Attributes:
        decisions_days: scaling decisions older than this many days are deleted (each topic's newest,
            and an active override's, kept).
        gaps_days: retention gaps detected more than this many days ago are deleted.
        overrides_days: overrides that ended more than this many days ago are deleted.
        batch_rows: rows one DELETE removes at most (one short transaction each).
    """

    decisions_days: float = 30.0
    gaps_days: float = 30.0
    overrides_days: float = 30.0
    batch_rows: int = 5000

    def cutoffs(self, now: float) -> dict[str, float]:
        """Table -> the time (epoch seconds) before which its rows may go, at ``now``."""
        return {
            "scaling_decisions": now - self.decisions_days * DAY_S,
            "retention_gaps": now - self.gaps_days * DAY_S,
            "scaling_overrides": now - self.overrides_days * DAY_S,
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: field -> (lowest, highest, integers only, what it counts)
_BOUNDS: dict[str, tuple[float, float, bool, str]] = {
    # A day at least: the page, the report and an operator's look back need some history, and the
    # evaluator's cooldowns are minutes.
    "decisions_days": (1, 3650, False, "days"),
    "gaps_days": (1, 3650, False, "days"),
    "overrides_days": (1, 3650, False, "days"),
    # Below 100 a backlog takes many round trips; above 100,000 one DELETE holds its locks for seconds.
    "batch_rows": (100, 100_000, True, "rows"),
}


def _decode(raw: str | bytes | Mapping[str, Any]) -> Any:
    return raw if isinstance(raw, Mapping) else variable_json.loads(raw, RETENTION_VARIABLE)


def parse_retention(raw: str | bytes | Mapping[str, Any] | None) -> RetentionSettings:
    """The Variable, validated; None or blank = the defaults.

    Raises:
        ConfigError: naming every bad field, its value and what is allowed (``field``/``value``/
            ``allowed`` describe the first).
    """
    if raw is None or (isinstance(raw, (str, bytes)) and not raw.strip()):
        return RetentionSettings()
    data = _decode(raw)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid {RETENTION_VARIABLE}: expected an object, got {type(data).__name__}",
            field="",
            value=data,
            allowed="an object",
        )
    problems: list[tuple[str, object, str]] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _BOUNDS:
            problems.append((str(key), value, f"one of the fields {', '.join(_BOUNDS)}"))
            continue
        low, high, whole, unit = _BOUNDS[key]
        number_ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        # bool is an int in Python; `true` days is a mistake, not 1.
        if isinstance(value, bool) or not number_ok or not low <= value <= high:
            kind = "an integer number" if whole else "a number"
            problems.append((str(key), value, f"{kind} of {unit} from {low:g} to {high:g}"))
            continue
        values[key] = value if whole else float(value)
    if problems:
        listed = "; ".join(f"{path} = {value!r}: expected {allowed}" for path, value, allowed in problems)
        path, value, allowed = problems[0]
        raise ConfigError(f"invalid {RETENTION_VARIABLE}: {listed}", field=path, value=value, allowed=allowed)
    return RetentionSettings(**values)
