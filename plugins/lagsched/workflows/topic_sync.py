"""Topic sync: keep the registry in step with the broker (rules in `lagsched.core.registry`).

One `sync_registry` call reads the cluster's topics with the Admin API (three requests for the
whole cluster) and applies the plan to MySQL in one transaction, under a lock on the cluster's
rows so two concurrent syncs agree.

**Topic filter** (a cluster's ``topics``/``topic_pattern`` in the Variable ``lagsched_clusters``,
`lagsched.core.clusters`): the sync sees only the broker's topics that the filter accepts. A topic
outside it is never registered; a registered topic that falls outside it (the filter was
narrowed) is **disabled** like a topic deleted on the broker: its row and offsets are kept, the
monitor stops measuring it and the slots stop consuming it; when the filter takes it back (the
same Kafka topic), it is re-enabled with its offsets. Disabling rather than ignoring is the
point: a filter is how an operator says "not this topic any more".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from lagsched.adapters.gc_pause import cyclic_gc_paused
from lagsched.adapters.kafka_admin import BrokerTopics, fetch_broker_topics
from lagsched.adapters.topics import apply_sync
from lagsched.core.names import validate_cluster_name, validate_topic_name
from lagsched.core.registry import TopicDefaults, plan_sync

__all__ = ["SyncReport", "sync_registry"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync changed; topic names per outcome.

    Attributes:
        added: topics registered for the first time.
        disabled: topics gone from the broker or outside the cluster's topic filter, now disabled
            (offsets kept).
        reenabled: disabled topics that came back (the same Kafka topic).
        recreated: topics deleted and created again under the same name: a new registry row
            without offsets, the old one disabled with its history.
        uncertain: topics the broker answered with an error for, left as they were.
        partitions_added: topic name -> partition ids that got new rows.
        topic_ids: topic name -> registry id, for every topic the sync covers that is enabled.
    """

    added: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    reenabled: tuple[str, ...] = ()
    recreated: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = ()
    partitions_added: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (for XCom)."""
        return {
            "topics": len(self.topic_ids),
            "added": list(self.added),
            "disabled": list(self.disabled),
            "reenabled": list(self.reenabled),
            "recreated": list(self.recreated),
            "uncertain": list(self.uncertain),
            "partitions_added": {name: len(ids) for name, ids in self.partitions_added.items()},
        }


@cyclic_gc_paused()
def sync_registry(
    conn: Any,
    admin: Any,
    cluster: str,
    defaults: TopicDefaults | None = None,
    *,
    only: Iterable[str] | None = None,
    topic_filter: Callable[[str], bool] | None = None,
    timeout_s: float = 15.0,
) -> SyncReport:
    """Read the broker and apply it to the registry of `cluster`.

    Args:
        conn: an open lagsched MySQL connection.
        admin: the cluster's Admin client.
        cluster: registry cluster name.
        defaults: worker settings of a brand-new topic.
        only: restrict the sync to these topic names (validated); topics outside the list are
            neither added nor disabled. ``None`` syncs the whole cluster.
        topic_filter: the cluster's managed topics (``ClusterConfig.manages``): a broker topic it
            rejects is treated as absent, so it is not registered, and disabled if it was.
        timeout_s: broker request timeout.
    """
    validate_cluster_name(cluster)
    wanted = None if only is None else {validate_topic_name(n) for n in only}
    broker = fetch_broker_topics(admin, timeout_s)
    if topic_filter is not None:
        broker = BrokerTopics(
            tuple(t for t in broker.topics if topic_filter(t.name)),
            tuple(n for n in broker.uncertain if topic_filter(n)),
        )
    planner = partial(plan_sync, broker=broker.topics, defaults=defaults, uncertain=broker.uncertain, only=wanted)
    applied = apply_sync(conn, cluster, planner)
    plan = applied.plan
    in_scope = (lambda _n: True) if wanted is None else wanted.__contains__
    report = SyncReport(
        added=plan.added,
        disabled=plan.disabled_names,
        reenabled=plan.reenabled,
        recreated=plan.recreated,
        uncertain=tuple(n for n in broker.uncertain if in_scope(n)),
        partitions_added=dict(applied.partitions_added),
        topic_ids={n: i for n, i in applied.topic_ids.items() if in_scope(n)},
    )
    if plan.insert or plan.disable or plan.update:
        log.info(
            "registry %s: added %s, disabled %s, re-enabled %s, re-created %s, new partitions %s",
            cluster, _few(report.added), _few(report.disabled), _few(report.reenabled), _few(report.recreated),
            _few([f"{k}+{len(v)}" for k, v in report.partitions_added.items()]),
        )  # fmt: skip
    for name in report.recreated:
        log.warning(
            "topic %s was deleted and created again on the broker: it is registered as a new topic whose "
            "consumption starts where no_offset_policy says; the old registry row is kept, disabled, with its offsets",
            name,
        )
    return report


#: Names a log line lists before it only counts the rest: a first sync of a large cluster adds
#: thousands of topics, and one line naming them all is unreadable in the task log.
LOGGED_NAMES = 10


def _few(names: Sequence[str]) -> str:
    """``names`` for a log line: all of a short list, the first `LOGGED_NAMES` and a count of a long one.

    >>> _few(["a", "b"]), _few([]), _few([str(i) for i in range(12)])
    ("['a', 'b']", '[]', "12: ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9', ...]")
    """
    if len(names) <= LOGGED_NAMES:
        return str(list(names))
    return f"{len(names):,}: {list(names[:LOGGED_NAMES])}"[:-1] + ", ...]"
