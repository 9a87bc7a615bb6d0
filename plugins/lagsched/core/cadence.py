"""When a slot commits to its table: the commit cadence, and the reads that wait for it. Pure.

A slot reads and writes data files at the pace the records arrive (its batches, ``min_interval_s``);
it commits them to the cluster's Iceberg table at a pace the table can bear (docs/lake.md,
"The commit cadence"): at most once every ``interval_s``, sooner once the files waiting hold
``max_records`` records or ``max_bytes`` bytes, and never later than ``interval_s`` after the first
of them was read. Every commit is a snapshot whose metadata every later commit reads and rewrites
until the snapshot is expired, so the commits per hour, not the records, grow the table's metadata.

`Uncommitted` is what waits: per partition one contiguous range ``[start, end)`` (the union of the
reads since the last commit), and the files holding it. Memory stays bounded: the records are in
the files, not here.

Example:
    >>> cadence = CommitCadence(interval_s=30, max_records=1_000)
    >>> waiting = Uncommitted()
    >>> waiting.add({("t", 0): (0, 400)}, files=["f1"], records=400, size_bytes=4_000, now=100.0)
    >>> waiting.add({("t", 0): (400, 700)}, files=["f2"], records=300, size_bytes=3_000, now=105.0)
    >>> waiting.ranges, waiting.end_of(("t", 0)), cadence.due(waiting, now=110.0)
    ({('t', 0): (0, 700)}, 700, None)
    >>> cadence.due(waiting, now=130.0)
    'interval'
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = [
    "DEFAULT_COMMIT_INTERVAL_S",
    "DEFAULT_COMMIT_MAX_BYTES",
    "DEFAULT_COMMIT_MAX_RECORDS",
    "CommitCadence",
    "Uncommitted",
]

#: The default cadence, sized from bench/results/commit_scale.json: 20 slots committing every 30 s
#: leave 14,400 snapshots in the 6 hours the table care keeps, and a commit on that table stays
#: well under a second. Freshness is the price: a record waits up to this long for its commit.
DEFAULT_COMMIT_INTERVAL_S = 30.0
#: A backlogged slot reads ~0.5 million records a second here: 10 million is ~20 s of reading, so
#: under backlog the volume bound, not the interval, sets the pace, and a redo after a crash (which
#: reads the whole recorded range again) stays within a lease.
DEFAULT_COMMIT_MAX_RECORDS = 10_000_000
DEFAULT_COMMIT_MAX_BYTES = 1024 * 1024 * 1024

K = TypeVar("K", bound=Hashable)
F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class CommitCadence:
    """How often a slot commits to its table (the cluster's ``commit_interval_s``,
    ``commit_max_records``, ``commit_max_bytes``; None: no such bound).

    ``interval_s`` 0 commits every batch as soon as it is written (the next batch still reads while
    it commits).
    """

    interval_s: float = DEFAULT_COMMIT_INTERVAL_S
    max_records: int | None = DEFAULT_COMMIT_MAX_RECORDS
    max_bytes: int | None = DEFAULT_COMMIT_MAX_BYTES

    def __post_init__(self) -> None:
        if not 0 <= self.interval_s <= 3600:
            raise ValueError(f"commit interval_s={self.interval_s}: use 0 to 3600 seconds")
        for name in ("max_records", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"commit {name}={value}: use a positive number, or None for no bound")

    def due(self, waiting: Uncommitted[K, F], now: float) -> str | None:
        """Why ``waiting`` is to be committed at monotonic time ``now`` (``interval``, ``records``,
        ``bytes``), or None while it may wait; never due when nothing waits.

        >>> w = Uncommitted()
        >>> CommitCadence(interval_s=0).due(w, now=0.0) is None
        True
        >>> w.add({("t", 0): (0, 10)}, files=["f"], records=10, size_bytes=2_000, now=5.0)
        >>> CommitCadence(interval_s=0).due(w, now=5.0), CommitCadence(max_bytes=1_000).due(w, now=5.0)
        ('interval', 'bytes')
        """
        if waiting.since is None:
            return None
        if self.max_records is not None and waiting.records >= self.max_records:
            return "records"
        if self.max_bytes is not None and waiting.size_bytes >= self.max_bytes:
            return "bytes"
        if now - waiting.since >= self.interval_s:
            return "interval"
        return None

    def wait_s(self, waiting: Uncommitted[K, F], now: float) -> float | None:
        """Seconds until ``waiting`` is due by the interval (0 if due now); None when nothing waits."""
        if waiting.since is None:
            return None
        return max(0.0, waiting.since + self.interval_s - now)


@dataclass(slots=True)
class Uncommitted(Generic[K, F]):
    """Reads written but not committed: per partition key the union ``[start, end)`` of its reads,
    the files holding them, and since when they wait (monotonic seconds of the first read)."""

    ranges: dict[K, tuple[int, int]] = field(default_factory=dict)
    files: list[F] = field(default_factory=list)
    records: int = 0
    size_bytes: int = 0
    since: float | None = None
    reads: int = 0

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def add(
        self, ranges: Mapping[K, tuple[int, int]], *, files: Sequence[F], records: int, size_bytes: int, now: float
    ) -> None:
        """One more read (its ranges and files). A partition's read must start where its waiting
        range ends: the reads of one partition between two commits are contiguous.

        >>> w = Uncommitted()
        >>> w.add({("t", 0): (0, 10)}, files=[], records=0, size_bytes=0, now=0.0)
        >>> w.add({("t", 0): (11, 20)}, files=[], records=0, size_bytes=0, now=1.0)
        Traceback (most recent call last):
        ValueError: ('t', 0): a read [11, 20) does not follow the waiting range [0, 10)
        """
        for key, (start, end) in ranges.items():
            if key in self.ranges and self.ranges[key][1] != start:
                have = self.ranges[key]
                raise ValueError(
                    f"{key}: a read [{start}, {end}) does not follow the waiting range [{have[0]}, {have[1]})"
                )
        for key, (start, end) in ranges.items():
            self.ranges[key] = (self.ranges[key][0], end) if key in self.ranges else (start, end)
        if ranges and self.since is None:
            self.since = now
        self.files.extend(files)
        self.records += records
        self.size_bytes += size_bytes
        self.reads += 1

    def end_of(self, key: K) -> int | None:
        """Where the next read of ``key`` starts, if it has a waiting range."""
        found = self.ranges.get(key)
        return None if found is None else found[1]

    def drop(self, keys: Collection[K], key_of: Callable[[F], K]) -> list[F]:
        """Remove ``keys``' ranges and files (``key_of`` names a file's key); the files removed, to
        delete: their records were never recorded nor committed, so whoever holds the rows next
        reads them again from the committed offsets. ``records`` and ``size_bytes`` keep counting
        the dropped files until the wait empties (the files' own sizes are not known here): a
        volume bound may then come due a little early, never late."""
        gone = [f for f in self.files if key_of(f) in keys]
        self.files = [f for f in self.files if key_of(f) not in keys]
        for key in keys:
            self.ranges.pop(key, None)
        if not self.ranges:
            self.clear()
        return gone

    def clear(self) -> None:
        self.ranges, self.files = {}, []
        self.records = self.size_bytes = self.reads = 0
        self.since = None
