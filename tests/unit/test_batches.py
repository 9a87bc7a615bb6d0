"""Planning a consumer's next batch per partition: redo, read, gaps, pins and when to run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagsched.core.batches import (
    Gap,
    OffsetAheadError,
    PartitionPlan,
    StartFrom,
    batch_is_due,
    fair_shares,
    next_batch_at,
    plan_partition,
)


def plan(**kw: object) -> PartitionPlan | None:
    args: dict[str, object] = {"committed": None, "pending": None, "log_start": 0, "latest": 0, "max_records": 100}
    args.update(kw)
    return plan_partition(**args)  # type: ignore[arg-type]


def test_a_new_batch_starts_at_the_committed_offset_and_is_capped() -> None:
    assert plan(committed=10, latest=1_000) == PartitionPlan((10, 110), 10, 110)
    assert plan(committed=10, latest=50) == PartitionPlan((10, 50), 10, 50)


def test_a_caught_up_partition_has_nothing_to_do() -> None:
    assert plan(committed=50, log_start=20, latest=50) is None


def test_a_never_consumed_partition_starts_at_the_log_start_by_default() -> None:
    assert plan(log_start=30, latest=500) == PartitionPlan((30, 130), 30, 130)


def test_starting_from_latest_pins_the_start_without_reading() -> None:
    assert plan(log_start=30, latest=500, start_from=StartFrom.LATEST) == PartitionPlan(None, 500, 500)
    # Once pinned, the committed offset rules: records produced since are read.
    assert plan(committed=500, log_start=30, latest=520, start_from=StartFrom.LATEST) == PartitionPlan(
        (500, 520), 500, 520
    )


def test_an_empty_never_consumed_partition_pins_its_start() -> None:
    assert plan(log_start=0, latest=0) == PartitionPlan(None, 0, 0)


def test_a_start_below_the_log_start_is_a_gap_and_reading_continues_from_the_log_start() -> None:
    p = plan(committed=10, log_start=60, latest=1_000)
    assert p == PartitionPlan((60, 160), 60, 160, Gap(10, 60))
    assert p.gap is not None and p.gap.records == 50


def test_a_gap_with_nothing_left_to_read_still_moves_the_offset() -> None:
    assert plan(committed=10, log_start=60, latest=60) == PartitionPlan(None, 60, 60, Gap(10, 60))


def test_a_recorded_batch_is_redone_exactly_whatever_max_records_says_now() -> None:
    assert plan(committed=40, pending=(40, 400), latest=1_000, max_records=10) == PartitionPlan(
        (40, 400), 40, 400, redo=True
    )


def test_a_recorded_batch_partly_deleted_by_retention_keeps_its_name_and_reads_the_rest() -> None:
    p = plan(committed=40, pending=(40, 400), log_start=100, latest=1_000)
    assert p == PartitionPlan((40, 400), 100, 400, Gap(40, 100), redo=True)
    gone = plan(committed=40, pending=(40, 400), log_start=500, latest=1_000)
    assert gone == PartitionPlan((40, 400), 400, 400, Gap(40, 400), redo=True)
    assert gone is not None and not gone.reads


@pytest.mark.parametrize(
    ("committed", "pending"), [(1_001, None), (None, (900, 1_200))], ids=["committed", "recorded batch"]
)
def test_offsets_past_the_latest_are_refused(committed: int | None, pending: tuple[int, int] | None) -> None:
    with pytest.raises(OffsetAheadError, match="truncated or re-created"):
        plan(committed=committed, pending=pending, latest=1_000)


def test_no_batch_ends_past_the_last_stable_offset() -> None:
    """An open transaction from offset 400 holds the LSO there while the high watermark moves on."""
    assert plan(committed=100, latest=400, high_watermark=900, max_records=1_000) == PartitionPlan((100, 400), 100, 400)
    assert plan(committed=400, latest=400, high_watermark=900) is None


@pytest.mark.parametrize(
    ("committed", "pending"), [(600, None), (100, (100, 600))], ids=["committed", "recorded batch"]
)
def test_offsets_between_the_stable_offset_and_the_high_watermark_wait(
    committed: int | None, pending: tuple[int, int] | None
) -> None:
    """Stored by a read-uncommitted reader (before read committed): not an anomaly, a wait for the
    open transaction; the recorded batch is redone once the LSO passes its end."""
    assert plan(committed=committed, pending=pending, latest=400, high_watermark=900) is None
    assert plan(committed=committed, pending=pending, latest=600, high_watermark=900) == (
        None if pending is None else PartitionPlan((100, 600), 100, 600, redo=True)
    )
    with pytest.raises(OffsetAheadError, match="past the high watermark 500"):
        plan(committed=committed, pending=pending, latest=400, high_watermark=500)


@pytest.mark.parametrize(
    "kw",
    [{"max_records": 0}, {"log_start": 5, "latest": 4}, {"log_start": -1}, {"high_watermark": 9}],
    ids=["max", "order", "negative", "stable past the high watermark"],
)
def test_bad_inputs_are_refused(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        plan(**{"committed": 0, "latest": 10, **kw})


@given(
    committed=st.one_of(st.none(), st.integers(0, 300)),
    log_start=st.integers(0, 300),
    extra=st.integers(0, 300),
    max_records=st.integers(1, 120),
)
def test_plans_never_skip_or_repeat_an_offset(
    committed: int | None, log_start: int, extra: int, max_records: int
) -> None:
    """Replaying plans from any state reaches the latest offset, reading each retained offset once."""
    latest = max(log_start, committed or 0) + extra
    read: list[int] = []
    lost: list[int] = []
    pos = committed
    for _ in range(1_000):
        p = plan(committed=pos, log_start=log_start, latest=latest, max_records=max_records)
        if p is None:
            break
        if p.gap is not None:
            lost.extend(range(p.gap.start, p.gap.end))
        if p.batch is not None:
            assert p.batch[1] - p.read_start <= max_records
            read.extend(range(p.read_start, p.batch[1]))
        pos = p.commit_to
    assert pos == latest
    assert read == list(range(max(log_start, committed or 0), latest))
    assert lost == list(range(committed, log_start)) if committed is not None and committed < log_start else not lost


def test_a_batch_waits_for_the_interval_or_enough_records() -> None:
    small = [PartitionPlan((0, 10), 0, 10), PartitionPlan((5, 20), 5, 20)]
    assert not batch_is_due(small, since_last_s=1, min_interval_s=5, min_records=100)
    assert batch_is_due(small, since_last_s=5, min_interval_s=5, min_records=100)
    assert batch_is_due(small, since_last_s=0, min_interval_s=5, min_records=25)
    assert not batch_is_due([], since_last_s=99, min_interval_s=0, min_records=1)


@pytest.mark.parametrize(
    "p", [PartitionPlan((0, 10), 0, 10, redo=True), PartitionPlan(None, 7, 7, Gap(3, 7))], ids=["redo", "gap"]
)
def test_redos_and_commit_only_plans_run_at_once(p: PartitionPlan) -> None:
    assert batch_is_due([p], since_last_s=0, min_interval_s=60, min_records=10**9)


@given(
    waiting=st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=40),
    budget=st.integers(min_value=0, max_value=500_000),
)
def test_fair_shares_stay_within_the_budget_and_favour_nobody(waiting: list[int], budget: int) -> None:
    shares = fair_shares(dict(enumerate(waiting)), budget)
    reading = sum(1 for w in waiting if w > 0)
    assert all(0 <= shares[i] <= max(w, 0) for i, w in enumerate(waiting))
    assert all(shares[i] >= 1 for i, w in enumerate(waiting) if w > 0)  # every partition moves
    assert sum(shares.values()) <= max(budget, reading)  # at least one record each may overshoot a tiny budget
    if sum(waiting) <= budget:
        assert shares == dict(enumerate(waiting))
    else:  # max-min fair: a partition cut short got at least what any other got, less one for rounding
        for i, w in enumerate(waiting):
            if shares[i] < w:
                assert all(shares[i] >= min(shares[j], waiting[j]) - 1 for j in range(len(waiting)))


@given(
    rate=st.floats(min_value=1, max_value=100_000),
    batch_records=st.integers(min_value=1, max_value=1_000_000),
    backlog=st.integers(min_value=1, max_value=2_000_000),
    batch_wall_s=st.floats(min_value=0.01, max_value=20),
)
def test_a_paced_slot_never_reads_faster_than_its_cap(
    rate: float, batch_records: int, backlog: int, batch_wall_s: float
) -> None:
    """A slot draining a backlog in paced batches: at every batch's start, what it read before is at
    most rate x the time since the first batch started."""
    now, read, starts = 0.0, 0, []
    while read < backlog and len(starts) < 200:
        records = min(batch_records, backlog - read)
        starts.append((now, read))
        ready = next_batch_at(now, records, max_rate=rate)
        read += records
        now = max(now + batch_wall_s, ready)  # the next batch waits for the cap, or for this batch to end
    t0 = starts[0][0]
    for t, before in starts[1:]:
        assert before <= rate * (t - t0) + 1e-6 * before
