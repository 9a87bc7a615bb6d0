"""Balanced HRW: the capacity bound, owner counts, determinism and stickiness."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagsched.core.balance import DEFAULT_EPS, balanced_assign, slot_loads
from lagsched.core.rendezvous import Assignment, AssignmentError, TopicSpec, lane_loads

topic_lists = st.lists(
    st.builds(
        TopicSpec,
        topic_id=st.uuids().map(str),
        partitions=st.integers(min_value=0, max_value=64),
        linker_workers=st.integers(min_value=1, max_value=4),
    ),
    min_size=1,
    max_size=60,
    unique_by=lambda t: t.topic_id,
)
slot_lists = st.lists(st.uuids().map(str), min_size=1, max_size=12, unique=True)


def _bound(topics: list[TopicSpec], n: int, eps: float) -> float:
    """The documented worst case: max(cap, max over lanes of (total - l)/(N - k + 1) + l)."""
    total = sum(t.load for t in topics)
    bound = (1 + eps) * total / n
    for t in topics:
        k = min(t.linker_workers, n)
        for lane in lane_loads(t, k):
            bound = max(bound, (total - lane) / (n - k + 1) + lane)
    return bound


def _check(topics: list[TopicSpec], slots: list[str], a: Assignment, eps: float) -> None:
    for t in topics:
        got = a.owners_of(t.topic_id)
        assert len(got) == len(set(got)) == min(t.linker_workers, len(slots))
        assert set(got) <= set(slots)
    loads = slot_loads(topics, a, slots)
    assert max(loads.values()) <= _bound(topics, len(slots), eps) + 1e-9


@settings(max_examples=60, deadline=None)
@given(topic_lists, slot_lists, st.sampled_from([0.05, DEFAULT_EPS, 0.25]))
def test_capacity_bound_and_owner_count_from_scratch(topics: list[TopicSpec], slots: list[str], eps: float) -> None:
    _check(topics, slots, balanced_assign(topics, slots, eps=eps), eps)


@settings(max_examples=40, deadline=None)
@given(topic_lists, slot_lists, st.lists(st.booleans(), min_size=1, max_size=4), st.randoms())
def test_capacity_bound_and_owner_count_hold_through_churn(
    topics: list[TopicSpec], slots: list[str], joins: list[bool], rnd: random.Random
) -> None:
    a = balanced_assign(topics, slots)
    live = list(slots)
    for n, join in enumerate(joins):
        if join or len(live) == 1:
            live.append(f"new-{n}")
        else:
            live.remove(rnd.choice(live))
        a = balanced_assign(topics, live, previous=a)
        _check(topics, live, a, DEFAULT_EPS)


@settings(max_examples=40, deadline=None)
@given(topic_lists, slot_lists)
def test_recomputing_from_an_unchanged_input_changes_nothing(topics: list[TopicSpec], slots: list[str]) -> None:
    a = balanced_assign(topics, slots)
    assert balanced_assign(topics, slots, previous=a) == a
    assert balanced_assign(list(reversed(topics)), list(reversed(slots))) == a


def _skewed(seed: int) -> tuple[list[TopicSpec], list[str]]:
    rng = random.Random(seed)
    topics = [
        TopicSpec(f"topic-{i:04d}", rng.choice([1, 1, 2, 3, 4, 8, 16, 32, 64]), rng.randint(1, 4)) for i in range(400)
    ]
    return topics, [f"slot-{i:02d}" for i in range(20)]


def test_balances_where_plain_hrw_does_not() -> None:
    topics, slots = _skewed(1)
    loads = slot_loads(topics, balanced_assign(topics, slots), slots)
    mean = sum(loads.values()) / len(slots)
    assert max(loads.values()) <= (1 + DEFAULT_EPS) * mean


def test_a_leave_keeps_every_surviving_owner_in_place() -> None:
    topics, slots = _skewed(2)
    before = balanced_assign(topics, slots)
    leaver = slots[7]
    after = balanced_assign(topics, [s for s in slots if s != leaver], previous=before)
    for t in topics:
        old, new = before.owners_of(t.topic_id), after.owners_of(t.topic_id)
        for pos, owner in enumerate(old):
            if owner != leaver:
                assert new[pos] == owner


def test_a_join_fills_the_new_slot_to_about_its_share() -> None:
    topics, slots = _skewed(3)
    before = balanced_assign(topics, slots)
    after = balanced_assign(topics, [*slots, "slot-new"], previous=before)
    loads = slot_loads(topics, after, [*slots, "slot-new"])
    mean = sum(loads.values()) / len(loads)
    assert (1 - DEFAULT_EPS) * mean <= loads["slot-new"] <= mean


def test_rejects_bad_eps_and_no_slots() -> None:
    with pytest.raises(AssignmentError, match="eps=0"):
        balanced_assign([TopicSpec("t", 1)], ["a"], eps=0)
    with pytest.raises(AssignmentError, match="no live slots"):
        balanced_assign([TopicSpec("t", 1)], [])
