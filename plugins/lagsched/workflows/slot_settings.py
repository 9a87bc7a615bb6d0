"""A slot run's settings: the consume job's command line, as the slot's life and its batches read them.

`ConsumerSettings` is the one home of the slot's defaults: the job's command line takes them from
`default` (``jobs/consume.py``), and the consume plan (`lagsched.workflows.consume_plan.SlotOptions`)
passes only what it overrides, by the same names.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from lagsched.core.batches import StartFrom
from lagsched.core.cadence import (
    DEFAULT_COMMIT_INTERVAL_S,
    DEFAULT_COMMIT_MAX_BYTES,
    DEFAULT_COMMIT_MAX_RECORDS,
    CommitCadence,
)

__all__ = ["ConsumerSettings", "default", "option"]


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """A run's knobs (the job's command line; docs/consumer.md explains each)."""

    slot_id: str
    #: The registry cluster (``topics.cluster``); the DAGs' default is the Kafka Connection id.
    cluster: str = "lagsched_kafka"
    budget_s: float = 3600.0
    max_records: int = 100_000
    min_interval_s: float = 5.0
    min_records: int = 10_000
    lease_s: float = 60.0
    heartbeat_s: float = 5.0
    group: str | None = None
    exit_when_idle: bool = False
    start_from: StartFrom = StartFrom.EARLIEST
    #: How long a wait between batches sleeps at most before looking again.
    poll_s: float = 1.0
    #: The slot's rack (availability zone, as brokers name theirs in ``broker.rack``); None: none.
    #: It makes the slot prefer partitions led from its rack and fetch from same-rack replicas.
    rack: str | None = None
    #: The slot's number among its cluster's slots (``<cluster>-slot-<n>``) and the cluster's
    #: ``max_slots``: slot n leaves at a batch boundary once the cluster needs fewer than n slots
    #: (a scale-down). None (a slot started by hand): it leaves only when it owns nothing.
    slot_number: int | None = None
    max_slots: int | None = None
    #: With ``slot_number``: a slot numbered at most this many above the need (and within
    #: ``max_slots``) stands by instead of leaving: Spark up, nothing claimed, not in the live set,
    #: and it joins as soon as the need reaches its number (the cluster's ``standby_slots``).
    standby_slots: int = 0
    #: How long a slot rides through an outage of Kafka, MySQL or Redis (waiting with backoff)
    #: before it ends the run with exit 1 (`lagsched.core.outage`); None: ``lease_s``, past which
    #: its rows may have failed over to other slots anyway.
    outage_s: float | None = None
    #: Records/s the slot reads at most (the cluster's ``slot_max_rate``); None: as fast as it can.
    #: Batches then hold at most ``max_rate x max(min_interval_s, 1)`` records and start no sooner
    #: than their predecessor's records allow at that rate (`lagsched.core.batches.next_batch_at`).
    max_rate: float | None = None
    #: The commit cadence (`lagsched.core.cadence.CommitCadence`, the cluster's ``commit_*``): batches
    #: are written at the pace above and committed to the table at most once every
    #: ``commit_interval_s``, sooner once ``commit_max_records`` records or ``commit_max_bytes`` bytes
    #: wait (None: no such bound); 0 commits every batch.
    commit_interval_s: float = DEFAULT_COMMIT_INTERVAL_S
    commit_max_records: int | None = DEFAULT_COMMIT_MAX_RECORDS
    commit_max_bytes: int | None = DEFAULT_COMMIT_MAX_BYTES

    def __post_init__(self) -> None:
        checks = {
            "budget_s": self.budget_s > 0,
            "max_records": self.max_records >= 1,
            "min_interval_s": self.min_interval_s >= 0,
            "min_records": self.min_records >= 1,
            "heartbeat_s": self.heartbeat_s > 0,
            # A lease must outlive a few missed heartbeats' worth of renewals.
            "lease_s": self.lease_s >= 3 * self.heartbeat_s,
            "poll_s": self.poll_s > 0,
            "rack": self.rack is None or bool(self.rack.strip()),
            "slot_number": self.slot_number is None or self.slot_number >= 1,
            "max_slots": self.max_slots is None or self.max_slots >= 1,
            "standby_slots": self.standby_slots >= 0,
            "outage_s": self.outage_s is None or self.outage_s >= 0,
            "max_rate": self.max_rate is None or self.max_rate > 0,
            "commit_interval_s": 0 <= self.commit_interval_s <= 3600,
            "commit_max_records": self.commit_max_records is None or self.commit_max_records >= 1,
            "commit_max_bytes": self.commit_max_bytes is None or self.commit_max_bytes >= 1,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                "invalid consumer settings: "
                + ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
                + " (lease_s must be at least 3 x heartbeat_s)"
            )

    @property
    def cadence(self) -> CommitCadence:
        """When the slot commits its written batches to the table."""
        return CommitCadence(self.commit_interval_s, self.commit_max_records, self.commit_max_bytes)

    @property
    def slot_timeout_s(self) -> float:
        """A slot silent this long is dead to the others: three missed heartbeats."""
        return 3 * self.heartbeat_s

    @property
    def outage_bound_s(self) -> float:
        """How long an outage is ridden through: ``outage_s``, else the lease."""
        return self.lease_s if self.outage_s is None else self.outage_s


def default(name: str) -> Any:
    """A `ConsumerSettings` field's default, for the command line that sets it.

    >>> default("budget_s"), default("start_from").value
    (3600.0, 'earliest')
    """
    (field,) = (f for f in fields(ConsumerSettings) if f.name == name)
    if field.default is MISSING:
        raise KeyError(f"ConsumerSettings.{name} has no default")
    return field.default


def option(name: str) -> str:
    """The job's command-line option for a `ConsumerSettings` field.

    >>> option("min_interval_s")
    '--min-interval-s'
    """
    if name not in {f.name for f in fields(ConsumerSettings)}:
        raise KeyError(f"ConsumerSettings has no field {name!r}")
    return "--" + name.replace("_", "-")
