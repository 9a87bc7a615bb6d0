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

Time comes from one injected `lagsched.core.times.Clock`, never read directly: its monotonic seconds
(the budget, batch intervals, the renew cadence, outage bounds) and its wall time (an aware UTC
datetime: the heartbeats and the live set). Leases are judged by the database's clock alone (`ClaimStore`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from lagsched.adapters.claims import ClaimStore
from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.kafka_admin import leader_racks
from lagsched.adapters.mysql import reconnect
from lagsched.adapters.ownership import OwnershipView, current_assignment, wants_for
from lagsched.adapters.slots import SlotRacks, SlotRegistry
from lagsched.adapters.topics import load_topics
from lagsched.core.batches import batch_is_due
from lagsched.core.claims import PartitionRow
from lagsched.core.errors import KafkaOffsetsError
from lagsched.core.outage import Outage
from lagsched.core.rack import RackOwner, rack_targets, spans_racks
from lagsched.core.registry import TopicRow
from lagsched.core.rendezvous import fair_share
from lagsched.core.times import Clock
from lagsched.workflows.batch import Batches, BatchPlan, StatsLines
from lagsched.workflows.consume_plan import slots_needed
from lagsched.workflows.slot_keeper import SlotKeeper, SlotTakenError, ride_through
from lagsched.workflows.slot_settings import ConsumerSettings

__all__ = ["RunOutcome", "SlotRun", "StopReason", "run_slot"]

log = logging.getLogger(__name__)


#: A standby slot warms its tasks' Python workers again this often: Spark stops a worker idle for a
#: minute (``PythonWorkerFactory``'s idle timeout).
WARM_AGAIN_S = 45.0


class StopReason(StrEnum):
    BUDGET = "budget"
    SIGNAL = "signal"
    IDLE = "idle"
    #: The slot owned topics and now owns none (scaled in, topics disabled), or its number is above
    #: what the cluster needs now: its work moved away.
    RESCALED = "rescaled"
    LOST = "lost"
    ERROR = "error"


@dataclass(slots=True)
class RunOutcome:
    """How a run ended."""

    reason: StopReason
    records: int = 0
    batches: int = 0
    lost_claims: list[str] = field(default_factory=list)


class SlotRun:
    """The main loop of one slot (see the module doc), run by `run_slot`."""

    def __init__(
        self,
        settings: ConsumerSettings,
        *,
        conn: Any,
        store: ClaimStore,
        registry: SlotRegistry,
        admin: Any,
        batches: Batches,
        keeper: SlotKeeper,
        stats: StatsLines,
        stop: threading.Event,
        wake: threading.Event,
        clock: Clock = SYSTEM_CLOCK,
        racks: SlotRacks | None = None,
        announce_joined: bool = False,
    ) -> None:
        self.s = settings
        self.racks = racks
        #: Publish that the slot went live (`SlotRegistry.announce_joined`) once it heartbeats, and
        #: that it stands by (`SlotRegistry.announce_standby`).
        self.announce_joined = announce_joined
        self.conn, self.store, self.registry, self.admin = conn, store, registry, admin
        self.batches, self.keeper, self.stop, self.wake = batches, keeper, stop, wake
        self.stats = stats
        self.clock = clock
        self.outcome = RunOutcome(StopReason.BUDGET)
        # A new slot's first batch goes as soon as it holds rows: a scale-up's slot is waited for,
        # and one early batch an hour is no tiny-file problem. Later ones keep min_interval_s.
        self._last_batch = float("-inf")
        self._owned = False  # owned some topic at some point of the run
        self._outage = Outage(settings.outage_bound_s)
        #: A step went through in this run: a service that fails from the start is misconfigured or
        #: down, and the run fails fast; one that fails later is ridden through (`ride_through`).
        self._answered = False
        #: Standing by (`_stand_by`): Spark is up, nothing is claimed, the slot is not live.
        self._standing_by = False
        #: The last boundary's shares and rack targets: when they change, written batches land first.
        self._wants: dict[str, int] = {}
        self._targets: dict[str, frozenset[int]] | None = None

    # ------------------------------------------------------------------ the loop

    def run(self) -> RunOutcome:
        deadline = self.clock.monotonic() + self.s.budget_s
        try:
            self._fence_earlier_runs()
            while True:
                self.keeper.check()
                if self.stop.is_set():
                    self.outcome.reason = StopReason.SIGNAL
                    break
                if self.clock.monotonic() >= deadline:
                    self.outcome.reason = StopReason.BUDGET
                    break
                done = self._step_riding_through()
                if self.outcome.lost_claims:
                    self.outcome.reason = StopReason.LOST
                    break
                if done is not None:
                    self.outcome.reason = done
                    break
            self._land_written()
        except SlotTakenError as exc:
            # The rows and the heartbeat under this slot id are the new process's now: touch nothing.
            self.outcome.reason = StopReason.LOST
            self.outcome.lost_claims.append(str(exc))
            self.stats.emit("stopped", reason=self.outcome.reason.value, records=self.outcome.records)
            return self.outcome
        except BaseException:
            # No offset moved past unwritten records (commits follow writes); what was recorded but
            # not committed is redone by the next holder. Hand the rows back if the database lets us.
            self.outcome.reason = StopReason.ERROR
            self._release_all()
            raise
        finally:
            self.stats.emit("stopped", reason=self.outcome.reason.value, records=self.outcome.records)
        self.batches.mirror.send({}, retry=False)  # the run is ending: one try, not a wait
        self._release_all()
        return self.outcome

    def _land_written(self) -> None:
        """At the end of a run: commit the written batches before the rows go back (one try: a
        failure leaves orphan files and the offsets where they were, for the next holder)."""
        try:
            self._flush()
        except Exception as exc:  # noqa: BLE001 - nothing was lost: the next holder reads them again
            log.warning("could not commit the written batches at the end of the run (%s); they are read again", exc)

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
            wait = ride_through(self._outage, exc, self.clock.monotonic(), "slot") if self._answered else None
            if wait is None:
                raise
            self._wait(wait.seconds)
            for conn in (self.conn, self.store.conn):
                with contextlib.suppress(Exception):  # still down: the next step fails and waits again
                    reconnect(conn)
            return None
        if (took := self._outage.recovered(self.clock.monotonic())) is not None:
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
        live = self.registry.live_slots(self.clock.now(), self.s.slot_timeout_s)
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
        if self.batches.waiting and (wants != self._wants or targets != self._targets):
            # Ownership moves: land what was written first, so no row goes back with written batches.
            self._flush(topics)
        self._wants, self._targets = dict(wants), targets
        handed = self.store.rebalance(self.s.slot_id, wants, targets=targets)
        if handed:
            log.info("handed over %s", _keys(handed, topics))
            self.batches.forget([c.key for c in handed])
        result = self.store.claim(self.s.slot_id, wants, self.s.lease_s, targets=targets)
        held = [c for c in result.claims if c.topic_id in wants]
        self.keeper.hold(held)
        if result.new:
            log.info("claimed %s", _keys(result.new, topics))
        return self._work(self.batches.plan(held, topics), topics, short=bool(result.short))

    def _work(self, batch: BatchPlan, topics: Mapping[str, TopicRow], *, short: bool) -> StopReason | None:
        """Run ``batch`` when it is due: written and left for the commit cadence, or (a redo, a gap)
        landed at once after the batches written so far; commit those when their cadence says so.
        ``short``: the claim got fewer rows than the slot's share."""
        if not batch.plans:
            if self.s.exit_when_idle and not short and not batch.skipped:
                flushed = self.batches.flush(batch.claims, topics)
                self.outcome.lost_claims += flushed.lost
                if self.outcome.lost_claims or flushed.read_again:
                    return None
                self.batches.mirror.send({})
                log.info("every claimed partition is caught up; exiting (--exit-when-idle)")
                return StopReason.IDLE
            self.outcome.lost_claims += self.batches.commit_if_due(batch.claims, topics).lost
            self.batches.mirror.send({})
            self._wait(self.s.poll_s)
            return None
        if not self._due(batch):
            self.outcome.lost_claims += self.batches.commit_if_due(batch.claims, topics).lost
            return None
        if self.batches.streams(batch):
            ran = self.batches.stream(batch, topics)
        else:
            # A redo, a gap or a pinned start fixes state: the batches written so far land first.
            flushed = self.batches.flush(batch.claims, topics)
            self.outcome.lost_claims += flushed.lost
            if flushed.lost:
                return None
            ran = self.batches.run(batch, topics)
        self.outcome.lost_claims += ran.lost
        if ran.landed:
            self._last_batch = self.clock.monotonic()
            self.outcome.batches += 1
            self.outcome.records += ran.records
        return None

    def _flush(self, topics: Mapping[str, TopicRow] | None = None) -> None:
        """Commit the written batches now, against the rows the slot holds (a stop, a hand-back)."""
        if not self.batches.waiting:
            return
        if topics is None:
            topics = {t.topic_id: t for t in load_topics(self.conn, self.s.cluster)}
        claims = {c.key: c for c in self.store.held(self.s.slot_id)}
        self.outcome.lost_claims += self.batches.flush(claims, topics).lost

    def _due(self, batch: BatchPlan) -> bool:
        """Whether ``batch`` goes now; if not, wait a little (the caller looks again)."""
        since = self.clock.monotonic() - self._last_batch
        if not batch.full and not batch_is_due(
            batch.plans.values(),
            since_last_s=since,
            min_interval_s=self.s.min_interval_s,
            min_records=self.s.min_records,
        ):
            self._wait(min(self.s.poll_s, max(0.0, self.s.min_interval_s - since)))
            return False
        paced = self.batches.rate_ready_at - self.clock.monotonic()
        if paced > 0 and not any(p.redo for p in batch.plans.values()):
            self._wait(min(self.s.poll_s, paced))  # the rate cap: a redo still goes, it fixes state
            return False
        return True

    def _join(self) -> None:
        """Go live (heartbeats, and a ``joined`` message so the others hand this slot its share now)."""
        if self.keeper.live:
            return
        self.keeper.go_live()
        if self._standing_by:
            log.info("the cluster needs slot %s now: joining, warm", self.s.slot_number)
            self._standing_by = False
            self.batches.joined()  # its first batch commits at once, as a new slot's does
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
                self._land_written()
                self.batches.mirror.send({}, retry=False)
                self._release_all()
                self.keeper.stand_by()
            if self.announce_joined:
                try:
                    self.registry.announce_standby(self.s.slot_id)
                except Exception as exc:  # noqa: BLE001 - the others see the live set at their next look
                    log.warning("could not announce the standby on %s: %s", self.registry.events_channel, exc)
            self._standing_by = True
            self.stats.emit("standby", needed=needed)
        if self.clock.monotonic() - self.batches.warmed_at >= WARM_AGAIN_S:
            self.batches.warm_up()  # Spark stops Python workers idle for a minute
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
        due = self.batches.wait_s()
        if due is not None:
            seconds = min(seconds, due)  # written batches are never left past their commit interval
        if seconds > 0 and self.wake.wait(seconds):
            self.wake.clear()

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


def _keys(claims: Sequence[PartitionRow], topics: Mapping[str, TopicRow]) -> str:
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
