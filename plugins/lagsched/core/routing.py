"""Which table a topic's records land in, and how its keys and values are decoded. Pure.

A cluster's ``routes`` (in ``lagsched_clusters``) send topics to tables of their own; a topic no
route matches lands, as before, in the cluster's shared table of raw bytes (``sink.table``)::

    "routes": [
      {"topics": ["orders"], "value_format": "avro"},
      {"topic_pattern": "clicks\\\\..*", "value_format": "json_schema", "namespace": "web"},
      {"topics": ["audit"], "value_format": "json", "table": "audit_log",
       "value_schema": {"type": "object", "properties": {"who": {"type": "string"}}}}
    ]

A route's fields:

* ``topics`` and/or ``topic_pattern`` (RE2, matched in full): the topics it takes; at least one.
  The first route that matches a topic decides (a topic matched by two is the first's).
* ``value_format``, ``key_format``: how the bytes are read: ``raw`` (as they are: the value in a
  ``value`` column, the key in ``key``; the default for both), ``avro`` and ``json_schema``
  (Confluent's wire format: a zero byte, the schema id in 4 bytes, then the datum, its schema
  from the schema registry), ``json`` (plain JSON, read against the route's ``value_schema`` /
  ``key_schema``, a JSON Schema), and for keys also ``string`` (UTF-8 text).
* ``table``: the table's name (``[A-Za-z_][A-Za-z0-9_]*``, up to 128); only for a route of one
  topic (``topics`` of one name, no pattern). Default: the topic's name by `table_for_topic`.
* ``namespace``: the table's namespace; default the cluster's ``sink.namespace``.

Tables are compared without case (as the catalog's database compares names): two topics that would
land in one table, or a routed topic in the cluster's shared table, are refused naming both
(`route_topics`), before anything is written.

Example:
    >>> routes = parse_routes([{"topics": ["orders"], "value_format": "avro"}], "routes")
    >>> routed = route_topics(routes, ["orders", "misc"], namespace="kafka", shared_table="lagsched_kafka")
    >>> routed["orders"].table, routed["orders"].value_format, routed["misc"]
    ('orders', 'avro', None)
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from lagsched.core.completeness import MAX_ALLOWED_LATENESS_S
from lagsched.core.errors import ConfigError
from lagsched.core.patterns import check_pattern, matches, require_list
from lagsched.core.variable_json import short_repr
from lagsched.core.variables import TopicName, VariableModel, config_error, joined

__all__ = [
    "KEY_FORMATS",
    "VALUE_FORMATS",
    "Route",
    "TopicRoute",
    "parse_routes",
    "route_topics",
    "table_for_topic",
]

ValueFormat = Literal["raw", "avro", "json_schema", "json"]
KeyFormat = Literal["raw", "string", "avro", "json_schema", "json"]
VALUE_FORMATS: tuple[str, ...] = ValueFormat.__args__  # type: ignore[attr-defined]
KEY_FORMATS: tuple[str, ...] = KeyFormat.__args__  # type: ignore[attr-defined]
#: The formats whose bytes carry a registry's schema id (Confluent's wire format).
REGISTRY_FORMATS = frozenset({"avro", "json_schema"})
#: An Iceberg identifier part as lagsched writes one (the catalogs' common ground).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_TABLE_CHARS = 128


def table_for_topic(topic: str) -> str:
    """A topic's default table name: lower case, each character outside ``[a-z0-9_]`` an ``_``, a
    ``t_`` before a leading digit, at most 128 characters.

    >>> table_for_topic("Orders.EU-v2"), table_for_topic("2024_events")
    ('orders_eu_v2', 't_2024_events')
    """
    name = re.sub(r"[^a-z0-9_]", "_", topic.lower())
    if not re.match(r"[a-z_]", name):
        name = f"t_{name}"
    return name[:MAX_TABLE_CHARS]


class Route(VariableModel):
    """One entry of a cluster's ``routes`` (the module says what each field means)."""

    topics: tuple[TopicName, ...] = Field(default=(), strict=False)
    topic_pattern: str | None = Field(default=None, min_length=1)
    table: str | None = None
    namespace: str | None = None
    value_format: ValueFormat = "raw"
    key_format: KeyFormat = "raw"
    # JSON Schemas of the ``json`` format, kept as canonical JSON text (a frozen model holds no dict).
    value_schema: str | None = None
    key_schema: str | None = None
    #: Overrides the cluster's ``allowed_lateness_s`` for these topics' tables (docs/completeness.md).
    allowed_lateness_s: int | None = Field(default=None, ge=0, le=MAX_ALLOWED_LATENESS_S)

    _a_list = field_validator("topics", mode="before")(require_list)
    _linear_time = field_validator("topic_pattern")(check_pattern)

    @field_validator("table", "namespace")
    @classmethod
    def _identifier(cls, name: str | None) -> str | None:
        if name is not None and not _IDENTIFIER.fullmatch(name):
            raise ValueError("a name of 1 to 128 characters [A-Za-z0-9_], not starting with a digit")
        return name

    @field_validator("value_schema", "key_schema", mode="before")
    @classmethod
    def _json_schema(cls, schema: Any) -> Any:
        if schema is None:
            return None
        if not isinstance(schema, Mapping) or not schema:
            raise ValueError('a JSON Schema object, e.g. {"type": "object", "properties": {...}}')
        return json.dumps(schema, sort_keys=True, separators=(",", ":"))

    @model_validator(mode="after")
    def _consistent(self) -> Route:
        problems = []
        if not self.topics and self.topic_pattern is None:
            problems.append("topics or topic_pattern: a route takes at least one topic")
        if self.table is not None and (len(self.topics) != 1 or self.topic_pattern is not None):
            problems.append("table: only for a route of exactly one topic (leave it out: each topic gets its own)")
        for part in ("value", "key"):
            fmt, schema = getattr(self, f"{part}_format"), getattr(self, f"{part}_schema")
            if fmt == "json" and schema is None:
                problems.append(f"{part}_schema: the JSON Schema a plain-json {part} is read against")
            if fmt != "json" and schema is not None:
                problems.append(f"{part}_schema: only with {part}_format json ({fmt} takes its schema elsewhere)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def needs_registry(self) -> bool:
        """Whether its keys or values are read through the schema registry (Confluent's wire format)."""
        return bool({self.value_format, self.key_format} & REGISTRY_FORMATS)

    def matches(self, topic: str) -> bool:
        return topic in self.topics or (self.topic_pattern is not None and matches(self.topic_pattern, topic))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, as the Variable writes it (`parse_routes` reads it back)."""
        out: dict[str, Any] = {"topics": list(self.topics)}
        for key in ("topic_pattern", "table", "namespace"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["value_format"], out["key_format"] = self.value_format, self.key_format
        for key in ("value_schema", "key_schema"):
            if getattr(self, key) is not None:
                out[key] = json.loads(getattr(self, key))
        if self.allowed_lateness_s is not None:
            out["allowed_lateness_s"] = self.allowed_lateness_s
        return out


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where one topic's records go and how they are read (a `Route` applied to a topic)."""

    topic: str
    namespace: str
    table: str
    value_format: str
    key_format: str
    value_schema: str | None = None
    key_schema: str | None = None
    allowed_lateness_s: int | None = None

    @property
    def needs_registry(self) -> bool:
        return bool({self.value_format, self.key_format} & REGISTRY_FORMATS)

    @property
    def local_schema_id(self) -> int:
        """The "writer schema id" of values that carry none (``json``, ``raw``): a fingerprint of the
        route's declared schema, so that a changed ``value_schema`` is a new writer schema, decided
        and evolved like a registry's new version (never above 2^31, as a registry's ids; 0: raw).

        >>> a = TopicRoute("t", "n", "t", "json", "raw", value_schema='{"type":"object"}')
        >>> b = TopicRoute("t", "n", "t", "json", "raw", value_schema='{"type":"object","required":["x"]}')
        >>> a.local_schema_id != b.local_schema_id, TopicRoute("t", "n", "t", "raw", "raw").local_schema_id
        (True, 0)
        """
        if self.value_format != "json" or self.value_schema is None:
            return 0
        return zlib.crc32(self.value_schema.encode()) & 0x7FFFFFFF

    @property
    def local_key_schema_id(self) -> int:
        """`local_schema_id` of plain-json keys: a fingerprint of the route's ``key_schema`` (0: none)."""
        if self.key_format != "json" or self.key_schema is None:
            return 0
        return zlib.crc32(self.key_schema.encode()) & 0x7FFFFFFF


def parse_routes(raw: object, path: str, *, label: str = "routes") -> tuple[Route, ...]:
    """A cluster's ``routes`` (a JSON list; None is none) as `Route` s, or one `ConfigError` naming
    every bad entry by its path (``<path>[i].field``); `label` names the Variable in the message."""
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise ConfigError(
            f"invalid {label}: {path} = {short_repr(raw)}: expected a list of routes",
            field=path,
            value=raw,
            allowed="a list",
        )
    routes: list[Route] = []
    errors: list[ConfigError] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            errors.append(
                ConfigError(
                    f"invalid {label}: {path}[{i}] = {short_repr(entry)}: expected a route object",
                    field=f"{path}[{i}]",
                    value=entry,
                    allowed="an object",
                )
            )
            continue
        try:
            routes.append(Route.model_validate(dict(entry)))
        except ValidationError as exc:
            errors.append(config_error(exc, Route, label, prefix=(*path.split("."), str(i))))
    if errors:
        raise joined(errors, label)
    return tuple(routes)


def route_topics(
    routes: Sequence[Route], topics: Iterable[str], *, namespace: str, shared_table: str
) -> dict[str, TopicRoute | None]:
    """Each topic's `TopicRoute` (None: the cluster's shared raw table, in `namespace`).

    Raises:
        ConfigError: two topics would land in one table, or a routed topic in the shared table
            (``shared_table``); the message names every such pair and the fix.
    """
    out: dict[str, TopicRoute | None] = {}
    owner: dict[tuple[str, str], str] = {(namespace.lower(), shared_table.lower()): ""}
    clashes: list[str] = []
    for topic in topics:
        route = next((r for r in routes if r.matches(topic)), None)
        if route is None:
            out[topic] = None
            continue
        found = TopicRoute(
            topic=topic,
            namespace=route.namespace or namespace,
            table=route.table or table_for_topic(topic),
            value_format=route.value_format,
            key_format=route.key_format,
            value_schema=route.value_schema,
            key_schema=route.key_schema,
            allowed_lateness_s=route.allowed_lateness_s,
        )
        key = (found.namespace.lower(), found.table.lower())
        first = owner.setdefault(key, topic)
        if first != topic:
            taken = f"topic {first!r} lands in too" if first else "is the cluster's shared table of raw records"
            clashes.append(f"topic {topic!r} -> {found.namespace}.{found.table}, which {taken}")
        out[topic] = found
    if clashes:
        raise ConfigError(
            "routes: " + "; ".join(clashes) + "; give one of them a table of its own (a route of that one topic with "
            '"table": "...")',
            field="routes",
            value=sorted(out),
            allowed="one table per topic",
        )
    return out
