"""Worker slots in Redis: a stable UUID per slot, heartbeats, the live set (seed 000).

Two keys per namespace (default ``lagsched``):

* ``<ns>:slots``: a sorted set, member = slot id, score = last heartbeat (Unix seconds). The source
  of truth for liveness: a slot is live when its score is within ``timeout_s`` of the ``now`` the
  reader passes in. Readers pass their own clock (injected), so tests drive time by hand and a
  DAG evaluates liveness at its logical time if it wants.
* ``<ns>:slot:<id>``: a string with the last heartbeat (ISO 8601) and a TTL of the timeout, so an
  operator's ``KEYS lagsched:slot:*`` shows who is alive and a crashed slot's key cleans itself up.
  Its TTL runs on Redis's clock, which is why liveness is never read from it.

``leave`` removes both at once (graceful shutdown), so the others fail over without waiting for the
timeout. ``prune`` drops members silent for much longer than any timeout, to keep the set small.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import redis

__all__ = ["SLOT_NAMESPACE", "SlotRegistry", "new_slot_id", "slot_id_for"]

log = logging.getLogger(__name__)

#: Namespace of ``slot_id_for``: slot ids derived from names are the same on every host and restart.
SLOT_NAMESPACE = uuid.UUID("5b0c1a0e-6c61-6773-6368-647300000001")


def new_slot_id() -> str:
    """A fresh random slot id (uuid4)."""
    return str(uuid.uuid4())


def slot_id_for(name: str) -> str:
    """A stable slot id for a configured slot name (uuid5), e.g. ``worker-03``.

    A restarted worker that keeps its name keeps its id, hence its rendezvous ranking and its
    topics: nothing moves for a restart shorter than the heartbeat timeout.

    >>> slot_id_for("worker-03") == slot_id_for("worker-03")
    True
    """
    if not name:
        raise ValueError("slot name is empty; use a name such as 'worker-03'")
    return str(uuid.uuid5(SLOT_NAMESPACE, name))


def _check_slot_id(slot_id: str) -> None:
    try:
        uuid.UUID(slot_id)
    except ValueError:
        raise ValueError(f"slot_id={slot_id!r} is not a UUID; use new_slot_id() or slot_id_for(name)") from None


def _epoch_s(now: datetime) -> float:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now={now!r} is naive; pass a timezone-aware datetime")
    return now.timestamp()


@dataclass(frozen=True, slots=True)
class SlotRegistry:
    """Heartbeats and the live set of worker slots.

    Attributes:
        client: a ``redis.Redis`` (``decode_responses=True`` or not; both are handled).
        namespace: key prefix, so several deployments (or tests) can share one Redis.
    """

    client: redis.Redis
    namespace: str = "lagsched"

    @property
    def _set_key(self) -> str:
        return f"{self.namespace}:slots"

    def _slot_key(self, slot_id: str) -> str:
        return f"{self.namespace}:slot:{slot_id}"

    def heartbeat(self, slot_id: str, now: datetime, timeout_s: float) -> None:
        """Announce that ``slot_id`` is alive at ``now``; it stays live for ``timeout_s`` more."""
        _check_slot_id(slot_id)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s}; must be > 0")
        pipe = self.client.pipeline(transaction=True)
        pipe.zadd(self._set_key, {slot_id: _epoch_s(now)})
        pipe.set(self._slot_key(slot_id), now.isoformat(), ex=max(1, math.ceil(timeout_s)))
        pipe.execute()

    def leave(self, slot_id: str) -> None:
        """Remove the slot at once (graceful shutdown): others stop counting it immediately."""
        _check_slot_id(slot_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self._set_key, slot_id)
        pipe.delete(self._slot_key(slot_id))
        pipe.execute()
        log.info("slot %s left", slot_id)

    def live_slots(self, now: datetime, timeout_s: float) -> list[str]:
        """Slots whose last heartbeat is within ``timeout_s`` before ``now``, sorted by id.

        A heartbeat exactly ``timeout_s`` old is dead: silent *for* the timeout means gone.
        Heartbeats stamped after ``now`` (a writer's clock ahead of the reader's) count as live.
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s}; must be > 0")
        members = cast(
            "Sequence[str | bytes]",
            self.client.zrangebyscore(self._set_key, f"({_epoch_s(now) - timeout_s!r}", "+inf"),
        )
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    def last_seen(self, slot_id: str) -> float | None:
        """The slot's last heartbeat as Unix seconds, or ``None`` if it never beat or left."""
        score = self.client.zscore(self._set_key, slot_id)
        return None if score is None else float(score)

    def prune(self, now: datetime, older_than_s: float) -> int:
        """Drop members silent for more than ``older_than_s``; returns how many were dropped.

        Use a horizon far above any reader's timeout (say 10x): a reader with a shorter clock
        must never see a slot vanish that it would still count as live.
        """
        if not older_than_s > 0:
            raise ValueError(f"older_than_s={older_than_s}; must be > 0")
        return int(self.client.zremrangebyscore(self._set_key, "-inf", f"({_epoch_s(now) - older_than_s!r}"))
