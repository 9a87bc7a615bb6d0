"""One worker slot's run: claim its share, move the claimed records into the sink, commit, repeat.

The loop (docs/consumer.md), at every batch boundary:

1. ownership: ``current_assignment`` for the live slots, and this slot's share of each topic;
2. ``rebalance`` hands back rows above the share, ``claim`` tops it up;
3. redo any batch recorded but not committed on a row it now holds (``pending``);
4. read the log start and last stable offset (LSO) of the claimed partitions and plan each
   (``core.batches.plan_partition``): reads are read committed, so a batch never ends past the LSO
   and an open transaction holds its own partition there, not the others; wait for
   ``min_interval_s`` or ``min_records``;
5. record retention gaps; ``begin_batch`` records each range under the claim's epoch;
6. Spark reads the ranges and commits them to the cluster's Iceberg table in one snapshot, unless
   another holder committed them since the mark taken before step 5 (``adapters.sink.IcebergSink``);
7. ``commit_offset`` stores the new offsets under the epoch and clears the recorded batch;
8. mirror the offsets into the Kafka consumer group.

With a rack (``ConsumerSettings.rack``, docs/rack.md), a topic whose owners span racks is claimed
by rack targets (``core.rack.rack_targets``): each owner holds partitions led from its own rack
first, within its unchanged fair share; racks of the other owners come from ``SlotRacks`` (Redis),
partition leaders from Kafka at each boundary.

A background ``SlotKeeper`` heartbeats the slot and renews its leases for the whole run, so a long
Spark batch never lets either lapse; a ``ScalingListener`` wakes the loop when a scaling decision is
published. The run ends at its time budget, on a stop request (SIGTERM), when idle (if asked), or
when it lost a claim (a stale holder); it then commits what it wrote, releases its rows and leaves.

Time comes from two injected clocks, never read directly: ``clock`` (monotonic seconds: the budget,
batch intervals, the renew cadence, outage bounds) and ``wall_clock`` (an aware UTC datetime: the
heartbeats and the live set). Leases are judged by the database's clock alone (`ClaimStore`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import IO, Any, Protocol

from lagsched.adapters.claims import ClaimStore
from lagsched.adapters.failures import Kind, classify, short_reason
from lagsched.adapters.gaps import RetentionGap, record_gap
from lagsched.adapters.kafka_admin import (
    MIRROR_BACKOFFS_S,
    kafka_topic_ids,
    leader_racks,
    mirror_group_offsets,
    read_offsets,
)
from lagsched.adapters.mysql import reconnect
from lagsched.adapters.ownership import OwnershipView, current_assignment, wants_for
from lagsched.adapters.sink import BatchRead, SinkConflictError, SinkWrite
from lagsched.adapters.slots import SlotLock, SlotRacks, SlotRegistry
from lagsched.adapters.topics import load_topics
from lagsched.core.batches import (
    OffsetAheadError,
    PartitionPlan,
    StartFrom,
    batch_is_due,
    fair_shares,
    next_batch_at,
    plan_partition,
)
from lagsched.core.claims import Claim, ClaimLostError
from lagsched.core.errors import KafkaOffsetsError, LagschedError
from lagsched.core.outage import Outage, Wait
from lagsched.core.rack import RackOwner, rack_targets, spans_racks
from lagsched.core.registry import TopicRow
from lagsched.core.rendezvous import fair_share
from lagsched.workflows.consume_plan import slots_needed

__all__ = [
    "ConsumerSettings",
    "RunOutcome",
    "SlotKeeper",
    "SlotTakenError",
    "StopReason",
    "run_slot",
]

log = logging.getLogger(__name__)


class StopReason(StrEnum):
    BUDGET = "budget"
    SIGNAL = "signal"
    IDLE = "idle"
    #: The slot owned topics and now owns none (scaled in, topics disabled), or its number is above
    #: what the cluster needs now: its work moved away.
    RESCALED = "rescaled"
    LOST = "lost"
    ERROR = "error"


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
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                "invalid consumer settings: "
                + ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
                + " (lease_s must be at least 3 x heartbeat_s)"
            )

    @property
    def slot_timeout_s(self) -> float:
        """A slot silent this long is dead to the others: three missed heartbeats."""
        return 3 * self.heartbeat_s

    @property
    def outage_bound_s(self) -> float:
        """How long an outage is ridden through: ``outage_s``, else the lease."""
        return self.lease_s if self.outage_s is None else self.outage_s


@dataclass(slots=True)
class RunOutcome:
    """How a run ended."""

    reason: StopReason
    records: int = 0
    batches: int = 0
    lost_claims: list[str] = field(default_factory=list)


class Sink(Protocol):
    """Lands reads in the table (``adapters.sink.IcebergSink``)."""

    def mark(self) -> int | None: ...  # pragma: no cover - protocol

    def write(self, reads: Sequence[BatchRead], since: int | None) -> SinkWrite: ...  # pragma: no cover


class SlotTakenError(LagschedError):
    """Another process holds this slot's lock: this one paused past the slot timeout and was
    replaced. It must leave without touching the slot's rows or heartbeat (they are the other's)."""


def utc_now() -> datetime:
    """The wall clock, the default ``wall_clock`` of `SlotKeeper` and `SlotRun` (tests inject theirs)."""
    return datetime.now(UTC)


class SlotKeeper:
    """Holds the slot's lock, heartbeats the slot and renews its leases from a thread of its own.

    It has its own claim store (its own MySQL connection: pymysql connections are not thread-safe)
    and its own Redis client. ``start(live=False)`` renews only the lock (a slot still starting
    Spark holds its id but is not live, so nobody hands it rows yet); ``start()`` or a later
    ``go_live()`` adds the heartbeats. A service that stops answering (Redis or MySQL restarting)
    is ridden through for up to ``outage_s`` (`ride_through`): it tries again at every heartbeat,
    logging the outage's start and end once each. Any other failure, or one past that bound, is
    kept and re-raised in the main loop (``check``), which then ends the run; a lease it could not
    renew meanwhile shows up as a lost claim at the next commit.
    """

    def __init__(
        self,
        registry: SlotRegistry,
        store: ClaimStore,
        slot_id: str,
        *,
        heartbeat_s: float,
        lease_s: float,
        lock: SlotLock | None = None,
        token: str = "",
        outage_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._registry, self._store, self._slot = registry, store, slot_id
        self._clock, self._wall_clock = clock, wall_clock
        self._heartbeat_s, self._lease_s = heartbeat_s, lease_s
        self._outage = Outage(lease_s if outage_s is None else outage_s)
        self._lock_store, self._token = lock, token
        self._claims: list[Claim] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._live = False
        #: Guards ``_live`` and the heartbeat write together, so a beat racing `stand_by` cannot put
        #: the slot back into the live set after it left.
        self._live_lock = threading.Lock()
        self._error: BaseException | None = None
        self.taken_by: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"slot-keeper-{slot_id[:8]}", daemon=True)

    @property
    def timeout_s(self) -> float:
        """Silent this long, the slot is dead to the others and its lock free: three heartbeats."""
        return 3 * self._heartbeat_s

    def start(self, *, live: bool = True) -> None:
        if live:
            self.go_live()
        else:
            self._keep_lock()
        if not self._thread.is_alive():
            self._thread.start()

    @property
    def live(self) -> bool:
        """Whether the slot heartbeats in the live set (it does from `go_live` until `stand_by`)."""
        return self._live

    def go_live(self) -> None:
        """Heartbeat from now on: live before the first claim, so ownership counts this slot at once."""
        with self._live_lock:
            self._live = True
        self.beat()

    def stand_by(self) -> None:
        """Stop heartbeating and leave the live set at once; the slot's lock is still kept."""
        with self._live_lock:
            self._live = False
            self._registry.leave(self._slot)

    def beat(self) -> None:
        self._keep_lock()
        with self._live_lock:
            if self._live:
                self._registry.heartbeat(self._slot, self._wall_clock(), self.timeout_s)

    def _keep_lock(self) -> None:
        if self._lock_store is None:
            return
        holder = self._lock_store.renew(self._slot, self._token, self.timeout_s)
        if holder is not None:
            self.taken_by = holder
            raise SlotTakenError(
                f"slot {self._slot} is now run by another process ({holder}): this one was silent past the slot "
                f"timeout ({self.timeout_s:.0f} s) and was replaced; leaving its rows and heartbeat to it"
            )

    def owns_slot(self) -> bool:
        """Whether this process still holds the slot's lock, asked of Redis now (True without a lock).

        Rows are held under the slot id, so a process replaced while it was frozen would release
        its successor's rows: ask before releasing. A Redis that cannot answer counts as no (the
        leases run out instead).
        """
        if self._lock_store is None:
            return True
        if self.taken_by is not None:
            return False
        try:
            self._keep_lock()
        except SlotTakenError:
            return False
        except Exception as exc:  # noqa: BLE001 - unknown is not ours
            log.warning("could not confirm the slot's lock (%s)", exc)
            return False
        return True

    def hold(self, claims: Sequence[Claim]) -> None:
        """The rows to keep renewing (what the last claim or commit returned)."""
        with self._lock:
            self._claims = list(claims)

    def check(self) -> None:
        """Raise the keeper's failure, if it had one (as it was, so its service can be named)."""
        if self._error is not None:
            if not isinstance(self._error, SlotTakenError):
                log.error("the slot's heartbeat/lease keeper failed; ending the run")
            raise self._error

    def stop(self) -> None:
        """Stop the thread, close the store and free the lock if still ours (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._store.close()
        if self._lock_store is not None and self.taken_by is None:
            try:
                self._lock_store.release(self._slot, self._token)
            except Exception as exc:  # noqa: BLE001 - it runs out in one slot timeout anyway
                log.warning("could not release the slot's lock (%s); it runs out in %.0f s", exc, self.timeout_s)

    def _run(self) -> None:
        renew_every = self._lease_s / 3
        last_renew = self._clock()
        while not self._stop.wait(self._heartbeat_s):
            try:
                self.beat()
                if self._clock() - last_renew >= renew_every:
                    with self._lock:
                        claims = list(self._claims)
                    renewed = self._store.renew(self._slot, claims, self._lease_s) if claims else []
                    last_renew = self._clock()
                    if len(renewed) < len(claims):
                        log.warning("slot %s: %d claim(s) could not be renewed", self._slot, len(claims) - len(renewed))
            except SlotTakenError as exc:
                log.error("%s", exc)
                self._error = exc
                return
            except Exception as exc:  # noqa: BLE001 - ridden through, or handed to the main loop
                if ride_through(self._outage, exc, self._clock(), f"slot {self._slot[:8]}: heartbeat/renew") is None:
                    log.error("slot %s: heartbeat/renew failed: %s", self._slot, exc)
                    self._error = exc
                    return
                with contextlib.suppress(Exception):  # still down: the next heartbeat tries again
                    reconnect(self._store.conn)
            else:
                if (took := self._outage.recovered(self._clock())) is not None:
                    log.warning("slot %s: heartbeat/renew work again after %.1f s", self._slot[:8], took)


#: Failures worth waiting out: the service is down or restarting, or busy (lock waits).
RIDE_THROUGH = frozenset({Kind.UNREACHABLE, Kind.BUSY})


def ride_through(outage: Outage, exc: BaseException, now: float, who: str) -> Wait | None:
    """How long to wait before trying again after ``exc``, or None to give up on it.

    Waited out: a Kafka, MySQL or Redis client error that says the service is unreachable or busy
    (`lagsched.adapters.failures.classify`), while ``outage`` is within its bound. Anything else
    (a bug, a refused password, a schema out of date) is not: None, at once. The start of an
    outage (or its move to another service) and giving up are logged here, once each.
    """
    verdict = classify(exc)
    if verdict is None or verdict.kind not in RIDE_THROUGH:
        return None
    wait = outage.failed(verdict.service, now)
    if wait is None:
        log.error(
            "%s: %s unreachable for %.0f s, past the outage bound of %.0f s (--outage-s): giving up (%s)",
            who, verdict.service, outage.elapsed_s(now), outage.bound_s, short_reason(exc),
        )  # fmt: skip
    elif wait.changed:
        log.warning(
            "%s: %s: %s (%s); riding through for up to %.0f s (--outage-s), trying again with backoff",
            who, verdict.service, verdict.kind.value, short_reason(exc), outage.bound_s,
        )  # fmt: skip
    return wait


@dataclass
class _Batch:
    plans: dict[tuple[str, int], PartitionPlan]
    claims: dict[tuple[str, int], Claim]
    #: Held partitions not planned because something is wrong with them (never "caught up").
    skipped: int = 0
    #: The rate cap cut the reads short: the batch is as large as the cap lets it be, so it is due
    #: by size whatever ``min_records`` says (the cap's pacing decides when it starts).
    full: bool = False


class SlotRun:
    """The main loop of one slot (see the module doc). Built by ``run_slot``; tests drive it directly."""

    def __init__(
        self,
        settings: ConsumerSettings,
        *,
        conn: Any,
        store: ClaimStore,
        registry: SlotRegistry,
        admin: Any,
        sink: Sink,
        keeper: SlotKeeper,
        stop: threading.Event,
        wake: threading.Event,
        stats: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
        racks: SlotRacks | None = None,
        announce_joined: bool = False,
    ) -> None:
        self.s = settings
        self.racks = racks
        #: Publish that the slot went live (`SlotRegistry.announce_joined`) once it heartbeats, and
        #: that it stands by (`SlotRegistry.announce_standby`).
        self.announce_joined = announce_joined
        self.conn, self.store, self.registry, self.admin = conn, store, registry, admin
        self.sink, self.keeper, self.stop, self.wake = sink, keeper, stop, wake
        self.stats, self.clock, self.wall_clock = stats, clock, wall_clock
        self.outcome = RunOutcome(StopReason.BUDGET)
        # A new slot's first batch goes as soon as it holds rows: a scale-up's slot is waited for,
        # and one early batch an hour is no tiny-file problem. Later ones keep min_interval_s.
        self._last_batch = float("-inf")
        #: When the rate cap (``max_rate``) lets the next batch start.
        self._rate_ready_at = float("-inf")
        self._owned = False  # owned some topic at some point of the run
        self._said: set[tuple[str, str | None, str]] = set()  # topic id mismatches already logged
        self._outage = Outage(settings.outage_bound_s)
        #: A step went through in this run: a service that fails from the start is misconfigured or
        #: down, and the run fails fast; one that fails later is ridden through (`ride_through`).
        self._answered = False
        #: Committed offsets the consumer group has not been told yet (a mirror failed): sent with
        #: the next batch's, when idle, and at the end of the run, since a partition that gets no
        #: more records would otherwise keep a stale mirror for good.
        self._unmirrored: dict[tuple[str, int], int] = {}
        #: Standing by (`_stand_by`): Spark is up, nothing is claimed, the slot is not live.
        self._standing_by = False

    # ------------------------------------------------------------------ the loop

    def run(self) -> RunOutcome:
        deadline = self.clock() + self.s.budget_s
        try:
            self._fence_earlier_runs()
            while True:
                self.keeper.check()
                if self.stop.is_set():
                    self.outcome.reason = StopReason.SIGNAL
                    break
                if self.clock() >= deadline:
                    self.outcome.reason = StopReason.BUDGET
                    break
                done = self._step_riding_through()
                if self.outcome.lost_claims:
                    self.outcome.reason = StopReason.LOST
                    break
                if done is not None:
                    self.outcome.reason = done
                    break
        except SlotTakenError as exc:
            # The rows and the heartbeat under this slot id are the new process's now: touch nothing.
            self.outcome.reason = StopReason.LOST
            self.outcome.lost_claims.append(str(exc))
            self._emit({"event": "stopped", "reason": self.outcome.reason.value, "records": self.outcome.records})
            return self.outcome
        except BaseException:
            # No offset moved past unwritten records (commits follow writes); what was recorded but
            # not committed is redone by the next holder. Hand the rows back if the database lets us.
            self.outcome.reason = StopReason.ERROR
            self._release_all()
            raise
        finally:
            self._emit({"event": "stopped", "reason": self.outcome.reason.value, "records": self.outcome.records})
        self._mirror({}, retry=False)  # the run is ending: one try, not a wait
        self._release_all()
        return self.outcome

    def _fence_earlier_runs(self) -> None:
        """Hand back rows an earlier run of this slot still holds, so this run claims them anew.

        A restarted slot keeps its id, so without this it would carry on under its predecessor's
        claim epoch, and a predecessor that is not quite dead (a zombie task, a paused VM) could
        still commit and clear this run's recorded batches. Released rows keep their recorded
        batch, which this run (or whoever claims them) redoes.
        """
        held = self.store.held(self.s.slot_id)
        if held:
            released = self.store.release(self.s.slot_id, held)
            log.info(
                "an earlier run of this slot held %d row(s); handed back to claim them under a new epoch", len(released)
            )

    def _step_riding_through(self) -> StopReason | None:
        """`_step`, with an outage of a service that answered before ridden through (module doc).

        A step that fails part-way leaves nothing half-done that matters: a batch recorded but not
        committed is redone by the next step (found in the table if its snapshot landed), and each
        step reads the registry afresh. So after a failure the step is simply tried again.
        """
        try:
            done = self._step()
        except Exception as exc:
            wait = ride_through(self._outage, exc, self.clock(), "slot") if self._answered else None
            if wait is None:
                raise
            self._wait(wait.seconds)
            for conn in (self.conn, self.store.conn):
                with contextlib.suppress(Exception):  # still down: the next step fails and waits again
                    reconnect(conn)
            return None
        if (took := self._outage.recovered(self.clock())) is not None:
            log.warning("slot: every service answers again after %.1f s; carrying on", took)
        self._answered = True
        return done

    def _step(self) -> StopReason | None:
        """One boundary: claim, plan, maybe run a batch. A reason to stop, or None to go on."""
        topics = {t.topic_id: t for t in load_topics(self.conn, self.s.cluster)}
        if self.s.slot_number is not None and self.s.max_slots is not None:
            needed = slots_needed(topics.values(), self.s.max_slots)
            if self.s.slot_number > needed:
                if needed > 0 and self.s.slot_number <= min(needed + self.s.standby_slots, self.s.max_slots):
                    self._stand_by(needed)
                    return None
                log.info(
                    "the cluster needs %d slot(s) now and this is slot %d: leaving (scale-down)",
                    needed, self.s.slot_number,
                )  # fmt: skip
                return StopReason.RESCALED
        self._join()
        live = self.registry.live_slots(self.wall_clock(), self.s.slot_timeout_s)
        if self.s.slot_id not in live:
            # This slot is running, whatever Redis says (its heartbeat lost to a Redis restart, or
            # not yet written): beat now (which also confirms the lock) and count itself.
            self.keeper.beat()
            live = sorted([*live, self.s.slot_id])
        view = current_assignment(self.conn, self.s.cluster, live)
        owned = wants_for(self.s.slot_id, view)
        wants = {t: n for t, n in owned.items() if t in topics}
        if any(wants.values()):
            self._owned = True
        elif self._owned and self.s.slot_number is None:
            # A numbered slot leaves by its number (above); owning nothing for a while is normal for
            # it (more live slots than a topic has lanes) and the consume DAG would start it again.
            log.info("this slot no longer owns any topic (scaled in, or its topics were disabled); ending the run")
            return StopReason.RESCALED
        targets = self._rack_targets(view, wants, topics)
        handed = self.store.rebalance(self.s.slot_id, wants, targets=targets)
        if handed:
            log.info("handed over %s", _keys(handed, topics))
        result = self.store.claim(self.s.slot_id, wants, self.s.lease_s, targets=targets)
        held = [c for c in result.claims if c.topic_id in wants]
        self.keeper.hold(held)
        if result.new:
            log.info("claimed %s", _keys(result.new, topics))
        batch = self._plan(held, topics)
        if not batch.plans:
            self._mirror({})
            if self.s.exit_when_idle and not result.short and not batch.skipped:
                log.info("every claimed partition is caught up; exiting (--exit-when-idle)")
                return StopReason.IDLE
            self._wait(self.s.poll_s)
            return None
        since = self.clock() - self._last_batch
        if not batch.full and not batch_is_due(
            batch.plans.values(),
            since_last_s=since,
            min_interval_s=self.s.min_interval_s,
            min_records=self.s.min_records,
        ):
            self._wait(min(self.s.poll_s, max(0.0, self.s.min_interval_s - since)))
            return None
        paced = self._rate_ready_at - self.clock()
        if paced > 0 and not any(p.redo for p in batch.plans.values()):
            self._wait(min(self.s.poll_s, paced))  # the rate cap: a redo still goes, it fixes state
            return None
        self._run_batch(batch, topics)
        return None

    def _join(self) -> None:
        """Go live (heartbeats, and a ``joined`` message so the others hand this slot its share now)."""
        if self.keeper.live:
            return
        self.keeper.go_live()
        if self._standing_by:
            log.info("the cluster needs slot %s now: joining, warm", self.s.slot_number)
            self._standing_by = False
        if self.announce_joined:
            try:
                self.registry.announce_joined(self.s.slot_id)
            except Exception as exc:  # noqa: BLE001 - the others find this slot at their next look anyway
                log.warning("could not announce the slot on %s: %s", self.registry.events_channel, exc)

    def _stand_by(self, needed: int) -> None:
        """Wait warm for the need to reach this slot's number, holding no rows and out of the live set.

        A slot that was working (a scale-down) first tells the group its committed offsets and hands
        its rows back, as at the end of a run, then leaves the live set and says so, so the others
        take its partitions at once. The wait is cut short by any scaling message for the cluster.
        """
        if not self._standing_by:
            log.info(
                "the cluster needs %d slot(s) and this is slot %d: standing by warm (standby_slots %d), "
                "holding no rows, until the need reaches it",
                needed, self.s.slot_number, self.s.standby_slots,
            )  # fmt: skip
            if self.keeper.live:
                self._mirror({}, retry=False)
                self._release_all()
                self.keeper.stand_by()
            if self.announce_joined:
                try:
                    self.registry.announce_standby(self.s.slot_id)
                except Exception as exc:  # noqa: BLE001 - the others see the live set at their next look
                    log.warning("could not announce the standby on %s: %s", self.registry.events_channel, exc)
            self._standing_by = True
            self._emit({"event": "standby", "needed": needed})
        self._wait(self.s.poll_s)

    def _rack_targets(
        self, view: OwnershipView, wants: Mapping[str, int], topics: Mapping[str, TopicRow]
    ) -> dict[str, frozenset[int]] | None:
        """This slot's rack target per owned topic whose owners span racks (docs/rack.md); None: no
        preference anywhere (no rack directory, or no topic's owners span racks)."""
        if self.racks is None or not wants:
            return None
        owners = {t: view.assignment.owners_of(t) for t in wants}
        racks = self.racks.racks(sorted({s for os in owners.values() for s in os}))
        specs = {
            t: [RackOwner(s, racks.get(s), fair_share(topics[t].partition_count, len(os), i)) for i, s in enumerate(os)]
            for t, os in owners.items()
            if os
        }
        spanning = {t: o for t, o in specs.items() if spans_racks(o)}
        if not spanning:
            return None
        try:
            leaders = leader_racks(self.admin, [topics[t].name for t in spanning])
        except KafkaOffsetsError as exc:
            # A preference only: without leaders, claim as if there were no racks this time.
            log.warning("no partition leaders for rack-aware claiming (%s); claiming any rows this time", exc)
            return None
        targets: dict[str, frozenset[int]] = {}
        for t, rack_owners in spanning.items():
            by_partition = leaders.get(topics[t].name)
            if by_partition is None or len(by_partition) != topics[t].partition_count:
                continue  # the registry and Kafka disagree on the partitions: the topic sync catches up
            targets[t] = rack_targets(by_partition, rack_owners).get(self.s.slot_id, frozenset())
        return targets or None

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self.wake.wait(seconds):
            self.wake.clear()

    # ------------------------------------------------------------------ planning

    def _plan(self, held: Sequence[Claim], topics: Mapping[str, TopicRow]) -> _Batch:
        if not held:
            return _Batch({}, {})
        pending = self.store.pending(self.s.slot_id)
        counts = {topics[c.topic_id].name: topics[c.topic_id].partition_count for c in held}
        try:
            ids = kafka_topic_ids(self.admin, counts)
            for name in list(counts):
                row = next(t for t in topics.values() if t.name == name)
                if row.kafka_topic_id is not None and ids.get(name) != row.kafka_topic_id:
                    del counts[name]
                    mismatch = (name, ids.get(name), row.kafka_topic_id)
                    if mismatch in self._said:
                        continue
                    self._said.add(mismatch)
                    log.error(
                        "topic %s: Kafka's topic id is %s, the registry's %s: it was deleted or re-created; "
                        "not reading it until the topic sync registers the new one",
                        name, ids.get(name), row.kafka_topic_id,
                    )  # fmt: skip
            broker = read_offsets(self.admin, counts)
        except KafkaOffsetsError as exc:
            raise LagschedError(f"Kafka did not report the claimed partitions' offsets: {exc}") from exc
        offsets = {(o.topic, o.partition): o for per_topic in broker.values() for o in per_topic}
        plans: dict[tuple[str, int], PartitionPlan] = {}
        replan: dict[tuple[str, int], Callable[..., Any]] = {}
        skipped = 0
        for c in held:
            name = topics[c.topic_id].name
            if name not in counts:
                skipped += 1
                continue  # its topic id did not match: said above
            o = offsets.get((name, c.partition_id))
            if o is None:
                log.warning("%s[%d] is claimed but the broker does not report it; skipped", name, c.partition_id)
                skipped += 1
                continue
            plan_for = functools.partial(
                plan_partition,
                committed=c.committed_offset,
                pending=pending.get(c.key),
                log_start=o.log_start,
                latest=o.latest,
                start_from=self.s.start_from,
                high_watermark=o.high_watermark,
            )
            try:
                plan = plan_for(max_records=self.s.max_records)
            except OffsetAheadError as exc:
                log.error("%s[%d] skipped: %s", name, c.partition_id, exc)
                skipped += 1
                continue
            if plan is not None:
                plans[c.key] = plan
                replan[c.key] = plan_for
        full = self._cap(plans, replan)
        return _Batch(plans, {c.key: c for c in held}, skipped, full)

    def _cap(
        self, plans: dict[tuple[str, int], PartitionPlan], replan: Mapping[tuple[str, int], Callable[..., Any]]
    ) -> bool:
        """Cut ``plans`` to the rate cap: new reads of at most ``max_rate x max(min_interval_s, 1)``
        records together, shared fairly (`fair_shares`); redos keep their recorded ranges. True if
        the cap cut anything."""
        if self.s.max_rate is None:
            return False
        budget = math.floor(self.s.max_rate * max(self.s.min_interval_s, 1.0))
        waiting = {k: p.records for k, p in plans.items() if p.reads and not p.redo}
        if sum(waiting.values()) <= budget:
            return False
        for key, share in fair_shares(waiting, budget).items():
            if share < waiting[key]:
                plans[key] = replan[key](max_records=share)
        return True

    # ------------------------------------------------------------------ one batch

    def _run_batch(self, batch: _Batch, topics: Mapping[str, TopicRow]) -> None:
        t0 = self.clock()
        slot = self.s.slot_id
        reads: list[BatchRead] = []
        started: dict[tuple[str, int], Claim] = {}
        # Before any range is recorded: the table's commit checks for records of these ranges
        # committed since this mark (docs/lake.md, "Exactly once").
        since = self.sink.mark()
        for key, plan in sorted(batch.plans.items()):
            claim = batch.claims[key]
            name = topics[key[0]].name
            if plan.gap is not None:
                gap = RetentionGap(key[0], key[1], plan.gap.start, plan.gap.end)
                if record_gap(self.conn, gap, slot):
                    log.error(
                        "RETENTION GAP: %s[%d] offsets [%d, %d) (%d records) were deleted before they were "
                        "consumed; recorded in retention_gaps; reading on at %d",
                        name, key[1], gap.from_offset, gap.to_offset, gap.records, plan.read_start,
                    )  # fmt: skip
            if plan.batch is None:
                started[key] = claim
                continue
            try:
                started[key] = self.store.begin_batch(slot, claim, *plan.batch)
            except ClaimLostError as exc:
                self._lost(exc)
                continue
            reads.append(BatchRead(name, key[1], plan.batch, plan.read_start, redo=plan.redo))
        t_read = self.clock()
        try:
            wrote = self.sink.write(reads, since)
        except SinkConflictError as exc:
            self._conflict(exc, started)
            return
        t_written = self.clock()
        committed: dict[tuple[str, int], int] = {}
        # Records are what the table received: a range's offsets also cover transaction markers,
        # aborted records and compacted-away records, none of which is a record of the lake.
        records = wrote.records
        offsets = 0
        for key, claim in started.items():
            plan = batch.plans[key]
            try:
                self.store.commit_offset(slot, claim, plan.commit_to)
            except ClaimLostError as exc:
                self._lost(exc)
                continue
            committed[(topics[key[0]].name, key[1])] = plan.commit_to
            offsets += plan.records
        t_committed = self.clock()
        self._rate_ready_at = next_batch_at(t0, offsets, max_rate=self.s.max_rate)
        self._mirror(committed)
        self._last_batch = self.clock()
        self.outcome.batches += 1
        self.outcome.records += records
        log.info(
            "batch %d: %d records of %d partition(s) in %.2f s (read+write %.2f s, table commit %.2f s, "
            "%d file(s) in snapshot %s, %d range(s) already in the table)",
            self.outcome.batches, records, len(reads), self._last_batch - t0, wrote.read_write_s, wrote.commit_s,
            wrote.files, wrote.snapshot_id, wrote.already_there,
        )  # fmt: skip
        self._emit(
            {
                "event": "batch",
                "n": self.outcome.batches,
                "records": records,
                "offsets": offsets,
                "partitions": len(reads),
                "read_s": round(wrote.read_write_s, 4),
                "table_commit_s": round(wrote.commit_s, 4),
                "files": wrote.files,
                "snapshot_id": wrote.snapshot_id,
                "already_there": wrote.already_there,
                "plan_s": round(t_read - t0, 4),
                "commit_s": round(t_committed - t_written, 4),
                "wall_s": round(self._last_batch - t0, 4),
                "t_end": self.wall_clock().timestamp(),
            }
        )

    def _conflict(self, exc: SinkConflictError, started: Mapping[tuple[str, int], Claim]) -> None:
        """The table refused the batch: another holder committed its ranges. Rows this slot no longer
        holds are lost claims (it was stale); rows it still holds are redone at the next boundary."""
        held = {c.key for c in self.store.held(self.s.slot_id)}
        lost = sorted(key for key in started if key not in held)
        log.warning("%s; %d of its %d partition(s) are no longer this slot's", exc, len(lost), len(started))
        for key in lost:
            self.outcome.lost_claims.append(
                f"{key[0]}[{key[1]}]: another holder committed its recorded range to the table and took the row"
            )
        self._emit({"event": "conflict", "partitions": len(started), "lost": len(lost)})

    def _lost(self, exc: ClaimLostError) -> None:
        log.error("%s", exc)
        self.outcome.lost_claims.append(str(exc))

    def _mirror(self, committed: Mapping[tuple[str, int], int], *, retry: bool = True) -> None:
        """Copy ``committed`` and whatever an earlier mirror failed to send into the consumer group."""
        if self.s.group is None:
            return
        self._unmirrored.update(committed)  # a later commit of a partition replaces an unsent one
        if not self._unmirrored:
            return
        try:
            backoffs = MIRROR_BACKOFFS_S if retry else ()
            mirror_group_offsets(self.admin, self.s.group, self._unmirrored, backoffs_s=backoffs)
        except KafkaOffsetsError as exc:
            # The claim table is the source of truth; a stale mirror only misleads outside tools.
            log.warning("%s (the claim table has the offsets; the mirror is tried again)", exc)
            return
        self._unmirrored.clear()

    def _release_all(self) -> None:
        self.keeper.hold([])  # released rows are not to be renewed (nor warned about) any more
        if not self.keeper.owns_slot():
            log.warning("not releasing the slot's rows: another process runs this slot now (or its lock is unknown)")
            return
        try:
            held = self.store.held(self.s.slot_id)
            released = self.store.release(self.s.slot_id, held)
            log.info("released %d row(s)", len(released))
        except Exception as exc:  # noqa: BLE001 - the leases run out anyway; say so and go on
            log.warning("could not release the slot's rows (%s); their leases run out in %.0f s", exc, self.s.lease_s)

    def _emit(self, record: Mapping[str, Any]) -> None:
        if self.stats is not None:
            self.stats.write(json.dumps({**record, "slot": self.s.slot_id}) + "\n")
            self.stats.flush()


def _keys(claims: Sequence[Claim], topics: Mapping[str, TopicRow]) -> str:
    names = [f"{topics[c.topic_id].name if c.topic_id in topics else c.topic_id}[{c.partition_id}]" for c in claims]
    return ", ".join(names)


def run_slot(settings: ConsumerSettings, run: SlotRun) -> RunOutcome:
    """Run the loop with its keeper; the slot leaves the live set at the end, whatever happened."""
    if run.racks is not None:
        # Before the first heartbeat, so co-owners never see this slot live without its rack.
        run.racks.announce(settings.slot_id, settings.rack)
    # Not live yet: the first step joins (heartbeat, then the ``joined`` message), unless this
    # slot is a standby, which joins only when the need reaches it.
    run.keeper.start(live=False)
    try:
        return run.run()
    finally:
        run.keeper.stop()
        if run.keeper.taken_by is None:  # else the heartbeat is the new holder's
            try:
                run.registry.leave(settings.slot_id)
            except Exception as exc:  # noqa: BLE001 - its heartbeat times out anyway
                log.warning("could not leave the slot set: %s", exc)
