"""Assignment benchmark: balance and movement of five assignors over many draws, and speed.

Run from the repository root::

    PYTHONPATH=plugins python -m lagsched_dev.bench.assignment [--out PATH] [--draws N] [--trials N] [--no-db]

Scenarios (seeded; each *draw* redraws the slot ids, the joiners and the leavers, so the HRW
rankings differ from draw to draw while the topics stay the same):

* ``skewed``: 1,000 topics, partitions 1..64 drawn from a bounded power law
  (P(p) ~ p^-1.2), ``linker_workers`` uniform in 1..4, 50 slots with UUID ids.
* ``signal``: seed 002's case: 80 topics with log-uniform partition counts
  1..128, 12 consumers named ``application01-<uuid>`` ... For the HRW-style
  methods each topic gets ``linker_workers = min(N, ceil(P / 8))`` (an
  operator sizing owners so none takes more than 8 partitions of a topic);
  range and roundrobin subscribe every consumer to every topic, as Signal did.
* ``uneven``: issue 8's case: 100 topics with power-law partition counts 1..128
  (P(p) ~ p^-1.2), ``linker_workers`` 1..4 skewed toward 1 (weights 8:4:2:1),
  13 UUID slots. Lanes are lumpy: the largest is close to a slot's mean load.

Metrics, all partition-level with every partition weighing 1. In each draw, the
base assignment is computed from scratch, then each trial starts from it: a
leave removes one slot (every slot of the draw in turn, up to ``--trials``), a
join adds one new slot (``--trials`` of them). A partition moved if its owner
changed.

* ``max_over_mean``: the busiest slot's partitions over the mean, from scratch.
* ``max_over_mean_after_churn``: the same after a leave or a join, worst trial.
* ``moved_on_leave_over_ideal``: moved / what the departed slot held, worst trial.
* ``moved_on_join_over_ideal``: moved / (total / (N + 1)), worst trial.

Each draw's figure is its **worst trial**, not a pooled ratio: that is the
number an operator sees on a bad day. The JSON gives, per scenario and method,
the worst over the draws, with the medians under ``"median"``;
``max_over_mean_lower_bound`` is the largest lane over the mean load, below
which no assignment can go.

For HRW, balanced HRW and the ring, topics map to owners and each topic's
partitions are split among its owners by ``split_partitions`` starting from
the partition map in force, which is what the claim table does: a live owner
keeps its rows. Balanced HRW also starts from the owners in force (it is
sticky by design); its stateless variant is printed for comparison. Range and
roundrobin are Kafka's eager assignors and recompute from scratch.

Speed (the worst over several draws of topics and slot ids, so a noisy
neighbour on the shared machine shows up rather than hides):

* ``full_assignment_s``: plain ``assign`` for 10,000 topics x 1,000 slots;
  ``naive_assignment_s``: one run of a per-pair Python loop calling mmh3 twice
  per pair (as seed 000 describes), checked to give the same owners.
* ``balanced_full_s``, ``balanced_sticky_join_s``, ``balanced_sticky_leave_s``:
  ``balanced_assign`` (what production runs) at 10,000 x 1,000 from scratch,
  then sticky after one slot joins and after one leaves.
* ``balanced_50k_s``: the slowest of those three at 50,000 topics x 2,000 slots;
  ``balanced_peak_mb``: peak resident memory of a fresh process that builds
  those inputs and runs the three calls (interpreter and inputs included).
* ``ownership_lock_hold_s``: how long ``adapters.ownership.current_assignment``
  holds a cluster's ``cluster_assignment_state`` row lock on the running stack's MariaDB, at
  10,000 topics x 1,000 slots, worst over from-scratch, join and leave
  recomputes in several rounds (a throwaway database, dropped afterwards).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mmh3

from lagsched.core.balance import balanced_assign
from lagsched.core.rendezvous import (
    SLOT_SEED,
    TOPIC_SEED,
    Assignment,
    TopicSpec,
    assign,
    fmix64,
    lane_loads,
    partition_map,
)
from lagsched_dev.bench.assignors import PartitionMap, range_assign, ring_assign, roundrobin_assign

__all__ = [
    "Draw",
    "Placement",
    "Scenario",
    "main",
    "measure_draw",
    "run",
    "signal_scenario",
    "skewed_scenario",
    "time_balanced",
    "uneven_scenario",
]

DEFAULT_OUT = Path("bench/results/assignment.json")
METHODS = ("hrw", "balanced_hrw", "ring_100v", "range", "roundrobin", "balanced_hrw_balance_first")
FIGURES = ("max_over_mean", "max_over_mean_after_churn", "moved_on_leave_over_ideal", "moved_on_join_over_ideal")
EXTRAS = (
    "max_over_mean_after_leave",
    "max_over_mean_after_join",
    "max_over_mean_after_leave_bound",
    "topic_slot_pairs",
)
#: The issue 8 targets: moved <= 1.2x ideal on leave and join, max/mean <= 1.10 after churn.
MOVE_TARGET = 1.2
BALANCE_TARGET = 1.10


@dataclass(frozen=True, slots=True)
class Draw:
    """One draw of a scenario: slot ids and the trials run from its base assignment.

    Attributes:
        slots: the slot (consumer) ids before any leave or join.
        joiners: one new slot id per join trial.
        leavers: one departing slot id per leave trial.
    """

    slots: tuple[str, ...]
    joiners: tuple[str, ...]
    leavers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    """Inputs of one benchmark scenario.

    Attributes:
        name: key in the JSON output.
        topics: the topics with partitions and linker_workers, the same in every draw.
        draw: makes draw ``d`` (slot ids, joiners, leavers) deterministically from ``d``.
    """

    name: str
    topics: tuple[TopicSpec, ...]
    draw: Callable[[int], Draw]


@dataclass(frozen=True, slots=True)
class Placement:
    """What a method decided: partition owners and, for HRW-style methods, topic owners."""

    partitions: PartitionMap
    owners: Assignment | None = None


Method = Callable[[Sequence[TopicSpec], Sequence[str], "Placement | None"], Placement]


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _power_law(rng: random.Random, top: int, alpha: float = 1.2) -> int:
    sizes = range(1, top + 1)
    return rng.choices(sizes, [p**-alpha for p in sizes])[0]


def _uuid_draw(seed: int, n_slots: int, trials: int, leave_all: bool = False) -> Callable[[int], Draw]:
    def draw(d: int) -> Draw:
        rng = random.Random(f"{seed}/{d}")
        slots = tuple(_uuid(rng) for _ in range(n_slots))
        joiners = tuple(_uuid(rng) for _ in range(trials))
        leavers = slots if leave_all else tuple(rng.sample(slots, min(trials, n_slots)))
        return Draw(slots, joiners, leavers)

    return draw


def skewed_scenario(seed: int = 7, trials: int = 5) -> Scenario:
    """1,000 topics, power-law partitions 1..64, linker_workers 1..4, 50 slots."""
    rng = random.Random(seed)
    topics = tuple(TopicSpec(_uuid(rng), _power_law(rng, 64), rng.randint(1, 4)) for _ in range(1000))
    return Scenario("skewed", topics, _uuid_draw(seed, 50, trials))


def signal_scenario(seed: int = 11, trials: int = 5, consumers: int = 12) -> Scenario:
    """Seed 002: ~80 topics of very uneven size, consumers ``applicationNN-<uuid>``."""
    rng = random.Random(seed)
    topics = []
    for _ in range(80):
        p = max(1, min(128, round(2 ** rng.uniform(0, 7))))
        topics.append(TopicSpec(_uuid(rng), p, min(consumers, math.ceil(p / 8))))

    def draw(d: int) -> Draw:
        r = random.Random(f"{seed}/{d}")
        slots = tuple(f"application{i + 1:02d}-{_uuid(r)}" for i in range(consumers))
        joiners = tuple(f"application{consumers + 1:02d}-{_uuid(r)}" for _ in range(trials))
        return Draw(slots, joiners, slots)

    return Scenario("signal", tuple(topics), draw)


def uneven_scenario(seed: int = 13, trials: int = 5, n_slots: int = 13) -> Scenario:
    """Issue 8: ~100 topics, power-law partitions 1..128, linker_workers 1..4 skewed to 1, 13 slots."""
    rng = random.Random(seed)
    topics = tuple(
        TopicSpec(_uuid(rng), _power_law(rng, 128), rng.choices((1, 2, 3, 4), (8, 4, 2, 1))[0]) for _ in range(100)
    )
    return Scenario("uneven", topics, _uuid_draw(seed, n_slots, trials, leave_all=True))


def _prev_partitions(prev: Placement | None) -> PartitionMap | None:
    return prev.partitions if prev is not None else None


def _hrw(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = assign(topics, slots)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _balanced(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = balanced_assign(topics, slots, prev.owners if prev is not None else None)
    return Placement(partition_map(topics, owners, _prev_partitions(prev)), owners)


def _balanced_balance_first(topics: Sequence[TopicSpec], slots: Sequence[str], prev: Placement | None) -> Placement:
    owners = balanced_assign(topics, slots, prev.owners if prev is not None else None, move_slack=math.inf)
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
    "balanced_hrw_balance_first": _balanced_balance_first,
    "balanced_hrw_stateless": _balanced_stateless,
}


def _loads(partitions: PartitionMap, slots: Sequence[str]) -> dict[str, int]:
    loads = dict.fromkeys(slots, 0)
    for owner in partitions.values():
        loads[owner] += 1
    return loads


def _moved(before: PartitionMap, after: PartitionMap) -> int:
    return sum(1 for key, owner in before.items() if after[key] != owner)


def _max_over_mean(partitions: PartitionMap, slots: Sequence[str], total: int) -> float:
    return max(_loads(partitions, slots).values()) / (total / len(slots))


def leave_bound(
    topics: Sequence[TopicSpec], owners: Assignment, loads: dict[str, int], leaver: str, slack: float = MOVE_TARGET - 1
) -> float:
    """Lowest max/mean any assignment can reach after ``leaver`` leaves, moving <= (1 + slack) x ideal.

    For every topic the leaver owned (unless all slots own it, when k shrinks instead), some slot
    that did not own it must own it afterwards, with a lane of at least the topic's smallest
    share. That slot can shed at most the allowance (``slack`` x what the leaver held), so it ends
    at least at its load plus that lane minus the allowance. Each topic is looked at alone, so the
    bound is not always attainable.
    """
    rest = [s for s in loads if s != leaver]
    mean = sum(loads.values()) / len(rest)
    allowance = slack * loads[leaver]
    bound = 0.0
    for spec in topics:
        held = owners.owners_of(spec.topic_id)
        if leaver not in held:
            continue
        others = [loads[s] for s in rest if s not in held]
        smallest = min(lane_loads(spec, len(held)))
        if others and smallest > 0:
            bound = max(bound, (min(others) + smallest - allowance) / mean)
    return bound


def measure_draw(topics: Sequence[TopicSpec], draw: Draw, method: Method) -> dict[str, float]:
    """One method on one draw: base balance, and the worst trial of each kind."""
    slots = list(draw.slots)
    base = method(topics, slots, None)
    loads = _loads(base.partitions, slots)
    total = sum(loads.values())
    after_leave = after_join = leave = join = bound = 0.0
    for leaver in draw.leavers:
        rest = [s for s in slots if s != leaver]
        after = method(topics, rest, base)
        if loads[leaver]:
            leave = max(leave, _moved(base.partitions, after.partitions) / loads[leaver])
        after_leave = max(after_leave, _max_over_mean(after.partitions, rest, total))
        if base.owners is not None:
            bound = max(bound, leave_bound(topics, base.owners, loads, leaver))
    for joiner in draw.joiners:
        grown = [*slots, joiner]
        after = method(topics, grown, base)
        join = max(join, _moved(base.partitions, after.partitions) / (total / len(grown)))
        after_join = max(after_join, _max_over_mean(after.partitions, grown, total))
    return {
        "max_over_mean": max(loads.values()) / (total / len(slots)),
        "max_over_mean_after_churn": max(after_leave, after_join),
        "moved_on_leave_over_ideal": leave,
        "moved_on_join_over_ideal": join,
        "max_over_mean_after_leave": after_leave,
        "max_over_mean_after_join": after_join,
        "max_over_mean_after_leave_bound": bound,
        "topic_slot_pairs": float(len({(t, s) for (t, _), s in base.partitions.items()})),
    }


def lower_bound(topics: Sequence[TopicSpec], n_slots: int) -> float:
    """Largest lane over the mean load with ``n_slots`` slots: no assignment has a lower max/mean."""
    total = sum(t.load for t in topics)
    largest = max(max(lane_loads(t, min(t.linker_workers, n_slots)), default=0.0) for t in topics)
    return largest / (total / n_slots)


def measure_scenario(scenario: Scenario, draws: int, methods: dict[str, Method]) -> dict[str, dict[str, Any]]:
    """Per method: the worst over ``draws`` draws of each figure, and the medians."""
    per_method: dict[str, list[dict[str, float]]] = {name: [] for name in methods}
    for d in range(draws):
        draw = scenario.draw(d)
        for name, method in methods.items():
            per_method[name].append(measure_draw(scenario.topics, draw, method))
    out: dict[str, dict[str, Any]] = {}
    for name, rows in per_method.items():
        keys = [*FIGURES, *EXTRAS]
        out[name] = {k: max(r[k] for r in rows) for k in keys}
        out[name]["median"] = {k: statistics.median(r[k] for r in rows) for k in keys}
        out[name]["draws"] = len(rows)
    return out


# --------------------------------------------------------------------------- speed


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


def speed_inputs(n_topics: int, n_slots: int, seed: int) -> tuple[list[TopicSpec], list[str], str]:
    """Topics (partitions 1..64, linker_workers 1..4), slot ids and one joiner id."""
    rng = random.Random(seed)
    topics = [TopicSpec(_uuid(rng), rng.randint(1, 64), rng.randint(1, 4)) for _ in range(n_topics)]
    slots = [_uuid(rng) for _ in range(n_slots)]
    return topics, slots, _uuid(rng)


def time_full_assignment(
    n_topics: int = 10_000, n_slots: int = 1_000, seed: int = 3, repeats: int = 3
) -> tuple[float, float]:
    """(worst fast ``assign`` seconds over ``repeats``, naive loop seconds) for n_topics x n_slots."""
    topics, slots, _ = speed_inputs(n_topics, n_slots, seed)
    worst = 0.0
    fast = Assignment({})
    for _ in range(repeats):
        t0 = time.perf_counter()
        fast = assign(topics, slots)
        worst = max(worst, time.perf_counter() - t0)
    t0 = time.perf_counter()
    slow = naive_assign(topics, slots)
    naive = time.perf_counter() - t0
    if slow != fast:
        raise AssertionError("vectorised assign() and the naive per-pair loop disagree")
    return worst, naive


def time_balanced(n_topics: int, n_slots: int, seed: int) -> dict[str, float]:
    """Seconds of ``balanced_assign`` from scratch, then sticky after one join and after one leave."""
    topics, slots, joiner = speed_inputs(n_topics, n_slots, seed)
    t0 = time.perf_counter()
    base = balanced_assign(topics, slots)
    t1 = time.perf_counter()
    balanced_assign(topics, [*slots, joiner], base)
    t2 = time.perf_counter()
    balanced_assign(topics, slots[1:], base)
    t3 = time.perf_counter()
    return {"full": t1 - t0, "join": t2 - t1, "leave": t3 - t2}


def _time_balanced_child(n_topics: int, n_slots: int, seed: int, out: Any) -> None:
    times = time_balanced(n_topics, n_slots, seed)
    # ru_maxrss is in KiB on Linux.
    out.put({**times, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def time_balanced_fresh(n_topics: int, n_slots: int, seed: int) -> dict[str, float]:
    """``time_balanced`` in a fresh process, plus that process's peak resident memory in MB."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_time_balanced_child, args=(n_topics, n_slots, seed, queue))
    proc.start()
    result: dict[str, float] = queue.get(timeout=600)
    proc.join(timeout=60)
    return result


def measure_lock_hold(n_topics: int = 10_000, n_slots: int = 1_000, rounds: int = 3, seed: int = 5) -> dict[str, float]:
    """Worst seconds ``current_assignment`` holds the cluster's ``cluster_assignment_state`` lock, on the real MariaDB.

    A throwaway database with every migration applied; per round, one recompute from scratch
    (the owners table emptied first), one after a slot joins and one after a slot leaves.
    """
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.ownership import current_assignment
    from lagsched.connections import mysql_params
    from lagsched_dev.bench import use_local_stack_connections
    from lagsched_dev.bench.claims import create_database, drop_database

    use_local_stack_connections()  # outside Airflow and the tests: the local stack, as the CLI does
    topics, slots, _ = speed_inputs(n_topics, n_slots, seed)
    params = create_database(mysql_params(), prefix="lagsched_bench_own")
    worst = {"full": 0.0, "join": 0.0, "leave": 0.0}
    call = {"full": 0.0, "join": 0.0, "leave": 0.0}
    try:
        conn = connect(params)
        try:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO topics (topic_id, cluster, name, partition_count, linker_workers)"
                    " VALUES (%s, 'bench', %s, %s, %s)",
                    [(t.topic_id, f"bench-{t.topic_id}", t.partitions, t.linker_workers) for t in topics],
                )
            conn.commit()
            rng = random.Random(seed)
            for _ in range(rounds):
                with conn.cursor() as cur:
                    cur.execute("DELETE FROM topic_owners WHERE cluster = 'bench'")
                    cur.execute("UPDATE cluster_assignment_state SET inputs_hash = '' WHERE cluster = 'bench'")
                conn.commit()
                live = list(slots)
                steps = [("full", live), ("join", [*live, _uuid(rng)]), ("leave", live[1:])]
                for name, step in steps:
                    t0 = time.perf_counter()
                    view = current_assignment(conn, "bench", step)
                    elapsed = time.perf_counter() - t0
                    if not view.recomputed:
                        raise AssertionError(f"{name}: expected a recompute, got {view}")
                    worst[name] = max(worst[name], view.lock_held_s)
                    call[name] = max(call[name], elapsed)
                rng.shuffle(slots)
        finally:
            conn.close()
    finally:
        drop_database(params)
    return {
        "ownership_lock_hold_s": max(worst.values()),
        **{f"lock_hold_{k}_s": v for k, v in worst.items()},
        **{f"call_{k}_s": v for k, v in call.items()},
    }


def measure_speed(draws: int = 3, naive: bool = True, db: bool = True) -> dict[str, float]:
    """Every speed figure, each the worst over ``draws`` draws of inputs."""
    load_before = os.getloadavg()[0]
    full, slow = time_full_assignment() if naive else (math.nan, math.nan)
    small = [time_balanced(10_000, 1_000, seed) for seed in range(draws)]
    big = [time_balanced_fresh(50_000, 2_000, seed) for seed in range(max(1, draws - 1))]
    out = {
        "full_assignment_s": full,
        "naive_assignment_s": slow,
        "balanced_full_s": max(r["full"] for r in small),
        "balanced_sticky_join_s": max(r["join"] for r in small),
        "balanced_sticky_leave_s": max(r["leave"] for r in small),
        "balanced_50k_s": max(max(r["full"], r["join"], r["leave"]) for r in big),
        "balanced_50k_full_s": max(r["full"] for r in big),
        "balanced_50k_sticky_join_s": max(r["join"] for r in big),
        "balanced_50k_sticky_leave_s": max(r["leave"] for r in big),
        "balanced_peak_mb": max(r["peak_mb"] for r in big),
        "speed_draws": float(draws),
    }
    if db:
        out.update(measure_lock_hold())
    # The machine is shared: a high load average says the timings above are pessimistic.
    out["load_avg_1m_before"] = load_before
    out["load_avg_1m_after"] = os.getloadavg()[0]
    return out


# --------------------------------------------------------------------------- the document


def _scenarios(trials: int) -> list[Scenario]:
    return [skewed_scenario(trials=trials), signal_scenario(trials=trials), uneven_scenario(trials=trials)]


def run(
    draws: int = 20, trials: int = 5, naive: bool = True, db: bool = True, speed: bool = True
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """All measurements: (the JSON document, the full per-method table incl. extras)."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    bounds: dict[str, float] = {}
    for scenario in _scenarios(trials):
        table[scenario.name] = measure_scenario(scenario, draws, ALL_METHODS)
        bounds[scenario.name] = lower_bound(scenario.topics, len(scenario.draw(0).slots))
    scenarios: dict[str, Any] = {}
    for sc, rows in table.items():
        scenarios[sc] = {"max_over_mean_lower_bound": round(bounds[sc], 4)}
        for m in METHODS:
            r = rows[m]
            keys = [*FIGURES, "max_over_mean_after_leave", "max_over_mean_after_join"]
            if r["max_over_mean_after_leave_bound"] > 0:
                keys.append("max_over_mean_after_leave_bound")
            scenarios[sc][m] = {
                **{k: round(r[k], 4) for k in keys},
                "draws": r["draws"],
                "median": {k: round(r["median"][k], 4) for k in keys},
            }
    doc: dict[str, Any] = {"scenarios": scenarios}
    if speed:
        doc.update({k: round(v, 4) for k, v in measure_speed(naive=naive, db=db).items()})
    return doc, table


def _print(doc: dict[str, Any], table: dict[str, dict[str, dict[str, Any]]]) -> None:
    columns = [
        ("max/mean", "max_over_mean"),
        ("after leave", "max_over_mean_after_leave"),
        ("after join", "max_over_mean_after_join"),
        ("leave bound", "max_over_mean_after_leave_bound"),
        ("leave/ideal", "moved_on_leave_over_ideal"),
        ("join/ideal", "moved_on_join_over_ideal"),
    ]
    head = f"{'scenario':8} {'method':26} " + " ".join(f"{name:>14}" for name, _ in columns) + f" {'pairs':>6}"
    print("worst over the draws (median in brackets); each draw's figure is its worst trial")
    print("leave bound: the lowest max/mean any assignment moving <= 1.2x ideal can reach after the worst leave")
    print(head)
    print("-" * len(head))
    for sc, rows in table.items():
        for m, r in rows.items():
            cells = " ".join(f"{r[k]:6.3f} ({r['median'][k]:5.3f})" if r[k] > 0 else f"{'-':>14}" for _, k in columns)
            print(f"{sc:8} {m:26} {cells} {int(r['median']['topic_slot_pairs']):6d}")
        print(f"{sc:8} {'largest lane / mean':26} {doc['scenarios'][sc]['max_over_mean_lower_bound']:6.3f}")
    print()
    for key in sorted(k for k in doc if k != "scenarios"):
        print(f"{key:32} {doc[key]}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table and write the JSON document."""
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.bench.assignment")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON path (default {DEFAULT_OUT})")
    parser.add_argument("--draws", type=int, default=20, help="draws of slot ids per scenario (default 20)")
    parser.add_argument("--trials", type=int, default=5, help="join trials per draw, and leave trials (skewed)")
    parser.add_argument("--no-db", action="store_true", help="skip the lock-hold measurement on MariaDB")
    parser.add_argument("--no-speed", action="store_true", help="balance and movement only; write nothing")
    args = parser.parse_args(argv)
    doc, table = run(draws=args.draws, trials=args.trials, db=not args.no_db, speed=not args.no_speed)
    _print(doc, table)
    if args.no_speed:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
