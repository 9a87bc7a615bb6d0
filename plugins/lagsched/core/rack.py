"""Rack-aware routing rules (seed 004, docs/rack.md), with no Kafka client in sight.

Kafka tells every client each broker's rack (``broker.rack``) and each partition's leader. Traffic
that crosses racks (availability zones) is slower and billed, so:

* **Producing** (``choose_partition``, ``RackPartitioner``): keep the partitions whose leader is in
  the producer's own rack; pick among them by the key's hash (Kafka's murmur2, as the Java
  client's default partitioner) or round-robin without a key. When no partition's leader is in the
  rack, or the metadata is missing, every partition is a candidate (the fallback), so records are
  never held back for want of a local leader.
* **Consuming** (``rack_targets``): when a topic's owners span racks, which partitions each owner
  should hold: those led from its own rack first, within the owner's fair share, then the rest.
  The share per owner is an input, so the balance of the assignment is untouched.

Key ordering: a key maps to ``same_rack[murmur2(key) % len(same_rack)]``. While the leaders stay
put this is stable, so a key's records keep their order. A leader move changes ``same_rack`` (a
partition joins or leaves the producer's rack), and with it the partition of most keys: records
of one key written before and after the move can land in two partitions and be read out of order.
Applications that need strict per-key order across leader changes must use Kafka's default
partitioner instead (``murmur2(key) % all partitions``), which never depends on leaders.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "RackOwner",
    "RackPartitioner",
    "candidate_partitions",
    "choose_partition",
    "kafka_key_partition",
    "murmur2",
    "rack_targets",
    "spans_racks",
]

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``): a signed 32-bit int.

    The Java client's default partitioner maps a key to ``(murmur2(key) & 0x7fffffff) % n``;
    librdkafka's ``murmur2_random`` partitioner does the same, so keyed records land where a Java
    producer would put them.

    >>> murmur2(b"21"), murmur2(b"foobar")
    (-973932308, -790332482)
    """
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _key_bytes(key: str | bytes) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def kafka_key_partition(key: str | bytes, partitions: int) -> int:
    """Where Kafka's default partitioner puts ``key`` among ``partitions`` (the non-rack-aware choice).

    >>> kafka_key_partition("21", 120)
    60
    """
    if partitions < 1:
        raise ValueError(f"partitions={partitions}; a topic has at least one partition")
    return (murmur2(_key_bytes(key)) & 0x7FFFFFFF) % partitions


def candidate_partitions(leader_racks: Mapping[int, str | None], rack: str | None) -> tuple[int, ...]:
    """The partitions a producer in ``rack`` picks from, sorted: those led from ``rack``, or all.

    ``leader_racks`` maps each partition to its leader's rack (None: no leader, or a broker without
    ``broker.rack``). With no rack of its own, or none of the topic's leaders in it, the producer
    falls back to every partition.

    >>> candidate_partitions({0: "a", 1: "b", 2: "a"}, "a")
    (0, 2)
    >>> candidate_partitions({0: "b", 1: None}, "a")
    (0, 1)
    """
    everything = tuple(sorted(leader_racks))
    if rack is None:
        return everything
    local = tuple(p for p in everything if leader_racks[p] == rack)
    return local or everything


def choose_partition(
    leader_racks: Mapping[int, str | None], rack: str | None, key: str | bytes | None, counter: int
) -> int:
    """The partition for one record: by key hash among the candidates, else the ``counter``-th one.

    ``counter`` is the round-robin position for keyless records (the caller increments it).

    >>> leaders = {p: "abc"[p % 3] for p in range(6)}
    >>> [choose_partition(leaders, "b", None, i) for i in range(3)]
    [1, 4, 1]
    >>> choose_partition(leaders, "b", "21", 0) in (1, 4)
    True
    """
    candidates = candidate_partitions(leader_racks, rack)
    if not candidates:
        raise ValueError("the topic has no partitions in the metadata; refresh it and try again")
    if key is None:
        return candidates[counter % len(candidates)]
    return candidates[(murmur2(_key_bytes(key)) & 0x7FFFFFFF) % len(candidates)]


@dataclass(slots=True)
class RackPartitioner:
    """``choose_partition`` with a round-robin counter per topic (the producer wrapper's state).

    >>> rp = RackPartitioner("a")
    >>> [rp.partition("t", {0: "a", 1: "b", 2: "a"}, None) for _ in range(3)]
    [0, 2, 0]
    """

    rack: str | None
    _counters: dict[str, itertools.count[int]] = field(default_factory=dict)

    def partition(self, topic: str, leader_racks: Mapping[int, str | None], key: str | bytes | None) -> int:
        counter = 0 if key is not None else next(self._counters.setdefault(topic, itertools.count()))
        return choose_partition(leader_racks, self.rack, key, counter)


@dataclass(frozen=True, slots=True)
class RackOwner:
    """One owner of a topic for ``rack_targets``: its slot id, rack (None: unknown) and fair share."""

    slot_id: str
    rack: str | None
    share: int


def spans_racks(owners: Iterable[RackOwner]) -> bool:
    """Whether the owners sit in two racks or more (only then does a preference change anything)."""
    return len({o.rack for o in owners if o.rack is not None}) >= 2


def rack_targets(leader_racks: Mapping[int, str | None], owners: Sequence[RackOwner]) -> dict[str, frozenset[int]]:
    """Which partitions each owner of a topic should hold when its owners span racks.

    Deterministic in its inputs (not in their order), so every owner computes the same targets
    from the same view and each holds its own; nobody needs to know what the others hold.

    1. Per rack, the partitions led from it (sorted) are dealt one at a time to that rack's owners
       (sorted by slot id), each up to its share.
    2. The rest (leaders in racks without an owner, beyond the local owners' shares, or without a
       leader) are dealt the same way to every owner with room left.

    Every owner gets exactly its share when the shares add up to the partitions (as fair shares
    do), so the balance of the assignment holds; an owner never gets an other-rack partition
    while one led from its own rack goes to an owner elsewhere. Owners that do not span racks get
    no targets (``{}``): any partition is as good as another.

    >>> owners = [RackOwner("s1", "a", 2), RackOwner("s2", "b", 2)]
    >>> t = rack_targets({0: "a", 1: "b", 2: "a", 3: "a"}, owners)
    >>> sorted(t["s1"]), sorted(t["s2"])
    ([0, 2], [1, 3])
    """
    if not spans_racks(owners):
        return {}
    ordered = sorted(owners, key=lambda o: o.slot_id)
    room = {o.slot_id: max(0, o.share) for o in ordered}
    got: dict[str, set[int]] = {o.slot_id: set() for o in ordered}
    left: list[int] = []
    for rack in sorted({r for r in leader_racks.values() if r is not None}):
        local = [o.slot_id for o in ordered if o.rack == rack]
        left += _deal(sorted(p for p, r in leader_racks.items() if r == rack), local, room, got)
    left += sorted(p for p, r in leader_racks.items() if r is None)
    _deal(sorted(left), [o.slot_id for o in ordered], room, got)
    return {s: frozenset(ps) for s, ps in got.items()}


def _deal(partitions: Sequence[int], slots: Sequence[str], room: dict[str, int], got: dict[str, set[int]]) -> list[int]:
    """Deal ``partitions`` round-robin over ``slots`` with room; returns those nobody had room for."""
    rest = list(partitions)
    while rest:
        takers = [s for s in slots if room[s] > 0]
        if not takers:
            break
        for s in takers:
            if not rest:
                break
            got[s].add(rest.pop(0))
            room[s] -= 1
    return rest
