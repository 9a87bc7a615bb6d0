"""The claim protocol's pure rules: lock mode, shares, hand-overs, claim results, why a claim was
lost, leases, retries, and the benchmark's history checker and summaries."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from lagsched.core.claims import (
    ClaimLostError,
    ClaimResult,
    ClaimStatus,
    LockMode,
    PartitionRow,
    RetryPolicy,
    StaleReason,
    claim_status,
    claim_terms,
    is_lease_live,
    is_renew_due,
    judge_claim,
    lease_expiry,
    parse_server_version,
    rows_to_claim,
    rows_to_release,
    select_lock_mode,
    shortfall,
    slot_wants,
    supports_skip_locked,
)
from lagsched.core.errors import ConfigError, StaleClaimError
from lagsched.core.rendezvous import Assignment, TopicSpec
from lagsched_dev.bench.claims import OFFSET_EPOCH, check_history, summarize, targets

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("version", "setting", "expected"),
    [
        ("10.11.6-MariaDB-0+deb12u1", "auto", LockMode.SKIP_LOCKED),
        ("10.6.0-MariaDB", "auto", LockMode.SKIP_LOCKED),
        ("10.5.22-MariaDB", "auto", LockMode.OPTIMISTIC),
        ("5.5.5-10.11.6-MariaDB", "auto", LockMode.SKIP_LOCKED),
        ("8.0.36", "auto", LockMode.SKIP_LOCKED),
        ("8.0.1", "auto", LockMode.SKIP_LOCKED),
        ("8.0.0-dmr", "auto", LockMode.OPTIMISTIC),
        ("5.7.44-log", "auto", LockMode.OPTIMISTIC),
        ("8.4.2", "optimistic", LockMode.OPTIMISTIC),
        ("8.4.2", "for_update", LockMode.FOR_UPDATE),
        ("5.7.44", "for_update", LockMode.FOR_UPDATE),
        ("10.11.6-MariaDB", "skip_locked", LockMode.SKIP_LOCKED),
    ],
)
def test_lock_mode_selection(version: str, setting: str, expected: LockMode) -> None:
    assert select_lock_mode(setting, version) is expected


@pytest.mark.parametrize(
    ("version", "setting", "match"),
    [
        ("5.7.44", "skip_locked", "has no SKIP LOCKED"),
        ("10.4.1-MariaDB", "skip_locked", "has no SKIP LOCKED"),
        ("8.0.36", "nowait", "not one of"),
        ("garbage", "auto", "not 'major.minor"),
    ],
)
def test_lock_mode_refusals_name_the_fix(version: str, setting: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        select_lock_mode(setting, version)
    assert info.value.field == "lock_mode"


def test_version_parsing() -> None:
    v = parse_server_version("10.11.6-MariaDB-0+deb12u1")
    assert (v.flavor, v.major, v.minor, v.patch) == ("mariadb", 10, 11, 6)
    assert parse_server_version("8.0").patch == 0
    assert not supports_skip_locked(parse_server_version("10.5.99-MariaDB"))


# ----------------------------------------------------------------- shares


@pytest.mark.parametrize(
    ("partitions", "owners", "expected"),
    [
        (5, ("a", "b"), {"a": 3, "b": 2}),
        (12, ("a", "b", "c"), {"a": 4, "b": 4, "c": 4}),
        (7, ("a", "b", "c"), {"a": 3, "b": 2, "c": 2}),
        (2, ("a", "b", "c"), {"a": 1, "b": 1, "c": 0}),
        (1, ("a",), {"a": 1}),
        (0, ("a",), {"a": 0}),
    ],
)
def test_slot_wants_is_the_fair_share_of_its_lane(
    partitions: int, owners: tuple[str, ...], expected: dict[str, int]
) -> None:
    topics = [TopicSpec("t", partitions, len(owners)), TopicSpec("other", 9, 1)]
    a = Assignment({"t": owners, "other": ("z",)})
    got = {s: slot_wants(s, a, topics).get("t", 0) for s in owners}
    assert got == expected
    assert sum(got.values()) == partitions
    assert max(got.values()) - min(got.values()) <= 1
    assert slot_wants("nobody", a, topics) == {}


@pytest.mark.parametrize(("target", "held", "expected"), [(4, 0, 4), (4, 1, 3), (4, 4, 0), (2, 5, 0), (0, 0, 0)])
def test_rows_to_claim_accounts_for_held_rows(target: int, held: int, expected: int) -> None:
    assert rows_to_claim(target, held) == expected


def test_rows_to_claim_refuses_negatives() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        rows_to_claim(-1, 0)


def claim(topic_id: str, partition_id: int, offset: int | None, epoch: int, lease: datetime) -> PartitionRow:
    """A row slot ``me`` holds, as the claim store returns it."""
    return PartitionRow(
        topic_id, partition_id, committed_offset=offset, claimed_by="me", claim_epoch=epoch, lease_expires_at=lease
    )


def held(*keys: tuple[str, int]) -> list[PartitionRow]:
    return [claim(t, p, None, 1, T0) for t, p in keys]


@pytest.mark.parametrize(
    ("wants", "keys", "expected"),
    [
        ({"a": 2}, [("a", 0), ("a", 1)], []),  # at its share
        ({"a": 3}, [("a", 0)], []),  # below: nothing to give (claim tops it up)
        ({"a": 2}, [("a", 3), ("a", 0), ("a", 7), ("a", 1)], [("a", 3), ("a", 7)]),  # keeps its lowest
        ({"a": 0}, [("a", 0)], [("a", 0)]),
        ({}, [("b", 1), ("a", 0)], [("a", 0), ("b", 1)]),  # not owned any more: all of it, key order
        ({"a": 1, "b": 5}, [("b", 0), ("a", 4), ("a", 2)], [("a", 4)]),
        ({"a": 1}, [], []),
    ],
)
def test_rows_to_release_hands_over_what_is_above_the_share(
    wants: dict[str, int], keys: list[tuple[str, int]], expected: list[tuple[str, int]]
) -> None:
    assert [c.key for c in rows_to_release(wants, held(*keys))] == expected


def test_rows_to_release_and_shortfall_are_complements() -> None:
    rows = held(("a", 0), ("a", 1), ("a", 2), ("b", 0))
    wants = {"a": 1, "b": 3, "c": 2}
    assert shortfall(wants, rows) == {"b": 2, "c": 2}
    assert [c.key for c in rows_to_release(wants, rows)] == [("a", 1), ("a", 2)]
    with pytest.raises(ValueError, match=">= 0"):
        rows_to_release({"a": -1}, rows)


# ----------------------------------------------------------------- claim results


@pytest.mark.parametrize(
    ("short", "free_left", "gave_up", "expected"),
    [
        ({}, False, False, ClaimStatus.COMPLETE),
        ({}, True, True, ClaimStatus.COMPLETE),  # holding everything wins over a spent budget
        ({"t": 1}, False, False, ClaimStatus.NONE_FREE),
        ({"t": 1}, True, False, ClaimStatus.CONTENDED),  # free rows it did not get: others raced it
        ({"t": 1}, False, True, ClaimStatus.CONTENDED),  # gave up on lock errors
    ],
)
def test_claim_status_tells_nothing_free_from_contention(
    short: dict[str, int], free_left: bool, gave_up: bool, expected: ClaimStatus
) -> None:
    assert claim_status(short, free_left=free_left, gave_up=gave_up) is expected


def test_claim_result_flags_new_rows_by_epoch() -> None:
    old = claim("t", 0, 7, 1, T0)
    again = claim("t", 0, 7, 2, T0)
    other = claim("t", 1, None, 1, T0)
    result = ClaimResult(claims=(again, other), new=(again,), short={"t": 1}, status=ClaimStatus.CONTENDED)
    assert result.is_new(again) and not result.is_new(old) and not result.is_new(other)
    assert result.contended
    assert not ClaimResult(claims=()).contended


# ----------------------------------------------------------------- why a claim was lost

L = T0 + timedelta(seconds=30)  # the lease the slot knows of
MINE = claim("t", 0, 100, 3, L)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def state(
    holder: str | None, epoch: int, lease: datetime | None, picked: datetime | None, now: datetime
) -> tuple[PartitionRow, datetime]:
    """MINE's row as the table has it (claim columns and ``last_picked_at``), and the database's time then."""
    row = PartitionRow(
        "t", 0, committed_offset=100, claimed_by=holder, claim_epoch=epoch, lease_expires_at=lease,
        last_picked_at=picked,
    )  # fmt: skip
    return row, now


@pytest.mark.parametrize(
    ("row", "reason", "holder", "detail"),
    [
        (state("me", 3, L, at(0), at(10)), None, None, None),
        (state("me", 3, L, at(0), at(30)), StaleReason.LEASE_EXPIRED, "me", "its lease ran out at"),
        (state(None, 3, None, at(0), at(10)), StaleReason.RELEASED, None, "this slot released it at epoch 3"),
        (
            state("b", 4, at(70), at(40), at(41)),
            StaleReason.TAKEN_OVER,
            "b",
            "slot b claimed it under epoch 4 at 2026-11-01 12:00:40.000000+00:00, after the lease of epoch 3 ran out",
        ),
        (
            state("b", 4, at(50), at(20), at(21)),
            StaleReason.TAKEN_OVER,
            "b",
            "before the lease of epoch 3 ran out at 2026-11-01 12:00:30.000000+00:00, so it had been released",
        ),
        (
            state(None, 4, None, at(40), at(41)),
            StaleReason.TAKEN_OVER,
            None,
            "a slot claimed it under epoch 4 at 2026-11-01 12:00:40.000000+00:00, after the lease of epoch 3 ran "
            "out at 2026-11-01 12:00:30.000000+00:00, and that claim was released since",
        ),
        (state("me", 4, at(70), at(40), at(41)), StaleReason.TAKEN_OVER, "me", "this slot claimed it under epoch 4"),
        (state("b", 4, at(45), at(40), at(50)), StaleReason.TAKEN_OVER, "b", "whose lease ran out too"),
        (
            state("c", 6, at(99), at(90), at(91)),
            StaleReason.TAKEN_OVER,
            "c",
            "it was claimed 3 times since epoch 3; the latest, epoch 6, by slot c at",
        ),
        (state("me", 2, L, at(0), at(10)), StaleReason.UNKNOWN_EPOCH, "me", "epoch 3 was never issued"),
        (None, StaleReason.NO_SUCH_ROW, None, "does not exist"),
    ],
)
def test_judge_claim_says_what_happened(
    row: tuple[PartitionRow, datetime] | None, reason: StaleReason | None, holder: str | None, detail: str | None
) -> None:
    verdict = judge_claim("me", MINE, *(row or (None, T0)))
    if reason is None:
        assert verdict is None
        return
    assert verdict is not None
    assert (verdict.reason, verdict.holder) == (reason, holder)
    assert detail is not None and detail in verdict.detail
    assert "released" not in verdict.detail or reason is not StaleReason.LEASE_EXPIRED


def test_a_row_read_without_its_epoch_or_lease_is_no_claim() -> None:
    status_row = PartitionRow("t", 0, committed_offset=100, claimed_by="me", lease_expires_at=L)  # no epoch loaded
    with pytest.raises(ValueError, match="no claim_epoch or lease_expires_at"):
        claim_terms(status_row)
    with pytest.raises(ValueError, match="no claim_epoch or lease_expires_at"):
        judge_claim("me", status_row, *state("me", 3, L, at(0), at(10)))
    with pytest.raises(ValueError, match="without its claim_epoch"):
        judge_claim("me", MINE, PartitionRow("t", 0, claimed_by="me", lease_expires_at=L), at(10))
    assert claim_terms(MINE) == (3, L)


@pytest.mark.parametrize(
    ("holder", "lease", "now", "expected"),
    [
        ("me", L, at(29.999999), "me"),
        ("me", L, at(30), None),  # a lease is live strictly before its expiry
        ("me", None, at(0), None),
        (None, L, at(0), None),  # a hand edit: a lease without a holder holds nothing
    ],
)
def test_holder_at_names_the_holder_only_while_its_lease_is_live(
    holder: str | None, lease: datetime | None, now: datetime, expected: str | None
) -> None:
    assert PartitionRow("t", 0, claimed_by=holder, lease_expires_at=lease).holder_at(now) == expected


def test_pending_is_the_recorded_batch() -> None:
    assert PartitionRow("t", 0, pending_start=5, pending_end=9).pending == (5, 9)
    assert PartitionRow("t", 0).pending is None


def test_claim_lost_error_is_the_one_stale_claim_error() -> None:
    err = ClaimLostError(
        "lost", reason=StaleReason.TAKEN_OVER, topic_id="t", partition_id=2, epoch=3, holder="b", current_epoch=4
    )
    assert isinstance(err, StaleClaimError)
    assert (err.reason, err.holder, err.current_epoch, err.topic_id, err.partition_id, err.epoch) == (
        StaleReason.TAKEN_OVER,
        "b",
        4,
        "t",
        2,
        3,
    )


# ----------------------------------------------------------------- leases


@pytest.mark.parametrize(
    ("offset_s", "live"),
    [(-30.0, True), (-0.000001, True), (0.0, False), (0.5, False)],
)
def test_lease_is_live_strictly_before_expiry(offset_s: float, live: bool) -> None:
    expires = lease_expiry(T0, 30)
    assert expires == T0 + timedelta(seconds=30)
    assert is_lease_live(expires, expires + timedelta(seconds=offset_s)) is live


def test_lease_rules_refuse_naive_times_and_bad_leases() -> None:
    with pytest.raises(ValueError, match="naive"):
        lease_expiry(datetime(2026, 1, 1), 30)
    with pytest.raises(ValueError, match="> 0"):
        lease_expiry(T0, 0)
    assert is_lease_live(None, T0) is False
    other_tz = timezone(timedelta(hours=2))
    assert is_lease_live(T0 + timedelta(seconds=1), T0.astimezone(other_tz))


@pytest.mark.parametrize(("left_s", "due"), [(60, False), (21, False), (20, True), (5, True), (-1, True)])
def test_renew_is_due_when_a_third_is_left(left_s: float, due: bool) -> None:
    assert is_renew_due(T0 + timedelta(seconds=left_s), T0, 60) is due


# ----------------------------------------------------------------- retries


def test_backoff_is_bounded_jittered_and_seeded() -> None:
    policy = RetryPolicy(max_attempts=6, base_s=0.01, cap_s=0.05)
    a = policy.backoffs(random.Random(7))
    b = policy.backoffs(random.Random(7))
    assert a == b and len(a) == 5
    ceilings = [0.01, 0.02, 0.04, 0.05, 0.05]
    assert all(0 <= x <= c for x, c in zip(a, ceilings, strict=True))
    assert policy.backoffs(random.Random(8)) != a


@pytest.mark.parametrize(("kwargs", "field"), [({"max_attempts": 0}, "max_attempts"), ({"base_s": 0.0}, "base_s")])
def test_retry_policy_validates(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


# ----------------------------------------------------------------- the history checker


def ev(slot: str, *event: object) -> tuple[str, list[object]]:
    return (slot, list(event))


CLEAN = [
    ev("a", "claim", "t", 0, 1, 1.0, 1.1, 31.0),
    ev("a", "commit", "t", 0, 1, 1 * OFFSET_EPOCH + 1, 1.2, 1.3),
    ev("a", "release", "t", 0, 1, 1.4, 1.5, True),
    ev("b", "claim", "t", 0, 2, 1.6, 1.7, 31.6),
    ev("b", "commit", "t", 0, 2, 2 * OFFSET_EPOCH + 2, 1.8, 1.9),
]


@pytest.mark.parametrize(
    ("extra", "doubles", "stales"),
    [
        ([], 0, 0),
        # the same (row, epoch) claimed by two slots
        ([ev("c", "claim", "t", 0, 2, 1.6, 1.7, 31.6)], 1, 0),
        # a commit with epoch 1 started after epoch 2's claim returned
        ([ev("a", "commit", "t", 0, 1, 1 * OFFSET_EPOCH + 5, 2.0, 2.1)], 0, 1),
        # ... but one that started before the takeover returned is fine (it may have run first)
        ([ev("a", "commit", "t", 0, 1, 1 * OFFSET_EPOCH + 5, 1.65, 1.75)], 0, 0),
        # a commit after its own lease ran out
        ([ev("b", "commit", "t", 0, 2, 2 * OFFSET_EPOCH + 3, 40.0, 40.1)], 0, 1),
        # a renew or release that succeeded after a takeover means two holders
        ([ev("a", "renew", "t", 0, 1, 2.0, 2.1, 32.0)], 1, 0),
        ([ev("a", "release", "t", 0, 1, 2.0, 2.1, True)], 1, 0),
        # a refused release after a takeover is the protocol working
        ([ev("a", "release", "t", 0, 1, 2.0, 2.1, False)], 0, 0),
    ],
)
def test_history_checker_flags_exactly_the_violations(
    extra: list[tuple[str, list[object]]], doubles: int, stales: int
) -> None:
    result = check_history([*CLEAN, *extra])
    assert (result.double_claims, result.stale_commits) == (doubles, stales)


def test_history_checker_counts_outcomes() -> None:
    events = [
        *CLEAN,
        ev("a", "call", 1.0, 1.1, 1, "complete"),
        ev("b", "call", 1.6, 1.7, 0, "contended"),
        ev("a", "refused", "t", 0, 1, 2.0, 2.1, "taken_over"),
        ev("a", "stats", 3, 2, 0.5, 1, 4),
        ev("b", "stats", 1, 0, 0.5, 0, 0),
    ]
    result = check_history(events)
    assert (result.claim_calls, result.contended_calls, result.refused) == (2, 1, 1)
    assert result.refused_reasons == {"taken_over": 1}
    assert (result.cas_conflicts, result.retries, result.deadlocks, result.lock_wait_timeouts) == (4, 2, 1, 4)


# ----------------------------------------------------------------- benchmark summaries


def draw(p99: float, rate: float = 1000.0, doubles: int = 0) -> dict[str, float]:
    return {"p50_ms": p99 / 3, "p99_ms": p99, "max_ms": p99 * 2, "claims_per_s": rate, "double_claims": doubles}


def test_summaries_report_the_worst_draw_and_targets_pair_draws() -> None:
    skip = summarize("skip_locked", 16, 6.0, [draw(30.0), draw(45.0, rate=900.0), draw(20.0)])
    assert (skip["p99_ms"], skip["claims_per_s"], skip["median"]["p99_ms"], skip["draws"]) == (45.0, 900.0, 30.0, 3)
    assert len(skip["per_draw"]) == 3
    plain = summarize("for_update", 16, 6.0, [draw(100.0), draw(95.0), draw(60.0)])
    verdict = targets([skip, plain], 16)
    assert verdict["skip_locked_p99_ms"] == 45.0 and verdict["for_update_over_skip_locked_p99"] == round(100 / 45, 2)
    assert verdict["for_update_over_skip_locked_p99_paired_min"] == round(95 / 45, 2)
    assert verdict["met"]
    slow = summarize("skip_locked", 16, 6.0, [draw(55.0)])
    assert not targets([slow, plain], 16)["met"]
    unsafe = summarize("skip_locked", 16, 6.0, [draw(10.0, doubles=1)])
    assert not targets([unsafe, plain], 16)["no_double_claims_no_stale_commits"]
    assert targets([skip], 16) == {}
