"""Kafka's range and roundrobin assignors as seed 002 describes them, and the ring."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagsched.core.rendezvous import AssignmentError, TopicSpec
from lagsched_dev.bench.assignors import range_assign, ring_assign, roundrobin_assign

T0_T1 = [TopicSpec("t0", 2), TopicSpec("t1", 2)]


def _by_consumer(m: dict[tuple[str, int], str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for (t, p), c in sorted(m.items()):
        out.setdefault(c, []).append(f"{t}p{p}")
    return out


@pytest.mark.parametrize(
    ("assignor", "topics", "consumers", "expected"),
    [
        # Seed 002's two topics of two partitions over C1 and C2.
        (range_assign, T0_T1, ["C1", "C2"], {"C1": ["t0p0", "t1p0"], "C2": ["t0p1", "t1p1"]}),
        (roundrobin_assign, T0_T1, ["C2", "C1"], {"C1": ["t0p0", "t1p0"], "C2": ["t0p1", "t1p1"]}),
        # C1 dies: C2 takes everything.
        (range_assign, T0_T1, ["C2"], {"C2": ["t0p0", "t0p1", "t1p0", "t1p1"]}),
        # A new one-partition topic t3 lands on the lexicographically first consumer.
        (
            range_assign,
            [*T0_T1, TopicSpec("t3", 1)],
            ["C1", "C2"],
            {"C1": ["t0p0", "t1p0", "t3p0"], "C2": ["t0p1", "t1p1"]},
        ),
        # Range: P % C extra partitions go to the first consumers, per topic.
        (
            range_assign,
            [TopicSpec("t", 5)],
            ["c", "a", "b"],
            {"a": ["tp0", "tp1"], "b": ["tp2", "tp3"], "c": ["tp4"]},
        ),
        # Roundrobin deals across topic boundaries.
        (
            roundrobin_assign,
            [TopicSpec("t0", 3), TopicSpec("t1", 3)],
            ["c1", "c2"],
            {"c1": ["t0p0", "t0p2", "t1p1"], "c2": ["t0p1", "t1p0", "t1p2"]},
        ),
    ],
)
def test_kafka_assignors_match_hand_computed_examples(
    assignor: object, topics: list[TopicSpec], consumers: list[str], expected: dict[str, list[str]]
) -> None:
    assert callable(assignor)
    assert _by_consumer(assignor(topics, consumers)) == expected


def test_range_piles_small_topics_onto_application01() -> None:
    consumers = [f"application{i:02d}-3321631a-2476-11e7-93ae-92361f00267{i % 10}" for i in (3, 1, 2)]
    topics = [TopicSpec(f"topic-{i:02d}", 1) for i in range(80)]
    owners = set(range_assign(topics, consumers).values())
    assert owners == {consumers[1]}


@pytest.mark.parametrize("assignor", [range_assign, roundrobin_assign, ring_assign])
@pytest.mark.parametrize(
    ("ids", "message"), [(["c", ""], "id '' is empty"), (["c", "\ud800"], r"id '\\ud800' is not valid Unicode")]
)
def test_assignors_reject_unusable_ids_naming_them(assignor: object, ids: list[str], message: str) -> None:
    assert callable(assignor)
    with pytest.raises(AssignmentError, match=message):
        assignor(T0_T1, ids)


def test_assignors_reject_no_or_repeated_consumers() -> None:
    with pytest.raises(AssignmentError, match="no consumers"):
        range_assign(T0_T1, [])
    with pytest.raises(AssignmentError, match="repeat"):
        roundrobin_assign(T0_T1, ["c", "c"])
    with pytest.raises(AssignmentError, match="vnodes=0"):
        ring_assign(T0_T1, ["c"], vnodes=0)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.uuids().map(str), min_size=2, max_size=8, unique=True),
    st.integers(min_value=1, max_value=3),
    st.data(),
)
def test_ring_moves_only_the_departed_slots_topics(slots: list[str], k: int, data: st.DataObject) -> None:
    topics = [TopicSpec(f"topic-{i}", 4, k) for i in range(200)]
    before = ring_assign(topics, slots, vnodes=20)
    leaver = data.draw(st.sampled_from(slots))
    after = ring_assign(topics, [s for s in slots if s != leaver], vnodes=20)
    for t in topics:
        old, new = before.owners_of(t.topic_id), after.owners_of(t.topic_id)
        assert len(new) == len(set(new)) == min(k, len(slots) - 1)
        if leaver not in old:
            assert new == old
