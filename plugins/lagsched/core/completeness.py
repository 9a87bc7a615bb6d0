"""When an hour of a table is complete: the watermark rule (docs/completeness.md). Pure.

A partition's watermark is the time up to which the pipeline holds all of it:

* the largest timestamp among its committed records (a record at or after an hour's end says the
  partition moved past the hour), or
* the time the lag monitor read its end, once the committed offset reached that end: every record
  appended before that time is committed (an idle partition is not waited for).

A table's watermark is the least of its partitions' (a partition known by neither holds it at
None: nothing can be said yet). An hour ``[start, start + 1 h)`` is complete once the watermark
is at or past its end plus the allowed lateness. A stalled partition keeps its watermark where
it was, so a stalled topic holds the table back; that is the point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "DEFAULT_ALLOWED_LATENESS_S",
    "DEFAULT_HOURS_START",
    "DEFAULT_RESTATEMENTS_SCHEDULE",
    "HOUR_MS",
    "MAX_ALLOWED_LATENESS_S",
    "PARTITION_KEY_FORMAT",
    "HourTable",
    "PartitionTime",
    "hour_complete",
    "hour_key",
    "hour_of_key",
    "least_watermark",
    "parse_hours_start",
    "parse_restatements_start",
    "table_lateness",
    "table_watermark",
]

HOUR_MS = 3_600_000
#: How long a record's CreateTime may trail the watermark before its hour is announced without it
#: (the cluster's ``allowed_lateness_s``, a route's to override): five minutes, a producer's retries
#: and linger many times over.
DEFAULT_ALLOWED_LATENESS_S = 300
MAX_ALLOWED_LATENESS_S = 7 * 24 * 3600
# How Airflow's CronPartitionTimetable names an hour (its default key format), in UTC.
PARTITION_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"


@dataclass(frozen=True, slots=True)
class PartitionTime:
    """What the pipeline knows of one partition's time.

    Attributes:
        committed_offset: the next offset to consume (None: nothing committed yet).
        max_timestamp_ms: the largest timestamp among committed records (None: none known).
        end_offset, observed_ms: the lag monitor's last reading: once the committed offset (none
            counts as 0) reaches ``end_offset``, every record appended before ``observed_ms`` is
            committed (None: never read).
        caught_up_ms: the latest time the pipeline was known to hold everything appended before it
            (a reading reached, or no lag when read; None: never).
    """

    committed_offset: int | None
    max_timestamp_ms: int | None
    end_offset: int | None = None
    observed_ms: int | None = None
    caught_up_ms: int | None = None

    @property
    def watermark_ms(self) -> int | None:
        """Everything of this partition with a timestamp before this is committed (None: unknown)."""
        idle = (
            self.observed_ms
            if self.end_offset is not None
            and self.observed_ms is not None
            and (self.committed_offset or 0) >= self.end_offset
            else None
        )
        known = [t for t in (self.max_timestamp_ms, self.caught_up_ms, idle) if t is not None]
        return max(known) if known else None


def table_watermark(partitions: Iterable[PartitionTime]) -> int | None:
    """The least partition watermark (None if any is unknown, or there are no partitions)."""
    return least_watermark(p.watermark_ms for p in partitions)


def least_watermark(watermarks: Iterable[int | None]) -> int | None:
    """The least of some watermarks (of partitions, of topics): None if any is unknown, or if
    there are none. A table's is the least of its partitions', or of its topics'."""
    least: int | None = None
    seen = False
    for w in watermarks:
        seen = True
        if w is None:
            return None
        least = w if least is None else min(least, w)
    return least if seen else None


def table_lateness(route_s: int | None, cluster_s: int, log_append_time: Iterable[bool]) -> int:
    """A table's allowed lateness (s): its route's when set; else 0 when every topic landing in it
    is ``LogAppendTime`` (the broker stamps records as they arrive: none is late); else the
    cluster's.

    >>> table_lateness(None, 300, [True, True]), table_lateness(None, 300, [True, False])
    (0, 300)
    >>> table_lateness(60, 300, [True])
    60
    """
    if route_s is not None:
        return route_s
    flags = list(log_append_time)
    return 0 if flags and all(flags) else cluster_s


def hour_complete(hour_start_ms: int, watermark_ms: int | None, lateness_ms: int) -> bool:
    """Whether the hour beginning at ``hour_start_ms`` is complete under ``watermark_ms``."""
    if hour_start_ms % HOUR_MS:
        raise ValueError(f"{hour_start_ms} ms is not the start of an hour")
    if lateness_ms < 0:
        raise ValueError(f"allowed lateness {lateness_ms} ms must be >= 0")
    return watermark_ms is not None and watermark_ms >= hour_start_ms + HOUR_MS + lateness_ms


#: The first hour ``lagsched_hours`` announces when ``[lagsched] hours_start`` is not set.
DEFAULT_HOURS_START = datetime(2026, 12, 1, tzinfo=UTC)


def parse_hours_start(text: str | None) -> datetime:
    """``[lagsched] hours_start`` of Airflow's configuration: the first hour announced (ISO, UTC
    when no offset is given); empty or None: `DEFAULT_HOURS_START`.

    Raises:
        ValueError: not an ISO time, or not the start of an hour.
    """
    if not text or not text.strip():
        return DEFAULT_HOURS_START
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"[lagsched] hours_start = {text!r}: not an ISO time like 2026-12-01T00:00:00Z") from None
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if at.minute or at.second or at.microsecond:
        raise ValueError(f"[lagsched] hours_start = {text!r}: not the start of an hour")
    return at


#: How often ``lagsched_restatements`` runs when ``[lagsched] restatements_schedule`` is not set.
DEFAULT_RESTATEMENTS_SCHEDULE = "*/10 * * * *"


def parse_restatements_start(text: str | None, hours_start: datetime) -> datetime:
    """``[lagsched] restatements_start``: the first interval ``lagsched_restatements`` reads (ISO,
    UTC when no offset is given); empty or None: ``hours_start`` (late records exist only for hours
    announced, so none is recorded before it).

    Raises:
        ValueError: not an ISO time.
    """
    if not text or not text.strip():
        return hours_start
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"[lagsched] restatements_start = {text!r}: not an ISO time like 2026-12-01T00:00:00Z"
        ) from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def hour_key(hour_start_ms: int) -> str:
    """The Airflow partition key of the hour beginning at ``hour_start_ms`` (UTC)."""
    return datetime.fromtimestamp(hour_start_ms / 1000, UTC).strftime(PARTITION_KEY_FORMAT)


def hour_of_key(key: str) -> int:
    """The start (ms) of the hour an Airflow partition key names.

    Raises:
        ValueError: not a key of an hour (``2026-12-02T13:00:00``).
    """
    try:
        at = datetime.strptime(key, PARTITION_KEY_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"partition key {key!r} is not an hour like 2026-12-02T13:00:00 (UTC)") from None
    ms = int(at.timestamp() * 1000)
    if ms % HOUR_MS:
        raise ValueError(f"partition key {key!r} is not the start of an hour")
    return ms


@dataclass(frozen=True, slots=True)
class HourTable:
    """A table whose hours are announced: its Airflow asset and the topics that land in it.

    Attributes:
        cluster: the registry's cluster.
        catalog, namespace, table: the Iceberg table.
        topics: the registered topics whose records land in it (a typed table: one).
        allowed_lateness_s: the lateness its hours wait for (the largest of its topics').
    """

    cluster: str
    catalog: str
    namespace: str
    table: str
    topics: tuple[str, ...]
    allowed_lateness_s: int

    @property
    def identifier(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.table}"

    @property
    def uri(self) -> str:
        """The Airflow asset's URI: ``iceberg://<catalog>/<namespace>/<table>``."""
        return f"iceberg://{self.catalog}/{self.namespace}/{self.table}"

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "catalog": self.catalog,
            "namespace": self.namespace,
            "table": self.table,
            "topics": list(self.topics),
            "allowed_lateness_s": self.allowed_lateness_s,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> HourTable:
        return cls(
            str(value["cluster"]),
            str(value["catalog"]),
            str(value["namespace"]),
            str(value["table"]),
            tuple(str(t) for t in value["topics"]),
            int(value["allowed_lateness_s"]),
        )
