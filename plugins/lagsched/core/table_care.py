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
    >>> files_per_target([1_000, 2_000, 3_000], 128 * 1024 * 1024)  # 3 files where 1 would do
    3.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from pydantic import Field

from lagsched.core.variables import VariableModel, decode, require_object, validate

__all__ = [
    "MAX_FILES_PER_TARGET",
    "TABLE_CARE_VARIABLE",
    "TableCareSettings",
    "closed_before",
    "files_per_target",
    "orphan_cutoff",
    "parse_table_care",
    "partitions_over",
]

TABLE_CARE_VARIABLE = "lagsched_table_care"
#: After a run, no closed partition holds more than this many files per file its bytes need
#: (`files_per_target`); a partition above it after the bin-pack is rewritten whole.
MAX_FILES_PER_TARGET = 1.5

K = TypeVar("K")


class TableCareSettings(VariableModel):
    """What one table care run does: the Variable's model.

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

    target_file_mb: int = Field(default=128, ge=1, le=4096)
    closed_after_minutes: int = Field(default=10, ge=0, le=7 * 24 * 60)
    snapshot_max_age_hours: float = Field(default=6.0, ge=0.1, le=24 * 365)
    snapshots_to_keep: int = Field(default=20, ge=1, le=100_000)
    # Below an hour, a slow batch's files could be deleted between their write and their commit.
    orphan_min_age_hours: float = Field(default=24.0, ge=1, le=24 * 365)
    max_manifests: int = Field(default=50, ge=1, le=100_000)

    @property
    def target_file_bytes(self) -> int:
        return self.target_file_mb * 1024 * 1024

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


def parse_table_care(raw: str | bytes | Mapping[str, Any] | None) -> TableCareSettings:
    """The Variable, validated; None or blank = the defaults.

    Raises:
        ConfigError: naming every bad field, its value and what is allowed.
    """
    data = decode(raw, TABLE_CARE_VARIABLE)
    if data is None:
        return TableCareSettings()
    return validate(TableCareSettings, require_object(data, TABLE_CARE_VARIABLE), TABLE_CARE_VARIABLE)


def closed_before(now: datetime, closed_after_minutes: int) -> datetime:
    """The start of the first hour that is not closed yet: hours that ended at least
    ``closed_after_minutes`` before ``now`` are closed."""
    edge = now - timedelta(minutes=closed_after_minutes)
    return edge.replace(minute=0, second=0, microsecond=0)


def files_per_target(file_sizes: Sequence[int], target_bytes: int) -> float:
    """A partition's data files divided by the files its bytes need: ``ceil(bytes / target)`` (at least 1).

    >>> files_per_target([100, 100], 1000), files_per_target([900, 900, 900], 1000)
    (2.0, 1.0)
    """
    if not file_sizes:
        return 0.0
    return len(file_sizes) / max(1, math.ceil(sum(file_sizes) / target_bytes))


def partitions_over(
    partitions: Mapping[K, Sequence[int]], target_bytes: int, limit: float = MAX_FILES_PER_TARGET
) -> list[K]:
    """The partitions (keys of file sizes) holding more than ``limit`` files per file their bytes need.

    Iceberg's bin-pack leaves these behind: it only picks files outside 0.75-1.8 x the target and
    only groups of two or more, so a target-sized file next to one small late file stays two files.

    >>> partitions_over({"a": [900, 10], "b": [900], "c": [10, 10, 10]}, 1000)
    ['a', 'c']
    """
    return [key for key, sizes in partitions.items() if files_per_target(sizes, target_bytes) > limit]


def orphan_cutoff(now: datetime, wall_clock: datetime, orphan_min_age_hours: float) -> datetime:
    """Files no snapshot references are deleted when last modified before this.

    Measured from the earlier of the run's ``now`` and the real clock: a ``now`` in the future (to
    close the current hour) must never make a batch's written, not yet committed files look old.

    >>> from datetime import datetime, UTC
    >>> real, ahead = datetime(2026, 11, 25, 10, tzinfo=UTC), datetime(2026, 11, 25, 12, tzinfo=UTC)
    >>> orphan_cutoff(ahead, real, 24).isoformat()
    '2026-11-24T10:00:00+00:00'
    """
    return min(now, wall_clock) - timedelta(hours=orphan_min_age_hours)
