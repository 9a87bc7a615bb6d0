"""The topic registry: ``topics`` and ``topic_partitions`` rows kept in step with the broker.

``sync_registry`` reads the cluster with the Admin API (topics, partitions, ``retention.ms``) and
applies it to MySQL in one transaction (``apply_sync``):

* a new topic gets a row with a fresh UUID and the default worker settings; its id is kept for good
  (names are not unique across clusters, so claims and owners key on the id);
* a known topic keeps its id and the users' ``linker_workers``, ``min_workers``, ``max_workers``;
  its ``partition_count`` and ``retention_ms`` follow the broker;
* partitions the broker has and the table lacks get rows (Signal's scenario 1: partitions added);
* a topic missing from the broker is disabled (``enabled = FALSE``), its rows and committed
  offsets kept, so an operator can see where it stopped and nothing is claimed any more;
* a disabled topic that shows up again is re-enabled with the same id and offsets. Kafka cannot
  undelete, so it is either a topic that only looked missing (a partial metadata answer) or a
  re-created one. Keeping offsets is right for the first and harmless for the second: the consumer
  clamps a committed offset to the partition's [log start, high watermark] as it must after
  retention anyway. Partition rows beyond a re-created topic's smaller count are kept (Kafka never
  shrinks a live topic); ``partition_count`` says which are real.

Internal topics (``__consumer_offsets``, ``__transaction_state``...) are never registered.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Re-exported by confluent_kafka.admin without __all__, which mypy --strict reads as private.
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

from lagsched.core.errors import TopicNameError

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors

    Connection = pymysql.connections.Connection[pymysql.cursors.Cursor]

__all__ = [
    "BrokerTopic",
    "SyncReport",
    "TopicDefaults",
    "apply_sync",
    "fetch_broker_topics",
    "sync_registry",
    "validate_cluster_name",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249  # Kafka's limit
MAX_CLUSTER_NAME = 255  # topics.cluster VARCHAR(255)


def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka would accept it as a topic name, else raise ``TopicNameError``.

    >>> validate_topic_name("orders.v2_eu-west")
    'orders.v2_eu-west'
    """
    if not name or len(name) > MAX_TOPIC_NAME or not _LEGAL.match(name) or name in {".", ".."}:
        raise TopicNameError(
            f"topic name {name!r} is not legal in Kafka: use 1 to {MAX_TOPIC_NAME} characters from "
            "[a-zA-Z0-9._-], and not '.' or '..'"
        )
    return name


def validate_cluster_name(name: str) -> str:
    """Cluster names label rows only, but follow the same alphabet so they are safe in logs and keys."""
    if not name or len(name) > MAX_CLUSTER_NAME or not _LEGAL.match(name):
        raise TopicNameError(
            f"cluster name {name!r} is not usable: use 1 to {MAX_CLUSTER_NAME} characters from [a-zA-Z0-9._-]"
        )
    return name


@dataclass(frozen=True, slots=True)
class BrokerTopic:
    """What the broker says about one topic.

    Attributes:
        name: the topic name (validated).
        partitions: partition count, >= 1.
        retention_ms: ``retention.ms``; -1 means infinite.
    """

    name: str
    partitions: int
    retention_ms: int = -1

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        if self.partitions < 1:
            raise ValueError(f"topic {self.name}: partitions={self.partitions}; must be >= 1")


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """Worker settings a newly registered topic starts with (users change them later)."""

    linker_workers: int = 1
    min_workers: int = 1
    max_workers: int = 8


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync changed; topic names per outcome.

    Attributes:
        added: topics registered for the first time.
        disabled: topics gone from the broker, now disabled (offsets kept).
        reenabled: disabled topics that came back.
        partitions_added: topic name -> partition ids that got new rows.
        topic_ids: topic name -> registry UUID, for every topic on the broker.
    """

    added: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    reenabled: tuple[str, ...] = ()
    partitions_added: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    topic_ids: Mapping[str, str] = field(default_factory=dict)


def _retention(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def fetch_broker_topics(admin: AdminClient, timeout_s: float = 15.0) -> list[BrokerTopic]:
    """Every non-internal topic on the cluster with its partition count and ``retention.ms``.

    Topics whose names Kafka itself should have refused are skipped with a warning rather than
    failing the whole sync.
    """
    metadata = admin.list_topics(timeout=timeout_s)
    if metadata.topics is None:
        raise RuntimeError("the broker returned no topic metadata")
    names: dict[str, int] = {}
    for name, meta in metadata.topics.items():
        if name.startswith("__"):
            continue
        if meta.error is not None:
            # A topic mid-creation or mid-deletion: leave it for the next sync rather than guess.
            log.warning("skipping topic %s: %s", name, meta.error)
            continue
        try:
            validate_topic_name(name)
        except TopicNameError as exc:
            log.warning("skipping topic: %s", exc)
            continue
        names[name] = len(meta.partitions)
    retention: dict[str, int] = {}
    if names:
        resources = [ConfigResource(ResourceType.TOPIC, n) for n in sorted(names)]
        for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
            entries = future.result(timeout=timeout_s)
            entry = entries.get("retention.ms")
            retention[resource.name] = _retention(entry.value if entry is not None else None)
    return [BrokerTopic(n, p, retention.get(n, -1)) for n, p in sorted(names.items()) if p >= 1]


def apply_sync(
    conn: Connection,
    cluster: str,
    broker_topics: Sequence[BrokerTopic],
    defaults: TopicDefaults | None = None,
) -> SyncReport:
    """Make the registry match ``broker_topics`` for ``cluster``, in one transaction.

    Idempotent: applying the same broker state twice changes nothing the second time.
    """
    validate_cluster_name(cluster)
    d = defaults or TopicDefaults()
    by_name = {t.name: t for t in broker_topics}
    if len(by_name) != len(broker_topics):
        raise ValueError("broker_topics repeats a topic name")
    added: list[str] = []
    disabled: list[str] = []
    reenabled: list[str] = []
    new_parts: dict[str, tuple[int, ...]] = {}
    ids: dict[str, str] = {}
    try:
        with conn.cursor() as cur:
            # Lock this cluster's rows: two syncs (two DAG runs) must not both insert a new topic.
            cur.execute(
                "SELECT topic_id, name, enabled FROM topics WHERE cluster = %s ORDER BY name FOR UPDATE",
                (cluster,),
            )
            known = {str(name): (str(tid), bool(enabled)) for tid, name, enabled in cur.fetchall()}
            for name, topic in sorted(by_name.items()):
                if name in known:
                    tid, enabled = known[name]
                    cur.execute(
                        "UPDATE topics SET partition_count = %s, retention_ms = %s, enabled = TRUE WHERE topic_id = %s",
                        (topic.partitions, topic.retention_ms, tid),
                    )
                    if not enabled:
                        reenabled.append(name)
                else:
                    tid = str(uuid.uuid4())
                    cur.execute(
                        "INSERT INTO topics (topic_id, cluster, name, partition_count, retention_ms,"
                        " linker_workers, min_workers, max_workers, enabled)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, TRUE)",
                        (tid, cluster, name, topic.partitions, topic.retention_ms,
                         d.linker_workers, d.min_workers, d.max_workers),
                    )  # fmt: skip
                    added.append(name)
                ids[name] = tid
                cur.execute("SELECT partition_id FROM topic_partitions WHERE topic_id = %s", (tid,))
                have = {int(r[0]) for r in cur.fetchall()}
                missing = [p for p in range(topic.partitions) if p not in have]
                if missing:
                    cur.executemany(
                        "INSERT INTO topic_partitions (topic_id, partition_id) VALUES (%s, %s)",
                        [(tid, p) for p in missing],
                    )
                    new_parts[name] = tuple(missing)
            for name, (tid, enabled) in sorted(known.items()):
                if name not in by_name and enabled:
                    cur.execute("UPDATE topics SET enabled = FALSE WHERE topic_id = %s", (tid,))
                    disabled.append(name)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    report = SyncReport(tuple(added), tuple(disabled), tuple(reenabled), new_parts, ids)
    if added or disabled or reenabled or new_parts:
        log.info(
            "registry %s: added %s, disabled %s, re-enabled %s, new partitions %s",
            cluster, added, disabled, reenabled, {k: len(v) for k, v in new_parts.items()},
        )  # fmt: skip
    return report


def sync_registry(
    conn: Connection,
    admin: AdminClient,
    cluster: str,
    defaults: TopicDefaults | None = None,
    *,
    only: Iterable[str] | None = None,
    timeout_s: float = 15.0,
) -> SyncReport:
    """Read the broker and apply it to the registry (``fetch_broker_topics`` + ``apply_sync``).

    Args:
        only: restrict the sync to these topic names (validated); topics outside the list are
            neither added nor disabled. ``None`` syncs the whole cluster.
    """
    validate_cluster_name(cluster)
    topics = fetch_broker_topics(admin, timeout_s)
    if only is None:
        return apply_sync(conn, cluster, topics, defaults)
    wanted = {validate_topic_name(n) for n in only}
    # Restricting the broker side alone would disable every registered topic outside the list,
    # so the registry side is restricted too: see _apply_subset.
    return _apply_subset(conn, cluster, [t for t in topics if t.name in wanted], wanted, defaults)


def _apply_subset(
    conn: Connection,
    cluster: str,
    topics: Sequence[BrokerTopic],
    wanted: set[str],
    defaults: TopicDefaults | None,
) -> SyncReport:
    # Same as apply_sync, but a registered topic outside `wanted` is left alone: only topics in
    # the list may be disabled.
    full = apply_sync(conn, cluster, [*topics, *_registered_outside(conn, cluster, wanted)], defaults)
    return SyncReport(
        tuple(n for n in full.added if n in wanted),
        tuple(n for n in full.disabled if n in wanted),
        tuple(n for n in full.reenabled if n in wanted),
        {n: p for n, p in full.partitions_added.items() if n in wanted},
        {n: i for n, i in full.topic_ids.items() if n in wanted},
    )


def _registered_outside(conn: Connection, cluster: str, wanted: set[str]) -> list[BrokerTopic]:
    # Present every enabled topic outside the subset to apply_sync as unchanged, so it stays enabled.
    with conn.cursor() as cur:
        cur.execute(
            "SELECT name, partition_count, retention_ms FROM topics WHERE cluster = %s AND enabled",
            (cluster,),
        )
        rows = cur.fetchall()
    conn.commit()
    return [BrokerTopic(str(n), int(p), int(r)) for n, p, r in rows if n not in wanted and int(p) >= 1]
