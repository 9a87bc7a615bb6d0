"""Worker slots in Redis: a stable UUID per slot, heartbeats, the live set (seed 000).

Two keys per namespace (default ``lagsched``; every name below is built in
`lagsched.adapters.redis_store`):

* ``<ns>:slots:<cluster>``: a sorted set per Kafka cluster, member = slot id, score = last heartbeat
  (Unix seconds). The source of truth for liveness: a slot is live when its score is within
  ``timeout_s`` of the ``now`` the reader passes in. Each cluster has its own set, so the slots of
  one are never counted, nor handed topics, by another sharing the Redis DB. Readers pass their
  own clock (injected), so tests drive time by hand and a DAG evaluates liveness at its logical
  time if it wants.
* ``<ns>:slot:<id>``: a string with the last heartbeat (ISO 8601) and a TTL of the timeout, so an
  operator's ``KEYS lagsched:slot:*`` shows who is alive and a crashed slot's key cleans itself up.
  Its TTL runs on Redis's clock, which is why liveness is never read from it.

``announce_joined`` publishes on ``<ns>:slot_events`` that a slot went live, and
``announce_standby`` that one left the live set to stand by warm, so the running slots of its
cluster rebalance without waiting for their next look.

``leave`` removes both at once (graceful shutdown), so the others fail over without waiting for the
timeout. ``prune`` drops members silent for much longer than any timeout, to keep the set small.
Per-slot entries that carry no TTL of their own (a hash keyed by slot id, such as the racks of
`SlotRacks`) outlive a slot that crashed or left; ``drop_leftovers``
removes the entries of slots that are gone.

`SlotLock` keeps a slot id in one process at a time: ``<ns>:slot_lock:<id>`` holds the running
process's token with a TTL its keeper renews with every heartbeat. A second start of a live slot
finds the key taken and leaves without touching the first's claims; the consume DAG's plan reads
the same keys to start only the slots that are not running.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

import redis

from lagsched.adapters.redis_store import (
    NAMESPACE,
    slot_events_channel,
    slot_key,
    slot_lock_key,
    slot_racks_key,
    slots_key,
)
from lagsched.core.names import validate_cluster_name

__all__ = [
    "SLOT_NAMESPACE",
    "SlotLock",
    "SlotRacks",
    "SlotRegistry",
    "holder_is_gone",
    "lock_token",
    "new_slot_id",
    "slot_id_for",
    "token_worker",
    "worker_name",
]

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


def _is_cluster_name(name: str) -> bool:
    try:
        validate_cluster_name(name)
    except ValueError:
        return False  # not a set of ours (lagsched never writes such a key)
    return True


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
        cluster: the Kafka cluster whose slots these are (`lagsched.core.clusters`).
    """

    client: redis.Redis
    namespace: str = NAMESPACE
    cluster: str = field(kw_only=True)

    def __post_init__(self) -> None:
        validate_cluster_name(self.cluster)

    @classmethod
    def every_cluster(cls, client: redis.Redis, namespace: str = NAMESPACE) -> list[SlotRegistry]:
        """A registry for each cluster that has a live set in Redis, configured still or not."""
        prefix = slots_key("", namespace)  # the live sets' common part, the cluster after it
        names = {_text(k)[len(prefix) :] for k in client.scan_iter(match=f"{prefix}*", count=500)}
        return [cls(client, namespace, cluster=n) for n in sorted(names) if _is_cluster_name(n)]

    @property
    def set_key(self) -> str:
        """The cluster's live set (``<ns>:slots:<cluster>``)."""
        return slots_key(self.cluster, self.namespace)

    def _slot_key(self, slot_id: str) -> str:
        return slot_key(slot_id, self.namespace)

    def heartbeat(self, slot_id: str, now: datetime, timeout_s: float) -> None:
        """Announce that ``slot_id`` is alive at ``now``; it stays live for ``timeout_s`` more."""
        _check_slot_id(slot_id)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s}; must be > 0")
        pipe = self.client.pipeline(transaction=True)
        # GT: a beat delayed in flight (a process frozen mid-call, then thawed) never moves a
        # fresher beat of the same slot back in time.
        pipe.zadd(self.set_key, {slot_id: _epoch_s(now)}, gt=True)
        pipe.set(self._slot_key(slot_id), now.isoformat(), ex=max(1, math.ceil(timeout_s)))
        pipe.execute()

    def leave(self, slot_id: str) -> None:
        """Remove the slot at once (graceful shutdown): others stop counting it immediately."""
        _check_slot_id(slot_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.set_key, slot_id)
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
            self.client.zrangebyscore(self.set_key, f"({_epoch_s(now) - timeout_s!r}", "+inf"),
        )
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    def last_seen(self, slot_id: str) -> float | None:
        """The slot's last heartbeat as Unix seconds, or ``None`` if it never beat or left."""
        score = self.client.zscore(self.set_key, slot_id)
        return None if score is None else float(score)

    @property
    def events_channel(self) -> str:
        """The pub/sub channel where slots say they joined (``<ns>:slot_events``)."""
        return slot_events_channel(self.namespace)

    def announce_joined(self, slot_id: str) -> int:
        """Tell the cluster's running slots that ``slot_id`` is live, so they hand it its share at
        once rather than at their next look; returns how many subscribers heard it."""
        return self._announce(slot_id, "joined")

    def announce_standby(self, slot_id: str) -> int:
        """Tell the cluster's running slots that ``slot_id`` left the live set to stand by (its rows
        are free), so they take its share at once; returns how many subscribers heard it."""
        return self._announce(slot_id, "standby")

    def _announce(self, slot_id: str, event: str) -> int:
        message = json.dumps({"cluster": self.cluster, "slot": slot_id, "event": event}, sort_keys=True)
        return int(self.client.publish(self.events_channel, message))

    def ever_registered(self) -> bool:
        """Whether any slot of the cluster ever heartbeat (its live set exists in Redis)."""
        return bool(self.client.exists(self.set_key))

    def drop_leftovers(self, hash_key: str) -> int:
        """Delete the fields of ``hash_key`` (a hash keyed by slot id) whose slot is gone; returns how many.

        A slot is gone when it is not in this cluster's live set (left, or pruned), has no
        heartbeat key and no lock (`SlotLock`): a slot takes its lock before it writes per-slot entries, and keeps
        it, or its heartbeat, for as long as it runs. Each field is checked and deleted in one
        Lua step, so a slot that starts meanwhile never loses its entry.
        """
        fields = [_text(f) for f in self.client.hkeys(hash_key)]
        dropped = 0
        for i in range(0, len(fields), 500):  # one short script per 500 fields: Redis runs a script alone
            chunk = fields[i : i + 500]
            dropped += int(
                self.client.eval(
                    _DROP_GONE,
                    2,
                    hash_key,
                    self.set_key,
                    slot_key("", self.namespace),
                    slot_lock_key("", self.namespace),
                    *chunk,
                )
            )
        return dropped

    def prune(self, now: datetime, older_than_s: float) -> int:
        """Drop members silent for more than ``older_than_s``; returns how many were dropped.

        Use a horizon far above any reader's timeout (say 10x): a reader with a shorter clock
        must never see a slot vanish that it would still count as live.
        """
        if not older_than_s > 0:
            raise ValueError(f"older_than_s={older_than_s}; must be > 0")
        return int(self.client.zremrangebyscore(self.set_key, "-inf", f"({_epoch_s(now) - older_than_s!r}"))


# KEYS[2] is the cluster's live set; ARGV[1] and ARGV[2] are the common parts of the slots'
# heartbeat keys and locks (a slot id completes each); the others are slot ids, fields of KEYS[1].
# A slot of another cluster is not in KEYS[2] but, while it runs, has its heartbeat key or its
# lock, so its entry stays. The slot keys are built in the script, which a single Redis
# (lagsched's) allows; Redis Cluster would not.
_DROP_GONE = """
local slot, lock = ARGV[1], ARGV[2]
local dropped = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZSCORE', KEYS[2], id) == false
     and redis.call('EXISTS', slot .. id, lock .. id) == 0 then
    dropped = dropped + redis.call('HDEL', KEYS[1], id)
  end
end
return dropped
"""

# Take the key if it is free or already ours, and set its TTL: one round trip, atomic in Redis.
# A key that vanished (TTL ran out while nobody else took it, or Redis restarted empty) is taken
# back by its holder; one another process holds is left alone.
_TAKE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return false
end
return holder
"""
_SWAP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True, slots=True)
class SlotLock:
    """One process per slot id: a Redis key holding the running process's token, with a TTL.

    ``acquire`` and ``renew`` are the same atomic step (take the key if free or ours, reset its
    TTL) and return the other holder's token when someone else has it. The TTL is the slot
    timeout (three heartbeats): a killed process's lock runs out as its heartbeat does, so an
    Airflow retry can start the slot again; a process frozen past it finds the lock taken when it
    wakes and ends (its claims are fenced by their epochs anyway, docs/consumer.md).

    Attributes:
        client: a ``redis.Redis``.
        namespace: key prefix, as `SlotRegistry`'s.
    """

    client: redis.Redis
    namespace: str = NAMESPACE

    def key(self, slot_id: str) -> str:
        return slot_lock_key(slot_id, self.namespace)

    def acquire(self, slot_id: str, token: str, ttl_s: float) -> str | None:
        """Take (or keep) the slot for ``token``; None on success, else the holder's token."""
        _check_slot_id(slot_id)
        if not ttl_s > 0:
            raise ValueError(f"ttl_s={ttl_s}; must be > 0")
        holder = self.client.eval(_TAKE, 1, self.key(slot_id), token, max(1, math.ceil(ttl_s * 1000)))
        return None if holder is None else _text(holder)

    #: Renewing is taking again: the same atomic step.
    renew = acquire

    def take_over(self, slot_id: str, dead: str, token: str, ttl_s: float) -> bool:
        """Take the lock from ``dead`` (a holder known to be gone) if it still holds it; atomic."""
        _check_slot_id(slot_id)
        return bool(self.client.eval(_SWAP, 1, self.key(slot_id), dead, token, max(1, math.ceil(ttl_s * 1000))))

    def release(self, slot_id: str, token: str) -> bool:
        """Drop the lock if ``token`` still holds it (never another process's)."""
        return bool(self.client.eval(_DROP, 1, self.key(slot_id), token))

    def holders(self, slot_ids: Sequence[str]) -> dict[str, str]:
        """The running slots among ``slot_ids``: slot id -> the holder's token."""
        if not slot_ids:
            return {}
        values = cast("Sequence[str | bytes | None]", self.client.mget([self.key(s) for s in slot_ids]))
        return {s: _text(v) for s, v in zip(slot_ids, values, strict=True) if v is not None}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: The environment variable that names the worker a slot runs on (a Celery worker's
#: ``--celery-hostname``, a pod's name); unset, the machine's host name. Shown on the page.
WORKER_ENV = "LAGSCHED_WORKER"


def worker_name() -> str:
    """The worker this process runs on: ``$LAGSCHED_WORKER``, else the machine's host name.

    Several Airflow workers on one machine share its host name; the stack gives each its Celery
    node name (``name@host``) here, so the page tells their slots apart.
    """
    name = os.environ.get(WORKER_ENV, "").strip() or socket.gethostname()
    if ":" in name or len(name) > 200 or not name.isprintable():
        raise ValueError(f"{WORKER_ENV}={name!r} is not a worker name: printable, at most 200 characters, no ':'")
    return name


def lock_token() -> str:
    """This process's lock token: ``<worker>:<pid>:<random>`` (who runs a slot, for the operator)."""
    return f"{worker_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def token_worker(token: str) -> str:
    """The worker named in a lock token (`lock_token`)."""
    return token.partition(":")[0]


def _machine(worker: str) -> str:
    # A Celery node name is ``name@host``: the machine is what follows the last ``@``.
    return worker.rpartition("@")[2]


def holder_is_gone(token: str) -> bool:
    """Whether ``token`` names a process of this machine that no longer runs (killed, crashed).

    Such a holder's lock would free itself within one slot timeout; a restart right after a crash
    need not wait for that, also when another worker of the same machine restarts it (an Airflow
    retry after its first worker was killed). A process elsewhere, or one merely stopped, is never
    judged gone.
    """
    worker, _, rest = token.partition(":")
    pid_text = rest.partition(":")[0]
    if _machine(worker) != socket.gethostname() or not pid_text.isdigit():
        return False
    if not Path("/proc/self").exists():  # no procfs: ask the kernel whether the pid exists
        return _no_such_process(int(pid_text))
    try:
        state = Path(f"/proc/{pid_text}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True  # no such process
    except IndexError:
        return False
    return state in ("Z", "X")  # a zombie (exited, not yet reaped) or dead


def _no_such_process(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class SlotRacks:
    """Each slot's rack, in the Redis hash ``<namespace>:slot_racks`` (slot id -> rack).

    Owners of a topic read their co-owners' racks here to compute the same rack targets. A slot
    without a rack is absent. Entries of slots that left are harmless: only live owners are read.
    """

    def __init__(self, client: redis.Redis, namespace: str = NAMESPACE) -> None:
        self._client = client
        self._key = slot_racks_key(namespace)

    @property
    def key(self) -> str:
        """The hash (the maintenance DAG drops dead slots' entries from it)."""
        return self._key

    def announce(self, slot_id: str, rack: str | None) -> None:
        if rack is None:
            self._client.hdel(self._key, slot_id)
        else:
            self._client.hset(self._key, slot_id, rack)

    def racks(self, slot_ids: Sequence[str]) -> dict[str, str | None]:
        if not slot_ids:
            return {}
        values = self._client.hmget(self._key, list(slot_ids))
        return {
            s: (v.decode() if isinstance(v, bytes) else v) if v is not None else None
            for s, v in zip(slot_ids, values, strict=True)
        }
