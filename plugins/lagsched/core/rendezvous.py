"""Rendezvous (highest random weight) ownership of topics by worker slots.

Why rendezvous: every slot computes the same answer from two lists it can read
cheaply (live slots from Redis, topics from the registry) with no coordinator,
and when a slot leaves only the topics it owned move, spread over all the
others (seeds 000 and 001).

The score of a (topic, slot) pair is derived from MurmurHash3 with fixed seeds,
so it is the same in every process and on every machine (Python's ``hash()`` is
salted per process and must never be used here)::

    topic_hash = mmh3.hash64(topic_id, seed=TOPIC_SEED)[0]    # unsigned 64 bit
    slot_hash  = mmh3.hash64(slot_id,  seed=SLOT_SEED)[0]
    score      = fmix64(topic_hash ^ slot_hash)               # murmur3 finaliser

Hashing each id once and combining with a 64-bit finaliser, instead of hashing
the string ``f"{slot_id}:{topic_id}"`` per pair, is what lets a full
10,000 topics x 1,000 slots assignment run in numpy in well under a second; the
finaliser is a bijection with full avalanche, so per-topic rankings are as
independent as with per-pair hashing. A topic's ranking sorts slots by score,
highest first, ties (practically never seen with 64-bit scores) by slot id.
The top ``linker_workers`` live slots own the topic; when an owner dies, the
next slot in the ranking takes over, and nothing else changes.

Within a topic, its partitions are split among the owners in lane order: the
owner at position ``i`` gets ``floor(P/k)`` partitions, plus one if
``i < P % k`` (``fair_share``). ``split_partitions`` turns that into concrete
partition ids and, given the previous split (what the claim table holds), keeps
every partition with its current owner whenever that owner still owns the topic
and is within its share, which is what the claim protocol does in practice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import mmh3
import numpy as np
import numpy.typing as npt

from lagsched.core.errors import LagschedError

__all__ = [
    "SLOT_SEED",
    "TOPIC_SEED",
    "Assignment",
    "AssignmentError",
    "TopicSpec",
    "assign",
    "check_id",
    "check_slot_ids",
    "fair_share",
    "fmix64",
    "lane_loads",
    "owners",
    "partition_map",
    "rank_matrix",
    "rank_slots",
    "score",
    "scores_from_hashes",
    "scores_matrix",
    "slot_hash",
    "slot_hashes",
    "split_partitions",
    "top_k_from_scores",
    "top_k_matrix",
    "topic_hash",
    "topic_hashes",
]

#: Fixed MurmurHash3 seeds. Changing either reshuffles every topic in the
#: fleet at once, so they are constants, pinned by tests/unit/test_rendezvous.py.
TOPIC_SEED = 0x6C61_6773  # "lags"
SLOT_SEED = 0x7363_6864  # "schd"

_MASK64 = (1 << 64) - 1
_C1 = 0xFF51AFD7ED558CCD
_C2 = 0xC4CEB9FE1A85EC53
_NP_C1 = np.uint64(_C1)
_NP_C2 = np.uint64(_C2)
_NP_33 = np.uint64(33)

U64Array = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]

# Rows per numpy block in the vectorised paths: 2,048 x 1,000 uint64 is 16 MB,
# small enough to stay friendly to a machine shared with the services.
_BLOCK_ROWS = 2048


class AssignmentError(LagschedError, ValueError):
    """The inputs to an assignment are invalid; the message names the bad value."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What the assignment needs to know about one topic.

    Attributes:
        topic_id: stable UUID of the topic in the registry (names are not
            unique across clusters, so never the topic name).
        partitions: number of partitions, >= 0.
        linker_workers: how many slots should own the topic, >= 1 (seed 000).
        weight: load of one partition, > 0; 1.0 counts partitions, an observed
            throughput share weights busy topics more.
    """

    topic_id: str
    partitions: int
    linker_workers: int = 1
    weight: float = 1.0

    def __post_init__(self) -> None:
        # Checked here, at the boundary, because a bad value otherwise surfaces far away: a lone
        # surrogate in an id crashes the process inside mmh3 (SIGSEGV in 5.3.1), a fractional or
        # boolean partition count splits into nonsense shares, an infinite weight makes every
        # load comparison false.
        check_id(self.topic_id, "topic_id")
        tid = self.topic_id
        if not _is_int(self.partitions) or self.partitions < 0:
            raise AssignmentError(f"topic {tid!r}: partitions={self.partitions!r}; must be an int >= 0")
        if not _is_int(self.linker_workers) or self.linker_workers < 1:
            raise AssignmentError(f"topic {tid!r}: linker_workers={self.linker_workers!r}; must be an int >= 1")
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or not w > 0:
            raise AssignmentError(f"topic {tid!r}: weight={w!r}; must be a finite number > 0")
        if not math.isfinite(self.partitions * w):
            raise AssignmentError(
                f"topic {tid!r}: partitions={self.partitions} x weight={w!r} overflows; use a smaller weight"
            )

    @property
    def load(self) -> float:
        """Total load of the topic: partitions times per-partition weight."""
        return self.partitions * self.weight


@dataclass(frozen=True, slots=True)
class Assignment:
    """Owners of every topic, in lane order (position ``i`` owns lane ``i``).

    Attributes:
        owners: topic_id -> owning slot ids, in lane order; for plain HRW this is
            ranking order. Treat as read-only.
    """

    owners: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def owners_of(self, topic_id: str) -> tuple[str, ...]:
        """Owners of one topic in lane order; empty if the topic is unknown."""
        return self.owners.get(topic_id, ())

    def topics_of(self, slot_id: str) -> tuple[str, ...]:
        """Topics a slot owns, sorted by topic id."""
        return tuple(sorted(t for t, os in self.owners.items() if slot_id in os))

    def __iter__(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        return iter(self.owners.items())


# --------------------------------------------------------------------------- hashing


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser: a bijection on 64-bit ints with full avalanche.

    >>> fmix64(0)
    0
    >>> fmix64(1) != fmix64(2)
    True
    """
    x &= _MASK64
    x ^= x >> 33
    x = (x * _C1) & _MASK64
    x ^= x >> 33
    x = (x * _C2) & _MASK64
    x ^= x >> 33
    return x


def _fmix64_np(x: U64Array) -> U64Array:
    # uint64 multiply wraps modulo 2**64 in numpy arrays, as fmix64 needs.
    x = x ^ (x >> _NP_33)
    x = x * _NP_C1
    x = x ^ (x >> _NP_33)
    x = x * _NP_C2
    return x ^ (x >> _NP_33)


def _is_int(value: object) -> bool:
    # bool is an int subclass, but linker_workers=True is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def check_id(value: object, what: str) -> bytes:
    """A topic or slot id as the UTF-8 bytes that are hashed; raises ``AssignmentError`` if unusable.

    An id must be a non-empty ``str`` that encodes to UTF-8. mmh3 5.3.1 crashes the whole process
    (SIGSEGV) on a ``str`` holding a lone surrogate such as ``"\\ud800"``, so ids are encoded here
    and mmh3 only ever sees bytes (the hash of a ``str`` is the hash of its UTF-8 bytes, so every
    score is unchanged).

    >>> check_id("slot-1", "slot id")
    b'slot-1'
    >>> check_id("", "slot id")
    Traceback (most recent call last):
    ...
    lagsched.core.rendezvous.AssignmentError: slot id '' is empty; ids must be non-empty strings
    """
    if not isinstance(value, str):
        raise AssignmentError(f"{what} {value!r} is a {type(value).__name__}; ids must be non-empty strings")
    if not value:
        raise AssignmentError(f"{what} '' is empty; ids must be non-empty strings")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AssignmentError(
            f"{what} {value!r} is not valid Unicode ({exc.reason} at index {exc.start}); ids must encode to UTF-8"
        ) from None


def topic_hash(topic_id: str) -> int:
    """Unsigned 64-bit MurmurHash3 of a topic id (seed ``TOPIC_SEED``)."""
    return mmh3.hash64(check_id(topic_id, "topic id"), seed=TOPIC_SEED, signed=False)[0]


def slot_hash(slot_id: str) -> int:
    """Unsigned 64-bit MurmurHash3 of a slot id (seed ``SLOT_SEED``)."""
    return mmh3.hash64(check_id(slot_id, "slot id"), seed=SLOT_SEED, signed=False)[0]


def score(topic_id: str, slot_id: str) -> int:
    """Rendezvous weight of a (topic, slot) pair; the highest score wins.

    >>> score("t", "s") == score("t", "s")
    True
    """
    return fmix64(topic_hash(topic_id) ^ slot_hash(slot_id))


def _hashes(ids: Iterable[str], seed: int, what: str) -> U64Array:
    return np.fromiter((mmh3.hash64(check_id(i, what), seed=seed, signed=False)[0] for i in ids), dtype=np.uint64)


def topic_hashes(topic_ids: Iterable[str]) -> U64Array:
    """``topic_hash`` of every id, as a uint64 array."""
    return _hashes(topic_ids, TOPIC_SEED, "topic id")


def slot_hashes(slot_ids: Iterable[str]) -> U64Array:
    """``slot_hash`` of every id, as a uint64 array."""
    return _hashes(slot_ids, SLOT_SEED, "slot id")


def scores_from_hashes(th: U64Array, sh: U64Array) -> U64Array:
    """Scores of every (topic hash, slot hash) pair as a (topics, slots) uint64 array."""
    return _fmix64_np(th[:, None] ^ sh[None, :])


def scores_matrix(topic_ids: Sequence[str], slot_ids: Sequence[str]) -> U64Array:
    """Scores of every (topic, slot) pair as a (topics, slots) uint64 array.

    Equal, element by element, to ``score(topic_ids[i], slot_ids[j])``.
    """
    return scores_from_hashes(topic_hashes(topic_ids), slot_hashes(slot_ids))


# --------------------------------------------------------------------------- ranking


def check_slot_ids(slot_ids: Sequence[str]) -> list[str]:
    """The slot ids sorted, after checking each (``check_id``) and that none repeats.

    >>> check_slot_ids(["s2", "s1"])
    ['s1', 's2']
    """
    for s in slot_ids:
        check_id(s, "slot id")
    ordered = sorted(slot_ids)
    for a, b in pairwise(ordered):
        if a == b:
            raise AssignmentError(f"slot id {a!r} appears twice; slot ids must be unique")
    return ordered


def rank_slots(topic_id: str, slot_ids: Sequence[str]) -> list[str]:
    """All slots ranked for one topic: highest score first, ties by slot id.

    >>> r = rank_slots("topic-a", ["s1", "s2", "s3"])
    >>> sorted(r) == ["s1", "s2", "s3"]
    True
    """
    ordered = check_slot_ids(slot_ids)
    return sorted(ordered, key=lambda s: (-score(topic_id, s), s))


def owners(topic_id: str, slot_ids: Sequence[str], linker_workers: int) -> list[str]:
    """The top ``linker_workers`` of the live ``slot_ids`` for a topic, in rank order.

    A dead owner is simply absent from ``slot_ids``; the next slot in the
    ranking takes its place and the other owners stay put (Tinybird's failover).

    >>> live = ["s1", "s2", "s3", "s4"]
    >>> top = owners("topic-a", live, 2)
    >>> owners("topic-a", [s for s in live if s != top[0]], 2)[0] == top[1]
    True
    """
    if not _is_int(linker_workers) or linker_workers < 1:
        raise AssignmentError(f"linker_workers={linker_workers!r}; must be an int >= 1")
    return rank_slots(topic_id, slot_ids)[:linker_workers]


def rank_matrix(topic_ids: Sequence[str], sorted_slot_ids: Sequence[str]) -> IntArray:
    """Full ranking of every topic as indices into ``sorted_slot_ids``.

    ``sorted_slot_ids`` must be sorted and unique, so that index order is slot id
    order and ties break exactly as in ``rank_slots``. O(T * N log N) time and
    T * N memory: for inspection and tests; the balanced assignment never
    materialises it.
    """
    return top_k_matrix(topic_ids, sorted_slot_ids, len(sorted_slot_ids))


def top_k_from_scores(scores: U64Array, k: int) -> IntArray:
    """The ``k`` highest-scoring columns of every row, best first, ties by column index.

    Vectorised: one ``argpartition`` over the rows, then the ``k`` winners are sorted. Rows where a
    score tie straddles the cut (so the index tie-break matters) fall back to an exact full sort.
    """
    rows, n = scores.shape
    if not 1 <= k <= n:
        raise AssignmentError(f"k={k}; must be between 1 and the number of slots ({n})")
    keys = ~scores  # ascending ~score = descending score
    if k == n:
        idx = np.broadcast_to(np.arange(n, dtype=np.int64), (rows, n))
        return np.lexsort((idx, keys), axis=-1).astype(np.int64, copy=False)
    part = np.argpartition(keys, k, axis=1)
    top = part[:, :k]
    top_keys = np.take_along_axis(keys, top, axis=1)
    cut = np.take_along_axis(keys, part[:, k : k + 1], axis=1)
    order = np.lexsort((top, top_keys), axis=-1)
    winners = np.take_along_axis(top, order, axis=1).astype(np.int64, copy=False)
    tied = np.flatnonzero((top_keys == cut).any(axis=1))
    if tied.size:
        idx = np.broadcast_to(np.arange(n, dtype=np.int64), (tied.size, n))
        winners[tied] = np.lexsort((idx, keys[tied]), axis=-1)[:, :k]
    return winners


def top_k_matrix(topic_ids: Sequence[str], sorted_slot_ids: Sequence[str], k: int) -> IntArray:
    """The first ``k`` slots of every topic's ranking, as indices into ``sorted_slot_ids``.

    Blocks of rows through ``top_k_from_scores``, so memory stays at one block of scores.
    """
    n = len(sorted_slot_ids)
    if not 1 <= k <= n:
        raise AssignmentError(f"k={k}; must be between 1 and the number of slots ({n})")
    sh = slot_hashes(sorted_slot_ids)
    out = np.empty((len(topic_ids), k), dtype=np.int64)
    for lo in range(0, len(topic_ids), _BLOCK_ROWS):
        block = topic_ids[lo : lo + _BLOCK_ROWS]
        out[lo : lo + len(block)] = top_k_from_scores(scores_from_hashes(topic_hashes(block), sh), k)
    return out


def assign(topics: Sequence[TopicSpec], slot_ids: Sequence[str]) -> Assignment:
    """Plain HRW: each topic is owned by the top ``min(linker_workers, N)`` live slots.

    >>> a = assign([TopicSpec("t1", 4, 2)], ["s1", "s2", "s3"])
    >>> a.owners_of("t1") == tuple(owners("t1", ["s1", "s2", "s3"], 2))
    True
    """
    if not topics:
        return Assignment({})
    ordered = check_slot_ids(slot_ids)
    if not ordered:
        raise AssignmentError("no live slots; at least one slot must be alive to assign topics")
    _check_topics(topics)
    kmax = min(max(t.linker_workers for t in topics), len(ordered))
    top = top_k_matrix([t.topic_id for t in topics], ordered, kmax)
    result: dict[str, tuple[str, ...]] = {}
    for spec, row in zip(topics, top.tolist(), strict=True):
        result[spec.topic_id] = tuple(ordered[j] for j in row[: spec.linker_workers])
    return Assignment(result)


def _check_topics(topics: Sequence[TopicSpec]) -> None:
    seen: set[str] = set()
    for t in topics:
        if t.topic_id in seen:
            raise AssignmentError(f"topic id {t.topic_id!r} appears twice; topic ids must be unique")
        seen.add(t.topic_id)


# --------------------------------------------------------------------------- partitions


def fair_share(partitions: int, n_owners: int, position: int) -> int:
    """Partitions the owner at lane ``position`` takes: floor(P/k), +1 if position < P % k.

    >>> [fair_share(5, 2, i) for i in range(2)]
    [3, 2]
    """
    if n_owners < 1 or not 0 <= position < n_owners:
        raise AssignmentError(f"position={position} with {n_owners} owners; need 0 <= position < owners")
    q, r = divmod(partitions, n_owners)
    return q + (1 if position < r else 0)


def lane_loads(spec: TopicSpec, n_owners: int) -> list[float]:
    """Load each lane position of a topic carries: fair share times partition weight."""
    return [fair_share(spec.partitions, n_owners, i) * spec.weight for i in range(n_owners)]


def split_partitions(
    partitions: int,
    topic_owners: Sequence[str],
    previous: Mapping[int, str] | None = None,
) -> dict[int, str]:
    """Concrete partition -> owner map for one topic, moving as little as possible.

    Each owner gets exactly its ``fair_share`` by lane position. A partition
    stays with its previous owner while that owner still owns the topic and is
    within its share (lowest partition ids kept first); everything else goes,
    lowest id first, to the owners with room, in lane order. With no previous
    map the owners get contiguous ranges in lane order.

    >>> split_partitions(5, ["a", "b"])
    {0: 'a', 1: 'a', 2: 'a', 3: 'b', 4: 'b'}
    >>> split_partitions(5, ["a", "c"], {0: "a", 1: "a", 2: "a", 3: "b", 4: "b"})
    {0: 'a', 1: 'a', 2: 'a', 3: 'c', 4: 'c'}
    """
    k = len(topic_owners)
    if k == 0:
        if partitions:
            raise AssignmentError("a topic with partitions needs at least one owner")
        return {}
    if len(set(topic_owners)) != k:
        raise AssignmentError(f"owners {list(topic_owners)!r} repeat a slot; owners must be distinct")
    quota = [fair_share(partitions, k, i) for i in range(k)]
    position = {o: i for i, o in enumerate(topic_owners)}
    result: dict[int, str] = {}
    if previous:
        for p in range(partitions):
            prev = previous.get(p)
            if prev is None:
                continue
            i = position.get(prev)
            if i is not None and quota[i] > 0:
                result[p] = prev
                quota[i] -= 1
    i = 0
    for p in range(partitions):
        if p in result:
            continue
        while quota[i] == 0:
            i += 1
        result[p] = topic_owners[i]
        quota[i] -= 1
    return dict(sorted(result.items()))


def partition_map(
    topics: Sequence[TopicSpec],
    assignment: Assignment,
    previous: Mapping[tuple[str, int], str] | None = None,
) -> dict[tuple[str, int], str]:
    """(topic_id, partition) -> owning slot for every topic, via ``split_partitions``.

    ``previous`` is the map in force (what the claim table's ``claimed_by``
    says); partitions stay put wherever the new owners allow.

    >>> partition_map([TopicSpec("t", 3, 2)], Assignment({"t": ("a", "b")}))
    {('t', 0): 'a', ('t', 1): 'a', ('t', 2): 'b'}
    """
    result: dict[tuple[str, int], str] = {}
    for spec in topics:
        tid = spec.topic_id
        prev: dict[int, str] | None = None
        if previous is not None:
            prev = {p: previous[(tid, p)] for p in range(spec.partitions) if (tid, p) in previous}
        for p, slot in split_partitions(spec.partitions, assignment.owners_of(tid), prev).items():
            result[(tid, p)] = slot
    return result
