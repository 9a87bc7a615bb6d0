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
* ``topic_pattern``: a regular expression a topic name must match in full, in RE2's syntax
  (`lagsched.core.patterns` says why). With ``topics`` too, a topic is managed if either says so;
  with neither, every topic is.
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
* ``commit_interval_s``, ``commit_max_records``, ``commit_max_bytes``: the commit cadence of the
  cluster's slots (`lagsched.core.cadence`; docs/lake.md, "The commit cadence"). A slot writes its
  batches' files as records arrive and commits them to the table at most once every
  ``commit_interval_s`` (0 to 3,600 seconds; default 30; 0 commits every batch), sooner once
  ``commit_max_records`` records (default 10,000,000) or ``commit_max_bytes`` bytes of files
  (default 1 GiB) wait; null for no volume bound. Shorter means fresher tables and more snapshots
  (every commit is one, and each makes the next commit's metadata larger until it is expired); the
  lag counts a record until its commit, so keep the scaling thresholds above the records a
  topic receives in one interval.
* ``sink``: the Iceberg table the cluster's records land in (`lagsched.core.lake.LakeTable`):
  ``warehouse`` (``file://``, ``s3a://``, ``hdfs://``; default ``$LAGSCHED_WAREHOUSE``, else
  ``file://$LAGSCHED_HOME/warehouse``; with neither, no default: docs/install.md), ``catalog``
  (default ``lagsched``), ``namespace`` (default ``kafka``), ``table`` (default: the cluster name)
  and ``s3_endpoint`` (an S3-compatible store's URL).
  Two clusters may not name the same table: the table's ranges are keyed by topic and partition,
  so two clusters' topics of one name would collide in it.
* ``routes``: topics that land in typed tables of their own, decoded through the schema registry
  or against a declared JSON Schema (a list; `lagsched.core.routing` has the fields). A topic no
  route matches lands in the shared table above, as raw bytes. The consume DAG passes them to the
  slots (``--routes``), which create the tables on their first records (docs/routing.md).
* ``allowed_lateness_s``: how far a record's CreateTime may trail the table's watermark and still
  be in its hour's announcement (default 300; a route's ``allowed_lateness_s`` overrides it for its
  topic's table; docs/completeness.md).

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

import re2
from pydantic import AfterValidator, Field, ValidationError, field_validator

from lagsched.core.cadence import (
    DEFAULT_COMMIT_INTERVAL_S,
    DEFAULT_COMMIT_MAX_BYTES,
    DEFAULT_COMMIT_MAX_RECORDS,
    CommitCadence,
)
from lagsched.core.completeness import DEFAULT_ALLOWED_LATENESS_S, MAX_ALLOWED_LATENESS_S
from lagsched.core.errors import ConfigError, TopicNameError
from lagsched.core.lake import LakeTable, sink_problems
from lagsched.core.names import validate_cluster_name
from lagsched.core.patterns import check_pattern, matches, require_list
from lagsched.core.routing import Route, TopicRoute, parse_routes, route_topics
from lagsched.core.variable_json import short_repr
from lagsched.core.variables import TopicName, VariableModel, config_error, decode, joined, require_object

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
#: Airflow's rule for a Connection id.
_CONN_ID = re2.compile(r"[A-Za-z0-9_.-]{1,250}")
_NOT_A_FIELD = "name"  # the cluster's key in the Variable, never a field of its body


class ClusterConfig(VariableModel):
    """One configured Kafka cluster: the model of one entry of the Variable (its key is ``name``).

    Attributes:
        name: registry cluster name (``topics.cluster``).
        kafka_conn_id: the Airflow Connection (type ``kafka``) that reaches it.
        topics: topic names to manage; empty with no pattern = every topic.
        topic_pattern: regular expression a managed topic name matches in full, or None.
        max_slots: consumer slots the consume DAG runs at most for this cluster.
        sink: the ``sink`` object (checked by `lagsched.core.lake.sink_problems`) as sorted
            ``(field, value)`` pairs; `sink_settings` as a dict.
        slot_budget_s: seconds one slot runs before it leaves and is started again.
        slot_max_rate: records/s one slot reads at most; None: no cap.
        standby_slots: warm slots kept beyond the need, ready to join on a scale-up.
        commit_interval_s, commit_max_records, commit_max_bytes: the slots' commit cadence (`cadence`).
        routes: topics with tables of their own (`routes_for`); empty: every topic in the shared table.
    """

    name: Annotated[str, AfterValidator(validate_cluster_name)]
    kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID
    # A JSON list (not strict: a tuple is what a frozen model keeps); repeats are kept once.
    topics: tuple[TopicName, ...] = Field(default=(), strict=False)
    topic_pattern: str | None = Field(default=None, min_length=1)
    max_slots: int = Field(default=DEFAULT_MAX_SLOTS, ge=1, le=MAX_SLOTS)
    sink: tuple[tuple[str, str], ...] = Field(default=(), strict=False)
    slot_budget_s: int = Field(default=DEFAULT_SLOT_BUDGET_S, ge=SLOT_BUDGET_RANGE_S[0], le=SLOT_BUDGET_RANGE_S[1])
    slot_max_rate: float | None = Field(default=None, gt=0, le=MAX_SLOT_RATE)
    standby_slots: int = Field(default=0, ge=0, le=MAX_STANDBY_SLOTS)
    commit_interval_s: float = Field(default=DEFAULT_COMMIT_INTERVAL_S, ge=0, le=3600)
    commit_max_records: int | None = Field(default=DEFAULT_COMMIT_MAX_RECORDS, ge=1)
    commit_max_bytes: int | None = Field(default=DEFAULT_COMMIT_MAX_BYTES, ge=1)
    # Checked entry by entry by `parse_routes` (in `_cluster`), so each problem names its route.
    routes: tuple[Route, ...] = Field(default=(), strict=False)
    #: How late a record's CreateTime may be before its hour is announced (docs/completeness.md).
    allowed_lateness_s: int = Field(default=DEFAULT_ALLOWED_LATENESS_S, ge=0, le=MAX_ALLOWED_LATENESS_S)

    @field_validator("kafka_conn_id")
    @classmethod
    def _connection_id(cls, conn_id: str) -> str:
        if not _CONN_ID.fullmatch(conn_id):
            raise ValueError("a Connection id of 1 to 250 characters [A-Za-z0-9_.-]")
        return conn_id

    _a_list = field_validator("topics", mode="before")(require_list)

    @field_validator("topics")
    @classmethod
    def _once_each(cls, topics: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(topics))

    _linear_time = field_validator("topic_pattern")(check_pattern)

    @field_validator("sink", mode="before")
    @classmethod
    def _sink_pairs(cls, sink: Any) -> Any:
        # `parse_clusters` has checked the object (`sink_problems`), field by field.
        if isinstance(sink, Mapping):
            return tuple(sorted((k, v) for k, v in sink.items() if v is not None))
        return sink

    @property
    def cadence(self) -> CommitCadence:
        """When the cluster's slots commit to its table."""
        return CommitCadence(self.commit_interval_s, self.commit_max_records, self.commit_max_bytes)

    def sink_settings(self) -> dict[str, str]:
        """The ``sink`` object (`lagsched.core.lake.LakeTable.of` fills in the defaults)."""
        return dict(self.sink)

    def routes_for(self, topics: Iterable[str]) -> dict[str, TopicRoute | None]:
        """Each topic's table of its own and formats, or None for the shared table (`route_topics`).

        Raises:
            ConfigError: two of `topics` would land in one table.
        """
        lake = LakeTable.of(self.name, self.sink_settings(), default_warehouse="")
        return route_topics(self.routes, topics, namespace=lake.namespace, shared_table=lake.table)

    @property
    def manages_every_topic(self) -> bool:
        return not self.topics and self.topic_pattern is None

    def manages(self, topic: str) -> bool:
        """Whether ``topic`` is one of this cluster's managed topics."""
        if self.manages_every_topic or topic in self.topics:
            return True
        return self.topic_pattern is not None and matches(self.topic_pattern, topic)

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
            "commit_interval_s": self.commit_interval_s,
            "commit_max_records": self.commit_max_records,
            "commit_max_bytes": self.commit_max_bytes,
            "sink": self.sink_settings(),
            "routes": [r.as_dict() for r in self.routes],
            "allowed_lateness_s": self.allowed_lateness_s,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> ClusterConfig:
        """The inverse of `as_dict` (validated like the Variable, so a hand-edited XCom cannot slip by)."""
        name = value.get("name")
        body = {k: v for k, v in value.items() if k != "name"}
        return parse_clusters({str(name): body})[0]


DEFAULT_CLUSTERS: tuple[ClusterConfig, ...] = (ClusterConfig(name=DEFAULT_CLUSTER),)


_Problems = list[tuple[str, object, str]]


def _cluster(name: str, body: object, problems: _Problems, errors: list[ConfigError]) -> ClusterConfig | None:
    """One entry of the Variable as a `ClusterConfig`; None when it has a problem (noted in ``problems``:
    the name, the body's shape, its ``sink``; or in ``errors``: its fields, as the model found them)."""
    try:
        validate_cluster_name(name)
    except TopicNameError:
        problems.append((name, name, "a cluster name of 1 to 255 characters from [a-zA-Z0-9._-]"))
        return None
    if not isinstance(body, Mapping):
        problems.append((name, body, "an object (use {} for the defaults)"))
        return None
    before = len(problems)
    if _NOT_A_FIELD in body:
        problems.append((f"{name}.{_NOT_A_FIELD}", body[_NOT_A_FIELD], "no 'name': a cluster is named by its key"))
    sink = {} if body.get("sink") is None else body["sink"]
    problems.extend(sink_problems(name, sink))
    fields = {k: v for k, v in body.items() if k != _NOT_A_FIELD}
    routes: tuple[Route, ...] = ()
    routes_ok = True
    try:
        routes = parse_routes(body.get("routes"), f"{name}.routes", label=CLUSTERS_VARIABLE)
    except ConfigError as exc:
        errors.append(exc)
        routes_ok = False
    # The other fields are checked whatever the sink's and routes' state, so one run names every problem.
    try:
        sink_ok = len(problems) == before
        cluster = ClusterConfig.model_validate(
            {**fields, "sink": sink if sink_ok else {}, "routes": routes, "name": name}
        )
    except ValidationError as exc:
        errors.append(config_error(exc, ClusterConfig, CLUSTERS_VARIABLE, prefix=(name,)))
        return None
    return cluster if len(problems) == before and routes_ok else None


def parse_clusters(raw: str | bytes | Mapping[str, Any] | None) -> tuple[ClusterConfig, ...]:
    """Validate the ``lagsched_clusters`` Variable; None or blank = `DEFAULT_CLUSTERS`.

    Clusters come back sorted by name, so every reader maps them in the same order.

    Raises:
        ConfigError: the Variable is malformed; the message names every bad field path, the value
            and what is allowed (``field``/``value``/``allowed`` describe the first).
    """
    data = decode(raw, CLUSTERS_VARIABLE)
    if data is None:
        return DEFAULT_CLUSTERS
    keyed = 'an object keyed by cluster name, e.g. {"lagsched_kafka": {}}'
    data = require_object(data, CLUSTERS_VARIABLE, allowed=keyed)
    if not data:
        raise ConfigError(
            f"invalid {CLUSTERS_VARIABLE}: no cluster configured; delete the Variable for the default "
            f"({DEFAULT_CLUSTER}, every topic) or name at least one cluster",
            field="(root)",
            value=data,
            allowed="at least one cluster",
        )
    problems: _Problems = []
    errors: list[ConfigError] = []
    clusters = [_cluster(str(name), body, problems, errors) for name, body in sorted(data.items())]
    chosen = [c for c in clusters if c is not None]
    _check_tables_apart(chosen, problems)
    errors = [
        ConfigError(f"{path} = {short_repr(value)}: expected {allowed}", field=path, value=value, allowed=allowed)
        for path, value, allowed in problems
    ] + errors
    if errors:
        raise joined(errors, CLUSTERS_VARIABLE)
    return tuple(chosen)


def _check_tables_apart(clusters: Sequence[ClusterConfig], problems: _Problems) -> None:
    """No two clusters write one table: its ranges are keyed by topic and partition only. Names are
    compared without case, as the catalog's database compares them.

    Checked: each cluster's shared table, and the tables of the routes that name their topics (a
    pattern's topics are known only once they exist: `ClusterConfig.routes_for` checks them within
    the cluster; two clusters' patterns must not send topics of one name to one namespace).
    """
    writer: dict[str, str] = {}
    for cluster in clusters:
        lake = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse="")
        tables = [(f"{cluster.name}.sink.table", lake.identifier)]
        named = [t for route in cluster.routes for t in route.topics]
        try:
            routed = cluster.routes_for(named)
        except ConfigError as exc:
            problems.append((f"{cluster.name}.routes", named, str(exc).removeprefix("routes: ")))
            continue
        tables += [
            (f"{cluster.name}.routes", f"{lake.catalog}.{found.namespace}.{found.table}")
            for found in routed.values()
            if found is not None
        ]
        for path, table in tables:
            first = writer.setdefault(table.lower(), cluster.name)
            if first != cluster.name:
                problems.append((path, table, f"a table no other cluster writes ({first} writes {table})"))


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
    return (ClusterConfig(name=name),)


def managed(cluster: ClusterConfig, topics: Iterable[str]) -> list[str]:
    """The names among ``topics`` that ``cluster`` manages, in their order."""
    return [t for t in topics if cluster.manages(t)]
