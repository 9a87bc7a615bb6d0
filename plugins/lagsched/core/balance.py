"""Balanced rendezvous ownership: HRW rankings with bounded loads and sticky owners.

Why: plain HRW places each topic by hash alone, so with few topics per slot and skewed partition
counts some slots carry far more than the mean (max/mean 1.2 to 1.6 in
``lagsched_dev.bench.assignment``). Bounded loads fix the peak, but a *stateless* bounded-load
assignment reshuffles about twice what the slot change requires (every slot's capacity moves by
~1/N, so every full slot changes what it accepts; Mirrokni, Thorup and Zadimoghaddam bound it by
O(1/eps^2)). So the balanced assignment is computed from the previous one, as Kafka's sticky
assignors are, ranks by HRW wherever it has a free choice, and moves at most a stated allowance.

Definitions (``total`` = sum of topic loads, ``N`` = live slots, ``mean = total / N``):

* A topic with ``P`` partitions, per-partition weight ``w`` and ``k = min(linker_workers, N)``
  owners has ``k`` lanes; the owner at lane position ``i`` takes ``fair_share(P, k, i)``
  = floor(P/k), +1 if ``i < P % k``, so its load is that times ``w``.
* ``keep = (1 + eps) * mean``: what a slot may hold; ``fill = (1 + eps/2) * mean``: what placing
  new lanes fills a slot to, leaving headroom so that a join (the mean drops by 1/(N+1)) does not
  push kept slots over ``keep``; ``floor = (1 - eps) * mean``.
* The *ideal* movement of a recompute is ``H + J * mean``: ``H`` the load of lanes with no live
  previous owner (a departed slot's, a new topic's, a raised ``linker_workers``), ``J`` the slots
  absent from the previous assignment. The *allowance* is ``move_slack`` times the ideal plus a
  mean per joined slot (or one mean when the ideal is 0, e.g. a topic grew); from scratch it is
  unlimited.

Algorithm (deterministic; topics heaviest first, ties by topic id; slots by id):

1. **Keep**: every lane whose previous owner is still live keeps it, at the same position (a
   replacement inherits a dead owner's position and so exactly its share). When ``k`` shrank, a
   live owner past the new ``k`` takes a dead owner's position instead of losing the topic.
2. **Place** each ownerless lane on the first slot in the topic's HRW ranking that does not own
   the topic yet and (a) is below the mean with room under ``fill``, else (b) has room under
   ``fill``, else (c) has room under ``keep``; else (d) on the slot that can shed back under
   ``keep`` most cheaply within the allowance (or, if none can, the one left lowest). Filling
   slots below the mean first puts a departed slot's lanes where they even the load. With no
   previous assignment this is bounded-loads HRW.
3. **Relieve**: a slot above ``keep`` (placement in case (d), or a join lowering ``keep``) hands
   lanes to the least-loaded slot that may take them: the smallest lane covering its excess, ties
   to the weakest hold (lowest HRW score), else its largest, else any lane whose move lowers the
   pair's peak. When the allowance cannot pay for everything, the overloaded slots shed down to a
   common water level rather than one slot fixed and another left far above.
4. **Pull**: a slot below ``floor`` (typically one that just joined) takes lanes from the
   heaviest slots, largest fitting lane first, up to the mean, leaving each donor at or above
   ``floor`` and above the taker. Relieve and pull repeat until neither moves anything.

Proved (and property-tested in ``tests/unit/test_balance.py``):

* Every topic has exactly ``min(linker_workers, N)`` distinct live owners.
* Movement: lanes moved off a live previous owner weigh at most the allowance, so the load that
  changes owner is at most ``(1 + move_slack) * (H + J * mean)``: 1.2x the ideal by default on a
  leave and on a join. (With the sticky partition split, ``rendezvous.split_partitions``, moved
  partitions equal moved lane loads while a topic's lane count is unchanged.)
* With an unlimited allowance (from scratch, or ``move_slack=math.inf``) every slot's load is at
  most ``max(keep, max over lanes l of (total - l) / (N - k + 1) + l)``: a slot above ``keep``
  holding lane ``l`` of a topic with ``k`` owners can hand it to one of the ``N - k`` other
  slots at a lower resulting pair peak unless it is already within that bound.
* The result depends only on (topics, live slot ids, previous assignment, eps, move_slack), not
  on the order of either list; feeding a from-scratch result back in returns it unchanged.

Measured, not proved (``lagsched_dev.bench.assignment``, docs/assignment.md): max/mean after a join
stays under ``keep``; after a leave it does too unless the departed slot held lanes larger than
the room left on the others, when getting under ``keep`` would move more than the allowance, and
the allowance wins.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from lagsched.core.rendezvous import (
    Assignment,
    AssignmentError,
    TopicSpec,
    U64Array,
    check_slot_ids,
    fmix64,
    lane_loads,
    scores_from_hashes,
    slot_hashes,
    top_k_from_scores,
    topic_hashes,
)

__all__ = ["DEFAULT_EPS", "DEFAULT_MOVE_SLACK", "balanced_assign", "slot_loads"]

#: Slack over the mean load a slot may keep: max/mean stays <= 1 + eps wherever the lanes allow.
DEFAULT_EPS = 0.10

#: A sticky recompute moves at most (1 + move_slack) times the ideal: what lost its owner plus a
#: mean share per joined slot.
DEFAULT_MOVE_SLACK = 0.2

# New lanes are placed only up to (1 + _FILL * eps) * mean, so a slot keeps headroom below the
# (1 + eps) * mean it may hold: when a slot joins, the mean drops by 1/(N+1) and a slot filled to
# the keep limit would have to shed; filled to the lower mark it does not (from 21 slots up,
# for eps = 0.1), so a join moves only what the new slot takes.
_FILL = 0.5

# A safety net only: every move strictly lowers the sum of squared loads (see _Solver.solve), so
# the loops end; they take one to three rounds in practice.
_MAX_ROUNDS = 1000

# Topics per block when scoring for placement: 1,024 x 2,000 uint64 scores are 16 MB.
_BLOCK_ROWS = 1024

# Ranking positions looked at in Python before asking numpy about the whole ranking: owners of
# the topic plus this many. Most lanes land within the first few positions.
_EXTRA_CANDIDATES = 12

# Slots (the least loaded) weighed as the home of a lane that fits nowhere under keep.
_RELIEF_CANDIDATES = 32

FloatArray = npt.NDArray[np.float64]
Lane = tuple[int, int]  # (topic index, lane position)


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
    move_slack: float = DEFAULT_MOVE_SLACK,
) -> Assignment:
    """Bounded-load, sticky HRW assignment of topics to live slots.

    Args:
        topics: every enabled topic.
        slot_ids: the live slots: non-empty, unique, valid Unicode.
        previous: the assignment in force (e.g. as stored with the claim table);
            ``None`` computes from scratch, which is deterministic but moves
            about twice the minimum when the slot set changes.
        eps: slack over the mean load a slot may keep, 0 < eps <= 1.
        move_slack: with ``previous``, move at most ``(1 + move_slack)`` times the ideal (the
            load that lost its owner plus a mean share per joined slot), >= 0; ``math.inf``
            lets balance win over movement.

    Returns:
        Owners per topic in lane order; the owner at position ``i`` takes
        ``fair_share(P, k, i)`` partitions.

    >>> ts = [TopicSpec(f"t{i}", 8, 2) for i in range(4)]
    >>> a = balanced_assign(ts, ["s1", "s2", "s3", "s4"])
    >>> sorted(slot_loads(ts, a, ["s1", "s2", "s3", "s4"]).values())
    [8.0, 8.0, 8.0, 8.0]
    """
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps <= 1:
        raise AssignmentError(f"eps={eps!r}; must be a number with 0 < eps <= 1 (e.g. {DEFAULT_EPS})")
    if isinstance(move_slack, bool) or not isinstance(move_slack, int | float) or not move_slack >= 0:
        raise AssignmentError(
            f"move_slack={move_slack!r}; must be a number >= 0, or math.inf for no limit (e.g. {DEFAULT_MOVE_SLACK})"
        )
    slots = check_slot_ids(slot_ids)
    if not topics:
        return Assignment({})
    if not slots:
        raise AssignmentError("no live slots; at least one slot must be alive to assign topics")
    seen: set[str] = set()
    for t in topics:
        if not isinstance(t, TopicSpec):
            raise AssignmentError(f"topic {t!r} is a {type(t).__name__}; expected a TopicSpec")
        if t.topic_id in seen:
            raise AssignmentError(f"topic id {t.topic_id!r} appears twice; topic ids must be unique")
        seen.add(t.topic_id)
    # Solve in topic id order, so that nothing, not even a tie, depends on the callers' order.
    canonical = sorted(topics, key=lambda t: t.topic_id)
    solved = _Solver(canonical, slots, previous, float(eps), float(move_slack)).solve()
    return Assignment({t.topic_id: solved.owners[t.topic_id] for t in topics})


class _Solver:
    """Mutable working state of one ``balanced_assign`` call.

    Loads live in a Python list (the hot loops read single values); placement keeps a numpy copy
    in step for its whole-ranking queries.
    """

    def __init__(  # noqa: PLR0915 - one statement per piece of the solver's state, in the order they depend on each other
        self, topics: list[TopicSpec], slots: list[str], previous: Assignment | None, eps: float, move_slack: float
    ) -> None:
        n = len(slots)
        self.n = n
        self.topics = topics
        self.slots = slots
        ids = [t.topic_id for t in topics]
        self.th: U64Array = topic_hashes(ids)
        self.th_py: list[int] = self.th.tolist()
        self.sh: U64Array = slot_hashes(slots)
        self.sh_py: list[int] = self.sh.tolist()
        mean = math.fsum(t.load for t in topics) / n
        self.mean = mean
        # Loads are sums of float shares; a tolerance keeps a recompute from the same owners
        # (summed in another order) on the same side of every threshold.
        self.tol = 1e-9 * mean
        self.keep = (1 + eps) * mean
        self.fill = (1 + _FILL * eps) * mean
        self.floor = (1 - eps) * mean
        self.lanes = [lane_loads(t, min(t.linker_workers, n)) for t in topics]
        load = [0.0] * n
        held: list[set[Lane]] = [set() for _ in range(n)]
        index = {s: j for j, s in enumerate(slots)}
        prev = previous.owners if previous is not None else {}
        # own[i][pos] = slot index owning lane pos of topic i, or -1 if unowned. Keep: a live
        # previous owner keeps its lane position (a replacement inherits a dead owner's position,
        # so exactly its share). When k shrank (fewer live slots than linker_workers), a live
        # owner beyond the new k takes a dead owner's position rather than losing the topic.
        self.own: list[list[int]] = []
        holes = 0.0
        for i, spec in enumerate(topics):
            lanes = self.lanes[i]
            k = len(lanes)
            row = [-1] * k
            beyond: list[int] = []
            for pos, s in enumerate(prev.get(spec.topic_id, ())):
                j = index.get(s, -1)
                if j < 0 or j in row or j in beyond:
                    continue
                if pos < k:
                    row[pos] = j
                else:
                    beyond.append(j)
            for j in beyond:
                if -1 not in row:
                    break
                row[row.index(-1)] = j
            for pos, j in enumerate(row):
                if j < 0:
                    holes += lanes[pos]
                    continue
                load[j] += lanes[pos]
                if lanes[pos] > 0:
                    held[j].add((i, pos))
            self.own.append(row)
        self.load = load
        self.held = held
        # Movement allowance beyond placing the ownerless lanes (which has to happen anyway):
        # the ideal is what lost its owner plus a mean share per new slot; relieve and pull may
        # move move_slack times that more (or, when neither happened, say a topic grew, one
        # mean). From scratch everything is placement and nothing is limited.
        if previous is None:
            self.allowance = math.inf
        else:
            before = {s for owners in prev.values() for s in owners}
            joined = sum(1 for s in slots if s not in before)
            ideal = holes + joined * mean
            self.allowance = ideal * (1 + move_slack) - holes if ideal > self.tol else mean
        self.spent = 0.0
        # Allowance that placement expects relieve to spend on the slots it had to overload.
        self.reserved = 0.0
        # Heaviest topics first: they are the hardest to fit; ties by topic id.
        self.order = sorted(range(len(topics)), key=lambda i: (-topics[i].load, ids[i]))
        # Placement's numpy copy of the loads and its set of slots below the mean (set by _place).
        self._load_np: FloatArray = np.zeros(0)
        self._below = _BelowMean(self._load_np, 0.0)

    def solve(self) -> Assignment:
        # Place fills holes; relieve and pull then run to a common fixed point, so feeding the
        # result back in changes nothing. Every move of either goes from a slot to one that ends
        # up less loaded than the source was, which strictly lowers the sum of squared loads:
        # the loop ends.
        self._place()
        for _ in range(_MAX_ROUNDS):
            if not (self._relieve() | self._pull()):
                break
        slots = self.slots
        return Assignment({t.topic_id: tuple(slots[j] for j in self.own[i]) for i, t in enumerate(self.topics)})

    # ------------------------------------------------------------------ helpers

    def score(self, i: int, j: int) -> int:
        return fmix64(self.th_py[i] ^ self.sh_py[j])

    def _give(self, i: int, pos: int, dst: int) -> None:
        lane = self.lanes[i][pos]
        self.own[i][pos] = dst
        self.load[dst] += lane
        if lane > 0:
            self.held[dst].add((i, pos))

    def _move(self, i: int, pos: int, src: int, dst: int) -> None:
        lane = self.lanes[i][pos]
        self.spent += lane
        self.load[src] -= lane
        self.held[src].discard((i, pos))
        self._give(i, pos, dst)

    def _budget(self) -> float:
        return self.allowance - self.spent + self.tol

    # ------------------------------------------------------------------ place

    def _place(self) -> None:
        """Give every ownerless lane an owner, heaviest topics first.

        A lane goes to the first slot in the topic's HRW ranking that does not own the topic yet
        and (1) is below the mean with room under ``fill``, else (2) has room under ``fill``,
        else (3) has room under ``keep``; else (4) to the slot that can most cheaply shed back
        under ``keep``. Filling the slots below the mean first spreads a departed slot's lanes
        over the slots that need them, so a leave moves little besides its lanes. With no
        previous assignment this is bounded-loads HRW.
        """
        todo = [i for i in self.order if -1 in self.own[i]]
        if not todo:
            return
        n = self.n
        self._load_np = np.array(self.load, dtype=np.float64)
        self._below = _BelowMean(self._load_np, self.mean - self.tol)
        for lo in range(0, len(todo), _BLOCK_ROWS):
            block = todo[lo : lo + _BLOCK_ROWS]
            scores = scores_from_hashes(self.th[block], self.sh)
            c = min(n, max(len(self.own[i]) for i in block) + _EXTRA_CANDIDATES)
            tops: list[list[int]] = top_k_from_scores(scores, c).tolist()
            for r, i in enumerate(block):
                self._place_topic(i, scores[r], tops[r], c < n)

    def _place_topic(self, i: int, srow: U64Array, cands: list[int], partial: bool) -> None:  # noqa: PLR0912 - the hot loop of placement: one pass over the ranking, attributes held in locals
        """Place topic ``i``'s ownerless lanes; ``cands`` is the top of its ranking (all of it unless ``partial``)."""
        row = self.own[i]
        lanes = self.lanes[i]
        load = self.load
        load_np = self._load_np
        fill = self.fill + self.tol
        keep = self.keep + self.tol
        low = self.mean - self.tol
        for pos in range(len(row)):
            if row[pos] >= 0:
                continue
            lane = lanes[pos]
            pick = first_fill = first_keep = -1
            for c in cands:
                if c in row:
                    continue
                ld = load[c]
                if ld + lane <= fill:
                    if ld < low:
                        pick = c
                        break
                    if first_fill < 0:
                        first_fill = c
                elif first_keep < 0 and ld + lane <= keep:
                    first_keep = c
            # The walk saw the top of the ranking; numpy answers for the rest of it.
            if pick < 0 and partial:
                pick = self._below.best(srow, row, lane, fill)
            if pick < 0:
                pick = first_fill
                if pick < 0 and partial:
                    pick = _first_with_room(srow, row, lane, fill, load_np)
            if pick < 0:
                pick = first_keep
                if pick < 0 and partial:
                    pick = _first_with_room(srow, row, lane, keep, load_np)
            if pick < 0:
                pick = self._cheapest_to_relieve(row, lane)
            self._give(i, pos, pick)
            load_np[pick] = load[pick]
            if load[pick] >= low:
                self._below.crossed(pick)

    def _cheapest_to_relieve(self, row: list[int], lane: float) -> int:
        """For a lane that fits nowhere under ``keep``: the slot that then sheds the least.

        A slot's cost is the smallest lane it holds that covers its excess (else its largest
        lanes until they do). Among the slots whose cost the movement allowance still covers,
        the cheapest; if none, the one left lowest after shedding what the allowance pays for
        (its largest lanes that fit in it). Ties go to the least loaded, then the lowest slot
        id. Only the ``_RELIEF_CANDIDATES`` least-loaded slots are looked at, so a lane costs
        O(lanes they hold), not O(all lanes).
        """
        budget = self._budget() - self.reserved
        best: tuple[bool, float, float, int] | None = None
        lightest = np.argsort(self._load_np, kind="stable")[: _RELIEF_CANDIDATES + len(row)].tolist()
        for c in lightest:
            if c in row:
                continue
            excess = self.load[c] + lane - self.keep
            sizes = sorted((self.lanes[i][p] for i, p in self.held[c]), reverse=True)
            covering = [s for s in sizes if s >= excess]
            if covering:
                cost = covering[-1]
            else:
                cost = 0.0
                for s in sizes:
                    cost += s
                    if cost >= excess:
                        break
                else:
                    cost = math.inf  # it cannot get back under keep at all
            if cost <= budget:
                cand = (False, cost, self.load[c], c)
            else:
                paid = 0.0
                for s in sizes:
                    if paid + s <= budget:
                        paid += s
                cand = (True, self.load[c] + lane - paid, self.load[c], c)
            if best is None or cand < best:
                best = cand
        assert best is not None  # k <= N, so some slot does not own the topic yet
        self.reserved += best[1] if not best[0] else max(0.0, budget)
        return best[3]

    # ------------------------------------------------------------------ relieve

    def _relieve(self) -> bool:
        """Bring every slot above ``keep`` back under it, moving as little load as possible.

        Within the movement allowance: when it cannot pay for everything, the overloaded slots
        shed down to a common water level above ``keep`` (the one the allowance covers), so the
        allowance lowers the peak rather than fixing one slot and leaving another far above.
        """
        keep = self.keep + self.tol
        lanes = self.lanes
        moved = False
        for _ in range(_MAX_ROUNDS):
            over = [j for j in range(self.n) if self.load[j] > keep]
            if not over:
                break
            level = _water_level([self.load[j] for j in over], self._budget(), self.keep)

            def need(j: int, level: float = level) -> float:
                # The smallest lane that alone brings j to the level, else its largest: the slot
                # that needs the biggest lane goes first, while the least-loaded slot still has
                # room for it.
                excess = self.load[j] - level
                sizes = [lanes[i][pos] for i, pos in self.held[j]]
                covering = [s for s in sizes if s >= excess]
                return min(covering) if covering else max(sizes, default=0.0)

            progress = False
            for j in sorted(over, key=lambda j: (-need(j), j)):
                while self.load[j] > level + self.tol and self._shed_one(j, level):
                    progress = True
            if not progress:
                break
            moved = True
        return moved

    def _shed_one(self, j: int, level: float) -> bool:
        """Move one lane off ``j`` towards ``level`` to the least-loaded slot that may take it."""
        load = self.load
        keep = self.keep + self.tol
        excess = load[j] - level
        budget = self._budget()
        recv = sorted(range(self.n), key=lambda c: (load[c], c))
        fits: list[tuple[float, int, int, int, int]] = []
        peaks: list[tuple[float, float, int, int, int, int]] = []
        for i, pos in self.held[j]:
            lane = self.lanes[i][pos]
            if lane > budget:
                continue
            row = self.own[i]
            r = next((c for c in recv if c not in row), -1)
            if r < 0:  # every slot owns the topic
                continue
            if load[r] + lane <= keep:
                fits.append((lane, self.score(i, j), i, pos, r))
            elif load[r] + lane < load[j] - self.tol:
                # No room anywhere: still move if the pair's peak drops, which is what keeps a
                # slot within the documented bound after churn.
                peaks.append((max(load[j] - lane, load[r] + lane), lane, self.score(i, j), i, pos, r))
        covering = [f for f in fits if f[0] >= excess - self.tol]
        if covering:
            # The smallest lane that covers the excess; ties to the weakest hold (lowest score).
            _, _, i, pos, r = min(covering)
        elif fits:
            # None covers it alone: the largest, then look again.
            _, _, i, pos, r = max(fits, key=lambda f: (f[0], -f[1], -f[2], -f[3]))
        elif peaks:
            _, _, _, i, pos, r = min(peaks)
        else:
            return False
        self._move(i, pos, j, r)
        return True

    # ------------------------------------------------------------------ pull

    def _pull(self) -> bool:
        """A slot below ``floor`` (one that just joined) takes lanes from the heaviest slots."""
        low = self.floor - self.tol
        needy = sorted((j for j in range(self.n) if self.load[j] < low), key=lambda j: (self.load[j], j))
        moved = False
        for u in needy:
            moved |= self._pull_into(u)
        return moved

    def _pull_into(self, u: int) -> bool:
        load = self.load
        tol = self.tol
        floor = self.floor
        target = self.mean + tol
        heap = [(-load[v], v) for v in range(self.n) if v != u and load[v] > floor + tol]
        heapq.heapify(heap)
        moved = False
        while heap and load[u] < self.mean - tol:
            _, v = heapq.heappop(heap)
            # u stays at or below the mean, v at or above the floor, and u ends below where v
            # was (so the move strictly evens the pair). Each limit only tightens as u fills
            # and v gives, so a donor with nothing to give now never will: it is dropped.
            limit = min(target - load[u], load[v] - floor + tol, self._budget())
            gap = load[v] - load[u] - tol
            best: tuple[float, int, int, int] | None = None
            for i, pos in self.held[v]:
                lane = self.lanes[i][pos]
                if lane <= limit and lane < gap and u not in self.own[i]:
                    cand = (lane, self.score(i, u), -i, -pos)
                    if best is None or cand > best:
                        best = cand
            if best is None:
                continue
            self._move(-best[2], -best[3], v, u)
            moved = True
            heapq.heappush(heap, (-load[v], v))
        return moved


class _BelowMean:
    """Slots below the mean, as a numpy index array rebuilt only after one crosses it."""

    def __init__(self, load_np: FloatArray, low: float) -> None:
        self.load_np = load_np
        self.low = low
        self.idx = np.flatnonzero(load_np < low)
        self.flag: list[bool] = (load_np < low).tolist()
        self.stale = False

    def crossed(self, j: int) -> None:
        """Slot ``j`` reached the mean (loads only grow while placing, so it never comes back)."""
        if self.flag[j]:
            self.flag[j] = False
            self.stale = True

    def best(self, srow: U64Array, row: list[int], lane: float, fill: float) -> int:
        """Highest-ranked slot below the mean with room for ``lane`` that does not own the topic."""
        if self.stale:
            self.idx = np.flatnonzero(self.load_np < self.low)
            self.stale = False
        idx = self.idx
        if not idx.size:
            return -1
        ok = self.load_np[idx] + lane <= fill
        for o in row:
            if o >= 0:
                ok &= idx != o
        cand = idx[ok]
        if not cand.size:
            return -1
        return int(cand[np.argmax(srow[cand])])


def _water_level(loads: list[float], budget: float, floor: float) -> float:
    """The lowest level >= ``floor`` down to which ``budget`` can cut ``loads`` (ignoring lumps).

    >>> _water_level([10.0, 8.0], 3.0, 5.0)
    7.5
    >>> _water_level([10.0, 8.0], 100.0, 5.0)
    5.0
    """
    if sum(x - floor for x in loads if x > floor) <= budget:
        return floor
    ordered = sorted(loads, reverse=True)
    cut = 0.0
    for k, x in enumerate(ordered):
        nxt = ordered[k + 1] if k + 1 < len(ordered) else floor
        nxt = max(nxt, floor)
        # Cutting the top k+1 loads from x down to nxt costs (k+1)*(x-nxt) more.
        if cut + (k + 1) * (x - nxt) >= budget:
            return x - (budget - cut) / (k + 1)
        cut += (k + 1) * (x - nxt)
    return floor


def _first_with_room(srow: U64Array, row: list[int], lane: float, limit: float, load_np: FloatArray) -> int:
    """First slot in the ranking (scores ``srow``) not in ``row`` with ``load + lane <= limit``, or -1."""
    ok = load_np + lane <= limit
    for o in row:
        if o >= 0:
            ok[o] = False
    cand = np.flatnonzero(ok)
    if not cand.size:
        return -1
    return int(cand[np.argmax(srow[cand])])


def _least_loaded(row: list[int], load_np: FloatArray) -> int:
    """The least-loaded slot not in ``row``, ties by slot id."""
    masked = load_np.copy()
    for o in row:
        if o >= 0:
            masked[o] = np.inf
    return int(np.argmin(masked))
