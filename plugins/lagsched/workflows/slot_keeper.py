"""What keeps a slot alive while its batches run: its lock, its heartbeats and its leases, renewed from a
thread of its own (`SlotKeeper`), and the rule for riding through an outage of a service (`ride_through`)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence

from lagsched.adapters.claims import ClaimStore
from lagsched.adapters.clock import SYSTEM_CLOCK
from lagsched.adapters.failures import Kind, classify, short_reason
from lagsched.adapters.mysql import reconnect
from lagsched.adapters.slots import SlotLock, SlotRegistry
from lagsched.core.claims import PartitionRow
from lagsched.core.errors import LagschedError
from lagsched.core.outage import Outage, Wait
from lagsched.core.times import Clock

__all__ = ["RIDE_THROUGH", "SlotKeeper", "SlotTakenError", "ride_through"]

log = logging.getLogger(__name__)


class SlotTakenError(LagschedError):
    """Another process holds this slot's lock: this one paused past the slot timeout and was
    replaced. It must leave without touching the slot's rows or heartbeat (they are the other's)."""


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
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._registry, self._store, self._slot = registry, store, slot_id
        self._clock = clock
        self._heartbeat_s, self._lease_s = heartbeat_s, lease_s
        self._outage = Outage(lease_s if outage_s is None else outage_s)
        self._lock_store, self._token = lock, token
        self._claims: list[PartitionRow] = []
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
                self._registry.heartbeat(self._slot, self._clock.now(), self.timeout_s)

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

    def hold(self, claims: Sequence[PartitionRow]) -> None:
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
        last_renew = self._clock.monotonic()
        while not self._stop.wait(self._heartbeat_s):
            try:
                self.beat()
                if self._clock.monotonic() - last_renew >= renew_every:
                    with self._lock:
                        claims = list(self._claims)
                    renewed = self._store.renew(self._slot, claims, self._lease_s) if claims else []
                    last_renew = self._clock.monotonic()
                    if len(renewed) < len(claims):
                        log.warning("slot %s: %d claim(s) could not be renewed", self._slot, len(claims) - len(renewed))
            except SlotTakenError as exc:
                log.error("%s", exc)
                self._error = exc
                return
            except Exception as exc:  # noqa: BLE001 - ridden through, or handed to the main loop
                what = f"slot {self._slot[:8]}: heartbeat/renew"
                if ride_through(self._outage, exc, self._clock.monotonic(), what) is None:
                    log.error("slot %s: heartbeat/renew failed: %s", self._slot, exc)
                    self._error = exc
                    return
                with contextlib.suppress(Exception):  # still down: the next heartbeat tries again
                    reconnect(self._store.conn)
            else:
                if (took := self._outage.recovered(self._clock.monotonic())) is not None:
                    log.warning("slot %s: heartbeat/renew work again after %.1f s", self._slot[:8], took)


#: Failures worth waiting out: the service is down or restarting, or busy (lock waits).
RIDE_THROUGH = frozenset({Kind.UNREACHABLE, Kind.BUSY})


def ride_through(outage: Outage, exc: BaseException, monotonic_s: float, who: str) -> Wait | None:
    """How long to wait before trying again after ``exc``, or None to give up on it.

    Waited out: a Kafka, MySQL or Redis client error that says the service is unreachable or busy
    (`lagsched.adapters.failures.classify`), while ``outage`` is within its bound. Anything else
    (a bug, a refused password, a schema out of date) is not: None, at once. The start of an
    outage (or its move to another service) and giving up are logged here, once each.
    """
    verdict = classify(exc)
    if verdict is None or verdict.kind not in RIDE_THROUGH:
        return None
    wait = outage.failed(verdict.service, monotonic_s)
    if wait is None:
        log.error(
            "%s: %s unreachable for %.0f s, past the outage bound of %.0f s (--outage-s): giving up (%s)",
            who, verdict.service, outage.elapsed_s(monotonic_s), outage.bound_s, short_reason(exc),
        )  # fmt: skip
    elif wait.changed:
        log.warning(
            "%s: %s: %s (%s); riding through for up to %.0f s (--outage-s), trying again with backoff",
            who, verdict.service, verdict.kind.value, short_reason(exc), outage.bound_s,
        )  # fmt: skip
    return wait
