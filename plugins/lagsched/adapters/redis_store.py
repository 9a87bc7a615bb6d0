"""lagsched's Redis: the client factory and the name of every key and channel it uses.

The modules that read and write Redis (the lag history, `lagsched.adapters.lag_store`; the slots,
`lagsched.adapters.slots`; the scaling messages, `lagsched.adapters.scaling_messages`; the findings
notified, `lagsched.adapters.notified`; the health probes) build their clients and names here, so
what a deployment stores can be read in one place.
The names are part of the deployed data (the lagsched page and an operator's ``redis-cli`` read
them): change none without migrating what is stored.

Two spellings of the root, as the modules have always taken them: the lag history's ``prefix``
(``lagsched:``, with its colon), the slots' ``namespace`` (``lagsched``, without). Cluster and topic
names are Kafka-legal, so they never contain ``:``.

>>> latest_key("eu-1", "orders")
'lagsched:eu-1:latest:orders'
>>> slots_key("eu-1")
'lagsched:slots:eu-1'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    import redis.client

    from lagsched.connections import RedisParams

__all__ = [
    "HISTORY_KINDS",
    "NAMESPACE",
    "PREFIX",
    "SCALING_CHANNEL",
    "committed_key",
    "dead_letters_key",
    "evaluated_key",
    "lag_key",
    "latest_key",
    "measured_key",
    "notified_key",
    "planned_slots_key",
    "redis_client",
    "slot_events_channel",
    "slot_key",
    "slot_lock_key",
    "slot_racks_key",
    "slots_key",
    "subscriber",
    "table_care_key",
    "table_commits_key",
    "thresholds_key",
]

#: The root of every name, as the slots take it (``namespace``).
NAMESPACE = "lagsched"
#: The root with its colon, as the lag history takes it (``prefix``).
PREFIX = f"{NAMESPACE}:"

SCALING_CHANNEL = "lagsched:scaling"
"""The pub/sub channel each applied change of ``linker_workers`` is announced on (docs/lag.md)."""

#: The per-topic kinds of the lag history (``<prefix><cluster>:<kind>:<topic>``).
HISTORY_KINDS = ("latest", "committed", "lag", "evaluated")


def redis_client(
    params: RedisParams,
    *,
    db: int | None = None,
    timeout_s: float = 10.0,
    decode_responses: bool = True,
    authenticate: bool = True,
) -> redis.Redis:
    """A ``redis.Redis`` for `params`; no I/O until used.

    ``db`` overrides the Connection's DB; ``timeout_s`` bounds connecting and each command.
    Replies are text unless ``decode_responses`` is off. Without ``authenticate`` the client sends
    no user or password (a probe of whether the server needs one, `lagsched.adapters.health`).
    """
    import redis

    return redis.Redis(
        host=params.host,
        port=params.port,
        db=params.db if db is None else db,
        username=params.username if authenticate else None,
        password=params.password if authenticate else None,
        **params.tls_kwargs,
        decode_responses=decode_responses,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )


def subscriber(client: redis.Redis) -> redis.client.PubSub:
    """A pub/sub connection of ``client`` that leaves out the confirmations of (un)subscribing."""
    pubsub: redis.client.PubSub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    return pubsub


# -- the lag history (lag_store) --------------------------------------------------------------


def latest_key(cluster: str, topic: str, *, prefix: str = PREFIX) -> str:
    """A HASH: per partition (field ``<partition>``), the window of the broker's latest offsets."""
    return f"{prefix}{cluster}:latest:{topic}"


def committed_key(cluster: str, topic: str, *, prefix: str = PREFIX) -> str:
    """A HASH: per partition, the window of the pipeline's stored offsets."""
    return f"{prefix}{cluster}:committed:{topic}"


def lag_key(cluster: str, topic: str, *, prefix: str = PREFIX) -> str:
    """A ZSET: the topic's lag records, the history the evaluator fits."""
    return f"{prefix}{cluster}:lag:{topic}"


def evaluated_key(cluster: str, topic: str, *, prefix: str = PREFIX) -> str:
    """A string: the time of the topic's last evaluation."""
    return f"{prefix}{cluster}:evaluated:{topic}"


def measured_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A string: the time of the cluster's last measurement."""
    return f"{prefix}{cluster}:measured"


# -- what the alert rules read (alert_figures) --------------------------------------------------


def thresholds_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A string, no TTL: the alert thresholds the lag monitor last applied (JSON,
    `lagsched.core.thresholds.ClusterThresholds`)."""
    return f"{prefix}{cluster}:thresholds"


def planned_slots_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A string, no TTL: the slots the consume DAG last planned for the cluster (need and standby)."""
    return f"{prefix}{cluster}:planned_slots"


def table_commits_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A HASH, no TTL: counters of the slots' table commits, field ``<table>|<outcome>``
    (``ok``, ``refused``, ``error``)."""
    return f"{prefix}{cluster}:table_commits"


def dead_letters_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A HASH, no TTL: counters of the records the cluster's slots committed to its dead-letter
    table, field ``<topic>`` (docs/routing.md)."""
    return f"{prefix}{cluster}:dead_letters"


def table_care_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A HASH, no TTL: table care runs by outcome (``ok``, ``failed``), field ``<outcome>``, and the
    time of the latest of each, field ``<outcome>_at``."""
    return f"{prefix}{cluster}:table_care"


# -- the notifications (notified) -------------------------------------------------------------


def notified_key(cluster: str, *, prefix: str = PREFIX) -> str:
    """A HASH: the findings sent and not yet cleared, ``<notifier>/<finding key>`` -> the finding (JSON)."""
    return f"{prefix}{cluster}:notified"


# -- the slots (slots) ------------------------------------------------------------------------


def slots_key(cluster: str, namespace: str = NAMESPACE) -> str:
    """A ZSET: the cluster's live set, slot id -> last heartbeat (Unix seconds)."""
    return f"{namespace}:slots:{cluster}"


def slot_key(slot_id: str, namespace: str = NAMESPACE) -> str:
    """A string with a TTL: one slot's last heartbeat (ISO 8601)."""
    return f"{namespace}:slot:{slot_id}"


def slot_lock_key(slot_id: str, namespace: str = NAMESPACE) -> str:
    """A string with a TTL: the token of the one process running the slot."""
    return f"{namespace}:slot_lock:{slot_id}"


def slot_racks_key(namespace: str = NAMESPACE) -> str:
    """A HASH: each slot's rack, slot id -> rack."""
    return f"{namespace}:slot_racks"


def slot_events_channel(namespace: str = NAMESPACE) -> str:
    """The pub/sub channel where slots say they joined, stood by or left."""
    return f"{namespace}:slot_events"
