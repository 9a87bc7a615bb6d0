"""Rack-aware routing rules (lagsched.core.rack): the producer's partition choice and the consumers'
rack targets."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagsched.core.claims import PartitionRow, rows_to_release
from lagsched.core.rack import (
    RackOwner,
    RackPartitioner,
    candidate_partitions,
    choose_partition,
    kafka_key_partition,
    murmur2,
    rack_targets,
    spans_racks,
)
from lagsched.core.rendezvous import fair_share

# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

#: 120 partitions led round the three racks, as the benchmark's topic.
LEADERS = {p: "abc"[p % 3] for p in range(120)}


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2)
def test_murmur2_matches_kafkas_java_implementation(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_kafka_key_partition_is_the_java_default_partitioners_choice() -> None:
    # (murmur2 & 0x7fffffff) % n, as BuiltInPartitioner.partitionForKey
    assert kafka_key_partition(b"21", 120) == (-973932308 & 0x7FFFFFFF) % 120
    assert kafka_key_partition("21", 120) == kafka_key_partition(b"21", 120)
    with pytest.raises(ValueError, match="at least one partition"):
        kafka_key_partition("k", 0)


def test_candidates_are_the_partitions_led_from_the_own_rack() -> None:
    assert candidate_partitions(LEADERS, "b") == tuple(range(1, 120, 3))


@pytest.mark.parametrize(
    ("leaders", "rack"),
    [
        ({0: "b", 1: "c"}, "a"),  # no leader in the producer's rack (its broker is down)
        ({0: None, 1: None}, "a"),  # no leaders at all / brokers without broker.rack
        ({0: "a", 1: "b"}, None),  # the producer has no rack
    ],
)
def test_candidates_fall_back_to_every_partition(leaders: dict[int, str | None], rack: str | None) -> None:
    assert candidate_partitions(leaders, rack) == (0, 1)


def test_keyed_records_stay_in_the_rack_and_keep_their_partition() -> None:
    local = set(range(0, 120, 3))
    for i in range(500):
        key = f"customer-{i}"
        p = choose_partition(LEADERS, "a", key, counter=i)
        assert p in local
        assert choose_partition(LEADERS, "a", key, counter=i + 7) == p  # the counter is for keyless ones
    spread = Counter(choose_partition(LEADERS, "a", f"k{i}", 0) for i in range(4000))
    assert set(spread) == local  # every local partition gets keys: the hash spreads over all 40


def test_keyed_fallback_is_kafkas_default_partitioner() -> None:
    elsewhere = {p: "bc"[p % 2] for p in range(12)}
    for i in range(100):
        assert choose_partition(elsewhere, "a", f"k{i}", 0) == kafka_key_partition(f"k{i}", 12)


def test_keyless_records_round_robin_over_the_local_partitions() -> None:
    rp = RackPartitioner("c")
    picks = [rp.partition("t", LEADERS, None) for _ in range(80)]
    assert picks[:40] == list(range(2, 120, 3))
    assert picks[40:] == picks[:40]
    # one counter per topic
    assert rp.partition("other", LEADERS, None) == 2


def test_choose_partition_without_partitions_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="refresh"):
        choose_partition({}, "a", None, 0)


def test_a_leader_move_moves_keys_only_within_the_rack() -> None:
    # Partition 0 (rack a) moves its leader to rack b: keys of rack a's producer re-hash over 39.
    moved = dict(LEADERS)
    moved[0] = "b"
    before = {i: choose_partition(LEADERS, "a", f"k{i}", 0) for i in range(1000)}
    after = {i: choose_partition(moved, "a", f"k{i}", 0) for i in range(1000)}
    assert all(p != 0 and LEADERS[p] == "a" for p in after.values())
    changed = sum(before[i] != after[i] for i in before)
    assert changed > 500  # most keys change partition: why docs/rack.md warns about ordering


# ----------------------------------------------------------------------------- rack targets


def _owners(racks: list[str | None], partitions: int) -> list[RackOwner]:
    k = len(racks)
    return [RackOwner(f"s{i}", r, fair_share(partitions, k, i)) for i, r in enumerate(racks)]


def test_one_owner_per_rack_gets_exactly_its_racks_partitions() -> None:
    targets = rack_targets(LEADERS, _owners(["a", "b", "c"], 120))
    assert targets == {
        "s0": frozenset(range(0, 120, 3)),
        "s1": frozenset(range(1, 120, 3)),
        "s2": frozenset(range(2, 120, 3)),
    }


def test_owners_in_one_rack_or_none_get_no_targets() -> None:
    assert rack_targets(LEADERS, _owners(["a", "a"], 120)) == {}
    assert rack_targets(LEADERS, _owners([None, None, "b"], 120)) == {}
    assert not spans_racks(_owners(["a", None], 4))


def test_unmatched_racks_and_leaderless_partitions_go_to_owners_with_room() -> None:
    leaders: dict[int, str | None] = {0: "a", 1: "a", 2: "a", 3: "c", 4: None, 5: "b"}
    targets = rack_targets(leaders, [RackOwner("x", "a", 2), RackOwner("y", "b", 2), RackOwner("z", None, 2)])
    assert targets["y"] >= {5}
    assert len(targets["x"]) == len(targets["y"]) == len(targets["z"]) == 2
    assert targets["x"] <= {0, 1, 2}


racks_st = st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    owner_racks=racks_st,
    leader_list=st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=0, max_size=60),
    seed=st.integers(0, 2**32),
)
def test_targets_keep_fair_shares_and_prefer_the_own_rack(
    owner_racks: list[str | None], leader_list: list[str | None], seed: int
) -> None:
    leaders = dict(enumerate(leader_list))
    owners = _owners(owner_racks, len(leaders))
    targets = rack_targets(leaders, owners)
    if not spans_racks(owners):
        assert targets == {}
        return
    # Exactly the fair share each (the balance of the assignment holds), disjoint, covering all.
    assert {o.slot_id: len(targets[o.slot_id]) for o in owners} == {o.slot_id: o.share for o in owners}
    assigned = [p for t in targets.values() for p in t]
    assert sorted(assigned) == sorted(leaders)
    # Never an other-rack partition for an owner while a partition led from its rack went elsewhere.
    owner_of = {p: s for s, ps in targets.items() for p in ps}
    rack_of = {o.slot_id: o.rack for o in owners}
    for o in owners:
        if o.rack is None:
            continue
        foreign = [p for p in targets[o.slot_id] if leaders[p] != o.rack]
        lost_local = [p for p, r in leaders.items() if r == o.rack and rack_of[owner_of[p]] != o.rack]
        assert not (foreign and lost_local), (o, foreign, lost_local)
    # Independent of the owners' order.
    shuffled = list(owners)
    random.Random(seed).shuffle(shuffled)
    assert rack_targets(leaders, shuffled) == targets


def test_rows_outside_the_target_are_handed_over_before_the_excess() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    held = [PartitionRow("t", p, claimed_by="s", claim_epoch=1, lease_expires_at=t) for p in range(6)]
    # share 3, target {1, 3, 5, 7}: 0, 2, 4 go (not in the target); 1, 3, 5 stay (within the share)
    assert [c.partition_id for c in rows_to_release({"t": 3}, held, {"t": {1, 3, 5, 7}})] == [0, 2, 4]
    # share 2: the highest target row goes as excess
    assert [c.partition_id for c in rows_to_release({"t": 2}, held, {"t": {1, 3, 5}})] == [0, 2, 4, 5]
    # topics without a target follow the plain rule
    assert [c.partition_id for c in rows_to_release({"t": 4}, held, {"other": {0}})] == [4, 5]
