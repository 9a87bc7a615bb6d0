"""The claim protocol's pure rules: lock mode, shares, leases, retries, and the history checker."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from lagsched.bench.claims import OFFSET_EPOCH, check_history
from lagsched.core.claims import (
    LockMode,
    RetryPolicy,
    is_lease_live,
    is_renew_due,
    lease_expiry,
    parse_server_version,
    rows_to_claim,
    select_lock_mode,
    slot_wants,
    supports_skip_locked,
)
from lagsched.core.errors import ConfigError
from lagsched.core.rendezvous import Assignment, TopicSpec

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
