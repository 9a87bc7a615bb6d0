"""Assignment benchmark: balance and movement of five assignors, and HRW speed.

Run from the repository root::

    PYTHONPATH=plugins python -m lagsched.bench.assignment [--out PATH] [--trials N]

Scenarios (seeded, so every run measures the same inputs):

* ``skewed``: 1,000 topics, partitions 1..64 drawn from a bounded power law
  (P(p) ~ p^-1.2), ``linker_workers`` uniform in 1..4, 50 slots with UUID ids.
* ``signal``: seed 002's case: 80 topics with log-uniform partition counts
  1..128, 12 consumers named ``application01-<uuid>`` ... For the HRW-style
  methods each topic gets ``linker_workers = min(N, ceil(P / 8))`` (an
  operator sizing owners so none takes more than 8 partitions of a topic);
  range and roundrobin subscribe every consumer to every topic, as Signal did.

Metrics, all partition-level with every partition weighing 1:

* ``max_over_mean``: the busiest slot's partitions over the mean.
* ``moved_on_leave_over_ideal``: a trial removes one slot; a partition moved
  if its owner changed. Ideal = what the departed slot held. Pooled over
  trials: sum(moved) / sum(ideal).
* ``moved_on_join_over_ideal``: a trial adds one slot; ideal = total / (N+1).

For HRW, balanced HRW and the ring, topics map to owners and each topic's
partitions are split among its owners by ``split_partitions`` starting from
the partition map in force, which is what the claim table does: a live owner
keeps its rows. Balanced HRW also starts from the owners in force (it is
sticky by design); its stateless variant is printed for comparison. Range and
roundrobin are Kafka's eager assignors and recompute from scratch.

``full_assignment_s`` is the best of 3 runs of ``assign`` for 10,000 topics x
1,000 slots; ``naive_assignment_s`` is one run of a per-pair Python loop
calling mmh3 twice per pair (as seed 000 describes), checked to give the same
owners.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import mmh3

from lagsched.core.assignors import PartitionMap, range_assign, ring_assign, roundrobin_assign
from lagsched.core.balance import balanced_assign
from lagsched.core.rendezvous import (
    SLOT_SEED,
    TOPIC_SEED,
    Assignment,
    TopicSpec,
    assign,
    fmix64,
    partition_map,
)

__all__ = ["Placement", "Scenario", "main", "run", "signal_scenario", "skewed_scenario"]

DEFAULT_OUT = Path("bench/results/assignment.json")
METHODS = ("hrw", "balanced_hrw", "ring_100v", "range", "roundrobin")


@dataclass(frozen=True, slots=True)
class Scenario:
    """Inputs of one benchmark scenario.

    Attributes:
        name: key in the JSON output.
        topics: the topics with partitions and linker_workers.
        slots: the slot (consumer) ids before any leave or join.
        joiners: one new slot id per join trial.
        leavers: one departing slot id per leave trial.
    """

    name: str
    topics: tuple[TopicSpec, ...]
    slots: tuple[str, ...]
    joiners: tuple[str, ...]
    leavers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """What a method decided: partition owners and, for HRW-style methods, topic owners."""

    partitions: PartitionMap
    owners: Assignment | None = None


Method = Callable[[Sequence[TopicSpec], Sequence[str], "Placement | None"], Placement]


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def skewed_scenario(seed: int = 7, trials: int = 10) -> Scenario:
    """1,000 topics, power-law partitions 1..64, linker_workers 1..4, 50 slots."""
    rng = random.Random(seed)
    sizes = list(range(1, 65))
    weights = [p**-1.2 for p in sizes]
    topics = tuple(TopicSpec(_uuid(rng), rng.choices(sizes, weights)[0], rng.randint(1, 4)) for _ in range(1000))
    slots = tuple(_uuid(rng) for _ in range(50))
    joiners = tuple(_uuid(rng) for _ in range(trials))
    leavers = tuple(rng.sample(slots, trials))
    return Scenario("skewed", topics, slots, joiners, leavers)


def signal_scenario(seed: int = 11, trials: int = 10, consumers: int = 12) -> Scenario:
    """Seed 002: ~80 topics of very uneven size, consumers ``applicationNN-<uuid>``."""
    rng = random.Random(seed)
    slots = tuple(f"application{i + 1:02d}-{_uuid(rng)}" for i in range(consumers))
    topics = []
    for _ in range(80):
        p = max(1, min(128, round(2 ** rng.uniform(0, 7))))
        topics.append(TopicSpec(_uuid(rng), p, min(consumers, math.ceil(p / 8))))
    joiners = tuple(f"application{consumers + 1:02d}-{_uuid(rng)}" for _ in range(trials))
    leavers = tuple(rng.sample(slots, min(trials, consumers)))
    return Scenario("signal", tuple(topics), slots, joiners, leavers)


def _prev_partitions(prev: Placement | None) -> PartitionMap | None:
    return prev.partitions if prev is not None else None


def _hrw(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = assign(topics, slots)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _balanced(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = balanced_assign(topics, slots, prev.owners if prev is not None else None)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _balanced_stateless(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = balanced_assign(topics, slots, None)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _ring(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = ring_assign(topics, slots, 100)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _range(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    return Placement(range_assign(topics, slots))


def _roundrobin(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    return Placement(roundrobin_assign(topics, slots))


ALL_METHODS: dict[str, Method] = {
    "hrw": _hrw,
    "balanced_hrw": _balanced,
    "ring_100v": _ring,
    "range": _range,
    "roundrobin": _roundrobin,
    "balanced_hrw_stateless": _balanced_stateless,
}


def _loads(partitions: PartitionMap, slots: Sequence[str]) -> dict[str, int]:
    loads = dict.fromkeys(slots, 0)
    for owner in partitions.values():
        loads[owner] += 1
    return loads


def _moved(before: PartitionMap, after: PartitionMap) -> int:
    return sum(1 for key, owner in before.items() if after[key] != owner)


def measure(scenario: Scenario, method: Method) -> dict[str, float]:
    """Balance and pooled movement ratios of one method on one scenario."""
    topics, slots = scenario.topics, list(scenario.slots)
    base = method(topics, slots, None)
    loads = _loads(base.partitions, slots)
    total = sum(loads.values())
    worst = max(loads.values()) / (total / len(slots))
    moved = ideal = 0.0
    for leaver in scenario.leavers:
        rest = [s for s in slots if s != leaver]
        after = method(topics, rest, base)
        moved += _moved(base.partitions, after.partitions)
        ideal += loads[leaver]
        worst_after = max(_loads(after.partitions, rest).values()) / (total / len(rest))
        worst = max(worst, worst_after)
    leave = moved / ideal
    moved = ideal = 0.0
    for joiner in scenario.joiners:
        grown = [*slots, joiner]
        after = method(topics, grown, base)
        moved += _moved(base.partitions, after.partitions)
        ideal += total / len(grown)
        worst_after = max(_loads(after.partitions, grown).values()) / (total / len(grown))
        worst = max(worst, worst_after)
    join = moved / ideal
    pairs = len({(t, s) for (t, _), s in base.partitions.items()})
    return {
        "max_over_mean": max(loads.values()) / (total / len(slots)),
        "moved_on_leave_over_ideal": leave,
        "moved_on_join_over_ideal": join,
        "worst_max_over_mean_after_churn": worst,
        "topic_slot_pairs": float(pairs),
    }


def naive_assign(topics: Sequence[TopicSpec], slot_ids: Sequence[str]) -> Assignment:
    """Seed 000 literally: per (topic, slot) pair hash, sort each topic's list, take the top.

    Calls mmh3 for every pair; the reference that ``assign`` must equal.
    """
    owners: dict[str, tuple[str, ...]] = {}
    for spec in topics:
        scored = []
        for s in slot_ids:
            th = mmh3.hash64(spec.topic_id, seed=TOPIC_SEED, signed=False)[0]
            sh = mmh3.hash64(s, seed=SLOT_SEED, signed=False)[0]
            scored.append((-fmix64(th ^ sh), s))
        scored.sort()
        owners[spec.topic_id] = tuple(s for _, s in scored[: spec.linker_workers])
    return Assignment(owners)


def time_full_assignment(
    n_topics: int = 10_000, n_slots: int = 1_000, seed: int = 3, repeats: int = 3
) -> tuple[float, float]:
    """(best fast ``assign`` seconds, naive loop seconds) for n_topics x n_slots."""
    rng = random.Random(seed)
    topics = [TopicSpec(_uuid(rng), rng.randint(1, 64), rng.randint(1, 4)) for _ in range(n_topics)]
    slots = [_uuid(rng) for _ in range(n_slots)]
    best = math.inf
    fast = Assignment({})
    for _ in range(repeats):
        t0 = time.perf_counter()
        fast = assign(topics, slots)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    slow = naive_assign(topics, slots)
    naive = time.perf_counter() - t0
    if slow != fast:
        raise AssertionError("vectorised assign() and the naive per-pair loop disagree")
    return best, naive


def run(trials: int = 10, naive: bool = True) -> tuple[dict[str, object], dict[str, dict[str, dict[str, float]]]]:
    """All measurements: (the JSON document, the full per-method table incl. extras)."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for scenario in (skewed_scenario(trials=trials), signal_scenario(trials=trials)):
        table[scenario.name] = {name: measure(scenario, m) for name, m in ALL_METHODS.items()}
    keys = ("max_over_mean", "moved_on_leave_over_ideal", "moved_on_join_over_ideal")
    doc: dict[str, object] = {
        "scenarios": {sc: {m: {k: round(rows[m][k], 4) for k in keys} for m in METHODS} for sc, rows in table.items()}
    }
    full, slow = time_full_assignment() if naive else (math.nan, math.nan)
    doc["full_assignment_s"] = round(full, 4)
    doc["naive_assignment_s"] = round(slow, 4)
    return doc, table


def _print(doc: dict[str, object], table: dict[str, dict[str, dict[str, float]]]) -> None:
    head = (
        f"{'scenario':8} {'method':24} {'max/mean':>8} {'leave/ideal':>11} {'join/ideal':>10}"
        f" {'worst max/mean':>14} {'topic-slot pairs':>16}"
    )
    print(head)
    print("-" * len(head))
    for sc, rows in table.items():
        for m, r in rows.items():
            print(
                f"{sc:8} {m:24} {r['max_over_mean']:8.3f} {r['moved_on_leave_over_ideal']:11.3f}"
                f" {r['moved_on_join_over_ideal']:10.3f} {r['worst_max_over_mean_after_churn']:14.3f}"
                f" {int(r['topic_slot_pairs']):16d}"
            )
    full = float(str(doc["full_assignment_s"]))
    slow = float(str(doc["naive_assignment_s"]))
    print()
    print(f"full assignment 10,000 topics x 1,000 slots: {full:.3f} s (target < 1 s)")
    print(f"naive per-pair loop, same output:           {slow:.3f} s")
    print(f"baseline ratio (naive / full):              {slow / full:.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table and write the JSON document."""
    parser = argparse.ArgumentParser(prog="python -m lagsched.bench.assignment")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON path (default {DEFAULT_OUT})")
    parser.add_argument("--trials", type=int, default=10, help="leave and join trials per scenario")
    args = parser.parse_args(argv)
    doc, table = run(trials=args.trials)
    _print(doc, table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
