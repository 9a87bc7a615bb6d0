"""The consume DAG's planning step: which slots each cluster needs that are not running yet.

A cluster needs as many slots as its most demanding enabled topic has ``linker_workers``: a topic's
lanes go to distinct slots (docs/assignment.md), so fewer slots would leave lanes unowned. It is
capped by the cluster's ``max_slots`` (Variable ``lagsched_clusters``); the Airflow pool
``lagsched_consume`` then bounds how many of all clusters' slots run at once. A cluster with no
enabled topic needs none.

Slots are named ``<cluster>-slot-<n>``, n from 1: the consumer derives a stable slot id from the
name (`lagsched.adapters.slots.slot_id_for`), so slot n of one start is slot n of the next and
keeps its topics (rendezvous ranking). Slots live long (the cluster's ``slot_budget_s``, an hour
by default), so a run starts only the needed slots whose lock (`lagsched.adapters.slots.SlotLock`)
no process holds: a scale-up starts the missing ones at once and leaves the running ones alone.
A slot numbered above the need leaves by itself at its next batch boundary (``--slot-number``,
``--max-slots``).

A cluster with ``standby_slots`` k also runs the k slots numbered after the need (within
``max_slots``): they start Spark and stand by without claiming, so a scale-up's new slot is
already warm and joins within a second of the decision; on a scale-down the surplus slot stands
by again instead of exiting (``--standby-slots``).

`ConsumePlan.of` is pure; `plan_consume` reads the registry and the slot locks.

Example:
    >>> plan = ConsumePlan.of({"eu": 3}, {"eu": 4}, SlotOptions(), running={"eu-slot-2"})
    >>> [s.name for s in plan.slots]
    ['eu-slot-1', 'eu-slot-3']
    >>> plan.slots[1].args[:8]
    ('--slot', 'eu-slot-3', '--cluster', 'eu', '--slot-number', '3', '--max-slots', '4')
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lagsched.adapters.slots import SlotLock, slot_id_for
from lagsched.adapters.topics import load_topics
from lagsched.core.cadence import CommitCadence
from lagsched.core.clusters import DEFAULT_SLOT_BUDGET_S, ClusterConfig
from lagsched.core.completeness import DEFAULT_ALLOWED_LATENESS_S
from lagsched.core.lake import job_args
from lagsched.core.registry import TopicRow
from lagsched.workflows.slot_settings import option

__all__ = ["ConsumePlan", "SlotOptions", "SlotPlan", "plan_consume", "slot_name", "slots_needed", "slots_to_run"]

log = logging.getLogger(__name__)


def slot_name(cluster: str, n: int) -> str:
    """The name of a cluster's ``n``-th slot (1-based), as the consumer's ``--slot``."""
    if n < 1:
        raise ValueError(f"slot numbers start at 1, got {n}")
    return f"{cluster}-slot-{n}"


def slots_needed(topics: Iterable[TopicRow], max_slots: int) -> int:
    """Slots one cluster needs: the largest ``linker_workers`` of its enabled topics, at most ``max_slots``.

    >>> from lagsched.core.registry import TopicRow
    >>> rows = [TopicRow("a", "c", "t1", None, 4, -1, 3, None, None, True),
    ...         TopicRow("b", "c", "t2", None, 8, -1, 6, None, None, False)]
    >>> slots_needed(rows, 8), slots_needed(rows, 2), slots_needed([], 8)
    (3, 2, 0)
    """
    wanted = max((t.linker_workers for t in topics if t.enabled), default=0)
    return max(0, min(wanted, max_slots))


def slots_to_run(needed: int, max_slots: int, standby: int = 0) -> int:
    """Slots to keep running for a cluster: the need and ``standby`` warm ones, at most ``max_slots``;
    none for a cluster that needs none (nothing to stand by for).

    >>> slots_to_run(2, 4), slots_to_run(2, 4, 1), slots_to_run(4, 4, 1), slots_to_run(0, 4, 1)
    (2, 3, 4, 0)
    """
    if needed <= 0:
        return 0
    return min(needed + standby, max_slots)


@dataclass(frozen=True, slots=True)
class SlotOptions:
    """Consumer options that override every slot's defaults (`lagsched/jobs/consume.py --help`).

    Attributes:
        budget_s: each slot runs this long, then finishes its batch, hands its rows back and exits
            0, and the next consume run starts it again; None: the cluster's ``slot_budget_s``.
        min_interval_s: a batch waits this long since the last one ...
        min_records: ... unless this many records are waiting.
    """

    budget_s: float | None = None
    min_interval_s: float | None = None
    min_records: int | None = None

    def __post_init__(self) -> None:
        if self.budget_s is not None and not 10 <= self.budget_s <= 86_400:
            raise ValueError(f"budget_s={self.budget_s}: use 10 to 86400 seconds")

    def args(self, cluster_budget_s: float = DEFAULT_SLOT_BUDGET_S) -> list[str]:
        """The job's options for what this overrides (named as `ConsumerSettings` names them); the rest
        are the job's defaults."""
        given = {"budget_s": self.budget_s if self.budget_s is not None else cluster_budget_s,
                 "min_interval_s": self.min_interval_s, "min_records": self.min_records}  # fmt: skip
        return [arg for name, value in given.items() if value is not None for arg in (option(name), _number(value))]


def cadence_args(cadence: CommitCadence) -> tuple[str, ...]:
    """The job's options for a commit cadence (a volume bound of None is 0, no bound).

    >>> cadence_args(CommitCadence(interval_s=60, max_records=None))
    ('--commit-interval-s', '60', '--commit-max-records', '0', '--commit-max-bytes', '1073741824')
    """
    return (
        option("commit_interval_s"), _number(cadence.interval_s),
        option("commit_max_records"), str(cadence.max_records or 0),
        option("commit_max_bytes"), str(cadence.max_bytes or 0),
    )  # fmt: skip


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """One slot of this run: its cluster, name, Kafka Connection and ``consume.py`` arguments."""

    cluster: str
    name: str
    kafka_conn_id: str
    args: tuple[str, ...]

    def as_kwargs(self) -> dict[str, Any]:
        """The mapped operator's arguments (``expand_kwargs``)."""
        return {"application_args": list(self.args), "kafka_conn_id": self.kafka_conn_id}


@dataclass(frozen=True, slots=True)
class ConsumePlan:
    """The slots one consume run starts.

    Attributes:
        wanted: cluster -> the largest ``linker_workers`` of its enabled topics.
        slots: every slot to start, cluster by cluster, by number.
        running: names of needed slots already running (not started again).
        planned: cluster -> the slots it should run (need and standby, at most ``max_slots``): those
            started plus those running. The alert on missing slots compares the live ones with it.
    """

    wanted: Mapping[str, int]
    slots: tuple[SlotPlan, ...] = field(default=())
    running: tuple[str, ...] = ()
    planned: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        wanted: Mapping[str, int],
        max_slots: Mapping[str, int],
        options: SlotOptions,
        conn_ids: Mapping[str, str] | None = None,
        sinks: Mapping[str, Mapping[str, str]] | None = None,
        *,
        budgets: Mapping[str, int] | None = None,
        rates: Mapping[str, float | None] | None = None,
        standbys: Mapping[str, int] | None = None,
        cadences: Mapping[str, CommitCadence] | None = None,
        routes: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        lateness: Mapping[str, int] | None = None,
        running: Collection[str] = (),
    ) -> ConsumePlan:
        """``sinks``: each cluster's ``sink`` settings (``lagsched_clusters``), passed on as job options;
        ``budgets``: each cluster's ``slot_budget_s``; ``rates``: each cluster's ``slot_max_rate``;
        ``standbys``: each cluster's ``standby_slots``; ``cadences``: each cluster's commit cadence
        (`ClusterConfig.cadence`); ``routes``: each cluster's routes (as ``lagsched_clusters`` has
        them), passed as ``--routes``; ``lateness``: each cluster's ``allowed_lateness_s``, passed
        when not the default; ``running``: slot names already running."""
        slots: list[SlotPlan] = []
        skipped: list[str] = []
        planned: dict[str, int] = {}
        for cluster in sorted(wanted):
            standby = (standbys or {}).get(cluster, 0)
            count = planned[cluster] = slots_to_run(wanted[cluster], max_slots[cluster], standby)
            conn_id = (conn_ids or {}).get(cluster, "lagsched_kafka")
            budget = (budgets or {}).get(cluster, DEFAULT_SLOT_BUDGET_S)
            for n in range(1, count + 1):
                name = slot_name(cluster, n)
                if name in running:
                    skipped.append(name)
                    continue
                sink = job_args((sinks or {}).get(cluster, {}))
                numbers = ("--slot-number", str(n), "--max-slots", str(max_slots[cluster]))
                rate = (rates or {}).get(cluster)
                capped = () if rate is None else ("--max-rate", _number(rate))
                warm = ("--standby-slots", str(standby)) if standby else ()
                cadence = cadence_args((cadences or {}).get(cluster, CommitCadence()))
                routed = (routes or {}).get(cluster)
                typed = ("--routes", json.dumps(list(routed), sort_keys=True)) if routed else ()
                late_s = (lateness or {}).get(cluster, DEFAULT_ALLOWED_LATENESS_S)
                late = ("--allowed-lateness-s", str(late_s)) if late_s != DEFAULT_ALLOWED_LATENESS_S else ()
                args = (
                    "--slot", name, "--cluster", cluster, *numbers, *warm, *options.args(budget), *capped, *cadence,
                    *sink, *typed, *late,
                )  # fmt: skip
                slots.append(SlotPlan(cluster, name, conn_id, args))
        return cls(dict(wanted), tuple(slots), tuple(skipped), planned)

    def per_cluster(self) -> dict[str, int]:
        counts = {c: 0 for c in self.wanted}
        for s in self.slots:
            counts[s.cluster] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "wanted": dict(self.wanted),
            "start": self.per_cluster(),
            "names": [s.name for s in self.slots],
            "running": list(self.running),
            "planned": dict(self.planned),
        }


def plan_consume(
    conn: Any, clusters: Sequence[ClusterConfig], options: SlotOptions, locks: SlotLock | None = None
) -> ConsumePlan:
    """Read each cluster's enabled topics and plan the slots to start (see the module doc).

    ``locks``: the slot locks in Redis; a needed slot whose lock is held is running and not
    started again. None: start every needed slot (a second start of a running one leaves at once).
    """
    wanted: dict[str, int] = {}
    for c in clusters:
        topics = load_topics(conn, c.name)
        wanted[c.name] = max((t.linker_workers for t in topics), default=0)
        if wanted[c.name] > c.max_slots:
            log.warning(
                "cluster %s: a topic wants %d workers but max_slots is %d; running %d slot(s), so some lanes "
                "stay unowned (raise max_slots in lagsched_clusters, and the pool lagsched_consume)",
                c.name, wanted[c.name], c.max_slots, c.max_slots,
            )  # fmt: skip
    running: set[str] = set()
    if locks is not None:
        names = [
            slot_name(c.name, n)
            for c in clusters
            for n in range(1, slots_to_run(wanted[c.name], c.max_slots, c.standby_slots) + 1)
        ]
        ids = {slot_id_for(name): name for name in names}
        running = {ids[slot_id] for slot_id in locks.holders(list(ids))}
    plan = ConsumePlan.of(
        wanted,
        {c.name: c.max_slots for c in clusters},
        options,
        {c.name: c.kafka_conn_id for c in clusters},
        {c.name: c.sink_settings() for c in clusters},
        budgets={c.name: c.slot_budget_s for c in clusters},
        rates={c.name: c.slot_max_rate for c in clusters},
        standbys={c.name: c.standby_slots for c in clusters},
        cadences={c.name: c.cadence for c in clusters},
        lateness={c.name: c.allowed_lateness_s for c in clusters},
        routes={c.name: [r.as_dict() for r in c.routes] for c in clusters if c.routes},
        running=running,
    )
    log.info("consume plan: %s", plan.as_dict())
    return plan
