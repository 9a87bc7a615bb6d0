"""The Kafka clusters lagsched watches: the Airflow Variable ``lagsched_clusters``, validated. Pure.

One JSON object keyed by registry cluster name (the ``topics.cluster`` of its rows, the DAGs'
``cluster`` param, the consumer's ``--cluster``); each value says which Kafka Connection reaches
the cluster, which of its topics lagsched manages, and how many consumer slots it may run::

    {
      "lagsched_kafka": {},
      "eu": {"kafka_conn_id": "lagsched_kafka_eu", "topics": ["orders", "payments"],
             "topic_pattern": "^clicks\\\\..*", "max_slots": 8}
    }

Fields of a cluster (all optional):

* ``kafka_conn_id``: the Kafka Connection (type ``kafka``); default ``lagsched_kafka``. Ids follow
  Airflow's rule ``[A-Za-z0-9_.-]``.
* ``topics``: topic names to manage (legal Kafka names).
* ``topic_pattern``: a regular expression a topic name must match in full, in RE2's syntax (Python's
  without lookarounds and backreferences): RE2 matches in time linear in the name, where Python's
  ``re`` can backtrack exponentially (``(a+)+$`` against 30 a's and a b would hang topic
  sync and the lag monitor). With ``topics`` too, a topic is managed if either says so; with
  neither, every topic is.
* ``max_slots``: consumer slots the consume DAG runs at most for this cluster (1 to 1,000;
  default 4). The Airflow pool ``lagsched_consume`` bounds the slots of all clusters together.
* ``slot_budget_s``: how long one consumer slot runs before it hands its rows back and the
  consume DAG starts it again (60 to 86,400 seconds; default 3,600, Hevo's hour). Slots live
  long: a start costs the Spark application's start, so the longer, the smaller that share.
* ``slot_max_rate``: records/s one consumer slot reads at most (a positive number up to
  10,000,000; default null, no cap). For a cluster shared with other work, a rate-limited source,
  or a demonstration: a topic then needs as many workers as its ingress rate over this cap.
* ``standby_slots``: slots kept warm beyond the need (0 to 10; default 0). Such a slot has
  started Spark and waits without claiming anything; when the cluster needs one more slot it joins
  within a second of the scaling decision instead of after a Spark start (tens of seconds on YARN or
  Kubernetes), and on a scale-down the surplus slot stands by again rather than exiting. Each
  costs one idle Spark driver (and its pool slot in ``lagsched_consume``).
* ``sink``: the Iceberg table the cluster's records land in (`lagsched.core.lake.LakeTable`):
  ``warehouse`` (``file://``, ``s3a://``, ``hdfs://``; default ``$LAGSCHED_WAREHOUSE``, else
  ``file://$LAGSCHED_HOME/warehouse``; with neither, no default: docs/install.md), ``catalog``
  (default ``lagsched``), ``namespace`` (default ``kafka``), ``table`` (default: the cluster name)
  and ``s3_endpoint`` (an S3-compatible store's URL).
  Two clusters may not name the same table: the table's ranges are keyed by topic and partition,
  so two clusters' topics of one name would collide in it.

An absent Variable means one cluster, ``lagsched_kafka``, with every topic (`DEFAULT_CLUSTERS`).
A malformed one raises a single `ConfigError` listing every problem (field path, value, what is
allowed), so a run that reads it fails before it changes anything.

Example:
    >>> [c.name for c in parse_clusters(None)]
    ['lagsched_kafka']
    >>> eu = parse_clusters({"eu": {"kafka_conn_id": "kafka_eu", "topic_pattern": r"clicks\\..*"}})[0]
    >>> (eu.kafka_conn_id, eu.manages("clicks.web"), eu.manages("orders"))
    ('kafka_eu', True, False)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2

from lagsched.core import variable_json
from lagsched.core.errors import ConfigError, TopicNameError
from lagsched.core.lake import LakeTable, sink_problems
from lagsched.core.names import validate_cluster_name, validate_topic_name

__all__ = [
    "CLUSTERS_VARIABLE",
    "DEFAULT_CLUSTER",
    "DEFAULT_CLUSTERS",
    "DEFAULT_KAFKA_CONN_ID",
    "DEFAULT_MAX_SLOTS",
    "DEFAULT_SLOT_BUDGET_S",
    "MAX_SLOTS",
    "ClusterConfig",
    "managed",
    "parse_clusters",
    "select_clusters",
]

CLUSTERS_VARIABLE = "lagsched_clusters"
DEFAULT_KAFKA_CONN_ID = "lagsched_kafka"
#: The cluster of an absent Variable, and of every DAG's default before clusters were configurable.
DEFAULT_CLUSTER = "lagsched_kafka"
DEFAULT_MAX_SLOTS = 4
MAX_SLOTS = 1000
#: A slot's life (seconds): an hour, Hevo's figure; a start costs ~10-15 s of Spark start-up.
DEFAULT_SLOT_BUDGET_S = 3600
SLOT_BUDGET_RANGE_S = (60, 86_400)
MAX_SLOT_RATE = 10_000_000
#: Warm slots a cluster may keep beyond its need: each is an idle Spark driver.
MAX_STANDBY_SLOTS = 10
_CONN_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")
_FIELDS = (
    "kafka_conn_id", "topics", "topic_pattern", "max_slots", "slot_budget_s", "slot_max_rate", "standby_slots", "sink",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """One configured Kafka cluster.

    Attributes:
        name: registry cluster name (``topics.cluster``).
        kafka_conn_id: the Airflow Connection (type ``kafka``) that reaches it.
        topics: topic names to manage; empty with no pattern = every topic.
        topic_pattern: regular expression a managed topic name matches in full, or None.
        max_slots: consumer slots the consume DAG runs at most for this cluster.
        slot_budget_s: seconds one slot runs before it leaves and is started again.
        slot_max_rate: records/s one slot reads at most; None: no cap.
        standby_slots: warm slots kept beyond the need, ready to join on a scale-up.
        sink: the validated ``sink`` object as sorted ``(field, value)`` pairs; `sink_settings` as a dict.
    """

    name: str
    kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    max_slots: int = DEFAULT_MAX_SLOTS
    sink: tuple[tuple[str, str], ...] = ()
    slot_budget_s: int = DEFAULT_SLOT_BUDGET_S
    slot_max_rate: float | None = None
    standby_slots: int = 0

    def sink_settings(self) -> dict[str, str]:
        """The ``sink`` object (`lagsched.core.lake.LakeTable.of` fills in the defaults)."""
        return dict(self.sink)

    @property
    def manages_every_topic(self) -> bool:
        return not self.topics and self.topic_pattern is None

    def manages(self, topic: str) -> bool:
        """Whether ``topic`` is one of this cluster's managed topics."""
        if self.manages_every_topic or topic in self.topics:
            return True
        return self.topic_pattern is not None and _pattern(self.topic_pattern).fullmatch(topic) is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (XCom, mapped task arguments); `from_dict` reads it back."""
        return {
            "name": self.name,
            "kafka_conn_id": self.kafka_conn_id,
            "topics": list(self.topics),
            "topic_pattern": self.topic_pattern,
            "max_slots": self.max_slots,
            "slot_budget_s": self.slot_budget_s,
            "slot_max_rate": self.slot_max_rate,
            "standby_slots": self.standby_slots,
            "sink": self.sink_settings(),
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> ClusterConfig:
        """The inverse of `as_dict` (validated like the Variable, so a hand-edited XCom cannot slip by)."""
        name = value.get("name")
        body = {k: v for k, v in value.items() if k != "name"}
        return parse_clusters({str(name): body})[0]


DEFAULT_CLUSTERS: tuple[ClusterConfig, ...] = (ClusterConfig(DEFAULT_CLUSTER),)


def _decode(raw: str | bytes | Mapping[str, Any] | None) -> Any:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return raw
    text = raw.decode() if isinstance(raw, bytes) else raw
    if not text.strip():
        return None
    return variable_json.loads(text, CLUSTERS_VARIABLE)


_Problems = list[tuple[str, object, str]]


def _check_cluster(name: str, body: Any, problems: _Problems) -> ClusterConfig | None:
    before = len(problems)
    try:
        validate_cluster_name(name)
    except TopicNameError:
        problems.append((name, name, "a cluster name of 1 to 255 characters from [a-zA-Z0-9._-]"))
    if not isinstance(body, Mapping):
        problems.append((name, body, "an object (use {} for the defaults)"))
        return None
    for key in body:
        if key not in _FIELDS:
            problems.append((f"{name}.{key}", body[key], f"one of the fields {', '.join(_FIELDS)}"))
    conn_id = body.get("kafka_conn_id", DEFAULT_KAFKA_CONN_ID)
    if not isinstance(conn_id, str) or not _CONN_ID.fullmatch(conn_id):
        problems.append((f"{name}.kafka_conn_id", conn_id, "a Connection id of 1 to 250 characters [A-Za-z0-9_.-]"))
    topics = _check_topics(name, body, problems)
    pattern = body.get("topic_pattern")
    _check_pattern(name, pattern, problems)
    _check_slot_limits(name, body, problems)
    sink = body.get("sink") or {}
    problems.extend(sink_problems(name, sink))
    if len(problems) > before:
        return None
    rate = body.get("slot_max_rate")
    return ClusterConfig(
        name,
        conn_id,
        tuple(dict.fromkeys(topics)),
        pattern,
        body.get("max_slots", DEFAULT_MAX_SLOTS),
        tuple(sorted((k, v) for k, v in sink.items() if v is not None)),
        body.get("slot_budget_s", DEFAULT_SLOT_BUDGET_S),
        None if rate is None else float(rate),
        body.get("standby_slots", 0),
    )


def _check_topics(name: str, body: Mapping[str, Any], problems: _Problems) -> list[Any]:
    """The cluster's ``topics`` list (empty when it is not a list; each bad name is a problem)."""
    topics = body.get("topics", [])
    if not isinstance(topics, list):
        problems.append((f"{name}.topics", topics, "a list of topic names"))
        return []
    for i, topic in enumerate(topics):
        try:
            validate_topic_name(topic)
        except TopicNameError:
            problems.append((f"{name}.topics[{i}]", topic, "a legal Kafka topic name ([a-zA-Z0-9._-], 1-249)"))
    return topics


def _check_pattern(name: str, pattern: Any, problems: _Problems) -> None:
    if pattern is None:
        return
    if not isinstance(pattern, str) or not pattern:
        problems.append((f"{name}.topic_pattern", pattern, "a non-empty regular expression, or null"))
        return
    try:
        _pattern(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        problems.append(
            (
                f"{name}.topic_pattern",
                pattern,
                "a regular expression in RE2's syntax, matched in linear time: "
                f"no lookarounds or backreferences ({reason})",
            )
        )


@functools.lru_cache(maxsize=256)
def _pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2, quietly (RE2 would log a refused pattern on stderr as well)."""
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def _is_int_in(value: Any, low: int, high: int) -> bool:
    # bool is an int in Python; `true` slots is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_slot_limits(name: str, body: Mapping[str, Any], problems: _Problems) -> None:
    """``max_slots``, ``slot_budget_s``, ``slot_max_rate`` and ``standby_slots``."""
    max_slots = body.get("max_slots", DEFAULT_MAX_SLOTS)
    if not _is_int_in(max_slots, 1, MAX_SLOTS):
        problems.append((f"{name}.max_slots", max_slots, f"an integer from 1 to {MAX_SLOTS}"))
    budget = body.get("slot_budget_s", DEFAULT_SLOT_BUDGET_S)
    low, high = SLOT_BUDGET_RANGE_S
    if not _is_int_in(budget, low, high):
        problems.append((f"{name}.slot_budget_s", budget, f"an integer number of seconds from {low} to {high}"))
    rate = body.get("slot_max_rate")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= MAX_SLOT_RATE
    ):
        problems.append((f"{name}.slot_max_rate", rate, f"records/s above 0 and at most {MAX_SLOT_RATE:,}, or null"))
    standby = body.get("standby_slots", 0)
    if not _is_int_in(standby, 0, MAX_STANDBY_SLOTS):
        problems.append((f"{name}.standby_slots", standby, f"an integer from 0 to {MAX_STANDBY_SLOTS}"))


def parse_clusters(raw: str | bytes | Mapping[str, Any] | None) -> tuple[ClusterConfig, ...]:
    """Validate the ``lagsched_clusters`` Variable; None or blank = `DEFAULT_CLUSTERS`.

    Clusters come back sorted by name, so every reader maps them in the same order.

    Raises:
        ConfigError: the Variable is malformed; the message names every bad field path, the value
            and what is allowed (``field``/``value``/``allowed`` describe the first).
    """
    data = _decode(raw)
    if data is None:
        return DEFAULT_CLUSTERS
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid {CLUSTERS_VARIABLE}: expected an object keyed by cluster name, got {type(data).__name__}",
            field="",
            value=data,
            allowed='an object, e.g. {"lagsched_kafka": {}}',
        )
    if not data:
        raise ConfigError(
            f"invalid {CLUSTERS_VARIABLE}: no cluster configured; delete the Variable for the default "
            f"({DEFAULT_CLUSTER}, every topic) or name at least one cluster",
            field="",
            value=data,
            allowed="at least one cluster",
        )
    problems: list[tuple[str, object, str]] = []
    clusters = [_check_cluster(str(name), body, problems) for name, body in sorted(data.items())]
    _check_tables_apart([c for c in clusters if c is not None], problems)
    if problems:
        listed = "; ".join(f"{path} = {value!r}: expected {allowed}" for path, value, allowed in problems)
        path, value, allowed = problems[0]
        raise ConfigError(f"invalid {CLUSTERS_VARIABLE}: {listed}", field=path, value=value, allowed=allowed)
    return tuple(c for c in clusters if c is not None)


def _check_tables_apart(clusters: Sequence[ClusterConfig], problems: _Problems) -> None:
    """No two clusters write one table: its ranges are keyed by topic and partition only. Names are
    compared without case, as the catalog's database compares them."""
    writer: dict[str, str] = {}
    for cluster in clusters:
        table = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse="").identifier
        first = writer.setdefault(table.lower(), cluster.name)
        if first != cluster.name:
            problems.append(
                (f"{cluster.name}.sink.table", table, f"a table no other cluster writes ({first} writes {table})")
            )


def select_clusters(clusters: Sequence[ClusterConfig], name: str | None) -> tuple[ClusterConfig, ...]:
    """The clusters a DAG run works on: all of them for an empty ``name``, else the one named.

    A name that is not configured is a cluster of the default Kafka Connection with every topic:
    the DAGs' ``cluster`` param meant exactly that before clusters were configurable, and a test or
    an ad-hoc run can still use it that way.

    >>> [c.name for c in select_clusters(DEFAULT_CLUSTERS, "")]
    ['lagsched_kafka']
    >>> select_clusters(DEFAULT_CLUSTERS, "adhoc")[0].kafka_conn_id
    'lagsched_kafka'
    """
    if not name:
        return tuple(clusters)
    validate_cluster_name(name)
    for c in clusters:
        if c.name == name:
            return (c,)
    return (ClusterConfig(name),)


def managed(cluster: ClusterConfig, topics: Iterable[str]) -> list[str]:
    """The names among ``topics`` that ``cluster`` manages, in their order."""
    return [t for t in topics if cluster.manages(t)]
