"""The topic registry's rules: what a sync with the broker changes. Pure: rows in, a plan out.

A registry row is a topic as lagsched knows it (`TopicRow`); the broker's view is a list of
`BrokerTopic`. `plan_sync` decides, for one cluster:

* a topic new to the registry gets a row with a fresh registry id and the default worker settings;
* a known topic keeps its id and the users' ``linker_workers`` and worker limits; its partition
  count, ``retention.ms`` and ``message.timestamp.type`` follow the broker (only changed rows are written);
* a topic missing from the broker is disabled, its rows and committed offsets kept;
* **a re-created topic** (same name, another Kafka topic id) is a new topic: the old row is
  disabled with its history, and a new row starts with no committed offset, so the consumer starts
  where ``no_offset_policy`` says. Resuming at the old topic's offsets would skip the new topic's
  first records (committed 500 on a new topic at 300 reads nothing until offset 500). The new row
  keeps the operator's worker settings, which belong to the name;
* a disabled topic that shows up again with the **same** Kafka topic id only looked missing (a
  partial metadata answer) and is re-enabled with its offsets;
* a topic the broker answered with an error for is left exactly as it is (neither added nor
  disabled): a topic mid-creation or with no leader for a moment is not a deleted topic.

Rows registered before Kafka topic ids were recorded have none; the first sync adopts the broker's.
A disabled row without a Kafka id never comes back: nothing proves it is the same topic.

Example:
    >>> row = TopicRow("r1", "c", "orders", "AAAAAAAAAAAAAAAAAAAAAA", 2, -1, 3, None, None, True)
    >>> plan = plan_sync([row], [BrokerTopic("orders", 2, -1, "BBBBBBBBBBBBBBBBBBBBBB")])
    >>> plan.disable, [(n.topic.name, n.replaces, n.linker_workers) for n in plan.insert]
    (('r1',), [('orders', 'r1', 3)])
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from lagsched.core.names import validate_topic_name

__all__ = ["BrokerTopic", "NewTopic", "SyncPlan", "TopicDefaults", "TopicRow", "TopicUpdate", "plan_sync"]


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One ``topics`` row: the registry's one row type.

    Attributes:
        topic_id: registry id (a UUID); a re-created topic gets a new one.
        cluster: registry cluster name.
        name: topic name.
        kafka_topic_id: Kafka's own topic id; None on rows registered before it was recorded.
        partition_count: partitions the broker reported at the last sync.
        retention_ms: ``retention.ms``; -1 means infinite.
        linker_workers: worker slots that consume the topic.
        min_workers: the operator's per-topic lower limit, None when unset (the Variable's applies).
        max_workers: the operator's per-topic upper limit, None when unset.
        enabled: False once the topic was deleted or re-created on the broker.
        log_append_time: its ``message.timestamp.type`` is ``LogAppendTime`` (no late records).
    """

    topic_id: str
    cluster: str
    name: str
    kafka_topic_id: str | None
    partition_count: int
    retention_ms: int
    linker_workers: int
    min_workers: int | None
    max_workers: int | None
    enabled: bool
    log_append_time: bool = False


@dataclass(frozen=True, slots=True)
class BrokerTopic:
    """What the broker says about one topic.

    Attributes:
        name: the topic name (validated).
        partitions: partition count, >= 1.
        retention_ms: ``retention.ms``; -1 means infinite.
        kafka_topic_id: Kafka's topic id (base64), None when the broker did not say.
        log_append_time: ``message.timestamp.type`` is ``LogAppendTime``.
    """

    name: str
    partitions: int
    retention_ms: int = -1
    kafka_topic_id: str | None = None
    log_append_time: bool = False

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        if type(self.partitions) is not int or self.partitions < 1:
            raise ValueError(f"topic {self.name}: partitions={self.partitions!r}; must be an integer >= 1")


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """Worker settings a newly registered topic starts with (users change them later).

    The limits default to None: the Variable's ``min_workers``/``max_workers`` then apply.
    """

    linker_workers: int = 1
    min_workers: int | None = None
    max_workers: int | None = None


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A row to insert. ``replaces`` is the registry id of the row a re-created topic replaces."""

    topic: BrokerTopic
    linker_workers: int
    min_workers: int | None
    max_workers: int | None
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class TopicUpdate:
    """A known row to bring in step with the broker (``reenable``: it was disabled)."""

    row: TopicRow
    topic: BrokerTopic
    reenable: bool = False


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What one sync changes.

    Attributes:
        insert: rows to create (new topics and re-created ones).
        update: rows whose partition count, retention or Kafka id changed, or that come back.
        disable: registry ids of rows to disable (deleted topics, replaced re-created topics).
        disabled_names: names of topics disabled because the broker no longer has them.
        unchanged: enabled rows the broker agrees with, by name (their ids, for the report).
    """

    insert: tuple[NewTopic, ...] = ()
    update: tuple[TopicUpdate, ...] = ()
    disable: tuple[str, ...] = ()
    disabled_names: tuple[str, ...] = ()
    unchanged: tuple[TopicRow, ...] = ()

    @property
    def recreated(self) -> tuple[str, ...]:
        return tuple(n.topic.name for n in self.insert if n.replaces is not None)

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(n.topic.name for n in self.insert if n.replaces is None)

    @property
    def reenabled(self) -> tuple[str, ...]:
        return tuple(u.topic.name for u in self.update if u.reenable)


def plan_sync(
    rows: Sequence[TopicRow],
    broker: Iterable[BrokerTopic],
    defaults: TopicDefaults | None = None,
    *,
    uncertain: Collection[str] = (),
    only: Collection[str] | None = None,
) -> SyncPlan:
    """Decide what a sync changes (see the module doc for the rules).

    Args:
        rows: every registry row of the cluster, enabled or not.
        broker: the broker's topics (the ones it answered without error).
        defaults: worker settings of a brand-new topic.
        uncertain: topics the broker answered with an error for: left alone.
        only: restrict the sync to these names; other topics are neither added nor disabled.
    """
    d = defaults or TopicDefaults()
    on_broker = {t.name: t for t in broker}
    scope = set(on_broker) | {r.name for r in rows} if only is None else set(only)
    scope -= set(uncertain)
    enabled = {r.name: r for r in rows if r.enabled}
    disabled: dict[str, list[TopicRow]] = {}
    for r in rows:
        if not r.enabled:
            disabled.setdefault(r.name, []).append(r)

    insert: list[NewTopic] = []
    update: list[TopicUpdate] = []
    disable: list[str] = []
    unchanged: list[TopicRow] = []
    for name in sorted(scope & set(on_broker)):
        topic = on_broker[name]
        current = enabled.get(name)
        if current is not None and not _is_other_topic(current.kafka_topic_id, topic.kafka_topic_id):
            if _differs(current, topic):
                update.append(TopicUpdate(current, topic))
            else:
                unchanged.append(current)
        elif current is not None:  # re-created while we were not looking
            disable.append(current.topic_id)
            insert.append(_new(topic, current, current.topic_id))
        else:
            earlier = disabled.get(name, [])
            same = [r for r in earlier if r.kafka_topic_id is not None and r.kafka_topic_id == topic.kafka_topic_id]
            if same:
                update.append(TopicUpdate(same[0], topic, reenable=True))
            elif earlier:  # deleted, then created again: its settings carry over, its offsets do not
                insert.append(_new(topic, earlier[-1], earlier[-1].topic_id))
            else:
                insert.append(NewTopic(topic, d.linker_workers, d.min_workers, d.max_workers))
    gone = sorted(n for n in scope & set(enabled) if n not in on_broker)
    disable += [enabled[n].topic_id for n in gone]
    return SyncPlan(tuple(insert), tuple(update), tuple(disable), tuple(gone), tuple(unchanged))


def _is_other_topic(registered: str | None, on_broker: str | None) -> bool:
    # Without both ids nothing says it is another topic: a row from before ids were recorded adopts
    # the broker's id, and a broker that did not say keeps the row as it is.
    return registered is not None and on_broker is not None and registered != on_broker


def _differs(row: TopicRow, topic: BrokerTopic) -> bool:
    return (row.partition_count, row.retention_ms, row.log_append_time) != (
        topic.partitions,
        topic.retention_ms,
        topic.log_append_time,
    ) or (topic.kafka_topic_id is not None and row.kafka_topic_id != topic.kafka_topic_id)


def _new(topic: BrokerTopic, previous: TopicRow, replaces: str) -> NewTopic:
    return NewTopic(topic, previous.linker_workers, previous.min_workers, previous.max_workers, replaces)
