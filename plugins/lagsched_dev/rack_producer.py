"""A confluent-kafka producer that writes to partitions led from its own rack (docs/rack.md, seed 004).

::

    producer = RackAwareProducer({"bootstrap.servers": "..."}, rack="a")
    producer.produce("orders", b"value", key=b"customer-7")
    producer.flush()

Each ``produce`` names its partition explicitly, chosen by ``lagsched.core.rack.choose_partition``
from cached metadata: the topic's partition leaders (the producer's own ``list_topics``) and the
brokers' racks (``AdminClient.describe_cluster``; confluent-kafka's plain metadata carries no
rack). The cache of a topic is refreshed

* every ``metadata_interval_s`` (default 30 s, librdkafka's own ``topic.metadata.refresh.interval.ms``
  is 5 minutes, too slow to follow a leader move), and
* after a delivery error that says the leader moved or the partition is unknown
  (``NOT_LEADER_OR_FOLLOWER``, ``LEADER_NOT_AVAILABLE``, ``UNKNOWN_TOPIC_OR_PART``,
  ``_UNKNOWN_PARTITION``): the next ``produce`` to that topic reads the metadata again.

Without a rack, or when no leader of the topic is in it (a broker down, a rack without brokers),
every partition is a candidate: keyed records then go exactly where Kafka's default partitioner
would put them (murmur2 over all partitions), keyless ones round-robin. When the metadata cannot be
read at all, the record goes without a partition and librdkafka's own partitioner places it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lagsched.core.rack import RackPartitioner

__all__ = ["RackAwareProducer", "RoutingStats"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RoutingStats:
    """What the producer routed: records sent to a leader in its own rack, and in all."""

    same_rack: int = 0
    total: int = 0
    #: Records sent without a partition because the topic's metadata could not be read.
    unrouted: int = 0
    refreshes: int = 0

    @property
    def same_rack_share(self) -> float:
        return self.same_rack / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True)
class _TopicView:
    leader_racks: dict[int, str | None]
    read_at: float


def _stale_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = ("NOT_LEADER_FOR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE",
             "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC")  # fmt: skip
    return frozenset(int(getattr(KafkaError, n)) for n in names if hasattr(KafkaError, n))


class RackAwareProducer:
    """A ``confluent_kafka.Producer`` whose records go to partitions led from ``rack``.

    Args:
        config: confluent-kafka settings (``bootstrap.servers`` at least); used as-is for the
            producer and, without producer-only callbacks, for the admin client that reads racks.
        rack: the producer's own rack (availability zone), as brokers name theirs in
            ``broker.rack``; None routes as Kafka's default partitioner does.
        metadata_interval_s: how old cached leaders may get before a produce reads them again.
        clock: monotonic seconds (injected so tests control the refresh interval).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        rack: str | None,
        *,
        metadata_interval_s: float = 30.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        if rack is not None and not rack.strip():
            raise ValueError("rack is empty; give the broker.rack value of this producer's zone, or None")
        if metadata_interval_s <= 0:
            raise ValueError(f"metadata_interval_s={metadata_interval_s}; must be > 0")
        self.rack = rack
        self.stats = RoutingStats()
        self._producer = Producer(dict(config))
        admin_conf = {k: v for k, v in config.items() if not callable(v)}
        self._admin = AdminClient(admin_conf)
        self._partitioner = RackPartitioner(rack)
        self._interval_s = metadata_interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._views: dict[str, _TopicView] = {}
        self._racks: dict[int, str | None] = {}
        self._stale: set[str] = set()
        self._lock = threading.Lock()
        self._stale_codes = _stale_codes()

    # ------------------------------------------------------------------ metadata

    def _broker_racks(self, wanted: set[int]) -> dict[int, str | None]:
        if not wanted <= self._racks.keys():
            from lagsched.adapters.kafka_admin import broker_racks

            self._racks = broker_racks(self._admin, self._timeout_s)
        return self._racks

    def _read(self, topic: str) -> _TopicView | None:
        try:
            meta = self._producer.list_topics(topic, timeout=self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException: route without a partition instead
            log.warning("cannot read the metadata of %s (%s); records go through librdkafka's partitioner", topic, exc)
            return None
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            return None
        leaders = {int(p): int(pm.leader) for p, pm in tmeta.partitions.items()}
        try:
            racks = self._broker_racks({b for b in leaders.values() if b >= 0})
        except Exception as exc:  # noqa: BLE001 - KafkaOffsetsError: no racks known, fall back
            log.warning("cannot read the brokers' racks (%s); routing %s over every partition", exc, topic)
            racks = {}
        self.stats.refreshes += 1
        return _TopicView({p: racks.get(b) if b >= 0 else None for p, b in leaders.items()}, self._clock())

    def leader_racks(self, topic: str) -> dict[int, str | None] | None:
        """The topic's partition -> leader rack as the producer routes by it now (refreshed if due)."""
        with self._lock:
            view = self._views.get(topic)
            due = view is None or topic in self._stale or self._clock() - view.read_at >= self._interval_s
            if due:
                self._stale.discard(topic)
                fresh = self._read(topic)
                if fresh is None:
                    self._views.pop(topic, None)
                    return None
                self._views[topic] = view = fresh
            assert view is not None
            return view.leader_racks

    def refresh(self, topic: str) -> None:
        """Read the topic's leaders again at its next produce (e.g. after a known leader move)."""
        with self._lock:
            self._stale.add(topic)
            self._racks = {}

    # ------------------------------------------------------------------ producing

    def partition_for(self, topic: str, key: str | bytes | None) -> int | None:
        """The partition ``produce`` would pick now (None: no metadata, librdkafka decides)."""
        leaders = self.leader_racks(topic)
        if leaders is None:
            return None
        with self._lock:
            return self._partitioner.partition(topic, leaders, key)

    def produce(
        self,
        topic: str,
        value: str | bytes | None,
        key: str | bytes | None = None,
        *,
        on_delivery: Callable[[Any, Any], None] | None = None,
        **kwargs: Any,
    ) -> int | None:
        """Queue one record on a partition led from the producer's rack; returns the partition chosen.

        ``kwargs`` go to ``Producer.produce`` (``headers``, ``timestamp``); ``partition`` is not
        accepted (choosing it is this class's job). Raises what ``Producer.produce`` raises
        (``BufferError`` when the local queue is full: ``poll`` and try again).
        """
        if "partition" in kwargs:
            raise TypeError("RackAwareProducer chooses the partition; use a plain Producer to set one yourself")
        leaders = self.leader_racks(topic)
        partition: int | None = None
        if leaders is not None:
            with self._lock:
                partition = self._partitioner.partition(topic, leaders, key)
        args: dict[str, Any] = dict(kwargs)
        if partition is not None:
            args["partition"] = partition
        self._producer.produce(topic, value, key, on_delivery=self._delivered(topic, on_delivery), **args)
        with self._lock:
            self.stats.total += 1
            if partition is None:
                self.stats.unrouted += 1
            elif self.rack is not None and leaders is not None and leaders.get(partition) == self.rack:
                self.stats.same_rack += 1
        return partition

    def _delivered(self, topic: str, callback: Callable[[Any, Any], None] | None) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None and err.code() in self._stale_codes:
                # The leader moved (or the partition vanished): route by fresh metadata from now on.
                with self._lock:
                    self._stale.add(topic)
            if callback is not None:
                callback(err, msg)

        return on_delivery

    def poll(self, timeout: float = 0.0) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float = -1) -> int:
        """Wait for every queued record's delivery; returns how many are still queued."""
        return int(self._producer.flush(timeout))

    def __len__(self) -> int:
        return len(self._producer)
