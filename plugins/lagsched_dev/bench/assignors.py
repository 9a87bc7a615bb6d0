"""Baseline assignors that the rendezvous assignment is benchmarked against.

Why keep them: the benchmark should compare with what people actually run.

* ``ring_assign``: consistent hashing with virtual nodes (seed 001). Each slot
  puts ``vnodes`` points on a 64-bit ring; a topic's owners are the first
  ``linker_workers`` distinct slots clockwise from the topic's hash. Like HRW
  it moves only the departed slot's topics, but they go to the ring
  neighbours of its points rather than to every slot.
* ``range_assign`` and ``roundrobin_assign``: Kafka's default assignors as seed
  002 (Signal) describes them, with every consumer subscribed to every topic.
  Consumers are sorted lexicographically, which is why ``application01-...``
  gets the leftovers of every topic under range.

Topics are ordered by ``topic_id`` where Kafka orders by topic name; callers
that care pass the name as the id.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import mmh3

from lagsched.core.rendezvous import (
    SLOT_SEED,
    Assignment,
    AssignmentError,
    TopicSpec,
    check_id,
    topic_hash,
)

__all__ = [
    "DEFAULT_VNODES",
    "PartitionMap",
    "range_assign",
    "ring_assign",
    "roundrobin_assign",
]

#: Virtual nodes per slot on the consistent-hash ring, as in the benchmark.
DEFAULT_VNODES = 100

#: (topic_id, partition) -> consumer or slot id.
PartitionMap = dict[tuple[str, int], str]


def _sorted_unique(ids: Sequence[str], what: str) -> list[str]:
    # Ids are hashed (ring) or compared (range, roundrobin); check_id rejects what would crash
    # mmh3 (a lone surrogate) or sort as nonsense (a non-str), naming the value.
    for i in ids:
        check_id(i, f"{what} id")
    ordered = sorted(ids)
    if not ordered:
        raise AssignmentError(f"no {what}s; at least one {what} is needed")
    if len(set(ordered)) != len(ordered):
        raise AssignmentError(f"{what} ids repeat; they must be unique")
    return ordered


def ring_assign(topics: Sequence[TopicSpec], slot_ids: Sequence[str], vnodes: int = DEFAULT_VNODES) -> Assignment:
    """Consistent-hash ring: first ``min(linker_workers, N)`` distinct slots clockwise.

    Point ``v`` of slot ``s`` sits at ``mmh3.hash64(f"{s}#{v}", SLOT_SEED)``; a
    topic sits at ``topic_hash(topic_id)``.

    >>> a = ring_assign([TopicSpec("t", 4, 2)], ["s1", "s2", "s3"])
    >>> len(set(a.owners_of("t")))
    2
    """
    if vnodes < 1:
        raise AssignmentError(f"vnodes={vnodes}; must be >= 1")
    slots = _sorted_unique(slot_ids, "slot")
    points = sorted((mmh3.hash64(f"{s}#{v}", seed=SLOT_SEED, signed=False)[0], s) for s in slots for v in range(vnodes))
    keys = [p for p, _ in points]
    owners: dict[str, tuple[str, ...]] = {}
    for spec in topics:
        k = min(spec.linker_workers, len(slots))
        start = bisect.bisect_left(keys, topic_hash(spec.topic_id))
        chosen: list[str] = []
        step = 0
        while len(chosen) < k:
            s = points[(start + step) % len(points)][1]
            if s not in chosen:
                chosen.append(s)
            step += 1
        owners[spec.topic_id] = tuple(chosen)
    return Assignment(owners)


def range_assign(topics: Sequence[TopicSpec], consumer_ids: Sequence[str]) -> PartitionMap:
    """Kafka's RangeAssignor with every consumer subscribed to every topic.

    Per topic, partitions in numeric order are cut into contiguous ranges over
    the consumers in lexicographic order; the first ``P % C`` consumers get
    one extra partition.

    >>> range_assign([TopicSpec("t0", 3)], ["c2", "c1"])
    {('t0', 0): 'c1', ('t0', 1): 'c1', ('t0', 2): 'c2'}
    """
    consumers = _sorted_unique(consumer_ids, "consumer")
    c = len(consumers)
    result: PartitionMap = {}
    for spec in sorted(topics, key=lambda t: t.topic_id):
        per, extra = divmod(spec.partitions, c)
        p = 0
        for i, consumer in enumerate(consumers):
            for _ in range(per + (1 if i < extra else 0)):
                result[(spec.topic_id, p)] = consumer
                p += 1
    return result


def roundrobin_assign(topics: Sequence[TopicSpec], consumer_ids: Sequence[str]) -> PartitionMap:
    """Kafka's RoundRobinAssignor with every consumer subscribed to every topic.

    All topic-partitions, sorted by topic then partition, are dealt one at a
    time over the consumers in lexicographic order.

    >>> roundrobin_assign([TopicSpec("t0", 2), TopicSpec("t1", 2)], ["c1", "c2"])
    {('t0', 0): 'c1', ('t0', 1): 'c2', ('t1', 0): 'c1', ('t1', 1): 'c2'}
    """
    consumers = _sorted_unique(consumer_ids, "consumer")
    result: PartitionMap = {}
    m = 0
    for spec in sorted(topics, key=lambda t: t.topic_id):
        for p in range(spec.partitions):
            result[(spec.topic_id, p)] = consumers[m % len(consumers)]
            m += 1
    return result
