"""The commit cadence: when written batches are committed, and what waits between commits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagsched.core.cadence import CommitCadence, Uncommitted

Key = tuple[str, int]


def waiting_with(records: int, size_bytes: int, since: float) -> Uncommitted[Key, str]:
    w: Uncommitted[Key, str] = Uncommitted()
    w.add({("t", 0): (0, records)}, files=["f"], records=records, size_bytes=size_bytes, now=since)
    return w


@pytest.mark.parametrize(
    ("cadence", "records", "size_bytes", "age_s", "due"),
    [
        (CommitCadence(interval_s=30), 10, 100, 29.9, None),
        (CommitCadence(interval_s=30), 10, 100, 30.0, "interval"),
        (CommitCadence(interval_s=0), 1, 1, 0.0, "interval"),
        (CommitCadence(interval_s=30, max_records=10), 10, 100, 1.0, "records"),
        (CommitCadence(interval_s=30, max_records=11), 10, 100, 1.0, None),
        (CommitCadence(interval_s=30, max_bytes=100), 10, 100, 1.0, "bytes"),
        (CommitCadence(interval_s=30, max_records=None, max_bytes=None), 10**12, 10**15, 29.0, None),
    ],
)
def test_due_by_interval_or_volume(
    cadence: CommitCadence, records: int, size_bytes: int, age_s: float, due: str | None
) -> None:
    assert cadence.due(waiting_with(records, size_bytes, since=100.0), now=100.0 + age_s) == due


def test_nothing_waiting_is_never_due_and_has_no_wait() -> None:
    empty: Uncommitted[Key, str] = Uncommitted()
    assert CommitCadence(interval_s=0).due(empty, now=1e9) is None
    assert CommitCadence().wait_s(empty, now=0.0) is None


def test_the_wait_counts_from_the_first_batch_not_the_last() -> None:
    cadence = CommitCadence(interval_s=30)
    w = waiting_with(10, 10, since=100.0)
    w.add({("t", 0): (10, 20)}, files=["g"], records=10, size_bytes=10, now=125.0)
    assert cadence.wait_s(w, now=125.0) == 5.0
    assert cadence.due(w, now=130.0) == "interval"


def test_reads_of_a_partition_join_into_one_range_and_others_keep_theirs() -> None:
    w: Uncommitted[Key, str] = Uncommitted()
    w.add({("a", 0): (5, 10), ("b", 1): (0, 3)}, files=["a1", "b1"], records=8, size_bytes=80, now=1.0)
    w.add({("a", 0): (10, 40)}, files=["a2"], records=30, size_bytes=300, now=2.0)
    assert w.ranges == {("a", 0): (5, 40), ("b", 1): (0, 3)}
    assert (w.records, w.size_bytes, w.reads, w.since, w.files) == (38, 380, 2, 1.0, ["a1", "b1", "a2"])


def test_a_read_that_skips_or_overlaps_the_waiting_range_is_refused_and_changes_nothing() -> None:
    w = waiting_with(10, 10, since=0.0)
    for bad in ((11, 20), (9, 20)):
        with pytest.raises(ValueError, match="does not follow"):
            w.add({("t", 1): (0, 5), ("t", 0): bad}, files=["x"], records=1, size_bytes=1, now=1.0)
    assert (w.ranges, w.files, w.records) == ({("t", 0): (0, 10)}, ["f"], 10)


def test_dropping_partitions_returns_their_files_and_an_emptied_wait_starts_over() -> None:
    w: Uncommitted[Key, tuple[Key, str]] = Uncommitted()
    w.add({("a", 0): (0, 5), ("b", 0): (0, 5)}, files=[(("a", 0), "fa"), (("b", 0), "fb")], records=10,
          size_bytes=10, now=3.0)  # fmt: skip
    assert w.drop({("a", 0)}, key_of=lambda f: f[0]) == [(("a", 0), "fa")]
    assert (w.ranges, w.files, w.since) == ({("b", 0): (0, 5)}, [(("b", 0), "fb")], 3.0)
    assert w.drop({("b", 0)}, key_of=lambda f: f[0]) == [(("b", 0), "fb")]
    assert (bool(w), w.since, w.records) == (False, None, 0)


@pytest.mark.parametrize("kw", [{"interval_s": -1}, {"interval_s": 3601}, {"max_records": 0}, {"max_bytes": -5}])
def test_a_bad_cadence_is_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        CommitCadence(**kw)  # type: ignore[arg-type]


@given(st.lists(st.integers(min_value=1, max_value=1_000), min_size=1, max_size=30))
def test_contiguous_reads_always_union_to_their_span(sizes: list[int]) -> None:
    w: Uncommitted[Key, int] = Uncommitted()
    start = 17
    for i, n in enumerate(sizes):
        w.add({("t", 0): (start, start + n)}, files=[i], records=n, size_bytes=n, now=float(i))
        start += n
    assert w.ranges == {("t", 0): (17, 17 + sum(sizes))}
    assert w.records == sum(sizes) and w.files == list(range(len(sizes)))
