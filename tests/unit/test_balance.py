"""Balanced HRW: owner counts, the movement allowance, the capacity bound, determinism, churn."""

from __future__ import annotations

import math
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagsched.core.balance import DEFAULT_EPS, DEFAULT_MOVE_SLACK, balanced_assign, slot_loads
from lagsched.core.rendezvous import Assignment, AssignmentError, TopicSpec, lane_loads, partition_map

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
    """The documented worst case: max(keep, max over lanes of (total - l)/(N - k + 1) + l)."""
    total = sum(t.load for t in topics)
    bound = (1 + eps) * total / n
    for t in topics:
        k = min(t.linker_workers, n)
        for lane in lane_loads(t, k):
            bound = max(bound, (total - lane) / (n - k + 1) + lane)
    return bound


def _check_owners(topics: list[TopicSpec], slots: list[str], a: Assignment) -> None:
    for t in topics:
        got = a.owners_of(t.topic_id)
        assert len(got) == len(set(got)) == min(t.linker_workers, len(slots))
        assert set(got) <= set(slots)


def _check(topics: list[TopicSpec], slots: list[str], a: Assignment, eps: float) -> None:
    _check_owners(topics, slots, a)
    loads = slot_loads(topics, a, slots)
    assert max(loads.values()) <= _bound(topics, len(slots), eps) + 1e-9


def _moved(topics: list[TopicSpec], before: Assignment, after: Assignment) -> int:
    """Partitions whose owner changed, with the sticky split the claim table applies."""
    old = partition_map(topics, before)
    new = partition_map(topics, after, old)
    return sum(1 for key, owner in old.items() if new[key] != owner)


@settings(max_examples=60, deadline=None)
@given(topic_lists, slot_lists, st.sampled_from([0.05, DEFAULT_EPS, 0.25]))
def test_capacity_bound_and_owner_count_from_scratch(topics: list[TopicSpec], slots: list[str], eps: float) -> None:
    _check(topics, slots, balanced_assign(topics, slots, eps=eps), eps)


@settings(max_examples=40, deadline=None)
@given(topic_lists, slot_lists, st.lists(st.booleans(), min_size=1, max_size=4), st.randoms())
def test_capacity_bound_holds_through_churn_when_balance_wins(
    topics: list[TopicSpec], slots: list[str], joins: list[bool], rnd: random.Random
) -> None:
    a = balanced_assign(topics, slots)
    live = list(slots)
    for n, join in enumerate(joins):
        if join or len(live) == 1:
            live.append(f"new-{n}")
        else:
            live.remove(rnd.choice(live))
        a = balanced_assign(topics, live, previous=a, move_slack=math.inf)
        _check(topics, live, a, DEFAULT_EPS)


@settings(max_examples=80, deadline=None)
@given(
    topic_lists,
    st.lists(st.uuids().map(str), min_size=5, max_size=12, unique=True),
    st.sampled_from(["leave", "join", "both"]),
    st.sampled_from([0.0, DEFAULT_MOVE_SLACK, 0.5]),
    st.randoms(),
)
def test_movement_never_exceeds_the_allowance(
    topics: list[TopicSpec], slots: list[str], change: str, slack: float, rnd: random.Random
) -> None:
    # The proved guarantee: moved <= (1 + move_slack) * (H + J * mean), where H is what the
    # departed slot held and J the slots the previous assignment did not list. With at least 5
    # slots and linker_workers <= 4 the lane count of every topic stays put, so moved partitions
    # are exactly moved lane loads.
    before = balanced_assign(topics, slots)
    live = list(slots)
    held = 0.0
    if change in ("leave", "both"):
        leaver = rnd.choice(live)
        live.remove(leaver)
        held = slot_loads(topics, before, slots)[leaver]
    if change in ("join", "both"):
        live.append(str(uuid.UUID(int=rnd.getrandbits(128))))
    after = balanced_assign(topics, live, previous=before, move_slack=slack)
    _check_owners(topics, live, after)
    listed = {s for _, owners in before for s in owners}
    mean = sum(t.load for t in topics) / len(live)
    ideal = held + sum(1 for s in live if s not in listed) * mean
    allowance = (1 + slack) * ideal if ideal > 0 else mean
    assert _moved(topics, before, after) <= allowance + 1e-9


@settings(max_examples=40, deadline=None)
@given(topic_lists, slot_lists, st.randoms())
def test_recomputing_from_an_unchanged_input_changes_nothing(
    topics: list[TopicSpec], slots: list[str], rnd: random.Random
) -> None:
    a = balanced_assign(topics, slots)
    assert balanced_assign(topics, slots, previous=a) == a
    shuffled_topics, shuffled_slots = list(topics), list(slots)
    rnd.shuffle(shuffled_topics)
    rnd.shuffle(shuffled_slots)
    assert balanced_assign(shuffled_topics, shuffled_slots) == a


@settings(max_examples=30, deadline=None)
@given(topic_lists, st.lists(st.uuids().map(str), min_size=2, max_size=12, unique=True), st.randoms())
def test_a_sticky_result_does_not_depend_on_input_order(
    topics: list[TopicSpec], slots: list[str], rnd: random.Random
) -> None:
    before = balanced_assign(topics, slots)
    live = [*slots[1:], "joiner"]
    after = balanced_assign(topics, live, previous=before)
    shuffled_topics, shuffled_live = list(topics), list(live)
    rnd.shuffle(shuffled_topics)
    rnd.shuffle(shuffled_live)
    reordered_previous = Assignment(dict(reversed(list(before.owners.items()))))
    assert balanced_assign(shuffled_topics, shuffled_live, previous=reordered_previous) == after


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


def test_a_leave_moves_the_departed_slots_lanes_and_little_else() -> None:
    topics, slots = _skewed(2)
    before = balanced_assign(topics, slots)
    leaver = slots[7]
    after = balanced_assign(topics, [s for s in slots if s != leaver], previous=before)
    held = slot_loads(topics, before, slots)[leaver]
    # Survivors move only within the allowance: move_slack times what the departed slot held.
    survivors_moved = 0.0
    for t in topics:
        old, new = before.owners_of(t.topic_id), after.owners_of(t.topic_id)
        for lane, was, now in zip(lane_loads(t, len(new)), old, new, strict=True):
            if was != leaver and now != was:
                survivors_moved += lane
    assert survivors_moved <= DEFAULT_MOVE_SLACK * held + 1e-9
    for t in topics:
        assert leaver not in after.owners_of(t.topic_id)


def test_a_join_fills_the_new_slot_to_about_its_share() -> None:
    topics, slots = _skewed(3)
    before = balanced_assign(topics, slots)
    after = balanced_assign(topics, [*slots, "slot-new"], previous=before)
    loads = slot_loads(topics, after, [*slots, "slot-new"])
    mean = sum(loads.values()) / len(loads)
    assert (1 - DEFAULT_EPS) * mean <= loads["slot-new"] <= mean


# --------------------------------------------------------------------------- issue 8's findings
#
# Issue 8's uneven workload: ~100 topics with power-law partition counts 1..128, linker_workers
# 1..4 skewed toward 1, 13 slots, 20 random draws of slot ids. Before the fix a sticky join moved
# up to 2.2x the ideal (old slots shed lanes to each other, not only to the newcomer), a sticky
# leave up to 2.2x, and max/mean after a join reached 1.16 (relieve never moved a lane when the
# receiver would end above the giver's load).

DRAWS = range(20)


def _uneven_topics() -> list[TopicSpec]:
    rng = random.Random(13)
    sizes = range(1, 129)
    weights = [p**-1.2 for p in sizes]
    return [
        TopicSpec(
            str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            rng.choices(sizes, weights)[0],
            rng.choices((1, 2, 3, 4), (8, 4, 2, 1))[0],
        )
        for _ in range(100)
    ]


def _uneven_slots(draw: int, n: int = 14) -> list[str]:
    rng = random.Random(f"slots/{draw}")
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]


def _uneven_join(draw: int) -> tuple[list[TopicSpec], list[str], Assignment, Assignment]:
    topics = _uneven_topics()
    *slots, joiner = _uneven_slots(draw)
    before = balanced_assign(topics, slots)
    grown = [*slots, joiner]
    return topics, grown, before, balanced_assign(topics, grown, previous=before)


@pytest.mark.parametrize("draw", DRAWS)
def test_uneven_join_moves_at_most_1_2x_ideal(draw: int) -> None:
    topics, grown, before, after = _uneven_join(draw)
    mean = sum(t.partitions for t in topics) / len(grown)
    assert _moved(topics, before, after) <= 1.2 * mean


@pytest.mark.parametrize("draw", DRAWS)
def test_uneven_join_leaves_max_over_mean_at_most_1_10(draw: int) -> None:
    topics, grown, _, after = _uneven_join(draw)
    loads = slot_loads(topics, after, grown)
    mean = sum(loads.values()) / len(grown)
    assert max(loads.values()) <= 1.10 * mean + 1e-9


@pytest.mark.parametrize("draw", DRAWS)
def test_uneven_leave_moves_at_most_1_2x_ideal(draw: int) -> None:
    topics = _uneven_topics()
    slots = _uneven_slots(draw, 13)
    before = balanced_assign(topics, slots)
    held = slot_loads(topics, before, slots)
    for leaver in slots:
        after = balanced_assign(topics, [s for s in slots if s != leaver], previous=before)
        assert _moved(topics, before, after) <= 1.2 * held[leaver] + 1e-9, leaver


def test_uneven_leave_spends_the_allowance_on_the_peak() -> None:
    # Draw 0, the slot holding the 82-partition lane leaves: no slot has room for it, so whoever
    # takes it sheds what the allowance (0.2 x 108) pays for. Within it the peak can get no lower
    # than the lightest eligible slot plus the lane minus the allowance; balance-first (unlimited
    # allowance) gets lower only by moving far more.
    topics = _uneven_topics()
    slots = _uneven_slots(0, 13)
    before = balanced_assign(topics, slots)
    big = max(topics, key=lambda t: max(lane_loads(t, min(t.linker_workers, 13))))
    leaver = before.owners_of(big.topic_id)[0]
    rest = [s for s in slots if s != leaver]
    held = slot_loads(topics, before, slots)
    after = balanced_assign(topics, rest, previous=before)
    lane = max(lane_loads(big, min(big.linker_workers, 12)))
    floor_of_peak = min(held[s] for s in rest) + lane - DEFAULT_MOVE_SLACK * held[leaver]
    peak = max(slot_loads(topics, after, rest).values())
    assert peak <= floor_of_peak + 0.1 * held[leaver]
    unlimited = balanced_assign(topics, rest, previous=before, move_slack=math.inf)
    assert max(slot_loads(topics, unlimited, rest).values()) < peak
    assert _moved(topics, before, unlimited) > _moved(topics, before, after)


def test_the_next_join_heals_a_leave_the_allowance_left_overloaded() -> None:
    topics = _uneven_topics()
    slots = _uneven_slots(0, 13)
    before = balanced_assign(topics, slots)
    big = max(topics, key=lambda t: max(lane_loads(t, min(t.linker_workers, 13))))
    rest = [s for s in slots if s != before.owners_of(big.topic_id)[0]]
    left = balanced_assign(topics, rest, previous=before)
    loads = slot_loads(topics, left, rest)
    assert max(loads.values()) > 1.3 * sum(loads.values()) / len(rest)  # the allowance ran out
    grown = [*rest, "joiner"]
    joined = balanced_assign(topics, grown, previous=left)
    loads = slot_loads(topics, joined, grown)
    assert max(loads.values()) <= 1.10 * sum(loads.values()) / len(grown)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eps": 0}, "eps=0"),
        ({"eps": math.inf}, "eps=inf"),
        ({"eps": True}, "eps=True"),
        ({"move_slack": -0.1}, "move_slack=-0.1"),
        ({"move_slack": math.nan}, "move_slack=nan"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(AssignmentError, match=message):
        balanced_assign([TopicSpec("t", 1)], ["a"], **kwargs)


@pytest.mark.parametrize(
    ("slots", "message"),
    [
        ([], "no live slots"),
        (["a", "a"], "'a' appears twice"),
        (["a", ""], "slot id '' is empty"),
        (["a", "\ud800"], r"slot id '\\ud800' is not valid Unicode"),
        (["a", 7], "slot id 7 is a int"),
    ],
)
def test_rejects_bad_slot_ids_naming_the_value(slots: list[str], message: str) -> None:
    with pytest.raises(AssignmentError, match=message):
        balanced_assign([TopicSpec("t", 1)], slots)


def test_rejects_repeated_topics_and_non_specs() -> None:
    with pytest.raises(AssignmentError, match="'t' appears twice"):
        balanced_assign([TopicSpec("t", 1), TopicSpec("t", 2)], ["a"])
    with pytest.raises(AssignmentError, match="expected a TopicSpec"):
        balanced_assign(["t"], ["a"])  # type: ignore[list-item]
