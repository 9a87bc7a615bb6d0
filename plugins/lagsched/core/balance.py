"""Balanced rendezvous ownership: HRW rankings with bounded loads and sticky owners.

Why: plain HRW places each topic by hash alone, so with few topics per slot and
skewed partition counts some slots carry far more than the mean (max/mean 1.2 to
1.5 in ``lagsched.bench.assignment``). Bounded loads fix the peak, but a
*stateless* bounded-load assignment reshuffles much more than the departed
slot's share when the slot set changes (every slot's capacity moves by ~1/N, so
every full slot changes what it accepts: about 2x the ideal in our benchmark,
in line with the O(1/eps^2) bound of Mirrokni, Thorup and Zadimoghaddam). So the
balanced assignment is computed from the previous one, as Kafka's sticky
assignors are, and ranks by HRW wherever it has a free choice.

Definitions (``total`` = sum of topic loads, ``N`` = live slots):

* A topic with ``P`` partitions, per-partition weight ``w`` and ``k`` =
  ``min(linker_workers, N)`` owners has ``k`` lanes; the owner at lane position
  ``i`` takes ``fair_share(P, k, i)`` = floor(P/k), +1 if ``i < P % k``, so its
  load is that times ``w``.
* ``cap = (1 + eps) * total / N``; ``floor_ = (1 - eps) * total / N``;
  ``mean = total / N``.

Algorithm (deterministic; topics heaviest first, ties by topic id; slots by id):

1. **Keep**: every lane whose previous owner is still live keeps it, at the
   same lane position (a replacement inherits the dead owner's position and so
   exactly its share of partitions). Lanes past ``k`` are dropped.
2. **Place**: each lane without an owner (new topic, dead owner, higher
   ``linker_workers``) goes to the first slot in the topic's HRW ranking that
   does not already own the topic and has room (``load + lane <= cap``); if
   none has room, to the least-loaded such slot. With no previous assignment
   this is plain bounded-loads HRW.
3. **Relieve**: a slot above ``cap`` (capacity shrinks when a slot joins)
   hands lanes, smallest covering lane first, ties to the weakest hold (lowest
   HRW score), to the least-loaded slot that may take it, until it is at or
   below ``cap``. If that slot has no room either, the lane moves only if the
   slot ends up less loaded than the holder was. After a join the target is
   the new slot, so the shed load counts towards its share instead of moving
   twice.
4. **Pull**: a slot below ``floor_`` (typically one that just joined) takes
   lanes on which it outranks the current owner, its highest scores first,
   while it stays at or below ``mean`` and the donor stays at or above
   ``floor_``. Relieve and pull repeat until neither moves anything, so
   recomputing from an unchanged input changes nothing.

Guarantees:

* Every topic has exactly ``min(linker_workers, N)`` distinct owners.
* Every slot's load is at most ``max(cap, max over lanes of
  (total - l) / (N - k + 1) + l)``, also after any sequence of leaves and
  joins: a slot above ``cap`` holding lane ``l`` of a topic with ``k`` owners
  can always hand it to one of the ``N - k`` other eligible slots at a lower
  resulting load unless it is already within that bound. It binds for
  topics owned by nearly every slot or lanes that are a large part of a
  slot's share.
* The result depends only on (topics, live slot ids, previous assignment,
  eps): every process computing it from the same inputs agrees, and
  ``balanced_assign(t, s, balanced_assign(t, s))`` returns the same owners.
* Movement: on a leave, surviving owners keep their lanes and the departed
  slot's lanes are re-placed (replacements take its lane positions); only a
  slot the higher mean leaves below ``floor_`` may pull a few lanes more. A
  join moves what the new slot is handed or pulls, about ``mean``. Measured,
  not proved, in ``lagsched.bench.assignment`` (``docs/assignment.md``).
  Without a previous assignment the same algorithm moves about twice the
  ideal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lagsched.core.rendezvous import (
    Assignment,
    AssignmentError,
    TopicSpec,
    lane_loads,
    rank_matrix,
    scores_matrix,
)

__all__ = ["DEFAULT_EPS", "balanced_assign", "slot_loads"]

#: Slack over the mean a slot may carry. 0.08 keeps max/mean <= 1.08 while
#: leaving room for a departed slot's lanes without evictions.
DEFAULT_EPS = 0.08

# A safety net only: the loop provably ends (see _Solver.solve), in one or
# two rounds in practice.
_MAX_ROUNDS = 64


def slot_loads(topics: Sequence[TopicSpec], assignment: Assignment, slot_ids: Sequence[str]) -> dict[str, float]:
    """Load on every slot: the sum of its lanes' fair shares times partition weight.

    >>> a = Assignment({"t": ("s1", "s2")})
    >>> slot_loads([TopicSpec("t", 5, 2)], a, ["s1", "s2"])
    {'s1': 3.0, 's2': 2.0}
    """
    loads = {s: 0.0 for s in slot_ids}
    for spec in topics:
        owners = assignment.owners_of(spec.topic_id)
        for owner, load in zip(owners, lane_loads(spec, len(owners)), strict=True):
            if owner in loads:
                loads[owner] += load
    return loads


def balanced_assign(
    topics: Sequence[TopicSpec],
    slot_ids: Sequence[str],
    previous: Assignment | None = None,
    eps: float = DEFAULT_EPS,
) -> Assignment:
    """Bounded-load, sticky HRW assignment of topics to live slots.

    Args:
        topics: every enabled topic.
        slot_ids: the live slots.
        previous: the assignment in force (e.g. as stored with the claim table);
            ``None`` computes from scratch, which is deterministic but moves
            about twice the minimum when the slot set changes.
        eps: slack over the mean load a slot may carry, > 0.

    Returns:
        Owners per topic in lane order; the owner at position ``i`` takes
        ``fair_share(P, k, i)`` partitions.

    >>> ts = [TopicSpec(f"t{i}", 8, 2) for i in range(4)]
    >>> a = balanced_assign(ts, ["s1", "s2", "s3", "s4"])
    >>> sorted(slot_loads(ts, a, ["s1", "s2", "s3", "s4"]).values())
    [8.0, 8.0, 8.0, 8.0]
    """
    if not eps > 0:
        raise AssignmentError(f"eps={eps}; must be > 0 (e.g. {DEFAULT_EPS})")
    if not topics:
        return Assignment({})
    slots = sorted(slot_ids)
    if not slots:
        raise AssignmentError("no live slots; at least one slot must be alive to assign topics")
    if len(set(slots)) != len(slots):
        raise AssignmentError("slot ids repeat; slot ids must be unique")
    ids = [t.topic_id for t in topics]
    if len(set(ids)) != len(ids):
        raise AssignmentError("topic ids repeat; topic ids must be unique")
    return _Solver(topics, slots, previous, eps).solve()


class _Solver:
    """Mutable working state of one ``balanced_assign`` call."""

    def __init__(
        self,
        topics: Sequence[TopicSpec],
        slots: list[str],
        previous: Assignment | None,
        eps: float,
    ) -> None:
        self.topics = list(topics)
        self.slots = slots
        n = len(slots)
        ids = [t.topic_id for t in topics]
        self.scores = scores_matrix(ids, slots)
        self.ranks = rank_matrix(ids, slots)
        total = sum(t.load for t in topics)
        self.mean = total / n
        self.cap = (1 + eps) * self.mean
        self.floor = (1 - eps) * self.mean
        self.lanes = [lane_loads(t, min(t.linker_workers, n)) for t in topics]
        self.load = np.zeros(n, dtype=np.float64)
        index = {s: j for j, s in enumerate(slots)}
        # own[i][pos] = slot index owning lane pos of topic i, or -1 if unowned.
        self.own: list[list[int]] = []
        prev: Mapping[str, tuple[str, ...]] = previous.owners if previous else {}
        for i, spec in enumerate(topics):
            k = len(self.lanes[i])
            row = [index.get(s, -1) for s in prev.get(spec.topic_id, ())][:k]
            row += [-1] * (k - len(row))
            self.own.append(row)
            for pos, j in enumerate(row):
                if j >= 0:
                    self.load[j] += self.lanes[i][pos]
        # Heaviest topics first: they are the hardest to fit, ties by topic id.
        self.order = sorted(range(len(topics)), key=lambda i: (-topics[i].load, ids[i]))

    def solve(self) -> Assignment:
        # Place fills holes; relieve and pull then run to a common fixed point,
        # so feeding the result back in changes nothing. Every move of either
        # goes from a slot to one that ends up less loaded than the source
        # was, which strictly lowers the sum of squared loads: the loop ends.
        self._place()
        for _ in range(_MAX_ROUNDS):
            if not (self._relieve() | self._pull()):
                break
        return Assignment({t.topic_id: tuple(self.slots[j] for j in self.own[i]) for i, t in enumerate(self.topics)})

    def _relieve(self) -> bool:
        # Shed as little load as possible: the smallest lane that covers the
        # excess, else the largest one, and repeat; ties go to the weakest hold
        # (lowest HRW score). Each shed lane goes straight to the emptiest
        # slot with room, which after a join is the new slot, so the join
        # moves the new slot's share once rather than evicting here and
        # pulling there.
        moved = False
        for j in range(len(self.slots)):
            if self.load[j] <= self.cap:
                continue
            held = [
                (self.lanes[i][pos], int(self.scores[i, j]), i, pos)
                for i in self.order
                for pos, o in enumerate(self.own[i])
                if o == j and self.lanes[i][pos] > 0
            ]
            while self.load[j] > self.cap and held:
                excess = self.load[j] - self.cap
                covering = [h for h in held if h[0] >= excess]
                if covering:
                    victim = min(covering, key=lambda h: (h[0], h[1]))
                else:
                    victim = max(held, key=lambda h: (h[0], -h[1]))
                held.remove(victim)
                lane, _, i, pos = victim
                row = self.own[i]
                free = [c for c in self.ranks[i].tolist() if c not in row]
                if not free:
                    continue
                target = min(free, key=lambda c: self.load[c])
                # No room anywhere: still move if it lowers the peak, which is
                # what keeps a slot within the documented bound after churn.
                if self.load[target] + lane > self.cap and self.load[target] + lane >= self.load[j]:
                    continue
                row[pos] = target
                self.load[j] -= lane
                self.load[target] += lane
                moved = True
        return moved

    def _place(self) -> None:
        for i in self.order:
            row = self.own[i]
            for pos, j in enumerate(row):
                if j >= 0:
                    continue
                lane = self.lanes[i][pos]
                ranking = [c for c in self.ranks[i].tolist() if c not in row]
                pick = next((c for c in ranking if self.load[c] + lane <= self.cap), -1)
                if pick < 0:
                    pick = min(ranking, key=lambda c: self.load[c])
                row[pos] = pick
                self.load[pick] += lane

    def _pull(self) -> bool:
        any_moved = False
        for _ in range(_MAX_ROUNDS):
            moved = False
            for u in range(len(self.slots)):
                if self.load[u] >= self.floor:
                    continue
                moved |= self._pull_into(u)
            any_moved |= moved
            if not moved:
                break
        return any_moved

    def _pull_into(self, u: int) -> bool:
        col = self.scores[:, u]
        cands = sorted(
            (-int(col[i]), i, pos)
            for i in self.order
            if u not in self.own[i]
            for pos, o in enumerate(self.own[i])
            if self.lanes[i][pos] > 0 and int(self.scores[i, o]) < int(col[i])
        )
        moved = False
        for _, i, pos in cands:
            lane = self.lanes[i][pos]
            donor = self.own[i][pos]
            if u in self.own[i] or donor == u:
                continue
            if self.load[u] + lane > self.mean or self.load[donor] - lane < self.floor:
                continue
            self.own[i][pos] = u
            self.load[u] += lane
            self.load[donor] -= lane
            moved = True
        return moved
