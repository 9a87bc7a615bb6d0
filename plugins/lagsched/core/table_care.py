"""Table care settings (the Airflow Variable ``lagsched_table_care``) and which time partitions are closed. Pure.

::

    {"target_file_mb": 128, "closed_after_minutes": 10, "snapshot_max_age_hours": 6,
     "snapshots_to_keep": 20, "orphan_min_age_hours": 24, "max_manifests": 50}

Every field is optional (the defaults above); docs/table-care.md says what each step does.

Example:
    >>> s = parse_table_care(None)
    >>> s.target_file_bytes, s.snapshots_to_keep
    (134217728, 20)
    >>> from datetime import datetime, UTC
    >>> closed_before(datetime(2026, 11, 25, 10, 5, tzinfo=UTC), 10).isoformat()
    '2026-11-25T09:00:00+00:00'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from lagsched.core.errors import ConfigError

__all__ = ["TABLE_CARE_VARIABLE", "TableCareSettings", "closed_before", "parse_table_care"]

TABLE_CARE_VARIABLE = "lagsched_table_care"


@dataclass(frozen=True, slots=True)
class TableCareSettings:
    """What one table care run does.

    Attributes:
        target_file_mb: compaction writes files of about this size (MiB).
        closed_after_minutes: a time partition (an hour of record timestamps) is closed, and compacted,
            once it ended this long ago; late records reopen it until the next run.
        snapshot_max_age_hours: snapshots older than this are expired (time travel reaches this far back).
        snapshots_to_keep: ... but at least this many of the newest are kept.
        orphan_min_age_hours: files no snapshot references are deleted once this old; a slot's files are
            unreferenced between its write and its commit, so keep this far above a batch's duration.
        max_manifests: manifests are rewritten when the current snapshot has more.
    """

    target_file_mb: int = 128
    closed_after_minutes: int = 10
    snapshot_max_age_hours: float = 6.0
    snapshots_to_keep: int = 20
    orphan_min_age_hours: float = 24.0
    max_manifests: int = 50

    @property
    def target_file_bytes(self) -> int:
        return self.target_file_mb * 1024 * 1024

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: field -> (lowest, highest, integers only)
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "target_file_mb": (1, 4096, True),
    "closed_after_minutes": (0, 7 * 24 * 60, True),
    "snapshot_max_age_hours": (0.1, 24 * 365, False),
    "snapshots_to_keep": (1, 100_000, True),
    # Below an hour, a slow batch's files could be deleted between their write and their commit.
    "orphan_min_age_hours": (1, 24 * 365, False),
    "max_manifests": (1, 100_000, True),
}


def parse_table_care(raw: str | bytes | Mapping[str, Any] | None) -> TableCareSettings:
    """The Variable, validated; None or blank = the defaults.

    Raises:
        ConfigError: naming every bad field, its value and what is allowed.
    """
    if raw is None or (isinstance(raw, (str, bytes)) and not raw.strip()):
        return TableCareSettings()
    if isinstance(raw, Mapping):
        data: Any = raw
    else:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"invalid {TABLE_CARE_VARIABLE}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                field="",
                value=str(raw)[:80],
                allowed="a JSON object",
            ) from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid {TABLE_CARE_VARIABLE}: expected an object, got {type(data).__name__}",
            field="",
            value=data,
            allowed="an object",
        )
    problems: list[tuple[str, object, str]] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _BOUNDS:
            problems.append((key, value, f"one of the fields {', '.join(_BOUNDS)}"))
            continue
        low, high, whole = _BOUNDS[key]
        number_ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not number_ok or not low <= value <= high:
            kind = "an integer" if whole else "a number"
            problems.append((key, value, f"{kind} from {low:g} to {high:g}"))
            continue
        values[key] = value
    if problems:
        listed = "; ".join(f"{path} = {value!r}: expected {allowed}" for path, value, allowed in problems)
        path, value, allowed = problems[0]
        raise ConfigError(f"invalid {TABLE_CARE_VARIABLE}: {listed}", field=path, value=value, allowed=allowed)
    return TableCareSettings(**values)


def closed_before(now: datetime, closed_after_minutes: int) -> datetime:
    """The start of the first hour that is not closed yet: hours that ended at least
    ``closed_after_minutes`` before ``now`` are closed."""
    edge = now - timedelta(minutes=closed_after_minutes)
    return edge.replace(minute=0, second=0, microsecond=0)
