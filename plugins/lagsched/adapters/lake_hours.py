"""What one hour of an Iceberg table holds, from its metadata alone (pyiceberg; docs/completeness.md).

Every table lagsched writes is partitioned by ``hours(<timestamp column>)`` and every data file
holds one Kafka partition of one hour (docs/lake.md; the table care's compaction keeps both), so the
hour's rows and offset ranges are the sums and bounds of its files: no data file is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lagsched.core.completeness import HOUR_MS

__all__ = ["HourStats", "hour_filter", "hour_stats"]

#: (timestamp, topic, partition, offset) columns of the shared table and of a typed table.
_SHARED = ("timestamp", "topic", "partition", "offset")
_TYPED = ("_kafka_timestamp", "_kafka_topic", "_kafka_partition", "_kafka_offset")


@dataclass(frozen=True, slots=True)
class HourStats:
    """One hour of a table as of one snapshot.

    Attributes:
        snapshot_id: the snapshot read (None: the table has none yet).
        rows: rows whose timestamp is in the hour.
        offsets: per topic and partition, the lowest and highest offset among them.
    """

    snapshot_id: int | None
    rows: int
    offsets: dict[str, dict[str, list[int]]]


def _columns(table: Any) -> tuple[str, str, str, str]:
    """The (timestamp, topic, partition, offset) columns of a typed or a shared table."""
    return _TYPED if "_kafka_timestamp" in {f.name for f in table.schema().fields} else _SHARED


def hour_filter(table: Any, hour_start_ms: int) -> str:
    """pyiceberg's row filter of the hour beginning at ``hour_start_ms``, on the table's timestamp
    column (``timestamp`` in a shared table, ``_kafka_timestamp`` in a typed one)."""
    ts = _columns(table)[0]
    start, end = (datetime.fromtimestamp(ms / 1000, UTC).isoformat() for ms in (hour_start_ms, hour_start_ms + HOUR_MS))
    # pyiceberg's filter string: the column names are ours, the times ISO strings.
    return f"{ts} >= '{start}' AND {ts} < '{end}'"


def hour_stats(table: Any, hour_start_ms: int) -> HourStats:
    """The hour beginning at ``hour_start_ms`` of a pyiceberg ``table``, as of its current snapshot.

    Raises:
        ValueError: the table is not partitioned by the hour of its timestamp column.
    """
    from pyiceberg.conversions import from_bytes
    from pyiceberg.transforms import HourTransform

    snapshot = table.current_snapshot()
    if snapshot is None:
        return HourStats(None, 0, {})
    schema = table.schema()
    ts, topic_col, part_col, off_col = _columns(table)
    spec = table.spec()
    hour_at = topic_at = None
    for i, pf in enumerate(spec.fields):
        source = schema.find_field(pf.source_id).name
        if source == ts and isinstance(pf.transform, HourTransform):
            hour_at = i
        elif source == topic_col:
            topic_at = i
    if hour_at is None:
        raise ValueError(f"{table.name()}: not partitioned by hours({ts}); its hours cannot be read from metadata")
    hour = hour_start_ms // HOUR_MS
    part_field, off_field, topic_field = (schema.find_field(n) for n in (part_col, off_col, topic_col))
    rows = 0
    offsets: dict[str, dict[str, list[int]]] = {}
    scan = table.scan(row_filter=hour_filter(table, hour_start_ms), snapshot_id=snapshot.snapshot_id)
    for task in scan.plan_files():
        f = task.file
        if f.partition[hour_at] != hour:
            continue
        rows += int(f.record_count)
        if topic_at is not None:
            topic = str(f.partition[topic_at])
        else:
            topic = str(from_bytes(topic_field.field_type, f.lower_bounds[topic_field.field_id]))
        partition = str(from_bytes(part_field.field_type, f.lower_bounds[part_field.field_id]))
        low = int(from_bytes(off_field.field_type, f.lower_bounds[off_field.field_id]))
        high = int(from_bytes(off_field.field_type, f.upper_bounds[off_field.field_id]))
        span = offsets.setdefault(topic, {}).setdefault(partition, [low, high])
        span[0], span[1] = min(span[0], low), max(span[1], high)
    return HourStats(
        snapshot.snapshot_id,
        rows,
        {t: dict(sorted(p.items(), key=lambda kv: int(kv[0]))) for t, p in sorted(offsets.items())},
    )
