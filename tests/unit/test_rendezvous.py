"""Plain HRW: pinned placements, agreement across processes, movement on leave and join."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagsched.core import rendezvous
from lagsched.core.rendezvous import (
    Assignment,
    AssignmentError,
    TopicSpec,
    assign,
    fair_share,
    fmix64,
    owners,
    partition_map,
    rank_matrix,
    rank_slots,
    score,
    scores_matrix,
    slot_hash,
    split_partitions,
    top_k_from_scores,
    top_k_matrix,
    topic_hash,
)

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SLOTS = ["slot-1", "slot-2", "slot-3", "slot-4", "slot-5"]

# A change to the seeds, the hash or the mixing reshuffles every topic in the
# fleet at once; these rows make such a change fail loudly.
PINNED_RANKINGS = [
    ("topic-a", ["slot-3", "slot-5", "slot-2", "slot-4", "slot-1"]),
    ("topic-b", ["slot-3", "slot-2", "slot-4", "slot-1", "slot-5"]),
    ("orders", ["slot-5", "slot-1", "slot-2", "slot-4", "slot-3"]),
    ("9b2f6a3e-0c1d-4e5f-8a7b-6c5d4e3f2a1b", ["slot-2", "slot-4", "slot-3", "slot-5", "slot-1"]),
]

slot_ids = st.lists(
    st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12), min_size=1, max_size=12, unique=True
)


def test_hash_values_are_pinned() -> None:
    assert topic_hash("topic-a") == 14190049594329355509
    assert slot_hash("slot-1") == 11674963883358371666
    assert score("topic-a", "slot-1") == 6939209933928665130


@pytest.mark.parametrize(("topic", "ranking"), PINNED_RANKINGS)
def test_rankings_are_pinned(topic: str, ranking: list[str]) -> None:
    assert rank_slots(topic, SLOTS) == ranking
    assert rank_slots(topic, list(reversed(SLOTS))) == ranking


@pytest.mark.parametrize(("topic", "ranking"), PINNED_RANKINGS)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_owners_are_the_top_k(topic: str, ranking: list[str], k: int) -> None:
    assert owners(topic, SLOTS, k) == ranking[:k]


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=50))
def test_numpy_fmix64_matches_python(values: list[int]) -> None:
    arr = np.array(values, dtype=np.uint64)
    assert rendezvous._fmix64_np(arr).tolist() == [fmix64(v) for v in values]


@given(st.lists(st.uuids().map(str), min_size=1, max_size=8, unique=True), slot_ids)
def test_scores_matrix_matches_score(topics: list[str], slots: list[str]) -> None:
    m = scores_matrix(topics, slots)
    assert m.tolist() == [[score(t, s) for s in slots] for t in topics]


@settings(max_examples=50)
@given(
    st.lists(st.uuids().map(str), min_size=1, max_size=30, unique=True),
    slot_ids,
    st.integers(min_value=1, max_value=6),
)
def test_assign_equals_per_topic_owners(topics: list[str], slots: list[str], k: int) -> None:
    a = assign([TopicSpec(t, 4, k) for t in topics], slots)
    for t in topics:
        got = a.owners_of(t)
        assert list(got) == owners(t, slots, k)
        assert len(set(got)) == len(got) == min(k, len(slots))


def test_rank_matrix_and_top_k_match_rank_slots() -> None:
    topics = [f"t{i}" for i in range(40)]
    ordered = sorted(f"s{i}" for i in range(9))
    full = rank_matrix(topics, ordered)
    top = top_k_matrix(topics, ordered, 3)
    for i, t in enumerate(topics):
        expected = rank_slots(t, ordered)
        assert [ordered[j] for j in full[i]] == expected
        assert [ordered[j] for j in top[i]] == expected[:3]


def test_top_k_breaks_score_ties_by_slot_id() -> None:
    tied = np.array([[5, 9, 9, 9, 1], [9, 9, 1, 2, 3]], dtype=np.uint64)
    assert top_k_from_scores(tied, 2).tolist() == [[1, 2], [0, 1]]
    assert top_k_from_scores(tied, 5).tolist() == [[1, 2, 3, 0, 4], [0, 1, 4, 3, 2]]


def test_ranking_is_identical_in_another_process() -> None:
    topics = [f"topic-{i}" for i in range(30)]
    code = (
        "import json, sys; from lagsched.core.rendezvous import rank_slots; "
        f"print(json.dumps([rank_slots(t, {SLOTS!r}) for t in {topics!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": str(PLUGINS), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == [rank_slots(t, SLOTS) for t in topics]


def _topics(n: int, k: int) -> list[TopicSpec]:
    return [TopicSpec(f"topic-{i:05d}", 8, k) for i in range(n)]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.uuids().map(str), min_size=3, max_size=8, unique=True),
    st.integers(min_value=1, max_value=2),
    st.data(),
)
def test_leave_moves_only_the_departed_slots_topics_and_spreads_them(
    slots: list[str], k: int, data: st.DataObject
) -> None:
    topics = _topics(300 * len(slots), k)
    leaver = data.draw(st.sampled_from(slots))
    before = assign(topics, slots)
    after = assign(topics, [s for s in slots if s != leaver])
    takers: Counter[str] = Counter()
    for t in topics:
        old, new = before.owners_of(t.topic_id), after.owners_of(t.topic_id)
        if leaver not in old:
            assert new == old
            continue
        survivors = tuple(o for o in old if o != leaver)
        assert new[: len(survivors)] == survivors  # the others keep their places
        (taker,) = set(new) - set(old)
        assert taker == rank_slots(t.topic_id, slots)[k]  # next in the ranking
        takers[taker] += 1
    assert set(takers) == set(slots) - {leaver}


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.uuids().map(str), min_size=2, max_size=8, unique=True),
    st.uuids().map(str),
    st.integers(min_value=1, max_value=2),
)
def test_join_takes_load_only_onto_the_new_slot_and_from_all_others(slots: list[str], joiner: str, k: int) -> None:
    if joiner in slots:
        return
    topics = _topics(300 * (len(slots) + 1), k)
    before = assign(topics, slots)
    after = assign(topics, [*slots, joiner])
    givers: Counter[str] = Counter()
    for t in topics:
        old, new = before.owners_of(t.topic_id), after.owners_of(t.topic_id)
        if joiner not in new:
            assert new == old
            continue
        assert set(new) - set(old) == {joiner}
        (giver,) = set(old) - set(new)
        assert giver == old[-1]  # the weakest owner gives way
        givers[giver] += 1
    assert set(givers) == set(slots)


@pytest.mark.parametrize(
    ("partitions", "n_owners", "shares"),
    [(5, 2, [3, 2]), (4, 4, [1, 1, 1, 1]), (2, 3, [1, 1, 0]), (0, 2, [0, 0]), (64, 3, [22, 21, 21])],
)
def test_fair_share_is_floor_or_ceil(partitions: int, n_owners: int, shares: list[int]) -> None:
    assert [fair_share(partitions, n_owners, i) for i in range(n_owners)] == shares


def test_split_keeps_survivors_and_gives_the_dead_owners_rows_to_the_replacement() -> None:
    first = split_partitions(7, ["a", "b", "c"])
    assert first == {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    # "b" dies and "d", next in the ranking, takes its lane position.
    second = split_partitions(7, ["a", "d", "c"], first)
    assert {p: o for p, o in second.items() if first[p] != o} == {3: "d", 4: "d"}


@given(
    st.integers(min_value=0, max_value=40),
    st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True),
    st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True),
)
def test_split_gives_every_owner_its_fair_share(partitions: int, first: list[str], second: list[str]) -> None:
    prev = split_partitions(partitions, first)
    new = split_partitions(partitions, second, prev)
    counts = Counter(new.values())
    assert sorted(new) == list(range(partitions))
    for i, o in enumerate(second):
        assert counts[o] == fair_share(partitions, len(second), i)
    # Nothing moves between two owners that both keep their share.
    for p, o in prev.items():
        if o in second and new[p] != o:
            assert counts[o] == fair_share(partitions, len(second), second.index(o))


def test_partition_map_covers_every_partition() -> None:
    topics = [TopicSpec("t1", 5, 2), TopicSpec("t2", 1, 1)]
    a = Assignment({"t1": ("x", "y"), "t2": ("y",)})
    assert partition_map(topics, a) == {
        ("t1", 0): "x",
        ("t1", 1): "x",
        ("t1", 2): "x",
        ("t1", 3): "y",
        ("t1", 4): "y",
        ("t2", 0): "y",
    }


def test_assignment_lookups() -> None:
    a = Assignment({"t2": ("x", "y"), "t1": ("y",)})
    assert a.topics_of("y") == ("t1", "t2")
    assert a.owners_of("t9") == ()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TopicSpec("", 1), "topic_id '' is empty"),
        (lambda: TopicSpec("\ud800", 1), r"topic_id '\\ud800' is not valid Unicode"),
        (lambda: TopicSpec(7, 1), "topic_id 7 is a int"),  # type: ignore[arg-type]
        (lambda: TopicSpec("t", -1), "partitions=-1"),
        (lambda: TopicSpec("t", 2.5), r"partitions=2\.5; must be an int"),  # type: ignore[arg-type]
        (lambda: TopicSpec("t", True), "partitions=True; must be an int"),
        (lambda: TopicSpec("t", 1, 0), "linker_workers=0"),
        (lambda: TopicSpec("t", 1, True), "linker_workers=True; must be an int"),
        (lambda: TopicSpec("t", 1, 2.0), r"linker_workers=2\.0; must be an int"),  # type: ignore[arg-type]
        (lambda: TopicSpec("t", 1, 1, 0.0), "weight=0.0"),
        (lambda: TopicSpec("t", 1, 1, math.inf), "weight=inf; must be a finite number"),
        (lambda: TopicSpec("t", 1, 1, math.nan), "weight=nan"),
        (lambda: TopicSpec("t", 1, 1, True), "weight=True"),
        (lambda: TopicSpec("t", 10, 1, 1e308), "overflows"),
        (lambda: rank_slots("t", ["a", "a"]), "'a' appears twice"),
        (lambda: rank_slots("t", ["a", ""]), "slot id '' is empty"),
        (lambda: owners("t", ["\udfff"], 1), r"slot id '\\udfff' is not valid Unicode"),
        (lambda: owners("t", ["a"], True), "linker_workers=True"),
        (lambda: assign([TopicSpec("t", 1)], []), "no live slots"),
        (lambda: assign([TopicSpec("t", 1)], ["ok", "x\ud800y"]), "is not valid Unicode"),
        (lambda: assign([TopicSpec("t", 1), TopicSpec("t", 2)], ["a"]), "'t' appears twice"),
        (lambda: owners("t", ["a"], 0), "linker_workers=0"),
        (lambda: slot_hash(""), "slot id '' is empty"),
        (lambda: topic_hash("\ud800"), "topic id"),
        (lambda: scores_matrix(["t"], ["\ud800"]), "not valid Unicode"),
    ],
)
def test_bad_input_names_the_value(make: Callable[[], object], message: str) -> None:
    with pytest.raises(AssignmentError, match=message):
        make()


def test_a_lone_surrogate_is_an_error_not_a_crash() -> None:
    # mmh3 5.3.1 dies with SIGSEGV on a str holding a lone surrogate; the whole process (a worker
    # slot, an Airflow task) went with it. Run where a crash cannot take the test run down.
    code = (
        "from lagsched.core.rendezvous import TopicSpec, assign\n"
        "try:\n"
        "    assign([TopicSpec('t', 1)], ['\\ud800'])\n"
        "except ValueError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.startswith("AssignmentError slot id '\\ud800' is not valid Unicode")


def test_ids_hash_as_their_utf8_bytes() -> None:
    # Validation encodes ids before hashing; scores of non-ASCII ids must not change by it.
    import mmh3

    for text in ["topic-a", "café", "主题", "emoji-\U0001f600"]:
        assert topic_hash(text) == mmh3.hash64(text, seed=rendezvous.TOPIC_SEED, signed=False)[0]
        assert slot_hash(text) == mmh3.hash64(text, seed=rendezvous.SLOT_SEED, signed=False)[0]
